// ModelConfigFromTriton: every field of Triton's config that chorus has a
// meaning for lands in ModelConfig, and every field it cannot honour fails the
// read with a message naming it. Configs are read as ReadTritonConfig reads
// them (parsed, normalized, mapped).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "chorus/common/status_matchers.h"
#include "chorus/server/config/triton_config.h"

namespace chorus {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

StatusOr<ModelConfig> Mapped(const std::string& text, const std::string& model_name = "m") {
  CHORUS_ASSIGN_OR_RETURN(inference::ModelConfig triton, ParseTritonConfig(text));
  NormalizeTritonConfig(model_name, &triton);
  return ModelConfigFromTriton(triton, model_name);
}

std::vector<std::string> Names(const std::vector<TensorSpec>& tensors) {
  std::vector<std::string> names;
  for (const TensorSpec& tensor : tensors) names.push_back(tensor.name);
  return names;
}

TEST(TritonConfigMappingTest, TensorsOfAPythonModel) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, Mapped(R"(
    name: "m" backend: "python" max_batch_size: 8 default_model_filename: "main.py"
    input [ { name: "IMAGE" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, -1, -1 ] },
            { name: "OPT" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] }
              optional: true },
            { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "LOGITS" data_type: TYPE_FP16 dims: [ 10 ] label_filename: "labels.txt" },
             { name: "FLAT" data_type: TYPE_INT64 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ])"));
  EXPECT_TRUE(config.python_backend);
  EXPECT_FALSE(config.format.has_value());
  EXPECT_EQ(config.default_model_filename, "main.py");
  EXPECT_EQ(config.max_batch_size, 8);
  EXPECT_EQ(config.dynamic_batching, false);  // Triton batches only when asked to
  ASSERT_EQ(config.inputs.size(), 3u);
  EXPECT_EQ(config.inputs[0].name, "IMAGE");
  EXPECT_EQ(config.inputs[0].dtype, "float32");
  EXPECT_THAT(config.inputs[0].shape, ElementsAre(3, -1, -1));
  EXPECT_FALSE(config.inputs[0].optional);
  EXPECT_TRUE(config.inputs[1].optional);
  EXPECT_EQ(config.inputs[2].dtype, "string");
  ASSERT_EQ(config.outputs.size(), 2u);
  EXPECT_EQ(config.outputs[0].dtype, "float16");
  EXPECT_THAT(config.outputs[0].shape, ElementsAre(10));
  EXPECT_EQ(config.outputs[1].dtype, "int64");
  // Annotations only where there is one (TEXT has none).
  ASSERT_EQ(config.tensors.size(), 4u);
  EXPECT_EQ(config.tensors.at("IMAGE").format, InputFormat::kNchw);
  EXPECT_THAT(*config.tensors.at("OPT").reshape, ElementsAre(4));
  EXPECT_EQ(config.tensors.at("LOGITS").label_filename, "labels.txt");
  EXPECT_THAT(*config.tensors.at("FLAT").reshape, ElementsAre(2, 2));
  ASSERT_NE(config.triton, nullptr);  // kept, normalized, for the ModelConfig call
  EXPECT_EQ(config.triton->name(), "m");
  EXPECT_EQ(config.triton->instance_group(0).name(), "m");
}

TEST(TritonConfigMappingTest, DynamicBatchingWithQueuePoliciesAndPriorities) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, Mapped(R"(
    backend: "python" max_batch_size: 8
    dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100
      priority_levels: 2 default_priority_level: 2
      default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000
                             allow_timeout_override: true max_queue_size: 3 }
      priority_queue_policy { key: 1 value { max_queue_size: 7 } } })"));
  EXPECT_EQ(config.dynamic_batching, true);
  EXPECT_EQ(config.max_queue_delay, std::chrono::microseconds(100));
  EXPECT_THAT(*config.preferred_batch_sizes, ElementsAre(4, 8));
  const PriorityOptions& priorities = config.priorities;
  EXPECT_EQ(priorities.levels, 2);
  EXPECT_EQ(priorities.default_level, 2);
  EXPECT_EQ(priorities.default_policy.timeout_action, QueuePolicy::TimeoutAction::kDelay);
  EXPECT_EQ(priorities.default_policy.default_timeout, std::chrono::microseconds(5000));
  EXPECT_TRUE(priorities.default_policy.allow_timeout_override);
  EXPECT_EQ(priorities.default_policy.max_queue_size, 3u);
  ASSERT_EQ(priorities.policies.size(), 1u);
  EXPECT_EQ(priorities.policies.at(1).max_queue_size, 7u);
  EXPECT_EQ(priorities.policies.at(1).timeout_action, QueuePolicy::TimeoutAction::kReject);
  // dynamic_batching {}: Triton's preferred size, the largest batch.
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(backend: "python" max_batch_size: 4
                                         dynamic_batching {})"));
  EXPECT_THAT(*config.preferred_batch_sizes, ElementsAre(4));
  EXPECT_EQ(config.priorities.levels, 0);
}

