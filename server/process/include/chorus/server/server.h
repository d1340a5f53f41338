// server/process/: chorus-server as a process: the server assembled from its
// parts (this header, Server::Start), serving until SIGTERM, and the
// supervisor that restarts the serving process (supervisor.h).
//
// chorus' inference server: the Open Inference Protocol (KServe v2 / Triton
// gRPC) over a Triton-style model repository, served by N interpreters in one
// process, with dynamic batching, Prometheus metrics on HTTP and health.
//
//   chorus::ServerOptions options;
//   options.model_repository = "/models";
//   auto server = chorus::Server::Start(options).value();
//   ...                      // serving
//   server->Shutdown();      // stop accepting, drain in-flight requests, stop
#ifndef CHORUS_SERVER_SERVER_H_
#define CHORUS_SERVER_SERVER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/server/config/torchserve_model_settings.h"
#include "chorus/server/supervisor.h"

namespace chorus {

struct ServerOptions {
  std::string model_repository;  // <model>/<version>/<archive>.pt
  int interpreters = 0;          // 0: one per hardware thread
  std::string host = "0.0.0.0";
  int port = 8001;                       // gRPC; 0 picks a free port
  int http_port = 8000;                  // KServe v2 HTTP/REST; 0 picks, -1 disables
  int metrics_port = 8002;               // HTTP /metrics; 0 picks a free port, -1 disables
  int64_t max_message_bytes = 64 << 20;  // larger requests: RESOURCE_EXHAUSTED
  size_t max_queue = 1024;               // per model; beyond it: UNAVAILABLE
  // 0: only the client's deadline. Also bounds the run on zeros that learns
  // the outputs of a model whose config.json leaves them out (60 s without it).
  std::chrono::milliseconds request_timeout{0};
  // How long making a model in one interpreter (its module code, unpickling)
  // may take before that load fails with DEADLINE_EXCEEDED (0: no limit).
  std::chrono::milliseconds model_load_timeout{120000};
  std::string tls_cert;  // PEM files; both or neither
  std::string tls_key;
  std::string auth_token;  // non-empty: every model call needs "authorization: Bearer <token>"
  std::chrono::milliseconds drain_timeout{30000};  // how long Shutdown waits for in-flight requests
  std::string cache_dir;                           // interpreters' library cache ("" = default)
  bool defer_imports = true;                       // InterpreterManagerOptions::defer_imports
  // > 0: the process's private writable memory may not exceed this many MiB
  // (RLIMIT_DATA, set by Start for the whole process): a request that would
  // allocate past it fails with RESOURCE_EXHAUSTED instead of the kernel's
  // OOM killer ending the process. Mapped weights do not count.
  int64_t memory_limit_mib = 0;
  // After requests stop for this long (and once after start), the heap memory
  // they freed goes back to the system (IdleMemoryReleaser), and on a host
  // without a GPU the pages loading torch's CUDA libraries touched; 0: never.
  std::chrono::milliseconds idle_memory_release{1000};
  // Non-empty: serve and train only archives signed (chorus-package sign) by
  // one of the Ed25519 public keys (*.pem) in this directory.
  std::string trusted_keys_dir;
  // ServerReady and /v2/health/ready: true only while every repository model
  // that should serve does (Triton's strict readiness); false: while serving.
  bool strict_readiness = true;
  // Which models serve, and who changes that (Triton's --model-control-mode):
  //   kAll (chorus' default): every repository model at start; the repository
  //        calls load and unload;
  //   kNone: every model at start; the repository calls are refused;
  //   kExplicit: only `load_models` at start ("*": all); the calls load and unload;
  //   kPoll: every model at start, then the repository is read again every
  //        `repository_poll` (new, changed, removed models); the calls are refused.
  enum class ModelControl { kAll, kNone, kExplicit, kPoll };
  ModelControl model_control = ModelControl::kAll;
  std::vector<std::string> load_models;
  std::chrono::seconds repository_poll{15};
  // The response cache's budget in bytes (models opt in with config.json's
  // "response_cache"); 0: no cache.
  size_t cache_size_bytes = 0;
  // Whether a Triton Python-backend model's auto_complete_config runs
  // (Triton's --disable-auto-complete-config, --strict-model-config true: no).
  bool auto_complete_config = true;
  // Triton's --model-config-name: a model folder's config is
  // configs/<name>.pbtxt where it has one ("": config.pbtxt or config.json).
  std::string model_config_name;
  // TorchServe's --models: model_repository is then a TorchServe model store,
  // and these of its entries serve ("all", "<entry>", "<name>=<entry>";
  // chorus/server/torchserve/model_store.h). Empty: a chorus repository.
  std::vector<std::string> torchserve_models;
  // TorchServe's inference API (/ping, /predictions) and management API
  // (/models): their ports; 0 picks a free one, -1 serves none. The
  // management API makes model_repository a TorchServe model store.
  int torchserve_inference_port = -1;
  int torchserve_management_port = -1;
  int torchserve_metrics_port = -1;  // TorchServe's metrics API (/metrics)
  // Whether the management API registers and unregisters models (TorchServe
  // 0.12's --enable-model-api; off by default, as there).
  bool torchserve_model_api = false;
  // A TorchServe model's settings where neither its archive's
  // model-config.yaml nor config.properties' models= says: min_workers is
  // TorchServe's default_workers_per_model (0: one per interpreter, as
  // TorchServe's default is one per core), response_timeout its
  // default_response_timeout.
  TorchServeModelSettings torchserve_defaults;
  // By model name: what config.properties' models= and model_snapshot give a
  // TorchServe model (workers, batching), over torchserve_defaults.
  std::map<std::string, TorchServeModelSettings> torchserve_model_settings;
  // TorchServe's service_envelope ("json", "body", "kserve", "kservev2"): the
  // envelope every TorchServe model's handler runs in, over its archive's
  // ("": the archive's).
  std::string torchserve_service_envelope;
  // Triton's --exit-on-error: Start fails ("failed to load all models") when
  // a model of the repository fails to load at start (false: the others serve).
  bool exit_on_error = false;
  // Set by chorus-server's supervisor (metrics): serving processes that died
  // before this one, and how the last one ended ("signal SIGSEGV").
  int restarts = 0;
  std::string last_exit;
  // Set by the supervisor: models not loaded at start (model -> why: they
  // crashed the serving process repeatedly); an explicit load re-admits one.
  std::map<std::string, std::string> quarantined;
  // Training jobs created with a checkpoint directory are recorded here and
  // recreated, resuming from their latest checkpoint, when a server starts
  // with the same file ("" = not recorded). The supervisor provides one.
  std::string jobs_file;
  // Set by the supervisor: recorded jobs not recreated (id -> why: they were
  // running when the serving process died repeatedly).
  std::map<std::string, std::string> quarantined_jobs;
  // Serving cells (chorus-server --cells): processes of one supervisor that
  // share the ports (SO_REUSEPORT; with one cell a port in use is an error)
  // and each run their own interpreters. With more than one, cell `cell`
  // serves metrics on metrics_port + cell, training jobs are refused (a job
  // lives in one process), and repository load/unload calls are carried out
  // by every serving process through the supervisor (control_fd,
  // changes_dir; refused without them).
  int cells = 1;
  int cell = 0;
  // The supervisor keeps a spare beside the cells (--spare): as with several cells.
  bool with_spare = false;
  // Start loads every model but listens only on Listen (the warm spare).
  bool defer_listening = false;
  // ServeUntilStopped: the supervisor's commands and this process's reports
  // (cell_control.h); -1: none.
  int control_fd = -1;
  // Set by the supervisor with several serving processes: the repository
  // calls' loads and unloads since it started (ServingRun::model_changes),
  // carried out after the start-up loads; the folder of their overrides.
  std::vector<ModelChange> model_changes;
  std::string changes_dir;
};

// Interface/implementation split as leveldb's DB/DBImpl: Start returns the
// implementation (ServerImpl).
class Server {
 public:
  // Creates the interpreters, loads every model of the repository (a model
  // that fails to load is reported UNAVAILABLE; the others serve), and starts
  // serving. Errors: bad options, unusable repository, port in use, TLS files.
  static StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);

