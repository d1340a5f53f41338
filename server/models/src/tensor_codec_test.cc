// The wire codec (Open Inference Protocol tensors <-> at::Tensor and string
// tensors): round trips of raw and typed contents for every dtype, BYTES
// included; TensorFromRaw's checks; and the dtype tables the codec stands on.
#include "chorus/server/models/tensor_codec.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"
#include "server/models/src/tensor_codec_test_support.h"

namespace chorus::testing {
namespace {

using ::testing::ElementsAre;

// Six values of an unsigned type, both ends of its range among them, in a
// [2, 3] tensor (torch converts few things to these types: built from bytes).
template <typename T>
at::Tensor Unsigned(c10::ScalarType type) {
  std::vector<T> values = {
      0, 1, 2, 1000, std::numeric_limits<T>::max() - 1, std::numeric_limits<T>::max()};
  return at::from_blob(values.data(), {2, 3}, at::dtype(type)).clone();
}

// Six values of `dtype` in a [2, 3] tensor; for the integer types they include
// both ends of the range.
at::Tensor Sample(Dtype dtype) {
  auto from = [](std::vector<double> values, c10::ScalarType type) {
    return at::tensor(values, at::dtype(at::kDouble)).to(type).reshape({2, 3});
  };
  switch (dtype) {
    case Dtype::kBool:
      return from({1, 0, 0, 1, 1, 0}, at::kBool);
    case Dtype::kUint8:
      return from({0, 1, 2, 127, 128, 255}, at::kByte);
    case Dtype::kInt8:
      return from({-128, -1, 0, 1, 2, 127}, at::kChar);
    case Dtype::kInt16:
      return from({-32768, -1, 0, 1, 2, 32767}, at::kShort);
    case Dtype::kInt32:
      return from({-2147483648.0, -1, 0, 1, 2, 2147483647.0}, at::kInt);
    case Dtype::kInt64:  // beyond what a double holds exactly
      return at::tensor(
                 std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 0, 1,
                                      (int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::max()},
                 at::dtype(at::kLong))
          .reshape({2, 3});
    case Dtype::kFloat16:
      return from({-2.5, -1, 0, 0.5, 1024, 65504}, at::kHalf);
    case Dtype::kBFloat16:
      return from({-2.5, -1, 0, 0.5, 1024, 3.0e38}, at::kBFloat16);
    case Dtype::kFloat32:
      return from({-2.5, -1, 0, 0.1, 1e-30, 3.4e38}, at::kFloat);
    case Dtype::kFloat64:
      return from({-2.5, -1, 0, 0.1, 1e-300, 1e300}, at::kDouble);
    case Dtype::kUint16:
      return Unsigned<uint16_t>(at::kUInt16);
    case Dtype::kUint32:
      return Unsigned<uint32_t>(at::kUInt32);
    case Dtype::kUint64:
      return Unsigned<uint64_t>(at::kUInt64);
    case Dtype::kString:
      break;  // not a tensor: the BYTES tests below
  }
  return at::Tensor();
}

// The tensor dtypes: all but strings.
std::vector<DtypeInfo> TensorDtypes() {
  std::vector<DtypeInfo> dtypes;
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype != Dtype::kString) dtypes.push_back(info);
  }
  return dtypes;
}

TEST(DtypeTableTest, ScalarTypesAreIndexedByTheDtypeEnum) {
  // ScalarTypeOf indexes kScalarTypes by the enum's value; a row out of place
  // would map a dtype to another dtype's torch type.
  ASSERT_EQ(std::size(kScalarTypes), std::size(kDtypes) - 1);  // strings have none
  const c10::ScalarType expected[] = {
      at::kBool,     at::kByte,  at::kChar,   at::kShort,  at::kInt,    at::kLong,  at::kHalf,
      at::kBFloat16, at::kFloat, at::kDouble, at::kUInt16, at::kUInt32, at::kUInt64};
  ASSERT_EQ(std::size(expected), std::size(kScalarTypes));
  EXPECT_THROW(ScalarTypeOf(Dtype::kString), c10::Error);
  for (size_t i = 0; i < std::size(kScalarTypes); ++i) {
    const DtypeInfo& info = kDtypes[i];
    SCOPED_TRACE(info.name);
    EXPECT_EQ(static_cast<size_t>(info.dtype), i);
    EXPECT_EQ(static_cast<int>(kScalarTypes[i].first), static_cast<int>(info.dtype));
    EXPECT_EQ(ScalarTypeOf(info.dtype), expected[i]);
    const std::optional<Dtype> back = DtypeOf(ScalarTypeOf(info.dtype));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(static_cast<int>(*back), static_cast<int>(info.dtype));
    EXPECT_EQ(static_cast<int>(c10::elementSize(ScalarTypeOf(info.dtype))), info.element_size);
    EXPECT_EQ(&InfoOf(info.dtype), &info);
    EXPECT_EQ(DtypeByName(info.name), &info);
    EXPECT_EQ(DtypeByWireName(info.wire), &info);
  }
  EXPECT_FALSE(DtypeOf(at::kComplexFloat).has_value());
  EXPECT_FALSE(DtypeOf(at::kComplexDouble).has_value());
}

