// InferenceCore's streams (ModelStreamInfer: decoupled models, one response
// of others flagged final) and text generation (inference_core.h).
#include <nlohmann/json.hpp>

#include "chorus/server/models/infer_parameters.h"
#include "chorus/server/models/inference_core.h"
#include "chorus/server/models/tensor_codec.h"
#include "server/models/src/inference_core_internal.h"
#include "server/models/src/request_attributes.h"

namespace chorus {
namespace {

using core_internal::FillResponseHeader;
using core_internal::OutputCheckOf;

inference::ModelStreamInferResponse StreamError(const inference::ModelInferRequest& request,
                                                const Status& status) {
  inference::ModelStreamInferResponse response;
  response.set_error_message(std::string(status.message()));
  response.mutable_infer_response()->set_model_name(request.model_name());
  response.mutable_infer_response()->set_id(request.id());
  return response;
}

void MarkFinal(inference::ModelInferResponse* response, bool final) {
  (*response->mutable_parameters())["triton_final_response"].set_bool_param(final);
}

// A generate request's sampling parameters as JSON: its parameters but
// Triton's own (triton_*, stream), which the engine does not take.
std::string SamplingParametersJson(const inference::ModelInferRequest& request) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : request.parameters()) {
    if (name.rfind("triton_", 0) == 0 || name == "stream") continue;
    switch (value.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam:
        out[name] = value.bool_param();
        break;
      case inference::InferParameter::kInt64Param:
        out[name] = value.int64_param();
        break;
      case inference::InferParameter::kDoubleParam:
        out[name] = value.double_param();
        break;
      case inference::InferParameter::kUint64Param:
        out[name] = value.uint64_param();
        break;
      default:
        out[name] = value.string_param();
        break;
    }
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The one prompt of a generate request (its string input, Triton's text_input).
StatusOr<std::string> PromptOf(const LoadedModel& model,
                               const inference::ModelInferRequest& request) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<c10::IValue> inputs, DecodeInputs(request, model.manifest()));
  StatusOr<StringTensor> text = StringTensorFromIValue(inputs.front());
  if (!text.ok() || text->elements.size() != 1) {
    return InvalidArgumentError("a generate request has one prompt: a BYTES input of one element");
  }
  return std::move(text->elements.front());
}

// A response carrying `text` as the model's string output.
void FillText(const LoadedModel& model, const inference::ModelInferRequest& request,
              const std::string& text, const std::string& finish_reason,
              inference::ModelInferResponse* response) {
  FillResponseHeader(model, request, response);
  auto* out = response->add_outputs();
  out->set_name(model.manifest().outputs.front().name);
  out->set_datatype("BYTES");
  out->add_shape(1);
  response->add_raw_output_contents(StringsToRaw({text}));
  MarkFinal(response, !finish_reason.empty());
  if (!finish_reason.empty()) {
    (*response->mutable_parameters())["finish_reason"].set_string_param(finish_reason);
  }
}

}  // namespace

void InferenceCore::StreamInfer(std::shared_ptr<const inference::ModelInferRequest> request,
                                Clock::time_point deadline,
                                std::shared_ptr<std::atomic<bool>> cancelled,
                                std::function<void(inference::ModelStreamInferResponse)> respond,
                                std::function<void()> done) {
  StatusOr<std::shared_ptr<LoadedModel>> model = ServingModel(*request);
  if (!model.ok()) {
    respond(StreamError(*request, model.status()));
    return done();
  }
  if ((*model)->generation() != nullptr) {
    return Generate(std::move(*model), request, nullptr, deadline, std::move(cancelled), respond,
                    [request, respond, done](Status status) {
                      if (!status.ok()) respond(StreamError(*request, status));
                      done();
                    });
  }
  if (!(*model)->scheduling().decoupled) {  // one response, flagged final
    auto response = std::make_shared<inference::ModelInferResponse>();
    const inference::ModelInferRequest* raw = request.get();
    return InferOnce(std::move(*model), raw, response.get(), deadline, std::move(cancelled),
                     [request, response, respond, done](Status status) {
                       inference::ModelStreamInferResponse answer = StreamError(*request, status);
                       if (status.ok()) {
                         answer.clear_error_message();
                         MarkFinal(response.get(), true);
                         *answer.mutable_infer_response() = std::move(*response);
                       }
                       respond(std::move(answer));
                       done();
                     });
  }
  StreamDecoupled(std::move(*model), std::move(request), deadline, std::move(cancelled),
                  std::move(respond), std::move(done));
}

