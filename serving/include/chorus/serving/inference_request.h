// One request to a served model as every scheduler takes it, and what answers
// it: the request's inputs (in the model's signature order) with its deadline,
// cancellation and queue parameters; what a model that reads requests as they
// came (request_executor.h) also sees of them; and the result, or, for a
// model that streams, each response.
#ifndef CHORUS_SERVING_INFERENCE_REQUEST_H_
#define CHORUS_SERVING_INFERENCE_REQUEST_H_

#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "chorus/common/parameters.h"
#include "chorus/common/status.h"

namespace chorus {

// A sequence's id: a number (> 0) or a string (non-empty), as the request's
// sequence_id parameter gives it; 0 for a request in no sequence.
using CorrelationId = std::variant<uint64_t, std::string>;
std::string CorrelationIdText(const CorrelationId& id);

// A request's sequence flags (Triton's TRITONSERVER_REQUEST_FLAG_*).
inline constexpr uint32_t kSequenceStartFlag = 1;
inline constexpr uint32_t kSequenceEndFlag = 2;

// One response of a model that streams (a decoupled model).
struct ModelResponse {
  // Not OK: an error response (the stream goes on unless it is final); no outputs.
  Status status;
  // In the model's output order; None for an output the response leaves out
  // (only a model that answers its requests itself leaves any out).
  std::vector<c10::IValue> outputs;
  Parameters parameters;  // the response's own (Triton's Python backend sets them)
  bool final = false;     // the stream's last response: none follows
};

struct InferenceRequest {
  std::string id;  // the client's request id (crash reports name it); may be ""
  // In the model's signature order: tensors and string tensors (model_values.h);
  // None for an optional input the request leaves out.
  std::vector<c10::IValue> inputs;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<std::atomic<bool>> cancelled;  // optional; set when the client goes away
  // Set for a decoupled model (one that streams): each response comes here,
  // in order, as the model gives it; returning false stops the model. The
  // Done callback then reports how the stream ended, with no outputs. A model
  // whose calls return generators runs such a request alone, on the worker.
  std::function<bool(ModelResponse)> on_response;
  // The models whose calls led to this one, outermost first (ensembles and
  // in-process model calls): a call to one of them again is a cycle, refused.
  std::vector<std::string> call_path;
  int priority = 0;                      // 1 (first) .. levels; 0: the model's default level
  std::chrono::microseconds timeout{0};  // queue timeout asked for (the policy decides)

  // What a model that answers its requests itself (request_executor.h) sees
  // of the request besides its inputs; other models leave them unset.
  Parameters parameters;                       // the client's, every one
  std::vector<std::string> requested_outputs;  // the outputs asked for; empty: all
  CorrelationId correlation_id = uint64_t{0};
  uint32_t flags = 0;  // kSequenceStartFlag | kSequenceEndFlag
};

struct InferenceResult {
  Status status;
  // In the model's output order, as inputs; None for an output the model
  // left out of its answer (only one that answers its requests itself may).
  std::vector<c10::IValue> outputs;
  Parameters parameters;   // the answer's own parameters, if the model gave any
  int64_t batch_size = 0;  // samples in the execution this request ran in
  std::chrono::nanoseconds queue_time{0};
  std::chrono::nanoseconds compute_time{0};
};

}  // namespace chorus

#endif  // CHORUS_SERVING_INFERENCE_REQUEST_H_
