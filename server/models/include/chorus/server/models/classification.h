// Triton's classification extension: an output requested with the parameter
// "classification": K (tritonclient's class_count) is answered as the K
// largest values of each batch row instead of the values themselves, as BYTES
// "value:index" or "value:index:label" when the output has labels (config.json
// "tensors": {"y": {"label_filename": "labels.txt"}}, one label per line).
#ifndef CHORUS_SERVER_MODELS_CLASSIFICATION_H_
#define CHORUS_SERVER_MODELS_CLASSIFICATION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/inference/grpc_service.pb.h"
#include "chorus/serving/model_values.h"

namespace chorus {

// An output's labels: line i of `filename` names class i.
struct OutputLabels {
  std::string filename;
  std::vector<std::string> labels;
};
using OutputLabelsMap = std::map<std::string, OutputLabels>;  // by output name

// The labels of the file at `path`, one per line (a trailing newline ends the
// last; "\r\n" lines too). NOT_FOUND / errors name the file.
StatusOr<std::vector<std::string>> ReadLabels(const std::string& path);

// The K `requested` asks for; nullopt when it asks for no classification.
// INVALID_ARGUMENT, naming the output, unless K is an integer >= 1.
StatusOr<std::optional<int64_t>> ClassCount(
    const inference::ModelInferRequest::InferRequestedOutputTensor& requested);

// The `k` largest values of each row of `output` (rows: its first dimension
// when `batched`, else the whole tensor as one), largest first, at most as
// many as a row has: shape [rows, k] ([k] unbatched). Elements are
// "value:index[:label]", values as C's %f for floats (Triton's form).
// INVALID_ARGUMENT for an empty or 0-d batched output.
StatusOr<StringTensor> Classify(const at::Tensor& output, int64_t k, bool batched,
                                const std::vector<std::string>& labels);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_CLASSIFICATION_H_