void InferenceCore::StreamDecoupled(
    std::shared_ptr<LoadedModel> model, std::shared_ptr<const inference::ModelInferRequest> request,
    Clock::time_point deadline, std::shared_ptr<std::atomic<bool>> cancelled,
    std::function<void(inference::ModelStreamInferResponse)> respond, std::function<void()> done) {
  const Clock::time_point start = Clock::now();
  StatusOr<InferenceRequest> call =
      PrepareCall(*model, *request, deadline, std::move(cancelled), start);
  if (!call.ok()) {
    respond(StreamError(*request, call.status()));
    return done();
  }
  // Whether a response went out flagged final (then no empty one follows).
  auto final_sent = std::make_shared<std::atomic<bool>>(false);
  call->on_response = [this, model, request, respond, final_sent](ModelResponse each) {
    if (!each.status.ok()) {  // an error response; the stream goes on
      respond(StreamError(*request, each.status));
      return true;
    }
    inference::ModelStreamInferResponse answer;
    inference::ModelInferResponse* response = answer.mutable_infer_response();
    FillResponseHeader(*model, *request, response);
    Status encoded = ReshapeOutputs(*model, &each.outputs);
    if (encoded.ok()) {
      encoded =
          EncodeOutputs(each.outputs, model->manifest(), *request, response,
                        model->annotations().output_labels, &shared_memory_, OutputCheckOf(*model));
    }
    if (!encoded.ok()) {
      respond(StreamError(*request, encoded));
      return false;
    }
    SetParameters(each.parameters, response->mutable_parameters());
    MarkFinal(response, each.final);
    if (each.final) final_sent->store(true);
    respond(std::move(answer));
    return true;
  };
  model->scheduler().Submit(
      std::move(*call), [model, request, respond, done, start, final_sent](InferenceResult result) {
        if (!result.status.ok()) {
          respond(StreamError(*request, result.status));
        } else if (!final_sent->load() &&
                   BoolParameter(request->parameters(), "triton_enable_empty_final_response")) {
          inference::ModelStreamInferResponse last;
          FillResponseHeader(*model, *request, last.mutable_infer_response());
          MarkFinal(last.mutable_infer_response(), true);
          respond(std::move(last));
        }
        model->RecordRequest(result, Clock::now() - start);
        done();
      });
}

void InferenceCore::GenerateText(const std::string& name, GenerationRequest call) {
  if (!accepting()) return call.done(UnavailableError("the server is not ready"));
  StatusOr<std::shared_ptr<LoadedModel>> model = repository_->Find(name, "");
  if (!model.ok()) return call.done(model.status());
  if ((*model)->generation() == nullptr) {
    return call.done(
        InvalidArgumentError("model \"" + name +
                             "\" does not generate text (its package holds no chorus.generation "
                             "model; call it with ModelInfer or /v2/models/" +
                             name + "/infer)"));
  }
  SubmitGeneration(std::move(*model), std::move(call));
}

std::vector<std::shared_ptr<LoadedModel>> InferenceCore::GenerativeModels() const {
  std::vector<std::shared_ptr<LoadedModel>> models;
  if (!accepting()) return models;
  for (std::shared_ptr<LoadedModel>& model : repository_->Loaded()) {
    if (model->generation() != nullptr) models.push_back(std::move(model));
  }
  return models;
}

void InferenceCore::SubmitGeneration(std::shared_ptr<LoadedModel> model,
                                     GenerationRequest call) const {
  const Clock::time_point start = Clock::now();
  if (options_.request_timeout.count() > 0) {
    call.deadline = std::min(call.deadline, start + options_.request_timeout);
  }
  call.done = [model, start, done = std::move(call.done)](Status status) {
    InferenceResult result;
    result.status = status;
    result.batch_size = 1;
    model->RecordRequest(result, Clock::now() - start);
    done(status);
  };
  GenerationEngines* engines = model->generation();
  engines->Submit(std::move(call));
}

void InferenceCore::Generate(std::shared_ptr<LoadedModel> model,
                             std::shared_ptr<const inference::ModelInferRequest> request,
                             inference::ModelInferResponse* response, Clock::time_point deadline,
                             std::shared_ptr<std::atomic<bool>> cancelled,
                             std::function<void(inference::ModelStreamInferResponse)> respond,
                             std::function<void(Status)> done) {
  StatusOr<std::string> prompt = PromptOf(*model, *request);
  if (!prompt.ok()) {
    InferenceResult result;
    result.status = prompt.status();
    model->RecordRequest(result, std::chrono::nanoseconds(0));
    return done(prompt.status());
  }
  GenerationRequest call;
  call.prompt = std::move(*prompt);
  call.parameters_json = SamplingParametersJson(*request);
  call.deadline = deadline;
  call.cancelled = std::move(cancelled);
  auto text = std::make_shared<std::string>();
  auto finish_reason = std::make_shared<std::string>();
  call.on_chunk = [model, request, respond, text, finish_reason](const GenerationChunk& chunk) {
    *finish_reason = chunk.finish_reason;
    if (!respond) {
      *text += chunk.text;
      return true;
    }
    inference::ModelStreamInferResponse answer;
    FillText(*model, *request, chunk.text, chunk.finish_reason, answer.mutable_infer_response());
    respond(std::move(answer));
    return true;
  };
  call.done = [model, request, response, text, finish_reason,
               done = std::move(done)](Status status) {
    if (status.ok() && response != nullptr) {
      FillText(*model, *request, *text, *finish_reason, response);
    }
    done(status);
  };
  SubmitGeneration(std::move(model), std::move(call));
}

}  // namespace chorus
