// Collectives over NCCL on every GPU of the machine (one rank per GPU, one
// thread each), checked against a reference computed on the CPU; plus, with
// two or more GPUs, a rank that never joins must time out. Prints one JSON
// line with what it ran; exit status 0 when everything held.
#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "training/collectives/nccl/nccl_communicator.h"

using namespace chorus;

namespace {

at::Tensor Input(int rank, int64_t numel, at::ScalarType dtype) {
  return at::arange(numel, at::kDouble).mul(0.5).add(rank * 3 + 1).remainder(97).to(dtype);
}

int CheckRank(Communicator& comm, int device) {
  int failures = 0;
  const int size = comm.size(), rank = comm.rank();
  auto cuda = at::TensorOptions().device(at::kCUDA, device);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    for (int64_t numel : {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{1} << 24}) {
      at::Tensor expected = Input(0, numel, dtype).to(at::kDouble);
      for (int r = 1; r < size; ++r) expected += Input(r, numel, dtype).to(at::kDouble);
      at::Tensor t = Input(rank, numel, dtype).to(cuda);
      failures += !comm.AllReduce(t, ReduceOp::kSum).ok();
      failures += !at::allclose(t.cpu().to(at::kDouble), expected, 1e-2, 1e-2);
      auto [b, e] = ChunkBounds(numel, size, rank);
      at::Tensor chunk = at::empty({e - b}, cuda.dtype(dtype));
      failures +=
          !comm.ReduceScatter(Input(rank, numel, dtype).to(cuda), chunk, ReduceOp::kSum).ok();
      failures +=
          !at::allclose(chunk.cpu().to(at::kDouble), expected.narrow(0, b, e - b), 1e-2, 1e-2);
      at::Tensor gathered = at::empty({numel * size}, cuda.dtype(dtype));
      failures += !comm.AllGather(Input(rank, numel, dtype).to(cuda), gathered).ok();
      std::vector<at::Tensor> parts;
      for (int r = 0; r < size; ++r) parts.push_back(Input(r, numel, dtype));
      failures += !at::equal(gathered.cpu(), at::cat(parts));
      at::Tensor b_tensor = Input(rank, numel, dtype).to(cuda);
      failures += !comm.Broadcast(b_tensor, 0).ok();
      failures += !at::equal(b_tensor.cpu(), Input(0, numel, dtype));
    }
  }
  failures += !comm.Barrier().ok();
  return failures;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("{\"ok\": false, \"error\": \"no CUDA device\"}\n");
    return 1;
  }
  std::vector<int> ids;
  for (int d = 0; d < devices; ++d) ids.push_back(d);
  auto group = NcclGroup::Create(ids);
  if (!group.ok()) {
    std::printf("{\"ok\": false, \"error\": \"%s\"}\n", group.status().ToString().c_str());
    return 1;
  }
  std::vector<int> failures(devices, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < devices; ++r) {
    ranks.emplace_back([&, r] {
      auto comm = (*group)->Rank(r);
      failures[r] = comm.ok() ? CheckRank(**comm, ids[r]) : 1000;
    });
  }
  for (auto& t : ranks) t.join();
  int total = 0;
  for (int f : failures) total += f;
  bool timeout_checked = false, timeout_ok = true;
  if (devices >= 2) {
    CommunicatorOptions options;
    options.timeout = std::chrono::milliseconds(3000);
    auto lonely = NcclGroup::Create({0, 1}, options);
    auto comm = lonely.ok() ? (*lonely)->Rank(0) : lonely.status();  // rank 1 never joins
    timeout_checked = true;
    timeout_ok = !comm.ok() && comm.status().code() == StatusCode::kDeadlineExceeded;
  }
  std::printf("{\"ok\": %s, \"ranks\": %d, \"failures\": %d, \"timeout_checked\": %s}\n",
              total == 0 && timeout_ok ? "true" : "false", devices, total,
              timeout_checked ? "true" : "false");
  return total == 0 && timeout_ok ? 0 : 1;
}