// The dtype table's torch-free FP16 and BF16 conversions (the REST codec's)
// give torch's bits.
TEST(DtypeTableTest, HalfConversionsAreTorchs) {
  std::mt19937 random(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = any_bits(random);
    float value;
    std::memcpy(&value, &bits, sizeof value);
    if (std::isnan(value)) continue;
    ASSERT_EQ(HalfFromFloat(value), c10::Half(value).x) << value;
    ASSERT_EQ(BFloat16FromFloat(value), c10::BFloat16(value).x) << value;
  }
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t narrow = static_cast<uint16_t>(bits);
    const float half = c10::Half(narrow, c10::Half::from_bits());
    const float bfloat = c10::BFloat16(narrow, c10::BFloat16::from_bits());
    if (!std::isnan(half)) ASSERT_EQ(HalfToFloat(narrow), half);
    if (!std::isnan(bfloat)) ASSERT_EQ(BFloat16ToFloat(narrow), bfloat);
  }
}

TEST(WireDatatypeTest, ManifestNamesMapToWireNames) {
  EXPECT_EQ(WireDatatype("bool"), "BOOL");
  EXPECT_EQ(WireDatatype("uint8"), "UINT8");
  EXPECT_EQ(WireDatatype("int8"), "INT8");
  EXPECT_EQ(WireDatatype("int16"), "INT16");
  EXPECT_EQ(WireDatatype("int32"), "INT32");
  EXPECT_EQ(WireDatatype("int64"), "INT64");
  EXPECT_EQ(WireDatatype("float16"), "FP16");
  EXPECT_EQ(WireDatatype("bfloat16"), "BF16");
  EXPECT_EQ(WireDatatype("float32"), "FP32");
  EXPECT_EQ(WireDatatype("float64"), "FP64");
  EXPECT_EQ(WireDatatype("uint16"), "UINT16");
  EXPECT_EQ(WireDatatype("uint32"), "UINT32");
  EXPECT_EQ(WireDatatype("uint64"), "UINT64");
  // Wire names and torch's aliases are not manifest names.
  EXPECT_EQ(WireDatatype("FP32"), "");
  EXPECT_EQ(WireDatatype("float"), "");
  EXPECT_EQ(WireDatatype(""), "");
}

TEST(TensorCodecTest, RawContentsRoundTripForEveryDtype) {
  for (const DtypeInfo& info : TensorDtypes()) {
    SCOPED_TRACE(info.name);
    const at::Tensor sample = Sample(info.dtype);
    ASSERT_EQ(sample.scalar_type(), ScalarTypeOf(info.dtype));
    const Manifest manifest = OneTensorManifest(info.name);

    inference::ModelInferResponse response;
    ASSERT_OK(EncodeOutputs({sample}, manifest, inference::ModelInferRequest(), &response));
    ASSERT_EQ(response.outputs_size(), 1);
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    EXPECT_EQ(response.outputs(0).name(), "y");
    EXPECT_EQ(response.outputs(0).datatype(), info.wire);
    EXPECT_THAT(response.outputs(0).shape(), ElementsAre(2, 3));
    EXPECT_EQ(response.raw_output_contents(0).size(), 6u * info.element_size);
    EXPECT_EQ(response.raw_output_contents(0), Bytes(sample));

    // What the server sent, sent back as an input.
    inference::ModelInferRequest request;
    const auto& shape = response.outputs(0).shape();
    AddInput(request, "x", response.outputs(0).datatype(),
             std::vector<int64_t>(shape.begin(), shape.end()));
    request.add_raw_input_contents(response.raw_output_contents(0));
    ASSERT_OK_AND_ASSIGN(std::vector<at::Tensor> inputs, DecodeTensors(request, manifest));
    ASSERT_EQ(inputs.size(), 1u);
    ExpectIdentical(inputs[0], sample);

    ASSERT_OK_AND_ASSIGN(at::Tensor direct, TensorFromRaw(info.wire, {2, 3}, Bytes(sample)));
    ExpectIdentical(direct, sample);
  }
}

