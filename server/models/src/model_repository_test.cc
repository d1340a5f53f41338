// ModelRepository on real archives and a real interpreter: which version of a
// model folder is served, reloads and unloads while other models serve,
// broken archives listed with their reason, config.json overrides of the
// batching, statistics, and names that would leave the repository.
#include "chorus/server/models/model_repository.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/file_util.h"
#include "chorus/common/status_matchers.h"
#include "tests/support/python_testing.h"

namespace chorus {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

// How long a test waits for an answer: only a lost request takes this long.
constexpr auto kPatience = std::chrono::seconds(60);

constexpr char kModelsSource[] = R"(
"""The model model_repository_test.cc packages into its repositories."""

import torch


class Scale(torch.nn.Module):
    """y = x * factor: the factor tells the test which archive answered."""

    def __init__(self, factor):
        super().__init__()
        self.factor = float(factor)

    def forward(self, x):
        return x * self.factor
)";

// This process's folder (ctest runs the tests of this file as processes of
// their own, possibly at the same time).
const std::string& WorkDir() {
  static const std::string* dir = new std::string(testing::ProcessWorkDir("repository"));
  return *dir;
}

std::string ArchiveDir() { return WorkDir() + "/archives"; }

// Scale(factor), packaged with chorus-package's create_package: batchable
// along dim 0 up to 32, input x float32 [-1, 4].
std::string ScaleArchive(int factor) {
  return ArchiveDir() + "/scale_" + std::to_string(factor) + ".pt";
}

std::string Corpus(const std::string& name) {
  return std::string(CHORUS_SOURCE_DIR) + "/tests/data/package_corpus/" + name;
}

// Runs `code` with the pinned Python and chorus' Python package; returns its
// exit status.
int RunPython(const std::string& code) {
  return testing::RunPinnedPython(code, WorkDir() + "/package.py");
}

at::Tensor X() { return at::arange(1, 5, at::dtype(at::kFloat)).reshape({1, 4}); }

// Submits `x` to `model`; the future holds the answer.
std::future<InferenceResult> Submit(LoadedModel& model, at::Tensor x) {
  auto answer = std::make_shared<std::promise<InferenceResult>>();
  std::future<InferenceResult> future = answer->get_future();
  InferenceRequest request;
  request.inputs.push_back(std::move(x));
  model.scheduler().Submit(std::move(request), [answer](InferenceResult result) {
    answer->set_value(std::move(result));
  });
  return future;
}

