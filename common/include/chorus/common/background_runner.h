// A thread that runs blocking work (model loads, training operations) off the
// threads that must not block (gRPC's reactors, HTTP handlers), one item at a
// time, in the order posted.
#ifndef CHORUS_COMMON_BACKGROUND_RUNNER_H_
#define CHORUS_COMMON_BACKGROUND_RUNNER_H_

#include <deque>
#include <functional>
#include <thread>

#include "chorus/common/thread_annotations.h"

namespace chorus {

// Thread-safe.
class BackgroundRunner {
 public:
  BackgroundRunner();
  // Stop(), then destroys.
  ~BackgroundRunner();
  BackgroundRunner(const BackgroundRunner&) = delete;
  BackgroundRunner& operator=(const BackgroundRunner&) = delete;

  // Queues `work`. False (and `work` dropped unrun) once Stop has begun.
  [[nodiscard]] bool Post(std::function<void()> work) CHORUS_EXCLUDES(mu_);
  // Refuses further work, finishes what is queued and joins. Idempotent; any
  // thread but the runner's own.
  void Stop() CHORUS_EXCLUDES(mu_);
  // Whether the calling thread is the runner's (running posted work): work
  // that would wait for other posted work must then run it itself.
  bool OnRunner() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Run() CHORUS_EXCLUDES(mu_);

  Mutex mu_;
  CondVar changed_;
  std::deque<std::function<void()>> work_ CHORUS_GUARDED_BY(mu_);
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  Mutex join_mu_;  // two stoppers at once: one joins, the other waits
  std::thread thread_;
};

}  // namespace chorus

#endif  // CHORUS_COMMON_BACKGROUND_RUNNER_H_