// Fills `contents` with `tensor`'s values in the field the protocol gives its
// dtype; false for the dtypes that have none (FP16, BF16).
bool FillTyped(const at::Tensor& tensor, Dtype dtype, inference::InferTensorContents* contents) {
  const at::Tensor flat = tensor.flatten();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const at::Tensor value = flat[i];
    switch (dtype) {
      case Dtype::kBool:
        contents->add_bool_contents(value.item<bool>());
        break;
      case Dtype::kUint8:
        contents->add_uint_contents(value.item<uint8_t>());
        break;
      case Dtype::kUint16:
        contents->add_uint_contents(*static_cast<const uint16_t*>(value.data_ptr()));
        break;
      case Dtype::kUint32:
        contents->add_uint_contents(*static_cast<const uint32_t*>(value.data_ptr()));
        break;
      case Dtype::kUint64:
        contents->add_uint64_contents(*static_cast<const uint64_t*>(value.data_ptr()));
        break;
      case Dtype::kInt8:
      case Dtype::kInt16:
      case Dtype::kInt32:
        contents->add_int_contents(value.item<int32_t>());
        break;
      case Dtype::kInt64:
        contents->add_int64_contents(value.item<int64_t>());
        break;
      case Dtype::kFloat32:
        contents->add_fp32_contents(value.item<float>());
        break;
      case Dtype::kFloat64:
        contents->add_fp64_contents(value.item<double>());
        break;
      case Dtype::kFloat16:
      case Dtype::kBFloat16:
      case Dtype::kString:
        return false;
    }
  }
  return true;
}

TEST(TensorCodecTest, TypedContentsRoundTripForEveryDtypeWithAField) {
  int round_trips = 0;
  for (const DtypeInfo& info : TensorDtypes()) {
    SCOPED_TRACE(info.name);
    const at::Tensor sample = Sample(info.dtype);
    inference::ModelInferRequest request;
    InputTensor* input = AddInput(request, "x", info.wire, {2, 3});
    if (!FillTyped(sample, info.dtype, input->mutable_contents())) continue;
    ASSERT_OK_AND_ASSIGN(std::vector<at::Tensor> inputs,
                         DecodeTensors(request, OneTensorManifest(info.name)));
    ASSERT_EQ(inputs.size(), 1u);
    ExpectIdentical(inputs[0], sample);
    ++round_trips;
  }
  EXPECT_EQ(round_trips, 11);  // all but FP16 and BF16
}

TEST(TensorCodecTest, HalfPrecisionTravelsOnlyAsRawContents) {
  for (const char* dtype : {"float16", "bfloat16"}) {
    SCOPED_TRACE(dtype);
    const std::string wire = WireDatatype(dtype);
    inference::ModelInferRequest request;
    auto* contents = AddInput(request, "x", wire, {1, 3})->mutable_contents();
    for (float v : {1.0f, 2.0f, 3.0f}) contents->add_fp32_contents(v);
    EXPECT_THAT(DecodeInputs(request, OneTensorManifest(dtype)),
                StatusIs(StatusCode::kInvalidArgument,
                         "input \"x\": " + wire + " travels only as raw contents"));
  }
}

