#include "chorus/package/model.h"

#include <sys/stat.h>
#include <torch/custom_class.h>
#include <torch/script.h>

#include <algorithm>
#include <map>
#include <utility>

#include "chorus/common/thread_annotations.h"
#include "chorus/package/format.h"
#include "package/model/aot_inductor_model.h"
#include "package/model/compiled_call.h"
#include "package/model/device_placement.h"

namespace chorus {
namespace {

// torch.classes.chorus.Archive: the host's archive as Python code in any
// interpreter sees it. Records come back as uint8 tensors over the archive's
// mapping (stored records) or over a decompressed copy, storages also on a
// device (one copy per process); nothing is copied per interpreter.
class ArchiveHolder : public torch::CustomClassHolder {
 public:
  explicit ArchiveHolder(std::shared_ptr<Archive> archive) : archive_(std::move(archive)) {}

  const std::shared_ptr<Archive>& archive() const { return archive_; }

  std::vector<std::string> Records() const {
    std::vector<std::string> names;
    for (const ArchiveRecord& record : archive_->records()) names.push_back(record.name);
    return names;
  }

  // Record `name` as `nbytes` bytes (-1: all) on `device`: the mapping's own
  // pages on the CPU, one copy per process on another device.
  at::Tensor Record(const std::string& name, int64_t nbytes, const std::string& device) const {
    return internal::PlacedStorage(archive_, name, nbytes, c10::Device(device));
  }

 private:
  std::shared_ptr<Archive> archive_;
};

using Holder = c10::intrusive_ptr<ArchiveHolder>;

const auto kArchiveClass =
    torch::class_<ArchiveHolder>("chorus", "Archive")
        .def("path", [](const Holder& self) { return self->archive()->path(); })
        .def("records", [](const Holder& self) { return self->Records(); })
        .def("has", [](const Holder& self,
                       const std::string& name) { return self->archive()->Find(name) != nullptr; })
        .def("record", [](const Holder& self,
                          const std::string& name) { return self->Record(name, -1, "cpu"); })
        .def("storage",
             [](const Holder& self, const std::string& name, int64_t nbytes,
                const std::string& device) { return self->Record(name, nbytes, device); });

// Archives already open in this process, by file identity: a file is mapped
// once however many models load it.
StatusOr<std::shared_ptr<Archive>> OpenShared(const std::string& path,
                                              const ArchiveOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return NotFoundError("no archive at " + path);
  std::string key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                    std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                    std::to_string(st.st_mtim.tv_nsec);
  static Mutex mu;
  static auto* open = new std::map<std::string, std::weak_ptr<Archive>>();
  MutexLock lock(&mu);
  if (auto archive = (*open)[key].lock()) {
    if (options.verify_sha256) CHORUS_RETURN_IF_ERROR(archive->VerifySha256());
    return archive;
  }
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Archive> archive, Archive::Open(path, options));
  (*open)[key] = archive;
  return archive;
}

const Manifest* ManifestOf(const Archive& archive, const std::optional<Manifest>& signature) {
  if (archive.manifest()) return &*archive.manifest();
  return signature ? &*signature : nullptr;
}

// The signature a torch.export program's replica read from the program
// (chorus/package/exported.py).
StatusOr<Manifest> ProgramSignature(const Object& replica, const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(Object attr, replica.Attr("chorus_signature"));
  CHORUS_ASSIGN_OR_RETURN(c10::IValue text, attr.ToIValue());
  if (!text.isString()) return InternalError("the signature of " + path + " is not a string");
  StatusOr<Manifest> signature = ParseSignature(text.toStringRef());
  if (!signature.ok()) return signature.status().Annotate("the program's signature in " + path);
  return signature;
}

c10::IValue EntryPointToIValue(const EntryPoint& entry) {
  c10::Dict<std::string, std::string> dict;
  dict.insert("kind", entry.kind);
  if (entry.kind == package_format::kEntryPointPickle) {
    dict.insert("package", entry.package);
    dict.insert("resource", entry.resource);
  } else {
    dict.insert("module", entry.module);
    dict.insert("factory", entry.factory);
  }
  return dict;
}

// The model object in `session`'s interpreter, made from the archive within
// `load_timeout` (0: no limit).
StatusOr<Object> MakeReplica(InterpreterSession& session, const std::shared_ptr<Archive>& archive,
                             const EntryPoint& entry, const c10::Device& device,
                             std::chrono::milliseconds load_timeout) {
  CHORUS_ASSIGN_OR_RETURN(Object load, session.Global("chorus.package.importer", "load_model"));
  CallOptions options;
  if (load_timeout.count() > 0) options.deadline = std::chrono::steady_clock::now() + load_timeout;
  StatusOr<Object> replica =
      load.Call({ArchiveToIValue(archive), EntryPointToIValue(entry), device.str()}, {}, options);
  if (load_timeout.count() > 0 && replica.status().code() == StatusCode::kDeadlineExceeded) {
    return replica.status().Annotate("making the model in interpreter " +
                                     std::to_string(session.index()) + " took longer than " +
                                     std::to_string(load_timeout.count()) + " ms");
  }
  return replica;
}

// The device of interpreter `index`'s replica: devices[index % n].
const c10::Device& DeviceOf(const std::vector<c10::Device>& devices, int index) {
  return devices[static_cast<size_t>(index) % devices.size()];
}

// A call's inputs on its replica's device.
StatusOr<std::vector<c10::IValue>> OnDevice(const std::vector<c10::IValue>& inputs,
                                            const c10::Device& device) {
  std::vector<c10::IValue> placed;
  for (const c10::IValue& input : inputs) {
    CHORUS_ASSIGN_OR_RETURN(c10::IValue value, internal::ToDevice(input, device));
    placed.push_back(std::move(value));
  }
  return placed;
}

class PythonModel final : public Model {
 public:
  // `devices`: where each interpreter's replica runs (not empty).
  PythonModel(InterpreterManager* manager, std::shared_ptr<Archive> archive, EntryPoint entry,
              std::optional<Manifest> signature, std::vector<c10::Device> devices,
              std::chrono::milliseconds load_timeout)
      : manager_(manager),
        archive_(std::move(archive)),
        signature_(std::move(signature)),
        devices_(std::move(devices)) {
    carries_signature_ = archive_->manifest().has_value();
    on_host_ = std::all_of(devices_.begin(), devices_.end(),
                           [](const c10::Device& device) { return device.is_cpu(); });
    std::shared_ptr<Archive> shared = archive_;
    replicated_ = manager->Replicate([shared, entry, devices = devices_,
                                      load_timeout](InterpreterSession& session) {
      return MakeReplica(session, shared, entry, DeviceOf(devices, session.index()), load_timeout);
    });
  }

