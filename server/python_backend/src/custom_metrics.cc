#include "chorus/server/python_backend/custom_metrics.h"

#include <torch/custom_class.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace chorus::python_backend {
namespace {

const char* KindName(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter:
      return "TRITONSERVER_METRIC_KIND_COUNTER";
    case MetricKind::kGauge:
      return "TRITONSERVER_METRIC_KIND_GAUGE";
    case MetricKind::kHistogram:
      return "TRITONSERVER_METRIC_KIND_HISTOGRAM";
  }
  return "TRITONSERVER_METRIC_KIND_UNKNOWN";
}

const char* TypeName(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kGauge:
      return "gauge";
    case MetricKind::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// Triton's reason when a kind of metric cannot do `operation`.
Status Unsupported(MetricKind kind, const char* operation) {
  return InvalidArgumentError(std::string(KindName(kind)) + " does not support " + operation);
}

// A value as prometheus-cpp writes it: the shortest text that reads back as
// the same double ("3", "8.5", "1e+20"), "+Inf", "-Inf" or "Nan".
void WriteValue(std::ostream& out, double value) {
  if (std::isnan(value)) {
    out << "Nan";
  } else if (std::isinf(value)) {
    out << (value < 0 ? "-Inf" : "+Inf");
  } else {
    char text[64];
    const std::to_chars_result written = std::to_chars(text, text + sizeof(text), value);
    out.write(text, written.ptr - text);
  }
}

// A label value or description with the characters that would end it
// escaped (`quote`: also '"', which ends a label value).
void WriteEscaped(std::ostream& out, const std::string& text, bool quote) {
  for (char c : text) {
    if (c == '\\') {
      out << "\\\\";
    } else if (c == '\n') {
      out << "\\n";
    } else if (c == '"' && quote) {
      out << "\\\"";
    } else {
      out << c;
    }
  }
}

// `name{labels,le="bound"} ` (the braces only when there is a label).
void WriteHead(std::ostream& out, const std::string& name, const MetricLabels& labels,
               const std::string& le = "") {
  out << name;
  if (!labels.empty() || !le.empty()) {
    const char* separator = "{";
    for (const auto& [label, value] : labels) {
      out << separator << label << "=\"";
      WriteEscaped(out, value, /*quote=*/true);
      out << "\"";
      separator = ",";
    }
    if (!le.empty()) out << separator << "le=\"" << le << "\"";
    out << "}";
  }
  out << " ";
}

bool IsNameCharacter(char c, bool first, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
         (!first && c >= '0' && c <= '9');
}

// Prometheus' rule for metric names (`colon`) and label names: letters,
// digits (not first), '_' (and ':'), not starting with "__".
bool IsValidName(const std::string& name, bool colon) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameCharacter(name[i], i == 0, colon)) return false;
  }
  return true;
}

Status CheckMetricArguments(MetricKind kind, const MetricLabels& labels,
                            const std::vector<double>& buckets) {
  for (const auto& [label, value] : labels) {
    // "le" names a histogram's bucket bound (prometheus-cpp refuses it there too).
    if (!IsValidName(label, /*colon=*/false) || (kind == MetricKind::kHistogram && label == "le")) {
      return InvalidArgumentError("Invalid label name");
    }
  }
  if (kind != MetricKind::kHistogram && !buckets.empty()) {
    return InvalidArgumentError(std::string("Unexpected args found in ") + TypeName(kind) +
                                " Metric constructor.");
  }
  for (size_t i = 1; i < buckets.size(); ++i) {
    if (!(buckets[i - 1] < buckets[i])) {
      return InvalidArgumentError("Bucket Boundaries must be strictly sorted");
    }
  }
  return OkStatus();
}