TEST(TensorCodecTest, TensorFromRawChecksDatatypeShapeAndSize) {
  EXPECT_THAT(TensorFromRaw("FP8", {1}, std::string(1, '\0')),
              StatusIs(StatusCode::kInvalidArgument, "unknown datatype \"FP8\""));
  // Wire names are upper case; manifest names are not wire names.
  EXPECT_THAT(TensorFromRaw("fp32", {1}, std::string(4, '\0')),
              StatusIs(StatusCode::kInvalidArgument, "unknown datatype \"fp32\""));
  EXPECT_THAT(TensorFromRaw("float32", {1}, std::string(4, '\0')),
              StatusIs(StatusCode::kInvalidArgument, "unknown datatype \"float32\""));
  EXPECT_THAT(TensorFromRaw("BYTES", {1}, std::string(8, '\0')),
              StatusIs(StatusCode::kInvalidArgument, "BYTES is not a tensor dtype"));
  EXPECT_THAT(TensorFromRaw("FP32", {2, -1}, ""),
              StatusIs(StatusCode::kInvalidArgument, "negative dimension in shape [2, -1]"));
  EXPECT_THAT(TensorFromRaw("FP32", {2, 3}, std::string(20, '\0')),
              StatusIs(StatusCode::kInvalidArgument,
                       "raw contents hold 20 bytes; shape [2, 3] of FP32 needs 24"));
  EXPECT_THAT(TensorFromRaw("INT64", {2}, std::string(24, '\0')),
              StatusIs(StatusCode::kInvalidArgument,
                       "raw contents hold 24 bytes; shape [2] of INT64 needs 16"));

  // No elements, no bytes.
  ASSERT_OK_AND_ASSIGN(at::Tensor empty, TensorFromRaw("FP32", {0, 3}, ""));
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(empty.scalar_type(), at::kFloat);
  // A scalar: no dimensions, one element.
  const double pi = 3.141592653589793;
  ASSERT_OK_AND_ASSIGN(
      at::Tensor scalar,
      TensorFromRaw("FP64", {}, std::string(reinterpret_cast<const char*>(&pi), sizeof(pi))));
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<double>(), pi);
}

// A shape's element count is checked against the contents before anything is
// allocated: a request cannot make the server allocate what it did not send.
TEST(TensorCodecTest, HugeShapesAreRefusedBeforeAnyAllocation) {
  EXPECT_THAT(TensorFromRaw("FP32", {int64_t{1} << 40, int64_t{1} << 40}, ""),
              StatusIs(StatusCode::kInvalidArgument,
                       "shape [1099511627776, 1099511627776] has too many elements"));
  EXPECT_THAT(TensorFromRaw("FP32", {int64_t{1} << 30, 1024}, ""),
              StatusIs(StatusCode::kInvalidArgument,
                       "raw contents hold 0 bytes; shape [1073741824, 1024] of FP32 needs "
                       "4398046511104"));
  Manifest manifest = TwoInputManifest();
  manifest.inputs[0].shape = {-1, -1};
  manifest.batching.batchable = false;
  inference::ModelInferRequest typed;
  AddInput(typed, "a", "FP32", {int64_t{1} << 20, int64_t{1} << 20})
      ->mutable_contents()
      ->add_fp32_contents(1.0f);
  AddTypedB(typed);
  EXPECT_THAT(DecodeInputs(typed, manifest),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"a\": 1 typed values for 1099511627776 elements"));
}

// BYTES: strings as models see them (chorus/serving/model_values.h).

Manifest StringManifest() {
  Manifest manifest;
  manifest.model_name = "words";
  manifest.inputs = {TensorSpec{"text", "string", {-1, 2}}};
  manifest.outputs = {TensorSpec{"upper", "string", {-1, 2}}, TensorSpec{"n", "int64", {-1}}};
  manifest.batching = Batching{true, 0, 4};
  return manifest;
}

// Triton's layout, written out by hand: little-endian length, then the bytes.
const std::string& FourWordsRaw() {
  static const std::string* raw = new std::string(std::string("\x02\x00\x00\x00"
                                                              "ab",
                                                              6) +
                                                  std::string("\x00\x00\x00\x00", 4) +
                                                  std::string("\x03\x00\x00\x00"
                                                              "\xff\x00z",
                                                              7) +
                                                  std::string("\x01\x00\x00\x00"
                                                              "d",
                                                              5));
  return *raw;
}
const std::vector<std::string> kFourWords = {"ab", "", std::string("\xff\x00z", 3), "d"};

TEST(TensorCodecTest, BytesInputsDecodeToNestedListsOfStr) {
  inference::ModelInferRequest raw;
  AddInput(raw, "text", "BYTES", {2, 2});
  raw.add_raw_input_contents(FourWordsRaw());
  inference::ModelInferRequest typed;
  auto* contents = AddInput(typed, "text", "BYTES", {2, 2})->mutable_contents();
  for (const std::string& word : kFourWords) contents->add_bytes_contents(word);
  for (const auto* request : {&raw, &typed}) {
    ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> inputs, DecodeInputs(*request, StringManifest()));
    ASSERT_EQ(inputs.size(), 1u);
    EXPECT_EQ(inputs[0].type()->annotation_str(), "List[List[str]]");
    ASSERT_OK_AND_ASSIGN(StringTensor text, StringTensorFromIValue(inputs[0]));
    EXPECT_THAT(text.shape, ElementsAre(2, 2));
    EXPECT_EQ(text.elements, kFourWords);
  }
  EXPECT_EQ(StringsToRaw(kFourWords), FourWordsRaw());
}

