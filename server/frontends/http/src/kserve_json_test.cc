// The REST codec (kserve_json.h): JSON values of every datatype become the raw
// contents the core decodes, binary tensor data is split by its declared
// sizes, each malformed body is refused with what is wrong, and responses
// render as JSON values or binary data as the request asked.
#include "chorus/server/frontends/http/kserve_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

template <typename T>
std::string Raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

StatusOr<inference::ModelInferRequest> Parse(const std::string& body,
                                             std::optional<size_t> json_length = std::nullopt) {
  return ParseInferRequest(body, json_length, "m", "");
}

TEST(KserveJsonTest, JsonValuesBecomeRawContentsOfTheirDatatype) {
  ASSERT_OK_AND_ASSIGN(inference::ModelInferRequest request, Parse(R"({"id": "r1", "inputs": [
      {"name": "f", "datatype": "FP32", "shape": [2, 2], "data": [[1.5, -2], [0.25, 3]]},
      {"name": "i", "datatype": "INT8", "shape": [3], "data": [-128, 0, 127]},
      {"name": "l", "datatype": "INT64", "shape": [1], "data": [9007199254740993]},
      {"name": "b", "datatype": "BOOL", "shape": [2], "data": [true, false]},
      {"name": "h", "datatype": "FP16", "shape": [1], "data": [0.5]},
      {"name": "d", "datatype": "FP64", "shape": [1], "data": [0.1]}]})"));
  EXPECT_EQ(request.model_name(), "m");
  EXPECT_EQ(request.id(), "r1");
  ASSERT_EQ(request.raw_input_contents_size(), 6);
  EXPECT_EQ(request.raw_input_contents(0), Raw<float>({1.5f, -2.0f, 0.25f, 3.0f}));
  EXPECT_EQ(request.inputs(0).shape_size(), 2);
  EXPECT_EQ(request.raw_input_contents(1), Raw<int8_t>({-128, 0, 127}));
  EXPECT_EQ(request.raw_input_contents(2), Raw<int64_t>({9007199254740993LL}));
  EXPECT_EQ(request.raw_input_contents(3), std::string("\1\0", 2));
  EXPECT_EQ(request.raw_input_contents(4), Raw<uint16_t>({0x3800}));  // 0.5 in half precision
  EXPECT_EQ(request.raw_input_contents(5), Raw<double>({0.1}));
}

TEST(KserveJsonTest, UnsignedValuesKeepTheirWholeRange) {
  ASSERT_OK_AND_ASSIGN(inference::ModelInferRequest request, Parse(R"({"inputs": [
      {"name": "s", "datatype": "UINT16", "shape": [2], "data": [0, 65535]},
      {"name": "w", "datatype": "UINT32", "shape": [2], "data": [1, 4294967295]},
      {"name": "q", "datatype": "UINT64", "shape": [2], "data": [2, 18446744073709551615]}]})"));
  EXPECT_EQ(request.raw_input_contents(0), Raw<uint16_t>({0, 65535}));
  EXPECT_EQ(request.raw_input_contents(1), Raw<uint32_t>({1, 4294967295u}));
  EXPECT_EQ(request.raw_input_contents(2), Raw<uint64_t>({2, 18446744073709551615ull}));
  EXPECT_THAT(Parse(R"({"inputs": [
      {"name": "s", "datatype": "UINT16", "shape": [1], "data": [65536]}]})"),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"s\": value 0 (65536) does not fit its datatype"));
  EXPECT_THAT(Parse(R"({"inputs": [
      {"name": "w", "datatype": "UINT32", "shape": [1], "data": [-1]}]})"),
              StatusIs(StatusCode::kInvalidArgument,
                       "input \"w\": value 0 (-1) does not fit its datatype"));
}

TEST(KserveJsonTest, BinaryDataIsSplitByEachInputsDeclaredSize) {
  const std::string header = R"({"inputs": [
      {"name": "a", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}},
      {"name": "b", "datatype": "INT32", "shape": [1], "data": [7]},
      {"name": "c", "datatype": "UINT8", "shape": [3], "parameters": {"binary_data_size": 3}}],
      "outputs": [{"name": "y", "parameters": {"binary_data": true}}]})";
  const std::string body = header + Raw<float>({1.0f, 2.0f}) + "xyz";
  ASSERT_OK_AND_ASSIGN(inference::ModelInferRequest request, Parse(body, header.size()));
  EXPECT_EQ(request.raw_input_contents(0), Raw<float>({1.0f, 2.0f}));
  EXPECT_EQ(request.raw_input_contents(1), Raw<int32_t>({7}));
  EXPECT_EQ(request.raw_input_contents(2), "xyz");
  ASSERT_EQ(request.outputs_size(), 1);
  EXPECT_TRUE(request.outputs(0).parameters().at("binary_data").bool_param());
}

