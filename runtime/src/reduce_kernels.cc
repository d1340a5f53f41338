#include "runtime/src/reduce_kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <type_traits>

namespace chorus::kernels {
namespace {

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, c10::BFloat16> || std::is_same_v<T, c10::Half>,
                               float, T>;

template <typename T>
void ReduceTyped(ReduceOp op, const std::vector<const void*>& inputs, void* out, int64_t begin,
                 int64_t end) {
  const size_t n = inputs.size();
  std::vector<const T*> in(n);
  for (size_t k = 0; k < n; ++k) in[k] = static_cast<const T*>(inputs[k]);
  T* result = static_cast<T*>(out);
  if (op == ReduceOp::kMax) {
    for (int64_t i = begin; i < end; ++i) {
      Acc<T> acc = static_cast<Acc<T>>(in[0][i]);
      for (size_t k = 1; k < n; ++k) acc = std::max(acc, static_cast<Acc<T>>(in[k][i]));
      result[i] = static_cast<T>(acc);
    }
    return;
  }
  for (int64_t i = begin; i < end; ++i) {
    Acc<T> acc = static_cast<Acc<T>>(in[0][i]);
    for (size_t k = 1; k < n; ++k) acc += static_cast<Acc<T>>(in[k][i]);
    if (op == ReduceOp::kAvg) acc /= static_cast<Acc<T>>(n);
    result[i] = static_cast<T>(acc);
  }
}

}  // namespace

Status Reduce(c10::ScalarType dtype, ReduceOp op, const std::vector<const void*>& inputs,
              void* out, int64_t begin, int64_t end) {
  if (op == ReduceOp::kAvg && !c10::isFloatingType(dtype)) {
    return InvalidArgumentError(std::string("avg needs a floating-point dtype, not ") +
                                c10::toString(dtype));
  }
  switch (dtype) {
    case c10::ScalarType::Float: ReduceTyped<float>(op, inputs, out, begin, end); break;
    case c10::ScalarType::Double: ReduceTyped<double>(op, inputs, out, begin, end); break;
    case c10::ScalarType::BFloat16: ReduceTyped<c10::BFloat16>(op, inputs, out, begin, end); break;
    case c10::ScalarType::Half: ReduceTyped<c10::Half>(op, inputs, out, begin, end); break;
    case c10::ScalarType::Long: ReduceTyped<int64_t>(op, inputs, out, begin, end); break;
    case c10::ScalarType::Int: ReduceTyped<int32_t>(op, inputs, out, begin, end); break;
    case c10::ScalarType::Byte: ReduceTyped<uint8_t>(op, inputs, out, begin, end); break;
    default:
      return InvalidArgumentError(std::string("unsupported dtype for reductions: ") +
                                  c10::toString(dtype));
  }
  return OkStatus();
}

}  // namespace chorus::kernels
