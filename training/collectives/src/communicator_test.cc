#include "chorus/training/collectives/communicator.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace chorus {
namespace {

using std::chrono::milliseconds;

// Rank r's input for a test: deterministic, different per rank, exact in
// every dtype used (small integers and halves).
at::Tensor InputFor(int rank, int64_t numel, at::ScalarType dtype) {
  at::Tensor base = at::arange(numel, at::kDouble).mul(0.5).add(rank * 3 + 1);
  if (dtype == at::kLong) base = base.floor().mul((rank % 2) ? -1 : 1);
  return base.remainder(97).to(dtype);
}

// The reduction over ranks as one rank computes it: in rank order, in float
// for bfloat16 (as the kernels do), rounded once.
at::Tensor Reference(int size, int64_t numel, at::ScalarType dtype, ReduceOp op) {
  at::ScalarType acc = dtype == at::kBFloat16 ? at::kFloat : dtype;
  at::Tensor result = InputFor(0, numel, dtype).to(acc);
  for (int r = 1; r < size; ++r) {
    at::Tensor next = InputFor(r, numel, dtype).to(acc);
    result = op == ReduceOp::kMax ? at::maximum(result, next) : result.add(next);
  }
  if (op == ReduceOp::kAvg) result = result.div(size);
  return result.to(dtype);
}

// Checks every collective for one rank; returns failures as text ("" = ok).
std::string CheckCollectives(Communicator& comm) {
  const int size = comm.size(), rank = comm.rank();
  std::string failures;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) failures += "rank " + std::to_string(rank) + ": " + what + "\n";
  };
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    for (int64_t numel : {int64_t{1}, int64_t{7}, int64_t{1001}}) {
      const std::string where =
          std::string(c10::toString(dtype)) + "[" + std::to_string(numel) + "]";
      std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMax};
      if (dtype != at::kLong) ops.push_back(ReduceOp::kAvg);
      for (ReduceOp op : ops) {
        at::Tensor t = InputFor(rank, numel, dtype);
        Status s = comm.AllReduce(t, op);
        expect(s.ok(), "all_reduce " + where + ": " + s.ToString());
        expect(at::equal(t, Reference(size, numel, dtype, op)), "all_reduce value " + where);

        at::Tensor out = at::empty(
            {ChunkBounds(numel, size, rank).second - ChunkBounds(numel, size, rank).first}, dtype);
        s = comm.ReduceScatter(InputFor(rank, numel, dtype), out, op);
        expect(s.ok(), "reduce_scatter " + where + ": " + s.ToString());
        auto [b, e] = ChunkBounds(numel, size, rank);
        expect(at::equal(out, Reference(size, numel, dtype, op).narrow(0, b, e - b)),
               "reduce_scatter value " + where);
      }
      at::Tensor gathered = at::empty({numel * size}, dtype);
      Status s = comm.AllGather(InputFor(rank, numel, dtype), gathered);
      expect(s.ok(), "all_gather " + where + ": " + s.ToString());
      std::vector<at::Tensor> parts;
      for (int r = 0; r < size; ++r) parts.push_back(InputFor(r, numel, dtype));
      expect(at::equal(gathered, at::cat(parts)), "all_gather value " + where);

      const int root = size - 1;
      at::Tensor b = InputFor(rank, numel, dtype);
      s = comm.Broadcast(b, root);
      expect(s.ok(), "broadcast " + where + ": " + s.ToString());
      expect(at::equal(b, InputFor(root, numel, dtype)), "broadcast value " + where);
    }
  }
  expect(comm.Barrier().ok(), "barrier");
  return failures;
}

