// KServe v2 REST bodies <-> the Open Inference Protocol's messages, the form
// the core takes (inference_core.h). Tensors travel as JSON ("data": values
// in row-major order, flat or nested) or, with Triton's binary tensor data
// extension, as raw bytes after the JSON header (its length in the
// Inference-Header-Content-Length header). docs/serving.md has the format.
#ifndef CHORUS_SERVER_FRONTENDS_HTTP_KSERVE_JSON_H_
#define CHORUS_SERVER_FRONTENDS_HTTP_KSERVE_JSON_H_

#include <optional>
#include <string>
#include <string_view>

#include "chorus/common/status.h"
#include "chorus/inference/grpc_service.pb.h"

namespace chorus {

// The HTTP header that carries the JSON part's length in a binary body.
inline constexpr char kInferenceHeaderLength[] = "Inference-Header-Content-Length";

// The infer request in `body` for `model` and `version` ("" = newest):
// `json_length` is the JSON part's length when the body carries binary
// tensor data after it. Every input's values become raw contents, so the
// core validates them as it does gRPC's. INVALID_ARGUMENT, naming the input,
// for malformed JSON, a value that is not of the datatype or does not fit it,
// a value count or binary size the shape does not need.
StatusOr<inference::ModelInferRequest> ParseInferRequest(std::string_view body,
                                                         std::optional<size_t> json_length,
                                                         const std::string& model,
                                                         const std::string& version);

// Triton's generate extension (/generate, /generate_stream): the prompt
// ("text_input") and the sampling parameters: the "parameters" object and
// every other top-level key, as Triton reads them. INVALID_ARGUMENT for a body
// that is not a JSON object, no "text_input" string, or a parameter that is
// not a bool, a number, a string or a list of strings.
struct GenerateRequest {
  std::string prompt;
  std::string parameters_json;
};
StatusOr<GenerateRequest> ParseGenerateRequest(std::string_view body);

// A generate response (or one event of a stream): model, version, text.
std::string RenderGenerateResponse(const std::string& model, const std::string& version,
                                   const std::string& text);

// An infer response body. `json_length` is set when binary data follows the
// JSON (the request asked for binary outputs), else left empty.
struct RestBody {
  std::string content;
  std::optional<size_t> json_length;
};

// `response` as KServe JSON, each output as "data" values or, where
// `request` asked for it (an output's "binary_data" parameter, or the
// request's "binary_data_output"), as binary data after the JSON.
RestBody RenderInferResponse(const inference::ModelInferRequest& request,
                             const inference::ModelInferResponse& response);

// The other answers, in the JSON Triton's HTTP endpoints give.
std::string RenderServerMetadata(const inference::ServerMetadataResponse& metadata);
std::string RenderModelMetadata(const inference::ModelMetadataResponse& metadata);
std::string RenderModelConfig(const inference::ModelConfigResponse& config);
std::string RenderStatistics(const inference::ModelStatisticsResponse& statistics);
std::string RenderRepositoryIndex(const inference::RepositoryIndexResponse& index);
// Triton's shared-memory REST bodies: the register body ({"key", "offset",
// "byte_size"}) into the gRPC request for region `name` (INVALID_ARGUMENT
// naming what is wrong), and the status as a list of regions.
StatusOr<inference::SystemSharedMemoryRegisterRequest> ParseSharedMemoryRegister(
    std::string_view body, const std::string& name);
std::string RenderSharedMemoryStatus(const inference::SystemSharedMemoryStatusResponse& status);

// {"error": message}: every failed REST call's body.
std::string RenderError(const Status& status);

}  // namespace chorus

#endif  // CHORUS_SERVER_FRONTENDS_HTTP_KSERVE_JSON_H_
