#include "chorus/server/frontends/http/rest_service.h"

#include <absl/strings/escaping.h>

#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "chorus/server/frontends/http/completion.h"
#include "chorus/server/frontends/http/generation_stream.h"
#include "chorus/server/frontends/http/http_status.h"
#include "chorus/server/frontends/http/kserve_json.h"

namespace chorus {
namespace {

constexpr char kJson[] = "application/json";
// A model, optionally with its version: /v2/models/NAME[/versions/VERSION]
#define CHORUS_MODEL_PATH R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)"

void ReplyError(httplib::Response& response, const Status& status) {
  response.status = HttpStatusCode(status.code());
  response.set_content(RenderError(status), kJson);
}

// Answers `status`'s error, or `body` when it is OK.
void Reply(httplib::Response& response, const Status& status, const std::string& body) {
  if (!status.ok()) return ReplyError(response, status);
  response.set_content(body, kJson);
}

std::string ModelName(const httplib::Request& request) { return request.matches[1].str(); }
std::string ModelVersion(const httplib::Request& request) {
  return request.matches.size() > 2 ? request.matches[2].str() : "";
}

StatusOr<std::optional<size_t>> JsonLength(const httplib::Request& request) {
  if (!request.has_header(kInferenceHeaderLength)) return std::optional<size_t>();
  const std::string value = request.get_header_value(kInferenceHeaderLength);
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
      value.size() > 18) {
    return InvalidArgumentError(std::string(kInferenceHeaderLength) +
                                " is not a byte count: " + value);
  }
  return std::optional<size_t>(std::stoull(value));
}

// A load's body: {"parameters": {"config": "<Triton's JSON config>",
// "file:<path>": "<base64 contents>"}}, each optional; no body: a plain load.
// INVALID_ARGUMENT for a body that is not that, and for any other parameter,
// which chorus would otherwise ignore.
StatusOr<ModelOverride> ParseLoadBody(const std::string& body) {
  ModelOverride override;
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return override;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& error) {
    return InvalidArgumentError(std::string("failed to parse the request JSON buffer: ") +
                                error.what());
  }
  if (!json.is_object()) return InvalidArgumentError("a load's body must be a JSON object");
  if (!json.contains("parameters")) return override;
  if (!json["parameters"].is_object()) {
    return InvalidArgumentError("a load's \"parameters\" must be a JSON object");
  }
  for (const auto& [key, value] : json["parameters"].items()) {
    const bool file = key.rfind("file:", 0) == 0;
    if (key != "config" && !file) {
      return InvalidArgumentError("load parameter '" + key +
                                  "' is not supported: a load takes 'config' and 'file:<path>'");
    }
    if (!value.is_string()) {
      return InvalidArgumentError("load parameter '" + key + "' must be a string" +
                                  (file ? " (the file's contents in base64)" : ""));
    }
    if (!file) {
      override.config_json = value.get<std::string>();
    } else if (!absl::Base64Unescape(value.get<std::string>(), &override.files[key.substr(5)])) {
      return InvalidArgumentError("load parameter '" + key + "' is not base64");
    }
  }
  return override;
}

}  // namespace

void RestService::Register(HttpEndpoint* endpoint) {
  httplib::Server* server = &endpoint->routes();
  RegisterServerRoutes(server);
  RegisterModelRoutes(server);
  RegisterInferenceRoutes(server);
  RegisterRepositoryRoutes(server);
  RegisterSharedMemoryRoutes(server);
}

void RestService::RegisterServerRoutes(httplib::Server* server) {
  server->Get("/v2/health/live", [](const httplib::Request&, httplib::Response& response) {
    response.set_content(R"({"live":true})", kJson);
  });
  server->Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& response) {
    const bool ready = core_->ServerReady();
    response.status = ready ? 200 : 503;
    response.set_content(nlohmann::json{{"ready", ready}}.dump(), kJson);
  });
  server->Get("/v2", [this](const httplib::Request&, httplib::Response& response) {
    inference::ServerMetadataResponse metadata;
    core_->ServerMetadata(&metadata);
    response.set_content(RenderServerMetadata(metadata), kJson);
  });
  server->Get("/v2/models/stats", [this](const httplib::Request&, httplib::Response& response) {
    inference::ModelStatisticsResponse statistics;
    Status status = core_->ModelStatistics("", "", &statistics);
    Reply(response, status, RenderStatistics(statistics));
  });
}

