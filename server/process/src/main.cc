// chorus-server: serves a model repository over the Open Inference Protocol.
//
// By default the process is a small supervisor and the serving process its
// child, restarted (with a growing pause) whenever it dies; --no-supervisor
// serves in this process, for those who run it under systemd or Kubernetes.
// The supervisor never loads libtorch (this executable does not link it):
// the serving process loads the server library when it starts, so a
// supervisor costs a few MiB, not a second copy of torch's start-up memory.
// SIGTERM or SIGINT: stop accepting, drain in-flight requests (bounded by
// --drain-timeout-ms), exit 0. A fatal signal writes a crash report to stderr
// and the serving process dies of that signal.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "chorus/common/crash_report.h"
#include "chorus/common/file_util.h"
#include "chorus/common/logging.h"
#include "chorus/server/server.h"
#include "chorus/server/supervisor.h"
#include "server/process/src/port_picker.h"
#include "server/process/src/torchserve_properties.h"

namespace {

// The shared library that serves: beside this executable's lib/ (build tree
// and installs alike), else wherever the dynamic linker finds it.
std::string ServingLibrary() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string path(self, n);
    path = path.substr(0, path.rfind('/')) + "/../lib/libchorus_server.so";
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return "libchorus_server.so";
}

// Loads the serving library (and with it libtorch) into this process and
// serves until SIGTERM or SIGINT; returns the exit status. Only the serving
// process calls it: the supervisor stays small.
int Serve(chorus::ServerOptions options, const chorus::ServingRun& run) {
  options.restarts = run.restarts;
  options.cell = run.cell;
  options.defer_listening = run.spare;
  options.control_fd = run.control_fd;
  options.last_exit = run.last_exit;
  options.quarantined = run.quarantined;
  options.quarantined_jobs = run.quarantined_jobs;
  options.model_changes = run.model_changes;
  options.changes_dir = run.changes_dir;
  // Global, as if linked: the interpreters' Python extensions bind to this libtorch.
  void* library = ::dlopen(ServingLibrary().c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    std::fprintf(stderr, "chorus-server: cannot load the server library: %s\n", ::dlerror());
    return 1;
  }
  auto* serve = reinterpret_cast<decltype(&ChorusServeUntilStopped)>(
      ::dlsym(library, "ChorusServeUntilStopped"));
  if (serve == nullptr) {
    std::fprintf(stderr, "chorus-server: %s\n", ::dlerror());
    return 1;
  }
  return serve(&options);
}

// The command line's flags, whose values go to `options` (durations in
// milliseconds, converted once parsed, and --eager-imports) and `no_supervisor`.
struct CommandLine {
  chorus::ServerOptions options;
  int64_t timeout_ms = 0, drain_ms = 30000, load_timeout_ms = 120000, idle_release_ms = 1000;
  int64_t poll_secs = 15;
  bool no_supervisor = false;
  bool eager_imports = false;
  bool spare = false;
  // Triton's flags, mapped onto the above (AddTritonOptions).
  bool strict_model_config = false, disable_auto_complete = false;
  bool allow_http = true, allow_metrics = true;
  int log_verbose = 0;
  int64_t exit_timeout_secs = -1;
  std::string backend_directory;
  std::vector<std::string> backend_configs;
  // TorchServe's (AddTorchServeOptions).
  bool torchserve_shape = false;
  std::string ts_config;

  void AddServingOptions(CLI::App& app);
  void AddLimitsAndSecurityOptions(CLI::App& app);
  void AddTritonOptions(CLI::App& app);
  void AddTorchServeOptions(CLI::App& app);
  chorus::Status ApplyTorchServe(const CLI::App& app);
  void Finish() {
    options.request_timeout = std::chrono::milliseconds(timeout_ms);
    if (exit_timeout_secs >= 0) drain_ms = exit_timeout_secs * 1000;
    options.drain_timeout = std::chrono::milliseconds(drain_ms);
    options.model_load_timeout = std::chrono::milliseconds(load_timeout_ms);
    options.idle_memory_release = std::chrono::milliseconds(idle_release_ms);
    options.defer_imports = !eager_imports;
    options.repository_poll = std::chrono::seconds(std::max<int64_t>(1, poll_secs));
    options.auto_complete_config = !strict_model_config && !disable_auto_complete;
    if (!allow_http) options.http_port = -1;
    if (!allow_metrics) options.metrics_port = -1;
    // Read where the logger is made, in this process and the serving one.
    if (log_verbose > 0) ::setenv("CHORUS_LOG_LEVEL", "debug", 1);
  }
};

