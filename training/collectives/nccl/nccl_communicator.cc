#include "training/collectives/nccl/nccl_communicator.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

namespace chorus {
namespace {

Status CudaError(const char* what, cudaError_t error) {
  return InternalError(std::string(what) + ": " + cudaGetErrorString(error));
}

Status NcclError(const char* what, ncclResult_t result) {
  return Status(StatusCode::kAborted, std::string(what) + ": " + ncclGetErrorString(result));
}

StatusOr<ncclDataType_t> NcclType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    case at::kByte:
      return ncclUint8;
    case at::kChar:
      return ncclInt8;
    default:
      return InvalidArgumentError(std::string("NCCL cannot move ") + c10::toString(type));
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int device, int rank, int size,
                   CommunicatorOptions options)
      : comm_(comm),
        stream_(stream),
        device_(device),
        rank_(rank),
        size_(size),
        options_(options) {}
  ~NcclCommunicator() override {
    if (!failed_) ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  Status AllReduce(at::Tensor& tensor, ReduceOp op) override {
    CHORUS_RETURN_IF_ERROR(CheckTensor(tensor));
    CHORUS_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(tensor.scalar_type()));
    return Run("all_reduce", ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                           type, NcclOp(op), comm_, stream_));
  }

  Status AllGather(const at::Tensor& input, at::Tensor& output) override {
    CHORUS_RETURN_IF_ERROR(CheckTensor(input));
    CHORUS_RETURN_IF_ERROR(CheckTensor(output));
    if (output.numel() != input.numel() * size_) {
      return InvalidArgumentError("all_gather output has the wrong number of elements");
    }
    CHORUS_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(input.scalar_type()));
    return Run("all_gather", ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), type,
                                           comm_, stream_));
  }

  Status ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    CHORUS_RETURN_IF_ERROR(CheckTensor(input));
    CHORUS_RETURN_IF_ERROR(CheckTensor(output));
    auto [begin, end] = ChunkBounds(input.numel(), size_, rank_);
    if (output.numel() != end - begin) {
      return InvalidArgumentError("reduce_scatter output does not match this rank's chunk");
    }
    CHORUS_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(input.scalar_type()));
    if (input.numel() % size_ == 0) {
      return Run("reduce_scatter",
                 ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), type,
                                   NcclOp(op), comm_, stream_));
    }
    // Uneven chunks: NCCL's reduce-scatter needs equal ones.
    at::Tensor reduced = input.reshape({-1}).clone();
    CHORUS_RETURN_IF_ERROR(AllReduce(reduced, op));
    output.view({-1}).copy_(reduced.narrow(0, begin, end - begin));
    return Synchronize("reduce_scatter");
  }

  Status Broadcast(at::Tensor& tensor, int root) override {
    CHORUS_RETURN_IF_ERROR(CheckTensor(tensor));
    CHORUS_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(tensor.scalar_type()));
    return Run("broadcast", ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                          type, root, comm_, stream_));
  }

  Status Barrier() override {
    at::Tensor one = at::ones({1}, at::TensorOptions().device(at::kCUDA, device_));
    return AllReduce(one, ReduceOp::kSum);
  }

 private:
  Status CheckTensor(const at::Tensor& tensor) const {
    if (failed_) return Status(StatusCode::kAborted, "an earlier collective failed");
    if (!tensor.is_cuda() || tensor.get_device() != device_) {
      return InvalidArgumentError("tensor is not on this rank's device cuda:" +
                                  std::to_string(device_));
    }
    if (!tensor.is_contiguous()) return InvalidArgumentError("tensor is not contiguous");
    return OkStatus();
  }

  // Checks the enqueue, then waits for the stream with the timeout.
  Status Run(const char* what, ncclResult_t enqueued) {
    if (enqueued != ncclSuccess && enqueued != ncclInProgress) {
      failed_ = true;
      return NcclError(what, enqueued);
    }
    return Synchronize(what);
  }

  Status Synchronize(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (true) {
      cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) return OkStatus();
      if (state != cudaErrorNotReady) {
        failed_ = true;
        return CudaError(what, state);
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        failed_ = true;
        ncclCommAbort(comm_);
        return NcclError(what, async);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        failed_ = true;
        ncclCommAbort(comm_);
        return DeadlineExceededError(std::string(what) + " timed out: a rank did not join");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  const int device_;
  const int rank_;
  const int size_;
  const CommunicatorOptions options_;
  bool failed_ = false;
};

class Group final : public NcclGroup {
 public:
  Group(std::vector<int> devices, ncclUniqueId id, CommunicatorOptions options)
      : devices_(std::move(devices)), id_(id), options_(options) {}

  int size() const override { return static_cast<int>(devices_.size()); }

  StatusOr<std::shared_ptr<Communicator>> Rank(int rank) override {
    if (rank < 0 || rank >= size()) return InvalidArgumentError("rank out of range");
    const int device = devices_[rank];
    cudaError_t error = cudaSetDevice(device);
    if (error != cudaSuccess) return CudaError("cudaSetDevice", error);
    cudaStream_t stream;
    error = cudaStreamCreate(&stream);
    if (error != cudaSuccess) return CudaError("cudaStreamCreate", error);
    // Non-blocking init, so that a missing rank is a timeout, not a hang.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm;
    ncclResult_t result = ncclCommInitRankConfig(&comm, size(), id_, rank, &config);
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (result == ncclInProgress) {
      if (std::chrono::steady_clock::now() > deadline) {
        ncclCommAbort(comm);
        cudaStreamDestroy(stream);
        return DeadlineExceededError("NCCL init timed out: a rank did not join");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm, &result);
    }
    if (result != ncclSuccess) {
      cudaStreamDestroy(stream);
      return NcclError("ncclCommInitRankConfig", result);
    }
    return std::shared_ptr<Communicator>(
        std::make_shared<NcclCommunicator>(comm, stream, device, rank, size(), options_));
  }

 private:
  std::vector<int> devices_;
  ncclUniqueId id_;
  CommunicatorOptions options_;
};

}  // namespace

StatusOr<std::shared_ptr<NcclGroup>> NcclGroup::Create(const std::vector<int>& devices,
                                                       const CommunicatorOptions& options) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    return FailedPreconditionError("no CUDA device available for NCCL");
  }
  for (int device : devices) {
    if (device < 0 || device >= count) {
      return InvalidArgumentError("no CUDA device " + std::to_string(device));
    }
  }
  ncclUniqueId id;
  ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) return NcclError("ncclGetUniqueId", result);
  return std::shared_ptr<NcclGroup>(std::make_shared<Group>(devices, id, options));
}

}  // namespace chorus