void RestService::RegisterModelRoutes(httplib::Server* server) {
  server->Get(
      CHORUS_MODEL_PATH, [this](const httplib::Request& request, httplib::Response& response) {
        inference::ModelMetadataResponse metadata;
        Status status = core_->ModelMetadata(ModelName(request), ModelVersion(request), &metadata);
        Reply(response, status, RenderModelMetadata(metadata));
      });
  server->Get(CHORUS_MODEL_PATH "/ready",
              [this](const httplib::Request& request, httplib::Response& response) {
                // A model's is_ready() may take a while: this pool thread waits for it.
                std::promise<bool> answer;
                core_->ModelReady(ModelName(request), ModelVersion(request),
                                  [&answer](bool ready) { answer.set_value(ready); });
                const bool ready = answer.get_future().get();
                response.status = ready ? 200 : 503;
                response.set_content(
                    nlohmann::json{{"name", ModelName(request)}, {"ready", ready}}.dump(), kJson);
              });
  server->Get(CHORUS_MODEL_PATH "/config", [this](const httplib::Request& request,
                                                  httplib::Response& response) {
    inference::ModelConfigResponse config;
    Status status = core_->ModelConfig(ModelName(request), ModelVersion(request), &config);
    Reply(response, status, RenderModelConfig(config));
  });
  server->Get(CHORUS_MODEL_PATH "/stats", [this](const httplib::Request& request,
                                                 httplib::Response& response) {
    inference::ModelStatisticsResponse statistics;
    Status status = core_->ModelStatistics(ModelName(request), ModelVersion(request), &statistics);
    Reply(response, status, RenderStatistics(statistics));
  });
}

void RestService::RegisterInferenceRoutes(httplib::Server* server) {
  AddPostRoute(server, CHORUS_MODEL_PATH "/infer",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Infer(request, response);
               });
  AddPostRoute(server, CHORUS_MODEL_PATH "/generate",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Generate(request, response, /*stream=*/false);
               });
  AddPostRoute(server, CHORUS_MODEL_PATH "/generate_stream",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Generate(request, response, /*stream=*/true);
               });
}

void RestService::RegisterRepositoryRoutes(httplib::Server* server) {
  AddPostRoute(server, "/v2/repository/index",
               [this](const httplib::Request& request, httplib::Response& response) {
                 const auto body = nlohmann::json::parse(request.body, nullptr, false);
                 const bool ready_only = body.is_object() && body.value("ready", false);
                 inference::RepositoryIndexResponse index;
                 core_->RepositoryIndex(ready_only, &index);
                 response.set_content(RenderRepositoryIndex(index), kJson);
               });
  AddPostRoute(server, R"(/v2/repository/models/([^/]+)/(load|unload))",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Repository(request, response);
               });
}

void RestService::RegisterSharedMemoryRoutes(httplib::Server* server) {
  auto status = [this](const std::string& name, httplib::Response& response) {
    inference::SystemSharedMemoryStatusResponse regions;
    Status found = core_->shared_memory().GetStatus(name, &regions);
    Reply(response, found, RenderSharedMemoryStatus(regions));
  };
  server->Get(
      "/v2/systemsharedmemory/status",
      [status](const httplib::Request&, httplib::Response& response) { status("", response); });
  server->Get(R"(/v2/systemsharedmemory/region/([^/]+)/status)",
              [status](const httplib::Request& request, httplib::Response& response) {
                status(request.matches[1].str(), response);
              });
  AddPostRoute(server, R"(/v2/systemsharedmemory/region/([^/]+)/register)",
               [this](const httplib::Request& request, httplib::Response& response) {
                 StatusOr<inference::SystemSharedMemoryRegisterRequest> region =
                     ParseSharedMemoryRegister(request.body, request.matches[1].str());
                 if (!region.ok()) return ReplyError(response, region.status());
                 Reply(response,
                       core_->shared_memory().Register(region->name(), region->key(),
                                                       region->offset(), region->byte_size()),
                       "{}");
               });
  AddPostRoute(server, R"(/v2/systemsharedmemory(/region/([^/]+))?/unregister)",
               [this](const httplib::Request& request, httplib::Response& response) {
                 core_->shared_memory().Unregister(request.matches[2].str());
                 Reply(response, OkStatus(), "{}");
               });
  RegisterCudaSharedMemoryRoutes(server);
}

