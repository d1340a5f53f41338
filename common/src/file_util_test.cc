#include "chorus/common/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace chorus {
namespace {

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/chorus-file-util-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }
  std::string dir_;
};

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

}  // namespace
}  // namespace chorus