TEST(TritonConfigMappingTest, InstancesAndTheirDevices) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, Mapped(R"(
    backend: "python"
    instance_group [ { count: 2 kind: KIND_CPU }, { name: "gpu" kind: KIND_GPU gpus: [ 1, 2 ] },
                     { kind: KIND_MODEL } ])"));
  ASSERT_EQ(config.instance_groups.size(), 3u);
  EXPECT_EQ(config.instance_groups[0].name, "m_0");
  EXPECT_EQ(config.instance_groups[0].kind, InstanceGroup::Kind::kCpu);
  EXPECT_EQ(config.instance_groups[0].count, 2);
  EXPECT_EQ(config.instance_groups[1].name, "gpu");
  EXPECT_EQ(config.instance_groups[1].kind, InstanceGroup::Kind::kGpu);
  EXPECT_THAT(config.instance_groups[1].gpus, ElementsAre(1, 2));
  EXPECT_EQ(config.instance_groups[2].kind, InstanceGroup::Kind::kModel);
  EXPECT_EQ(config.instance_count(), 4);
  EXPECT_THAT(config.devices, ElementsAre("cuda:1", "cuda:2"));
  // No group: Triton's one instance on the CPU.
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(backend: "python")"));
  ASSERT_EQ(config.instance_groups.size(), 1u);
  EXPECT_EQ(config.instance_groups[0].name, "m");
  EXPECT_EQ(config.instance_groups[0].kind, InstanceGroup::Kind::kCpu);
  EXPECT_EQ(config.instance_count(), 1);
  EXPECT_TRUE(config.devices.empty());
  // A GPU group naming no GPU: Triton's every GPU; chorus takes the first.
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(platform: "pytorch_libtorch"
                                         instance_group { kind: KIND_GPU count: 2 })"));
  EXPECT_THAT(config.devices, ElementsAre("cuda:0"));
}

TEST(TritonConfigMappingTest, VersionPolicyParametersWarmupCacheAndDecoupled) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, Mapped(R"(
    backend: "python"
    input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] },
            { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
    version_policy { specific { versions: [ 1, 3 ] } }
    parameters { key: "k" value { string_value: "v" } }
    parameters { key: "n" value { string_value: "2" } }
    model_warmup [ { name: "w" batch_size: 2 count: 3
      inputs { key: "IMAGE" value { data_type: TYPE_FP32 dims: [ 3, 8, 8 ] random_data: true } }
      inputs { key: "TEXT" value { data_type: TYPE_STRING dims: [ 1 ]
                                   input_data_file: "text.bin" } } }, {} ]
    response_cache { enable: true }
    model_transaction_policy { decoupled: true })"));
  EXPECT_EQ(config.version_policy.kind, VersionPolicy::Kind::kSpecific);
  EXPECT_THAT(config.version_policy.versions, ElementsAre(1, 3));
  EXPECT_THAT(config.parameters, ElementsAre(std::pair<const std::string, std::string>("k", "v"),
                                             std::pair<const std::string, std::string>("n", "2")));
  ASSERT_EQ(config.warmup.size(), 2u);
  const WarmupSample& sample = config.warmup[0];
  EXPECT_EQ(sample.name, "w");
  EXPECT_EQ(sample.batch_size, 2);
  EXPECT_EQ(sample.count, 3);
  EXPECT_EQ(sample.inputs.at("IMAGE").kind, WarmupInput::kRandom);
  EXPECT_THAT(*sample.inputs.at("IMAGE").dims, ElementsAre(3, 8, 8));
  EXPECT_EQ(sample.inputs.at("TEXT").kind, WarmupInput::kFile);
  EXPECT_EQ(sample.inputs.at("TEXT").file, "text.bin");
  EXPECT_EQ(config.warmup[1].name, "sample 1");  // unnamed: named by its place
  EXPECT_EQ(config.warmup[1].batch_size, 1);
  EXPECT_EQ(config.warmup[1].count, 1);
  EXPECT_TRUE(config.response_cache);
  EXPECT_TRUE(config.decoupled);
  EXPECT_EQ(config.default_model_filename, "model.py");  // Triton's, for a Python model
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(backend: "python")"));
  EXPECT_EQ(config.version_policy.kind, VersionPolicy::Kind::kLatest);
  EXPECT_EQ(config.version_policy.latest, 1);
  EXPECT_FALSE(config.response_cache);
  EXPECT_FALSE(config.decoupled);
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(backend: "python"
                                         version_policy { latest { num_versions: 2 } })"));
  EXPECT_EQ(config.version_policy.latest, 2);
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(backend: "python" version_policy { all {} })"));
  EXPECT_EQ(config.version_policy.kind, VersionPolicy::Kind::kAll);
}

