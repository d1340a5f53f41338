// chorus-server's supervisor: the serving process runs as its child and is
// started again, after a growing pause, whenever it dies of anything but a
// stop the supervisor was asked for. SIGTERM and SIGINT are forwarded (the
// serving process drains as it does alone) and end the supervisor too.
//
// With cells (--cells K), K serving processes share the ports and each is
// supervised so; a warm spare (--spare) has loaded every model but accepts
// nothing until a cell dies, then takes its place at once (cell_control.h)
// and a new spare starts. Crashes count towards quarantine across cells, and
// a quarantine reaches the processes that run. A repository call's load or
// unload that reaches one of several serving processes is carried out by
// every one (the supervisor forwards it, collects their outcomes and answers
// the process that asked), and recorded for the processes started later.
#ifndef CHORUS_SERVER_SUPERVISOR_H_
#define CHORUS_SERVER_SUPERVISOR_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace chorus {

struct SupervisorOptions {
  std::chrono::milliseconds first_backoff{250};  // pause before the first restart
  std::chrono::milliseconds max_backoff{30000};  // the pause doubles up to this
  // A serving process that ran this long before dying restarts after
  // first_backoff again (its crash is not part of a crash loop).
  std::chrono::milliseconds stable_after{60000};
  // A model (or training job) running when the serving process died this
  // many times within the window is quarantined: the next serving processes
  // do not load it (recreate it).
  int quarantine_after = 2;
  std::chrono::milliseconds quarantine_window{600000};
  int cells = 1;       // serving processes at once
  bool spare = false;  // keep one more ready to replace a cell that dies
  // Set: run once in a preloaded process (preloaded_forks.h) whose forks
  // become the serving processes, sharing what it loaded copy-on-write.
  // Unset: the supervisor forks them itself.
  std::function<void()> preload;
};

// A repository call's explicit load or unload of a model, carried out by
// every serving process (cell_control.h carries it; ServingRun records it).
struct ModelChange {
  enum class Kind { kLoad, kUnload };
  Kind kind = Kind::kLoad;
  std::string model;
  // A load's config and files (Triton's load parameters "config",
  // "file:<path>"): the name of the file in ServingRun::changes_dir that
  // holds them (EncodeChangeOverride); "" for none.
  std::string override_file;
};

// What the serving process is told about the ones before it.
struct ServingRun {
  int restarts = 0;       // serving processes that died before this one
  std::string last_exit;  // how the last one ended ("signal SIGSEGV"), "" if none
  std::map<std::string, std::string> quarantined;  // model -> why
  // Training jobs not to recreate: job id -> why (they were running each time).
  std::map<std::string, std::string> quarantined_jobs;
  int cell = 0;        // which cell this process serves as (a spare: the first it may)
  bool spare = false;  // accept nothing until told to serve (a kServe command)
  // The supervisor's commands and this process's reports (cell_control.h),
  // a socket for both directions; -1: none.
  int control_fd = -1;
  // With several serving processes: the explicit loads and unloads since the
  // supervisor started, the last per model, in order (a quarantined model's
  // left out): carried out after the start-up loads, before serving.
  std::vector<ModelChange> model_changes;
  // With several serving processes: the supervisor's folder where a load's
  // override is written for every process to read ("" with one).
  std::string changes_dir;
};

// The models a crash record names (CrashLabelsIn), each once, in order.
std::vector<std::string> ModelsInCrashRecord(const std::string& record);
// The training jobs it names, likewise.
std::vector<std::string> JobsInCrashRecord(const std::string& record);

// Runs `serve(run)` in child processes (its return value is the child's exit
// status; each child holds only its own control fd) and supervises them as
// above. Returns the exit status for the supervisor after a forwarded stop:
// the first non-zero one of the serving processes', else 0. Call first thing
// in main, before any thread starts.
int Supervise(const SupervisorOptions& options, const std::function<int(const ServingRun&)>& serve);

// "exit status 3", "signal SIGSEGV": how a process with wait status `status` ended.
std::string DescribeWaitStatus(int status);

}  // namespace chorus

#endif  // CHORUS_SERVER_SUPERVISOR_H_
