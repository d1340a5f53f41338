#include "interpreter/pyside/convert.h"

#include "interpreter/pyside/host_object_type.h"
#include "interpreter/pyside/native_module.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <string>
#include <vector>

namespace chorus::pyside {
namespace {

// Runs `body`, turning a C++ exception into a Python RuntimeError; `failed` is
// what the caller returns on failure.
template <typename Result, typename Body>
Result Guarded(Result failed, Body&& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const pybind11::error_already_set& e) {
    // pybind11 fetched the Python error into `e`; put it back.
    const_cast<pybind11::error_already_set&>(e).restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return failed;
}

PyObject* ListToPython(c10::ArrayRef<c10::IValue> items, bool as_tuple) {
  PyObject* result = as_tuple ? PyTuple_New(items.size()) : PyList_New(items.size());
  if (result == nullptr) return nullptr;
  for (size_t i = 0; i < items.size(); ++i) {
    PyObject* item = IValueToPython(items[i]);
    if (item == nullptr) {
      Py_DECREF(result);
      return nullptr;
    }
    if (as_tuple) {
      PyTuple_SET_ITEM(result, i, item);
    } else {
      PyList_SET_ITEM(result, i, item);
    }
  }
  return result;
}

PyObject* DictToPython(const c10::impl::GenericDict& dict) {
  PyObject* result = PyDict_New();
  if (result == nullptr) return nullptr;
  for (const auto& entry : dict) {
    PyObject* key = IValueToPython(entry.key());
    PyObject* value = key ? IValueToPython(entry.value()) : nullptr;
    bool stored = value != nullptr && PyDict_SetItem(result, key, value) == 0;
    Py_XDECREF(key);
    Py_XDECREF(value);
    if (!stored) {
      Py_DECREF(result);
      return nullptr;
    }
  }
  return result;
}

// Builds the most specific list type the elements allow.
c10::IValue MakeList(std::vector<c10::IValue>&& items) {
  auto all = [&](auto predicate) {
    for (const auto& item : items) {
      if (!predicate(item)) return false;
    }
    return true;
  };
  if (!items.empty() && all([](const c10::IValue& v) { return v.isTensor(); })) {
    c10::List<at::Tensor> list;
    list.reserve(items.size());
    for (auto& item : items) list.push_back(std::move(item).toTensor());
    return list;
  }
  if (!items.empty() && all([](const c10::IValue& v) { return v.isInt(); })) {
    c10::List<int64_t> list;
    for (auto& item : items) list.push_back(item.toInt());
    return list;
  }
  if (!items.empty() && all([](const c10::IValue& v) { return v.isDouble(); })) {
    c10::List<double> list;
    for (auto& item : items) list.push_back(item.toDouble());
    return list;
  }
  if (!items.empty() && all([](const c10::IValue& v) { return v.isBool(); })) {
    c10::List<bool> list;
    for (auto& item : items) list.push_back(item.toBool());
    return list;
  }
  if (!items.empty() && all([](const c10::IValue& v) { return v.isString(); })) {
    c10::List<std::string> list;
    for (auto& item : items) list.push_back(item.toStringRef());
    return list;
  }
  c10::impl::GenericList list(c10::AnyType::get());
  list.reserve(items.size());
  for (auto& item : items) list.push_back(std::move(item));
  return list;
}

bool SequenceToIValue(PyObject* seq, bool is_tuple, c10::IValue* out) {
  Py_ssize_t size = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  std::vector<c10::IValue> values(static_cast<size_t>(size));
  for (Py_ssize_t i = 0; i < size; ++i) {
    if (!PythonToIValue(items[i], &values[i])) return false;
  }
  *out = is_tuple ? c10::IValue(c10::ivalue::Tuple::create(std::move(values)))
                  : MakeList(std::move(values));
  return true;
}

c10::TypePtr DictKeyType(const c10::IValue& key) {
  if (key.isString()) return c10::StringType::get();
  if (key.isInt()) return c10::IntType::get();
  if (key.isTensor()) return c10::TensorType::get();
  if (key.isBool()) return c10::BoolType::get();
  if (key.isDouble()) return c10::FloatType::get();
  return nullptr;
}

bool DictToIValue(PyObject* dict, c10::IValue* out) {
  c10::optional<c10::impl::GenericDict> result;
  PyObject *py_key, *py_value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &py_key, &py_value)) {
    c10::IValue key, value;
    if (!PythonToIValue(py_key, &key) || !PythonToIValue(py_value, &value)) return false;
    c10::TypePtr key_type = DictKeyType(key);
    if (key_type == nullptr || (result && *result->keyType() != *key_type)) {
      PyErr_SetString(PyExc_TypeError,
                      "chorus: dict keys must all be str, all int, all float, all bool or all "
                      "tensors to cross into C++");
      return false;
    }
    if (!result) result.emplace(key_type, c10::AnyType::get());
    result->insert_or_assign(std::move(key), std::move(value));
  }
  *out = result ? c10::IValue(*result)
                : c10::IValue(c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
  return true;
}

// A str as its UTF-8 bytes; lone surrogates (from bytes that were not UTF-8,
// see IValueToPython) as the bytes they stand for.
bool StringToIValue(PyObject* obj, c10::IValue* out) {
  Py_ssize_t size = 0;
  if (const char* data = PyUnicode_AsUTF8AndSize(obj, &size)) {
    *out = std::string(data, static_cast<size_t>(size));
    return true;
  }
  PyErr_Clear();
  PyObject* bytes = PyUnicode_AsEncodedString(obj, "utf-8", "surrogateescape");
  if (bytes == nullptr) return false;
  *out = std::string(PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes)));
  Py_DECREF(bytes);
  return true;
}

}  // namespace

