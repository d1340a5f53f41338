// DecodeInputs against a model's signature: the order it gives the inputs,
// and each rejection it promises (names, datatypes, shapes and batch sizes,
// raw and typed contents, typed integers out of their dtype's range).
#include "chorus/server/models/tensor_codec.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "chorus/package/dtype.h"
#include "server/models/src/tensor_codec_test_support.h"

namespace chorus::testing {
namespace {

TEST(TensorCodecTest, TypedIntegersThatDoNotFitTheirDtypeAreRefused) {
  struct Case {
    const char* dtype;
    int64_t value;
    const char* message;
  };
  for (const Case& c : {Case{"int8", 300, "value 300 does not fit INT8"},
                        Case{"int8", -129, "value -129 does not fit INT8"},
                        Case{"int16", 70000, "value 70000 does not fit INT16"},
                        Case{"uint8", 256, "value 256 does not fit UINT8"}}) {
    const DtypeInfo& info = *DtypeByName(c.dtype);
    inference::ModelInferRequest request;
    auto* contents = AddInput(request, "x", info.wire, {1, 3})->mutable_contents();
    for (int i = 0; i < 3; ++i) {
      const int64_t v = i == 1 ? c.value : 7;
      if (info.dtype == Dtype::kUint8) {
        contents->add_uint_contents(static_cast<uint32_t>(v));
      } else {
        contents->add_int_contents(static_cast<int32_t>(v));
      }
    }
    EXPECT_THAT(DecodeInputs(request, OneTensorManifest(c.dtype)),
                StatusIs(StatusCode::kInvalidArgument, "input \"x\": " + std::string(c.message)));
  }
  inference::ModelInferRequest edges;
  auto* contents = AddInput(edges, "x", "INT8", {1, 3})->mutable_contents();
  for (int v : {-128, 0, 127}) contents->add_int_contents(v);
  ASSERT_OK_AND_ASSIGN(std::vector<at::Tensor> decoded,
                       DecodeTensors(edges, OneTensorManifest("int8")));
  EXPECT_TRUE(at::equal(decoded[0], at::tensor({-128, 0, 127}, at::kChar).reshape({1, 3})));
}

TEST(TensorCodecTest, InputsOfABatchableModelMustAgreeOnTheirRows) {
  inference::ModelInferRequest request;
  AddTypedA(request);  // 2 rows
  auto* b = AddInput(request, "b", "INT64", {3})->mutable_contents();
  for (int64_t v : {1, 2, 3}) b->add_int64_contents(v);
  EXPECT_THAT(DecodeInputs(request, TwoInputManifest()),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"b\": 3 rows along the batch dimension; the other inputs have 2"));
  Manifest unbatched = TwoInputManifest();
  unbatched.batching.batchable = false;
  EXPECT_OK(DecodeInputs(request, unbatched));
}

TEST(TensorCodecTest, DecodedInputsFollowTheManifestOrder) {
  inference::ModelInferRequest request;
  AddTypedB(request);  // b first: the model takes a, then b
  AddTypedA(request);
  ASSERT_OK_AND_ASSIGN(std::vector<at::Tensor> inputs, DecodeTensors(request, TwoInputManifest()));
  ASSERT_EQ(inputs.size(), 2u);
  ExpectIdentical(inputs[0], ExpectedA());
  ExpectIdentical(inputs[1], ExpectedB());

  // The same as raw contents, one entry per input in request order.
  inference::ModelInferRequest raw;
  AddInput(raw, "b", "INT64", {2});
  AddInput(raw, "a", "FP32", {2, 2});
  raw.add_raw_input_contents(Bytes(ExpectedB()));
  raw.add_raw_input_contents(Bytes(ExpectedA()));
  ASSERT_OK_AND_ASSIGN(std::vector<at::Tensor> from_raw, DecodeTensors(raw, TwoInputManifest()));
  ASSERT_EQ(from_raw.size(), 2u);
  ExpectIdentical(from_raw[0], ExpectedA());
  ExpectIdentical(from_raw[1], ExpectedB());
}

TEST(TensorCodecTest, UnknownDuplicateAndMissingInputsAreRejected) {
  const Manifest manifest = TwoInputManifest();
  {
    inference::ModelInferRequest request;
    AddTypedA(request);
    AddTypedB(request);
    auto* extra = AddInput(request, "c", "FP32", {1})->mutable_contents();
    extra->add_fp32_contents(1.0f);
    EXPECT_THAT(DecodeInputs(request, manifest),
                StatusIs(StatusCode::kInvalidArgument, "input \"c\": the model has no such input"));
  }
  {
    inference::ModelInferRequest request;
    AddTypedA(request);
    AddTypedA(request);
    EXPECT_THAT(DecodeInputs(request, manifest),
                StatusIs(StatusCode::kInvalidArgument, "input \"a\": given twice"));
  }
  {
    inference::ModelInferRequest request;
    AddTypedA(request);
    EXPECT_THAT(DecodeInputs(request, manifest),
                StatusIs(StatusCode::kInvalidArgument, "input \"b\": missing (a required input)"));
  }
  EXPECT_THAT(DecodeInputs(inference::ModelInferRequest(), manifest),
              StatusIs(StatusCode::kInvalidArgument, "input \"a\": missing (a required input)"));
}

TEST(TensorCodecTest, ADatatypeOtherThanTheSignaturesIsRejected) {
  const Manifest manifest = TwoInputManifest();
  {
    inference::ModelInferRequest request;
    auto* contents = AddInput(request, "a", "FP64", {2, 2})->mutable_contents();
    for (double v : {1.0, 2.0, 3.0, 4.0}) contents->add_fp64_contents(v);
    AddTypedB(request);
    EXPECT_THAT(
        DecodeInputs(request, manifest),
        StatusIs(StatusCode::kInvalidArgument, "input \"a\": expected datatype FP32, got FP64"));
  }
  {
    inference::ModelInferRequest request;
    AddTypedA(request);
    auto* contents = AddInput(request, "b", "", {2})->mutable_contents();
    for (int64_t v : {7, 8}) contents->add_int64_contents(v);
    EXPECT_THAT(
        DecodeInputs(request, manifest),
        StatusIs(StatusCode::kInvalidArgument, "input \"b\": expected datatype INT64, got none"));
  }
}

// A request with input a of `shape` (typed contents of the right count) and a
// valid b with as many rows (two when a has no dimensions).
inference::ModelInferRequest WithShapeOfA(const std::vector<int64_t>& shape) {
  inference::ModelInferRequest request;
  auto* contents = AddInput(request, "a", "FP32", shape)->mutable_contents();
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  for (int64_t i = 0; i < elements; ++i) contents->add_fp32_contents(static_cast<float>(i));
  const int64_t rows = shape.empty() || shape[0] < 0 ? 2 : shape[0];
  auto* b = AddInput(request, "b", "INT64", {rows})->mutable_contents();
  for (int64_t i = 0; i < rows; ++i) b->add_int64_contents(i);
  return request;
}

TEST(TensorCodecTest, ShapesMustMatchTheSignatureWhereItIsNotDynamic) {
  const Manifest manifest = TwoInputManifest();  // a: [-1, 2]
  EXPECT_THAT(DecodeInputs(WithShapeOfA({4}), manifest),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"a\": shape [4] does not match the model's [-1, 2]"));
  EXPECT_THAT(DecodeInputs(WithShapeOfA({1, 2, 1}), manifest),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"a\": shape [1, 2, 1] does not match the model's [-1, 2]"));
  EXPECT_THAT(DecodeInputs(WithShapeOfA({2, 3}), manifest),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"a\": shape [2, 3] does not match the model's [-1, 2]"));
  // -1 in the signature is any size, not a size a request may send.
  inference::ModelInferRequest negative;
  AddInput(negative, "a", "FP32", {-1, 2});
  AddTypedB(negative);
  EXPECT_THAT(DecodeInputs(negative, manifest),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"a\": shape [-1, 2] does not match the model's [-1, 2]"));
  // The dynamic dimension takes any size up to the batch maximum.
  for (int64_t rows : {1, 3, 4}) {
    SCOPED_TRACE(rows);
    ASSERT_OK_AND_ASSIGN(std::vector<at::Tensor> inputs,
                         DecodeTensors(WithShapeOfA({rows, 2}), manifest));
    EXPECT_EQ(inputs[0].sizes(), (std::vector<int64_t>{rows, 2}));
    EXPECT_TRUE(at::equal(inputs[0].flatten(), at::arange(2 * rows, at::dtype(at::kFloat))));
  }
}

