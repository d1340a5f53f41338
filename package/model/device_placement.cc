#include "package/model/device_placement.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <map>
#include <tuple>
#include <utility>

#include "chorus/common/thread_annotations.h"
#include "chorus/interpreter/gpu_host.h"
#include "chorus/interpreter/tensor_crossing.h"

namespace chorus::internal {
namespace {

// Device copies of archive records, by (archive, record, device): weak, so a
// copy lives exactly as long as some replica's weights use it. A copy is
// never wrapped by an interpreter itself; each gets a crossing alias of it.
class PlacedStorages {
 public:
  static PlacedStorages& Instance() {
    static auto* storages = new PlacedStorages();
    return *storages;
  }

  // A crossing alias of the copy of `host` (record `name` of `archive`) on
  // `device`, the copy made once.
  at::Tensor Get(const Archive* archive, const std::string& name, const at::Tensor& host,
                 const c10::Device& device) CHORUS_EXCLUDES(mu_) {
    const Key key{archive, name, device.str()};
    // Copies are made under the lock: two interpreters unpickling the same
    // weights at once must not make two.
    MutexLock lock(&mu_);
    auto it = copies_.find(key);
    if (it != copies_.end()) {
      if (c10::intrusive_ptr<c10::StorageImpl> copy = it->second.lock()) {
        return CrossingAlias(at::empty({0}, at::TensorOptions().dtype(at::kByte).device(device))
                                 .set_(c10::Storage(std::move(copy)), 0, {host.numel()}, {1}));
      }
    }
    at::Tensor copy = host.to(device);
    copies_.insert_or_assign(key, copy.storage().getWeakStorageImpl());
    return CrossingAlias(copy);
  }

 private:
  using Key = std::tuple<const Archive*, std::string, std::string>;
  Mutex mu_;
  std::map<Key, c10::weak_intrusive_ptr<c10::StorageImpl>> copies_ CHORUS_GUARDED_BY(mu_);
};

at::Tensor MappedRecord(const Archive& archive, const std::string& name, int64_t nbytes) {
  StatusOr<RecordData> data = archive.Read(name);
  TORCH_CHECK(data.ok(), data.status().message());
  if (nbytes < 0) nbytes = static_cast<int64_t>(data->size);
  TORCH_CHECK(static_cast<uint64_t>(nbytes) <= data->size, "storage record ", name, " holds ",
              data->size, " bytes but its tensor needs ", nbytes,
              " (storage record shorter than its tensor)");
  std::shared_ptr<const void> owner = data->owner;
  return at::from_blob(
      const_cast<uint8_t*>(data->data), {nbytes}, [owner](void*) mutable { owner.reset(); },
      at::TensorOptions().dtype(at::kByte));
}

// One stream per (interpreter, device), taken from the device's pool once.
c10::Stream InterpreterStream(int interpreter, const c10::Device& device) {
  static Mutex mu;
  static auto* streams = new std::map<std::pair<int, std::string>, c10::Stream>();
  MutexLock lock(&mu);
  const auto key = std::make_pair(interpreter, device.str());
  auto it = streams->find(key);
  if (it == streams->end()) {
    const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
    it = streams->emplace(key, impl->getStreamFromGlobalPool(device)).first;
  }
  return it->second;
}

template <typename Move>
c10::IValue MapTensors(const c10::IValue& value, const Move& move) {
  if (value.isTensor()) return move(value.toTensor());
  if (value.isList()) {
    c10::impl::GenericList out(value.toList().elementType());
    for (const c10::IValue& item : value.toListRef()) out.push_back(MapTensors(item, move));
    return out;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      items.push_back(MapTensors(item, move));
    }
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (value.isGenericDict()) {
    c10::impl::GenericDict out(value.toGenericDict().keyType(), value.toGenericDict().valueType());
    for (const auto& entry : value.toGenericDict()) {
      out.insert(entry.key(), MapTensors(entry.value(), move));
    }
    return out;
  }
  return value;
}

}  // namespace

StatusOr<std::vector<c10::Device>> ParseDevices(const std::vector<std::string>& names) {
  std::vector<c10::Device> devices;
  for (const std::string& name : names) {
    std::optional<c10::Device> device;
    try {
      device.emplace(name);
    } catch (const c10::Error&) {
      return InvalidArgumentError("device \"" + name +
                                  "\" is not a device (\"cpu\", \"cuda\", \"cuda:1\", ...)");
    }
    if (device->is_cuda() && !device->has_index()) device->set_index(0);
    if (device->is_cuda()) {
      const int gpus = HostHasGpu() ? at::detail::getCUDAHooks().getNumGPUs() : 0;
      if (device->index() >= gpus) {
        return FailedPreconditionError(
            "device " + device->str() + ": this host has " +
            (gpus == 0 ? std::string("no GPU") : std::to_string(gpus) + " GPU(s)") +
            " (serve the model on \"cpu\", or on a host with the GPU)");
      }
    }
    devices.push_back(*device);
  }
  return devices;
}

at::Tensor PlacedStorage(const std::shared_ptr<Archive>& archive, const std::string& name,
                         int64_t nbytes, const c10::Device& device) {
  at::Tensor host = MappedRecord(*archive, name, nbytes);
  if (device.is_cpu()) return host;
  return PlacedStorages::Instance().Get(archive.get(), name, host, device);
}

StatusOr<c10::IValue> ToDevice(const c10::IValue& value, const c10::Device& device) {
  if (device.is_cpu()) return value;
  try {
    return MapTensors(value, [&](const at::Tensor& tensor) -> c10::IValue {
      if (tensor.device() == device) return tensor;
      if (device.is_cuda() && tensor.is_cpu()) {
        return tensor.pin_memory().to(device, /*non_blocking=*/true);
      }
      return tensor.to(device);
    });
  } catch (const c10::Error& e) {
    return InternalError("moving the inputs to " + device.str() + ": " +
                         e.what_without_backtrace());
  }
}

StatusOr<c10::IValue> ToHost(const c10::IValue& value) {
  try {
    return MapTensors(value, [](const at::Tensor& tensor) -> c10::IValue {
      return tensor.is_cpu() ? tensor : tensor.to(at::kCPU);
    });
  } catch (const c10::Error& e) {
    return InternalError(std::string("moving the outputs to the host: ") +
                         e.what_without_backtrace());
  }
}

InterpreterStreamScope::InterpreterStreamScope(int interpreter, const c10::Device& device) {
  if (device.is_cuda()) guard_.emplace(InterpreterStream(interpreter, device));
}

}  // namespace chorus::internal
