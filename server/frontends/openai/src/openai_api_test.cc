// OpenAI's request bodies become a prompt or chat messages and sampling
// parameters; fields chorus does not implement are refused unless neutral;
// answers and stream chunks render as OpenAI's clients read them.
#include "chorus/server/frontends/openai/openai_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

StatusOr<OpenAiRequest> Completion(const std::string& body) {
  return ParseOpenAiRequest(body, OpenAiEndpoint::kCompletions);
}
StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return ParseOpenAiRequest(body, OpenAiEndpoint::kChatCompletions);
}

// The JSON of each "data:" event in `events` ("[DONE]" as a string).
std::vector<Json> DataEvents(const std::string& events) {
  std::vector<Json> out;
  size_t at = 0;
  while ((at = events.find("data: ", at)) != std::string::npos) {
    const size_t end = events.find("\n\n", at);
    const std::string data = events.substr(at + 6, end - at - 6);
    out.push_back(data == "[DONE]" ? Json("[DONE]") : Json::parse(data));
    at = end;
  }
  return out;
}

TEST(OpenAiApiTest, ACompletionBecomesPromptAndSamplingParameters) {
  ASSERT_OK_AND_ASSIGN(OpenAiRequest request, Completion(R"({
      "model": "llama3", "prompt": "Once upon", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "seed": 42, "stop": ["\n"], "top_k": 5, "n": 1, "user": "u",
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": null})"));
  EXPECT_EQ(request.model, "llama3");
  EXPECT_EQ(request.prompt, "Once upon");
  EXPECT_TRUE(request.messages_json.empty());
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.include_usage);
  EXPECT_EQ(Json::parse(request.parameters_json),
            Json::parse(R"({"max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 42,
                            "stop": ["\n"], "top_k": 5})"));
}

TEST(OpenAiApiTest, AChatTakesTextPartsAndRunsToTheContextUnlessCapped) {
  ASSERT_OK_AND_ASSIGN(OpenAiRequest request, Chat(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello, "},
                                   {"type": "text", "text": "there"}], "name": "ann"}]})"));
  EXPECT_EQ(Json::parse(request.messages_json),
            Json::parse(R"([{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hello, there"}])"));
  EXPECT_EQ(Json::parse(request.parameters_json), Json::parse(R"({"max_tokens": null})"));
  ASSERT_OK_AND_ASSIGN(request, Chat(R"({"model": "m", "max_completion_tokens": 3,
      "messages": [{"role": "user", "content": "hi"}]})"));
  EXPECT_EQ(Json::parse(request.parameters_json), Json::parse(R"({"max_tokens": 3})"));
}

TEST(OpenAiApiTest, ResponseFormatsAndVllmsGuidedFieldsBecomeOneStructuredSpec) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("response_format": {"type": "text"})", "null"},
      {R"("response_format": {"type": "json_object"})", R"({"json_object": true})"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "p",
          "strict": true, "schema": {"type": "object"}}})",
       R"({"json": {"type": "object"}})"},
      {R"("structured_outputs": {"regex": "[0-9]+"})", R"({"regex": "[0-9]+"})"},
      {R"("guided_json": {"type": "integer"})", R"({"json": {"type": "integer"}})"},
      {R"("guided_regex": "a|b")", R"({"regex": "a|b"})"},
      {R"("guided_choice": ["yes", "no"])", R"({"choice": ["yes", "no"]})"},
      {R"("guided_grammar": "start: \"x\"")", R"({"grammar": "start: \"x\""})"},
  };
  for (const auto& [field, spec] : cases) {
    for (bool chat : {false, true}) {
      const std::string body =
          std::string(R"({"model": "m", )") +
          (chat ? R"("messages": [{"role": "user", "content": "x"}], )" : R"("prompt": "x", )") +
          field + "}";
      StatusOr<OpenAiRequest> request = chat ? Chat(body) : Completion(body);
      ASSERT_TRUE(request.ok()) << body << ": " << request.status().message();
      EXPECT_EQ(Json::parse(request->parameters_json).value("structured_outputs", Json()),
                Json::parse(spec))
          << body;
    }
  }
}

