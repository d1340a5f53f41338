// Per-interpreter autograd engines behind libtorch's one default engine.
//
// libtorch calls Engine::get_default_engine() (saved-tensor hooks, C++
// backward) through one process-wide function pointer, which each
// interpreter's torch._C sets to its own Python engine. The router installed
// here instead returns the engine of the interpreter the calling thread works
// in (registry::CurrentSlot: torch releases the GIL around ops, so the GIL
// itself is not the test), and libtorch's base engine on threads in none.
#ifndef CHORUS_INTERPRETER_ENGINE_ROUTER_H_
#define CHORUS_INTERPRETER_ENGINE_ROUTER_H_

namespace chorus {

// Points libtorch's default-engine hook at the router (idempotent).
void InstallAutogradEngineRouter();
// The engine libtorch's default-engine hook returns now (a
// torch::autograd::Engine*): right after an interpreter's torch._C
// initialized, that interpreter's own.
void* CurrentDefaultAutogradEngine();

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_ENGINE_ROUTER_H_
