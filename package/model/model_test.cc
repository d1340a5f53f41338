#include "chorus/package/model.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "chorus/common/file_util.h"
#include "chorus/common/process_stats.h"
#include "chorus/common/status_matchers.h"
#include "chorus/interpreter/gpu_host.h"
#include "chorus/interpreter/tensor_crossing.h"
#include "tests/support/python_testing.h"

namespace chorus {
namespace {

using ::testing::HasSubstr;

const std::string kCorpus = testing::SourceDir() + "/tests/data/package_corpus/";
const std::string kWork = "test-work/model";
const std::string kPt2Dir = kWork + "/pt2";

int RunPython(const std::string& code) {
  return testing::RunPinnedPython(code, kWork + "/script.py");
}

// Whether the pinned Python imports `module`: a torch release can come out before its
// torchvision (make test-other-torch).
bool PinnedPythonHas(const std::string& module) {
  return RunPython("import importlib.util, sys; sys.exit(importlib.util.find_spec('" + module +
                   "') is None)") == 0;
}

class ModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(std::system(("mkdir -p " + kWork).c_str()), 0);
    InterpreterManagerOptions options;
    options.num_interpreters = 4;
    options.cache_dir = "test-cache/shared";
    auto created = InterpreterManager::Create(options);
    ASSERT_OK(created);
    manager_ = created->release();
  }
  static void TearDownTestSuite() {
    delete manager_;
    manager_ = nullptr;
  }

  // What stock torch.package makes of `path` in a chorus interpreter.
  static StatusOr<at::Tensor> StockImporterOutput(const std::string& path, const at::Tensor& x,
                                                  const std::string& package = "chorus_model") {
    InterpreterSession session = manager_->AcquireOne();
    CHORUS_RETURN_IF_ERROR(session.Exec(R"(
import torch
from torch.package import PackageImporter
def stock_forward(path, x, package):
    model = PackageImporter(path).load_pickle(package, "model.pkl")
    with torch.no_grad():
        return model(x)
)"));
    CHORUS_ASSIGN_OR_RETURN(Object forward, session.Eval("stock_forward"));
    CHORUS_ASSIGN_OR_RETURN(Object out, forward.Call({path, x, package}));
    CHORUS_ASSIGN_OR_RETURN(c10::IValue value, out.ToIValue());
    return value.toTensor();
  }

  static InterpreterManager* manager_;
};

InterpreterManager* ModelTest::manager_ = nullptr;

TEST_F(ModelTest, ChorusPackageRunsAndMatchesTheStockImporter) {
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, kCorpus + "good.pt"));
  ASSERT_NE(model->manifest(), nullptr);
  EXPECT_EQ(model->manifest()->model_name, "tiny_mlp");
  at::manual_seed(3);
  at::Tensor x = at::randn({5, 4});
  ASSERT_OK_AND_ASSIGN(c10::IValue out, model->Forward({x}));
  at::Tensor ours = out.toTensor();
  EXPECT_EQ(ours.sizes(), (std::vector<int64_t>{5, 2}));
  // Parameters require grad, but Forward records no graph (inference mode).
  EXPECT_FALSE(ours.requires_grad());
  EXPECT_TRUE(ours.is_inference());
  ASSERT_OK_AND_ASSIGN(at::Tensor stock, StockImporterOutput(kCorpus + "good.pt", x));
  EXPECT_TRUE(at::equal(ours, stock));
}

TEST_F(ModelTest, StockTorchPackageArchiveLoadsInChorus) {
  const std::string path = kCorpus + "no_manifest.pt";
  StatusOr<std::shared_ptr<Model>> refused = Model::Load(manager_, path);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound);
  EXPECT_NE(refused.status().message().find("has no chorus manifest"), std::string::npos);
  ModelOptions options;
  options.entry_point = EntryPoint{"pickle", "model", "model.pkl", "", ""};
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, path, options));
  at::Tensor x = at::ones({2, 4});
  ASSERT_OK_AND_ASSIGN(c10::IValue out, model->Forward({x}));
  at::Tensor ours = out.toTensor();
  ASSERT_OK_AND_ASSIGN(at::Tensor stock, StockImporterOutput(path, x, "model"));
  EXPECT_TRUE(at::equal(ours, stock));
}

