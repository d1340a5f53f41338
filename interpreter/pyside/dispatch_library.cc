#include "interpreter/pyside/dispatch_library.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "interpreter/pyside/convert.h"
#include "interpreter/pyside/gil_scope.h"
#include "interpreter/pyside/native_module.h"
#include "interpreter/pyside/python_error.h"
#include "interpreter/src/c10_warnings.h"

namespace chorus::pyside {
namespace {

// Runs Python kernels: `fn(*args)` under this interpreter's GIL, arguments
// and results converted as torch's own Python kernels have them.
class KernelCall {
 public:
  KernelCall(PyObject* fn, bool with_keyset) : fn_(fn), with_keyset_(with_keyset) {}

  // Pops the operator's arguments from `stack` and pushes its results.
  // Throws c10::Error with the Python error's message.
  void Run(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    const c10::FunctionSchema& schema = op.schema();
    std::vector<c10::IValue> inputs = torch::jit::pop(*stack, schema.arguments().size());
    std::string error;
    {
      GilScope gil;
      PyObject* result = Invoke(schema, inputs, keys);
      if (result == nullptr) {
        error = FetchPythonError().message();
      } else {
        error = PushOutputs(schema, inputs, result, stack);
        Py_DECREF(result);
      }
    }
    TORCH_CHECK(error.empty(), "Python kernel for ", schema.name(), " failed: ", error);
  }

 private:
  // fn(*positional, **keyword) with arguments split and converted as torch's
  // own Python kernels receive them: positional up to the first kwarg-only
  // argument, trailing defaults omitted, dtypes/layouts/memory formats as
  // torch objects.
  PyObject* Invoke(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& inputs,
                   c10::DispatchKeySet keys) {
    const auto& arguments = schema.arguments();
    size_t kwarg_start = arguments.size();
    while (kwarg_start > 0 && arguments[kwarg_start - 1].kwarg_only()) --kwarg_start;
    auto is_default = [&](size_t i) {
      const auto& fallback = arguments[i].default_value();
      return fallback.has_value() && *fallback == inputs[i];
    };
    size_t positional = kwarg_start;
    while (positional > 0 && is_default(positional - 1)) --positional;

    // with_keyset kernels take the dispatch key set first (torch.library).
    const size_t first = with_keyset_ ? 1 : 0;
    PyObject* args = PyTuple_New(static_cast<Py_ssize_t>(first + positional));
    PyObject* kwargs = PyDict_New();
    bool ok = args != nullptr && kwargs != nullptr;
    if (ok && with_keyset_) {
      try {
        PyTuple_SET_ITEM(args, 0, pybind11::cast(keys).release().ptr());
      } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        ok = false;
      }
    }
    for (size_t i = 0; ok && i < positional; ++i) {
      PyObject* value = ArgumentToPython(arguments[i], inputs[i]);
      ok = value != nullptr;
      if (ok) PyTuple_SET_ITEM(args, static_cast<Py_ssize_t>(first + i), value);
    }
    for (size_t i = kwarg_start; ok && i < arguments.size(); ++i) {
      if (is_default(i)) continue;
      PyObject* value = ArgumentToPython(arguments[i], inputs[i]);
      ok =
          value != nullptr && PyDict_SetItemString(kwargs, arguments[i].name().c_str(), value) == 0;
      Py_XDECREF(value);
    }
    PyObject* result = ok ? PyObject_Call(fn_, args, kwargs) : nullptr;
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return result;
  }

