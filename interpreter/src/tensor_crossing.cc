#include "chorus/interpreter/tensor_crossing.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <deque>
#include <thread>
#include <typeinfo>

#include "chorus/common/thread_annotations.h"

namespace chorus {

namespace {

// Releases storages on a thread of its own. Dropping the last C++ reference
// to a storage that has a Python object calls into its interpreter (torch 2.x
// keeps the object alive while C++ holds the storage), which takes that
// interpreter's GIL: doing that while holding another interpreter's GIL could
// deadlock against a thread doing the same the other way round.
class StorageReleaser {
 public:
  static StorageReleaser& Get() {
    static auto* releaser = new StorageReleaser();  // lives until the process exits
    return *releaser;
  }

  void Release(c10::Storage* storage) {
    {
      MutexLock lock(&mu_);
      pending_.push_back(storage);
    }
    ready_.Signal();
  }

 private:
  StorageReleaser() {
    std::thread([this] { Run(); }).detach();
  }

  void Run() {
    while (true) {
      c10::Storage* storage;
      {
        MutexLock lock(&mu_);
        while (pending_.empty()) ready_.Wait(&mu_);
        storage = pending_.front();
        pending_.pop_front();
      }
      delete storage;
    }
  }

  Mutex mu_;
  CondVar ready_;
  std::deque<c10::Storage*> pending_ CHORUS_GUARDED_BY(mu_);
};

// The DataPtr deleter of a crossing storage: its context is the original.
void ReleaseOriginal(void* context) {
  auto* original = static_cast<c10::Storage*>(context);
  if (original->unsafeGetStorageImpl()->pyobj_slot()->load_pyobj() != nullptr) {
    StorageReleaser::Get().Release(original);
  } else {
    delete original;
  }
}

// A StorageImpl of its own over `storage`'s memory. A storage that is itself a
// crossing one is looked through, so chains never form.
c10::Storage OwnStorageOver(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  const c10::Storage& root = data.get_deleter() == &ReleaseOriginal
                                 ? *static_cast<const c10::Storage*>(data.get_context())
                                 : storage;
  const c10::DataPtr& root_data = root.data_ptr();
  c10::DataPtr alias(root_data.get(), new c10::Storage(root), &ReleaseOriginal, root_data.device());
  // As resizable as the root (meta tensors insist on it; mapped weights are
  // not): a resize reallocates this alias alone and lets go of the root.
  return c10::Storage(c10::Storage::use_byte_size_t(), root.nbytes(), std::move(alias),
                      root.allocator(), root.resizable());
}

bool IsPlainStrided(const at::Tensor& tensor) {
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  return tensor.has_storage() && tensor.layout() == c10::kStrided && !tensor.is_quantized() &&
         !impl->has_symbolic_sizes_strides() && typeid(*impl) == typeid(c10::TensorImpl);
}

}  // namespace

const c10::StorageImpl* RootStorage(const at::Tensor& tensor) {
  if (!tensor.has_storage()) return nullptr;
  const c10::DataPtr& data = tensor.storage().data_ptr();
  if (data.get_deleter() == &ReleaseOriginal) {
    return static_cast<const c10::Storage*>(data.get_context())->unsafeGetStorageImpl();
  }
  return tensor.storage().unsafeGetStorageImpl();
}

at::Tensor CrossingAlias(const at::Tensor& tensor) {
  if (!tensor.defined()) return tensor;
  if (!IsPlainStrided(tensor)) return tensor.detach();
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  // Inference tensors stay inference tensors (TensorImpl decides by the mode).
  c10::InferenceMode inference(tensor.is_inference());
  const c10::DispatchKeySet keys =
      impl->key_set() -
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot});
  auto alias =
      c10::make_intrusive<c10::TensorImpl>(OwnStorageOver(tensor.storage()), keys, tensor.dtype());
  alias->set_sizes_and_strides(tensor.sizes(), tensor.strides(), tensor.storage_offset());
  // A Python scalar that became a tensor takes no part in type promotion.
  if (impl->is_wrapped_number()) alias->set_wrapped_number(true);
  if (!tensor.is_inference()) alias->set_version_counter(impl->version_counter());
  return at::Tensor(std::move(alias));
}

}  // namespace chorus