// Whether --backend-config `setting` ("<backend>,<name>=<value>") may be
// accepted and ignored: a Python backend setting of its stub processes and
// their shared memory, which chorus' in-process models do not have. Any
// other would be a promise not kept.
bool HarmlessBackendConfig(const std::string& setting) {
  static const char* const kStubSettings[] = {"shm-default-byte-size", "shm-growth-byte-size",
                                              "shm-region-prefix-name", "shm-message-queue-size",
                                              "stub-timeout-seconds"};
  const size_t comma = setting.find(',');
  const size_t equals = setting.find('=');
  if (comma == std::string::npos || equals == std::string::npos || equals < comma) return false;
  if (setting.substr(0, comma) != "python") return false;
  const std::string name = setting.substr(comma + 1, equals - comma - 1);
  return std::any_of(std::begin(kStubSettings), std::end(kStubSettings),
                     [&](const char* stub) { return name == stub; });
}

void CommandLine::AddTritonOptions(CLI::App& app) {
  app.add_option("--strict-model-config", strict_model_config,
                 "Triton's: true turns auto-completion of Python-backend configs off");
  app.add_flag("--disable-auto-complete-config", disable_auto_complete,
               "Triton's: a Python-backend model's auto_complete_config is not run");
  app.add_option("--model-config-name", options.model_config_name,
                 "Triton's: a model's config is <model>/configs/<name>.pbtxt where it has one");
  app.add_option("--exit-on-error", options.exit_on_error,
                 "Triton's: exit when a model fails to load at start (default false: the others "
                 "serve); true needs --no-supervisor");
  app.add_option("--log-verbose", log_verbose, "Triton's: 1 or more logs at debug level");
  app.add_option("--exit-timeout-secs", exit_timeout_secs,
                 "Triton's name for --drain-timeout-ms, in seconds");
  app.add_option("--allow-http", allow_http, "Triton's: false is --http-port -1");
  app.add_option("--allow-metrics", allow_metrics, "Triton's: false is --metrics-port -1");
  app.add_option("--backend-directory", backend_directory,
                 "Triton's: accepted and unused (the Python backend is built in)");
  app.add_option("--backend-config", backend_configs,
                 "Triton's: only the Python backend's stub and shared-memory settings, which "
                 "have no meaning here (no stub processes), are accepted, and ignored")
      ->check(CLI::Validator(
          [](std::string& setting) {
            return HarmlessBackendConfig(setting)
                       ? std::string()
                       : "chorus has no equivalent of --backend-config " + setting +
                             " (accepted: python,shm-*=... and python,stub-timeout-seconds=...)";
          },
          "BACKEND,SETTING=VALUE"));
}