bool Answered(const std::future<InferenceResult>& future) {
  return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// The answer in `future`, or a failure status after kPatience.
InferenceResult Await(std::future<InferenceResult>& future) {
  if (future.wait_for(kPatience) != std::future_status::ready) {
    InferenceResult none;
    none.status = DeadlineExceededError("no answer");
    return none;
  }
  return future.get();
}

InferenceResult InferOnce(LoadedModel& model, at::Tensor x) {
  std::future<InferenceResult> future = Submit(model, std::move(x));
  return Await(future);
}

void ExpectScaled(const InferenceResult& result, const at::Tensor& x, int factor) {
  ASSERT_OK(result.status);
  ASSERT_EQ(result.outputs.size(), 1u);
  EXPECT_TRUE(at::equal(result.outputs[0].toTensor(), x * factor)) << result.outputs[0];
}

// Matches a repository index entry; each field a value or a string matcher.
template <typename Name, typename Version, typename State, typename Reason>
auto IsEntry(Name name, Version version, State state, Reason reason) {
  return AllOf(Field("name", &RepositoryEntry::name, name),
               Field("version", &RepositoryEntry::version, version),
               Field("state", &RepositoryEntry::state, state),
               Field("reason", &RepositoryEntry::reason, reason));
}

// Executions by batch size.
std::map<int64_t, uint64_t> ExecutionsByBatch(const ModelStatsSnapshot& stats) {
  std::map<int64_t, uint64_t> counts;
  for (const auto& [size, duration] : stats.batches) counts[size] = duration.count;
  return counts;
}

constexpr char kDraining[] = "the model is being unloaded or the server is draining";

class ModelRepositoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_OK(RemoveTree(WorkDir()));
    ASSERT_OK(MakeDirectories(ArchiveDir()));
    ASSERT_OK(WriteFileAtomically(ArchiveDir() + "/repository_test_models.py", kModelsSource));
    ASSERT_EQ(RunPython(R"(
import sys
sys.path.insert(0, ")" + ArchiveDir() +
                        R"(")
import torch
from chorus.package import create_package
from repository_test_models import Scale
for factor in (1, 2, 3, 10, 11, 99):
    create_package(f")" +
                        ArchiveDir() +
                        R"(/scale_{factor}.pt", Scale(factor), (torch.zeros(1, 4),),
                   name="scale", progress=False)
# A TorchScript archive loads without an interpreter, and has no manifest.
torch.jit.save(torch.jit.script(Scale(5)), ")" +
                        ArchiveDir() + R"(/torchscript.pt")
)"),
              0);
    ASSERT_OK_AND_ASSIGN(manager_, testing::OneInterpreter("test-cache/shared"));
    placement_ = new InterpreterPlacement(manager_);
  }

  static void TearDownTestSuite() {
    delete placement_;
    delete manager_;
    manager_ = nullptr;
    EXPECT_OK(RemoveTree(WorkDir()));
  }

  void SetUp() override {
    ASSERT_NE(manager_, nullptr) << "the suite's set-up failed";
    root_ = WorkDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
            "/repository";
    ASSERT_OK(MakeDirectories(root_));
  }

  // Puts a copy of `archive` at <root>/<model>/<version>/<file>.
  void AddVersion(const std::string& model, const std::string& version, const std::string& archive,
                  const std::string& file = "model.pt") {
    const std::string dir = root_ + "/" + model + "/" + version;
    ASSERT_OK(MakeDirectories(dir));
    ASSERT_OK(CopyFile(archive, dir + "/" + file));
  }

  void WriteConfig(const std::string& model, const std::string& json) {
    ASSERT_OK(WriteFileAtomically(root_ + "/" + model + "/config.json", json));
  }

  static RepositoryOptions OneWorker() {
    RepositoryOptions options;
    options.workers = 1;
    return options;
  }

  static InterpreterManager* manager_;
  static InterpreterPlacement* placement_;
  std::string root_;
};

InterpreterManager* ModelRepositoryTest::manager_ = nullptr;
InterpreterPlacement* ModelRepositoryTest::placement_ = nullptr;

TEST_F(ModelRepositoryTest, TheHighestNumberedVersionIsServed) {
  AddVersion("versioned", "1", ScaleArchive(1));
  AddVersion("versioned", "2", ScaleArchive(2));
  AddVersion("versioned", "10", ScaleArchive(10));
  // In a version folder the first .pt or .pt2 archive by name counts; other files do not.
  AddVersion("versioned", "10", ScaleArchive(99), "z.pt");
  ASSERT_OK(WriteFileAtomically(root_ + "/versioned/10/README", "notes"));
  // Folders that are not versions: a name, and a number past int64.
  AddVersion("versioned", "latest", ScaleArchive(99));
  AddVersion("versioned", "99999999999999999999", ScaleArchive(99));
  ModelRepository repository(root_, placement_, OneWorker());
  ASSERT_OK(repository.Load("versioned"));

  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> served, repository.Find("versioned", ""));
  EXPECT_EQ(served->name(), "versioned");
  EXPECT_EQ(served->version(), "10");  // numerically highest, not "2" nor "latest"
  ExpectScaled(InferOnce(*served, X()), X(), 10);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> by_version, repository.Find("versioned", "10"));
  EXPECT_EQ(by_version, served);
  // Only the highest version is loaded (the default version policy); Triton's texts.
  EXPECT_THAT(repository.Find("versioned", "2"),
              StatusIs(StatusCode::kNotFound,
                       "Request for unknown model: 'versioned' version 2 is not found"));
  EXPECT_THAT(repository.Index(), ElementsAre(IsEntry("versioned", "10", ModelState::kReady, "")));
}

