// What the inference core makes of a request beyond decoding its tensors, and
// of an answer beyond encoding them: the attributes a Python-backend model
// reads of its requests (parameters, outputs asked for, sequence id and
// flags), and Triton's reshape of inputs and outputs.
#ifndef CHORUS_SERVER_MODELS_SRC_REQUEST_ATTRIBUTES_H_
#define CHORUS_SERVER_MODELS_SRC_REQUEST_ATTRIBUTES_H_

#include <vector>

#include "chorus/inference/grpc_service.pb.h"
#include "chorus/server/models/loaded_model.h"
#include "chorus/serving/inference_request.h"

namespace chorus {

// Sets `call`'s parameters (the client's, less those the protocol itself
// reads: sequence_id, priority, timeout, ...), the outputs it asks for (all
// of the model's when it names none, as Triton tells a Python model), and
// its sequence id and flags.
void SetRequestAttributes(const LoadedModel& model, const inference::ModelInferRequest& request,
                          InferenceRequest* call);

// Inputs reshaped as the model takes them (Triton's input reshape), keeping
// the batch dimension. INVALID_ARGUMENT naming an input whose elements do not fit.
Status ReshapeInputs(const LoadedModel& model, std::vector<c10::IValue>* inputs);
// Outputs reshaped as clients see them (Triton's output reshape: the model
// gives the reshape's shape, clients get the signature's).
Status ReshapeOutputs(const LoadedModel& model, std::vector<c10::IValue>* outputs);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_SRC_REQUEST_ATTRIBUTES_H_
