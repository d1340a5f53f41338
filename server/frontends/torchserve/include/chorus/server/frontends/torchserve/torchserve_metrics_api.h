// TorchServe 0.12's metrics API over chorus' model statistics: GET /metrics
// (optionally ?name[]=...) in Prometheus' text format, with TorchServe's
// frontend counters per model (its "legacy" metrics mode):
// ts_inference_requests_total (requests answered), and
// ts_inference_latency_microseconds and ts_queue_latency_microseconds (their
// cumulative time in the server and in the model's queue), labelled
// model_name, model_version and hostname as TorchServe labels them.
//
// Where chorus differs from TorchServe: model_version is "default" for every
// request (TorchServe writes the version a request named, "default" when it
// named none); the handlers' own metrics and the system gauges are not there
// yet (chorus' metrics port has its own, in Triton's names).
#ifndef CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_METRICS_API_H_
#define CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_METRICS_API_H_

#include "chorus/server/frontends/http/http_endpoint.h"
#include "chorus/server/models/inference_core.h"

namespace chorus {

class TorchServeMetricsApi {
 public:
  // `core` outlives the API.
  explicit TorchServeMetricsApi(InferenceCore* core) : core_(core) {}

  // Adds GET /metrics to `endpoint` (before it serves).
  void Register(HttpEndpoint* endpoint);

 private:
  InferenceCore* const core_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_METRICS_API_H_
