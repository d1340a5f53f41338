#include "chorus/training/job/training_spec.h"

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <string>

namespace chorus {
namespace {

using Json = nlohmann::json;

nlohmann::json OptimizerJson(const OptimizerSpec& o) {
  return {{"name", o.name},   {"lr", o.lr},   {"beta1", o.beta1},
          {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay}};
}

nlohmann::json ScheduleJson(const LrScheduleSpec& s) {
  return {{"kind", s.kind},
          {"warmup_steps", s.warmup_steps},
          {"total_steps", s.total_steps},
          {"min_lr_ratio", s.min_lr_ratio}};
}

// Reads `json[key]` into `*out` if present; the error names `where.key`.
template <typename T>
Status Read(const Json& json, const char* key, const std::string& where, T* out) {
  auto it = json.find(key);
  if (it == json.end()) return OkStatus();
  try {
    *out = it->get<T>();
  } catch (const Json::exception&) {
    return InvalidArgumentError(where + key + " has the wrong type: " + it->dump());
  }
  return OkStatus();
}

// The first error of `statuses` (evaluated in order), or OK.
Status AllOk(std::initializer_list<Status> statuses) {
  for (const Status& status : statuses) {
    if (!status.ok()) return status;
  }
  return OkStatus();
}

Status CheckKeys(const Json& json, const Json& known, const std::string& where) {
  if (!json.is_object()) return InvalidArgumentError(where + " must be a JSON object");
  for (const auto& [key, value] : json.items()) {
    if (!known.contains(key)) return InvalidArgumentError("unknown key " + where + key);
  }
  return OkStatus();
}

// Reads the object `json[key]`, when present, with `read(object, "spec.<key>.")`
// after checking that it has only the keys of `known`.
template <typename ReadFields>
Status ReadNested(const Json& json, const char* key, const Json& known, ReadFields read) {
  if (!json.contains(key)) return OkStatus();
  const std::string where = std::string("spec.") + key + ".";
  CHORUS_RETURN_IF_ERROR(CheckKeys(json[key], known, where));
  return read(json[key], where);
}

}  // namespace

Status TrainingSpec::Validate() const {
  if (model_factory.empty()) return InvalidArgumentError("spec.model_factory is required");
  const Json config = Json::parse(model_config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return InvalidArgumentError("spec.model_config_json must be a JSON object");
  }
  if (loss != "cross_entropy" && loss != "mse") {
    return InvalidArgumentError("spec.loss must be cross_entropy or mse, not \"" + loss + "\"");
  }
  if (optimizer.name != "adamw") {
    return InvalidArgumentError("spec.optimizer.name must be adamw, not \"" + optimizer.name +
                                "\"");
  }
  if (!(optimizer.lr > 0)) return InvalidArgumentError("spec.optimizer.lr must be positive");
  if (optimizer.weight_decay < 0) {
    return InvalidArgumentError("spec.optimizer.weight_decay must not be negative");
  }
  if (lr_schedule.kind != "constant" && lr_schedule.kind != "warmup_cosine") {
    return InvalidArgumentError("spec.lr_schedule.kind must be constant or warmup_cosine, not \"" +
                                lr_schedule.kind + "\"");
  }
  if (!data_loader.empty() && (global_batch <= 0 || seq_len <= 0)) {
    return InvalidArgumentError("a data_loader needs global_batch and seq_len");
  }
  if (global_batch < 0 || seq_len < 0) {
    return InvalidArgumentError("spec.global_batch and spec.seq_len must not be negative");
  }
  if (!param_dtype.empty() && param_dtype != "bfloat16") {
    return InvalidArgumentError("spec.param_dtype must be \"\" or bfloat16, not \"" + param_dtype +
                                "\"");
  }
  return OkStatus();
}

std::string TrainingSpec::ToJson() const {
  Json config = Json::parse(model_config_json, nullptr, false);
  if (config.is_discarded()) config = Json::object();
  return Json{{"model_factory", model_factory},
              {"model_config", config},
              {"loss", loss},
              {"optimizer", OptimizerJson(optimizer)},
              {"lr_schedule", ScheduleJson(lr_schedule)},
              {"seed", seed},
              {"parallelize", parallelize},
              {"data_loader", data_loader},
              {"global_batch", global_batch},
              {"seq_len", seq_len},
              {"param_dtype", param_dtype},
              {"devices", devices}}
      .dump();
}

StatusOr<TrainingSpec> TrainingSpec::FromJson(const std::string& text) {
  const Json json = Json::parse(text, nullptr, false);
  if (json.is_discarded()) return InvalidArgumentError("spec is not JSON");
  TrainingSpec spec;
  CHORUS_RETURN_IF_ERROR(CheckKeys(json, Json::parse(spec.ToJson()), "spec."));
  const std::string at = "spec.";
  CHORUS_RETURN_IF_ERROR(Read(json, "model_factory", at, &spec.model_factory));
  if (json.contains("model_config")) spec.model_config_json = json["model_config"].dump();
  CHORUS_RETURN_IF_ERROR(Read(json, "loss", at, &spec.loss));
  CHORUS_RETURN_IF_ERROR(Read(json, "seed", at, &spec.seed));
  CHORUS_RETURN_IF_ERROR(Read(json, "parallelize", at, &spec.parallelize));
  CHORUS_RETURN_IF_ERROR(Read(json, "data_loader", at, &spec.data_loader));
  CHORUS_RETURN_IF_ERROR(Read(json, "global_batch", at, &spec.global_batch));
  CHORUS_RETURN_IF_ERROR(Read(json, "seq_len", at, &spec.seq_len));
  CHORUS_RETURN_IF_ERROR(Read(json, "param_dtype", at, &spec.param_dtype));
  CHORUS_RETURN_IF_ERROR(Read(json, "devices", at, &spec.devices));
  CHORUS_RETURN_IF_ERROR(ReadNested(
      json, "optimizer", OptimizerJson(spec.optimizer), [&](const Json& o, const std::string& w) {
        OptimizerSpec& opt = spec.optimizer;
        return AllOk({Read(o, "name", w, &opt.name), Read(o, "lr", w, &opt.lr),
                      Read(o, "beta1", w, &opt.beta1), Read(o, "beta2", w, &opt.beta2),
                      Read(o, "eps", w, &opt.eps), Read(o, "weight_decay", w, &opt.weight_decay)});
      }));
  CHORUS_RETURN_IF_ERROR(ReadNested(json, "lr_schedule", ScheduleJson(spec.lr_schedule),
                                    [&](const Json& s, const std::string& w) {
                                      LrScheduleSpec& schedule = spec.lr_schedule;
                                      return AllOk(
                                          {Read(s, "kind", w, &schedule.kind),
                                           Read(s, "warmup_steps", w, &schedule.warmup_steps),
                                           Read(s, "total_steps", w, &schedule.total_steps),
                                           Read(s, "min_lr_ratio", w, &schedule.min_lr_ratio)});
                                    }));
  return spec;
}

}  // namespace chorus
