// Triton's config.pbtxt read as Triton reads it: parse errors with their
// place, Triton's normalization, and its JSON form byte for byte (the
// expected texts are what Triton 2.51 answered for the same configs). The
// mapping onto chorus' ModelConfig: triton_config_mapping_test.cc.
#include "chorus/server/config/triton_config.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"

namespace chorus {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The config `text` of the model in folder `model_name`, as ReadTritonConfig
// takes it: parsed and normalized.
inference::ModelConfig Normalized(const std::string& text, const std::string& model_name = "m") {
  StatusOr<inference::ModelConfig> config = ParseTritonConfig(text);
  EXPECT_OK(config.status()) << text;
  if (!config.ok()) return {};
  NormalizeTritonConfig(model_name, &*config);
  return *config;
}

// Triton's examples/models/add_sub/config.pbtxt, as it is.
constexpr char kAddSub[] = R"(
name: "add_sub"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
input [ { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [{ kind: KIND_CPU }]
)";

// What Triton 2.51 answered as add_sub's config (its GET .../config, and
// initialize's args["model_config"]).
constexpr char kAddSubJson[] =
    R"({"name":"add_sub","platform":"","backend":"python","runtime":"",)"
    R"("version_policy":{"latest":{"num_versions":1}},"max_batch_size":0,)"
    R"("input":[{"name":"INPUT0","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],)"
    R"("is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,)"
    R"("is_non_linear_format_io":false},)"
    R"({"name":"INPUT1","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[4],)"
    R"("is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,)"
    R"("is_non_linear_format_io":false}],)"
    R"("output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[4],"label_filename":"",)"
    R"("is_shape_tensor":false,"is_non_linear_format_io":false},)"
    R"({"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[4],"label_filename":"",)"
    R"("is_shape_tensor":false,"is_non_linear_format_io":false}],)"
    R"("batch_input":[],"batch_output":[],)"
    R"("optimization":{"priority":"PRIORITY_DEFAULT","input_pinned_memory":{"enable":true},)"
    R"("output_pinned_memory":{"enable":true},"gather_kernel_buffer_threshold":0,)"
    R"("eager_batching":false},)"
    R"("instance_group":[{"name":"add_sub_0","kind":"KIND_CPU","count":1,"gpus":[],)"
    R"("secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],)"
    R"("default_model_filename":"model.py","cc_model_filenames":{},"metric_tags":{},)"
    R"("parameters":{},"model_warmup":[]})";

// Lines and columns count from 1 and point where protobuf's parser stopped
// (after the unknown name or value), as Triton's log prints them.
TEST(TritonConfigTest, ParseErrorsNameLineAndColumn) {
  EXPECT_THAT(ParseTritonConfig("name: \"m\"\nmax_batch_size: 8\n  bogus_field: 1\n").status(),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(StartsWith("config.pbtxt:3:14: "), HasSubstr("bogus_field"))));
  EXPECT_THAT(
      ParseTritonConfig("input [\n  { name: \"x\" data_type: TYPE_FP33 dims: [ 1 ] }\n]").status(),
      StatusIs(StatusCode::kInvalidArgument,
               AllOf(StartsWith("config.pbtxt:2:36: "), HasSubstr("TYPE_FP33"))));
  EXPECT_THAT(ParseTritonConfig("max_batch_size: \"eight\"").status(),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("config.pbtxt:1:17: ")));
  EXPECT_THAT(ParseTritonConfig("input [ { name: \"x\" ").status(),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("config.pbtxt:1:")));
}

// Text format's octal escapes can spell bytes that are no UTF-8; such a
// config has no JSON form, so it is refused at parse time.
TEST(TritonConfigTest, StringsThatAreNotUtf8AreRefused) {
  EXPECT_THAT(ParseTritonConfig("name: \"m\\377\"").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not valid UTF-8")));
  EXPECT_TRUE(ParseTritonConfig("name: \"caf\\303\\251\"").ok());
}

TEST(TritonConfigTest, EnumNumbersThatNameNoValueAreRefused) {
  // Found by triton_config_fuzzer: text format takes any number for an open enum.
  EXPECT_THAT(ParseTritonConfig("input [ { name: \"x\" data_type: 32 dims: [ 4 ] } ]").status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("data_type is a number that names no value")));
  EXPECT_THAT(ParseTritonConfig("instance_group [ { kind: 9 } ]").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("kind is a number")));
  EXPECT_TRUE(ParseTritonConfig("input [ { name: \"x\" data_type: 11 dims: [ 4 ] } ]").ok());
}

