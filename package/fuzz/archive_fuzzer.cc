// libFuzzer target: arbitrary bytes as an archive. Open() must return an
// error or a valid Archive, never crash, hang or leak; a valid one must then
// serve every record and check its sha256s without misbehaving.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "chorus/package/archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Archives are files; a memfd gives the bytes a path without touching disk.
  int fd = memfd_create("chorus-fuzz-archive", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto archive = chorus::Archive::Open(path);
  if (archive.ok()) {
    for (const chorus::ArchiveRecord& record : (*archive)->records()) {
      auto bytes = (*archive)->Read(record.name);
      if (bytes.ok() && bytes->size != record.size) __builtin_trap();
    }
    (void)(*archive)->VerifySha256();
  }
  close(fd);
  return 0;
}
