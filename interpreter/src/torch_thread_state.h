// libtorch's per-thread state that holds Python objects, kept per interpreter.
//
// TorchDispatchMode and TorchFunctionMode stacks (torch.set_default_device
// pushes one), saved-tensor default hooks and the Python dispatcher live in
// thread-locals of the one libtorch, and hold the Python objects of whichever
// interpreter set them. A thread that moves between interpreters (a session in
// a session, a Python kernel of another interpreter) must not see another
// interpreter's: each (thread, interpreter) keeps its own, parked while the
// thread works in another interpreter, as each thread of plain Python has its own.
#ifndef CHORUS_INTERPRETER_TORCH_THREAD_STATE_H_
#define CHORUS_INTERPRETER_TORCH_THREAD_STATE_H_

namespace chorus {

// The calling thread stops working in slot `from` (-1: the host, no
// interpreter) and starts working in slot `to`: parks `from`'s state and
// installs `to`'s (empty the first time). Cheap when neither has any.
void SwitchTorchThreadState(int from, int to);

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_TORCH_THREAD_STATE_H_
