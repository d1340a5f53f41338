#include "server/src/tensor_codec.h"

#include <cstring>
#include <limits>
#include <map>
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
  T* out = tensor.data_ptr<T>();
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

// The tensor held by the typed field that matches `dtype`, after checking it
// holds one value per element of `shape` (`elements`).
StatusOr<at::Tensor> FromTypedContents(const inference::InferTensorContents& c,
                                       const DtypeInfo& dtype, const std::string& name,
                                       const std::vector<int64_t>& shape, int64_t elements) {
  int count = 0;
  switch (dtype.dtype) {
    case Dtype::kBool:
      count = c.bool_contents_size();
      break;
    case Dtype::kInt8:
    case Dtype::kInt16:
    case Dtype::kInt32:
      count = c.int_contents_size();
      break;
    case Dtype::kInt64:
      count = c.int64_contents_size();
      break;
    case Dtype::kUint8:
      count = c.uint_contents_size();
      break;
    case Dtype::kFloat32:
      count = c.fp32_contents_size();
      break;
    case Dtype::kFloat64:
      count = c.fp64_contents_size();
      break;
    default:
      return Invalid(name, std::string(dtype.wire) + " travels only as raw contents");
  }
  if (count != elements) {
    return Invalid(name, std::to_string(count) + " typed values for " + std::to_string(elements) +
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
    case Dtype::kFloat32:
      return FromSameType(c.fp32_contents(), shape, dtype);
    default:
      return FromSameType(c.fp64_contents(), shape, dtype);
  }
}

// `tensors`, if every input of a batchable model that has the batch
// dimension has the same number of rows along it (they are batched together).
StatusOr<std::vector<at::Tensor>> CheckBatchRows(std::vector<at::Tensor> tensors,
                                                 const Manifest& manifest) {
  const int64_t dim = manifest.batching.batch_dim;
  if (!manifest.batching.batchable) return tensors;
  const at::Tensor* first = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].dim() <= dim) continue;
    if (first == nullptr) {
      first = &tensors[i];
    } else if (tensors[i].size(dim) != first->size(dim)) {
      return Invalid(manifest.inputs[i].name,
                     std::to_string(tensors[i].size(dim)) + " rows along the batch dimension; " +
                         "the other inputs have " + std::to_string(first->size(dim)));
    }
  }
  return tensors;
}

}  // namespace

