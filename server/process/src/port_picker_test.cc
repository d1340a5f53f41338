#include "server/process/src/port_picker.h"

#include <gtest/gtest.h>

#include <set>

namespace chorus {
namespace {

// The kernel hands out ports it has just released again; a supervisor that
// took one port twice gave gRPC and HTTP the same one, and every serving
// process it started then failed to listen (server tests hung on it).
TEST(PortPickerTest, PortsPickedByOnePickerAreDistinct) {
  PortPicker picker("127.0.0.1");
  std::set<int> ports;
  for (int i = 0; i < 300; ++i) {
    const int port = picker.Pick();
    ASSERT_GT(port, 0);
    EXPECT_TRUE(ports.insert(port).second) << "port " << port << " picked twice";
  }
}

TEST(PortPickerTest, ARunOfPortsOverlapsNoOtherPick) {
  PortPicker picker("127.0.0.1");
  std::set<int> ports;
  for (int i = 0; i < 100; ++i) {
    const int count = 1 + i % 3;
    const int first = picker.Pick(count);
    ASSERT_GT(first, 0);
    for (int port = first; port < first + count; ++port) {
      EXPECT_TRUE(ports.insert(port).second) << "port " << port << " picked twice";
    }
  }
}

}  // namespace
}  // namespace chorus
