// libFuzzer target: arbitrary bytes as a serialized ModelInferRequest (what
// gRPC hands the server), checked against a model's signature as every infer
// request is before its tensors are made (wire_tensors.h). The first byte
// picks the signature: every dtype with any shape, or a batched model. A
// shared memory region of 64 bytes is registered. The check must return an
// error or inputs whose contents are exactly what their shapes need, never
// crash, hang or leak.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <string>

#include "chorus/package/dtype.h"
#include "chorus/server/models/wire_tensors.h"

namespace {

using chorus::Manifest;
using chorus::WireInput;

Manifest EveryDtype() {
  Manifest manifest;
  for (const chorus::DtypeInfo& info : chorus::kDtypes) {
    manifest.inputs.push_back({info.wire, info.name, {-1, -1}});
  }
  return manifest;
}

Manifest Batched() {
  Manifest manifest;
  manifest.inputs = {{"x", "float32", {-1, 4}}, {"ids", "int8", {-1}}, {"text", "string", {-1}}};
  manifest.batching = {true, 0, 8};
  return manifest;
}

// A registry holding region "region": 64 bytes of a fresh shared memory object.
const chorus::SharedMemoryRegistry& Registry() {
  static chorus::SharedMemoryRegistry* registry = [] {
    auto* r = new chorus::SharedMemoryRegistry;
    const std::string key = "/chorus-fuzz-" + std::to_string(getpid());
    const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, 64) != 0) __builtin_trap();
    close(fd);
    if (!r->Register("region", key, 0, 64).ok()) __builtin_trap();
    shm_unlink(key.c_str());  // the mapping stays
    return r;
  }();
  return *registry;
}

void CheckDecoded(const WireInput& input) {
  chorus::StatusOr<int64_t> elements = chorus::ElementCount(input.shape);
  if (!elements.ok() || input.dtype == nullptr) __builtin_trap();
  const size_t n = static_cast<size_t>(*elements);
  switch (input.source) {
    case WireInput::Source::kNone:
      if (n != 0) __builtin_trap();
      break;
    case WireInput::Source::kBytes:
      if (input.bytes.size() != n * input.dtype->element_size) __builtin_trap();
      break;
    case WireInput::Source::kStrings:
      if (input.strings.elements.size() != n || input.strings.shape != input.shape) {
        __builtin_trap();
      }
      break;
    case WireInput::Source::kTyped:
      if (input.typed == nullptr) __builtin_trap();
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {  // protobuf logs each string that is not UTF-8
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  static const Manifest every_dtype = EveryDtype();
  static const Manifest batched = Batched();
  if (size == 0) return 0;
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  const Manifest& manifest = data[0] & 1 ? batched : every_dtype;
  chorus::StatusOr<std::vector<WireInput>> inputs =
      chorus::CheckInputs(request, manifest, &Registry());
  if (!inputs.ok()) return 0;
  if (inputs->size() != manifest.inputs.size()) __builtin_trap();
  for (const WireInput& input : *inputs) CheckDecoded(input);
  return 0;
}
