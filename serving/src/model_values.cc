#include "chorus/serving/model_values.h"

#include <ATen/ATen.h>
#include <ATen/core/jit_type.h>

#include <utility>

#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"

namespace chorus {
namespace {

// List[str] nested `depth` times (depth >= 1).
c10::TypePtr StringListType(size_t depth) {
  c10::TypePtr type = c10::StringType::get();
  for (size_t i = 0; i < depth; ++i) type = c10::ListType::create(type);
  return type;
}

// Elements [*next, ...) of `elements` as a list of shape[level:], advancing *next.
c10::IValue Nest(std::vector<std::string>& elements, const std::vector<int64_t>& shape,
                 size_t level, size_t* next) {
  if (level == shape.size()) return c10::IValue(std::move(elements[(*next)++]));
  if (level + 1 == shape.size()) {
    c10::List<std::string> row;
    row.reserve(shape[level]);
    for (int64_t i = 0; i < shape[level]; ++i) row.push_back(std::move(elements[(*next)++]));
    return row;
  }
  c10::impl::GenericList rows(StringListType(shape.size() - level - 1));
  rows.reserve(shape[level]);
  for (int64_t i = 0; i < shape[level]; ++i) rows.push_back(Nest(elements, shape, level + 1, next));
  return rows;
}

std::string Path(const std::vector<int64_t>& index) {
  std::string text;
  for (int64_t i : index) text += "[" + std::to_string(i) + "]";
  return text.empty() ? "the value" : "element " + text;
}

// Appends the leaves of `value` (expected to have shape[level:]) to `out`.
Status Flatten(const c10::IValue& value, const std::vector<int64_t>& shape, size_t level,
               std::vector<int64_t>* index, std::vector<std::string>* out) {
  if (level == shape.size()) {
    if (!value.isString()) {
      return InvalidArgumentError(Path(*index) + " of a string tensor is " + value.tagKind() +
                                  ", not a str");
    }
    out->push_back(value.toStringRef());
    return OkStatus();
  }
  if (!value.isList()) {
    return InvalidArgumentError(Path(*index) + " of a string tensor is " + value.tagKind() +
                                ", not a list (the nesting is uneven)");
  }
  c10::ArrayRef<c10::IValue> items = value.toListRef();
  if (static_cast<int64_t>(items.size()) != shape[level]) {
    return InvalidArgumentError(Path(*index) + " of a string tensor has " +
                                std::to_string(items.size()) +
                                " items; the first at its level has " +
                                std::to_string(shape[level]) + " (the nesting is ragged)");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    index->push_back(static_cast<int64_t>(i));
    CHORUS_RETURN_IF_ERROR(Flatten(items[i], shape, level + 1, index, out));
    index->pop_back();
  }
  return OkStatus();
}

// The shape the first path through `value` implies.
std::vector<int64_t> FirstPathShape(const c10::IValue& value) {
  std::vector<int64_t> shape;
  const c10::IValue* at = &value;
  while (at->isList()) {
    c10::ArrayRef<c10::IValue> items = at->toListRef();
    shape.push_back(static_cast<int64_t>(items.size()));
    if (items.empty()) break;
    at = &items[0];
  }
  return shape;
}

}  // namespace

c10::IValue StringTensorToIValue(StringTensor tensor) {
  size_t next = 0;
  return Nest(tensor.elements, tensor.shape, 0, &next);
}

StatusOr<StringTensor> StringTensorFromIValue(const c10::IValue& value) {
  StringTensor tensor;
  tensor.shape = FirstPathShape(value);
  std::vector<int64_t> index;
  CHORUS_RETURN_IF_ERROR(Flatten(value, tensor.shape, 0, &index, &tensor.elements));
  return tensor;
}

bool IsStringValue(const c10::IValue& value) {
  const c10::IValue* at = &value;
  while (at->isList() && !at->toListRef().empty()) at = &at->toListRef()[0];
  return at->isString();
}

std::vector<int64_t> ShapeOf(const c10::IValue& value) {
  if (value.isTensor()) return value.toTensor().sizes().vec();
  return FirstPathShape(value);
}

c10::IValue ConcatValues(const std::vector<c10::IValue>& parts, int64_t dim) {
  if (parts.front().isTensor()) {
    std::vector<at::Tensor> tensors;
    tensors.reserve(parts.size());
    for (const c10::IValue& part : parts) tensors.push_back(part.toTensor());
    return at::cat(tensors, dim);
  }
  TORCH_CHECK(dim == 0, "string tensors are batched along dim 0 only");
  c10::impl::GenericList joined(parts.front().toList().elementType());
  for (const c10::IValue& part : parts) {
    for (const c10::IValue& item : part.toListRef()) joined.push_back(item);
  }
  return joined;
}

c10::IValue SliceValue(const c10::IValue& value, int64_t dim, int64_t start, int64_t length) {
  if (value.isTensor()) return value.toTensor().narrow(dim, start, length);
  TORCH_CHECK(dim == 0, "string tensors are batched along dim 0 only");
  c10::impl::GenericList rows(value.toList().elementType());
  c10::ArrayRef<c10::IValue> items = value.toListRef();
  for (int64_t i = start; i < start + length; ++i) rows.push_back(items[i]);
  return rows;
}

std::vector<int64_t> WithAnySizeAsOne(std::vector<int64_t> shape) {
  for (int64_t& size : shape) size = size < 0 ? 1 : size;
  return shape;
}

c10::IValue FilledValue(const std::string& dtype, const std::vector<int64_t>& shape, int64_t fill) {
  const Dtype kind = DtypeByName(dtype)->dtype;
  if (kind == Dtype::kString) {
    return StringTensorToIValue({shape, std::vector<std::string>(c10::multiply_integers(shape))});
  }
  return at::full(shape, fill, at::TensorOptions().dtype(ScalarTypeOf(kind)));
}

}  // namespace chorus
