#include "interpreter/src/torch_thread_state.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/SavedTensorHooks.h>
#include <c10/core/impl/PythonDispatcherTLS.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <unordered_map>
#include <utility>

namespace chorus {

namespace {

struct TorchThreadState {
  c10::impl::TorchDispatchModeTLS dispatch_modes;
  at::impl::PythonTorchFunctionTLS function_modes;
  at::impl::SavedTensorDefaultHooksTLS saved_tensor_hooks;
  c10::impl::PyInterpreter* python_dispatcher = nullptr;
};

// Whether the calling thread's state is the one a new thread starts with.
bool ThreadStateIsEmpty() {
  return !c10::impl::TorchDispatchModeTLS::any_modes_set() &&
         at::impl::PythonTorchFunctionTLS::stack_len() == 0 &&
         at::impl::PythonTorchFunctionTLS::get_disabled_state() == at::impl::ENABLED &&
         at::SavedTensorDefaultHooks::get_tls_state().stack.empty() &&
         c10::impl::PythonDispatcherTLS::get_state() == nullptr;
}

TorchThreadState Capture() {
  TorchThreadState state;
  state.dispatch_modes = c10::impl::TorchDispatchModeTLS::get_state();
  state.function_modes = at::impl::PythonTorchFunctionTLS::get_state();
  state.saved_tensor_hooks = at::SavedTensorDefaultHooks::get_tls_state();
  state.python_dispatcher = c10::impl::PythonDispatcherTLS::get_state();
  return state;
}

void Install(TorchThreadState state) {
  c10::impl::TorchDispatchModeTLS::set_state(std::move(state.dispatch_modes));
  at::impl::PythonTorchFunctionTLS::set_state(state.function_modes);
  at::SavedTensorDefaultHooks::set_tls_state(state.saved_tensor_hooks);
  if (state.python_dispatcher != nullptr) {
    c10::impl::PythonDispatcherTLS::set_state(state.python_dispatcher);
  } else {
    c10::impl::PythonDispatcherTLS::reset_state();
  }
}

// States parked on this thread, by the slot they belong to.
thread_local std::unordered_map<int, TorchThreadState> tls_parked;

}  // namespace

void SwitchTorchThreadState(int from, int to) {
  if (from == to) return;
  auto parked = tls_parked.find(to);
  const bool empty = ThreadStateIsEmpty();
  if (empty && parked == tls_parked.end()) return;  // the common case: nothing to move
  if (!empty) tls_parked[from] = Capture();
  parked = tls_parked.find(to);
  if (parked != tls_parked.end()) {
    TorchThreadState state = std::move(parked->second);
    tls_parked.erase(parked);
    Install(std::move(state));
  } else {
    Install(TorchThreadState());
  }
}

}  // namespace chorus
