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
  EXPECT_THAT(EncodeOutputs(TwoOutputs(), TwoInputManifest(), Requesting({"y", "z"}), &response),
              StatusIs(StatusCode::kInvalidArgument, "output \"z\": the model has no such output"));
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

}  // namespace
}  // namespace chorus::testing
