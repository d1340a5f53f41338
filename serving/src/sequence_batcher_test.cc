// SequenceBatcher over a RequestExecutor (a model that answers its requests
// itself, as TorchServe's workers): a sequence stays on one instance, an
// instance's executions never overlap, and TorchServe's rules (an unknown
// sequence starts, a request naming none starts a new one, the limits).
#include "chorus/serving/sequence_batcher.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace chorus {
namespace {

std::string IdText(const CorrelationId& id) {
  if (const auto* number = std::get_if<uint64_t>(&id)) return std::to_string(*number);
  return std::get<std::string>(id);
}

// Answers each request with its instance; records where each sequence ran,
// whether two executions of one instance overlapped, and holds requests of
// sequence "hold" until Release().
class RecordingExecutor final : public RequestExecutor {
 public:
  explicit RecordingExecutor(int instances) : running_(instances) {}

  int instances() const override { return static_cast<int>(running_.size()); }

  Status Execute(int instance, std::vector<ExecutorRequest> batch) override {
    if (running_.at(instance).fetch_add(1) != 0) overlapped_ = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (ExecutorRequest& call : batch) {
      const std::string id = IdText(call.request.correlation_id);
      {
        std::unique_lock<std::mutex> lock(mu_);
        instances_of_[id].insert(instance);
        if (call.request.flags & kSequenceStartFlag) started_.insert(id);
        ++held_;
        held_changed_.notify_all();
        held_changed_.wait(lock, [&] { return id != "hold" || released_; });
        --held_;
      }
      InferenceResult result;
      result.outputs = {at::full({1, 1}, instance, at::kLong)};
      call.done(std::move(result));
    }
    running_.at(instance).fetch_sub(1);
    return OkStatus();
  }

  void Drain(std::chrono::steady_clock::time_point) override {}

  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    held_changed_.notify_all();
  }
  void WaitUntilRunning() {
    std::unique_lock<std::mutex> lock(mu_);
    held_changed_.wait(lock, [&] { return held_ > 0; });
  }
  bool overlapped() const { return overlapped_; }
  std::map<std::string, std::set<int>> instances_of() {
    std::lock_guard<std::mutex> lock(mu_);
    return instances_of_;
  }
  std::set<std::string> started() {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

 private:
  std::vector<std::atomic<int>> running_;
  std::atomic<bool> overlapped_{false};
  std::mutex mu_;
  std::condition_variable held_changed_;
  int held_ = 0;
  bool released_ = false;
  std::map<std::string, std::set<int>> instances_of_;
  std::set<std::string> started_;
};

Manifest Signature() {
  Manifest manifest;
  manifest.inputs = {TensorSpec{"X", "float32", {-1, 1}, false}};
  manifest.outputs = {TensorSpec{"INSTANCE", "int64", {-1, 1}, false}};
  return manifest;
}

std::unique_ptr<SequenceBatcher> Batcher(std::shared_ptr<RecordingExecutor> executor,
                                         SequenceBatching sequences) {
  SchedulerOptions options;
  options.workers = executor->instances();
  return SequenceBatcher::Create(std::move(executor), Signature(), std::move(sequences), options)
      .value();
}

// Submits one request of sequence `id` (not started explicitly); its result.
std::future<InferenceResult> Send(SequenceBatcher& batcher, CorrelationId id) {
  auto promise = std::make_shared<std::promise<InferenceResult>>();
  std::future<InferenceResult> result = promise->get_future();
  SequenceRequest request;
  request.id = std::move(id);
  request.call.inputs = {at::zeros({1, 1})};
  batcher.Submit(std::move(request),
                 [promise](InferenceResult answer) { promise->set_value(std::move(answer)); });
  return result;
}

SequenceBatching TorchServeRules() {
  SequenceBatching sequences;
  sequences.start_unknown = true;
  sequences.new_sequence_prefix = "seq-";
  return sequences;
}

TEST(SequenceBatcherExecutorTest, EachSequenceKeepsOneInstanceAndInstancesNeverOverlap) {
  auto executor = std::make_shared<RecordingExecutor>(2);
  std::unique_ptr<SequenceBatcher> batcher = Batcher(executor, TorchServeRules());
  std::vector<std::thread> clients;
  for (int s = 0; s < 4; ++s) {
    clients.emplace_back([&, s] {
      for (int i = 0; i < 20; ++i) {
        EXPECT_TRUE(Send(*batcher, "s" + std::to_string(s)).get().status.ok());
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_FALSE(executor->overlapped());
  std::set<int> used;
  for (const auto& [id, instances] : executor->instances_of()) {
    EXPECT_EQ(instances.size(), 1u) << id;
    used.insert(instances.begin(), instances.end());
  }
  EXPECT_EQ(used, (std::set<int>{0, 1}));  // the sequences spread over both
}

TEST(SequenceBatcherExecutorTest, ARequestNamingNoSequenceStartsANewOne) {
  auto executor = std::make_shared<RecordingExecutor>(1);
  std::unique_ptr<SequenceBatcher> batcher = Batcher(executor, TorchServeRules());
  ASSERT_TRUE(Send(*batcher, std::string()).get().status.ok());
  ASSERT_TRUE(Send(*batcher, uint64_t{0}).get().status.ok());
  ASSERT_TRUE(Send(*batcher, "named").get().status.ok());
  const std::set<std::string> started = executor->started();
  ASSERT_EQ(started.size(), 2u);  // the two new ones; "named" is started by its first request
  for (const std::string& id : started) EXPECT_EQ(id.rfind("seq-", 0), 0u) << id;
  EXPECT_EQ(executor->instances_of().count("named"), 1u);
  EXPECT_EQ(batcher->active_sequences(), 3u);
}

TEST(SequenceBatcherExecutorTest, WithoutTheRulesAnUnknownOrMissingSequenceIsRefused) {
  auto executor = std::make_shared<RecordingExecutor>(1);
  std::unique_ptr<SequenceBatcher> batcher = Batcher(executor, SequenceBatching{});
  EXPECT_EQ(Send(*batcher, "unknown").get().status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Send(*batcher, std::string()).get().status.code(), StatusCode::kInvalidArgument);
}

TEST(SequenceBatcherExecutorTest, SequencesAndWaitingRequestsBeyondTheirLimitsAreRefused) {
  auto executor = std::make_shared<RecordingExecutor>(1);
  SequenceBatching sequences = TorchServeRules();
  sequences.max_sequences = 2;
  sequences.max_waiting_per_sequence = 1;
  std::unique_ptr<SequenceBatcher> batcher = Batcher(executor, sequences);
  std::future<InferenceResult> running = Send(*batcher, "hold");
  executor->WaitUntilRunning();
  std::future<InferenceResult> waiting = Send(*batcher, "hold");
  InferenceResult refused = Send(*batcher, "hold").get();
  EXPECT_EQ(refused.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status.message().find("waiting"), std::string::npos);
  std::future<InferenceResult> other = Send(*batcher, "other");  // the second sequence
  refused = Send(*batcher, "third").get();
  EXPECT_EQ(refused.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(refused.status.message().find("\"third\""), std::string::npos);
  executor->Release();
  EXPECT_TRUE(running.get().status.ok());
  EXPECT_TRUE(waiting.get().status.ok());
  EXPECT_TRUE(other.get().status.ok());
}

}  // namespace
}  // namespace chorus
