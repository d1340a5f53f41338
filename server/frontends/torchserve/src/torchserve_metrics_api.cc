#include "chorus/server/frontends/torchserve/torchserve_metrics_api.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <set>

#include <fmt/format.h>

namespace chorus {
namespace {

// One of TorchServe's frontend counters: its name and its value for a model.
struct Counter {
  const char* name;
  std::function<double(const inference::ModelStatistics&)> value;
};

std::string Hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// A label value as Prometheus' text format quotes it.
std::string Escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? 'n' : c;
  }
  return out;
}

std::string Render(const inference::ModelStatisticsResponse& statistics,
                   const std::set<std::string>& names) {
  static const Counter kCounters[] = {
      {"ts_inference_requests_total",
       [](const inference::ModelStatistics& model) {
         const auto& stats = model.inference_stats();
         return static_cast<double>(stats.success().count() + stats.fail().count());
       }},
      {"ts_inference_latency_microseconds",
       [](const inference::ModelStatistics& model) {
         const auto& stats = model.inference_stats();
         return (stats.success().ns() + stats.fail().ns()) / 1e3;
       }},
      {"ts_queue_latency_microseconds",
       [](const inference::ModelStatistics& model) {
         return model.inference_stats().queue().ns() / 1e3;
       }},
  };
  const std::string host = Escaped(Hostname());
  std::string text;
  for (const Counter& counter : kCounters) {
    if (!names.empty() && names.count(counter.name) == 0) continue;
    text += fmt::format(
        "# HELP {0} Torchserve prometheus counter metric with unit: {1}\n"
        "# TYPE {0} counter\n",
        counter.name,
        std::string_view(counter.name).find("microseconds") != std::string::npos ? "Microseconds"
                                                                                 : "Count");
    for (const inference::ModelStatistics& model : statistics.model_stats()) {
      text +=
          fmt::format("{}{{model_name=\"{}\",model_version=\"default\",hostname=\"{}\",}} {:.1f}\n",
                      counter.name, Escaped(model.name()), host, counter.value(model));
    }
  }
  return text;
}

}  // namespace

void TorchServeMetricsApi::Register(HttpEndpoint* endpoint) {
  endpoint->routes().Get(
      "/metrics", [this](const httplib::Request& request, httplib::Response& response) {
        std::set<std::string> names;
        for (size_t i = 0; i < request.get_param_value_count("name[]"); ++i) {
          names.insert(request.get_param_value("name[]", i));
        }
        inference::ModelStatisticsResponse statistics;
        core_->ModelStatistics("", "", &statistics).IgnoreError();  // none loaded: no lines
        response.set_content(Render(statistics, names), "text/plain; version=0.0.4");
      });
}

}  // namespace chorus
