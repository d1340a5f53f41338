// The c10d transport (Gloo): ranks in other processes or on other hosts.
//
// c10d's Gloo process group does the transport; this adapts it to the
// Communicator contract: avg as sum / size, reduce-scatter as all-reduce of a
// copy (Gloo has none), bf16 through fp32 (Gloo has no bf16 reductions), and
// c10d's exceptions as Status. Gloo aborts the process when ranks disagree
// on sizes, so every collective first all-gathers a few integers describing
// it and fails cleanly, on every rank, on any disagreement.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <functional>

#include "chorus/training/collectives/communicator.h"
#include "chorus/training/collectives/hierarchical.h"

namespace chorus {
namespace {

// Runs a c10d call, turning its exceptions into Status. Timeouts surface as
// DEADLINE_EXCEEDED, anything else from the transport as ABORTED.
template <typename Body>
Status Guard(const std::string& what, Body&& body) {
  std::string message;
  try {
    body();
    return OkStatus();
  } catch (const c10::Error& e) {
    message = what + " failed: " + e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = what + " failed: " + e.what();
  }
  if (message.find("imeout") != std::string::npos ||
      message.find("imed out") != std::string::npos) {
    return DeadlineExceededError(message);
  }
  return Status(StatusCode::kAborted, message);
}

// Gloo moves no bfloat16; moving bytes needs no arithmetic, so it travels
// as bytes.
at::Tensor Movable(const at::Tensor& tensor) {
  return tensor.scalar_type() == at::kBFloat16 ? tensor.view(at::kByte) : tensor;
}

c10d::ReduceOp ToC10d(ReduceOp op) {
  return op == ReduceOp::kMax ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
}

enum Kind : int64_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kBarrier };
const char* const kKindNames[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                  "barrier"};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int rank, int size)
      : group_(std::move(group)), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }

  Status AllReduce(at::Tensor& tensor, ReduceOp op) override {
    if (op == ReduceOp::kAvg && !tensor.is_floating_point()) {
      return InvalidArgumentError("avg needs a floating-point dtype");
    }
    CHORUS_RETURN_IF_ERROR(Agree(kAllReduce, tensor, static_cast<int64_t>(op)));
    // Gloo reduces no bfloat16: widen, reduce, narrow.
    at::Tensor wire = tensor.scalar_type() == at::kBFloat16 ? tensor.to(at::kFloat) : tensor;
    std::vector<at::Tensor> tensors{wire};
    c10d::AllreduceOptions options;
    options.reduceOp = ToC10d(op);
    CHORUS_RETURN_IF_ERROR(
        Guard("all_reduce", [&] { group_->allreduce(tensors, options)->wait(); }));
    if (op == ReduceOp::kAvg) wire.div_(size_);
    if (!wire.is_same(tensor)) tensor.copy_(wire);
    return OkStatus();
  }

  Status AllGather(const at::Tensor& input, at::Tensor& output) override {
    if (output.numel() != input.numel() * size_) {
      return InvalidArgumentError("all_gather output has the wrong number of elements");
    }
    CHORUS_RETURN_IF_ERROR(Agree(kAllGather, input, 0));
    std::vector<at::Tensor> inputs{Movable(input).reshape({-1})};
    const int64_t n = inputs[0].numel();
    std::vector<std::vector<at::Tensor>> outputs(1);
    at::Tensor flat = Movable(output).view({-1});
    for (int r = 0; r < size_; ++r) outputs[0].push_back(flat.narrow(0, r * n, n));
    return Guard("all_gather", [&] { group_->allgather(outputs, inputs)->wait(); });
  }

  Status ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    auto [begin, end] = ChunkBounds(input.numel(), size_, rank_);
    if (output.numel() != end - begin) {
      return InvalidArgumentError("reduce_scatter output does not match this rank's chunk");
    }
    CHORUS_RETURN_IF_ERROR(Agree(kReduceScatter, input, static_cast<int64_t>(op)));
    at::Tensor reduced = input.reshape({-1}).clone();
    CHORUS_RETURN_IF_ERROR(AllReduce(reduced, op));
    output.view({-1}).copy_(reduced.narrow(0, begin, end - begin));
    return OkStatus();
  }

  Status Broadcast(at::Tensor& tensor, int root) override {
    CHORUS_RETURN_IF_ERROR(Agree(kBroadcast, tensor, root));
    std::vector<at::Tensor> tensors{Movable(tensor)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    return Guard("broadcast", [&] { group_->broadcast(tensors, options)->wait(); });
  }

  Status Barrier() override {
    CHORUS_RETURN_IF_ERROR(Agree(kBarrier, at::Tensor(at::empty({0})), 0));
    return Guard("barrier", [&] { group_->barrier()->wait(); });
  }

 private:
  // All-gathers (kind, dtype, numel, detail) from every rank; ABORTED on
  // every rank unless all agree.
  Status Agree(Kind kind, const at::Tensor& tensor, int64_t detail) {
    if (failed_) return Status(StatusCode::kAborted, "an earlier collective failed");
    at::Tensor mine =
        at::tensor({static_cast<int64_t>(kind), static_cast<int64_t>(tensor.scalar_type()),
                    tensor.numel(), detail},
                   at::kLong);
    at::Tensor all = at::empty({4 * size_}, at::kLong);
    std::vector<at::Tensor> inputs{mine};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size_; ++r) outputs[0].push_back(all.narrow(0, 4 * r, 4));
    Status gathered = Guard(kKindNames[kind], [&] { group_->allgather(outputs, inputs)->wait(); });
    if (!gathered.ok()) {
      failed_ = true;
      return gathered;
    }
    for (int r = 0; r < size_; ++r) {
      if (!at::equal(all.narrow(0, 4 * r, 4), mine)) {
        failed_ = true;
        auto other = all.narrow(0, 4 * r, 4);
        return Status(StatusCode::kAborted,
                      std::string("mismatched collectives: rank ") + std::to_string(rank_) +
                          " called " + kKindNames[kind] + " with " +
                          std::to_string(tensor.numel()) + " elements, rank " + std::to_string(r) +
                          " called " + kKindNames[other[0].item<int64_t>()] + " with " +
                          std::to_string(other[2].item<int64_t>()) + " elements");
      }
    }
    return OkStatus();
  }

  bool failed_ = false;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  const int rank_;
  const int size_;
};

