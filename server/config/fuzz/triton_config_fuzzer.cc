// libFuzzer target: arbitrary bytes as a model's config.pbtxt. Parsing,
// normalizing and mapping must return an error or a config, never crash,
// hang or leak; a config that maps survives its JSON form unchanged (what a
// Python-backend model's auto_complete_config gets and answers).
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <string_view>

#include "chorus/server/config/triton_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  chorus::StatusOr<inference::ModelConfig> triton = chorus::ParseTritonConfig(text);
  if (!triton.ok()) return 0;
  chorus::NormalizeTritonConfig("model", &*triton);
  if (!chorus::ModelConfigFromTriton(*triton, "model").ok()) return 0;
  chorus::StatusOr<inference::ModelConfig> again =
      chorus::TritonConfigFromJson(chorus::TritonConfigJson(*triton));
  if (!again.ok() || !google::protobuf::util::MessageDifferencer::Equivalent(*triton, *again)) {
    __builtin_trap();
  }
  return 0;
}
