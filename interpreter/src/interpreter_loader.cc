#include "interpreter/src/interpreter_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <set>
#include <utility>

#include "chorus/common/crash_report.h"
#include "chorus/common/logging.h"
#include "chorus/interpreter/tensor_crossing.h"
#include "interpreter/libcache/elf_editor.h"
#include "interpreter/libcache/shared_pages.h"
#include "interpreter/src/build_info.h"
#include "interpreter/src/c10_warnings.h"
#include "interpreter/src/copy_registrations.h"
#include "interpreter/src/engine_router.h"
#include "interpreter/src/interpreter_registry.h"
#include "interpreter/src/py_interpreter_router.h"

namespace chorus {
namespace {

StatusOr<std::string> ReadSoname(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(auto editor, elf::ElfEditor::Open(path, elf::ElfEditor::Mode::kReadOnly));
  std::string soname = editor->Soname();
  if (soname.empty()) return FailedPreconditionError(path + " has no SONAME");
  return soname;
}

// libtorch_python registers a catch-all kernel for aten::get_gradients from a
// static initializer (torch/csrc/jit/runtime/register_distributed_ops.cpp).
// Each interpreter's copy re-runs it, and c10 warns that the new kernel
// overrides the previous copy's identical one. That warning, and only that
// one, is expected and dropped while an interpreter's libraries load.
class GetGradientsOverrideFilter final : public WarningMessageHandler {
 public:
  explicit GetGradientsOverrideFilter(c10::WarningHandler* next) : next_(next) {}
  void OnWarning(const std::string& message) override {
    if (message.find("Overriding a previously registered kernel") != std::string::npos &&
        message.find("aten::get_gradients") != std::string::npos) {
      return;
    }
    Forward(next_);
  }

