// server/frontends/openai/: OpenAI's API (openai_api.h parses and renders it;
// this header serves it on the HTTP endpoint).
//
// OpenAI's API on the HTTP port: /v1/models, /v1/completions and
// /v1/chat/completions, whole or streamed as server-sent events, over the
// generation engines of the server's generative models (inference_core.h's
// GenerateText); /v1/embeddings over models whose signature is text in and
// an "embedding" out, one infer request through the scheduler (batched with
// others). Each handler parses (openai_api.h), hands the request to the
// core and renders what the engines give. A stream is cancelled, its cache
// freed, when the client goes away (a write fails; an idle stream is probed
// with a keep-alive comment every second).
#ifndef CHORUS_SERVER_FRONTENDS_OPENAI_OPENAI_SERVICE_H_
#define CHORUS_SERVER_FRONTENDS_OPENAI_OPENAI_SERVICE_H_

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "chorus/server/frontends/http/http_endpoint.h"
#include "chorus/server/frontends/openai/openai_api.h"
#include "chorus/server/models/inference_core.h"

namespace chorus {

class OpenAiService {
 public:
  // `core` outlives the service.
  explicit OpenAiService(InferenceCore* core);

  // Adds the /v1 routes to `endpoint`, whose errors under /v1/ then take
  // OpenAI's shape.
  void Register(HttpEndpoint* endpoint);

 private:
  void ListModels(httplib::Response& response) const;
  void Generate(const httplib::Request& http_request, httplib::Response& http_response,
                OpenAiEndpoint endpoint);
  // Blocks its HTTP thread until the embedding model's batch ran (as REST's
  // infer does).
  void Embed(const httplib::Request& http_request, httplib::Response& http_response);
  std::string NewId(OpenAiEndpoint endpoint);

  InferenceCore* const core_;
  const int64_t started_;     // Unix time, the models' "created"
  const uint64_t id_prefix_;  // random, so ids differ across restarts
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_OPENAI_OPENAI_SERVICE_H_
