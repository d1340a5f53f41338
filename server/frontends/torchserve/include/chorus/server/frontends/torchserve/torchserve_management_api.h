// TorchServe 0.12's management API over chorus' model repository: list
// (GET /models), describe (GET /models/{model}[/{version}|/all]), register
// (POST /models?url=...: a .mar of the model store or a path, with
// model_name, initial_workers, batch_size, max_batch_delay, synchronous),
// scale workers (PUT /models/{model}?min_worker=N), unregister (DELETE
// /models/{model}), KServe v1's readiness (GET /v1/models/{model}), with
// TorchServe's status codes and JSON. A registration
// links the archive into the store's repository (model_store.h) and loads it
// with initial_workers workers (0: registered, not loaded, as TorchServe
// serves nothing until workers are added); scaling loads it again with the
// new count (its requests drain from the old workers); batch_size and
// max_batch_delay override the archive's model-config.yaml.
//
// Where chorus differs from TorchServe: a registration's url is a store entry
// or a local path (no download); max_worker is min_worker (chorus does not
// scale on load); a model has one version (set-default has nothing to do);
// describe's workers carry no startTime or memoryUsage.
#ifndef CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_MANAGEMENT_API_H_
#define CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_MANAGEMENT_API_H_

#include <string>

#include "chorus/server/frontends/http/http_endpoint.h"
#include "chorus/server/models/inference_core.h"
#include "chorus/server/torchserve/model_store.h"

namespace chorus {

class TorchServeManagementApi {
 public:
  // Both outlive the API. Without `model_api`, registering and unregistering
  // are refused (400 "Model API disabled"), as TorchServe 0.12 refuses them
  // without --enable-model-api.
  TorchServeManagementApi(InferenceCore* core, TorchServeModelStore* store, bool model_api)
      : core_(core), store_(store), model_api_(model_api) {}

  // Adds the API's routes and error bodies to `endpoint` (before it serves).
  // Handlers block their pool thread while a model loads.
  void Register(HttpEndpoint* endpoint);

 private:
  void List(const httplib::Request& request, httplib::Response& response) const;
  void Describe(const std::string& model, httplib::Response& response) const;
  // GET /v1/models/{model}: {"name", "ready"} (KServe v1's readiness).
  void KServeReadiness(const std::string& model, httplib::Response& response) const;
  void RegisterModel(const httplib::Request& request, httplib::Response& response) const;
  void Scale(const std::string& model, const httplib::Request& request,
             httplib::Response& response) const;
  void Unregister(const std::string& model, httplib::Response& response) const;
  // Loads `model` with `workers` workers (and batching, when given).
  Status LoadWith(const std::string& model, int workers, int batch_size,
                  int max_batch_delay_ms) const;

  InferenceCore* const core_;
  TorchServeModelStore* const store_;
  const bool model_api_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_TORCHSERVE_TORCHSERVE_MANAGEMENT_API_H_
