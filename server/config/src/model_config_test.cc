#include "chorus/server/config/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ModelConfigTest, ATritonStyleSignatureGetsTheBatchDimension) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ParseModelConfig(R"({
    "format": "torchscript",
    "max_batch_size": 8,
    "inputs": [{"name": "image", "datatype": "TYPE_FP32", "dims": [3, -1, -1]},
               {"name": "scale", "datatype": "float64", "dims": []}],
    "outputs": [{"name": "logits", "datatype": "FP32", "dims": [10]}],
    "max_queue_delay_us": 500
  })"));
  EXPECT_EQ(config.format, ModelFormat::kTorchScript);
  ASSERT_OK_AND_ASSIGN(Manifest manifest, SignatureManifest(config, "resnet", "3"));
  EXPECT_EQ(manifest.model_name, "resnet");
  EXPECT_TRUE(manifest.batching.batchable);
  EXPECT_EQ(manifest.batching.max_batch_size, 8);
  ASSERT_EQ(manifest.inputs.size(), 2u);
  EXPECT_EQ(manifest.inputs[0].dtype, "float32");
  EXPECT_THAT(manifest.inputs[0].shape, ElementsAre(-1, 3, -1, -1));
  EXPECT_EQ(manifest.inputs[1].dtype, "float64");
  EXPECT_THAT(manifest.inputs[1].shape, ElementsAre(-1));
  EXPECT_THAT(manifest.outputs[0].shape, ElementsAre(-1, 10));
  EXPECT_EQ(config.max_queue_delay->count(), 500);
}

TEST(ModelConfigTest, WithoutBatchingDimsAreTheWholeShape) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ParseModelConfig(R"({
    "entry_point": {"package": "model", "resource": "model.pkl"},
    "inputs": [{"name": "x", "datatype": "INT64", "dims": [1, 16]}]})"));
  ASSERT_TRUE(config.entry_point.has_value());
  EXPECT_EQ(config.entry_point->kind, "pickle");
  EXPECT_EQ(config.entry_point->resource, "model.pkl");
  ASSERT_OK_AND_ASSIGN(Manifest manifest, SignatureManifest(config, "m", "1"));
  EXPECT_FALSE(manifest.batching.batchable);
  EXPECT_THAT(manifest.inputs[0].shape, ElementsAre(1, 16));
  EXPECT_TRUE(manifest.outputs.empty());  // learned from a run
}

TEST(ModelConfigTest, EveryWrongKeyOrValueIsNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"max_batch_sise": 8})", "config.json: max_batch_sise: unknown key"},
      {R"({"max_batch_size": -1})", "config.json: max_batch_size: must be an integer >= 0"},
      {R"({"max_batch_size": "8"})", "config.json: max_batch_size"},
      {R"({"dynamic_batching": 1})", "config.json: dynamic_batching: must be true or false"},
      {R"({"format": "onnx"})", "config.json: format: unknown format \"onnx\""},
      {R"({"inputs": []})", "config.json: inputs: must be a non-empty list"},
      {R"({"inputs": [{"name": "x", "datatype": "FP33", "dims": [4]}]})",
       "config.json: inputs[0].datatype: unknown datatype \"FP33\""},
      {R"({"inputs": [{"name": "x", "datatype": "FP32"}]})", "config.json: inputs[0].dims"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "dims": [4, -2]}]})",
       "config.json: inputs[0].dims[1]: must be an integer >= -1"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "dims": [4], "shape": [4]}]})",
       "config.json: inputs[0].shape: unknown key"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "dims": []},
                      {"name": "x", "datatype": "FP32", "dims": []}]})",
       "config.json: inputs[1].name: \"x\" twice"},
      {R"({"outputs": [{"name": "y", "datatype": "FP32", "dims": []}]})",
       "config.json: outputs: given without inputs"},
      {R"({"entry_point": {"package": "model"}})", "config.json: entry_point.resource"},
      {R"({"entry_point": {"package": "m", "resource": "r", "module": "x"}})",
       "config.json: entry_point: either package and resource, or module and factory"},
      {R"({"default_model_filename": "../model.pt"})", "default_model_filename"},
      {R"({"preferred_batch_sizes": [4, 0]})", "config.json: preferred_batch_sizes[1]"},
      {R"([1, 2])", "config.json is not a JSON object"},
  };
  for (const auto& [json, message] : cases) {
    EXPECT_THAT(ParseModelConfig(json).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(message)))
        << json;
  }
}

