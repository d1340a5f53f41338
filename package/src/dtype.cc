#include "chorus/package/dtype.h"

#include <fp16.h>

#include <cstring>

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

uint16_t HalfFromFloat(float value) { return fp16_ieee_from_fp32_value(value); }

float HalfToFloat(uint16_t bits) { return fp16_ieee_to_fp32_value(bits); }

uint16_t BFloat16FromFloat(float value) {
  if (value != value) return 0x7FC0;  // torch's quiet NaN
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t rounding_bias = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

}  // namespace chorus
