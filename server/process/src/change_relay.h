// The supervisor's part in a repository call's load or unload when several
// serving processes run (cell_control.h has the messages): a process asks
// (kRequest), every serving process that runs carries the change out
// (kApply, kApplied), and the asker is answered (kAnswer) once each has
// answered or died: OK, or the first error in cell order, naming its process.
// One change is carried out at a time, in the order asked, so every process
// sees the same order. The record of changes (ServingRun::model_changes) is
// what processes started later carry out after their start-up loads: it is
// updated when a change is forwarded, so a process starts either with it in
// its record or with it on its control socket, never neither.
#ifndef CHORUS_SERVER_PROCESS_SRC_CHANGE_RELAY_H_
#define CHORUS_SERVER_PROCESS_SRC_CHANGE_RELAY_H_

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/server/supervisor.h"

namespace chorus {

class ChangeRelay {
 public:
  // A serving process as the relay addresses and names it.
  struct Process {
    pid_t pid = 0;
    int control_fd = -1;
    std::string name;  // "cell 1", "the spare": how an error names it
    int order = 0;     // an answer's first error: cells by number, then the spare
  };
  using Processes = std::vector<Process>;

  // `run` (the supervisor's, outliving the relay) is what the next serving
  // processes are told: its model_changes and quarantined are kept here.
  // Overrides lie in run->changes_dir.
  explicit ChangeRelay(ServingRun* run) : run_(run) {}

  // `origin` asks that every process carry out `change` (its request `id`):
  // now, or after the changes asked before it. `running`: every serving
  // process now (each call below takes them so).
  void Request(const Process& origin, int64_t id, ModelChange change, const Processes& running);
  // Process `pid` carried out change `id`, with `status`.
  void Applied(pid_t pid, int64_t id, const Status& status, const Processes& running);
  // `gone` died (`how`: "signal SIGSEGV"): the change it was carrying out
  // fails there; its requests not yet started are dropped.
  void Gone(const Process& gone, const std::string& how, const Processes& running);
  // `model` was quarantined: processes started later do not load it (an
  // explicit load re-admits it: Request records it and leaves quarantine).
  void Quarantined(const std::string& model);
  // The server stops: requests from now on are answered UNAVAILABLE.
  void Stop() { stopped_ = true; }

 private:
  // (No default member initializers: std::optional<Active> is declared
  // before this class is complete, and clang then deems Active not
  // default-constructible. Every field is set where one is made.)
  struct Asked {
    pid_t origin;
    int64_t request;
    ModelChange change;
  };
  // The change every process is carrying out.
  struct Active {
    int64_t id;
    Asked asked;
    std::set<pid_t> waiting;                       // those that have not answered
    std::vector<std::pair<int, Status>> failures;  // by Process::order
    std::vector<std::string> superseded;           // override files it replaced
  };

  // Forwards the next asked change if none is active.
  void StartNext(const Processes& running);
  // Records `change` for processes started later; returns the override files
  // of the changes it replaces.
  std::vector<std::string> Record(const ModelChange& change);
  // Answers the active change's asker once no process is left to answer.
  void FinishIfDone(const Processes& running);
  void Answer(const Asked& asked, const Status& status, const Processes& running);
  void RemoveFile(const std::string& file) const;

  ServingRun* const run_;
  std::deque<Asked> queued_;
  std::optional<Active> active_;
  int64_t next_id_ = 1;
  bool stopped_ = false;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_PROCESS_SRC_CHANGE_RELAY_H_