 private:
  c10::WarningHandler* next_;
};

// dlopen() with the filter above. c10's warning handler is per thread, and
// static initializers run on the thread that loads the library.
void* LoadWithoutGetGradientsWarning(const std::string& path) {
  GetGradientsOverrideFilter filter(CurrentWarningHandler());
  WarningHandlerScope scope(&filter);
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

// The environment variable `name` if set and not empty, else `built`.
std::string FromEnvironment(const char* name, const char* built) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : built;
}

}  // namespace

StatusOr<PythonInstallation> PythonInstallation::Default() {
  std::string dir = ThisLibraryDirectory();
  PythonInstallation installation;
  installation.program = FromEnvironment("CHORUS_PYTHON", build_info::kPythonProgram);
  installation.libpython = FromEnvironment("CHORUS_LIBPYTHON", build_info::kLibPython);
  installation.torch_python =
      FromEnvironment("CHORUS_TORCH_PYTHON_LIB", build_info::kTorchPythonLibrary);
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
                                     std::string libpython_soname, std::string torch_python_soname)
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
    CopyRecipe recipe;
    recipe.soname = renames.at(soname);
    recipe.needed = renames;
    if (soname == torch_python_soname_) {
      recipe.constants = TorchPythonConstantEdits(slot);
      recipe.imports = TorchPythonImportEdits();
      recipe.imports.merge(TorchPythonRoutingImportEdits());
    }
    CHORUS_ASSIGN_OR_RETURN(PreparedCopy copy, cache_.Prepare(source, slot, recipe));
    libraries.paths[recipe.soname] = copy.path;
    libraries.sources[copy.path] = source;
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

namespace {

// The recipe of a copy whose only edits are the slot's DT_NEEDED renames.
CopyRecipe RenamesOnly(const std::map<std::string, std::string>& renames) {
  CopyRecipe recipe;
  recipe.needed = renames;
  return recipe;
}

// The directories `library` names in its DT_RUNPATH/DT_RPATH, $ORIGIN expanded.
StatusOr<std::vector<std::string>> SearchDirectories(const elf::ElfEditor& library,
                                                     const std::string& path) {
  const std::string origin = path.substr(0, path.rfind('/'));
  std::vector<std::string> directories;
  std::string search = library.SearchPath();
  for (size_t start = 0; start < search.size();) {
    size_t end = std::min(search.find(':', start), search.size());
    std::string dir = search.substr(start, end - start);
    if (dir.rfind("$ORIGIN", 0) == 0) dir = origin + dir.substr(7);
    if (!dir.empty()) directories.push_back(dir);
    start = end + 1;
  }
  return directories;
}

// dlopen()s each DT_NEEDED of `path` that is not loaded yet from the search
// path `path` names for itself ($ORIGIN being its directory) or inherits from
// the objects that load it (`inherited`: DT_RPATH applies to a whole chain),
// dependencies first, so that a copy of `path` elsewhere finds them loaded (by
// SONAME). pip wheels ship libraries beside their extensions this way
// (numpy.libs, torch/lib, nvidia/*/lib). Libraries each interpreter has its
// own copy of (`per_slot`, by SONAME) are skipped.
Status LoadDependenciesFromOrigin(const std::string& path, const std::set<std::string>& per_slot,
                                  std::vector<std::string> inherited = {},
                                  std::set<std::string>* visited = nullptr) {
  std::set<std::string> first_visit;
  if (visited == nullptr) visited = &first_visit;
  if (!visited->insert(path).second) return OkStatus();  // libraries may need each other
  CHORUS_ASSIGN_OR_RETURN(auto editor, elf::ElfEditor::Open(path, elf::ElfEditor::Mode::kReadOnly));
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::string> own, SearchDirectories(*editor, path));
  for (auto it = own.rbegin(); it != own.rend(); ++it) {
    if (std::find(inherited.begin(), inherited.end(), *it) == inherited.end()) {
      inherited.insert(inherited.begin(), *it);
    }
  }
  if (inherited.empty()) return OkStatus();
  for (const std::string& needed : editor->Needed()) {
    if (per_slot.count(needed) != 0) continue;
    if (dlopen(needed.c_str(), RTLD_NOW | RTLD_NOLOAD) != nullptr) continue;  // loaded already
    for (const std::string& dir : inherited) {
      std::string dependency = dir + "/" + needed;
      if (::access(dependency.c_str(), F_OK) != 0) continue;
      CHORUS_RETURN_IF_ERROR(LoadDependenciesFromOrigin(dependency, per_slot, inherited, visited));
      if (dlopen(dependency.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
        const char* error = dlerror();
        return InternalError("cannot load " + dependency + ": " +
                             (error ? error : "unknown error"));
      }
      break;
    }
  }
  return OkStatus();
}

}  // namespace

Status InterpreterLoader::LoadDependencies(const std::string& source) {
  {
    MutexLock lock(&mu_);
    if (dependencies_loaded_.count(source) != 0) return OkStatus();
  }
  CHORUS_RETURN_IF_ERROR(
      LoadDependenciesFromOrigin(source, {libpython_soname_, torch_python_soname_}));
  MutexLock lock(&mu_);
  dependencies_loaded_.insert(source);
  return OkStatus();
}

namespace {

// The sources of which a copy has been loaded in this process.
struct LoadedSources {
  Mutex mu;
  std::set<std::string> sources CHORUS_GUARDED_BY(mu);
};

}  // namespace

Status InterpreterLoader::LoadCopy(const std::string& source, const std::vector<std::string>& scope,
                                   void** handle) {
  static auto* loaded = new LoadedSources();
  MutexLock lock(&loaded->mu);
  SkipCopyRegistrations skip(loaded->sources.count(source) != 0);
  CHORUS_RETURN_IF_ERROR(LoadScope(scope, handle));
  loaded->sources.insert(source);
  return OkStatus();
}

bool InterpreterLoader::ReferencesPython(const std::string& path) {
  auto editor = elf::ElfEditor::Open(path, elf::ElfEditor::Mode::kReadOnly);
  if (!editor.ok()) return false;
  for (const std::string& needed : (*editor)->Needed()) {
    if (needed == libpython_soname_ || needed == torch_python_soname_) return true;
  }
  return false;
}

StatusOr<std::unique_ptr<pyside::PySide>> InterpreterLoader::Load(int slot) {
  CHORUS_RETURN_IF_ERROR(LoadDependencies(installation_.torch_python));
  CHORUS_ASSIGN_OR_RETURN(auto renames, Renames(slot));
  CHORUS_ASSIGN_OR_RETURN(SlotLibraries libraries, PrepareSlot(slot));
  CHORUS_ASSIGN_OR_RETURN(PreparedCopy pyside,
                          cache_.Prepare(installation_.pyside_library, slot, RenamesOnly(renames)));
  void* handle = nullptr;
  CHORUS_RETURN_IF_ERROR(LoadCopy(
      installation_.torch_python,
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
  CHORUS_RETURN_IF_ERROR(LoadDependencies(path));
  CHORUS_ASSIGN_OR_RETURN(auto renames, Renames(slot));
  CopyRecipe recipe = RenamesOnly(renames);
  recipe.imports = TorchPythonImportEdits();  // an extension may register operators too
  CHORUS_ASSIGN_OR_RETURN(PreparedCopy copy, cache_.Prepare(path, slot, recipe));
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
  CHORUS_RETURN_IF_ERROR(LoadCopy(path, scope, &handle));
  // Loading the extension loaded the slot's copies of libpython and
  // libtorch_python it needs too (their constructors ran): share them with it.
  std::map<std::string, std::string> loaded = {{copy.path, path}};
  {
    MutexLock lock(&mu_);
    for (const auto& [copy_path, source] : slots_[slot].sources) {
      if (std::find(scope.begin(), scope.end(), copy_path) != scope.end()) {
        loaded[copy_path] = source;
      }
    }
  }
  SharePages(loaded);
  Log().debug("interpreter {}: extension {} loaded as {}", slot, path, copy.path);
  return copy.path;
}

void InterpreterLoader::SharePages(const std::map<std::string, std::string>& copies) {
  for (const auto& [copy, source] : copies) {
    {
      MutexLock lock(&mu_);
      if (!pages_shared_.insert(copy).second) continue;
    }
    StatusOr<double> shared = ShareUnchangedPages(copy, source);
    if (shared.ok()) {
      Log().debug("{:.1f} MiB of {} mapped from {}", *shared, copy, source);
    } else {  // the copy keeps its own pages: more memory, same behaviour
      Log().warn("cannot share the pages of {} with {}: {}", copy, source,
                 shared.status().ToString());
    }
  }
}

void InterpreterLoader::LogLine(int level, const std::string& message) {
  switch (level) {
    case 1:
      chorus::Log().warn("{}", message);
      break;
    case 2:
      chorus::Log().error("{}", message);
      break;
    case 3:
      chorus::Log().debug("{}", message);
      break;
    default:
      chorus::Log().info("{}", message);
      break;
  }
}

void InterpreterLoader::ReportExit(int status) {
  std::fflush(nullptr);
  const std::string header =
      "\nchorus: model code called os._exit(" + std::to_string(status) + ")\n";
  if (::write(2, header.data(), header.size()) < 0) return;
  WriteCrashContext(2);
  RecordCrashContext();
}

void InterpreterLoader::BeginExclusive() {
  MutexLock lock(&exclusive_mu_);
  while (exclusive_taken_) exclusive_released_.Wait(&exclusive_mu_);
  exclusive_taken_ = true;
}

void InterpreterLoader::EndExclusive() {
  {
    MutexLock lock(&exclusive_mu_);
    exclusive_taken_ = false;
  }
  exclusive_released_.Signal();
}

void* InterpreterLoader::TakeAutogradEngine() {
  void* engine = CurrentDefaultAutogradEngine();
  InstallAutogradEngineRouter();
  return engine;
}

at::Tensor InterpreterLoader::CrossingAlias(const at::Tensor& tensor) {
  return chorus::CrossingAlias(tensor);
}

void InterpreterLoader::EnterSlot(int slot) { registry::EnterSlot(slot); }

void InterpreterLoader::LeaveSlot(int slot) { registry::LeaveSlot(slot); }

int InterpreterLoader::CurrentSlot() { return registry::CurrentSlot(); }

int InterpreterLoader::NewSlot() {
  static std::atomic<int> next{0};
  return next++;
}

void InterpreterLoader::AddKernelFunction(const std::string& key, int slot, void* fn,
                                          bool with_keyset) {
  MutexLock lock(&mu_);
  kernel_functions_[key][slot] = {fn, with_keyset};
}

bool InterpreterLoader::RunKernelFunction(const std::string& key, int slot,
                                          const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                          std::vector<c10::IValue>* stack) {
  KernelFunction function;
  {
    MutexLock lock(&mu_);
    auto functions = kernel_functions_.find(key);
    if (functions == kernel_functions_.end()) return false;
    auto own = functions->second.find(slot);
    if (own == functions->second.end()) return false;
    function = own->second;
  }
  pyside::PySide* side = registry::Get(slot);
  if (side == nullptr) return false;
  side->RunKernel(function.fn, function.with_keyset, op, keys, stack);
  return true;
}

void InterpreterLoader::ReleaseRegistrations(int slot) {
  {
    MutexLock lock(&mu_);
    for (auto& [key, functions] : kernel_functions_) functions.erase(slot);
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
    if (!registration_made_.WaitUntil(&mu_, give_up) &&
        std::chrono::steady_clock::now() >= give_up) {
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