  const Manifest* manifest() const override { return ManifestOf(*archive_, signature_); }
  bool carries_signature() const override { return carries_signature_; }
  const std::shared_ptr<Archive>& archive() const override { return archive_; }

  // Serves with the signature the file carries (a program's), not the options'.
  void UseOwnSignature(Manifest signature) {
    signature_ = std::move(signature);
    carries_signature_ = true;
  }

  StatusOr<c10::IValue> Forward(const std::vector<c10::IValue>& inputs,
                                const CallOptions& options) override {
    // Serving never needs autograd: the thread-local mode reaches the Python
    // call (one libtorch), so no graph is recorded, as with TorchScript.
    c10::InferenceMode guard;
    if (on_host_) return replicated_.Call(inputs, {}, options);
    InterpreterSession session = Session(options);
    internal::InterpreterStreamScope stream(session.index(), DeviceOf(devices_, session.index()));
    CHORUS_ASSIGN_OR_RETURN(Object answer, CallReplica(session, inputs, options));
    CHORUS_ASSIGN_OR_RETURN(c10::IValue value, answer.ToIValue());
    return internal::ToHost(value);
  }
  Status ForwardEach(const std::vector<c10::IValue>& inputs, const CallOptions& options,
                     const std::function<bool(const c10::IValue&)>& each) override;

  StatusOr<Object> In(InterpreterSession& session) override { return replicated_.In(session); }

 private:
  // A session on the interpreter `options` names, else on an idle one.
  InterpreterSession Session(const CallOptions& options) const {
    return options.interpreter >= 0 ? manager_->Acquire(options.interpreter)
                                    : manager_->AcquireOne();
  }

  // `session`'s replica called on `inputs` moved to its device (on the
  // current stream: the caller's InterpreterStreamScope).
  StatusOr<Object> CallReplica(InterpreterSession& session, const std::vector<c10::IValue>& inputs,
                               const CallOptions& options) const {
    CHORUS_ASSIGN_OR_RETURN(std::vector<c10::IValue> placed,
                            OnDevice(inputs, DeviceOf(devices_, session.index())));
    CHORUS_ASSIGN_OR_RETURN(Object replica, replicated_.In(session));
    return replica.Call(placed, {}, options);
  }

