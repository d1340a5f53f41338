// HostObject: a C++ object of the host that Python code in any interpreter
// holds and calls methods of, as an object of chorus' own type
// (`_chorus.HostObject`), not a torch.jit custom class: a call converts its
// arguments and result the way every other crossing does (pyside/convert.h)
// and costs about what a call of a C function does, where a custom class'
// method goes through torch.jit's schema matching and pybind11 per call.
//
// It crosses as a value (HostObjectValue) inside any IValue handed to Python
// (a call's arguments); Python's object keeps a strong reference to it, so it
// lives until the last interpreter that holds it lets go, on any thread.
#ifndef CHORUS_INTERPRETER_HOST_OBJECT_H_
#define CHORUS_INTERPRETER_HOST_OBJECT_H_

#include <ATen/core/ivalue.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/status.h"

namespace chorus {

class HostObject : public torch::CustomClassHolder {
 public:
  ~HostObject() override;  // out of line: one type_info, in libchorus_interpreter

  // One method Python may call: `object.name(*args)`. Its arguments come as
  // pyside converts Python values (None, bool, int, float, str, Tensor as a
  // crossing alias; a list of one kind as a typed list, a dict as a
  // GenericDict); its result goes back the same way. An error status raises
  // RuntimeError with the status' message.
  struct Method {
    std::string name;
    // Whether the interpreter's lock is released while it runs: for a method
    // that does I/O or waits on other threads. Such a method must not touch
    // Python state (it has none: it only sees IValues).
    bool releases_gil = false;
    std::function<StatusOr<c10::IValue>(HostObject& self, std::vector<c10::IValue>& args)> call;
  };

  // The methods Python can call: one table for the object's whole life, read
  // from any thread (a static of the class).
  virtual const std::vector<Method>& methods() const = 0;
  // What the object is, for Python's repr and errors.
  virtual const char* type_name() const = 0;

  // A Method calling `body(static_cast<Derived&>(self), args)`.
  template <typename Derived, typename Body>
  static Method Bind(std::string name, bool releases_gil, Body body) {
    return Method{std::move(name), releases_gil,
                  [body = std::move(body)](HostObject& self, std::vector<c10::IValue>& args) {
                    return body(static_cast<Derived&>(self), args);
                  }};
  }
};

// `object` as a value any interpreter receives as its Python object.
inline c10::IValue HostObjectValue(c10::intrusive_ptr<HostObject> object) {
  return c10::IValue::make_capsule(std::move(object));
}

// The HostObject `value` carries, or nullptr when it carries none. Any thread.
HostObject* HostObjectOf(const c10::IValue& value);

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_HOST_OBJECT_H_
