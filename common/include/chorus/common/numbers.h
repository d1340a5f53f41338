// Parsing numbers from untrusted text (folder names, headers, requests)
// without exceptions.
#ifndef CHORUS_COMMON_NUMBERS_H_
#define CHORUS_COMMON_NUMBERS_H_

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace chorus {

// The value of `text` if it is a non-empty string of decimal digits that fits
// an int64 ("007" is 7); nullopt otherwise (signs, spaces, overflow).
inline std::optional<int64_t> ParseNonNegativeInt64(std::string_view text) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace chorus

#endif  // CHORUS_COMMON_NUMBERS_H_
