#include "interpreter/src/copy_registrations.h"

#include <dlfcn.h>

#include <string>

#include <torch/csrc/jit/frontend/schema_type_parser.h>
#include <torch/custom_class.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/control_plane/Handlers.hpp>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <typeinfo>
#include <variant>
#include <vector>

namespace chorus {

namespace {

// Access to torch::Library's private _def overloads: an explicit template
// instantiation may name private members (the standard's one sanctioned way).
template <typename Tag, typename Tag::Member kMember>
struct PrivateAccess {
  friend typename Tag::Member Get(Tag) { return kMember; }
};

struct DefineSchemaTag {
  using Member = torch::Library& (torch::Library::*)(c10::FunctionSchema&&, c10::OperatorName*,
                                                     const std::vector<at::Tag>&,
                                                     torch::_RegisterOrVerify) &;
  friend Member Get(DefineSchemaTag);
};
template struct PrivateAccess<DefineSchemaTag, &torch::Library::_def>;

struct DefineWithKernelTag {
  using Member =
      torch::Library& (torch::Library::*)(std::variant<c10::OperatorName, c10::FunctionSchema>&&,
                                          torch::CppFunction&&, const std::vector<at::Tag>&)&;
  friend Member Get(DefineWithKernelTag);
};
template struct PrivateAccess<DefineWithKernelTag, &torch::Library::_def>;

struct ImplementTag {
  using Member = torch::Library& (torch::Library::*)(const char*, torch::CppFunction&&,
                                                     torch::_RegisterOrVerify) &;
  friend Member Get(ImplementTag);
};
template struct PrivateAccess<ImplementTag, &torch::Library::_impl>;

struct FallbackTag {
  using Member = torch::Library& (torch::Library::*)(torch::CppFunction&&)&;
  friend Member Get(FallbackTag);
};
template struct PrivateAccess<FallbackTag, &torch::Library::_fallback>;

thread_local bool tls_skip = false;

// torch::detail::class_base's constructor is protected; this opens it.
struct ClassBase : torch::detail::class_base {
  ClassBase(const std::string& namespace_name, const std::string& class_name, std::string doc,
            const std::type_info& pointer_type, const std::type_info& capsule_type)
      : class_base(namespace_name, class_name, std::move(doc), pointer_type, capsule_type) {}

  // Points this class_ at the class registered as `qualified_name`, if any.
  void Adopt(const std::string& qualified_name) {
    if (at::ClassTypePtr registered = torch::getCustomClass(qualified_name)) {
      qualClassName = qualified_name;
      classTypePtr = std::move(registered);
    }
  }
};

}  // namespace

SkipCopyRegistrations::SkipCopyRegistrations(bool skip) : previous_(tls_skip) { tls_skip = skip; }
SkipCopyRegistrations::~SkipCopyRegistrations() { tls_skip = previous_; }

// The wrappers the copies bind to, by the names TorchPythonImportEdits gives.
// A member function's `this` is its first argument in the ABI, so a free
// function with the object first stands in for it.
#define CHORUS_WRAPPER(name) __asm__(name) __attribute__((visibility("default"), used))

torch::Library& DefineSchema(torch::Library* self, c10::FunctionSchema&& schema,
                             c10::OperatorName* out_name, const std::vector<at::Tag>& tags,
                             torch::_RegisterOrVerify rv)
    CHORUS_WRAPPER("chorus_torch_library_def_schema");
torch::Library& DefineSchema(torch::Library* self, c10::FunctionSchema&& schema,
                             c10::OperatorName* out_name, const std::vector<at::Tag>& tags,
                             torch::_RegisterOrVerify rv) {
  if (tls_skip) return *self;
  return (self->*Get(DefineSchemaTag{}))(std::move(schema), out_name, tags, rv);
}

torch::Library& DefineWithKernel(torch::Library* self,
                                 std::variant<c10::OperatorName, c10::FunctionSchema>&& name,
                                 torch::CppFunction&& kernel, const std::vector<at::Tag>& tags)
    CHORUS_WRAPPER("chorus_torch_library_def_kernel");
torch::Library& DefineWithKernel(torch::Library* self,
                                 std::variant<c10::OperatorName, c10::FunctionSchema>&& name,
                                 torch::CppFunction&& kernel, const std::vector<at::Tag>& tags) {
  if (tls_skip) return *self;
  return (self->*Get(DefineWithKernelTag{}))(std::move(name), std::move(kernel), tags);
}

torch::Library& Implement(torch::Library* self, const char* name, torch::CppFunction&& kernel,
                          torch::_RegisterOrVerify rv) CHORUS_WRAPPER("chorus_torch_library_impl");
torch::Library& Implement(torch::Library* self, const char* name, torch::CppFunction&& kernel,
                          torch::_RegisterOrVerify rv) {
  if (tls_skip) return *self;
  return (self->*Get(ImplementTag{}))(name, std::move(kernel), rv);
}

torch::Library& Fallback(torch::Library* self, torch::CppFunction&& kernel)
    CHORUS_WRAPPER("chorus_torch_library_fallback");
torch::Library& Fallback(torch::Library* self, torch::CppFunction&& kernel) {
  if (tls_skip) return *self;
  return (self->*Get(FallbackTag{}))(std::move(kernel));
}

// A further copy's TORCH_LIBRARY blocks open their namespace as a fragment
// (only one library per process may define a namespace); their definitions
// are skipped above.
void ConstructLibrary(torch::Library* self, torch::Library::Kind kind, std::string ns,
                      std::optional<c10::DispatchKey> key, const char* file, uint32_t line)
    CHORUS_WRAPPER("chorus_torch_library_ctor");
void ConstructLibrary(torch::Library* self, torch::Library::Kind kind, std::string ns,
                      std::optional<c10::DispatchKey> key, const char* file, uint32_t line) {
  if (tls_skip && kind == torch::Library::DEF) kind = torch::Library::FRAGMENT;
  new (self) torch::Library(kind, std::move(ns), key, file, line);
}

// A further copy's TorchScript class_ objects stand for the first copy's
// classes: each is made under a throw-away namespace (the class table refuses
// a second class of one name), then pointed at the registered class.
void ConstructClassBase(torch::detail::class_base* self, const std::string& namespace_name,
                        const std::string& class_name, std::string doc,
                        const std::type_info& pointer_type, const std::type_info& capsule_type)
    CHORUS_WRAPPER("chorus_torch_class_base_ctor");
void ConstructClassBase(torch::detail::class_base* self, const std::string& namespace_name,
                        const std::string& class_name, std::string doc,
                        const std::type_info& pointer_type, const std::type_info& capsule_type) {
  if (!tls_skip) {
    new (self) ClassBase(namespace_name, class_name, std::move(doc), pointer_type, capsule_type);
    return;
  }
  static std::atomic<int> next_copy{0};
  const std::string throw_away = "chorus_copy" + std::to_string(next_copy++);
  auto* made =
      new (self) ClassBase(throw_away, class_name, std::move(doc), pointer_type, capsule_type);
  made->Adopt("__torch__.torch.classes." + namespace_name + "." + class_name);
}

void RegisterClassMethod(std::unique_ptr<torch::jit::Function> method)
    CHORUS_WRAPPER("chorus_torch_register_class_method");
void RegisterClassMethod(std::unique_ptr<torch::jit::Function> method) {
  if (!tls_skip) torch::registerCustomClassMethod(std::move(method));
}

// A TorchScript class's methods: a further copy's class_<T> finds the first
// copy's class type (the type table is keyed by type name) and would add them again.
void AddClassMethod(c10::ClassType* self, torch::jit::Function* method)
    CHORUS_WRAPPER("chorus_c10_class_type_add_method");
void AddClassMethod(c10::ClassType* self, torch::jit::Function* method) {
  if (!tls_skip) self->addMethod(method);
}

// Handlers of torch.distributed's control plane (a process-wide table that
// refuses a second handler of one name).
void RegisterControlPlaneHandler(const std::string& name, c10d::control_plane::HandlerFunc handler)
    CHORUS_WRAPPER("chorus_c10d_control_plane_register_handler");
void RegisterControlPlaneHandler(const std::string& name,
                                 c10d::control_plane::HandlerFunc handler) {
  if (!tls_skip) c10d::control_plane::registerHandler(name, std::move(handler));
}

// Opaque types for TorchScript schemas are registered from Python at import
// (a process-wide table that refuses a second registration): every
// interpreter registers, the first one counts.
void RegisterOpaqueTypeOnce(const std::string& name)
    CHORUS_WRAPPER("chorus_torch_jit_register_opaque_type");
void RegisterOpaqueTypeOnce(const std::string& name) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!torch::jit::isRegisteredOpaqueType(name)) torch::jit::registerOpaqueType(name);
}