TEST(TritonConfigTest, JsonWithAnEnumNumberThatNamesNoValueIsRefused) {
  // A load's config override and auto_complete_config's answer come as JSON.
  EXPECT_THAT(TritonConfigFromJson(R"({"input": [{"name": "x", "data_type": 32}]})").status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("data_type is a number that names no value")));
  EXPECT_TRUE(TritonConfigFromJson(R"({"input": [{"name": "x", "data_type": 11}]})").ok());
}

TEST(TritonConfigTest, NormalizationFillsInTritonsDefaults) {
  const inference::ModelConfig config = Normalized(R"(backend: "python")", "p_auto");
  EXPECT_EQ(config.name(), "p_auto");  // from the folder
  ASSERT_TRUE(config.version_policy().has_latest());
  EXPECT_EQ(config.version_policy().latest().num_versions(), 1u);
  EXPECT_EQ(config.default_model_filename(), "model.py");
  EXPECT_TRUE(config.optimization().input_pinned_memory().enable());
  EXPECT_TRUE(config.optimization().output_pinned_memory().enable());
  EXPECT_FALSE(config.has_dynamic_batching());  // never added
  EXPECT_FALSE(config.has_sequence_batching());
  // The implicit group: named after the model, one instance on the CPU.
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).name(), "p_auto");
  EXPECT_EQ(config.instance_group(0).count(), 1);
  EXPECT_EQ(config.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
}

TEST(TritonConfigTest, UnnamedGroupsAreNamedByTheirIndex) {
  const inference::ModelConfig config = Normalized(R"(
    backend: "python"
    instance_group [ { count: 2 kind: KIND_CPU }, { name: "mygroup" }, { gpus: [ 1 ] } ])",
                                                   "p_multi");
  ASSERT_EQ(config.instance_group_size(), 3);
  EXPECT_EQ(config.instance_group(0).name(), "p_multi_0");
  EXPECT_EQ(config.instance_group(0).count(), 2);
  EXPECT_EQ(config.instance_group(1).name(), "mygroup");
  EXPECT_EQ(config.instance_group(1).count(), 1);
  EXPECT_EQ(config.instance_group(1).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(config.instance_group(2).name(), "p_multi_2");
  EXPECT_EQ(config.instance_group(2).kind(), inference::ModelInstanceGroup::KIND_GPU);
}

TEST(TritonConfigTest, NormalizationKeepsWhatIsGiven) {
  inference::ModelConfig config = Normalized(R"(
    name: "m" platform: "pytorch_libtorch" default_model_filename: "net.pt"
    version_policy { latest {} } max_batch_size: 8
    dynamic_batching { preferred_batch_size: [ 2, 4 ] })");
  EXPECT_EQ(config.version_policy().latest().num_versions(), 1u);  // 0: Triton's 1
  EXPECT_EQ(config.default_model_filename(), "net.pt");
  EXPECT_THAT(config.dynamic_batching().preferred_batch_size(), ElementsAre(2, 4));
  config = Normalized(R"(platform: "pytorch_libtorch" version_policy { all {} })");
  EXPECT_TRUE(config.version_policy().has_all());
  EXPECT_EQ(config.default_model_filename(), "");  // only a Python model's is filled in
}

TEST(TritonConfigTest, BatchingDefaults) {
  inference::ModelConfig config = Normalized(R"(max_batch_size: 8 dynamic_batching {})");
  EXPECT_THAT(config.dynamic_batching().preferred_batch_size(), ElementsAre(8));
  config = Normalized(R"(max_batch_size: 0 dynamic_batching {})");
  EXPECT_THAT(config.dynamic_batching().preferred_batch_size(), ElementsAre());
  config = Normalized(R"(max_batch_size: 4 sequence_batching {})");
  EXPECT_EQ(config.sequence_batching().max_sequence_idle_microseconds(), 1000000u);
  config = Normalized(R"(sequence_batching { max_sequence_idle_microseconds: 5000000 })");
  EXPECT_EQ(config.sequence_batching().max_sequence_idle_microseconds(), 5000000u);
}

TEST(TritonConfigTest, AnEnsembleHasNoInstances) {
  const inference::ModelConfig config = Normalized(R"(platform: "ensemble")");
  EXPECT_EQ(config.instance_group_size(), 0);
  EXPECT_EQ(config.default_model_filename(), "");
}

