// A string tensor (BYTES on the wire, dtype "string" in signatures), flat:
// torch has no dtype for it, and its raw layout (Triton's BYTES serialization:
// each element a 4-byte little-endian length and its bytes, one after
// another). Torch-free, so the wire's parsers build without torch; how models
// see one is in chorus/serving/model_values.h.
#ifndef CHORUS_SERVING_STRING_TENSOR_H_
#define CHORUS_SERVING_STRING_TENSOR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/common/status.h"

namespace chorus {

// Its shape and its elements in row-major order.
struct StringTensor {
  std::vector<int64_t> shape;
  std::vector<std::string> elements;
};

// "[2, 3]": a shape as errors name it.
std::string ShapeText(const std::vector<int64_t>& shape);

// The number of elements of `shape`. INVALID_ARGUMENT for a negative
// dimension or a count whose bytes could not be addressed: checked before
// anything is allocated, so a request cannot make the server allocate what
// its contents do not back.
StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape);

// The string tensor of `shape` that `raw` holds in BYTES' raw layout.
// INVALID_ARGUMENT for a length running past the end, bytes left over, or an
// element count the shape does not have.
StatusOr<StringTensor> StringTensorFromRaw(const std::vector<int64_t>& shape, std::string_view raw);
// `elements` in BYTES' raw layout.
std::string StringsToRaw(const std::vector<std::string>& elements);

}  // namespace chorus

#endif  // CHORUS_SERVING_STRING_TENSOR_H_
