// Handing runtime objects to Python code in chorus interpreters.
#ifndef CHORUS_TRAINING_COLLECTIVES_BINDINGS_H_
#define CHORUS_TRAINING_COLLECTIVES_BINDINGS_H_

#include <ATen/core/ivalue.h>

#include <memory>

#include "chorus/training/collectives/communicator.h"

namespace chorus {

// `comm` as the torch.classes.chorus.Communicator object Python code receives
// (pass it as a call argument); chorus.distributed.Communicator wraps it.
// None for a null `comm` (a mesh dimension of size 1).
c10::IValue CommunicatorToIValue(std::shared_ptr<Communicator> comm);

}  // namespace chorus

#endif  // CHORUS_TRAINING_COLLECTIVES_BINDINGS_H_