TEST(TritonConfigTest, JsonIsTritonsByteForByte) {
  EXPECT_EQ(TritonConfigJson(Normalized(kAddSub, "add_sub")), kAddSubJson);
  // Only a backend: what Triton answers for a folder with no config at all.
  EXPECT_EQ(TritonConfigJson(Normalized(R"(backend: "python")", "p_auto")),
            R"({"name":"p_auto","platform":"","backend":"python","runtime":"",)"
            R"("version_policy":{"latest":{"num_versions":1}},"max_batch_size":0,"input":[],)"
            R"("output":[],"batch_input":[],"batch_output":[],"optimization":{)"
            R"("priority":"PRIORITY_DEFAULT","input_pinned_memory":{"enable":true},)"
            R"("output_pinned_memory":{"enable":true},"gather_kernel_buffer_threshold":0,)"
            R"("eager_batching":false},"instance_group":[{"name":"p_auto","kind":"KIND_CPU",)"
            R"("count":1,"gpus":[],"secondary_devices":[],"profile":[],"passive":false,)"
            R"("host_policy":""}],"default_model_filename":"model.py","cc_model_filenames":{},)"
            R"("metric_tags":{},"parameters":{},"model_warmup":[]})");
}

TEST(TritonConfigTest, JsonOfBatchingOptionalInputsAndParametersIsTritons) {
  EXPECT_EQ(TritonConfigJson(Normalized(R"(
    name: "p_full" backend: "python" max_batch_size: 8 dynamic_batching {}
    input [ { name: "CODE" data_type: TYPE_INT32 dims: [ 1 ] },
            { name: "OPT" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] }
              optional: true } ]
    output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
    parameters { key: "k" value: { string_value: "v" } }
    instance_group [ { count: 2, kind: KIND_CPU } ])",
                                        "p_full")),
            R"({"name":"p_full","platform":"","backend":"python","runtime":"",)"
            R"("version_policy":{"latest":{"num_versions":1}},"max_batch_size":8,)"
            R"("input":[{"name":"CODE","data_type":"TYPE_INT32","format":"FORMAT_NONE",)"
            R"("dims":[1],"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,)"
            R"("is_non_linear_format_io":false},{"name":"OPT","data_type":"TYPE_FP32",)"
            R"("format":"FORMAT_NONE","dims":[2,2],"reshape":{"shape":[4]},)"
            R"("is_shape_tensor":false,"allow_ragged_batch":false,"optional":true,)"
            R"("is_non_linear_format_io":false}],"output":[{"name":"OUT",)"
            R"("data_type":"TYPE_INT32","dims":[1],"label_filename":"","is_shape_tensor":false,)"
            R"("is_non_linear_format_io":false}],"batch_input":[],"batch_output":[],)"
            R"("optimization":{"priority":"PRIORITY_DEFAULT",)"
            R"("input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},)"
            R"("gather_kernel_buffer_threshold":0,"eager_batching":false},)"
            R"("dynamic_batching":{"preferred_batch_size":[8],"max_queue_delay_microseconds":0,)"
            R"("preserve_ordering":false,"priority_levels":0,"default_priority_level":0,)"
            R"("priority_queue_policy":{}},"instance_group":[{"name":"p_full_0",)"
            R"("kind":"KIND_CPU","count":2,"gpus":[],"secondary_devices":[],"profile":[],)"
            R"("passive":false,"host_policy":""}],"default_model_filename":"model.py",)"
            R"("cc_model_filenames":{},"metric_tags":{},"parameters":{"k":{"string_value":"v"}},)"
            R"("model_warmup":[]})");
}

TEST(TritonConfigTest, JsonOfQueuePoliciesSequencesAndDecoupledIsTritons) {
  EXPECT_THAT(TritonConfigJson(Normalized(R"(
    backend: "python" max_batch_size: 8
    dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100
      default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000
                             allow_timeout_override: true max_queue_size: 3 } })")),
              HasSubstr(R"("dynamic_batching":{"preferred_batch_size":[2,4],)"
                        R"("max_queue_delay_microseconds":100,"preserve_ordering":false,)"
                        R"("priority_levels":0,"default_priority_level":0,)"
                        R"("default_queue_policy":{"timeout_action":"DELAY",)"
                        R"("default_timeout_microseconds":5000,"allow_timeout_override":true,)"
                        R"("max_queue_size":3},"priority_queue_policy":{}},"instance_group")"));
  EXPECT_THAT(
      TritonConfigJson(Normalized(
          R"(backend: "python" sequence_batching { max_sequence_idle_microseconds: 5000000 })")),
      HasSubstr(R"("sequence_batching":{"max_sequence_idle_microseconds":5000000,)"
                R"("control_input":[],"state":[],"iterative_sequence":false})"));
  EXPECT_THAT(TritonConfigJson(
                  Normalized(R"(backend: "python" model_transaction_policy { decoupled: true })")),
              EndsWith(R"("model_warmup":[],"model_transaction_policy":{"decoupled":true}})"));
}

