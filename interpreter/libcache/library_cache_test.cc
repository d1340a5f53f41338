#include "interpreter/libcache/library_cache.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"
#include "interpreter/libcache/elf_editor.h"

namespace chorus {
namespace {

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

class LibraryCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(temp_, ScopedTempDir::Create("chorus-cache-"));
    dir_ = temp_.path();
    source_ = dir_ + "/libsource.so.1.13";
    ASSERT_TRUE(CopyFile("/lib/x86_64-linux-gnu/libz.so.1", source_).ok());
  }
  ScopedTempDir temp_;

  CopyRecipe Recipe(int slot) {
    CopyRecipe recipe;
    recipe.soname = *SlotSoname("libz.so.1", slot);
    recipe.needed["libc.so.6"] = "libc.so.6";  // a no-op rename exercises the path
    return recipe;
  }

  int CountFiles(const std::string& dir, const std::string& containing) {
    int count = 0;
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return 0;
    while (dirent* entry = readdir(d)) {
      std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (entry->d_type == DT_DIR) {
        count += CountFiles(dir + "/" + name, containing);
      } else if (name.find(containing) != std::string::npos) {
        ++count;
      }
    }
    closedir(d);
    return count;
  }

  std::string dir_;
  std::string source_;
};

TEST(SlotSonameTest, UniquePerSlotAndNeverLonger) {
  EXPECT_EQ(*SlotSoname("libtorch_python.so.1.13", 3), "libtorch_python.so.c3");
  EXPECT_EQ(*SlotSoname("libpython3.11.so.1.0", 12), "libpython3.11.so.c12");
  // No room for ".so.c7": the ".so" goes.
  EXPECT_EQ(*SlotSoname("libz.so.1", 7), "libz.c7");
  EXPECT_EQ(*SlotSoname("libz.so", 7), "libz.c7");
  EXPECT_EQ(SlotSoname("libz.so", 123456).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SlotSoname("not-a-library", 1).status().code(), StatusCode::kInvalidArgument);
  // The pip wheel's library has no version: from slot 10 on, the stem shrinks.
  EXPECT_EQ(*SlotSoname("libtorch_python.so", 9), "libtorch_python.c9");
  EXPECT_EQ(*SlotSoname("libtorch_python.so", 10), "libtorch_pytho.c10");
  for (const char* soname :
       {"libtorch_python.so.1.13", "libpython3.11.so.1.0", "libtorch_python.so"}) {
    for (int slot : {0, 9, 10, 15, 99, 100, 999, 4095}) {
      auto renamed = SlotSoname(soname, slot);
      ASSERT_TRUE(renamed.ok()) << soname << " " << slot;
      EXPECT_LE(renamed->size(), std::string(soname).size());
      EXPECT_NE(*renamed, soname);
    }
  }
}

