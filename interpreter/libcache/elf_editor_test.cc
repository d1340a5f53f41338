#include "interpreter/libcache/elf_editor.h"

#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"

namespace chorus::elf {
namespace {

// A real system library with a SONAME, NEEDED entries and dynamic symbols.
constexpr char kSystemLibrary[] = "/lib/x86_64-linux-gnu/libz.so.1";

class ElfEditorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(temp_, ScopedTempDir::Create("chorus-elf-"));
    dir_ = temp_.path();
  }
  ScopedTempDir temp_;

  std::string CopyOf(const std::string& source, const std::string& name) {
    std::string path = dir_ + "/" + name;
    EXPECT_TRUE(CopyFile(source, path).ok());
    return path;
  }

  // Compiles a shared object from C++ source with the system compiler.
  std::string Compile(const std::string& name, const std::string& source,
                      const std::string& flags = "") {
    std::string src = dir_ + "/" + name + ".cc", out = dir_ + "/" + name;
    EXPECT_TRUE(WriteFileAtomically(src, source).ok());
    std::string command = "c++ -shared -fPIC -O1 " + flags + " -o " + out + " " + src;
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return out;
  }

  std::string dir_;
};

TEST_F(ElfEditorTest, ReadsSonameAndNeeded) {
  auto editor = ElfEditor::Open(kSystemLibrary, ElfEditor::Mode::kReadOnly);
  ASSERT_TRUE(editor.ok()) << editor.status().ToString();
  EXPECT_EQ((*editor)->Soname(), "libz.so.1");
  std::vector<std::string> needed = (*editor)->Needed();
  ASSERT_FALSE(needed.empty());
  EXPECT_EQ(needed.back(), "libc.so.6");
}

