#include "interpreter/src/py_interpreter_router.h"

#include <cstdio>

#include <ATen/core/PythonOpRegistrationTrampoline.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/PyInterpreter.h>
#include <c10/core/impl/PyInterpreterHooks.h>
#include <c10/core/impl/PyObjectSlot.h>

#include "chorus/common/logging.h"
#include "interpreter/src/copy_registrations.h"
#include "interpreter/src/interpreter_registry.h"
#include "interpreter/src/pyside_api.h"

namespace chorus {

namespace {

using c10::impl::PyInterpreter;
using c10::impl::PyInterpreterVTable;

// The key torch registers its hooks under (REGISTER_PYTHON_HOOKS(PyInterpreterHooks)).
constexpr char kHooksKey[] = "PyInterpreterHooks";

const PyInterpreterVTable* VTableOf(int slot) {
  pyside::PySide* side = registry::Get(slot);
  if (side == nullptr) return nullptr;
  return static_cast<PyInterpreter*>(side->TorchPyInterpreter())->vtable_;
}

// The interpreter that owns `object`; the calling thread's if it is unknown.
const PyInterpreterVTable* ForObject(const void* object) {
  int slot = registry::OwnerOf(object);
  return VTableOf(slot >= 0 ? slot : registry::CurrentSlot());
}

const PyInterpreterVTable* ForTensor(const c10::TensorImpl* self) {
  return ForObject(self->pyobj_slot()->load_pyobj());
}

const PyInterpreterVTable* ForThread() { return VTableOf(registry::CurrentSlot()); }

// The interpreter of the first Python-wrapped tensor among an operator's
// arguments, else the calling thread's.
const PyInterpreterVTable* ForArguments(const c10::OperatorHandle& op,
                                        const torch::jit::Stack* stack) {
  const size_t count = op.schema().arguments().size();
  for (size_t i = stack->size() >= count ? stack->size() - count : 0; i < stack->size(); ++i) {
    const c10::IValue& value = (*stack)[i];
    if (value.isTensor() && value.toTensor().defined()) {
      PyObject* object = value.toTensor().unsafeGetTensorImpl()->pyobj_slot()->load_pyobj();
      if (object != nullptr) return ForObject(object);
    }
  }
  return ForThread();
}

[[noreturn]] void NoInterpreter(const char* what) {
  TORCH_CHECK(false, "chorus: ", what,
              " needs a Python interpreter, but the object's interpreter has finished and the "
              "calling thread works in none");
}

template <typename Target>
const PyInterpreterVTable& Require(Target* target, const char* what) {
  if (target == nullptr) NoInterpreter(what);
  return *target;
}

// Every call goes to one interpreter's own PyInterpreter; which one is the
// whole of this class.
class RoutingVTable final : public PyInterpreterVTable {
 public:
  std::string name() const override { return "chorus routing PyInterpreter"; }

  void incref(PyObject* object) const override {
    if (auto* target = ForObject(object)) target->incref(object);
  }
  void decref(PyObject* object) const override {
    if (auto* target = ForObject(object)) target->decref(object);
  }
  bool try_incref(const c10::impl::PyObjectSlot& slot) const override {
    auto* target = ForObject(slot.load_pyobj());
    return target != nullptr && target->try_incref(slot);
  }
  size_t refcnt(PyObject* object) const override {
    auto* target = ForObject(object);
    return target != nullptr ? target->refcnt(object) : 1;
  }

