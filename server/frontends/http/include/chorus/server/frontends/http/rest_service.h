// KServe v2's HTTP/REST API with Triton's extensions (binary tensor data,
// model configuration, statistics, repository, generate). Each handler is
// short: convert the body (kserve_json.h), hand it to the core
// (inference_core.h), convert back; errors are {"error": ...} with the status
// of http_status.h. cpp-httplib runs each request on a thread of its pool, so
// an infer call waits there for its answer: the pool bounds the REST
// requests in flight (kRequestThreads), beyond which connections queue.
#ifndef CHORUS_SERVER_FRONTENDS_HTTP_REST_SERVICE_H_
#define CHORUS_SERVER_FRONTENDS_HTTP_REST_SERVICE_H_

#include <httplib.h>

#include "chorus/server/frontends/http/http_endpoint.h"
#include "chorus/server/models/inference_core.h"

namespace chorus {

class RestService {
 public:
  // Requests served at once, for the endpoint it is registered on.
  static constexpr int kRequestThreads = 64;
  // Whether the answer to `path` may be compressed: infer and generate
  // answers, as Triton compresses (HttpEndpointOptions::compressible).
  static bool Compressible(const std::string& path);

  // `core` outlives the service.
  explicit RestService(InferenceCore* core) : core_(core) {}

  // Adds the /v2 routes (health, metadata, infer, generate, repository) to `endpoint`.
  void Register(HttpEndpoint* endpoint);

 private:
  // Health, server metadata, every model's statistics.
  void RegisterServerRoutes(httplib::Server* server);
  // A model's metadata, readiness, configuration and statistics.
  void RegisterModelRoutes(httplib::Server* server);
  // Infer and generate.
  void RegisterInferenceRoutes(httplib::Server* server);
  // The repository's index, loads and unloads.
  void RegisterRepositoryRoutes(httplib::Server* server);
  // Triton's system shared memory extension.
  void RegisterSharedMemoryRoutes(httplib::Server* server);
  // Triton's CUDA shared memory extension, answered as a CPU-only Triton
  // answers it: no regions (status lists none, unregistering does nothing);
  // registering is refused, saying why.
  void RegisterCudaSharedMemoryRoutes(httplib::Server* server);
  void Infer(const httplib::Request& request, httplib::Response& response);
  // Triton's generate extension: the whole text, or (`stream`) server-sent
  // events of each step's text.
  void Generate(const httplib::Request& request, httplib::Response& response, bool stream);
  void Repository(const httplib::Request& request, httplib::Response& response);

  InferenceCore* const core_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_HTTP_REST_SERVICE_H_
