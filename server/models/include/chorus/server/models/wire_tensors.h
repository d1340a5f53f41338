// Tensors as the Open Inference Protocol carries them, checked before any
// tensor is made: a request's inputs against a model's signature, element and
// byte counts (BYTES' raw layout is chorus/serving/string_tensor.h's). Torch-free, so the
// fuzzers build it without torch; tensor_codec.h makes tensors of what passes.
#ifndef CHORUS_SERVER_MODELS_WIRE_TENSORS_H_
#define CHORUS_SERVER_MODELS_WIRE_TENSORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/inference/grpc_service.pb.h"
#include "chorus/package/dtype.h"
#include "chorus/package/manifest.h"
#include "chorus/server/models/shared_memory.h"
#include "chorus/serving/string_tensor.h"

namespace chorus {

// KServe datatype name of a manifest dtype ("float32" -> "FP32"), or "".
std::string WireDatatype(const std::string& manifest_dtype);

// OK when `size` bytes are what `shape` of the fixed-size `dtype` needs;
// else INVALID_ARGUMENT "<holder> N bytes; shape [..] of FP32 needs M"
// (holder: "raw contents hold", ...), or ElementCount's error.
Status CheckByteSize(const DtypeInfo& dtype, const std::vector<int64_t>& shape, size_t size,
                     std::string_view holder);

// `shape` of input `name` against its spec (any-size dimensions -1) and the
// model's largest batch. INVALID_ARGUMENT naming the input otherwise.
Status CheckInputShape(const std::string& name, const std::vector<int64_t>& shape,
                       const TensorSpec& spec, const Batching& batching);

// OK when every input of a batchable model that has the batch dimension has
// the same number of rows along it (they are batched together). `shapes` are
// the inputs' in the manifest's order; INVALID_ARGUMENT naming the odd one.
Status CheckBatchRows(const std::vector<std::vector<int64_t>>& shapes, const Manifest& manifest);

// One input of an infer request, checked against its spec, so that making
// its tensor cannot fail. It views the request (which must outlive it) or a
// shared memory region (which `mapping` keeps mapped).
struct WireInput {
  enum class Source {
    kNone,     // no contents: the shape has no elements
    kBytes,    // `bytes`: elements * dtype->element_size bytes, native byte order
    kTyped,    // `typed`: one value per element in the dtype's field, each fitting
    kStrings,  // `strings`: a BYTES input
  };
  const DtypeInfo* dtype = nullptr;  // nullptr: an optional input the request left out
  std::vector<int64_t> shape;
  Source source = Source::kNone;
  std::string_view bytes;
  std::shared_ptr<const SharedMemoryMapping> mapping;  // kBytes in shared memory
  const inference::InferTensorContents* typed = nullptr;
  StringTensor strings;
};

// The request's inputs in the manifest's order. INVALID_ARGUMENT, naming the
// input, for: an unknown, duplicate or missing input; a datatype or shape
// that does not match the signature (or a batch over the model's maximum);
// raw and typed contents together; raw contents of the wrong size; typed
// contents of the wrong kind or count, or values that do not fit the dtype.
// An input whose parameters name a shared memory region (shared_memory.h)
// takes its bytes from there, from `shared_memory` (INVALID_ARGUMENT naming
// the input without one, or for a region not registered, out of bounds, or
// of the wrong size); raw contents then come for every input or for the others.
StatusOr<std::vector<WireInput>> CheckInputs(const inference::ModelInferRequest& request,
                                             const Manifest& manifest,
                                             const SharedMemoryRegistry* shared_memory = nullptr);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_WIRE_TENSORS_H_
