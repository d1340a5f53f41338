#include "chorus/server/models/tensor_codec.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"

namespace chorus {
namespace {

Status Invalid(const std::string& input, const std::string& what) {
  return InvalidArgumentError("input \"" + input + "\": " + what);
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

bool HasTypedContents(const inference::InferTensorContents& c) {
  return c.bool_contents_size() || c.int_contents_size() || c.int64_contents_size() ||
         c.uint_contents_size() || c.uint64_contents_size() || c.fp32_contents_size() ||
         c.fp64_contents_size() || c.bytes_contents_size();
}

// The number of elements of `shape`; INVALID_ARGUMENT for a negative
// dimension or a count whose bytes could not be addressed. Checked before
// anything is allocated, so a request cannot make the server allocate what
// its contents do not back.
StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape) {
  constexpr int64_t kMaxElements = int64_t{1} << 56;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgumentError("negative dimension in shape " + ShapeText(shape));
    if (d != 0 && n > kMaxElements / d) {
      return InvalidArgumentError("shape " + ShapeText(shape) + " has too many elements");
    }
    n *= d;
  }
  return n;
}

at::Tensor Empty(const std::vector<int64_t>& shape, const DtypeInfo& dtype) {
  return at::empty(shape, at::TensorOptions().dtype(ScalarTypeOf(dtype.dtype)));
}

// Integer values of a typed field, refused unless each fits `T`.
template <typename T, typename Values>
StatusOr<at::Tensor> FromIntegers(const Values& values, const std::vector<int64_t>& shape,
                                  const DtypeInfo& dtype, const std::string& name) {
  at::Tensor tensor = Empty(shape, dtype);
  T* out = static_cast<T*>(tensor.data_ptr());
  for (int i = 0; i < values.size(); ++i) {
    if (values[i] < std::numeric_limits<T>::min() || values[i] > std::numeric_limits<T>::max()) {
      return Invalid(name, "value " + std::to_string(values[i]) + " does not fit " + dtype.wire);
    }
    out[i] = static_cast<T>(values[i]);
  }
  return tensor;
}

// Values of a typed field whose C++ type is the tensor's.
template <typename Values>
StatusOr<at::Tensor> FromSameType(const Values& values, const std::vector<int64_t>& shape,
                                  const DtypeInfo& dtype) {
  at::Tensor tensor = Empty(shape, dtype);
  if (values.size() > 0) {
    std::memcpy(tensor.data_ptr(), values.data(), values.size() * dtype.element_size);
  }
  return tensor;
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

// The tensor held by the typed field that matches `dtype`, after checking it
// holds one value per element of `shape` (`elements`).
StatusOr<at::Tensor> FromTypedContents(const inference::InferTensorContents& c,
                                       const DtypeInfo& dtype, const std::string& name,
                                       const std::vector<int64_t>& shape, int64_t elements) {
  const std::optional<int> count = TypedCount(c, dtype.dtype);
  if (!count.has_value()) {
    return Invalid(name, std::string(dtype.wire) + " travels only as raw contents");
  }
  if (*count != elements) {
    return Invalid(name, std::to_string(*count) + " typed values for " + std::to_string(elements) +
                             " elements");
  }
  switch (dtype.dtype) {
    case Dtype::kBool:
      return FromIntegers<bool>(c.bool_contents(), shape, dtype, name);
    case Dtype::kInt8:
      return FromIntegers<int8_t>(c.int_contents(), shape, dtype, name);
    case Dtype::kInt16:
      return FromIntegers<int16_t>(c.int_contents(), shape, dtype, name);
    case Dtype::kInt32:
      return FromSameType(c.int_contents(), shape, dtype);
    case Dtype::kInt64:
      return FromSameType(c.int64_contents(), shape, dtype);
    case Dtype::kUint8:
      return FromIntegers<uint8_t>(c.uint_contents(), shape, dtype, name);
    case Dtype::kUint16:
      return FromIntegers<uint16_t>(c.uint_contents(), shape, dtype, name);
    case Dtype::kUint32:
      return FromSameType(c.uint_contents(), shape, dtype);
    case Dtype::kUint64:
      return FromSameType(c.uint64_contents(), shape, dtype);
    case Dtype::kFloat32:
      return FromSameType(c.fp32_contents(), shape, dtype);
    default:
      return FromSameType(c.fp64_contents(), shape, dtype);
  }
}

// `values`, if every input of a batchable model that has the batch
// dimension has the same number of rows along it (they are batched together).
StatusOr<std::vector<c10::IValue>> CheckBatchRows(std::vector<c10::IValue> values,
                                                  const Manifest& manifest) {
  const size_t dim = manifest.batching.batch_dim;
  if (!manifest.batching.batchable) return values;
  std::optional<int64_t> rows;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::vector<int64_t> shape = ShapeOf(values[i]);
    if (shape.size() <= dim) continue;
    if (!rows) {
      rows = shape[dim];
    } else if (shape[dim] != *rows) {
      return Invalid(manifest.inputs[i].name, std::to_string(shape[dim]) +
                                                  " rows along the batch dimension; " +
                                                  "the other inputs have " + std::to_string(*rows));
    }
  }
  return values;
}

// The string input `name` of `shape` from the request's raw or typed contents.
StatusOr<c10::IValue> DecodeStrings(const inference::ModelInferRequest::InferInputTensor& input,
                                    const std::vector<int64_t>& shape, const std::string* raw) {
  CHORUS_ASSIGN_OR_RETURN(const int64_t elements, ElementCount(shape));
  StringTensor tensor;
  if (raw != nullptr) {
    StatusOr<StringTensor> decoded = StringTensorFromRaw(shape, *raw);
    if (!decoded.ok()) return Invalid(input.name(), decoded.status().message());
    tensor = std::move(decoded).value();
  } else {
    const auto& c = input.contents();
    if (HasTypedContents(c) && c.bytes_contents_size() == 0 && elements > 0) {
      return Invalid(input.name(), "BYTES values travel in bytes_contents");
    }
    if (c.bytes_contents_size() != elements) {
      return Invalid(input.name(), std::to_string(c.bytes_contents_size()) + " typed values for " +
                                       std::to_string(elements) + " elements");
    }
    tensor.shape = shape;
    tensor.elements.assign(c.bytes_contents().begin(), c.bytes_contents().end());
  }
  return StringTensorToIValue(std::move(tensor));
}

}  // namespace

