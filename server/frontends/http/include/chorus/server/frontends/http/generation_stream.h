// One generation request's chunks on their way from the engine's loop thread
// to an HTTP handler: whole (the text once done) or as server-sent events,
// for the HTTP APIs over the generation engines (OpenAI's, Triton's
// generate). A stream whose client goes away is cancelled (a write fails; an
// idle stream writes a keep-alive comment every second to find out).
#ifndef CHORUS_SERVER_FRONTENDS_HTTP_GENERATION_STREAM_H_
#define CHORUS_SERVER_FRONTENDS_HTTP_GENERATION_STREAM_H_

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/serving/generation_engines.h"

namespace chorus {

class ChunkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  struct Batch {
    std::vector<GenerationChunk> chunks;
    std::optional<Status> end;  // set once the request is done
  };

  // A request for the engines whose chunks and end come to `queue`.
  static GenerationRequest Request(std::shared_ptr<ChunkQueue> queue, std::string prompt,
                                   std::string messages_json, std::string parameters_json);

  // On the loop thread; false once the client has gone (the engine drops it).
  bool Push(const GenerationChunk& chunk) CHORUS_EXCLUDES(mu_);
  void Finish(Status status) CHORUS_EXCLUDES(mu_);
  // What arrived since the last call, waiting for something until `until`.
  Batch Take(Clock::time_point until) CHORUS_EXCLUDES(mu_);
  // The whole text once the request is done (its last chunk in `*last`), or
  // its error.
  StatusOr<std::string> WholeText(GenerationChunk* last) CHORUS_EXCLUDES(mu_);
  void Cancel() { cancelled_->store(true); }

 private:
  Mutex mu_;
  CondVar changed_;
  std::deque<GenerationChunk> chunks_ CHORUS_GUARDED_BY(mu_);
  std::optional<Status> end_ CHORUS_GUARDED_BY(mu_);
  const std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

// How an API writes a stream's server-sent events.
struct EventRenderer {
  std::function<std::string(const GenerationChunk&)> chunk;       // "" when nothing to say
  std::function<std::string(const GenerationChunk& last)> close;  // after the last chunk
  std::function<std::string(const Status&)> error;                // a failure mid-stream
};

// Answers with `queue`'s chunks as server-sent events; a request that fails
// before its first chunk gets `reply_error` instead (an HTTP error status).
void ServeEvents(std::shared_ptr<ChunkQueue> queue, EventRenderer renderer,
                 httplib::Response& response,
                 const std::function<void(httplib::Response&, const Status&)>& reply_error);

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_HTTP_GENERATION_STREAM_H_
