// Handing runtime objects to Python code in chorus interpreters.
#ifndef CHORUS_RUNTIME_BINDINGS_H_
#define CHORUS_RUNTIME_BINDINGS_H_

#include <ATen/core/ivalue.h>

#include <memory>

#include "chorus/runtime/communicator.h"

namespace chorus {

// `comm` as the torch.classes.chorus.Communicator object Python code receives
// (pass it as a call argument); chorus.distributed.Communicator wraps it.
c10::IValue CommunicatorToIValue(std::shared_ptr<Communicator> comm);

}  // namespace chorus

#endif  // CHORUS_RUNTIME_BINDINGS_H_