TEST_F(ElfEditorTest, RenamesSonameAndNeededInPlaceAndTheLoaderAgrees) {
  std::string copy = CopyOf(kSystemLibrary, "libz-copy.so");
  const size_t size_before = ReadFile(copy)->size();
  {
    auto editor = ElfEditor::Open(copy);
    ASSERT_TRUE(editor.ok());
    ASSERT_TRUE((*editor)->SetSoname("libz.c7").ok());
    EXPECT_EQ((*editor)->SetSoname("a-name-longer-than-the-old-one.so").code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ((*editor)->ReplaceNeeded("libnothere.so", "x").code(), StatusCode::kNotFound);
    ASSERT_TRUE((*editor)->Sync().ok());
  }
  auto reread = ElfEditor::Open(copy, ElfEditor::Mode::kReadOnly);
  ASSERT_TRUE(reread.ok());
  EXPECT_EQ((*reread)->Soname(), "libz.c7");
  EXPECT_EQ(ReadFile(copy)->size(), size_before);
  // The dynamic loader accepts the edited copy as a distinct object.
  void* handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  EXPECT_NE(dlsym(handle, "zlibVersion"), nullptr);
  dlclose(handle);
}

TEST_F(ElfEditorTest, ReadOnlyModeNeverWritesTheFile) {
  std::string copy = CopyOf(kSystemLibrary, "libz-ro.so");
  {
    auto editor = ElfEditor::Open(copy, ElfEditor::Mode::kReadOnly);
    ASSERT_TRUE(editor.ok());
    ASSERT_TRUE((*editor)->SetSoname("libz.x").ok());  // private view only
  }
  auto reread = ElfEditor::Open(copy, ElfEditor::Mode::kReadOnly);
  EXPECT_EQ((*reread)->Soname(), "libz.so.1");
}

TEST_F(ElfEditorTest, RebindsGnuUniqueSymbols) {
  // An inline function's static is STB_GNU_UNIQUE under GCC.
  std::string lib = Compile("libunique.so", R"(
inline int& Counter() { static int counter = 0; return counter; }
int Bump() { return ++Counter(); }
)");
  auto editor = ElfEditor::Open(lib);
  ASSERT_TRUE(editor.ok());
  std::vector<std::string> unique = (*editor)->UniqueSymbols();
  ASSERT_FALSE(unique.empty());
  EXPECT_NE(unique.front().find("Counter"), std::string::npos);
  EXPECT_EQ((*editor)->RebindUniqueAsGlobal(), static_cast<int>(unique.size()));
  EXPECT_TRUE((*editor)->UniqueSymbols().empty());
}

// Two copies of a library with a GNU_UNIQUE static share it unless rebound.
TEST_F(ElfEditorTest, RebindingGivesEachLoadedCopyItsOwnStatics) {
  std::string lib = Compile("libcounter.so", R"(
inline int& Counter() { static int counter = 0; return counter; }
extern "C" int Bump() { return ++Counter(); }
)");
  auto bump_twice = [&](const std::string& a, const std::string& b) {
    void* first = dlopen(a.c_str(), RTLD_NOW | RTLD_LOCAL);
    void* second = dlopen(b.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(first, nullptr);
    EXPECT_NE(second, nullptr);
    auto bump1 = reinterpret_cast<int (*)()>(dlsym(first, "Bump"));
    auto bump2 = reinterpret_cast<int (*)()>(dlsym(second, "Bump"));
    bump1();
    return bump2();  // 2 if the counter is shared, 1 if not
  };
  EXPECT_EQ(bump_twice(CopyOf(lib, "shared1.so"), CopyOf(lib, "shared2.so")), 2);
  std::string own1 = CopyOf(lib, "own1.so"), own2 = CopyOf(lib, "own2.so");
  for (const std::string& path : {own1, own2}) {
    auto editor = ElfEditor::Open(path);
    ASSERT_TRUE(editor.ok());
    (*editor)->RebindUniqueAsGlobal();
  }
  EXPECT_EQ(bump_twice(own1, own2), 1);
}

TEST_F(ElfEditorTest, ReadsTheSearchPath) {
  std::string runpath = Compile("librunpath.so", "int f() { return 1; }",
                                "-Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN/../lib:/opt/x'");
  std::string rpath =
      Compile("librpath.so", "int f() { return 1; }", "-Wl,--disable-new-dtags -Wl,-rpath,/opt/y");
  EXPECT_EQ((*ElfEditor::Open(runpath, ElfEditor::Mode::kReadOnly))->SearchPath(),
            "$ORIGIN/../lib:/opt/x");
  EXPECT_EQ((*ElfEditor::Open(rpath, ElfEditor::Mode::kReadOnly))->SearchPath(), "/opt/y");
  EXPECT_EQ((*ElfEditor::Open(kSystemLibrary, ElfEditor::Mode::kReadOnly))->SearchPath(), "");
}

TEST_F(ElfEditorTest, ReplacesAWholeStringConstantAndTheCodeSeesIt) {
  std::string lib = Compile("libkey.so", R"(
    extern "C" const char* Key() { return "RegistryKey"; }
    extern "C" const char* Longer() { return "NotRegistryKey!"; })");
  auto editor = ElfEditor::Open(lib);
  ASSERT_TRUE(editor.ok()) << editor.status().ToString();
  EXPECT_EQ((*editor)->ReplaceConstantString("RegistryKey", "RegistryKe7").code(), StatusCode::kOk);
  EXPECT_EQ((*editor)->ReplaceConstantString("RegistryKey", "x").code(), StatusCode::kNotFound);
  EXPECT_EQ((*editor)->ReplaceConstantString("NotRegistryKey!", "NotRegistryKey!!").code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE((*editor)->Sync().ok());
  editor->reset();
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto key = reinterpret_cast<const char* (*)()>(dlsym(handle, "Key"));
  auto longer = reinterpret_cast<const char* (*)()>(dlsym(handle, "Longer"));
  EXPECT_STREQ(key(), "RegistryKe7");
  EXPECT_STREQ(longer(), "NotRegistryKey!");  // a string that merely contains it is untouched
  dlclose(handle);
}

TEST_F(ElfEditorTest, ScopeObjectLoadsItsNeededInOrder) {
  std::string provider = Compile("libprovider.so", "extern \"C\" int Answer() { return 42; }");
  std::string scope = dir_ + "/scope.so";
  ASSERT_TRUE(WriteScopeObject(scope, {provider}).ok());
  auto editor = ElfEditor::Open(scope, ElfEditor::Mode::kReadOnly);
  ASSERT_TRUE(editor.ok()) << editor.status().ToString();
  EXPECT_EQ((*editor)->Needed(), std::vector<std::string>{provider});
  void* handle = dlopen(scope.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto answer = reinterpret_cast<int (*)()>(dlsym(handle, "Answer"));
  ASSERT_NE(answer, nullptr);
  EXPECT_EQ(answer(), 42);
  dlclose(handle);
}

// The point of a scope object: an object with undefined symbols (like a C
// extension's Py* references) binds them to what the scope lists before it.
TEST_F(ElfEditorTest, ScopeObjectBindsUndefinedSymbolsOfLaterEntries) {
  std::string provider_a = Compile("liba.so", "extern \"C\" int Source() { return 1; }");
  std::string provider_b = Compile("libb.so", "extern \"C\" int Source() { return 2; }");
  std::string consumer_src =
      "extern \"C\" int Source(); extern \"C\" int Read() { return Source(); }";
  std::string consumer_a = Compile("libconsumer_a.so", consumer_src);
  std::string consumer_b = CopyOf(consumer_a, "libconsumer_b.so");
  std::string scope_a = dir_ + "/scope_a.so", scope_b = dir_ + "/scope_b.so";
  ASSERT_TRUE(WriteScopeObject(scope_a, {provider_a, consumer_a}).ok());
  ASSERT_TRUE(WriteScopeObject(scope_b, {provider_b, consumer_b}).ok());
  void* a = dlopen(scope_a.c_str(), RTLD_NOW | RTLD_LOCAL);
  void* b = dlopen(scope_b.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(a, nullptr) << dlerror();
  ASSERT_NE(b, nullptr) << dlerror();
  EXPECT_EQ(reinterpret_cast<int (*)()>(dlsym(a, "Read"))(), 1);
  EXPECT_EQ(reinterpret_cast<int (*)()>(dlsym(b, "Read"))(), 2);
}

TEST_F(ElfEditorTest, RejectsWhatIsNotAnElfSharedObject) {
  std::string text = dir_ + "/text.so";
  ASSERT_TRUE(WriteFileAtomically(text, "definitely not ELF").ok());
  EXPECT_EQ(ElfEditor::Open(text).status().code(), StatusCode::kInvalidArgument);
  std::string empty = dir_ + "/empty.so";
  ASSERT_TRUE(WriteFileAtomically(empty, "").ok());
  EXPECT_FALSE(ElfEditor::Open(empty).ok());
  // Truncated: a valid header whose program headers lie past the end.
  std::string truncated = dir_ + "/truncated.so";
  std::string head = *ReadFile(kSystemLibrary);
  ASSERT_TRUE(WriteFileAtomically(truncated, head.substr(0, sizeof(Elf64_Ehdr) + 8)).ok());
  EXPECT_EQ(ElfEditor::Open(truncated).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ElfEditor::Open(dir_ + "/missing.so").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace chorus::elf
