// Test support for tensor_codec_test: tensors as raw contents, requests built
// input by input, and the two manifests (one tensor, two inputs) the tests of
// every file decode and encode against.
#ifndef CHORUS_SERVER_MODELS_TENSOR_CODEC_TEST_SUPPORT_H_
#define CHORUS_SERVER_MODELS_TENSOR_CODEC_TEST_SUPPORT_H_

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/inference/grpc_service.pb.h"
#include "chorus/package/manifest.h"
#include "chorus/server/models/tensor_codec.h"

namespace chorus::testing {

using InputTensor = inference::ModelInferRequest::InferInputTensor;

// A tensor's bytes, row-major: what raw contents carry.
inline std::string Bytes(const at::Tensor& tensor) {
  const at::Tensor contiguous = tensor.contiguous();
  return std::string(static_cast<const char*>(contiguous.data_ptr()),
                     contiguous.numel() * contiguous.element_size());
}

// Same dtype, same shape, same bytes.
inline void ExpectIdentical(const at::Tensor& got, const at::Tensor& want) {
  EXPECT_EQ(got.scalar_type(), want.scalar_type());
  EXPECT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(Bytes(got), Bytes(want));
}

// DecodeInputs for requests of tensors only.
inline StatusOr<std::vector<at::Tensor>> DecodeTensors(const inference::ModelInferRequest& request,
                                                       const Manifest& manifest) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<c10::IValue> values, DecodeInputs(request, manifest));
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& value : values) tensors.push_back(value.toTensor());
  return tensors;
}

// A manifest with one input "x" and one output "y" of `dtype`, batched along
// dim 0 (up to 4).
inline Manifest OneTensorManifest(const std::string& dtype) {
  Manifest manifest;
  manifest.model_name = "codec";
  manifest.inputs = {TensorSpec{"x", dtype, {-1, 3}}};
  manifest.outputs = {TensorSpec{"y", dtype, {-1, 3}}};
  manifest.batching = Batching{true, 0, 4};
  return manifest;
}

// Inputs a: float32 [-1, 2] and b: int64 [-1]; outputs y: float32 [-1, 2] and
// n: int64 [-1]; batches of up to 4 along dim 0.
inline Manifest TwoInputManifest() {
  Manifest manifest;
  manifest.model_name = "pair";
  manifest.inputs = {TensorSpec{"a", "float32", {-1, 2}}, TensorSpec{"b", "int64", {-1}}};
  manifest.outputs = {TensorSpec{"y", "float32", {-1, 2}}, TensorSpec{"n", "int64", {-1}}};
  manifest.batching = Batching{true, 0, 4};
  return manifest;
}

inline InputTensor* AddInput(inference::ModelInferRequest& request, const std::string& name,
                             const std::string& datatype, const std::vector<int64_t>& shape) {
  InputTensor* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t d : shape) input->add_shape(d);
  return input;
}

// a = [[1.5, -2], [3, 4]] and b = [7, 8], as typed contents.
inline void AddTypedA(inference::ModelInferRequest& request) {
  auto* contents = AddInput(request, "a", "FP32", {2, 2})->mutable_contents();
  for (float v : {1.5f, -2.0f, 3.0f, 4.0f}) contents->add_fp32_contents(v);
}
inline void AddTypedB(inference::ModelInferRequest& request) {
  auto* contents = AddInput(request, "b", "INT64", {2})->mutable_contents();
  for (int64_t v : {7, 8}) contents->add_int64_contents(v);
}

inline const at::Tensor& ExpectedA() {
  static const at::Tensor* a =
      new at::Tensor(at::tensor({1.5f, -2.0f, 3.0f, 4.0f}).reshape({2, 2}));
  return *a;
}
inline const at::Tensor& ExpectedB() {
  static const at::Tensor* b =
      new at::Tensor(at::tensor(std::vector<int64_t>{7, 8}, at::dtype(at::kLong)));
  return *b;
}

}  // namespace chorus::testing

#endif  // CHORUS_SERVER_MODELS_TENSOR_CODEC_TEST_SUPPORT_H_
