// training/job/: a training job on a server's interpreters: its spec
// (training_spec.h), its ranks, steps, checkpoints and export (this header),
// and chorus-run. Knows nothing of server/ (the training service drives it).
//
// A training job: W = dp x tp ranks, each an interpreter on its own thread,
// running chorus.training.trainer on a packaged model with chorus' FSDP and
// tensor-parallel kernels over in-process communicators. A job across hosts
// is one TrainingJob per host, each with its host's dp x tp ranks, met
// through a Rendezvous: data parallelism spans the hosts (hierarchical
// collectives, hierarchical.h), tensor parallelism stays inside one; every
// host runs each operation at the same time (the caller sees to it).
//
// Every operation (step, save, load, evaluate, export) runs on all ranks at
// once, one thread per rank, and returns when all are done; operations of one
// job are serialized. Thread-safe.
#ifndef CHORUS_TRAINING_JOB_TRAINING_JOB_H_
#define CHORUS_TRAINING_JOB_TRAINING_JOB_H_

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/archive.h"
#include "chorus/training/collectives/hierarchical.h"
#include "chorus/training/job/training_spec.h"

namespace chorus {

struct TrainingJobOptions {
  std::string id;
  std::shared_ptr<Archive> archive;
  TrainingSpec spec;               // what to train and how (validated by Create)
  int dp = 1;                      // data-parallel (FSDP) degree
  int tp = 1;                      // tensor-parallel degree
  std::vector<int> interpreters;   // dp * tp distinct interpreter indices; rank r on [r]
  double peak_flops_per_rank = 0;  // for MFU; 0 measures the CPU's matmul peak
  std::string metrics_log;         // JSONL per step ("" = none)
  // Where the job's checkpoints go ("" = only where SaveCheckpoint says). A
  // job created with one resumes from its latest checkpoint, if any.
  std::string checkpoint_dir;
  int64_t checkpoint_interval = 0;  // save to checkpoint_dir every N steps (0: never)
  // How long a collective waits for the other ranks (a lost host fails the
  // operation within it).
  std::chrono::milliseconds collective_timeout{60000};

  // A job across hosts (hosts > 1): this host's index, where the hosts meet,
  // the address other hosts reach this one at (Gloo's), and the layout:
  // "fsdp" (shard over every rank) or "hsdp" (shard in a host, replicate
  // across). Checkpoints are step-N/host-H/ folders; `latest` is written by
  // host 0 once every host has committed.
  int hosts = 1;
  int host = 0;
  std::shared_ptr<Rendezvous> rendezvous;
  std::string gloo_host = "127.0.0.1";
  std::string layout = "fsdp";
  // The step folder of checkpoint_dir to resume from ("": its latest, if any
  // and `resume_latest`; a job across hosts is told by its driver instead).
  std::string resume_from;
  bool resume_latest = true;
};

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;  // all ranks together
  double tokens_per_second_per_rank = 0;
  double mfu_pct = 0;
  double memory_mib = 0;
  int64_t cross_host_bytes = 0;  // sent by this host's ranks to other hosts
};

// When an operation should end early: at `deadline`, or once `cancelled`
// (optional; called from the operation's thread) returns true. Checked before
// each step; a step, save or load that has begun runs to its end, since all
// ranks must finish it together.
struct StopConditions {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::function<bool()> cancelled;

  // CANCELLED or DEADLINE_EXCEEDED when the operation should stop, else OK.
  Status Check() const;
};

class TrainingJob {
 public:
  // Builds the model on every rank and, when checkpoint_dir holds a
  // checkpoint, resumes from its latest. INVALID_ARGUMENT for a bad layout or
  // spec (the Python error's message); the ranks are cleaned up on failure.
  static StatusOr<std::unique_ptr<TrainingJob>> Create(InterpreterManager* manager,
                                                       TrainingJobOptions options);
  ~TrainingJob();

  const TrainingJobOptions& options() const { return options_; }
  // This host's ranks.
  int world_size() const { return options_.dp * options_.tp; }
  // Every host's ranks.
  int global_world_size() const { return options_.hosts * world_size(); }
  // The step folder `root`'s `latest` names ("" when there is none).
  static std::string LatestCheckpoint(const std::string& root);

  // `steps` steps from the archive's data loader, or one on `batch`
  // ([global_batch, seq_len + 1] int64 tokens), saving to checkpoint_dir at
  // every checkpoint_interval-th step. Returns each step's metrics; when
  // `stop` ends it early, its status (the steps taken stay in History).
  StatusOr<std::vector<StepMetrics>> Step(int steps, const std::optional<at::Tensor>& batch,
                                          const StopConditions& stop = {}) CHORUS_EXCLUDES(mu_);
  // Writes <root>/step-<N>/ (a file per rank and manifest.json) and then
  // <root>/latest, each atomically and flushed to the disk before the next:
  // a crash or a power loss leaves the previous checkpoint. Across hosts,
  // each writes <root>/step-<N>/host-<H>/, they agree (a collective) that all
  // did, and then host 0 moves `latest`.
  StatusOr<std::string> Save(const std::string& root) CHORUS_EXCLUDES(mu_);
  // Save(checkpoint_dir); FAILED_PRECONDITION when the job has none.
  StatusOr<std::string> SaveToCheckpointDir() CHORUS_EXCLUDES(mu_);
  // Restores a step folder (or a root's latest). FAILED_PRECONDITION if its
  // layout (dp, tp) differs from this job's. Returns the step reached.
  StatusOr<int64_t> Load(const std::string& path) CHORUS_EXCLUDES(mu_);
  // The step folder `path` names (itself, or its root's latest), checked to
  // hold this host's part in this job's layout; Load's errors otherwise.
  // Reads only the manifest: a driver resolves it before every host loads.
  StatusOr<std::string> CheckpointFolder(const std::string& path) const;
  // The model's output on `tokens` (eval mode; computed collectively).
  StatusOr<at::Tensor> Evaluate(const at::Tensor& tokens) CHORUS_EXCLUDES(mu_);
  // Writes the model as a servable chorus package at `path`.
  Status Export(const std::string& path, const std::string& name, int64_t version,
                int64_t example_length) CHORUS_EXCLUDES(mu_);

