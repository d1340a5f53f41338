// Where a Python model's replicas run: each interpreter's replica on one
// device of the model's list (interpreter i on devices[i % n]). Weights go to
// a device once per process, whichever interpreter unpickles them first, and
// every other interpreter's replica aliases the same device storages (as all
// share the archive's mapped pages on the CPU). A call's inputs go to its
// replica's device on that interpreter's own stream (through pinned memory
// on a GPU), its outputs come back to the host for the response.
#ifndef CHORUS_PACKAGE_MODEL_DEVICE_PLACEMENT_H_
#define CHORUS_PACKAGE_MODEL_DEVICE_PLACEMENT_H_

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/StreamGuard.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/package/archive.h"

namespace chorus::internal {

// `names` as devices ("cpu", "cuda", "cuda:1", "meta"; "cuda" is cuda:0).
// INVALID_ARGUMENT for a name torch does not read; FAILED_PRECONDITION for a
// GPU this host does not have (none at all, or fewer than the index needs).
StatusOr<std::vector<c10::Device>> ParseDevices(const std::vector<std::string>& names);

// The bytes of storage record `name` of `archive` on `device`, as a uint8
// tensor of `nbytes`: a view of the mapping on the CPU, else one copy per
// process and device, shared by every caller while any holds it. Throws
// c10::Error (the caller is a torch class method) when the record is bad.
at::Tensor PlacedStorage(const std::shared_ptr<Archive>& archive, const std::string& name,
                         int64_t nbytes, const c10::Device& device);

// `value`'s tensors (also inside lists, tuples and dicts) on `device`;
// strings and other values as they are. To a GPU through pinned memory,
// without waiting (the copy is ordered on the current stream). Errors:
// torch's (out of device memory, a device that cannot take the copy).
StatusOr<c10::IValue> ToDevice(const c10::IValue& value, const c10::Device& device);
// `value`'s tensors back on the host (waits for the device's work).
StatusOr<c10::IValue> ToHost(const c10::IValue& value);

// Makes interpreter `interpreter`'s own stream on `device` the current one
// until destroyed (nothing on devices without streams, such as the CPU).
// Not copyable; destroy on the thread that made it.
class InterpreterStreamScope {
 public:
  InterpreterStreamScope(int interpreter, const c10::Device& device);
  InterpreterStreamScope(const InterpreterStreamScope&) = delete;
  InterpreterStreamScope& operator=(const InterpreterStreamScope&) = delete;

 private:
  std::optional<c10::StreamGuard> guard_;
};

}  // namespace chorus::internal

#endif  // CHORUS_PACKAGE_MODEL_DEVICE_PLACEMENT_H_
