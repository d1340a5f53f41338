#include "chorus/common/process_stats.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

TEST(ProcessStatsTest, ResidentMemoryGrowsWithTouchedPages) {
  ASSERT_OK_AND_ASSIGN(double before, ResidentMiB());
  EXPECT_GT(before, 0.0);
  constexpr size_t kBytes = 64 << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // resident only once touched
  ASSERT_OK_AND_ASSIGN(double after, ResidentMiB());
  EXPECT_GE(after - before, 60.0) << before << " -> " << after;
  ASSERT_OK_AND_ASSIGN(double peak, PeakResidentMiB());
  EXPECT_GE(peak, after);
  EXPECT_EQ(block[kBytes - 1], 1);
}

TEST(ProcessStatsTest, AnotherProcessAndAMissingOne) {
  ASSERT_OK_AND_ASSIGN(double self, ResidentMiB(getpid()));
  EXPECT_GT(self, 0.0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: the pid names no process now
  EXPECT_THAT(ResidentMiB(child), StatusIs(StatusCode::kNotFound));
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHORUS_OWN_ALLOCATOR 1  // AddressSanitizer's malloc, which malloc_trim does not trim
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CHORUS_OWN_ALLOCATOR 1
#endif

// Frees most of a fragmented heap on another thread (its own glibc arena): the
// freed pages stay resident until the releaser notices the quiet.
// A read-only private mapping of a 32 MiB file (a library's text, say), every
// page read once: resident until paged out, the same bytes after.
class MappedFile {
 public:
  static constexpr size_t kBytes = 32 << 20;
  explicit MappedFile(const std::string& path) : path_(path) {
    std::string contents(kBytes, '\0');
    for (size_t i = 0; i < kBytes; ++i) contents[i] = static_cast<char>(i * 7 + i / 4096);
    EXPECT_OK(WriteFileAtomically(path, contents));
    const int fd = ::open(path.c_str(), O_RDONLY);
    data_ = static_cast<const char*>(::mmap(nullptr, kBytes, PROT_READ, MAP_PRIVATE, fd, 0));
    ::close(fd);
  }
  ~MappedFile() { ::munmap(const_cast<char*>(data_), kBytes); }
  uint64_t Checksum() const {
    uint64_t sum = 0;
    for (size_t i = 0; i < kBytes; i += 512) sum = sum * 31 + static_cast<unsigned char>(data_[i]);
    return sum;
  }
  bool Is(std::string_view path) const { return path == path_; }

 private:
  std::string path_;
  const char* data_ = nullptr;
};

TEST(ProcessStatsTest, PagingOutMappedFilesKeepsTheirContents) {
  ASSERT_OK_AND_ASSIGN(ScopedTempDir dir, ScopedTempDir::Create("chorus-pageout-"));
  MappedFile file(dir.path() + "/library.so");
  const uint64_t checksum = file.Checksum();  // every page read: resident
  ASSERT_OK_AND_ASSIGN(double others, PageOutMappedFiles([](std::string_view) { return false; }));
  EXPECT_EQ(others, 0.0);
  ASSERT_OK_AND_ASSIGN(double resident, ResidentMiB());
  StatusOr<double> released =
      PageOutMappedFiles([&](std::string_view path) { return file.Is(path); });
  if (released.status().code() == StatusCode::kUnimplemented) {
    GTEST_SKIP() << released.status().ToString();
  }
  ASSERT_OK(released);
  EXPECT_GE(*released, 28.0);
  ASSERT_OK_AND_ASSIGN(double after, ResidentMiB());
  EXPECT_GE(resident - after, 28.0) << resident << " -> " << after;
  EXPECT_EQ(file.Checksum(), checksum);  // read back from the file
}

// Up to 10 s.
void WaitForARelease(const IdleMemoryReleaser& releaser) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (releaser.releases() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(ProcessStatsTest, IdleMemoryReleaserPagesOutWhatItIsGiven) {
  ASSERT_OK_AND_ASSIGN(ScopedTempDir dir, ScopedTempDir::Create("chorus-pageout-"));
  MappedFile file(dir.path() + "/library.so");
  const uint64_t checksum = file.Checksum();
  ASSERT_OK_AND_ASSIGN(double resident, ResidentMiB());
  IdleMemoryReleaser releaser(std::chrono::milliseconds(100),
                              [&](std::string_view path) { return file.Is(path); });
  NoteMemoryActivity();
  WaitForARelease(releaser);
  ASSERT_EQ(releaser.releases(), 1);
  ASSERT_OK_AND_ASSIGN(double after, ResidentMiB());
  EXPECT_GE(resident - after, 28.0) << resident << " -> " << after;
  // Read again (as if another process had kept them mapped): paged out again
  // within 10 quiet periods, with no new activity.
  EXPECT_EQ(file.Checksum(), checksum);
  ASSERT_OK_AND_ASSIGN(double read_again, ResidentMiB());
  EXPECT_GE(read_again - after, 28.0) << after << " -> " << read_again;
  double now = read_again;
  const auto again = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (read_again - now < 28.0 && std::chrono::steady_clock::now() < again) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    now = ResidentMiB().value();
  }
  EXPECT_GE(read_again - now, 28.0) << read_again << " -> " << now;
  EXPECT_EQ(releaser.releases(), 1);
}

TEST(ProcessStatsTest, IdleMemoryReleaserReturnsAQuietHeapOnce) {
#ifdef CHORUS_OWN_ALLOCATOR
  GTEST_SKIP() << "the sanitizer's allocator keeps its own pages";
#endif
  IdleMemoryReleaser releaser(std::chrono::milliseconds(100));
  std::vector<char*> kept;
  double after_free = 0;
  std::thread worker([&] {
    std::vector<char*> blocks;
    for (int i = 0; i < 2048; ++i) {  // 96 MiB in 48 KiB blocks, under mmap's threshold
      blocks.push_back(static_cast<char*>(std::malloc(48 << 10)));
      std::memset(blocks.back(), 1, 48 << 10);
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      // Every 64th stays: no free stretch reaches the arena's top to be trimmed by free().
      if (i % 64 == 63) {
        kept.push_back(blocks[i]);
      } else {
        std::free(blocks[i]);
      }
    }
    after_free = ResidentMiB().value();
    NoteMemoryActivity();
  });
  worker.join();
  WaitForARelease(releaser);
  ASSERT_EQ(releaser.releases(), 1);
  ASSERT_OK_AND_ASSIGN(double released, ResidentMiB());
  EXPECT_GE(after_free - released, 60.0) << after_free << " -> " << released;
  // Quiet with no new activity: it does not release again.
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_EQ(releaser.releases(), 1);
  for (char* block : kept) std::free(block);
}

}  // namespace
}  // namespace chorus
