// libFuzzer target: arbitrary bytes as the body of a KServe v2 REST call:
// infer (JSON only, and JSON followed by binary tensor data, its length taken
// from the input's last 4 bytes), generate, and shared memory register. A
// parse must return an error or a request whose JSON values fill their
// shapes, never crash, hang or leak; the core's checks of the request's
// inputs run on it, and its inputs, echoed as outputs, render as an answer.
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/package/dtype.h"
#include "chorus/server/frontends/http/kserve_json.h"
#include "chorus/server/models/wire_tensors.h"

namespace {

void CheckJson(std::string_view text) {
  if (!nlohmann::json::accept(text)) __builtin_trap();
}

// The JSON "data" of an input of a fixed-size type fills exactly its shape
// (binary data and shared memory are the core's to check: CheckInputs).
void CheckJsonDataSizes(const inference::ModelInferRequest& request, bool binary) {
  if (request.raw_input_contents_size() != request.inputs_size()) __builtin_trap();
  for (int k = 0; k < request.inputs_size(); ++k) {
    const auto& input = request.inputs(k);
    if (binary || input.parameters().count("shared_memory_region")) continue;
    const chorus::DtypeInfo* dtype = chorus::DtypeByWireName(input.datatype());
    if (dtype == nullptr) __builtin_trap();
    if (dtype->element_size == 0) continue;
    uint64_t elements = 1;
    for (int64_t d : input.shape()) elements *= static_cast<uint64_t>(d);
    if (request.raw_input_contents(k).size() != elements * dtype->element_size) __builtin_trap();
  }
}

// The core's checks of the inputs, against a signature of the request's own
// tensors (unknown datatypes are refused there).
void CheckInCore(const inference::ModelInferRequest& request) {
  chorus::Manifest manifest;
  for (const auto& input : request.inputs()) {
    const chorus::DtypeInfo* dtype = chorus::DtypeByWireName(input.datatype());
    manifest.inputs.push_back({input.name(), dtype ? dtype->name : "?",
                               std::vector<int64_t>(input.shape().begin(), input.shape().end())});
  }
  (void)chorus::CheckInputs(request, manifest);
}

// Renders `request`'s inputs as the outputs of a response to it.
void RenderEcho(const inference::ModelInferRequest& request) {
  inference::ModelInferResponse response;
  response.set_model_name(request.model_name());
  response.set_id(request.id());
  for (int k = 0; k < request.inputs_size(); ++k) {
    auto* output = response.add_outputs();
    output->set_name(request.inputs(k).name());
    output->set_datatype(request.inputs(k).datatype());
    *output->mutable_shape() = request.inputs(k).shape();
    response.add_raw_output_contents(request.raw_input_contents(k));
  }
  const chorus::RestBody body = chorus::RenderInferResponse(request, response);
  const size_t json_length = body.json_length.value_or(body.content.size());
  if (json_length > body.content.size()) __builtin_trap();
  CheckJson(std::string_view(body.content).substr(0, json_length));
}

void Infer(std::string_view body, std::optional<size_t> json_length) {
  chorus::StatusOr<inference::ModelInferRequest> request =
      chorus::ParseInferRequest(body, json_length, "model", "");
  if (!request.ok()) {
    CheckJson(chorus::RenderError(request.status()));
    return;
  }
  CheckJsonDataSizes(*request, json_length.has_value());
  CheckInCore(*request);
  RenderEcho(*request);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  Infer(body, std::nullopt);
  if (size >= 4) {
    uint32_t length;
    std::memcpy(&length, data + size - 4, sizeof length);
    Infer(body.substr(0, size - 4), length);
  }
  chorus::StatusOr<chorus::GenerateRequest> generate = chorus::ParseGenerateRequest(body);
  if (generate.ok()) {
    CheckJson(generate->parameters_json);
    CheckJson(chorus::RenderGenerateResponse("model", "1", generate->prompt));
  }
  (void)chorus::ParseSharedMemoryRegister(body, "region");
  return 0;
}