  static PyObject* ArgumentToPython(const c10::Argument& argument, const c10::IValue& value) {
    if (value.isNone()) Py_RETURN_NONE;
    c10::TypePtr type = argument.real_type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    try {
      switch (type->kind()) {
        case c10::TypeKind::ScalarTypeType: {
          PyObject* dtype = reinterpret_cast<PyObject*>(torch::getTHPDtype(value.toScalarType()));
          Py_INCREF(dtype);
          return dtype;
        }
        case c10::TypeKind::LayoutType: {
          PyObject* layout = reinterpret_cast<PyObject*>(torch::getTHPLayout(value.toLayout()));
          Py_INCREF(layout);
          return layout;
        }
        case c10::TypeKind::MemoryFormatType: {
          PyObject* format = torch::utils::getTHPMemoryFormat(value.toMemoryFormat());
          Py_INCREF(format);
          return format;
        }
        default:
          // A Python number that became a tensor on its way in goes back to
          // the kernel as the number, as torch's own kernels receive it.
          if (value.isTensor() && value.toTensor().defined() &&
              value.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
            return torch::jit::toPyObject(value).release().ptr();
          }
          return IValueToPython(value);
      }
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return nullptr;
    }
  }

  // Pushes the kernel's result. An output that the schema declares as writing
  // into an input (in-place and out= ops) is pushed as that very input, as
  // callers expect; other tensors cross as aliases. Returns "" or an error.
  static std::string PushOutputs(const c10::FunctionSchema& schema,
                                 const std::vector<c10::IValue>& inputs, PyObject* result,
                                 torch::jit::Stack* stack) {
    const auto& returns = schema.returns();
    try {
      if (returns.empty()) {
        if (result != Py_None) return "expected None, as the schema returns nothing";
        return "";
      }
      pybind11::handle out(result);
      std::vector<pybind11::handle> items;
      if (returns.size() == 1) {
        items.push_back(out);
      } else {
        for (auto item : pybind11::reinterpret_borrow<pybind11::sequence>(out))
          items.push_back(item);
        if (items.size() != returns.size()) return "returned the wrong number of outputs";
      }
      for (size_t i = 0; i < returns.size(); ++i) {
        const c10::IValue* written = WrittenInput(schema, inputs, i);
        if (written != nullptr) {
          stack->push_back(*written);
          continue;
        }
        c10::IValue value = torch::jit::toIValue(items[i], returns[i].type());
        stack->push_back(AliasTensors(std::move(value)));
      }
      return "";
    } catch (const pybind11::error_already_set& e) {
      return e.what();
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  static const c10::IValue* WrittenInput(const c10::FunctionSchema& schema,
                                         const std::vector<c10::IValue>& inputs, size_t output) {
    const c10::AliasInfo* info = schema.returns()[output].alias_info();
    if (info == nullptr || !info->isWrite()) return nullptr;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::AliasInfo* in = schema.arguments()[i].alias_info();
      if (in != nullptr && in->isWrite() && in->beforeSets() == info->beforeSets())
        return &inputs[i];
    }
    return nullptr;
  }

  static c10::IValue AliasTensors(c10::IValue value) {
    if (value.isTensor()) return CrossingAlias(value.toTensor());
    if (value.isTensorList()) {
      c10::List<at::Tensor> aliased;
      for (const at::Tensor& t : value.toTensorList()) aliased.push_back(CrossingAlias(t));
      return aliased;
    }
    return value;
  }

  PyObject* fn_;  // borrowed
  bool with_keyset_;
};

// A kernel registered from Python, owned by the interpreter that registered it
// first (the registration `key`, see chorus/_torch_compat.py). Another
// interpreter that registered its own function for the same key has it run
// for its own calls, in its own interpreter; other callers' tensors cross.
class PythonKernel final : public c10::OperatorKernel {
 public:
  PythonKernel(PyObject* fn, bool with_keyset, std::string key)
      : fn_(fn), with_keyset_(with_keyset), key_(std::move(key)) {
    Py_INCREF(fn_);
  }
  ~PythonKernel() override {
    GilScope gil;
    Py_DECREF(fn_);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const int caller = Host()->CurrentSlot();
    if (caller != LibrarySlot() && caller >= 0 && !key_.empty() &&
        Host()->RunKernelFunction(key_, caller, op, keys, stack)) {
      return;
    }
    // Called from this interpreter, tensors pass as they are; from another
    // (its session on this thread), they cross, and for the kernel's duration
    // the thread works in this interpreter (torch's callbacks route here).
    WithinInterpreterScope within(caller == LibrarySlot());
    Host()->EnterSlot(LibrarySlot());
    struct Leave {
      ~Leave() { Host()->LeaveSlot(LibrarySlot()); }
    } leave;
    KernelCall(fn_, with_keyset_).Run(op, keys, stack);
  }

