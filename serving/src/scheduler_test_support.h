// Test support for scheduler_test: BatchReporter, the model its tests serve,
// with the gate that holds its calls; a ModelScheduler harness that records
// answers and executions; and the SchedulerTest fixture, which packages it.
#ifndef CHORUS_SERVING_SCHEDULER_TEST_SUPPORT_H_
#define CHORUS_SERVING_SCHEDULER_TEST_SUPPORT_H_

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
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
#include "chorus/serving/scheduler.h"
#include "tests/support/python_testing.h"

namespace chorus::testing {

using Clock = std::chrono::steady_clock;

// How long a test waits for answers before it fails: far beyond what any
// request takes, so only a scheduler that lost a request reaches it.
inline constexpr auto kPatience = std::chrono::seconds(60);
// A queue delay no test should sit out: the batches that use it fill up (to
// their maximum or a preferred size) as soon as the test has submitted.
inline constexpr auto kLongDelay = std::chrono::microseconds(10'000'000);
inline constexpr char kGateVariable[] = "CHORUS_SERVING_TEST_GATE";

// The model, packaged by the test. Special input values drive the tests: a
// negative value holds the call at a gate (two FIFOs) until the test lets it
// go, so that the scheduler's only worker is busy exactly while requests must
// wait in the queue; 1000 raises; 500 answers one row whatever the batch.
inline constexpr char kModelsSource[] = R"(
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

// This process's folder: ctest runs the tests of this suite as concurrent
// processes, and each has its own FIFOs.
inline const std::string& WorkDir() {
  static const std::string* dir = new std::string(testing::ProcessWorkDir("serving"));
  return *dir;
}

// Runs `code` with the pinned Python and chorus' Python package; returns its
// exit status.
inline int RunPython(const std::string& code) {
  return testing::RunPinnedPython(code, WorkDir() + "/package.py");
}

inline UniqueFd OpenFifo(const std::string& path, int flags) {
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

inline InferenceRequest Request(at::Tensor x) {
  InferenceRequest request;
  request.inputs.push_back(std::move(x));
  return request;
}

// `rows` rows of two features counting up from `first` (1 <= values < 500):
// each request's values are its own, so a test sees whose rows came back.
inline at::Tensor Rows(int64_t rows, float first) {
  return at::arange(first, first + 2 * rows, at::dtype(at::kFloat)).reshape({rows, 2});
}

inline SchedulerOptions Unbatched() {
  SchedulerOptions options;
  options.batching.enabled = false;
  return options;
}

inline SchedulerOptions Batched(int64_t max_batch_size, std::chrono::microseconds delay,
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
    scheduler_->Submit(std::move(request), Recorder(id));
  }
  // Submits through SubmitOrRun (this thread may run it).
  void SubmitOrRun(int id, InferenceRequest request) {
    scheduler_->SubmitOrRun(std::move(request), Recorder(id));
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
  // Records request `id`'s answer, and whether it came on the submitting thread.
  ModelScheduler::Done Recorder(int id) {
    const std::thread::id caller = std::this_thread::get_id();
    return [this, id, caller](InferenceResult result) {
      MutexLock lock(&mu_);
      answers_[id] = Answer{std::move(result), std::this_thread::get_id() == caller};
      order_.push_back(id);
      changed_.SignalAll();
    };
  }

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
inline void ExpectReported(const InferenceResult& result, const at::Tensor& x, int64_t batch) {
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
  inline static InterpreterManager* manager_ = nullptr;
  inline static std::shared_ptr<Model>* model_ = nullptr;
  inline static Gate* gate_ = nullptr;
};

}  // namespace chorus::testing

#endif  // CHORUS_SERVING_SCHEDULER_TEST_SUPPORT_H_
