#include "interpreter/src/interpreter_loader.h"

#include <dlfcn.h>

#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <iterator>
#include <utility>

#include "chorus/common/logging.h"
#include "interpreter/src/build_info.h"
#include "interpreter/src/engine_router.h"
#include "interpreter/libcache/elf_editor.h"

namespace chorus {
namespace {

StatusOr<std::string> ReadSoname(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(auto editor,
                          elf::ElfEditor::Open(path, elf::ElfEditor::Mode::kReadOnly));
  std::string soname = editor->Soname();
  if (soname.empty()) return FailedPreconditionError(path + " has no SONAME");
  return soname;
}

// libtorch_python registers a catch-all kernel for aten::get_gradients from a
// static initializer (torch/csrc/jit/runtime/register_distributed_ops.cpp).
// Each interpreter's copy re-runs it, and c10 warns that the new kernel
// overrides the previous copy's identical one. That warning, and only that
// one, is expected and dropped while an interpreter's libraries load.
class GetGradientsOverrideFilter final : public c10::WarningHandler {
 public:
  explicit GetGradientsOverrideFilter(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::SourceLocation& location, const std::string& message,
               const bool verbatim) override {
    if (message.find("Overriding a previously registered kernel") != std::string::npos &&
        message.find("aten::get_gradients") != std::string::npos) {
      return;
    }
    next_->process(location, message, verbatim);
  }

