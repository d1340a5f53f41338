#include "interpreter/libcache/library_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "chorus/common/file_util.h"
#include "interpreter/libcache/elf_editor.h"

namespace chorus {
namespace {

// Bumped whenever the edits change meaning, so old copies are not reused.
constexpr char kFormatVersion[] = "chorus-copy-v1";

// 64-bit FNV-1a: stable across builds and platforms (std::hash is not).
class Fingerprint {
 public:
  Fingerprint& Add(const std::string& text) {
    for (unsigned char c : text) hash_ = (hash_ ^ c) * 0x100000001b3ULL;
    hash_ = (hash_ ^ 0xff) * 0x100000001b3ULL;  // separator
    return *this;
  }
  Fingerprint& Add(uint64_t number) { return Add(std::to_string(number)); }
  std::string Hex() const {
    char text[17];
    std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash_));
    return text;
  }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

StatusOr<std::vector<std::string>> ReadNeeded(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(auto editor, elf::ElfEditor::Open(path));
  return editor->Needed();
}

Status ApplyRecipe(const std::string& path, const CopyRecipe& recipe) {
  CHORUS_ASSIGN_OR_RETURN(auto editor, elf::ElfEditor::Open(path));
  if (!recipe.soname.empty()) CHORUS_RETURN_IF_ERROR(editor->SetSoname(recipe.soname));
  for (const std::string& needed : editor->Needed()) {
    auto rename = recipe.needed.find(needed);
    if (rename != recipe.needed.end()) {
      CHORUS_RETURN_IF_ERROR(editor->ReplaceNeeded(rename->first, rename->second));
    }
  }
  if (recipe.rebind_unique_symbols) editor->RebindUniqueAsGlobal();
  for (const auto& [from, to] : recipe.constants) {
    CHORUS_RETURN_IF_ERROR(editor->ReplaceConstantString(from, to));
  }
  for (const auto& [from, to] : recipe.imports) {
    Status renamed = editor->RenameUndefinedSymbol(from, to);
    if (!renamed.ok() && renamed.code() != StatusCode::kNotFound) return renamed;
  }
  return editor->Sync();
}

}  // namespace

LibraryCache::LibraryCache(std::string root) : root_(std::move(root)) {}

std::string LibraryCache::DefaultRoot() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/chorus";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "/tmp") + "/.cache/chorus";
}

StatusOr<PreparedCopy> LibraryCache::Prepare(const std::string& source, int slot,
                                             const CopyRecipe& recipe) {
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) return ErrnoError("stat " + source, errno);
  Fingerprint key;
  key.Add(kFormatVersion).Add(source).Add(static_cast<uint64_t>(st.st_size));
  key.Add(static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ULL + st.st_mtim.tv_nsec);
  key.Add(static_cast<uint64_t>(st.st_ino)).Add(static_cast<uint64_t>(slot));
  key.Add(recipe.soname).Add(recipe.rebind_unique_symbols ? 1 : 0);
  for (const auto& [from, to] : recipe.needed) key.Add(from).Add(to);
  for (const auto& [from, to] : recipe.constants) key.Add("constant").Add(from).Add(to);
  for (const auto& [from, to] : recipe.imports) key.Add("import").Add(from).Add(to);

  std::string dir = root_ + "/libs/" + key.Hex();
  std::string path = dir + "/" + Basename(source);
  if (!Exists(path)) {
    CHORUS_RETURN_IF_ERROR(MakeDirectories(dir));
    std::string tmp = TemporarySiblingPath(path);
    Status made = CopyFile(source, tmp);
    if (made.ok()) made = ApplyRecipe(tmp, recipe);
    if (made.ok()) made = RenameFile(tmp, path);
    if (!made.ok()) {
      ::unlink(tmp.c_str());
      return made.Annotate("preparing a copy of " + source);
    }
  }
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> needed, ReadNeeded(path));
  return PreparedCopy{path, std::move(needed)};
}

StatusOr<std::string> LibraryCache::PrepareScope(const std::vector<std::string>& paths) {
  Fingerprint key;
  key.Add(kFormatVersion);
  for (const std::string& path : paths) key.Add(path);
  std::string dir = root_ + "/scopes";
  std::string path = dir + "/" + key.Hex() + ".so";
  if (!Exists(path)) {
    CHORUS_RETURN_IF_ERROR(MakeDirectories(dir));
    CHORUS_RETURN_IF_ERROR(elf::WriteScopeObject(path, paths));
  }
  return path;
}

StatusOr<std::string> SlotSoname(const std::string& soname, int slot) {
  size_t so = soname.find(".so");
  if (so == std::string::npos) return InvalidArgumentError("not a shared-object name: " + soname);
  const std::string suffix = ".c" + std::to_string(slot);
  // "libfoo.so.1.2" -> "libfoo.so.c3", or "libfoo.c3", or a shorter stem
  // ("libfo.c10") when nothing else fits.
  for (const std::string& name :
       {soname.substr(0, so + 3) + suffix, soname.substr(0, so) + suffix}) {
    if (name.size() <= soname.size()) return name;
  }
  if (so > suffix.size() && soname.size() - suffix.size() >= 4) {
    return soname.substr(0, std::min(so, soname.size() - suffix.size())) + suffix;
  }
  return InvalidArgumentError("SONAME too short to rename in place for slot " +
                              std::to_string(slot) + ": " + soname);
}

}  // namespace chorus
