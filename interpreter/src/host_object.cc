#include "chorus/interpreter/host_object.h"

namespace chorus {

HostObject::~HostObject() = default;

HostObject* HostObjectOf(const c10::IValue& value) {
  if (!value.isCapsule()) return nullptr;
  return dynamic_cast<HostObject*>(value.toCapsule().get());
}

}  // namespace chorus
