// GenerationEngines on the debug Llama 3 (examples/llama3/generate.py),
// packaged by the test, on two interpreters: eight concurrent greedy requests
// stream exactly what full recomputation in plain Python generates; a client
// that goes away mid-stream and a cancelled request free their cache; bad
// prompts and parameters are refused with the engine's reason.
#include "chorus/serving/generation_engines.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/model.h"
#include "tests/support/python_testing.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kPrompts = {"chorus",
                                           "trains and serves Llama 3",
                                           "a",
                                           "the quick brown fox jumps over",
                                           "In the beginning",
                                           "0123456789",
                                           "serve",
                                           "continuous batching joins"};

// Packages the model and writes each prompt's greedy continuation (12 tokens,
// full recomputation) next to it.
constexpr char kPackage[] = R"(
import json, sys
sys.path.insert(0, sys.argv[1] + "/examples/llama3")
import torch
import generate, model as llama
from chorus.package import create_package

transformer = llama.build("debug", seed=3, vocab_size=256, max_seq_len=128).eval()
with torch.no_grad():  # attention that matters (see python/tests/test_generation.py)
    for layer in transformer.layers.values():
        layer.attention.wo.weight.mul_(8)
        layer.attention.wq.weight.mul_(8 ** 0.5)
        layer.attention.wk.weight.mul_(8 ** 0.5)
generator = generate.Llama3Generator(transformer)
create_package(sys.argv[2] + "/llama3.pt", generator, (["chorus"],), name="llama3",
               batchable=False, input_names=["text_input"], output_names=["text_output"],
               progress=False)
expected = {}
for prompt in json.load(open(sys.argv[2] + "/prompts.json")):
    tokens = generator.tokenizer.encode(prompt)
    with torch.inference_mode():
        for _ in range(12):
            tokens.append(int(transformer(torch.tensor([tokens]))[0, -1].argmax()))
    expected[prompt] = generator.tokenizer.decode(tokens[len(prompt.encode()):])
json.dump(expected, open(sys.argv[2] + "/expected.json", "w"))
)";

// One request's chunks and end.
struct Outcome {
  std::string text;
  std::vector<GenerationChunk> chunks;
  Status status;
};

class GenerationEnginesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = testing::ProcessWorkDir("generation");
    ASSERT_OK(RemoveTree(dir));
    ASSERT_OK(MakeDirectories(dir));
    ASSERT_OK(WriteFileAtomically(dir + "/prompts.json", nlohmann::json(kPrompts).dump()));
    ASSERT_OK(WriteFileAtomically(dir + "/package.py", kPackage));
    const std::string command = std::string("PYTHONPATH=") + CHORUS_PYTHON_DIR + " " +
                                CHORUS_PYTHON + " " + dir + "/package.py " + CHORUS_SOURCE_DIR +
                                " " + dir;
    ASSERT_EQ(std::system(command.c_str()), 0);
    std::ifstream expected(dir + "/expected.json");
    expected_ = new std::map<std::string, std::string>(
        nlohmann::json::parse(expected).get<std::map<std::string, std::string>>());
    InterpreterManagerOptions options;
    options.num_interpreters = 2;
    options.cache_dir = "test-cache/shared";
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<InterpreterManager> manager,
                         InterpreterManager::Create(options));
    manager_ = manager.release();
    placement_ = new InterpreterPlacement(manager_);
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<Model> model, Model::Load(manager_, dir + "/llama3.pt"));
    model_ = new std::shared_ptr<Model>(std::move(model));
  }

  static void TearDownTestSuite() {
    delete model_;
    delete placement_;
    delete manager_;
    delete expected_;
  }

  static GenerationOptions TwoEngines() {
    GenerationOptions options;
    options.engines = 2;
    options.cache_blocks = 64;
    return options;
  }

  // Submits `prompt` and returns a future of its outcome; `keep` says, per chunk
  // index, whether the client still wants more.
  static std::future<Outcome> Generate(GenerationEngines& engines, const std::string& prompt,
                                       const std::string& parameters,
                                       std::function<bool(size_t)> keep = nullptr,
                                       std::shared_ptr<std::atomic<bool>> cancelled = nullptr) {
    auto outcome = std::make_shared<Outcome>();
    auto promise = std::make_shared<std::promise<Outcome>>();
    GenerationRequest request;
    request.prompt = prompt;
    request.parameters_json = parameters;
    request.cancelled = std::move(cancelled);
    request.on_chunk = [outcome, keep](const GenerationChunk& chunk) {
      outcome->chunks.push_back(chunk);
      outcome->text += chunk.text;
      return keep == nullptr || keep(outcome->chunks.size());
    };
    request.done = [outcome, promise](Status status) {
      outcome->status = std::move(status);
      promise->set_value(*outcome);
    };
    std::future<Outcome> future = promise->get_future();
    engines.Submit(std::move(request));
    return future;
  }

  static Outcome Await(std::future<Outcome>& future) {
    EXPECT_EQ(future.wait_for(std::chrono::seconds(120)), std::future_status::ready);
    return future.get();
  }

  static InterpreterManager* manager_;
  static InterpreterPlacement* placement_;
  static std::shared_ptr<Model>* model_;
  static std::map<std::string, std::string>* expected_;
};

InterpreterManager* GenerationEnginesTest::manager_ = nullptr;
InterpreterPlacement* GenerationEnginesTest::placement_ = nullptr;
std::shared_ptr<Model>* GenerationEnginesTest::model_ = nullptr;
std::map<std::string, std::string>* GenerationEnginesTest::expected_ = nullptr;

constexpr char kGreedy12[] = R"({"max_tokens": 12, "temperature": 0})";

