#include "chorus/server/frontends/openai/openai_service.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <utility>

#include "chorus/server/frontends/http/completion.h"
#include "chorus/server/frontends/http/generation_stream.h"
#include "chorus/server/frontends/http/http_status.h"
#include "chorus/server/models/tensor_codec.h"

namespace chorus {
namespace {

constexpr char kJson[] = "application/json";

void ReplyError(httplib::Response& response, const Status& status) {
  response.status = HttpStatusCode(status.code());
  response.set_content(RenderOpenAiError(status), kJson);
}

// The names an embedding model's signature gives text and vectors: one BYTES
// input, an FP32 output "embedding" [batch, dim], an optional INT64 output
// "prompt_tokens" [batch].
struct EmbeddingSignature {
  std::string text;
  std::vector<int64_t> text_dims;  // after the batch dimension
  bool has_token_counts = false;
};

StatusOr<EmbeddingSignature> EmbeddingSignatureOf(const inference::ModelMetadataResponse& model) {
  EmbeddingSignature signature;
  bool has_embedding = false;
  for (const auto& output : model.outputs()) {
    if (output.name() == "embedding" && output.datatype() == "FP32" && output.shape_size() == 2) {
      has_embedding = true;
    }
    if (output.name() == "prompt_tokens" && output.datatype() == "INT64") {
      signature.has_token_counts = true;
    }
  }
  if (model.inputs_size() != 1 || model.inputs(0).datatype() != "BYTES" || !has_embedding ||
      model.inputs(0).shape_size() < 1) {
    return InvalidArgumentError("model '" + model.name() +
                                "' does not serve embeddings (it needs one batched BYTES input "
                                "and an FP32 output 'embedding' [batch, dim])");
  }
  signature.text = model.inputs(0).name();
  for (int i = 1; i < model.inputs(0).shape_size(); ++i) {
    signature.text_dims.push_back(std::max<int64_t>(model.inputs(0).shape(i), 1));
  }
  return signature;
}

// The infer request for `texts`, one per batch row.
inference::ModelInferRequest EmbeddingCall(const std::string& model,
                                           const std::vector<std::string>& texts,
                                           const EmbeddingSignature& signature) {
  inference::ModelInferRequest call;
  call.set_model_name(model);
  auto* input = call.add_inputs();
  input->set_name(signature.text);
  input->set_datatype("BYTES");
  input->add_shape(static_cast<int64_t>(texts.size()));
  for (int64_t dim : signature.text_dims) input->add_shape(dim);
  call.add_raw_input_contents(StringsToRaw(texts));
  call.add_outputs()->set_name("embedding");
  if (signature.has_token_counts) call.add_outputs()->set_name("prompt_tokens");
  return call;
}

// `response`'s output `name` as raw bytes, with its shape.
const std::string* RawOutput(const inference::ModelInferResponse& response, const char* name,
                             std::vector<int64_t>* shape) {
  for (int i = 0; i < response.outputs_size() && i < response.raw_output_contents_size(); ++i) {
    if (response.outputs(i).name() != name) continue;
    shape->assign(response.outputs(i).shape().begin(), response.outputs(i).shape().end());
    return &response.raw_output_contents(i);
  }
  return nullptr;
}

// The vectors of every input, in order, and their token count.
struct Embeddings {
  std::vector<float> vectors;  // rows * dim
  int64_t dim = 0;
  int64_t tokens = 0;
};

// Appends one call's answer for `rows` inputs to `out`.
Status AppendEmbeddings(const std::string& model, const inference::ModelInferResponse& response,
                        int64_t rows, Embeddings* out) {
  std::vector<int64_t> shape, token_shape;
  const std::string* vectors = RawOutput(response, "embedding", &shape);
  if (vectors == nullptr || shape.size() != 2 || shape[0] != rows ||
      (out->dim != 0 && shape[1] != out->dim) ||
      vectors->size() != static_cast<size_t>(rows * shape[1]) * sizeof(float)) {
    return InternalError("model '" + model +
                         "' answered an 'embedding' that is not [inputs, dim] FP32");
  }
  out->dim = shape[1];
  const size_t at = out->vectors.size();
  out->vectors.resize(at + rows * shape[1]);
  std::memcpy(out->vectors.data() + at, vectors->data(), vectors->size());
  if (const std::string* counts = RawOutput(response, "prompt_tokens", &token_shape)) {
    for (size_t i = 0; i + sizeof(int64_t) <= counts->size(); i += sizeof(int64_t)) {
      int64_t count;
      std::memcpy(&count, counts->data() + i, sizeof(count));
      out->tokens += count;
    }
  }
  return OkStatus();
}

// The vectors of `request`'s inputs from `core`.
StatusOr<Embeddings> RunEmbeddings(InferenceCore* core, const EmbeddingsRequest& request,
                                   const EmbeddingSignature& signature) {
  // More inputs than the model's largest batch go as several calls, at once.
  inference::ModelConfigResponse config;
  CHORUS_RETURN_IF_ERROR(core->ModelConfig(request.model, "", &config));
  const size_t most = std::max<size_t>(1, config.config().max_batch_size());
  const size_t calls = (request.inputs.size() + most - 1) / most;
  std::vector<inference::ModelInferRequest> requests(calls);
  std::vector<inference::ModelInferResponse> responses(calls);
  std::vector<Completion> completions(calls);
  for (size_t i = 0; i < calls; ++i) {
    const auto first = request.inputs.begin() + i * most;
    const auto last = request.inputs.begin() + std::min(request.inputs.size(), (i + 1) * most);
    requests[i] = EmbeddingCall(request.model, std::vector<std::string>(first, last), signature);
    core->Infer(&requests[i], &responses[i], InferenceCore::Clock::time_point::max(), nullptr,
                completions[i].Callback());
  }
  Status status = OkStatus();
  for (Completion& completion : completions) {
    Status done = completion.Wait();  // every call, even after an error: they use `responses`
    if (status.ok()) status = std::move(done);
  }
  CHORUS_RETURN_IF_ERROR(status);
  Embeddings out;
  for (size_t i = 0; i < calls; ++i) {
    const int64_t rows = requests[i].inputs(0).shape(0);
    CHORUS_RETURN_IF_ERROR(AppendEmbeddings(request.model, responses[i], rows, &out));
  }
  return out;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

OpenAiService::OpenAiService(InferenceCore* core)
    : core_(core), started_(UnixNow()), id_prefix_(std::random_device()()) {}

void OpenAiService::Register(HttpEndpoint* endpoint) {
  endpoint->SetErrorBody("/v1/", [](const std::string& message, int http_status) {
    return RenderOpenAiError(message, http_status);
  });
  httplib::Server* server = &endpoint->routes();
  server->Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
    ListModels(response);
  });
  AddPostRoute(server, "/v1/completions",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Generate(request, response, OpenAiEndpoint::kCompletions);
               });
  AddPostRoute(server, "/v1/chat/completions",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Generate(request, response, OpenAiEndpoint::kChatCompletions);
               });
  AddPostRoute(server, "/v1/embeddings",
               [this](const httplib::Request& request, httplib::Response& response) {
                 Embed(request, response);
               });
}