TEST(OpenAiApiTest, MalformedOrUnsupportedRequestsSayWhichField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not a JSON object"},
      {R"({"prompt": "x"})", "'model' is required"},
      {R"({"model": "m"})", "'prompt' is required"},
      {R"({"model": 3, "prompt": "x"})", "'model' must be a string"},
      {R"({"model": "m", "prompt": ["a", "b"]})", "one prompt per request"},
      {R"({"model": "m", "prompt": [1, 2]})", "token ids"},
      {R"({"model": "m", "prompt": "x", "n": 2})", "'n' must be 1"},
      {R"({"model": "m", "prompt": "x", "logprobs": 3})", "'logprobs' is not supported"},
      {R"({"model": "m", "prompt": "x", "frequency_penalty": 0.5})", "penalties"},
      {R"({"model": "m", "prompt": "x", "best_of": 2})", "'best_of' must be 1"},
      {R"({"model": "m", "prompt": "x", "stream": "yes"})", "'stream' must be a bool"},
      {R"({"model": "m", "prompt": "x", "messages": []})", "unrecognized request argument"},
      {R"({"model": "m", "prompt": "x", "temprature": 1})", "'temprature'"},
      {R"({"model": "m", "prompt": "x", "stream_options": {"x": 1}})", "stream_options.x"},
      {R"({"model": "m", "prompt": "x", "response_format": {"type": "yaml"}})",
       "'response_format.type' must be text, json_object or json_schema"},
      {R"({"model": "m", "prompt": "x", "response_format": {"type": 3}})",
       "'response_format.type' must be text, json_object or json_schema"},
      {R"({"model": "m", "prompt": "x", "response_format": {"type": "json_schema"}})",
       "'response_format.json_schema.schema' must be a JSON schema object"},
      {R"({"model": "m", "prompt": "x", "guided_regex": "a", "guided_choice": ["a"]})",
       "is a second constraint"},
  };
  for (const auto& [body, message] : cases) {
    StatusOr<OpenAiRequest> request = Completion(body);
    EXPECT_EQ(request.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(request.status().message(), HasSubstr(message)) << body;
  }
  const std::vector<std::pair<std::string, std::string>> chat_cases = {
      {R"({"model": "m"})", "'messages' is required"},
      {R"({"model": "m", "messages": []})", "non-empty list"},
      {R"({"model": "m", "messages": [{"content": "x"}]})", "messages[0]"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "only text parts"},
      {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": 1}]}]})",
       "only text parts"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function"}]})",
       "no tool calling"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "prompt": "x"})",
       "unrecognized"},
  };
  for (const auto& [body, message] : chat_cases) {
    StatusOr<OpenAiRequest> request = Chat(body);
    EXPECT_EQ(request.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(request.status().message(), HasSubstr(message)) << body;
  }
}

