// The in-process transport: ranks are threads of this process that read each
// other's buffers directly.
//
// Every collective is: post what this rank brings (kind, dtype, sizes,
// buffers, or why its arguments are bad); meet (barrier); check that every
// rank brought the same collective; move data by reading peers' buffers;
// meet again before returning, so no rank reuses a buffer a peer still
// reads. An all-reduce has three meetings: each rank reduces its own chunk
// in place, then copies the other ranks' reduced chunks.
#include <ATen/ATen.h>
#include <sched.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <sstream>

#include "chorus/common/thread_annotations.h"
#include "chorus/training/collectives/communicator.h"
#include "training/collectives/src/reduce_kernels.h"

namespace chorus {
namespace {

enum class Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kBarrier };

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

// What one rank brings to a collective.
struct Post {
  explicit Post(Kind k = Kind::kBarrier) : kind(k) {}
  Kind kind;
  uint64_t sequence = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t numel = 0;  // of the input
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  const void* input = nullptr;
  void* output = nullptr;
  std::string error;  // this rank's arguments are bad
};

// Reusable barrier for `size` threads with a deadline. Once broken (a timeout
// or a mismatch), every wait fails.
class Meeting {
 public:
  explicit Meeting(int size) : size_(size), present_(size, false) {}

  Status Wait(int rank, std::chrono::steady_clock::time_point deadline, const std::string& what) {
    uint64_t generation;
    {
      MutexLock lock(&mu_);
      if (!broken_.empty()) return Status(StatusCode::kAborted, broken_);
      generation = generation_.load(std::memory_order_relaxed);
      present_[rank] = true;
      if (++arrived_ == size_) {
        arrived_ = 0;
        std::fill(present_.begin(), present_.end(), false);
        generation_.store(generation + 1, std::memory_order_release);
        everyone_.SignalAll();
        return OkStatus();
      }
    }
    // Peers usually arrive within microseconds: spin (yielding now and then,
    // in case ranks outnumber cores) for up to 200 us before sleeping.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    for (int i = 1;; ++i) {
      if (generation_.load(std::memory_order_acquire) != generation) return OkStatus();
      if (i % 256 == 0) {
        if (std::chrono::steady_clock::now() > spin_until) break;
        sched_yield();
      }
      __builtin_ia32_pause();
    }
    MutexLock lock(&mu_);
    while (generation_.load(std::memory_order_acquire) == generation && broken_.empty()) {
      if (!everyone_.WaitUntil(&mu_, deadline) && std::chrono::steady_clock::now() >= deadline &&
          generation_.load(std::memory_order_acquire) == generation) {
        std::ostringstream missing;
        for (int r = 0; r < size_; ++r) {
          if (!present_[r]) missing << (missing.tellp() > 0 ? ", " : "") << r;
        }
        broken_ = what + " timed out: rank(s) " + missing.str() + " did not join";
        timed_out_generation_ = generation;
        everyone_.SignalAll();
        return DeadlineExceededError(broken_);
      }
    }
    if (generation_.load(std::memory_order_acquire) != generation) return OkStatus();
    // Every rank waiting in the meeting that timed out reports the timeout,
    // whichever of them noticed it first; other breaks are aborts.
    if (timed_out_generation_ == generation) return DeadlineExceededError(broken_);
    return Status(StatusCode::kAborted, broken_);
  }

  // Fails every later wait with `why` (first reason wins).
  void Break(const std::string& why) {
    MutexLock lock(&mu_);
    if (broken_.empty()) broken_ = why;
    everyone_.SignalAll();
  }

 private:
  const int size_;
  Mutex mu_;
  CondVar everyone_;
  std::atomic<uint64_t> generation_{0};  // written under mu_, read without it
  int arrived_ CHORUS_GUARDED_BY(mu_) = 0;
  std::vector<bool> present_ CHORUS_GUARDED_BY(mu_);
  std::string broken_ CHORUS_GUARDED_BY(mu_);
  // The generation whose meeting timed out, if one did.
  std::optional<uint64_t> timed_out_generation_ CHORUS_GUARDED_BY(mu_);
};

class Group;

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override;
  std::string backend() const override { return "in_process"; }

  Status AllReduce(at::Tensor& tensor, ReduceOp op) override;
  Status AllGather(const at::Tensor& input, at::Tensor& output) override;
  Status ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  Status Broadcast(at::Tensor& tensor, int root) override;
  Status Barrier() override;

 private:
  // Posts, meets and checks that every rank brought the same collective;
  // returns every rank's post.
  StatusOr<const std::vector<Post>*> Join(Post post);
  Status Meet(const char* what);

  std::shared_ptr<Group> group_;
  const int rank_;
  uint64_t sequence_ = 0;
};

