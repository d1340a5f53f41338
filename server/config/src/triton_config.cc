// Triton's config.pbtxt: parsing, Triton's normalization and its JSON form.
// The mapping onto chorus' ModelConfig is triton_config_mapping.cc.
#include "chorus/server/config/triton_config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

#include <vector>

#include "chorus/common/file_util.h"

namespace chorus {
namespace {

namespace pb = google::protobuf;
// Ordered: Triton prints a config's fields in their declaration order.
using Json = nlohmann::ordered_json;

// Keeps the parser's first error, with where it is.
class FirstError : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!error_.empty()) return;
    error_ = "config.pbtxt:" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " +
             message;
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

bool Is64BitInteger(const pb::FieldDescriptor& field) {
  const auto type = field.cpp_type();
  return type == pb::FieldDescriptor::CPPTYPE_INT64 || type == pb::FieldDescriptor::CPPTYPE_UINT64;
}

Json NumberOf(const Json& text, const pb::FieldDescriptor& field) {
  if (!text.is_string()) return text;
  const std::string& digits = text.get_ref<const std::string&>();
  if (field.cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT64) return std::stoull(digits);
  return std::stoll(digits);
}

void Int64AsNumbers(const pb::Descriptor& message, Json& value);

// One field's JSON value (a map's value, a list's items, or the value).
void FieldAsNumbers(const pb::FieldDescriptor& field, Json& value) {
  if (field.is_map()) {
    const pb::FieldDescriptor& entry_value = *field.message_type()->map_value();
    for (auto& [key, item] : value.items()) FieldAsNumbers(entry_value, item);
    return;
  }
  auto one = [&field](Json& item) {
    if (Is64BitInteger(field)) {
      item = NumberOf(item, field);
    } else if (field.cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      Int64AsNumbers(*field.message_type(), item);
    }
  };
  if (field.is_repeated() && value.is_array()) {
    for (Json& item : value) one(item);
  } else {
    one(value);
  }
}

// Protobuf's JSON writes 64-bit integers as strings; Triton's config JSON
// has numbers. Walks `value` along `message`'s descriptor.
void Int64AsNumbers(const pb::Descriptor& message, Json& value) {
  if (!value.is_object()) return;
  for (auto& [key, member] : value.items()) {
    if (const pb::FieldDescriptor* field = message.FindFieldByName(key)) {
      FieldAsNumbers(*field, member);
    }
  }
}

// A field whose value text format took but the rest of the server cannot
// carry: a string that is not UTF-8 (octal escapes make one; the config's
// JSON form, what clients and auto_complete_config get, cannot hold it) or
// an enum number with no name (proto3 enums are open, so text format takes
// `data_type: 32`).
struct UnfitField {
  const pb::FieldDescriptor* field = nullptr;
  const char* why = "";
};

UnfitField UnfitValue(const pb::Message& message, const pb::FieldDescriptor& field, int index) {
  const pb::Reflection& reflection = *message.GetReflection();
  const bool repeated = field.is_repeated();
  if (field.type() == pb::FieldDescriptor::TYPE_STRING) {
    const std::string text = repeated ? reflection.GetRepeatedString(message, &field, index)
                                      : reflection.GetString(message, &field);
    if (!pb::internal::IsStructurallyValidUTF8(text)) return {&field, "is not valid UTF-8"};
  } else if (field.cpp_type() == pb::FieldDescriptor::CPPTYPE_ENUM) {
    const int number = repeated ? reflection.GetRepeatedEnumValue(message, &field, index)
                                : reflection.GetEnumValue(message, &field);
    if (field.enum_type()->FindValueByNumber(number) == nullptr) {
      return {&field, "is a number that names no value"};
    }
  }
  return {};
}

// The first unfit field anywhere in `message` (map keys included).
UnfitField FirstUnfitField(const pb::Message& message) {
  const pb::Reflection& reflection = *message.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const pb::FieldDescriptor* field : fields) {
    const int count = field->is_repeated() ? reflection.FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      UnfitField unfit;
      if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        unfit =
            FirstUnfitField(field->is_repeated() ? reflection.GetRepeatedMessage(message, field, i)
                                                 : reflection.GetMessage(message, field));
      } else {
        unfit = UnfitValue(message, *field, i);
      }
      if (unfit.field != nullptr) return unfit;
    }
  }
  return {};
}

}  // namespace

