#include "chorus/server/config/torchserve_archive.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "chorus/common/file_util.h"

namespace chorus {
namespace {

namespace fs = std::filesystem;

// TorchServe's frontend test archives (../shared/torchserve beside the checkout).
const fs::path kArchives = fs::path(CHORUS_SOURCE_DIR) /
                           "../shared/torchserve/serve/frontend/archive/src/test/resources/models";

class TorchServeArchiveTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(kArchives)) GTEST_SKIP() << "no TorchServe archives at " << kArchives;
    StatusOr<ScopedTempDir> root = ScopedTempDir::Create("torchserve_archive_test_");
    ASSERT_TRUE(root.ok()) << root.status().ToString();
    root_dir_ = *std::move(root);
    root_ = root_dir_.path();
  }

  ScopedTempDir root_dir_;
  fs::path root_;
};

TEST_F(TorchServeArchiveTest, AMarIsExtractedIntoAFolderOfItsOwn) {
  StatusOr<TorchServeArchive> first =
      OpenTorchServeArchive((kArchives / "noop.mar").string(), root_.string());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->model_name, "noop");
  EXPECT_TRUE(first->extracted);
  ASSERT_TRUE(first->manifest.has_value());
  EXPECT_EQ(first->manifest->model_version, "1.11");
  EXPECT_EQ(fs::path(first->model_dir).parent_path(), root_);
  EXPECT_TRUE(fs::is_regular_file(fs::path(first->model_dir) / "service.py"));
  // The same archive again (a second version, a re-registration): another folder.
  StatusOr<TorchServeArchive> second =
      OpenTorchServeArchive((kArchives / "noop.mar").string(), root_.string());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE(second->model_dir, first->model_dir);
}

TEST_F(TorchServeArchiveTest, AFolderIsUsedWhereItIsAndAFolderOfOneFolderIsUnwrapped) {
  const fs::path noop = kArchives / "noop_no_archive" / "noop";
  StatusOr<TorchServeArchive> plain = OpenTorchServeArchive(noop.string(), root_.string());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE(fs::equivalent(plain->model_dir, noop));
  EXPECT_FALSE(plain->extracted);
  EXPECT_EQ(plain->model_name, "noop");
  StatusOr<TorchServeArchive> wrapped =
      OpenTorchServeArchive((kArchives / "noop_no_archive_no_version").string(), root_.string());
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
  EXPECT_TRUE(
      fs::equivalent(wrapped->model_dir, kArchives / "noop_no_archive_no_version" / "noop"));
  EXPECT_EQ(wrapped->manifest->model_version, "1.0");
  EXPECT_TRUE(fs::is_empty(root_)) << "a folder is not copied";
}

TEST_F(TorchServeArchiveTest, AnEntryWithoutAManifestIsNamedAfterItself) {
  const fs::path folder = root_ / "plain-model.v2";
  fs::create_directories(folder);
  std::ofstream(folder / "handler.py") << "def handle(data, context):\n    return data\n";
  StatusOr<TorchServeArchive> archive = OpenTorchServeArchive(folder.string(), root_.string());
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  EXPECT_EQ(archive->model_name, "plain-model.v2");
  EXPECT_FALSE(archive->manifest.has_value());
  StatusOr<TorchServeArchive> slash = OpenTorchServeArchive(folder.string() + "/", root_.string());
  ASSERT_TRUE(slash.ok()) << slash.status().ToString();
  EXPECT_EQ(slash->model_name, "plain-model.v2");
}

TEST_F(TorchServeArchiveTest, WhatCannotBeOpenedIsRefusedNamingTheEntry) {
  const std::string missing = (kArchives / "no_such.mar").string();
  StatusOr<TorchServeArchive> absent = OpenTorchServeArchive(missing, root_.string());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(absent.status().message().rfind(missing, 0), 0u) << absent.status().ToString();
  StatusOr<TorchServeArchive> tarball =
      OpenTorchServeArchive((kArchives / "noop.tar.gz").string(), root_.string());
  EXPECT_EQ(tarball.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tarball.status().message().find("extract it"), std::string::npos);
  const fs::path not_zip = root_ / "text.mar";
  std::ofstream(not_zip) << "not a zip";
  StatusOr<TorchServeArchive> text = OpenTorchServeArchive(not_zip.string(), root_.string());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message().rfind("not a zip archive", 0), 0u) << text.status().ToString();
  const fs::path bad = root_ / "bad";
  fs::create_directories(bad / "MAR-INF");
  std::ofstream(bad / "MAR-INF" / "MANIFEST.json") << R"({"runtime": "LSP", "model": {}})";
  StatusOr<TorchServeArchive> lsp = OpenTorchServeArchive(bad.string(), root_.string());
  EXPECT_EQ(lsp.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lsp.status().message().rfind(bad.string() + ": MANIFEST.json: runtime", 0), 0u)
      << lsp.status().ToString();
  // Only the extractions that succeeded leave folders: none here.
  EXPECT_EQ(std::distance(fs::directory_iterator(root_), fs::directory_iterator()), 2);
}

}  // namespace
}  // namespace chorus
