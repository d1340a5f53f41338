#include "interpreter/src/home_thread.h"

#include <future>
#include <utility>

namespace chorus::internal {

Status HomeThread::Start(std::function<Status()> start) {
  std::promise<Status> started;
  std::future<Status> result = started.get_future();
  // The promise lives in the thread: it is set there and never touched again.
  thread_ = std::thread([this, start = std::move(start), started = std::move(started)]() mutable {
    Status status = start();
    const bool ok = status.ok();
    started.set_value(std::move(status));
    if (!ok) return;
    std::function<void()> finish;
    {
      MutexLock lock(&mu_);
      while (!finishing_) finishing_cv_.Wait(&mu_);
      finish = std::move(finish_);
    }
    if (finish) finish();
  });
  Status status = result.get();
  if (!status.ok()) thread_.join();
  return status;
}

void HomeThread::Finish(std::function<void()> finish) {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    finish_ = std::move(finish);
    finishing_ = true;
  }
  finishing_cv_.SignalAll();
  thread_.join();
}

}  // namespace chorus::internal
