// What a training job trains and how: the one typed spec, with its defaults.
// (Its layout, dp x tp ranks on which interpreters, is TrainingJobOptions'.)
// chorus.training.spec.JobSpec (Python) mirrors it field for field, with the
// same defaults (training_spec_test checks both); the service fills it from
// its request, TrainingJob hands its JSON to chorus.training.trainer.
#ifndef CHORUS_TRAINING_JOB_TRAINING_SPEC_H_
#define CHORUS_TRAINING_JOB_TRAINING_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/common/status.h"

namespace chorus {

struct OptimizerSpec {
  std::string name = "adamw";  // the only one so far
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct LrScheduleSpec {
  std::string kind = "constant";  // or "warmup_cosine"
  int64_t warmup_steps = 0;
  int64_t total_steps = 1000;
  double min_lr_ratio = 0.1;  // warmup_cosine's floor, as a fraction of lr
};

struct TrainingSpec {
  std::string model_factory;             // "module:function" in the archive (required)
  std::string model_config_json = "{}";  // the factory's keyword arguments (a JSON object)
  std::string loss = "cross_entropy";    // or "mse"
  OptimizerSpec optimizer;
  LrScheduleSpec lr_schedule;
  int64_t seed = 0;
  std::string parallelize;  // "module:function" in the archive ("" = FSDP/TP by default)
  std::string data_loader;  // "module:function" in the archive ("" = batches are sent)
  int64_t global_batch = 0;
  int64_t seq_len = 0;
  std::string param_dtype;           // "" (fp32) or "bfloat16"
  std::vector<std::string> devices;  // per rank: "cpu" (default) or "cuda:N"

  // INVALID_ARGUMENT naming the first field that is wrong, else OK.
  Status Validate() const;
  // The JSON chorus.training.trainer reads (every field, defaults included).
  std::string ToJson() const;
  // Reads ToJson's output; fields it does not name keep their defaults.
  // INVALID_ARGUMENT naming an unknown key or a value of the wrong type.
  static StatusOr<TrainingSpec> FromJson(const std::string& json);
};

}  // namespace chorus

#endif  // CHORUS_TRAINING_JOB_TRAINING_SPEC_H_
