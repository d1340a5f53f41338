#include "chorus/package/model.h"

#include <sys/stat.h>
#include <torch/custom_class.h>
#include <torch/script.h>

#include <map>
#include <utility>

#include "chorus/common/thread_annotations.h"
#include "chorus/package/format.h"
#include "package/model/aot_inductor_model.h"
#include "package/model/compiled_call.h"

namespace chorus {
namespace {

// torch.classes.chorus.Archive: the host's archive as Python code in any
// interpreter sees it. Records come back as uint8 tensors over the archive's
// mapping (stored records) or over a decompressed copy; nothing is copied
// per interpreter.
class ArchiveHolder : public torch::CustomClassHolder {
 public:
  explicit ArchiveHolder(std::shared_ptr<Archive> archive) : archive_(std::move(archive)) {}

  const std::shared_ptr<Archive>& archive() const { return archive_; }

  std::vector<std::string> Records() const {
    std::vector<std::string> names;
    for (const ArchiveRecord& record : archive_->records()) names.push_back(record.name);
    return names;
  }

  at::Tensor Record(const std::string& name, int64_t length) const {
    StatusOr<RecordData> data = archive_->Read(name);
    TORCH_CHECK(data.ok(), data.status().message());
    if (length < 0) length = static_cast<int64_t>(data->size);
    TORCH_CHECK(static_cast<uint64_t>(length) <= data->size, "storage record ", name, " holds ",
                data->size, " bytes but its tensor needs ", length,
                " (storage record shorter than its tensor)");
    std::shared_ptr<const void> owner = data->owner;
    return at::from_blob(
        const_cast<uint8_t*>(data->data), {length}, [owner](void*) mutable { owner.reset(); },
        at::TensorOptions().dtype(at::kByte));
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
        .def("record",
             [](const Holder& self, const std::string& name) { return self->Record(name, -1); })
        .def("storage", [](const Holder& self, const std::string& name, int64_t nbytes) {
          return self->Record(name, nbytes);
        });

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
                             const EntryPoint& entry, std::chrono::milliseconds load_timeout) {
  CHORUS_ASSIGN_OR_RETURN(Object load, session.Global("chorus.package.importer", "load_model"));
  CallOptions options;
  if (load_timeout.count() > 0) options.deadline = std::chrono::steady_clock::now() + load_timeout;
  StatusOr<Object> replica =
      load.Call({ArchiveToIValue(archive), EntryPointToIValue(entry)}, {}, options);
  if (load_timeout.count() > 0 && replica.status().code() == StatusCode::kDeadlineExceeded) {
    return replica.status().Annotate("making the model in interpreter " +
                                     std::to_string(session.index()) + " took longer than " +
                                     std::to_string(load_timeout.count()) + " ms");
  }
  return replica;
}

class PythonModel final : public Model {
 public:
  PythonModel(InterpreterManager* manager, std::shared_ptr<Archive> archive, EntryPoint entry,
              std::optional<Manifest> signature, std::chrono::milliseconds load_timeout)
      : manager_(manager), archive_(std::move(archive)), signature_(std::move(signature)) {
    carries_signature_ = archive_->manifest().has_value();
    std::shared_ptr<Archive> shared = archive_;
    replicated_ = manager->Replicate([shared, entry, load_timeout](InterpreterSession& session) {
      return MakeReplica(session, shared, entry, load_timeout);
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
    return replicated_.Call(inputs, {}, options);
  }
  Status ForwardEach(const std::vector<c10::IValue>& inputs, const CallOptions& options,
                     const std::function<bool(const c10::IValue&)>& each) override;

  StatusOr<Object> In(InterpreterSession& session) override { return replicated_.In(session); }

 private:
  InterpreterManager* manager_;
  std::shared_ptr<Archive> archive_;
  std::optional<Manifest> signature_;
  bool carries_signature_ = false;
  ReplicatedObject replicated_;
};

Status PythonModel::ForwardEach(const std::vector<c10::IValue>& inputs, const CallOptions& options,
                                const std::function<bool(const c10::IValue&)>& each) {
  c10::InferenceMode guard;
  InterpreterSession session = manager_->AcquireOne();
  CHORUS_ASSIGN_OR_RETURN(Object replica, replicated_.In(session));
  CHORUS_ASSIGN_OR_RETURN(Object answer, replica.Call(inputs, {}, options));
  CHORUS_ASSIGN_OR_RETURN(Object is_generator, session.Global("inspect", "isgenerator"));
  CHORUS_ASSIGN_OR_RETURN(Object generator_test, is_generator.CallObjects({answer}));
  CHORUS_ASSIGN_OR_RETURN(c10::IValue generator, generator_test.ToIValue());
  if (!generator.toBool()) {
    CHORUS_ASSIGN_OR_RETURN(c10::IValue value, answer.ToIValue());
    each(value);
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

class TorchScriptModel final : public Model {
 public:
  TorchScriptModel(std::shared_ptr<Archive> archive, std::optional<Manifest> signature,
                   torch::jit::Module module)
      : archive_(std::move(archive)), signature_(std::move(signature)), module_(std::move(module)) {
    module_.eval();
  }

  const Manifest* manifest() const override { return ManifestOf(*archive_, signature_); }
  bool carries_signature() const override { return false; }
  const std::shared_ptr<Archive>& archive() const override { return archive_; }

  StatusOr<c10::IValue> Forward(const std::vector<c10::IValue>& inputs,
                                const CallOptions& options) override {
    return internal::CallCompiled(options, [&] { return module_.forward(inputs); });
  }
  StatusOr<Object> In(InterpreterSession&) override {
    return UnimplementedError("TorchScript models run without an interpreter");
  }

 private:
  std::shared_ptr<Archive> archive_;
  std::optional<Manifest> signature_;
  torch::jit::Module module_;
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
  auto model = std::make_shared<PythonModel>(manager, archive, entry, options.signature,
                                             options.load_timeout);
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
