#include <absl/synchronization/mutex.h>
#include <fmt/ranges.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "chorus/common/file_util.h"
#include "chorus/common/logging.h"
#include "chorus/common/periodic_task.h"
#include "chorus/common/process_stats.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/gpu_host.h"
#include "chorus/server/frontends/grpc/inference_service.h"
#include "chorus/server/frontends/http/http_endpoint.h"
#include "chorus/server/frontends/http/rest_service.h"
#include "chorus/server/frontends/openai/openai_service.h"
#include "chorus/server/frontends/torchserve/torchserve_inference_api.h"
#include "chorus/server/frontends/torchserve/torchserve_management_api.h"
#include "chorus/server/frontends/torchserve/torchserve_metrics_api.h"
#include "chorus/server/models/inference_core.h"
#include "chorus/server/models/model_metrics.h"
#include "chorus/server/rpc/authorizer.h"
#include "chorus/server/server.h"
#include "chorus/server/torchserve/model_store.h"
#include "chorus/server/training/job_metrics.h"
#include "chorus/server/training/training_service.h"
#include "server/process/src/process_metrics.h"
#include "server/process/src/supervisor_link.h"

namespace chorus {
namespace {

class ServerImpl final : public Server {
 public:
  ~ServerImpl() override { Shutdown(); }

  Status Initialize(const ServerOptions& options);
  int port() const override { return port_; }
  int metrics_port() const override { return metrics_ ? metrics_->port() : -1; }
  int http_port() const override { return http_ ? http_->port() : -1; }
  int torchserve_inference_port() const override {
    return torchserve_http_ ? torchserve_http_->port() : -1;
  }
  int torchserve_management_port() const override {
    if (management_shares_inference_) return torchserve_inference_port();
    return torchserve_management_http_ ? torchserve_management_http_->port() : -1;
  }
  int torchserve_metrics_port() const override {
    return torchserve_metrics_http_ ? torchserve_metrics_http_->port() : -1;
  }
  Status Listen(int cell) override;
  void Quarantine(const std::string& model, const std::string& why) override;
  void ApplyChange(int64_t id, const ModelChange& change) override;
  void ChangeAnswered(int64_t id, const Status& status) override;
  std::chrono::steady_clock::time_point ExpireChanges() override;
  void Shutdown() override;

 private:
  // The interpreters and the repository's models, loaded.
  Status StartModels(const ServerOptions& options);
  // The models to serve at start, as the model control mode says.
  Status LoadStartupModels(const ServerOptions& options);
  // The inference core over the repository, and model code's calls to it.
  void StartCore(const ServerOptions& options);
  // Why the repository calls are refused ("" when they are not).
  std::string RepositoryCallsRefused(const ServerOptions& options) const;
  // A repository call's change, handed to the supervisor for every serving
  // process (on the background runner).
  void AskEveryProcess(RepositoryChange change, std::function<void(Status)> done);
  // Carries out `change` (the supervisor's, arrived as command `arrived`;
  // 0: from the record at start) in this process. Blocks.
  Status CarryOut(const ModelChange& change, uint64_t arrived);
  // The services over the cores (not yet listening).
  void StartServices(const ServerOptions& options);
  Status StartGrpc(const ServerOptions& options);
  Status StartMetrics(const ServerOptions& options);
  Status StartHttp(const ServerOptions& options);
  // What every API endpoint takes from the options: its threads, body limit,
  // token and port sharing between cells.
  HttpEndpointOptions ApiEndpointOptions(const ServerOptions& options) const;
  Status StartTorchServeInference(const ServerOptions& options);
  Status StartTorchServeManagement(const ServerOptions& options);
  Status StartTorchServeMetrics(const ServerOptions& options);

