#include "chorus/server/models/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace chorus {

SharedMemoryMapping::~SharedMemoryMapping() {
  if (base_ != nullptr) munmap(base_, length_);
}

Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key,
                                      uint64_t offset, uint64_t byte_size) {
  {
    MutexLock lock(&mu_);
    if (regions_.count(name)) {
      return AlreadyExistsError("shared memory region \"" + name + "\" is already registered");
    }
  }
  if (name.empty()) return InvalidArgumentError("a shared memory region needs a name");
  const std::string what = "shared memory region \"" + name + "\" (key \"" + key + "\")";
  if (byte_size == 0 || offset > UINT64_MAX - byte_size) {
    return InvalidArgumentError(what + ": byte_size must be > 0");
  }
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return InvalidArgumentError(what +
                                ": cannot open the shared memory object: " + std::strerror(errno));
  }
  struct stat info {};
  const bool sized = fstat(fd, &info) == 0;
  const uint64_t needed = offset + byte_size;
  if (!sized || static_cast<uint64_t>(info.st_size) < needed) {
    close(fd);
    return InvalidArgumentError(what + ": the object holds " + std::to_string(info.st_size) +
                                " bytes; offset + byte_size is " + std::to_string(needed));
  }
  void* base = mmap(nullptr, needed, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return InvalidArgumentError(what + ": cannot map it: " + std::strerror(errno));
  }
  Region region{key, offset, byte_size, std::make_shared<SharedMemoryMapping>(base, needed)};
  MutexLock lock(&mu_);
  if (!regions_.emplace(name, std::move(region)).second) {  // registered meanwhile
    return AlreadyExistsError("shared memory region \"" + name + "\" is already registered");
  }
  return OkStatus();
}

void SharedMemoryRegistry::Unregister(const std::string& name) {
  MutexLock lock(&mu_);
  if (name.empty()) {
    regions_.clear();
  } else {
    regions_.erase(name);
  }
}

Status SharedMemoryRegistry::GetStatus(
    const std::string& name, inference::SystemSharedMemoryStatusResponse* response) const {
  MutexLock lock(&mu_);
  if (!name.empty() && regions_.count(name) == 0) {
    return NotFoundError("no shared memory region \"" + name + "\" is registered");
  }
  for (const auto& [region_name, region] : regions_) {
    if (!name.empty() && region_name != name) continue;
    auto& status = (*response->mutable_regions())[region_name];
    status.set_name(region_name);
    status.set_key(region.key);
    status.set_offset(region.offset);
    status.set_byte_size(region.byte_size);
  }
  return OkStatus();
}

StatusOr<SharedMemorySpan> SharedMemoryRegistry::Find(const std::string& name, uint64_t offset,
                                                      uint64_t byte_size) const {
  MutexLock lock(&mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return InvalidArgumentError("no shared memory region \"" + name + "\" is registered");
  }
  const Region& region = it->second;
  if (offset > region.byte_size || byte_size > region.byte_size - offset) {
    return InvalidArgumentError("shared memory region \"" + name + "\" holds " +
                                std::to_string(region.byte_size) + " bytes; " +
                                std::to_string(byte_size) + " at offset " + std::to_string(offset) +
                                " are out of its bounds");
  }
  return SharedMemorySpan{region.mapping, region.mapping->base() + region.offset + offset,
                          static_cast<size_t>(byte_size)};
}

StatusOr<std::optional<SharedMemoryRef>> SharedMemoryRefOf(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
    const std::string& tensor) {
  auto region = parameters.find("shared_memory_region");
  if (region == parameters.end()) return std::optional<SharedMemoryRef>();
  SharedMemoryRef ref;
  ref.region = region->second.string_param();
  auto size_of = [&](const char* key, bool required) -> StatusOr<uint64_t> {
    auto it = parameters.find(key);
    if (it == parameters.end()) {
      if (!required) return uint64_t{0};
      return InvalidArgumentError("\"" + tensor + "\": shared_memory_region without " + key);
    }
    const inference::InferParameter& value = it->second;
    if (value.parameter_choice_case() == inference::InferParameter::kUint64Param) {
      return value.uint64_param();
    }
    if (value.parameter_choice_case() == inference::InferParameter::kInt64Param &&
        value.int64_param() >= 0) {
      return static_cast<uint64_t>(value.int64_param());
    }
    return InvalidArgumentError("\"" + tensor + "\": " + key + " must be an integer >= 0");
  };
  CHORUS_ASSIGN_OR_RETURN(ref.byte_size, size_of("shared_memory_byte_size", true));
  CHORUS_ASSIGN_OR_RETURN(ref.offset, size_of("shared_memory_offset", false));
  return std::optional<SharedMemoryRef>(std::move(ref));
}

}  // namespace chorus
