// A served model described in Triton's terms: its platform name and its model
// configuration (what Triton's ModelConfig call answers and its tools read).
#ifndef CHORUS_SERVER_MODELS_TRITON_MODEL_CONFIG_H_
#define CHORUS_SERVER_MODELS_TRITON_MODEL_CONFIG_H_

#include "chorus/inference/grpc_service.pb.h"
#include "chorus/server/models/model_repository.h"

namespace chorus {

// The configuration of `model` as served: signature (dims without the batch
// dimension when it batches along dimension 0, Triton's convention), largest
// batch, dynamic batching, instances, version policy; never decoupled.
void FillTritonModelConfig(const LoadedModel& model, inference::ModelConfig* config);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_TRITON_MODEL_CONFIG_H_