class Group final : public InProcessGroup, public std::enable_shared_from_this<Group> {
 public:
  Group(int size, const CommunicatorOptions& options)
      : size_(size), options_(options), meeting_(size) {
    for (auto& posts : posts_) posts.resize(size);
  }
  int size() const override { return size_; }
  std::shared_ptr<Communicator> Rank(int rank) override {
    return std::make_shared<InProcessCommunicator>(shared_from_this(), rank);
  }

  const int size_;
  const CommunicatorOptions options_;
  Meeting meeting_;
  // Posts of the current and the next collective: a rank can run at most one
  // collective ahead of the slowest (it cannot pass the next meeting alone).
  std::vector<Post> posts_[2];
};

int InProcessCommunicator::size() const { return group_->size_; }

std::string Describe(const Post& post) {
  std::ostringstream out;
  out << KindName(post.kind) << "(" << c10::toString(post.dtype) << ", " << post.numel
      << " elements";
  if (post.kind == Kind::kBroadcast) out << ", root " << post.root;
  out << ")";
  return out.str();
}

Status InProcessCommunicator::Meet(const char* what) {
  auto deadline = std::chrono::steady_clock::now() + group_->options_.timeout;
  return group_->meeting_.Wait(rank_, deadline,
                               std::string(what) + " #" + std::to_string(sequence_));
}

StatusOr<const std::vector<Post>*> InProcessCommunicator::Join(Post post) {
  post.sequence = ++sequence_;
  std::vector<Post>& posts = group_->posts_[sequence_ & 1];
  const char* what = KindName(post.kind);
  posts[rank_] = std::move(post);
  CHORUS_RETURN_IF_ERROR(Meet(what));
  const Post& mine = posts[rank_];
  for (int r = 0; r < group_->size_; ++r) {
    const Post& other = posts[r];
    std::string problem;
    if (!other.error.empty()) {
      problem = "rank " + std::to_string(r) + ": " + other.error;
    } else if (other.kind != mine.kind || other.dtype != mine.dtype || other.numel != mine.numel ||
               other.op != mine.op || other.root != mine.root || other.sequence != mine.sequence) {
      problem = "mismatched collectives: rank " + std::to_string(rank_) + " called " +
                Describe(mine) + ", rank " + std::to_string(r) + " called " + Describe(other);
    }
    if (!problem.empty()) {
      group_->meeting_.Break(problem);
      return Status(StatusCode::kAborted, problem);
    }
  }
  return &posts;
}

std::string CheckTensor(const at::Tensor& tensor, const char* name) {
  if (!tensor.defined()) return std::string(name) + " is undefined";
  if (!tensor.is_contiguous()) return std::string(name) + " is not contiguous";
  if (!tensor.device().is_cpu()) return std::string(name) + " is not a CPU tensor";
  return "";
}

Status InProcessCommunicator::AllReduce(at::Tensor& tensor, ReduceOp op) {
  Post post(Kind::kAllReduce);
  post.error = CheckTensor(tensor, "tensor");
  if (post.error.empty()) {
    post.dtype = tensor.scalar_type();
    post.numel = tensor.numel();
    post.op = op;
    post.output = tensor.data_ptr();
    if (op == ReduceOp::kAvg && !c10::isFloatingType(post.dtype)) {
      post.error = "avg needs a floating-point dtype";
    }
  }
  CHORUS_ASSIGN_OR_RETURN(const std::vector<Post>* posts, Join(std::move(post)));
  const int n = group_->size_;
  std::vector<const void*> inputs;
  for (const Post& p : *posts) inputs.push_back(p.output);
  // Phase 1: reduce my chunk, in place in my own buffer (only I read it).
  auto [begin, end] = ChunkBounds(tensor.numel(), n, rank_);
  CHORUS_RETURN_IF_ERROR(
      kernels::Reduce(tensor.scalar_type(), op, inputs, tensor.data_ptr(), begin, end));
  CHORUS_RETURN_IF_ERROR(Meet("all_reduce"));
  // Phase 2: copy every other rank's reduced chunk.
  const size_t element = tensor.element_size();
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    auto [b, e] = ChunkBounds(tensor.numel(), n, r);
    std::memcpy(static_cast<char*>(tensor.data_ptr()) + b * element,
                static_cast<const char*>((*posts)[r].output) + b * element, (e - b) * element);
  }
  return Meet("all_reduce");
}

