#include "chorus/server/config/torchserve_manifest.h"

#include <gtest/gtest.h>
#include <zip.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace chorus {
namespace {

// TorchServe's frontend test archives (../shared/torchserve beside the
// checkout): real torch-model-archiver output of several versions.
const std::filesystem::path kArchives =
    std::filesystem::path(CHORUS_SOURCE_DIR) /
    "../shared/torchserve/serve/frontend/archive/src/test/resources/models";

// MAR-INF/MANIFEST.json of the .mar `name`, read with libzip.
std::string ManifestOfMar(const std::string& name) {
  int error = 0;
  std::unique_ptr<zip_t, decltype(&zip_discard)> archive(
      zip_open((kArchives / name).c_str(), ZIP_RDONLY, &error), &zip_discard);
  if (!archive) return "";
  zip_stat_t stat;
  if (zip_stat(archive.get(), "MAR-INF/MANIFEST.json", 0, &stat) != 0) return "";
  std::unique_ptr<zip_file_t, decltype(&zip_fclose)> file(
      zip_fopen(archive.get(), "MAR-INF/MANIFEST.json", 0), &zip_fclose);
  std::string text(stat.size, '\0');
  if (!file ||
      zip_fread(file.get(), text.data(), stat.size) != static_cast<zip_int64_t>(stat.size)) {
    return "";
  }
  return text;
}

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class TorchServeArchivesTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::is_directory(kArchives)) {
      GTEST_SKIP() << "TorchServe's test archives are not beside the checkout: " << kArchives;
    }
  }
};

TEST_F(TorchServeArchivesTest, ManifestsOfEveryArchiverVersionAreRead) {
  struct Expected {
    const char* mar;
    const char* name;
    const char* version;
    const char* module;
    const char* function;
  };
  const Expected expected[] = {
      {"noop.mar", "noop", "1.11", "service", ""},
      {"noop_v2.mar", "noop", "1.2.1", "service", ""},
      {"noop_entrypntfunc.mar", "noop_entrypntfunc", "1.0", "handler", "handle_request"},
      {"noop_handlername.mar", "noop_handlername", "1.0", "handler", ""},
      {"pred-custom-return-code.mar", "pred-custom-return-code", "1.0", "service", "handle"},
      {"echo.mar", "echo", "1.0", "handler", ""},
      {"init-error.mar", "init-error", "1.0", "invalid_service", ""},
  };
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.mar);
    std::string text = ManifestOfMar(e.mar);
    ASSERT_FALSE(text.empty());
    StatusOr<TorchServeManifest> manifest = ParseTorchServeManifest(text);
    ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
    EXPECT_EQ(manifest->model_name, e.name);
    EXPECT_EQ(manifest->model_version, e.version);
    EXPECT_EQ(manifest->runtime, "python");
    EXPECT_EQ(manifest->handler.module, e.module);
    EXPECT_EQ(manifest->handler.function, e.function);
  }
}

TEST_F(TorchServeArchivesTest, FilesTheManifestNamesAreKept) {
  StatusOr<TorchServeManifest> timeout =
      ParseTorchServeManifest(ManifestOfMar("echo-client-timeout.mar"));
  ASSERT_TRUE(timeout.ok()) << timeout.status().ToString();
  EXPECT_EQ(timeout->config_file, "model-config.yaml");
  EXPECT_EQ(timeout->model_file, "model.pt");
  EXPECT_EQ(timeout->serialized_file, "");
  StatusOr<TorchServeManifest> dep =
      ParseTorchServeManifest(ManifestOfMar("custom_python_dep.mar"));
  ASSERT_TRUE(dep.ok()) << dep.status().ToString();
  EXPECT_EQ(dep->requirements_file, "requirements.txt");
  EXPECT_EQ(dep->serialized_file, "model.pt");
  EXPECT_EQ(dep->handler_text, "handler.py");
}

