// A serving process's half of its conversation with the supervisor when
// several serving processes run (cell_control.h has the messages): the
// repository calls' loads and unloads it asks every process to carry out,
// each waiting (without a thread of its own) for the supervisor's answer up
// to a deadline; the reports of the changes this process carried out; and
// the order of quarantines against those changes.
#ifndef CHORUS_SERVER_PROCESS_SRC_SUPERVISOR_LINK_H_
#define CHORUS_SERVER_PROCESS_SRC_SUPERVISOR_LINK_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/server/cell_control.h"

namespace chorus {

// How long a request waits for the supervisor's answer: every process's
// load of the model, each bounded by --model-load-timeout-ms per
// interpreter, plus the changes asked before it.
inline constexpr std::chrono::minutes kChangeAnswerTimeout{10};

class SupervisorLink {
 public:
  using Clock = std::chrono::steady_clock;

  // `control_fd`: the socket to the supervisor (not owned, outlives the
  // link); `changes_dir`: the supervisor's folder for loads' overrides.
  SupervisorLink(int control_fd, std::string changes_dir,
                 std::chrono::milliseconds answer_timeout = kChangeAnswerTimeout)
      : control_fd_(control_fd),
        changes_dir_(std::move(changes_dir)),
        answer_timeout_(answer_timeout) {}

  // Asks the supervisor that every serving process carry out `change`; a
  // load's `override` (if any) is written to a file in the changes folder
  // first. `done` exactly once: with the supervisor's answer (Answered),
  // DEADLINE_EXCEEDED once the answer timeout passes (Expire), UNAVAILABLE
  // (FailAll), or at once if the supervisor cannot be asked. Writes a file
  // and to the socket: for the background runner, not a reactor's thread.
  void Request(ModelChange change, const ChangeOverride* override, std::function<void(Status)> done)
      CHORUS_EXCLUDES(mu_, write_mu_);
  // The supervisor's answer to request `id` (kAnswer); nothing if it expired.
  void Answered(int64_t id, const Status& status) CHORUS_EXCLUDES(mu_);
  // Fails the requests whose time is up; returns when the next one's will
  // be (Clock::time_point::max() if none waits).
  Clock::time_point Expire() CHORUS_EXCLUDES(mu_);
  // Fails every request waiting with `status` (the server stops), and every
  // one asked from now on.
  void FailAll(const Status& status) CHORUS_EXCLUDES(mu_);
  // Tells the supervisor this process carried out its change `id` (kApplied).
  void Applied(int64_t id, const Status& status) CHORUS_EXCLUDES(write_mu_);

  // The supervisor's commands, numbered as they arrive (on one thread): a
  // load that arrived before a quarantine of its model and is carried out
  // after it is dropped, as the supervisor's record dropped it.
  uint64_t Arrived() CHORUS_EXCLUDES(mu_);
  void Quarantined(const std::string& model, uint64_t number) CHORUS_EXCLUDES(mu_);
  bool QuarantinedSince(const std::string& model, uint64_t number) const CHORUS_EXCLUDES(mu_);

  // The override of `change` read back from the changes folder (none: {}).
  StatusOr<ChangeOverride> OverrideOf(const ModelChange& change) const;

 private:
  struct Waiting {
    std::function<void(Status)> done;
    Clock::time_point deadline;
    std::string what;  // "load of model x", for the timeout's message
  };
  // Takes request `id` out of waiting; null `done` if it is not there.
  std::function<void(Status)> Take(int64_t id) CHORUS_EXCLUDES(mu_);

  const int control_fd_;
  const std::string changes_dir_;
  const std::chrono::milliseconds answer_timeout_;
  mutable Mutex mu_;
  std::map<int64_t, Waiting> waiting_ CHORUS_GUARDED_BY(mu_);
  int64_t next_request_ CHORUS_GUARDED_BY(mu_) = 1;
  uint64_t arrived_ CHORUS_GUARDED_BY(mu_) = 0;
  bool failed_all_ CHORUS_GUARDED_BY(mu_) = false;  // FailAll: no answer comes any more
  Status failed_all_status_ CHORUS_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> quarantined_at_ CHORUS_GUARDED_BY(mu_);
  Mutex write_mu_;  // one message on the socket at a time
};

}  // namespace chorus

#endif  // CHORUS_SERVER_PROCESS_SRC_SUPERVISOR_LINK_H_
