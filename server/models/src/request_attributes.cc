#include "server/models/src/request_attributes.h"

#include <ATen/ATen.h>

#include <set>
#include <string>

#include "chorus/server/models/infer_parameters.h"

namespace chorus {
namespace {

// Parameters the protocol reads itself, which Triton keeps from models.
const std::set<std::string>& ReservedParameters() {
  static const std::set<std::string> kReserved = {"sequence_id",
                                                  "sequence_start",
                                                  "sequence_end",
                                                  "priority",
                                                  "timeout",
                                                  "binary_data_output",
                                                  "triton_enable_empty_final_response"};
  return kReserved;
}

CorrelationId CorrelationIdOf(const InferParameters& parameters) {
  auto id = parameters.find("sequence_id");
  if (id == parameters.end()) return uint64_t{0};
  switch (id->second.parameter_choice_case()) {
    case inference::InferParameter::kStringParam:
      return id->second.string_param();
    case inference::InferParameter::kUint64Param:
      return id->second.uint64_param();
    default:
      return static_cast<uint64_t>(std::max<int64_t>(0, id->second.int64_param()));
  }
}

// `value` with `shape` (the batch dimension, when batched, kept in front).
StatusOr<c10::IValue> Reshaped(const c10::IValue& value, std::vector<int64_t> shape, bool batched,
                               const std::string& name) {
  if (!value.isTensor()) return value;  // BYTES elements are flat already
  const at::Tensor& tensor = value.toTensor();
  if (batched && tensor.dim() > 0) shape.insert(shape.begin(), tensor.size(0));
  int64_t known = 1, unknown = 0;
  for (int64_t size : shape) size < 0 ? ++unknown : known *= size;
  const int64_t elements = tensor.numel();
  if (unknown > 1 || (unknown == 0 && known != elements) ||
      (unknown == 1 && (known == 0 || elements % known != 0))) {
    return InvalidArgumentError("\"" + name + "\": its " + std::to_string(elements) +
                                " elements do not fit the reshape " + ShapeText(shape));
  }
  return c10::IValue(tensor.reshape(shape));
}

Status ReshapeAll(const std::vector<TensorSpec>& specs,
                  const std::map<std::string, std::vector<int64_t>>& reshapes, bool batched,
                  std::vector<c10::IValue>* values,
                  const std::function<std::vector<int64_t>(const TensorSpec&, size_t)>& target) {
  for (size_t i = 0; i < specs.size() && i < values->size(); ++i) {
    if (reshapes.count(specs[i].name) == 0 || (*values)[i].isNone()) continue;
    CHORUS_ASSIGN_OR_RETURN((*values)[i],
                            Reshaped((*values)[i], target(specs[i], i), batched, specs[i].name));
  }
  return OkStatus();
}

}  // namespace

void SetRequestAttributes(const LoadedModel& model, const inference::ModelInferRequest& request,
                          InferenceRequest* call) {
  for (const auto& [name, value] : ParametersOf(request.parameters())) {
    if (ReservedParameters().count(name) == 0) call->parameters[name] = value;
  }
  for (const auto& output : request.outputs()) call->requested_outputs.push_back(output.name());
  if (call->requested_outputs.empty()) {
    for (const TensorSpec& spec : model.manifest().outputs) {
      call->requested_outputs.push_back(spec.name);
    }
  }
  call->correlation_id = CorrelationIdOf(request.parameters());
  if (BoolParameter(request.parameters(), "sequence_start")) call->flags |= kSequenceStartFlag;
  if (BoolParameter(request.parameters(), "sequence_end")) call->flags |= kSequenceEndFlag;
}

Status ReshapeInputs(const LoadedModel& model, std::vector<c10::IValue>* inputs) {
  const auto& reshapes = model.annotations().input_reshapes;
  if (reshapes.empty()) return OkStatus();
  const Manifest& manifest = model.manifest();
  return ReshapeAll(manifest.inputs, reshapes, manifest.batching.batchable, inputs,
                    [&](const TensorSpec& spec, size_t) { return reshapes.at(spec.name); });
}

Status ReshapeOutputs(const LoadedModel& model, std::vector<c10::IValue>* outputs) {
  const auto& reshapes = model.annotations().output_reshapes;
  if (reshapes.empty()) return OkStatus();
  const Manifest& manifest = model.manifest();
  const bool batched = manifest.batching.batchable;
  return ReshapeAll(manifest.outputs, reshapes, batched, outputs,
                    [batched](const TensorSpec& spec, size_t) {
                      std::vector<int64_t> dims = spec.shape;
                      if (batched && !dims.empty()) dims.erase(dims.begin());
                      return dims;
                    });
}

}  // namespace chorus
