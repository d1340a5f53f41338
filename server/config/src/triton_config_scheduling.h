// The scheduling parts of Triton's ModelConfig onto chorus' (dynamic and
// sequence batching, ensembles) and its serving features (warm-up, response
// cache, decoupled policy); triton_config_mapping.cc maps the rest. Errors as
// ModelConfigFromTriton's (triton_config.h).
#ifndef CHORUS_SERVER_CONFIG_SRC_TRITON_CONFIG_SCHEDULING_H_
#define CHORUS_SERVER_CONFIG_SRC_TRITON_CONFIG_SCHEDULING_H_

#include <string>

#include "chorus/common/status.h"
#include "chorus/inference/model_config.pb.h"
#include "chorus/server/config/model_config.h"

namespace chorus::triton_config {

// INVALID_ARGUMENT "config.pbtxt: <field>: <why>".
Status FieldError(const std::string& field, const std::string& why);
// FieldError saying chorus cannot honour `field`, and why.
Status NotHonoured(const std::string& field, const std::string& why);
// The manifest dtype of `type`; FieldError naming `field` for none.
StatusOr<std::string> DtypeOf(inference::DataType type, const std::string& field);

// dynamic_batching, sequence_batching (whose control and state tensors join
// the signature: Triton's config leaves them out of input and output) or
// ensemble_scheduling. `out` already holds the tensors and instances.
Status MapScheduling(const inference::ModelConfig& triton, ModelConfig* out);
// model_warmup, response_cache, model_transaction_policy.
Status MapServingFeatures(const inference::ModelConfig& triton, ModelConfig* out);

}  // namespace chorus::triton_config

#endif  // CHORUS_SERVER_CONFIG_SRC_TRITON_CONFIG_SCHEDULING_H_