TEST(TritonConfigMappingTest, BackendAndPlatformSayTheModelsKind) {
  const std::pair<const char*, std::optional<ModelFormat>> kinds[] = {
      {R"(platform: "pytorch_libtorch")", ModelFormat::kTorchScript},
      {R"(backend: "pytorch")", ModelFormat::kTorchScript},
      {R"(backend: "pytorch" platform: "pytorch_libtorch")", ModelFormat::kTorchScript},
      {R"(platform: "pytorch_torch_export")", ModelFormat::kTorchExport},
      {R"(platform: "pytorch_aot_inductor")", ModelFormat::kAotInductor},
      {R"(backend: "chorus")", std::nullopt},
      {R"(platform: "pytorch_torch_package")", std::nullopt},
  };
  for (const auto& [text, format] : kinds) {
    ASSERT_OK_AND_ASSIGN(ModelConfig config, Mapped(text));
    EXPECT_EQ(config.format, format) << text;
    EXPECT_FALSE(config.python_backend) << text;
  }
}

TEST(TritonConfigMappingTest, TorchScriptTensorsTakeThePositionsTheirNamesSay) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, Mapped(R"(
    platform: "pytorch_libtorch"
    input [ { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 1 ] },
            { name: "INPUT__10" data_type: TYPE_FP32 dims: [ 1 ] },
            { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] },
            { name: "INPUT__2" data_type: TYPE_FP32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 1 ] },
             { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ])"));
  EXPECT_THAT(Names(config.inputs), ElementsAre("INPUT__0", "INPUT__1", "INPUT__2", "INPUT__10"));
  EXPECT_THAT(Names(config.outputs), ElementsAre("OUTPUT__0", "OUTPUT__1"));
  // Named tensors (or some named) keep the config's order, as a Python model's do.
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(
    backend: "pytorch"
    input [ { name: "b" data_type: TYPE_FP32 dims: [ 1 ] },
            { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ])"));
  EXPECT_THAT(Names(config.inputs), ElementsAre("b", "INPUT__0"));
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(
    backend: "python"
    input [ { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 1 ] },
            { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ])"));
  EXPECT_THAT(Names(config.inputs), ElementsAre("INPUT__1", "INPUT__0"));
}

