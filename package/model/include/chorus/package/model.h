// A model loaded from a package archive, callable from any thread.
//
//   auto model = chorus::Model::Load(manager.get(), "mlp.pt").value();
//   c10::IValue y = model->Forward({at::randn({8, 4})}).value();
//
// torch.package archives (chorus-package or stock PackageExporter) and
// torch.export programs (.pt2) run on the manager's interpreters: one replica
// per interpreter, made lazily, all sharing the archive's weights (mapped once
// per process). TorchScript archives (torch.jit.save) and AOTInductor
// packages (.pt2, compiled C++) run on libtorch with no interpreter. All
// answer through this one interface.
#ifndef CHORUS_PACKAGE_MODEL_H_
#define CHORUS_PACKAGE_MODEL_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/archive.h"
#include "chorus/package/manifest.h"
#include "chorus/package/signature.h"

namespace c10 {
struct IValue;
}  // namespace c10

namespace chorus {

struct ModelOptions {
  // Where the model object is, for torch.package archives without a chorus
  // manifest (stock PackageExporter output). Ignored when a manifest exists.
  std::optional<EntryPoint> entry_point;
  // The signature and batching to serve an archive without a chorus manifest
  // with (from the model's config); manifest() returns it. Ignored when the
  // archive has a manifest.
  std::optional<Manifest> signature;
  // Verify every record's sha256 against the manifest before loading.
  bool verify_sha256 = false;
  // Where Python models' replicas run: interpreter i's on devices[i % n]
  // ("cpu", "cuda", "cuda:1", ...); each device holds one copy of the weights
  // per process, shared by every replica on it (unpickled weights; a factory
  // entry point's model is moved per interpreter). Empty: the manifest's
  // device, else the CPU. A GPU the host lacks fails the load
  // (FAILED_PRECONDITION). TorchScript and AOTInductor run on the CPU.
  std::vector<std::string> devices;
  // AOTInductor packages: model instances that run at once (0: one per
  // interpreter of the manager, 1 without one).
  size_t concurrent_runs = 0;
  // When set, only archives signed by one of these keys load (checked before
  // any of the archive's code runs); others fail with PERMISSION_DENIED.
  std::shared_ptr<const TrustedKeys> trusted_keys;
  // Making the model in an interpreter (the archive's module code, unpickling)
  // may take this long (0: no limit); past it, it is interrupted as a call
  // past its deadline is, that load or call fails with DEADLINE_EXCEEDED and
  // the interpreter serves on. Code blocked inside C stops when it returns.
  std::chrono::milliseconds load_timeout{0};
};

class Model {
 public:
  // Opens `path` (once per process: loads of the same unchanged file share
  // one Archive) and prepares the model. torch.package archives and
  // torch.export programs need `manager` (which must outlive the Model);
  // TorchScript and AOTInductor accept nullptr. Errors: the archive's
  // (archive.h); NOT_FOUND "no chorus manifest" when neither a manifest nor
  // options.entry_point says where the model is; FAILED_PRECONDITION for an
  // AOTInductor package with no signature (in its metadata or the options);
  // a Python error while unpickling, with its details.
  static StatusOr<std::shared_ptr<Model>> Load(InterpreterManager* manager, const std::string& path,
                                               const ModelOptions& options = {});

  virtual ~Model() = default;

  // The signature the file carries (a chorus manifest, a torch.export
  // program's, an AOTInductor package's metadata), else options.signature,
  // else nullptr.
  virtual const Manifest* manifest() const = 0;
  // True when manifest() comes from the file itself.
  virtual bool carries_signature() const = 0;
  virtual const std::shared_ptr<Archive>& archive() const = 0;
  ModelFormat format() const { return archive()->format(); }

  // Calls the model with `inputs` as positional arguments, in inference mode (no
  // autograd graph; outputs are inference tensors). Any thread; Python models
  // run on an idle interpreter. Errors: the model's (Python exceptions as
  // INTERNAL with the Python details, DEADLINE_EXCEEDED at the deadline).
  virtual StatusOr<c10::IValue> Forward(const std::vector<c10::IValue>& inputs,
                                        const CallOptions& options = {}) = 0;

  // Calls the model as Forward does and hands `each` what it answers, on the
  // calling thread: every value in order when the call returns a generator
  // (a decoupled model, which streams), else the one value. Holds one
  // interpreter throughout; when `each` returns false the generator is closed
  // (its `finally` blocks run) and the call ends. Errors: Forward's, also
  // from inside the generator; UNIMPLEMENTED for TorchScript and AOTInductor.
  virtual Status ForwardEach(const std::vector<c10::IValue>& inputs, const CallOptions& options,
                             const std::function<bool(const c10::IValue&)>& each);

  // For models run on interpreters: the replica in `session`'s interpreter
  // (made there if needed). UNIMPLEMENTED for TorchScript and AOTInductor.
  virtual StatusOr<Object> In(InterpreterSession& session) = 0;
};

// The archive object Python code in an interpreter sees for `archive`
// (a torch.classes.chorus.Archive), e.g. to hand to chorus.package.importer.
c10::IValue ArchiveToIValue(std::shared_ptr<Archive> archive);

}  // namespace chorus

#endif  // CHORUS_PACKAGE_MODEL_H_