 private:
  PyObject* fn_;
  bool with_keyset_;
  std::string key_;
};

// The libraries this interpreter opened and still holds (GIL-guarded).
std::set<torch::Library*>& LiveLibraries() {
  static auto* live = new std::set<torch::Library*>();
  return *live;
}

constexpr char kCapsuleName[] = "chorus.DispatchLibrary";

void CloseLibrary(PyObject* capsule) {
  auto* library = static_cast<torch::Library*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (library != nullptr && LiveLibraries().erase(library) > 0) delete library;
}

// The library behind `capsule`, or nullptr (with TypeError) if it is not one
// or was closed.
torch::Library* Unwrap(PyObject* capsule) {
  auto* library = static_cast<torch::Library*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (library == nullptr) return nullptr;
  if (LiveLibraries().count(library) == 0) {
    PyErr_SetString(PyExc_RuntimeError, "chorus: dispatcher library already closed");
    return nullptr;
  }
  return library;
}

// torch's Python API spells alias analysis as a string; "" means FROM_SCHEMA.
bool ParseAliasAnalysis(const std::string& text, c10::AliasAnalysisKind* kind) {
  if (text.empty() || text == "FROM_SCHEMA") {
    *kind = c10::AliasAnalysisKind::FROM_SCHEMA;
  } else if (text == "CONSERVATIVE") {
    *kind = c10::AliasAnalysisKind::CONSERVATIVE;
  } else if (text == "PURE_FUNCTION") {
    *kind = c10::AliasAnalysisKind::PURE_FUNCTION;
  } else {
    return false;
  }
  return true;
}

template <typename Body>
PyObject* TranslatingExceptions(Body&& body);

// Collects the c10 warnings of a registration call, to hand them to Python's
// warnings module afterwards, as torch's own bindings do (so that Python's
// filters decide what is shown, not c10's default handler printing to stderr).
class CollectedWarnings final : public WarningMessageHandler {
 public:
  void OnWarning(const std::string& message) override { messages_.push_back(message); }
  // Issues the collected warnings; false if a filter turned one into an error.
  bool Issue() {
    for (const std::string& message : messages_) {
      if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) < 0) return false;
    }
    return true;
  }

 private:
  std::vector<std::string> messages_;
};

template <typename Body>
PyObject* TranslatingErrors(Body&& body) {
  CollectedWarnings warnings;
  PyObject* result = nullptr;
  {
    WarningHandlerScope scope(&warnings);
    result = TranslatingExceptions(body);
  }
  if (result != nullptr && !warnings.Issue()) {
    Py_DECREF(result);
    return nullptr;
  }
  return result;
}

template <typename Body>
PyObject* TranslatingExceptions(Body&& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

}  // namespace

PyObject* OpenLibrary(const char* kind, const char* ns, const char* dispatch_key, const char* file,
                      int line) {
  return TranslatingErrors([&]() -> PyObject* {
    const std::string kind_name = kind;
    torch::Library::Kind library_kind;
    if (kind_name == "DEF") {
      library_kind = torch::Library::DEF;
    } else if (kind_name == "IMPL") {
      library_kind = torch::Library::IMPL;
    } else if (kind_name == "FRAGMENT") {
      library_kind = torch::Library::FRAGMENT;
    } else {
      PyErr_Format(PyExc_ValueError, "unknown library kind: %s", kind);
      return nullptr;
    }
    c10::optional<c10::DispatchKey> key;
    if (dispatch_key[0] != '\0') key = c10::parseDispatchKey(dispatch_key);
    // The library keeps `file` as a raw pointer for its error messages.
    static auto* files = new std::set<std::string>();
    const char* kept_file = files->insert(file).first->c_str();
    auto library = std::make_unique<torch::Library>(library_kind, ns, key, kept_file,
                                                    static_cast<uint32_t>(line));
    PyObject* capsule = PyCapsule_New(library.get(), kCapsuleName, &CloseLibrary);
    if (capsule == nullptr) return nullptr;
    LiveLibraries().insert(library.release());
    return capsule;
  });
}

