#include "chorus/server/models/wire_tensors.h"

#include <limits>
#include <map>
#include <optional>

namespace chorus {
namespace {

using InputTensor = inference::ModelInferRequest::InferInputTensor;

Status Invalid(const std::string& input, const std::string& what) {
  return InvalidArgumentError("input \"" + input + "\": " + what);
}

bool HasTypedContents(const inference::InferTensorContents& c) {
  return c.bool_contents_size() || c.int_contents_size() || c.int64_contents_size() ||
         c.uint_contents_size() || c.uint64_contents_size() || c.fp32_contents_size() ||
         c.fp64_contents_size() || c.bytes_contents_size();
}

// The number of values in the typed field the protocol gives `dtype`;
// nullopt for a dtype without one (FP16, BF16, BYTES).
std::optional<int> TypedCount(const inference::InferTensorContents& c, Dtype dtype) {
  switch (dtype) {
    case Dtype::kBool:
      return c.bool_contents_size();
    case Dtype::kInt8:
    case Dtype::kInt16:
    case Dtype::kInt32:
      return c.int_contents_size();
    case Dtype::kInt64:
      return c.int64_contents_size();
    case Dtype::kUint8:
    case Dtype::kUint16:
    case Dtype::kUint32:
      return c.uint_contents_size();
    case Dtype::kUint64:
      return c.uint64_contents_size();
    case Dtype::kFloat32:
      return c.fp32_contents_size();
    case Dtype::kFloat64:
      return c.fp64_contents_size();
    default:
      return std::nullopt;
  }
}

// OK if each of `values` fits `T` (the typed fields are wider than INT8,
// INT16, UINT8 and UINT16).
template <typename T, typename Values>
Status CheckFits(const Values& values, const DtypeInfo& dtype, const std::string& name) {
  for (const auto value : values) {
    if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
      return Invalid(name, "value " + std::to_string(value) + " does not fit " + dtype.wire);
    }
  }
  return OkStatus();
}

// The typed contents `c` as input `name`: one value per element of the
// field that matches `dtype`, each fitting it.
StatusOr<WireInput> FromTypedContents(const inference::InferTensorContents& c,
                                      const DtypeInfo& dtype, const std::string& name,
                                      int64_t elements) {
  const std::optional<int> count = TypedCount(c, dtype.dtype);
  if (!count.has_value()) {
    return Invalid(name, std::string(dtype.wire) + " travels only as raw contents");
  }
  if (*count != elements) {
    return Invalid(name, std::to_string(*count) + " typed values for " + std::to_string(elements) +
                             " elements");
  }
  switch (dtype.dtype) {
    case Dtype::kInt8:
      CHORUS_RETURN_IF_ERROR(CheckFits<int8_t>(c.int_contents(), dtype, name));
      break;
    case Dtype::kInt16:
      CHORUS_RETURN_IF_ERROR(CheckFits<int16_t>(c.int_contents(), dtype, name));
      break;
    case Dtype::kUint8:
      CHORUS_RETURN_IF_ERROR(CheckFits<uint8_t>(c.uint_contents(), dtype, name));
      break;
    case Dtype::kUint16:
      CHORUS_RETURN_IF_ERROR(CheckFits<uint16_t>(c.uint_contents(), dtype, name));
      break;
    default:
      break;
  }
  WireInput input;
  input.source = WireInput::Source::kTyped;
  input.typed = &c;
  return input;
}

// The string input of `shape` from `raw` (null: the typed bytes_contents).
StatusOr<WireInput> DecodeStrings(const InputTensor& input, const std::vector<int64_t>& shape,
                                  const std::string_view* raw) {
  StatusOr<int64_t> elements = ElementCount(shape);
  if (!elements.ok()) return Invalid(input.name(), elements.status().message());
  WireInput decoded;
  decoded.source = WireInput::Source::kStrings;
  if (raw != nullptr) {
    StatusOr<StringTensor> strings = StringTensorFromRaw(shape, *raw);
    if (!strings.ok()) return Invalid(input.name(), strings.status().message());
    decoded.strings = std::move(strings).value();
    return decoded;
  }
  const auto& c = input.contents();
  if (HasTypedContents(c) && c.bytes_contents_size() == 0 && *elements > 0) {
    return Invalid(input.name(), "BYTES values travel in bytes_contents");
  }
  if (c.bytes_contents_size() != *elements) {
    return Invalid(input.name(), std::to_string(c.bytes_contents_size()) + " typed values for " +
                                     std::to_string(*elements) + " elements");
  }
  decoded.strings.shape = shape;
  decoded.strings.elements.assign(c.bytes_contents().begin(), c.bytes_contents().end());
  return decoded;
}

// `input`'s datatype and shape against its spec; its shape when they match.
StatusOr<std::vector<int64_t>> CheckDatatypeAndShape(const InputTensor& input,
                                                     const TensorSpec& spec, const DtypeInfo* dtype,
                                                     const Batching& batching) {
  if (dtype == nullptr || input.datatype() != dtype->wire) {
    return Invalid(input.name(), "expected datatype " + WireDatatype(spec.dtype) + ", got " +
                                     (input.datatype().empty() ? "none" : input.datatype()));
  }
  std::vector<int64_t> shape(input.shape().begin(), input.shape().end());
  CHORUS_RETURN_IF_ERROR(CheckInputShape(input.name(), shape, spec, batching));
  return shape;
}

// `input`'s contents (an input of model `model`): `raw` (null: its typed
// contents, if any).
StatusOr<WireInput> DecodeContents(const InputTensor& input, const std::string_view* raw,
                                   const DtypeInfo& dtype, const std::vector<int64_t>& shape,
                                   const std::string& model) {
  const bool typed = input.has_contents() && HasTypedContents(input.contents());
  if (raw != nullptr && typed) {  // Triton's text, which its clients' tests match
    return InvalidArgumentError(
        "contents field must not be specified when using raw_input_contents for '" + input.name() +
        "' for model '" + model + "'");
  }
  if (dtype.dtype == Dtype::kString) return DecodeStrings(input, shape, raw);
  StatusOr<int64_t> elements = ElementCount(shape);
  if (!elements.ok()) return Invalid(input.name(), elements.status().message());
  WireInput decoded;
  if (raw != nullptr) {
    Status size = CheckByteSize(dtype, shape, raw->size(), "raw contents hold");
    if (!size.ok()) return Invalid(input.name(), size.message());
    decoded.source = WireInput::Source::kBytes;
    decoded.bytes = *raw;
  } else if (typed) {
    CHORUS_ASSIGN_OR_RETURN(decoded,
                            FromTypedContents(input.contents(), dtype, input.name(), *elements));
  } else if (*elements != 0) {
    return Invalid(input.name(), "no contents (typed or raw)");
  }
  return decoded;
}

// `input`'s contents from the shared memory `ref` names.
StatusOr<WireInput> FromSharedMemory(const InputTensor& input, const SharedMemoryRef& ref,
                                     const SharedMemoryRegistry* registry, const DtypeInfo& dtype,
                                     const std::vector<int64_t>& shape) {
  if (registry == nullptr) return Invalid(input.name(), "shared memory is not served here");
  StatusOr<SharedMemorySpan> span = registry->Find(ref.region, ref.offset, ref.byte_size);
  if (!span.ok()) return Invalid(input.name(), span.status().message());
  const std::string_view bytes(span->data, span->size);
  if (dtype.dtype == Dtype::kString) return DecodeStrings(input, shape, &bytes);
  Status size = CheckByteSize(dtype, shape, bytes.size(), "shared memory holds");
  if (!size.ok()) return Invalid(input.name(), size.message());
  WireInput decoded;
  decoded.source = WireInput::Source::kBytes;
  decoded.bytes = bytes;
  decoded.mapping = std::move(span->mapping);
  return decoded;
}

// Which inputs' bytes are in shared memory (by the request's order), and
// whether the raw contents come for every input or for the others.
struct ContentsLayout {
  std::vector<std::optional<SharedMemoryRef>> in_memory;
  bool raw_for_every = false;
};

StatusOr<ContentsLayout> LayoutOf(const inference::ModelInferRequest& request) {
  ContentsLayout layout;
  layout.in_memory.resize(request.inputs_size());
  int in_memory_count = 0;
  for (int k = 0; k < request.inputs_size(); ++k) {
    const InputTensor& input = request.inputs(k);
    CHORUS_ASSIGN_OR_RETURN(layout.in_memory[k],
                            SharedMemoryRefOf(input.parameters(), "input " + input.name()));
    in_memory_count += layout.in_memory[k].has_value();
  }
  const int raw_count = request.raw_input_contents_size();
  layout.raw_for_every = raw_count == request.inputs_size();
  if (raw_count > 0 && !layout.raw_for_every &&
      raw_count != request.inputs_size() - in_memory_count) {
    return InvalidArgumentError(std::to_string(raw_count) + " raw_input_contents for " +
                                std::to_string(request.inputs_size()) + " inputs");
  }
  return layout;
}

}  // namespace

