// Loads interpreters: prepares each slot's private library copies, loads them
// with the system dynamic loader inside a scope object, and serves the Python
// side's requests (extension copies, registration ownership).
//
// How the pieces fit (docs/interpreter.md has the full story):
//  - slot k gets copies of libpython and libtorch_python renamed to unique
//    SONAMEs, and a copy of chorus' Python side (libchorus_pyside.so);
//  - a scope object needing [libpython-k, libtorch_python-k, pyside-k] is
//    dlopen()ed RTLD_LOCAL: the loader relocates all three with that list as
//    their lookup scope, so their Py* references bind to libpython-k;
//  - each C extension slot k imports is copied likewise (its DT_NEEDED on
//    libtorch_python renamed to slot k's copy) and loaded through its own scope
//    object [libpython-k, python-bound needs..., extension-k].
#ifndef CHORUS_INTERPRETER_INTERPRETER_LOADER_H_
#define CHORUS_INTERPRETER_INTERPRETER_LOADER_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/host_object.h"
#include "interpreter/libcache/library_cache.h"
#include "interpreter/src/model_call_table.h"
#include "interpreter/src/pyside_api.h"

namespace chorus {

// Where the embedded Python and chorus' own files are.
struct PythonInstallation {
  std::string program;            // the pinned Python executable
  std::string libpython;          // its shared libpython
  std::string torch_python;       // torch's libtorch_python
  std::string pyside_library;     // libchorus_pyside.so
  std::string chorus_python_dir;  // directory holding the `chorus` package

  // The installation chorus was built for; files are found next to the
  // library that holds this code (build tree and install tree alike). The
  // environment may point a relocated build at another installation of the
  // same Python and torch versions: CHORUS_PYTHON, CHORUS_LIBPYTHON and
  // CHORUS_TORCH_PYTHON_LIB replace the three paths (tools/device_bundle/env.sh).
  static StatusOr<PythonInstallation> Default();
};

// Thread-safe; slots may be loaded concurrently. Loaded libraries are never
// unloaded (finalized interpreters stay mapped until the process exits).
class InterpreterLoader final : public pyside::HostServices {
 public:
  // Errors: a library of `installation` is missing or has no SONAME.
  static StatusOr<std::unique_ptr<InterpreterLoader>> Create(PythonInstallation installation,
                                                             std::string cache_root);

  // Prepares and loads slot `slot`'s Python side (not yet started).
  StatusOr<std::unique_ptr<pyside::PySide>> Load(int slot) CHORUS_EXCLUDES(mu_);

  StatusOr<std::string> PrepareExtension(int slot, const std::string& path) override
      CHORUS_EXCLUDES(mu_);
  bool ReferencesPython(const std::string& path) override;
  StatusOr<bool> ClaimRegistration(const std::string& key, int slot) override CHORUS_EXCLUDES(mu_);
  void CompleteRegistration(const std::string& key, int slot, bool made) override
      CHORUS_EXCLUDES(mu_);
  void AddKernelFunction(const std::string& key, int slot, void* fn, bool with_keyset) override
      CHORUS_EXCLUDES(mu_);
  bool RunKernelFunction(const std::string& key, int slot, const c10::OperatorHandle& op,
                         c10::DispatchKeySet keys, std::vector<c10::IValue>* stack) override
      CHORUS_EXCLUDES(mu_);
  void BeginExclusive() override CHORUS_EXCLUDES(exclusive_mu_);
  void EndExclusive() override CHORUS_EXCLUDES(exclusive_mu_);
  void ReportExit(int status) override;
  StatusOr<uint64_t> StartModelCall(ModelCall call, std::chrono::nanoseconds timeout,
                                    bool stream) override {
    return model_calls_.Start(std::move(call), timeout, stream);
  }
  StatusOr<std::optional<CallResponse>> NextModelResponse(uint64_t handle) override {
    return model_calls_.Next(handle);
  }
  void EndModelCall(uint64_t handle) override { model_calls_.End(handle); }
  Status LoadModel(ModelLoadRequest load) override {
    return model_calls_.LoadModel(std::move(load));
  }
  Status UnloadModel(const std::string& model) override { return model_calls_.UnloadModel(model); }
  StatusOr<bool> ModelReady(const std::string& model, const std::string& version) override {
    return model_calls_.ModelReady(model, version);
  }
  void LogLine(int level, const std::string& message) override;
  // Where model code's calls to served models go.
  ModelCallTable& model_calls() { return model_calls_; }
  void* TakeAutogradEngine() override;
  at::Tensor CrossingAlias(const at::Tensor& tensor) override;
  HostObject* AsHostObject(const c10::IValue& value) override { return HostObjectOf(value); }
  void EnterSlot(int slot) override;
  void LeaveSlot(int slot) override;
  int CurrentSlot() override;
  // Forgets every registration `slot` owned (its interpreter was finalized,
  // which removed them from the dispatcher).
  void ReleaseRegistrations(int slot) CHORUS_EXCLUDES(mu_);

