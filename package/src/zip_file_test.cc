#include "chorus/package/zip_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "chorus/common/file_util.h"

namespace chorus {
namespace {

namespace fs = std::filesystem;

const std::string kCorpus = std::string(CHORUS_SOURCE_DIR) + "/tests/data/package_corpus/";
// TorchServe's frontend test archives, beside the checkout (skipped where absent).
const fs::path kMarArchives =
    fs::path(CHORUS_SOURCE_DIR) /
    "../shared/torchserve/serve/frontend/archive/src/test/resources/models";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ZipFileTest : public testing::Test {
 protected:
  void SetUp() override {
    StatusOr<ScopedTempDir> scratch = ScopedTempDir::Create("zip_file_test_");
    ASSERT_TRUE(scratch.ok()) << scratch.status().ToString();
    scratch_dir_ = *std::move(scratch);
    scratch_ = scratch_dir_.path();
  }

  ScopedTempDir scratch_dir_;
  fs::path scratch_;
};

TEST_F(ZipFileTest, ExtractsEveryRecordWithItsBytes) {
  auto zip = ZipFile::Open(kCorpus + "good.pt");
  ASSERT_TRUE(zip.ok()) << zip.status().ToString();
  const fs::path folder = scratch_ / "good";
  ASSERT_TRUE((*zip)->ExtractTo(folder.string()).ok());
  int files = 0;
  for (const ArchiveRecord& record : (*zip)->records()) {
    if (record.name.back() == '/') continue;
    StatusOr<RecordData> data = (*zip)->Read(record);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    EXPECT_EQ(ReadFile(folder / record.name),
              std::string(reinterpret_cast<const char*>(data->data), data->size))
        << record.name;
    ++files;
  }
  EXPECT_GT(files, 3);
  // A second extraction into the same folder is refused: nothing is overwritten.
  EXPECT_EQ((*zip)->ExtractTo(folder.string()).code(), StatusCode::kAlreadyExists);
}

TEST_F(ZipFileTest, MalformedZipsAreRefusedAsArchivesAreAndABadCrcStopsTheExtraction) {
  const nlohmann::json expected = nlohmann::json::parse(ReadFile(kCorpus + "expected.json"));
  int refused = 0;
  for (const char* name : {"absolute.pt", "dotdot.pt", "duplicate.pt", "encrypted.pt", "not_zip.pt",
                           "nul_name.pt", "truncated.pt", "zip_bomb.pt"}) {
    const std::string message = expected.at(name)[1];
    auto zip = ZipFile::Open(kCorpus + name);
    ASSERT_FALSE(zip.ok()) << name << " opened";
    EXPECT_EQ(zip.status().message().rfind(message, 0), 0u) << zip.status().ToString();
    ++refused;
  }
  EXPECT_EQ(refused, 8);
  auto bad_crc = ZipFile::Open(kCorpus + "bad_crc.pt");  // CRCs are checked as records are read
  ASSERT_TRUE(bad_crc.ok()) << bad_crc.status().ToString();
  const fs::path folder = scratch_ / "bad_crc";
  Status extracted = (*bad_crc)->ExtractTo(folder.string());
  EXPECT_EQ(extracted.code(), StatusCode::kDataLoss);
  EXPECT_EQ(extracted.message().rfind("bad CRC", 0), 0u) << extracted.ToString();
  EXPECT_FALSE(fs::exists(folder)) << "a failed extraction leaves nothing";
}

TEST_F(ZipFileTest, TorchServeArchivesExtractWithTheirFolders) {
  if (!fs::is_directory(kMarArchives)) GTEST_SKIP() << "no TorchServe archives at " << kMarArchives;
  for (const char* mar : {"noop.mar", "respheader-test.mar", "noop_entrypntfunc.mar"}) {
    SCOPED_TRACE(mar);
    auto zip = ZipFile::Open((kMarArchives / mar).string());
    ASSERT_TRUE(zip.ok()) << zip.status().ToString();
    const fs::path folder = scratch_ / mar;
    ASSERT_TRUE((*zip)->ExtractTo(folder.string()).ok());
    EXPECT_TRUE(fs::is_regular_file(folder / "MAR-INF" / "MANIFEST.json"));
    EXPECT_TRUE(fs::is_regular_file(folder / "model.pt"));
  }
}

}  // namespace
}  // namespace chorus