void RestService::RegisterCudaSharedMemoryRoutes(httplib::Server* server) {
  server->Get("/v2/cudasharedmemory/status",
              [](const httplib::Request&, httplib::Response& response) {
                response.set_content("[]", kJson);
              });
  server->Get(R"(/v2/cudasharedmemory/region/([^/]+)/status)",
              [](const httplib::Request& request, httplib::Response& response) {
                ReplyError(response, NotFoundError("Unable to find cuda shared memory region: '" +
                                                   request.matches[1].str() + "'"));
              });
  AddPostRoute(server, R"(/v2/cudasharedmemory/region/([^/]+)/register)",
               [](const httplib::Request& request, httplib::Response& response) {
                 ReplyError(
                     response,
                     InvalidArgumentError(
                         "failed to register shared memory region '" + request.matches[1].str() +
                         "': chorus serves no CUDA shared memory (system shared memory "
                         "is served: /v2/systemsharedmemory/region/<name>/register)"));
               });
  // As Triton answers it: 200, no body.
  AddPostRoute(server, R"(/v2/cudasharedmemory(/region/[^/]+)?/unregister)",
               [](const httplib::Request&, httplib::Response& response) {
                 response.set_content("", kJson);
               });
}

void RestService::Infer(const httplib::Request& http_request, httplib::Response& http_response) {
  StatusOr<std::optional<size_t>> json_length = JsonLength(http_request);
  if (!json_length.ok()) return ReplyError(http_response, json_length.status());
  StatusOr<inference::ModelInferRequest> request = ParseInferRequest(
      http_request.body, *json_length, ModelName(http_request), ModelVersion(http_request));
  if (!request.ok()) return ReplyError(http_response, request.status());
  inference::ModelInferResponse response;
  Completion completion;
  core_->Infer(&*request, &response, InferenceCore::Clock::time_point::max(), nullptr,
               completion.Callback());
  Status status = completion.Wait();
  if (!status.ok()) return ReplyError(http_response, status);
  RestBody body = RenderInferResponse(*request, response);
  if (body.json_length.has_value()) {
    http_response.set_header(kInferenceHeaderLength, std::to_string(*body.json_length));
    http_response.set_content(std::move(body.content), "application/octet-stream");
  } else {
    http_response.set_content(std::move(body.content), kJson);
  }
}

void RestService::Generate(const httplib::Request& http_request, httplib::Response& http_response,
                           bool stream) {
  StatusOr<GenerateRequest> request = ParseGenerateRequest(http_request.body);
  if (!request.ok()) return ReplyError(http_response, request.status());
  const std::string model = ModelName(http_request);
  inference::ModelMetadataResponse metadata;
  Status found = core_->ModelMetadata(model, ModelVersion(http_request), &metadata);
  if (!found.ok()) return ReplyError(http_response, found);
  // The version that answers: the highest listed (the one asked for, if any).
  const std::string version =
      metadata.versions_size() > 0 ? metadata.versions(metadata.versions_size() - 1) : "";
  auto queue = std::make_shared<ChunkQueue>();
  core_->GenerateText(model, ChunkQueue::Request(queue, std::move(request->prompt), "",
                                                 std::move(request->parameters_json)));
  if (!stream) {
    GenerationChunk last;
    StatusOr<std::string> text = queue->WholeText(&last);
    if (!text.ok()) return ReplyError(http_response, text.status());
    return http_response.set_content(RenderGenerateResponse(model, version, *text), kJson);
  }
  EventRenderer events;
  events.chunk = [model, version](const GenerationChunk& chunk) {
    return "data: " + RenderGenerateResponse(model, version, chunk.text) + "\n\n";
  };
  events.close = [](const GenerationChunk&) { return std::string(); };
  events.error = [](const Status& status) { return "data: " + RenderError(status) + "\n\n"; };
  ServeEvents(queue, std::move(events), http_response, ReplyError);
}

bool RestService::Compressible(const std::string& path) {
  auto ends_with = [&path](const std::string& end) {
    return path.size() >= end.size() &&
           path.compare(path.size() - end.size(), end.size(), end) == 0;
  };
  return path.rfind("/v2/models/", 0) == 0 && (ends_with("/infer") || ends_with("/generate"));
}

void RestService::Repository(const httplib::Request& request, httplib::Response& response) {
  Completion completion;
  if (request.matches[2].str() == "load") {
    StatusOr<ModelOverride> override = ParseLoadBody(request.body);
    if (!override.ok()) return ReplyError(response, override.status());
    core_->LoadModel(request.matches[1].str(), completion.Callback(), std::move(*override));
  } else {
    core_->UnloadModel(request.matches[1].str(), completion.Callback());
  }
  Reply(response, completion.Wait(), "{}");
}

}  // namespace chorus
