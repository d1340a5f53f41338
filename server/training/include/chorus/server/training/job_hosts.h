// The servers of a training job that spans several (JobSpec.hosts), seen
// from its driver (host 0): every operation runs on this server's ranks and,
// at the same time, on every other host through its TrainingService, marked
// as the driver's (kDriverMetadata). A host that fails or does not answer
// fails the operation with an error naming it.
#ifndef CHORUS_SERVER_TRAINING_JOB_HOSTS_H_
#define CHORUS_SERVER_TRAINING_JOB_HOSTS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/training/training_service.grpc.pb.h"

namespace chorus {

// The metadata key a driver's calls carry, with the driver server's instance
// id: the other hosts run them on their part of the job, which refuses
// everyone else's.
inline constexpr char kDriverMetadata[] = "chorus-job-driver";

// "10.0.0.2" of "10.0.0.2:8001" (and "::1" of "[::1]:8001").
std::string HostOfAddress(const std::string& address);

class JobHosts {
 public:
  using Stub = training::TrainingService::Stub;
  // What runs on other host `host`: the call on its stub, with a context that
  // carries the driver's marker and the server's token.
  using RemoteCall =
      std::function<grpc::Status(int host, Stub& stub, grpc::ClientContext& context)>;

  // `hosts`: every host's address, this one first. `instance`: this
  // server's instance id (the marker's value). `grace`: how long the others
  // may take to answer once this host's part is done (a collective fails
  // within the job's timeout, so a host silent for longer is lost).
  JobHosts(std::vector<std::string> hosts, std::string instance, std::string auth_token,
           std::chrono::milliseconds grace);

  const std::vector<std::string>& hosts() const { return hosts_; }

  // Runs `local` on this thread and `remote` on every other host at once;
  // returns when all have answered: OK, or an error naming each host that
  // failed (the first failure's code). When `local` fails, the others' calls
  // are cancelled (their collectives fail anyway). Blocking; any thread.
  Status Run(const std::function<Status()>& local, const RemoteCall& remote) const;

  // `remote` on every other host only, each within `timeout` (best effort:
  // tearing down); returns the first error.
  Status RunOnOthers(const RemoteCall& remote, std::chrono::milliseconds timeout) const;
  // RunOnOthers: DeleteJob(job_id), freeing the other hosts' parts.
  Status DeleteOnOthers(const std::string& job_id, std::chrono::milliseconds timeout) const;

 private:
  // Adds the driver's marker and the server's token to a call to another host.
  void Mark(grpc::ClientContext& context) const;

  const std::vector<std::string> hosts_;
  const std::string instance_;
  const std::string auth_token_;
  const std::chrono::milliseconds grace_;
  std::vector<std::unique_ptr<Stub>> stubs_;  // [h - 1] for host h
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TRAINING_JOB_HOSTS_H_
