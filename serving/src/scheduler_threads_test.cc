// The intra-op threads a model runs with on a scheduler's threads.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <vector>

#include "chorus/serving/request_executor.h"
#include "chorus/serving/scheduler.h"

namespace chorus {
namespace {

// Answers every request with the intra-op threads its run sees (at::get_num_threads
// on the executing thread: OpenMP's count there, which MKL's BLAS follows).
class ThreadCountExecutor : public RequestExecutor {
 public:
  int instances() const override { return 1; }
  Status Execute(int, std::vector<ExecutorRequest> batch) override {
    const int64_t threads = at::get_num_threads();
    for (ExecutorRequest& call : batch) {
      InferenceResult result;
      result.outputs.emplace_back(threads);
      call.done(std::move(result));
    }
    return OkStatus();
  }
  void Drain(std::chrono::steady_clock::time_point) override {}
};

int64_t ThreadsOfOneRun(ModelScheduler& scheduler) {
  std::promise<int64_t> seen;
  scheduler.Submit(InferenceRequest(), [&seen](InferenceResult result) {
    seen.set_value(result.status.ok() ? result.outputs.at(0).toInt() : -1);
  });
  return seen.get_future().get();
}

// torch.set_num_threads sets a process-wide count, but OpenMP keeps one per
// thread, set on a thread's first parallel call: a worker that ran once must
// still follow a later setting (a model's initialize() calling
// torch.set_num_threads(1) on the thread that loaded it).
TEST(SchedulerThreadsTest, EveryRunTakesTheIntraOpThreadsSetAtTheTime) {
  const int before = at::get_num_threads();
  ModelScheduler scheduler(std::make_shared<ThreadCountExecutor>(), SchedulerOptions());
  at::set_num_threads(2);
  EXPECT_EQ(ThreadsOfOneRun(scheduler), 2);
  at::set_num_threads(1);  // on this thread, not the worker's
  EXPECT_EQ(ThreadsOfOneRun(scheduler), 1);
  at::set_num_threads(3);
  EXPECT_EQ(ThreadsOfOneRun(scheduler), 3);
  at::set_num_threads(before);
}

}  // namespace
}  // namespace chorus
