// ModelScheduler on a real torch.package model in a real interpreter: dynamic
// batching (max and preferred sizes, the queue delay, compatibility), the
// queue limit, deadlines and cancellation of queued requests, model errors,
// draining; and FlattenOutputs on every shape of model output.
#include "chorus/serving/scheduler.h"

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <future>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/model.h"
#include "tests/support/python_testing.h"

namespace chorus {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// How long a test waits for answers before it fails: far beyond what any
// request takes, so only a scheduler that lost a request reaches it.
constexpr auto kPatience = std::chrono::seconds(60);
// A queue delay no test should sit out: the batches that use it fill up (to
// their maximum or a preferred size) as soon as the test has submitted.
constexpr auto kLongDelay = std::chrono::microseconds(10'000'000);
constexpr char kGateVariable[] = "CHORUS_SERVING_TEST_GATE";

// The model, packaged by the test. Special input values drive the tests: a
// negative value holds the call at a gate (two FIFOs) until the test lets it
// go, so that the scheduler's only worker is busy exactly while requests must
// wait in the queue; 1000 raises; 500 answers one row whatever the batch.
constexpr char kModelsSource[] = R"(
"""The model scheduler_test.cc serves."""

import os

import torch


class BatchReporter(torch.nn.Module):
    """doubled = 2 x; batch = the rows this call saw, repeated once per row."""

    def forward(self, x):
        if bool((x < 0).any()):
            gate = os.environ["CHORUS_SERVING_TEST_GATE"]
            with open(os.path.join(gate, "entered"), "w") as fifo:
                fifo.write("entered")
            with open(os.path.join(gate, "release")) as fifo:
                fifo.read()
        if bool((x == 1000).any()):
            raise ValueError("the input asked for an error")
        doubled = x * 2
        batch = torch.full((x.shape[0],), x.shape[0], dtype=torch.int64)
        if bool((x == 500).any()):
            return doubled[:1], batch[:1]
        return doubled, batch
)";

// This process's folder: ctest runs the tests of this file as concurrent
// processes, and each has its own FIFOs.
const std::string& WorkDir() {
  static const std::string* dir = new std::string(testing::ProcessWorkDir("serving"));
  return *dir;
}

// Runs `code` with the pinned Python and chorus' Python package; returns its
// exit status.
int RunPython(const std::string& code) {
  return testing::RunPinnedPython(code, WorkDir() + "/package.py");
}

UniqueFd OpenFifo(const std::string& path, int flags) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  EXPECT_GE(fd, 0) << "open " << path << ": " << std::strerror(errno);
  return UniqueFd(fd);
}

// The test's side of BatchReporter's gate. Opening a FIFO blocks until the
// other side opens it too, which makes both steps a handshake.
class Gate {
 public:
  explicit Gate(const std::string& dir) : entered_(dir + "/entered"), release_(dir + "/release") {}

  // Returns true once a held call is inside the model (it opened `entered`,
  // wrote and closed it); false if `answered` says the call ended without
  // reaching the gate, or after kPatience.
  bool AwaitEntered(const std::function<bool()>& answered) const {
    // Non-blocking, so that a call that never comes is noticed; poll() reports
    // nothing until a writer has opened the FIFO.
    UniqueFd fifo = OpenFifo(entered_, O_RDONLY | O_NONBLOCK);
    if (!fifo.valid()) return false;
    const Clock::time_point deadline = Clock::now() + kPatience;
    while (Clock::now() < deadline) {
      pollfd entry{fifo.get(), POLLIN, 0};
      const int ready = ::poll(&entry, 1, /*timeout=*/100);
      if (ready < 0 && errno != EINTR) return false;
      if (ready <= 0) {
        if (answered()) return false;
        continue;
      }
      char buffer[16];
      const ssize_t n = ::read(fifo.get(), buffer, sizeof(buffer));
      if (n == 0) return true;  // the model closed its end: it is at the gate
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    }
    return false;
  }

  // Lets the held call go on: it reads the FIFO until the test closes it.
  void Release() const {
    UniqueFd fifo = OpenFifo(release_, O_WRONLY);
    if (!fifo.valid()) return;
    EXPECT_EQ(::write(fifo.get(), "go", 2), 2);
  }

 private:
  const std::string entered_;
  const std::string release_;
};

InferenceRequest Request(at::Tensor x) {
  InferenceRequest request;
  request.inputs.push_back(std::move(x));
  return request;
}

// `rows` rows of two features counting up from `first` (1 <= values < 500):
// each request's values are its own, so a test sees whose rows came back.
at::Tensor Rows(int64_t rows, float first) {
  return at::arange(first, first + 2 * rows, at::dtype(at::kFloat)).reshape({rows, 2});
}

SchedulerOptions Unbatched() {
  SchedulerOptions options;
  options.batching.enabled = false;
  return options;
}

