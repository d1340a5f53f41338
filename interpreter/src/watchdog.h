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
// so deadlines are precise to a few milliseconds.
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
  std::thread thread_;
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_WATCHDOG_H_
