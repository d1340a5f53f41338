// Random identifiers for requests and sequences that arrive without one.
#ifndef CHORUS_COMMON_RANDOM_ID_H_
#define CHORUS_COMMON_RANDOM_ID_H_

#include <string>

namespace chorus {

// A random (version 4) UUID in its 36-character text form. Thread-safe: each
// thread draws from its own generator, seeded from std::random_device.
std::string RandomUuid();

}  // namespace chorus

#endif  // CHORUS_COMMON_RANDOM_ID_H_
