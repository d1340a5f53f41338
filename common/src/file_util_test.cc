#include "chorus/common/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(temp_, ScopedTempDir::Create("chorus-file-util-"));
    dir_ = temp_.path();
  }
  ScopedTempDir temp_;
  std::string dir_;
};

TEST(ScopedTempDirTest, RemovesItsTreeWhenDestroyedAndMovesOwnership) {
  std::string kept;
  {
    ASSERT_OK_AND_ASSIGN(ScopedTempDir made, ScopedTempDir::Create("chorus-scoped-"));
    ASSERT_OK(MakeDirectories(made.path() + "/a/b"));
    ASSERT_OK(WriteFileAtomically(made.path() + "/a/b/file", "x"));
    ScopedTempDir owner = std::move(made);
    EXPECT_EQ(made.path(), "");
    kept = owner.path();
    EXPECT_NE(kept.find("/chorus-scoped-"), std::string::npos) << kept;
    ASSERT_OK_AND_ASSIGN(std::string contents, ReadFile(kept + "/a/b/file"));
    EXPECT_EQ(contents, "x");
  }
  EXPECT_THAT(ReadFile(kept + "/a/b/file"), StatusIs(StatusCode::kNotFound));
  EXPECT_NE(access(kept.c_str(), F_OK), 0);
}

