#include "server/python_backend/src/request_handle.h"

#include <ATen/ATen.h>

#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "chorus/interpreter/host_object.h"
#include "chorus/package/dtype.h"
#include "chorus/serving/model_values.h"

namespace chorus::python_backend {
namespace {

using TensorDict = c10::Dict<std::string, at::Tensor>;
using ShapeDict = c10::Dict<std::string, c10::List<int64_t>>;

// Triton's TRITONSERVER_Error codes (pb_utils.TritonError) as chorus' statuses,
// mapped as Triton maps them to gRPC codes.
StatusCode StatusCodeOfTritonError(int64_t code) {
  switch (code) {
    case 1:
      return StatusCode::kInternal;
    case 2:
      return StatusCode::kNotFound;
    case 3:
      return StatusCode::kInvalidArgument;
    case 4:
      return StatusCode::kUnavailable;
    case 5:
      return StatusCode::kUnimplemented;
    case 6:
      return StatusCode::kAlreadyExists;
    case 7:
      return StatusCode::kCancelled;
    default:
      return StatusCode::kUnknown;
  }
}

// A BYTES tensor in its raw layout, as a uint8 tensor (no copy of the bytes
// beyond the one serialization).
at::Tensor RawBytesTensor(std::string raw) {
  auto* owned = new std::string(std::move(raw));
  return at::from_blob(
      owned->data(), {static_cast<int64_t>(owned->size())}, [owned](void*) { delete owned; },
      at::TensorOptions().dtype(at::kByte));
}

std::string ParametersJson(const Parameters& parameters) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& entry : parameters) {
    const std::string& name = entry.first;  // clang's lambdas cannot capture bindings
    std::visit([&out, &name](const auto& v) { out[name] = v; }, entry.second);
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

using Args = std::vector<c10::IValue>;

Status CheckArgCount(const Args& args, size_t count, const char* method) {
  if (args.size() == count) return OkStatus();
  return InvalidArgumentError(std::string(method) + "() takes " + std::to_string(count) +
                              " arguments, got " + std::to_string(args.size()));
}

// send()'s outputs: {name: tensor}.
StatusOr<std::vector<std::pair<std::string, at::Tensor>>> OutputsArg(const c10::IValue& value) {
  std::vector<std::pair<std::string, at::Tensor>> outputs;
  if (!value.isGenericDict()) return InvalidArgumentError("send(): outputs must be a dict");
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      return InvalidArgumentError("send(): outputs must map names to tensors");
    }
    outputs.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
  }
  return outputs;
}

// send()'s BYTES outputs' shapes: {name: [int]}.
StatusOr<std::map<std::string, std::vector<int64_t>>> ShapesArg(const c10::IValue& value) {
  std::map<std::string, std::vector<int64_t>> shapes;
  if (!value.isGenericDict()) return InvalidArgumentError("send(): bytes_shapes must be a dict");
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isList()) {
      return InvalidArgumentError("send(): bytes_shapes must map names to lists of ints");
    }
    std::vector<int64_t>& shape = shapes[entry.key().toStringRef()];
    for (const c10::IValue& dim : entry.value().toListRef()) {
      if (!dim.isInt()) return InvalidArgumentError("send(): a BYTES shape holds ints only");
      shape.push_back(dim.toInt());
    }
  }
  return shapes;
}

// send()'s response parameters: {name: bool, int or str}.
StatusOr<Parameters> ParametersArg(const c10::IValue& value) {
  Parameters parameters;
  if (!value.isGenericDict()) return InvalidArgumentError("send(): parameters must be a dict");
  for (const auto& entry : value.toGenericDict()) {
    const c10::IValue& v = entry.value();
    if (!entry.key().isString() || !(v.isBool() || v.isInt() || v.isString())) {
      return InvalidArgumentError("send(): parameters must map names to bool, int or str");
    }
    ParameterValue& slot = parameters[entry.key().toStringRef()];
    if (v.isBool()) {
      slot = v.toBool();
    } else if (v.isInt()) {
      slot = v.toInt();
    } else {
      slot = v.toStringRef();
    }
  }
  return parameters;
}

// One request as the model's code sees it; the model answers through it.
class Handle : public HostObject {
 public:
  Handle(std::shared_ptr<OpenRequest> request, std::shared_ptr<const Manifest> signature)
      : request_(std::move(request)), signature_(std::move(signature)) {}
  // The model let go of the request: one never answered fails.
  ~Handle() override {
    request_->Fail(InternalError("the model released the request without a final response"));
  }

  const std::vector<Method>& methods() const override;
  const char* type_name() const override { return "PythonBackendRequest"; }

  const InferenceRequest& request() const { return request_->request(); }

  // The inputs given, BYTES ones in their raw layout. The request's own
  // tensors: the conversion into Python makes each interpreter its alias.
  TensorDict Inputs() const {
    TensorDict inputs;
    const std::vector<c10::IValue>& values = request().inputs;
    for (size_t i = 0; i < values.size() && i < signature_->inputs.size(); ++i) {
      const c10::IValue& value = values[i];
      if (value.isTensor()) {
        inputs.insert(signature_->inputs[i].name, value.toTensor());
      } else if (!value.isNone()) {
        StatusOr<StringTensor> strings = StringTensorFromIValue(value);
        TORCH_CHECK(strings.ok(), strings.status().ToString());
        inputs.insert(signature_->inputs[i].name, RawBytesTensor(StringsToRaw(strings->elements)));
      }
    }
    return inputs;
  }

