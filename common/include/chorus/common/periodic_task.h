// A function run every `interval` on a thread of its own, first after one
// interval, until the task is destroyed (which waits for a run in progress).
//
//   PeriodicTask poll(std::chrono::seconds(15), [&] { repository.Poll(); });
#ifndef CHORUS_COMMON_PERIODIC_TASK_H_
#define CHORUS_COMMON_PERIODIC_TASK_H_

#include <chrono>
#include <functional>
#include <thread>

#include "chorus/common/thread_annotations.h"

namespace chorus {

class PeriodicTask {
 public:
  PeriodicTask(std::chrono::milliseconds interval, std::function<void()> run);
  // Stops: no run starts after it; one in progress finishes first.
  ~PeriodicTask() CHORUS_EXCLUDES(mu_);
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

 private:
  void Loop() CHORUS_EXCLUDES(mu_);

  const std::chrono::milliseconds interval_;
  const std::function<void()> run_;
  Mutex mu_;
  CondVar stop_signal_;
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace chorus

#endif  // CHORUS_COMMON_PERIODIC_TASK_H_
