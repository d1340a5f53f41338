#include "chorus/server/frontends/http/generation_stream.h"

#include <utility>

namespace chorus {
namespace {

using Clock = ChunkQueue::Clock;
// An idle stream writes a comment this often, so a client that went away is
// noticed (the write fails) while a long prompt is prefilled.
constexpr auto kKeepAlive = std::chrono::seconds(1);
constexpr auto kPoll = std::chrono::milliseconds(100);

// A stream's state between the calls cpp-httplib makes to its provider.
class EventStream {
 public:
  EventStream(std::shared_ptr<ChunkQueue> queue, EventRenderer renderer, ChunkQueue::Batch first)
      : queue_(std::move(queue)), renderer_(std::move(renderer)), pending_(std::move(first)) {}

  // One call of the provider: false ends the response as failed.
  bool Provide(httplib::DataSink& sink) {
    ChunkQueue::Batch batch = std::exchange(pending_, {});
    if (batch.chunks.empty() && !batch.end.has_value()) batch = queue_->Take(Clock::now() + kPoll);
    std::string events = Render(batch);
    if (events.empty() && Clock::now() - last_write_ >= kKeepAlive) events = ": keep-alive\n\n";
    if (!events.empty()) {
      last_write_ = Clock::now();
      if (!sink.write(events.data(), events.size())) return false;
    }
    if (batch.end.has_value()) sink.done();
    return true;
  }

 private:
  std::string Render(const ChunkQueue::Batch& batch) {
    std::string events;
    for (const GenerationChunk& chunk : batch.chunks) {
      events += renderer_.chunk(chunk);
      last_ = chunk;
    }
    if (batch.end.has_value()) {
      events += batch.end->ok() ? renderer_.close(last_) : renderer_.error(*batch.end);
    }
    return events;
  }

  const std::shared_ptr<ChunkQueue> queue_;
  const EventRenderer renderer_;
  ChunkQueue::Batch pending_;  // taken before the stream began
  GenerationChunk last_;
  Clock::time_point last_write_ = Clock::now();
};

}  // namespace

GenerationRequest ChunkQueue::Request(std::shared_ptr<ChunkQueue> queue, std::string prompt,
                                      std::string messages_json, std::string parameters_json) {
  GenerationRequest call;
  call.prompt = std::move(prompt);
  call.messages_json = std::move(messages_json);
  call.parameters_json = std::move(parameters_json);
  call.cancelled = queue->cancelled_;
  call.on_chunk = [queue](const GenerationChunk& chunk) { return queue->Push(chunk); };
  call.done = [queue](Status status) { queue->Finish(std::move(status)); };
  return call;
}

bool ChunkQueue::Push(const GenerationChunk& chunk) {
  MutexLock lock(&mu_);
  chunks_.push_back(chunk);
  changed_.SignalAll();
  return !cancelled_->load();
}

void ChunkQueue::Finish(Status status) {
  MutexLock lock(&mu_);
  end_ = std::move(status);
  changed_.SignalAll();
}

ChunkQueue::Batch ChunkQueue::Take(Clock::time_point until) {
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

StatusOr<std::string> ChunkQueue::WholeText(GenerationChunk* last) {
  std::string text;
  for (;;) {
    Batch batch = Take(Clock::time_point::max());
    for (const GenerationChunk& chunk : batch.chunks) {
      text += chunk.text;
      *last = chunk;
    }
    if (!batch.end.has_value()) continue;
    if (!batch.end->ok()) return *batch.end;
    return text;
  }
}

void ServeEvents(std::shared_ptr<ChunkQueue> queue, EventRenderer renderer,
                 httplib::Response& response,
                 const std::function<void(httplib::Response&, const Status&)>& reply_error) {
  ChunkQueue::Batch first = queue->Take(Clock::time_point::max());
  if (first.chunks.empty() && first.end.has_value() && !first.end->ok()) {
    return reply_error(response, *first.end);
  }
  auto stream = std::make_shared<EventStream>(queue, std::move(renderer), std::move(first));
  response.set_header("Cache-Control", "no-cache");
  response.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t, httplib::DataSink& sink) { return stream->Provide(sink); },
      [queue](bool success) {
        if (!success) queue->Cancel();  // the client went away, or the server stops
      });
}

}  // namespace chorus
