// Small POSIX file helpers shared by chorus components.
#ifndef CHORUS_COMMON_FILE_UTIL_H_
#define CHORUS_COMMON_FILE_UTIL_H_

#include <string>
#include <string_view>
#include <utility>

#include "chorus/common/status.h"

namespace chorus {

// Owns a file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  bool valid() const { return fd_ >= 0; }
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// A path next to `path`, unique to this process and call, for building a file
// before renaming it into place.
std::string TemporarySiblingPath(const std::string& path);

// Creates `dir` and its parents (mode 0755); OK if it exists.
Status MakeDirectories(const std::string& dir);

// Writes `contents` to `path` atomically: readers see the old file or the whole
// new one, never a part. Safe when several processes write the same path.
// Durable when it returns OK: the file's data and its directory entry are
// flushed to the disk (a power loss then leaves the new file).
Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Flushes `path` (a file, or a directory's entries) to the disk (fsync).
Status SyncPath(const std::string& path);

// SyncPath on every file under `dir`, then on `dir` and each directory under
// it: what was written there survives a power loss.
Status SyncTree(const std::string& dir);

// Copies `from` to a new file `to` (which must not exist), preserving the mode.
Status CopyFile(const std::string& from, const std::string& to);

// Renames `from` over `to` atomically.
Status RenameFile(const std::string& from, const std::string& to);

// Swaps the names of two existing paths (files or directories) atomically
// (Linux renameat2 RENAME_EXCHANGE): replacing a non-empty directory with no
// moment where neither exists.
Status ExchangePaths(const std::string& a, const std::string& b);

// Removes `path` and, when it is a directory, everything under it; OK if it
// does not exist. Symbolic links are removed, never followed.
Status RemoveTree(const std::string& path);

// Reads a whole file.
StatusOr<std::string> ReadFile(const std::string& path);

// A new empty directory, $TMPDIR (or /tmp) /<prefix>XXXXXX, removed with
// everything in it when the object is destroyed. Move-only; a default-built
// or moved-from one owns nothing.
class ScopedTempDir {
 public:
  // INTERNAL (with errno's reason) if the directory cannot be made.
  static StatusOr<ScopedTempDir> Create(const std::string& prefix);

  ScopedTempDir() = default;
  ScopedTempDir(ScopedTempDir&& other) noexcept;
  ScopedTempDir& operator=(ScopedTempDir&& other) noexcept;
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  ~ScopedTempDir();

  // The directory; empty when this owns none.
  const std::string& path() const { return path_; }

 private:
  explicit ScopedTempDir(std::string path) : path_(std::move(path)) {}
  void Remove();
  std::string path_;
};

}  // namespace chorus

#endif  // CHORUS_COMMON_FILE_UTIL_H_
