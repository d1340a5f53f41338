#include "chorus/interpreter/interpreter_manager.h"

#include <ATen/Parallel.h>
#include <ATen/core/ivalue.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/HIPHooksInterface.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "chorus/common/crash_report.h"
#include "chorus/common/logging.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/gpu_host.h"
#include "interpreter/src/interpreter_loader.h"
#include "interpreter/src/interpreter_registry.h"
#include "interpreter/src/pyside_api.h"
#include "interpreter/src/slot.h"
#include "interpreter/src/watchdog.h"

namespace chorus {
namespace internal {

// What the manager and its ReplicatedObjects share.
struct ManagerCore {
  std::vector<std::unique_ptr<Slot>> slots;
  std::atomic<bool> alive{true};

  // The first idle unreserved slot in index order, claimed with a
  // compare-and-swap, so that while one is idle the same interpreter serves
  // again, its caches warm (a rotating start cost a trivial model ~20 us at
  // the median at concurrency 1, bench-serve); if none is idle, the least busy
  // unreserved one; reserved slots only when every slot is reserved. Either way
  // the slot's user count includes the caller on return.
  // Slot `index` (counting the caller in), or any as above when it is -1.
  Slot* Claim(int index) {
    if (index < 0) return Claim();
    Slot* slot = slots.at(static_cast<size_t>(index)).get();
    slot->users.fetch_add(1, std::memory_order_acquire);
    return slot;
  }

  Slot* Claim() {
    const size_t n = slots.size();
    Slot* least = nullptr;
    for (size_t i = 0; i < n; ++i) {
      Slot* slot = slots[i].get();
      if (slot->reserved.load(std::memory_order_relaxed)) continue;
      int idle = 0;
      if (slot->users.load(std::memory_order_relaxed) == 0 &&
          slot->users.compare_exchange_strong(idle, 1, std::memory_order_acquire)) {
        return slot;
      }
      if (least == nullptr || slot->users.load(std::memory_order_relaxed) <
                                  least->users.load(std::memory_order_relaxed)) {
        least = slot;
      }
    }
    if (least == nullptr) {  // every slot is reserved
      least = slots[0].get();
      for (const auto& slot : slots) {
        if (slot->users.load(std::memory_order_relaxed) <
            least->users.load(std::memory_order_relaxed)) {
          least = slot.get();
        }
      }
    }
    least->users.fetch_add(1, std::memory_order_acquire);
    return least;
  }
};

// One replicated object: a factory and the object it made in each interpreter.
struct Replicated {
  std::shared_ptr<ManagerCore> core;
  std::function<StatusOr<Object>(InterpreterSession&)> factory;
  // Strong references, one per slot, made lazily; written under that slot's GIL.
  std::unique_ptr<std::atomic<pyside::PyRef*>[]> objects;
  // The thread running the factory for each slot (default: none), so that the
  // factory runs once per interpreter however many callers race to it.
  Mutex making_mu;
  CondVar made;
  std::vector<std::thread::id> makers CHORUS_GUARDED_BY(making_mu);

  ~Replicated();
};

}  // namespace internal

namespace {

std::atomic<uint64_t> g_next_call_token{1};

int HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace

// ---------------------------------------------------------------------------
// InterpreterManagerImpl

class InterpreterManagerImpl final : public InterpreterManager {
 public:
  InterpreterManagerImpl(std::unique_ptr<InterpreterLoader> loader, int size)
      : loader_(std::move(loader)), core_(std::make_shared<internal::ManagerCore>()) {
    for (int i = 0; i < size; ++i) {
      auto slot = std::make_unique<internal::Slot>();
      slot->index = i;
      slot->library_slot = InterpreterLoader::NewSlot();
      slot->watchdog = &watchdog_;
      core_->slots.push_back(std::move(slot));
    }
  }

  ~InterpreterManagerImpl() override;

  // Loads and starts every interpreter, several at a time.
  Status StartAll(const InterpreterManagerOptions& options);

  int size() const override { return static_cast<int>(core_->slots.size()); }

  InterpreterSession AcquireOne() override { return InterpreterSession(core_->Claim()); }

  InterpreterSession Acquire(int index) override { return InterpreterSession(core_->Claim(index)); }