TEST(TensorCodecTest, ABatchOverTheModelsMaximumIsRejected) {
  Manifest manifest = TwoInputManifest();  // batches of up to 4
  EXPECT_THAT(DecodeInputs(WithShapeOfA({5, 2}), manifest),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"a\": batch of 5 exceeds the model's maximum of 4"));
  EXPECT_OK(DecodeInputs(WithShapeOfA({4, 2}), manifest));
  // A model that does not batch has no batch maximum.
  manifest.batching = Batching{false, 0, 0};
  ASSERT_OK_AND_ASSIGN(std::vector<at::Tensor> inputs,
                       DecodeTensors(WithShapeOfA({5, 2}), manifest));
  EXPECT_EQ(inputs[0].sizes(), (std::vector<int64_t>{5, 2}));
}

TEST(TensorCodecTest, RawAndTypedContentsAreNotMixed) {
  inference::ModelInferRequest request;
  AddTypedA(request);
  AddInput(request, "b", "INT64", {2});
  request.add_raw_input_contents(Bytes(ExpectedA()));
  request.add_raw_input_contents(Bytes(ExpectedB()));
  EXPECT_THAT(DecodeInputs(request, TwoInputManifest()),
              StatusIs(StatusCode::kInvalidArgument,
                       "contents field must not be specified when using raw_input_contents "
                       "for 'a' for model '" +
                           TwoInputManifest().model_name + "'"));
}