void OpenAiService::Embed(const httplib::Request& http_request, httplib::Response& http_response) {
  StatusOr<EmbeddingsRequest> request = ParseEmbeddingsRequest(http_request.body);
  if (!request.ok()) return ReplyError(http_response, request.status());
  inference::ModelMetadataResponse metadata;
  Status found = core_->ModelMetadata(request->model, "", &metadata);
  if (!found.ok()) return ReplyError(http_response, found);
  StatusOr<EmbeddingSignature> signature = EmbeddingSignatureOf(metadata);
  if (!signature.ok()) return ReplyError(http_response, signature.status());
  StatusOr<Embeddings> embeddings = RunEmbeddings(core_, *request, *signature);
  if (!embeddings.ok()) return ReplyError(http_response, embeddings.status());
  const int64_t rows = static_cast<int64_t>(request->inputs.size());
  http_response.set_content(RenderEmbeddings(*request, embeddings->vectors.data(), rows,
                                             embeddings->dim, embeddings->tokens),
                            kJson);
}

void OpenAiService::ListModels(httplib::Response& response) const {
  nlohmann::json data = nlohmann::json::array();
  auto add = [&](const std::string& name) {
    data.push_back(
        {{"id", name}, {"object", "model"}, {"created", started_}, {"owned_by", "chorus"}});
  };
  for (const std::shared_ptr<LoadedModel>& model : core_->GenerativeModels()) add(model->name());
  inference::RepositoryIndexResponse index;
  core_->RepositoryIndex(/*ready_only=*/true, &index);
  std::set<std::string> listed;
  for (const auto& entry : index.models()) {
    inference::ModelMetadataResponse metadata;
    if (listed.insert(entry.name()).second &&
        core_->ModelMetadata(entry.name(), "", &metadata).ok() &&
        EmbeddingSignatureOf(metadata).ok()) {
      add(entry.name());
    }
  }
  response.set_content(nlohmann::json{{"object", "list"}, {"data", std::move(data)}}.dump(), kJson);
}

std::string OpenAiService::NewId(OpenAiEndpoint endpoint) {
  char id[48];
  std::snprintf(id, sizeof(id), "%s-%08" PRIx64 "%08" PRIx64,
                endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl" : "cmpl", id_prefix_,
                next_id_.fetch_add(1));
  return id;
}

void OpenAiService::Generate(const httplib::Request& http_request, httplib::Response& http_response,
                             OpenAiEndpoint endpoint) {
  StatusOr<OpenAiRequest> request = ParseOpenAiRequest(http_request.body, endpoint);
  if (!request.ok()) return ReplyError(http_response, request.status());
  auto queue = std::make_shared<ChunkQueue>();
  core_->GenerateText(request->model,
                      ChunkQueue::Request(queue, request->prompt, request->messages_json,
                                          request->parameters_json));
  auto renderer = std::make_shared<OpenAiRenderer>(*request, NewId(endpoint), UnixNow());
  if (!request->stream) {
    GenerationChunk last;
    StatusOr<std::string> text = queue->WholeText(&last);
    if (!text.ok()) return ReplyError(http_response, text.status());
    return http_response.set_content(renderer->Body(*text, last), kJson);
  }
  EventRenderer events;
  events.chunk = [renderer](const GenerationChunk& chunk) { return renderer->Events(chunk); };
  events.close = [renderer](const GenerationChunk& last) { return renderer->Close(last); };
  events.error = [](const Status& status) { return OpenAiErrorEvent(status) + "data: [DONE]\n\n"; };
  // A request refused before its first token gets an HTTP error, as OpenAI's.
  ServeEvents(queue, std::move(events), http_response, ReplyError);
}

}  // namespace chorus
