#include "chorus/common/background_runner.h"

#include <utility>

namespace chorus {

BackgroundRunner::BackgroundRunner() : thread_([this] { Run(); }) {}

BackgroundRunner::~BackgroundRunner() { Stop(); }

void BackgroundRunner::Run() {
  while (true) {
    std::function<void()> work;
    {
      MutexLock lock(&mu_);
      while (work_.empty() && !stopping_) changed_.Wait(&mu_);
      if (work_.empty()) return;
      work = std::move(work_.front());
      work_.pop_front();
    }
    work();
  }
}

bool BackgroundRunner::Post(std::function<void()> work) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return false;
    work_.push_back(std::move(work));
  }
  changed_.Signal();
  return true;
}

void BackgroundRunner::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.SignalAll();
  // std::thread::join is not safe to race.
  MutexLock join(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

}  // namespace chorus