TEST(TensorCodecTest, MalformedBytesAreRejectedSayingHow) {
  struct Case {
    std::vector<int64_t> shape;
    std::string raw;
    const char* message;
  };
  const Case cases[] = {
      {{1, 2},
       std::string("\x02\x00\x00", 3),
       "raw BYTES contents end inside the length of element 0"},
      {{1, 2},
       std::string("\x09\x00\x00\x00"
                   "abc",
                   7),
       "raw BYTES element 0 claims 9 bytes; 3 are left"},
      {{1, 2}, FourWordsRaw(), "raw BYTES contents hold more than the 2 elements of shape [1, 2]"},
      {{3, 2}, FourWordsRaw(), "raw BYTES contents hold 4 elements; shape [3, 2] needs 6"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    inference::ModelInferRequest request;
    AddInput(request, "text", "BYTES", c.shape);
    request.add_raw_input_contents(c.raw);
    EXPECT_THAT(
        DecodeInputs(request, StringManifest()),
        StatusIs(StatusCode::kInvalidArgument, "input \"text\": " + std::string(c.message)));
  }
  inference::ModelInferRequest wrong_field;
  AddInput(wrong_field, "text", "BYTES", {1, 2})->mutable_contents()->add_int_contents(1);
  EXPECT_THAT(DecodeInputs(wrong_field, StringManifest()),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"text\": BYTES values travel in bytes_contents"));
  inference::ModelInferRequest too_few;
  AddInput(too_few, "text", "BYTES", {1, 2})->mutable_contents()->add_bytes_contents("a");
  EXPECT_THAT(
      DecodeInputs(too_few, StringManifest()),
      StatusIs(StatusCode::kInvalidArgument, "input \"text\": 1 typed values for 2 elements"));
  inference::ModelInferRequest as_floats;
  AddInput(as_floats, "text", "FP32", {1, 2})->mutable_contents()->add_fp32_contents(1);
  EXPECT_THAT(
      DecodeInputs(as_floats, StringManifest()),
      StatusIs(StatusCode::kInvalidArgument, "input \"text\": expected datatype BYTES, got FP32"));
}

TEST(TensorCodecTest, StringOutputsEncodeInTritonsLayout) {
  const c10::IValue upper = StringTensorToIValue({{2, 2}, kFourWords});
  inference::ModelInferResponse response;
  ASSERT_OK(EncodeOutputs({upper, ExpectedB()}, StringManifest(), inference::ModelInferRequest(),
                          &response));
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).datatype(), "BYTES");
  EXPECT_THAT(response.outputs(0).shape(), ElementsAre(2, 2));
  EXPECT_EQ(response.raw_output_contents(0), FourWordsRaw());
  EXPECT_EQ(response.outputs(1).datatype(), "INT64");
}

TEST(TensorCodecTest, StringOutputsThatDisagreeWithTheSignatureAreInternalErrors) {
  inference::ModelInferResponse response;
  EXPECT_THAT(EncodeOutputs({ExpectedA(), ExpectedB()}, StringManifest(),
                            inference::ModelInferRequest(), &response),
              StatusIs(StatusCode::kInternal,
                       "output \"upper\": the model returned float32, its signature declares "
                       "string"));
  EXPECT_THAT(EncodeOutputs({ExpectedA(), StringTensorToIValue({{1}, {"7"}})}, TwoInputManifest(),
                            inference::ModelInferRequest(), &response),
              StatusIs(StatusCode::kInternal,
                       "output \"n\": the model returned a list of str, its signature declares "
                       "int64"));
  c10::impl::GenericList ragged(c10::AnyType::get());
  ragged.push_back(c10::List<std::string>({"a", "b"}));
  ragged.push_back(c10::List<std::string>({"c"}));
  EXPECT_THAT(EncodeOutputs({ragged, ExpectedB()}, StringManifest(), inference::ModelInferRequest(),
                            &response),
              StatusIs(StatusCode::kInternal,
                       ::testing::HasSubstr("output \"upper\": element [1] of a string tensor "
                                            "has 1 items")));
}

}  // namespace
}  // namespace chorus::testing
