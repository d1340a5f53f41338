#include "chorus/server/torchserve/torchserve_model.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>

#include "chorus/common/logging.h"
#include "chorus/interpreter/python_calls.h"
#include "chorus/serving/model_values.h"
#include "chorus/serving/string_tensor.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kBackendModule[] = "chorus.torchserve.backend";

// chorus.<backend>.<function>(*args) in `session`'s interpreter.
StatusOr<Object> CallBackend(InterpreterSession& session, std::string_view function,
                             const std::vector<c10::IValue>& args, const CallOptions& options) {
  return CallModuleFunction(session, kBackendModule, function, args, options);
}

TensorSpec Strings(const char* name, std::vector<int64_t> shape) {
  return TensorSpec{name, "string", std::move(shape), false};
}

// `elements` in BYTES' raw layout, as the uint8 tensor Python reads it from.
at::Tensor RawTensor(const std::vector<std::string>& elements) {
  auto* owned = new std::string(StringsToRaw(elements));
  return at::from_blob(
      owned->data(), {static_cast<int64_t>(owned->size())}, [owned](void*) { delete owned; },
      at::TensorOptions().dtype(at::kByte));
}

// The elements of a uint8 tensor holding BYTES' raw layout.
StatusOr<std::vector<std::string>> ElementsOfRaw(const c10::IValue& value) {
  if (!value.isTensor() || value.toTensor().scalar_type() != at::kByte) {
    return InternalError("the TorchServe backend answered bytes that are not a uint8 tensor");
  }
  const at::Tensor bytes = value.toTensor().contiguous();
  const std::string_view raw(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                             bytes.numel());
  // Count the elements first: the shape StringTensorFromRaw checks against.
  int64_t count = 0;
  for (size_t offset = 0; offset + 4 <= raw.size(); ++count) {
    uint32_t length = 0;
    std::memcpy(&length, raw.data() + offset, 4);
    offset += 4 + length;
  }
  CHORUS_ASSIGN_OR_RETURN(StringTensor strings, StringTensorFromRaw({count}, raw));
  return std::move(strings.elements);
}

// A stateful model's request as TorchServe's frontend sends it to a worker:
// its sequence's id (and whether it starts or ends it, where the client's
// headers do not say) among the headers (rows of name, value), which
// context.get_sequence_id() reads.
void AddSequenceHeaders(const InferenceRequest& request, std::vector<std::string>* headers) {
  const std::string id = std::visit(
      [](const auto& value) {
        if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>) {
          return value;
        } else {
          return value == 0 ? std::string() : std::to_string(value);
        }
      },
      request.correlation_id);
  if (id.empty()) return;
  // `replace`: the value chorus tracks wins over the client's (an empty id
  // became a new sequence's), as TorchServe's frontend updates the header.
  const auto set = [headers](const char* name, const std::string& value, bool replace) {
    for (size_t i = 0; i + 1 < headers->size(); i += 2) {
      if ((*headers)[i] != name) continue;
      if (replace) (*headers)[i + 1] = value;
      return;
    }
    headers->insert(headers->end(), {name, value});
  };
  set(torchserve_headers::kSequenceId, id, true);
  if (request.flags & kSequenceStartFlag) set(torchserve_headers::kSequenceStart, "true", false);
  if (request.flags & kSequenceEndFlag) set(torchserve_headers::kSequenceEnd, "true", false);
}

// One request as backend.predict takes it: (request id, headers, inputs).
StatusOr<c10::IValue> BackendRequest(const InferenceRequest& request) {
  std::vector<std::string> raw[2];
  for (int i = 0; i < 2; ++i) {
    CHORUS_ASSIGN_OR_RETURN(StringTensor strings, StringTensorFromIValue(request.inputs.at(i)));
    raw[i] = std::move(strings.elements);
  }
  AddSequenceHeaders(request, &raw[0]);
  return c10::ivalue::Tuple::create(request.id, RawTensor(raw[0]), RawTensor(raw[1]));
}

c10::IValue StringRows(std::vector<std::string> elements, int64_t width) {
  const int64_t rows = static_cast<int64_t>(elements.size()) / width;
  return StringTensorToIValue(StringTensor{{1, rows, width}, std::move(elements)});
}

// An answer as the signature's outputs.
std::vector<c10::IValue> SignatureOutputs(int64_t status, std::string phrase,
                                          std::vector<std::string> headers, std::string body,
                                          std::string error) {
  return {at::full({1, 1}, status, at::TensorOptions().dtype(at::kInt)),
          StringRows({std::move(phrase)}, 1), StringRows(std::move(headers), 2),
          StringRows({std::move(body)}, 1), StringRows({std::move(error)}, 1)};
}

