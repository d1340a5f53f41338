// ResponseCache: keys tell apart whatever changes an answer, answers come back
// whole, and the byte budget evicts the least recently used.
#include "chorus/server/models/response_cache.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace chorus {
namespace {

Manifest OneInput() {
  Manifest manifest;
  manifest.inputs = {TensorSpec{"x", "float32", {-1, 2}}};
  manifest.outputs = {TensorSpec{"y", "float32", {-1, 2}}};
  return manifest;
}

std::string KeyOf(const at::Tensor& x, uint64_t serial = 1, int classes = 0) {
  inference::ModelInferRequest request;
  if (classes > 0) {
    auto* output = request.add_outputs();
    output->set_name("y");
    (*output->mutable_parameters())["classification"].set_int64_param(classes);
  }
  return ResponseCache::Key(serial, OneInput(), request, {c10::IValue(x)});
}

inference::ModelInferResponse Answer(const std::string& bytes) {
  inference::ModelInferResponse response;
  auto* output = response.add_outputs();
  output->set_name("y");
  output->set_datatype("FP32");
  output->add_shape(static_cast<int64_t>(bytes.size() / 4));
  response.add_raw_output_contents(bytes);
  return response;
}

TEST(ResponseCacheTest, KeysDifferWithValuesDtypesShapesModelsAndOutputsAsked) {
  const at::Tensor x = at::arange(4, at::kFloat).reshape({2, 2});
  EXPECT_EQ(KeyOf(x), KeyOf(x.clone()));
  EXPECT_EQ(KeyOf(x), KeyOf(x.t().contiguous().t().contiguous()));
  EXPECT_NE(KeyOf(x), KeyOf(x + 1));
  EXPECT_NE(KeyOf(x), KeyOf(x.to(at::kDouble)));
  EXPECT_NE(KeyOf(x), KeyOf(x.reshape({4, 1})));
  EXPECT_NE(KeyOf(x), KeyOf(x, /*serial=*/2));
  EXPECT_NE(KeyOf(x), KeyOf(x, 1, /*classes=*/3));
  EXPECT_NE(KeyOf(x, 1, 3), KeyOf(x, 1, 2));
  EXPECT_EQ(KeyOf(x).size(), 32u);  // SHA-256
}

// A request of `x` (float32, every row) as the wire carries it in raw_input_contents.
inference::ModelInferRequest RawRequest(const at::Tensor& x, const std::string& name = "x") {
  inference::ModelInferRequest request;
  auto* input = request.add_inputs();
  input->set_name(name);
  input->set_datatype("FP32");
  for (int64_t size : x.sizes()) input->add_shape(size);
  const at::Tensor values = x.contiguous();
  request.add_raw_input_contents(
      std::string(static_cast<const char*>(values.data_ptr()), values.numel() * 4));
  return request;
}

TEST(ResponseCacheTest, TheWireKeyOfARawRequestIsTheKeyOfItsDecodedInputs) {
  const at::Tensor x = at::arange(6, at::kFloat).reshape({3, 2});
  inference::ModelInferRequest request = RawRequest(x);
  std::optional<std::string> wire = ResponseCache::WireKey(1, OneInput(), request);
  ASSERT_TRUE(wire.has_value());
  EXPECT_EQ(*wire, ResponseCache::Key(1, OneInput(), request, {c10::IValue(x)}));
  EXPECT_NE(*wire, *ResponseCache::WireKey(1, OneInput(), RawRequest(x + 1)));
  EXPECT_NE(*wire, *ResponseCache::WireKey(1, OneInput(), RawRequest(x.reshape({2, 3}))));
  EXPECT_NE(*wire, *ResponseCache::WireKey(2, OneInput(), request));
  // Bytes that do not fill the shape: a key, but never that of a valid request.
  inference::ModelInferRequest short_bytes = request;
  short_bytes.mutable_raw_input_contents(0)->resize(20);
  EXPECT_NE(*wire, ResponseCache::WireKey(1, OneInput(), short_bytes).value());
  // What only decoding can read: no wire key.
  inference::ModelInferRequest typed = request;
  typed.clear_raw_input_contents();
  typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
  EXPECT_FALSE(ResponseCache::WireKey(1, OneInput(), typed).has_value());
  inference::ModelInferRequest in_memory = request;
  (*in_memory.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param(
      "r");
  EXPECT_FALSE(ResponseCache::WireKey(1, OneInput(), in_memory).has_value());
  EXPECT_FALSE(ResponseCache::WireKey(1, OneInput(), RawRequest(x, "other")).has_value());
  inference::ModelInferRequest twice = request;
  *twice.add_inputs() = request.inputs(0);
  twice.add_raw_input_contents(request.raw_input_contents(0));
  EXPECT_FALSE(ResponseCache::WireKey(1, OneInput(), twice).has_value());
}

TEST(ResponseCacheTest, AnswersComeBackWholeAndTheLeastRecentlyUsedGoFirst) {
  const std::string a(1000, 'a'), b(1000, 'b'), c(1000, 'c');
  // Room for two answers of ~1.3 KB each (outputs, key and bookkeeping), not three.
  ResponseCache cache(2 * 1400);
  cache.Insert("ka", Answer(a));
  cache.Insert("kb", Answer(b));
  inference::ModelInferResponse got;
  ASSERT_TRUE(cache.Lookup("ka", &got));  // "ka" is now the most recently used
  EXPECT_EQ(got.raw_output_contents(0), a);
  EXPECT_EQ(got.outputs(0).name(), "y");
  EXPECT_EQ(got.outputs(0).shape(0), 250);
  cache.Insert("kc", Answer(c));  // evicts "kb"
  inference::ModelInferResponse none;
  EXPECT_FALSE(cache.Lookup("kb", &none));
  EXPECT_EQ(none.outputs_size(), 0);
  EXPECT_TRUE(cache.Lookup("ka", &got));
  EXPECT_TRUE(cache.Lookup("kc", &got));
  EXPECT_LE(cache.bytes(), 2u * 1400);
  // An answer larger than the whole budget is not kept (and evicts nothing).
  cache.Insert("huge", Answer(std::string(5000, 'h')));
  EXPECT_FALSE(cache.Lookup("huge", &got));
  EXPECT_TRUE(cache.Lookup("ka", &got));
}

}  // namespace
}  // namespace chorus