TEST_F(LibraryCacheTest, PreparesEditedCopyOncePerSlot) {
  LibraryCache cache(dir_ + "/cache");
  auto slot0 = cache.Prepare(source_, 0, Recipe(0));
  ASSERT_TRUE(slot0.ok()) << slot0.status().ToString();
  auto slot1 = cache.Prepare(source_, 1, Recipe(1));
  ASSERT_TRUE(slot1.ok());
  EXPECT_NE(slot0->path, slot1->path);
  auto editor = elf::ElfEditor::Open(slot1->path, elf::ElfEditor::Mode::kReadOnly);
  EXPECT_EQ((*editor)->Soname(), "libz.c1");
  EXPECT_EQ(slot1->needed, (*editor)->Needed());

  // Reused, not rebuilt: the same inode comes back.
  struct stat before, after;
  ASSERT_EQ(stat(slot0->path.c_str(), &before), 0);
  auto again = cache.Prepare(source_, 0, Recipe(0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->path, slot0->path);
  ASSERT_EQ(stat(again->path.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(CountFiles(dir_ + "/cache", ".tmp-"), 0);
}

TEST_F(LibraryCacheTest, ChangedSourceGetsAFreshCopy) {
  LibraryCache cache(dir_ + "/cache");
  auto first = cache.Prepare(source_, 0, Recipe(0));
  ASSERT_TRUE(first.ok());
  // Replace the source (new inode, new mtime), as a package upgrade would.
  ASSERT_EQ(
      std::system(
          ("cp " + source_ + " " + source_ + ".new && mv " + source_ + ".new " + source_).c_str()),
      0);
  auto second = cache.Prepare(source_, 0, Recipe(0));
  ASSERT_TRUE(second.ok());
  EXPECT_NE(first->path, second->path);
}

// Copies that can never be used again go; live ones stay, bytes are counted.
TEST_F(LibraryCacheTest, PruneRemovesOnlyCopiesOfChangedOrMissingSources) {
  LibraryCache cache(dir_ + "/cache");
  EXPECT_EQ(*cache.PruneStale(), 0u);  // no libs/ yet
  ASSERT_OK_AND_ASSIGN(PreparedCopy old_copy, cache.Prepare(source_, 0, Recipe(0)));
  ASSERT_OK_AND_ASSIGN(PreparedCopy other_slot, cache.Prepare(source_, 1, Recipe(1)));
  struct stat copied;
  ASSERT_EQ(stat(old_copy.path.c_str(), &copied), 0);
  EXPECT_EQ(*cache.PruneStale(), 0u);
  EXPECT_TRUE(FileExists(old_copy.path));

  // An upgrade replaces the source: both old copies are stale.
  ASSERT_EQ(
      std::system(
          ("cp " + source_ + " " + source_ + ".new && mv " + source_ + ".new " + source_).c_str()),
      0);
  ASSERT_OK_AND_ASSIGN(PreparedCopy new_copy, cache.Prepare(source_, 0, Recipe(0)));
  ASSERT_OK_AND_ASSIGN(uint64_t freed, cache.PruneStale());
  EXPECT_GE(freed, 2 * static_cast<uint64_t>(copied.st_size));
  EXPECT_FALSE(FileExists(old_copy.path));
  EXPECT_FALSE(FileExists(other_slot.path));
  EXPECT_TRUE(FileExists(new_copy.path));

  // A copy of an older format (no identity file) goes once it is not new.
  const std::string legacy = dir_ + "/cache/libs/0123456789abcdef";
  ASSERT_EQ(std::system(("mkdir -p " + legacy + " && cp " + source_ + " " + legacy +
                         " && touch -d '-1 hour' " + legacy)
                            .c_str()),
            0);
  const std::string fresh = dir_ + "/cache/libs/fedcba9876543210";  // being made now
  ASSERT_EQ(std::system(("mkdir -p " + fresh).c_str()), 0);
  EXPECT_GE(*cache.PruneStale(), static_cast<uint64_t>(copied.st_size));
  EXPECT_FALSE(FileExists(legacy));
  EXPECT_TRUE(FileExists(fresh));

  // The source is deleted (a removed venv): its copy goes too.
  ASSERT_EQ(unlink(source_.c_str()), 0);
  EXPECT_GT(*cache.PruneStale(), 0u);
  EXPECT_FALSE(FileExists(new_copy.path));
}

TEST_F(LibraryCacheTest, DifferentRecipesDoNotShareACopy) {
  LibraryCache cache(dir_ + "/cache");
  CopyRecipe plain;
  auto a = cache.Prepare(source_, 0, plain);
  auto b = cache.Prepare(source_, 0, Recipe(0));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->path, b->path);
}

TEST_F(LibraryCacheTest, FailedEditLeavesNothingBehind) {
  LibraryCache cache(dir_ + "/cache");
  CopyRecipe too_long;
  too_long.soname = "a-soname-much-longer-than-libz.so.1";
  auto result = cache.Prepare(source_, 0, too_long);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("only in-place edits"), std::string::npos)
      << result.status().message();
  EXPECT_EQ(CountFiles(dir_ + "/cache", ".so"), 0);
  EXPECT_EQ(cache.Prepare(dir_ + "/missing.so", 0, {}).status().code(), StatusCode::kNotFound);
}

// Several processes preparing the same cache at once all get a complete,
// loadable copy, and no temporary file survives.
TEST_F(LibraryCacheTest, ConcurrentProcessesPrepareSafely) {
  const std::string root = dir_ + "/cache";
  std::vector<pid_t> children;
  for (int child = 0; child < 4; ++child) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      LibraryCache cache(root);
      for (int slot = 0; slot < 8; ++slot) {
        auto copy = cache.Prepare(source_, slot, Recipe(slot));
        if (!copy.ok()) _exit(1);
        auto scope = cache.PrepareScope({copy->path});
        if (!scope.ok()) _exit(2);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  LibraryCache cache(root);
  for (int slot = 0; slot < 8; ++slot) {
    auto copy = cache.Prepare(source_, slot, Recipe(slot));
    ASSERT_TRUE(copy.ok());
    auto editor = elf::ElfEditor::Open(copy->path, elf::ElfEditor::Mode::kReadOnly);
    ASSERT_TRUE(editor.ok());
    EXPECT_EQ((*editor)->Soname(), *SlotSoname("libz.so.1", slot));
  }
  EXPECT_EQ(CountFiles(root, ".tmp-"), 0);
  EXPECT_EQ(CountFiles(root + "/scopes", ".so"), 8);
}

TEST(LibraryCacheRootTest, FollowsXdgCacheHome) {
  setenv("XDG_CACHE_HOME", "/var/tmp/xdg", 1);
  EXPECT_EQ(LibraryCache::DefaultRoot(), "/var/tmp/xdg/chorus");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(LibraryCache::DefaultRoot(), "/home/someone/.cache/chorus");
}

}  // namespace
}  // namespace chorus