  InterpreterManager* manager_;
  std::shared_ptr<Archive> archive_;
  std::optional<Manifest> signature_;
  const std::vector<c10::Device> devices_;
  bool on_host_ = true;  // every replica on the CPU: calls need no moving
  bool carries_signature_ = false;
  ReplicatedObject replicated_;
};

Status PythonModel::ForwardEach(const std::vector<c10::IValue>& inputs, const CallOptions& options,
                                const std::function<bool(const c10::IValue&)>& each) {
  c10::InferenceMode guard;
  InterpreterSession session = Session(options);
  internal::InterpreterStreamScope stream(session.index(), DeviceOf(devices_, session.index()));
  CHORUS_ASSIGN_OR_RETURN(Object answer, CallReplica(session, inputs, options));
  CHORUS_ASSIGN_OR_RETURN(Object is_generator, session.Global("inspect", "isgenerator"));
  CHORUS_ASSIGN_OR_RETURN(Object generator_test, is_generator.CallObjects({answer}));
  CHORUS_ASSIGN_OR_RETURN(c10::IValue generator, generator_test.ToIValue());
  if (!generator.toBool()) {
    CHORUS_ASSIGN_OR_RETURN(c10::IValue value, answer.ToIValue());
    CHORUS_ASSIGN_OR_RETURN(c10::IValue on_host, internal::ToHost(value));
    each(on_host);
    return OkStatus();
  }
  // generator.__next__() until StopIteration, each step under the call's
  // deadline (a generator past it is interrupted as a call is).
  CHORUS_ASSIGN_OR_RETURN(Object step, answer.Attr("__next__"));
  CHORUS_ASSIGN_OR_RETURN(Object close, answer.Attr("close"));
  Status status = OkStatus();
  while (true) {
    StatusOr<Object> item = step.Call({}, {}, options);
    if (!item.ok()) {
      const PythonError* error = item.status().python_error();
      if (error == nullptr || error->type != "StopIteration") status = item.status();
      break;
    }
    StatusOr<c10::IValue> value = item->ToIValue();
    if (value.ok()) value = internal::ToHost(*value);
    if (!value.ok()) {
      status = value.status();
      break;
    }
    if (!each(*value)) break;
  }
  StatusOr<Object> closed = close.Call();  // runs the generator's finally blocks
  if (status.ok() && !closed.ok()) status = closed.status();
  return status;
}

// Where forward() takes each input of `signature`, when its inputs are named
// after forward()'s arguments (Triton's PyTorch backend matches them by name);
// empty when they are not (a chorus config, Triton's INPUT__<i> convention):
// then the signature's order is forward()'s.
std::vector<size_t> ArgumentPositions(const torch::jit::Module& module, const Manifest* signature) {
  if (signature == nullptr) return {};
  const auto method = module.find_method("forward");
  if (!method) return {};
  const std::vector<c10::Argument>& arguments = method->function().getSchema().arguments();
  std::vector<size_t> positions;
  for (const TensorSpec& input : signature->inputs) {
    auto it = std::find_if(arguments.begin() + 1, arguments.end(),  // after self
                           [&](const c10::Argument& a) { return a.name() == input.name; });
    const size_t position = static_cast<size_t>(it - arguments.begin() - 1);
    if (it == arguments.end() || position >= signature->inputs.size()) return {};
    positions.push_back(position);
  }
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] != i) return positions;
  }
  return {};  // already in forward()'s order
}

class TorchScriptModel final : public Model {
 public:
  TorchScriptModel(std::shared_ptr<Archive> archive, std::optional<Manifest> signature,
                   torch::jit::Module module)
      : archive_(std::move(archive)), signature_(std::move(signature)), module_(std::move(module)) {
    module_.eval();
    positions_ = ArgumentPositions(module_, manifest());
  }

  const Manifest* manifest() const override { return ManifestOf(*archive_, signature_); }
  bool carries_signature() const override { return false; }
  const std::shared_ptr<Archive>& archive() const override { return archive_; }

  StatusOr<c10::IValue> Forward(const std::vector<c10::IValue>& inputs,
                                const CallOptions& options) override {
    if (positions_.empty() || positions_.size() != inputs.size()) {
      return internal::CallCompiled(options, [&] { return module_.forward(inputs); });
    }
    std::vector<c10::IValue> arguments(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) arguments[positions_[i]] = inputs[i];
    return internal::CallCompiled(options, [&] { return module_.forward(arguments); });
  }
  StatusOr<Object> In(InterpreterSession&) override {
    return UnimplementedError("TorchScript models run without an interpreter");
  }

