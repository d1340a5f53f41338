#include "chorus/server/training/job_proto.h"

#include <algorithm>
#include <set>
#include <vector>

#include "chorus/server/models/tensor_codec.h"

namespace chorus {
namespace {

void SetIfGiven(const std::string& value, std::string* to) {
  if (!value.empty()) *to = value;
}

template <typename T, typename U>
void SetIfPositive(T value, U* to) {
  if (value > 0) *to = value;
}

void OptimizerFromProto(const training::OptimizerConfig& from, OptimizerSpec* to) {
  SetIfGiven(from.name(), &to->name);
  SetIfPositive(from.lr(), &to->lr);
  SetIfPositive(from.beta1(), &to->beta1);
  SetIfPositive(from.beta2(), &to->beta2);
  SetIfPositive(from.eps(), &to->eps);
  if (from.has_weight_decay()) to->weight_decay = from.weight_decay();
}

void ScheduleFromProto(const training::LrSchedule& from, LrScheduleSpec* to) {
  SetIfGiven(from.kind(), &to->kind);
  SetIfPositive(from.warmup_steps(), &to->warmup_steps);
  SetIfPositive(from.total_steps(), &to->total_steps);
  if (from.has_min_lr_ratio()) to->min_lr_ratio = from.min_lr_ratio();
}

// A job across servers: every host named once, with a port; a layout.
Status ValidateHosts(const training::JobSpec& spec) {
  const std::string& layout = spec.layout();
  if (!layout.empty() && layout != "fsdp" && layout != "hsdp") {
    return InvalidArgumentError("layout must be \"fsdp\" or \"hsdp\", not \"" + layout + "\"");
  }
  if (spec.hosts_size() == 0) {
    if (layout == "hsdp") return InvalidArgumentError("layout \"hsdp\" needs hosts");
    return OkStatus();
  }
  if (spec.hosts_size() == 1) {
    return InvalidArgumentError(
        "hosts names one server: list every server of the job (this one first), or none");
  }
  std::set<std::string> seen;
  for (const std::string& host : spec.hosts()) {
    if (host.empty() || host.find(':') == std::string::npos || !seen.insert(host).second) {
      return InvalidArgumentError("hosts must be distinct host:port addresses; \"" + host +
                                  "\" is not");
    }
  }
  if (spec.rendezvous_port() < 0 || spec.rendezvous_port() > 65535 ||
      spec.collective_timeout_ms() < 0) {
    return InvalidArgumentError("rendezvous_port must be a port, collective_timeout_ms >= 0");
  }
  return OkStatus();
}

}  // namespace

TrainingSpec SpecFromProto(const training::JobSpec& from) {
  TrainingSpec spec;
  SetIfGiven(from.model_factory(), &spec.model_factory);
  SetIfGiven(from.model_config_json(), &spec.model_config_json);
  SetIfGiven(from.loss(), &spec.loss);
  OptimizerFromProto(from.optimizer(), &spec.optimizer);
  ScheduleFromProto(from.lr_schedule(), &spec.lr_schedule);
  spec.seed = from.seed();
  SetIfGiven(from.parallelize(), &spec.parallelize);
  SetIfGiven(from.data_loader(), &spec.data_loader);
  SetIfPositive(from.global_batch(), &spec.global_batch);
  SetIfPositive(from.seq_len(), &spec.seq_len);
  SetIfGiven(from.param_dtype(), &spec.param_dtype);
  spec.devices.assign(from.devices().begin(), from.devices().end());
  return spec;
}

Status ValidateJobSpec(const training::JobSpec& spec) {
  CHORUS_RETURN_IF_ERROR(SpecFromProto(spec).Validate());
  const std::string& checkpoints = spec.checkpoint_dir();
  if (!checkpoints.empty() && checkpoints.front() != '/') {
    return InvalidArgumentError("checkpoint_dir must be an absolute path on the server, not \"" +
                                checkpoints + "\"");
  }
  if (spec.checkpoint_interval() < 0 || (spec.checkpoint_interval() > 0 && checkpoints.empty())) {
    return InvalidArgumentError(
        "checkpoint_interval must be >= 0, and > 0 only with checkpoint_dir");
  }
  return ValidateHosts(spec);
}

int RanksOf(const training::JobSpec& spec) {
  return std::max(1, spec.dp_shard()) * std::max(1, spec.tp());
}

std::chrono::milliseconds CollectiveTimeout(const training::JobSpec& spec) {
  return std::chrono::milliseconds(spec.collective_timeout_ms() > 0 ? spec.collective_timeout_ms()
                                                                    : 60000);
}

StatusOr<at::Tensor> TensorFromProto(const training::Tensor& tensor) {
  return TensorFromRaw(tensor.datatype(),
                       std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end()),
                       tensor.raw());
}

void TensorToProto(const at::Tensor& tensor, training::Tensor* out) {
  at::Tensor t = tensor.contiguous().to(at::kFloat);
  out->set_datatype("FP32");
  for (int64_t d : t.sizes()) out->add_shape(d);
  out->set_raw(t.data_ptr(), t.numel() * t.element_size());
}

void MetricsToProto(const std::string& job, const StepMetrics& m, training::StepMetrics* out) {
  out->set_job_id(job);
  out->set_step(m.step);
  out->set_loss(m.loss);
  out->set_lr(m.lr);
  out->set_step_seconds(m.step_seconds);
  out->set_tokens_per_second(m.tokens_per_second);
  out->set_tokens_per_second_per_rank(m.tokens_per_second_per_rank);
  out->set_mfu_pct(m.mfu_pct);
  out->set_memory_mib(m.memory_mib);
  out->set_cross_host_bytes_per_host(m.cross_host_bytes);
}

void JobStatsToProto(const std::string& id, const JobEntry& entry, training::JobStats* out) {
  const TrainingJob& job = *entry.job;
  const TrainingJobOptions& options = job.options();
  out->set_job_id(id);
  out->set_name(entry.name);
  out->set_dp_shard(options.dp);
  out->set_tp(options.tp);
  for (int i : options.interpreters) out->add_interpreters(i);
  out->set_peak_flops_per_rank(options.peak_flops_per_rank);
  out->set_checkpoint_dir(options.checkpoint_dir);
  out->set_state(JobStateName(entry.state()));
  out->set_reason(std::string(entry.failure().message()));
  out->set_step(job.CurrentStep());
  if (options.hosts > 1) {
    out->set_host(options.host);
    out->set_layout(options.layout);
  }
  if (entry.others) {
    for (const std::string& host : entry.others->hosts()) out->add_hosts(host);
  }
  auto history = job.History();
  if (!history.empty()) MetricsToProto(id, history.back(), out->mutable_last());
}

void HeldJobToProto(const std::string& id, const JobRegistry::HeldJob& held,
                    training::JobStats* out) {
  out->set_job_id(id);
  out->set_name(held.name);
  out->set_state(JobStateName(held.state()));
  out->set_reason(std::string(held.why.message()));
}

}  // namespace chorus
