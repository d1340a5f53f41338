#include "chorus/serving/string_tensor.h"

namespace chorus {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

StatusOr<int64_t> ElementCount(const std::vector<int64_t>& shape) {
  constexpr int64_t kMaxElements = int64_t{1} << 56;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgumentError("negative dimension in shape " + ShapeText(shape));
    if (d != 0 && n > kMaxElements / d) {
      return InvalidArgumentError("shape " + ShapeText(shape) + " has too many elements");
    }
    n *= d;
  }
  return n;
}

StatusOr<StringTensor> StringTensorFromRaw(const std::vector<int64_t>& shape,
                                           std::string_view raw) {
  CHORUS_ASSIGN_OR_RETURN(const int64_t elements, ElementCount(shape));
  StringTensor tensor;
  tensor.shape = shape;
  size_t at = 0;
  while (at < raw.size()) {
    if (raw.size() - at < 4) {
      return InvalidArgumentError("raw BYTES contents end inside the length of element " +
                                  std::to_string(tensor.elements.size()));
    }
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + at);
    const uint32_t length = p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t{p[3]} << 24);
    at += 4;
    if (raw.size() - at < length) {
      return InvalidArgumentError("raw BYTES element " + std::to_string(tensor.elements.size()) +
                                  " claims " + std::to_string(length) + " bytes; " +
                                  std::to_string(raw.size() - at) + " are left");
    }
    if (static_cast<int64_t>(tensor.elements.size()) == elements) {
      return InvalidArgumentError("raw BYTES contents hold more than the " +
                                  std::to_string(elements) + " elements of shape " +
                                  ShapeText(shape));
    }
    tensor.elements.emplace_back(raw.substr(at, length));
    at += length;
  }
  if (static_cast<int64_t>(tensor.elements.size()) != elements) {
    return InvalidArgumentError("raw BYTES contents hold " +
                                std::to_string(tensor.elements.size()) + " elements; shape " +
                                ShapeText(shape) + " needs " + std::to_string(elements));
  }
  return tensor;
}

std::string StringsToRaw(const std::vector<std::string>& elements) {
  size_t size = 0;
  for (const std::string& element : elements) size += 4 + element.size();
  std::string raw;
  raw.reserve(size);
  for (const std::string& element : elements) {
    const uint32_t length = static_cast<uint32_t>(element.size());
    for (int shift = 0; shift < 32; shift += 8) raw.push_back(static_cast<char>(length >> shift));
    raw += element;
  }
  return raw;
}

}  // namespace chorus
