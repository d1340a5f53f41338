// The OS thread an interpreter is started and finalized on.
#ifndef CHORUS_INTERPRETER_HOME_THREAD_H_
#define CHORUS_INTERPRETER_HOME_THREAD_H_

#include <functional>
#include <thread>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"

namespace chorus::internal {

// CPython takes the thread that initialized it for its main thread, and from
// 3.13 Py_FinalizeEx finalizes on that thread's state: run from another
// thread, every other thread state (its own among them) is cut off, and the
// first destructor that releases and retakes the GIL there hangs in
// PyThread_hang_thread. So an interpreter keeps the thread that started it,
// parked, and is finalized on it (threading.main_thread() is that thread).
// Not copyable; Start, Finish and the destructor from one owning thread.
class HomeThread {
 public:
  HomeThread() = default;
  ~HomeThread() { Finish(nullptr); }
  HomeThread(const HomeThread&) = delete;
  HomeThread& operator=(const HomeThread&) = delete;

  // Runs `start` on a new thread and returns its status. On success the
  // thread then waits for Finish; on failure it ends.
  Status Start(std::function<Status()> start);
  // Runs `finish` (may be empty) on the home thread and joins it. Only the
  // first call after a successful Start does anything.
  void Finish(std::function<void()> finish);

 private:
  Mutex mu_;
  CondVar finishing_cv_;
  bool finishing_ CHORUS_GUARDED_BY(mu_) = false;
  std::function<void()> finish_ CHORUS_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace chorus::internal

#endif  // CHORUS_INTERPRETER_HOME_THREAD_H_
