// OpenAI's completions, chat completions and embeddings API, as JSON: request
// bodies parsed into what chorus' generation engines and models take, answers
// and server-sent event chunks rendered. No transport here (openai_service.h serves it over
// HTTP). docs/server.md lists the fields and what chorus does with each.
#ifndef CHORUS_SERVER_FRONTENDS_OPENAI_OPENAI_API_H_
#define CHORUS_SERVER_FRONTENDS_OPENAI_OPENAI_API_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/serving/generation_request.h"

namespace chorus {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;
  std::string prompt;           // /v1/completions
  std::string messages_json;    // /v1/chat/completions: [{role, content}], content as text
  std::string parameters_json;  // chorus.generation.SamplingParams' fields
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the counts
};

// The request in `body` for `endpoint`. INVALID_ARGUMENT naming the field for
// malformed JSON, a missing model, prompt or messages, a value of the wrong
// type, a field OpenAI does not define, or one chorus does not implement
// with a value other than its neutral one (n > 1, logprobs, tools, ...).
StatusOr<OpenAiRequest> ParseOpenAiRequest(std::string_view body, OpenAiEndpoint endpoint);

// Renders one request's answer: the whole body, or its stream's events.
// `id` is the response's id, `created` its Unix time. Not thread-safe.
class OpenAiRenderer {
 public:
  OpenAiRenderer(const OpenAiRequest& request, std::string id, int64_t created);

  // The non-streamed body: `text`, why it ended and the token counts.
  std::string Body(const std::string& text, const GenerationChunk& last) const;
  // The server-sent events for one step's chunk ("" when it carries nothing):
  // the first of a chat stream also names the assistant's role.
  std::string Events(const GenerationChunk& chunk);
  // The events that close a stream after `last`: the usage chunk, if asked
  // for, then "[DONE]".
  std::string Close(const GenerationChunk& last) const;

 private:
  const OpenAiEndpoint endpoint_;
  const bool include_usage_;
  const std::string id_;
  const std::string model_;
  const int64_t created_;
  bool role_sent_ = false;
};

// POST /v1/embeddings: texts to turn into vectors.
struct EmbeddingsRequest {
  std::string model;
  std::vector<std::string> inputs;  // `input`: one string or a list of them
  bool base64 = false;              // encoding_format "base64": little-endian fp32
};

// The request in `body`. INVALID_ARGUMENT naming the field for malformed
// JSON, a missing model or input, an input that is not text (token ids), an
// encoding_format other than float and base64, `dimensions` (not supported),
// or a field OpenAI does not define.
StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(std::string_view body);

// The answer: `rows` vectors of `dim` floats each (row-major in `vectors`),
// `prompt_tokens` their input tokens in all.
std::string RenderEmbeddings(const EmbeddingsRequest& request, const float* vectors, int64_t rows,
                             int64_t dim, int64_t prompt_tokens);

// An error as OpenAI's clients read it: {"error": {"message", "type",
// "param", "code"}}.
std::string RenderOpenAiError(const Status& status);
// The same for an error that already has its HTTP status.
std::string RenderOpenAiError(const std::string& message, int http_status);
// The same as one server-sent event, for an error in the middle of a stream.
std::string OpenAiErrorEvent(const Status& status);

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_OPENAI_OPENAI_API_H_
