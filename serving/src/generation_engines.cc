#include "chorus/serving/generation_engines.h"

#include <ATen/core/ivalue.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "chorus/common/crash_report.h"
#include "chorus/common/logging.h"
#include "chorus/common/process_stats.h"

namespace chorus {

using Clock = std::chrono::steady_clock;

void LatencyHistogram::Observe(double seconds) {
  for (size_t i = 0; i < std::size(kBounds); ++i) buckets[i] += seconds <= kBounds[i];
  count += 1;
  sum += seconds;
}

void LatencyHistogram::Add(const LatencyHistogram& other) {
  for (size_t i = 0; i < std::size(kBounds); ++i) buckets[i] += other.buckets[i];
  count += other.count;
  sum += other.sum;
}

struct GenerationEngines::Held {
  GenerationRequest request;
  Clock::time_point submitted;
  Clock::time_point last_token;
  bool has_token = false;
};

struct GenerationEngines::Loop {
  int index = 0;
  Mutex mu;
  CondVar changed;
  std::vector<std::pair<std::string, Held>> inbox CHORUS_GUARDED_BY(mu);
  CondVar idle;  // unfinished reached 0
  bool stopping CHORUS_GUARDED_BY(mu) = false;
  bool draining CHORUS_GUARDED_BY(mu) = false;
  GenerationStats stats CHORUS_GUARDED_BY(mu);
  std::atomic<int> load{0};  // requests in the inbox or the engine: where the next one goes
  // load, and requests whose done callback still runs: what Drain waits for.
  std::atomic<int> unfinished{0};
  // The loop thread's own: requests the engine holds, and those to drop from it.
  std::map<std::string, Held> active;
  std::vector<std::string> to_abort;
  std::thread thread;
};

// The engine's step result, read from the IValue the host returned.
struct GenerationEngines::StepResult {
  std::vector<std::pair<std::string, std::string>> refused;
  std::vector<std::pair<std::string, GenerationChunk>> outputs;
  GenerationStats stats;
};

// What the engine's step takes: the requests added and those to drop.
struct GenerationEngines::StepInputs {
  c10::impl::GenericList added{c10::AnyType::get()};
  c10::List<std::string> aborted;
};

StatusOr<GenerationEngines::StepResult> GenerationEngines::ReadStep(const c10::IValue& value) {
  if (!value.isTuple() || value.toTupleRef().elements().size() != 3) {
    return InternalError("EngineHost.step returned " + std::string(value.tagKind()));
  }
  const auto& parts = value.toTupleRef().elements();
  StepResult result;
  for (const c10::IValue& item : parts[0].toListRef()) {
    const auto& pair = item.toTupleRef().elements();
    result.refused.emplace_back(pair[0].toStringRef(), pair[1].toStringRef());
  }
  for (const c10::IValue& item : parts[1].toListRef()) {
    const auto& out = item.toTupleRef().elements();
    GenerationChunk chunk;
    chunk.text = out[1].toStringRef();
    chunk.new_tokens = static_cast<int>(out[2].toInt());
    chunk.finish_reason = out[3].toStringRef();
    chunk.prompt_tokens = static_cast<int>(out[4].toInt());
    chunk.completion_tokens = static_cast<int>(out[5].toInt());
    result.outputs.emplace_back(out[0].toStringRef(), std::move(chunk));
  }
  const auto& stats = parts[2].toListRef();
  if (stats.size() != 6) return InternalError("EngineHost.step's statistics are not 6 numbers");
  result.stats.running = static_cast<int>(stats[0].toInt());
  result.stats.waiting = static_cast<int>(stats[1].toInt());
  result.stats.cache_blocks_used = static_cast<int>(stats[2].toInt());
  result.stats.cache_blocks_total = static_cast<int>(stats[3].toInt());
  result.stats.prefix_cache_queries = static_cast<uint64_t>(stats[4].toInt());
  result.stats.prefix_cache_hits = static_cast<uint64_t>(stats[5].toInt());
  return result;
}

namespace {

// Why `request` must stop now, or OK.
Status StopReason(const GenerationRequest& request, Clock::time_point now) {
  if (request.cancelled != nullptr && request.cancelled->load()) {
    return Status(StatusCode::kCancelled, "the client cancelled the request");
  }
  if (now >= request.deadline) return DeadlineExceededError("the request's deadline passed");
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<GenerationEngines>> GenerationEngines::Start(
    std::shared_ptr<Model> model, InterpreterPlacement* placement, GenerationOptions options) {
  const int wanted = options.engines > 0 ? options.engines : placement->manager()->size();
  CHORUS_ASSIGN_OR_RETURN(InterpreterLease lease,
                          placement->PinShared(wanted, options.label.text()));
  Log().info("{}: generation engines on interpreters {}", options.label.text(),
             fmt::join(lease.interpreters(), ", "));
  return std::unique_ptr<GenerationEngines>(new GenerationEngines(
      std::move(model), std::move(lease), placement->manager(), std::move(options)));
}

GenerationEngines::GenerationEngines(std::shared_ptr<Model> model, InterpreterLease lease,
                                     InterpreterManager* manager, GenerationOptions options)
    : model_(std::move(model)),
      lease_(std::move(lease)),
      manager_(manager),
      options_(std::move(options)) {
  std::shared_ptr<Model> shared = model_;
  const GenerationOptions engine = options_;
  hosts_ = manager_->Replicate([shared, engine](InterpreterSession& session) -> StatusOr<Object> {
    CHORUS_ASSIGN_OR_RETURN(Object replica, shared->In(session));
    CHORUS_ASSIGN_OR_RETURN(Object make, session.Global("chorus.generation.host", "EngineHost"));
    std::vector<Object> args = {replica};
    for (int value : {engine.cache_blocks, engine.block_size, engine.max_running,
                      engine.max_step_tokens, engine.prefill_chunk}) {
      CHORUS_ASSIGN_OR_RETURN(Object arg, session.FromIValue(int64_t{value}));
      args.push_back(std::move(arg));
    }
    CHORUS_ASSIGN_OR_RETURN(Object prefix_caching, session.FromIValue(engine.prefix_caching));
    args.push_back(std::move(prefix_caching));
    return make.CallObjects(args);
  });
  for (int interpreter : lease_.interpreters()) {
    auto loop = std::make_unique<Loop>();
    loop->index = interpreter;
    loops_.push_back(std::move(loop));
  }
  for (auto& loop : loops_) loop->thread = std::thread([this, raw = loop.get()] { Run(*raw); });
}

GenerationEngines::~GenerationEngines() {
  for (auto& loop : loops_) {
    {
      MutexLock lock(&loop->mu);
      loop->stopping = true;
    }
    loop->changed.SignalAll();
  }
  for (auto& loop : loops_) loop->thread.join();
}

void GenerationEngines::Submit(GenerationRequest request) {
  Loop* least = loops_.front().get();
  for (auto& loop : loops_) {
    if (loop->load.load() < least->load.load()) least = loop.get();
  }
  const std::string id = "g" + std::to_string(next_id_.fetch_add(1));
  bool queued = false;
  {
    MutexLock lock(&least->mu);
    if (!least->stopping && !least->draining) {
      const Clock::time_point now = Clock::now();
      least->inbox.emplace_back(id, Held{std::move(request), now, now, false});
      least->unfinished.fetch_add(1);
      least->load.fetch_add(1);
      queued = true;
    }
  }
  if (!queued) {
    return request.done(
        UnavailableError("the model is draining (being unloaded, or the server is stopping)"));
  }
  least->changed.Signal();
}

bool GenerationEngines::Drain(Clock::time_point deadline) {
  for (auto& loop : loops_) {
    MutexLock lock(&loop->mu);
    loop->draining = true;
  }
  bool drained = true;
  for (auto& loop : loops_) {
    MutexLock lock(&loop->mu);
    while (loop->unfinished.load() > 0) {
      if (!loop->idle.WaitUntil(&loop->mu, deadline) && Clock::now() >= deadline) {
        drained = false;
        break;
      }
    }
  }
  return drained;
}

GenerationStats GenerationEngines::Stats() const {
  GenerationStats total;
  for (const auto& loop : loops_) {
    MutexLock lock(&loop->mu);
    total.running += loop->stats.running;
    total.waiting += loop->stats.waiting + static_cast<int>(loop->inbox.size());
    total.cache_blocks_used += loop->stats.cache_blocks_used;
    total.cache_blocks_total += loop->stats.cache_blocks_total;
    total.prefix_cache_queries += loop->stats.prefix_cache_queries;
    total.prefix_cache_hits += loop->stats.prefix_cache_hits;
    total.generated_tokens += loop->stats.generated_tokens;
    total.time_to_first_token.Add(loop->stats.time_to_first_token);
    total.inter_token_latency.Add(loop->stats.inter_token_latency);
  }
  return total;
}

void GenerationEngines::Run(Loop& loop) {
  std::vector<std::pair<std::string, Held>> fresh;
  while (true) {
    {
      MutexLock lock(&loop.mu);
      // Requests to drop still hold cache blocks in the engine: a step frees them.
      while (loop.inbox.empty() && loop.active.empty() && loop.to_abort.empty() && !loop.stopping) {
        loop.changed.Wait(&loop.mu);
      }
      if (loop.stopping) {
        fresh.swap(loop.inbox);
        break;
      }
      fresh.swap(loop.inbox);
    }
    Step(loop, std::move(fresh));
    fresh.clear();
  }
  const Status gone = UnavailableError("the model was unloaded while generating");
  for (auto& [id, held] : fresh) held.request.done(gone);
  for (auto& [id, held] : loop.active) held.request.done(gone);
  loop.active.clear();
}

void GenerationEngines::Finish(Loop& loop, Held& held, const Status& status) {
  // Free before the client hears: its next request may come at once, and
  // should find this engine (and its prefix cache) idle.
  loop.load.fetch_sub(1);
  held.request.done(status);
  if (loop.unfinished.fetch_sub(1) == 1) {
    // Under the lock, so that a Drain between its check and its wait hears it.
    MutexLock lock(&loop.mu);
    loop.idle.SignalAll();
  }
}

void GenerationEngines::Step(Loop& loop, std::vector<std::pair<std::string, Held>> fresh) {
  const StepInputs inputs = Schedule(loop, std::move(fresh));
  StatusOr<StepResult> result = Execute(loop, inputs);
  NoteMemoryActivity();
  if (result.ok()) return Update(loop, *result);
  // The engine may hold them still: drop them there on the next step.
  if (result.status().python_error() != nullptr) {
    Log().warn("generation step failed: {}\n{}", result.status().message(),
               result.status().python_error()->traceback);
  }
  for (auto& [id, held] : loop.active) {
    loop.to_abort.push_back(id);
    Finish(loop, held, result.status());
  }
  loop.active.clear();
}

GenerationEngines::StepInputs GenerationEngines::Schedule(
    Loop& loop, std::vector<std::pair<std::string, Held>> fresh) {
  const Clock::time_point now = Clock::now();
  for (auto it = loop.active.begin(); it != loop.active.end();) {
    if (Status why = StopReason(it->second.request, now); !why.ok()) {
      loop.to_abort.push_back(it->first);
      Finish(loop, it->second, why);
      it = loop.active.erase(it);
    } else {
      ++it;
    }
  }
  StepInputs inputs;
  for (auto& [id, held] : fresh) {
    if (Status why = StopReason(held.request, now); !why.ok()) {
      Finish(loop, held, why);
      continue;
    }
    inputs.added.push_back(c10::ivalue::Tuple::create(
        {id, held.request.prompt, held.request.parameters_json, held.request.messages_json}));
    loop.active.emplace(id, std::move(held));
  }
  for (const std::string& id : loop.to_abort) inputs.aborted.push_back(id);
  loop.to_abort.clear();
  return inputs;
}

StatusOr<GenerationEngines::StepResult> GenerationEngines::Execute(Loop& loop,
                                                                   const StepInputs& inputs) {
  // Named in a crash report, so the supervisor knows which model was running.
  ScopedCrashContext crash_context(options_.label.text());
  crash_context.Append(", generating for requests ");
  for (auto it = loop.active.begin(); it != loop.active.end(); ++it) {
    if (it != loop.active.begin()) crash_context.Append(", ");
    crash_context.Append(it->first);
  }
  InterpreterSession session = manager_->Acquire(loop.index);
  CHORUS_ASSIGN_OR_RETURN(Object host, hosts_.In(session));
  CHORUS_ASSIGN_OR_RETURN(Object step, host.Attr("step"));
  CHORUS_ASSIGN_OR_RETURN(Object result, step.Call({inputs.added, inputs.aborted}));
  CHORUS_ASSIGN_OR_RETURN(c10::IValue value, result.ToIValue());
  return ReadStep(value);
}

void GenerationEngines::RecordStats(Loop& loop, const StepResult& result) {
  const Clock::time_point stepped = Clock::now();
  MutexLock lock(&loop.mu);
  GenerationStats& stats = loop.stats;
  stats.running = result.stats.running;
  stats.waiting = result.stats.waiting;
  stats.cache_blocks_used = result.stats.cache_blocks_used;
  stats.cache_blocks_total = result.stats.cache_blocks_total;
  stats.prefix_cache_queries = result.stats.prefix_cache_queries;  // the engine's totals
  stats.prefix_cache_hits = result.stats.prefix_cache_hits;
  for (const auto& [id, chunk] : result.outputs) {
    auto it = loop.active.find(id);
    if (it == loop.active.end() || chunk.new_tokens == 0) continue;
    Held& held = it->second;
    const double since =
        std::chrono::duration<double>(stepped - (held.has_token ? held.last_token : held.submitted))
            .count();
    if (held.has_token) {
      stats.inter_token_latency.Observe(since / chunk.new_tokens);
    } else {
      stats.time_to_first_token.Observe(since);
    }
    held.has_token = true;
    held.last_token = stepped;
    stats.generated_tokens += chunk.new_tokens;
  }
}

void GenerationEngines::Update(Loop& loop, StepResult& result) {
  // Statistics before any callback: a caller that saw its request end sees the
  // cache it left, and the latencies of its tokens.
  RecordStats(loop, result);
  for (auto& [id, why] : result.refused) {
    auto it = loop.active.find(id);
    if (it == loop.active.end()) continue;
    Finish(loop, it->second, InvalidArgumentError(why));
    loop.active.erase(it);
  }
  for (auto& [id, chunk] : result.outputs) {
    auto it = loop.active.find(id);
    if (it == loop.active.end()) continue;
    const bool wanted = it->second.request.on_chunk(chunk);
    if (!chunk.finish_reason.empty()) {
      Finish(loop, it->second, OkStatus());
    } else if (!wanted) {
      loop.to_abort.push_back(id);
      Finish(loop, it->second, Status(StatusCode::kCancelled, "the client went away"));
    } else {
      continue;
    }
    loop.active.erase(it);
  }
}

}  // namespace chorus
