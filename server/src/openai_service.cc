#include "server/src/openai_service.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "chorus/common/thread_annotations.h"
#include "server/src/http_status.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kJson[] = "application/json";
// An idle stream writes a comment this often, so a client that went away is
// noticed (the write fails) while a long prompt is prefilled.
constexpr auto kKeepAlive = std::chrono::seconds(1);
constexpr auto kPoll = std::chrono::milliseconds(100);

void ReplyError(httplib::Response& response, const Status& status) {
  response.status = HttpStatusCode(status.code());
  response.set_content(RenderOpenAiError(status), kJson);
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One request's chunks, from its engine's loop thread to the HTTP thread.
class ChunkQueue {
 public:
  struct Batch {
    std::vector<GenerationChunk> chunks;
    std::optional<Status> end;  // set once the request is done
  };

  // On the loop thread; false once the client has gone (the engine drops it).
  bool Push(const GenerationChunk& chunk) CHORUS_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    chunks_.push_back(chunk);
    changed_.SignalAll();
    return !cancelled_->load();
  }
  void Finish(Status status) CHORUS_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    end_ = std::move(status);
    changed_.SignalAll();
  }
  // What arrived since the last call, waiting for something until `until`.
  Batch Take(Clock::time_point until) CHORUS_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (chunks_.empty() && !end_.has_value()) {
      if (!changed_.WaitUntil(&mu_, until) && Clock::now() >= until) break;
    }
    Batch batch;
    batch.chunks.assign(chunks_.begin(), chunks_.end());
    chunks_.clear();
    batch.end = end_;  // the engine pushes no chunk after the end
    return batch;
  }
  void Cancel() { cancelled_->store(true); }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return cancelled_; }

 private:
  Mutex mu_;
  CondVar changed_;
  std::deque<GenerationChunk> chunks_ CHORUS_GUARDED_BY(mu_);
  std::optional<Status> end_ CHORUS_GUARDED_BY(mu_);
  const std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

GenerationRequest ToGeneration(const OpenAiRequest& request, std::shared_ptr<ChunkQueue> queue) {
  GenerationRequest call;
  call.prompt = request.prompt;
  call.messages_json = request.messages_json;
  call.parameters_json = request.parameters_json;
  call.cancelled = queue->cancelled();
  call.on_chunk = [queue](const GenerationChunk& chunk) { return queue->Push(chunk); };
  call.done = [queue](Status status) { queue->Finish(std::move(status)); };
  return call;
}

// The whole answer, once the engine is done with the request.
void ReplyWhole(ChunkQueue& queue, const OpenAiRenderer& renderer, httplib::Response& response) {
  std::string text;
  GenerationChunk last;
  for (;;) {
    ChunkQueue::Batch batch = queue.Take(Clock::time_point::max());
    for (const GenerationChunk& chunk : batch.chunks) {
      text += chunk.text;
      last = chunk;
    }
    if (!batch.end.has_value()) continue;
    if (!batch.end->ok()) return ReplyError(response, *batch.end);
    return response.set_content(renderer.Body(text, last), kJson);
  }
}

// A stream's state between the calls cpp-httplib makes to its provider.
struct StreamState {
  StreamState(std::shared_ptr<ChunkQueue> queue, OpenAiRenderer renderer, ChunkQueue::Batch first)
      : queue(std::move(queue)), renderer(std::move(renderer)), pending(std::move(first)) {}

  std::shared_ptr<ChunkQueue> queue;
  OpenAiRenderer renderer;
  ChunkQueue::Batch pending;  // taken before the stream began
  GenerationChunk last;
  Clock::time_point last_write = Clock::now();

  // The events of `batch`; whether the stream ended with it.
  std::string Render(const ChunkQueue::Batch& batch) {
    std::string events;
    for (const GenerationChunk& chunk : batch.chunks) {
      events += renderer.Events(chunk);
      last = chunk;
    }
    if (batch.end.has_value()) {
      events += batch.end->ok() ? renderer.Close(last)
                                : OpenAiErrorEvent(*batch.end) + "data: [DONE]\n\n";
    }
    return events;
  }

  // One call of the provider: false ends the response as failed.
  bool Provide(httplib::DataSink& sink) {
    ChunkQueue::Batch batch = std::exchange(pending, {});
    if (batch.chunks.empty() && !batch.end.has_value()) batch = queue->Take(Clock::now() + kPoll);
    std::string events = Render(batch);
    if (events.empty() && Clock::now() - last_write >= kKeepAlive) events = ": keep-alive\n\n";
    if (!events.empty()) {
      last_write = Clock::now();
      if (!sink.write(events.data(), events.size())) return false;
    }
    if (batch.end.has_value()) sink.done();
    return true;
  }
};

}  // namespace

OpenAiService::OpenAiService(InferenceCore* core)
    : core_(core), started_(UnixNow()), id_prefix_(std::random_device()()) {}

void OpenAiService::Register(httplib::Server* server) {
  server->Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
    ListModels(response);
  });
  server->Post("/v1/completions",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Generate(request, response, OpenAiEndpoint::kCompletions);
               });
  server->Post("/v1/chat/completions",
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
  core_->GenerateText(request->model, ToGeneration(*request, queue));
  OpenAiRenderer renderer(*request, NewId(endpoint), UnixNow());
  if (!request->stream) return ReplyWhole(*queue, renderer, http_response);

  // A request refused before its first token gets an HTTP error, as OpenAI's.
  ChunkQueue::Batch first = queue->Take(Clock::time_point::max());
  if (first.chunks.empty() && first.end.has_value() && !first.end->ok()) {
    return ReplyError(http_response, *first.end);
  }
  auto state = std::make_shared<StreamState>(queue, std::move(renderer), std::move(first));
  http_response.set_header("Cache-Control", "no-cache");
  http_response.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) { return state->Provide(sink); },
      [queue](bool success) {
        if (!success) queue->Cancel();  // the client went away, or the server stops
      });
}

}  // namespace chorus
