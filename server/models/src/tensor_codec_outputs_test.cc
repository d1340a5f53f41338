// EncodeOutputs: which outputs it sends and in what order, raw and row-major,
// and the outputs that disagree with the signature or the protocol.
#include "chorus/server/models/tensor_codec.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "server/models/src/tensor_codec_test_support.h"

namespace chorus::testing {
namespace {

using ::testing::ElementsAre;

// The two outputs of TwoInputManifest: y = [[1.5, -2], [3, 4]], n = [7, 8].
std::vector<c10::IValue> TwoOutputs() { return {ExpectedA(), ExpectedB()}; }

inference::ModelInferRequest Requesting(const std::vector<std::string>& names) {
  inference::ModelInferRequest request;
  for (const std::string& name : names) request.add_outputs()->set_name(name);
  return request;
}

std::vector<std::string> OutputNames(const inference::ModelInferResponse& response) {
  std::vector<std::string> names;
  for (const auto& output : response.outputs()) names.push_back(output.name());
  return names;
}

TEST(TensorCodecTest, EveryOutputIsSentWhenNoneIsRequested) {
  inference::ModelInferResponse response;
  ASSERT_OK(
      EncodeOutputs(TwoOutputs(), TwoInputManifest(), inference::ModelInferRequest(), &response));
  EXPECT_THAT(OutputNames(response), ElementsAre("y", "n"));
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_THAT(response.outputs(0).shape(), ElementsAre(2, 2));
  EXPECT_EQ(response.raw_output_contents(0), Bytes(ExpectedA()));
  EXPECT_EQ(response.outputs(1).datatype(), "INT64");
  EXPECT_THAT(response.outputs(1).shape(), ElementsAre(2));
  EXPECT_EQ(response.raw_output_contents(1), Bytes(ExpectedB()));
  // Raw form only: no typed contents.
  EXPECT_FALSE(response.outputs(0).has_contents());
}

TEST(TensorCodecTest, RequestedOutputsAreSentInManifestOrder) {
  {
    inference::ModelInferResponse response;
    ASSERT_OK(EncodeOutputs(TwoOutputs(), TwoInputManifest(), Requesting({"n"}), &response));
    EXPECT_THAT(OutputNames(response), ElementsAre("n"));
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    EXPECT_EQ(response.raw_output_contents(0), Bytes(ExpectedB()));
  }
  {
    inference::ModelInferResponse response;
    ASSERT_OK(
        EncodeOutputs(TwoOutputs(), TwoInputManifest(), Requesting({"n", "y", "n"}), &response));
    EXPECT_THAT(OutputNames(response), ElementsAre("y", "n"));
    ASSERT_EQ(response.raw_output_contents_size(), 2);
    EXPECT_EQ(response.raw_output_contents(0), Bytes(ExpectedA()));
    EXPECT_EQ(response.raw_output_contents(1), Bytes(ExpectedB()));
  }
}

TEST(TensorCodecTest, AnUnknownRequestedOutputIsInvalidArgument) {
  inference::ModelInferResponse response;
  EXPECT_THAT(
      EncodeOutputs(TwoOutputs(), TwoInputManifest(), Requesting({"y", "z"}), &response),
      StatusIs(StatusCode::kInvalidArgument, "unexpected inference output 'z' for model 'pair'"));
  EXPECT_EQ(response.outputs_size(), 0);
  EXPECT_EQ(response.raw_output_contents_size(), 0);
}

TEST(TensorCodecTest, OutputsThatDisagreeWithTheSignatureAreInternalErrors) {
  inference::ModelInferResponse response;
  EXPECT_THAT(
      EncodeOutputs({ExpectedA()}, TwoInputManifest(), inference::ModelInferRequest(), &response),
      StatusIs(StatusCode::kInternal, "the model returned 1 outputs; its signature declares 2"));
  EXPECT_THAT(EncodeOutputs({ExpectedA(), ExpectedB().to(at::kInt)}, TwoInputManifest(),
                            inference::ModelInferRequest(), &response),
              StatusIs(StatusCode::kInternal,
                       "output \"n\": the model returned int32, its signature declares int64"));
  EXPECT_EQ(response.outputs_size(), 0);
}

TEST(TensorCodecTest, NonContiguousOutputsAreSentRowMajor) {
  const at::Tensor transposed = at::arange(6, at::dtype(at::kFloat)).reshape({3, 2}).t();
  ASSERT_FALSE(transposed.is_contiguous());
  inference::ModelInferResponse response;
  ASSERT_OK(EncodeOutputs({transposed}, OneTensorManifest("float32"),
                          inference::ModelInferRequest(), &response));
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_THAT(response.outputs(0).shape(), ElementsAre(2, 3));
  const std::vector<float> row_major = {0, 2, 4, 1, 3, 5};
  EXPECT_EQ(response.raw_output_contents(0),
            std::string(reinterpret_cast<const char*>(row_major.data()),
                        row_major.size() * sizeof(float)));
}

TEST(TensorCodecTest, AnOutputDtypeTheProtocolCannotCarryIsInternal) {
  inference::ModelInferResponse response;
  const at::Tensor complex = at::zeros({2, 3}, at::dtype(at::kComplexFloat));
  EXPECT_THAT(
      EncodeOutputs({complex}, OneTensorManifest("float32"), inference::ModelInferRequest(),
                    &response),
      StatusIs(StatusCode::kInternal, "output \"y\" has a dtype the protocol cannot carry"));
}

// A request for `output`'s top `k` classes.
inference::ModelInferRequest Classifying(const std::string& output, int64_t k) {
  inference::ModelInferRequest request;
  auto* requested = request.add_outputs();
  requested->set_name(output);
  (*requested->mutable_parameters())["classification"].set_int64_param(k);
  return request;
}

TEST(ClassificationTest, EachBatchRowsTopClassesAsValueIndexLabel) {
  // y = [[1.5, -2], [3, 4]]: row 0 ranks class 0 first, row 1 class 1.
  inference::ModelInferResponse response;
  const OutputLabelsMap labels = {{"y", {"labels.txt", {"cat", "dog"}}}};
  ASSERT_OK(
      EncodeOutputs(TwoOutputs(), TwoInputManifest(), Classifying("y", 2), &response, labels));
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).datatype(), "BYTES");
  EXPECT_THAT(response.outputs(0).shape(), ElementsAre(2, 2));
  EXPECT_EQ(response.raw_output_contents(0), StringsToRaw({"1.500000:0:cat", "-2.000000:1:dog",
                                                           "4.000000:1:dog", "3.000000:0:cat"}));
  // More classes than a row has: all of them; no labels: value:index; integers as integers.
  ASSERT_OK_AND_ASSIGN(StringTensor top,
                       Classify(at::tensor({5, 9, 7}, at::kLong), 10, /*batched=*/false, {}));
  EXPECT_THAT(top.shape, ElementsAre(3));
  EXPECT_THAT(top.elements, ElementsAre("9:1", "7:2", "5:0"));
  // A label file shorter than the classes: the others unlabelled.
  ASSERT_OK_AND_ASSIGN(top, Classify(at::tensor({0.25f, 0.5f}).reshape({1, 2}), 2, true, {"a"}));
  EXPECT_THAT(top.shape, ElementsAre(1, 2));
  EXPECT_THAT(top.elements, ElementsAre("0.500000:1", "0.250000:0:a"));
}