TEST_F(ModelRepositoryTest, ReloadingServesANewVersionAndRetiresTheOld) {
  AddVersion("versioned", "1", ScaleArchive(1));
  ModelRepository repository(root_, placement_, OneWorker());
  ASSERT_OK(repository.Load("versioned"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> old, repository.Find("versioned", ""));
  EXPECT_EQ(old->version(), "1");
  ExpectScaled(InferOnce(*old, X()), X(), 1);

  AddVersion("versioned", "11", ScaleArchive(11));
  ASSERT_OK(repository.Load("versioned"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> current, repository.Find("versioned", ""));
  EXPECT_EQ(current->version(), "11");
  ExpectScaled(InferOnce(*current, X()), X(), 11);
  EXPECT_THAT(repository.Index(),
              ElementsAre(IsEntry("versioned", "1", ModelState::kUnavailable, "unloaded"),
                          IsEntry("versioned", "11", ModelState::kReady, "")));
  EXPECT_THAT(repository.Find("versioned", "1"),
              StatusIs(StatusCode::kUnavailable,
                       "Request for unknown model: 'versioned' version 1 is not at ready state: "
                       "unloaded"));
  // A request that still reaches the old version is refused, at once.
  std::future<InferenceResult> late = Submit(*old, X());
  ASSERT_TRUE(Answered(late));
  EXPECT_THAT(late.get().status, StatusIs(StatusCode::kUnavailable, kDraining));
}

TEST_F(ModelRepositoryTest, AQuarantineStopsAServingModelUntilAnExplicitLoad) {
  AddVersion("crashy", "1", ScaleArchive(1));
  ModelRepository repository(root_, placement_, OneWorker());
  ASSERT_OK(repository.Load("crashy"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> served, repository.Find("crashy", ""));
  repository.Quarantine("crashy", "is quarantined: it crashed a cell twice");
  EXPECT_THAT(repository.Find("crashy", ""),
              StatusIs(StatusCode::kUnavailable, HasSubstr("is quarantined: it crashed")));
  EXPECT_THAT(repository.Index(), ElementsAre(IsEntry("crashy", "", ModelState::kUnavailable,
                                                      "is quarantined: it crashed a cell twice")));
  // The repository's own loads leave it alone, a new version too.
  AddVersion("crashy", "2", ScaleArchive(2));
  repository.Poll();
  EXPECT_THAT(repository.Find("crashy", ""), StatusIs(StatusCode::kUnavailable));
  ASSERT_OK(repository.Load("crashy"));  // an explicit load re-admits it
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> again, repository.Find("crashy", ""));
  EXPECT_EQ(again->version(), "2");
  ExpectScaled(InferOnce(*again, X()), X(), 2);
}

TEST_F(ModelRepositoryTest, AFailedReloadKeepsTheServedVersion) {
  AddVersion("versioned", "2", ScaleArchive(2));
  ModelRepository repository(root_, placement_, OneWorker());
  ASSERT_OK(repository.Load("versioned"));

  AddVersion("versioned", "3", Corpus("truncated.pt"));
  EXPECT_THAT(repository.Load("versioned"),
              StatusIs(StatusCode::kInvalidArgument,
                       StartsWith("load failed for model 'versioned': version 3 is at UNAVAILABLE "
                                  "state: INVALID_ARGUMENT: truncated")));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> served, repository.Find("versioned", ""));
  EXPECT_EQ(served->version(), "2");
  ExpectScaled(InferOnce(*served, X()), X(), 2);
  EXPECT_THAT(repository.Index(), ElementsAre(IsEntry("versioned", "2", ModelState::kReady, ""),
                                              IsEntry("versioned", "3", ModelState::kUnavailable,
                                                      StartsWith("INVALID_ARGUMENT: truncated"))));

  // Only the highest version is tried: an empty folder above fails the reload.
  ASSERT_OK(MakeDirectories(root_ + "/versioned/4"));
  EXPECT_THAT(repository.Load("versioned"),
              StatusIs(StatusCode::kNotFound,  // clients see paths within the repository
                       "load failed for model 'versioned': version 4 is at UNAVAILABLE state: "
                       "NOT_FOUND: versioned/4 has no .pt or .pt2 file (or set "
                       "default_model_filename)"));
  ASSERT_OK_AND_ASSIGN(served, repository.Find("versioned", ""));
  EXPECT_EQ(served->version(), "2");
  EXPECT_THAT(repository.Index()[0], IsEntry("versioned", "2", ModelState::kReady, ""));
}

TEST_F(ModelRepositoryTest, LoadAllServesTheGoodModelsAndListsWhyTheOthersAreNot) {
  AddVersion("good", "1", ScaleArchive(3));
  AddVersion("broken", "1", Corpus("truncated.pt"));
  AddVersion("stock", "1", Corpus("no_manifest.pt"));  // stock torch.package, no manifest
  AddVersion("torchscript", "1", ArchiveDir() + "/torchscript.pt");
  ASSERT_OK(MakeDirectories(root_ + "/empty/latest"));
  // Neither a hidden folder nor a file is a model.
  AddVersion(".hidden", "1", ScaleArchive(1));
  ASSERT_OK(WriteFileAtomically(root_ + "/README.md", "models"));
  ModelRepository repository(root_, placement_, OneWorker());
  EXPECT_THAT(repository.Index(),
              ElementsAre(IsEntry("broken", "", ModelState::kUnavailable, "unloaded"),
                          IsEntry("empty", "", ModelState::kUnavailable, "unloaded"),
                          IsEntry("good", "", ModelState::kUnavailable, "unloaded"),
                          IsEntry("stock", "", ModelState::kUnavailable, "unloaded"),
                          IsEntry("torchscript", "", ModelState::kUnavailable, "unloaded")));

  ASSERT_OK(repository.LoadAll());
  EXPECT_THAT(
      repository.Index(),
      ElementsAre(
          IsEntry("broken", "1", ModelState::kUnavailable,
                  AllOf(StartsWith("INVALID_ARGUMENT: truncated"), HasSubstr(" broken/1/model.pt"),
                        Not(HasSubstr(root_)))),
          IsEntry("empty", "", ModelState::kUnavailable,
                  "NOT_FOUND: at least one version must be available under the version policy "
                  "of model 'empty': the model has no numbered version folder"),
          IsEntry("good", "1", ModelState::kReady, ""),
          IsEntry("stock", "1", ModelState::kUnavailable,
                  AllOf(StartsWith("FAILED_PRECONDITION: stock/1/model.pt"),
                        HasSubstr("is a torch.package archive without a chorus manifest: give "
                                  "its entry point and signature in stock/config.json"))),
          IsEntry("torchscript", "1", ModelState::kUnavailable,
                  StartsWith("FAILED_PRECONDITION: torchscript/1/model.pt is a TorchScript file "
                             "that carries no signature: give it in torchscript/config.json"))));

  const std::vector<std::shared_ptr<LoadedModel>> loaded = repository.Loaded();
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0]->name(), "good");
  ExpectScaled(InferOnce(*loaded[0], X()), X(), 3);
  // In the repository but not serving: UNAVAILABLE with why; Triton's text first.
  EXPECT_THAT(repository.Find("broken", ""),
              StatusIs(StatusCode::kUnavailable,
                       StartsWith("Request for unknown model: 'broken' has no available versions: "
                                  "it failed to load: INVALID_ARGUMENT: truncated")));
  EXPECT_THAT(repository.Find("broken", "1"),
              StatusIs(StatusCode::kUnavailable,
                       StartsWith("Request for unknown model: 'broken' version 1 is not at ready "
                                  "state: INVALID_ARGUMENT: truncated")));
  EXPECT_THAT(
      repository.Find("no_such_model", ""),
      StatusIs(StatusCode::kNotFound, "Request for unknown model: 'no_such_model' is not found"));
  EXPECT_THAT(repository.Find(".hidden", ""), StatusIs(StatusCode::kNotFound));
}