std::string WireDatatype(const std::string& manifest_dtype) {
  const DtypeInfo* d = DtypeByName(manifest_dtype);
  return d ? d->wire : "";
}

Status CheckByteSize(const DtypeInfo& dtype, const std::vector<int64_t>& shape, size_t size,
                     std::string_view holder) {
  CHORUS_ASSIGN_OR_RETURN(const int64_t elements, ElementCount(shape));
  const size_t expected = static_cast<size_t>(elements) * dtype.element_size;
  if (size == expected) return OkStatus();
  return InvalidArgumentError(std::string(holder) + " " + std::to_string(size) + " bytes; shape " +
                              ShapeText(shape) + " of " + dtype.wire + " needs " +
                              std::to_string(expected));
}

Status CheckInputShape(const std::string& name, const std::vector<int64_t>& shape,
                       const TensorSpec& spec, const Batching& batching) {
  bool matches = shape.size() == spec.shape.size();
  for (size_t d = 0; matches && d < shape.size(); ++d) {
    matches = shape[d] >= 0 && (spec.shape[d] == -1 || spec.shape[d] == shape[d]);
  }
  if (!matches) {
    return Invalid(
        name, "shape " + ShapeText(shape) + " does not match the model's " + ShapeText(spec.shape));
  }
  if (batching.batchable && batching.max_batch_size > 0 &&
      static_cast<int64_t>(shape.size()) > batching.batch_dim &&
      shape[batching.batch_dim] > batching.max_batch_size) {
    return Invalid(name, "batch of " + std::to_string(shape[batching.batch_dim]) +
                             " exceeds the model's maximum of " +
                             std::to_string(batching.max_batch_size));
  }
  return OkStatus();
}

