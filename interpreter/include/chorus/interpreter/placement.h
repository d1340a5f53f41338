// Who runs on which interpreter: the one owner of that decision for a
// server's interpreters. Training jobs hold interpreters exclusively: no
// generation engine is placed on them, and model calls (the manager's
// AcquireOne) avoid them while any other interpreter is left. Generation
// engines pin one loop each to an interpreter no job holds, and share it with
// model calls between steps. Jobs take the lowest free indices, engines the
// highest, so the two rarely meet.
//
//   InterpreterPlacement placement(manager);
//   StatusOr<InterpreterLease> ranks = placement.HoldExclusive(2, "training job job-1");
//   StatusOr<InterpreterLease> loops = placement.PinShared(1, "model llm version 1");
//
// Thread-safe.
#ifndef CHORUS_INTERPRETER_PLACEMENT_H_
#define CHORUS_INTERPRETER_PLACEMENT_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/interpreter_manager.h"

namespace chorus {

class InterpreterPlacement;

// Interpreters placed for one owner, given back when the lease is destroyed
// or released. Movable, not copyable.
class InterpreterLease {
 public:
  InterpreterLease() = default;
  InterpreterLease(InterpreterLease&& other) noexcept;
  InterpreterLease& operator=(InterpreterLease&& other) noexcept;
  InterpreterLease(const InterpreterLease&) = delete;
  InterpreterLease& operator=(const InterpreterLease&) = delete;
  ~InterpreterLease() { Release(); }

  // The interpreters' indices, in the order they were placed.
  const std::vector<int>& interpreters() const { return interpreters_; }
  // Gives them back (idempotent; any thread).
  void Release();

 private:
  friend class InterpreterPlacement;
  InterpreterLease(InterpreterPlacement* placement, std::vector<int> interpreters, bool exclusive,
                   std::string owner)
      : placement_(placement),
        interpreters_(std::move(interpreters)),
        exclusive_(exclusive),
        owner_(std::move(owner)) {}

  InterpreterPlacement* placement_ = nullptr;
  std::vector<int> interpreters_;
  bool exclusive_ = false;
  std::string owner_;
};

class InterpreterPlacement {
 public:
  // `manager` outlives the placement, which outlives its leases.
  explicit InterpreterPlacement(InterpreterManager* manager) : manager_(manager) {}

  InterpreterManager* manager() const { return manager_; }

  // `count` interpreters for `owner` alone (a training job's ranks), none of
  // which a job holds or an engine is pinned to, lowest first.
  // INVALID_ARGUMENT saying how many are free, and who holds the others,
  // when fewer than `count` are.
  StatusOr<InterpreterLease> HoldExclusive(int count, const std::string& owner)
      CHORUS_EXCLUDES(mu_);
  // What HoldExclusive(count) would answer now, holding nothing.
  Status CheckExclusive(int count) const CHORUS_EXCLUDES(mu_);

  // Up to `count` interpreters for `owner`'s loops (generation engines), none
  // of which a job holds: the least pinned first, then the highest index.
  // Fewer when fewer are free of jobs; FAILED_PRECONDITION when none is.
  StatusOr<InterpreterLease> PinShared(int count, const std::string& owner) CHORUS_EXCLUDES(mu_);

  // Who holds or is pinned to interpreter `index` ("" if nobody), for logs and errors.
  std::string OwnersOf(int index) const CHORUS_EXCLUDES(mu_);

 private:
  friend class InterpreterLease;
  void Give(const InterpreterLease& lease) CHORUS_EXCLUDES(mu_);
  // Interpreters no job holds and no engine is pinned to.
  std::vector<int> FreeLocked() const CHORUS_REQUIRES(mu_);
  std::string DescribeHeldLocked() const CHORUS_REQUIRES(mu_);

  InterpreterManager* const manager_;
  mutable Mutex mu_;
  std::map<int, std::string> exclusive_ CHORUS_GUARDED_BY(mu_);            // index -> owner
  std::map<int, std::vector<std::string>> shared_ CHORUS_GUARDED_BY(mu_);  // index -> owners
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_PLACEMENT_H_
