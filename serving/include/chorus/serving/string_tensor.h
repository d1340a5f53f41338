// A string tensor (BYTES on the wire, dtype "string" in signatures), flat:
// torch has no dtype for it. Torch-free, so the wire's parsers build without
// torch; how models see one is in chorus/serving/model_values.h.
#ifndef CHORUS_SERVING_STRING_TENSOR_H_
#define CHORUS_SERVING_STRING_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

// Its shape and its elements in row-major order.
struct StringTensor {
  std::vector<int64_t> shape;
  std::vector<std::string> elements;
};

}  // namespace chorus

#endif  // CHORUS_SERVING_STRING_TENSOR_H_