TEST_F(FileUtilTest, WriteAtomicallyThenRead) {
  std::string path = dir_ + "/a/b/file";
  ASSERT_TRUE(MakeDirectories(dir_ + "/a/b").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(*ReadFile(path), "second");
}

TEST_F(FileUtilTest, RemoveTreeRemovesEverythingButFollowsNoLink) {
  ASSERT_TRUE(MakeDirectories(dir_ + "/tree/a/b").ok());
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/tree/a/b/file", "x").ok());
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/outside", "kept").ok());
  ASSERT_EQ(::symlink((dir_ + "/outside").c_str(), (dir_ + "/tree/link").c_str()), 0);
  ASSERT_TRUE(RemoveTree(dir_ + "/tree").ok());
  EXPECT_FALSE(ReadFile(dir_ + "/tree/a/b/file").ok());
  EXPECT_EQ(*ReadFile(dir_ + "/outside"), "kept");
  EXPECT_TRUE(RemoveTree(dir_ + "/tree").ok());  // already gone
}

TEST_F(FileUtilTest, ExchangeSwapsTwoFullDirectories) {
  ASSERT_OK(MakeDirectories(dir_ + "/old"));
  ASSERT_OK(MakeDirectories(dir_ + "/new"));
  ASSERT_OK(WriteFileAtomically(dir_ + "/old/file", "old"));
  ASSERT_OK(WriteFileAtomically(dir_ + "/new/file", "new"));
  ASSERT_OK(ExchangePaths(dir_ + "/new", dir_ + "/old"));
  EXPECT_EQ(*ReadFile(dir_ + "/old/file"), "new");
  EXPECT_EQ(*ReadFile(dir_ + "/new/file"), "old");
  EXPECT_THAT(ExchangePaths(dir_ + "/new", dir_ + "/missing"), StatusIs(StatusCode::kNotFound));
}

TEST_F(FileUtilTest, CopyPreservesBytesAndMode) {
  std::string from = dir_ + "/from", to = dir_ + "/to";
  std::string data(200000, 'x');
  data[12345] = '\0';
  ASSERT_TRUE(WriteFileAtomically(from, data).ok());
  ASSERT_EQ(::chmod(from.c_str(), 0751), 0);
  ASSERT_TRUE(CopyFile(from, to).ok());
  EXPECT_EQ(*ReadFile(to), data);
  struct stat st;
  ASSERT_EQ(::stat(to.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0751u);
  // The destination must be new: a copy never overwrites.
  EXPECT_FALSE(CopyFile(from, to).ok());
}

TEST_F(FileUtilTest, ErrorsNameThePath) {
  StatusOr<std::string> missing = ReadFile(dir_ + "/missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/missing"), std::string::npos);
}

// Several processes replacing the same file: readers only ever see a whole
// version, and no temporary file is left behind.
TEST_F(FileUtilTest, ConcurrentWritersLeaveOneWholeFile) {
  std::string path = dir_ + "/shared";
  std::vector<pid_t> children;
  for (int writer = 0; writer < 4; ++writer) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::string contents(100000, static_cast<char>('a' + writer));
      for (int i = 0; i < 20; ++i) {
        if (!WriteFileAtomically(path, contents).ok()) _exit(1);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string contents = *ReadFile(path);
  ASSERT_EQ(contents.size(), 100000u);
  EXPECT_EQ(contents, std::string(100000, contents[0]));
  std::string leftovers = dir_ + "/shared.tmp-*";
  EXPECT_NE(std::system(("ls " + leftovers + " >/dev/null 2>&1").c_str()), 0);
}

// Run under strace by WritesReachTheDiskBeforeTheyAreNamed below.
TEST(FileUtilChild, SyncTreeThenWriteAtomically) {
  const char* dir = std::getenv("CHORUS_FILE_UTIL_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "child mode only";
  ASSERT_TRUE(MakeDirectories(std::string(dir) + "/step/sub").ok());
  std::ofstream(std::string(dir) + "/step/shard") << "shard";
  std::ofstream(std::string(dir) + "/step/sub/part") << "part";
  ASSERT_TRUE(SyncTree(std::string(dir) + "/step").ok());
  ASSERT_TRUE(WriteFileAtomically(std::string(dir) + "/latest", "step\n").ok());
}

// The order of the system calls: every file and directory of a tree is
// fsync'ed before the pointer to it is renamed into place, the pointer's own
// data before its rename, and its directory after. A power loss then leaves
// either the old pointer or a new one to complete data.
TEST_F(FileUtilTest, WritesReachTheDiskBeforeTheyAreNamed) {
  ASSERT_EQ(std::system("strace -V >/dev/null 2>&1"), 0) << "strace is needed (make deps)";
  char self[4096] = {0};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  const std::string log = dir_ + "/strace.log";
  // LeakSanitizer (the sanitizer build) cannot run under ptrace.
  const std::string command = "ASAN_OPTIONS=detect_leaks=0 CHORUS_FILE_UTIL_CHILD_DIR=" + dir_ +
                              " strace -f -qq -e trace=open,openat,fsync,rename -o " + log + " " +
                              self + " --gtest_filter=FileUtilChild.* >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0);
  // The events, in order: "fsync PATH" and "rename FROM TO".
  std::ifstream in(log);
  std::map<std::string, std::string> fd_paths;  // by "pid fd"
  std::vector<std::string> events;
  const std::regex open_call(R"re(^(\d+) +open(at)?\((AT_FDCWD, )?"([^"]+)".*\) = (\d+)$)re");
  const std::regex fsync_call(R"re(^(\d+) +fsync\((\d+)\) += 0$)re");
  const std::regex rename_call(R"re(^\d+ +rename\("([^"]+)", "([^"]+)"\) += 0$)re");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, open_call)) {
      fd_paths[m[1].str() + " " + m[5].str()] = m[4];
    } else if (std::regex_match(line, m, fsync_call)) {
      events.push_back("fsync " + fd_paths[m[1].str() + " " + m[2].str()]);
    } else if (std::regex_match(line, m, rename_call)) {
      events.push_back("rename " + m[1].str() + " " + m[2].str());
    }
  }
  auto position = [&](const std::string& prefix, const std::string& suffix = "") -> long {
    for (size_t i = 0; i < events.size(); ++i) {
      const std::string& e = events[i];
      if (e.rfind(prefix, 0) == 0 && e.size() >= suffix.size() &&
          e.compare(e.size() - suffix.size(), suffix.size(), suffix) == 0) {
        return static_cast<long>(i);
      }
    }
    return -1;
  };
  std::string all;
  for (const std::string& e : events) all += e + "\n";
  const long rename_latest = position("rename " + dir_ + "/latest.tmp-", " " + dir_ + "/latest");
  ASSERT_GE(rename_latest, 0) << all;
  for (const std::string& synced :
       {dir_ + "/step/shard", dir_ + "/step/sub/part", dir_ + "/step/sub", dir_ + "/step"}) {
    const long at = position("fsync " + synced, synced);
    EXPECT_GE(at, 0) << synced << " never synced:\n" << all;
    EXPECT_LT(at, rename_latest) << synced << " synced after latest moved:\n" << all;
  }
  const std::string part = dir_ + "/step/sub/part", sub = dir_ + "/step/sub";
  EXPECT_LT(position("fsync " + part, part), position("fsync " + sub, sub))
      << "a directory before its files:\n"
      << all;
  const long data = position("fsync " + dir_ + "/latest.tmp-");
  EXPECT_GE(data, 0) << all;
  EXPECT_LT(data, rename_latest) << all;
  const long directory = static_cast<long>(events.size()) - 1;
  EXPECT_EQ(events.back(), "fsync " + dir_) << "the rename itself is not made durable:\n" << all;
  EXPECT_GT(directory, rename_latest);
}

}  // namespace
}  // namespace chorus
