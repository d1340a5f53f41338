// ModelScheduler on a real torch.package model in a real interpreter: dynamic
// batching (max and preferred sizes, the queue delay, compatibility).
#include "chorus/serving/scheduler.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "chorus/common/status_matchers.h"
#include "serving/src/scheduler_test_support.h"

namespace chorus::testing {
namespace {

using ::testing::ElementsAre;

TEST_F(SchedulerTest, TheModelsManifestDeclaresItsTwoOutputs) {
  // FlattenOutputs checks the model's outputs against these.
  ASSERT_NE(model()->manifest(), nullptr);
  const Manifest& manifest = *model()->manifest();
  ASSERT_EQ(manifest.outputs.size(), 2u);
  EXPECT_EQ(manifest.outputs[0].name, "doubled");
  EXPECT_EQ(manifest.outputs[1].name, "batch");
  EXPECT_EQ(manifest.outputs[1].dtype, "int64");
}

// Submits four one-row requests (ids 0-3) and waits for their answers; returns
// their inputs.
std::vector<at::Tensor> SubmitFourRows(Harness& harness) {
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(Rows(1, 10 * i + 1));
    harness.Submit(i, Request(inputs[i]));
  }
  EXPECT_TRUE(harness.AwaitAnswers(4));
  return inputs;
}

TEST_F(SchedulerTest, RequestsArrivingTogetherRunAsOneBatch) {
  Harness harness(model(), Batched(4, kLongDelay), gate());
  const std::vector<at::Tensor> inputs = SubmitFourRows(harness);
  ASSERT_EQ(harness.answered(), 4u);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ExpectReported(harness.Result(i), inputs[i], 4);
    EXPECT_FALSE(harness.Find(i)->during_submit);
  }
  const std::vector<ExecutionStats> executions = harness.executions();
  ASSERT_EQ(executions.size(), 1u);
  EXPECT_EQ(executions[0].batch_size, 4);
  EXPECT_EQ(executions[0].requests, 4);
  EXPECT_TRUE(executions[0].ok);
  // One execution: every request reports its compute time.
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(harness.Result(i).compute_time, harness.Result(0).compute_time);
  }
  EXPECT_EQ(harness.Result(0).compute_time, executions[0].compute_time);
}

TEST_F(SchedulerTest, WithoutBatchingEveryRequestRunsAlone) {
  Harness harness(model(), Unbatched(), gate());
  const std::vector<at::Tensor> inputs = SubmitFourRows(harness);
  ASSERT_EQ(harness.answered(), 4u);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ExpectReported(harness.Result(i), inputs[i], 1);
  }
  EXPECT_THAT(harness.order(), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{1, 1}, Batch{1, 1}, Batch{1, 1}, Batch{1, 1}));
}

// Submits requests of `sizes` rows (ids in order), waits for them, and expects
// each answered with its own rows from an execution of 4 rows.
void SubmitAndExpectBatchesOfFour(Harness& harness, const std::vector<int64_t>& sizes) {
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    inputs.push_back(Rows(sizes[i], 10 * i + 1));
    harness.Submit(i, Request(inputs[i]));
  }
  ASSERT_TRUE(harness.AwaitAnswers(sizes.size()));
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ExpectReported(harness.Result(i), inputs[i], 4);
  }
}

TEST_F(SchedulerTest, SubmitOrRunRunsOnTheCallerOnlyWhenAWorkerWouldTakeItAtOnce) {
  Harness harness(model(), Unbatched(), gate());
  harness.SubmitOrRun(0, Request(Rows(1, 1)));  // idle: runs here, before returning
  ASSERT_EQ(harness.answered(), 1u);
  EXPECT_TRUE(harness.Find(0)->during_submit);
  ExpectReported(harness.Result(0), Rows(1, 1), 1);
  ASSERT_TRUE(harness.SubmitHeld(1));           // the only worker is busy
  harness.SubmitOrRun(2, Request(Rows(1, 3)));  // so this one waits in the queue
  EXPECT_FALSE(harness.Find(2).has_value());
  harness.Release();
  ASSERT_TRUE(harness.AwaitAnswers(3));
  EXPECT_FALSE(harness.Find(2)->during_submit);
  ExpectReported(harness.Result(2), Rows(1, 3), 1);
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{1, 1}, Batch{1, 1}, Batch{1, 1}));
}

TEST_F(SchedulerTest, SubmitOrRunLeavesABatchingDelayToTheWorkers) {
  Harness harness(model(), Batched(1, kLongDelay), gate());  // a batch of 1 is full at once
  harness.SubmitOrRun(0, Request(Rows(1, 1)));
  ASSERT_TRUE(harness.AwaitAnswers(1));
  EXPECT_FALSE(harness.Find(0)->during_submit);
}

