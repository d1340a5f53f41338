// TrainingCore: a job's operations, here and on its other hosts (the
// lifecycle is in training_core.cc).
#include <utility>

#include "chorus/server/training/job_proto.h"
#include "chorus/server/training/training_core.h"

namespace chorus {
namespace {

// The codes an operation across servers ends with when its hosts may be out
// of step (a collective that failed or timed out, a host lost or cancelled):
// the job cannot go on.
bool BreaksTheJob(const Status& status) {
  switch (status.code()) {
    case StatusCode::kAborted:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kUnavailable:
    case StatusCode::kCancelled:
    case StatusCode::kInternal:
    case StatusCode::kUnknown:
    case StatusCode::kDataLoss:
      return true;
    default:
      return false;
  }
}

// INVALID_ARGUMENT unless `batch` is a batch `options`' job can step on.
Status CheckBatch(const at::Tensor& batch, const TrainingJobOptions& options) {
  const int64_t rows = options.spec.global_batch;
  const int64_t columns = options.spec.seq_len;
  if (batch.dim() != 2 || batch.scalar_type() != at::kLong || (rows > 0 && batch.size(0) != rows) ||
      (columns > 0 && batch.size(1) != columns + 1) ||
      batch.size(0) % (options.hosts * options.dp) != 0) {
    return InvalidArgumentError("batch must be INT64 [global_batch, seq_len + 1] = [" +
                                std::to_string(rows) + ", " + std::to_string(columns + 1) +
                                "], divisible among the data-parallel ranks");
  }
  return OkStatus();
}

}  // namespace

Status TrainingCore::RunOnEveryHost(const std::string& id, JobEntry& entry,
                                    const std::function<Status()>& local,
                                    const JobHosts::RemoteCall& remote) {
  Status status = entry.others ? entry.others->Run(local, remote) : local();
  if (status.ok() || !entry.spans_hosts() || !BreaksTheJob(status)) return status;
  return FailJob(id, entry, status);
}

StatusOr<std::vector<StepMetrics>> TrainingCore::Step(const std::string& id, JobEntry& entry,
                                                      const training::StepRequest& request,
                                                      const std::optional<at::Tensor>& batch,
                                                      const StopConditions& stop) {
  if (batch) CHORUS_RETURN_IF_ERROR(CheckBatch(*batch, entry.job->options()));
  const int count = batch ? 1 : std::max(1, request.steps());
  // Across servers, step by step: every host takes each step, and the
  // client's deadline or cancellation is seen here, between steps.
  const int per_call = entry.others ? 1 : count;
  std::vector<StepMetrics> taken;
  for (int done = 0; done < count; done += per_call) {
    if (Status stopped = stop.Check(); !stopped.ok() && entry.others) {
      return stopped.Annotate("training job " + id + " stopped after " + std::to_string(done) +
                              " of " + std::to_string(count) + " steps");
    }
    CHORUS_RETURN_IF_ERROR(RunOnEveryHost(
        id, entry,
        [&]() -> Status {
          CHORUS_ASSIGN_OR_RETURN(
              std::vector<StepMetrics> ran,
              entry.job->Step(per_call, batch, entry.others ? StopConditions{} : stop));
          taken.insert(taken.end(), ran.begin(), ran.end());
          return OkStatus();
        },
        [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
          training::StepRequest forwarded;
          forwarded.set_job_id(id);
          forwarded.set_steps(per_call);
          if (request.has_batch()) *forwarded.mutable_batch() = request.batch();
          training::StepResponse answer;
          return stub.Step(&context, forwarded, &answer);
        }));
  }
  return taken;
}

StatusOr<std::string> TrainingCore::Save(const std::string& id, JobEntry& entry,
                                         const std::string& directory) {
  std::string path;
  CHORUS_RETURN_IF_ERROR(RunOnEveryHost(
      id, entry,
      [&]() -> Status {
        CHORUS_ASSIGN_OR_RETURN(path, directory.empty() ? entry.job->SaveToCheckpointDir()
                                                        : entry.job->Save(directory));
        return OkStatus();
      },
      [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
        training::SaveCheckpointRequest forwarded;
        forwarded.set_job_id(id);
        forwarded.set_directory(directory);
        training::SaveCheckpointResponse answer;
        return stub.SaveCheckpoint(&context, forwarded, &answer);
      }));
  return path;
}

StatusOr<int64_t> TrainingCore::Load(const std::string& id, JobEntry& entry,
                                     const std::string& path) {
  if (!entry.others) return entry.job->Load(path);
  // The driver names the step folder (its `latest` may be the only one) and
  // checks its own part first: a bad path fails the call, not the job.
  CHORUS_ASSIGN_OR_RETURN(const std::string folder, entry.job->CheckpointFolder(path));
  int64_t step = 0;
  Status loaded = RunOnEveryHost(
      id, entry,
      [&]() -> Status {
        CHORUS_ASSIGN_OR_RETURN(step, entry.job->Load(folder));
        return OkStatus();
      },
      [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
        training::LoadCheckpointRequest forwarded;
        forwarded.set_job_id(id);
        forwarded.set_path(folder);
        training::LoadCheckpointResponse answer;
        return stub.LoadCheckpoint(&context, forwarded, &answer);
      });
  // Some hosts may have loaded and others not: they are out of step.
  if (!loaded.ok() && entry.state() != JobState::kFailed) return FailJob(id, entry, loaded);
  CHORUS_RETURN_IF_ERROR(loaded);
  return step;
}

StatusOr<at::Tensor> TrainingCore::Evaluate(const std::string& id, JobEntry& entry,
                                            const at::Tensor& tokens,
                                            const training::EvaluateRequest& request) {
  at::Tensor output;
  CHORUS_RETURN_IF_ERROR(RunOnEveryHost(
      id, entry,
      [&]() -> Status {
        CHORUS_ASSIGN_OR_RETURN(output, entry.job->Evaluate(tokens));
        return OkStatus();
      },
      [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
        training::EvaluateResponse answer;
        return stub.Evaluate(&context, request, &answer);
      }));
  return output;
}

StatusOr<std::pair<int64_t, std::string>> TrainingCore::Export(
    const std::string& id, JobEntry& entry, const training::ExportRequest& request) {
  const std::string& name = request.model_name();
  CHORUS_RETURN_IF_ERROR(CheckModelName(name));
  const int64_t example_length = request.example_length() > 0 ? request.example_length() : 8;
  if (!entry.driver.empty()) {
    // Another host of the job: its ranks take part in gathering the weights;
    // the driver's first rank writes them.
    CHORUS_RETURN_IF_ERROR(RunOnEveryHost(
        id, entry, [&] { return entry.job->Export("", name, request.version(), example_length); },
        nullptr));
    return std::make_pair(request.version(), std::string());
  }
  auto write = [&](const std::string& path, int64_t version) {
    return RunOnEveryHost(
        id, entry, [&] { return entry.job->Export(path, name, version, example_length); },
        [&](int, JobHosts::Stub& stub, grpc::ClientContext& context) {
          training::ExportRequest forwarded = request;
          forwarded.set_version(version);
          training::ExportResponse answer;
          return stub.Export(&context, forwarded, &answer);
        });
  };
  CHORUS_ASSIGN_OR_RETURN(PublishedVersion published,
                          context_.repository->Publish(name, request.version(), write));
  return std::make_pair(published.version, published.path);
}

}  // namespace chorus
