#include "chorus/package/dtype.h"

namespace chorus {

const DtypeInfo* DtypeByName(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

const DtypeInfo* DtypeByWireName(std::string_view wire) {
  for (const DtypeInfo& info : kDtypes) {
    if (wire == info.wire) return &info;
  }
  return nullptr;
}

const DtypeInfo& InfoOf(Dtype dtype) { return kDtypes[static_cast<int>(dtype)]; }

}  // namespace chorus
