// Tensors on the wire (Open Inference Protocol) <-> what models take and
// return (at::Tensor, or string tensors for BYTES: chorus/serving/
// model_values.h), validated against a model's manifest before the model ever
// sees them (the checks, torch-free, are wire_tensors.h's).
#ifndef CHORUS_SERVER_MODELS_TENSOR_CODEC_H_
#define CHORUS_SERVER_MODELS_TENSOR_CODEC_H_

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/inference/grpc_service.pb.h"
#include "chorus/interpreter/model_calls.h"
#include "chorus/package/manifest.h"
#include "chorus/server/models/classification.h"
#include "chorus/server/models/shared_memory.h"
#include "chorus/server/models/wire_tensors.h"
#include "chorus/serving/model_values.h"

namespace chorus {

// A tensor of `shape` holding `raw` (row-major, native byte order), whose
// elements are of the wire `datatype` ("FP32"). INVALID_ARGUMENT for an unknown
// datatype or BYTES, a negative dimension, or a byte count the shape does not need.
StatusOr<at::Tensor> TensorFromRaw(const std::string& datatype, const std::vector<int64_t>& shape,
                                   const std::string& raw);

// The request's inputs as tensors in the manifest's order, checked as
// CheckInputs (wire_tensors.h) checks them, with its errors. Inputs in shared
// memory are tensors over it, without a copy, where aligned for their dtype.
StatusOr<std::vector<c10::IValue>> DecodeInputs(
    const inference::ModelInferRequest& request, const Manifest& manifest,
    const SharedMemoryRegistry* shared_memory = nullptr);

// Inputs given by name (an in-process model call's), checked as DecodeInputs
// checks the wire's (dtype, shape, batch rows, every input once) and put in
// the manifest's order. Errors INVALID_ARGUMENT naming the input.
StatusOr<std::vector<c10::IValue>> ArrangeInputs(NamedValues named, const Manifest& manifest);

// OK if every output the request asks for is one the model has, and any
// classification asked for is of a numeric output with K >= 1
// (INVALID_ARGUMENT naming the output otherwise). Checked before the model runs.
Status CheckRequestedOutputs(const inference::ModelInferRequest& request, const Manifest& manifest);

// Fills `response` with `outputs` (manifest order; None: an output the model
// left out of this answer) as raw contents, keeping
// only those the request asked for (all when it asked for none); an output
// asked for with "classification" comes back as its classes
// (classification.h), labelled from `labels`; one asked for with a shared
// memory region is written there (its raw contents left empty, its
// parameters naming the region and the bytes written). INVALID_ARGUMENT as
// CheckRequestedOutputs, or for an output that does not fit its region;
// INTERNAL when the outputs' count or dtypes differ from the manifest's, or
// a string output is not a well-formed string tensor.
// How closely a model's outputs must match its signature: its dtypes
// (kSignature), or as returned (kAsReturned: Triton's Python backend, whose
// outputs go out in the dtype and shape the model gave them).
enum class OutputCheck { kSignature, kAsReturned };
Status EncodeOutputs(const std::vector<c10::IValue>& outputs, const Manifest& manifest,
                     const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response, const OutputLabelsMap& labels = {},
                     const SharedMemoryRegistry* shared_memory = nullptr,
                     OutputCheck check = OutputCheck::kSignature);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_TENSOR_CODEC_H_
