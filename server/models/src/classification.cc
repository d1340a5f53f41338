#include "chorus/server/models/classification.h"

#include <algorithm>

#include "chorus/common/file_util.h"

namespace chorus {
namespace {

// The element at `flat` of `values` (a contiguous copy of the output), as text.
std::string ValueText(const at::Tensor& values, int64_t flat) {
  if (c10::isFloatingType(values.scalar_type())) {
    return std::to_string(values.data_ptr<double>()[flat]);
  }
  if (values.scalar_type() == at::kUInt64) {
    return std::to_string(static_cast<const uint64_t*>(values.data_ptr())[flat]);
  }
  return std::to_string(values.data_ptr<int64_t>()[flat]);
}

}  // namespace

StatusOr<std::vector<std::string>> ReadLabels(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::vector<std::string> labels;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    labels.push_back(std::move(line));
    at = end + 1;
  }
  return labels;
}

StatusOr<std::optional<int64_t>> ClassCount(
    const inference::ModelInferRequest::InferRequestedOutputTensor& requested) {
  auto it = requested.parameters().find("classification");
  if (it == requested.parameters().end()) return std::optional<int64_t>();
  const inference::InferParameter& value = it->second;
  int64_t k = 0;
  if (value.parameter_choice_case() == inference::InferParameter::kInt64Param) {
    k = value.int64_param();
  } else if (value.parameter_choice_case() == inference::InferParameter::kUint64Param) {
    k = static_cast<int64_t>(std::min<uint64_t>(value.uint64_param(), INT64_MAX));
  }
  if (k < 1) {
    return InvalidArgumentError("output \"" + requested.name() +
                                "\": parameter \"classification\" must be an integer >= 1");
  }
  return std::optional<int64_t>(k);
}

StatusOr<StringTensor> Classify(const at::Tensor& output, int64_t k, bool batched,
                                const std::vector<std::string>& labels) {
  if (batched && output.dim() == 0) {
    return InvalidArgumentError("classification of a batched output needs a batch dimension");
  }
  const int64_t rows = batched ? output.size(0) : 1;
  const int64_t columns = rows == 0 ? 0 : output.numel() / rows;
  const at::ScalarType type = c10::isFloatingType(output.scalar_type()) ? at::kDouble
                              : output.scalar_type() == at::kUInt64     ? at::kUInt64
                                                                        : at::kLong;
  // Ranked by a double copy (exact for every type but 64-bit integers past 2^53).
  const at::Tensor values = output.to(type).contiguous().reshape({rows, columns});
  const int64_t count = std::min(k, columns);
  StringTensor classes;
  classes.shape = batched ? std::vector<int64_t>{rows, count} : std::vector<int64_t>{count};
  if (count == 0) return classes;
  const at::Tensor order = std::get<1>(values.to(at::kDouble).topk(count, 1)).contiguous();
  const int64_t* index = order.data_ptr<int64_t>();
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t column = index[row * count + j];
      std::string text = ValueText(values, row * columns + column) + ":" + std::to_string(column);
      if (column < static_cast<int64_t>(labels.size()) && !labels[column].empty()) {
        text += ":" + labels[column];
      }
      classes.elements.push_back(std::move(text));
    }
  }
  return classes;
}

}  // namespace chorus