// torchvision's classifiers as a user exports them with stock torch.package
// (model code interned, no chorus import): every interpreter's replica gives
// the exporting process's outputs.
TEST_F(ModelTest, StockTorchvisionClassifiersMatchTheExportingProcess) {
  if (!PinnedPythonHas("torchvision")) GTEST_SKIP() << "this venv has no torchvision";
  const std::vector<std::string> names = {"resnet18", "mobilenet_v3_small", "squeezenet1_1",
                                          "shufflenet_v2_x0_5"};
  ASSERT_EQ(RunPython(R"(
import warnings
import torch, torchvision
from torch.package import PackageExporter
warnings.simplefilter("ignore")  # the exporter's own TypedStorage deprecation
for name in ["resnet18", "mobilenet_v3_small", "squeezenet1_1", "shufflenet_v2_x0_5"]:
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        y = model(x)
    with PackageExporter(f")" +
                      kWork + R"(/{name}.pt") as exporter:
        exporter.intern("torchvision.models.**")
        exporter.extern(["torchvision.**", "sys"])
        exporter.save_pickle("model", "model.pkl", model)
    torch.save({"input": x, "output": y}, f")" +
                      kWork + R"(/{name}.expected.pt")
)"),
            0);
  ModelOptions options;
  options.entry_point = EntryPoint{"pickle", "model", "model.pkl", "", ""};
  for (const std::string& name : names) {
    const std::string expected_path = kWork + "/" + name + ".expected.pt";
    ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, kWork + "/" + name + ".pt", options));
    // In two interpreters, Python calling its own replica.
    for (int i = 0; i < 2; ++i) {
      InterpreterSession session = manager_->Acquire(i);
      ASSERT_TRUE(session.Exec("import torch").ok());
      ASSERT_OK_AND_ASSIGN(Object replica, model->In(session));
      ASSERT_OK_AND_ASSIGN(Object diff, session.Eval(R"(lambda model, path: (lambda e: float(
    (torch.inference_mode()(model)(e["input"]) - e["output"]).abs().max()))(torch.load(path)))"));
      ASSERT_OK_AND_ASSIGN(Object path, session.Eval("'" + expected_path + "'"));
      ASSERT_OK_AND_ASSIGN(Object result, diff.CallObjects({replica, path}));
      ASSERT_OK_AND_ASSIGN(c10::IValue value, result.ToIValue());
      const double max_abs_diff = value.toDouble();
      RecordProperty(name + "_max_abs_diff_" + std::to_string(i), std::to_string(max_abs_diff));
      EXPECT_LE(max_abs_diff, 1e-5) << name << " in interpreter " << i;
    }
    // From C++, through Forward.
    c10::IValue expected;
    {
      InterpreterSession session = manager_->AcquireOne();
      ASSERT_OK_AND_ASSIGN(Object loaded,
                           session.Eval("__import__('torch').load('" + expected_path + "')"));
      ASSERT_OK_AND_ASSIGN(expected, loaded.ToIValue());
    }
    at::Tensor x = expected.toGenericDict().at("input").toTensor();
    at::Tensor want = expected.toGenericDict().at("output").toTensor();
    ASSERT_OK_AND_ASSIGN(c10::IValue out, model->Forward({x}));
    at::Tensor got = out.toTensor();
    ASSERT_EQ(got.sizes(), want.sizes()) << name;
    EXPECT_LE((got - want).abs().max().item<double>(), 1e-5) << name;
  }
}

TEST_F(ModelTest, WeightsAreSharedByEveryInterpreter) {
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, kCorpus + "good.pt"));
  const Archive& archive = *model->archive();
  std::set<std::vector<int64_t>> pointers;
  for (int i = 0; i < manager_->size(); ++i) {
    InterpreterSession session = manager_->Acquire(i);
    ASSERT_OK_AND_ASSIGN(Object replica, model->In(session));
    ASSERT_OK_AND_ASSIGN(Object params,
                         session.Eval("lambda m: [p.data_ptr() for p in m.parameters()]"));
    ASSERT_OK_AND_ASSIGN(Object result, params.CallObjects({replica}));
    ASSERT_OK_AND_ASSIGN(c10::IValue value, result.ToIValue());
    std::vector<int64_t> addresses = value.toIntVector();
    for (int64_t address : addresses) {
      auto p = reinterpret_cast<const uint8_t*>(address);
      EXPECT_GE(p, archive.mapped_data());
      EXPECT_LT(p, archive.mapped_data() + archive.mapped_size()) << "not in the mapping";
    }
    pointers.insert(addresses);
  }
  EXPECT_EQ(pointers.size(), 1u) << "every interpreter sees the same weight memory";
  // Loading the same file again reuses the same mapping.
  ASSERT_OK_AND_ASSIGN(auto again, Model::Load(manager_, kCorpus + "good.pt"));
  EXPECT_EQ(again->archive().get(), model->archive().get());
}

