#include "package/model/aot_inductor_model.h"

#include <ATen/core/ivalue.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <chrono>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "chorus/package/format.h"
#include "chorus/package/torch_dtype.h"
#include "package/model/compiled_call.h"

namespace chorus::internal {
namespace {

namespace fmt = package_format;

// The model compiled into the package: "model" (torch's default), or the only
// one there is. Packages with several need a name chorus has no way to take.
StatusOr<std::string> ModelName(const Archive& archive) {
  std::set<std::string> names;
  const std::string directory = fmt::kAotInductorDirectory;
  for (const ArchiveRecord& record : archive.records()) {
    if (record.name.rfind(directory, 0) != 0) continue;
    std::string rest = record.name.substr(directory.size());
    if (rest.find('/') != std::string::npos) names.insert(rest.substr(0, rest.find('/')));
  }
  if (names.count("model") || names.empty()) return std::string("model");
  if (names.size() == 1) return *names.begin();
  return InvalidArgumentError(archive.path() + " holds " + std::to_string(names.size()) +
                              " AOTInductor models and none is called \"model\"");
}

// The input's problem against `spec` (whose dtype is `scalar_type`), or "".
std::string Mismatch(const at::Tensor& input, const TensorSpec& spec, c10::ScalarType scalar_type) {
  if (input.scalar_type() != scalar_type) {
    return "dtype " + std::string(c10::toString(input.scalar_type())) + ", expected " + spec.dtype;
  }
  bool fits = input.dim() == static_cast<int64_t>(spec.shape.size());
  for (size_t d = 0; fits && d < spec.shape.size(); ++d) {
    fits = spec.shape[d] == -1 || spec.shape[d] == input.size(static_cast<int64_t>(d));
  }
  if (fits) return "";
  std::string expected = "[";
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    expected += (d ? ", " : "") + std::to_string(spec.shape[d]);
  }
  return "shape " + c10::str(input.sizes()) + ", expected " + expected + "]";
}

class AotInductorModel final : public Model {
 public:
  AotInductorModel(std::shared_ptr<Archive> archive, Manifest signature, bool carries_signature,
                   std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader)
      : archive_(std::move(archive)),
        signature_(std::move(signature)),
        carries_signature_(carries_signature),
        loader_(std::move(loader)) {
    // Looked up once: the checks run on every call. Every dtype name is known
    // (ParseSignature, or checked by LoadAotInductorModel).
    for (const TensorSpec& spec : signature_.inputs) {
      input_types_.push_back(ScalarTypeOf(DtypeByName(spec.dtype)->dtype));
    }
  }

  const Manifest* manifest() const override { return &signature_; }
  bool carries_signature() const override { return carries_signature_; }
  const std::shared_ptr<Archive>& archive() const override { return archive_; }

  StatusOr<c10::IValue> Forward(const std::vector<c10::IValue>& inputs,
                                const CallOptions& options) override {
    CHORUS_ASSIGN_OR_RETURN(std::vector<at::Tensor> tensors, CheckedInputs(inputs));
    return CallCompiled(options, [&] {
      std::vector<at::Tensor> outputs = loader_->boxed_run(std::move(tensors));
      if (outputs.size() == 1) return c10::IValue(outputs.front());
      return c10::IValue(
          c10::ivalue::Tuple::create(std::vector<c10::IValue>(outputs.begin(), outputs.end())));
    });
  }

  StatusOr<Object> In(InterpreterSession&) override {
    return UnimplementedError("AOTInductor models run without an interpreter");
  }

 private:
  // The compiled code trusts its inputs (reading past a tensor of the wrong
  // shape or dtype): each is checked against the signature, made contiguous.
  StatusOr<std::vector<at::Tensor>> CheckedInputs(const std::vector<c10::IValue>& inputs) const {
    if (inputs.size() != signature_.inputs.size()) {
      return InvalidArgumentError("the model takes " + std::to_string(signature_.inputs.size()) +
                                  " inputs, got " + std::to_string(inputs.size()));
    }
    std::vector<at::Tensor> tensors;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorSpec& spec = signature_.inputs[i];
      if (!inputs[i].isTensor())
        return InvalidArgumentError("input " + spec.name + ": not a tensor");
      const at::Tensor& tensor = inputs[i].toTensor();
      std::string mismatch = Mismatch(tensor, spec, input_types_[i]);
      if (!mismatch.empty()) return InvalidArgumentError("input " + spec.name + ": " + mismatch);
      if (!tensor.device().is_cpu()) {
        return InvalidArgumentError("input " + spec.name + ": on " + tensor.device().str() +
                                    ", the model runs on the CPU");
      }
      tensors.push_back(tensor.contiguous());
    }
    return tensors;
  }

  std::shared_ptr<Archive> archive_;
  Manifest signature_;
  std::vector<c10::ScalarType> input_types_;  // signature_.inputs' dtypes
  bool carries_signature_;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
};

}  // namespace

StatusOr<std::shared_ptr<Model>> LoadAotInductorModel(std::shared_ptr<Archive> archive,
                                                      const std::optional<Manifest>& signature,
                                                      size_t instances) {
  const std::string& path = archive->path();
  CHORUS_ASSIGN_OR_RETURN(std::string name, ModelName(*archive));
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  std::unordered_map<std::string, std::string> metadata;
  try {
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, name, /*run_single_threaded=*/false, std::max<size_t>(instances, 1));
    metadata = loader->get_metadata();
  } catch (const c10::Error& e) {
    return InvalidArgumentError("cannot load AOTInductor package " + path + ": " +
                                e.what_without_backtrace());
  } catch (const std::exception& e) {
    return InvalidArgumentError("cannot load AOTInductor package " + path + ": " + e.what());
  }
  auto device = metadata.find("AOTI_DEVICE_KEY");
  if (device != metadata.end() && device->second != "cpu") {
    return UnimplementedError(path + " was compiled for " + device->second +
                              "; chorus runs AOTInductor packages on the CPU");
  }
  auto embedded = metadata.find(fmt::kAotInductorSignatureKey);
  if (embedded != metadata.end()) {
    StatusOr<Manifest> parsed = ParseSignature(embedded->second);
    if (!parsed.ok()) {
      return parsed.status().Annotate(path + ": metadata " + fmt::kAotInductorSignatureKey);
    }
    return std::shared_ptr<Model>(std::make_shared<AotInductorModel>(
        std::move(archive), std::move(*parsed), /*carries_signature=*/true, std::move(loader)));
  }
  if (!signature) {
    return FailedPreconditionError(
        path +
        " is an AOTInductor package without a signature: compile it with "
        "inductor_configs={\"aot_inductor.metadata\": {\"" +
        fmt::kAotInductorSignatureKey +
        "\": <json>}} or give the signature (docs/package-format.md)");
  }
  for (const TensorSpec& spec : signature->inputs) {
    const DtypeInfo* dtype = DtypeByName(spec.dtype);
    if (dtype == nullptr || dtype->dtype == Dtype::kString) {
      return InvalidArgumentError("input " + spec.name + " of the signature for " + path +
                                  (dtype ? ": compiled programs take tensors, not strings"
                                         : ": unknown dtype " + spec.dtype));
    }
  }
  return std::shared_ptr<Model>(std::make_shared<AotInductorModel>(
      std::move(archive), *signature, /*carries_signature=*/false, std::move(loader)));
}

}  // namespace chorus::internal
