// The protocol's request parameters (a map of InferParameter) as both
// transports and the core read them.
#ifndef CHORUS_SERVER_MODELS_INFER_PARAMETERS_H_
#define CHORUS_SERVER_MODELS_INFER_PARAMETERS_H_

#include <string>

#include "chorus/common/parameters.h"
#include "chorus/inference/grpc_service.pb.h"

namespace chorus {

using InferParameters = google::protobuf::Map<std::string, inference::InferParameter>;

// Whether `parameters` hold `key` set to true.
inline bool BoolParameter(const InferParameters& parameters, const std::string& key) {
  auto it = parameters.find(key);
  return it != parameters.end() && it->second.bool_param();
}

// Sets `key` to true.
inline void SetBoolParameter(InferParameters* parameters, const std::string& key) {
  (*parameters)[key].set_bool_param(true);
}

// The protocol's parameters as chorus' typed ones, and back.
Parameters ParametersOf(const InferParameters& parameters);
void SetParameters(const Parameters& parameters, InferParameters* out);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_INFER_PARAMETERS_H_
