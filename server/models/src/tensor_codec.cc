#include "chorus/server/models/tensor_codec.h"

#include <ATen/EmptyTensor.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"

namespace chorus {
namespace {

Status Invalid(const std::string& input, const std::string& what) {
  return InvalidArgumentError("input \"" + input + "\": " + what);
}

at::TensorOptions OptionsOf(const DtypeInfo& dtype) {
  return at::TensorOptions().dtype(ScalarTypeOf(dtype.dtype));
}

// An uninitialized host tensor, straight from the CPU allocator: at::empty's
// trip through the dispatcher cost 4.6 us per request (p50, a 16-byte input,
// caches cold from the network), more than the copy it makes room for.
at::Tensor EmptyOnHost(const std::vector<int64_t>& shape, const DtypeInfo& dtype) {
  return at::detail::empty_cpu(shape, ScalarTypeOf(dtype.dtype));
}

// A tensor of `shape` holding `values` (a typed field, one value per element,
// each fitting: CheckInputs made sure), converted to `T`.
template <typename T, typename Values>
at::Tensor FromValues(const Values& values, const std::vector<int64_t>& shape,
                      const DtypeInfo& dtype) {
  at::Tensor tensor = EmptyOnHost(shape, dtype);
  T* out = static_cast<T*>(tensor.data_ptr());
  for (int i = 0; i < values.size(); ++i) out[i] = static_cast<T>(values[i]);
  return tensor;
}

at::Tensor FromTypedContents(const inference::InferTensorContents& c, const DtypeInfo& dtype,
                             const std::vector<int64_t>& shape) {
  switch (dtype.dtype) {
    case Dtype::kBool:
      return FromValues<bool>(c.bool_contents(), shape, dtype);
    case Dtype::kInt8:
      return FromValues<int8_t>(c.int_contents(), shape, dtype);
    case Dtype::kInt16:
      return FromValues<int16_t>(c.int_contents(), shape, dtype);
    case Dtype::kInt32:
      return FromValues<int32_t>(c.int_contents(), shape, dtype);
    case Dtype::kInt64:
      return FromValues<int64_t>(c.int64_contents(), shape, dtype);
    case Dtype::kUint8:
      return FromValues<uint8_t>(c.uint_contents(), shape, dtype);
    case Dtype::kUint16:
      return FromValues<uint16_t>(c.uint_contents(), shape, dtype);
    case Dtype::kUint32:
      return FromValues<uint32_t>(c.uint_contents(), shape, dtype);
    case Dtype::kUint64:
      return FromValues<uint64_t>(c.uint64_contents(), shape, dtype);
    case Dtype::kFloat32:
      return FromValues<float>(c.fp32_contents(), shape, dtype);
    default:
      return FromValues<double>(c.fp64_contents(), shape, dtype);
  }
}

// A copy of `bytes` as a tensor of `shape` (their size checked).
at::Tensor CopyOf(std::string_view bytes, const std::vector<int64_t>& shape,
                  const DtypeInfo& dtype) {
  at::Tensor tensor = EmptyOnHost(shape, dtype);
  if (!bytes.empty()) std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  return tensor;
}

// The value a checked input holds.
c10::IValue ValueOf(WireInput input) {
  if (input.dtype == nullptr) return c10::IValue();  // an optional input left out
  const DtypeInfo& dtype = *input.dtype;
  switch (input.source) {
    case WireInput::Source::kStrings:
      return StringTensorToIValue(std::move(input.strings));
    case WireInput::Source::kTyped:
      return FromTypedContents(*input.typed, dtype, input.shape);
    case WireInput::Source::kNone:
      return EmptyOnHost(input.shape, dtype);
    case WireInput::Source::kBytes:
      break;
  }
  const bool aligned = reinterpret_cast<uintptr_t>(input.bytes.data()) % dtype.element_size == 0;
  if (input.mapping == nullptr || !aligned) return CopyOf(input.bytes, input.shape, dtype);
  // Shared memory, no copy: the tensor keeps the mapping alive, even past an unregister.
  return at::from_blob(
      const_cast<char*>(input.bytes.data()), input.shape,
      [mapping = std::move(input.mapping)](void*) {}, OptionsOf(dtype));
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

}  // namespace

StatusOr<at::Tensor> TensorFromRaw(const std::string& datatype, const std::vector<int64_t>& shape,
                                   const std::string& raw) {
  const DtypeInfo* dtype = DtypeByWireName(datatype);
  if (dtype == nullptr) return InvalidArgumentError("unknown datatype \"" + datatype + "\"");
  if (dtype->dtype == Dtype::kString) return InvalidArgumentError("BYTES is not a tensor dtype");
  CHORUS_RETURN_IF_ERROR(CheckByteSize(*dtype, shape, raw.size(), "raw contents hold"));
  return CopyOf(raw, shape, *dtype);
}

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
    CHORUS_RETURN_IF_ERROR(CheckInputShape(name, ShapeOf(value), *spec, manifest.batching));
    values[spec - manifest.inputs.begin()] = std::move(value);
  }
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].isNone() && manifest.inputs[i].optional) {
      shapes.emplace_back();
      continue;
    }
    if (values[i].isNone()) return Invalid(manifest.inputs[i].name, "missing (a required input)");
    shapes.push_back(ShapeOf(values[i]));
  }
  CHORUS_RETURN_IF_ERROR(CheckBatchRows(shapes, manifest));
  return values;
}

StatusOr<std::vector<c10::IValue>> DecodeInputs(const inference::ModelInferRequest& request,
                                                const Manifest& manifest,
                                                const SharedMemoryRegistry* shared_memory) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<WireInput> inputs,
                          CheckInputs(request, manifest, shared_memory));
  std::vector<c10::IValue> values;
  values.reserve(inputs.size());
  for (WireInput& input : inputs) values.push_back(ValueOf(std::move(input)));
  return values;
}

}  // namespace chorus
