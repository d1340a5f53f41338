// Watches the drivers of this server's parts of jobs across servers: every
// second it asks each driver about its job, and a part whose driver no longer
// knows the job, failed it, or has not answered for the job's collective
// timeout is failed (its ranks freed), so a lost driver never strands
// interpreters. Its own thread, started by the first join. Thread-safe.
#ifndef CHORUS_SERVER_TRAINING_DRIVER_WATCH_H_
#define CHORUS_SERVER_TRAINING_DRIVER_WATCH_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/server/rpc/authorizer.h"
#include "chorus/server/training/job_registry.h"

namespace chorus {

class DriverWatch {
 public:
  // Fails a part whose driver is lost (on the part's runner).
  using Fail = std::function<void(const std::string& id, std::shared_ptr<JobEntry> entry,
                                  const Status& why)>;

  // Both outlive the watch.
  DriverWatch(const JobRegistry* jobs, const Authorizer* authorizer, Fail fail)
      : jobs_(jobs), authorizer_(authorizer), fail_(std::move(fail)) {}
  // Stop().
  ~DriverWatch();

  // Starts watching, once; nothing after Stop.
  void Start() CHORUS_EXCLUDES(mu_);
  // Stops and joins. Idempotent.
  void Stop() CHORUS_EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  // What the watch knows of one job's driver.
  struct Heard {
    Clock::time_point last;  // its last answer (or when the watch began)
    bool confirmed = false;  // it has answered about the job
  };
  void Run() CHORUS_EXCLUDES(mu_);
  // One round: asks about every part held here; fails the lost ones.
  void CheckDrivers();
  // Why `entry`'s driver is lost ("" while it is not).
  std::string AskDriver(const std::string& id, const JobEntry& entry, Heard& heard);

  const JobRegistry* const jobs_;
  const Authorizer* const authorizer_;
  const Fail fail_;
  // The watch thread's own.
  std::map<std::string, std::unique_ptr<training::TrainingService::Stub>> drivers_;  // by address
  std::map<std::string, Heard> heard_;                                               // by job id
  Mutex mu_;
  CondVar changed_;
  bool stopping_ CHORUS_GUARDED_BY(mu_) = false;
  std::thread thread_ CHORUS_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_DRIVER_WATCH_H_