// One answer of backend.predict, (status, phrase, headers, body, error), as
// the signature's outputs.
StatusOr<std::vector<c10::IValue>> Outputs(const c10::IValue& answer) {
  if (!answer.isTuple() || answer.toTupleRef().elements().size() != 5) {
    return InternalError("the TorchServe backend answered something other than a 5-tuple");
  }
  const auto& items = answer.toTupleRef().elements();
  if (!items[0].isInt() || !items[1].isString() || !items[4].isString()) {
    return InternalError("the TorchServe backend's answer has the wrong types");
  }
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> headers, ElementsOfRaw(items[2]));
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> body, ElementsOfRaw(items[3]));
  if (headers.size() % 2 != 0) return InternalError("a response header without its value");
  const int64_t status = items[0].toInt();
  if (status < 100 || status > 599) {
    return InternalError("the handler set HTTP status " + std::to_string(status));
  }
  return SignatureOutputs(status, items[1].toStringRef(), std::move(headers),
                          body.empty() ? std::string() : std::move(body[0]),
                          items[4].toStringRef());
}

InferenceResult ResultOf(const ExecutorRequest& call, Clock::time_point start) {
  InferenceResult result;
  result.batch_size = call.batch_size;
  result.queue_time = call.queue_time;
  result.compute_time = Clock::now() - start;
  return result;
}

}  // namespace

Manifest TorchServeSignature(const std::string& name, const std::string& version,
                             int64_t max_batch_size) {
  namespace t = torchserve_tensors;
  Manifest manifest;
  manifest.model_name = name;
  manifest.model_version = version;
  manifest.batching = Batching{max_batch_size > 1, 0, max_batch_size};
  manifest.inputs = {Strings(t::kHeaders, {-1, -1, 2}), Strings(t::kInputs, {-1, -1, 3})};
  manifest.outputs = {TensorSpec{t::kStatus, "int32", {-1, 1}, false}, Strings(t::kPhrase, {-1, 1}),
                      Strings(t::kResponseHeaders, {-1, -1, 2}), Strings(t::kBody, {-1, 1}),
                      Strings(t::kError, {-1, 1})};
  manifest.device = "cpu";
  return manifest;
}

StatusOr<TorchServeModelSettings> TorchServeModel::ReadSettings(InterpreterManager* manager,
                                                                const std::string& model_dir,
                                                                const TorchServeManifest& manifest,
                                                                TorchServeModelSettings defaults) {
  TorchServeModelSettings settings = defaults;
  InterpreterSession session = manager->AcquireOne();
  if (!manifest.requirements_file.empty()) {
    Status met =
        CallBackend(session, "check_requirements", {model_dir, manifest.requirements_file}, {})
            .status();
    if (!met.ok()) {
      const Status logged = WithPythonErrorLogged(met, "model " + manifest.model_name);
      return Status(StatusCode::kFailedPrecondition, logged.message());
    }
  }
  if (manifest.config_file.empty()) return settings;
  StatusOr<Object> read =
      CallBackend(session, "worker_settings", {model_dir, manifest.config_file}, {});
  if (!read.ok()) return WithPythonErrorLogged(read.status(), "reading " + manifest.config_file);
  CHORUS_ASSIGN_OR_RETURN(c10::IValue value, read->ToIValue());
  if (!value.isGenericDict()) return InternalError("worker_settings answered no dict");
  for (const auto& entry : value.toGenericDict()) {
    const std::string& key = entry.key().toStringRef();
    const int64_t number = entry.value().toInt();
    if (number < 0) {
      return InvalidArgumentError(manifest.config_file + ": " + key + " must not be negative");
    }
    SetTorchServeSetting(key, number, &settings);  // the backend answers only these keys
  }
  return settings;
}

StatusOr<std::shared_ptr<TorchServeModel>> TorchServeModel::Load(InterpreterPlacement* placement,
                                                                 TorchServeModelOptions options) {
  static std::atomic<uint64_t> serial{0};
  const std::string load_key =
      options.model_name + "/" + options.version + "/" + std::to_string(++serial);
  const int count = std::max(1, options.workers);
  const int wanted = std::min(count, placement->manager()->size());
  CHORUS_ASSIGN_OR_RETURN(
      InterpreterLease lease,
      placement->PinShared(wanted, "model " + options.model_name + " version " + options.version));
  std::vector<Worker> workers;
  for (int i = 0; i < count; ++i) {
    workers.push_back({load_key + "/worker" + std::to_string(i),
                       lease.interpreters()[i % lease.interpreters().size()]});
  }
  std::shared_ptr<TorchServeModel> model(
      new TorchServeModel(placement, std::move(options), std::move(lease), std::move(workers)));
  CHORUS_RETURN_IF_ERROR(model->MakeWorkers());
  return model;
}