// Every family of the process, in the order they were made.
class FamilyRegistry {
 public:
  StatusOr<std::shared_ptr<CustomMetricFamily>> GetOrAdd(const std::string& name,
                                                         const std::string& description,
                                                         MetricKind kind) CHORUS_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    for (const auto& family : families_) {
      if (family->name() != name) continue;
      if (family->kind() != kind) {
        return AlreadyExistsError("Family name already exists with different type");
      }
      return family;
    }
    families_.push_back(std::make_shared<CustomMetricFamily>(name, description, kind));
    return families_.back();
  }

  std::vector<std::shared_ptr<CustomMetricFamily>> Families() const CHORUS_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return families_;
  }

 private:
  mutable Mutex mu_;
  std::vector<std::shared_ptr<CustomMetricFamily>> families_ CHORUS_GUARDED_BY(mu_);
};

// Never destroyed: interpreters' threads may still use metrics while the
// process exits.
FamilyRegistry& Registry() {
  static auto* registry = new FamilyRegistry();
  return *registry;
}

}  // namespace

CustomMetric::CustomMetric(MetricKind kind, std::vector<double> buckets)
    : kind_(kind), buckets_(std::move(buckets)) {
  if (kind_ == MetricKind::kHistogram) {
    MutexLock lock(&mu_);
    bucket_counts_.assign(buckets_.size() + 1, 0);
  }
}

Status CustomMetric::Increment(double value) {
  if (kind_ == MetricKind::kHistogram) return Unsupported(kind_, "Increment");
  if (kind_ == MetricKind::kCounter && value < 0) {
    return InvalidArgumentError(std::string(KindName(kind_)) +
                                " can only be incremented monotonically by non-negative values.");
  }
  MutexLock lock(&mu_);
  value_ += value;
  return OkStatus();
}

Status CustomMetric::Set(double value) {
  if (kind_ != MetricKind::kGauge) return Unsupported(kind_, "Set");
  MutexLock lock(&mu_);
  value_ = value;
  return OkStatus();
}

Status CustomMetric::Observe(double value) {
  if (kind_ != MetricKind::kHistogram) return Unsupported(kind_, "Observe");
  // The first bound >= value (bounds are inclusive: "le"); none: +Inf's.
  const size_t bucket = std::find_if(buckets_.begin(), buckets_.end(),
                                     [value](double bound) { return bound >= value; }) -
                        buckets_.begin();
  MutexLock lock(&mu_);
  ++bucket_counts_[bucket];
  ++count_;
  value_ += value;
  return OkStatus();
}

StatusOr<double> CustomMetric::Value() const {
  if (kind_ == MetricKind::kHistogram) return Unsupported(kind_, "Value");
  MutexLock lock(&mu_);
  return value_;
}

void CustomMetric::Render(std::ostream& out, const std::string& name,
                          const MetricLabels& labels) const {
  MutexLock lock(&mu_);
  if (kind_ != MetricKind::kHistogram) {
    WriteHead(out, name, labels);
    WriteValue(out, value_);
    out << "\n";
    return;
  }
  WriteHead(out, name + "_count", labels);
  out << count_ << "\n";
  WriteHead(out, name + "_sum", labels);
  WriteValue(out, value_);
  out << "\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    cumulative += bucket_counts_[i];
    std::ostringstream bound;
    WriteValue(bound, buckets_[i]);
    WriteHead(out, name + "_bucket", labels, bound.str());
    out << cumulative << "\n";
  }
  WriteHead(out, name + "_bucket", labels, "+Inf");
  out << count_ << "\n";
}

StatusOr<std::shared_ptr<CustomMetric>> CustomMetricFamily::GetOrAddMetric(
    const MetricLabels& labels, const std::vector<double>& buckets) {
  MutexLock lock(&mu_);
  auto found = metrics_.find(labels);
  if (found != metrics_.end()) return found->second;
  CHORUS_RETURN_IF_ERROR(CheckMetricArguments(kind_, labels, buckets));
  auto metric = std::make_shared<CustomMetric>(kind_, buckets);
  metrics_.emplace(labels, metric);
  return metric;
}