StatusOr<inference::ModelConfig> ParseTritonConfig(std::string_view text) {
  FirstError errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  inference::ModelConfig config;
  if (!parser.ParseFromString(std::string(text), &config)) {
    return InvalidArgumentError(errors.error().empty() ? "config.pbtxt: not a Triton model config"
                                                       : errors.error());
  }
  // Refused here, where the user can fix it, rather than deep in the mapping.
  if (const UnfitField unfit = FirstUnfitField(config); unfit.field != nullptr) {
    return InvalidArgumentError("config.pbtxt: " + unfit.field->name() + " " + unfit.why);
  }
  return config;
}

void NormalizeTritonConfig(const std::string& model_name, inference::ModelConfig* config) {
  if (config->name().empty()) config->set_name(model_name);
  if (!config->has_version_policy()) config->mutable_version_policy()->mutable_latest();
  if (config->version_policy().has_latest() &&
      config->version_policy().latest().num_versions() == 0) {
    config->mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  if (config->backend() == "python" && config->default_model_filename().empty()) {
    config->set_default_model_filename("model.py");
  }
  if (config->has_dynamic_batching() && config->max_batch_size() > 0 &&
      config->dynamic_batching().preferred_batch_size_size() == 0) {
    config->mutable_dynamic_batching()->add_preferred_batch_size(config->max_batch_size());
  }
  if (config->has_sequence_batching() &&
      config->sequence_batching().max_sequence_idle_microseconds() == 0) {
    config->mutable_sequence_batching()->set_max_sequence_idle_microseconds(1000000);
  }
  auto* optimization = config->mutable_optimization();
  if (!optimization->has_input_pinned_memory()) {
    optimization->mutable_input_pinned_memory()->set_enable(true);
  }
  if (!optimization->has_output_pinned_memory()) {
    optimization->mutable_output_pinned_memory()->set_enable(true);
  }
  if (config->platform() == "ensemble") return;  // an ensemble has no instances
  if (config->instance_group_size() == 0) {
    config->add_instance_group()->set_name(model_name);  // the implicit group: the model's name
  }
  for (int i = 0; i < config->instance_group_size(); ++i) {
    inference::ModelInstanceGroup* group = config->mutable_instance_group(i);
    if (group->name().empty()) group->set_name(config->name() + "_" + std::to_string(i));
    if (group->count() < 1) group->set_count(1);
    // KIND_AUTO: a GPU where the group names one, else the CPU (chorus uses
    // no GPU a config does not name).
    if (group->kind() == inference::ModelInstanceGroup::KIND_AUTO) {
      group->set_kind(group->gpus_size() > 0 ? inference::ModelInstanceGroup::KIND_GPU
                                             : inference::ModelInstanceGroup::KIND_CPU);
    }
  }
}

std::string TritonConfigJson(const inference::ModelConfig& config) {
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  if (!pb::util::MessageToJsonString(config, &text, options).ok()) return "{}";
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return "{}";
  Int64AsNumbers(*inference::ModelConfig::descriptor(), doc);
  return doc.dump(-1, ' ', false, Json::error_handler_t::replace);
}

StatusOr<inference::ModelConfig> TritonConfigFromJson(std::string_view json) {
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  inference::ModelConfig config;
  pb::util::Status parsed = pb::util::JsonStringToMessage(std::string(json), &config, options);
  if (!parsed.ok()) {
    return InvalidArgumentError("the model config is not a Triton ModelConfig in JSON: " +
                                std::string(parsed.message()));
  }
  if (const UnfitField unfit = FirstUnfitField(config); unfit.field != nullptr) {
    return InvalidArgumentError("the model config's " + unfit.field->name() + " " + unfit.why);
  }
  return config;
}

StatusOr<ModelConfig> ReadTritonConfig(const std::string& model_dir,
                                       const std::string& model_name) {
  const std::string path = model_dir + "/config.pbtxt";
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  StatusOr<inference::ModelConfig> triton = ParseTritonConfig(text);
  StatusOr<ModelConfig> config = triton.status();
  if (triton.ok()) {
    NormalizeTritonConfig(model_name, &*triton);
    config = ModelConfigFromTriton(*triton, model_name);
  }
  if (!config.ok()) {
    return Status(config.status().code(), model_dir + "/" + config.status().message());
  }
  return config;
}

}  // namespace chorus
