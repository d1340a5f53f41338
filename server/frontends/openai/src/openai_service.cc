#include "chorus/server/frontends/openai/openai_service.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "chorus/server/frontends/http/generation_stream.h"
#include "chorus/server/frontends/http/http_status.h"

namespace chorus {
namespace {

constexpr char kJson[] = "application/json";

void ReplyError(httplib::Response& response, const Status& status) {
  response.status = HttpStatusCode(status.code());
  response.set_content(RenderOpenAiError(status), kJson);
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

OpenAiService::OpenAiService(InferenceCore* core)
    : core_(core), started_(UnixNow()), id_prefix_(std::random_device()()) {}

void OpenAiService::Register(HttpEndpoint* endpoint) {
  endpoint->SetErrorBody("/v1/", [](const std::string& message, int http_status) {
    return RenderOpenAiError(message, http_status);
  });
  httplib::Server* server = &endpoint->routes();
  server->Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
    ListModels(response);
  });
  AddPostRoute(server, "/v1/completions",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Generate(request, response, OpenAiEndpoint::kCompletions);
               });
  AddPostRoute(server, "/v1/chat/completions",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Generate(request, response, OpenAiEndpoint::kChatCompletions);
               });
}

void OpenAiService::ListModels(httplib::Response& response) const {
  nlohmann::json data = nlohmann::json::array();
  for (const std::shared_ptr<LoadedModel>& model : core_->GenerativeModels()) {
    data.push_back({{"id", model->name()},
                    {"object", "model"},
                    {"created", started_},
                    {"owned_by", "chorus"}});
  }
  response.set_content(nlohmann::json{{"object", "list"}, {"data", std::move(data)}}.dump(), kJson);
}

std::string OpenAiService::NewId(OpenAiEndpoint endpoint) {
  char id[48];
  std::snprintf(id, sizeof(id), "%s-%08" PRIx64 "%08" PRIx64,
                endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl" : "cmpl", id_prefix_,
                next_id_.fetch_add(1));
  return id;
}

void OpenAiService::Generate(const httplib::Request& http_request, httplib::Response& http_response,
                             OpenAiEndpoint endpoint) {
  StatusOr<OpenAiRequest> request = ParseOpenAiRequest(http_request.body, endpoint);
  if (!request.ok()) return ReplyError(http_response, request.status());
  auto queue = std::make_shared<ChunkQueue>();
  core_->GenerateText(request->model,
                      ChunkQueue::Request(queue, request->prompt, request->messages_json,
                                          request->parameters_json));
  auto renderer = std::make_shared<OpenAiRenderer>(*request, NewId(endpoint), UnixNow());
  if (!request->stream) {
    GenerationChunk last;
    StatusOr<std::string> text = queue->WholeText(&last);
    if (!text.ok()) return ReplyError(http_response, text.status());
    return http_response.set_content(renderer->Body(*text, last), kJson);
  }
  EventRenderer events;
  events.chunk = [renderer](const GenerationChunk& chunk) { return renderer->Events(chunk); };
  events.close = [renderer](const GenerationChunk& last) { return renderer->Close(last); };
  events.error = [](const Status& status) { return OpenAiErrorEvent(status) + "data: [DONE]\n\n"; };
  // A request refused before its first token gets an HTTP error, as OpenAI's.
  ServeEvents(queue, std::move(events), http_response, ReplyError);
}

}  // namespace chorus
