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
#include "chorus/training/collectives/bindings.h"
#include "chorus/training/collectives/communicator.h"
#include "chorus/training/collectives/hierarchical.h"

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
    std::vector<RankComms> ranks;
    for (const MeshRank& rank : CreateInProcessMesh(dp, tp)) ranks.push_back({rank.dp, rank.tp});
    return RunRanks(ranks, param_dtype);
  }

  // One rank's communicators: data parallel, tensor parallel, and for HSDP the
  // groups that shard the parameters and that replicate them.
  struct RankComms {
    std::shared_ptr<Communicator> dp, tp, shard, replicate;
  };

  // Trains with one rank per entry of `comms`; returns rank 0's result.
  static Result RunRanks(const std::vector<RankComms>& comms, const std::string& param_dtype = "") {
    const int world = static_cast<int>(comms.size());
    std::vector<Result> results(world);
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < world; ++rank) {
      ranks.emplace_back([&, rank] {
        c10::IValue dp_comm = CommunicatorToIValue(comms[rank].dp);
        c10::IValue tp_comm = CommunicatorToIValue(comms[rank].tp);
        c10::IValue shard_comm = CommunicatorToIValue(comms[rank].shard);
        c10::IValue replicate_comm = CommunicatorToIValue(comms[rank].replicate);
        c10::Dict<std::string, int64_t> config;
        config.insert("n_kv_heads", 4);
        config.insert("steps", 10);
        InterpreterSession session = manager_->Acquire(rank);
        StatusOr<Object> run = session.Global("train", "run_rank");
        StatusOr<Object> out =
            run.ok()
                ? run->Call({dp_comm, tp_comm, config, param_dtype, shard_comm, replicate_comm})
                : run;
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

// 2 hosts x 2 interpreters, the hosts simulated in this process (an in-process
// group each, Gloo over loopback between them): FSDP over all four ranks.
TEST_F(ParallelTest, FsdpAcrossTwoHostsOfTwoRanksMatchesOneRank) {
  auto hosts = CreateSimulatedHosts(2, 2);
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  std::vector<RankComms> ranks;
  for (const auto& rank : *hosts) ranks.push_back({rank, nullptr});
  ExpectMatchesSingleRank(RunRanks(ranks), "fsdp_2_hosts_x_2");
  EXPECT_GT((*hosts)[0]->cross_host_bytes(), 0);
}

// HSDP, 2 x 2 in process: parameters sharded over ranks {0, 1} and {2, 3},
// gradients averaged over {0, 2} and {1, 3}; the data split over all four.
TEST_F(ParallelTest, HsdpTwoByTwoMatchesOneRank) {
  std::vector<MeshRank> mesh = CreateInProcessMesh(2, 2);
  auto flat = InProcessGroup::Create(4);
  std::vector<RankComms> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back({flat->Rank(r), nullptr, mesh[r].tp, mesh[r].dp});
  ExpectMatchesSingleRank(RunRanks(ranks), "hsdp_2x2");
}

// HSDP across 2 simulated hosts: shard inside each host, replicate across.
// Across hosts only gradients move (one reduction of each shard per step),
// less than FSDP over all four ranks moves.
TEST_F(ParallelTest, HsdpAcrossTwoHostsMatchesOneRankAndMovesLessThanFsdp) {
  auto hsdp = CreateSimulatedHosts(2, 2);
  ASSERT_TRUE(hsdp.ok()) << hsdp.status().ToString();
  std::vector<RankComms> ranks;
  for (const auto& rank : *hsdp) ranks.push_back({rank, nullptr, rank->local(), rank->cross()});
  ExpectMatchesSingleRank(RunRanks(ranks), "hsdp_2_hosts_x_2");

  auto fsdp = CreateSimulatedHosts(2, 2);
  ASSERT_TRUE(fsdp.ok()) << fsdp.status().ToString();
  ranks.clear();
  for (const auto& rank : *fsdp) ranks.push_back({rank, nullptr});
  ASSERT_EQ(RunRanks(ranks).error, "");
  // Per step FSDP moves parameters twice (all-gathers in forward and
  // backward) and gradients once across hosts; HSDP only gradients, each
  // shard once: about half (and the loss averaging, a few bytes).
  const int64_t fsdp_bytes = (*fsdp)[0]->cross_host_bytes();
  const int64_t hsdp_bytes = (*hsdp)[0]->cross_host_bytes();
  RecordProperty("fsdp_cross_host_bytes", std::to_string(fsdp_bytes));
  RecordProperty("hsdp_cross_host_bytes", std::to_string(hsdp_bytes));
  EXPECT_GT(hsdp_bytes, 0);
  EXPECT_LT(hsdp_bytes, fsdp_bytes * 6 / 10);
}

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