TEST(ModelConfigTest, EveryWrongServingFeatureIsNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"tensors": [1]})", "config.json: tensors: must be an object"},
      {R"({"priority_levels": 2})",
       "config.json: default_priority_level: is required with priority_levels"},
      {R"({"priority_levels": 2, "default_priority_level": 3})",
       "config.json: default_priority_level: must be within 1 and priority_levels"},
      {R"({"default_priority_level": 1})", "config.json: default_priority_level: needs"},
      {R"({"priority_levels": 2, "default_priority_level": 1,
           "priority_queue_policy": {"3": {}}})",
       "config.json: priority_queue_policy.3: is not a priority level"},
      {R"({"queue_policy": {"timeout_action": "DROP"}})",
       "config.json: queue_policy.timeout_action: must be \"REJECT\" or \"DELAY\""},
      {R"({"model_warmup": [{"inputs": {"x": {}}}]})",
       "config.json: model_warmup[0].inputs.x: needs one of zero_data, random_data and "
       "input_data_file"},
      {R"({"model_warmup": [{"count": 0}]})",
       "config.json: model_warmup[0].count: must be an integer >= 1"},
      {R"({"model_warmup": [{"inputs": {"x": {"input_data_file": "../x.bin"}}}]})",
       "config.json: model_warmup[0].inputs.x.input_data_file: must be a file name"},
      {R"({"sequence_batching": {"strategy": "newest"}})",
       "config.json: sequence_batching.strategy: must be \"direct\" or \"oldest\""},
      {R"({"sequence_batching": {"control_inputs": [{"name": "S", "kind": "START"}]}})",
       "config.json: sequence_batching.control_inputs[0].kind: unknown kind \"START\""},
      {R"({"sequence_batching": {"state": [{"input_name": "s"}]}})",
       "config.json: sequence_batching.state[0].output_name: is required"},
      {R"({"sequence_batching": {"max_sequence_idle_microseconds": 0}})",
       "config.json: sequence_batching.max_sequence_idle_microseconds: must be an integer >= 1"},
      {R"({"tensors": {"x": {"format": "NCHW"}}})",
       "config.json: tensors.x.format: unknown format \"NCHW\" (FORMAT_NONE, FORMAT_NCHW"},
      {R"({"tensors": {"y": {"label_filename": "../labels.txt"}}})",
       "config.json: tensors.y.label_filename: must be a file name"},
      {R"({"tensors": {"y": {"labels": "l.txt"}}})", "config.json: tensors.y.labels: unknown key"},
      {R"({"generation": {"prefix_caching": "no"}})",
       "config.json: generation.prefix_caching: must be true or false"},
      {R"({"generation": {"prefix_cache": false}})",
       "config.json: generation.prefix_cache: unknown key"},
  };
  for (const auto& [json, message] : cases) {
    EXPECT_THAT(ParseModelConfig(json).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(message)))
        << json;
  }
}

TEST(ModelConfigTest, GenerationCachesPrefixesUnlessTurnedOff) {
  ASSERT_OK_AND_ASSIGN(ModelConfig on, ParseModelConfig(R"({"generation": {}})"));
  ASSERT_TRUE(on.generation.has_value());
  EXPECT_TRUE(on.generation->prefix_caching);
  EXPECT_TRUE(on.decoupled);
  ASSERT_OK_AND_ASSIGN(ModelConfig off,
                       ParseModelConfig(R"({"generation": {"prefix_caching": false}})"));
  EXPECT_FALSE(off.generation->prefix_caching);
}

TEST(ModelConfigTest, TensorsCarryTritonsInputFormatAndOutputLabels) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ParseModelConfig(R"({"tensors": {
    "image": {"format": "FORMAT_NHWC"}, "logits": {"label_filename": "labels.txt"}}})"));
  ASSERT_EQ(config.tensors.size(), 2u);
  EXPECT_EQ(config.tensors["image"].format, InputFormat::kNhwc);
  EXPECT_EQ(config.tensors["image"].label_filename, "");
  EXPECT_FALSE(config.tensors["logits"].format.has_value());
  EXPECT_EQ(config.tensors["logits"].label_filename, "labels.txt");
}

