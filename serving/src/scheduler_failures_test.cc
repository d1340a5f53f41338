// ModelScheduler's requests that do not run as asked: the queue limit,
// deadlines and cancellation of queued requests, model errors; and its end:
// draining, destruction, the last reference dropped on its own worker.
#include "chorus/serving/scheduler.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "serving/src/scheduler_test_support.h"

namespace chorus::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(SchedulerTest, AFullQueueRefusesWithUnavailable) {
  SchedulerOptions options = Unbatched();
  options.max_queue = 2;
  Harness harness(model(), options, gate());
  ASSERT_TRUE(harness.SubmitHeld(0));  // running, so not in the queue
  harness.Submit(1, Request(Rows(1, 11)));
  harness.Submit(2, Request(Rows(1, 21)));
  EXPECT_EQ(harness.scheduler().pending(), 3u);
  harness.Submit(3, Request(Rows(1, 31)));
  std::optional<Answer> refused = harness.Find(3);
  ASSERT_TRUE(refused.has_value()) << "a full queue answers right away";
  EXPECT_TRUE(refused->during_submit);
  EXPECT_THAT(
      refused->result.status,
      StatusIs(StatusCode::kUnavailable, "the model's queue is full (2 requests); retry later"));
  EXPECT_TRUE(refused->result.outputs.empty());
  EXPECT_EQ(harness.answered(), 1u);
  EXPECT_EQ(harness.scheduler().pending(), 3u);

  harness.Release();
  ASSERT_TRUE(harness.AwaitAnswers(4));
  ExpectReported(harness.Result(1), Rows(1, 11), 1);
  ExpectReported(harness.Result(2), Rows(1, 21), 1);
  // With room again, the queue accepts.
  harness.Submit(4, Request(Rows(1, 41)));
  ASSERT_TRUE(harness.AwaitAnswers(5));
  ExpectReported(harness.Result(4), Rows(1, 41), 1);
  EXPECT_FALSE(harness.Find(4)->during_submit);
}

TEST_F(SchedulerTest, ExpiredAndCancelledRequestsLeaveTheirBatchUnrun) {
  Harness harness(model(), Batched(4, kLongDelay), gate());
  InferenceRequest expired = Request(Rows(1, 11));
  expired.deadline = Clock::now() - std::chrono::seconds(1);
  InferenceRequest cancelled = Request(Rows(1, 21));
  cancelled.cancelled = std::make_shared<std::atomic<bool>>(true);
  harness.Submit(0, Request(Rows(1, 1)));
  harness.Submit(1, std::move(expired));
  harness.Submit(2, std::move(cancelled));
  harness.Submit(3, Request(Rows(1, 31)));
  ASSERT_TRUE(harness.AwaitAnswers(4));
  EXPECT_THAT(
      harness.Result(1).status,
      StatusIs(StatusCode::kDeadlineExceeded, "the request's deadline passed while it was queued"));
  EXPECT_THAT(harness.Result(2).status,
              StatusIs(StatusCode::kCancelled, "the client cancelled the request"));
  EXPECT_TRUE(harness.Result(1).outputs.empty());
  EXPECT_EQ(harness.Result(1).batch_size, 0);
  // The four were gathered; the two live ones ran as a batch of 2.
  ExpectReported(harness.Result(0), Rows(1, 1), 2);
  ExpectReported(harness.Result(3), Rows(1, 31), 2);
  EXPECT_THAT(harness.order(), ElementsAre(1, 2, 0, 3));
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{2, 2}));
}

TEST_F(SchedulerTest, RequestsCancelledOrExpiredWhileQueuedNeverRun) {
  Harness harness(model(), Unbatched(), gate());
  ASSERT_TRUE(harness.SubmitHeld(0));
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  InferenceRequest cancellable = Request(Rows(1, 11));
  cancellable.cancelled = cancel;
  InferenceRequest short_lived = Request(Rows(1, 21));
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(1);
  short_lived.deadline = deadline;
  harness.Submit(1, std::move(cancellable));
  harness.Submit(2, std::move(short_lived));
  harness.Submit(3, Request(Rows(1, 31)));
  cancel->store(true);  // the client went away while its request was queued
  while (Clock::now() < deadline) std::this_thread::sleep_until(deadline);
  harness.Release();
  ASSERT_TRUE(harness.AwaitAnswers(4));
  ExpectReported(harness.Result(0), at::full({1, 2}, -1.0f), 1);
  EXPECT_THAT(harness.Result(1).status, StatusIs(StatusCode::kCancelled));
  EXPECT_THAT(harness.Result(2).status, StatusIs(StatusCode::kDeadlineExceeded));
  ExpectReported(harness.Result(3), Rows(1, 31), 1);
  EXPECT_THAT(harness.order(), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{1, 1}, Batch{1, 1}));
}