Status InProcessCommunicator::AllGather(const at::Tensor& input, at::Tensor& output) {
  Post post(Kind::kAllGather);
  post.error = CheckTensor(input, "input");
  if (post.error.empty()) post.error = CheckTensor(output, "output");
  if (post.error.empty()) {
    post.dtype = input.scalar_type();
    post.numel = input.numel();
    post.input = input.data_ptr();
    if (output.scalar_type() != input.scalar_type()) {
      post.error = "output dtype differs from input dtype";
    } else if (output.numel() != input.numel() * group_->size_) {
      post.error = "output has " + std::to_string(output.numel()) + " elements, needs " +
                   std::to_string(input.numel() * group_->size_);
    }
  }
  CHORUS_ASSIGN_OR_RETURN(const std::vector<Post>* posts, Join(std::move(post)));
  const size_t bytes = input.numel() * input.element_size();
  for (int r = 0; r < group_->size_; ++r) {
    std::memcpy(static_cast<char*>(output.data_ptr()) + r * bytes, (*posts)[r].input, bytes);
  }
  return Meet("all_gather");
}

Status InProcessCommunicator::ReduceScatter(const at::Tensor& input, at::Tensor& output,
                                            ReduceOp op) {
  Post post(Kind::kReduceScatter);
  post.error = CheckTensor(input, "input");
  if (post.error.empty()) post.error = CheckTensor(output, "output");
  auto [begin, end] = ChunkBounds(input.defined() ? input.numel() : 0, group_->size_, rank_);
  if (post.error.empty()) {
    post.dtype = input.scalar_type();
    post.numel = input.numel();
    post.op = op;
    post.input = input.data_ptr();
    if (output.scalar_type() != input.scalar_type()) {
      post.error = "output dtype differs from input dtype";
    } else if (output.numel() != end - begin) {
      post.error = "output has " + std::to_string(output.numel()) + " elements, this rank's " +
                   "chunk has " + std::to_string(end - begin);
    } else if (op == ReduceOp::kAvg && !c10::isFloatingType(post.dtype)) {
      post.error = "avg needs a floating-point dtype";
    }
  }
  CHORUS_ASSIGN_OR_RETURN(const std::vector<Post>* posts, Join(std::move(post)));
  std::vector<const void*> inputs;
  const size_t element = input.element_size();
  for (const Post& p : *posts)
    inputs.push_back(static_cast<const char*>(p.input) + begin * element);
  CHORUS_RETURN_IF_ERROR(
      kernels::Reduce(input.scalar_type(), op, inputs, output.data_ptr(), 0, end - begin));
  return Meet("reduce_scatter");
}

Status InProcessCommunicator::Broadcast(at::Tensor& tensor, int root) {
  Post post(Kind::kBroadcast);
  post.error = CheckTensor(tensor, "tensor");
  post.root = root;
  if (root < 0 || root >= group_->size_) post.error = "root out of range";
  if (post.error.empty()) {
    post.dtype = tensor.scalar_type();
    post.numel = tensor.numel();
    post.input = tensor.data_ptr();
  }
  CHORUS_ASSIGN_OR_RETURN(const std::vector<Post>* posts, Join(std::move(post)));
  if (rank_ != root) {
    std::memcpy(tensor.data_ptr(), (*posts)[root].input, tensor.numel() * tensor.element_size());
  }
  return Meet("broadcast");
}

Status InProcessCommunicator::Barrier() { return Join(Post(Kind::kBarrier)).status(); }

}  // namespace

std::shared_ptr<InProcessGroup> InProcessGroup::Create(int size,
                                                       const CommunicatorOptions& options) {
  return std::make_shared<Group>(size, options);
}

std::vector<MeshRank> CreateInProcessMesh(int dp, int tp, const CommunicatorOptions& options) {
  std::vector<std::shared_ptr<InProcessGroup>> tp_groups, dp_groups;
  for (int i = 0; i < dp && tp > 1; ++i) tp_groups.push_back(InProcessGroup::Create(tp, options));
  for (int i = 0; i < tp && dp > 1; ++i) dp_groups.push_back(InProcessGroup::Create(dp, options));
  std::vector<MeshRank> mesh(dp * tp);
  for (int rank = 0; rank < dp * tp; ++rank) {
    const int dp_rank = rank / tp, tp_rank = rank % tp;
    if (dp > 1) mesh[rank].dp = dp_groups[tp_rank]->Rank(dp_rank);
    if (tp > 1) mesh[rank].tp = tp_groups[dp_rank]->Rank(tp_rank);
  }
  return mesh;
}

std::pair<int64_t, int64_t> ChunkBounds(int64_t count, int parts, int index) {
  const int64_t base = count / parts, extra = count % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

StatusOr<ReduceOp> ParseReduceOp(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "avg") return ReduceOp::kAvg;
  if (name == "max") return ReduceOp::kMax;
  return InvalidArgumentError("unknown reduce op \"" + name + "\" (sum, avg or max)");
}

}  // namespace chorus