TEST_F(SchedulerTest, APreferredBatchSizeEndsGatheringEarly) {
  // Max 8, but 4 is preferred: 2+1+1 stops at 4, so does 3+1.
  Harness harness(model(), Batched(8, kLongDelay, {4}), gate());
  const std::vector<int64_t> sizes = {2, 1, 1, 3, 1};
  SubmitAndExpectBatchesOfFour(harness, sizes);
  EXPECT_THAT(harness.order(), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{4, 3}, Batch{4, 2}));
}

TEST_F(SchedulerTest, BatchesNeverExceedTheMaxBatchSize) {
  // Max 4: after 3 rows the 2-row request does not fit and waits for the next
  // batch, while the 1-row request behind it joins this one.
  Harness harness(model(), Batched(4, kLongDelay), gate());
  const std::vector<int64_t> sizes = {3, 2, 1, 2};
  SubmitAndExpectBatchesOfFour(harness, sizes);
  EXPECT_THAT(harness.order(), ElementsAre(0, 2, 1, 3));
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{4, 2}, Batch{4, 2}));
}

TEST_F(SchedulerTest, WithNoQueueDelayABatchIsWhatIsAlreadyQueued) {
  // Three requests queue while the worker is busy; once free, it runs them as
  // one batch of 3 (below the max of 8) without waiting for more.
  Harness harness(model(), Batched(8, std::chrono::microseconds(0)), gate());
  ASSERT_TRUE(harness.SubmitHeld(0));
  std::vector<at::Tensor> inputs(4);
  for (int i = 1; i < 4; ++i) {
    inputs[i] = Rows(1, 10 * i + 1);
    harness.Submit(i, Request(inputs[i]));
  }
  harness.Release();
  ASSERT_TRUE(harness.AwaitAnswers(4));
  ExpectReported(harness.Result(0), at::full({1, 2}, -1.0f), 1);
  for (int i = 1; i < 4; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ExpectReported(harness.Result(i), inputs[i], 3);
  }
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{1, 1}, Batch{3, 3}));
}

TEST_F(SchedulerTest, RequestsOfOtherShapesOrDtypesAreNotBatchedTogether) {
  Harness harness(model(), Batched(8, std::chrono::microseconds(0)), gate());
  ASSERT_TRUE(harness.SubmitHeld(0));
  const at::Tensor a0 = Rows(1, 1), a1 = Rows(1, 11);
  const at::Tensor b0 = at::arange(21, 24, at::dtype(at::kFloat)).reshape({1, 3});
  const at::Tensor b1 = at::arange(31, 34, at::dtype(at::kFloat)).reshape({1, 3});
  const at::Tensor c0 = Rows(1, 41).to(at::kDouble);
  harness.Submit(1, Request(a0));
  harness.Submit(2, Request(b0));
  harness.Submit(3, Request(a1));
  harness.Submit(4, Request(c0));
  harness.Submit(5, Request(b1));
  harness.Release();
  ASSERT_TRUE(harness.AwaitAnswers(6));
  ExpectReported(harness.Result(1), a0, 2);
  ExpectReported(harness.Result(3), a1, 2);
  ExpectReported(harness.Result(2), b0, 2);
  ExpectReported(harness.Result(5), b1, 2);
  ExpectReported(harness.Result(4), c0, 1);
  ASSERT_EQ(harness.Result(4).outputs.size(), 2u);
  EXPECT_EQ(harness.Result(4).outputs[0].toTensor().scalar_type(), at::kDouble);
  EXPECT_THAT(harness.order(), ElementsAre(0, 1, 3, 2, 5, 4));
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{1, 1}, Batch{2, 2}, Batch{2, 2}, Batch{1, 1}));
}

// Inputs without the batch dimension (0-dim) cannot be concatenated along it:
// each runs alone (here the model then refuses the scalar) and the process
// keeps serving.
TEST_F(SchedulerTest, InputsWithoutTheBatchDimensionAreNeverBatched) {
  Harness harness(model(), Batched(8, std::chrono::microseconds(0)), gate());
  ASSERT_TRUE(harness.SubmitHeld(0));
  harness.Submit(1, Request(at::scalar_tensor(3.0f)));
  harness.Submit(2, Request(at::scalar_tensor(4.0f)));
  harness.Release();
  ASSERT_TRUE(harness.AwaitAnswers(3));
  for (int id : {1, 2}) {
    EXPECT_THAT(harness.Result(id).status, StatusIs(StatusCode::kInternal)) << id;
  }
  EXPECT_THAT(harness.batches(), ElementsAre(Batch{1, 1}, Batch{1, 1}, Batch{1, 1}));
  harness.Submit(3, Request(Rows(1, 1)));
  ASSERT_TRUE(harness.AwaitAnswers(4));
  ExpectReported(harness.Result(3), Rows(1, 1), 1);
}

}  // namespace
}  // namespace chorus::testing