StatusOr<at::Tensor> TensorFromRaw(const std::string& datatype, const std::vector<int64_t>& shape,
                                   const std::string& raw) {
  const DtypeInfo* dtype = DtypeByWireName(datatype);
  if (dtype == nullptr) return InvalidArgumentError("unknown datatype \"" + datatype + "\"");
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

std::string WireDatatype(const std::string& manifest_dtype) {
  const DtypeInfo* d = DtypeByName(manifest_dtype);
  return d ? d->wire : "";
}

StatusOr<std::vector<at::Tensor>> DecodeInputs(const inference::ModelInferRequest& request,
                                               const Manifest& manifest) {
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    return InvalidArgumentError(std::to_string(request.raw_input_contents_size()) +
                                " raw_input_contents for " + std::to_string(request.inputs_size()) +
                                " inputs");
  }
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < manifest.inputs.size(); ++i) position[manifest.inputs[i].name] = i;
  std::vector<at::Tensor> tensors(manifest.inputs.size());
  for (int k = 0; k < request.inputs_size(); ++k) {
    const auto& input = request.inputs(k);
    auto it = position.find(input.name());
    if (it == position.end()) return Invalid(input.name(), "the model has no such input");
    if (tensors[it->second].defined()) return Invalid(input.name(), "given twice");
    const TensorSpec& spec = manifest.inputs[it->second];
    const DtypeInfo* dtype = DtypeByName(spec.dtype);
    if (dtype == nullptr || input.datatype() != dtype->wire) {
      return Invalid(input.name(), "expected datatype " + WireDatatype(spec.dtype) + ", got " +
                                       (input.datatype().empty() ? "none" : input.datatype()));
    }
    std::vector<int64_t> shape(input.shape().begin(), input.shape().end());
    bool matches = shape.size() == spec.shape.size();
    for (size_t d = 0; matches && d < shape.size(); ++d) {
      matches = shape[d] >= 0 && (spec.shape[d] == -1 || spec.shape[d] == shape[d]);
    }
    if (!matches) {
      return Invalid(input.name(), "shape " + ShapeText(shape) + " does not match the model's " +
                                       ShapeText(spec.shape));
    }
    const auto& batching = manifest.batching;
    if (batching.batchable && batching.max_batch_size > 0 &&
        static_cast<int64_t>(shape.size()) > batching.batch_dim &&
        shape[batching.batch_dim] > batching.max_batch_size) {
      return Invalid(input.name(), "batch of " + std::to_string(shape[batching.batch_dim]) +
                                       " exceeds the model's maximum of " +
                                       std::to_string(batching.max_batch_size));
    }
    const bool typed = input.has_contents() && HasTypedContents(input.contents());
    if (raw && typed) {
      return Invalid(input.name(),
                     "has typed contents and the request has raw_input_contents; "
                     "use one or the other");
    }
    at::Tensor tensor;
    if (raw) {
      StatusOr<at::Tensor> decoded =
          TensorFromRaw(input.datatype(), shape, request.raw_input_contents(k));
      if (!decoded.ok()) return Invalid(input.name(), decoded.status().message());
      tensor = std::move(decoded).value();
    } else {
      StatusOr<int64_t> elements = ElementCount(shape);
      if (!elements.ok()) return Invalid(input.name(), elements.status().message());
      if (typed) {
        CHORUS_ASSIGN_OR_RETURN(
            tensor, FromTypedContents(input.contents(), *dtype, input.name(), shape, *elements));
      } else if (*elements == 0) {
        tensor = Empty(shape, *dtype);  // nothing to send
      } else {
        return Invalid(input.name(), "no contents (typed or raw)");
      }
    }
    tensors[it->second] = std::move(tensor);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) {
      return Invalid(manifest.inputs[i].name, "missing (the model needs every input)");
    }
  }
  return CheckBatchRows(tensors, manifest);
}

Status EncodeOutputs(const std::vector<at::Tensor>& outputs, const Manifest& manifest,
                     const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response) {
  std::set<std::string> wanted;
  for (const auto& requested : request.outputs()) {
    bool known = false;
    for (const TensorSpec& spec : manifest.outputs) known = known || spec.name == requested.name();
    if (!known) {
      return InvalidArgumentError("output \"" + requested.name() +
                                  "\": the model has no such output");
    }
    wanted.insert(requested.name());
  }
  // What the model returned must be what its signature (and ModelMetadata)
  // says: a client trusts the metadata (as Triton does, a mismatch fails).
  if (outputs.size() != manifest.outputs.size()) {
    return InternalError("the model returned " + std::to_string(outputs.size()) +
                         " outputs; its signature declares " +
                         std::to_string(manifest.outputs.size()));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const TensorSpec& spec = manifest.outputs[i];
    std::optional<Dtype> dtype = DtypeOf(outputs[i].scalar_type());
    if (!dtype) {
      return InternalError("output \"" + spec.name + "\" has a dtype the protocol cannot carry");
    }
    if (spec.dtype != InfoOf(*dtype).name) {
      return InternalError("output \"" + spec.name + "\": the model returned " +
                           InfoOf(*dtype).name + ", its signature declares " + spec.dtype);
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = manifest.outputs[i].name;
    if (!wanted.empty() && wanted.count(name) == 0) continue;
    at::Tensor tensor = outputs[i].contiguous();
    const Dtype dtype = *DtypeOf(tensor.scalar_type());
    auto* out = response->add_outputs();
    out->set_name(name);
    out->set_datatype(InfoOf(dtype).wire);
    for (int64_t size : tensor.sizes()) out->add_shape(size);
    response->add_raw_output_contents(static_cast<const char*>(tensor.data_ptr()),
                                      tensor.numel() * tensor.element_size());
  }
  return OkStatus();
}

}  // namespace chorus
