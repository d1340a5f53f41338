// chorus' dtypes (chorus/package/dtype.h) <-> torch's scalar types.
#ifndef CHORUS_PACKAGE_TORCH_DTYPE_H_
#define CHORUS_PACKAGE_TORCH_DTYPE_H_

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <optional>
#include <utility>

#include "chorus/package/dtype.h"

namespace chorus {

inline constexpr std::pair<Dtype, c10::ScalarType> kScalarTypes[] = {
    {Dtype::kBool, c10::kBool},     {Dtype::kUint8, c10::kByte},
    {Dtype::kInt8, c10::kChar},     {Dtype::kInt16, c10::kShort},
    {Dtype::kInt32, c10::kInt},     {Dtype::kInt64, c10::kLong},
    {Dtype::kFloat16, c10::kHalf},  {Dtype::kBFloat16, c10::kBFloat16},
    {Dtype::kFloat32, c10::kFloat}, {Dtype::kFloat64, c10::kDouble},
    {Dtype::kUint16, c10::kUInt16}, {Dtype::kUint32, c10::kUInt32},
    {Dtype::kUint64, c10::kUInt64},
};

// The scalar type of a tensor dtype; `dtype` must not be kString (torch has
// no string dtype: it throws c10::Error).
inline c10::ScalarType ScalarTypeOf(Dtype dtype) {
  TORCH_CHECK(dtype != Dtype::kString, "strings have no torch dtype");
  return kScalarTypes[static_cast<int>(dtype)].second;
}

// The dtype of a torch scalar type; nullopt for one chorus does not carry
// (complex, quantized, float8, ...).
inline std::optional<Dtype> DtypeOf(c10::ScalarType scalar) {
  for (const auto& [dtype, torch_type] : kScalarTypes) {
    if (torch_type == scalar) return dtype;
  }
  return std::nullopt;
}

}  // namespace chorus

#endif  // CHORUS_PACKAGE_TORCH_DTYPE_H_