SchedulerOptions Batched(int64_t max_batch_size, std::chrono::microseconds delay,
                         std::vector<int64_t> preferred = {}) {
  SchedulerOptions options;
  options.batching.enabled = true;
  options.batching.batch_dim = 0;
  options.batching.max_batch_size = max_batch_size;
  options.batching.max_queue_delay = delay;
  options.batching.preferred_batch_sizes = std::move(preferred);
  return options;
}

// One execution as the scheduler reported it: (batch size, requests).
using Batch = std::pair<int64_t, int>;

// What one request got back, and whether Submit answered it before returning.
struct Answer {
  InferenceResult result;
  bool during_submit = false;
};

// A ModelScheduler that records every answer (and in which order) and every
// execution it reports.
class Harness {
 public:
  Harness(std::shared_ptr<Model> model, SchedulerOptions options, const Gate* gate)
      : gate_(gate),
        scheduler_(std::make_unique<ModelScheduler>(
            std::move(model), std::move(options),
            [this](const ExecutionStats& stats) { RecordExecution(stats); })) {}

  // A call still held at the gate is let go first: the scheduler's destructor
  // waits for running calls.
  ~Harness() {
    if (held_) gate_->Release();
    scheduler_.reset();
  }

  ModelScheduler& scheduler() { return *scheduler_; }

  void Submit(int id, InferenceRequest request) {
    const std::thread::id caller = std::this_thread::get_id();
    scheduler_->Submit(std::move(request), [this, id, caller](InferenceResult result) {
      MutexLock lock(&mu_);
      answers_[id] = Answer{std::move(result), std::this_thread::get_id() == caller};
      order_.push_back(id);
      changed_.SignalAll();
    });
  }

  // Submits a request the model holds at the gate; returns once the model runs
  // it, so that the only worker is busy until Release(). False if the request
  // never reached the gate.
  [[nodiscard]] bool SubmitHeld(int id) {
    Submit(id, Request(at::full({1, 2}, -1.0f)));
    if (!gate_->AwaitEntered([this, id] { return Find(id).has_value(); })) {
      ADD_FAILURE() << "the held request never reached the gate: " << Result(id).status.ToString();
      return false;
    }
    held_ = true;
    return true;
  }

  void Release() {
    ASSERT_TRUE(held_);
    held_ = false;
    gate_->Release();
  }

  // Waits until `count` requests have been answered; false after kPatience.
  bool AwaitAnswers(size_t count) {
    const Clock::time_point deadline = Clock::now() + kPatience;
    MutexLock lock(&mu_);
    while (answers_.size() < count && Clock::now() < deadline) changed_.WaitUntil(&mu_, deadline);
    return answers_.size() >= count;
  }

  std::optional<Answer> Find(int id) const {
    MutexLock lock(&mu_);
    auto it = answers_.find(id);
    if (it == answers_.end()) return std::nullopt;
    return it->second;
  }

  // The answer of request `id`; a failure status if it has none.
  InferenceResult Result(int id) const {
    std::optional<Answer> answer = Find(id);
    if (answer.has_value()) return answer->result;
    InferenceResult none;
    none.status = InternalError("request " + std::to_string(id) + " was not answered");
    return none;
  }

  size_t answered() const {
    MutexLock lock(&mu_);
    return answers_.size();
  }
  std::vector<int> order() const {
    MutexLock lock(&mu_);
    return order_;
  }
  std::vector<ExecutionStats> executions() const {
    MutexLock lock(&mu_);
    return executions_;
  }
  // (batch size, requests) of every execution, in order.
  std::vector<Batch> batches() const {
    std::vector<Batch> batches;
    for (const ExecutionStats& stats : executions()) {
      batches.emplace_back(stats.batch_size, stats.requests);
    }
    return batches;
  }

  void DestroyScheduler() { scheduler_.reset(); }

 private:
  void RecordExecution(const ExecutionStats& stats) {
    MutexLock lock(&mu_);
    executions_.push_back(stats);
  }

  const Gate* const gate_;
  bool held_ = false;
  mutable Mutex mu_;
  CondVar changed_;
  std::map<int, Answer> answers_ CHORUS_GUARDED_BY(mu_);
  std::vector<int> order_ CHORUS_GUARDED_BY(mu_);
  std::vector<ExecutionStats> executions_ CHORUS_GUARDED_BY(mu_);
  std::unique_ptr<ModelScheduler> scheduler_;  // last: its workers record into the above
};