  void SetReserved(int index, bool reserved) override {
    core_->slots.at(static_cast<size_t>(index))
        ->reserved.store(reserved, std::memory_order_relaxed);
  }

  void SetModelCallHandler(std::shared_ptr<ModelCallHandler> handler) override {
    loader_->model_calls().SetHandler(std::move(handler));
  }

  std::vector<InterpreterStats> Stats() const override {
    std::vector<InterpreterStats> stats;
    for (const auto& slot : core_->slots) {
      stats.push_back({slot->busy_ns.load(std::memory_order_relaxed) / 1e9,
                       slot->users.load(std::memory_order_relaxed)});
    }
    return stats;
  }

  ReplicatedObject Replicate(
      std::function<StatusOr<Object>(InterpreterSession&)> factory) override {
    auto rep = std::make_shared<internal::Replicated>();
    rep->core = core_;
    rep->factory = std::move(factory);
    rep->objects.reset(new std::atomic<pyside::PyRef*>[core_->slots.size()]);
    for (size_t i = 0; i < core_->slots.size(); ++i) rep->objects[i] = nullptr;
    MutexLock lock(&rep->making_mu);
    rep->makers.resize(core_->slots.size());
    return ReplicatedObject(std::move(rep));
  }

 private:
  Status StartOne(internal::Slot* slot, const InterpreterManagerOptions& options);