TEST_F(ModelRepositoryTest, LoadAllNeedsTheRepositoryFolder) {
  const std::string missing = root_ + "/missing";
  ModelRepository repository(missing, placement_, OneWorker());
  EXPECT_THAT(repository.LoadAll(), StatusIs(StatusCode::kNotFound, "model repository " + missing +
                                                                        " is not a directory"));
  EXPECT_THAT(repository.Index(), IsEmpty());

  const std::string file = root_ + "/file";
  ASSERT_OK(WriteFileAtomically(file, "not a folder"));
  ModelRepository on_a_file(file, placement_, OneWorker());
  EXPECT_THAT(on_a_file.LoadAll(),
              StatusIs(StatusCode::kNotFound, "model repository " + file + " is not a directory"));
}

TEST_F(ModelRepositoryTest, NamesThatWouldLeaveTheRepositoryAreInvalidArgument) {
  // A servable model beside the root: "../outside" would reach it.
  ASSERT_OK(MakeDirectories(root_ + "/../outside/1"));
  ASSERT_OK(CopyFile(ScaleArchive(1), root_ + "/../outside/1/model.pt"));
  AddVersion("good", "1", ScaleArchive(2));
  ModelRepository repository(root_, placement_, OneWorker());
  for (const char* name :
       {"", ".", "..", "../outside", "good/../../outside", "/tmp", ".hidden", "good/1"}) {
    SCOPED_TRACE(std::string("name \"") + name + "\"");
    const std::string refusal = std::string("bad model name \"") + name + "\"";
    EXPECT_THAT(CheckModelName(name), StatusIs(StatusCode::kInvalidArgument, refusal));
    EXPECT_THAT(repository.Load(name), StatusIs(StatusCode::kInvalidArgument, refusal));
  }
  EXPECT_THAT(repository.Loaded(), IsEmpty());
  EXPECT_THAT(repository.Index(),
              ElementsAre(IsEntry("good", "", ModelState::kUnavailable, "unloaded")));
  // Dots inside a name keep it in the root.
  EXPECT_OK(CheckModelName("good"));
  EXPECT_OK(CheckModelName("resnet-50.v2"));
  EXPECT_OK(CheckModelName("a..b"));
  ASSERT_OK(repository.Load("good"));
  EXPECT_THAT(repository.Index(), ElementsAre(IsEntry("good", "1", ModelState::kReady, "")));
}