 private:
  std::shared_ptr<Archive> archive_;
  std::optional<Manifest> signature_;
  torch::jit::Module module_;
  std::vector<size_t> positions_;  // ArgumentPositions: empty when inputs go in order
};

}  // namespace

c10::IValue ArchiveToIValue(std::shared_ptr<Archive> archive) {
  return c10::IValue(c10::make_intrusive<ArchiveHolder>(std::move(archive)));
}

Status Model::ForwardEach(const std::vector<c10::IValue>&, const CallOptions&,
                          const std::function<bool(const c10::IValue&)>&) {
  return UnimplementedError(std::string(FormatInfo(format()).description) +
                            " models answer once; only Python models stream");
}

namespace {

StatusOr<std::shared_ptr<Model>> LoadTorchScript(const std::string& path,
                                                 const std::shared_ptr<Archive>& archive,
                                                 const ModelOptions& options) {
  try {
    return std::shared_ptr<Model>(
        std::make_shared<TorchScriptModel>(archive, options.signature, torch::jit::load(path)));
  } catch (const c10::Error& e) {
    return InvalidArgumentError("cannot load TorchScript archive " + path + ": " +
                                e.what_without_backtrace());
  }
}

// A torch.package archive or a torch.export program: a replica per
// interpreter, the first made now, so that a model that cannot load fails
// here, not later.
StatusOr<std::shared_ptr<Model>> LoadOnInterpreters(InterpreterManager* manager,
                                                    const std::string& path,
                                                    const std::shared_ptr<Archive>& archive,
                                                    const EntryPoint& entry,
                                                    const ModelOptions& options) {
  if (manager == nullptr) {
    return InvalidArgumentError(std::string(FormatInfo(archive->format()).description) +
                                "s run on interpreters: pass an InterpreterManager");
  }
  // The devices the options name, else the manifest's, else the CPU.
  std::vector<std::string> names = options.devices;
  if (names.empty() && archive->manifest()) names = {archive->manifest()->device};
  if (names.empty()) names = {"cpu"};
  CHORUS_ASSIGN_OR_RETURN(std::vector<c10::Device> devices, internal::ParseDevices(names));
  auto model = std::make_shared<PythonModel>(manager, archive, entry, options.signature,
                                             std::move(devices), options.load_timeout);
  InterpreterSession session = manager->AcquireOne();
  StatusOr<Object> first = model->In(session);
  if (!first.ok()) return first.status().Annotate("loading " + path);
  if (archive->format() == ModelFormat::kTorchExport) {
    CHORUS_ASSIGN_OR_RETURN(Manifest signature, ProgramSignature(*first, path));
    model->UseOwnSignature(std::move(signature));
  }
  return std::shared_ptr<Model>(model);
}

}  // namespace

StatusOr<std::shared_ptr<Model>> Model::Load(InterpreterManager* manager, const std::string& path,
                                             const ModelOptions& options) {
  ArchiveOptions archive_options;
  archive_options.verify_sha256 = options.verify_sha256;
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Archive> archive, OpenShared(path, archive_options));
  if (options.trusted_keys) CHORUS_RETURN_IF_ERROR(options.trusted_keys->Verify(*archive));
  EntryPoint entry;
  switch (archive->format()) {
    case ModelFormat::kTorchScript:
      return LoadTorchScript(path, archive, options);
    case ModelFormat::kAotInductor: {
      size_t instances = options.concurrent_runs;
      if (instances == 0) instances = manager != nullptr ? static_cast<size_t>(manager->size()) : 1;
      return internal::LoadAotInductorModel(archive, options.signature, instances);
    }
    case ModelFormat::kTorchExport:
      entry.kind = package_format::kEntryPointExport;
      break;
    case ModelFormat::kChorus:
      entry = archive->manifest()->entry_point;
      break;
    case ModelFormat::kTorchPackage:
      if (!options.entry_point) {
        return NotFoundError(path + " has no chorus manifest (" + package_format::kManifestRecord +
                             "); package it with chorus-package or pass an entry point");
      }
      entry = *options.entry_point;
      break;
  }
  return LoadOnInterpreters(manager, path, archive, entry, options);
}

}  // namespace chorus
