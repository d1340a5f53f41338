// Interrupts interpreter calls that run past their deadline.
#ifndef CHORUS_INTERPRETER_WATCHDOG_H_
#define CHORUS_INTERPRETER_WATCHDOG_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <thread>

#include "chorus/common/thread_annotations.h"

namespace chorus {
namespace pyside {
class PySide;
}  // namespace pyside

// One thread that sleeps until the earliest armed deadline, then calls
// PySide::Interrupt for it. Thread-safe. Interrupting waits for the target
// interpreter's GIL (up to Python's switch interval while Python code runs),
// so deadlines are precise to a few milliseconds. Arming wakes the thread
// only for a deadline earlier than the one it sleeps until: most calls'
// deadlines come later than those before them, and a wake-up per call costs
// the call its latency (a futex and a context switch).
class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;

  Watchdog();
  // Joins the thread; pending deadlines are dropped.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Interrupts the call tagged `call_token` in `side` at `deadline` unless
  // Disarm(call_token) comes first. `side` must outlive the arming.
  void Arm(Clock::time_point deadline, pyside::PySide* side, uint64_t call_token)
      CHORUS_EXCLUDES(mu_);
  // Cancels the deadline of `call_token`; no-op if it already fired.
  void Disarm(uint64_t call_token) CHORUS_EXCLUDES(mu_);

 private:
  struct Entry {
    Clock::time_point deadline;
    pyside::PySide* side;
  };
  void Run() CHORUS_EXCLUDES(mu_);

  Mutex mu_;
  CondVar wake_;
  std::map<uint64_t, Entry> armed_ CHORUS_GUARDED_BY(mu_);  // by call token
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  // When the thread sleeps: until when (max: until woken); min while it runs,
  // since it then looks at armed_ again before sleeping.
  Clock::time_point sleeps_until_ CHORUS_GUARDED_BY(mu_) = Clock::time_point::min();
  std::thread thread_;
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_WATCHDOG_H_