TEST(TritonConfigMappingTest, SequenceControlsAndStatesJoinTheSignature) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, Mapped(R"(
    platform: "pytorch_libtorch" max_batch_size: 4
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    sequence_batching {
      max_sequence_idle_microseconds: 5000
      oldest { max_queue_delay_microseconds: 300 preferred_batch_size: [ 2 ] }
      control_input [
        { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
        { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
        { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY
                                    bool_false_true: [ false, true ] } ] },
        { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ]
      state [ { input_name: "h_in" output_name: "h_out" data_type: TYPE_FP32 dims: [ 8 ] } ]
    })"));
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const TensorSpec& t : config.inputs) inputs.emplace_back(t.name, t.dtype);
  EXPECT_THAT(inputs, ElementsAre(std::pair("INPUT__0", "float32"), std::pair("START", "int32"),
                                  std::pair("END", "float32"), std::pair("READY", "bool"),
                                  std::pair("CORRID", "uint64"), std::pair("h_in", "float32")));
  EXPECT_THAT(config.inputs[1].shape, ElementsAre(1));
  EXPECT_THAT(config.inputs[5].shape, ElementsAre(8));
  EXPECT_THAT(Names(config.outputs), ElementsAre("OUTPUT__0", "h_out"));
  ASSERT_TRUE(config.sequence_batching.has_value());
  const SequenceBatching& sequences = *config.sequence_batching;
  EXPECT_EQ(sequences.strategy, SequenceStrategy::kOldest);
  EXPECT_EQ(sequences.max_idle, std::chrono::microseconds(5000));
  EXPECT_THAT(sequences.controls,
              ElementsAre(std::pair("START", SequenceControl::kStart),
                          std::pair("END", SequenceControl::kEnd),
                          std::pair("READY", SequenceControl::kReady),
                          std::pair("CORRID", SequenceControl::kCorrelationId)));
  EXPECT_THAT(sequences.states, ElementsAre(std::pair("h_in", "h_out")));
  EXPECT_EQ(config.max_queue_delay, std::chrono::microseconds(300));
  EXPECT_THAT(*config.preferred_batch_sizes, ElementsAre(2));
  // Direct, Triton's default strategy, with the default idle time.
  ASSERT_OK_AND_ASSIGN(config, Mapped(R"(platform: "pytorch_libtorch" sequence_batching {})"));
  EXPECT_EQ(config.sequence_batching->strategy, SequenceStrategy::kDirect);
  EXPECT_EQ(config.sequence_batching->max_idle, std::chrono::microseconds(1000000));
}

TEST(TritonConfigMappingTest, EnsembleSteps) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, Mapped(R"(
    platform: "ensemble"
    input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
    ensemble_scheduling { step [
      { model_name: "pre" model_version: -1
        input_map { key: "x" value: "IN" } output_map { key: "y" value: "mid" } },
      { model_name: "net" model_version: 2
        input_map { key: "x" value: "mid" } output_map { key: "y" value: "OUT" } } ] })"));
  ASSERT_TRUE(config.ensemble.has_value());
  ASSERT_EQ(config.ensemble->size(), 2u);
  const EnsembleStep& pre = (*config.ensemble)[0];
  EXPECT_EQ(pre.model_name, "pre");
  EXPECT_EQ(pre.model_version, "");  // -1: the version serving
  EXPECT_EQ(pre.input_map.at("x"), "IN");
  EXPECT_EQ(pre.output_map.at("y"), "mid");
  EXPECT_EQ((*config.ensemble)[1].model_name, "net");
  EXPECT_EQ((*config.ensemble)[1].model_version, "2");
  EXPECT_EQ((*config.ensemble)[1].output_map.at("y"), "OUT");
  EXPECT_EQ(config.tensors.at("OUT").label_filename, "labels.txt");
  EXPECT_TRUE(config.instance_groups.empty());
  EXPECT_FALSE(config.python_backend);
}

// A tensor pair for the configs below.
constexpr char kTensors[] = R"(
  input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
  output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ] )";

// Each (config, field): the config is refused, the message naming the field
// and saying chorus cannot honour it.
void ExpectNotHonoured(const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [text, field] : cases) {
    EXPECT_THAT(Mapped(text).status(),
                StatusIs(StatusCode::kInvalidArgument,
                         StartsWith("config.pbtxt: " + field + ": chorus cannot honour it (")))
        << text;
  }
}

TEST(TritonConfigMappingTest, TensorInstanceAndParameterFieldsChorusCannotHonourAreNamed) {
  const std::string python = std::string("backend: \"python\" ") + kTensors;
  ExpectNotHonoured({
      {R"(backend: "python"
          input [ { name: "x" data_type: TYPE_INT64 dims: [ 1 ] is_shape_tensor: true } ])",
       "input[0].is_shape_tensor"},
      {R"(backend: "python"
          output [ { name: "y" data_type: TYPE_INT64 dims: [ 1 ] is_shape_tensor: true } ])",
       "output[0].is_shape_tensor"},
      {R"(backend: "python" input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] },
          { name: "z" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ])",
       "input[1].allow_ragged_batch"},
      {R"(backend: "python"
          input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] is_non_linear_format_io: true } ])",
       "input[0].is_non_linear_format_io"},
      {python + "instance_group [ { rate_limiter { priority: 1 } } ]",
       "instance_group[0].rate_limiter"},
      {python + "instance_group [ { kind: KIND_GPU secondary_devices [ { device_id: 0 } ] } ]",
       "instance_group[0].secondary_devices"},
      {python + "instance_group [ {}, { passive: true } ]", "instance_group[1].passive"},
      {python + "instance_group [ { host_policy: \"numa0\" } ]", "instance_group[0].host_policy"},
      {python + "instance_group [ { profile: [ \"0\" ] } ]", "instance_group[0].profile"},
      {python + R"(parameters { key: "EXECUTION_ENV_PATH"
                   value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } })",
       "parameters.EXECUTION_ENV_PATH"},
  });
}

