// The KServe v2 HTTP/REST endpoints (with Triton's extensions: binary tensor
// data, model configuration, statistics, repository), and OpenAI's API for
// generative models (openai_service.h) on the same port. Each handler is short:
// authorize, convert the body (kserve_json.h), hand it to the core
// (inference_core.h), convert back; errors are {"error": ...} with the status
// of http_status.h. cpp-httplib runs each request on a thread of its pool, so
// an infer call waits there for its answer: the pool bounds the REST
// requests in flight (kRestThreads), beyond which connections queue.
#ifndef CHORUS_SERVER_HTTP_SERVICE_H_
#define CHORUS_SERVER_HTTP_SERVICE_H_

#include <httplib.h>

#include <cstdint>

#include "server/src/inference_core.h"
#include "server/src/openai_service.h"
#include "server/src/service_context.h"

namespace chorus {

class HttpService {
 public:
  // Requests served at once (threads of cpp-httplib's pool).
  static constexpr int kRestThreads = 64;

  // Both outlive the service.
  HttpService(ServiceContext* context, InferenceCore* core)
      : context_(context), core_(core), openai_(core) {}

  // Adds the routes (KServe's /v2 and OpenAI's /v1) to `server`, which
  // refuses bodies over `max_body_bytes`.
  void Register(httplib::Server* server, int64_t max_body_bytes);

 private:
  void Infer(const httplib::Request& request, httplib::Response& response);
  // Triton's generate extension: the whole text, or (`stream`) server-sent
  // events of each step's text.
  void Generate(const httplib::Request& request, httplib::Response& response, bool stream);
  void Repository(const httplib::Request& request, httplib::Response& response);

  ServiceContext* const context_;
  InferenceCore* const core_;
  OpenAiService openai_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_HTTP_SERVICE_H_
