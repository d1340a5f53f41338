#include "chorus/server/models/response_cache.h"

#include <openssl/evp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string_view>

#include "chorus/package/dtype.h"
#include "chorus/package/torch_dtype.h"
#include "chorus/serving/model_values.h"

namespace chorus {
namespace {

// An incremental SHA-256 whose fields are length-prefixed, so that no two
// different sequences of fields digest alike.
class KeyDigest {
 public:
  KeyDigest() : context_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    // Fetched once: OpenSSL 3 looks EVP_sha256() up again at every init.
    static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    EVP_DigestInit_ex(context_.get(), sha256, nullptr);
  }
  void Add(const void* data, size_t size) {
    const uint64_t length = size;
    EVP_DigestUpdate(context_.get(), &length, sizeof(length));
    EVP_DigestUpdate(context_.get(), data, size);
  }
  void Add(const std::string& text) { Add(text.data(), text.size()); }
  void Add(uint64_t number) { Add(&number, sizeof(number)); }
  std::string Finish() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_DigestFinal_ex(context_.get(), digest, &size);
    return std::string(reinterpret_cast<const char*>(digest), size);
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> context_;
};

// An input's name, wire datatype and shape, the part of its key that precedes its contents.
void AddInputHeader(KeyDigest& digest, const std::string& name, std::string_view wire,
                    const int64_t* sizes, size_t dims) {
  digest.Add(name);
  digest.Add(wire.data(), wire.size());
  digest.Add(static_cast<uint64_t>(dims));
  for (size_t i = 0; i < dims; ++i) digest.Add(static_cast<uint64_t>(sizes[i]));
}

// A decoded input: its contents as the wire's raw layout has them (the
// tensor's bytes), or for strings each element.
void AddDecodedInput(KeyDigest& digest, const TensorSpec& spec, const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor tensor = value.toTensor().contiguous();
    const std::optional<Dtype> dtype = DtypeOf(tensor.scalar_type());
    const std::string wire = dtype ? InfoOf(*dtype).wire : c10::toString(tensor.scalar_type());
    AddInputHeader(digest, spec.name, wire, tensor.sizes().data(), tensor.sizes().size());
    digest.Add(tensor.data_ptr(), tensor.numel() * tensor.element_size());
    return;
  }
  StatusOr<StringTensor> strings = StringTensorFromIValue(value);
  if (!strings.ok()) return;  // decoded inputs are well-formed
  AddInputHeader(digest, spec.name, "BYTES", strings->shape.data(), strings->shape.size());
  digest.Add(static_cast<uint64_t>(strings->elements.size()));
  for (const std::string& element : strings->elements) digest.Add(element);
}

// The outputs asked for, by name, with what was asked of each (classes).
void AddOutputsAsked(KeyDigest& digest, const inference::ModelInferRequest& request) {
  std::map<std::string, std::string> outputs;
  for (const auto& output : request.outputs()) {
    std::string parameters;
    std::map<std::string, std::string> sorted;
    for (const auto& [name, value] : output.parameters()) {
      sorted[name] = value.SerializeAsString();
    }
    for (const auto& [name, value] : sorted) parameters += name + '\0' + value + '\0';
    outputs[output.name()] = parameters;
  }
  digest.Add(static_cast<uint64_t>(outputs.size()));
  for (const auto& [name, parameters] : outputs) {
    digest.Add(name);
    digest.Add(parameters);
  }
}

// The position of the request's input named `name` when it is the only one
// so named and its contents are its raw_input_contents alone; -1 otherwise.
int RawInputNamed(const inference::ModelInferRequest& request, const std::string& name) {
  int found = -1;
  for (int k = 0; k < request.inputs_size(); ++k) {
    if (request.inputs(k).name() != name) continue;
    if (found >= 0) return -1;
    found = k;
  }
  if (found < 0) return -1;
  const auto& input = request.inputs(found);
  const bool raw_only =
      !input.has_contents() && input.parameters().empty() && input.datatype() != "BYTES";
  return raw_only ? found : -1;
}

size_t SizeOf(const inference::ModelInferResponse& outputs, const std::string& key) {
  size_t bytes = key.size() + outputs.ByteSizeLong();
  return bytes + 256;  // bookkeeping: list node, map entry
}

}  // namespace

std::string ResponseCache::Key(uint64_t model_serial, const Manifest& manifest,
                               const inference::ModelInferRequest& request,
                               const std::vector<c10::IValue>& inputs) {
  KeyDigest digest;
  digest.Add(model_serial);
  for (size_t i = 0; i < inputs.size(); ++i)
    AddDecodedInput(digest, manifest.inputs.at(i), inputs[i]);
  AddOutputsAsked(digest, request);
  return digest.Finish();
}

std::optional<std::string> ResponseCache::WireKey(uint64_t model_serial, const Manifest& manifest,
                                                  const inference::ModelInferRequest& request) {
  const int inputs = request.inputs_size();
  if (static_cast<size_t>(inputs) != manifest.inputs.size() ||
      request.raw_input_contents_size() != inputs) {
    return std::nullopt;
  }
  KeyDigest digest;
  digest.Add(model_serial);
  for (const TensorSpec& spec : manifest.inputs) {
    const int k = RawInputNamed(request, spec.name);
    if (k < 0) return std::nullopt;
    const auto& input = request.inputs(k);
    AddInputHeader(digest, input.name(), input.datatype(), input.shape().data(),
                   static_cast<size_t>(input.shape_size()));
    digest.Add(request.raw_input_contents(k));
  }
  AddOutputsAsked(digest, request);
  return digest.Finish();
}

bool ResponseCache::Lookup(const std::string& key, inference::ModelInferResponse* response) {
  MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return false;
  entries_.splice(entries_.begin(), entries_, it->second);  // most recently used
  const inference::ModelInferResponse& kept = it->second->outputs;
  *response->mutable_outputs() = kept.outputs();
  *response->mutable_raw_output_contents() = kept.raw_output_contents();
  return true;
}

void ResponseCache::Insert(const std::string& key, const inference::ModelInferResponse& response) {
  Entry entry;
  entry.key = key;
  *entry.outputs.mutable_outputs() = response.outputs();
  *entry.outputs.mutable_raw_output_contents() = response.raw_output_contents();
  entry.bytes = SizeOf(entry.outputs, key);
  if (entry.bytes > capacity_) return;
  MutexLock lock(&mu_);
  if (by_key_.count(key)) return;  // answered twice at once: one is enough
  while (bytes_ + entry.bytes > capacity_ && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    by_key_.erase(entries_.back().key);
    entries_.pop_back();
  }
  bytes_ += entry.bytes;
  entries_.push_front(std::move(entry));
  by_key_[key] = entries_.begin();
}

size_t ResponseCache::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace chorus