TEST_F(ModelRepositoryTest, PublishWritesAWholeVersionThenServesIt) {
  AddVersion("published", "3", ScaleArchive(2));
  ModelRepository repository(root_, placement_, OneWorker());
  auto copy_of = [](int factor) {
    return
        [factor](const std::string& path, int64_t) { return CopyFile(ScaleArchive(factor), path); };
  };
  ASSERT_OK_AND_ASSIGN(PublishedVersion next, repository.Publish("published", 0, copy_of(3)));
  EXPECT_EQ(next.version, 4);
  EXPECT_EQ(next.path, root_ + "/published/4/model.pt");
  EXPECT_THAT(repository.Index(), ElementsAre(IsEntry("published", "4", ModelState::kReady, "")));
  // An existing version is replaced whole; a writer that fails leaves nothing.
  ASSERT_OK(repository.Publish("published", 4, copy_of(10)).status());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> model, repository.Find("published", "4"));
  ExpectScaled(InferOnce(*model, X()), X(), 10);
  EXPECT_THAT(
      repository
          .Publish("published", 0,
                   [](const std::string&, int64_t) { return InternalError("the job failed"); })
          .status(),
      StatusIs(StatusCode::kInternal, "the job failed"));
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(root_ + "/published")) {
    left.push_back(entry.path().filename());
  }
  std::sort(left.begin(), left.end());
  EXPECT_THAT(left, ElementsAre("3", "4"));
}

TEST_F(ModelRepositoryTest, UnloadAnswersQueuedRequestsThenStopsServing) {
  AddVersion("scale", "1", ScaleArchive(3));
  AddVersion("other", "1", ScaleArchive(2));
  ModelRepository repository(root_, placement_, OneWorker());
  ASSERT_OK(repository.LoadAll());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> model, repository.Find("scale", ""));
  std::vector<at::Tensor> inputs;
  std::vector<std::future<InferenceResult>> answers;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(X() + i);
    answers.push_back(Submit(*model, inputs[i]));
  }
  ASSERT_OK(repository.Unload("scale"));
  // Unload returns after the drain: every request it had accepted is answered.
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(Answered(answers[i]));
    ExpectScaled(answers[i].get(), inputs[i], 3);
  }
  EXPECT_THAT(repository.Find("scale", ""),
              StatusIs(StatusCode::kNotFound,
                       "Request for unknown model: 'scale' has no available versions"));
  EXPECT_THAT(repository.Index(),
              ElementsAre(IsEntry("other", "1", ModelState::kReady, ""),
                          IsEntry("scale", "1", ModelState::kUnavailable, "unloaded")));
  EXPECT_THAT(repository.Unload("scale"),
              StatusIs(StatusCode::kNotFound, "model scale is not loaded"));
  std::future<InferenceResult> late = Submit(*model, X());
  ASSERT_TRUE(Answered(late));
  EXPECT_THAT(late.get().status, StatusIs(StatusCode::kUnavailable, kDraining));

  // The other model served throughout; the unloaded one loads again.
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> other, repository.Find("other", ""));
  ExpectScaled(InferOnce(*other, X()), X(), 2);
  ASSERT_OK(repository.Load("scale"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> again, repository.Find("scale", ""));
  EXPECT_NE(again, model);
  ExpectScaled(InferOnce(*again, X()), X(), 3);
}

