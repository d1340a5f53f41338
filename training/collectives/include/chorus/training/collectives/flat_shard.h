// FSDP bookkeeping: how a group of parameters is sharded across ranks, and the
// collectives that move them (FSDP2's layout: every parameter sharded on dim 0,
// padded so that dim 0 divides evenly).
//
// A parameter with dim 0 of size d is padded to d' = ceil(d / size) * size
// rows; rank r keeps rows [r d'/size, (r+1) d'/size). A rank's shard of the
// group is its rows of every parameter, flattened and concatenated: the
// "local flat shard", the only copy of the weights a rank keeps (and what its
// optimizer updates). Gathering all ranks' flat shards (rank-major) restores
// every parameter; gradients go the other way through a reduce-scatter.
#ifndef CHORUS_TRAINING_COLLECTIVES_FLAT_SHARD_H_
#define CHORUS_TRAINING_COLLECTIVES_FLAT_SHARD_H_

#include <ATen/ATen.h>

#include <vector>

#include "chorus/common/status.h"
#include "chorus/training/collectives/communicator.h"

namespace chorus {

class FlatShard {
 public:
  // The layout of parameters with `shapes` over `size` ranks, seen by `rank`.
  // 0-dim parameters count as shape [1].
  FlatShard(std::vector<std::vector<int64_t>> shapes, int size, int rank);

  int64_t shard_numel() const { return shard_numel_; }
  const std::vector<std::vector<int64_t>>& shapes() const { return shapes_; }

  // This rank's flat shard of `params` (full tensors, one per shape), zero
  // padded, in the params' dtype. INVALID_ARGUMENT on a shape mismatch.
  StatusOr<at::Tensor> Shard(const std::vector<at::Tensor>& params) const;
  // All-gathers every rank's `local` shard and returns the full parameters
  // (new tensors, in `local`'s dtype).
  StatusOr<std::vector<at::Tensor>> Unshard(Communicator& comm, const at::Tensor& local) const;
  // Reduce-scatters full gradients (one per shape; undefined = zeros) with
  // `op`, returning this rank's flat gradient shard in `dtype`.
  StatusOr<at::Tensor> ReduceGradients(Communicator& comm, const std::vector<at::Tensor>& grads,
                                       ReduceOp op, at::ScalarType dtype) const;

 private:
  struct Entry {
    std::vector<int64_t> shape;
    int64_t rows;        // dim 0
    int64_t row_numel;   // elements per row
    int64_t shard_rows;  // padded rows per rank
    int64_t offset;      // in the local flat shard
  };
  // Copies rank `r`'s rows of `full` into `flat` (a rank's flat shard), zero
  // padding past the end.
  void PackRows(const Entry& entry, const at::Tensor& full, int r, at::Tensor& flat) const;

  std::vector<std::vector<int64_t>> shapes_;
  std::vector<Entry> entries_;
  int size_;
  int rank_;
  int64_t shard_numel_ = 0;
};

}  // namespace chorus

#endif  // CHORUS_TRAINING_COLLECTIVES_FLAT_SHARD_H_
