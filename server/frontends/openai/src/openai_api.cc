#include "chorus/server/frontends/openai/openai_api.h"

#include <absl/strings/escaping.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "chorus/server/frontends/http/http_status.h"

namespace chorus {
namespace {

using Json = nlohmann::json;

enum class Where { kBoth, kCompletions, kChat };

bool At(Where where, OpenAiEndpoint endpoint) {
  return where == Where::kBoth ||
         (where == Where::kCompletions) == (endpoint == OpenAiEndpoint::kCompletions);
}

// OpenAI's sampling fields and the chorus.generation.SamplingParams field
// each becomes (top_k and ignore_eos are vLLM's extensions, which its
// clients send in extra_body).
struct SamplingField {
  const char* name;
  const char* param;
  Where where;
};
constexpr SamplingField kSampling[] = {
    {"max_tokens", "max_tokens", Where::kBoth},
    {"max_completion_tokens", "max_tokens", Where::kChat},
    {"temperature", "temperature", Where::kBoth},
    {"top_p", "top_p", Where::kBoth},
    {"top_k", "top_k", Where::kBoth},
    {"seed", "seed", Where::kBoth},
    {"stop", "stop", Where::kBoth},
    {"ignore_eos", "ignore_eos", Where::kBoth},
};

// Fields chorus takes only at their neutral value (what leaves OpenAI's
// answer as chorus gives it), and what the field would need.
bool IsOne(const Json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }
bool IsZero(const Json& v) { return v.is_number() && v.get<double>() == 0; }
bool IsFalse(const Json& v) { return v == false || (v.is_number_integer() && v == 0); }
bool IsEmpty(const Json& v) {
  return (v.is_object() || v.is_array() || v.is_string()) && v.empty();
}
bool IsNoTool(const Json& v) { return v == "none" || v == "auto"; }
bool Anything(const Json&) { return true; }

struct NeutralField {
  const char* name;
  bool (*neutral)(const Json&);
  const char* refusal;  // why another value is refused
  Where where;
};
constexpr NeutralField kNeutral[] = {
    {"n", IsOne, "must be 1 (one choice per request)", Where::kBoth},
    {"best_of", IsOne, "must be 1", Where::kCompletions},
    {"echo", IsFalse, "must be false", Where::kCompletions},
    {"suffix", IsEmpty, "is not supported", Where::kCompletions},
    {"logprobs", IsFalse, "is not supported (log probabilities are not returned)", Where::kBoth},
    {"top_logprobs", IsZero, "is not supported", Where::kChat},
    {"presence_penalty", IsZero, "must be 0 (penalties are not implemented)", Where::kBoth},
    {"frequency_penalty", IsZero, "must be 0 (penalties are not implemented)", Where::kBoth},
    {"logit_bias", IsEmpty, "is not supported", Where::kBoth},
    {"tools", IsEmpty, "is not supported (no tool calling)", Where::kChat},
    {"tool_choice", IsNoTool, "is not supported (no tool calling)", Where::kChat},
    {"parallel_tool_calls", Anything, "", Where::kChat},
    {"store", IsFalse, "must be false", Where::kChat},
    {"user", Anything, "", Where::kBoth},
    {"metadata", Anything, "", Where::kChat},
};

// object[key] when it is a string, else "" (nlohmann's value() throws on
// another type; a field of the wrong type is then refused by its check).
std::string StringAt(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

Status FieldError(const std::string& field, const std::string& what) {
  return InvalidArgumentError("'" + field + "' " + what);
}

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Fields that hold the output to a structure, and the key of
// chorus.generation's structured_outputs spec each becomes: OpenAI's
// response_format, vLLM's structured_outputs (passed as is) and its older
// guided_* fields.
constexpr std::pair<const char*, const char*> kGuided[] = {
    {"guided_json", "json"},
    {"guided_regex", "regex"},
    {"guided_choice", "choice"},
    {"guided_grammar", "grammar"},
};

bool IsStructuredField(const std::string& name) {
  if (name == "response_format" || name == "structured_outputs") return true;
  for (const auto& [field, kind] : kGuided) {
    if (name == field) return true;
  }
  return false;
}

// The spec `name` asks for; null for response_format {"type": "text"}. The
// spec's own contents are checked where it is compiled (structured.py).
StatusOr<Json> StructuredSpecOf(const std::string& name, const Json& value) {
  if (name == "structured_outputs") return value;
  for (const auto& [field, kind] : kGuided) {
    if (name == field) return Json{{kind, value}};
  }
  const std::string type = StringAt(value, "type");
  if (type == "text") return Json();
  if (type == "json_object") return Json{{"json_object", true}};
  if (type != "json_schema") {
    return FieldError("response_format.type", "must be text, json_object or json_schema");
  }
  const Json& json_schema = value.value("json_schema", Json());
  if (!json_schema.is_object() || !json_schema.contains("schema") ||
      !json_schema["schema"].is_object()) {
    return FieldError("response_format.json_schema.schema", "must be a JSON schema object");
  }
  return Json{{"json", json_schema["schema"]}};
}

// A completions prompt: a string, or a list of exactly one.
StatusOr<std::string> PromptOf(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array() && value.size() == 1 && value[0].is_string()) {
    return value[0].get<std::string>();
  }
  return FieldError("prompt", value.is_array() && !value.empty() && !value[0].is_string()
                                  ? "as token ids is not supported: send text"
                                  : "must be a string (one prompt per request)");
}

// A message's content as text: a string, or a list of text parts.
StatusOr<std::string> ContentText(const Json& content, size_t index) {
  const std::string field = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return FieldError(field, "must be a string or a list of text parts");
  std::string text;
  for (const Json& part : content) {
    if (StringAt(part, "type") != "text" || !part.contains("text") || !part["text"].is_string()) {
      return FieldError(field, "may hold only text parts ({\"type\": \"text\", \"text\": ...})");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// The messages as [{role, content}] with content as text; chorus.generation's
// chat template checks the roles.
StatusOr<std::string> MessagesOf(const Json& value) {
  if (!value.is_array() || value.empty()) {
    return FieldError("messages", "must be a non-empty list of {role, content} objects");
  }
  Json messages = Json::array();
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& message = value[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      return FieldError("messages[" + std::to_string(i) + "]", "must be an object with a role");
    }
    CHORUS_ASSIGN_OR_RETURN(std::string text, ContentText(message.value("content", Json()), i));
    messages.push_back({{"role", message["role"]}, {"content", std::move(text)}});
  }
  return Dump(messages);
}

Status ReadStreamOptions(const Json& value, OpenAiRequest* request) {
  if (!value.is_object()) return FieldError("stream_options", "must be an object");
  for (const auto& [name, option] : value.items()) {
    if (name != "include_usage") return FieldError("stream_options." + name, "is not supported");
    if (!option.is_boolean()) return FieldError("stream_options.include_usage", "must be a bool");
    request->include_usage = option.get<bool>();
  }
  return OkStatus();
}

// Reads the non-null field `name` into `request` or `sampling`.
Status ReadField(const std::string& name, const Json& value, OpenAiRequest* request,
                 Json* sampling) {
  const OpenAiEndpoint endpoint = request->endpoint;
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  if (name == "model") {
    if (!value.is_string()) return FieldError(name, "must be a string");
    request->model = value.get<std::string>();
  } else if (name == "prompt" && !chat) {
    CHORUS_ASSIGN_OR_RETURN(request->prompt, PromptOf(value));
  } else if (name == "messages" && chat) {
    CHORUS_ASSIGN_OR_RETURN(request->messages_json, MessagesOf(value));
  } else if (name == "stream") {
    if (!value.is_boolean()) return FieldError(name, "must be a bool");
    request->stream = value.get<bool>();
  } else if (name == "stream_options") {
    return ReadStreamOptions(value, request);
  } else if (IsStructuredField(name)) {
    CHORUS_ASSIGN_OR_RETURN(Json spec, StructuredSpecOf(name, value));
    if (spec.is_null()) return OkStatus();
    if (sampling->contains("structured_outputs")) {
      return FieldError(name,
                        "is a second constraint: send one of response_format, "
                        "structured_outputs and guided_*");
    }
    (*sampling)["structured_outputs"] = std::move(spec);
  } else {
    for (const SamplingField& field : kSampling) {
      if (name == field.name && At(field.where, endpoint)) {
        (*sampling)[field.param] = value;
        return OkStatus();
      }
    }
    for (const NeutralField& field : kNeutral) {
      if (name == field.name && At(field.where, endpoint)) {
        return field.neutral(value) ? OkStatus() : FieldError(name, field.refusal);
      }
    }
    return InvalidArgumentError("unrecognized request argument supplied: '" + name + "'");
  }
  return OkStatus();
}

Json Usage(const GenerationChunk& last) {
  return {{"prompt_tokens", last.prompt_tokens},
          {"completion_tokens", last.completion_tokens},
          {"total_tokens", last.prompt_tokens + last.completion_tokens}};
}

Json FinishReason(const std::string& reason) {
  return reason.empty() ? Json(nullptr) : Json(reason);
}

std::string Event(const Json& json) { return "data: " + Dump(json) + "\n\n"; }

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return http_status < 500 ? "invalid_request_error" : "server_error";
  }
}

Json ErrorJson(const std::string& message, int http_status) {
  return {{"error",
           {{"message", message},
            {"type", ErrorType(http_status)},
            {"param", nullptr},
            {"code", nullptr}}}};
}

Json ErrorJson(const Status& status) {
  return ErrorJson(status.message(), HttpStatusCode(status.code()));
}

}  // namespace

StatusOr<OpenAiRequest> ParseOpenAiRequest(std::string_view body, OpenAiEndpoint endpoint) {
  const Json json = Json::parse(body, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgumentError("the request body is not a JSON object");
  }
  OpenAiRequest request;
  request.endpoint = endpoint;
  Json sampling = Json::object();
  for (const auto& [name, value] : json.items()) {
    if (value.is_null()) continue;  // as if absent, OpenAI's reading
    CHORUS_RETURN_IF_ERROR(ReadField(name, value, &request, &sampling));
  }
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  if (request.model.empty()) return FieldError("model", "is required");
  if (chat && request.messages_json.empty()) return FieldError("messages", "is required");
  if (!chat && !json.contains("prompt")) return FieldError("prompt", "is required");
  // A chat answer runs to the end of its turn or of the context unless capped.
  if (chat && !sampling.contains("max_tokens")) sampling["max_tokens"] = nullptr;
  request.parameters_json = Dump(sampling);
  return request;
}

OpenAiRenderer::OpenAiRenderer(const OpenAiRequest& request, std::string id, int64_t created)
    : endpoint_(request.endpoint),
      include_usage_(request.include_usage),
      id_(std::move(id)),
      model_(request.model),
      created_(created) {}

std::string OpenAiRenderer::Body(const std::string& text, const GenerationChunk& last) const {
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  Json choice = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishReason(last.finish_reason)}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  return Dump({{"id", id_},
               {"object", chat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", model_},
               {"choices", Json::array({std::move(choice)})},
               {"usage", Usage(last)}});
}

std::string OpenAiRenderer::Events(const GenerationChunk& chunk) {
  const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
  const bool announce = chat && !role_sent_;
  if (chunk.text.empty() && chunk.finish_reason.empty() && !announce) return "";
  Json choice = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishReason(chunk.finish_reason)}};
  if (chat) {
    Json delta = Json::object();
    if (announce) delta["role"] = "assistant";
    if (announce || !chunk.text.empty()) delta["content"] = chunk.text;
    choice["delta"] = std::move(delta);
    role_sent_ = true;
  } else {
    choice["text"] = chunk.text;
  }
  Json event = {{"id", id_},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", Json::array({std::move(choice)})}};
  if (include_usage_) event["usage"] = nullptr;  // only the last chunk carries it
  return Event(event);
}