// A config using every field TritonConfigJson rewrites or keeps apart: 64-bit
// integers (also past a double's 53 bits), maps with integer keys, oneofs.
constexpr char kRich[] = R"(
  name: "m" backend: "python" max_batch_size: 8
  version_policy { specific { versions: [ 1, 9007199254740993 ] } }
  input [ { name: "x" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, -1, -1 ]
            reshape { shape: [ -1 ] } optional: true } ]
  output [ { name: "y" data_type: TYPE_BF16 dims: [ 10 ] label_filename: "labels.txt" } ]
  dynamic_batching { preferred_batch_size: [ 4, 8 ]
    max_queue_delay_microseconds: 18446744073709551615
    priority_levels: 2 default_priority_level: 1
    priority_queue_policy { key: 2 value { timeout_action: DELAY max_queue_size: 5
                                           default_timeout_microseconds: 9007199254740993 } } }
  instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
  parameters { key: "k" value { string_value: "v" } }
  model_warmup [ { name: "w" batch_size: 2 count: 3
    inputs { key: "x" value { data_type: TYPE_FP32 dims: [ 3, 8, 8 ] zero_data: true } } } ]
  response_cache { enable: true }
  model_transaction_policy { decoupled: true }
)";

TEST(TritonConfigTest, JsonRoundTrips) {
  for (const inference::ModelConfig& config :
       {Normalized(kRich), Normalized(kAddSub, "add_sub"), *ParseTritonConfig(kRich),
        inference::ModelConfig()}) {
    const std::string json = TritonConfigJson(config);
    ASSERT_OK_AND_ASSIGN(inference::ModelConfig back, TritonConfigFromJson(json));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back, config)) << json;
    EXPECT_EQ(TritonConfigJson(back), json);
  }
  const std::string json = TritonConfigJson(Normalized(kRich));
  EXPECT_THAT(json, HasSubstr(R"("versions":[1,9007199254740993])"));
  EXPECT_THAT(json, HasSubstr(R"("max_queue_delay_microseconds":18446744073709551615)"));
  EXPECT_THAT(json, HasSubstr(R"("priority_queue_policy":{"2":{"timeout_action":"DELAY",)"
                              R"("default_timeout_microseconds":9007199254740993,)"));
}

TEST(TritonConfigTest, JsonThatIsNoConfigIsRefused) {
  EXPECT_THAT(TritonConfigFromJson(R"({"name": "m", "bogus": 1})").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("bogus")));
  EXPECT_THAT(TritonConfigFromJson(R"({"max_batch_size": "eight"})").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_batch_size")));
  EXPECT_THAT(TritonConfigFromJson("{not json").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not a Triton ModelConfig")));
}

class ReadModelConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(root_, ScopedTempDir::Create("triton-config-test-"));
    model_dir_ = root_.path() + "/add_sub";
    ASSERT_OK(MakeDirectories(model_dir_));
  }
  void Write(const std::string& file, const std::string& text) {
    ASSERT_OK(WriteFileAtomically(model_dir_ + "/" + file, text));
  }
  ScopedTempDir root_;
  std::string model_dir_;
};

TEST_F(ReadModelConfigTest, ReadsConfigPbtxtNamedByItsFolder) {
  Write("config.pbtxt", kAddSub);
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ReadModelConfig(model_dir_));
  EXPECT_TRUE(config.python_backend);
  ASSERT_NE(config.triton, nullptr);
  EXPECT_EQ(TritonConfigJson(*config.triton), kAddSubJson);
}

TEST_F(ReadModelConfigTest, ErrorsNameTheFile) {
  Write("config.pbtxt", "backend: \"python\"\nbogus: 1\n");
  EXPECT_THAT(
      ReadModelConfig(model_dir_).status(),
      StatusIs(StatusCode::kInvalidArgument, StartsWith(model_dir_ + "/config.pbtxt:2:6: ")));
  Write("config.pbtxt", "name: \"other\" backend: \"python\"");
  EXPECT_THAT(ReadModelConfig(model_dir_).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       StartsWith(model_dir_ + "/config.pbtxt: name: unexpected directory name "
                                               "'add_sub' for model 'other'")));
}

TEST_F(ReadModelConfigTest, AFolderWithBothConfigsIsRefusedNamingBoth) {
  Write("config.pbtxt", kAddSub);
  Write("config.json", "{}");
  EXPECT_THAT(
      ReadModelConfig(model_dir_).status(),
      StatusIs(StatusCode::kInvalidArgument,
               AllOf(StartsWith(model_dir_), HasSubstr("config.json"), HasSubstr("config.pbtxt"))));
}

}  // namespace
}  // namespace chorus