StatusOr<at::Tensor> TensorFromRaw(const std::string& datatype, const std::vector<int64_t>& shape,
                                   const std::string& raw) {
  const DtypeInfo* dtype = DtypeByWireName(datatype);
  if (dtype == nullptr) return InvalidArgumentError("unknown datatype \"" + datatype + "\"");
  if (dtype->dtype == Dtype::kString) return InvalidArgumentError("BYTES is not a tensor dtype");
  CHORUS_ASSIGN_OR_RETURN(const int64_t elements, ElementCount(shape));
  const size_t expected = static_cast<size_t>(elements) * dtype->element_size;
  if (raw.size() != expected) {
    return InvalidArgumentError("raw contents hold " + std::to_string(raw.size()) +
                                " bytes; shape " + ShapeText(shape) + " of " + datatype +
                                " needs " + std::to_string(expected));
  }
  at::Tensor tensor = Empty(shape, *dtype);
  if (expected > 0) std::memcpy(tensor.data_ptr(), raw.data(), expected);
  return tensor;
}

StatusOr<StringTensor> StringTensorFromRaw(const std::vector<int64_t>& shape,
                                           const std::string& raw) {
  CHORUS_ASSIGN_OR_RETURN(const int64_t elements, ElementCount(shape));
  StringTensor tensor;
  tensor.shape = shape;
  size_t at = 0;
  while (at < raw.size()) {
    if (raw.size() - at < 4) {
      return InvalidArgumentError("raw BYTES contents end inside the length of element " +
                                  std::to_string(tensor.elements.size()));
    }
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + at);
    const uint32_t length = p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t{p[3]} << 24);
    at += 4;
    if (raw.size() - at < length) {
      return InvalidArgumentError("raw BYTES element " + std::to_string(tensor.elements.size()) +
                                  " claims " + std::to_string(length) + " bytes; " +
                                  std::to_string(raw.size() - at) + " are left");
    }
    if (static_cast<int64_t>(tensor.elements.size()) == elements) {
      return InvalidArgumentError("raw BYTES contents hold more than the " +
                                  std::to_string(elements) + " elements of shape " +
                                  ShapeText(shape));
    }
    tensor.elements.emplace_back(raw, at, length);
    at += length;
  }
  if (static_cast<int64_t>(tensor.elements.size()) != elements) {
    return InvalidArgumentError("raw BYTES contents hold " +
                                std::to_string(tensor.elements.size()) + " elements; shape " +
                                ShapeText(shape) + " needs " + std::to_string(elements));
  }
  return tensor;
}