  // Shuts down if Shutdown() was not called.
  virtual ~Server() = default;

  // The gRPC and metrics ports actually bound (useful with port 0).
  virtual int port() const = 0;
  virtual int metrics_port() const = 0;
  // The HTTP/REST port bound; -1 when disabled.
  virtual int http_port() const = 0;
  // TorchServe's inference and management APIs' ports bound; -1 when disabled.
  virtual int torchserve_inference_port() const = 0;
  virtual int torchserve_management_port() const = 0;
  virtual int torchserve_metrics_port() const = 0;

  // Starts listening as cell `cell` when Start deferred it (a spare); OK and
  // nothing more if it listens already. Errors: ports not available. Any thread.
  virtual Status Listen(int cell) = 0;

  // Stops serving `model` (drained), refused with `why` until an explicit
  // load re-admits it: the supervisor's quarantine. Blocks; any thread.
  virtual void Quarantine(const std::string& model, const std::string& why) = 0;

  // With several serving processes: carries out the supervisor's change `id`
  // (a repository call's load or unload that every process carries out)
  // after the changes before it, on the background runner, and reports the
  // outcome to the supervisor (kApplied). Does not block; any thread.
  virtual void ApplyChange(int64_t id, const ModelChange& change) = 0;
  // The supervisor's answer to this process's request `id` (a repository
  // call's change, carried out by every process): the call gets `status`.
  // Any thread.
  virtual void ChangeAnswered(int64_t id, const Status& status) = 0;
  // Fails the repository calls whose answer did not come in time
  // (DEADLINE_EXCEEDED); returns when the next one's time is up
  // (time_point::max() if none waits). Any thread.
  virtual std::chrono::steady_clock::time_point ExpireChanges() = 0;

  // Stops accepting new calls (ServerReady and health turn false), waits up to
  // drain_timeout for in-flight requests to finish, then stops. Idempotent;
  // any thread.
  virtual void Shutdown() = 0;

 protected:
  Server() = default;
};

// Serves `options` until SIGTERM or SIGINT, then drains: what chorus-server's
// serving process runs. Prints the listening line to stdout once serving (a
// spare: once told to serve). Follows the commands on options.control_fd.
// Call on the main thread before any other starts (it blocks both signals for
// every thread it starts). Returns the process's exit status.
int ServeUntilStopped(const ServerOptions& options);

}  // namespace chorus

// ServeUntilStopped by a plain name, for dlsym: chorus-server loads this
// library only in its serving process, so that its supervisor never loads
// (nor pays the memory of) libtorch.
extern "C" int ChorusServeUntilStopped(const chorus::ServerOptions* options);

#endif  // CHORUS_SERVER_SERVER_H_