TEST(TritonConfigMappingTest, OtherBackendsFieldsAndSequenceFeaturesChorusCannotHonourAreNamed) {
  const std::string python = std::string("backend: \"python\" ") + kTensors;
  const std::string torchscript = std::string("platform: \"pytorch_libtorch\" ") + kTensors;
  ExpectNotHonoured({
      {python + "optimization { cuda { graphs: true } }", "optimization.cuda"},
      {python + "optimization { graph { level: 1 } }", "optimization.graph"},
      {python + "optimization { execution_accelerators { cpu_execution_accelerator [ "
                "{ name: \"openvino\" } ] } }",
       "optimization.execution_accelerators"},
      {python + "optimization { priority: PRIORITY_MAX }", "optimization.priority"},
      {python + "optimization { eager_batching: true }", "optimization.eager_batching"},
      {python + "model_repository_agents { agents [ { name: \"checksum\" } ] }",
       "model_repository_agents"},
      {python + "batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: \"n\" "
                "data_type: TYPE_FP32 source_input: \"x\" } ]",
       "batch_input"},
      {python + "batch_output [ { target_name: \"y\" source_input: \"x\" } ]", "batch_output"},
      {python + "model_operations { op_library_filename: \"libop.so\" }", "model_operations"},
      {python + "cc_model_filenames { key: \"7.5\" value: \"m.pt\" }", "cc_model_filenames"},
      {python + "metric_tags { key: \"team\" value: \"a\" }", "metric_tags"},
      {python + "runtime: \"model.py\"", "runtime"},
      {python + "sequence_batching {}", "sequence_batching"},
      {torchscript + "sequence_batching { iterative_sequence: true }",
       "sequence_batching.iterative_sequence"},
      {torchscript + R"(sequence_batching { state [ { input_name: "s_in" output_name: "s_out"
          data_type: TYPE_FP32 dims: [ 1 ]
          initial_state [ { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "z" } ] } ] })",
       "sequence_batching.state[0].initial_state"},
      {torchscript + R"(sequence_batching { control_input [ { name: "S" control [
          { kind: CONTROL_SEQUENCE_START int32_false_true: [ 1, 0 ] } ] } ] })",
       "sequence_batching.control_input[0].control.int32_false_true"},
      {torchscript + R"(sequence_batching { control_input [ { name: "S" control [
          { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 2 ] } ] } ] })",
       "sequence_batching.control_input[0].control.fp32_false_true"},
      {torchscript + R"(sequence_batching { control_input [ { name: "S" control [
          { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] },
          { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] } ] })",
       "sequence_batching.control_input[0].control"},
      {torchscript + "sequence_batching { oldest { max_candidate_sequences: 4 } }",
       "sequence_batching.oldest.max_candidate_sequences"},
      {torchscript + "sequence_batching { oldest { preserve_ordering: true } }",
       "sequence_batching.oldest.preserve_ordering"},
      {torchscript + "sequence_batching { direct { minimum_slot_utilization: 0.5 } }",
       "sequence_batching.direct.minimum_slot_utilization"},
      {python + "max_batch_size: 4 instance_group [ { count: 2 } ] "
                "dynamic_batching { preserve_ordering: true }",
       "dynamic_batching.preserve_ordering"},
      {torchscript + "instance_group [ { kind: KIND_CPU }, { kind: KIND_GPU gpus: [ 0 ] } ]",
       "instance_group"},
  });
}