// The parameters of `model`'s replica in interpreter `index`, as host tensors.
StatusOr<c10::IValue> ParametersIn(InterpreterManager* manager, Model& model, int index) {
  InterpreterSession session = manager->Acquire(index);
  CHORUS_ASSIGN_OR_RETURN(Object replica, model.In(session));
  CHORUS_ASSIGN_OR_RETURN(Object list, session.Eval("lambda m: list(m.parameters())"));
  CHORUS_ASSIGN_OR_RETURN(Object found, list.CallObjects({replica}));
  return found.ToIValue();
}

// A model placed on a named device (meta: no GPU here) holds one copy of its
// weights there, which every interpreter's replica aliases (each through
// storage objects of its own over the same root storage).
TEST_F(ModelTest, WeightsPlacedOnADeviceAreOneCopySharedByEveryInterpreter) {
  ModelOptions options;
  options.devices = {"meta"};
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, kCorpus + "good.pt", options));
  std::set<std::set<const c10::StorageImpl*>> roots;  // per interpreter
  size_t parameters = 0;
  for (int i = 0; i < manager_->size(); ++i) {
    ASSERT_OK_AND_ASSIGN(c10::IValue tensors, ParametersIn(manager_, *model, i));
    std::set<const c10::StorageImpl*> mine;
    for (const c10::IValue& value : tensors.toListRef()) {
      const at::Tensor& tensor = value.toTensor();
      EXPECT_TRUE(tensor.is_meta());
      mine.insert(RootStorage(tensor));
    }
    parameters = tensors.toListRef().size();
    roots.insert(mine);
  }
  ASSERT_GT(parameters, 0u);
  ASSERT_EQ(roots.size(), 1u) << "every interpreter aliases the same device copies";
  EXPECT_EQ(roots.begin()->size(), parameters);
}

// On a GPU (tests/gpu/run.sh runs this): every interpreter's replica uses the
// same device memory for each weight, and answers on the host as the CPU does.
TEST_F(ModelTest, OnAGpuEveryInterpreterUsesOneCopyOfTheWeights) {
  if (!HostHasGpu()) GTEST_SKIP() << "no GPU";
  ModelOptions options;
  options.devices = {"cuda:0"};
  ASSERT_OK_AND_ASSIGN(auto on_cpu, Model::Load(manager_, kCorpus + "good.pt"));
  ASSERT_OK_AND_ASSIGN(auto on_gpu, Model::Load(manager_, kCorpus + "good.pt", options));
  std::set<const void*> addresses;
  size_t parameters = 0;
  for (int i = 0; i < manager_->size(); ++i) {
    ASSERT_OK_AND_ASSIGN(c10::IValue tensors, ParametersIn(manager_, *on_gpu, i));
    for (const c10::IValue& value : tensors.toListRef()) {
      EXPECT_TRUE(value.toTensor().is_cuda());
      addresses.insert(value.toTensor().data_ptr());
    }
    parameters = tensors.toListRef().size();
  }
  EXPECT_EQ(addresses.size(), parameters) << "one device copy for every interpreter";
  at::manual_seed(2);
  const at::Tensor x = at::randn({8, 4});
  ASSERT_OK_AND_ASSIGN(c10::IValue expected, on_cpu->Forward({x}));
  for (int i = 0; i < 2 * manager_->size(); ++i) {
    ASSERT_OK_AND_ASSIGN(c10::IValue y, on_gpu->Forward({x}));
    ASSERT_TRUE(y.toTensor().is_cpu());
    EXPECT_TRUE(at::allclose(y.toTensor(), expected.toTensor(), 1e-4, 1e-5));
  }
}

