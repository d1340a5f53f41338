#include "interpreter/src/engine_router.h"

#include <torch/csrc/autograd/engine.h>

#include "interpreter/src/interpreter_registry.h"
#include "interpreter/src/pyside_api.h"

namespace chorus {
namespace {

torch::autograd::Engine& RouteToCurrentInterpreter() {
  if (pyside::PySide* side = registry::Get(registry::CurrentSlot())) {
    return *static_cast<torch::autograd::Engine*>(side->AutogradEngine());
  }
  return torch::autograd::Engine::get_base_engine();
}

}  // namespace

void* CurrentDefaultAutogradEngine() { return &torch::autograd::Engine::get_default_engine(); }

void InstallAutogradEngineRouter() {
  torch::autograd::set_default_engine_stub(&RouteToCurrentInterpreter);
}

}  // namespace chorus
