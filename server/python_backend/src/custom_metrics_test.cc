#include "chorus/server/python_backend/custom_metrics.h"

#include <gtest/gtest.h>
#include <torch/custom_class.h>

#include <functional>
#include <sstream>
#include <thread>
#include <vector>

namespace chorus::python_backend {
namespace {

// The registry is the process'; each test uses names of its own.
std::shared_ptr<CustomMetricFamily> Family(const std::string& name, const std::string& description,
                                           MetricKind kind) {
  StatusOr<std::shared_ptr<CustomMetricFamily>> family =
      GetOrAddMetricFamily(name, description, static_cast<int64_t>(kind));
  EXPECT_TRUE(family.ok()) << family.status().ToString();
  return *family;
}

std::shared_ptr<CustomMetric> Metric(const std::shared_ptr<CustomMetricFamily>& family,
                                     const MetricLabels& labels,
                                     const std::vector<double>& buckets = {}) {
  StatusOr<std::shared_ptr<CustomMetric>> metric = family->GetOrAddMetric(labels, buckets);
  EXPECT_TRUE(metric.ok()) << metric.status().ToString();
  return *metric;
}

std::string Rendered(const CustomMetricFamily& family) {
  std::ostringstream out;
  family.Render(out);
  return out.str();
}

TEST(CustomMetricsTest, CounterCountsAndRendersAsTriton) {
  auto family = Family("t_counter", "Cumulative time", MetricKind::kCounter);
  auto labelled = Metric(family, {{"version", "1"}, {"model", "m"}});
  auto bare = Metric(family, {});
  ASSERT_TRUE(labelled->Increment(164000).ok());
  ASSERT_TRUE(labelled->Increment(74).ok());
  ASSERT_TRUE(bare->Increment(3).ok());
  EXPECT_EQ(*labelled->Value(), 164074);
  EXPECT_EQ(Rendered(*family),
            "# HELP t_counter Cumulative time\n"
            "# TYPE t_counter counter\n"
            "t_counter 3\n"
            "t_counter{model=\"m\",version=\"1\"} 164074\n");
}

TEST(CustomMetricsTest, SameNameAndLabelsAreTheSameObjects) {
  auto first = Family("t_shared", "first description", MetricKind::kGauge);
  auto second = Family("t_shared", "second description", MetricKind::kGauge);
  EXPECT_EQ(first, second);
  EXPECT_EQ(second->description(), "first description");
  auto metric = Metric(first, {{"a", "1"}});
  EXPECT_EQ(Metric(second, {{"a", "1"}}), metric);
  EXPECT_NE(Metric(second, {{"a", "2"}}), metric);
}

TEST(CustomMetricsTest, SameNameWithAnotherKindIsRefused) {
  Family("t_kind", "", MetricKind::kCounter);
  StatusOr<std::shared_ptr<CustomMetricFamily>> other =
      GetOrAddMetricFamily("t_kind", "", static_cast<int64_t>(MetricKind::kGauge));
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(other.status().message(), "Family name already exists with different type");
}

TEST(CustomMetricsTest, GaugeSetsAndMovesBothWaysWithSortedLabels) {
  auto family = Family("t_gauge", "a gauge", MetricKind::kGauge);
  auto metric = Metric(family, {{"b", "2"}, {"a", "1"}});
  ASSERT_TRUE(metric->Set(10).ok());
  ASSERT_TRUE(metric->Increment(-2.5).ok());
  EXPECT_EQ(*metric->Value(), 7.5);
  EXPECT_EQ(Rendered(*family),
            "# HELP t_gauge a gauge\n"
            "# TYPE t_gauge gauge\n"
            "t_gauge{a=\"1\",b=\"2\"} 7.5\n");
}

TEST(CustomMetricsTest, HistogramRendersCountSumAndCumulativeBuckets) {
  auto family = Family("t_hist", "a hist", MetricKind::kHistogram);
  auto metric = Metric(family, {{"x", "y"}}, {1, 2, 5});
  ASSERT_TRUE(metric->Observe(2).ok());  // on a bound: counted in it (le)
  ASSERT_TRUE(metric->Observe(6.5).ok());
  EXPECT_EQ(Rendered(*family),
            "# HELP t_hist a hist\n"
            "# TYPE t_hist histogram\n"
            "t_hist_count{x=\"y\"} 2\n"
            "t_hist_sum{x=\"y\"} 8.5\n"
            "t_hist_bucket{x=\"y\",le=\"1\"} 0\n"
            "t_hist_bucket{x=\"y\",le=\"2\"} 1\n"
            "t_hist_bucket{x=\"y\",le=\"5\"} 1\n"
            "t_hist_bucket{x=\"y\",le=\"+Inf\"} 2\n");
  // The same labels again: the same histogram, its first buckets kept.
  EXPECT_EQ(Metric(family, {{"x", "y"}}, {0.5}), metric);
}

TEST(CustomMetricsTest, HistogramWithoutBucketsHasOnlyInf) {
  auto family = Family("t_hist_plain", "", MetricKind::kHistogram);
  ASSERT_TRUE(Metric(family, {}, {})->Observe(0.25).ok());
  EXPECT_EQ(Rendered(*family),
            "# TYPE t_hist_plain histogram\n"
            "t_hist_plain_count 1\n"
            "t_hist_plain_sum 0.25\n"
            "t_hist_plain_bucket{le=\"+Inf\"} 1\n");
}

TEST(CustomMetricsTest, OperationsAKindLacksFailWithTritonsReasons) {
  auto counter = Metric(Family("t_ops_c", "", MetricKind::kCounter), {});
  auto gauge = Metric(Family("t_ops_g", "", MetricKind::kGauge), {});
  auto histogram = Metric(Family("t_ops_h", "", MetricKind::kHistogram), {}, {1});
  EXPECT_EQ(counter->Increment(-1).message(),
            "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
            "non-negative values.");
  EXPECT_EQ(counter->Set(1).message(), "TRITONSERVER_METRIC_KIND_COUNTER does not support Set");
  EXPECT_EQ(counter->Observe(1).message(),
            "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe");
  EXPECT_EQ(gauge->Observe(1).message(), "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe");
  EXPECT_EQ(histogram->Increment(1).message(),
            "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment");
  EXPECT_EQ(histogram->Set(1).message(), "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Set");
  EXPECT_EQ(histogram->Value().status().message(),
            "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value");
  EXPECT_EQ(*counter->Value(), 0);  // the refused calls changed nothing
}

TEST(CustomMetricsTest, InvalidArgumentsAreRefused) {
  auto message = [](const Status& status) { return status.message(); };
  EXPECT_EQ(message(GetOrAddMetricFamily("1bad", "", 0).status()), "Invalid metric name");
  EXPECT_EQ(message(GetOrAddMetricFamily("__reserved", "", 0).status()), "Invalid metric name");
  EXPECT_EQ(message(GetOrAddMetricFamily("t_kind_bad", "", 3).status()),
            "Unsupported kind passed to MetricFamily constructor.");
  EXPECT_TRUE(GetOrAddMetricFamily("t_ok:colon", "", 0).ok());
  auto counter = Family("t_args_c", "", MetricKind::kCounter);
  auto histogram = Family("t_args_h", "", MetricKind::kHistogram);
  EXPECT_EQ(message(counter->GetOrAddMetric({{"bad-label", "x"}}, {}).status()),
            "Invalid label name");
  EXPECT_EQ(message(counter->GetOrAddMetric({}, {1.0}).status()),
            "Unexpected args found in counter Metric constructor.");
  EXPECT_EQ(message(histogram->GetOrAddMetric({{"le", "1"}}, {1.0}).status()),
            "Invalid label name");
  EXPECT_EQ(message(histogram->GetOrAddMetric({}, {2.0, 1.0}).status()),
            "Bucket Boundaries must be strictly sorted");
  EXPECT_EQ(Rendered(*counter), "");  // no metric was made: nothing rendered
}

TEST(CustomMetricsTest, ValuesAndLabelTextsAreWrittenAsPrometheusReadsThem) {
  auto family = Family("t_texts", "line one\nback\\slash", MetricKind::kGauge);
  ASSERT_TRUE(Metric(family, {{"q", "say \"hi\"\n\\"}})->Set(1e20).ok());
  ASSERT_TRUE(Metric(family, {{"q", "tenth"}})->Set(0.1).ok());
  EXPECT_EQ(Rendered(*family),
            "# HELP t_texts line one\\nback\\\\slash\n"
            "# TYPE t_texts gauge\n"
            "t_texts{q=\"say \\\"hi\\\"\\n\\\\\"} 1e+20\n"
            "t_texts{q=\"tenth\"} 0.1\n");
}

TEST(CustomMetricsTest, RenderCustomMetricsOrdersCountersGaugesHistograms) {
  auto histogram = Family("t_order_h", "h", MetricKind::kHistogram);
  auto gauge = Family("t_order_g", "g", MetricKind::kGauge);
  auto counter = Family("t_order_c", "c", MetricKind::kCounter);
  ASSERT_TRUE(Metric(histogram, {}, {1})->Observe(1).ok());
  ASSERT_TRUE(Metric(gauge, {})->Set(2).ok());
  ASSERT_TRUE(Metric(counter, {})->Increment(3).ok());
  const std::string page = RenderCustomMetrics();
  const size_t c = page.find("# TYPE t_order_c counter\nt_order_c 3\n");
  const size_t g = page.find("# TYPE t_order_g gauge\nt_order_g 2\n");
  const size_t h = page.find("# TYPE t_order_h histogram\nt_order_h_count 1\n");
  ASSERT_NE(c, std::string::npos) << page;
  ASSERT_NE(g, std::string::npos) << page;
  ASSERT_NE(h, std::string::npos) << page;
  EXPECT_LT(c, g);
  EXPECT_LT(g, h);
}

TEST(CustomMetricsTest, ThreadsShareOneFamilyAndMetric) {
  constexpr int kThreads = 8;
  constexpr int kIncrements = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kIncrements; ++i) {
        auto family = Family("t_threads", "", MetricKind::kCounter);
        ASSERT_TRUE(Metric(family, {{"shared", "yes"}})->Increment(1).ok());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  auto metric = Metric(Family("t_threads", "", MetricKind::kCounter), {{"shared", "yes"}});
  EXPECT_EQ(*metric->Value(), kThreads * kIncrements);
}

// Calls `method` of a torch custom class object as Python does.
c10::IValue Call(const c10::IValue& self, const std::string& method,
                 std::vector<c10::IValue> args) {
  args.insert(args.begin(), self);
  return self.type()->expectRef<c10::ClassType>().getMethod(method)(std::move(args));
}

c10::IValue NewFamily(const std::string& name, int64_t kind) {
  c10::ClassTypePtr type = torch::getCustomClass("__torch__.torch.classes.chorus.MetricFamily");
  EXPECT_NE(type, nullptr);
  auto family = c10::ivalue::Object::create(c10::StrongTypePtr(nullptr, type), 1);
  Call(family, "__init__", {name, std::string("from torch"), kind});
  return family;
}

std::string ErrorOf(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "no error";
}

// The torch classes metrics.py calls, with its arguments' types.
TEST(CustomMetricsTest, TorchClassesReachTheRegistry) {
  c10::Dict<std::string, std::string> labels;
  labels.insert("k", "v");
  const c10::List<double> no_buckets;
  c10::IValue metric = Call(NewFamily("t_torch", 0), "metric", {labels, no_buckets});
  Call(metric, "increment", {2.5});
  c10::IValue again = Call(NewFamily("t_torch", 0), "metric", {labels, no_buckets});
  Call(again, "increment", {1.0});
  EXPECT_EQ(Call(metric, "value", {}).toDouble(), 3.5);
  EXPECT_EQ(*Metric(Family("t_torch", "", MetricKind::kCounter), {{"k", "v"}})->Value(), 3.5);
  EXPECT_EQ(ErrorOf([] { NewFamily("t_torch", 1); }),
            "Family name already exists with different type");
  EXPECT_EQ(ErrorOf([&] { Call(metric, "set", {1.0}); }),
            "TRITONSERVER_METRIC_KIND_COUNTER does not support Set");
  c10::IValue histogram =
      Call(NewFamily("t_torch_hist", 2), "metric", {labels, c10::List<double>({1.0, 2.0})});
  Call(histogram, "observe", {1.5});
  std::ostringstream out;
  Family("t_torch_hist", "", MetricKind::kHistogram)->Render(out);
  EXPECT_NE(out.str().find("t_torch_hist_bucket{k=\"v\",le=\"2\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace chorus::python_backend
