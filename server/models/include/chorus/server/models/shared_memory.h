// Triton's system shared memory extension: clients on the same host register
// regions of POSIX shared memory objects (shm_open) by name, then name a
// region (with an offset and a byte size) in a request instead of sending an
// input's bytes, or ask for an output to be written into one. Regions are
// mapped once when registered and unmapped when unregistered or when the
// registry (the server) ends, but never under a request still using them.
#ifndef CHORUS_SERVER_MODELS_SHARED_MEMORY_H_
#define CHORUS_SERVER_MODELS_SHARED_MEMORY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "chorus/common/status.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/inference/grpc_service.pb.h"

namespace chorus {

// One mapping of a shared memory object, unmapped when destroyed.
class SharedMemoryMapping {
 public:
  SharedMemoryMapping(void* base, size_t length) : base_(base), length_(length) {}
  ~SharedMemoryMapping();
  SharedMemoryMapping(const SharedMemoryMapping&) = delete;
  SharedMemoryMapping& operator=(const SharedMemoryMapping&) = delete;
  char* base() const { return static_cast<char*>(base_); }

 private:
  void* base_;
  size_t length_;
};

// Bytes of a registered region; `mapping` keeps them mapped while held.
struct SharedMemorySpan {
  std::shared_ptr<const SharedMemoryMapping> mapping;
  char* data = nullptr;
  size_t size = 0;
};

class SharedMemoryRegistry {
 public:
  // Maps `byte_size` bytes at `offset` of the shared memory object `key` as
  // region `name`. ALREADY_EXISTS for a name in use; INVALID_ARGUMENT naming
  // the key when it cannot be opened or is smaller than offset + byte_size.
  // Thread-safe.
  Status Register(const std::string& name, const std::string& key, uint64_t offset,
                  uint64_t byte_size) CHORUS_EXCLUDES(mu_);
  // Forgets region `name` ("" every region); requests using it keep it mapped
  // until they end. An unknown name is no error (as Triton). Thread-safe.
  void Unregister(const std::string& name) CHORUS_EXCLUDES(mu_);
  // Region `name` ("" every region); NOT_FOUND for an unknown name. Thread-safe.
  Status GetStatus(const std::string& name,
                   inference::SystemSharedMemoryStatusResponse* response) const
      CHORUS_EXCLUDES(mu_);
  // `byte_size` bytes at `offset` of region `name`. INVALID_ARGUMENT naming
  // the region when it is not registered or the bytes are out of its bounds.
  StatusOr<SharedMemorySpan> Find(const std::string& name, uint64_t offset,
                                  uint64_t byte_size) const CHORUS_EXCLUDES(mu_);

 private:
  struct Region {
    std::string key;
    uint64_t offset = 0;
    uint64_t byte_size = 0;
    std::shared_ptr<const SharedMemoryMapping> mapping;  // the object from 0 to offset + byte_size
  };

  mutable Mutex mu_;
  std::map<std::string, Region> regions_ CHORUS_GUARDED_BY(mu_);
};

// A tensor's shared memory, as an input's or requested output's parameters
// name it (shared_memory_region, shared_memory_byte_size,
// shared_memory_offset); nullopt when they name none. INVALID_ARGUMENT for a
// region without a byte size, or sizes that are not integers >= 0.
struct SharedMemoryRef {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};
StatusOr<std::optional<SharedMemoryRef>> SharedMemoryRefOf(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
    const std::string& tensor);

}  // namespace chorus

#endif  // CHORUS_SERVER_MODELS_SHARED_MEMORY_H_
