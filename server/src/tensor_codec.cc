#include "server/src/tensor_codec.h"

#include <cstring>
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

// Copies typed contents of the field that matches `dtype` into `tensor`.
Status FromTypedContents(const inference::InferTensorContents& c, const DtypeInfo& dtype,
                         const std::string& name, at::Tensor& tensor) {
  const int64_t n = tensor.numel();
  auto count_check = [&](int count) -> Status {
    if (count != n) {
      return Invalid(
          name, std::to_string(count) + " typed values for " + std::to_string(n) + " elements");
    }
    return OkStatus();
  };
  switch (dtype.dtype) {
    case Dtype::kBool: {
      CHORUS_RETURN_IF_ERROR(count_check(c.bool_contents_size()));
      auto* out = tensor.data_ptr<bool>();
      for (int64_t i = 0; i < n; ++i) out[i] = c.bool_contents(i);
      return OkStatus();
    }
    case Dtype::kInt8:
    case Dtype::kInt16:
    case Dtype::kInt32: {
      CHORUS_RETURN_IF_ERROR(count_check(c.int_contents_size()));
      at::Tensor values =
          at::tensor(std::vector<int32_t>(c.int_contents().begin(), c.int_contents().end()));
      tensor.view({-1}).copy_(values);
      return OkStatus();
    }
    case Dtype::kInt64: {
      CHORUS_RETURN_IF_ERROR(count_check(c.int64_contents_size()));
      std::memcpy(tensor.data_ptr(), c.int64_contents().data(), n * sizeof(int64_t));
      return OkStatus();
    }
    case Dtype::kUint8: {
      CHORUS_RETURN_IF_ERROR(count_check(c.uint_contents_size()));
      auto* out = tensor.data_ptr<uint8_t>();
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(c.uint_contents(i));
      return OkStatus();
    }
    case Dtype::kFloat32: {
      CHORUS_RETURN_IF_ERROR(count_check(c.fp32_contents_size()));
      std::memcpy(tensor.data_ptr(), c.fp32_contents().data(), n * sizeof(float));
      return OkStatus();
    }
    case Dtype::kFloat64: {
      CHORUS_RETURN_IF_ERROR(count_check(c.fp64_contents_size()));
      std::memcpy(tensor.data_ptr(), c.fp64_contents().data(), n * sizeof(double));
      return OkStatus();
    }
    default:
      return Invalid(name, std::string(dtype.wire) + " travels only as raw contents");
  }
}

int64_t ShapeElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

StatusOr<at::Tensor> TensorFromRaw(const std::string& datatype, const std::vector<int64_t>& shape,
                                   const std::string& raw) {
  const DtypeInfo* dtype = DtypeByWireName(datatype);
  if (dtype == nullptr) return InvalidArgumentError("unknown datatype \"" + datatype + "\"");
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgumentError("negative dimension in shape " + ShapeText(shape));
  }
  at::Tensor tensor = at::empty(shape, at::TensorOptions().dtype(ScalarTypeOf(dtype->dtype)));
  const size_t expected = tensor.numel() * tensor.element_size();
  if (raw.size() != expected) {
    return InvalidArgumentError("raw contents hold " + std::to_string(raw.size()) +
                                " bytes; shape " + ShapeText(shape) + " of " + datatype +
                                " needs " + std::to_string(expected));
  }
  std::memcpy(tensor.data_ptr(), raw.data(), expected);
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
    } else if (typed || ShapeElements(shape) == 0) {
      tensor = at::empty(shape, at::TensorOptions().dtype(ScalarTypeOf(dtype->dtype)));
      CHORUS_RETURN_IF_ERROR(FromTypedContents(input.contents(), *dtype, input.name(), tensor));
    } else {
      return Invalid(input.name(), "no contents (typed or raw)");
    }
    tensors[it->second] = std::move(tensor);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) {
      return Invalid(manifest.inputs[i].name, "missing (the model needs every input)");
    }
  }
  return tensors;
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
  for (size_t i = 0; i < outputs.size() && i < manifest.outputs.size(); ++i) {
    const std::string& name = manifest.outputs[i].name;
    if (!wanted.empty() && wanted.count(name) == 0) continue;
    at::Tensor tensor = outputs[i].contiguous();
    std::optional<Dtype> dtype = DtypeOf(tensor.scalar_type());
    if (!dtype) {
      return InternalError("output \"" + name + "\" has a dtype the protocol cannot carry");
    }
    auto* out = response->add_outputs();
    out->set_name(name);
    out->set_datatype(InfoOf(*dtype).wire);
    for (int64_t size : tensor.sizes()) out->add_shape(size);
    response->add_raw_output_contents(static_cast<const char*>(tensor.data_ptr()),
                                      tensor.numel() * tensor.element_size());
  }
  return OkStatus();
}

}  // namespace chorus