TEST_F(ModelTest, ADeviceTheHostLacksFailsTheLoadClearly) {
  ModelOptions options;
  options.devices = {"cuda:7"};
  EXPECT_THAT(
      Model::Load(manager_, kCorpus + "good.pt", options).status(),
      StatusIs(StatusCode::kFailedPrecondition, HasSubstr("device cuda:7: this host has ")));
  options.devices = {"gpu"};
  EXPECT_THAT(Model::Load(manager_, kCorpus + "good.pt", options).status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("\"gpu\" is not a device")));
  options.devices = {"cpu", "cpu"};  // spread over devices: here both the CPU
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, kCorpus + "good.pt", options));
  at::manual_seed(1);
  ASSERT_OK_AND_ASSIGN(c10::IValue y, model->Forward({at::randn({2, 4})}));
  EXPECT_TRUE(y.isTensor());
}

TEST_F(ModelTest, LoadErrorsAreSpecificAndAGoodArchiveStillLoads) {
  StatusOr<std::shared_ptr<Model>> short_storage =
      Model::Load(manager_, kCorpus + "short_storage.pt");
  ASSERT_FALSE(short_storage.ok());
  EXPECT_NE(short_storage.status().message().find("storage record shorter than its tensor"),
            std::string::npos)
      << short_storage.status().ToString();
  for (const char* name : {"truncated.pt", "zip_bomb.pt", "dotdot.pt", "bad_manifest_json.pt"}) {
    EXPECT_FALSE(Model::Load(manager_, kCorpus + name).ok()) << name;
  }
  ModelOptions verify;
  verify.verify_sha256 = true;
  StatusOr<std::shared_ptr<Model>> tampered =
      Model::Load(manager_, kCorpus + "sha256_mismatch.pt", verify);
  EXPECT_EQ(tampered.status().code(), StatusCode::kDataLoss);
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, kCorpus + "good.pt"));
  EXPECT_TRUE(model->Forward({at::zeros({1, 4})}).ok());
}

TEST_F(ModelTest, TorchScriptAndPythonPackagesOfOneModelAgree) {
  const std::string script_path = kWork + "/tiny_mlp_script.pt";
  const std::string package_path = kWork + "/tiny_mlp_package.pt";
  ASSERT_EQ(RunPython(R"(
import torch
from chorus.package import create_package
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
create_package(")" + package_path +
                      R"(", model, (torch.randn(3, 4),), name="tiny", progress=False)
torch.jit.save(torch.jit.script(model), ")" +
                      script_path + R"(")
)"),
            0);
  ASSERT_OK_AND_ASSIGN(auto python, Model::Load(manager_, package_path));
  ASSERT_OK_AND_ASSIGN(auto script, Model::Load(nullptr, script_path));  // no interpreter needed
  EXPECT_EQ(script->format(), ModelFormat::kTorchScript);
  EXPECT_EQ(python->format(), ModelFormat::kChorus);
  at::manual_seed(5);
  at::Tensor x = at::randn({6, 4});
  ASSERT_OK_AND_ASSIGN(c10::IValue python_out, python->Forward({x}));
  at::Tensor a = python_out.toTensor();
  ASSERT_OK_AND_ASSIGN(c10::IValue script_out, script->Forward({x}));
  at::Tensor b = script_out.toTensor();
  EXPECT_TRUE(at::allclose(a, b, 1e-6, 1e-6));
}

