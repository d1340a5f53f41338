// FSDP and tensor parallelism across chorus interpreters (one rank each, on
// its own thread), checked against single-rank training of the same Llama 3
// debug model with grouped-query attention: same losses at every step and
// same final weights, within 1e-5 relative, in fp32.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/training/bindings.h"
#include "chorus/training/communicator.h"

namespace chorus {
namespace {

constexpr int kRanks = 4;

struct Result {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> weights;
  std::string error;
};

class ParallelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    InterpreterManagerOptions options;
    options.num_interpreters = kRanks;
    options.cache_dir = "test-cache/shared";
    options.intra_op_threads = 1;
    auto created = InterpreterManager::Create(options);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    manager_ = created->release();
    for (int i = 0; i < kRanks; ++i) {
      InterpreterSession session = manager_->Acquire(i);
      Status ready = session.Exec(std::string("import sys\nsys.path.insert(0, '") +
                                  CHORUS_SOURCE_DIR + "/examples/llama3')\nimport train");
      ASSERT_TRUE(ready.ok()) << ready.ToString();
    }
    single_ = new Result(Run(1, 1));
    ASSERT_EQ(single_->error, "");
    ASSERT_EQ(single_->losses.size(), 10u);
  }
  static void TearDownTestSuite() {
    delete single_;
    delete manager_;
  }

  // Trains with `dp` x `tp` ranks (rank = dp_rank * tp + tp_rank); returns rank 0's result.
  static Result Run(int dp, int tp, const std::string& param_dtype = "") {
    const int world = dp * tp;
    std::vector<MeshRank> mesh = CreateInProcessMesh(dp, tp);
    std::vector<Result> results(world);
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < world; ++rank) {
      ranks.emplace_back([&, rank] {
        c10::IValue dp_comm = CommunicatorToIValue(mesh[rank].dp);
        c10::IValue tp_comm = CommunicatorToIValue(mesh[rank].tp);
        c10::Dict<std::string, int64_t> config;
        config.insert("n_kv_heads", 4);
        config.insert("steps", 10);
        InterpreterSession session = manager_->Acquire(rank);
        StatusOr<Object> run = session.Global("train", "run_rank");
        StatusOr<Object> out = run.ok() ? run->Call({dp_comm, tp_comm, config, param_dtype}) : run;
        StatusOr<c10::IValue> value = out.ok() ? out->ToIValue() : out.status();
        Result& result = results[rank];
        if (!value.ok()) {
          result.error = value.status().ToString();
          if (value.status().python_error())
            result.error += value.status().python_error()->traceback;
          return;
        }
        auto dict = value->toGenericDict();
        for (const c10::IValue& loss : dict.at("losses").toListRef()) {
          result.losses.push_back(loss.toDouble());
        }
        for (const auto& entry : dict.at("weights").toGenericDict()) {
          result.weights[entry.key().toStringRef()] = entry.value().toTensor();
        }
      });
    }
    for (auto& thread : ranks) thread.join();
    for (const Result& result : results) {
      if (!result.error.empty()) return result;
    }
    // Every rank reports the same global losses.
    for (int rank = 1; rank < world; ++rank) {
      if (results[rank].losses != results[0].losses) {
        Result mismatch;
        mismatch.error = "rank " + std::to_string(rank) + " reports other losses than rank 0";
        return mismatch;
      }
    }
    return results[0];
  }

  static void ExpectMatchesSingleRank(const Result& result, const std::string& layout) {
    ASSERT_EQ(result.error, "") << layout;
    ASSERT_EQ(result.losses.size(), single_->losses.size()) << layout;
    for (size_t step = 0; step < result.losses.size(); ++step) {
      double reference = single_->losses[step];
      EXPECT_LE(std::abs(result.losses[step] - reference) / std::abs(reference), 1e-5)
          << layout << " step " << step << ": " << result.losses[step] << " vs " << reference;
    }
    ASSERT_EQ(result.weights.size(), single_->weights.size()) << layout;
    double worst = 0;
    std::string worst_name;
    for (const auto& [name, reference] : single_->weights) {
      auto it = result.weights.find(name);
      ASSERT_NE(it, result.weights.end()) << layout << ": no " << name;
      ASSERT_EQ(it->second.sizes(), reference.sizes()) << layout << " " << name;
      double relative = (it->second - reference).norm().item<double>() /
                        std::max(reference.norm().item<double>(), 1e-12);
      if (relative > worst) {
        worst = relative;
        worst_name = name;
      }
    }
    EXPECT_LE(worst, 1e-5) << layout << ": " << worst_name << " differs by " << worst;
    RecordProperty(layout + "_worst_weight_relative_error", std::to_string(worst));
  }

  static InterpreterManager* manager_;
  static Result* single_;
};

InterpreterManager* ParallelTest::manager_ = nullptr;
Result* ParallelTest::single_ = nullptr;

TEST_F(ParallelTest, SingleRankLossFalls) {
  EXPECT_LT(single_->losses.back(), single_->losses.front());
}

TEST_F(ParallelTest, FsdpOnTwoRanksMatchesOneRank) { ExpectMatchesSingleRank(Run(2, 1), "fsdp2"); }

TEST_F(ParallelTest, FsdpOnFourRanksMatchesOneRank) { ExpectMatchesSingleRank(Run(4, 1), "fsdp4"); }

TEST_F(ParallelTest, TensorParallelOnTwoRanksMatchesOneRank) {
  ExpectMatchesSingleRank(Run(1, 2), "tp2");
}

TEST_F(ParallelTest, FsdpTimesTensorParallelTwoByTwoMatchesOneRank) {
  ExpectMatchesSingleRank(Run(2, 2), "fsdp2xtp2");
}

// bf16 parameters for compute, fp32 gradient reduction and fp32 shards.
TEST_F(ParallelTest, FsdpMixedPrecisionTrainsCloseToFp32) {
  Result result = Run(2, 1, "bfloat16");
  ASSERT_EQ(result.error, "");
  for (size_t step = 0; step < result.losses.size(); ++step) {
    EXPECT_LE(std::abs(result.losses[step] - single_->losses[step]) / single_->losses[step], 0.03)
        << "step " << step;
  }
  EXPECT_LT(result.losses.back(), result.losses.front());
  for (const auto& [name, weight] : result.weights) {
    EXPECT_EQ(weight.scalar_type(), at::kBFloat16) << name << " (gathered in param_dtype)";
  }
}

TEST_F(ParallelTest, TensorParallelDegreeMustDivideTheHeads) {
  Result result = Run(1, 3);
  EXPECT_NE(result.error.find("must divide n_heads"), std::string::npos) << result.error;
}

}  // namespace
}  // namespace chorus