std::string StringsToRaw(const std::vector<std::string>& elements) {
  size_t size = 0;
  for (const std::string& element : elements) size += 4 + element.size();
  std::string raw;
  raw.reserve(size);
  for (const std::string& element : elements) {
    const uint32_t length = static_cast<uint32_t>(element.size());
    for (int shift = 0; shift < 32; shift += 8) raw.push_back(static_cast<char>(length >> shift));
    raw += element;
  }
  return raw;
}

std::string WireDatatype(const std::string& manifest_dtype) {
  const DtypeInfo* d = DtypeByName(manifest_dtype);
  return d ? d->wire : "";
}

namespace {

using InputTensor = inference::ModelInferRequest::InferInputTensor;

// `shape` of input `name` against its spec (any-size dimensions -1) and
// the model's largest batch.
Status CheckShape(const std::string& name, const std::vector<int64_t>& shape,
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

// The dtype name (the manifest's) of a tensor or string tensor `value`.
StatusOr<std::string> DtypeNameOf(const std::string& name, const c10::IValue& value) {
  if (value.isTensor()) {
    std::optional<Dtype> dtype = DtypeOf(value.toTensor().scalar_type());
    if (!dtype) return Invalid(name, "a tensor of a dtype the model cannot take");
    return std::string(InfoOf(*dtype).name);
  }
  if (IsStringValue(value)) {
    CHORUS_RETURN_IF_ERROR(
        StringTensorFromIValue(value).status().Annotate("input \"" + name + "\""));
    return std::string(InfoOf(Dtype::kString).name);
  }
  return Invalid(name, "must be a tensor or a string tensor (a str, or nested lists of str)");
}

// `input`'s shape, checked against its spec: datatype, shape (any-size
// dimensions -1) and the model's largest batch.
StatusOr<std::vector<int64_t>> CheckInput(const InputTensor& input, const TensorSpec& spec,
                                          const DtypeInfo* dtype, const Batching& batching) {
  if (dtype == nullptr || input.datatype() != dtype->wire) {
    return Invalid(input.name(), "expected datatype " + WireDatatype(spec.dtype) + ", got " +
                                     (input.datatype().empty() ? "none" : input.datatype()));
  }
  std::vector<int64_t> shape(input.shape().begin(), input.shape().end());
  CHORUS_RETURN_IF_ERROR(CheckShape(input.name(), shape, spec, batching));
  return shape;
}

// `input`'s value, from `raw` contents (nullptr: its typed contents).
StatusOr<c10::IValue> DecodeInput(const InputTensor& input, const std::string* raw,
                                  const DtypeInfo& dtype, const std::vector<int64_t>& shape) {
  const bool typed = input.has_contents() && HasTypedContents(input.contents());
  if (raw != nullptr && typed) {
    return Invalid(input.name(),
                   "has typed contents and the request has raw_input_contents; "
                   "use one or the other");
  }
  if (dtype.dtype == Dtype::kString) return DecodeStrings(input, shape, raw);
  if (raw != nullptr) {
    StatusOr<at::Tensor> decoded = TensorFromRaw(input.datatype(), shape, *raw);
    if (!decoded.ok()) return Invalid(input.name(), decoded.status().message());
    return c10::IValue(std::move(decoded).value());
  }
  StatusOr<int64_t> elements = ElementCount(shape);
  if (!elements.ok()) return Invalid(input.name(), elements.status().message());
  if (typed) {
    CHORUS_ASSIGN_OR_RETURN(at::Tensor tensor, FromTypedContents(input.contents(), dtype,
                                                                 input.name(), shape, *elements));
    return c10::IValue(std::move(tensor));
  }
  if (*elements == 0) return c10::IValue(Empty(shape, dtype));  // nothing to send
  return Invalid(input.name(), "no contents (typed or raw)");
}

}  // namespace

namespace {

// `input`'s value from the shared memory `ref` names.
StatusOr<c10::IValue> FromSharedMemory(const InputTensor& input, const SharedMemoryRef& ref,
                                       const SharedMemoryRegistry* registry, const DtypeInfo& dtype,
                                       const std::vector<int64_t>& shape) {
  if (registry == nullptr) return Invalid(input.name(), "shared memory is not served here");
  StatusOr<SharedMemorySpan> span = registry->Find(ref.region, ref.offset, ref.byte_size);
  if (!span.ok()) return Invalid(input.name(), span.status().message());
  if (dtype.dtype == Dtype::kString) {
    const std::string raw(span->data, span->size);
    return DecodeStrings(input, shape, &raw);
  }
  CHORUS_ASSIGN_OR_RETURN(const int64_t elements, ElementCount(shape));
  const size_t expected = static_cast<size_t>(elements) * dtype.element_size;
  if (span->size != expected) {
    return Invalid(input.name(), "shared memory holds " + std::to_string(span->size) +
                                     " bytes; shape " + ShapeText(shape) + " of " + dtype.wire +
                                     " needs " + std::to_string(expected));
  }
  const auto options = at::TensorOptions().dtype(ScalarTypeOf(dtype.dtype));
  if (reinterpret_cast<uintptr_t>(span->data) % dtype.element_size != 0) {
    at::Tensor copy = at::empty(shape, options);
    if (expected > 0) std::memcpy(copy.data_ptr(), span->data, expected);
    return c10::IValue(std::move(copy));
  }
  // No copy: the tensor keeps the mapping alive, even past an unregister.
  return c10::IValue(at::from_blob(
      span->data, shape, [mapping = span->mapping](void*) {}, options));
}

}  // namespace

StatusOr<std::vector<c10::IValue>> ArrangeInputs(NamedValues named, const Manifest& manifest) {
  std::vector<c10::IValue> values(manifest.inputs.size());
  for (auto& entry : named) {
    const std::string& name = entry.first;
    c10::IValue& value = entry.second;
    auto spec = std::find_if(manifest.inputs.begin(), manifest.inputs.end(),
                             [&](const TensorSpec& s) { return s.name == name; });
    if (spec == manifest.inputs.end()) return Invalid(name, "the model has no such input");
    CHORUS_ASSIGN_OR_RETURN(std::string dtype, DtypeNameOf(name, value));
    if (dtype != spec->dtype) return Invalid(name, "expected " + spec->dtype + ", got " + dtype);
    CHORUS_RETURN_IF_ERROR(CheckShape(name, ShapeOf(value), *spec, manifest.batching));
    values[spec - manifest.inputs.begin()] = std::move(value);
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].isNone()) {
      return Invalid(manifest.inputs[i].name, "missing (the model needs every input)");
    }
  }
  return CheckBatchRows(std::move(values), manifest);
}

