#include "chorus/server/frontends/torchserve/torchserve_management_api.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "chorus/common/logging.h"
#include "chorus/common/numbers.h"
#include "chorus/server/config/torchserve_model_settings.h"
#include "chorus/server/frontends/http/completion.h"
#include "server/frontends/torchserve/src/torchserve_json.h"

namespace chorus {
namespace {

using nlohmann::ordered_json;
using torchserve_json::kJson;
using torchserve_json::Pretty;
using torchserve_json::ReplyError;
using torchserve_json::ReplyStatus;

constexpr char kModel[] = R"(/models/([^/]+))";
// model, then a version or "all": one version is all chorus has.
constexpr char kModelVersion[] = R"(/models/([^/]+)/([^/]+))";
// KServe v1's model readiness, which TorchServe's management API answers.
constexpr char kKServeModel[] = R"(/v1/models/([^/:]+))";

// Query parameter `name` as an integer in [0, `most`]; `fallback` when absent.
StatusOr<int> IntParam(const httplib::Request& request, const std::string& name, int fallback,
                       int most = std::numeric_limits<int>::max()) {
  if (!request.has_param(name)) return fallback;
  const std::string text = request.get_param_value(name);
  const std::optional<int64_t> value = ParseNonNegativeInt64(text);
  if (!value || *value > most) return InvalidArgumentError("Invalid " + name + ": " + text);
  return static_cast<int>(*value);
}

bool BoolParam(const httplib::Request& request, const std::string& name, bool fallback) {
  if (!request.has_param(name)) return fallback;
  std::string text = request.get_param_value(name);
  std::transform(text.begin(), text.end(), text.begin(), ::tolower);
  return text == "true";
}

// `request` with the members of its JSON body (Content-Type application/json)
// as parameters where its query lacks them: TorchServe's register takes its
// parameters either way. INVALID_ARGUMENT for a body that is not a JSON object.
StatusOr<httplib::Request> WithJsonParams(const httplib::Request& request) {
  const std::string type = request.get_header_value("Content-Type");
  if (type.rfind("application/json", 0) != 0 || request.body.empty()) return request;
  const nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return InvalidArgumentError("Invalid request body: not a JSON object");
  }
  httplib::Request with_body = request;
  for (const auto& [name, value] : body.items()) {
    if (with_body.has_param(name)) continue;
    with_body.params.emplace(name, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return with_body;
}

// A load's config in Triton's JSON form (ModelOverride): `workers`
// instances, and batching when `batch_size` > 0 (else the archive's
// model-config.yaml says).
std::string LoadConfig(int workers, int batch_size, int max_batch_delay_ms) {
  nlohmann::json config = {{"instance_group", {{{"count", workers}, {"kind", "KIND_CPU"}}}}};
  if (batch_size > 0) {
    config["max_batch_size"] = batch_size;
    config["dynamic_batching"] = {
        {"max_queue_delay_microseconds", static_cast<int64_t>(max_batch_delay_ms) * 1000}};
  }
  return config.dump();
}

// Describe's entry for a model, from its Triton config (what chorus serves).
ordered_json Description(const TorchServeStoreEntry& entry,
                         const std::optional<inference::ModelConfig>& config) {
  int workers = 0;
  if (config) {
    for (const auto& group : config->instance_group()) workers += std::max(1, group.count());
  }
  ordered_json described = {
      {"modelName", entry.model_name},
      {"modelVersion", entry.model_version},
      {"modelUrl", entry.url},
      {"runtime", "python"},
      {"minWorkers", workers},
      {"maxWorkers", workers},
      {"batchSize", config ? std::max(1, config->max_batch_size()) : 1},
      {"maxBatchDelay", config && config->has_dynamic_batching()
                            ? config->dynamic_batching().max_queue_delay_microseconds() / 1000
                            : 100},
      {"loadedAtStartup", entry.loaded_at_startup}};
  ordered_json list = ordered_json::array();
  for (int i = 0; i < workers; ++i) {
    list.push_back({{"id", std::to_string(9000 + i)},
                    {"status", "READY"},
                    {"pid", static_cast<int64_t>(::getpid())},
                    {"gpu", false}});
  }
  described["workers"] = std::move(list);
  return described;
}

// TorchServe's answer to a registration or unregistration while its model
// API is off (its ModelException, a bad request).
void ReplyModelApiDisabled(httplib::Response& response) {
  response.status = 400;
  response.set_content(torchserve_json::ErrorBody(400, "ModelException", "Model API disabled"),
                       kJson);
}

}  // namespace

void TorchServeManagementApi::Register(HttpEndpoint* endpoint) {
  httplib::Server* server = &endpoint->routes();
  endpoint->SetErrorBody("/", [](const std::string& message, int code) {
    return torchserve_json::ErrorBody(code, torchserve_json::ErrorType(code), message);
  });
  server->Get("/models", [this](const httplib::Request& request, httplib::Response& response) {
    List(request, response);
  });
  server->Post("/models", [this](const httplib::Request& request, httplib::Response& response) {
    StatusOr<httplib::Request> with_body = WithJsonParams(request);
    if (!with_body.ok()) return ReplyError(with_body.status(), response);
    RegisterModel(*with_body, response);
  });
  server->Get(kModel, [this](const httplib::Request& request, httplib::Response& response) {
    Describe(request.matches[1], response);
  });
  server->Get(kModelVersion, [this](const httplib::Request& request, httplib::Response& response) {
    Describe(request.matches[1], response);
  });
  server->Get(kKServeModel, [this](const httplib::Request& request, httplib::Response& response) {
    KServeReadiness(request.matches[1], response);
  });
  server->Put(kModel, [this](const httplib::Request& request, httplib::Response& response) {
    Scale(request.matches[1], request, response);
  });
  server->Delete(kModel, [this](const httplib::Request& request, httplib::Response& response) {
    Unregister(request.matches[1], response);
  });
}

void TorchServeManagementApi::List(const httplib::Request& request,
                                   httplib::Response& response) const {
  StatusOr<int> limit = IntParam(request, "limit", 100);
  StatusOr<int> start = IntParam(request, "next_page_token", 0);
  if (!limit.ok() || !start.ok())
    return ReplyError(limit.ok() ? start.status() : limit.status(), response);
  const std::vector<TorchServeStoreEntry> entries = store_->Entries();
  ordered_json models = ordered_json::array();
  const int end = std::min<int>(entries.size(), *start + *limit);
  for (int i = *start; i < end; ++i) {
    models.push_back({{"modelName", entries[i].model_name}, {"modelUrl", entries[i].url}});
  }
  ordered_json answer;
  if (end < static_cast<int>(entries.size())) answer["nextPageToken"] = std::to_string(end);
  answer["models"] = std::move(models);
  response.set_content(Pretty(answer), kJson);
}

void TorchServeManagementApi::KServeReadiness(const std::string& model,
                                              httplib::Response& response) const {
  if (Status found = store_->Find(model).status(); !found.ok()) return ReplyError(found, response);
  const bool serving = core_->ModelReady(model, "");
  response.set_content(Pretty(ordered_json{{"name", model}, {"ready", serving}}), kJson);
}

void TorchServeManagementApi::Describe(const std::string& model,
                                       httplib::Response& response) const {
  StatusOr<TorchServeStoreEntry> entry = store_->Find(model);
  if (!entry.ok()) return ReplyError(entry.status(), response);
  inference::ModelConfigResponse served;
  std::optional<inference::ModelConfig> config;
  if (core_->ModelConfig(model, "", &served).ok()) config = served.config();
  response.set_content(Pretty(ordered_json::array({Description(*entry, config)})), kJson);
}

Status TorchServeManagementApi::LoadWith(const std::string& model, int workers, int batch_size,
                                         int max_batch_delay_ms) const {
  Completion completion;
  core_->LoadModel(model, completion.Callback(),
                   ModelOverride{LoadConfig(workers, batch_size, max_batch_delay_ms), {}});
  return completion.Wait();
}

void TorchServeManagementApi::RegisterModel(const httplib::Request& request,
                                            httplib::Response& response) const {
  if (!model_api_) return ReplyModelApiDisabled(response);
  const std::string url = request.get_param_value("url");
  if (url.empty()) return ReplyError(InvalidArgumentError("Parameter url is required."), response);
  StatusOr<int> workers = IntParam(request, "initial_workers", 0, kMaxTorchServeWorkers);
  // Not given: the archive's model-config.yaml (else TorchServe's 1 and 100 ms).
  StatusOr<int> batch_size = IntParam(request, "batch_size", 0);
  StatusOr<int> delay = IntParam(request, "max_batch_delay", 100);
  for (const auto* value : {&workers, &batch_size, &delay}) {
    if (!value->ok()) return ReplyError(value->status(), response);
  }
  StatusOr<TorchServeStoreEntry> entry =
      store_->Register(url, request.get_param_value("model_name"));
  if (!entry.ok()) return ReplyError(entry.status(), response);
  const std::string registered = "Model \"" + entry->model_name +
                                 "\" Version: " + entry->model_version + " registered with " +
                                 std::to_string(*workers) + " initial workers";
  if (*workers == 0) {
    return ReplyStatus(registered + ". Use scale workers API to add workers for the model.",
                       response);
  }
  if (Status loaded = LoadWith(entry->model_name, *workers, *batch_size, *delay); !loaded.ok()) {
    store_->Unregister(entry->model_name).IgnoreError();
    return ReplyError(loaded, response);
  }
  ReplyStatus(registered, response);
}

void TorchServeManagementApi::Scale(const std::string& model, const httplib::Request& request,
                                    httplib::Response& response) const {
  if (Status found = store_->Find(model).status(); !found.ok()) return ReplyError(found, response);
  StatusOr<int> workers = IntParam(request, "min_worker", 1, kMaxTorchServeWorkers);
  if (!workers.ok()) return ReplyError(workers.status(), response);
  // The batching the model serves with now stays.
  inference::ModelConfigResponse served;
  int batch_size = 0, delay_ms = 0;
  if (core_->ModelConfig(model, "", &served).ok() && served.config().max_batch_size() > 0) {
    batch_size = served.config().max_batch_size();
    delay_ms =
        static_cast<int>(served.config().dynamic_batching().max_queue_delay_microseconds() / 1000);
  }
  if (!BoolParam(request, "synchronous", false)) {
    // TorchServe's default: answered at once, the workers change in the background.
    auto logged = [model](Status status) {
      if (!status.ok()) Log().error("scaling model {}: {}", model, status.ToString());
    };
    if (*workers == 0) {
      core_->UnloadModel(model, logged);
    } else {
      core_->LoadModel(model, logged,
                       ModelOverride{LoadConfig(*workers, batch_size, delay_ms), {}});
    }
    return ReplyStatus("Processing worker updates...", response, 202);
  }
  Status scaled = OkStatus();
  if (*workers == 0) {
    Completion completion;
    core_->UnloadModel(model, completion.Callback());
    scaled = completion.Wait();
  } else {
    scaled = LoadWith(model, *workers, batch_size, delay_ms);
  }
  if (!scaled.ok()) return ReplyError(scaled, response);
  ReplyStatus("Workers scaled to " + std::to_string(*workers) + " for model: " + model, response);
}

void TorchServeManagementApi::Unregister(const std::string& model,
                                         httplib::Response& response) const {
  if (!model_api_) return ReplyModelApiDisabled(response);
  if (Status found = store_->Find(model).status(); !found.ok()) return ReplyError(found, response);
  Completion completion;
  core_->UnloadModel(model, completion.Callback());
  Status unloaded = completion.Wait();
  if (unloaded.ok()) unloaded = store_->Unregister(model);
  if (!unloaded.ok()) return ReplyError(unloaded, response);
  ReplyStatus("Model \"" + model + "\" unregistered", response);
}

}  // namespace chorus
