#include "server/python_backend/src/request_handle.h"

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#include <nlohmann/json.hpp>

#include "chorus/interpreter/tensor_crossing.h"
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

class Handle : public torch::CustomClassHolder {
 public:
  Handle(std::shared_ptr<OpenRequest> request, std::shared_ptr<const Manifest> signature)
      : request_(std::move(request)), signature_(std::move(signature)) {}
  // The model let go of the request: one never answered fails.
  ~Handle() override {
    request_->Fail(InternalError("the model released the request without a final response"));
  }

  const InferenceRequest& request() const { return request_->request(); }

  // The inputs given, BYTES ones in their raw layout.
  TensorDict Inputs() const {
    TensorDict inputs;
    const std::vector<c10::IValue>& values = request().inputs;
    for (size_t i = 0; i < values.size() && i < signature_->inputs.size(); ++i) {
      const c10::IValue& value = values[i];
      if (value.isTensor()) {
        inputs.insert(signature_->inputs[i].name, CrossingAlias(value.toTensor()));
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

  std::string ParametersText() const { return ParametersJson(request().parameters); }

  void Send(const TensorDict& outputs, const ShapeDict& bytes_shapes, bool final,
            int64_t error_code, const std::string& error_message, const Parameters& parameters) {
    ModelResponse response;
    response.final = final;
    response.parameters = parameters;
    if (error_code >= 0) {
      response.status = Status(StatusCodeOfTritonError(error_code), error_message);
    } else if (outputs.size() > 0) {
      StatusOr<std::vector<c10::IValue>> arranged = Arrange(outputs, bytes_shapes);
      TORCH_CHECK(arranged.ok(), arranged.status().message());
      response.outputs = std::move(*arranged);
    }
    Status sent = request_->Send(std::move(response));
    TORCH_CHECK(sent.ok(), sent.message());
  }

 private:
  // `outputs` by name into the signature's output order (None where left
  // out), BYTES ones read back from their raw layout.
  StatusOr<std::vector<c10::IValue>> Arrange(const TensorDict& outputs,
                                             const ShapeDict& bytes_shapes) const {
    std::vector<c10::IValue> arranged(signature_->outputs.size());
    for (const auto& entry : outputs) {
      const std::string& name = entry.key();
      auto spec = std::find_if(signature_->outputs.begin(), signature_->outputs.end(),
                               [&](const TensorSpec& s) { return s.name == name; });
      if (spec == signature_->outputs.end()) continue;  // not in its config: dropped (Triton's)
      c10::IValue& slot = arranged[spec - signature_->outputs.begin()];
      const at::Tensor tensor = CrossingAlias(entry.value()).contiguous();
      if (!bytes_shapes.contains(name)) {
        slot = tensor;
        continue;
      }
      const c10::List<int64_t> shape = bytes_shapes.at(name);
      const std::string_view raw(static_cast<const char*>(tensor.data_ptr()), tensor.numel());
      StatusOr<StringTensor> strings = StringTensorFromRaw(shape.vec(), raw);
      if (!strings.ok()) return strings.status().Annotate("output \"" + name + "\"");
      slot = StringTensorToIValue(std::move(*strings));
    }
    return arranged;
  }

  const std::shared_ptr<OpenRequest> request_;
  const std::shared_ptr<const Manifest> signature_;
};

using Self = c10::intrusive_ptr<Handle>;

Parameters ParametersOf(const c10::Dict<std::string, bool>& flags,
                        const c10::Dict<std::string, int64_t>& numbers,
                        const c10::Dict<std::string, std::string>& texts) {
  Parameters parameters;
  for (const auto& entry : flags) parameters[entry.key()] = entry.value();
  for (const auto& entry : numbers) parameters[entry.key()] = entry.value();
  for (const auto& entry : texts) parameters[entry.key()] = entry.value();
  return parameters;
}

const auto kRequestClass =
    torch::class_<Handle>("chorus", "PythonBackendRequest")
        .def("request_id", [](const Self& self) { return self->request().id; })
        .def("correlation_id",
             [](const Self& self) -> int64_t {
               const auto* id = std::get_if<uint64_t>(&self->request().correlation_id);
               return id == nullptr ? 0 : static_cast<int64_t>(*id);
             })
        .def("correlation_id_string",
             [](const Self& self) -> std::string {
               const auto* id = std::get_if<std::string>(&self->request().correlation_id);
               return id == nullptr ? std::string() : *id;
             })
        .def("flags", [](const Self& self) -> int64_t { return self->request().flags; })
        .def("parameters", [](const Self& self) { return self->ParametersText(); })
        .def("timeout", [](const Self& self) -> int64_t { return self->request().timeout.count(); })
        .def("is_cancelled",
             [](const Self& self) {
               const auto& cancelled = self->request().cancelled;
               return cancelled != nullptr && cancelled->load();
             })
        .def("send",
             [](const Self& self, const TensorDict& outputs, const ShapeDict& bytes_shapes,
                bool final, int64_t error_code, const std::string& error_message,
                const c10::Dict<std::string, bool>& flags,
                const c10::Dict<std::string, int64_t>& numbers,
                const c10::Dict<std::string, std::string>& texts) {
               self->Send(outputs, bytes_shapes, final, error_code, error_message,
                          ParametersOf(flags, numbers, texts));
             })
        // send() of the common answer: tensors only, no BYTES, error or
        // parameters, as two lists: fewer arguments for torch.jit to convert,
        // and no dict, whose conversion from Python throws (and catches) a C++
        // exception every time (it first tries a ScriptDict).
        .def("send_outputs", [](const Self& self, const std::vector<std::string>& names,
                                const std::vector<at::Tensor>& tensors, bool final) {
          TORCH_CHECK(names.size() == tensors.size(), "send_outputs: names and tensors differ");
          TensorDict outputs;
          for (size_t i = 0; i < names.size(); ++i) outputs.insert(names[i], tensors[i]);
          self->Send(outputs, ShapeDict(), final, -1, std::string(), Parameters());
        });

}  // namespace

c10::IValue ReceivedRequest(std::shared_ptr<OpenRequest> request,
                            std::shared_ptr<const Manifest> signature) {
  auto handle = c10::make_intrusive<Handle>(std::move(request), std::move(signature));
  c10::List<std::string> requested;
  for (const std::string& name : handle->request().requested_outputs) requested.push_back(name);
  TensorDict inputs = handle->Inputs();
  ShapeDict bytes_shapes = handle->BytesShapes();
  return c10::ivalue::Tuple::create({c10::IValue(std::move(handle)), std::move(inputs),
                                     std::move(bytes_shapes), std::move(requested)});
}

}  // namespace chorus::python_backend