TEST(TensorCodecTest, RawContentsNeedOneEntryPerInputOfTheRightSize) {
  const Manifest manifest = TwoInputManifest();
  {
    inference::ModelInferRequest request;
    AddInput(request, "a", "FP32", {2, 2});
    AddInput(request, "b", "INT64", {2});
    request.add_raw_input_contents(Bytes(ExpectedA()));
    EXPECT_THAT(DecodeInputs(request, manifest),
                StatusIs(StatusCode::kInvalidArgument, "1 raw_input_contents for 2 inputs"));
  }
  {
    inference::ModelInferRequest request;
    AddInput(request, "a", "FP32", {2, 2});
    AddInput(request, "b", "INT64", {2});
    request.add_raw_input_contents(Bytes(ExpectedA()).substr(0, 12));
    request.add_raw_input_contents(Bytes(ExpectedB()));
    EXPECT_THAT(DecodeInputs(request, manifest),
                StatusIs(StatusCode::kInvalidArgument,
                         "input \"a\": raw contents hold 12 bytes; shape [2, 2] of FP32 needs 16"));
  }
}

TEST(TensorCodecTest, TypedContentsNeedOneValuePerElementInTheDtypesField) {
  const Manifest manifest = TwoInputManifest();
  {
    inference::ModelInferRequest request;
    auto* contents = AddInput(request, "a", "FP32", {2, 2})->mutable_contents();
    for (float v : {1.0f, 2.0f, 3.0f}) contents->add_fp32_contents(v);
    AddTypedB(request);
    EXPECT_THAT(
        DecodeInputs(request, manifest),
        StatusIs(StatusCode::kInvalidArgument, "input \"a\": 3 typed values for 4 elements"));
  }
  {
    // Values in another dtype's field are not converted: FP32 has none.
    inference::ModelInferRequest request;
    auto* contents = AddInput(request, "a", "FP32", {2, 2})->mutable_contents();
    for (int32_t v : {1, 2, 3, 4}) contents->add_int_contents(v);
    AddTypedB(request);
    EXPECT_THAT(
        DecodeInputs(request, manifest),
        StatusIs(StatusCode::kInvalidArgument, "input \"a\": 0 typed values for 4 elements"));
  }
  {
    inference::ModelInferRequest request;
    AddInput(request, "a", "FP32", {2, 2});
    AddTypedB(request);
    EXPECT_THAT(DecodeInputs(request, manifest),
                StatusIs(StatusCode::kInvalidArgument, "input \"a\": no contents (typed or raw)"));
  }
}

TEST(TensorCodecTest, AnEmptyBatchNeedsNoContents) {
  inference::ModelInferRequest request;
  AddInput(request, "a", "FP32", {0, 2});
  AddInput(request, "b", "INT64", {0});
  ASSERT_OK_AND_ASSIGN(std::vector<at::Tensor> inputs, DecodeTensors(request, TwoInputManifest()));
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].sizes(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(inputs[0].scalar_type(), at::kFloat);
  EXPECT_EQ(inputs[1].sizes(), (std::vector<int64_t>{0}));
  EXPECT_EQ(inputs[1].scalar_type(), at::kLong);
}

}  // namespace
}  // namespace chorus::testing
