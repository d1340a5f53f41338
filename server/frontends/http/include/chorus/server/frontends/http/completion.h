// A handler's wait for the core's answer to a call the core finishes on
// another thread (HTTP handlers run on the HTTP server's pool and may block).
#ifndef CHORUS_SERVER_FRONTENDS_HTTP_COMPLETION_H_
#define CHORUS_SERVER_FRONTENDS_HTTP_COMPLETION_H_

#include <functional>
#include <future>
#include <utility>

#include "chorus/common/status.h"

namespace chorus {

class Completion {
 public:
  Completion() = default;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  // The callback to hand the core; call it exactly once. The Completion must
  // outlive the call.
  std::function<void(Status)> Callback() {
    return [this](Status status) { done_.set_value(std::move(status)); };
  }
  // Blocks until the callback ran; its status.
  Status Wait() { return done_.get_future().get(); }

 private:
  std::promise<Status> done_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_HTTP_COMPLETION_H_
