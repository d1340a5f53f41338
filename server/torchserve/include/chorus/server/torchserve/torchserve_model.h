// server/torchserve/: TorchServe's models inside chorus' interpreters. A
// model store entry (a .mar archive's files, torchserve_archive.h) serves as
// a chorus model whose instances are TorchServe workers: each is one handler
// object, initialized with its Context, in one interpreter (workers placed
// over the interpreters in turn: K workers cost K handler objects, not K
// processes), running one batch at a time. The model's ModelScheduler gathers
// requests into batches of up to the model's batchSize within maxBatchDelay,
// as TorchServe's frontend does, and hands each, unjoined
// (serving/request_executor.h), to one worker. The Python half is
// python/chorus/torchserve.
//
// A request crosses chorus as the typed tensors of TorchServeSignature():
// what an HTTP request to /predictions carries (its headers, its inputs) in,
// what the handler answered (status, headers, body, or the batch's error)
// out. The TorchServe frontends convert HTTP to and from them; any chorus
// client can send them too.
#ifndef CHORUS_SERVER_TORCHSERVE_TORCHSERVE_MODEL_H_
#define CHORUS_SERVER_TORCHSERVE_TORCHSERVE_MODEL_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/interpreter/interpreter_manager.h"
#include "chorus/interpreter/placement.h"
#include "chorus/package/manifest.h"
#include "chorus/server/config/torchserve_manifest.h"
#include "chorus/server/config/torchserve_model_settings.h"
#include "chorus/serving/request_executor.h"

namespace chorus {

// The signature's tensors. Every one has a leading batch dimension of 1 per
// request (a TorchServe batch is a count of requests).
namespace torchserve_tensors {
// In: [1, -1, 2] strings, one row per HTTP header: its name, its value.
inline constexpr char kHeaders[] = "HEADERS";
// In: [1, -1, 3] strings, one row per input (the raw body, named "body", or
// one per form field): its name, its content type ("" for none), its bytes.
inline constexpr char kInputs[] = "INPUTS";
// Out: [1, 1] int32, the HTTP status (the handler's, 200 by default).
inline constexpr char kStatus[] = "STATUS";
// Out: [1, 1] string, the reason phrase the handler set ("" for none).
inline constexpr char kPhrase[] = "PHRASE";
// Out: [1, -1, 2] strings, the response headers the handler set, its
// content type as "content-type".
inline constexpr char kResponseHeaders[] = "RESPONSE_HEADERS";
// Out: [1, 1] string, the response body.
inline constexpr char kBody[] = "BODY";
// Out: [1, 1] string: "" for a response; else why the batch failed (STATUS
// then says with which status), which TorchServe answers in its error JSON.
inline constexpr char kError[] = "ERROR";
}  // namespace torchserve_tensors

// The request headers of TorchServe's sequence batching (ts/context.py's
// defaults): a stateful model's request names its sequence with the first.
namespace torchserve_headers {
inline constexpr char kSequenceId[] = "ts_request_sequence_id";
inline constexpr char kSequenceStart[] = "ts_request_sequence_start";
inline constexpr char kSequenceEnd[] = "ts_request_sequence_end";
}  // namespace torchserve_headers

// The signature of every TorchServe model named `name`, version `version`:
// the tensors above, batchable up to `max_batch_size` requests.
Manifest TorchServeSignature(const std::string& name, const std::string& version,
                             int64_t max_batch_size);

struct TorchServeModelOptions {
  std::string model_name;
  std::string version;    // chorus' version folder
  std::string model_dir;  // absolute: the archive's files
  TorchServeManifest manifest;
  int workers = 1;
  int batch_size = 1;  // the handler's context.system_properties["batch_size"]
  // How long loading the handler and each initialize may take (0: no limit).
  std::chrono::milliseconds load_timeout{0};
  // How long a batch may take (responseTimeout; 0: no limit): a handler still
  // running then is interrupted (at its next Python bytecode), the batch's
  // requests get TorchServe's 500 "Worker died.", and the worker's handler is
  // made and initialized again, as TorchServe starts a new worker process.
  std::chrono::seconds response_timeout{0};
};

class TorchServeModel final : public RequestExecutor {
 public:
  // The settings of the archive's model-config.yaml (the manifest's
  // configFile) over `defaults` (config.properties' for the model), read in
  // one of the manager's interpreters, once its requirements file (if any) is
  // found met by what the interpreters have.
  // Errors: FAILED_PRECONDITION naming the requirements not met (nothing is
  // installed per model); the config file's (unreadable, a setting that is
  // not an integer).
  static StatusOr<TorchServeModelSettings> ReadSettings(InterpreterManager* manager,
                                                        const std::string& model_dir,
                                                        const TorchServeManifest& manifest,
                                                        TorchServeModelSettings defaults = {});

  // Places `options.workers` workers over interpreters `placement` pins to
  // the model and initializes each. Errors: the handler's (its import, its
  // initialize; tracebacks logged), with TorchServe's texts. Blocks.
  static StatusOr<std::shared_ptr<TorchServeModel>> Load(InterpreterPlacement* placement,
                                                         TorchServeModelOptions options);
  // Closes every worker.
  ~TorchServeModel() override;

  int instances() const override { return static_cast<int>(workers_.size()); }
  // Runs the batch through worker `instance`'s handler (within the response
  // timeout); answers every request before returning.
  Status Execute(int instance, std::vector<ExecutorRequest> batch) override;
  // Every request is answered within Execute: nothing to wait for.
  void Drain(std::chrono::steady_clock::time_point) override {}

 private:
  struct Worker {
    std::string key;  // unique in the process: the handler's module namespace
    int interpreter = 0;
  };
  TorchServeModel(InterpreterPlacement* placement, TorchServeModelOptions options,
                  InterpreterLease lease, std::vector<Worker> workers);
  Status MakeWorkers();
  // Worker `worker`'s handler made and initialized, in its interpreter.
  Status MakeWorker(const Worker& worker);
  // After a batch outlived the response timeout: the worker's handler closed
  // and made again (errors logged: its next batches then fail).
  void RestartWorker(const Worker& worker);
  // backend.predict's answers to `requests` (BackendRequest's) on `worker`.
  StatusOr<c10::IValue> Predict(const Worker& worker, c10::impl::GenericList requests,
                                std::chrono::steady_clock::time_point deadline);
  InterpreterManager* manager() const { return placement_->manager(); }

  InterpreterPlacement* const placement_;
  const TorchServeModelOptions options_;
  const InterpreterLease lease_;
  const std::vector<Worker> workers_;
  int made_ = 0;  // workers initialized (the first made_ of workers_)
  ReplicatedObject predict_;
};

}  // namespace chorus

#endif  // CHORUS_SERVER_TORCHSERVE_TORCHSERVE_MODEL_H_
