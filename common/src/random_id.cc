#include "chorus/common/random_id.h"

#include <cstdint>
#include <cstdio>
#include <random>

namespace chorus {

std::string RandomUuid() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  const uint64_t high = (random() & ~0xf000ULL) | 0x4000ULL;       // version 4
  const uint64_t low = (random() & ~(3ULL << 62)) | (2ULL << 62);  // variant 10
  char text[37];
  std::snprintf(text, sizeof(text), "%08x-%04x-%04x-%04x-%012llx",
                static_cast<unsigned>(high >> 32), static_cast<unsigned>((high >> 16) & 0xffff),
                static_cast<unsigned>(high & 0xffff), static_cast<unsigned>(low >> 48),
                static_cast<unsigned long long>(low & 0xffffffffffffULL));
  return text;
}

}  // namespace chorus
