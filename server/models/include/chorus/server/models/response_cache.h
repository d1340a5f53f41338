// Triton's response cache: the answers of models that enable it
// (config.json "response_cache": {"enable": true}, which declares the model
// deterministic) kept by what was asked (the model's serial, every input's
// name, dtype, shape and bytes, the outputs asked for and their parameters),
// least recently used first out, within one byte budget for the server
// (--cache-size-bytes). Keys are SHA-256 digests of that, alike whether
// taken from the request's wire bytes or from its decoded inputs.
#ifndef CHORUS_SERVER_MODELS_RESPONSE_CACHE_H_
#define CHORUS_SERVER_MODELS_RESPONSE_CACHE_H_

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chorus/common/thread_annotations.h"
#include "chorus/inference/grpc_service.pb.h"
#include "chorus/package/manifest.h"

namespace chorus {

class ResponseCache {
 public:
  // Holds at most `capacity_bytes` of answers (their outputs and keys).
  explicit ResponseCache(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The key of `request` to the model whose load got `model_serial` (a
  // reloaded model never sees the answers of the one before), its decoded
  // `inputs` in `manifest` order.
  static std::string Key(uint64_t model_serial, const Manifest& manifest,
                         const inference::ModelInferRequest& request,
                         const std::vector<c10::IValue>& inputs);
  // The same key from `request`'s wire bytes alone, so that a hit costs no
  // decoding: when every input comes in raw_input_contents (none typed, in
  // shared memory or BYTES, none missing or given twice); nullopt otherwise.
  // A request that would not decode never matches a kept key (each field is
  // in the digest, length-prefixed).
  static std::optional<std::string> WireKey(uint64_t model_serial, const Manifest& manifest,
                                            const inference::ModelInferRequest& request);

  // Copies the outputs kept for `key` into `response`; false when none are.
  // Thread-safe.
  bool Lookup(const std::string& key, inference::ModelInferResponse* response) CHORUS_EXCLUDES(mu_);
  // Keeps `response`'s outputs for `key`, evicting the least recently used
  // beyond the budget; an answer larger than the budget is not kept. Thread-safe.
  void Insert(const std::string& key, const inference::ModelInferResponse& response)
      CHORUS_EXCLUDES(mu_);

  // Bytes held now. Thread-safe.
  size_t bytes() const CHORUS_EXCLUDES(mu_);

 private:
  struct Entry {
    std::string key;
    inference::ModelInferResponse outputs;  // outputs and raw contents only
    size_t bytes = 0;
  };

  const size_t capacity_;
  mutable Mutex mu_;
  std::list<Entry> entries_ CHORUS_GUARDED_BY(mu_);  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_key_ CHORUS_GUARDED_BY(mu_);
  size_t bytes_ CHORUS_GUARDED_BY(mu_) = 0;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_RESPONSE_CACHE_H_
