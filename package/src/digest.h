// SHA-256 (OpenSSL), as the manifest and signatures record it. Internal to
// chorus_package.
#ifndef CHORUS_PACKAGE_SRC_DIGEST_H_
#define CHORUS_PACKAGE_SRC_DIGEST_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::digest {

// Lowercase hex of the SHA-256 of `size` bytes at `data`.
std::string Sha256Hex(const uint8_t* data, size_t size);

}  // namespace chorus::digest

#endif  // CHORUS_PACKAGE_SRC_DIGEST_H_