TEST(TritonConfigMappingTest, WrongKindsNamesAndValuesAreRefusedNamingThem) {
  const std::pair<std::string, std::string> cases[] = {
      {R"(backend: "onnxruntime")",
       "backend: \"onnxruntime\" is not served by chorus: it serves backend \"python\""},
      {R"(platform: "tensorrt_plan")", "platform: \"tensorrt_plan\" is not served by chorus"},
      {R"(backend: "python" platform: "pytorch_libtorch")", "backend: \"python\" is not served"},
      {R"(name: "other" backend: "python")",
       "name: unexpected directory name 'm' for model 'other', directory name must equal "
       "model name"},
      {R"(platform: "ensemble")", "ensemble_scheduling: is required for platform \"ensemble\""},
      {std::string(R"(platform: "ensemble" ensemble_scheduling {} )") + kTensors,
       "ensemble_scheduling.step: an ensemble needs its steps"},
      {R"(platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" } ] })",
       "input: an ensemble gives its inputs and outputs"},
      {R"(platform: "ensemble" backend: "python")", "backend: an ensemble has no backend"},
      {std::string(R"(platform: "ensemble" ensemble_scheduling { step [
          { model_name: "a" model_namespace: "ns" } ] } )") +
           kTensors,
       "ensemble_scheduling.step[0].model_namespace: chorus cannot honour it"},
      {R"(backend: "python" ensemble_scheduling { step [ { model_name: "a" } ] })",
       "ensemble_scheduling: given without platform: \"ensemble\""},
      {R"(backend: "python" max_batch_size: -1)", "max_batch_size: must be 0 or more"},
      {R"(backend: "python" input [ { name: "x" dims: [ 1 ] } ])",
       "input[0].data_type: a data_type is required"},
      {R"(backend: "python" output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ]
          label_filename: "../labels.txt" } ])",
       "output[0].label_filename: must be a file name in the model's folder"},
      {R"(backend: "python" default_model_filename: "1/model.py")",
       "default_model_filename: must be a file name, not a path"},
      {R"(backend: "python" version_policy { specific {} })",
       "version_policy.specific.versions: names no version"},
      {R"(backend: "python" max_batch_size: 4 dynamic_batching { priority_levels: 2 })",
       "dynamic_batching.default_priority_level: must be within 1 and priority_levels"},
      {R"(backend: "python" max_batch_size: 4 dynamic_batching {
          priority_queue_policy { key: 1 value {} } })",
       "dynamic_batching.priority_queue_policy: needs priority_levels"},
      {R"(backend: "python" max_batch_size: 4 dynamic_batching { priority_levels: 2
          default_priority_level: 1 priority_queue_policy { key: 3 value {} } })",
       "dynamic_batching.priority_queue_policy.3: is not a priority level"},
      {R"(backend: "python" model_warmup [ { inputs { key: "x" value {} } } ])",
       "model_warmup[0].inputs.x: needs one of zero_data, random_data and input_data_file"},
      {R"(backend: "python" model_warmup [ { inputs { key: "x"
          value { input_data_file: "../x.bin" } } } ])",
       "model_warmup[0].inputs.x.input_data_file: must be a file name"},
      {R"(platform: "pytorch_libtorch" sequence_batching { control_input [ { name: "S"
          control [ { kind: CONTROL_SEQUENCE_START } ] } ] })",
       "sequence_batching.control_input[0].control: needs its false and true values"},
  };
  for (const auto& [text, message] : cases) {
    EXPECT_THAT(Mapped(text).status(),
                StatusIs(StatusCode::kInvalidArgument, StartsWith("config.pbtxt: " + message)))
        << text;
  }
}

TEST(TritonConfigMappingTest, TuningThatChangesNothingIsAccepted) {
  // Pinned memory and the gather threshold only tune Triton's copies.
  EXPECT_OK(Mapped(R"(backend: "python" optimization { input_pinned_memory { enable: false }
                      gather_kernel_buffer_threshold: 4 })")
                .status());
  EXPECT_OK(Mapped(R"(backend: "python" parameters { key: "SOME_KEY" value {} })").status());
  // A Python model's instances may be on the CPU and on GPUs at once.
  EXPECT_OK(Mapped(R"(backend: "python"
                      instance_group [ { kind: KIND_CPU }, { kind: KIND_GPU gpus: [ 0 ] } ])")
                .status());
}

}  // namespace
}  // namespace chorus
