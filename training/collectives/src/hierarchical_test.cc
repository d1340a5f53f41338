// Hierarchical collectives (hierarchical.h) on 2 hosts x 2 local ranks, the
// hosts simulated in this process (an in-process group each, Gloo over a
// TCPStore on loopback across them): every collective equals what one flat
// in-process group of the 4 ranks gives, uneven chunks and every dtype
// included; the bytes sent across hosts are what the layout implies; a host
// that stops answering fails the others' collective within the timeout.
#include "chorus/training/collectives/hierarchical.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;

constexpr int kHosts = 2;
constexpr int kLocal = 2;
constexpr int kWorld = kHosts * kLocal;

// Each global rank's hierarchical handle and its handle in a flat group.
struct Ranks {
  std::vector<std::shared_ptr<HierarchicalCommunicator>> hierarchical;
  std::vector<std::shared_ptr<Communicator>> flat;
};

Ranks MakeRanks(milliseconds timeout) {
  CommunicatorOptions options;
  options.timeout = timeout;
  auto hosts = CreateSimulatedHosts(kHosts, kLocal, options);
  EXPECT_TRUE(hosts.ok()) << hosts.status().message();
  auto flat = InProcessGroup::Create(kWorld, options);
  Ranks ranks;
  ranks.hierarchical = *hosts;
  for (int g = 0; g < kWorld; ++g) ranks.flat.push_back(flat->Rank(g));
  return ranks;
}

// Runs `body(global rank)` on a thread per rank.
void OnEveryRank(const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int g = 0; g < kWorld; ++g) threads.emplace_back(body, g);
  for (auto& thread : threads) thread.join();
}

// Rank g's input: integers (exact in every order of summation), as `dtype`.
at::Tensor Input(int g, int64_t n, at::ScalarType dtype) {
  return (at::arange(n, at::kLong) * (g + 1) - 3 * g).to(dtype);
}

class HierarchicalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ranks_ = new Ranks(MakeRanks(milliseconds(20000))); }
  static void TearDownTestSuite() { delete ranks_; }
  static Ranks* ranks_;
};
Ranks* HierarchicalTest::ranks_ = nullptr;

TEST_F(HierarchicalTest, RanksAreHostMajor) {
  for (int g = 0; g < kWorld; ++g) {
    EXPECT_EQ(ranks_->hierarchical[g]->rank(), g);
    EXPECT_EQ(ranks_->hierarchical[g]->size(), kWorld);
    EXPECT_EQ(ranks_->hierarchical[g]->host(), g / kLocal);
  }
  EXPECT_EQ(ranks_->hierarchical[0]->backend(), "hierarchical(in_process+gloo)");
}

TEST_F(HierarchicalTest, AllReduceEqualsTheFlatGroup) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kDouble, at::kLong}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      if (op == ReduceOp::kAvg && dtype == at::kLong) continue;
      // bf16 holds integers exactly up to 256: keep its sums (and partial sums) below.
      for (int64_t n :
           {int64_t{1}, int64_t{10}, dtype == at::kBFloat16 ? int64_t{9} : int64_t{37}}) {
        OnEveryRank([&](int g) {
          at::Tensor mine = Input(g, n, dtype), reference = Input(g, n, dtype);
          ASSERT_OK(ranks_->hierarchical[g]->AllReduce(mine, op));
          ASSERT_OK(ranks_->flat[g]->AllReduce(reference, op));
          EXPECT_TRUE(at::equal(mine, reference))
              << "rank " << g << " dtype " << dtype << " n " << n;
        });
      }
    }
  }
}

