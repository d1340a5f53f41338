#include "server/process/src/torchserve_properties.h"

#include <gtest/gtest.h>

namespace chorus {
namespace {

// The config.properties of KServe's TorchServe runtime (inference and
// management on one address), with comments and both separators.
constexpr char kKServeProperties[] = R"(# KServe's
inference_address=http://0.0.0.0:8085
management_address = http://0.0.0.0:8085
metrics_address: http://0.0.0.0:8082
! another comment
enable_metrics_api=true
model_store=/mnt/models/model-store
load_models=mnist.mar, other=b.mar
number_of_netty_threads=4
disable_token_authorization=true
enable_model_api=true
)";

TEST(TorchServePropertiesTest, KServesRuntimeConfigMapsOntoTheServersOptions) {
  StatusOr<std::map<std::string, std::string>> properties = ParseProperties(kKServeProperties);
  ASSERT_TRUE(properties.ok()) << properties.status().ToString();
  EXPECT_EQ(properties->at("management_address"), "http://0.0.0.0:8085");
  ServerOptions options;
  StatusOr<std::vector<std::string>> ignored = ApplyTorchServeProperties(*properties, {}, &options);
  ASSERT_TRUE(ignored.ok()) << ignored.status().ToString();
  EXPECT_EQ(options.torchserve_inference_port, 8085);
  EXPECT_EQ(options.torchserve_management_port, 8085);
  EXPECT_EQ(options.torchserve_metrics_port, 8082);
  EXPECT_EQ(options.model_repository, "/mnt/models/model-store");
  EXPECT_EQ(options.torchserve_models, (std::vector<std::string>{"mnist.mar", "other=b.mar"}));
  EXPECT_TRUE(options.torchserve_model_api);
  EXPECT_EQ(*ignored, std::vector<std::string>{"number_of_netty_threads"});
}

TEST(TorchServePropertiesTest, TheCommandLineWinsOverTheFile) {
  ServerOptions options;
  options.model_repository = "/given";
  options.torchserve_inference_port = 9000;
  StatusOr<std::vector<std::string>> ignored =
      ApplyTorchServeProperties({{"model_store", "/file"},
                                 {"inference_address", "http://127.0.0.1:8080"},
                                 {"enable_metrics_api", "false"},
                                 {"disable_token_authorization", "false"}},
                                {"model-repository", "torchserve-inference-port"}, &options);
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ(options.model_repository, "/given");
  EXPECT_EQ(options.torchserve_inference_port, 9000);
  EXPECT_EQ(options.torchserve_metrics_port, -1);
  // Token authorization asked for: chorus' is --auth-token, so the key is named.
  EXPECT_EQ(*ignored, std::vector<std::string>{"disable_token_authorization"});
}

TEST(TorchServePropertiesTest, DefaultWorkersPerModelSetsTheWorkersOfModelsThatSetNone) {
  ServerOptions options;
  ASSERT_TRUE(ApplyTorchServeProperties({{"default_workers_per_model", "4"}}, {}, &options).ok());
  EXPECT_EQ(options.torchserve_defaults.min_workers, 4);
  options.torchserve_defaults.min_workers = 2;
  ASSERT_TRUE(ApplyTorchServeProperties({{"default_workers_per_model", "4"}},
                                        {"torchserve-default-workers"}, &options)
                  .ok());
  EXPECT_EQ(options.torchserve_defaults.min_workers, 2);
  for (const char* bad : {"four", "-1", "4x", "1000"}) {
    Status status =
        ApplyTorchServeProperties({{"default_workers_per_model", bad}}, {}, &options).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("default_workers_per_model"), std::string::npos) << bad;
  }
}

TEST(TorchServePropertiesTest, DefaultsApplyUnderEachModelsOwnSettings) {
  ServerOptions options;
  ASSERT_TRUE(ApplyTorchServeProperties(
                  {{"default_response_timeout", "300"},
                   {"default_workers_per_model", "3"},
                   {"models", R"({"a":{"1.0":{"batchSize":8}},"b":{"1.0":{"minWorkers":1,)"
                              R"("responseTimeout":5}}})"}},
                  {}, &options)
                  .ok());
  EXPECT_EQ(options.torchserve_defaults.response_timeout, std::chrono::seconds(300));
  const TorchServeModelSettings& a = options.torchserve_model_settings.at("a");
  EXPECT_EQ(a.batch_size, 8);
  EXPECT_EQ(a.min_workers, 3);
  EXPECT_EQ(a.response_timeout, std::chrono::seconds(300));
  const TorchServeModelSettings& b = options.torchserve_model_settings.at("b");
  EXPECT_EQ(b.min_workers, 1);
  EXPECT_EQ(b.response_timeout, std::chrono::seconds(5));
}