// Expects BatchReporter's answer to `x`: its own rows doubled, and the size of
// the execution it ran in.
void ExpectReported(const InferenceResult& result, const at::Tensor& x, int64_t batch) {
  ASSERT_OK(result.status);
  ASSERT_EQ(result.outputs.size(), 2u);
  EXPECT_EQ(result.batch_size, batch);
  EXPECT_TRUE(at::equal(result.outputs[0].toTensor(), x * 2)) << result.outputs[0];
  EXPECT_TRUE(
      at::equal(result.outputs[1].toTensor(), at::full({x.size(0)}, batch, at::dtype(at::kLong))))
      << result.outputs[1];
}

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string& dir = WorkDir();
    ASSERT_OK(RemoveTree(dir));
    ASSERT_OK(MakeDirectories(dir));
    ASSERT_EQ(::mkfifo((dir + "/entered").c_str(), 0600), 0) << std::strerror(errno);
    ASSERT_EQ(::mkfifo((dir + "/release").c_str(), 0600), 0) << std::strerror(errno);
    ASSERT_OK(WriteFileAtomically(dir + "/serving_test_models.py", kModelsSource));
    const std::string archive = dir + "/batch_reporter.pt";
    ASSERT_EQ(RunPython(R"(
import sys
sys.path.insert(0, ")" + dir +
                        R"(")
import torch
from chorus.package import create_package
from serving_test_models import BatchReporter
create_package(")" + archive +
                        R"(", BatchReporter(), (torch.zeros(1, 2),),
               name="batch_reporter", max_batch_size=8, output_names=["doubled", "batch"],
               progress=False)
)"),
              0);
    // Interpreters read the environment once, when they are created.
    ASSERT_EQ(::setenv(kGateVariable, dir.c_str(), 1), 0);
    // One interpreter: the tests' model calls all run there, one at a time.
    ASSERT_OK_AND_ASSIGN(manager_, testing::OneInterpreter("test-cache/shared"));
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<Model> loaded, Model::Load(manager_, archive));
    model_ = new std::shared_ptr<Model>(std::move(loaded));
    gate_ = new Gate(dir);
  }

  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    delete manager_;
    manager_ = nullptr;
    delete gate_;
    gate_ = nullptr;
    EXPECT_OK(RemoveTree(WorkDir()));
  }

  void SetUp() override { ASSERT_NE(model_, nullptr) << "the suite's set-up failed"; }

  static std::shared_ptr<Model> model() { return *model_; }
  static const Gate* gate() { return gate_; }

  static InterpreterManager* manager_;
  static std::shared_ptr<Model>* model_;
  static Gate* gate_;
};

InterpreterManager* SchedulerTest::manager_ = nullptr;
std::shared_ptr<Model>* SchedulerTest::model_ = nullptr;
Gate* SchedulerTest::gate_ = nullptr;

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

// FlattenOutputs, on values built here.

Manifest WithOutputs(const std::vector<std::string>& names, const std::string& dtype = "float32") {
  Manifest manifest;
  for (const std::string& name : names) {
    manifest.outputs.push_back(TensorSpec{name, dtype, {-1}});
  }
  return manifest;
}

// Expects `got` to be exactly `want`: the same tensors (not copies), in order.
void ExpectSameTensors(const std::vector<c10::IValue>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].isTensor()) << "output " << i;
    EXPECT_TRUE(got[i].toTensor().is_same(want[i])) << "output " << i;
  }
}

c10::IValue Tuple(std::vector<c10::IValue> elements) {
  return c10::IValue(c10::ivalue::Tuple::create(std::move(elements)));
}

c10::IValue StringKeyedDict(const std::vector<std::pair<std::string, c10::IValue>>& items,
                            c10::TypePtr value_type) {
  c10::impl::GenericDict dict(c10::StringType::get(), std::move(value_type));
  for (const auto& [key, value] : items) dict.insert(c10::IValue(key), value);
  return c10::IValue(dict);
}

constexpr char kNotTensors[] =
    "the model must return a tensor or a list of str, or a tuple, list or dict of them (got ";

TEST(FlattenOutputsTest, ATensorIsTheOnlyOutput) {
  const at::Tensor a = at::ones({2});
  const Manifest manifest = WithOutputs({"y"});
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> with_manifest, FlattenOutputs(a, &manifest));
  ExpectSameTensors(with_manifest, {a});
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> without, FlattenOutputs(a, nullptr));
  ExpectSameTensors(without, {a});
}

TEST(FlattenOutputsTest, TuplesAndListsKeepTheirOrder) {
  const at::Tensor a = at::ones({2}), b = at::zeros({3});
  const Manifest manifest = WithOutputs({"first", "second"});
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> from_tuple,
                       FlattenOutputs(Tuple({a, b}), &manifest));
  ExpectSameTensors(from_tuple, {a, b});
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> from_list,
                       FlattenOutputs(c10::IValue(c10::List<at::Tensor>({b, a})), &manifest));
  ExpectSameTensors(from_list, {b, a});
  // Without a manifest any number of tensors is taken as it comes.
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> three, FlattenOutputs(Tuple({a, b, a}), nullptr));
  ExpectSameTensors(three, {a, b, a});
}