  std::unique_ptr<InterpreterLoader> loader_;
  std::shared_ptr<internal::ManagerCore> core_;
  Watchdog watchdog_;
  // Python's start-up touches process-wide state (locale, environment), so
  // interpreters initialize one at a time; preloading then runs in parallel.
  Mutex initialize_mu_;
};

namespace {

// The crash report's part about interpreters: which one the crashing thread
// works in, and its Python stack. Async-signal-safe.
void ReportInterpreterOfThisThread(int fd) {
  if (pyside::PySide* side = registry::Get(registry::CurrentSlot())) side->DumpTraceback(fd);
}

// Whether interpreters may load the Python packages that only drive a GPU
// (triton, the CUDA bindings): CHORUS_LOAD_GPU_PACKAGES=0/1 (or its former
// name, CHORUS_LOAD_TRITON) decides, else HostHasGpu().
bool GpuPackagesCanRun() {
  for (const char* name : {"CHORUS_LOAD_GPU_PACKAGES", "CHORUS_LOAD_TRITON"}) {
    const char* choice = std::getenv(name);
    if (choice != nullptr && (choice == std::string("0") || choice == std::string("1"))) {
      return choice == std::string("1");
    }
  }
  return HostHasGpu();
}

// Copies of an upgraded or deleted Python environment are never used again
// and can be large; a failure to prune costs disk, never a start.
void PruneLibraryCache(const std::string& root) {
  StatusOr<uint64_t> freed = LibraryCache(root).PruneStale();
  if (!freed.ok()) {
    Log().warn("library cache {}: {}", root, freed.status().ToString());
  } else if (*freed > 0) {
    Log().info("library cache {}: pruned {} MiB of stale copies", root, *freed >> 20);
  }
}

}  // namespace

bool HostHasGpu() {
  static const bool has_gpu =
      at::detail::getCUDAHooks().getNumGPUs() > 0 || at::detail::getHIPHooks().getNumGPUs() > 0;
  return has_gpu;
}

bool IsGpuOnlyLibrary(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (name.find(".so") == std::string_view::npos) return false;
  for (std::string_view prefix :
       {"libtorch_cuda", "libc10_cuda", "libcaffe2_nvrtc", "libtorch_hip", "libc10_hip"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  for (std::string_view dir : {"/site-packages/nvidia/", "/usr/local/cuda", "/opt/rocm"}) {
    if (path.find(dir) != std::string_view::npos) return true;
  }
  return false;
}

StatusOr<std::unique_ptr<InterpreterManager>> InterpreterManager::Create(
    const InterpreterManagerOptions& options) {
  static const bool hooked = [] {
    AddCrashReportHook(&ReportInterpreterOfThisThread);
    return true;
  }();
  (void)hooked;
  int size = options.num_interpreters > 0 ? options.num_interpreters : HardwareThreads();
  if (options.intra_op_threads >= 0) {
    int threads = options.intra_op_threads > 0 ? options.intra_op_threads
                                               : std::max(1, HardwareThreads() / size);
    at::set_num_threads(threads);
  }
  CHORUS_ASSIGN_OR_RETURN(PythonInstallation installation, PythonInstallation::Default());
  std::string cache = options.cache_dir.empty() ? LibraryCache::DefaultRoot() : options.cache_dir;
  PruneLibraryCache(cache);
  CHORUS_ASSIGN_OR_RETURN(auto loader, InterpreterLoader::Create(std::move(installation), cache));
  auto manager = std::make_unique<InterpreterManagerImpl>(std::move(loader), size);
  CHORUS_RETURN_IF_ERROR(manager->StartAll(options));
  return std::unique_ptr<InterpreterManager>(std::move(manager));
}

Status InterpreterManagerImpl::StartOne(internal::Slot* slot,
                                        const InterpreterManagerOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(auto side, loader_->Load(slot->library_slot));
  // Routable before Python starts: torch's import already calls back into it.
  registry::Add(slot->library_slot, side.get());
  pyside::StartOptions start;
  start.slot = slot->library_slot;
  start.index = slot->index;
  start.program_name = loader_->installation().program;
  start.chorus_python_dir = loader_->installation().chorus_python_dir;
  start.load_gpu_packages = GpuPackagesCanRun();
  start.defer_imports = options.defer_imports;
  start.host = loader_.get();
  {
    MutexLock lock(&initialize_mu_);
    Status started = slot->home.Start([&] {
      registry::ThreadScope in_slot(slot->library_slot);
      return side->Start(start);
    });
    if (!started.ok()) {
      registry::Remove(slot->library_slot);  // `side` is about to go
      return started;
    }
  }
  slot->side = std::move(side);
  InterpreterSession session = Acquire(slot->index);
  for (const std::string& module : options.preload_modules) {
    StatusOr<Object> imported = session.Import(module);
    if (!imported.ok()) return imported.status().Annotate("importing " + module);
  }
  return OkStatus();
}

Status InterpreterManagerImpl::StartAll(const InterpreterManagerOptions& options) {
  const size_t n = core_->slots.size();
  std::vector<Status> results(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) {
      results[i] = StartOne(core_->slots[i].get(), options)
                       .Annotate("starting interpreter " + std::to_string(i));
    }
  };
  std::vector<std::thread> workers;
  size_t parallel = std::min(n, static_cast<size_t>(HardwareThreads()));
  for (size_t i = 1; i < parallel; ++i) workers.emplace_back(worker);
  worker();
  for (auto& thread : workers) thread.join();
  for (const Status& result : results) {
    if (!result.ok()) return result;
  }
  Log().info("started {} interpreters", n);
  return OkStatus();
}

InterpreterManagerImpl::~InterpreterManagerImpl() {
  core_->alive = false;
  for (const auto& slot : core_->slots) {
    if (slot->users.load() != 0) {
      Log().error("interpreter {} destroyed with {} open sessions", slot->index,
                  slot->users.load());
    }
    registry::Remove(slot->library_slot);
    if (slot->side) slot->home.Finish([&] { slot->side->Shutdown(); });
    loader_->ReleaseRegistrations(slot->library_slot);
  }
}

// ---------------------------------------------------------------------------
// InterpreterSession

InterpreterSession::InterpreterSession(internal::Slot* slot)
    : slot_(slot), opened_(std::chrono::steady_clock::now()) {
  registry::EnterSlot(slot_->library_slot);
  slot_->side->AcquireGil();
}

InterpreterSession::InterpreterSession(InterpreterSession&& other) noexcept
    : slot_(other.slot_), opened_(other.opened_) {
  other.slot_ = nullptr;
}

InterpreterSession::~InterpreterSession() {
  if (slot_ == nullptr) return;
  slot_->side->ReleaseGil();
  registry::LeaveSlot(slot_->library_slot);
  slot_->busy_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now() - opened_)
                               .count(),
                           std::memory_order_relaxed);
  slot_->users.fetch_sub(1, std::memory_order_release);
}

int InterpreterSession::index() const { return slot_->index; }

Object InterpreterSession::Wrap(pyside::PyRef* ref) { return Object(slot_, ref); }

StatusOr<Object> InterpreterSession::Import(std::string_view module) {
  CHORUS_ASSIGN_OR_RETURN(pyside::PyRef * ref, slot_->side->Import(std::string(module)));
  return Wrap(ref);
}

StatusOr<Object> InterpreterSession::Global(std::string_view module, std::string_view name) {
  CHORUS_ASSIGN_OR_RETURN(Object imported, Import(module));
  return imported.Attr(name);
}

Status InterpreterSession::Exec(std::string_view code) {
  return slot_->side->Exec(std::string(code));
}

StatusOr<Object> InterpreterSession::Eval(std::string_view expression) {
  CHORUS_ASSIGN_OR_RETURN(pyside::PyRef * ref, slot_->side->Eval(std::string(expression)));
  return Wrap(ref);
}

StatusOr<Object> InterpreterSession::FromIValue(const c10::IValue& value) {
  CHORUS_ASSIGN_OR_RETURN(pyside::PyRef * ref, slot_->side->FromIValue(value));
  return Wrap(ref);
}

// ---------------------------------------------------------------------------
// Object

Object::Object(const Object& other) : slot_(other.slot_), ref_(other.ref_) {
  if (ref_ != nullptr) slot_->side->IncRef(ref_);
}

Object& Object::operator=(const Object& other) {
  if (this != &other) {
    if (other.ref_ != nullptr) other.slot_->side->IncRef(other.ref_);
    Reset();
    slot_ = other.slot_;
    ref_ = other.ref_;
  }
  return *this;
}

Object::Object(Object&& other) noexcept : slot_(other.slot_), ref_(other.ref_) {
  other.ref_ = nullptr;
}

Object& Object::operator=(Object&& other) noexcept {
  if (this != &other) {
    Reset();
    slot_ = other.slot_;
    ref_ = other.ref_;
    other.ref_ = nullptr;
  }
  return *this;
}

Object::~Object() { Reset(); }

void Object::Reset() {
  if (ref_ != nullptr) slot_->side->DecRef(ref_);
  ref_ = nullptr;
}

StatusOr<Object> Object::Call(const std::vector<c10::IValue>& args, const Kwargs& kwargs,
                              const CallOptions& options) const {
  if (!valid()) return FailedPreconditionError("Call on an empty Object");
  uint64_t token = 0;
  if (options.deadline != std::chrono::steady_clock::time_point::max()) {
    if (std::chrono::steady_clock::now() >= options.deadline) {
      return DeadlineExceededError("deadline passed before the call started");
    }
    token = g_next_call_token.fetch_add(1, std::memory_order_relaxed);
    slot_->watchdog->Arm(options.deadline, slot_->side.get(), token);
  }
  StatusOr<pyside::PyRef*> result = slot_->side->Call(ref_, args, kwargs, token);
  if (token != 0) slot_->watchdog->Disarm(token);
  if (!result.ok()) return result.status();
  return Object(slot_, *result);
}

StatusOr<Object> Object::Call(const std::vector<c10::IValue>& args) const {
  return Call(args, Kwargs{});
}

StatusOr<Object> Object::Call() const { return Call({}, Kwargs{}); }

StatusOr<Object> Object::CallObjects(const std::vector<Object>& args) const {
  if (!valid()) return FailedPreconditionError("Call on an empty Object");
  std::vector<pyside::PyRef*> refs;
  for (const Object& arg : args) {
    if (arg.slot_ != slot_ || !arg.valid()) {
      return InvalidArgumentError("CallObjects: arguments must be objects of the same interpreter");
    }
    refs.push_back(arg.ref_);
  }
  CHORUS_ASSIGN_OR_RETURN(pyside::PyRef * ref, slot_->side->CallObjects(ref_, refs));
  return Object(slot_, ref);
}

StatusOr<Object> Object::Attr(std::string_view name) const {
  if (!valid()) return FailedPreconditionError("Attr on an empty Object");
  CHORUS_ASSIGN_OR_RETURN(pyside::PyRef * ref, slot_->side->GetAttr(ref_, std::string(name)));
  return Object(slot_, ref);
}

StatusOr<c10::IValue> Object::ToIValue() const {
  if (!valid()) return FailedPreconditionError("ToIValue on an empty Object");
  return slot_->side->ToIValue(ref_);
}

StatusOr<std::string> Object::Repr() const {
  if (!valid()) return FailedPreconditionError("Repr on an empty Object");
  return slot_->side->Repr(ref_);
}

// ---------------------------------------------------------------------------
// ReplicatedObject

internal::Replicated::~Replicated() {
  if (!core || !core->alive) return;  // the interpreters are gone, and their objects
  for (size_t i = 0; i < core->slots.size(); ++i) {
    pyside::PyRef* ref = objects[i].load();
    if (ref == nullptr) continue;
    internal::Slot* slot = core->slots[i].get();
    slot->users.fetch_add(1, std::memory_order_acquire);
    InterpreterSession session(slot);
    slot->side->DecRef(ref);
  }
}

namespace {

// Releases the calling thread's GIL of one interpreter, however deeply its
// sessions nest, for the scope's life: a wait on another thread that needs it.
class GilSuspension {
 public:
  explicit GilSuspension(pyside::PySide* side) : side_(side), state_(side->SuspendGil()) {}
  ~GilSuspension() { side_->ResumeGil(state_); }
  GilSuspension(const GilSuspension&) = delete;
  GilSuspension& operator=(const GilSuspension&) = delete;