TEST_F(SchedulerTest, AModelErrorFailsEveryRequestOfItsBatch) {
  Harness harness(model(), Batched(2, kLongDelay), gate());
  harness.Submit(0, Request(Rows(1, 1)));
  harness.Submit(1, Request(at::full({1, 2}, 1000.0f)));
  ASSERT_TRUE(harness.AwaitAnswers(2));
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const InferenceResult result = harness.Result(i);
    EXPECT_THAT(result.status, StatusIs(StatusCode::kInternal,
                                        HasSubstr("ValueError: the input asked for an error")));
    ASSERT_NE(result.status.python_error(), nullptr);
    EXPECT_EQ(result.status.python_error()->type, "ValueError");
    EXPECT_EQ(result.status.python_error()->message, "the input asked for an error");
    EXPECT_TRUE(result.outputs.empty());
    EXPECT_EQ(result.batch_size, 2);
  }
  // The model still serves the next batch.
  harness.Submit(2, Request(Rows(1, 21)));
  harness.Submit(3, Request(Rows(1, 31)));
  ASSERT_TRUE(harness.AwaitAnswers(4));
  ExpectReported(harness.Result(2), Rows(1, 21), 2);
  ExpectReported(harness.Result(3), Rows(1, 31), 2);
  const std::vector<ExecutionStats> executions = harness.executions();
  ASSERT_EQ(executions.size(), 2u);
  EXPECT_FALSE(executions[0].ok);
  EXPECT_EQ(executions[0].batch_size, 2);
  EXPECT_TRUE(executions[1].ok);
}

// What owns a scheduler (a served model) may go away while a request's
// callback, on the scheduler's own worker, holds the last reference to it
// (an unload or a shutdown while the answer is being sent). That worker then
// destroys the scheduler, and must neither join itself nor touch it again.
TEST_F(SchedulerTest, TheLastReferenceMayDropInACallbackOnTheWorker) {
  std::promise<std::thread::id> destroyed_on;
  auto owner = std::shared_ptr<ModelScheduler>(new ModelScheduler(model(), Unbatched(), nullptr),
                                               [&](ModelScheduler* scheduler) {
                                                 delete scheduler;
                                                 destroyed_on.set_value(std::this_thread::get_id());
                                               });
  std::promise<std::thread::id> answered_on;
  ModelScheduler* scheduler = owner.get();
  scheduler->Submit(Request(Rows(1, 1)), [owner, &answered_on](InferenceResult result) {
    EXPECT_OK(result.status);
    answered_on.set_value(std::this_thread::get_id());
  });
  owner.reset();  // the callback's copy is now the last
  std::future<std::thread::id> worker = answered_on.get_future();
  std::future<std::thread::id> destroyer = destroyed_on.get_future();
  ASSERT_EQ(destroyer.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(destroyer.get(), worker.get());
}

TEST_F(SchedulerTest, OutputsThatLostTheirBatchRowsFailTheBatch) {
  Harness harness(model(), Batched(2, kLongDelay), gate());
  harness.Submit(0, Request(Rows(1, 1)));
  harness.Submit(1, Request(at::full({1, 2}, 500.0f)));  // answers one row for the batch
  ASSERT_TRUE(harness.AwaitAnswers(2));
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(harness.Result(i).status,
                StatusIs(StatusCode::kInternal,
                         "the model returned an output with 1 rows along the batch dimension "
                         "for a batch of 2"))
        << "request " << i;
  }
  const std::vector<ExecutionStats> executions = harness.executions();
  ASSERT_EQ(executions.size(), 1u);
  EXPECT_FALSE(executions[0].ok);
}