  // Metrics of every step so far (since the checkpoint the job resumed from).
  std::vector<StepMetrics> History() const CHORUS_EXCLUDES(history_mu_);
  // Steps the model has taken: the last step run, or the loaded checkpoint's.
  int64_t CurrentStep() const CHORUS_EXCLUDES(history_mu_);
  // Calls `listener` (from the stepping thread) after every step, and
  // `closed` once when the job is closed (at once if it already is). Returns
  // an id for Unsubscribe. Neither may block.
  int Subscribe(std::function<void(const StepMetrics&)> listener, std::function<void()> closed)
      CHORUS_EXCLUDES(history_mu_);
  void Unsubscribe(int id) CHORUS_EXCLUDES(history_mu_);
  // Tells every subscriber the job is going away, then waits (up to
  // `timeout`) until they have all unsubscribed.
  void Close(std::chrono::milliseconds timeout) CHORUS_EXCLUDES(history_mu_);

  // Deletes the job's state on every rank, after the running operation, so
  // its interpreters are free for other work; later operations fail with
  // FAILED_PRECONDITION. Idempotent; the destructor calls it.
  void Shutdown() CHORUS_EXCLUDES(mu_);

 private:
  explicit TrainingJob(InterpreterManager* manager, TrainingJobOptions options);
  // Calls chorus.training.trainer.<function>(job_id, *args(rank)) on every
  // rank at once; returns every rank's result, or the first error.
  StatusOr<std::vector<c10::IValue>> RunOnRanks(
      const std::string& function, const std::function<std::vector<c10::IValue>(int)>& args);
  void Record(const StepMetrics& metrics) CHORUS_EXCLUDES(history_mu_);
  StatusOr<std::string> SaveLocked(const std::string& root) CHORUS_REQUIRES(mu_);
  // Writes this host's part of step `step` under `root` (the step folder, or
  // its host-H folder across hosts) and gives it its name, whole or not at all.
  Status WriteCheckpointPart(const std::string& root, int64_t step) CHORUS_REQUIRES(mu_);
  StatusOr<int64_t> LoadLocked(const std::string& path) CHORUS_REQUIRES(mu_);
  struct Checkpoint {
    std::string folder;  // the step folder
    std::string part;    // this host's files: the folder, or its host-H
    int64_t step = 0;
  };
  StatusOr<Checkpoint> FindCheckpoint(const std::string& path) const;
  // The ranks' communicators: in-process, or hierarchical across hosts.
  Status ConnectRanks();
  // Across hosts: true when every rank of every host passes ok (a collective).
  StatusOr<bool> AllHostsAgree(bool ok);
  int64_t CrossHostBytes() const;

  InterpreterManager* const manager_;
  const TrainingJobOptions options_;
  std::vector<c10::IValue> dp_comms_, tp_comms_;  // per rank (None when degree 1)
  // HSDP's groups per rank (None otherwise): shard inside the host, replicate across.
  std::vector<c10::IValue> shard_comms_, replicate_comms_;
  std::vector<std::shared_ptr<HierarchicalCommunicator>> cross_host_;  // per rank, across hosts
  // FAILED_PRECONDITION once Shutdown has run.
  Status CheckOpen() const CHORUS_REQUIRES(mu_);

  Mutex mu_;  // one operation at a time
  bool shut_down_ CHORUS_GUARDED_BY(mu_) = false;
  mutable Mutex history_mu_;
  std::vector<StepMetrics> history_ CHORUS_GUARDED_BY(history_mu_);
  int64_t step_ CHORUS_GUARDED_BY(history_mu_) = 0;
  struct Listener {
    int id;
    std::function<void(const StepMetrics&)> step;
    std::function<void()> closed;
  };
  std::vector<Listener> listeners_ CHORUS_GUARDED_BY(history_mu_);
  int next_listener_ CHORUS_GUARDED_BY(history_mu_) = 0;
  bool closed_ CHORUS_GUARDED_BY(history_mu_) = false;
  CondVar unsubscribed_;
};

// FLOP/s of a 1024x1024 fp32 matrix product on this CPU with libtorch's
// current intra-op threads, scaled to every hardware thread: the CPU peak MFU
// is measured against. Measured once per process.
double CpuMatmulPeakFlops();

}  // namespace chorus

#endif  // CHORUS_TRAINING_JOB_TRAINING_JOB_H_
