// libFuzzer target: arbitrary bytes as the body of /v1/completions,
// /v1/chat/completions and /v1/embeddings. Parsing must return an error or a
// request, never crash, hang or leak; a request's parameters and messages are
// JSON the engines can read, and its answer renders.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "chorus/server/frontends/openai/openai_api.h"

namespace {

void CheckJson(const std::string& text) {
  if (!text.empty() && !nlohmann::json::accept(text)) __builtin_trap();
}

void CheckGeneration(std::string_view body, chorus::OpenAiEndpoint endpoint) {
  chorus::StatusOr<chorus::OpenAiRequest> request = chorus::ParseOpenAiRequest(body, endpoint);
  if (!request.ok()) {
    CheckJson(chorus::RenderOpenAiError(request.status()));
    return;
  }
  CheckJson(request->parameters_json);
  CheckJson(request->messages_json);
  chorus::OpenAiRenderer renderer(*request, "cmpl-fuzz", 0);
  chorus::GenerationChunk chunk;
  chunk.text = request->prompt.substr(0, 64);  // any bytes, as a tokenizer may give
  chunk.finish_reason = "stop";
  chunk.new_tokens = chunk.completion_tokens = 1;
  CheckJson(renderer.Body(chunk.text, chunk));
  (void)renderer.Events(chunk);
  (void)renderer.Close(chunk);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  CheckGeneration(body, chorus::OpenAiEndpoint::kCompletions);
  CheckGeneration(body, chorus::OpenAiEndpoint::kChatCompletions);
  chorus::StatusOr<chorus::EmbeddingsRequest> embeddings = chorus::ParseEmbeddingsRequest(body);
  if (embeddings.ok() && embeddings->model.empty()) __builtin_trap();
  return 0;
}