// TorchServe's: a model store's archives and its inference API.
void CommandLine::AddTorchServeOptions(CLI::App& app) {
  app.add_option("--models", options.torchserve_models,
                 "TorchServe's: the model store entries to serve ('all', ENTRY.mar, "
                 "NAME=ENTRY); the --model-store is then a TorchServe model store")
      ->delimiter(',');
  app.add_option("--torchserve-inference-port", options.torchserve_inference_port,
                 "TorchServe's inference API (/ping, /predictions) port (0: any free port, -1: "
                 "none)");
  app.add_option("--torchserve-management-port", options.torchserve_management_port,
                 "TorchServe's management API (/models) port (0: any free port, -1: none); the "
                 "--model-store is then a TorchServe model store");
  app.add_option("--torchserve-metrics-port", options.torchserve_metrics_port,
                 "TorchServe's metrics API (/metrics, its frontend counters) port (0: any free "
                 "port, -1: none)");
  app.add_option("--torchserve-default-workers", options.torchserve_defaults.min_workers,
                 "TorchServe's default_workers_per_model: workers of a model whose archive sets "
                 "no minWorkers (0: one per interpreter)")
      ->check(CLI::Range(0, chorus::kMaxTorchServeWorkers));
  app.add_flag("--torchserve", torchserve_shape,
               "TorchServe's shape: its APIs on its ports (inference 8080, management 8081, "
               "metrics 8082) where not given otherwise");
  app.add_option("--ts-config", ts_config,
                 "TorchServe's config.properties: its addresses' ports, model_store, "
                 "load_models, enable_metrics_api and enable_model_api (other keys are named "
                 "as ignored)");
  app.add_flag("--enable-model-api", options.torchserve_model_api,
               "TorchServe's: the management API registers and unregisters models");
  // TorchServe's launcher flags that chorus' behaviour already is: accepted.
  const std::string accepted = "TorchServe's, accepted: chorus behaves so already";
  for (const char* flag :
       {"--start", "--foreground", "--ncs,--no-config-snapshots", "--disable-token-auth"}) {
    app.add_flag(flag, accepted);
  }
}

// TorchServe's shape and config.properties applied to `options`, where the
// command line did not set them. Errors: the file's.
chorus::Status CommandLine::ApplyTorchServe(const CLI::App& app) {
  std::vector<std::string> given;
  for (const char* flag :
       {"model-repository", "models", "torchserve-inference-port", "torchserve-management-port",
        "torchserve-metrics-port", "enable-model-api", "torchserve-default-workers"}) {
    if (app.count(std::string("--") + flag) > 0) given.push_back(flag);
  }
  std::map<std::string, std::string> properties;
  if (!ts_config.empty()) {
    CHORUS_ASSIGN_OR_RETURN(std::string text, chorus::ReadFile(ts_config));
    CHORUS_ASSIGN_OR_RETURN(properties, chorus::ParseProperties(text));
  }
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
  properties = chorus::WithEnvironment(std::move(properties), environment);
  if (!properties.empty()) {
    const std::string source = ts_config.empty() ? "TorchServe's TS_ variables" : ts_config;
    chorus::StatusOr<std::vector<std::string>> ignored =
        chorus::ApplyTorchServeProperties(properties, given, &options);
    if (!ignored.ok()) return ignored.status().Annotate(source);
    if (!ignored->empty()) {
      chorus::Log().info("{}: keys chorus does not use, ignored: {}", source,
                         fmt::join(*ignored, ", "));
    }
  }
  if (torchserve_shape) {
    for (const auto& [flag, port, fallback] :
         {std::tuple{"torchserve-inference-port", &options.torchserve_inference_port, 8080},
          {"torchserve-management-port", &options.torchserve_management_port, 8081},
          {"torchserve-metrics-port", &options.torchserve_metrics_port, 8082}}) {
      const bool set = std::find(given.begin(), given.end(), flag) != given.end();
      if (!set && *port == -1) *port = fallback;
    }
  }
  if (options.model_repository.empty()) {
    return chorus::InvalidArgumentError(
        "--model-repository (or --model-store, or model_store in --ts-config) is required");
  }
  return chorus::OkStatus();
}

