#include "chorus/package/archive.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "chorus/common/file_util.h"
#include "chorus/package/format.h"

namespace chorus {
namespace {

const std::string kCorpus = std::string(CHORUS_SOURCE_DIR) + "/tests/data/package_corpus/";

// expected.json: archive -> [phase, error message start] (make_corpus.py).
nlohmann::json Expected() {
  std::ifstream in(kCorpus + "expected.json");
  return nlohmann::json::parse(in);
}

TEST(ArchiveTest, OpensAGoodPackage) {
  auto archive = Archive::Open(kCorpus + "good.pt");
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  const Archive& a = **archive;
  EXPECT_EQ(a.format(), ModelFormat::kChorus);
  EXPECT_EQ(a.prefix(), "good/");
  ASSERT_TRUE(a.manifest().has_value());
  EXPECT_EQ(a.manifest()->model_name, "tiny_mlp");
  EXPECT_EQ(a.manifest()->inputs.at(0).shape, (std::vector<int64_t>{-1, 4}));
  EXPECT_EQ(a.manifest()->outputs.at(0).dtype, "float32");
  EXPECT_TRUE(a.manifest()->batching.batchable);
  // Weights are stored uncompressed and aligned: they can be mapped as is.
  int storages = 0;
  for (const ArchiveRecord& record : a.records()) {
    if (record.name.rfind(".data/", 0) == 0 && record.name.find(".storage") != std::string::npos) {
      ++storages;
      EXPECT_TRUE(record.stored) << record.name;
      EXPECT_EQ(record.data_offset % package_format::kRecordAlignment, 0u) << record.name;
    }
  }
  EXPECT_EQ(storages, 4);  // two Linear layers: weight and bias each
  StatusOr<RecordData> weight = a.Read(".data/0.storage");
  ASSERT_TRUE(weight.ok());
  EXPECT_EQ(weight->size, 8u * 4u * sizeof(float));
  EXPECT_EQ(weight->data, a.mapped_data() + a.Find(".data/0.storage")->data_offset);
  EXPECT_TRUE(a.VerifySha256().ok());
  EXPECT_EQ(a.Read("missing").status().code(), StatusCode::kNotFound);
}

TEST(ArchiveTest, StockTorchPackageArchiveOpensWithoutManifest) {
  auto archive = Archive::Open(kCorpus + "no_manifest.pt");
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  EXPECT_FALSE((*archive)->manifest().has_value());
  EXPECT_EQ((*archive)->VerifySha256().code(), StatusCode::kFailedPrecondition);
}

TEST(ArchiveTest, EveryMalformedArchiveGivesItsOwnErrorAndAGoodOneStillOpens) {
  int checked = 0;
  const nlohmann::json expected = Expected();
  for (const auto& [name, expectation] : expected.items()) {
    const std::string phase = expectation[0], message = expectation[1];
    if (phase != "open" && phase != "sha256") continue;
    ArchiveOptions options;
    options.verify_sha256 = phase == "sha256";
    auto archive = Archive::Open(kCorpus + name, options);
    ASSERT_FALSE(archive.ok()) << name << " opened";
    EXPECT_EQ(archive.status().message().rfind(message, 0), 0u)
        << name << ": expected \"" << message << "...\", got " << archive.status().ToString();
    EXPECT_NE(archive.status().message().find(name), std::string::npos)
        << "the error names the archive: " << archive.status().message();
    // Nothing is lost: the next archive opens.
    EXPECT_TRUE(Archive::Open(kCorpus + "good.pt").ok());
    ++checked;
  }
  EXPECT_EQ(checked, 13);
}

TEST(ArchiveTest, MissingFileAndDirectory) {
  EXPECT_EQ(Archive::Open(kCorpus + "does_not_exist.pt").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Archive::Open(kCorpus).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chorus
