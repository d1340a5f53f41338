#include "chorus/server/models/infer_parameters.h"

namespace chorus {

Parameters ParametersOf(const InferParameters& parameters) {
  Parameters out;
  for (const auto& [name, value] : parameters) {
    switch (value.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam:
        out[name] = value.bool_param();
        break;
      case inference::InferParameter::kInt64Param:
        out[name] = value.int64_param();
        break;
      case inference::InferParameter::kUint64Param:
        out[name] = value.uint64_param();
        break;
      case inference::InferParameter::kDoubleParam:
        out[name] = value.double_param();
        break;
      default:
        out[name] = value.string_param();
        break;
    }
  }
  return out;
}

void SetParameters(const Parameters& parameters, InferParameters* out) {
  for (const auto& [name, value] : parameters) {
    inference::InferParameter& parameter = (*out)[name];
    std::visit(
        [&parameter](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
            parameter.set_bool_param(v);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            parameter.set_int64_param(v);
          } else if constexpr (std::is_same_v<T, uint64_t>) {
            parameter.set_uint64_param(v);
          } else if constexpr (std::is_same_v<T, double>) {
            parameter.set_double_param(v);
          } else {
            parameter.set_string_param(v);
          }
        },
        value);
  }
}

}  // namespace chorus