StatusOr<std::vector<c10::IValue>> DecodeInputs(const inference::ModelInferRequest& request,
                                                const Manifest& manifest,
                                                const SharedMemoryRegistry* shared_memory) {
  // Raw contents come for every input, or for those not in shared memory.
  std::vector<std::optional<SharedMemoryRef>> in_memory(request.inputs_size());
  int in_memory_count = 0;
  for (int k = 0; k < request.inputs_size(); ++k) {
    const InputTensor& input = request.inputs(k);
    CHORUS_ASSIGN_OR_RETURN(in_memory[k],
                            SharedMemoryRefOf(input.parameters(), "input " + input.name()));
    in_memory_count += in_memory[k].has_value();
  }
  const int raw_count = request.raw_input_contents_size();
  const bool raw_for_every = raw_count == request.inputs_size();
  if (raw_count > 0 && !raw_for_every && raw_count != request.inputs_size() - in_memory_count) {
    return InvalidArgumentError(std::to_string(raw_count) + " raw_input_contents for " +
                                std::to_string(request.inputs_size()) + " inputs");
  }
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < manifest.inputs.size(); ++i) position[manifest.inputs[i].name] = i;
  std::vector<c10::IValue> values(manifest.inputs.size());
  int next_raw = 0;
  for (int k = 0; k < request.inputs_size(); ++k) {
    const InputTensor& input = request.inputs(k);
    auto it = position.find(input.name());
    if (it == position.end()) return Invalid(input.name(), "the model has no such input");
    if (!values[it->second].isNone()) return Invalid(input.name(), "given twice");
    const TensorSpec& spec = manifest.inputs[it->second];
    const DtypeInfo* dtype = DtypeByName(spec.dtype);
    CHORUS_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                            CheckInput(input, spec, dtype, manifest.batching));
    if (in_memory[k]) {
      CHORUS_ASSIGN_OR_RETURN(values[it->second],
                              FromSharedMemory(input, *in_memory[k], shared_memory, *dtype, shape));
      continue;
    }
    const std::string* raw = nullptr;
    if (raw_count > 0) raw = &request.raw_input_contents(raw_for_every ? k : next_raw++);
    CHORUS_ASSIGN_OR_RETURN(values[it->second], DecodeInput(input, raw, *dtype, shape));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].isNone()) {
      return Invalid(manifest.inputs[i].name, "missing (the model needs every input)");
    }
  }
  return CheckBatchRows(std::move(values), manifest);
}

}  // namespace chorus
