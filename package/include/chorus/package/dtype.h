// The tensor element types chorus carries: one table for the manifest's names
// (torch's), the wire names of the Open Inference Protocol and element sizes.
// Torch-free; the torch mapping is in chorus/package/torch_dtype.h. Strings
// (BYTES) have no torch dtype: models see them as lists of str
// (chorus/serving/string_tensor.h). FP16 and BF16 convert to and from float
// here, as torch converts them.
// Python reads the same table in chorus/dtypes.py (a test compares the two).
#ifndef CHORUS_PACKAGE_DTYPE_H_
#define CHORUS_PACKAGE_DTYPE_H_

#include <cstdint>
#include <string_view>

namespace chorus {

enum class Dtype : uint8_t {
  kBool,
  kUint8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kUint16,  // torch's "limited support" unsigned types: carried, few kernels
  kUint32,
  kUint64,
  kString,  // BYTES on the wire: variable-length byte strings, no torch dtype
};

struct DtypeInfo {
  Dtype dtype;
  const char* name;  // in manifests: torch's name without "torch." ("float32")
  const char* wire;  // in the Open Inference Protocol ("FP32")
  int element_size;  // bytes; 0 for kString, whose elements vary in size
};

inline constexpr DtypeInfo kDtypes[] = {
    {Dtype::kBool, "bool", "BOOL", 1},       {Dtype::kUint8, "uint8", "UINT8", 1},
    {Dtype::kInt8, "int8", "INT8", 1},       {Dtype::kInt16, "int16", "INT16", 2},
    {Dtype::kInt32, "int32", "INT32", 4},    {Dtype::kInt64, "int64", "INT64", 8},
    {Dtype::kFloat16, "float16", "FP16", 2}, {Dtype::kBFloat16, "bfloat16", "BF16", 2},
    {Dtype::kFloat32, "float32", "FP32", 4}, {Dtype::kFloat64, "float64", "FP64", 8},
    {Dtype::kUint16, "uint16", "UINT16", 2}, {Dtype::kUint32, "uint32", "UINT32", 4},
    {Dtype::kUint64, "uint64", "UINT64", 8}, {Dtype::kString, "string", "BYTES", 0},
};

// The entry of a manifest name ("float32") or of a wire name ("FP32"); null if unknown.
const DtypeInfo* DtypeByName(std::string_view name);
const DtypeInfo* DtypeByWireName(std::string_view wire);
// The entry of `dtype` (never null).
const DtypeInfo& InfoOf(Dtype dtype);

// IEEE half (FP16) and bfloat16 (BF16) bits <-> float, rounding to nearest
// even; a NaN stays a NaN. torch's c10::Half and c10::BFloat16 give the same bits.
uint16_t HalfFromFloat(float value);
float HalfToFloat(uint16_t bits);
uint16_t BFloat16FromFloat(float value);
float BFloat16ToFloat(uint16_t bits);

}  // namespace chorus

#endif  // CHORUS_PACKAGE_DTYPE_H_