// Joins `size` ranks over `store` (FileStore, or a TCPStore under a prefix).
StatusOr<std::shared_ptr<Communicator>> JoinGloo(
    std::function<c10::intrusive_ptr<c10d::Store>()> store, int rank, int size,
    const CommunicatorOptions& options) {
  if (rank < 0 || rank >= size) return InvalidArgumentError("rank out of range");
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  Status made = Guard("joining the Gloo group", [&] {
    c10::intrusive_ptr<c10d::Store> joined = store();
    joined->setTimeout(options.timeout);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_host));
    group = c10::make_intrusive<c10d::ProcessGroupGloo>(joined, rank, size, gloo_options);
  });
  if (!made.ok()) return made;
  return std::shared_ptr<Communicator>(std::make_shared<GlooCommunicator>(group, rank, size));
}

// c10d's TCPStore client serializes its calls, and a Gloo group's rendezvous
// blocks in them: each group gets a connection of its own, so the groups of
// one host's ranks can form at once. The serving store lives as long as this.
class TcpRendezvous final : public Rendezvous {
 public:
  TcpRendezvous(std::string host, c10::intrusive_ptr<c10d::TCPStore> store,
                std::chrono::milliseconds timeout)
      : host_(std::move(host)), store_(std::move(store)), timeout_(timeout) {}
  int port() const override { return store_->getPort(); }

  // A new connection to the store (throws as c10d does).
  c10::intrusive_ptr<c10d::Store> Connection() const {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port());
    options.waitWorkers = false;
    options.timeout = timeout_;
    return c10::make_intrusive<c10d::TCPStore>(host_, options);
  }

 private:
  const std::string host_;
  const c10::intrusive_ptr<c10d::TCPStore> store_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace

StatusOr<std::shared_ptr<Rendezvous>> Rendezvous::Connect(const std::string& host, int port,
                                                          bool serve,
                                                          std::chrono::milliseconds timeout) {
  if (port < 0 || port > 65535) return InvalidArgumentError("port out of range");
  c10::intrusive_ptr<c10d::TCPStore> store;
  Status made = Guard("reaching the rendezvous at " + host + ":" + std::to_string(port), [&] {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port);
    options.isServer = serve;
    options.waitWorkers = false;
    options.timeout = timeout;
    store = c10::make_intrusive<c10d::TCPStore>(host, options);
  });
  if (!made.ok()) {
    return made.code() == StatusCode::kDeadlineExceeded ? made : UnavailableError(made.message());
  }
  return std::shared_ptr<Rendezvous>(
      std::make_shared<TcpRendezvous>(host, std::move(store), timeout));
}

StatusOr<std::shared_ptr<Communicator>> CreateGlooCommunicator(Rendezvous& rendezvous,
                                                               const std::string& name, int rank,
                                                               int size,
                                                               const CommunicatorOptions& options) {
  auto* tcp = dynamic_cast<TcpRendezvous*>(&rendezvous);
  if (tcp == nullptr) return InvalidArgumentError("not a rendezvous Rendezvous::Connect made");
  return JoinGloo([&] { return c10::make_intrusive<c10d::PrefixStore>(name, tcp->Connection()); },
                  rank, size, options);
}

StatusOr<std::shared_ptr<Communicator>> CreateGlooCommunicator(const std::string& store_path,
                                                               int rank, int size,
                                                               const CommunicatorOptions& options) {
  return JoinGloo([&] { return c10::make_intrusive<c10d::FileStore>(store_path, size); }, rank,
                  size, options);
}

}  // namespace chorus
