#include "chorus/training/job/training_spec.h"
#include "tests/support/python_testing.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace chorus {
namespace {

using testing::RunPinnedPythonCode;

// One spec, one set of defaults: the C++ struct's and the Python dataclass'.
TEST(TrainingSpecTest, CppAndPythonDefaultsAreTheSame) {
  int status = 0;
  const std::string python = RunPinnedPythonCode(
      "import json; from chorus.training.spec import JobSpec; "
      "print(json.dumps(JobSpec().to_dict()))",
      &status);
  ASSERT_EQ(status, 0) << python;
  EXPECT_EQ(nlohmann::json::parse(python), nlohmann::json::parse(TrainingSpec{}.ToJson()));
  EXPECT_EQ(TrainingSpec{}.optimizer.weight_decay, 0.1);
}

TEST(TrainingSpecTest, PythonReadsWhatCppWritesAndNamesUnknownKeys) {
  TrainingSpec spec;
  spec.model_factory = "model:build";
  spec.model_config_json = R"({"dim": 8})";
  spec.optimizer.weight_decay = 0.0;
  spec.lr_schedule.kind = "warmup_cosine";
  spec.devices = {"cpu", "cpu"};
  int status = 0;
  const std::string out = RunPinnedPythonCode(
      "import json, sys\n"
      "from chorus.training.spec import JobSpec\n"
      "print(json.dumps(JobSpec.from_dict(json.loads(sys.argv[1])).to_dict()))\n"
      "try:\n"
      "    JobSpec.from_dict({\"optimizer\": {\"wd\": 1}})\n"
      "except ValueError as e:\n"
      "    print(e)",
      &status, spec.ToJson());
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out.substr(0, out.find('\n'))),
            nlohmann::json::parse(spec.ToJson()));
  EXPECT_NE(out.find("spec.optimizer: unknown key 'wd'"), std::string::npos) << out;
}

TEST(TrainingSpecTest, JsonRoundTripsAndErrorsNameTheKey) {
  TrainingSpec spec;
  spec.model_factory = "model:build";
  spec.seed = 7;
  spec.optimizer.lr = 3e-3;
  spec.lr_schedule.total_steps = 50;
  spec.devices = {"cuda:0"};
  StatusOr<TrainingSpec> back = TrainingSpec::FromJson(spec.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), spec.ToJson());
  // Missing keys keep their defaults.
  StatusOr<TrainingSpec> partial = TrainingSpec::FromJson(R"({"model_factory": "m:f"})");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->lr_schedule.min_lr_ratio, 0.1);
  EXPECT_EQ(TrainingSpec::FromJson(R"({"optimiser": {}})").status().message(),
            "unknown key spec.optimiser");
  EXPECT_NE(TrainingSpec::FromJson(R"({"optimizer": {"lr": "fast"}})")
                .status()
                .message()
                .find("spec.optimizer.lr has the wrong type"),
            std::string::npos);
  EXPECT_FALSE(TrainingSpec::FromJson("not json").ok());
}

TEST(TrainingSpecTest, ValidateNamesTheFirstWrongField) {
  TrainingSpec spec;
  EXPECT_EQ(spec.Validate().message(), "spec.model_factory is required");
  spec.model_factory = "model:build";
  EXPECT_TRUE(spec.Validate().ok());
  spec.model_config_json = "[1]";
  EXPECT_EQ(spec.Validate().message(), "spec.model_config_json must be a JSON object");
  spec.model_config_json = "{}";
  spec.data_loader = "data:batches";
  EXPECT_EQ(spec.Validate().message(), "a data_loader needs global_batch and seq_len");
  spec.global_batch = 8;
  spec.seq_len = 32;
  spec.lr_schedule.kind = "step";
  EXPECT_EQ(spec.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(spec.Validate().message().find("spec.lr_schedule.kind"), std::string::npos);
}

}  // namespace
}  // namespace chorus