TEST(KserveJsonTest, EachMalformedBodyIsRefusedWithWhatIsWrong) {
  const struct {
    std::string body;
    std::string message;
  } cases[] = {
      {"{\"inputs\": [", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {"{}", "no \"inputs\" array"},
      {R"({"inputs": [{"datatype": "FP32", "shape": [1], "data": [1]}]})", "without a \"name\""},
      {R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}]})", "no \"datatype\""},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]})", "no \"shape\""},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1], "data": [1]}]})",
       "not a list of sizes"},
      {R"({"inputs": [{"name": "x", "datatype": "FP33", "shape": [1], "data": [1]}]})",
       "unknown datatype \"FP33\""},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]})", "neither \"data\""},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1]}]})",
       "1 values for shape [2] (2 elements)"},
      {R"({"inputs": [{"name": "x", "datatype": "INT8", "shape": [1], "data": [128]}]})",
       "value 0 (128) does not fit"},
      {R"({"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1.5]}]})",
       "not an integer"},
      {R"({"inputs": [{"name": "x", "datatype": "BOOL", "shape": [1], "data": [1]}]})",
       "not a boolean"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [null]}]})",
       "not a number"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1],
           "parameters": {"binary_data_size": 4}}]})",
       "exceeds the 0 bytes"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "parameters":
           {"shared_memory_region": "r", "shared_memory_byte_size": 4, "binary_data_size": 4}}]})",
       "input \"x\": names both a shared_memory_region and a binary_data_size"},
      {R"({"id": 5, "inputs": []})", "\"id\" is not a string"},
      {R"({"inputs": [], "outputs": [{"binary_data": true}]})", "output without a \"name\""},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(Parse(c.body), StatusIs(StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.body;
  }
  EXPECT_THAT(Parse("{\"inputs\": []}" + std::string(4, '\0'), 14),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("4 bytes of binary data")));
  EXPECT_THAT(Parse("{}", 3), StatusIs(StatusCode::kInvalidArgument, HasSubstr("exceeds")));
}

TEST(KserveJsonTest, RequestParametersReachTheCoreTyped) {
  ASSERT_OK_AND_ASSIGN(inference::ModelInferRequest request, Parse(R"({
      "inputs": [{"name": "t", "datatype": "BYTES", "shape": [1], "data": ["hi"]}],
      "parameters": {"max_tokens": 8, "temperature": 0.5, "stop": "\n", "stream": false}})"));
  const auto& parameters = request.parameters();
  EXPECT_EQ(parameters.at("max_tokens").int64_param(), 8);
  EXPECT_DOUBLE_EQ(parameters.at("temperature").double_param(), 0.5);
  EXPECT_EQ(parameters.at("stop").string_param(), "\n");
  EXPECT_FALSE(parameters.at("stream").bool_param());
  EXPECT_EQ(parameters.at("stream").parameter_choice_case(), inference::InferParameter::kBoolParam);

  StatusOr<inference::ModelInferRequest> nested = Parse(R"({
      "inputs": [{"name": "t", "datatype": "BYTES", "shape": [1], "data": ["hi"]}],
      "parameters": {"stop": ["a", "b"]}})");
  EXPECT_EQ(nested.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(nested.status().message(), HasSubstr("\"stop\" is not a bool, a number or a string"));
}

TEST(KserveJsonTest, AGenerateRequestIsAPromptAndItsParameters) {
  ASSERT_OK_AND_ASSIGN(GenerateRequest request, ParseGenerateRequest(R"({
      "text_input": "Once", "max_tokens": 4, "stream": true,
      "parameters": {"temperature": 0.5, "stop": ["\n", "."]}})"));
  EXPECT_EQ(request.prompt, "Once");
  EXPECT_EQ(Json::parse(request.parameters_json),
            Json::parse(R"({"max_tokens": 4, "temperature": 0.5, "stop": ["\n", "."]})"));
  EXPECT_THAT(ParseGenerateRequest(R"({"max_tokens": 4})").status().message(),
              HasSubstr("text_input"));
  EXPECT_THAT(ParseGenerateRequest(R"({"text_input": "x", "top_k": {"a": 1}})").status().message(),
              HasSubstr("\"top_k\" is not"));
  EXPECT_EQ(Json::parse(RenderGenerateResponse("m", "1", "hi")),
            Json::parse(R"({"model_name": "m", "model_version": "1", "text_output": "hi"})"));
}

