#include "interpreter/pyside/host_object_type.h"

#include <structmember.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <vector>

#include "interpreter/pyside/convert.h"
#include "interpreter/pyside/gil_scope.h"

namespace chorus::pyside {
namespace {

struct PyHostObject {
  PyObject ob_base;
  HostObject* object;  // a reference of the intrusive count
};

struct PyHostMethod {
  PyObject ob_base;
  PyHostObject* self;                // strong
  const HostObject::Method* method;  // in self's table, which never changes
  vectorcallfunc vectorcall;
};

// Plain statics: this copy of the library serves one interpreter.
PyTypeObject* g_object_type = nullptr;
PyTypeObject* g_method_type = nullptr;

// The method's call; C++ exceptions become statuses (a method may use
// TORCH_CHECK), so none crosses into CPython.
StatusOr<c10::IValue> Invoke(const HostObject::Method& method, HostObject& object,
                             std::vector<c10::IValue>& args) {
  try {
    return method.call(object, args);
  } catch (const c10::Error& e) {
    return InternalError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return InternalError(e.what());
  }
}

PyObject* CallMethod(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* bound = reinterpret_cast<PyHostMethod*>(callable);
  const HostObject::Method& method = *bound->method;
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) > 0) {
    PyErr_Format(PyExc_TypeError, "%s.%s() takes no keyword arguments",
                 bound->self->object->type_name(), method.name.c_str());
    return nullptr;
  }
  std::vector<c10::IValue> values(static_cast<size_t>(PyVectorcall_NARGS(nargsf)));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!PythonToIValue(args[i], &values[i])) return nullptr;
  }
  HostObject& object = *bound->self->object;
  auto invoke = [&] { return Invoke(method, object, values); };
  StatusOr<c10::IValue> result = method.releases_gil ? WithoutGil(invoke) : invoke();
  if (!result.ok()) {
    PyErr_SetString(PyExc_RuntimeError, result.status().message().c_str());
    return nullptr;
  }
  return IValueToPython(*result);
}

PyObject* BindMethod(PyHostObject* self, const HostObject::Method& method) {
  PyHostMethod* bound = PyObject_New(PyHostMethod, g_method_type);
  if (bound == nullptr) return nullptr;
  Py_INCREF(self);
  bound->self = self;
  bound->method = &method;
  bound->vectorcall = CallMethod;
  return reinterpret_cast<PyObject*>(bound);
}

// A method by name, else the type's own attributes (__class__, __dir__...).
PyObject* GetAttr(PyObject* obj, PyObject* name) {
  auto* self = reinterpret_cast<PyHostObject*>(obj);
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(name, &size);
  if (text == nullptr) return nullptr;
  for (const HostObject::Method& method : self->object->methods()) {
    if (method.name.size() == static_cast<size_t>(size) &&
        std::memcmp(method.name.data(), text, static_cast<size_t>(size)) == 0) {
      return BindMethod(self, method);
    }
  }
  return PyObject_GenericGetAttr(obj, name);
}

// Heap types: their instances hold a reference to them.
void DeallocObject(PyObject* obj) {
  auto* self = reinterpret_cast<PyHostObject*>(obj);
  c10::intrusive_ptr<HostObject>::reclaim(self->object);  // drops the reference
  PyTypeObject* type = Py_TYPE(obj);
  PyObject_Free(obj);
  Py_DECREF(type);
}

void DeallocMethod(PyObject* obj) {
  Py_DECREF(reinterpret_cast<PyHostMethod*>(obj)->self);
  PyTypeObject* type = Py_TYPE(obj);
  PyObject_Free(obj);
  Py_DECREF(type);
}

PyObject* ReprObject(PyObject* obj) {
  auto* self = reinterpret_cast<PyHostObject*>(obj);
  return PyUnicode_FromFormat("<chorus %s at %p>", self->object->type_name(), self->object);
}

PyObject* ReprMethod(PyObject* obj) {
  auto* bound = reinterpret_cast<PyHostMethod*>(obj);
  return PyUnicode_FromFormat("<method %s of chorus %s>", bound->method->name.c_str(),
                              bound->self->object->type_name());
}

PyObject* Dir(PyObject* obj, PyObject* /*unused*/) {
  auto* self = reinterpret_cast<PyHostObject*>(obj);
  const std::vector<HostObject::Method>& methods = self->object->methods();
  PyObject* names = PyList_New(static_cast<Py_ssize_t>(methods.size()));
  if (names == nullptr) return nullptr;
  for (size_t i = 0; i < methods.size(); ++i) {
    PyObject* name = PyUnicode_FromString(methods[i].name.c_str());
    if (name == nullptr) {
      Py_DECREF(names);
      return nullptr;
    }
    PyList_SET_ITEM(names, static_cast<Py_ssize_t>(i), name);
  }
  return names;
}

PyMethodDef kObjectMethods[] = {
    {"__dir__", Dir, METH_NOARGS, "the host object's methods"},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef kMethodMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(PyHostMethod, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kObjectSlots[] = {
    {Py_tp_doc, const_cast<char*>("An object of chorus' host: its methods run in C++.")},
    {Py_tp_dealloc, reinterpret_cast<void*>(DeallocObject)},
    {Py_tp_getattro, reinterpret_cast<void*>(GetAttr)},
    {Py_tp_repr, reinterpret_cast<void*>(ReprObject)},
    {Py_tp_methods, kObjectMethods},
    {0, nullptr},
};

PyType_Slot kMethodSlots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(DeallocMethod)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_repr, reinterpret_cast<void*>(ReprMethod)},
    {Py_tp_members, kMethodMembers},
    {0, nullptr},
};

PyType_Spec kObjectSpec = {"_chorus.HostObject", sizeof(PyHostObject), 0, Py_TPFLAGS_DEFAULT,
                           kObjectSlots};
PyType_Spec kMethodSpec = {"_chorus.HostMethod", sizeof(PyHostMethod), 0,
                           Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kMethodSlots};

}  // namespace

bool AddHostObjectTypes(PyObject* module) {
  g_object_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kObjectSpec));
  g_method_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kMethodSpec));
  return g_object_type != nullptr && g_method_type != nullptr &&
         PyModule_AddObjectRef(module, "HostObject", reinterpret_cast<PyObject*>(g_object_type)) ==
             0;
}

PyObject* WrapHostObject(c10::intrusive_ptr<HostObject> object) {
  if (g_object_type == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "chorus: _chorus is not initialized");
    return nullptr;
  }
  PyHostObject* wrapped = PyObject_New(PyHostObject, g_object_type);
  if (wrapped == nullptr) return nullptr;
  wrapped->object = object.release();
  return reinterpret_cast<PyObject*>(wrapped);
}

HostObject* HostObjectIn(PyObject* obj) {
  if (g_object_type == nullptr || Py_TYPE(obj) != g_object_type) return nullptr;
  return reinterpret_cast<PyHostObject*>(obj)->object;
}

}  // namespace chorus::pyside
