// server/frontends/torchserve/: TorchServe 0.12's inference API over chorus'
// inference core, for clients of TorchServe unchanged: /ping, and
// /predictions/{model}[/{version}] and /explanations/... with raw, JSON,
// url-encoded and multipart bodies; KServe's /v1/models/{model}:predict and
// :explain, /v2/models/{model}/infer and /explain, as predictions and
// explanations of the body as it is (TorchServe's KServe runtime forwards
// them so; its service_envelope reads and writes KServe's JSON). A request becomes the tensors of a
// TorchServe model's signature (chorus/server/torchserve/torchserve_model.h):
// its headers and its inputs (the raw body as "body", or one per form field,
// the last of a repeated name) with their content types; the handler's answer
// comes back with its status, headers and body, and a failed batch as
// TorchServe's error JSON ({"code", "type", "message"}), as are chorus' own
// errors (an unknown model: 404 "Model not found: <name>").
//
// Where chorus differs from TorchServe: a version in the path is a chorus
// version folder (a model store's archives serve as version 1), not the
// manifest's modelVersion; streaming responses
// (send_intermediate_predict_response), the legacy and SageMaker routes and
// the open inference protocol's (ts_open_inference_protocol) are not served.
#ifndef CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_INFERENCE_API_H_
#define CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_INFERENCE_API_H_

#include "chorus/server/frontends/http/http_endpoint.h"
#include "chorus/server/models/inference_core.h"

namespace chorus {

class TorchServeInferenceApi {
 public:
  // `core` outlives the API.
  explicit TorchServeInferenceApi(InferenceCore* core) : core_(core) {}

  // Adds the API's routes and error bodies to `endpoint` (before it serves).
  // Handlers block their pool thread while the model runs.
  void Register(HttpEndpoint* endpoint);

 private:
  // Runs `infer` (a request of the model's signature) and answers it.
  void Predict(const inference::ModelInferRequest& infer, httplib::Response& response) const;

  InferenceCore* const core_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_INFERENCE_API_H_
