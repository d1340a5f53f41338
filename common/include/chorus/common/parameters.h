// Request and response parameters as the Open Inference Protocol carries
// them (its InferParameter), without the protocol: what a model that reads its
// requests' parameters (Triton's Python backend) gets, and what it answers.
#ifndef CHORUS_COMMON_PARAMETERS_H_
#define CHORUS_COMMON_PARAMETERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace chorus {

using ParameterValue = std::variant<bool, int64_t, uint64_t, double, std::string>;
// By name (ordered: JSON made of them is stable).
using Parameters = std::map<std::string, ParameterValue>;

}  // namespace chorus

#endif  // CHORUS_COMMON_PARAMETERS_H_
