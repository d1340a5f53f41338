// server/config/: what a model folder says about serving its model, read into
// one ModelConfig (this header): chorus' own config.json, or Triton's
// config.pbtxt (triton_config.h), which maps onto the same fields.
//
// A model's config.json in the repository (<repository>/<model>/config.json):
// how to serve the files of its version folders. Every key is optional; an
// unknown key or a wrong value is INVALID_ARGUMENT naming it. The schema, with
// its defaults, is in docs/server.md ("Model configuration").
#ifndef CHORUS_SERVER_CONFIG_MODEL_CONFIG_H_
#define CHORUS_SERVER_CONFIG_MODEL_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <memory>

#include "chorus/common/status.h"
#include "chorus/package/manifest.h"
#include "chorus/package/model_format.h"
#include "chorus/serving/scheduling_options.h"

namespace inference {
class ModelConfig;
}  // namespace inference

namespace chorus {

// How an image input is laid out (Triton's ModelInput.Format), for clients
// that prepare images; chorus itself reads no meaning into it.
enum class InputFormat { kNone, kNchw, kNhwc };

// What config.json says of one input or output beyond the signature
// ("tensors": {"x": {"format": "FORMAT_NCHW"}, "y": {"label_filename": "l.txt"}}).
struct TensorAnnotation {
  std::optional<InputFormat> format;  // inputs only
  std::string label_filename;         // outputs only: one label per line, in the model folder
  // Triton's reshape: the shape the model takes (an input) or gives (an
  // output), where the client's is the signature's; without the batch dimension.
  std::optional<std::vector<int64_t>> reshape;
};

// One of Triton's instance groups: `count` instances of the model, of one
// kind, on `gpus` (KIND_GPU).
struct InstanceGroup {
  enum class Kind { kAuto, kCpu, kGpu, kModel };
  std::string name;
  Kind kind = Kind::kAuto;
  int count = 1;
  std::vector<int> gpus;
};

// Which of a model's versions serve (Triton's version_policy).
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int64_t latest = 1;             // kLatest: how many of the highest serve
  std::vector<int64_t> versions;  // kSpecific: these
};

// One step of an ensemble (Triton's ModelEnsembling.Step): a model, and
// which of the ensemble's tensors its inputs take and its outputs become.
struct EnsembleStep {
  std::string model_name;
  std::string model_version;                      // "": the version serving
  std::map<std::string, std::string> input_map;   // the model's input -> ensemble tensor
  std::map<std::string, std::string> output_map;  // the model's output -> ensemble tensor
};

// A warm-up sample and its inputs (model_warmup.h runs them).
struct WarmupInput {
  enum Kind { kZero, kRandom, kFile } kind = kZero;
  std::string file;  // kFile: raw bytes in <model>/warmup/ (BYTES: Triton's raw layout)
  std::optional<std::vector<int64_t>> dims;  // without the batch dimension; default: the
                                             // signature's, any-size dimensions as 1
};

struct WarmupSample {
  std::string name;
  int64_t batch_size = 1;  // rows along the batch dimension of a batchable model
  int count = 1;
  std::map<std::string, WarmupInput> inputs;  // inputs left out get zeros
};

struct ModelConfig {
  // What the version folder holds; nullopt: whatever the file is.
  std::optional<ModelFormat> format;
  // The file in the version folder ("" = the first *.pt or *.pt2 file there by name).
  std::string default_model_filename;
  // A stock torch.package archive's model: a pickle ("package", "resource")
  // or a factory ("module", "factory").
  std::optional<EntryPoint> entry_point;
  // The signature of a file without a manifest, in torch dtype names; shapes
  // are the config's "dims" (-1: any size), which, as in Triton's config, leave
  // out the batch dimension when max_batch_size > 0. Outputs may be left out:
  // they are then read from one run of the model on zeros.
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  // Annotations of the model's tensors, by name (checked against the
  // signature when the model loads).
  std::map<std::string, TensorAnnotation> tensors;