TEST(OpenAiApiTest, EmbeddingsTakeTextAndRenderFloatsOrBase64) {
  ASSERT_OK_AND_ASSIGN(EmbeddingsRequest request, ParseEmbeddingsRequest(R"({
      "model": "bert", "input": ["a", "b c"], "encoding_format": "float", "user": "u"})"));
  EXPECT_EQ(request.model, "bert");
  EXPECT_EQ(request.inputs, (std::vector<std::string>{"a", "b c"}));
  EXPECT_FALSE(request.base64);
  const float vectors[] = {0.5f, -1.0f, 0.25f, 2.0f};
  const Json floats = Json::parse(RenderEmbeddings(request, vectors, 2, 2, 7));
  EXPECT_EQ(floats["object"], "list");
  EXPECT_EQ(floats["data"][1]["embedding"], Json::parse("[0.25, 2.0]"));
  EXPECT_EQ(floats["data"][1]["index"], 1);
  EXPECT_EQ(floats["usage"], Json::parse(R"({"prompt_tokens": 7, "total_tokens": 7})"));
  ASSERT_OK_AND_ASSIGN(
      request,
      ParseEmbeddingsRequest(R"({"model": "m", "input": "one", "encoding_format": "base64"})"));
  EXPECT_EQ(request.inputs, (std::vector<std::string>{"one"}));
  // 0.5f and -1.0f, little-endian.
  EXPECT_EQ(Json::parse(RenderEmbeddings(request, vectors, 1, 2, 1))["data"][0]["embedding"],
            "AAAAPwAAgL8=");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input": "x"})", "'model' is required"},
      {R"({"model": "m"})", "'input' is required"},
      {R"({"model": "m", "input": [[1, 2]]})", "token ids"},
      {R"({"model": "m", "input": []})", "non-empty list of strings"},
      {R"({"model": "m", "input": "x", "encoding_format": "int8"})", "'encoding_format' must be"},
      {R"({"model": "m", "input": "x", "dimensions": 8})", "'dimensions' is not supported"},
      {R"({"model": "m", "input": "x", "truncate": 8})", "unrecognized request argument"},
  };
  for (const auto& [body, message] : cases) {
    EXPECT_THAT(ParseEmbeddingsRequest(body).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(message)))
        << body;
  }
}

GenerationChunk Chunk(std::string text, std::string finish_reason = "") {
  GenerationChunk chunk;
  chunk.text = std::move(text);
  chunk.finish_reason = std::move(finish_reason);
  chunk.prompt_tokens = 5;
  chunk.completion_tokens = 3;
  return chunk;
}

TEST(OpenAiApiTest, AChatStreamAnnouncesTheRoleThenDeltasThenUsageAndDone) {
  ASSERT_OK_AND_ASSIGN(OpenAiRequest request, Chat(R"({"model": "m", "stream": true,
      "stream_options": {"include_usage": true},
      "messages": [{"role": "user", "content": "hi"}]})"));
  OpenAiRenderer renderer(request, "chatcmpl-1", 1700000000);
  std::string events = renderer.Events(Chunk(""));
  events += renderer.Events(Chunk(""));  // nothing new: no event
  events += renderer.Events(Chunk("Hel"));
  events += renderer.Events(Chunk("lo", "stop"));
  events += renderer.Close(Chunk("", "stop"));
  std::vector<Json> data = DataEvents(events);
  ASSERT_EQ(data.size(), 5u);
  EXPECT_EQ(data[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(data[0]["id"], "chatcmpl-1");
  EXPECT_EQ(data[0]["choices"][0]["delta"], Json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_TRUE(data[0]["usage"].is_null());
  EXPECT_EQ(data[1]["choices"][0]["delta"], Json::parse(R"({"content": "Hel"})"));
  EXPECT_TRUE(data[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(data[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(data[3]["choices"].empty());
  EXPECT_EQ(data[3]["usage"], Json::parse(R"({"prompt_tokens": 5, "completion_tokens": 3,
                                              "total_tokens": 8})"));
  EXPECT_EQ(data[4], "[DONE]");
}

TEST(OpenAiApiTest, WholeAnswersAndErrorsRenderAsOpenAis) {
  ASSERT_OK_AND_ASSIGN(OpenAiRequest request, Completion(R"({"model": "m", "prompt": "x"})"));
  const Json body =
      Json::parse(OpenAiRenderer(request, "cmpl-1", 7).Body("abc", Chunk("", "length")));
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 7);
  EXPECT_EQ(body["choices"][0]["text"], "abc");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["total_tokens"], 8);

  const Json error = Json::parse(RenderOpenAiError(NotFoundError("no model \"x\"")));
  EXPECT_EQ(error["error"]["message"], "no model \"x\"");
  EXPECT_EQ(error["error"]["type"], "not_found_error");
  const std::string event = OpenAiErrorEvent(InvalidArgumentError("bad"));
  EXPECT_EQ(DataEvents(event).at(0)["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace chorus
