#include "interpreter/libcache/library_cache.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "chorus/common/file_util.h"
#include "interpreter/libcache/elf_editor.h"

namespace chorus {
namespace {

// Bumped whenever the edits change meaning, so old copies are not reused.
constexpr char kFormatVersion[] = "chorus-copy-v2";

// Beside each copy: its format and source identity, one per line.
constexpr char kIdentityFile[] = "source";

// A directory without an identity file is either of an older format or being
// made right now (the file is written first); only the first is removed.
constexpr int64_t kUnfinishedGraceSeconds = 600;

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

// What makes a source file the same file: path, size, mtime and inode.
std::string SourceIdentity(const std::string& source, const struct stat& st) {
  return std::string(kFormatVersion) + "\n" + source + "\n" + std::to_string(st.st_size) + "\n" +
         std::to_string(static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ULL +
                        st.st_mtim.tv_nsec) +
         "\n" + std::to_string(st.st_ino) + "\n";
}

// Whether the copy in `dir` can still be used: its recorded source is
// unchanged. Directories being made right now count as live.
bool IsLiveCopy(const std::string& dir, int64_t now) {
  StatusOr<std::string> recorded = ReadFile(dir + "/" + kIdentityFile);
  if (!recorded.ok()) {
    struct stat st;
    return ::stat(dir.c_str(), &st) == 0 && now - st.st_mtim.tv_sec < kUnfinishedGraceSeconds;
  }
  size_t start = recorded->find('\n');
  size_t end = start == std::string::npos ? start : recorded->find('\n', start + 1);
  if (end == std::string::npos) return false;
  std::string source = recorded->substr(start + 1, end - start - 1);
  struct stat st;
  return ::stat(source.c_str(), &st) == 0 && SourceIdentity(source, st) == *recorded;
}

// Bytes of the regular files directly in `dir`.
uint64_t DirectoryBytes(const std::string& dir) {
  uint64_t bytes = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (dirent* entry = ::readdir(d)) {
    struct stat st;
    if (::stat((dir + "/" + entry->d_name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      bytes += st.st_size;
    }
  }
  ::closedir(d);
  return bytes;
}

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
  const std::string identity = SourceIdentity(source, st);
  Fingerprint key;
  key.Add(identity).Add(static_cast<uint64_t>(slot));
  key.Add(recipe.soname).Add(recipe.rebind_unique_symbols ? 1 : 0);
  for (const auto& [from, to] : recipe.needed) key.Add(from).Add(to);
  for (const auto& [from, to] : recipe.constants) key.Add("constant").Add(from).Add(to);
  for (const auto& [from, to] : recipe.imports) key.Add("import").Add(from).Add(to);

  std::string dir = root_ + "/libs/" + key.Hex();
  std::string path = dir + "/" + Basename(source);
  if (!Exists(path)) {
    CHORUS_RETURN_IF_ERROR(MakeDirectories(dir));
    CHORUS_RETURN_IF_ERROR(WriteFileAtomically(dir + "/" + kIdentityFile, identity));
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

StatusOr<uint64_t> LibraryCache::PruneStale() {
  const std::string libs = root_ + "/libs";
  DIR* d = ::opendir(libs.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return uint64_t{0};
    return ErrnoError("listing " + libs, errno);
  }
  std::vector<std::string> stale;
  const int64_t now = ::time(nullptr);
  while (dirent* entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (!IsLiveCopy(libs + "/" + name, now)) stale.push_back(libs + "/" + name);
  }
  ::closedir(d);
  uint64_t freed = 0;
  for (const std::string& dir : stale) {
    uint64_t bytes = DirectoryBytes(dir);
    CHORUS_RETURN_IF_ERROR(RemoveTree(dir).Annotate("pruning the library cache"));
    freed += bytes;
  }
  return freed;
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
