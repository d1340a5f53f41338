#include "chorus/common/periodic_task.h"

#include <utility>

namespace chorus {

PeriodicTask::PeriodicTask(std::chrono::milliseconds interval, std::function<void()> run)
    : interval_(interval), run_(std::move(run)), thread_([this] { Loop(); }) {}

PeriodicTask::~PeriodicTask() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_signal_.SignalAll();
  thread_.join();
}

void PeriodicTask::Loop() {
  while (true) {
    {
      MutexLock lock(&mu_);
      const auto next = std::chrono::steady_clock::now() + interval_;
      while (!stopping_ && std::chrono::steady_clock::now() < next) {
        stop_signal_.WaitUntil(&mu_, next);
      }
      if (stopping_) return;
    }
    run_();
  }
}

}  // namespace chorus