TEST_F(TorchServeArchivesTest, AFolderWithoutAVersionIsVersionOnePointZero) {
  StatusOr<TorchServeManifest> manifest = ParseTorchServeManifest(
      ReadText(kArchives / "noop_no_archive_no_version/noop/MAR-INF/MANIFEST.json"));
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->model_name, "noop");
  EXPECT_EQ(manifest->model_version, "1.0");
}

TEST(TorchServeManifestTest, HandlerFormsNameAModuleAndAFunction) {
  struct Case {
    const char* text;
    const char* module;
    const char* function;
  };
  const Case cases[] = {
      {"handler.py", "handler", ""},
      {"handler", "handler", ""},
      {"handler:handle_request", "handler", "handle_request"},
      {"handler.py:fn", "handler", "fn"},
      {"src/handlers/custom.py:fn", "custom", "fn"},
      {"image_classifier", "image_classifier", ""},
      {"a.b:c", "a.b", "c"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    StatusOr<TorchServeHandler> handler = ParseTorchServeHandler(c.text);
    ASSERT_TRUE(handler.ok()) << handler.status().ToString();
    EXPECT_EQ(handler->module, c.module);
    EXPECT_EQ(handler->function, c.function);
  }
  for (const char* bad : {"", ":fn", "dir/", "handler:", ".py"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(ParseTorchServeHandler(bad).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(TorchServeManifestTest, BadManifestsAreRefusedNamingWhatIsWrong) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"{", "MANIFEST.json: not JSON"},
      {"[1]", "MANIFEST.json: not a JSON object"},
      {R"({"runtime": "python"})", "MANIFEST.json: model: missing"},
      {R"({"model": {"modelName": 3}})", "MANIFEST.json: model.modelName: must be a string"},
      {R"({"model": {"modelName": "-x"}})", "MANIFEST.json: model.modelName: '-x' is not"},
      {R"({"model": {"modelName": "a/b"}})", "MANIFEST.json: model.modelName: 'a/b' is not"},
      {R"({"model": {"modelVersion": ""}})", "MANIFEST.json: model.modelVersion: must not"},
      {R"({"model": {"handler": "x:"}})", "MANIFEST.json: model.handler: 'x:' names no function"},
      {R"({"runtime": "LSP", "model": {}})", "MANIFEST.json: runtime: 'LSP' is not served"},
      {R"({"runtime": 1, "model": {}})", "MANIFEST.json: runtime: must be a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    StatusOr<TorchServeManifest> manifest = ParseTorchServeManifest(c.text);
    ASSERT_FALSE(manifest.ok());
    EXPECT_EQ(manifest.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(manifest.status().message().rfind(c.message, 0), 0u) << manifest.status().message();
  }
}

TEST(TorchServeManifestTest, LegacyAndUnknownKeysAreIgnoredAndAbsentOnesDefault) {
  StatusOr<TorchServeManifest> manifest = ParseTorchServeManifest(R"({
      "modelServerVersion": "1.0", "implementationVersion": "1.0", "specificationVersion": "1.0",
      "createdOn": "20/10/2020 09:56:42", "archiverVersion": "0.2.0", "somethingNew": [1],
      "model": {"modelName": "m.v2_x-y", "handler": "h", "extensions": "x", "envelope": null}})");
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->model_name, "m.v2_x-y");
  EXPECT_EQ(manifest->model_version, "1.0");
  EXPECT_EQ(manifest->runtime, "python");
  EXPECT_EQ(manifest->envelope, "");
  StatusOr<TorchServeManifest> empty = ParseTorchServeManifest(R"({"model": {}})");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->model_name, "");    // the archive's file name gives it
  EXPECT_EQ(empty->handler_text, "");  // the server's default handler
  EXPECT_TRUE(IsTorchServeModelName("0abc"));
  EXPECT_FALSE(IsTorchServeModelName(""));
  EXPECT_FALSE(IsTorchServeModelName("_abc"));
  EXPECT_FALSE(IsTorchServeModelName("ab c"));
}

}  // namespace
}  // namespace chorus
