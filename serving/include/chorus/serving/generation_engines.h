// Server-side text generation for a generative model (chorus.generation's
// protocol): an engine on each of the interpreters the placement pins it to,
// each driven a step at a time by its own loop thread, which batches every
// request it holds continuously (they join at the next step and leave when
// done) and hands each its new text. A step is vLLM's: schedule (admit new
// requests, drop stopped ones), execute (the engine's step in its
// interpreter), update (statistics, chunks to their requests).
//
//   auto engines = GenerationEngines::Start(model, placement, options).value();
//   GenerationRequest request{...};      // prompt, sampling parameters, callbacks
//   engines->Submit(std::move(request));
//
// A loop holds its interpreter only for the duration of a step, so other models
// share it between steps. A request is cancelled (its cache freed) when its
// `cancelled` flag is set, its deadline passes or on_chunk returns false.
#ifndef CHORUS_SERVING_GENERATION_SCHEDULER_H_
#define CHORUS_SERVING_GENERATION_SCHEDULER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus/common/crash_label.h"
#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/interpreter/placement.h"
#include "chorus/package/model.h"
#include "chorus/serving/generation_request.h"
#include "chorus/serving/scheduling_options.h"

namespace chorus {

// Seconds, in cumulative buckets (Prometheus' histogram).
struct LatencyHistogram {
  static constexpr double kBounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                       0.25,  0.5,    1,     2.5,  5,     10};
  uint64_t buckets[std::size(kBounds)] = {};  // observations <= each bound
  uint64_t count = 0;
  double sum = 0;
  void Observe(double seconds);
  void Add(const LatencyHistogram& other);
};

struct GenerationStats {
  int running = 0;  // sequences in engines' batches
  int waiting = 0;  // queued for cache blocks or not yet handed to an engine
  int cache_blocks_used = 0;
  int cache_blocks_total = 0;
  uint64_t prefix_cache_queries = 0;     // prompt tokens looked up in the prefix cache
  uint64_t prefix_cache_hits = 0;        // of which were there
  uint64_t generated_tokens = 0;         // since the scheduler started
  LatencyHistogram time_to_first_token;  // from Submit to the first token
  LatencyHistogram inter_token_latency;  // between a request's tokens
};

class GenerationEngines {
 public:
  // Engines on up to options.engines interpreters `placement` pins them to
  // (it outlives them). `model`'s replicas must implement chorus.generation's
  // protocol (checked in each interpreter when its engine is made; requests
  // then fail with why). FAILED_PRECONDITION when training jobs hold every
  // interpreter.
  static StatusOr<std::unique_ptr<GenerationEngines>> Start(std::shared_ptr<Model> model,
                                                            InterpreterPlacement* placement,
                                                            GenerationOptions options);
  // Fails what is queued or running (UNAVAILABLE) and joins the loops.
  ~GenerationEngines();
  GenerationEngines(const GenerationEngines&) = delete;
  GenerationEngines& operator=(const GenerationEngines&) = delete;

  // The interpreters the engines run on.
  const std::vector<int>& interpreters() const { return lease_.interpreters(); }

  // Hands `request` to the engine with the least work; UNAVAILABLE (through
  // request.done) once draining. Thread-safe.
  void Submit(GenerationRequest request);
  // Takes no new requests and waits until every request queued or running
  // has finished, or `deadline`; false if some had not (they fail when the
  // scheduler is destroyed). Thread-safe.
  bool Drain(std::chrono::steady_clock::time_point deadline);
  // A snapshot over all engines. Thread-safe.
  GenerationStats Stats() const;

 private:
  struct Held;  // a request with its timing
  struct Loop;
  struct StepInputs;
  struct StepResult;
  GenerationEngines(std::shared_ptr<Model> model, InterpreterLease lease,
                    InterpreterManager* manager, GenerationOptions options);
  void Run(Loop& loop);
  // One step of `loop`'s engine with `fresh` requests added.
  void Step(Loop& loop, std::vector<std::pair<std::string, Held>> fresh);
  // Schedule: ends the requests that must stop, admits `fresh` ones.
  StepInputs Schedule(Loop& loop, std::vector<std::pair<std::string, Held>> fresh);
  // The engine's step result, from what its host returned.
  static StatusOr<StepResult> ReadStep(const c10::IValue& value);
  // Execute: the engine's step in the loop's interpreter.
  StatusOr<StepResult> Execute(Loop& loop, const StepInputs& inputs);
  // Update: the loop's statistics, then each request's chunk or end.
  void Update(Loop& loop, StepResult& result);
  void RecordStats(Loop& loop, const StepResult& result);
  // Ends `held` with `status` (its done callback), counting it off the loop.
  void Finish(Loop& loop, Held& held, const Status& status);

  const std::shared_ptr<Model> model_;
  InterpreterLease lease_;  // the interpreters, given back last
  InterpreterManager* const manager_;
  const GenerationOptions options_;
  ReplicatedObject hosts_;  // an EngineHost per interpreter
  std::atomic<uint64_t> next_id_{0};
  std::vector<std::unique_ptr<Loop>> loops_;
};

}  // namespace chorus

#endif  // CHORUS_SERVING_GENERATION_SCHEDULER_H_
