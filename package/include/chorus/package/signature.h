// Signed archives: the public keys an operator trusts, and the check that an
// archive was signed by one of them and has not changed since.
//
// `chorus-package sign` adds to a chorus package one record per signing key
// (format.h: kSignatureDirectory) with an Ed25519 signature of the manifest's
// SHA-256; the manifest holds every record's SHA-256, so the signature covers
// them all (docs/package-format.md, "Signed archives"). Crypto is OpenSSL's.
#ifndef CHORUS_PACKAGE_SIGNATURE_H_
#define CHORUS_PACKAGE_SIGNATURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/package/archive.h"

namespace chorus {

class TrustedKeys {
 public:
  // Reads every *.pem file in `directory`: Ed25519 public keys in PEM
  // (SubjectPublicKeyInfo, as `chorus-package keygen` or `openssl pkey
  // -pubout` write them). NOT_FOUND without the directory; INVALID_ARGUMENT
  // naming a file that is not such a key; FAILED_PRECONDITION if it has none.
  static StatusOr<std::shared_ptr<const TrustedKeys>> FromDirectory(const std::string& directory);

  virtual ~TrustedKeys() = default;

  // OK when `archive` carries a valid signature by one of these keys and
  // every record is as signed. Else PERMISSION_DENIED saying which: "not
  // signed", "signed by key ..., which is not trusted", "signature ... does
  // not verify", "manifest changed after signing", "record ... changed after
  // signing", "record ... added after signing". Reads every record. Any thread.
  virtual Status Verify(const Archive& archive) const = 0;

  // The key ids (format.h: kKeyIdHexDigits hex digits of the SHA-256 of the
  // raw public key), sorted.
  virtual std::vector<std::string> key_ids() const = 0;
  virtual const std::string& directory() const = 0;
};

}  // namespace chorus

#endif  // CHORUS_PACKAGE_SIGNATURE_H_
