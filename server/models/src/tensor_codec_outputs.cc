// The tensor codec's output half (tensor_codec.h): a model's outputs into a
// response, raw, as classes, or into shared memory, as each was requested.
#include <cstring>
#include <map>
#include <optional>
#include <string_view>

#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"
#include "chorus/server/models/tensor_codec.h"

namespace chorus {
namespace {

// How the request asked for one output.
struct Requested {
  std::optional<int64_t> classes;
  std::optional<SharedMemoryRef> memory;
};

StatusOr<Requested> RequestedOf(
    const inference::ModelInferRequest::InferRequestedOutputTensor& output) {
  Requested requested;
  CHORUS_ASSIGN_OR_RETURN(requested.classes, ClassCount(output));
  CHORUS_ASSIGN_OR_RETURN(requested.memory,
                          SharedMemoryRefOf(output.parameters(), "output " + output.name()));
  return requested;
}

// OK if `value` is of the dtype `spec` declares.
Status CheckOutputDtype(const c10::IValue& value, const TensorSpec& spec) {
  std::string returned = "a list of str";
  if (value.isTensor()) {
    std::optional<Dtype> dtype = DtypeOf(value.toTensor().scalar_type());
    if (!dtype) {
      return InternalError("output \"" + spec.name + "\" has a dtype the protocol cannot carry");
    }
    returned = InfoOf(*dtype).name;
  }
  if (returned == spec.dtype || (spec.dtype == "string" && !value.isTensor())) return OkStatus();
  return InternalError("output \"" + spec.name + "\": the model returned " + returned +
                       ", its signature declares " + spec.dtype);
}

// Adds output `name` to `response`: its header, and `bytes` as raw contents
// or written into the shared memory `memory` names (then an empty raw entry
// keeps the raw contents aligned with the outputs, as clients index them).
Status AddOutput(const std::string& name, const std::string& datatype,
                 const std::vector<int64_t>& shape, std::string_view bytes,
                 const std::optional<SharedMemoryRef>& memory,
                 const SharedMemoryRegistry* shared_memory,
                 inference::ModelInferResponse* response) {
  if (memory) {
    if (shared_memory == nullptr) {
      return InvalidArgumentError("output \"" + name + "\": shared memory is not served here");
    }
    StatusOr<SharedMemorySpan> span =
        shared_memory->Find(memory->region, memory->offset, memory->byte_size);
    if (!span.ok())
      return InvalidArgumentError("output \"" + name + "\": " + span.status().message());
    if (bytes.size() > span->size) {
      return InvalidArgumentError("output \"" + name + "\": its " + std::to_string(bytes.size()) +
                                  " bytes do not fit the " + std::to_string(span->size) +
                                  " bytes given in shared memory region \"" + memory->region +
                                  "\"");
    }
    if (!bytes.empty()) std::memcpy(span->data, bytes.data(), bytes.size());
  }
  auto* out = response->add_outputs();
  out->set_name(name);
  out->set_datatype(datatype);
  for (int64_t size : shape) out->add_shape(size);
  if (memory) {
    auto& parameters = *out->mutable_parameters();
    parameters["shared_memory_region"].set_string_param(memory->region);
    parameters["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(bytes.size()));
    response->add_raw_output_contents();
  } else {
    response->add_raw_output_contents(bytes.data(), bytes.size());
  }
  return OkStatus();
}

// Output `spec` (`value`) into `response` as `requested` asks.
Status EncodeOutput(const c10::IValue& value, const TensorSpec& spec, const Manifest& manifest,
                    const Requested& requested, const OutputLabelsMap& labels,
                    const SharedMemoryRegistry* shared_memory,
                    inference::ModelInferResponse* response) {
  const std::string bytes_wire = InfoOf(Dtype::kString).wire;
  if (value.isTensor() && requested.classes) {
    auto found = labels.find(spec.name);
    static const std::vector<std::string> kNoLabels;
    const bool batched = manifest.batching.batchable && manifest.batching.batch_dim == 0;
    CHORUS_ASSIGN_OR_RETURN(StringTensor top,
                            Classify(value.toTensor(), *requested.classes, batched,
                                     found == labels.end() ? kNoLabels : found->second.labels));
    return AddOutput(spec.name, bytes_wire, top.shape, StringsToRaw(top.elements), requested.memory,
                     shared_memory, response);
  }
  if (value.isTensor()) {
    const at::Tensor tensor = value.toTensor().contiguous();
    const std::optional<Dtype> dtype = DtypeOf(tensor.scalar_type());
    if (!dtype) {
      return InternalError("output \"" + spec.name + "\" has a dtype the protocol cannot carry");
    }
    const std::string_view bytes(static_cast<const char*>(tensor.data_ptr()),
                                 tensor.numel() * tensor.element_size());
    return AddOutput(spec.name, InfoOf(*dtype).wire, tensor.sizes().vec(), bytes, requested.memory,
                     shared_memory, response);
  }
  StatusOr<StringTensor> strings = StringTensorFromIValue(value);
  if (!strings.ok()) {
    return InternalError("output \"" + spec.name +
                         "\": " + std::string(strings.status().message()));
  }
  return AddOutput(spec.name, bytes_wire, strings->shape, StringsToRaw(strings->elements),
                   requested.memory, shared_memory, response);
}

}  // namespace

Status CheckRequestedOutputs(const inference::ModelInferRequest& request,
                             const Manifest& manifest) {
  for (const auto& output : request.outputs()) {
    const TensorSpec* spec = nullptr;
    for (const TensorSpec& candidate : manifest.outputs) {
      if (candidate.name == output.name()) spec = &candidate;
    }
    if (spec == nullptr) {
      // Triton's text, which its clients' tests match.
      return InvalidArgumentError("unexpected inference output '" + output.name() +
                                  "' for model '" + manifest.model_name + "'");
    }
    CHORUS_ASSIGN_OR_RETURN(Requested requested, RequestedOf(output));
    if (requested.classes && spec->dtype == InfoOf(Dtype::kString).name) {
      return InvalidArgumentError("output \"" + output.name() +
                                  "\": classification needs a numeric output, not BYTES");
    }
  }
  return OkStatus();
}

Status EncodeOutputs(const std::vector<c10::IValue>& outputs, const Manifest& manifest,
                     const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response, const OutputLabelsMap& labels,
                     const SharedMemoryRegistry* shared_memory, OutputCheck check) {
  CHORUS_RETURN_IF_ERROR(CheckRequestedOutputs(request, manifest));
  std::map<std::string, Requested> wanted;
  for (const auto& output : request.outputs()) wanted[output.name()] = RequestedOf(output).value();
  // What the model returned must be what its signature (and ModelMetadata)
  // says: a client trusts the metadata (as Triton does, a mismatch fails).
  if (outputs.size() != manifest.outputs.size()) {
    return InternalError("the model returned " + std::to_string(outputs.size()) +
                         " outputs; its signature declares " +
                         std::to_string(manifest.outputs.size()));
  }
  for (size_t i = 0; i < outputs.size() && check == OutputCheck::kSignature; ++i) {
    if (outputs[i].isNone()) continue;  // left out of this answer
    CHORUS_RETURN_IF_ERROR(CheckOutputDtype(outputs[i], manifest.outputs[i]));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorSpec& spec = manifest.outputs[i];
    auto asked = wanted.find(spec.name);
    if (outputs[i].isNone() || (!wanted.empty() && asked == wanted.end())) continue;
    CHORUS_RETURN_IF_ERROR(EncodeOutput(outputs[i], spec, manifest,
                                        wanted.empty() ? Requested{} : asked->second, labels,
                                        shared_memory, response));
  }
  return OkStatus();
}

}  // namespace chorus
