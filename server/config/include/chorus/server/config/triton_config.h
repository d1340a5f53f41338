// Triton's config.pbtxt (the protobuf text of Triton's ModelConfig, with its
// field names and enums) read into chorus' ModelConfig: every field chorus has
// a meaning for maps onto the same field of config.json's schema, and a field
// chorus cannot honour fails the read, naming it (docs/triton.md lists both).
// The config is kept too, normalized as Triton normalizes it: the ModelConfig
// call answers it and a Python-backend model's initialize() gets it.
//
// Thread-compatible functions of their arguments; no I/O but ReadTritonConfig.
#ifndef CHORUS_SERVER_CONFIG_TRITON_CONFIG_H_
#define CHORUS_SERVER_CONFIG_TRITON_CONFIG_H_

#include <string>
#include <string_view>

#include "chorus/common/status.h"
#include "chorus/inference/model_config.pb.h"
#include "chorus/server/config/model_config.h"

namespace chorus {

// The text as a config. INVALID_ARGUMENT "config.pbtxt:<line>:<column>: <what>"
// for text that is not a Triton ModelConfig (an unknown field, a bad value),
// "config.pbtxt: <field> ..." for a string that is not UTF-8 or an enum
// number that names no value.
StatusOr<inference::ModelConfig> ParseTritonConfig(std::string_view text);

// Fills in what Triton fills in before it serves a config of model
// `model_name`: the name, the version policy, a Python model's file, the
// preferred batch size, the sequences' idle time, pinned memory, instance
// groups (one group of one instance on the CPU; chorus uses no GPU a config
// does not name) and their names.
void NormalizeTritonConfig(const std::string& model_name, inference::ModelConfig* config);

// chorus' config of `triton` (normalized), kept in its `triton`. Errors
// INVALID_ARGUMENT "config.pbtxt: <field>: <why>": a name other than the
// folder's (`model_name`), a backend or platform chorus does not serve, a
// field it cannot honour, a value it cannot take.
StatusOr<ModelConfig> ModelConfigFromTriton(const inference::ModelConfig& triton,
                                            const std::string& model_name);

// The config in Triton's JSON form: its field names, every field printed
// with its default, 64-bit integers as numbers (what a Python-backend model's
// initialize() gets as args["model_config"], and auto_complete_config).
std::string TritonConfigJson(const inference::ModelConfig& config);

// A config from that JSON form (auto_complete_config's answer, a load
// call's "config"). INVALID_ARGUMENT naming what is wrong (as
// ParseTritonConfig's, an enum number that names no value included).
StatusOr<inference::ModelConfig> TritonConfigFromJson(std::string_view json);

// <model_dir>/config.pbtxt read, normalized and mapped, errors prefixed with
// the file's path.
StatusOr<ModelConfig> ReadTritonConfig(const std::string& model_dir, const std::string& model_name);

}  // namespace chorus

#endif  // CHORUS_SERVER_CONFIG_TRITON_CONFIG_H_