TEST(ModelConfigTest, SequenceBatchingNamesControlsAndStates) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ParseModelConfig(R"({"sequence_batching": {
    "strategy": "oldest", "max_sequence_idle_microseconds": 5000,
    "control_inputs": [{"name": "START", "kind": "CONTROL_SEQUENCE_START"},
                       {"name": "ID", "kind": "CONTROL_SEQUENCE_CORRID"}],
    "state": [{"input_name": "h_in", "output_name": "h_out"}]}})"));
  ASSERT_TRUE(config.sequence_batching.has_value());
  const SequenceBatching& sequences = *config.sequence_batching;
  EXPECT_EQ(sequences.strategy, SequenceStrategy::kOldest);
  EXPECT_EQ(sequences.max_idle.count(), 5000);
  ASSERT_EQ(sequences.controls.size(), 2u);
  EXPECT_EQ(sequences.controls[1].first, "ID");
  EXPECT_EQ(sequences.controls[1].second, SequenceControl::kCorrelationId);
  ASSERT_EQ(sequences.states.size(), 1u);
  EXPECT_EQ(sequences.states[0].second, "h_out");
  // Defaults: Triton's.
  ASSERT_OK_AND_ASSIGN(config, ParseModelConfig(R"({"sequence_batching": {}})"));
  EXPECT_EQ(config.sequence_batching->strategy, SequenceStrategy::kDirect);
  EXPECT_EQ(config.sequence_batching->max_idle.count(), 1000000);
}

TEST(ModelConfigTest, EveryWrongEnsembleKeyIsNamed) {
  const std::string signature =
      R"("inputs": [{"name": "x", "datatype": "FP32", "dims": [4]}],
         "outputs": [{"name": "y", "datatype": "FP32", "dims": [4]}])";
  const std::string step = R"({"model_name": "m", "input_map": {"x": "x"},
                               "output_map": {"y": "y"}})";
  const std::pair<std::string, const char*> cases[] = {
      {R"({"platform": "pytorch_libtorch"})", "config.json: platform: only \"ensemble\""},
      {R"({"platform": "ensemble"})", "config.json: ensemble_scheduling: is required"},
      {R"({"ensemble_scheduling": {"step": [)" + step + "]}}",
       "config.json: ensemble_scheduling: given without \"platform\": \"ensemble\""},
      {R"({"platform": "ensemble", "ensemble_scheduling": {"step": []}, )" + signature + "}",
       "config.json: ensemble_scheduling.step: must be a non-empty list"},
      {R"({"platform": "ensemble", "ensemble_scheduling": {"step": [)" + step + "]}}",
       "config.json: inputs: an ensemble gives its inputs and outputs"},
      {R"({"platform": "ensemble", "decoupled": true, "ensemble_scheduling": {"step": [)" + step +
           "]}, " + signature + "}",
       "config.json: decoupled: not for an ensemble"},
      {R"({"platform": "ensemble", "ensemble_scheduling": {"step": [{"model_name": "m",
           "model_version": "latest", "input_map": {"x": "x"}, "output_map": {"y": "y"}}]}, )" +
           signature + "}",
       "config.json: ensemble_scheduling.step[0].model_version: must be a version number"},
      {R"({"platform": "ensemble", "ensemble_scheduling": {"step": [{"model_name": "m",
           "input_map": {}, "output_map": {"y": "y"}}]}, )" +
           signature + "}",
       "config.json: ensemble_scheduling.step[0].input_map: must be a non-empty object"},
  };
  for (const auto& [json, message] : cases) {
    EXPECT_THAT(ParseModelConfig(json).status(),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr(message)))
        << json;
  }
  ASSERT_OK_AND_ASSIGN(
      ModelConfig config, ParseModelConfig(R"({"platform": "ensemble", "ensemble_scheduling":
                           {"step": [)" + step +
                                           "]}, " + signature + "}"));
  ASSERT_TRUE(config.ensemble.has_value());
  EXPECT_EQ(config.ensemble->front().model_name, "m");
  EXPECT_EQ(config.ensemble->front().model_version, "");
  EXPECT_EQ(config.ensemble->front().output_map.at("y"), "y");
}

TEST(ModelConfigTest, NoSignatureIsFailedPrecondition) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ParseModelConfig(R"({"max_batch_size": 4})"));
  EXPECT_THAT(SignatureManifest(config, "m", "1").status(),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("\"inputs\"")));
}

}  // namespace
}  // namespace chorus
