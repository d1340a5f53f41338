#include "chorus/common/file_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/logging.h"

namespace chorus {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string TemporarySiblingPath(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return OkStatus();
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    std::string prefix = dir.substr(0, at);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError("mkdir " + prefix, errno);
    }
  }
  return OkStatus();
}

namespace {

Status WriteAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write " + path, errno);
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  std::string tmp = TemporarySiblingPath(path);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd.valid()) return ErrnoError("create " + tmp, errno);
    Status written = WriteAll(fd.get(), contents.data(), contents.size(), tmp);
    if (written.ok() && ::fsync(fd.get()) != 0) written = ErrnoError("fsync " + tmp, errno);
    if (!written.ok()) {
      ::unlink(tmp.c_str());
      return written;
    }
  }
  CHORUS_RETURN_IF_ERROR(RenameFile(tmp, path));
  return SyncPath(ParentDirectory(path));
}

Status SyncPath(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open " + path, errno);
  if (::fsync(fd.get()) != 0) return ErrnoError("fsync " + path, errno);
  return OkStatus();
}

Status SyncTree(const std::string& dir) {
  // nftw, not std::filesystem: torch's libraries export libstdc++'s filesystem
  // symbols of their own, and a process that loads them may call those.
  static thread_local std::vector<std::string>* directories = nullptr;
  static thread_local Status* failed = nullptr;
  std::vector<std::string> found;
  Status status;
  directories = &found;
  failed = &status;
  const int walked = ::nftw(
      dir.c_str(),
      [](const char* path, const struct stat*, int type, struct FTW*) {
        if (type == FTW_D || type == FTW_DP) {
          directories->push_back(path);
        } else if (type == FTW_F) {
          *failed = SyncPath(path);
          if (!failed->ok()) return 1;
        }
        return 0;  // symbolic links (FTW_SL) are not followed nor synced
      },
      64, FTW_PHYS);
  const int error = errno;
  if (!status.ok()) return status;
  if (walked != 0) return ErrnoError("list " + dir, error);
  // Children before parents: a directory's entries name synced objects.
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    CHORUS_RETURN_IF_ERROR(SyncPath(*it));
  }
  return OkStatus();
}

Status CopyFile(const std::string& from, const std::string& to) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) return ErrnoError("open " + from, errno);
  struct stat st;
  if (::fstat(in.get(), &st) != 0) return ErrnoError("stat " + from, errno);
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 0777));
  if (!out.valid()) return ErrnoError("create " + to, errno);
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(in.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + from, errno);
    if (n == 0) break;
    CHORUS_RETURN_IF_ERROR(WriteAll(out.get(), buffer, static_cast<size_t>(n), to));
  }
  return OkStatus();
}

Status RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    int error = errno;
    ::unlink(from.c_str());
    return ErrnoError("rename " + from + " to " + to, error);
  }
  return OkStatus();
}

Status ExchangePaths(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
    return ErrnoError("exchange " + a + " and " + b, errno);
  }
  return OkStatus();
}

Status RemoveTree(const std::string& path) {
  // Children first (FTW_DEPTH), links themselves (FTW_PHYS); see SyncTree on nftw.
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? OkStatus() : ErrnoError("remove " + path, errno);
  }
  const int walked = ::nftw(
      path.c_str(),
      [](const char* entry, const struct stat*, int type, struct FTW*) {
        return (type == FTW_DP ? ::rmdir(entry) : ::unlink(entry)) == 0 || errno == ENOENT ? 0 : -1;
      },
      64, FTW_DEPTH | FTW_PHYS);
  if (walked != 0) return ErrnoError("remove " + path, errno);
  return OkStatus();
}

StatusOr<ScopedTempDir> ScopedTempDir::Create(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return ErrnoError("mkdtemp " + pattern, errno);
  return ScopedTempDir(std::move(pattern));
}

ScopedTempDir::ScopedTempDir(ScopedTempDir&& other) noexcept
    : path_(std::exchange(other.path_, "")) {}

ScopedTempDir& ScopedTempDir::operator=(ScopedTempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, "");
  }
  return *this;
}

ScopedTempDir::~ScopedTempDir() { Remove(); }

void ScopedTempDir::Remove() {
  if (path_.empty()) return;
  if (Status removed = RemoveTree(path_); !removed.ok()) {
    Log().warn("temporary directory not removed: {}", removed.ToString());
  }
  path_.clear();
}

StatusOr<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open " + path, errno);
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + path, errno);
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  return contents;
}

}  // namespace chorus
