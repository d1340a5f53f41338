// Hierarchical collectives (hierarchical.h). With H hosts of L local ranks,
// global rank g = h * L + l, and W = H * L:
//
//   reduce-scatter: each global chunk padded to C = ceil(n / W) elements and
//     laid out local-major ([L][H][C]: local rank l's part holds the chunks of
//     ranks (h, l) for every host h); a reduce-scatter inside the host leaves
//     local rank l the host's sum of its part, and one across hosts (among the
//     ranks of local index l) leaves it its own chunk summed over all ranks.
//     Across hosts each rank moves 1/L of the data.
//   all-gather: across hosts first ([H][n] per local index), then inside the
//     host ([L][H][n]), then reordered host-major.
//   all-reduce: reduce-scatter inside the host, all-reduce of the chunk
//     across hosts, all-gather inside the host.
//   broadcast: from the root's host to the root's local index on every host,
//     then inside each host.
#include <ATen/ATen.h>

#include <thread>
#include <utility>

#include "chorus/training/collectives/hierarchical.h"

namespace chorus {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A rank's group across hosts, counting the bytes it sends as the transport's
// ring algorithms move them (an all-reduce sends 2 (H - 1) / H of the tensor;
// Gloo reduce-scatters as an all-reduce of the whole).
class CountingCommunicator final : public Communicator {
 public:
  CountingCommunicator(std::shared_ptr<Communicator> inner, std::atomic<int64_t>* bytes)
      : inner_(std::move(inner)), bytes_(bytes) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  Status AllReduce(at::Tensor& tensor, ReduceOp op) override {
    CountRing(tensor);
    return inner_->AllReduce(tensor, op);
  }
  Status AllGather(const at::Tensor& input, at::Tensor& output) override {
    *bytes_ += (size() - 1) * input.numel() * input.element_size();
    return inner_->AllGather(input, output);
  }
  Status ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    CountRing(input);
    return inner_->ReduceScatter(input, output, op);
  }
  Status Broadcast(at::Tensor& tensor, int root) override {
    if (rank() == root) *bytes_ += (size() - 1) * tensor.numel() * tensor.element_size();
    return inner_->Broadcast(tensor, root);
  }
  Status Barrier() override { return inner_->Barrier(); }

 private:
  void CountRing(const at::Tensor& tensor) {
    *bytes_ += 2 * (size() - 1) * tensor.numel() / size() * tensor.element_size();
  }

  const std::shared_ptr<Communicator> inner_;
  std::atomic<int64_t>* const bytes_;
};

class HierarchicalImpl final : public HierarchicalCommunicator {
 public:
  HierarchicalImpl(std::shared_ptr<Communicator> local, std::shared_ptr<Communicator> cross)
      : local_(std::move(local)),
        cross_(std::make_shared<CountingCommunicator>(std::move(cross), &cross_bytes_)) {}

  int rank() const override { return cross_->rank() * local_->size() + local_->rank(); }
  int size() const override { return cross_->size() * local_->size(); }
  std::string backend() const override {
    return "hierarchical(" + local_->backend() + "+" + cross_->backend() + ")";
  }
  int host() const override { return cross_->rank(); }
  int hosts() const override { return cross_->size(); }
  int64_t cross_host_bytes() const override { return cross_bytes_.load(); }
  std::shared_ptr<Communicator> local() const override { return local_; }
  std::shared_ptr<Communicator> cross() const override { return cross_; }

  Status AllReduce(at::Tensor& tensor, ReduceOp op) override {
    CHORUS_RETURN_IF_ERROR(CheckAvg(tensor, op));
    const ReduceOp wire_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    const int64_t n = tensor.numel();
    const int64_t chunk = CeilDiv(n, local_->size());
    at::Tensor padded = at::zeros({chunk * local_->size()}, tensor.options());
    padded.narrow(0, 0, n).copy_(tensor.reshape({-1}));
    at::Tensor mine = at::empty({chunk}, tensor.options());
    CHORUS_RETURN_IF_ERROR(local_->ReduceScatter(padded, mine, wire_op));
    CHORUS_RETURN_IF_ERROR(Named(cross_->AllReduce(mine, wire_op)));
    CHORUS_RETURN_IF_ERROR(local_->AllGather(mine, padded));
    if (op == ReduceOp::kAvg) padded.div_(size());
    tensor.view({-1}).copy_(padded.narrow(0, 0, n));
    return OkStatus();
  }

  Status AllGather(const at::Tensor& input, at::Tensor& output) override {
    const int64_t n = input.numel();
    if (output.numel() != n * size()) {
      return InvalidArgumentError("all_gather output has the wrong number of elements");
    }
    at::Tensor by_host = at::empty({hosts() * n}, input.options());
    CHORUS_RETURN_IF_ERROR(Named(cross_->AllGather(input.reshape({-1}), by_host)));
    at::Tensor by_local = at::empty({local_->size() * hosts() * n}, input.options());
    CHORUS_RETURN_IF_ERROR(local_->AllGather(by_host, by_local));
    // [L][H][n] -> [H][L][n]: global rank order.
    output.view({hosts(), local_->size(), n})
        .copy_(by_local.view({local_->size(), hosts(), n}).transpose(0, 1));
    return OkStatus();
  }

