#include "chorus/server/models/model_warmup.h"

#include <ATen/ATen.h>

#include <future>

#include "chorus/common/file_util.h"
#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"
#include "chorus/server/models/tensor_codec.h"
#include "chorus/serving/model_values.h"

namespace chorus {
namespace {

// The shape of input `spec` in `sample`: its dims (or the signature's, with
// any-size dimensions as 1), the batch dimension set to the sample's size.
StatusOr<std::vector<int64_t>> SampleShape(const TensorSpec& spec, const WarmupInput& input,
                                           const WarmupSample& sample, const Batching& batching,
                                           const std::string& what) {
  std::vector<int64_t> shape = spec.shape;
  const bool batched =
      batching.batchable && static_cast<int64_t>(shape.size()) > batching.batch_dim;
  if (input.dims) {
    std::vector<int64_t> dims = *input.dims;
    if (batched) dims.insert(dims.begin() + batching.batch_dim, -1);
    if (dims.size() != shape.size()) {
      return InvalidArgumentError(what + ": dims do not match the signature's " +
                                  std::to_string(shape.size() - (batched ? 1 : 0)) + " dimensions");
    }
    shape = dims;
  }
  for (int64_t& size : shape) size = size < 0 ? 1 : size;
  if (batched) shape[batching.batch_dim] = sample.batch_size;
  return shape;
}

// The value of input `spec` for `sample`.
StatusOr<c10::IValue> SampleValue(const TensorSpec& spec, const WarmupSample& sample,
                                  const Manifest& manifest, const std::string& model_dir) {
  const std::string what = "model_warmup \"" + sample.name + "\": input \"" + spec.name + "\"";
  auto given = sample.inputs.find(spec.name);
  const WarmupInput input = given == sample.inputs.end() ? WarmupInput{} : given->second;
  CHORUS_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                          SampleShape(spec, input, sample, manifest.batching, what));
  const DtypeInfo& dtype = *DtypeByName(spec.dtype);
  if (input.kind == WarmupInput::kFile) {
    StatusOr<std::string> raw = ReadFile(model_dir + "/warmup/" + input.file);
    if (!raw.ok()) return InvalidArgumentError(what + ": cannot read warmup/" + input.file);
    if (dtype.dtype == Dtype::kString) {
      StatusOr<StringTensor> strings = StringTensorFromRaw(shape, *raw);
      if (!strings.ok()) return InvalidArgumentError(what + ": " + strings.status().message());
      return StringTensorToIValue(std::move(*strings));
    }
    StatusOr<at::Tensor> tensor = TensorFromRaw(dtype.wire, shape, *raw);
    if (!tensor.ok()) return InvalidArgumentError(what + ": " + tensor.status().message());
    return c10::IValue(std::move(*tensor));
  }
  if (dtype.dtype == Dtype::kString || input.kind == WarmupInput::kZero) {
    return FilledValue(spec.dtype, shape);  // random strings are empty ones too
  }
  const auto options = at::TensorOptions().dtype(ScalarTypeOf(dtype.dtype));
  // Random: uniform in [0, 1) for floats, small integers otherwise (valid indices too).
  at::Tensor random =
      c10::isFloatingType(options.dtype().toScalarType())
          ? at::rand(shape, options)
          : at::randint(0, 2, shape, at::TensorOptions().dtype(at::kLong)).to(options);
  return c10::IValue(std::move(random));
}

// The sample's inputs, in the signature's order.
StatusOr<std::vector<c10::IValue>> SampleInputs(const WarmupSample& sample,
                                                const Manifest& manifest,
                                                const std::string& model_dir) {
  for (const auto& [name, input] : sample.inputs) {
    bool known = false;
    for (const TensorSpec& spec : manifest.inputs) known = known || spec.name == name;
    if (!known) {
      return InvalidArgumentError("model_warmup \"" + sample.name +
                                  "\": the model has no input \"" + name + "\"");
    }
  }
  std::vector<c10::IValue> inputs;
  for (const TensorSpec& spec : manifest.inputs) {
    CHORUS_ASSIGN_OR_RETURN(c10::IValue value, SampleValue(spec, sample, manifest, model_dir));
    inputs.push_back(std::move(value));
  }
  return inputs;
}

// One run of a request-answering model's instance on `inputs`, to its end.
Status RunOnInstance(RequestExecutor& executor, int instance, std::vector<c10::IValue> inputs,
                     std::chrono::milliseconds timeout) {
  auto result = std::make_shared<std::promise<Status>>();
  ExecutorRequest call;
  call.request.id = "warmup";
  call.request.inputs = std::move(inputs);
  call.request.deadline = std::chrono::steady_clock::now() + timeout;
  call.request.on_response = [](ModelResponse) { return true; };  // a stream, read to its end
  call.done = [result](InferenceResult answer) { result->set_value(answer.status); };
  std::future<Status> answered = result->get_future();
  Status ran = executor.Execute(instance, {std::move(call)});
  if (answered.wait_for(timeout) != std::future_status::ready) {
    return DeadlineExceededError("no final response within " + std::to_string(timeout.count()) +
                                 " ms");
  }
  return ran.ok() ? answered.get() : ran;
}

}  // namespace

Status WarmUp(const std::vector<WarmupSample>& samples, const Manifest& manifest,
              const std::string& model_dir, int replicas, const WarmupRun& run) {
  for (const WarmupSample& sample : samples) {
    CHORUS_ASSIGN_OR_RETURN(std::vector<c10::IValue> inputs,
                            SampleInputs(sample, manifest, model_dir));
    for (int replica = 0; replica < replicas; ++replica) {
      for (int i = 0; i < sample.count; ++i) {
        Status status = run(inputs, replica);
        if (!status.ok()) {
          return Status(status.code(), "model_warmup \"" + sample.name +
                                           "\": the model failed: " + status.message());
        }
      }
    }
  }
  return OkStatus();
}

Status WarmUp(Model& model, const Manifest& manifest, const std::vector<WarmupSample>& samples,
              const std::string& model_dir, int interpreters) {
  const bool on_interpreters = FormatInfo(model.format()).runs_on_interpreters;
  return WarmUp(samples, manifest, model_dir, on_interpreters ? interpreters : 1,
                [&](const std::vector<c10::IValue>& inputs, int interpreter) {
                  CallOptions options;
                  options.interpreter = on_interpreters ? interpreter : -1;
                  // Each response of a decoupled model is read to its end.
                  return on_interpreters
                             ? model.ForwardEach(inputs, options,
                                                 [](const c10::IValue&) { return true; })
                             : model.Forward(inputs, options).status();
                });
}

Status WarmUp(RequestExecutor& executor, const Manifest& manifest,
              const std::vector<WarmupSample>& samples, const std::string& model_dir,
              std::chrono::milliseconds timeout) {
  return WarmUp(samples, manifest, model_dir, executor.instances(),
                [&](const std::vector<c10::IValue>& inputs, int instance) {
                  return RunOnInstance(executor, instance, inputs, timeout);
                });
}

}  // namespace chorus
