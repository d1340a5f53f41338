#include "chorus/package/signature.h"

#include <dirent.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "chorus/common/file_util.h"
#include "chorus/package/format.h"
#include "package/src/digest.h"

namespace chorus {
namespace {

namespace fmt = package_format;
using Json = nlohmann::json;
using Key = std::shared_ptr<EVP_PKEY>;

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The Ed25519 public key in PEM `text`, or nullptr.
Key ParsePublicKey(const std::string& text) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(text.data(), static_cast<int>(text.size())), BIO_free);
  EVP_PKEY* key = bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  if (key == nullptr) return nullptr;
  Key owned(key, EVP_PKEY_free);
  return EVP_PKEY_id(key) == EVP_PKEY_ED25519 ? owned : nullptr;
}

std::string KeyId(EVP_PKEY* key) {
  unsigned char raw[64];
  size_t length = sizeof(raw);
  if (EVP_PKEY_get_raw_public_key(key, raw, &length) != 1) return "";
  return digest::Sha256Hex(raw, length).substr(0, fmt::kKeyIdHexDigits);
}

// Standard base64 (with padding) decoded, or nullopt.
std::optional<std::string> Base64Decode(const std::string& text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  std::string out(text.size() / 4 * 3, '\0');
  int length = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                               reinterpret_cast<const unsigned char*>(text.data()),
                               static_cast<int>(text.size()));
  if (length < 0) return std::nullopt;
  size_t padding = std::count(text.end() - 2, text.end(), '=');
  out.resize(static_cast<size_t>(length) - padding);
  return out;
}

bool VerifyEd25519(EVP_PKEY* key, const std::string& signature, const std::string& message) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  EVP_MD_CTX_free);
  return context && EVP_DigestVerifyInit(context.get(), nullptr, nullptr, nullptr, key) == 1 &&
         EVP_DigestVerify(context.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                          signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
                          message.size()) == 1;
}

Status Denied(const Archive& archive, const std::string& what) {
  return PermissionDeniedError(archive.path() + ": " + what);
}

// One signature record, as chorus-package sign writes it.
struct SignatureRecord {
  std::string name;
  std::string key_id;
  std::string manifest_sha256;
  std::string signature;  // raw bytes
};

StatusOr<SignatureRecord> ReadSignature(const Archive& archive, const std::string& name) {
  CHORUS_ASSIGN_OR_RETURN(RecordData data, archive.Read(name));
  Json json = Json::parse(data.data, data.data + data.size, nullptr, /*allow_exceptions=*/false);
  auto text = [&](const char* key) {
    return json.is_object() && json.contains(key) && json[key].is_string()
               ? json[key].get<std::string>()
               : std::string();
  };
  SignatureRecord record{name, text("key_id"), text("manifest_sha256"), ""};
  std::optional<std::string> signature = Base64Decode(text("signature"));
  if (text("format") != fmt::kSignatureFormatName) {
    return Denied(archive, "signature record " + name + " is not a chorus signature");
  }
  if (text("algorithm") != fmt::kSignatureAlgorithm || record.key_id.empty() || !signature ||
      record.manifest_sha256.size() != 64 || !json["version"].is_number_integer() ||
      json["version"].get<int>() != fmt::kSignatureFormatVersion) {
    return Denied(archive, "signature record " + name + " is malformed");
  }
  record.signature = std::move(*signature);
  return record;
}

// Records the manifest cannot list, written after it: torch's zip writer adds
// these when the archive is closed. byteorder changes how weights read, so
// only its one value is allowed.
bool WrittenAfterTheManifest(const Archive& archive, const std::string& name) {
  if (name == fmt::kManifestRecord || name == fmt::kTorchPackageVersionRecord ||
      name == ".data/serialization_id" || name.rfind(fmt::kSignatureDirectory, 0) == 0) {
    return true;
  }
  if (name != "byteorder") return false;
  StatusOr<RecordData> data = archive.Read(name);
  return data.ok() &&
         std::string(reinterpret_cast<const char*>(data->data), data->size) == "little";
}