TEST_F(ModelRepositoryTest, ConfigJsonOverridesTheManifestsBatching) {
  // Each archive's manifest says: batchable, up to 32.
  AddVersion("preferred", "1", ScaleArchive(1));
  WriteConfig("preferred",
              R"({"max_batch_size": 4, "max_queue_delay_us": 10000000,
                  "preferred_batch_sizes": [3]})");
  AddVersion("unbatched", "1", ScaleArchive(1));
  WriteConfig("unbatched", R"({"dynamic_batching": false})");
  AddVersion("no_queue", "1", ScaleArchive(1));
  WriteConfig("no_queue", R"({"max_queue": 0})");
  ModelRepository repository(root_, placement_, OneWorker());
  ASSERT_OK(repository.LoadAll());
  EXPECT_THAT(repository.Index(), ElementsAre(IsEntry("no_queue", "1", ModelState::kReady, ""),
                                              IsEntry("preferred", "1", ModelState::kReady, ""),
                                              IsEntry("unbatched", "1", ModelState::kReady, "")));

  // Three requests together stop at the preferred 3, well before the delay.
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> preferred, repository.Find("preferred", ""));
  std::vector<std::future<InferenceResult>> answers;
  for (int i = 0; i < 3; ++i) answers.push_back(Submit(*preferred, X()));
  for (auto& answer : answers) {
    const InferenceResult result = Await(answer);
    ExpectScaled(result, X(), 1);
    EXPECT_EQ(result.batch_size, 3);
  }
  ModelStatsSnapshot stats = preferred->Snapshot();
  EXPECT_EQ(stats.execution_count, 1u);
  EXPECT_EQ(stats.inference_count, 3u);
  EXPECT_THAT(ExecutionsByBatch(stats), ElementsAre(Pair(3, 1u)));

  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> unbatched, repository.Find("unbatched", ""));
  answers.clear();
  for (int i = 0; i < 3; ++i) answers.push_back(Submit(*unbatched, X()));
  for (auto& answer : answers) {
    const InferenceResult result = Await(answer);
    ExpectScaled(result, X(), 1);
    EXPECT_EQ(result.batch_size, 1);
  }
  stats = unbatched->Snapshot();
  EXPECT_EQ(stats.execution_count, 3u);
  EXPECT_THAT(ExecutionsByBatch(stats), ElementsAre(Pair(1, 3u)));

  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> no_queue, repository.Find("no_queue", ""));
  std::future<InferenceResult> refused = Submit(*no_queue, X());
  ASSERT_TRUE(Answered(refused));
  EXPECT_THAT(
      refused.get().status,
      StatusIs(StatusCode::kUnavailable, "the model's queue is full (0 requests); retry later"));
}