  c10::intrusive_ptr<c10::TensorImpl> detach(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "detach").detach(self);
  }
  void dispatch(const c10::OperatorHandle& op, torch::jit::Stack* stack) const override {
    Require(ForArguments(op, stack), "Python dispatch").dispatch(op, stack);
  }
  void reportErrorCallback(PyObject* callback, c10::DispatchKey key) const override {
    if (auto* target = ForObject(callback)) target->reportErrorCallback(callback, key);
  }
  void python_op_registration_trampoline(const c10::OperatorHandle& op, c10::DispatchKey key,
                                         c10::DispatchKeySet keyset, torch::jit::Stack* stack,
                                         bool with_keyset, bool with_op) const override {
    Require(ForThread(), "a Python kernel")
        .python_op_registration_trampoline(op, key, keyset, stack, with_keyset, with_op);
  }
  void throw_abstract_impl_not_imported_error(std::string opname, const char* pymodule,
                                              const char* context) const override {
    Require(ForThread(), "an abstract impl")
        .throw_abstract_impl_not_imported_error(std::move(opname), pymodule, context);
  }
  void python_dispatcher(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack) const override {
    Require(ForArguments(op, stack), "the Python dispatcher").python_dispatcher(op, keys, stack);
  }

  bool is_contiguous(const c10::TensorImpl* self, at::MemoryFormat format) const override {
    return Require(ForTensor(self), "is_contiguous").is_contiguous(self, format);
  }
  c10::SymBool sym_is_contiguous(const c10::TensorImpl* self,
                                 at::MemoryFormat format) const override {
    return Require(ForTensor(self), "sym_is_contiguous").sym_is_contiguous(self, format);
  }
  bool is_strides_like(const c10::TensorImpl* self, at::MemoryFormat format) const override {
    return Require(ForTensor(self), "is_strides_like").is_strides_like(self, format);
  }
  bool is_non_overlapping_and_dense(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "is_non_overlapping_and_dense")
        .is_non_overlapping_and_dense(self);
  }
  c10::Device device(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "device").device(self);
  }
  int64_t dim(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "dim").dim(self);
  }
  c10::IntArrayRef strides(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "strides").strides(self);
  }
  c10::IntArrayRef sizes(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "sizes").sizes(self);
  }
  c10::SymIntArrayRef sym_sizes(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "sym_sizes").sym_sizes(self);
  }
  c10::Layout layout(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "layout").layout(self);
  }
  int64_t numel(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "numel").numel(self);
  }
  c10::SymInt sym_numel(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "sym_numel").sym_numel(self);
  }
  c10::SymIntArrayRef sym_strides(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "sym_strides").sym_strides(self);
  }
  c10::SymInt sym_storage_offset(const c10::TensorImpl* self) const override {
    return Require(ForTensor(self), "sym_storage_offset").sym_storage_offset(self);
  }

  // GPU tracing reaches the calling thread's interpreter; none, no trace.
  void trace_gpu_event_creation(c10::DeviceType type, uintptr_t event) const override {
    if (auto* target = ForThread()) target->trace_gpu_event_creation(type, event);
  }
  void trace_gpu_event_deletion(c10::DeviceType type, uintptr_t event) const override {
    if (auto* target = ForThread()) target->trace_gpu_event_deletion(type, event);
  }
  void trace_gpu_event_record(c10::DeviceType type, uintptr_t event,
                              uintptr_t stream) const override {
    if (auto* target = ForThread()) target->trace_gpu_event_record(type, event, stream);
  }
  void trace_gpu_event_wait(c10::DeviceType type, uintptr_t event,
                            uintptr_t stream) const override {
    if (auto* target = ForThread()) target->trace_gpu_event_wait(type, event, stream);
  }
  void trace_gpu_memory_allocation(c10::DeviceType type, uintptr_t ptr) const override {
    if (auto* target = ForThread()) target->trace_gpu_memory_allocation(type, ptr);
  }
  void trace_gpu_memory_deallocation(c10::DeviceType type, uintptr_t ptr) const override {
    if (auto* target = ForThread()) target->trace_gpu_memory_deallocation(type, ptr);
  }
  void trace_gpu_stream_creation(c10::DeviceType type, uintptr_t stream) const override {
    if (auto* target = ForThread()) target->trace_gpu_stream_creation(type, stream);
  }
  void trace_gpu_device_synchronization(c10::DeviceType type) const override {
    if (auto* target = ForThread()) target->trace_gpu_device_synchronization(type);
  }
  void trace_gpu_stream_synchronization(c10::DeviceType type, uintptr_t stream) const override {
    if (auto* target = ForThread()) target->trace_gpu_stream_synchronization(type, stream);
  }
  void trace_gpu_event_synchronization(c10::DeviceType type, uintptr_t event) const override {
    if (auto* target = ForThread()) target->trace_gpu_event_synchronization(type, event);
  }

  void reset_backward_hooks(const c10::TensorImpl* self) const override {
    if (auto* target = ForTensor(self)) target->reset_backward_hooks(self);
  }
};