 private:
  pyside::PySide* side_;
  void* state_;
};

}  // namespace

StatusOr<Object> ReplicatedObject::In(InterpreterSession& session) const {
  if (!rep_ || !rep_->core->alive) {
    return FailedPreconditionError("ReplicatedObject used after its InterpreterManager ended");
  }
  internal::Slot* slot = session.slot_;
  const size_t index = static_cast<size_t>(slot->index);
  std::atomic<pyside::PyRef*>& cell = rep_->objects[index];
  internal::Replicated& rep = *rep_;
  while (true) {
    if (pyside::PyRef* ref = cell.load(std::memory_order_acquire)) {
      slot->side->IncRef(ref);
      return Object(slot, ref);
    }
    {
      MutexLock lock(&rep.making_mu);
      if (cell.load(std::memory_order_acquire) != nullptr) continue;
      const std::thread::id maker = rep.makers[index];
      if (maker == std::thread::id()) {
        rep.makers[index] = std::this_thread::get_id();
        break;
      }
      if (maker == std::this_thread::get_id()) {
        return FailedPreconditionError("a replication factory asked for the object it is making");
      }
    }
    // The maker releases the GIL inside the factory (imports, loads) and
    // needs it back to finish; this thread waits without it. The lock is
    // let go before the GIL is taken again (the maker takes them the other
    // way round).
    GilSuspension suspended(slot->side.get());
    MutexLock lock(&rep.making_mu);
    while (rep.makers[index] != std::thread::id() && cell.load() == nullptr) {
      rep.made.Wait(&rep.making_mu);
    }
  }
  // However the factory ends (an error, an exception), the slot's waiters
  // wake; a failed factory leaves the slot to the next caller, which tries again.
  struct MakerDone {
    internal::Replicated& rep;
    size_t index;
    ~MakerDone() {
      MutexLock lock(&rep.making_mu);
      rep.makers[index] = std::thread::id();
      rep.made.SignalAll();
    }
  } done{rep, index};
  StatusOr<Object> made = rep.factory(session);
  if (made.ok() && made->slot_ != slot) {
    made = InvalidArgumentError("replication factory returned an object of another interpreter");
  }
  if (made.ok()) {
    slot->side->IncRef(made->ref_);
    cell.store(made->ref_, std::memory_order_release);
  }
  return made;
}

StatusOr<c10::IValue> ReplicatedObject::Call(const std::vector<c10::IValue>& args) const {
  return Call(args, Kwargs{});
}

StatusOr<c10::IValue> ReplicatedObject::Call(const std::vector<c10::IValue>& args,
                                             const Kwargs& kwargs,
                                             const CallOptions& options) const {
  if (!rep_ || !rep_->core->alive) {
    return FailedPreconditionError("ReplicatedObject used after its InterpreterManager ended");
  }
  InterpreterSession session(rep_->core->Claim(options.interpreter));
  CHORUS_ASSIGN_OR_RETURN(Object object, In(session));
  CHORUS_ASSIGN_OR_RETURN(Object result, object.Call(args, kwargs, options));
  return result.ToIValue();
}

}  // namespace chorus
