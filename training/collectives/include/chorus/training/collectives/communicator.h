// training/collectives/: how ranks exchange tensors: communicators (this
// header) in process, over Gloo and NCCL, hierarchical groups across hosts
// (hierarchical.h), FSDP's flat shards (flat_shard.h), and the torch classes
// that hand them to chorus.distributed in the interpreters (bindings.h).
//
// Collectives over at::Tensor between ranks, with one interface for three
// transports:
//   - in process: ranks are threads of this process (in chorus, one
//     interpreter per rank); a rank reads its peers' buffers directly, no copy
//     through any transport;
//   - NCCL: one rank per GPU in this process (built when CUDA is found);
//   - c10d (Gloo here): ranks in other processes or on other hosts.
//
// Every collective is called by every rank of the communicator, in the same
// order, with matching arguments. Nothing waits forever: a rank that does not
// join within the timeout, or joins with other arguments, makes the
// collective fail on every rank that did join (and the communicator stays
// failed; later calls fail at once). Errors: DEADLINE_EXCEEDED (timeout),
// ABORTED (mismatched collectives, or an earlier failure), INVALID_ARGUMENT
// (a bad tensor for this rank alone: detected before joining).
//
// A Communicator handle belongs to one rank and is used from one thread at a
// time. Tensors must be contiguous and on the communicator's device.
#ifndef CHORUS_TRAINING_COLLECTIVES_COMMUNICATOR_H_
#define CHORUS_TRAINING_COLLECTIVES_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/status.h"

namespace at {
class Tensor;
}  // namespace at

namespace chorus {

enum class ReduceOp { kSum, kAvg, kMax };

// "sum", "avg", "max" -> ReduceOp.
StatusOr<ReduceOp> ParseReduceOp(const std::string& name);

struct CommunicatorOptions {
  // How long a collective (or joining a group) waits for the other ranks.
  std::chrono::milliseconds timeout{30000};
  // Gloo only: the address this rank listens on; other hosts must reach it.
  std::string gloo_host = "127.0.0.1";
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "in_process", "gloo" or "nccl".
  virtual std::string backend() const = 0;

  // In place: every rank's `tensor` becomes the reduction over ranks.
  // kAvg needs a floating-point dtype.
  virtual Status AllReduce(at::Tensor& tensor, ReduceOp op) = 0;
  // `output` (size() * input.numel() elements) becomes the ranks' inputs
  // concatenated in rank order. Inputs have equal sizes on every rank.
  virtual Status AllGather(const at::Tensor& input, at::Tensor& output) = 0;
  // `output` becomes this rank's chunk of the reduction of `input` over
  // ranks. Chunks split input.numel() elements as evenly as possible, the
  // first (numel % size()) chunks one element longer (ChunkBounds).
  virtual Status ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) = 0;
  // In place: every rank's `tensor` becomes rank `root`'s.
  virtual Status Broadcast(at::Tensor& tensor, int root) = 0;
  // Returns once every rank has called it.
  virtual Status Barrier() = 0;
};

// [begin, end) of chunk `index` of `count` elements split in `parts`.
std::pair<int64_t, int64_t> ChunkBounds(int64_t count, int parts, int index);

// A group of `size` ranks in this process. Rank(r) is rank r's handle; hand
// each to the thread (interpreter) that acts as that rank. Thread-safe.
class InProcessGroup {
 public:
  static std::shared_ptr<InProcessGroup> Create(int size, const CommunicatorOptions& options = {});
  virtual ~InProcessGroup() = default;
  virtual int size() const = 0;
  virtual std::shared_ptr<Communicator> Rank(int rank) = 0;
};

// One rank's communicators in a dp x tp mesh: `dp` joins the ranks that hold
// the same tensor-parallel shard, `tp` the ranks of one data-parallel replica;
// null where that dimension has size 1.
struct MeshRank {
  std::shared_ptr<Communicator> dp;
  std::shared_ptr<Communicator> tp;
};

// Every rank of a dp x tp mesh of in-process groups, indexed by rank =
// dp_rank * tp + tp_rank (tensor-parallel groups are consecutive ranks).
std::vector<MeshRank> CreateInProcessMesh(int dp, int tp, const CommunicatorOptions& options = {});

// Rank `rank` of `size` over c10d's Gloo transport, meeting the others
// through a file store at `store_path` (a path every rank can reach: local
// processes, or a shared file system). Blocks until every rank has joined,
// DEADLINE_EXCEEDED after the timeout.
StatusOr<std::shared_ptr<Communicator>> CreateGlooCommunicator(
    const std::string& store_path, int rank, int size, const CommunicatorOptions& options = {});

}  // namespace chorus

#endif  // CHORUS_TRAINING_COLLECTIVES_COMMUNICATOR_H_