TorchServeModel::TorchServeModel(InterpreterPlacement* placement, TorchServeModelOptions options,
                                 InterpreterLease lease, std::vector<Worker> workers)
    : placement_(placement),
      options_(std::move(options)),
      lease_(std::move(lease)),
      workers_(std::move(workers)) {
  predict_ = manager()->Replicate(
      [](InterpreterSession& session) { return session.Global(kBackendModule, "predict"); });
}

TorchServeModel::~TorchServeModel() {
  for (int i = 0; i < made_; ++i) {
    InterpreterSession session = manager()->Acquire(workers_[i].interpreter);
    WithPythonErrorLogged(CallBackend(session, "close_worker", {workers_[i].key}, {}).status(),
                          "closing " + workers_[i].key)
        .IgnoreError();
  }
}

Status TorchServeModel::MakeWorkers() {
  for (const Worker& worker : workers_) {
    CHORUS_RETURN_IF_ERROR(MakeWorker(worker));
    ++made_;
  }
  return OkStatus();
}

Status TorchServeModel::MakeWorker(const Worker& worker) {
  const TorchServeHandler& handler = options_.manifest.handler;
  InterpreterSession session = manager()->Acquire(worker.interpreter);
  Status made = CallBackend(session, "create_worker",
                            {worker.key, options_.model_name, options_.model_dir, handler.module,
                             handler.function, int64_t{-1}, int64_t{options_.batch_size},
                             options_.manifest.envelope},
                            CallWithin(options_.load_timeout))
                    .status();
  return WithPythonErrorLogged(made, "loading model " + options_.model_name);
}

void TorchServeModel::RestartWorker(const Worker& worker) {
  Log().warn(
      "model {}: a batch outlived responseTimeout ({} s); its worker's handler is made "
      "again, as TorchServe restarts the worker",
      options_.model_name, options_.response_timeout.count());
  {
    InterpreterSession session = manager()->Acquire(worker.interpreter);
    WithPythonErrorLogged(CallBackend(session, "close_worker", {worker.key}, {}).status(),
                          "closing " + worker.key)
        .IgnoreError();
  }
  Status made = MakeWorker(worker);
  if (!made.ok()) Log().error("model {}: {}", options_.model_name, made.ToString());
}

StatusOr<c10::IValue> TorchServeModel::Predict(const Worker& worker,
                                               c10::impl::GenericList requests,
                                               Clock::time_point deadline) {
  c10::InferenceMode guard;
  InterpreterSession session = manager()->Acquire(worker.interpreter);
  CHORUS_ASSIGN_OR_RETURN(Object predict, predict_.In(session));
  CHORUS_ASSIGN_OR_RETURN(Object answers, predict.Call({worker.key, std::move(requests)}, {},
                                                       CallOptions{deadline, worker.interpreter}));
  return answers.ToIValue();
}

Status TorchServeModel::Execute(int instance, std::vector<ExecutorRequest> batch) {
  const Worker& worker = workers_.at(instance);
  const Clock::time_point start = Clock::now();
  Clock::time_point deadline = Clock::time_point::min();
  c10::impl::GenericList requests(c10::AnyType::get());
  for (const ExecutorRequest& call : batch) {
    deadline = std::max(deadline, call.request.deadline);  // never cut a request short
    StatusOr<c10::IValue> request = BackendRequest(call.request);
    if (!request.ok()) {  // the signature was checked: a bug, but every request is answered
      for (ExecutorRequest& failed : batch) {
        InferenceResult result = ResultOf(failed, start);
        result.status = request.status();
        failed.done(std::move(result));
      }
      return request.status();
    }
    requests.push_back(std::move(*request));
  }
  // TorchServe's response timeout, where no request asks for less.
  const Clock::time_point limit = options_.response_timeout.count() > 0
                                      ? start + options_.response_timeout
                                      : Clock::time_point::max();
  StatusOr<c10::IValue> answers = Predict(worker, std::move(requests), std::min(deadline, limit));
  if (answers.status().code() == StatusCode::kDeadlineExceeded && limit < deadline) {
    for (ExecutorRequest& call : batch) {
      InferenceResult result = ResultOf(call, start);
      result.outputs = SignatureOutputs(500, "", {}, "", "Worker died.");
      call.done(std::move(result));
    }
    RestartWorker(worker);
    return answers.status();
  }
  Status failed = WithPythonErrorLogged(answers.status(), "model " + options_.model_name);
  if (failed.ok() && (!answers->isList() || answers->toListRef().size() != batch.size())) {
    failed = InternalError("the TorchServe backend answered no list of one answer per request");
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    InferenceResult result = ResultOf(batch[i], start);
    StatusOr<std::vector<c10::IValue>> outputs =
        failed.ok() ? Outputs(answers->toListRef()[i]) : failed;
    result.status = outputs.status();
    if (outputs.ok()) result.outputs = std::move(*outputs);
    batch[i].done(std::move(result));
  }
  return failed;
}

}  // namespace chorus
