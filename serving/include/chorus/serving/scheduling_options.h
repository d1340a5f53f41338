// How a model is scheduled, as config.json and the server's flags say it:
// batching, request priorities and queue policies, sequences (stateful
// models), text generation. Plain values, torch-free, so config.json's parser
// builds without torch (its fuzzer); the schedulers that take them are
// scheduler.h, sequence_batcher.h and generation_engines.h.
#ifndef CHORUS_SERVING_SCHEDULING_OPTIONS_H_
#define CHORUS_SERVING_SCHEDULING_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "chorus/common/crash_label.h"

namespace chorus {

struct BatchingOptions {
  bool enabled = false;
  int64_t batch_dim = 0;
  int64_t max_batch_size = 1;
  // How long a batch may wait for more requests; 0 batches only what is
  // already queued (Triton's default). config.json: max_queue_delay_us.
  std::chrono::microseconds max_queue_delay{0};
  std::vector<int64_t> preferred_batch_sizes;  // stop gathering at any of these
};

// What happens to requests of one priority level in the queue (Triton's
// ModelQueuePolicy).
struct QueuePolicy {
  enum class TimeoutAction { kReject, kDelay };
  // A request queued longer than its timeout is answered UNAVAILABLE (kReject)
  // or put behind every request that has not timed out (kDelay).
  TimeoutAction timeout_action = TimeoutAction::kReject;
  std::chrono::microseconds default_timeout{0};  // 0: none
  bool allow_timeout_override = false;           // a request's "timeout" parameter applies
  size_t max_queue_size = 0;                     // requests of the level queued; 0: no limit
};

// Request priorities (Triton's dynamic_batching.priority_levels): level 1 is
// served first; requests without one get `default_level`.
struct PriorityOptions {
  int levels = 0;  // 0: one level, no priorities
  int default_level = 0;
  QueuePolicy default_policy;
  std::map<int, QueuePolicy> policies;  // by level, where not the default
  const QueuePolicy& PolicyOf(int level) const {
    auto it = policies.find(level);
    return it == policies.end() ? default_policy : it->second;
  }
};

enum class SequenceStrategy { kDirect, kOldest };
// What a control input carries (Triton's CONTROL_SEQUENCE_*): START, END and
// READY are 1 or 0 in the input's dtype; CORRID is the correlation id.
enum class SequenceControl { kStart, kEnd, kReady, kCorrelationId };

struct SequenceBatching {
  SequenceStrategy strategy = SequenceStrategy::kDirect;
  std::chrono::microseconds max_idle{1'000'000};  // Triton's default
  // Model input -> what chorus fills it with; clients never send these.
  std::vector<std::pair<std::string, SequenceControl>> controls;
  // Implicit state: (input, output). The output of one request is the input
  // of the sequence's next; the first gets zeros of the input's signature
  // shape (any-size dimensions as 1). Clients see neither.
  std::vector<std::pair<std::string, std::string>> states;
  // Triton's rules unless set otherwise (TorchServe's sequence batching sets
  // all four): a request of a sequence that is not active starts it (else it
  // must set sequence_start); a request naming no sequence starts a new one
  // named this prefix and a random UUID (empty: it is refused); at most
  // max_sequences active at once and max_waiting_per_sequence requests
  // waiting behind a sequence's running one, more refused UNAVAILABLE (0: no
  // limit).
  bool start_unknown = false;
  std::string new_sequence_prefix;
  size_t max_sequences = 0;
  size_t max_waiting_per_sequence = 0;
};

struct GenerationOptions {
  int engines = 1;  // interpreters that each run an engine (0: one per interpreter jobs leave)
  int cache_blocks = 512;  // per engine, of block_size tokens each
  int block_size = 16;
  int max_running = 64;  // sequences per engine's batch
  int max_step_tokens = 512;
  int prefill_chunk = 256;     // a longer prompt is prefilled over several steps
  bool prefix_caching = true;  // reuse the KV cache blocks of prompts' common prefixes
  CrashLabel label;            // what crash reports call the model
};

}  // namespace chorus

#endif  // CHORUS_SERVING_SCHEDULING_OPTIONS_H_
