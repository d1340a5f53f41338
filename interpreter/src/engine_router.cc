#include "interpreter/src/engine_router.h"

#include <torch/csrc/autograd/engine.h>

#include <atomic>

#include "chorus/common/logging.h"
#include "interpreter/src/pyside_api.h"

namespace chorus {
namespace {

// Indexed by library slot (unique per process). Read on every backward and
// every saved tensor: lock-free.
constexpr int kMaxSlots = 4096;
std::atomic<pyside::PySide*> g_sides[kMaxSlots];
std::atomic<int> g_slot_limit{0};  // one past the highest slot ever registered

torch::autograd::Engine& RouteToCurrentInterpreter() {
  const int limit = g_slot_limit.load(std::memory_order_acquire);
  for (int slot = 0; slot < limit; ++slot) {
    pyside::PySide* side = g_sides[slot].load(std::memory_order_acquire);
    if (side != nullptr && side->ThreadAttached()) {
      return *static_cast<torch::autograd::Engine*>(side->AutogradEngine());
    }
  }
  return torch::autograd::Engine::get_base_engine();
}

}  // namespace

void RegisterForEngineRouting(int slot, pyside::PySide* side) {
  if (slot < 0 || slot >= kMaxSlots) {
    Log().warn("interpreter slot {} is beyond the autograd engine router's table", slot);
    return;
  }
  g_sides[slot].store(side, std::memory_order_release);
  int limit = g_slot_limit.load();
  while (limit < slot + 1 && !g_slot_limit.compare_exchange_weak(limit, slot + 1)) {
  }
}

void UnregisterFromEngineRouting(int slot) {
  if (slot >= 0 && slot < kMaxSlots) g_sides[slot].store(nullptr, std::memory_order_release);
}

void InstallAutogradEngineRouter() {
  torch::autograd::set_default_engine_stub(&RouteToCurrentInterpreter);
}

}  // namespace chorus
