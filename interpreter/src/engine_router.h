// Per-interpreter autograd engines behind libtorch's one default engine.
//
// libtorch calls Engine::get_default_engine() (saved-tensor hooks, C++
// backward) through one process-wide function pointer, which each
// interpreter's torch._C sets to its own Python engine. The router installed
// here instead returns the engine of the interpreter the calling thread is
// attached to (torch releases the GIL around ops, so the GIL itself is not
// the test), and libtorch's base engine on threads attached to none. A thread
// inside sessions of two interpreters at once gets the lower slot's engine.
#ifndef CHORUS_INTERPRETER_ENGINE_ROUTER_H_
#define CHORUS_INTERPRETER_ENGINE_ROUTER_H_

namespace chorus {
namespace pyside {
class PySide;
}  // namespace pyside

// Makes `side` (library slot `slot`) a candidate for routing. Any thread.
void RegisterForEngineRouting(int slot, pyside::PySide* side);
// Removes it; call before the interpreter is finalized.
void UnregisterFromEngineRouting(int slot);
// Points libtorch's default-engine hook at the router (idempotent).
void InstallAutogradEngineRouter();

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_ENGINE_ROUTER_H_