Status CheckNothingAdded(const Archive& archive) {
  for (const ArchiveRecord& record : archive.records()) {
    if (archive.manifest()->files.count(record.name) ||
        WrittenAfterTheManifest(archive, record.name)) {
      continue;
    }
    return Denied(archive, "record " + record.name + " was added after signing");
  }
  return OkStatus();
}

class TrustedKeysImpl final : public TrustedKeys {
 public:
  TrustedKeysImpl(std::string directory, std::map<std::string, Key> keys)
      : directory_(std::move(directory)), keys_(std::move(keys)) {}

  Status Verify(const Archive& archive) const override {
    if (!archive.manifest()) {
      return Denied(archive, std::string("is not signed: only chorus packages carry signatures (") +
                                 FormatInfo(archive.format()).description +
                                 "; convert it with chorus-package create --from-...)");
    }
    std::vector<std::string> untrusted;
    for (const ArchiveRecord& record : archive.records()) {
      if (record.name.rfind(fmt::kSignatureDirectory, 0) != 0) continue;
      CHORUS_ASSIGN_OR_RETURN(SignatureRecord signature, ReadSignature(archive, record.name));
      auto key = keys_.find(signature.key_id);
      if (key == keys_.end()) {
        untrusted.push_back(signature.key_id);
        continue;
      }
      return VerifyWith(archive, key->second.get(), signature);
    }
    if (untrusted.empty()) {
      return Denied(archive,
                    "is not signed (sign it with chorus-package sign; this server "
                    "serves only archives signed by a key in " +
                        directory_ + ")");
    }
    std::string ids;
    for (const std::string& id : untrusted) ids += (ids.empty() ? "" : ", ") + id;
    return Denied(archive, "signed by key " + ids + ", which is not trusted (the trusted keys " +
                               "are the .pem files in " + directory_ + ")");
  }

  std::vector<std::string> key_ids() const override {
    std::vector<std::string> ids;
    for (const auto& [id, key] : keys_) ids.push_back(id);
    return ids;
  }
  const std::string& directory() const override { return directory_; }

 private:
  static Status VerifyWith(const Archive& archive, EVP_PKEY* key,
                           const SignatureRecord& signature) {
    const std::string message = fmt::kSignedMessagePrefix + signature.manifest_sha256;
    if (!VerifyEd25519(key, signature.signature, message)) {
      return Denied(archive, "the signature by key " + signature.key_id + " (" + signature.name +
                                 ") does not verify: the signature record was changed");
    }
    CHORUS_ASSIGN_OR_RETURN(RecordData manifest, archive.Read(fmt::kManifestRecord));
    if (digest::Sha256Hex(manifest.data, manifest.size) != signature.manifest_sha256) {
      return Denied(archive, "the manifest changed after signing");
    }
    Status records = archive.VerifySha256();
    if (!records.ok()) {
      return Denied(archive, "a record changed after signing (" + records.message() + ")");
    }
    return CheckNothingAdded(archive);
  }

  std::string directory_;
  std::map<std::string, Key> keys_;  // by key id
};

}  // namespace

StatusOr<std::shared_ptr<const TrustedKeys>> TrustedKeys::FromDirectory(
    const std::string& directory) {
  std::unique_ptr<DIR, decltype(&closedir)> dir(opendir(directory.c_str()), closedir);
  if (!dir) return NotFoundError("no trusted keys directory " + directory);
  std::set<std::string> files;
  while (dirent* entry = readdir(dir.get())) {
    if (EndsWith(entry->d_name, ".pem")) files.insert(entry->d_name);
  }
  std::map<std::string, Key> keys;
  for (const std::string& file : files) {
    const std::string path = directory + "/" + file;
    CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    Key key = ParsePublicKey(text);
    if (!key) {
      return InvalidArgumentError(path +
                                  " is not an Ed25519 public key in PEM (chorus-package "
                                  "keygen writes one: NAME.pub.pem)");
    }
    keys[KeyId(key.get())] = key;
  }
  if (keys.empty()) {
    return FailedPreconditionError("no trusted keys (*.pem) in " + directory);
  }
  return std::shared_ptr<const TrustedKeys>(
      std::make_shared<TrustedKeysImpl>(directory, std::move(keys)));
}

}  // namespace chorus