 private:
  c10::WarningHandler* next_;
};

// dlopen() with the filter above. c10's warning handler is per thread, and
// static initializers run on the thread that loads the library.
void* LoadWithoutGetGradientsWarning(const std::string& path) {
  GetGradientsOverrideFilter filter(c10::Warning::get_warning_handler());
  c10::Warning::WarningHandlerGuard guard(&filter);
  return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
}

// Directory of the shared object that holds this function.
std::string ThisLibraryDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&ThisLibraryDirectory), &info) == 0 ||
      info.dli_fname == nullptr) {
    return ".";
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

StatusOr<PythonInstallation> PythonInstallation::Default() {
  std::string dir = ThisLibraryDirectory();
  PythonInstallation installation;
  installation.program = build_info::kPythonProgram;
  installation.libpython = build_info::kLibPython;
  installation.torch_python = build_info::kTorchPythonLibrary;
  installation.pyside_library = dir + "/" + build_info::kPySideLibraryName;
  installation.chorus_python_dir = dir + "/" + build_info::kPythonDirFromLibDir;
  return installation;
}

StatusOr<std::unique_ptr<InterpreterLoader>> InterpreterLoader::Create(
    PythonInstallation installation, std::string cache_root) {
  CHORUS_ASSIGN_OR_RETURN(std::string libpython_soname, ReadSoname(installation.libpython));
  CHORUS_ASSIGN_OR_RETURN(std::string torch_python_soname, ReadSoname(installation.torch_python));
  return std::unique_ptr<InterpreterLoader>(
      new InterpreterLoader(std::move(installation), std::move(cache_root),
                            std::move(libpython_soname), std::move(torch_python_soname)));
}

InterpreterLoader::InterpreterLoader(PythonInstallation installation, std::string cache_root,
                                     std::string libpython_soname,
                                     std::string torch_python_soname)
    : installation_(std::move(installation)),
      cache_(std::move(cache_root)),
      libpython_soname_(std::move(libpython_soname)),
      torch_python_soname_(std::move(torch_python_soname)) {}

StatusOr<std::map<std::string, std::string>> InterpreterLoader::Renames(int slot) const {
  std::map<std::string, std::string> renames;
  CHORUS_ASSIGN_OR_RETURN(renames[libpython_soname_], SlotSoname(libpython_soname_, slot));
  CHORUS_ASSIGN_OR_RETURN(renames[torch_python_soname_], SlotSoname(torch_python_soname_, slot));
  return renames;
}

StatusOr<InterpreterLoader::SlotLibraries> InterpreterLoader::PrepareSlot(int slot) {
  CHORUS_ASSIGN_OR_RETURN(auto renames, Renames(slot));
  SlotLibraries libraries;
  for (const auto& [source, soname] :
       {std::pair(installation_.libpython, libpython_soname_),
        std::pair(installation_.torch_python, torch_python_soname_)}) {
    CopyRecipe recipe{renames.at(soname), renames, true};
    CHORUS_ASSIGN_OR_RETURN(PreparedCopy copy, cache_.Prepare(source, slot, recipe));
    libraries.paths[recipe.soname] = copy.path;
    if (soname == libpython_soname_) libraries.libpython = copy.path;
  }
  MutexLock lock(&mu_);
  slots_[slot] = libraries;
  return libraries;
}

Status InterpreterLoader::LoadScope(const std::vector<std::string>& paths, void** handle) {
  CHORUS_ASSIGN_OR_RETURN(std::string scope, cache_.PrepareScope(paths));
  void* loaded = LoadWithoutGetGradientsWarning(scope);
  if (loaded == nullptr) {
    const char* error = dlerror();
    return InternalError(std::string("dlopen failed: ") + (error ? error : "unknown error"));
  }
  MutexLock lock(&mu_);
  handles_.push_back(loaded);
  *handle = loaded;
  return OkStatus();
}

StatusOr<std::unique_ptr<pyside::PySide>> InterpreterLoader::Load(int slot) {
  CHORUS_ASSIGN_OR_RETURN(SlotLibraries libraries, PrepareSlot(slot));
  CHORUS_ASSIGN_OR_RETURN(auto renames, Renames(slot));
  CHORUS_ASSIGN_OR_RETURN(PreparedCopy pyside,
                          cache_.Prepare(installation_.pyside_library, slot, {"", renames, true}));
  void* handle = nullptr;
  CHORUS_RETURN_IF_ERROR(LoadScope(
      {libraries.libpython, libraries.paths.at(renames.at(torch_python_soname_)), pyside.path},
      &handle));
  auto create = reinterpret_cast<pyside::PySide* (*)(uint32_t)>(dlsym(handle, pyside::kEntryPoint));
  if (create == nullptr) {
    return InternalError(installation_.pyside_library + " does not export " + pyside::kEntryPoint);
  }
  std::unique_ptr<pyside::PySide> side(create(pyside::kAbiVersion));
  if (side == nullptr) {
    return FailedPreconditionError(installation_.pyside_library +
                                   " was built for another chorus version");
  }
  return side;
}

StatusOr<std::string> InterpreterLoader::PrepareExtension(int slot, const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(auto renames, Renames(slot));
  CHORUS_ASSIGN_OR_RETURN(PreparedCopy copy, cache_.Prepare(path, slot, {"", renames, true}));
  std::vector<std::string> scope;
  {
    MutexLock lock(&mu_);
    auto libraries = slots_.find(slot);
    if (libraries == slots_.end()) return FailedPreconditionError("slot not loaded");
    scope.push_back(libraries->second.libpython);
    for (const std::string& needed : copy.needed) {
      auto bound = libraries->second.paths.find(needed);
      if (bound != libraries->second.paths.end() && bound->second != scope.front()) {
        scope.push_back(bound->second);
      }
    }
  }
  scope.push_back(copy.path);
  void* handle = nullptr;
  CHORUS_RETURN_IF_ERROR(LoadScope(scope, &handle));
  Log().debug("interpreter {}: extension {} loaded as {}", slot, path, copy.path);
  return copy.path;
}

void InterpreterLoader::RouteAutogradEngine() { InstallAutogradEngineRouter(); }

int InterpreterLoader::NewSlot() {
  static std::atomic<int> next{0};
  return next++;
}

void InterpreterLoader::ReleaseRegistrations(int slot) {
  {
    MutexLock lock(&mu_);
    for (auto it = registrations_.begin(); it != registrations_.end();) {
      it = it->second.owner == slot ? registrations_.erase(it) : std::next(it);
    }
  }
  registration_made_.SignalAll();
}

StatusOr<bool> InterpreterLoader::ClaimRegistration(const std::string& key, int slot) {
  // Owners make a registration right after claiming it and wait on nothing
  // meanwhile, so waiting here cannot deadlock; the limit guards against an
  // owner stuck in Python.
  constexpr auto kPatience = std::chrono::seconds(120);
  const auto give_up = std::chrono::steady_clock::now() + kPatience;
  MutexLock lock(&mu_);
  while (true) {
    auto [entry, inserted] = registrations_.try_emplace(key, Registration{slot, false});
    if (inserted || entry->second.owner == slot) return true;
    if (entry->second.made) return false;
    if (!registration_made_.WaitUntil(&mu_, give_up) && std::chrono::steady_clock::now() >= give_up) {
      return DeadlineExceededError("waited too long for another interpreter to register " + key);
    }
  }
}

void InterpreterLoader::CompleteRegistration(const std::string& key, int slot, bool made) {
  {
    MutexLock lock(&mu_);
    auto entry = registrations_.find(key);
    if (entry == registrations_.end() || entry->second.owner != slot) return;
    if (made) {
      entry->second.made = true;
    } else {
      registrations_.erase(entry);
    }
  }
  registration_made_.SignalAll();
}

}  // namespace chorus