// N = 4 interpreters load a model with 210 MB of weights: the process grows
// by the weights once, not four times.
TEST_F(ModelTest, LargeModelCostsItsWeightsOncePerProcess) {
  const std::string path = kWork + "/large.pt";
  ASSERT_EQ(RunPython(R"(
import torch
from chorus.package import create_package
torch.manual_seed(0)
sizes = [4096, 3200, 4096, 3200, 4096]
layers = []
for a, b in zip(sizes[:-1], sizes[1:]):
    layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers[:-1]).eval()
create_package(")" + path +
                      R"(", model, (torch.randn(1, 4096),), name="large", progress=False)
)"),
            0);
  const double weights_mib = (4.0 * 4096 * 3200 + 2 * 3200 + 2 * 4096) * 4 / (1 << 20);
  ASSERT_GT(weights_mib, 200.0);
  // Warm every interpreter's torch first, so only the model counts.
  for (int i = 0; i < manager_->size(); ++i) {
    InterpreterSession session = manager_->Acquire(i);
    Status warmed = session.Exec("import torch\ntorch.ones(64, 64).sum()");
    ASSERT_OK(warmed);
  }
  ASSERT_OK_AND_ASSIGN(const double before, ResidentMiB());
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, path));
  std::set<int64_t> first_weight;
  for (int i = 0; i < manager_->size(); ++i) {
    InterpreterSession session = manager_->Acquire(i);
    ASSERT_OK_AND_ASSIGN(Object replica, model->In(session));
    // Touch every weight byte in every interpreter.
    ASSERT_OK_AND_ASSIGN(
        Object touch,
        session.Eval("lambda m: (sum(float(p.double().sum()) for p in m.parameters()), "
                     "next(m.parameters()).data_ptr())"));
    ASSERT_OK_AND_ASSIGN(Object touched, touch.CallObjects({replica}));
    ASSERT_OK_AND_ASSIGN(c10::IValue result, touched.ToIValue());
    first_weight.insert(result.toTupleRef().elements()[1].toInt());
  }
  ASSERT_OK_AND_ASSIGN(const double after, ResidentMiB());
  const double growth = after - before;
  RecordProperty("weights_mib", std::to_string(weights_mib));
  RecordProperty("rss_growth_mib", std::to_string(growth));
  EXPECT_EQ(first_weight.size(), 1u);
  EXPECT_LE(growth, 1.05 * weights_mib) << "grew " << growth << " MiB for " << weights_mib;
  EXPECT_GE(growth, 0.9 * weights_mib) << "the weights were not all touched";
}

// A torch.export program and the same model compiled by AOTInductor, made by
// stock torch (no chorus import), with what the exporting process computed.
class Pt2Test : public ModelTest {
 protected:
  static void SetUpTestSuite() {
    ModelTest::SetUpTestSuite();
    // Compiling takes a while: the files of an earlier test of this suite (one
    // process per test under ctest) are reused when the script is the same.
    const std::string script = R"(
import json, os, torch
class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden, self.out = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)
    def forward(self, x):
        return self.out(self.hidden(x).relu())
torch.manual_seed(0)
model = Mlp().eval()
x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
batch = torch.export.Dim("batch", min=1, max=32)
program = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
torch.export.save(program, ")" +
                               kPt2Dir + R"(/program.pt2")
signature = {"inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
             "outputs": [{"name": "scores", "dtype": "float32", "shape": [-1, 3]}],
             "batching": {"batchable": True, "batch_dim": 0, "max_batch_size": 32}}
torch._inductor.aoti_compile_and_package(
    program, package_path=")" + kPt2Dir +
                               R"(/aoti.pt2",
    inductor_configs={"aot_inductor.metadata": {"chorus.signature": json.dumps(signature)}})
torch._inductor.aoti_compile_and_package(program, package_path=")" +
                               kPt2Dir +
                               R"(/aoti_unsigned.pt2")
with torch.no_grad():
    torch.save({"x": x, "y": model(x)}, ")" +
                               kPt2Dir + R"(/pt2_expected.pt")
import sys
assert "chorus" not in sys.modules
)";
    const std::string made = kPt2Dir + "/made_by.py";
    StatusOr<std::string> previous = ReadFile(made);
    if (previous.ok() && *previous == script) return;
    ASSERT_EQ(std::system(("mkdir -p " + kPt2Dir).c_str()), 0);
    ASSERT_EQ(RunPython(script), 0);
    ASSERT_OK(WriteFileAtomically(made, script));
  }

  // The exporting process's input and output.
  static std::pair<at::Tensor, at::Tensor> Expected() {
    InterpreterSession session = manager_->AcquireOne();
    auto loaded = session.Eval("__import__('torch').load('" + kPt2Dir + "/pt2_expected.pt')");
    EXPECT_TRUE(loaded.ok());
    auto value = loaded->ToIValue();
    EXPECT_TRUE(value.ok());
    auto dict = value->toGenericDict();
    return {dict.at("x").toTensor().clone(), dict.at("y").toTensor().clone()};
  }
};