TEST(ClassificationTest, BadClassCountsAndStringOutputsAreRefusedBeforeTheModelRuns) {
  EXPECT_THAT(CheckRequestedOutputs(Classifying("y", 0), TwoInputManifest()),
              StatusIs(StatusCode::kInvalidArgument,
                       "output \"y\": parameter \"classification\" must be an integer >= 1"));
  inference::ModelInferRequest as_text = Classifying("y", 1);
  (*as_text.mutable_outputs(0)->mutable_parameters())["classification"].set_string_param("3");
  EXPECT_THAT(CheckRequestedOutputs(as_text, TwoInputManifest()),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("integer >= 1")));
  EXPECT_THAT(
      CheckRequestedOutputs(Classifying("z", 1), TwoInputManifest()),
      StatusIs(StatusCode::kInvalidArgument, "unexpected inference output 'z' for model 'pair'"));
  Manifest words = TwoInputManifest();
  words.outputs[0].dtype = "string";
  EXPECT_THAT(CheckRequestedOutputs(Classifying("y", 1), words),
              StatusIs(StatusCode::kInvalidArgument,
                       "output \"y\": classification needs a numeric output, not BYTES"));
  EXPECT_OK(CheckRequestedOutputs(Classifying("n", 3), TwoInputManifest()));
}

}  // namespace
}  // namespace chorus::testing