namespace {
thread_local bool tls_within_interpreter = false;  // WithinInterpreterScope
}  // namespace

WithinInterpreterScope::WithinInterpreterScope(bool within) : previous_(tls_within_interpreter) {
  tls_within_interpreter = within;
}
WithinInterpreterScope::~WithinInterpreterScope() { tls_within_interpreter = previous_; }

at::Tensor CrossingAlias(const at::Tensor& tensor) {
  if (!tensor.defined() || tls_within_interpreter) return tensor;
  return Host()->CrossingAlias(tensor);
}

bool EnsureTorchImported() {
  if (THPVariableClass != nullptr) return true;
  PyObject* torch = PyImport_ImportModule("torch");
  Py_XDECREF(torch);
  return torch != nullptr;
}

PyObject* IValueToPython(const c10::IValue& value) {
  return Guarded<PyObject*>(nullptr, [&]() -> PyObject* {
    if (value.isNone()) Py_RETURN_NONE;
    if (value.isBool()) return PyBool_FromLong(value.toBool());
    if (value.isInt()) return PyLong_FromLongLong(value.toInt());
    if (value.isDouble()) return PyFloat_FromDouble(value.toDouble());
    if (value.isString()) {
      // Strings are bytes in C++: bytes that are not UTF-8 become lone
      // surrogates, and turn back into the same bytes (PythonToIValue).
      const std::string& s = value.toStringRef();
      return PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
    }
    if (value.isTensor()) {
      const at::Tensor& tensor = value.toTensor();
      if (!tensor.defined()) Py_RETURN_NONE;
      if (!EnsureTorchImported()) return nullptr;
      return THPVariable_Wrap(CrossingAlias(tensor));
    }
    if (value.isList()) return ListToPython(value.toListRef(), /*as_tuple=*/false);
    if (value.isTuple()) return ListToPython(value.toTupleRef().elements(), /*as_tuple=*/true);
    if (value.isGenericDict()) return DictToPython(value.toGenericDict());
    if (HostObject* object = value.isCapsule() ? Host()->AsHostObject(value) : nullptr) {
      return WrapHostObject(c10::intrusive_ptr<HostObject>::reclaim_copy(object));
    }
    // Devices, generators, ...: torch's own conversion (none of these hold tensors).
    if (!EnsureTorchImported()) return nullptr;
    return torch::jit::toPyObject(value).release().ptr();
  });
}

bool PythonToIValue(PyObject* obj, c10::IValue* out) {
  return Guarded<bool>(false, [&]() -> bool {
    if (obj == Py_None) {
      *out = c10::IValue();
    } else if (PyBool_Check(obj)) {
      *out = obj == Py_True;
    } else if (PyLong_Check(obj)) {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
      if (overflow != 0) {
        PyErr_SetString(PyExc_OverflowError, "chorus: int does not fit in 64 bits");
        return false;
      }
      if (v == -1 && PyErr_Occurred()) return false;
      *out = static_cast<int64_t>(v);
    } else if (PyFloat_Check(obj)) {
      *out = PyFloat_AS_DOUBLE(obj);
    } else if (PyUnicode_Check(obj)) {
      return StringToIValue(obj, out);
    } else if (PyBytes_Check(obj)) {
      *out = std::string(PyBytes_AS_STRING(obj), static_cast<size_t>(PyBytes_GET_SIZE(obj)));
    } else if (THPVariableClass != nullptr && THPVariable_Check(obj)) {
      *out = CrossingAlias(THPVariable_Unpack(obj));
    } else if (PyTuple_Check(obj) || PyList_Check(obj)) {
      return SequenceToIValue(obj, PyTuple_Check(obj), out);
    } else if (PyDict_Check(obj)) {
      return DictToIValue(obj, out);
    } else if (HostObject* object = HostObjectIn(obj)) {
      *out = HostObjectValue(c10::intrusive_ptr<HostObject>::reclaim_copy(object));
    } else if (PyIndex_Check(obj)) {  // numpy integers and other int-likes
      PyObject* index = PyNumber_Index(obj);
      if (index == nullptr) return false;
      bool ok = PythonToIValue(index, out);
      Py_DECREF(index);
      return ok;
    } else {
      PyErr_Format(PyExc_TypeError,
                   "chorus: cannot convert a Python %s to a C++ value (supported: None, bool, "
                   "int, float, str, bytes, torch.Tensor, list, tuple, dict)",
                   Py_TYPE(obj)->tp_name);
      return false;
    }
    return true;
  });
}

}  // namespace chorus::pyside
