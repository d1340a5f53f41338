#include "interpreter/src/watchdog.h"

#include "interpreter/src/pyside_api.h"

namespace chorus {

Watchdog::Watchdog() : thread_([this] { Run(); }) {}

Watchdog::~Watchdog() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  thread_.join();
}

void Watchdog::Arm(Clock::time_point deadline, pyside::PySide* side, uint64_t call_token) {
  bool earlier = false;
  {
    MutexLock lock(&mu_);
    armed_[call_token] = {deadline, side};
    earlier = deadline < sleeps_until_;
  }
  if (earlier) wake_.SignalAll();
}

void Watchdog::Disarm(uint64_t call_token) {
  MutexLock lock(&mu_);
  armed_.erase(call_token);
}

void Watchdog::Run() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    // Few calls carry deadlines at once; a scan is simpler than a heap.
    auto next = armed_.end();
    for (auto it = armed_.begin(); it != armed_.end(); ++it) {
      if (next == armed_.end() || it->second.deadline < next->second.deadline) next = it;
    }
    if (next == armed_.end()) {
      sleeps_until_ = Clock::time_point::max();
      wake_.Wait(&mu_);
      sleeps_until_ = Clock::time_point::min();
      continue;
    }
    if (Clock::now() < next->second.deadline) {
      // A copy: Disarm may erase the entry while the thread sleeps (then the
      // thread wakes once for nothing at its deadline, and looks again).
      const Clock::time_point until = next->second.deadline;
      sleeps_until_ = until;
      wake_.WaitUntil(&mu_, until);
      sleeps_until_ = Clock::time_point::min();
      continue;
    }
    uint64_t token = next->first;
    pyside::PySide* side = next->second.side;
    armed_.erase(next);
    // Interrupt() takes the interpreter's GIL; never hold mu_ meanwhile, or a
    // finishing call's Disarm() would wait on us while we wait on its GIL.
    mu_.Unlock();
    side->Interrupt(token);
    mu_.Lock();
  }
}

}  // namespace chorus
