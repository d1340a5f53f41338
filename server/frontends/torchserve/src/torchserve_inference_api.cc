#include "chorus/server/frontends/torchserve/torchserve_inference_api.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "chorus/common/random_id.h"
#include "chorus/server/frontends/http/completion.h"
#include "chorus/server/frontends/http/http_status.h"
#include "chorus/server/torchserve/torchserve_model.h"
#include "chorus/serving/string_tensor.h"
#include "server/frontends/torchserve/src/torchserve_json.h"

namespace chorus {
namespace {

namespace tensors = torchserve_tensors;
using torchserve_json::ErrorBody;
using torchserve_json::ErrorType;
using torchserve_json::kJson;
using torchserve_json::Pretty;
// model, version ("" for none), the rest of the path ("" for none).
constexpr char kPredictions[] = R"(/predictions/([^/]+)(?:/([^/]+))?(?:/(.*))?)";
constexpr char kExplanations[] = R"(/explanations/([^/]+)(?:/([^/]+))?(?:/(.*))?)";
// KServe's paths, which TorchServe's frontend serves as predictions and
// explanations of the body as it is (its KServe runtime's wrapper forwards
// them; an envelope, service_envelope, reads and writes KServe's JSON):
// model, "predict" | "explain" (v1), "infer" | "explain" (v2).
constexpr char kKServeV1[] = R"(/v1/models/([^/:]+):(predict|explain))";
constexpr char kKServeV2[] = R"(/v2/models/([^/]+)/(infer|explain))";

// What a route's path names.
struct Target {
  std::string model;
  std::string version;  // "" for none
  std::string rest;     // the path after the version ("" for none): url_path
  bool explain = false;
};

// One input of a request, as TorchServe's frontend hands it to a worker.
struct Field {
  std::string name;
  std::string content_type;
  std::string data;
};

// A content type's media type, its parameters left out (Netty's
// HttpUtil.getMimeType, as TorchServe hands it to the worker).
std::string MediaType(const std::string& content_type) {
  std::string type = content_type.substr(0, content_type.find(';'));
  const size_t first = type.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  type = type.substr(first, type.find_last_not_of(" \t") - first + 1);
  return type;
}

// Keeps the last field of each name, in the order names first came.
std::vector<Field> LastOfEachName(std::vector<Field> fields) {
  std::vector<Field> kept;
  for (Field& field : fields) {
    auto same = std::find_if(kept.begin(), kept.end(),
                             [&](const Field& other) { return other.name == field.name; });
    if (same == kept.end()) {
      kept.push_back(std::move(field));
    } else {
      *same = std::move(field);
    }
  }
  return kept;
}

// The request's inputs from its body: one per form field (the last of a
// repeated name), else the whole body as "body" with the request's type.
std::vector<Field> FieldsOf(const httplib::Request& request, std::string body) {
  const std::string type = MediaType(request.get_header_value("Content-Type"));
  if (type == "application/x-www-form-urlencoded") {
    httplib::Params params;
    httplib::detail::parse_query_text(body, params);
    std::vector<Field> fields;
    for (const auto& [name, value] : params) fields.push_back({name, "", value});
    return LastOfEachName(std::move(fields));
  }
  return {{"body", type, std::move(body)}};
}

// The body's fields, read through `reader`: multipart parts, or the body.
std::optional<std::vector<Field>> ReadFields(const httplib::Request& request,
                                             const httplib::ContentReader& reader) {
  const std::string encoding = request.get_header_value("Transfer-Encoding");
  const bool has_body =
      request.has_header("Content-Length") || encoding.find("chunked") != std::string::npos;
  if (!has_body) return FieldsOf(request, "");
  if (request.is_multipart_form_data()) {
    std::vector<Field> parts;
    const bool read = reader(
        [&parts](const httplib::MultipartFormData& part) {
          // As TorchServe (Netty): a form attribute (no file name) has no content type.
          parts.push_back(
              {part.name, part.filename.empty() ? "" : MediaType(part.content_type), ""});
          return true;
        },
        [&parts](const char* data, size_t size) {
          parts.back().data.append(data, size);
          return true;
        });
    if (!read) return std::nullopt;
    return LastOfEachName(std::move(parts));
  }
  std::string body;
  if (!reader([&body](const char* data, size_t size) {
        body.append(data, size);
        return true;
      })) {
    return std::nullopt;
  }
  return FieldsOf(request, std::move(body));
}

void AddStrings(inference::ModelInferRequest* infer, const char* name, int64_t width,
                const std::vector<std::string>& elements) {
  inference::ModelInferRequest::InferInputTensor* input = infer->add_inputs();
  input->set_name(name);
  input->set_datatype("BYTES");
  for (int64_t dim : {int64_t{1}, static_cast<int64_t>(elements.size()) / width, width}) {
    input->add_shape(dim);
  }
  infer->add_raw_input_contents(StringsToRaw(elements));
}

// The signature's tensors for `request` to `target`, with a new request id.
inference::ModelInferRequest InferRequestOf(const httplib::Request& request, const Target& target,
                                            const std::vector<Field>& fields) {
  inference::ModelInferRequest infer;
  infer.set_model_name(target.model);
  infer.set_model_version(target.version);
  infer.set_id(RandomUuid());  // as TorchServe's
  std::vector<std::string> headers;
  for (const auto& [name, value] : request.headers) {
    if (name == "REMOTE_ADDR" || name == "REMOTE_PORT" || name == "LOCAL_ADDR" ||
        name == "LOCAL_PORT") {
      continue;  // cpp-httplib's, not the client's
    }
    headers.insert(headers.end(), {name, value});
    // A stateful model's sequence (TorchServe matches the header's name exactly).
    if (name == torchserve_headers::kSequenceId) {
      (*infer.mutable_parameters())["sequence_id"].set_string_param(value);
    }
  }
  headers.insert(headers.end(), {"explain", target.explain ? "True" : "False"});
  if (!target.rest.empty()) headers.insert(headers.end(), {"url_path", target.rest});
  AddStrings(&infer, tensors::kHeaders, 2, headers);
  std::vector<std::string> inputs;
  for (const Field& field : fields) {
    inputs.insert(inputs.end(), {field.name, field.content_type, field.data});
  }
  AddStrings(&infer, tensors::kInputs, 3, inputs);
  return infer;
}

// Output `name` of `answer` as strings, or its int32 elements' first as text.
StatusOr<std::vector<std::string>> StringsOf(const inference::ModelInferResponse& answer,
                                             const std::string& name) {
  for (int i = 0; i < answer.outputs_size(); ++i) {
    const auto& output = answer.outputs(i);
    if (output.name() != name || i >= answer.raw_output_contents_size()) continue;
    std::vector<int64_t> shape(output.shape().begin(), output.shape().end());
    if (output.datatype() == "INT32" && answer.raw_output_contents(i).size() >= 4) {
      int32_t value = 0;
      std::memcpy(&value, answer.raw_output_contents(i).data(), 4);
      return std::vector<std::string>{std::to_string(value)};
    }
    CHORUS_ASSIGN_OR_RETURN(StringTensor strings,
                            StringTensorFromRaw(shape, answer.raw_output_contents(i)));
    return std::move(strings.elements);
  }
  return InternalError("the TorchServe model's answer has no " + name);
}

// The handler's answer (or its batch's failure) as TorchServe writes it.
Status Render(const inference::ModelInferResponse& answer, httplib::Response& response) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> status, StringsOf(answer, tensors::kStatus));
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> error, StringsOf(answer, tensors::kError));
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> body, StringsOf(answer, tensors::kBody));
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> headers,
                          StringsOf(answer, tensors::kResponseHeaders));
  response.status = std::stoi(status.at(0));
  if (!error.empty() && !error[0].empty()) {
    response.set_content(ErrorBody(response.status, "InternalServerException", error[0]), kJson);
    return OkStatus();
  }
  for (size_t i = 0; i + 1 < headers.size(); i += 2) {
    response.set_header(headers[i] == "content-type" ? "Content-Type" : headers[i], headers[i + 1]);
  }
  response.body = body.empty() ? std::string() : std::move(body[0]);
  return OkStatus();
}