  // A library slot no interpreter of this process has used.
  static int NewSlot();

  const PythonInstallation& installation() const { return installation_; }

 private:
  // A slot's copies of the libraries that reference Python symbols.
  struct SlotLibraries {
    std::string libpython;                       // copy path
    std::map<std::string, std::string> paths;    // slot SONAME -> copy path
    std::map<std::string, std::string> sources;  // copy path -> its source
  };

  InterpreterLoader(PythonInstallation installation, std::string cache_root,
                    std::string libpython_soname, std::string torch_python_soname);

  // The DT_NEEDED renames slot `slot` applies to every copy.
  StatusOr<std::map<std::string, std::string>> Renames(int slot) const;
  StatusOr<SlotLibraries> PrepareSlot(int slot);
  // Loads what `source` needs from its own search path (once per source), so
  // that its copies, which live elsewhere, find them loaded.
  Status LoadDependencies(const std::string& source) CHORUS_EXCLUDES(mu_);
  // Loads a copy of `source` through the scope object over `scope`. The first
  // copy of a source in the process keeps its static registrations, later
  // ones skip theirs (copy_registrations.h); one copy loads at a time.
  Status LoadCopy(const std::string& source, const std::vector<std::string>& scope, void** handle);
  // Maps the pages of each loaded copy in `copies` (copy path -> source) that
  // equal its source's from the source (shared_pages.h), once per copy.
  void SharePages(const std::map<std::string, std::string>& copies) CHORUS_EXCLUDES(mu_);
  // dlopen()s a scope object over `paths`; keeps the handle for the process.
  Status LoadScope(const std::vector<std::string>& paths, void** handle) CHORUS_EXCLUDES(mu_);

  const PythonInstallation installation_;
  LibraryCache cache_;
  ModelCallTable model_calls_;
  const std::string libpython_soname_;
  const std::string torch_python_soname_;

  Mutex mu_;
  std::map<int, SlotLibraries> slots_ CHORUS_GUARDED_BY(mu_);
  std::vector<void*> handles_ CHORUS_GUARDED_BY(mu_);
  std::set<std::string> dependencies_loaded_ CHORUS_GUARDED_BY(mu_);  // LoadDependencies sources
  std::set<std::string> pages_shared_ CHORUS_GUARDED_BY(mu_);         // copies SharePages did
  struct Registration {
    int owner;
    bool made;  // false while the owner is still making it
  };
  std::unordered_map<std::string, Registration> registrations_ CHORUS_GUARDED_BY(mu_);
  CondVar registration_made_;  // signalled when a registration is made or freed
  struct KernelFunction {
    void* fn;  // a PyObject* of its slot
    bool with_keyset;
  };
  // Registration key -> slot -> that slot's own function (AddKernelFunction).
  std::unordered_map<std::string, std::map<int, KernelFunction>> kernel_functions_
      CHORUS_GUARDED_BY(mu_);
  // The exclusive section (Begin/EndExclusive) is taken.
  Mutex exclusive_mu_;
  bool exclusive_taken_ CHORUS_GUARDED_BY(exclusive_mu_) = false;
  CondVar exclusive_released_;
};

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_INTERPRETER_LOADER_H_