TEST(FlattenOutputsTest, DictsAreReadInManifestOrder) {
  const at::Tensor a = at::ones({2}), b = at::zeros({3}), c = at::full({1}, 7.0f);
  const Manifest manifest = WithOutputs({"first", "second"});
  // Inserted in the other order, with a key the manifest does not declare.
  const c10::IValue dict =
      StringKeyedDict({{"second", b}, {"extra", c}, {"first", a}}, c10::TensorType::get());
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> tensors, FlattenOutputs(dict, &manifest));
  ExpectSameTensors(tensors, {a, b});
}

TEST(FlattenOutputsTest, ADictMissingAnOutputOfTheManifestIsAnError) {
  const Manifest manifest = WithOutputs({"first", "second"});
  const c10::IValue dict = StringKeyedDict({{"first", at::ones({2})}}, c10::TensorType::get());
  EXPECT_THAT(FlattenOutputs(dict, &manifest),
              StatusIs(StatusCode::kInternal, "the model's output has no \"second\""));
}

TEST(FlattenOutputsTest, ADictNeedsAManifestToBeOrdered) {
  const c10::IValue dict = StringKeyedDict({{"first", at::ones({2})}}, c10::TensorType::get());
  EXPECT_THAT(FlattenOutputs(dict, nullptr),
              StatusIs(StatusCode::kInternal, std::string(kNotTensors) + "GenericDict)"));
}

TEST(FlattenOutputsTest, ValuesThatAreNotTensorsAreRefused) {
  const Manifest one = WithOutputs({"y"});
  const Manifest two = WithOutputs({"first", "second"});
  EXPECT_THAT(FlattenOutputs(c10::IValue(int64_t{3}), &one),
              StatusIs(StatusCode::kInternal, std::string(kNotTensors) + "Int)"));
  EXPECT_THAT(FlattenOutputs(Tuple({at::ones({2}), c10::IValue(int64_t{3})}), &two),
              StatusIs(StatusCode::kInternal, std::string(kNotTensors) + "Tuple)"));
  // Nested containers are not flattened.
  EXPECT_THAT(FlattenOutputs(Tuple({Tuple({at::ones({2}), at::ones({2})})}), nullptr),
              StatusIs(StatusCode::kInternal, std::string(kNotTensors) + "Tuple)"));
  EXPECT_THAT(FlattenOutputs(c10::IValue(c10::List<int64_t>({1, 2})), &two),
              StatusIs(StatusCode::kInternal, HasSubstr(kNotTensors)));
}

TEST(FlattenOutputsTest, AListOfStrIsOneStringOutput) {
  const c10::IValue words = c10::List<std::string>({"a", "b"});
  const Manifest one = WithOutputs({"words"}, "string");
  for (const Manifest* manifest : {&one, static_cast<const Manifest*>(nullptr)}) {
    ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> outputs, FlattenOutputs(words, manifest));
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_TRUE(outputs[0].is(words));
  }
  // Empty, it is a string output only because the signature says so.
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> empty,
                       FlattenOutputs(c10::List<std::string>(), &one));
  EXPECT_EQ(empty.size(), 1u);
}

TEST(FlattenOutputsTest, StringOutputsMixWithTensors) {
  const at::Tensor lengths = at::ones({2});
  const c10::IValue words = c10::List<std::string>({"a", "b"});
  Manifest manifest = WithOutputs({"words", "lengths"});
  manifest.outputs[0].dtype = "string";
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> outputs,
                       FlattenOutputs(Tuple({words, lengths}), &manifest));
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_TRUE(outputs[0].is(words));
  EXPECT_TRUE(outputs[1].toTensor().is_same(lengths));
  const c10::IValue dict =
      StringKeyedDict({{"lengths", lengths}, {"words", words}}, c10::AnyType::get());
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> from_dict, FlattenOutputs(dict, &manifest));
  ASSERT_EQ(from_dict.size(), 2u);
  EXPECT_TRUE(from_dict[0].is(words));
}

TEST(FlattenOutputsTest, ACountOtherThanTheManifestsIsAnError) {
  const Manifest manifest = WithOutputs({"first", "second"});
  const at::Tensor a = at::ones({2});
  EXPECT_THAT(
      FlattenOutputs(a, &manifest),
      StatusIs(StatusCode::kInternal, "the model returned 1 outputs; its manifest declares 2"));
  EXPECT_THAT(
      FlattenOutputs(Tuple({a, a, a}), &manifest),
      StatusIs(StatusCode::kInternal, "the model returned 3 outputs; its manifest declares 2"));
  EXPECT_THAT(
      FlattenOutputs(c10::IValue(c10::List<at::Tensor>()), &manifest),
      StatusIs(StatusCode::kInternal, "the model returned 0 outputs; its manifest declares 2"));
}

}  // namespace
}  // namespace chorus