Status CheckBatchRows(const std::vector<std::vector<int64_t>>& shapes, const Manifest& manifest) {
  if (!manifest.batching.batchable) return OkStatus();
  const size_t dim = manifest.batching.batch_dim;
  std::optional<int64_t> rows;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (shapes[i].size() <= dim) continue;
    if (!rows) {
      rows = shapes[i][dim];
    } else if (shapes[i][dim] != *rows) {
      return Invalid(manifest.inputs[i].name, std::to_string(shapes[i][dim]) +
                                                  " rows along the batch dimension; " +
                                                  "the other inputs have " + std::to_string(*rows));
    }
  }
  return OkStatus();
}

StatusOr<std::vector<WireInput>> CheckInputs(const inference::ModelInferRequest& request,
                                             const Manifest& manifest,
                                             const SharedMemoryRegistry* shared_memory) {
  CHORUS_ASSIGN_OR_RETURN(const ContentsLayout layout, LayoutOf(request));
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < manifest.inputs.size(); ++i) position[manifest.inputs[i].name] = i;
  std::vector<std::optional<WireInput>> inputs(manifest.inputs.size());
  int next_raw = 0;
  for (int k = 0; k < request.inputs_size(); ++k) {
    const InputTensor& input = request.inputs(k);
    auto it = position.find(input.name());
    if (it == position.end()) return Invalid(input.name(), "the model has no such input");
    if (inputs[it->second].has_value()) return Invalid(input.name(), "given twice");
    const TensorSpec& spec = manifest.inputs[it->second];
    const DtypeInfo* dtype = DtypeByName(spec.dtype);
    CHORUS_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                            CheckDatatypeAndShape(input, spec, dtype, manifest.batching));
    std::optional<std::string_view> raw;
    if (!layout.in_memory[k] && request.raw_input_contents_size() > 0) {
      raw = request.raw_input_contents(layout.raw_for_every ? k : next_raw++);
    }
    CHORUS_ASSIGN_OR_RETURN(
        WireInput decoded,
        layout.in_memory[k]
            ? FromSharedMemory(input, *layout.in_memory[k], shared_memory, *dtype, shape)
            : DecodeContents(input, raw ? &*raw : nullptr, *dtype, shape, manifest.model_name));
    decoded.dtype = dtype;
    decoded.shape = std::move(shape);
    inputs[it->second] = std::move(decoded);
  }
  std::vector<WireInput> checked;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i] && manifest.inputs[i].optional) {
      checked.emplace_back();  // left out: no dtype
      shapes.emplace_back();
      continue;
    }
    if (!inputs[i]) return Invalid(manifest.inputs[i].name, "missing (a required input)");
    shapes.push_back(inputs[i]->shape);
    checked.push_back(std::move(*inputs[i]));
  }
  CHORUS_RETURN_IF_ERROR(CheckBatchRows(shapes, manifest));
  return checked;
}

}  // namespace chorus