TEST(TorchServePropertiesTest, EnvironmentVariablesApplyOnlyWhereAskedFor) {
  const std::vector<std::string> environment = {"TS_DEFAULT_WORKERS_PER_MODEL=3",
                                                "TS_SERVICE_ENVELOPE=kservev2", "PATH=/bin",
                                                "TSX_NOT_OURS=1"};
  // Not asked for: the file as it is.
  EXPECT_EQ(WithEnvironment({{"default_workers_per_model", "1"}}, environment),
            (std::map<std::string, std::string>{{"default_workers_per_model", "1"}}));
  // Asked for in the file: the variables win over it, lowercased.
  std::map<std::string, std::string> applied = WithEnvironment(
      {{"default_workers_per_model", "1"}, {"enable_envvars_config", "true"}}, environment);
  EXPECT_EQ(applied.at("default_workers_per_model"), "3");
  EXPECT_EQ(applied.at("service_envelope"), "kservev2");
  EXPECT_EQ(applied.count("path") + applied.count("x_not_ours"), 0u);
  // Asked for by a variable.
  applied = WithEnvironment({}, {"TS_ENABLE_ENVVARS_CONFIG=true", "TS_MODEL_STORE=/store"});
  EXPECT_EQ(applied.at("model_store"), "/store");
  ServerOptions options;
  StatusOr<std::vector<std::string>> ignored = ApplyTorchServeProperties(applied, {}, &options);
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ(options.model_repository, "/store");
  EXPECT_TRUE(ignored->empty());
}

TEST(TorchServePropertiesTest, ModelSnapshotServesItsModelsWithTheirSettings) {
  // KServe's TorchServe runtime declares its models so, without load_models.
  const std::string snapshot =
      R"({"name":"startup.cfg","modelCount":2,"models":{)"
      R"("mnist":{"1.0":{"defaultVersion":true,"marName":"mnist.mar","minWorkers":2,)"
      R"("maxWorkers":5,"batchSize":4,"maxBatchDelay":50,"responseTimeout":30}},)"
      R"("two":{"1.0":{"marName":"old.mar","minWorkers":1},)"
      R"("2.0":{"defaultVersion":true,"marName":"two.mar","minWorkers":3}}}})";
  ServerOptions options;
  ASSERT_TRUE(ApplyTorchServeProperties({{"model_snapshot", snapshot}}, {}, &options).ok());
  EXPECT_EQ(options.torchserve_models,
            (std::vector<std::string>{"mnist=mnist.mar", "two=two.mar"}));
  const TorchServeModelSettings& mnist = options.torchserve_model_settings.at("mnist");
  EXPECT_EQ(mnist.min_workers, 2);
  EXPECT_EQ(mnist.max_workers, 5);
  EXPECT_EQ(mnist.batch_size, 4);
  EXPECT_EQ(mnist.max_batch_delay, std::chrono::milliseconds(50));
  EXPECT_EQ(mnist.response_timeout, std::chrono::seconds(30));
  EXPECT_EQ(options.torchserve_model_settings.at("two").min_workers, 3);  // the default version

  // models= gives settings only; load_models (or --models) says what is served.
  ServerOptions given;
  ASSERT_TRUE(
      ApplyTorchServeProperties({{"load_models", "a.mar"},
                                 {"model_snapshot", snapshot},
                                 {"models", R"({"a":{"1.0":{"batchSize":8,"maxBatchDelay":5}}})"}},
                                {}, &given)
          .ok());
  EXPECT_EQ(given.torchserve_models, std::vector<std::string>{"a.mar"});
  EXPECT_EQ(given.torchserve_model_settings.at("a").batch_size, 8);
  EXPECT_EQ(given.torchserve_model_settings.count("mnist"), 1u);

  for (const auto& [key, bad] : std::vector<std::pair<std::string, std::string>>{
           {"models", "not json"},
           {"models", R"({"m":{"1.0":{"minWorkers":"two"}}})"},
           {"models", R"({"m":{"1.0":{"batchSize":-1}}})"},
           {"models", R"({"m":[]})"},
           {"model_snapshot", R"({"models":{"m":{"1.0":{"minWorkers":1}}}})"}}) {
    ServerOptions refused;
    Status status = ApplyTorchServeProperties({{key, bad}}, {}, &refused).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find(key), std::string::npos) << status.ToString();
  }
}

TEST(TorchServePropertiesTest, AddressesGiveTheirPortsAndBadOnesAreNamed) {
  EXPECT_EQ(*PortOfAddress("http://127.0.0.1:8080"), 8080);
  EXPECT_EQ(*PortOfAddress("https://0.0.0.0:8443/"), 8443);
  EXPECT_EQ(*PortOfAddress("http://localhost"), 80);
  EXPECT_EQ(*PortOfAddress("https://[::1]"), 443);
  EXPECT_EQ(*PortOfAddress("http://[::1]:8081"), 8081);
  for (const char* bad :
       {"127.0.0.1:8080", "grpc://x:1", "http://x:0", "http://x:99999", "http://x:80a"}) {
    EXPECT_FALSE(PortOfAddress(bad).ok()) << bad;
  }
  ServerOptions options;
  StatusOr<std::vector<std::string>> applied =
      ApplyTorchServeProperties({{"metrics_address", "nonsense"}}, {}, &options);
  ASSERT_FALSE(applied.ok());
  EXPECT_NE(applied.status().message().find("metrics_address"), std::string::npos);
  EXPECT_FALSE(ParseProperties("=value\n").ok());
}

}  // namespace
}  // namespace chorus
