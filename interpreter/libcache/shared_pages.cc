#include "interpreter/libcache/shared_pages.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace chorus {
namespace {

struct Mapping {
  uintptr_t start = 0, end = 0;
  uint64_t offset = 0;  // of `start` in the file
  int protection = 0;
};

// This process's read-only or executable, not writable, mappings of `path`.
StatusOr<std::vector<Mapping>> ReadOnlyMappingsOf(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  if (!maps) return ErrnoError("reading /proc/self/maps", errno);
  std::vector<Mapping> found;
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, file;
    fields >> range >> perms >> offset >> device >> inode >> file;
    if (file != path || perms.size() < 3 || perms[1] == 'w' || perms[0] != 'r') continue;
    Mapping m;
    m.start = std::stoull(range, nullptr, 16);
    m.end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    m.offset = std::stoull(offset, nullptr, 16);
    m.protection = PROT_READ | (perms[2] == 'x' ? PROT_EXEC : 0);
    found.push_back(m);
  }
  return found;
}

// Remaps [start, start + length) from `fd` at `offset`.
Status Remap(uintptr_t start, size_t length, int protection, int fd, uint64_t offset) {
  void* at = ::mmap(reinterpret_cast<void*>(start), length, protection, MAP_PRIVATE | MAP_FIXED, fd,
                    static_cast<off_t>(offset));
  if (at == MAP_FAILED) return ErrnoError("remapping library pages", errno);
  return OkStatus();
}

// Remaps the runs of pages of `m` equal to `fd`'s (of `size` bytes); adds
// the bytes remapped to `*shared`.
Status ShareMapping(const Mapping& m, int fd, uint64_t size, size_t page, size_t* shared) {
  std::vector<char> bytes(page);
  uintptr_t run_start = 0;  // 0: no run open
  for (uintptr_t at = m.start;; at += page) {
    const uint64_t offset = m.offset + (at - m.start);
    bool same =
        at < m.end && offset + page <= size &&
        ::pread(fd, bytes.data(), page, static_cast<off_t>(offset)) == static_cast<ssize_t>(page) &&
        std::memcmp(bytes.data(), reinterpret_cast<const void*>(at), page) == 0;
    if (same && run_start == 0) run_start = at;
    if (!same && run_start != 0) {
      CHORUS_RETURN_IF_ERROR(
          Remap(run_start, at - run_start, m.protection, fd, m.offset + (run_start - m.start)));
      *shared += at - run_start;
      run_start = 0;
    }
    if (at >= m.end) return OkStatus();
  }
}

}  // namespace

StatusOr<double> ShareUnchangedPages(const std::string& copy, const std::string& source) {
  char resolved[PATH_MAX];
  if (::realpath(copy.c_str(), resolved) == nullptr) return ErrnoError("resolving " + copy, errno);
  CHORUS_ASSIGN_OR_RETURN(std::vector<Mapping> mappings, ReadOnlyMappingsOf(resolved));
  const int fd = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("opening " + source, errno);
  struct stat info {};
  ::fstat(fd, &info);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t shared = 0;
  Status status = OkStatus();
  for (const Mapping& m : mappings) {
    status = ShareMapping(m, fd, static_cast<uint64_t>(info.st_size), page, &shared);
    if (!status.ok()) break;
  }
  ::close(fd);  // the mappings keep the file
  CHORUS_RETURN_IF_ERROR(status);
  return static_cast<double>(shared) / (1024.0 * 1024.0);
}

}  // namespace chorus