PyObject* LibraryDefine(PyObject* capsule, const char* schema, const char* alias_analysis,
                        const std::vector<int>& tags) {
  torch::Library* library = Unwrap(capsule);
  if (library == nullptr) return nullptr;
  return TranslatingErrors([&]() -> PyObject* {
    c10::AliasAnalysisKind kind;
    if (!ParseAliasAnalysis(alias_analysis, &kind)) {
      PyErr_Format(PyExc_RuntimeError, "invalid alias_analysis: %s", alias_analysis);
      return nullptr;
    }
    c10::FunctionSchema parsed = torch::schema(schema, kind);
    std::string name = parsed.name();
    std::vector<at::Tag> typed_tags;
    for (int tag : tags) typed_tags.push_back(static_cast<at::Tag>(tag));
    library->def(std::move(parsed), typed_tags, torch::_RegisterOrVerify::REGISTER);
    return PyUnicode_FromString(name.c_str());
  });
}

namespace {

// `fn` as a kernel: None is a fallthrough.
torch::CppFunction MakeKernel(PyObject* fn, bool with_keyset, std::string key = "") {
  if (fn == Py_None) return torch::CppFunction::makeFallthrough();
  return torch::CppFunction::makeFromBoxedFunctor(
      std::make_unique<PythonKernel>(fn, with_keyset, std::move(key)));
}

}  // namespace

PyObject* LibraryFallback(PyObject* capsule, const char* dispatch_key, PyObject* fn,
                          bool with_keyset) {
  torch::Library* library = Unwrap(capsule);
  if (library == nullptr) return nullptr;
  return TranslatingErrors([&]() -> PyObject* {
    auto kernel = MakeKernel(fn, with_keyset);
    if (dispatch_key[0] == '\0') {
      library->fallback(std::move(kernel));
    } else {
      library->fallback(torch::dispatch(c10::parseDispatchKey(dispatch_key), std::move(kernel)));
    }
    Py_RETURN_NONE;
  });
}

PyObject* LibraryReset(PyObject* capsule) {
  // Idempotent, as torch's reset(): finalization may have closed it first.
  if (PyCapsule_GetPointer(capsule, kCapsuleName) == nullptr) return nullptr;
  CloseLibrary(capsule);
  Py_RETURN_NONE;
}

PyObject* LibraryImpl(PyObject* capsule, const char* name, const char* dispatch_key, PyObject* fn,
                      bool with_keyset, const char* key) {
  torch::Library* library = Unwrap(capsule);
  if (library == nullptr) return nullptr;
  return TranslatingErrors([&]() -> PyObject* {
    auto kernel = MakeKernel(fn, with_keyset, key);
    if (dispatch_key[0] == '\0') {
      library->impl(name, std::move(kernel));
    } else {
      library->impl(name, torch::dispatch(c10::parseDispatchKey(dispatch_key), std::move(kernel)));
    }
    Py_RETURN_NONE;
  });
}

void RunPythonKernel(PyObject* fn, bool with_keyset, const c10::OperatorHandle& op,
                     c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  WithinInterpreterScope within(true);
  KernelCall(fn, with_keyset).Run(op, keys, stack);
}

void CloseAllLibraries() {
  for (torch::Library* library : LiveLibraries()) delete library;
  LiveLibraries().clear();
}

}  // namespace chorus::pyside
