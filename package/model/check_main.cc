// chorus-package-check ARCHIVE: validates an archive (structure, CRCs,
// manifest, sha256), loads it in a fresh chorus interpreter, runs its example
// inputs and compares with the outputs recorded when it was packaged. Prints
// one JSON line: {"ok": ..., "outputs": n, "max_abs_diff": x, "error": "..."}.
// Run by `chorus-package check`; exit status 0 when ok, 1 otherwise.
// --validate-only [--trusted-keys DIR]: the reader's checks alone ({"ok", "error", "kind",
// "manifest"}), run by `chorus-package inspect`.
#include <ATen/core/ivalue.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/package/model.h"

namespace chorus {
namespace {

nlohmann::json Check(const std::string& path, double atol, double rtol) {
  nlohmann::json report = {{"ok", false}, {"outputs", 0}, {"max_abs_diff", 0.0}, {"error", ""}};
  InterpreterManagerOptions options;
  options.num_interpreters = 1;
  auto manager = InterpreterManager::Create(options);
  if (!manager.ok()) {
    report["error"] = manager.status().ToString();
    return report;
  }
  ModelOptions model_options;
  model_options.verify_sha256 = true;
  auto model = Model::Load(manager->get(), path, model_options);
  if (!model.ok()) {
    report["error"] = model.status().ToString();
    return report;
  }
  if ((*model)->format() != ModelFormat::kChorus) {
    report["error"] = "check needs a chorus package (a torch.package archive with a manifest)";
    return report;
  }
  InterpreterSession session = (*manager)->AcquireOne();
  StatusOr<Object> replica = (*model)->In(session);
  StatusOr<Object> compare = session.Global("chorus.package.importer", "compare_examples");
  StatusOr<Object> archive = session.FromIValue(ArchiveToIValue((*model)->archive()));
  if (!replica.ok() || !compare.ok() || !archive.ok()) {
    report["error"] = "cannot prepare the comparison";
    return report;
  }
  StatusOr<Object> atol_object = session.FromIValue(atol);
  StatusOr<Object> rtol_object = session.FromIValue(rtol);
  StatusOr<Object> result = compare->CallObjects({*archive, *replica, *atol_object, *rtol_object});
  if (!result.ok()) {
    report["error"] = result.status().ToString();
    return report;
  }
  StatusOr<c10::IValue> value = result->ToIValue();
  if (!value.ok()) {
    report["error"] = value.status().ToString();
    return report;
  }
  const auto& fields = value->toTupleRef().elements();
  report["outputs"] = fields[0].toInt();
  report["max_abs_diff"] = fields[1].toDouble();
  report["error"] = fields[2].toStringRef();
  report["ok"] = fields[2].toStringRef().empty();
  return report;
}

// The reader's checks alone (structure, CRCs, the manifest, every record's
// sha256), with no interpreter: what `chorus-package inspect` validates.
nlohmann::json Validate(const std::string& path, const std::string& trusted_keys_dir) {
  nlohmann::json report = {{"ok", false}, {"error", ""}};
  ArchiveOptions options;
  options.verify_storage_crc = true;
  StatusOr<std::shared_ptr<Archive>> archive = Archive::Open(path, options);
  Status verified = archive.status();
  if (verified.ok() && !trusted_keys_dir.empty()) {
    // As the server: the trust check covers every record's digest.
    StatusOr<std::shared_ptr<const TrustedKeys>> keys =
        TrustedKeys::FromDirectory(trusted_keys_dir);
    verified = keys.ok() ? (*keys)->Verify(**archive) : keys.status();
    report["trusted"] = verified.ok();
  } else if (verified.ok() && (*archive)->manifest()) {
    verified = (*archive)->VerifySha256();
  }
  if (!verified.ok()) {
    report["error"] = verified.ToString();
    return report;
  }
  report["kind"] = FormatInfo((*archive)->format()).description;
  report["manifest"] = (*archive)->manifest().has_value();
  report["ok"] = true;
  return report;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  CLI::App app{
      "chorus-package-check: load an archive in a fresh chorus interpreter and compare "
      "its example outputs"};
  std::string path;
  double atol = 1e-5, rtol = 1e-4;
  app.add_option("archive", path, "the archive")->required();
  app.add_option("--atol", atol, "absolute tolerance");
  app.add_option("--rtol", rtol, "relative tolerance");
  bool validate_only = false;
  app.add_flag("--validate-only", validate_only,
               "only the archive reader's checks (no interpreter, no model run)");
  std::string trusted_keys;
  app.add_option("--trusted-keys", trusted_keys,
                 "with --validate-only: also require a signature by a key (*.pem) in this "
                 "directory, as chorus-server --trusted-keys does");
  CLI11_PARSE(app, argc, argv);
  nlohmann::json report =
      validate_only ? chorus::Validate(path, trusted_keys) : chorus::Check(path, atol, rtol);
  std::cout << report.dump() << std::endl;
  return report["ok"].get<bool>() ? 0 : 1;
}
