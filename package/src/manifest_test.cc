#include "chorus/package/manifest.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace chorus {
namespace {

nlohmann::json Valid() {
  return nlohmann::json::parse(R"({
    "format": "chorus-package", "format_version": 1,
    "model": {"name": "mlp", "version": "3"},
    "entry_point": {"kind": "pickle", "package": "model", "resource": "model.pkl"},
    "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "dtype": "int64", "shape": [-1]}],
    "batching": {"batchable": true, "batch_dim": 0, "max_batch_size": 16},
    "device": "cpu",
    "files": {"model/model.pkl": {"sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "size": 10}}
  })");
}

TEST(ManifestTest, ParsesEveryField) {
  auto manifest = ParseManifest(Valid().dump());
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->model_name, "mlp");
  EXPECT_EQ(manifest->model_version, "3");
  EXPECT_EQ(manifest->entry_point.kind, "pickle");
  EXPECT_EQ(manifest->entry_point.resource, "model.pkl");
  EXPECT_EQ(manifest->inputs[0].shape, (std::vector<int64_t>{-1, 4}));
  EXPECT_EQ(manifest->outputs[0].dtype, "int64");
  EXPECT_EQ(manifest->batching.max_batch_size, 16);
  EXPECT_EQ(manifest->files.at("model/model.pkl").size, 10u);
}

TEST(ManifestTest, FactoryEntryPoint) {
  nlohmann::json json = Valid();
  json["entry_point"] = {{"kind", "factory"}, {"module", "mymodel"}, {"factory", "build"}};
  auto manifest = ParseManifest(json.dump());
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->entry_point.module, "mymodel");
}

struct Breakage {
  const char* pointer;  // JSON pointer of the field to change
  nlohmann::json value;
  const char* error;  // expected in the message
};

TEST(ManifestTest, EachSchemaViolationIsNamed) {
  const Breakage cases[] = {
      {"/format", "other", "format must be"},
      {"/format_version", 2, "unsupported format_version"},
      {"/model/name", "", "model.name"},
      {"/entry_point/kind", "exec", "entry_point.kind"},
      {"/entry_point/resource", 5, "entry_point.resource"},
      {"/inputs", nlohmann::json::array(), "inputs must be a non-empty list"},
      {"/inputs/0/dtype", "float33", "unknown dtype float33"},
      {"/inputs/0/shape", nlohmann::json::array({-2}), "integers >= -1"},
      {"/inputs/0/name", "9lives", "not a valid name"},
      {"/outputs/0/name", "x y", "not a valid name"},
      {"/batching/batchable", "yes", "batching.batchable"},
      {"/batching/max_batch_size", -1, "max_batch_size"},
      {"/device", "tpu", "device must be"},
      {"/device", "cuda:x", "device must be"},
      {"/files/model~1model.pkl/sha256", "XYZ", "sha256 must be 64 lowercase hex"},
  };
  for (const Breakage& breakage : cases) {
    nlohmann::json json = Valid();
    json[nlohmann::json::json_pointer(breakage.pointer)] = breakage.value;
    auto manifest = ParseManifest(json.dump());
    ASSERT_FALSE(manifest.ok()) << breakage.pointer;
    EXPECT_EQ(manifest.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(manifest.status().message().rfind("manifest invalid: ", 0), 0u);
    EXPECT_NE(manifest.status().message().find(breakage.error), std::string::npos)
        << breakage.pointer << ": " << manifest.status().message();
  }
  nlohmann::json duplicate = Valid();
  duplicate["inputs"].push_back(duplicate["inputs"][0]);
  EXPECT_NE(ParseManifest(duplicate.dump()).status().message().find("duplicate name"),
            std::string::npos);
  EXPECT_NE(ParseManifest("[1, 2").status().message().find("not valid JSON"), std::string::npos);
}

TEST(ManifestTest, TensorFlowStyleTensorNamesAreValid) {
  nlohmann::json json = Valid();
  json["inputs"][0]["name"] = "input:0";
  json["outputs"][0]["name"] = "serving_default/probs";
  auto manifest = ParseManifest(json.dump());
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->inputs[0].name, "input:0");
  EXPECT_EQ(manifest->outputs[0].name, "serving_default/probs");
}

TEST(ManifestTest, ASignatureAloneParsesWithTheManifestsRules) {
  auto signature = ParseSignature(R"({
    "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "dtype": "int64", "shape": [-1]}]})");
  ASSERT_TRUE(signature.ok()) << signature.status().ToString();
  EXPECT_EQ(signature->inputs[0].shape, (std::vector<int64_t>{-1, 4}));
  EXPECT_FALSE(signature->batching.batchable);  // batching is optional here
  EXPECT_EQ(signature->device, "cpu");

  auto batched = ParseSignature(R"({"inputs": [{"name": "x", "dtype": "float32", "shape": [-1]}],
    "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}],
    "batching": {"batchable": true, "batch_dim": 0, "max_batch_size": 8}})");
  ASSERT_TRUE(batched.ok()) << batched.status().ToString();
  EXPECT_EQ(batched->batching.max_batch_size, 8);

  auto unknown = ParseSignature(R"({"inputs": [{"name": "x", "dtype": "float32", "shape": []}],
    "outputs": [{"name": "y", "dtype": "float32", "shape": []}], "device": "cpu"})");
  EXPECT_EQ(unknown.status().message(),
            "manifest invalid: unknown key device (inputs, outputs, batching)");
  auto bad_dtype = ParseSignature(R"({"inputs": [{"name": "x", "dtype": "float", "shape": []}],
    "outputs": [{"name": "y", "dtype": "float32", "shape": []}]})");
  EXPECT_EQ(bad_dtype.status().message(), "manifest invalid: inputs[0]: unknown dtype float");
}

}  // namespace
}  // namespace chorus