  ServerOptions options_;
  std::unique_ptr<InterpreterManager> manager_;
  std::unique_ptr<InterpreterPlacement> placement_;
  // --models: the TorchServe model store's archives (outlives the repository).
  std::unique_ptr<TorchServeModelStore> model_store_;
  std::unique_ptr<ModelRepository> repository_;
  std::shared_ptr<const TrustedKeys> trusted_keys_;
  std::unique_ptr<BackgroundRunner> background_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<RestService> rest_;
  std::unique_ptr<OpenAiService> openai_;
  std::unique_ptr<TorchServeInferenceApi> torchserve_inference_;
  std::unique_ptr<TorchServeManagementApi> torchserve_management_;
  std::unique_ptr<TorchServeMetricsApi> torchserve_metrics_;
  std::unique_ptr<JobRegistry> jobs_;
  std::unique_ptr<JobJournal> journal_;
  std::unique_ptr<TrainingCore> training_core_;
  std::unique_ptr<TrainingService> training_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<HttpEndpoint> metrics_;
  std::unique_ptr<HttpEndpoint> http_;
  std::unique_ptr<HttpEndpoint> torchserve_http_;
  std::unique_ptr<HttpEndpoint> torchserve_management_http_;
  // TorchServe's management API on the inference API's port (KServe's runtime
  // gives both one address).
  bool management_shares_inference_ = false;
  std::unique_ptr<HttpEndpoint> torchserve_metrics_http_;
  std::unique_ptr<IdleMemoryReleaser> memory_releaser_;
  std::unique_ptr<PeriodicTask> poller_;  // --model-control-mode poll
  // Several serving processes under a supervisor: this one's half of their talk.
  std::unique_ptr<SupervisorLink> link_;
  // The start-up loads are done: repository calls go to every process from now on.
  std::atomic<bool> models_started_{false};
  Mutex listen_mu_;
  bool listening_ CHORUS_GUARDED_BY(listen_mu_) = false;
  int port_ = 0;
  std::once_flag shutdown_once_;
};

// What the repository is given of the server's options.
StatusOr<RepositoryOptions> RepositoryOptionsOf(const ServerOptions& options, int interpreters) {
  RepositoryOptions repository;
  if (!options.trusted_keys_dir.empty()) {
    CHORUS_ASSIGN_OR_RETURN(repository.trusted_keys,
                            TrustedKeys::FromDirectory(options.trusted_keys_dir));
    std::vector<std::string> ids = repository.trusted_keys->key_ids();
    Log().info("serving only archives signed by {} trusted key(s) in {}: {}", ids.size(),
               options.trusted_keys_dir, fmt::join(ids, ", "));
  }
  repository.max_queue = options.max_queue;
  repository.workers = interpreters;
  repository.drain_timeout = options.drain_timeout;
  // The run on zeros that learns a model's outputs is a request like any other.
  if (options.request_timeout.count() > 0) {
    repository.probe_timeout = std::min(repository.probe_timeout, options.request_timeout);
  }
  repository.load_timeout = options.model_load_timeout;
  repository.quarantined = options.quarantined;
  repository.auto_complete_config = options.auto_complete_config;
  repository.torchserve_defaults = options.torchserve_defaults;
  repository.torchserve_settings = options.torchserve_model_settings;
  repository.torchserve_service_envelope = options.torchserve_service_envelope;
  repository.config_name = options.model_config_name;
  return repository;
}

// The serving processes beside this one, as an operator reads it ("" when none).
std::string ServingProcesses(const ServerOptions& options) {
  if (options.cells <= 1 && !options.with_spare) return "";
  const std::string cells = "runs " + std::to_string(options.cells) + " cells";
  if (!options.with_spare) return cells;
  return options.cells > 1 ? cells + " and a spare" : "keeps a spare beside its cell";
}

// Why training jobs are refused ("" when they are not).
std::string JobsRefused(const ServerOptions& options) {
  const std::string processes = ServingProcesses(options);
  if (processes.empty()) return "";
  return "training jobs run on a server of one serving process; this one " + processes +
         " (--cells, --spare), and a job's calls could reach any";
}

Status ServerImpl::Initialize(const ServerOptions& options) {
  options_ = options;
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (options.memory_limit_mib > 0) CHORUS_RETURN_IF_ERROR(LimitDataMiB(options.memory_limit_mib));
  if (!ServingProcesses(options).empty() && options.control_fd >= 0 &&
      !options.changes_dir.empty()) {
    link_ = std::make_unique<SupervisorLink>(options.control_fd, options.changes_dir);
  }
  CHORUS_RETURN_IF_ERROR(StartModels(options));
  StartServices(options);
  if (StatusOr<double> in_use = DataMiB(); options.memory_limit_mib > 0 && in_use.ok()) {
    Log().info("memory: {:.0f} MiB of private memory in use of the {} MiB limit", *in_use,
               options.memory_limit_mib);
  }
  if (options.defer_listening) {
    Log().info("ready as the spare: {} model(s) loaded with {} interpreters, not listening",
               repository_->Loaded().size(), manager_->size());
    return OkStatus();
  }
  return Listen(options.cell);
}

Status ServerImpl::Listen(int cell) {
  MutexLock lock(&listen_mu_);
  if (listening_) return OkStatus();
  options_.cell = cell;
  if (options_.cells > 1 && options_.metrics_port > 0) options_.metrics_port += cell;
  if (options_.cells > 1 && options_.torchserve_metrics_port > 0) {
    options_.torchserve_metrics_port += cell;  // each cell's statistics are its own
  }
  CHORUS_RETURN_IF_ERROR(StartGrpc(options_));
  CHORUS_RETURN_IF_ERROR(StartHttp(options_));
  CHORUS_RETURN_IF_ERROR(StartTorchServeInference(options_));
  CHORUS_RETURN_IF_ERROR(StartTorchServeManagement(options_));
  CHORUS_RETURN_IF_ERROR(StartTorchServeMetrics(options_));
  CHORUS_RETURN_IF_ERROR(StartMetrics(options_));
  core_->SetAccepting(true);
  listening_ = true;
  Log().info(
      "serving {} model(s) with {} interpreters: gRPC on port {}, HTTP/REST on {}, "
      "metrics on {}{}",
      repository_->Loaded().size(), manager_->size(), port_, http_port(), metrics_port(),
      options_.cells > 1 ? " (cell " + std::to_string(cell) + ")" : "");
  return OkStatus();
}

void ServerImpl::Quarantine(const std::string& model, const std::string& why) {
  if (link_) link_->Quarantined(model, link_->Arrived());
  repository_->Quarantine(model, why);
}

void ServerImpl::AskEveryProcess(RepositoryChange change, std::function<void(Status)> done) {
  if (!models_started_.load()) {
    // Model code at start-up (an initialize() loading another model): every
    // process runs it and loads for itself. The supervisor would wait for
    // this very process, which reads its commands only once started.
    if (change.load) return done(repository_->Load(change.model, change.override));
    Status unloaded = repository_->Unload(change.model);
    return done(unloaded.code() == StatusCode::kNotFound ? OkStatus() : unloaded);
  }
  ModelChange asked{change.load ? ModelChange::Kind::kLoad : ModelChange::Kind::kUnload,
                    std::move(change.model), ""};
  const ChangeOverride override{std::move(change.override.config_json),
                                std::move(change.override.files)};
  const bool overridden = !override.config_json.empty() || !override.files.empty();
  link_->Request(std::move(asked), overridden ? &override : nullptr, std::move(done));
}

void ServerImpl::ApplyChange(int64_t id, const ModelChange& change) {
  if (!link_) return;
  const uint64_t arrived = link_->Arrived();
  if (!background_->Post(
          [this, id, change, arrived] { link_->Applied(id, CarryOut(change, arrived)); })) {
    link_->Applied(id, UnavailableError("the serving process is shutting down"));
  }
}

Status ServerImpl::CarryOut(const ModelChange& change, uint64_t arrived) {
  if (change.kind == ModelChange::Kind::kUnload) {
    Status unloaded = repository_->Unload(change.model);
    // Nothing of it loaded: nothing to do (Triton answers OK).
    return unloaded.code() == StatusCode::kNotFound ? OkStatus() : unloaded;
  }
  if (link_ && arrived > 0 && link_->QuarantinedSince(change.model, arrived)) {
    return UnavailableError("model " + change.model +
                            " was quarantined while its load waited for the changes before it");
  }
  StatusOr<ChangeOverride> read = link_ ? link_->OverrideOf(change) : ChangeOverride{};
  if (!read.ok()) return read.status().Annotate("the load's override");
  return repository_->Load(change.model,
                           ModelOverride{std::move(read->config_json), std::move(read->files)});
}

void ServerImpl::ChangeAnswered(int64_t id, const Status& status) {
  if (link_) link_->Answered(id, status);
}

std::chrono::steady_clock::time_point ServerImpl::ExpireChanges() {
  return link_ ? link_->Expire() : std::chrono::steady_clock::time_point::max();
}

Status ServerImpl::StartModels(const ServerOptions& options) {
  InterpreterManagerOptions interpreters;
  interpreters.num_interpreters = options.interpreters;
  interpreters.cache_dir = options.cache_dir;
  interpreters.defer_imports = options.defer_imports;
  CHORUS_ASSIGN_OR_RETURN(manager_, InterpreterManager::Create(interpreters));
  placement_ = std::make_unique<InterpreterPlacement>(manager_.get());
  CHORUS_ASSIGN_OR_RETURN(RepositoryOptions repository,
                          RepositoryOptionsOf(options, manager_->size()));
  trusted_keys_ = repository.trusted_keys;
  std::string root = options.model_repository;
  if (!options.torchserve_models.empty() || options.torchserve_management_port >= 0) {
    CHORUS_ASSIGN_OR_RETURN(model_store_, TorchServeModelStore::Open(options.model_repository,
                                                                     options.torchserve_models));
    root = model_store_->root();
  }
  repository_ = std::make_unique<ModelRepository>(root, placement_.get(), repository);
  StartCore(options);
  CHORUS_RETURN_IF_ERROR(LoadStartupModels(options));
  if (options.idle_memory_release.count() > 0) {
    // Without a GPU, the pages loading torch's CUDA libraries touched are
    // never used again (140 MiB with torch 2.14's CUDA wheels).
    MappedFileFilter page_out;
    if (!HostHasGpu()) page_out = IsGpuOnlyLibrary;
    memory_releaser_ =
        std::make_unique<IdleMemoryReleaser>(options.idle_memory_release, std::move(page_out));
  }
  NoteMemoryActivity();  // loading allocated and freed much: released once quiet
  models_started_.store(true);
  return OkStatus();
}

Status ServerImpl::LoadStartupModels(const ServerOptions& options) {
  using Control = ServerOptions::ModelControl;
  const bool some = options.model_control == Control::kExplicit &&
                    std::find(options.load_models.begin(), options.load_models.end(), "*") ==
                        options.load_models.end();
  // The repository calls' changes since the supervisor started (several
  // serving processes) decide what they name; the record's last word stands.
  auto changed = [&](const std::string& name) {
    return std::any_of(options.model_changes.begin(), options.model_changes.end(),
                       [&](const ModelChange& change) { return change.model == name; });
  };
  if (!some) CHORUS_RETURN_IF_ERROR(repository_->LoadAll());
  if (some) {
    CHORUS_RETURN_IF_ERROR(repository_->layout().CheckRoot());
    for (const std::string& name : options.load_models) {
      if (!repository_->layout().HasModel(name)) {
        return NotFoundError("--load-model " + name + ": no such model in the repository");
      }
      if (changed(name)) continue;
      if (auto quarantined = options.quarantined.find(name);
          quarantined != options.quarantined.end()) {
        // Load would re-admit it: a restart is not an explicit load.
        Log().error("model {} not loaded: {}", name, quarantined->second);
        continue;
      }
      repository_->Load(name).IgnoreError();  // logged; listed UNAVAILABLE with why
    }
  }
  for (const ModelChange& change : options.model_changes) {
    if (Status done = CarryOut(change, 0); !done.ok()) {
      Log().error(
          "the repository call's {} of model {}, which every serving process carries out: {}",
          change.kind == ModelChange::Kind::kLoad ? "load" : "unload", change.model,
          done.ToString());
    }
  }
  if (options.exit_on_error && !repository_->AllLoaded()) {
    return InternalError("failed to load all models (--exit-on-error; the log says why)");
  }
  if (options.model_control == Control::kPoll) {
    poller_ = std::make_unique<PeriodicTask>(
        options.repository_poll, [repository = repository_.get()] { repository->Poll(); });
  }
  return OkStatus();
}

void ServerImpl::StartCore(const ServerOptions& options) {
  background_ = std::make_unique<BackgroundRunner>();
  InferenceCoreOptions core;
  core.request_timeout = options.request_timeout;
  core.strict_readiness = options.strict_readiness;
  core.cache_size_bytes = options.cache_size_bytes;
  core.repository_calls_refused = RepositoryCallsRefused(options);
  if (core.repository_calls_refused.empty() && link_) {
    core.change_repository = [this](RepositoryChange change, std::function<void(Status)> done) {
      AskEveryProcess(std::move(change), std::move(done));
    };
  }
  core_ = std::make_unique<InferenceCore>(repository_.get(), background_.get(), core);
  // Model code calls served models (chorus.serving.infer, Triton's BLS) and the
  // repository (pb_utils.load_model, also from an initialize() at start-up).
  manager_->SetModelCallHandler(core_->ModelCalls());
}

std::string ServerImpl::RepositoryCallsRefused(const ServerOptions& options) const {
  using Control = ServerOptions::ModelControl;
  if (options.model_control == Control::kNone) {
    return "the server's model control mode is none: every repository model serves from the "
           "start (--model-control-mode explicit loads and unloads on request)";
  }
  if (options.model_control == Control::kPoll) {
    return "the server's model control mode is poll: it follows the repository's changes "
           "itself (--model-control-mode explicit loads and unloads on request)";
  }
  if (!ServingProcesses(options).empty() && link_ == nullptr) {
    // Started without a supervisor to carry the change to every process.
    return "the server " + ServingProcesses(options) +
           ", and a call reaches one of them, with no supervisor to carry it to the others: "
           "change the repository and let every serving process follow it "
           "(--model-control-mode poll)";
  }
  return "";
}

void ServerImpl::StartServices(const ServerOptions& options) {
  authorizer_ = std::make_unique<Authorizer>(options.auth_token);
  service_ = std::make_unique<InferenceService>(authorizer_.get(), core_.get());
  rest_ = std::make_unique<RestService>(core_.get());
  openai_ = std::make_unique<OpenAiService>(core_.get());
  torchserve_inference_ = std::make_unique<TorchServeInferenceApi>(core_.get());
  torchserve_metrics_ = std::make_unique<TorchServeMetricsApi>(core_.get());
  if (model_store_) {
    torchserve_management_ = std::make_unique<TorchServeManagementApi>(
        core_.get(), model_store_.get(), options.torchserve_model_api);
  }
  jobs_ = std::make_unique<JobRegistry>();
  journal_ = std::make_unique<JobJournal>(options.jobs_file);
  training_core_ = std::make_unique<TrainingCore>(
      TrainingCore::Context{placement_.get(), background_.get(), repository_.get(),
                            authorizer_.get(), trusted_keys_, JobsRefused(options)},
      jobs_.get(), journal_.get());
  training_ =
      std::make_unique<TrainingService>(authorizer_.get(), training_core_.get(), background_.get());
  // A journal that cannot be read must not keep the models from serving.
  if (Status resumed = training_core_->ResumeJournaledJobs(options.quarantined_jobs);
      !resumed.ok()) {
    Log().error("training jobs not resumed: {}", resumed.ToString());
  }
}

Status ServerImpl::StartGrpc(const ServerOptions& options) {
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert.empty()) {
    CHORUS_ASSIGN_OR_RETURN(std::string cert, ReadFile(options.tls_cert));
    CHORUS_ASSIGN_OR_RETURN(std::string key, ReadFile(options.tls_key));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  // Debian's abseil is built without NDEBUG, so every absl::Mutex (all of
  // gRPC's locks) checks for lock-order cycles on every acquisition: a debug
  // aid, about 2% of the server's CPU per request in a profile.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: two servers would share a port
  // silently. Only cells share one.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, options.cells > 1 ? 1 : 0);
  builder.AddListeningPort(options.host + ":" + std::to_string(options.port), credentials, &port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(service_.get());
  builder.RegisterService(training_.get());
  grpc_ = builder.BuildAndStart();
  if (grpc_ == nullptr || port_ == 0) {
    return UnavailableError("cannot listen on " + options.host + ":" +
                            std::to_string(options.port));
  }
  return OkStatus();
}

HttpEndpointOptions ServerImpl::ApiEndpointOptions(const ServerOptions& options) const {
  HttpEndpointOptions endpoint;
  endpoint.request_threads = RestService::kRequestThreads;
  endpoint.max_body_bytes = options.max_message_bytes;
  endpoint.authorizer = authorizer_.get();
  endpoint.reuse_port = options.cells > 1;
  return endpoint;
}

Status ServerImpl::StartHttp(const ServerOptions& options) {
  if (options.http_port < 0) return OkStatus();
  HttpEndpointOptions endpoint = ApiEndpointOptions(options);
  endpoint.compressible = RestService::Compressible;
  http_ = std::make_unique<HttpEndpoint>(endpoint);
  rest_->Register(http_.get());
  openai_->Register(http_.get());
  return http_->Serve(options.host, options.http_port, "HTTP/REST");
}

Status ServerImpl::StartTorchServeInference(const ServerOptions& options) {
  if (options.torchserve_inference_port < 0) return OkStatus();
  HttpEndpointOptions endpoint = ApiEndpointOptions(options);
  endpoint.open_paths = {"/ping"};  // TorchServe's health check needs no token
  torchserve_http_ = std::make_unique<HttpEndpoint>(endpoint);
  torchserve_inference_->Register(torchserve_http_.get());
  if (torchserve_management_ &&
      options.torchserve_management_port == options.torchserve_inference_port) {
    torchserve_management_->Register(torchserve_http_.get());
    management_shares_inference_ = true;
  }
  return torchserve_http_->Serve(options.host, options.torchserve_inference_port,
                                 "TorchServe's inference API");
}

Status ServerImpl::StartTorchServeManagement(const ServerOptions& options) {
  if (options.torchserve_management_port < 0 || management_shares_inference_) return OkStatus();
  HttpEndpointOptions endpoint = ApiEndpointOptions(options);
  endpoint.open_paths = {};
  torchserve_management_http_ = std::make_unique<HttpEndpoint>(endpoint);
  torchserve_management_->Register(torchserve_management_http_.get());
  return torchserve_management_http_->Serve(options.host, options.torchserve_management_port,
                                            "TorchServe's management API");
}

Status ServerImpl::StartTorchServeMetrics(const ServerOptions& options) {
  if (options.torchserve_metrics_port < 0) return OkStatus();
  // A port per cell, as chorus' metrics; no token, as TorchServe's.
  torchserve_metrics_http_ = std::make_unique<HttpEndpoint>(HttpEndpointOptions{});
  torchserve_metrics_->Register(torchserve_metrics_http_.get());
  return torchserve_metrics_http_->Serve(options.host, options.torchserve_metrics_port,
                                         "TorchServe's metrics API");
}

Status ServerImpl::StartMetrics(const ServerOptions& options) {
  if (options.metrics_port < 0) return OkStatus();
  metrics_ = std::make_unique<HttpEndpoint>(HttpEndpointOptions{});  // a port per cell
  httplib::Server* metrics = &metrics_->routes();
  const std::string restarts = RenderRestartMetrics(options.restarts, options.last_exit);
  // KServe v2's health endpoints, for probes that speak HTTP.
  metrics->Get("/v2/health/live", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("{\"live\":true}", "application/json");
  });
  metrics->Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& response) {
    const bool ready = core_->ServerReady();
    response.status = ready ? 200 : 503;
    response.set_content(ready ? "{\"ready\":true}" : "{\"ready\":false}", "application/json");
  });
  metrics->Get("/metrics", [this, restarts](const httplib::Request&, httplib::Response& response) {
    response.set_content(RenderModelMetrics(*repository_, *manager_) + RenderJobMetrics(*jobs_) +
                             restarts + RenderProcessMetrics(options_.memory_limit_mib),
                         "text/plain; version=0.0.4");
  });
  return metrics_->Serve(options.host, options.metrics_port, "metrics");
}

