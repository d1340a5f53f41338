#include "interpreter/src/interpreter_registry.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "chorus/common/logging.h"
#include "interpreter/src/pyside_api.h"
#include "interpreter/src/torch_thread_state.h"

namespace chorus::registry {
namespace {

struct Entry {
  std::atomic<pyside::PySide*> side{nullptr};
  // The interpreter's `type` object: the metatype every type of it ends at.
  std::atomic<const void*> type_type{nullptr};
};

Entry g_entries[kMaxSlots];
std::atomic<int> g_slot_limit{0};  // one past the highest slot ever added

// Sessions and kernel calls entered on this thread, innermost last.
thread_local std::vector<int> tls_scopes;

// CPython's object header (ob_refcnt, ob_type): the same for every 64-bit
// build chorus embeds (3.11, 3.12, not free-threaded).
struct ObjectHead {
  intptr_t refcnt;
  const ObjectHead* type;
};

}  // namespace

void Add(int slot, pyside::PySide* side) {
  if (slot < 0 || slot >= kMaxSlots) {
    Log().warn("interpreter slot {} is beyond the routing table", slot);
    return;
  }
  g_entries[slot].type_type.store(side->TypeType(), std::memory_order_release);
  g_entries[slot].side.store(side, std::memory_order_release);
  int limit = g_slot_limit.load();
  while (limit < slot + 1 && !g_slot_limit.compare_exchange_weak(limit, slot + 1)) {
  }
}

void Remove(int slot) {
  if (slot < 0 || slot >= kMaxSlots) return;
  g_entries[slot].side.store(nullptr, std::memory_order_release);
}

pyside::PySide* Get(int slot) {
  if (slot < 0 || slot >= kMaxSlots) return nullptr;
  return g_entries[slot].side.load(std::memory_order_acquire);
}

int CurrentSlot() {
  if (!tls_scopes.empty()) return tls_scopes.back();
  const int limit = g_slot_limit.load(std::memory_order_acquire);
  for (int slot = 0; slot < limit; ++slot) {
    pyside::PySide* side = g_entries[slot].side.load(std::memory_order_acquire);
    if (side != nullptr && side->ThreadAttached()) return slot;
  }
  return -1;
}

int OwnerOf(const void* object) {
  if (object == nullptr) return -1;
  // type(type(...)) reaches the interpreter's `type` in at most a few steps
  // (object -> its class -> a metaclass -> type).
  auto* type = static_cast<const ObjectHead*>(object)->type;
  for (int step = 0; step < 8 && type != nullptr && type->type != type; ++step) type = type->type;
  const int limit = g_slot_limit.load(std::memory_order_acquire);
  for (int slot = 0; slot < limit; ++slot) {
    if (g_entries[slot].type_type.load(std::memory_order_acquire) == type) {
      return g_entries[slot].side.load(std::memory_order_acquire) != nullptr ? slot : -1;
    }
  }
  return -1;
}

namespace {

int Innermost() { return tls_scopes.empty() ? -1 : tls_scopes.back(); }

}  // namespace

void EnterSlot(int slot) {
  SwitchTorchThreadState(Innermost(), slot);
  tls_scopes.push_back(slot);
}

void LeaveSlot(int slot) {
  // Sessions may be moved and so end out of order; remove the innermost entry.
  auto it = std::find(tls_scopes.rbegin(), tls_scopes.rend(), slot);
  if (it == tls_scopes.rend()) return;
  const int before = Innermost();
  tls_scopes.erase(std::next(it).base());
  SwitchTorchThreadState(before, Innermost());
}

ThreadScope::ThreadScope(int slot) : slot_(slot) { EnterSlot(slot); }
ThreadScope::~ThreadScope() { LeaveSlot(slot_); }

}  // namespace chorus::registry