// chorus' error for a request to `model` (version `version`) as TorchServe's.
void RenderError(const Status& status, const std::string& model, const std::string& version,
                 httplib::Response& response) {
  int code = HttpStatusCode(status.code());
  std::string message(status.message());
  if (status.code() == StatusCode::kNotFound) {
    code = 404;
    message = version.empty() ? "Model not found: " + model
                              : "Model version: " + version + " does not exist for model: " + model;
  }
  response.status = code;
  response.set_content(ErrorBody(code, ErrorType(code), message), kJson);
}

}  // namespace

void TorchServeInferenceApi::Register(HttpEndpoint* endpoint) {
  httplib::Server* server = &endpoint->routes();
  endpoint->SetErrorBody("/", [](const std::string& message, int code) {
    return ErrorBody(code, ErrorType(code), message);
  });
  const auto ping = [this](const httplib::Request&, httplib::Response& response) {
    const bool healthy = core_->ServerReady();
    response.status = healthy ? 200 : 500;
    response.set_content(Pretty({{"status", healthy ? "Healthy" : "Unhealthy"}}), kJson);
  };
  server->Get("/ping", ping);
  server->Post("/ping", ping);
  using TargetOf = Target (*)(const httplib::Request&);
  const auto predictions = [](const httplib::Request& r) {
    return Target{r.matches[1], r.matches[2], r.matches[3], false};
  };
  const auto explanations = [](const httplib::Request& r) {
    return Target{r.matches[1], r.matches[2], r.matches[3], true};
  };
  const auto kserve = [](const httplib::Request& r) {
    return Target{r.matches[1], "", "", r.matches[2] == "explain"};
  };
  for (const auto& [pattern, target_of, any_method] :
       {std::tuple<const char*, TargetOf, bool>{kPredictions, predictions, true},
        {kExplanations, explanations, true},
        {kKServeV1, kserve, false},
        {kKServeV2, kserve, false}}) {
    const auto with_body = [this, target_of = target_of](const httplib::Request& request,
                                                         httplib::Response& response,
                                                         const httplib::ContentReader& reader) {
      std::optional<std::vector<Field>> fields = ReadFields(request, reader);
      if (!fields) {
        if (response.status < 400) response.status = 400;
        return;  // the error handler writes the body
      }
      Predict(InferRequestOf(request, target_of(request), *fields), response);
    };
    server->Post(pattern, with_body);
    if (!any_method) continue;  // TorchServe's own paths take any method
    server->Put(pattern, with_body);
    server->Get(pattern, [this, target_of = target_of](const httplib::Request& request,
                                                       httplib::Response& response) {
      Predict(InferRequestOf(request, target_of(request), FieldsOf(request, "")), response);
    });
  }
}

void TorchServeInferenceApi::Predict(const inference::ModelInferRequest& infer,
                                     httplib::Response& response) const {
  response.set_header("x-request-id", infer.id());
  response.set_header("Cache-Control", "no-cache; no-store, must-revalidate, private");
  response.set_header("Pragma", "no-cache");
  inference::ModelInferResponse answer;
  Completion completion;
  core_->Infer(&infer, &answer, std::chrono::steady_clock::time_point::max(), nullptr,
               completion.Callback());
  Status status = completion.Wait();
  if (status.ok()) status = Render(answer, response);
  if (!status.ok()) RenderError(status, infer.model_name(), infer.model_version(), response);
}

}  // namespace chorus
