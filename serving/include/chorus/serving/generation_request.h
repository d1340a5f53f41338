// A request for generated text and what each step gives it: the contract
// between a frontend (OpenAI's API, KServe's generate) and the generation
// engines (generation_engines.h). Plain types, free of torch and Python.
#ifndef CHORUS_SERVING_GENERATION_REQUEST_H_
#define CHORUS_SERVING_GENERATION_REQUEST_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "chorus/common/status.h"

namespace chorus {

// What one step gave a request.
struct GenerationChunk {
  std::string text;  // new text (may be empty while held back)
  int new_tokens = 0;
  std::string finish_reason;  // "" while running; "stop" or "length" at the end
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

struct GenerationRequest {
  std::string prompt;
  std::string parameters_json;  // sampling parameters (chorus.generation.SamplingParams)
  // A chat request's messages (a JSON list of {role, content}), which the
  // model's chat template turns into the prompt; "" for a plain prompt.
  std::string messages_json;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<std::atomic<bool>> cancelled;  // optional
  // Each step's chunk, in order, on the loop thread; false cancels the request.
  std::function<bool(const GenerationChunk&)> on_chunk;
  // Exactly once, on the loop thread or in Submit: OK after the last chunk
  // (finish_reason set); INVALID_ARGUMENT for a prompt or parameters the
  // engine refuses; CANCELLED, DEADLINE_EXCEEDED; UNAVAILABLE when draining;
  // the model's error.
  std::function<void(Status)> done;
};

}  // namespace chorus

#endif  // CHORUS_SERVING_GENERATION_REQUEST_H_