  Status ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    CHORUS_RETURN_IF_ERROR(CheckAvg(input, op));
    const int64_t n = input.numel();
    auto [begin, end] = ChunkBounds(n, size(), rank());
    if (output.numel() != end - begin) {
      return InvalidArgumentError("reduce_scatter output does not match this rank's chunk");
    }
    const ReduceOp wire_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
    const int64_t chunk = CeilDiv(n, size());
    const int locals = local_->size();
    // [L][H][C], chunk of global rank g = h * L + l at [l][h].
    at::Tensor laid = at::zeros({locals, hosts(), chunk}, input.options());
    at::Tensor flat = input.reshape({-1});
    for (int g = 0; g < size(); ++g) {
      auto [b, e] = ChunkBounds(n, size(), g);
      laid[g % locals][g / locals].narrow(0, 0, e - b).copy_(flat.narrow(0, b, e - b));
    }
    at::Tensor host_sum = at::empty({hosts() * chunk}, input.options());
    CHORUS_RETURN_IF_ERROR(local_->ReduceScatter(laid.view({-1}), host_sum, wire_op));
    at::Tensor mine = at::empty({chunk}, input.options());
    CHORUS_RETURN_IF_ERROR(Named(cross_->ReduceScatter(host_sum, mine, wire_op)));
    if (op == ReduceOp::kAvg) mine.div_(size());
    output.view({-1}).copy_(mine.narrow(0, 0, end - begin));
    return OkStatus();
  }

  Status Broadcast(at::Tensor& tensor, int root) override {
    if (root < 0 || root >= size()) return InvalidArgumentError("broadcast root out of range");
    const int root_local = root % local_->size();
    if (local_->rank() == root_local) {
      CHORUS_RETURN_IF_ERROR(Named(cross_->Broadcast(tensor, root / local_->size())));
    }
    return local_->Broadcast(tensor, root_local);
  }

  Status Barrier() override {
    CHORUS_RETURN_IF_ERROR(local_->Barrier());
    CHORUS_RETURN_IF_ERROR(Named(cross_->Barrier()));
    return local_->Barrier();
  }

 private:
  static Status CheckAvg(const at::Tensor& tensor, ReduceOp op) {
    if (op == ReduceOp::kAvg && !tensor.is_floating_point()) {
      return InvalidArgumentError("avg needs a floating-point dtype");
    }
    return OkStatus();
  }

  // A cross-host failure, saying which host saw it (OK stays OK).
  Status Named(const Status& status) const {
    if (status.ok()) return status;
    return Status(status.code(), "across hosts (host " + std::to_string(host()) + " of " +
                                     std::to_string(hosts()) + "): " + status.message());
  }

  const std::shared_ptr<Communicator> local_;
  const std::shared_ptr<Communicator> cross_;
  std::atomic<int64_t> cross_bytes_{0};
};

}  // namespace

StatusOr<std::shared_ptr<HierarchicalCommunicator>> CreateHierarchicalCommunicator(
    std::shared_ptr<Communicator> local, std::shared_ptr<Communicator> cross) {
  if (local == nullptr || cross == nullptr) {
    return InvalidArgumentError("a hierarchical communicator needs a local and a cross group");
  }
  return std::shared_ptr<HierarchicalCommunicator>(
      std::make_shared<HierarchicalImpl>(std::move(local), std::move(cross)));
}

StatusOr<std::vector<std::shared_ptr<HierarchicalCommunicator>>> CreateSimulatedHosts(
    int hosts, int local_ranks, const CommunicatorOptions& options) {
  if (hosts < 1 || local_ranks < 1) return InvalidArgumentError("no ranks");
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Rendezvous> served,
                          Rendezvous::Connect("127.0.0.1", 0, /*serve=*/true, options.timeout));
  std::vector<std::shared_ptr<Rendezvous>> stores = {served};
  for (int h = 1; h < hosts; ++h) {
    CHORUS_ASSIGN_OR_RETURN(
        std::shared_ptr<Rendezvous> joined,
        Rendezvous::Connect("127.0.0.1", served->port(), false, options.timeout));
    stores.push_back(std::move(joined));
  }
  std::vector<std::shared_ptr<InProcessGroup>> groups;
  for (int h = 0; h < hosts; ++h) groups.push_back(InProcessGroup::Create(local_ranks, options));
  const int world = hosts * local_ranks;
  std::vector<std::shared_ptr<HierarchicalCommunicator>> ranks(world);
  std::vector<Status> made(world);
  std::vector<std::thread> threads;  // a Gloo group forms only when all its ranks join
  for (int g = 0; g < world; ++g) {
    threads.emplace_back([&, g] {
      const int host = g / local_ranks, local = g % local_ranks;
      StatusOr<std::shared_ptr<Communicator>> cross = CreateGlooCommunicator(
          *stores[host], "simulated/local" + std::to_string(local), host, hosts, options);
      StatusOr<std::shared_ptr<HierarchicalCommunicator>> rank =
          cross.ok() ? CreateHierarchicalCommunicator(groups[host]->Rank(local), *cross)
                     : cross.status();
      if (rank.ok()) ranks[g] = *rank;
      made[g] = rank.status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Status& status : made) CHORUS_RETURN_IF_ERROR(status);
  return ranks;
}

}  // namespace chorus