TEST_F(SchedulerTest, DrainFailsWhatIsStillQueuedAtItsDeadline) {
  Harness harness(model(), Unbatched(), gate());
  ASSERT_TRUE(harness.SubmitHeld(0));
  harness.Submit(1, Request(Rows(1, 11)));
  harness.Submit(2, Request(Rows(1, 21)));
  harness.scheduler().Drain(Clock::now());
  // Answered by Drain itself; the running request is not cut short.
  EXPECT_EQ(harness.answered(), 2u);
  for (int i : {1, 2}) {
    EXPECT_THAT(
        harness.Result(i).status,
        StatusIs(StatusCode::kUnavailable, "the model was unloaded before this request ran"))
        << "request " << i;
  }
  harness.Submit(3, Request(Rows(1, 31)));
  ASSERT_TRUE(harness.Find(3).has_value());
  EXPECT_TRUE(harness.Find(3)->during_submit);
  EXPECT_THAT(
      harness.Result(3).status,
      StatusIs(StatusCode::kUnavailable, "the model is being unloaded or the server is draining"));
  harness.Release();
  ASSERT_TRUE(harness.AwaitAnswers(4));
  ExpectReported(harness.Result(0), at::full({1, 2}, -1.0f), 1);
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{1, 1}));
}

TEST_F(SchedulerTest, DrainWaitsForQueuedAndRunningRequests) {
  SchedulerOptions options = Unbatched();
  options.max_queue = 1 << 20;
  Harness harness(model(), options, gate());
  ASSERT_TRUE(harness.SubmitHeld(0));
  harness.Submit(1, Request(Rows(1, 11)));
  std::thread drainer([&harness] { harness.scheduler().Drain(Clock::now() + kPatience); });
  // Submit until Drain has begun (the first refusal); everything before it is
  // queued behind the held request, which Drain must now wait for.
  int refused = 100;
  for (;; ++refused) {
    harness.Submit(refused, Request(Rows(1, 1)));
    if (harness.Find(refused).has_value()) break;
    std::this_thread::yield();
  }
  harness.Release();
  drainer.join();
  // Drain returned only once every accepted request was answered.
  EXPECT_EQ(harness.answered(), 2u + (refused - 100) + 1u);
  EXPECT_EQ(harness.scheduler().pending(), 0u);
  ExpectReported(harness.Result(0), at::full({1, 2}, -1.0f), 1);
  ExpectReported(harness.Result(1), Rows(1, 11), 1);
  for (int id = 100; id < refused; ++id) {
    SCOPED_TRACE("probe " + std::to_string(id));
    ExpectReported(harness.Result(id), Rows(1, 1), 1);
  }
  EXPECT_TRUE(harness.Find(refused)->during_submit);
  EXPECT_THAT(
      harness.Result(refused).status,
      StatusIs(StatusCode::kUnavailable, "the model is being unloaded or the server is draining"));
}

TEST_F(SchedulerTest, DestroyingTheSchedulerFailsQueuedRequestsAndFinishesTheRunningOne) {
  Harness harness(model(), Unbatched(), gate());
  ASSERT_TRUE(harness.SubmitHeld(0));
  harness.Submit(1, Request(Rows(1, 11)));
  std::thread destroyer([&harness] { harness.DestroyScheduler(); });
  // The queued request is failed at once; the destructor then waits for the
  // running one, which is still held.
  const bool queued_answered = harness.AwaitAnswers(1);
  const size_t answered_while_held = harness.answered();
  harness.Release();
  destroyer.join();
  EXPECT_TRUE(queued_answered);
  EXPECT_EQ(answered_while_held, 1u);
  EXPECT_THAT(harness.Result(1).status,
              StatusIs(StatusCode::kUnavailable, "the model was unloaded before this request ran"));
  EXPECT_EQ(harness.answered(), 2u);
  ExpectReported(harness.Result(0), at::full({1, 2}, -1.0f), 1);
  EXPECT_THAT(harness.order(), ElementsAre(1, 0));
}

}  // namespace
}  // namespace chorus::testing