void CustomMetricFamily::Render(std::ostream& out) const {
  MutexLock lock(&mu_);
  if (metrics_.empty()) return;
  if (!description_.empty()) {
    out << "# HELP " << name_ << " ";
    WriteEscaped(out, description_, /*quote=*/false);
    out << "\n";
  }
  out << "# TYPE " << name_ << " " << TypeName(kind_) << "\n";
  for (const auto& [labels, metric] : metrics_) metric->Render(out, name_, labels);
}

StatusOr<std::shared_ptr<CustomMetricFamily>> GetOrAddMetricFamily(const std::string& name,
                                                                   const std::string& description,
                                                                   int64_t kind) {
  if (kind < static_cast<int64_t>(MetricKind::kCounter) ||
      kind > static_cast<int64_t>(MetricKind::kHistogram)) {
    return InvalidArgumentError("Unsupported kind passed to MetricFamily constructor.");
  }
  if (!IsValidName(name, /*colon=*/true)) return InvalidArgumentError("Invalid metric name");
  return Registry().GetOrAdd(name, description, static_cast<MetricKind>(kind));
}

std::string RenderCustomMetrics() {
  const std::vector<std::shared_ptr<CustomMetricFamily>> families = Registry().Families();
  std::ostringstream out;
  for (MetricKind kind : {MetricKind::kCounter, MetricKind::kGauge, MetricKind::kHistogram}) {
    for (const auto& family : families) {
      if (family->kind() == kind) family->Render(out);
    }
  }
  return out.str();
}

// torch.classes.chorus.MetricFamily and .Metric: what metrics.py calls. Each
// holds a shared_ptr into the registry, so every interpreter's objects for a
// name reach the same family and metrics.
namespace {

struct MetricHolder : torch::CustomClassHolder {
  explicit MetricHolder(std::shared_ptr<CustomMetric> metric) : metric(std::move(metric)) {}
  const std::shared_ptr<CustomMetric> metric;
};

struct FamilyHolder : torch::CustomClassHolder {
  explicit FamilyHolder(std::shared_ptr<CustomMetricFamily> family) : family(std::move(family)) {}
  const std::shared_ptr<CustomMetricFamily> family;
};

using MetricSelf = c10::intrusive_ptr<MetricHolder>;
using FamilySelf = c10::intrusive_ptr<FamilyHolder>;

void Check(const Status& status) { TORCH_CHECK(status.ok(), status.message()); }

// Registered before MetricFamily, whose metric() returns one.
const auto kMetricClass =
    torch::class_<MetricHolder>("chorus", "Metric")
        .def("increment",
             [](const MetricSelf& self, double value) { Check(self->metric->Increment(value)); })
        .def("set", [](const MetricSelf& self, double value) { Check(self->metric->Set(value)); })
        .def("observe",
             [](const MetricSelf& self, double value) { Check(self->metric->Observe(value)); })
        .def("value", [](const MetricSelf& self) {
          StatusOr<double> value = self->metric->Value();
          Check(value.status());
          return *value;
        });

const auto kFamilyClass =
    torch::class_<FamilyHolder>("chorus", "MetricFamily")
        .def(torch::init([](const std::string& name, const std::string& description, int64_t kind) {
          StatusOr<std::shared_ptr<CustomMetricFamily>> family =
              GetOrAddMetricFamily(name, description, kind);
          Check(family.status());
          return c10::make_intrusive<FamilyHolder>(std::move(*family));
        }))
        .def("metric", [](const FamilySelf& self, const c10::Dict<std::string, std::string>& labels,
                          const c10::List<double>& buckets) {
          MetricLabels label_map;
          for (const auto& entry : labels) label_map.emplace(entry.key(), entry.value());
          StatusOr<std::shared_ptr<CustomMetric>> metric =
              self->family->GetOrAddMetric(label_map, buckets.vec());
          Check(metric.status());
          return c10::make_intrusive<MetricHolder>(std::move(*metric));
        });

}  // namespace

}  // namespace chorus::python_backend
