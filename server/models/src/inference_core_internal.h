// What InferenceCore's files share (inference_core.cc: the protocol's unary
// calls; inference_core_streams.cc: streams and generation).
#ifndef CHORUS_SERVER_MODELS_SRC_INFERENCE_CORE_INTERNAL_H_
#define CHORUS_SERVER_MODELS_SRC_INFERENCE_CORE_INTERNAL_H_

#include "chorus/inference/grpc_service.pb.h"
#include "chorus/server/models/loaded_model.h"
#include "chorus/server/models/tensor_codec.h"

namespace chorus::core_internal {

// A Python-backend model's outputs go out as it gave them (Triton's).
OutputCheck OutputCheckOf(const LoadedModel& model);

// Who answers: the model, its version and the request's id.
void FillResponseHeader(const LoadedModel& model, const inference::ModelInferRequest& request,
                        inference::ModelInferResponse* response);

}  // namespace chorus::core_internal

#endif  // CHORUS_SERVER_MODELS_SRC_INFERENCE_CORE_INTERNAL_H_