// Runs `body(rank)` on one thread per rank and joins them.
void OnRanks(int size, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

TEST(InProcessCommunicatorTest, EveryCollectiveOnOneToFourRanksEqualsTheReference) {
  for (int size = 1; size <= 4; ++size) {
    auto group = InProcessGroup::Create(size);
    std::vector<std::string> failures(size);
    OnRanks(size, [&](int r) { failures[r] = CheckCollectives(*group->Rank(r)); });
    for (int r = 0; r < size; ++r) EXPECT_EQ(failures[r], "") << "world size " << size;
  }
}

TEST(InProcessMeshTest, RanksAreDpMajorAndEachGroupReducesOverItsOwnRanks) {
  const int dp = 2, tp = 3;
  std::vector<MeshRank> mesh = CreateInProcessMesh(dp, tp);
  ASSERT_EQ(mesh.size(), 6u);
  std::vector<double> tp_sums(6), dp_sums(6);
  OnRanks(6, [&](int r) {
    at::Tensor over_tp = at::full({1}, static_cast<double>(r), at::kDouble);
    at::Tensor over_dp = over_tp.clone();
    EXPECT_TRUE(mesh[r].tp->AllReduce(over_tp, ReduceOp::kSum).ok());
    EXPECT_TRUE(mesh[r].dp->AllReduce(over_dp, ReduceOp::kSum).ok());
    tp_sums[r] = over_tp.item<double>();
    dp_sums[r] = over_dp.item<double>();
  });
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(mesh[r].tp->rank(), r % tp);
    EXPECT_EQ(mesh[r].tp->size(), tp);
    EXPECT_EQ(mesh[r].dp->rank(), r / tp);
    EXPECT_EQ(mesh[r].dp->size(), dp);
    // tp groups {0,1,2} and {3,4,5}; dp groups {0,3}, {1,4}, {2,5}.
    EXPECT_EQ(tp_sums[r], r < 3 ? 3.0 : 12.0) << r;
    EXPECT_EQ(dp_sums[r], 2.0 * (r % tp) + 3.0) << r;
  }
}

TEST(InProcessMeshTest, ADimensionOfSizeOneHasNoCommunicator) {
  std::vector<MeshRank> data_parallel = CreateInProcessMesh(4, 1);
  ASSERT_EQ(data_parallel.size(), 4u);
  for (const MeshRank& rank : data_parallel) {
    EXPECT_EQ(rank.tp, nullptr);
    ASSERT_NE(rank.dp, nullptr);
    EXPECT_EQ(rank.dp->size(), 4);
  }
  std::vector<MeshRank> single = CreateInProcessMesh(1, 1);
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0].dp, nullptr);
  EXPECT_EQ(single[0].tp, nullptr);
}

TEST(InProcessCommunicatorTest, ARankThatNeverJoinsTimesOutOnEveryRankThatDid) {
  CommunicatorOptions options;
  options.timeout = milliseconds(300);
  auto group = InProcessGroup::Create(3, options);
  std::vector<Status> results(2);
  auto start = std::chrono::steady_clock::now();
  OnRanks(2, [&](int r) {
    at::Tensor t = at::ones({16});
    results[r] = group->Rank(r)->AllReduce(t, ReduceOp::kSum);
  });
  auto elapsed = std::chrono::steady_clock::now() - start;
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_NE(s.message().find("rank(s) 2 did not join"), std::string::npos) << s.message();
  }
  EXPECT_LT(elapsed, milliseconds(5000));
  // The late rank, and every later call, fails at once.
  at::Tensor t = at::ones({16});
  EXPECT_EQ(group->Rank(2)->AllReduce(t, ReduceOp::kSum).code(), StatusCode::kAborted);
}

TEST(InProcessCommunicatorTest, MismatchedShapesFailOnEveryRank) {
  auto group = InProcessGroup::Create(3);
  std::vector<Status> results(3);
  OnRanks(3, [&](int r) {
    at::Tensor t = at::ones({r == 1 ? 5 : 4});
    results[r] = group->Rank(r)->AllReduce(t, ReduceOp::kSum);
  });
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
    EXPECT_NE(s.message().find("mismatched collectives"), std::string::npos) << s.message();
  }
}

TEST(InProcessCommunicatorTest, ABadTensorOnOneRankFailsEveryRankAtOnce) {
  auto group = InProcessGroup::Create(2);
  std::vector<Status> results(2);
  OnRanks(2, [&](int r) {
    at::Tensor out = at::empty({r == 0 ? 8 : 3});  // rank 1's output is too small
    results[r] = group->Rank(r)->AllGather(at::ones({4}), out);
  });
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kAborted);
    EXPECT_NE(s.message().find("rank 1: output has 3 elements, needs 8"), std::string::npos)
        << s.message();
  }
}