  ShapeDict BytesShapes() const {
    ShapeDict shapes;
    const std::vector<c10::IValue>& values = request().inputs;
    for (size_t i = 0; i < values.size() && i < signature_->inputs.size(); ++i) {
      if (values[i].isTensor() || values[i].isNone()) continue;
      shapes.insert(signature_->inputs[i].name, c10::List<int64_t>(ShapeOf(values[i])));
    }
    return shapes;
  }

  // send(outputs, bytes_shapes, final, error_code, error_message, parameters):
  // one response; error_code >= 0 (a TRITONSERVER_Error code) makes it an error.
  Status Send(Args& args) {
    CHORUS_RETURN_IF_ERROR(CheckArgCount(args, 6, "send"));
    if (!args[2].isBool() || !args[3].isInt() || !args[4].isString()) {
      return InvalidArgumentError(
          "send(): final, error_code and error_message must be bool, int and str");
    }
    ModelResponse response;
    response.final = args[2].toBool();
    CHORUS_ASSIGN_OR_RETURN(response.parameters, ParametersArg(args[5]));
    const int64_t error_code = args[3].toInt();
    if (error_code >= 0) {
      response.status = Status(StatusCodeOfTritonError(error_code), args[4].toStringRef());
    } else {
      CHORUS_ASSIGN_OR_RETURN(auto outputs, OutputsArg(args[0]));
      CHORUS_ASSIGN_OR_RETURN(auto bytes_shapes, ShapesArg(args[1]));
      if (!outputs.empty()) {
        CHORUS_ASSIGN_OR_RETURN(response.outputs, Arrange(outputs, bytes_shapes));
      }
    }
    return request_->Send(std::move(response));
  }

 private:
  // `outputs` by name into the signature's output order (None where left
  // out), BYTES ones read back from their raw layout.
  StatusOr<std::vector<c10::IValue>> Arrange(
      const std::vector<std::pair<std::string, at::Tensor>>& outputs,
      const std::map<std::string, std::vector<int64_t>>& bytes_shapes) const {
    std::vector<c10::IValue> arranged(signature_->outputs.size());
    for (const auto& [name, output] : outputs) {
      auto spec = std::find_if(signature_->outputs.begin(), signature_->outputs.end(),
                               [&name = name](const TensorSpec& s) { return s.name == name; });
      if (spec == signature_->outputs.end()) continue;  // not in its config: dropped (Triton's)
      c10::IValue& slot = arranged[spec - signature_->outputs.begin()];
      const at::Tensor tensor = output.contiguous();
      auto shape = bytes_shapes.find(name);
      if (shape == bytes_shapes.end()) {
        slot = tensor;
        continue;
      }
      const std::string_view raw(static_cast<const char*>(tensor.data_ptr()), tensor.numel());
      StatusOr<StringTensor> strings = StringTensorFromRaw(shape->second, raw);
      if (!strings.ok()) return strings.status().Annotate("output \"" + name + "\"");
      slot = StringTensorToIValue(std::move(*strings));
    }
    return arranged;
  }

  const std::shared_ptr<OpenRequest> request_;
  const std::shared_ptr<const Manifest> signature_;
};

// A method of no arguments answering `get(handle)`.
template <typename Get>
HostObject::Method Getter(std::string name, Get get) {
  return HostObject::Bind<Handle>(std::move(name), false,
                                  [get](Handle& self, Args& args) -> StatusOr<c10::IValue> {
                                    if (!args.empty())
                                      return InvalidArgumentError("this method takes no arguments");
                                    return c10::IValue(get(self));
                                  });
}

const std::vector<HostObject::Method>& Handle::methods() const {
  static const std::vector<Method> kMethods = {
      Getter("request_id", [](Handle& self) { return self.request().id; }),
      Getter("correlation_id",
             [](Handle& self) -> int64_t {
               const auto* id = std::get_if<uint64_t>(&self.request().correlation_id);
               return id == nullptr ? 0 : static_cast<int64_t>(*id);
             }),
      Getter("correlation_id_string",
             [](Handle& self) -> std::string {
               const auto* id = std::get_if<std::string>(&self.request().correlation_id);
               return id == nullptr ? std::string() : *id;
             }),
      Getter("flags", [](Handle& self) -> int64_t { return self.request().flags; }),
      Getter("parameters", [](Handle& self) { return ParametersJson(self.request().parameters); }),
      Getter("timeout", [](Handle& self) -> int64_t { return self.request().timeout.count(); }),
      Getter("is_cancelled",
             [](Handle& self) {
               const auto& cancelled = self.request().cancelled;
               return cancelled != nullptr && cancelled->load();
             }),
      // Releases the GIL: the answer is written to its client's socket here.
      Bind<Handle>("send", true,
                   [](Handle& self, Args& args) -> StatusOr<c10::IValue> {
                     CHORUS_RETURN_IF_ERROR(self.Send(args));
                     return c10::IValue();
                   }),
  };
  return kMethods;
}

}  // namespace

c10::IValue ReceivedRequest(std::shared_ptr<OpenRequest> request,
                            std::shared_ptr<const Manifest> signature) {
  auto handle = c10::make_intrusive<Handle>(std::move(request), std::move(signature));
  c10::List<std::string> requested;
  for (const std::string& name : handle->request().requested_outputs) requested.push_back(name);
  TensorDict inputs = handle->Inputs();
  ShapeDict bytes_shapes = handle->BytesShapes();
  return c10::ivalue::Tuple::create({HostObjectValue(std::move(handle)), std::move(inputs),
                                     std::move(bytes_shapes), std::move(requested)});
}

}  // namespace chorus::python_backend