void CommandLine::AddServingOptions(CLI::App& app) {
  // Triton's names (--model-store, --grpc-port) are accepted too.
  app.add_option("--model-repository,--model-store", options.model_repository,
                 "directory of <model>/<version>/<archive>.pt (required; or TorchServe's model "
                 "store)");
  app.add_option("--interpreters", options.interpreters, "Python interpreters (0: one per core)");
  app.add_option("--host", options.host, "address to listen on");
  app.add_option("--port,--grpc-port", options.port, "gRPC port (0: any free port)");
  app.add_option("--http-port", options.http_port,
                 "KServe v2 HTTP/REST port (0: any free port, -1: none)");
  app.add_option("--metrics-port", options.metrics_port,
                 "HTTP port for Prometheus /metrics (0: any free port, -1: off)");
  app.add_option("--cache-dir", options.cache_dir, "library cache for the interpreters");
  using Control = chorus::ServerOptions::ModelControl;
  app.add_option("--model-control-mode", options.model_control,
                 "none: serve every model, refuse repository load/unload calls; explicit: serve "
                 "the --load-model ones, load/unload on request; poll: serve every model and "
                 "follow the repository's changes (default: every model, load/unload on request)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Control>{
              {"none", Control::kNone}, {"explicit", Control::kExplicit}, {"poll", Control::kPoll}},
          CLI::ignore_case));
  app.add_option(
      "--load-model", options.load_models,
      "with --model-control-mode explicit: a model to serve at start (repeat; '*': all)");
  app.add_option("--repository-poll-secs", poll_secs,
                 "with --model-control-mode poll: seconds between reads of the repository");
  app.add_flag(
      "--eager-imports", eager_imports,
      "import all of torch in every interpreter at start, as `import torch` does, instead of "
      "importing the parts a serving interpreter rarely uses (torch._dynamo, "
      "torch.distributions, torch.utils.data...) on their first use");
  app.add_option("--cache-size-bytes", options.cache_size_bytes,
                 "the response cache's size; models opt in with config.json's "
                 "\"response_cache\": {\"enable\": true} (0: no cache)");
  app.add_option("--strict-readiness", options.strict_readiness,
                 "ready only while every repository model serves (true, Triton's default) or "
                 "whenever serving (false)");
  app.add_option("--jobs-file", options.jobs_file,
                 "record training jobs that have a checkpoint_dir here; a server started with "
                 "it recreates them from their latest checkpoints (default under the "
                 "supervisor: a private file, so that restarts resume them)");
  app.add_flag("--no-supervisor", no_supervisor,
               "serve in this process; nothing restarts it if it dies (for systemd, Kubernetes)");
  app.add_option("--cells", options.cells,
                 "serving processes sharing the ports, each with its own interpreters: a crash "
                 "takes one down while the others answer (with more than one: metrics of cell i "
                 "on --metrics-port + i; repository load/unload calls carried out by every "
                 "serving process; training jobs refused)")
      ->check(CLI::Range(1, 64))
      ->excludes("--no-supervisor");
  app.add_flag("--spare", spare,
               "keep one more serving process with every model loaded, ready to take the place "
               "of one that dies at once (repository load/unload calls carried out by it too; "
               "training jobs refused, as with several cells)")
      ->excludes("--no-supervisor");
}

void CommandLine::AddLimitsAndSecurityOptions(CLI::App& app) {
  app.add_option("--max-message-bytes", options.max_message_bytes, "largest request or response");
  app.add_option("--max-queue", options.max_queue, "queued requests per model before UNAVAILABLE");
  app.add_option("--request-timeout-ms", timeout_ms, "server-side limit per request (0: none)");
  app.add_option("--drain-timeout-ms", drain_ms, "how long shutdown waits for in-flight requests");
  app.add_option("--model-load-timeout-ms", load_timeout_ms,
                 "how long making a model in one interpreter (its code, unpickling) may take "
                 "before that load fails (0: no limit)");
  app.add_option("--tls-cert", options.tls_cert, "PEM certificate chain (with --tls-key)");
  app.add_option("--tls-key", options.tls_key, "PEM private key");
  app.add_option("--auth-token", options.auth_token,
                 "require 'authorization: Bearer <token>' on model calls");
  app.add_option("--memory-limit-mib", options.memory_limit_mib,
                 "limit on the serving process's private memory (mapped weights aside): a "
                 "request that would allocate past it fails with RESOURCE_EXHAUSTED (0: none)");
  app.add_option("--idle-memory-release-ms", idle_release_ms,
                 "after requests stop for this long (and once after start), return the heap "
                 "memory they freed to the system, and without a GPU the pages of the CUDA "
                 "libraries (0: never)");
  app.add_option("--trusted-keys", options.trusted_keys_dir,
                 "serve and train only archives signed (chorus-package sign) by one of the "
                 "Ed25519 public keys (*.pem) in this directory");
}

