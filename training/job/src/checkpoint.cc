// TrainingJob's checkpoints: saving every rank's state as one step folder
// (whole or not at all, and across hosts committed by all or none), finding
// and checking one, and loading it (the rest of the job is training_job.cc).
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "chorus/common/file_util.h"
#include "chorus/training/job/training_job.h"

namespace chorus {
namespace {

std::string StepFolder(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The manifest.json of a host's part of step `step`.
nlohmann::json CheckpointManifest(const TrainingJobOptions& options, int64_t step) {
  nlohmann::json manifest = {{"format", "chorus-checkpoint"},
                             {"format_version", 1},
                             {"job", options.id},
                             {"step", step},
                             {"dp", options.dp},
                             {"tp", options.tp},
                             {"ranks", options.dp * options.tp},
                             {"spec", nlohmann::json::parse(options.spec.ToJson())}};
  if (options.hosts > 1) {
    manifest["hosts"] = options.hosts;
    manifest["host"] = options.host;
    manifest["layout"] = options.layout;
  }
  return manifest;
}

}  // namespace

std::string TrainingJob::LatestCheckpoint(const std::string& root) {
  StatusOr<std::string> latest = ReadFile(root + "/latest");
  if (!latest.ok()) return "";
  std::string name = *latest;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

StatusOr<std::string> TrainingJob::Save(const std::string& root) {
  MutexLock lock(&mu_);
  return SaveLocked(root);
}

StatusOr<std::string> TrainingJob::SaveToCheckpointDir() {
  if (options_.checkpoint_dir.empty()) {
    return FailedPreconditionError("training job " + options_.id +
                                   " has no checkpoint_dir; name a directory");
  }
  return Save(options_.checkpoint_dir);
}

Status TrainingJob::WriteCheckpointPart(const std::string& root, int64_t step) {
  const bool across_hosts = options_.hosts > 1;
  const std::string step_path = root + "/" + StepFolder(step);
  // What this host writes: the step folder, or its own folder inside it.
  const std::string host_folder = "host-" + std::to_string(options_.host);
  const std::string parent = across_hosts ? step_path : root;
  const std::string final_path = across_hosts ? step_path + "/" + host_folder : step_path;
  Status saved = MakeDirectories(root);
  if (saved.ok()) saved = MakeDirectories(parent);
  const std::string partial =
      TemporarySiblingPath(parent + "/." + (across_hosts ? host_folder : StepFolder(step)));
  if (saved.ok()) saved = MakeDirectories(partial);
  if (saved.ok()) {
    saved = RunOnRanks("save", [&](int) { return std::vector<c10::IValue>{partial}; }).status();
  }
  if (saved.ok()) {
    saved =
        WriteFileAtomically(partial + "/manifest.json", CheckpointManifest(options_, step).dump(2));
  }
  // Every shard on the disk before the folder gets its name, and the name
  // before `latest` points to it: a power loss leaves the previous one.
  if (saved.ok()) saved = SyncTree(partial);
  // Re-saving a step (which `latest` may name): the new folder takes the
  // name in one exchange (never a moment without it), then the old goes.
  const bool replacing = saved.ok() && IsDirectory(final_path);
  if (saved.ok()) {
    saved = replacing ? ExchangePaths(partial, final_path) : RenameFile(partial, final_path);
  }
  if (saved.ok()) saved = SyncPath(parent);
  if (saved.ok() && across_hosts) saved = SyncPath(root);
  // (After the exchange `partial` holds the replaced folder.)
  if (!saved.ok() || replacing) (void)RemoveTree(partial);
  return saved;
}

StatusOr<std::string> TrainingJob::SaveLocked(const std::string& root) {
  CHORUS_RETURN_IF_ERROR(CheckOpen());
  const int64_t step = CurrentStep();
  const std::string step_path = root + "/" + StepFolder(step);
  // Across hosts every failure still reaches the vote: a host that skipped
  // it would leave the others waiting out the timeout.
  Status saved = WriteCheckpointPart(root, step);
  if (options_.hosts > 1) {
    // Two phases: every host has committed its folder before `latest` moves;
    // a host that could not, or was lost, leaves the previous checkpoint.
    StatusOr<bool> everyone = AllHostsAgree(saved.ok());
    if (!everyone.ok()) return everyone.status().Annotate("agreeing on checkpoint " + step_path);
    // The hosts are in step (they all voted): a part that could not be
    // written fails this save, not the job.
    if (!saved.ok() || !*everyone) {
      return FailedPreconditionError(
          "checkpoint " + step_path + " was not committed (latest is unchanged): " +
          (saved.ok() ? "another host could not write its part" : saved.message()));
    }
    if (options_.host != 0) return step_path;
  }
  if (saved.ok()) saved = WriteFileAtomically(root + "/latest", StepFolder(step) + "\n");
  if (!saved.ok()) return saved;
  return step_path;
}

StatusOr<int64_t> TrainingJob::Load(const std::string& path) {
  MutexLock lock(&mu_);
  return LoadLocked(path);
}

StatusOr<TrainingJob::Checkpoint> TrainingJob::FindCheckpoint(const std::string& path) const {
  if (!IsDirectory(path)) return NotFoundError("no checkpoint at " + path);
  Checkpoint found;
  found.folder = path;
  if (std::string latest = LatestCheckpoint(path); !latest.empty()) found.folder += "/" + latest;
  // Across hosts, this host's part of the step.
  found.part = found.folder;
  if (options_.hosts > 1) found.part += "/host-" + std::to_string(options_.host);
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(found.part + "/manifest.json"));
  const nlohmann::json manifest = nlohmann::json::parse(text, nullptr, false);
  // Typed lookups only: nlohmann's value() throws on a field of another type.
  auto integer = [&](const char* key) -> std::optional<int64_t> {
    if (!manifest.is_object() || !manifest.contains(key) || !manifest[key].is_number_integer()) {
      return std::nullopt;
    }
    return manifest[key].get<int64_t>();
  };
  const bool is_checkpoint = manifest.is_object() && manifest.contains("format") &&
                             manifest["format"] == "chorus-checkpoint";
  const bool layout_named =
      is_checkpoint && (!manifest.contains("layout") || manifest["layout"].is_string());
  if (!is_checkpoint || !layout_named || !integer("dp") || !integer("tp") || !integer("step")) {
    return DataLossError(found.part + "/manifest.json is not a chorus checkpoint manifest");
  }
  const int64_t hosts = integer("hosts").value_or(1);
  const std::string layout =
      manifest.contains("layout") ? manifest["layout"].get<std::string>() : "fsdp";
  if (*integer("dp") != options_.dp || *integer("tp") != options_.tp || hosts != options_.hosts ||
      (hosts > 1 && layout != options_.layout)) {
    auto describe = [](int64_t hosts, int64_t dp, int64_t tp, const std::string& layout) {
      std::string text = "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp);
      if (hosts > 1) text += " on " + std::to_string(hosts) + " hosts (" + layout + ")";
      return text;
    };
    return FailedPreconditionError(
        "checkpoint layout " + describe(hosts, *integer("dp"), *integer("tp"), layout) +
        " differs from the job's " +
        describe(options_.hosts, options_.dp, options_.tp, options_.layout));
  }
  found.step = *integer("step");
  return found;
}

StatusOr<std::string> TrainingJob::CheckpointFolder(const std::string& path) const {
  CHORUS_ASSIGN_OR_RETURN(Checkpoint found, FindCheckpoint(path));
  return found.folder;
}

StatusOr<int64_t> TrainingJob::LoadLocked(const std::string& path) {
  CHORUS_RETURN_IF_ERROR(CheckOpen());
  CHORUS_ASSIGN_OR_RETURN(Checkpoint found, FindCheckpoint(path));
  CHORUS_RETURN_IF_ERROR(
      RunOnRanks("load", [&](int) { return std::vector<c10::IValue>{found.part}; }).status());
  const int64_t step = found.step;
  {
    MutexLock history(&history_mu_);
    history_.erase(std::remove_if(history_.begin(), history_.end(),
                                  [&](const StepMetrics& m) { return m.step > step; }),
                   history_.end());
    step_ = step;
  }
  return step;
}

}  // namespace chorus