void ServerImpl::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    const auto drain_deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
    if (core_) core_->SetAccepting(false);
    // Their answers would come to the thread that now shuts down.
    if (link_) link_->FailAll(UnavailableError("the server is shutting down"));
    poller_.reset();  // no load starts during the drain
    if (grpc_) {
      grpc_->GetHealthCheckService()->SetServingStatus(false);
      // Stops accepting; waits for in-flight calls (their models keep running)
      // until the drain deadline, then cancels what is left.
      grpc_->Shutdown(std::chrono::system_clock::now() + options_.drain_timeout);
      grpc_->Wait();
    }
    // Answered calls may still be finishing their callbacks on the models'
    // workers: let them, within what is left of the drain time. REST calls
    // in flight are answered by the drain; then the HTTP server stops.
    if (repository_) repository_->DrainAll(drain_deadline);
    if (manager_) manager_->SetModelCallHandler(nullptr);
    // Every endpoint stops before the repository its handlers reach goes.
    for (HttpEndpoint* endpoint :
         {http_.get(), metrics_.get(), torchserve_http_.get(), torchserve_management_http_.get(),
          torchserve_metrics_http_.get()}) {
      if (endpoint != nullptr) endpoint->Stop();
    }
    // Queued job work (builds, deletions) finishes before the jobs go.
    if (training_) training_->Stop();
    if (training_core_) training_core_->Stop();
    if (background_) background_->Stop();
    jobs_.reset();
    background_.reset();
    grpc_.reset();
    repository_.reset();
    placement_.reset();
    manager_.reset();
    Log().info("server stopped");
  });
}

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  auto server = std::make_unique<ServerImpl>();
  Status started = server->Initialize(options);
  if (!started.ok() && options.memory_limit_mib > 0) {
    // Start-up itself may be what did not fit.
    return started.Annotate("with a memory limit of " + std::to_string(options.memory_limit_mib) +
                            " MiB");
  }
  CHORUS_RETURN_IF_ERROR(started);
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace chorus