// Runs `options` under the supervisor: fixed ports (a restarted serving
// process takes the same) and a journal that lives as long as it.
int Supervised(chorus::ServerOptions options, bool spare) {
  chorus::PortPicker ports(options.host);
  if (options.port == 0) options.port = ports.Pick();
  if (options.metrics_port == 0) options.metrics_port = ports.Pick(options.cells);
  if (options.http_port == 0) options.http_port = ports.Pick();
  if (options.torchserve_inference_port == 0) options.torchserve_inference_port = ports.Pick();
  if (options.torchserve_management_port == 0) options.torchserve_management_port = ports.Pick();
  if (options.torchserve_metrics_port == 0) {
    options.torchserve_metrics_port = ports.Pick(options.cells);
  }
  chorus::ScopedTempDir private_dir;
  if (options.jobs_file.empty() && options.cells == 1 && !spare) {
    chorus::StatusOr<chorus::ScopedTempDir> made = chorus::ScopedTempDir::Create("chorus-server-");
    if (made.ok()) {
      private_dir = std::move(*made);
      options.jobs_file = private_dir.path() + "/jobs.json";
    } else {
      chorus::Log().warn("training jobs will not be resumed after a crash: {}",
                         made.status().ToString());
    }
  }
  std::fflush(nullptr);  // nothing buffered may be written twice by the children
  chorus::SupervisorOptions supervision;
  supervision.cells = options.cells;
  supervision.spare = spare;
  if (options.cells > 1 || spare) {
    // Loaded once, shared by every serving process: libtorch's relocations
    // and static initialisation are ~190 MiB a process would write alone.
    supervision.preload = [] { ::dlopen(ServingLibrary().c_str(), RTLD_NOW | RTLD_GLOBAL); };
  }
  return chorus::Supervise(supervision,
                           [&](const chorus::ServingRun& run) { return Serve(options, run); });
}

}  // namespace

int main(int argc, char** argv) {
  // A model that crashes the process leaves a report (model, request,
  // interpreter, Python stack) on stderr, the server's log.
  chorus::InstallCrashHandler("chorus-server");
  CLI::App app{"chorus-server: serve PyTorch models packaged with chorus-package"};
  CommandLine command_line;
  command_line.AddServingOptions(app);
  command_line.AddLimitsAndSecurityOptions(app);
  command_line.AddTritonOptions(app);
  command_line.AddTorchServeOptions(app);
  CLI11_PARSE(app, argc, argv);
  command_line.Finish();
  if (chorus::Status applied = command_line.ApplyTorchServe(app); !applied.ok()) {
    std::fprintf(stderr, "chorus-server: %s\n", std::string(applied.message()).c_str());
    return 2;
  }
  if (command_line.options.exit_on_error && !command_line.no_supervisor) {
    std::fprintf(stderr,
                 "chorus-server: --exit-on-error true needs --no-supervisor (the supervisor "
                 "would start the serving process again)\n");
    return 2;
  }
  if ((command_line.options.cells > 1 || command_line.spare) &&
      !command_line.options.jobs_file.empty()) {
    std::fprintf(stderr,
                 "chorus-server: --jobs-file needs one serving process: no --cells "
                 "above 1, no --spare (training jobs are refused with them)\n");
    return 2;
  }
  if ((command_line.options.cells > 1 || command_line.spare) &&
      command_line.options.torchserve_management_port >= 0) {
    std::fprintf(stderr,
                 "chorus-server: --torchserve-management-port needs one serving process: no "
                 "--cells above 1, no --spare (each would register models alone)\n");
    return 2;
  }
  command_line.options.with_spare = command_line.spare;
  if (command_line.no_supervisor) return Serve(command_line.options, chorus::ServingRun{});
  return Supervised(std::move(command_line.options), command_line.spare);
}
