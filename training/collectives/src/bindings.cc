// The runtime as Python code in any interpreter sees it: torch custom classes
// (torch.classes.chorus.Communicator, torch.classes.chorus.FlatShard), which
// chorus.distributed wraps. Registered once per process, in libtorch's class
// registry, so every interpreter reaches the same C++ objects; tensors passed
// in are used in place, tensors returned are new.
#include <torch/custom_class.h>

#include "chorus/training/collectives/bindings.h"
#include "chorus/training/collectives/communicator.h"
#include "chorus/training/collectives/flat_shard.h"

namespace chorus {
namespace {

// Turns a Status into the exception torch surfaces to Python (RuntimeError).
void Check(const Status& status) { TORCH_CHECK(status.ok(), status.ToString()); }

template <typename T>
T Value(StatusOr<T> result) {
  Check(result.status());
  return std::move(result).value();
}

class CommunicatorHolder : public torch::CustomClassHolder {
 public:
  explicit CommunicatorHolder(std::shared_ptr<Communicator> comm) : comm(std::move(comm)) {}
  std::shared_ptr<Communicator> comm;
};

class FlatShardHolder : public torch::CustomClassHolder {
 public:
  FlatShardHolder(std::vector<std::vector<int64_t>> shapes, int64_t size, int64_t rank)
      : layout(std::move(shapes), static_cast<int>(size), static_cast<int>(rank)) {}
  FlatShard layout;
};

class GroupHolder : public torch::CustomClassHolder {
 public:
  explicit GroupHolder(int64_t size) : group(InProcessGroup::Create(static_cast<int>(size))) {}
  std::shared_ptr<InProcessGroup> group;
};

using Comm = c10::intrusive_ptr<CommunicatorHolder>;
using Layout = c10::intrusive_ptr<FlatShardHolder>;

ReduceOp Op(const std::string& name) { return Value(ParseReduceOp(name)); }

const auto kCommunicatorClass =
    torch::class_<CommunicatorHolder>("chorus", "Communicator")
        .def("rank", [](const Comm& self) -> int64_t { return self->comm->rank(); })
        .def("size", [](const Comm& self) -> int64_t { return self->comm->size(); })
        .def("backend", [](const Comm& self) { return self->comm->backend(); })
        .def("all_reduce",
             [](const Comm& self, at::Tensor tensor, const std::string& op) {
               Check(self->comm->AllReduce(tensor, Op(op)));
               return tensor;
             })
        .def("all_gather",
             [](const Comm& self, const at::Tensor& input) {
               at::Tensor in = input.contiguous();
               at::Tensor out = at::empty({in.numel() * self->comm->size()}, in.options());
               Check(self->comm->AllGather(in, out));
               return out;
             })
        .def("reduce_scatter",
             [](const Comm& self, const at::Tensor& input, const std::string& op) {
               at::Tensor in = input.contiguous();
               auto [begin, end] = ChunkBounds(in.numel(), self->comm->size(), self->comm->rank());
               at::Tensor out = at::empty({end - begin}, in.options());
               Check(self->comm->ReduceScatter(in, out, Op(op)));
               return out;
             })
        .def("broadcast",
             [](const Comm& self, at::Tensor tensor, int64_t root) {
               Check(self->comm->Broadcast(tensor, static_cast<int>(root)));
               return tensor;
             })
        .def("barrier", [](const Comm& self) { Check(self->comm->Barrier()); });

// An in-process group made from Python: useful with one rank (tools, tests);
// several ranks need several interpreters, so the host usually makes groups.
const auto kGroupClass =
    torch::class_<GroupHolder>("chorus", "InProcessGroup")
        .def(torch::init<int64_t>())
        .def("size",
             [](const c10::intrusive_ptr<GroupHolder>& self) -> int64_t {
               return self->group->size();
             })
        .def("rank", [](const c10::intrusive_ptr<GroupHolder>& self, int64_t rank) {
          return c10::make_intrusive<CommunicatorHolder>(self->group->Rank(static_cast<int>(rank)));
        });

const auto kFlatShardClass =
    torch::class_<FlatShardHolder>("chorus", "FlatShard")
        .def(torch::init<std::vector<std::vector<int64_t>>, int64_t, int64_t>())
        .def("shard_numel", [](const Layout& self) { return self->layout.shard_numel(); })
        .def("shard",
             [](const Layout& self, std::vector<at::Tensor> params) {
               return Value(self->layout.Shard(params));
             })
        .def("unshard",
             [](const Layout& self, const Comm& comm, const at::Tensor& local) {
               return Value(self->layout.Unshard(*comm->comm, local));
             })
        .def("reduce_gradients", [](const Layout& self, const Comm& comm,
                                    std::vector<at::Tensor> grads, const std::string& op) {
          at::ScalarType dtype = at::kFloat;
          for (const at::Tensor& g : grads) {
            if (g.defined()) dtype = g.scalar_type();
          }
          return Value(self->layout.ReduceGradients(*comm->comm, grads, Op(op), dtype));
        });

}  // namespace

c10::IValue CommunicatorToIValue(std::shared_ptr<Communicator> comm) {
  if (comm == nullptr) return c10::IValue();
  return c10::IValue(c10::make_intrusive<CommunicatorHolder>(std::move(comm)));
}

}  // namespace chorus
