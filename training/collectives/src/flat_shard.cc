#include "chorus/training/collectives/flat_shard.h"

#include <string>

namespace chorus {

FlatShard::FlatShard(std::vector<std::vector<int64_t>> shapes, int size, int rank)
    : shapes_(std::move(shapes)), size_(size), rank_(rank) {
  for (const auto& shape : shapes_) {
    Entry entry;
    entry.shape = shape;
    entry.rows = shape.empty() ? 1 : shape[0];
    entry.row_numel = 1;
    for (size_t d = 1; d < shape.size(); ++d) entry.row_numel *= shape[d];
    entry.shard_rows = (entry.rows + size - 1) / size;
    entry.offset = shard_numel_;
    shard_numel_ += entry.shard_rows * entry.row_numel;
    entries_.push_back(entry);
  }
}

void FlatShard::PackRows(const Entry& entry, const at::Tensor& full, int r,
                         at::Tensor& flat) const {
  const int64_t begin = std::min(entry.rows, r * entry.shard_rows);
  const int64_t end = std::min(entry.rows, (r + 1) * entry.shard_rows);
  at::Tensor target = flat.narrow(0, entry.offset, entry.shard_rows * entry.row_numel);
  if (end > begin) {
    at::Tensor rows = full.reshape({entry.rows, entry.row_numel}).narrow(0, begin, end - begin);
    target.narrow(0, 0, (end - begin) * entry.row_numel).copy_(rows.reshape({-1}));
  }
  target
      .narrow(0, (end - begin) * entry.row_numel,
              (entry.shard_rows - (end - begin)) * entry.row_numel)
      .zero_();
}

StatusOr<at::Tensor> FlatShard::Shard(const std::vector<at::Tensor>& params) const {
  if (params.size() != entries_.size()) return InvalidArgumentError("wrong number of parameters");
  if (params.empty()) return at::empty({0});
  at::Tensor flat = at::empty({shard_numel_}, params[0].options());
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].numel() != entries_[i].rows * entries_[i].row_numel) {
      return InvalidArgumentError("parameter " + std::to_string(i) + " does not match its shape");
    }
    PackRows(entries_[i], params[i].to(flat.scalar_type()), rank_, flat);
  }
  return flat;
}

StatusOr<std::vector<at::Tensor>> FlatShard::Unshard(Communicator& comm,
                                                     const at::Tensor& local) const {
  if (local.numel() != shard_numel_) {
    return InvalidArgumentError("local shard has " + std::to_string(local.numel()) +
                                " elements, the layout " + std::to_string(shard_numel_));
  }
  at::Tensor gathered = at::empty({shard_numel_ * size_}, local.options());
  at::Tensor input = local.contiguous();
  CHORUS_RETURN_IF_ERROR(comm.AllGather(input, gathered));
  // Rank-major blocks -> each parameter's rows in order, padding dropped.
  std::vector<at::Tensor> params;
  for (const Entry& entry : entries_) {
    at::Tensor rows = gathered.view({size_, shard_numel_})
                          .narrow(1, entry.offset, entry.shard_rows * entry.row_numel)
                          .reshape({size_ * entry.shard_rows, entry.row_numel})
                          .narrow(0, 0, entry.rows);
    params.push_back(rows.reshape(entry.shape).clone(at::MemoryFormat::Contiguous));
  }
  return params;
}

StatusOr<at::Tensor> FlatShard::ReduceGradients(Communicator& comm,
                                                const std::vector<at::Tensor>& grads, ReduceOp op,
                                                at::ScalarType dtype) const {
  if (grads.size() != entries_.size()) return InvalidArgumentError("wrong number of gradients");
  // Every rank's block, rank-major, so that the reduce-scatter hands rank r
  // exactly its flat shard.
  at::Tensor packed = at::empty({shard_numel_ * size_}, at::TensorOptions().dtype(dtype));
  for (int r = 0; r < size_; ++r) {
    at::Tensor block = packed.narrow(0, r * shard_numel_, shard_numel_);
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& entry = entries_[i];
      at::Tensor grad = grads[i].defined()
                            ? grads[i].to(dtype)
                            : at::zeros({entry.rows * entry.row_numel}, packed.options());
      PackRows(entry, grad, r, block);
    }
  }
  at::Tensor local = at::empty({shard_numel_}, packed.options());
  CHORUS_RETURN_IF_ERROR(comm.ReduceScatter(packed, local, op));
  return local;
}

}  // namespace chorus
