// OpenAI's API on the HTTP port: /v1/models, /v1/completions and
// /v1/chat/completions, whole or streamed as server-sent events, over the
// generation engines of the server's generative models (inference_core.h's
// GenerateText). Each handler parses (openai_api.h), hands the request to the
// core and renders what the engines give. A stream is cancelled, its cache
// freed, when the client goes away (a write fails; an idle stream is probed
// with a keep-alive comment every second).
#ifndef CHORUS_SERVER_OPENAI_SERVICE_H_
#define CHORUS_SERVER_OPENAI_SERVICE_H_

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "server/src/inference_core.h"
#include "server/src/openai_api.h"

namespace chorus {

class OpenAiService {
 public:
  // `core` outlives the service.
  explicit OpenAiService(InferenceCore* core);

  // Adds the /v1 routes to `server` (whose pre-routing handler authorizes).
  void Register(httplib::Server* server);

 private:
  void ListModels(httplib::Response& response) const;
  void Generate(const httplib::Request& http_request, httplib::Response& http_response,
                OpenAiEndpoint endpoint);
  std::string NewId(OpenAiEndpoint endpoint);

  InferenceCore* const core_;
  const int64_t started_;     // Unix time, the models' "created"
  const uint64_t id_prefix_;  // random, so ids differ across restarts
  std::atomic<uint64_t> next_id_{0};
};

// Whether `path` is one of OpenAI's (its errors are rendered OpenAI's way).
inline bool IsOpenAiPath(const std::string& path) { return path.rfind("/v1/", 0) == 0; }

}  // namespace chorus

#endif  // CHORUS_SERVER_OPENAI_SERVICE_H_