TEST_F(HierarchicalTest, ReduceScatterGivesEachRankItsFlatChunk) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      // Even, uneven, fewer elements than ranks (bf16: small sums, as above).
      for (int64_t n : {int64_t{4}, int64_t{10}, int64_t{3},
                        dtype == at::kBFloat16 ? int64_t{9} : int64_t{41}}) {
        OnEveryRank([&](int g) {
          auto [begin, end] = ChunkBounds(n, kWorld, g);
          at::Tensor mine = at::empty({end - begin}, dtype), reference = mine.clone();
          ASSERT_OK(ranks_->hierarchical[g]->ReduceScatter(Input(g, n, dtype), mine, op));
          ASSERT_OK(ranks_->flat[g]->ReduceScatter(Input(g, n, dtype), reference, op));
          EXPECT_TRUE(at::equal(mine, reference)) << "rank " << g << " n " << n;
        });
      }
    }
  }
}

TEST_F(HierarchicalTest, AllGatherAndBroadcastEqualTheFlatGroup) {
  OnEveryRank([&](int g) {
    at::Tensor input = Input(g, 5, at::kFloat);
    at::Tensor mine = at::empty({5 * kWorld}), reference = at::empty({5 * kWorld});
    ASSERT_OK(ranks_->hierarchical[g]->AllGather(input, mine));
    ASSERT_OK(ranks_->flat[g]->AllGather(input, reference));
    EXPECT_TRUE(at::equal(mine, reference)) << "rank " << g;
    for (int root = 0; root < kWorld; ++root) {
      at::Tensor value = Input(g, 6, at::kBFloat16);
      ASSERT_OK(ranks_->hierarchical[g]->Broadcast(value, root));
      EXPECT_TRUE(at::equal(value, Input(root, 6, at::kBFloat16))) << "root " << root;
    }
    ASSERT_OK(ranks_->hierarchical[g]->Barrier());
  });
}

TEST_F(HierarchicalTest, AcrossHostsOnlyEachRanksShareOfTheDataMoves) {
  // 4096 fp32 elements reduce-scattered: each rank's chunk C = 1024; across
  // hosts a rank reduces its host's sums of its local index (H * C) with one
  // peer: a ring all-reduce sends 2 (H - 1) / H of that.
  OnEveryRank([&](int g) {
    const int64_t before = ranks_->hierarchical[g]->cross_host_bytes();
    at::Tensor out = at::empty({1024});
    ASSERT_OK(ranks_->hierarchical[g]->ReduceScatter(at::ones({4096}), out, ReduceOp::kSum));
    EXPECT_TRUE(at::equal(out, at::full({1024}, 4.0f)));
    EXPECT_EQ(ranks_->hierarchical[g]->cross_host_bytes() - before, 2 * 1024 * 4);
    // An all-gather of 1024 elements brings the other host's 1024.
    at::Tensor gathered = at::empty({4096});
    const int64_t mid = ranks_->hierarchical[g]->cross_host_bytes();
    ASSERT_OK(ranks_->hierarchical[g]->AllGather(out, gathered));
    EXPECT_EQ(ranks_->hierarchical[g]->cross_host_bytes() - mid, 1024 * 4);
  });
}

TEST(HierarchicalFailureTest, AHostThatStopsAnsweringFailsTheOthersInTime) {
  Ranks ranks = MakeRanks(milliseconds(2000));
  const auto started = std::chrono::steady_clock::now();
  std::vector<Status> results(kLocal);
  std::vector<std::thread> threads;
  for (int g = 0; g < kLocal; ++g) {  // host 0 only: host 1 is gone
    threads.emplace_back([&, g] {
      at::Tensor t = at::ones({64});
      results[g] = ranks.hierarchical[g]->AllReduce(t, ReduceOp::kSum);
    });
  }
  for (auto& thread : threads) thread.join();
  const auto waited = std::chrono::steady_clock::now() - started;
  for (const Status& status : results) {
    EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.message();
    EXPECT_NE(status.message().find("across hosts (host 0 of 2)"), std::string::npos)
        << status.message();
  }
  EXPECT_LT(waited, std::chrono::seconds(10));
}

}  // namespace
}  // namespace chorus