TEST_F(ModelRepositoryTest, AConfigJsonThatCannotBeReadKeepsTheModelUnavailable) {
  AddVersion("garbled", "1", ScaleArchive(1));
  WriteConfig("garbled", "{not json");
  AddVersion("listed", "1", ScaleArchive(1));
  WriteConfig("listed", "[1, 2]");
  AddVersion("mistyped", "1", ScaleArchive(1));
  WriteConfig("mistyped", R"({"max_batch_size": "four"})");
  ModelRepository repository(root_, placement_, OneWorker());
  // (Paths within the repository: clients see no server paths.)
  const std::string garbled = "garbled/config.json is not a JSON object";
  const std::string listed = "listed/config.json is not a JSON object";
  const std::string mistyped = "mistyped/config.json: ";
  const std::string poll = "', failed to poll from model repository: ";  // Triton's, first
  EXPECT_THAT(repository.Load("garbled"),
              StatusIs(StatusCode::kInvalidArgument, "failed to load 'garbled" + poll + garbled));
  EXPECT_THAT(repository.Load("listed"),
              StatusIs(StatusCode::kInvalidArgument, "failed to load 'listed" + poll + listed));
  EXPECT_THAT(repository.Load("mistyped"), StatusIs(StatusCode::kInvalidArgument,
                                                    StartsWith("failed to load 'mistyped" + poll)));
  EXPECT_THAT(repository.Load("nowhere"),
              StatusIs(StatusCode::kNotFound, StartsWith("failed to load 'nowhere" + poll)));
  EXPECT_THAT(repository.Loaded(), IsEmpty());
  EXPECT_THAT(
      repository.Index(),
      ElementsAre(IsEntry("garbled", "", ModelState::kUnavailable, "INVALID_ARGUMENT: " + garbled),
                  IsEntry("listed", "", ModelState::kUnavailable, "INVALID_ARGUMENT: " + listed),
                  IsEntry("mistyped", "", ModelState::kUnavailable,
                          StartsWith("INVALID_ARGUMENT: " + mistyped))));
}

TEST_F(ModelRepositoryTest, StatisticsCountRequestsExecutionsAndBatches) {
  AddVersion("scale", "1", ScaleArchive(3));
  WriteConfig("scale", R"({"max_batch_size": 2, "max_queue_delay_us": 10000000})");
  ModelRepository repository(root_, placement_, OneWorker());
  ASSERT_OK(repository.Load("scale"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<LoadedModel> model, repository.Find("scale", ""));

  // Four requests: two full batches of 2.
  std::vector<std::future<InferenceResult>> answers;
  for (int i = 0; i < 4; ++i) answers.push_back(Submit(*model, X()));
  std::chrono::nanoseconds queued{0};
  for (auto& answer : answers) {
    const InferenceResult result = Await(answer);
    ExpectScaled(result, X(), 3);
    EXPECT_EQ(result.batch_size, 2);
    queued += result.queue_time;
    model->RecordRequest(result, std::chrono::milliseconds(5));
  }
  InferenceResult failed;
  failed.status = UnavailableError("refused");
  failed.queue_time = std::chrono::milliseconds(2);
  model->RecordRequest(failed, std::chrono::milliseconds(1));

  const ModelStatsSnapshot stats = model->Snapshot();
  EXPECT_EQ(stats.execution_count, 2u);
  EXPECT_EQ(stats.inference_count, 4u);
  EXPECT_THAT(ExecutionsByBatch(stats), ElementsAre(Pair(2, 2u)));
  EXPECT_EQ(stats.compute_infer.count, 2u);
  EXPECT_EQ(stats.compute_infer.ns, stats.batches.at(2).ns);
  EXPECT_GT(stats.compute_infer.ns, 0u);
  EXPECT_EQ(stats.success.count, 4u);
  EXPECT_EQ(stats.success.ns, 4u * 5'000'000u);
  EXPECT_EQ(stats.fail.count, 1u);
  EXPECT_EQ(stats.fail.ns, 1'000'000u);
  EXPECT_EQ(stats.queue.count, 5u);
  EXPECT_EQ(stats.queue.ns, static_cast<uint64_t>((queued + std::chrono::milliseconds(2)).count()));
  EXPECT_GT(stats.last_inference_ms, 0u);

  // Shutdown: DrainAll leaves nothing pending and stops accepting.
  repository.DrainAll(Clock::now() + kPatience);
  EXPECT_EQ(model->Snapshot().pending, 0u);
  std::future<InferenceResult> late = Submit(*model, X());
  ASSERT_TRUE(Answered(late));
  EXPECT_THAT(late.get().status, StatusIs(StatusCode::kUnavailable, kDraining));
}

}  // namespace
}  // namespace chorus