TEST(KserveJsonTest, ResponsesRenderValuesOrBinaryAsAsked) {
  inference::ModelInferRequest request;
  request.add_outputs()->set_name("b");
  (*request.mutable_outputs(0)->mutable_parameters())["binary_data"].set_bool_param(true);
  inference::ModelInferResponse response;
  response.set_model_name("m");
  response.set_model_version("1");
  response.set_id("r1");
  for (const char* name : {"a", "b"}) {
    auto* out = response.add_outputs();
    out->set_name(name);
    out->set_datatype("FP16");
    out->add_shape(2);
    response.add_raw_output_contents(Raw<uint16_t>({0x3800, 0xc000}));  // 0.5, -2
  }
  RestBody body = RenderInferResponse(request, response);
  ASSERT_TRUE(body.json_length.has_value());
  Json doc = Json::parse(body.content.substr(0, *body.json_length));
  EXPECT_EQ(doc["id"], "r1");
  EXPECT_EQ(doc["outputs"][0]["data"], Json({0.5, -2.0}));
  EXPECT_EQ(doc["outputs"][1]["parameters"]["binary_data_size"], 4);
  EXPECT_FALSE(doc["outputs"][1].contains("data"));
  EXPECT_EQ(body.content.substr(*body.json_length), Raw<uint16_t>({0x3800, 0xc000}));

  RestBody plain = RenderInferResponse(inference::ModelInferRequest(), response);
  EXPECT_FALSE(plain.json_length.has_value());
  EXPECT_EQ(Json::parse(plain.content)["outputs"][1]["data"], Json({0.5, -2.0}));
}

TEST(KserveJsonTest, StringsTravelAsJsonStrings) {
  ASSERT_OK_AND_ASSIGN(inference::ModelInferRequest request, Parse(R"({"inputs": [
      {"name": "t", "datatype": "BYTES", "shape": [1, 2], "data": [["h\u00e9", ""]]}]})"));
  ASSERT_EQ(request.raw_input_contents_size(), 1);
  EXPECT_EQ(request.raw_input_contents(0),
            std::string("\x03\x00\x00\x00h\xc3\xa9", 7) + std::string("\x00\x00\x00\x00", 4));
  EXPECT_THAT(Parse(R"({"inputs": [{"name": "t", "datatype": "BYTES", "shape": [1],
                        "data": [7]}]})"),
              StatusIs(StatusCode::kInvalidArgument, "input \"t\": value 0 (7) is not a string"));

  inference::ModelInferResponse response;
  auto* out = response.add_outputs();
  out->set_name("t");
  out->set_datatype("BYTES");
  out->add_shape(2);
  // The second element is not UTF-8: JSON gets U+FFFD for its bad byte.
  response.add_raw_output_contents(std::string("\x02\x00\x00\x00ok\x02\x00\x00\x00\xffz", 12));
  Json doc = Json::parse(RenderInferResponse(inference::ModelInferRequest(), response).content);
  EXPECT_EQ(doc["outputs"][0]["data"], Json({"ok", "\xef\xbf\xbdz"}));
  EXPECT_EQ(doc["outputs"][0]["shape"], Json({2}));
}

TEST(KserveJsonTest, ConfigJsonWritesSixtyFourBitIntegersAsNumbers) {
  inference::ModelConfigResponse config;
  config.mutable_config()->set_name("m");
  config.mutable_config()->set_max_batch_size(8);
  auto* input = config.mutable_config()->add_input();
  input->set_name("x");
  input->add_dims(4);
  config.mutable_config()->mutable_dynamic_batching()->set_max_queue_delay_microseconds(100);
  Json doc = Json::parse(RenderModelConfig(config));
  EXPECT_EQ(doc["input"][0]["dims"], Json({4}));
  EXPECT_EQ(doc["dynamic_batching"]["max_queue_delay_microseconds"], 100);
  EXPECT_EQ(doc["max_batch_size"], 8);
  EXPECT_EQ(Json::parse(RenderError(InvalidArgumentError("bad \"x\""))),
            Json({{"error", "bad \"x\""}}));
}

}  // namespace
}  // namespace chorus
