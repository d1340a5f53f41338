#include "chorus/server/models/model_metrics.h"

#include <iterator>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "chorus/common/prometheus.h"
#include "chorus/server/python_backend/custom_metrics.h"

namespace chorus {
namespace {

std::string Labels(const LoadedModel& model) {
  return "{model=\"" + model.name() + "\",version=\"" + model.version() + "\"}";
}

void AppendHistogram(std::ostream& out, const char* name, const std::string& labels,
                     const LatencyHistogram& histogram) {
  for (size_t i = 0; i < std::size(LatencyHistogram::kBounds); ++i) {
    out << name << "_bucket{" << labels << ",le=\"" << LatencyHistogram::kBounds[i] << "\"} "
        << histogram.buckets[i] << "\n";
  }
  out << name << "_bucket{" << labels << ",le=\"+Inf\"} " << histogram.count << "\n";
  out << name << "_sum{" << labels << "} " << histogram.sum << "\n";
  out << name << "_count{" << labels << "} " << histogram.count << "\n";
}

struct GenerativeModel {
  std::string labels;       // chorus' own: model and version
  std::string vllm_labels;  // vLLM's: model_name
  GenerationStats stats;
};

// One gauge or counter per generative model, `value` of its statistics.
template <typename Value>
void AppendEach(std::ostream& out, const std::vector<GenerativeModel>& models, bool vllm,
                const char* name, const char* type, const char* help, Value value) {
  AppendMetricHeader(out, name, type, help);
  for (const GenerativeModel& model : models) {
    out << name << "{" << (vllm ? model.vllm_labels : model.labels) << "} " << value(model.stats)
        << "\n";
  }
}

void AppendHistograms(std::ostream& out, const std::vector<GenerativeModel>& models, bool vllm,
                      const char* name, const char* help,
                      LatencyHistogram GenerationStats::*histogram) {
  AppendMetricHeader(out, name, "histogram", help);
  for (const GenerativeModel& model : models) {
    AppendHistogram(out, name, vllm ? model.vllm_labels : model.labels, model.stats.*histogram);
  }
}

// Per generative model: sequences, KV cache use, tokens and their latencies.
void AppendChorusGenerationMetrics(std::ostream& out, const std::vector<GenerativeModel>& models) {
  using S = const GenerationStats&;
  AppendEach(out, models, false, "chorus_generation_running_sequences", "gauge",
             "Sequences in the engines' batches", [](S s) { return s.running; });
  AppendEach(out, models, false, "chorus_generation_waiting_sequences", "gauge",
             "Sequences waiting for KV cache blocks or for their engine",
             [](S s) { return s.waiting; });
  AppendEach(out, models, false, "chorus_generation_kv_cache_blocks_used", "gauge",
             "KV cache blocks in use", [](S s) { return s.cache_blocks_used; });
  AppendEach(out, models, false, "chorus_generation_kv_cache_blocks", "gauge",
             "KV cache blocks in all", [](S s) { return s.cache_blocks_total; });
  AppendEach(out, models, false, "chorus_generation_prefix_cache_queries_total", "counter",
             "Prompt tokens looked up in the prefix cache",
             [](S s) { return s.prefix_cache_queries; });
  AppendEach(out, models, false, "chorus_generation_prefix_cache_hits_total", "counter",
             "Prompt tokens found in the prefix cache", [](S s) { return s.prefix_cache_hits; });
  AppendEach(out, models, false, "chorus_generation_tokens_total", "counter", "Tokens generated",
             [](S s) { return s.generated_tokens; });
  AppendHistograms(out, models, false, "chorus_generation_time_to_first_token_seconds",
                   "From a request's arrival to its first token",
                   &GenerationStats::time_to_first_token);
  AppendHistograms(out, models, false, "chorus_generation_inter_token_latency_seconds",
                   "Between a request's successive tokens", &GenerationStats::inter_token_latency);
}

// The same under vLLM's names (model_name label), which its dashboards read.
// The cache usage gauges mean the engines' KV cache wherever it lives.
void AppendVllmMetrics(std::ostream& out, const std::vector<GenerativeModel>& models) {
  using S = const GenerationStats&;
  auto usage = [](S s) {
    return s.cache_blocks_total > 0
               ? static_cast<double>(s.cache_blocks_used) / s.cache_blocks_total
               : 0.0;
  };
  AppendEach(out, models, true, "vllm:num_requests_running", "gauge",
             "Requests in the engines' batches", [](S s) { return s.running; });
  AppendEach(out, models, true, "vllm:num_requests_waiting", "gauge", "Requests waiting",
             [](S s) { return s.waiting; });
  AppendEach(out, models, true, "vllm:kv_cache_usage_perc", "gauge",
             "Fraction of KV cache blocks in use (1 = 100%)", usage);
  AppendEach(out, models, true, "vllm:gpu_cache_usage_perc", "gauge",
             "Fraction of KV cache blocks in use (1 = 100%; on the CPU without a GPU)", usage);
  AppendEach(out, models, true, "vllm:prefix_cache_queries_total", "counter",
             "Prompt tokens looked up in the prefix cache",
             [](S s) { return s.prefix_cache_queries; });
  AppendEach(out, models, true, "vllm:prefix_cache_hits_total", "counter",
             "Prompt tokens found in the prefix cache", [](S s) { return s.prefix_cache_hits; });
  AppendEach(out, models, true, "vllm:generation_tokens_total", "counter", "Tokens generated",
             [](S s) { return s.generated_tokens; });
  AppendHistograms(out, models, true, "vllm:time_to_first_token_seconds",
                   "Time to first token in seconds", &GenerationStats::time_to_first_token);
  AppendHistograms(out, models, true, "vllm:inter_token_latency_seconds",
                   "Inter-token latency in seconds", &GenerationStats::inter_token_latency);
}

void AppendGenerationMetrics(std::ostream& out,
                             const std::vector<std::shared_ptr<LoadedModel>>& models) {
  std::vector<GenerativeModel> generative;
  for (const auto& model : models) {
    if (GenerationEngines* generation = model->generation()) {
      generative.push_back({"model=\"" + model->name() + "\",version=\"" + model->version() + "\"",
                            "model_name=\"" + model->name() + "\"", generation->Stats()});
    }
  }
  if (generative.empty()) return;
  AppendChorusGenerationMetrics(out, generative);
  AppendVllmMetrics(out, generative);
}

}  // namespace

namespace {

using LoadedModels = std::vector<std::shared_ptr<LoadedModel>>;

void AppendRequestMetrics(std::ostream& out, const LoadedModels& models,
                          const std::vector<ModelStatsSnapshot>& stats) {
  auto per_model = [&](const char* name, const char* type, const char* help, auto value) {
    AppendMetricHeader(out, name, type, help);
    for (size_t i = 0; i < models.size(); ++i) {
      out << name << Labels(*models[i]) << " " << value(stats[i]) << "\n";
    }
  };
  using S = const ModelStatsSnapshot&;
  per_model("nv_inference_request_success", "counter", "Successful inference requests",
            [](S s) { return s.success.count; });
  per_model("nv_inference_request_failure", "counter", "Failed inference requests",
            [](S s) { return s.fail.count; });
  per_model("nv_inference_count", "counter", "Inferences performed (batched samples count each)",
            [](S s) { return s.inference_count; });
  per_model("nv_inference_exec_count", "counter", "Model executions (a batch counts once)",
            [](S s) { return s.execution_count; });
  per_model("nv_inference_request_duration_us", "counter",
            "Cumulative end-to-end request duration, microseconds",
            [](S s) { return (s.success.ns + s.fail.ns) / 1000; });
  per_model("nv_inference_queue_duration_us", "counter",
            "Cumulative time requests waited in the queue, microseconds",
            [](S s) { return s.queue.ns / 1000; });
  per_model("nv_inference_compute_input_duration_us", "counter",
            "Cumulative time decoding requests' input tensors, microseconds",
            [](S s) { return s.compute_input_ns / 1000; });
  per_model("nv_inference_compute_infer_duration_us", "counter",
            "Cumulative model execution time, microseconds",
            [](S s) { return s.compute_infer.ns / 1000; });
  per_model("nv_inference_compute_output_duration_us", "counter",
            "Cumulative time encoding responses' output tensors, microseconds",
            [](S s) { return s.compute_output_ns / 1000; });
  per_model("nv_inference_pending_request_count", "gauge", "Requests queued or running",
            [](S s) { return s.pending; });
  per_model("nv_cache_num_hits_per_model", "counter", "Requests answered from the response cache",
            [](S s) { return s.cache_hit.count; });
  per_model("nv_cache_num_misses_per_model", "counter",
            "Requests of a cached model not found in the response cache",
            [](S s) { return s.cache_miss.count; });
  per_model("nv_cache_hit_duration_per_model", "counter",
            "Cumulative time of response cache hits, microseconds",
            [](S s) { return s.cache_hit.ns / 1000; });
  per_model("nv_cache_miss_duration_per_model", "counter",
            "Cumulative time of response cache misses (lookup and insertion), microseconds",
            [](S s) { return s.cache_miss.ns / 1000; });
}

void AppendBatchSizeHistogram(std::ostream& out, const LoadedModels& models,
                              const std::vector<ModelStatsSnapshot>& stats) {
  AppendMetricHeader(out, "chorus_batch_size", "histogram", "Samples per model execution");
  const int64_t bounds[] = {1, 2, 4, 8, 16, 32, 64, 128};
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string labels =
        "model=\"" + models[i]->name() + "\",version=\"" + models[i]->version() + "\"";
    uint64_t total = 0, sum = 0;
    for (const auto& [size, duration] : stats[i].batches) {
      total += duration.count;
      sum += duration.count * size;
    }
    for (int64_t bound : bounds) {
      uint64_t cumulative = 0;
      for (const auto& [size, duration] : stats[i].batches) {
        if (size <= bound) cumulative += duration.count;
      }
      out << "chorus_batch_size_bucket{" << labels << ",le=\"" << bound << "\"} " << cumulative
          << "\n";
    }
    out << "chorus_batch_size_bucket{" << labels << ",le=\"+Inf\"} " << total << "\n";
    out << "chorus_batch_size_sum{" << labels << "} " << sum << "\n";
    out << "chorus_batch_size_count{" << labels << "} " << total << "\n";
  }
}

void AppendInterpreterMetrics(std::ostream& out, const InterpreterManager& manager) {
  const auto interpreters = manager.Stats();
  AppendMetricHeader(out, "chorus_interpreter_busy_seconds_total", "counter",
                     "Time sessions held each interpreter, seconds");
  for (size_t i = 0; i < interpreters.size(); ++i) {
    out << "chorus_interpreter_busy_seconds_total{interpreter=\"" << i << "\"} "
        << interpreters[i].busy_seconds << "\n";
  }
  AppendMetricHeader(out, "chorus_interpreter_sessions", "gauge",
                     "Sessions open on each interpreter");
  for (size_t i = 0; i < interpreters.size(); ++i) {
    out << "chorus_interpreter_sessions{interpreter=\"" << i << "\"} " << interpreters[i].sessions
        << "\n";
  }
}

}  // namespace

std::string RenderModelMetrics(const ModelRepository& repository,
                               const InterpreterManager& manager) {
  std::ostringstream out;
  const LoadedModels models = repository.Loaded();
  std::vector<ModelStatsSnapshot> stats;
  for (const auto& model : models) stats.push_back(model->Snapshot());
  AppendRequestMetrics(out, models, stats);
  AppendBatchSizeHistogram(out, models, stats);
  AppendGenerationMetrics(out, models);
  AppendInterpreterMetrics(out, manager);
  // Python-backend models' own metrics (pb_utils.MetricFamily), process-wide.
  out << python_backend::RenderCustomMetrics();
  return out.str();
}

}  // namespace chorus