TEST_F(GenerationEnginesTest, ConcurrentGreedyRequestsStreamWhatRecomputationGenerates) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GenerationEngines> started,
                       GenerationEngines::Start(*model_, placement_, TwoEngines()));
  GenerationEngines& engines = *started;
  std::vector<std::future<Outcome>> futures;
  for (const std::string& prompt : kPrompts) {
    futures.push_back(Generate(engines, prompt, kGreedy12));
  }
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    SCOPED_TRACE(kPrompts[i]);
    Outcome outcome = Await(futures[i]);
    ASSERT_OK(outcome.status);
    EXPECT_EQ(outcome.text, expected_->at(kPrompts[i]));
    ASSERT_FALSE(outcome.chunks.empty());
    EXPECT_EQ(outcome.chunks.back().finish_reason, "length");
    EXPECT_EQ(outcome.chunks.back().completion_tokens, 12);
    EXPECT_EQ(outcome.chunks.back().prompt_tokens, static_cast<int>(kPrompts[i].size()));
    EXPECT_EQ(outcome.chunks.size(), 12u);  // one token per step
  }
  EXPECT_EQ(engines.Stats().cache_blocks_used, 0);
  EXPECT_EQ(engines.Stats().cache_blocks_total, 2 * 64);
}

TEST_F(GenerationEnginesTest, AFollowUpSentAsTheFirstEndsFindsItsEngineIdleAndItsPrefixCached) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GenerationEngines> started,
                       GenerationEngines::Start(*model_, placement_, TwoEngines()));
  GenerationEngines& engines = *started;
  // 64 bytes: 4 blocks of 16 tokens, cached once the first request ends.
  const std::string prompt = "A follow-up request repeats this prompt of exactly 64 bytes: ok.";
  ASSERT_EQ(prompt.size(), 64u);
  std::promise<std::future<Outcome>> follow_up;
  GenerationRequest first;
  first.prompt = prompt;
  first.parameters_json = kGreedy12;
  first.on_chunk = [](const GenerationChunk&) { return true; };
  // The client's next request, sent the moment it hears the end: it must reach
  // the engine that served the first (both are idle then), not the other.
  first.done = [&](Status status) {
    EXPECT_OK(status);
    follow_up.set_value(Generate(engines, prompt, kGreedy12));
  };
  engines.Submit(std::move(first));
  std::future<std::future<Outcome>> sent = follow_up.get_future();
  ASSERT_EQ(sent.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  std::future<Outcome> second = sent.get();
  Outcome outcome = Await(second);
  ASSERT_OK(outcome.status);
  const GenerationStats stats = engines.Stats();
  EXPECT_EQ(stats.prefix_cache_queries, 128u);
  // Every block of the follow-up's prompt but the last, whose final token is computed.
  EXPECT_EQ(stats.prefix_cache_hits, 48u);
}

TEST_F(GenerationEnginesTest, AClientThatGoesAwayOrCancelsFreesItsCache) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GenerationEngines> started,
                       GenerationEngines::Start(*model_, placement_, TwoEngines()));
  GenerationEngines& engines = *started;
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  std::future<Outcome> leaves = Generate(engines, kPrompts[1], R"({"max_tokens": 100})",
                                         [](size_t chunks) { return chunks < 3; });
  std::future<Outcome> cancels = Generate(
      engines, kPrompts[3], R"({"max_tokens": 100, "temperature": 0})",
      [cancelled](size_t chunks) {
        if (chunks == 2) cancelled->store(true);
        return true;
      },
      cancelled);
  Outcome left = Await(leaves);
  EXPECT_THAT(left.status, StatusIs(StatusCode::kCancelled, "the client went away"));
  EXPECT_EQ(left.chunks.size(), 3u);
  Outcome stopped = Await(cancels);
  EXPECT_THAT(stopped.status, StatusIs(StatusCode::kCancelled));
  EXPECT_LT(stopped.chunks.size(), 100u);
  // The engines drop both at their next step, even with nothing else to do.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engines.Stats().cache_blocks_used != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(engines.Stats().cache_blocks_used, 0);
  Outcome after =
      Await(*std::make_unique<std::future<Outcome>>(Generate(engines, kPrompts[0], kGreedy12)));
  ASSERT_OK(after.status);
  EXPECT_EQ(after.text, expected_->at(kPrompts[0]));
  EXPECT_EQ(engines.Stats().cache_blocks_used, 0);
}

TEST_F(GenerationEnginesTest, BadRequestsAreRefusedWithTheEnginesReason) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GenerationEngines> started,
                       GenerationEngines::Start(*model_, placement_, TwoEngines()));
  GenerationEngines& engines = *started;
  std::future<Outcome> negative = Generate(engines, "x", R"({"max_tokens": -1})");
  std::future<Outcome> unknown = Generate(engines, "x", R"({"beam_width": 4})");
  std::future<Outcome> long_prompt = Generate(engines, std::string(200, 'x'), "{}");
  std::future<Outcome> not_json = Generate(engines, "x", "[1, 2]");
  EXPECT_THAT(Await(negative).status,
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_tokens must be a positive")));
  EXPECT_THAT(
      Await(unknown).status,
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("unknown sampling parameter 'beam_width'")));
  EXPECT_THAT(Await(long_prompt).status,
              StatusIs(StatusCode::kInvalidArgument,
                       "the prompt has 200 tokens; the model's context is 128"));
  EXPECT_THAT(Await(not_json).status,
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("must be an object")));
  // And it serves on.
  std::future<Outcome> fine = Generate(engines, kPrompts[2], kGreedy12);
  Outcome outcome = Await(fine);
  ASSERT_OK(outcome.status);
  EXPECT_EQ(outcome.text, expected_->at(kPrompts[2]));
}

}  // namespace
}  // namespace chorus
