// chorus-server: serves a model repository over the Open Inference Protocol.
// SIGTERM or SIGINT: stop accepting, drain in-flight requests (bounded by
// --drain-timeout-ms), exit 0. A fatal signal writes a crash report to stderr
// and the process dies of that signal.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "chorus/common/crash_report.h"
#include "chorus/common/logging.h"
#include "chorus/server/server.h"

int main(int argc, char** argv) {
  // A model that crashes the process leaves a report (model, request,
  // interpreter, Python stack) on stderr, the server's log.
  chorus::InstallCrashHandler("chorus-server");
  chorus::ServerOptions options;
  CLI::App app{"chorus-server: serve PyTorch models packaged with chorus-package"};
  int64_t timeout_ms = 0, drain_ms = 30000;
  app.add_option("--model-repository", options.model_repository,
                 "directory of <model>/<version>/<archive>.pt")
      ->required();
  app.add_option("--interpreters", options.interpreters, "Python interpreters (0: one per core)");
  app.add_option("--host", options.host, "address to listen on");
  app.add_option("--port", options.port, "gRPC port (0: any free port)");
  app.add_option("--metrics-port", options.metrics_port,
                 "HTTP port for Prometheus /metrics (0: any free port, -1: off)");
  app.add_option("--max-message-bytes", options.max_message_bytes, "largest request or response");
  app.add_option("--max-queue", options.max_queue, "queued requests per model before UNAVAILABLE");
  app.add_option("--request-timeout-ms", timeout_ms, "server-side limit per request (0: none)");
  app.add_option("--drain-timeout-ms", drain_ms, "how long shutdown waits for in-flight requests");
  app.add_option("--tls-cert", options.tls_cert, "PEM certificate chain (with --tls-key)");
  app.add_option("--tls-key", options.tls_key, "PEM private key");
  app.add_option("--auth-token", options.auth_token,
                 "require 'authorization: Bearer <token>' on model calls");
  app.add_option("--cache-dir", options.cache_dir, "library cache for the interpreters");
  CLI11_PARSE(app, argc, argv);
  options.request_timeout = std::chrono::milliseconds(timeout_ms);
  options.drain_timeout = std::chrono::milliseconds(drain_ms);

  // Signals are taken synchronously by this thread; every thread started
  // from here on inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = chorus::Server::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "chorus-server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("chorus-server listening on port %d (metrics %d)\n", (*server)->port(),
              (*server)->metrics_port());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  chorus::Log().info("received signal {}: draining", signal);
  (*server)->Shutdown();
  return 0;
}