// ---------------------------------------------------------------------------
// Gloo: ranks in separate processes (this binary, re-run per rank).

std::string Self() {
  char self[4096] = {0};
  return readlink("/proc/self/exe", self, sizeof(self) - 1) > 0 ? self : "";
}

// Starts `size` rank processes running the GlooChild tests; returns their
// exit codes.
std::vector<int> RunGlooRanks(int size, const std::string& filter, int only_ranks = -1) {
  char pattern[] = "/tmp/chorus-gloo-XXXXXX";
  std::string dir = mkdtemp(pattern);
  std::vector<pid_t> pids;
  int started = only_ranks < 0 ? size : only_ranks;
  for (int r = 0; r < started; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("CHORUS_GLOO_RANK", std::to_string(r).c_str(), 1);
      setenv("CHORUS_GLOO_SIZE", std::to_string(size).c_str(), 1);
      setenv("CHORUS_GLOO_STORE", (dir + "/store").c_str(), 1);
      std::string gtest_filter = "--gtest_filter=" + filter;
      execl(Self().c_str(), Self().c_str(), gtest_filter.c_str(), "--gtest_brief=1", nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  }
  std::system(("rm -rf " + dir).c_str());
  return codes;
}

struct ChildEnv {
  int rank, size;
  std::string store;
};

bool InChild(ChildEnv* env) {
  const char* rank = std::getenv("CHORUS_GLOO_RANK");
  if (rank == nullptr) return false;
  *env = {std::atoi(rank), std::atoi(std::getenv("CHORUS_GLOO_SIZE")),
          std::getenv("CHORUS_GLOO_STORE")};
  return true;
}

// This child rank's Gloo communicator, joined with `timeout`.
StatusOr<std::shared_ptr<Communicator>> JoinGloo(const ChildEnv& env, milliseconds timeout) {
  CommunicatorOptions options;
  options.timeout = timeout;
  return CreateGlooCommunicator(env.store, env.rank, env.size, options);
}

TEST(GlooChild, Collectives) {
  ChildEnv env;
  if (!InChild(&env)) GTEST_SKIP() << "run by GlooCommunicatorTest";
  auto comm = JoinGloo(env, CommunicatorOptions().timeout);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  EXPECT_EQ(CheckCollectives(**comm), "");
}

TEST(GlooChild, JoinAlone) {
  ChildEnv env;
  if (!InChild(&env)) GTEST_SKIP() << "run by GlooCommunicatorTest";
  auto comm = JoinGloo(env, milliseconds(1500));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kDeadlineExceeded) << comm.status().ToString();
}

TEST(GlooChild, Mismatched) {
  ChildEnv env;
  if (!InChild(&env)) GTEST_SKIP() << "run by GlooCommunicatorTest";
  auto comm = JoinGloo(env, milliseconds(2000));
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  at::Tensor t = at::ones({env.rank == 1 ? 5 : 4});
  Status s = (*comm)->AllReduce(t, ReduceOp::kSum);
  EXPECT_FALSE(s.ok());
  std::fprintf(stderr, "rank %d: %s\n", env.rank, s.ToString().c_str());
}

TEST(GlooCommunicatorTest, EveryCollectiveOnOneToFourProcessesEqualsTheReference) {
  for (int size = 1; size <= 4; ++size) {
    std::vector<int> codes = RunGlooRanks(size, "GlooChild.Collectives");
    for (int r = 0; r < size; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << " of " << size;
  }
}

TEST(GlooCommunicatorTest, MismatchedShapesFailOnEveryRank) {
  std::vector<int> codes = RunGlooRanks(2, "GlooChild.Mismatched");
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(GlooCommunicatorTest, ARankThatNeverJoinsIsATimeout) {
  std::vector<int> codes = RunGlooRanks(2, "GlooChild.JoinAlone", /*only_ranks=*/1);
  EXPECT_EQ(codes[0], 0);
}

}  // namespace
}  // namespace chorus
