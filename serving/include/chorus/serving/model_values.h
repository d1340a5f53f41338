// What a served model takes and returns, input by input: an at::Tensor, or a
// string tensor (BYTES on the wire, dtype "string" in signatures), which torch
// has no dtype for. A string tensor reaches the model as Python and
// TorchScript code expects text: a str for shape [], else a list of str nested
// once per dimension (shape [2, 3]: a list of 2 lists of 3 str). The scheduler
// batches both kinds through the functions here.
#ifndef CHORUS_SERVING_MODEL_VALUES_H_
#define CHORUS_SERVING_MODEL_VALUES_H_

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/serving/string_tensor.h"

namespace chorus {

// `tensor` as a model sees it: typed lists (List[str], List[List[str]], ...),
// so TorchScript accepts them. Requires elements.size() == product of shape.
c10::IValue StringTensorToIValue(StringTensor tensor);

// The string tensor `value` holds: a str, or lists nested to one depth with
// equal lengths at each level and str leaves (an empty list has shape [0]).
// INVALID_ARGUMENT, saying where, for anything else.
StatusOr<StringTensor> StringTensorFromIValue(const c10::IValue& value);

// Whether `value` is meant as a string tensor (a str, or a list whose first
// leaf is a str); StringTensorFromIValue says whether it is a well-formed one.
bool IsStringValue(const c10::IValue& value);

// The shape of a tensor or of a well-formed string tensor.
std::vector<int64_t> ShapeOf(const c10::IValue& value);

// `shape` with its any-size (-1) dimensions as 1: one request's share.
std::vector<int64_t> WithAnySizeAsOne(std::vector<int64_t> shape);

// A value of manifest dtype `dtype` ("float32", ..., "string") and `shape`,
// every element `fill` (empty strings for a string tensor): the zeros
// chorus gives a model at load, warm-up and a sequence's first state, and the
// controls it fills. Precondition: `dtype` is in the dtype table.
c10::IValue FilledValue(const std::string& dtype, const std::vector<int64_t>& shape,
                        int64_t fill = 0);

// `parts` joined along `dim`: all tensors (at::cat), or all string tensors
// (then `dim` must be 0). Shapes must agree but along `dim`.
c10::IValue ConcatValues(const std::vector<c10::IValue>& parts, int64_t dim);

// `length` rows of `value` from `start` along `dim` (a view for tensors;
// string tensors only along dim 0).
c10::IValue SliceValue(const c10::IValue& value, int64_t dim, int64_t start, int64_t length);

}  // namespace chorus

#endif  // CHORUS_SERVING_MODEL_VALUES_H_
