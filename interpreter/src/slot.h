// One interpreter as the manager keeps it.
#ifndef CHORUS_INTERPRETER_SLOT_H_
#define CHORUS_INTERPRETER_SLOT_H_

#include <atomic>
#include <memory>

#include "interpreter/src/home_thread.h"
#include "interpreter/src/pyside_api.h"

namespace chorus {
class Watchdog;

namespace internal {

// Cache-line aligned: `users` is written by every thread that claims a slot.
struct alignas(64) Slot {
  int index = 0;         // in the manager
  int library_slot = 0;  // process-unique; names this interpreter's library copies
  std::unique_ptr<pyside::PySide> side;
  HomeThread home;  // where `side` was started and is finalized
  // Sessions currently open on this interpreter (claimed or direct).
  std::atomic<int> users{0};
  std::atomic<int64_t> busy_ns{0};    // total time sessions held this interpreter
  std::atomic<bool> reserved{false};  // AcquireOne avoids it (a training job holds it)
  Watchdog* watchdog = nullptr;       // owned by the manager
};

}  // namespace internal
}  // namespace chorus

#endif  // CHORUS_INTERPRETER_SLOT_H_