TEST_F(Pt2Test, ExportedProgramServesItsOwnSignatureOnSharedWeights) {
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(manager_, kPt2Dir + "/program.pt2"));
  EXPECT_EQ(model->format(), ModelFormat::kTorchExport);
  ASSERT_NE(model->manifest(), nullptr);
  EXPECT_TRUE(model->carries_signature());
  const Manifest& signature = *model->manifest();
  ASSERT_EQ(signature.inputs.size(), 1u);
  EXPECT_EQ(signature.inputs[0].name, "x");
  EXPECT_EQ(signature.inputs[0].dtype, "float32");
  EXPECT_EQ(signature.inputs[0].shape, (std::vector<int64_t>{-1, 4}));
  ASSERT_EQ(signature.outputs.size(), 1u);
  EXPECT_EQ(signature.outputs[0].shape, (std::vector<int64_t>{-1, 3}));
  EXPECT_TRUE(signature.batching.batchable);
  EXPECT_EQ(signature.batching.max_batch_size, 32);  // the Dim's upper bound

  auto [x, expected] = Expected();
  ASSERT_OK_AND_ASSIGN(c10::IValue out, model->Forward({x}));
  EXPECT_LE((out.toTensor() - expected).abs().max().item<float>(), 1e-6);
  // Every interpreter's weights are views of the one mapping of the file.
  const auto* begin = model->archive()->mapped_data();
  const auto* end = begin + model->archive()->mapped_size();
  for (int i = 0; i < manager_->size(); ++i) {
    InterpreterSession session = manager_->Acquire(i);
    ASSERT_OK_AND_ASSIGN(Object replica, model->In(session));
    ASSERT_OK_AND_ASSIGN(Object pointers,
                         session.Eval("lambda m: [p.data_ptr() for p in m.parameters()]"));
    ASSERT_OK_AND_ASSIGN(Object listed, pointers.CallObjects({replica}));
    ASSERT_OK_AND_ASSIGN(c10::IValue list, listed.ToIValue());
    ASSERT_EQ(list.toListRef().size(), 4u);
    for (const c10::IValue& pointer : list.toListRef()) {
      const auto* address = reinterpret_cast<const uint8_t*>(pointer.toInt());
      EXPECT_TRUE(address >= begin && address < end) << "interpreter " << i;
    }
  }
}

TEST_F(Pt2Test, AotInductorPackageRunsWithoutAnInterpreterAndChecksItsInputs) {
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(nullptr, kPt2Dir + "/aoti.pt2"));
  EXPECT_EQ(model->format(), ModelFormat::kAotInductor);
  ASSERT_NE(model->manifest(), nullptr);
  EXPECT_TRUE(model->carries_signature());
  EXPECT_EQ(model->manifest()->outputs[0].name, "scores");
  auto [x, expected] = Expected();
  ASSERT_OK_AND_ASSIGN(c10::IValue out, model->Forward({x}));
  EXPECT_LE((out.toTensor() - expected).abs().max().item<float>(), 1e-5);
  // A column slice is not contiguous: the model still sees the right values.
  at::Tensor wide = at::cat({x, x}, 1);
  ASSERT_OK_AND_ASSIGN(c10::IValue sliced, model->Forward({wide.narrow(1, 4, 4)}));
  EXPECT_LE((sliced.toTensor() - expected).abs().max().item<float>(), 1e-5);

  EXPECT_THAT(model->Forward({x.to(at::kDouble)}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("input x: dtype Double")));
  EXPECT_THAT(model->Forward({at::zeros({2, 5})}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("input x: shape [2, 5]")));
  EXPECT_THAT(model->Forward({x, x}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("takes 1 inputs, got 2")));
  InterpreterSession session = manager_->AcquireOne();
  EXPECT_THAT(model->In(session), StatusIs(StatusCode::kUnimplemented));
}

TEST_F(Pt2Test, AotInductorPackageWithoutASignatureNeedsOne) {
  EXPECT_THAT(Model::Load(nullptr, kPt2Dir + "/aoti_unsigned.pt2"),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("without a signature")));
  ModelOptions options;
  ASSERT_OK_AND_ASSIGN(options.signature, ParseSignature(R"({
    "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 3]}]})"));
  ASSERT_OK_AND_ASSIGN(auto model, Model::Load(nullptr, kPt2Dir + "/aoti_unsigned.pt2", options));
  EXPECT_FALSE(model->carries_signature());
  auto [x, expected] = Expected();
  ASSERT_OK_AND_ASSIGN(c10::IValue out, model->Forward({x}));
  EXPECT_LE((out.toTensor() - expected).abs().max().item<float>(), 1e-5);
}

}  // namespace
}  // namespace chorus