  // Scheduling (each overrides the manifest's hint or the server's default).
  std::optional<int64_t> max_batch_size;  // > 0: batched along dimension 0
  std::optional<bool> dynamic_batching;
  std::optional<std::chrono::microseconds> max_queue_delay;
  std::optional<std::vector<int64_t>> preferred_batch_sizes;
  std::optional<size_t> max_queue;
  // Request priorities and queue policies ("priority_levels",
  // "default_priority_level", "queue_policy": {"timeout_action": "REJECT" |
  // "DELAY", "default_timeout_microseconds", "allow_timeout_override",
  // "max_queue_size"}, "priority_queue_policy": {"1": {...}}): Triton's.
  PriorityOptions priorities;
  // The model streams (its call returns a generator): served by
  // ModelStreamInfer only, each request alone, zero or more responses each.
  bool decoupled = false;
  // The model generates text (chorus.generation's protocol): served by an
  // engine per interpreter with these settings ("generation": {...}, each key
  // optional: cache_blocks, block_size, max_running, max_step_tokens,
  // prefill_chunk, engines). Implies decoupled.
  std::optional<GenerationOptions> generation;
  // A stateful model ("sequence_batching": {"strategy": "direct" | "oldest",
  // "max_sequence_idle_microseconds", "control_inputs": [{"name", "kind":
  // "CONTROL_SEQUENCE_START" | _END | _READY | _CORRID}], "state":
  // [{"input_name", "output_name"}]}): Triton's sequence batcher.
  std::optional<SequenceBatching> sequence_batching;
  // "response_cache": {"enable": true}: answers are kept in the server's
  // response cache (response_cache.h); declares the model deterministic.
  bool response_cache = false;
  // "model_warmup": [{"name", "batch_size", "count", "inputs": {"x": {"zero_data":
  // true} | {"random_data": true} | {"input_data_file": "f"}, "dims": [...]}}]:
  // samples run before the model is ready (model_warmup.h).
  std::vector<WarmupSample> warmup;

  // Where the model runs ("device": "cuda:1", or "devices": [...] to spread
  // its interpreters' replicas over them); empty: the package's device, else
  // the CPU. A Python model's weights are held once per device and process.
  std::vector<std::string> devices;

  // An ensemble ("platform": "ensemble", "ensemble_scheduling": {"step":
  // [{"model_name", "model_version", "input_map", "output_map"}]}): no file,
  // a request runs through the steps' models (ensemble.h); its signature is
  // the config's inputs and outputs.
  std::optional<std::vector<EnsembleStep>> ensemble;

  // Triton's Python backend: the version folder's model.py (or
  // default_model_filename) defines TritonPythonModel, whose instances run
  // in the interpreters (chorus/server/python_backend).
  bool python_backend = false;
  // Triton's instance groups: how many instances run the model at once (a
  // Python-backend model's objects; another model's concurrent runs) and on
  // which devices; empty: the server's default.
  std::vector<InstanceGroup> instance_groups;
  VersionPolicy version_policy;
  // Triton's parameters (key -> string_value), which Python-backend models
  // read from their config.
  std::map<std::string, std::string> parameters;
  // Read from a config.pbtxt: that config as Triton normalizes it (what the
  // ModelConfig call answers, and a Python-backend model's initialize gets).
  std::shared_ptr<const inference::ModelConfig> triton;

  // True when the config gives a signature (inputs).
  bool has_signature() const { return !inputs.empty(); }
  // The instances of all groups; 0 when no group gives any.
  int instance_count() const {
    int count = 0;
    for (const InstanceGroup& group : instance_groups) count += group.count;
    return count;
  }
};

// Parses config.json's text. Errors name the key ("config.json: inputs[1].dims: ...").
StatusOr<ModelConfig> ParseModelConfig(std::string_view json);
// The config of the model in `model_dir`: its config.json or its
// config.pbtxt (Triton's; triton_config.h), or the defaults when there is
// neither. Errors name the file; a folder with both is refused.
StatusOr<ModelConfig> ReadModelConfig(const std::string& model_dir);

// The manifest to serve a manifest-less file with: the config's signature and
// batching, named `name` version `version`. FAILED_PRECONDITION when the
// config has no signature.
StatusOr<Manifest> SignatureManifest(const ModelConfig& config, const std::string& name,
                                     const std::string& version);

}  // namespace chorus

#endif  // CHORUS_SERVER_CONFIG_MODEL_CONFIG_H_