#undef CHORUS_WRAPPER

namespace {

// A non-virtual member function's code address (the Itanium ABI's first word).
template <typename Member>
const void* CodeOf(Member member) {
  static_assert(sizeof(Member) == 2 * sizeof(void*), "Itanium member function pointer");
  const void* words[2];
  std::memcpy(words, &member, sizeof(words));
  return words[0];
}

}  // namespace

std::map<std::string, std::string> TorchPythonImportEdits() {
  std::map<std::string, std::string> edits = {
      // A constructor's address cannot be taken; these names are the same in 2.11 to 2.14.
      {"_ZN5torch7LibraryC1ENS0_4KindENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt8"
       "optionalIN3c1011DispatchKeyEEPKcj",
       "chorus_torch_library_ctor"},
      {"_ZN5torch6detail10class_baseC2ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEES9_"
       "S7_RKSt9type_infoSC_",
       "chorus_torch_class_base_ctor"},
  };
  const std::pair<const void*, const char*> functions[] = {
      {CodeOf(Get(DefineSchemaTag{})), "chorus_torch_library_def_schema"},
      {CodeOf(Get(DefineWithKernelTag{})), "chorus_torch_library_def_kernel"},
      {CodeOf(Get(ImplementTag{})), "chorus_torch_library_impl"},
      {CodeOf(Get(FallbackTag{})), "chorus_torch_library_fallback"},
      {CodeOf(&c10::ClassType::addMethod), "chorus_c10_class_type_add_method"},
      {reinterpret_cast<const void*>(&torch::registerCustomClassMethod),
       "chorus_torch_register_class_method"},
      {reinterpret_cast<const void*>(&c10d::control_plane::registerHandler),
       "chorus_c10d_control_plane_register_handler"},
      {reinterpret_cast<const void*>(&torch::jit::registerOpaqueType),
       "chorus_torch_jit_register_opaque_type"},
  };
  for (const auto& [code, wrapper] : functions) {
    std::string name = ExportedName(code);
    if (!name.empty()) edits[name] = wrapper;
  }
  return edits;
}

std::string ExportedName(const void* code) {
  Dl_info info;
  if (dladdr(code, &info) == 0 || info.dli_sname == nullptr || info.dli_saddr != code) return "";
  return info.dli_sname;
}

}  // namespace chorus
