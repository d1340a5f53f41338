#include "training/collectives/src/reduce_kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <type_traits>

namespace chorus::kernels {
namespace {

template <typename T>
using Acc =
    std::conditional_t<std::is_same_v<T, c10::BFloat16> || std::is_same_v<T, c10::Half>, float, T>;

template <typename T>
inline Acc<T> Combine(ReduceOp op, Acc<T> a, Acc<T> b) {
  return op == ReduceOp::kMax ? std::max(a, b) : a + b;
}

// Half types: accumulate every rank in float, round once.
template <typename T>
void ReduceWidened(ReduceOp op, const std::vector<const void*>& inputs, void* out, int64_t begin,
                   int64_t end) {
  const size_t n = inputs.size();
  std::vector<const T*> in(n);
  for (size_t k = 0; k < n; ++k) in[k] = static_cast<const T*>(inputs[k]);
  T* result = static_cast<T*>(out);
  for (int64_t i = begin; i < end; ++i) {
    float acc = static_cast<float>(in[0][i]);
    for (size_t k = 1; k < n; ++k) acc = Combine<T>(op, acc, static_cast<float>(in[k][i]));
    if (op == ReduceOp::kAvg) acc /= static_cast<float>(n);
    result[i] = static_cast<T>(acc);
  }
}

// Full-width types: block by block, one flat (vectorizable) pass per input
// into a small buffer, then one write; reading every input before writing
// lets `out` be any of them. Rank order is kept, so results equal a one-rank
// reduction in that order.
template <typename T>
void ReduceTyped(ReduceOp op, const std::vector<const void*>& inputs, void* out, int64_t begin,
                 int64_t end) {
  if constexpr (!std::is_same_v<Acc<T>, T>) {
    ReduceWidened<T>(op, inputs, out, begin, end);
  } else {
    constexpr int64_t kBlock = 2048;
    T buffer[kBlock];
    const size_t n = inputs.size();
    T* result = static_cast<T*>(out);
    for (int64_t block = begin; block < end; block += kBlock) {
      const int64_t length = std::min(kBlock, end - block);
      const T* first = static_cast<const T*>(inputs[0]) + block;
      std::copy(first, first + length, buffer);
      for (size_t k = 1; k < n; ++k) {
        const T* next = static_cast<const T*>(inputs[k]) + block;
        if (op == ReduceOp::kMax) {
          for (int64_t i = 0; i < length; ++i) buffer[i] = std::max(buffer[i], next[i]);
        } else {
          for (int64_t i = 0; i < length; ++i) buffer[i] += next[i];
        }
      }
      if (op == ReduceOp::kAvg) {
        for (int64_t i = 0; i < length; ++i) buffer[i] /= static_cast<T>(n);
      }
      std::copy(buffer, buffer + length, result + block);
    }
  }
}

}  // namespace

Status Reduce(c10::ScalarType dtype, ReduceOp op, const std::vector<const void*>& inputs, void* out,
              int64_t begin, int64_t end) {
  if (op == ReduceOp::kAvg && !c10::isFloatingType(dtype)) {
    return InvalidArgumentError(std::string("avg needs a floating-point dtype, not ") +
                                c10::toString(dtype));
  }
  switch (dtype) {
    case c10::ScalarType::Float:
      ReduceTyped<float>(op, inputs, out, begin, end);
      break;
    case c10::ScalarType::Double:
      ReduceTyped<double>(op, inputs, out, begin, end);
      break;
    case c10::ScalarType::BFloat16:
      ReduceTyped<c10::BFloat16>(op, inputs, out, begin, end);
      break;
    case c10::ScalarType::Half:
      ReduceTyped<c10::Half>(op, inputs, out, begin, end);
      break;
    case c10::ScalarType::Long:
      ReduceTyped<int64_t>(op, inputs, out, begin, end);
      break;
    case c10::ScalarType::Int:
      ReduceTyped<int32_t>(op, inputs, out, begin, end);
      break;
    case c10::ScalarType::Byte:
      ReduceTyped<uint8_t>(op, inputs, out, begin, end);
      break;
    default:
      return InvalidArgumentError(std::string("unsupported dtype for reductions: ") +
                                  c10::toString(dtype));
  }
  return OkStatus();
}

}  // namespace chorus::kernels
