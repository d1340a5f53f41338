#include "interpreter/libcache/shared_pages.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

// Resident pages of this process mapped from `path`, in pages, by /proc/self/maps ranges.
size_t MappedPagesOf(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return 0;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  size_t bytes = 0;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, file;
    fields >> range >> perms >> offset >> device >> inode >> file;
    if (file != resolved) continue;
    bytes += std::stoull(range.substr(range.find('-') + 1), nullptr, 16) -
             std::stoull(range, nullptr, 16);
  }
  return bytes / static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

std::string Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Eight pages of which the copy changed the fourth: the seven others are
// mapped from the source, the fourth stays the copy's, the bytes read the
// same throughout.
TEST(SharedPagesTest, UnchangedPagesOfAMappedCopyComeFromTheSource) {
  ASSERT_OK_AND_ASSIGN(ScopedTempDir dir, ScopedTempDir::Create("chorus-pages-"));
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::string source_bytes(8 * page, '\0');
  for (size_t i = 0; i < source_bytes.size(); ++i) source_bytes[i] = static_cast<char>(i * 7 % 251);
  std::string copy_bytes = source_bytes;
  copy_bytes[3 * page + 10] ^= 0x5a;  // an edit, as the library cache makes
  const std::string source = Write(dir.path() + "/libsource.so", source_bytes);
  const std::string copy = Write(dir.path() + "/libcopy.so", copy_bytes);
  int fd = open(copy.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* mapped = mmap(nullptr, copy_bytes.size(), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  ASSERT_NE(mapped, MAP_FAILED);
  ASSERT_EQ(MappedPagesOf(copy), 8u);

  ASSERT_OK_AND_ASSIGN(double shared, ShareUnchangedPages(copy, source));
  EXPECT_DOUBLE_EQ(shared, 7.0 * page / (1024.0 * 1024.0));
  EXPECT_EQ(MappedPagesOf(copy), 1u);
  EXPECT_EQ(MappedPagesOf(source), 7u);
  EXPECT_EQ(std::memcmp(mapped, copy_bytes.data(), copy_bytes.size()), 0);
  // Nothing left to share the second time.
  ASSERT_OK_AND_ASSIGN(double again, ShareUnchangedPages(copy, source));
  EXPECT_EQ(again, 0.0);
  munmap(mapped, copy_bytes.size());
}

// A real library's copy, loaded and called: its code now runs from the
// source's pages.
TEST(SharedPagesTest, LoadedLibraryCopyRunsFromItsSourcesPages) {
  ASSERT_OK_AND_ASSIGN(ScopedTempDir dir, ScopedTempDir::Create("chorus-pages-"));
  const std::string source = "/lib/x86_64-linux-gnu/libz.so.1";
  const std::string copy = dir.path() + "/libz-copy.so.1";
  ASSERT_OK(CopyFile(source, copy));
  void* handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  const size_t before = MappedPagesOf(copy);
  ASSERT_OK_AND_ASSIGN(double shared, ShareUnchangedPages(copy, source));
  EXPECT_GT(shared, 0.0);
  EXPECT_LT(MappedPagesOf(copy), before);  // the writable and relocated pages stay
  using Crc32 = unsigned long (*)(unsigned long, const unsigned char*, unsigned);
  auto crc32 = reinterpret_cast<Crc32>(dlsym(handle, "crc32"));
  ASSERT_NE(crc32, nullptr);
  const unsigned char text[] = "chorus";
  EXPECT_EQ(crc32(0, text, 6), 0x39941685ul);
}

TEST(SharedPagesTest, MissingSourceIsAnError) {
  ASSERT_OK_AND_ASSIGN(ScopedTempDir dir, ScopedTempDir::Create("chorus-pages-"));
  const std::string copy = Write(dir.path() + "/libcopy.so", std::string(4096, 'x'));
  EXPECT_FALSE(ShareUnchangedPages(copy, dir.path() + "/missing.so").ok());
}

}  // namespace
}  // namespace chorus
