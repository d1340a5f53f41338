// A strict reader of a zip file's central directory (PKWARE APPNOTE 6.3),
// including zip64. libzip validates and decompresses; this adds what libzip
// does not expose: raw names (a NUL inside is visible) and the file offset
// of each record's data, which chorus maps instead of reading.
#ifndef CHORUS_PACKAGE_ZIP_DIRECTORY_H_
#define CHORUS_PACKAGE_ZIP_DIRECTORY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/common/status.h"

namespace chorus::zip {

struct Entry {
  std::string name;  // raw bytes, may contain anything
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  // after the local header, name and extra field
};

inline constexpr uint16_t kFlagEncrypted = 1 << 0;
inline constexpr uint16_t kMethodStored = 0;
inline constexpr uint16_t kMethodDeflated = 8;

// Parses the central directory of the `size` bytes at `data`, and each
// entry's local header. Errors are INVALID_ARGUMENT ("not a zip archive",
// "truncated ...", "inconsistent ...").
StatusOr<std::vector<Entry>> ReadDirectory(const uint8_t* data, size_t size);

}  // namespace chorus::zip

#endif  // CHORUS_PACKAGE_ZIP_DIRECTORY_H_