PyInterpreter* RoutingInterpreter() {
  static auto* vtable = new RoutingVTable();
  static auto* interpreter = new PyInterpreter(vtable);
  return interpreter;
}

struct RoutingHooks final : public c10::impl::PyInterpreterHooksInterface {
  PyInterpreter* getPyInterpreter() const override { return RoutingInterpreter(); }
};

// Registered when this library loads, before any interpreter's copy of
// libtorch_python exists and before anything asks c10 for the hooks.
// Preferred priority: a copy whose key was not renamed skips its own.
const bool g_hooks_registered = [] {
  c10::impl::PyInterpreterHooksRegistry()->Register(
      kHooksKey,
      // Variadic: the creator takes a PyInterpreterHooksArgs up to torch 2.11, nothing later.
      [](auto&&...) -> std::unique_ptr<c10::impl::PyInterpreterHooksInterface> {
        return std::make_unique<RoutingHooks>();
      },
      c10::REGISTRY_PREFERRED);
  return true;
}();

}  // namespace

// torch 2.14 caches one torch.ops object per operator for the whole process
// (the first interpreter's), which Python dispatch, the Python dispatcher and
// Python kernels then use in every interpreter. Every copy of libtorch_python
// calls torch::detail::getTorchApiFunction through its PLT, and the loader
// looks in the global scope first: this definition, of the same name, stands
// in for each copy's and answers with the calling thread's interpreter's object.
void* TorchApiFunctionOfThisInterpreter(const c10::OperatorHandle& op) __asm__(
    "_ZN5torch6detail19getTorchApiFunctionERKN3c1014OperatorHandleE")
    __attribute__((visibility("default"), used));
void* TorchApiFunctionOfThisInterpreter(const c10::OperatorHandle& op) {
  pyside::PySide* side = registry::Get(registry::CurrentSlot());
  TORCH_CHECK(side != nullptr, "chorus: torch.ops object of ", op.operator_name().name,
              " wanted on a thread that works in no interpreter");
  return side->TorchApiFunction(op);
}

// torch._C registers its PyInterpreter for Python kernels registered from
// Python (first registration wins); every copy's call lands here instead.
bool RegisterTrampolineInterpreter(PyInterpreter* /*copy's own*/) __asm__(
    "chorus_register_trampoline_interpreter") __attribute__((visibility("default"), used));
bool RegisterTrampolineInterpreter(PyInterpreter* /*copy's own*/) {
  return at::impl::PythonOpRegistrationTrampoline::registerInterpreter(RoutingInterpreter());
}

std::map<std::string, std::string> TorchPythonRoutingImportEdits() {
  std::string name = ExportedName(reinterpret_cast<const void*>(
      &at::impl::PythonOpRegistrationTrampoline::registerInterpreter));
  if (name.empty()) return {};
  return {{name, "chorus_register_trampoline_interpreter"}};
}

std::map<std::string, std::string> TorchPythonConstantEdits(int slot) {
  // Same length as the key, unique per slot: "PyInterpreterH0012".
  char key[sizeof(kHooksKey)];
  std::snprintf(key, sizeof(key), "PyInterpreterH%04u", static_cast<unsigned>(slot) % 10000u);
  return {{kHooksKey, key}};
}
}  // namespace chorus
