// Custom metrics of Python-backend models (Triton's pb_utils.MetricFamily and
// its Metrics): one process-wide registry of metric families, shared by every
// interpreter and model instance, rendered on the server's /metrics page as
// Triton (prometheus-cpp) renders them. The Python half
// (python/chorus/triton/metrics.py) reaches it through the torch custom
// classes torch.classes.chorus.MetricFamily(name, description, kind) and
// torch.classes.chorus.Metric (family.metric(labels, buckets)), and checks
// Triton's argument rules and messages before calling them.
//
// Lifetime: a family and its metrics live as long as the process. Triton
// keeps a family in its registry after its Python object is deleted as well
// (it removes a metric when its last Python object goes, chorus does not):
// the metrics of an unloaded model stay on the page with their last values,
// and a model loaded again continues them.
#ifndef CHORUS_SERVER_PYTHON_BACKEND_CUSTOM_METRICS_H_
#define CHORUS_SERVER_PYTHON_BACKEND_CUSTOM_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"

namespace chorus::python_backend {

// Triton's TRITONSERVER_MetricKind values (the `kind` the torch class takes).
enum class MetricKind : int64_t { kCounter = 0, kGauge = 1, kHistogram = 2 };

// A metric's labels, by name: the order they are rendered in.
using MetricLabels = std::map<std::string, std::string>;

// One series of a family: a counter, a gauge or a histogram. Thread-safe.
class CustomMetric {
 public:
  // `buckets`: a histogram's upper bounds, strictly increasing (the caller
  // checked them); empty for other kinds.
  CustomMetric(MetricKind kind, std::vector<double> buckets);
  CustomMetric(const CustomMetric&) = delete;
  CustomMetric& operator=(const CustomMetric&) = delete;

  MetricKind kind() const { return kind_; }

  // Counter: adds `value`, which must be >= 0. Gauge: adds `value` (negative
  // decreases it). Histogram: InvalidArgument, as are the cases below that a
  // kind does not support, with Triton's reason ("... does not support ...").
  Status Increment(double value) CHORUS_EXCLUDES(mu_);
  // Gauge only: the value becomes `value`.
  Status Set(double value) CHORUS_EXCLUDES(mu_);
  // Histogram only: counts `value` in the first bucket whose bound is >= it
  // (and in +Inf) and adds it to the sum.
  Status Observe(double value) CHORUS_EXCLUDES(mu_);
  // Counter or gauge: the current value.
  StatusOr<double> Value() const CHORUS_EXCLUDES(mu_);

  // Writes this series' lines: `name{labels} value`, or for a histogram its
  // _count, _sum and cumulative _bucket{...,le="..."} lines ending with +Inf.
  void Render(std::ostream& out, const std::string& name, const MetricLabels& labels) const
      CHORUS_EXCLUDES(mu_);

 private:
  const MetricKind kind_;
  const std::vector<double> buckets_;
  mutable Mutex mu_;
  double value_ CHORUS_GUARDED_BY(mu_) = 0;  // counter, gauge; a histogram's sum
  uint64_t count_ CHORUS_GUARDED_BY(mu_) = 0;
  // Histogram: observations per bucket (not cumulative), the last one +Inf's.
  std::vector<uint64_t> bucket_counts_ CHORUS_GUARDED_BY(mu_);
};

// One family: a name, its description and kind, and its metrics by labels.
// Thread-safe; lock order: a family's mutex, then a metric's.
class CustomMetricFamily {
 public:
  CustomMetricFamily(std::string name, std::string description, MetricKind kind)
      : name_(std::move(name)), description_(std::move(description)), kind_(kind) {}
  CustomMetricFamily(const CustomMetricFamily&) = delete;
  CustomMetricFamily& operator=(const CustomMetricFamily&) = delete;

  const std::string& name() const { return name_; }
  const std::string& description() const { return description_; }
  MetricKind kind() const { return kind_; }

  // The family's metric with `labels`, made on the first call with them (the
  // same object for every later call, whose `buckets` are then ignored, as
  // in Triton). InvalidArgument: a label name Prometheus refuses ("Invalid
  // label name"), or buckets for a counter or gauge, none or unsorted ones
  // for a histogram.
  StatusOr<std::shared_ptr<CustomMetric>> GetOrAddMetric(const MetricLabels& labels,
                                                         const std::vector<double>& buckets)
      CHORUS_EXCLUDES(mu_);

  // Writes the family in Prometheus' text format: "# HELP" (when there is a
  // description), "# TYPE", then its metrics ordered by labels. Nothing when
  // it has no metric (as prometheus-cpp).
  void Render(std::ostream& out) const CHORUS_EXCLUDES(mu_);

 private:
  const std::string name_;
  const std::string description_;
  const MetricKind kind_;
  mutable Mutex mu_;
  std::map<MetricLabels, std::shared_ptr<CustomMetric>> metrics_ CHORUS_GUARDED_BY(mu_);
};

// The process' family called `name`, made with `description` and `kind` on
// the first call (a later call gets it, its first description kept).
// AlreadyExists "Family name already exists with different type" when it was
// made with another kind; InvalidArgument "Invalid metric name" for a name
// Prometheus refuses, "Unsupported kind passed to MetricFamily constructor."
// for a kind outside MetricKind. Thread-safe.
StatusOr<std::shared_ptr<CustomMetricFamily>> GetOrAddMetricFamily(const std::string& name,
                                                                   const std::string& description,
                                                                   int64_t kind);

// Every family of the process in Prometheus' text format (as
// CustomMetricFamily::Render): counters, then gauges, then histograms, each
// in the order they were made (prometheus-cpp's registry order). Empty when
// no model made a metric.
std::string RenderCustomMetrics();

}  // namespace chorus::python_backend

#endif  // CHORUS_SERVER_PYTHON_BACKEND_CUSTOM_METRICS_H_