std::string OpenAiRenderer::Close(const GenerationChunk& last) const {
  std::string events;
  if (include_usage_) {
    const bool chat = endpoint_ == OpenAiEndpoint::kChatCompletions;
    events += Event({{"id", id_},
                     {"object", chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", created_},
                     {"model", model_},
                     {"choices", Json::array()},
                     {"usage", Usage(last)}});
  }
  return events + "data: [DONE]\n\n";
}

StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(std::string_view body) {
  const Json json = Json::parse(body, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgumentError("the request body is not a JSON object");
  }
  EmbeddingsRequest request;
  for (const auto& [name, value] : json.items()) {
    if (value.is_null() || name == "user") continue;
    if (name == "model") {
      if (!value.is_string()) return FieldError(name, "must be a string");
      request.model = value.get<std::string>();
    } else if (name == "input") {
      if (value.is_string()) {
        request.inputs.push_back(value.get<std::string>());
        continue;
      }
      if (!value.is_array() || value.empty()) {
        return FieldError(name, "must be a string or a non-empty list of strings");
      }
      for (const Json& text : value) {
        if (!text.is_string()) return FieldError(name, "as token ids is not supported: send text");
        request.inputs.push_back(text.get<std::string>());
      }
    } else if (name == "encoding_format") {
      if (value != "float" && value != "base64") {
        return FieldError(name, "must be \"float\" or \"base64\"");
      }
      request.base64 = value == "base64";
    } else if (name == "dimensions") {
      return FieldError(name, "is not supported (the model's own dimension is served)");
    } else {
      return InvalidArgumentError("unrecognized request argument supplied: '" + name + "'");
    }
  }
  if (request.model.empty()) return FieldError("model", "is required");
  if (request.inputs.empty()) return FieldError("input", "is required");
  return request;
}

std::string RenderEmbeddings(const EmbeddingsRequest& request, const float* vectors, int64_t rows,
                             int64_t dim, int64_t prompt_tokens) {
  Json data = Json::array();
  for (int64_t row = 0; row < rows; ++row) {
    const float* vector = vectors + row * dim;
    Json embedding;
    if (request.base64) {
      std::string bytes(reinterpret_cast<const char*>(vector), dim * sizeof(float));
      embedding = absl::Base64Escape(bytes);
    } else {
      embedding = std::vector<float>(vector, vector + dim);
    }
    data.push_back({{"object", "embedding"}, {"index", row}, {"embedding", std::move(embedding)}});
  }
  return Dump({{"object", "list"},
               {"data", std::move(data)},
               {"model", request.model},
               {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

std::string RenderOpenAiError(const Status& status) { return Dump(ErrorJson(status)); }

std::string RenderOpenAiError(const std::string& message, int http_status) {
  return Dump(ErrorJson(message, http_status));
}

std::string OpenAiErrorEvent(const Status& status) { return Event(ErrorJson(status)); }

}  // namespace chorus
