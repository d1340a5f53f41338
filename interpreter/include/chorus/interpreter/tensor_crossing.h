// Tensors crossing between interpreters and the host.
//
// A TensorImpl, and with torch 2.x a StorageImpl, holds the Python object of
// the interpreter that wrapped it, and torch hands that object back to whoever
// wraps the same C++ object again (THPVariable_Wrap, THPStorage_Wrap). So no
// C++ object that one interpreter may have wrapped ever reaches another: every
// crossing makes new ones over the same memory.
#ifndef CHORUS_INTERPRETER_TENSOR_CROSSING_H_
#define CHORUS_INTERPRETER_TENSOR_CROSSING_H_

namespace at {
class Tensor;
}  // namespace at
namespace c10 {
struct StorageImpl;
}  // namespace c10

namespace chorus {

// A new TensorImpl over `tensor`'s memory: same sizes, strides, offset, dtype
// and version counter, no autograd history; an inference tensor if `tensor` is
// one. With torch 2.x it also has its own StorageImpl, whose memory is kept
// alive by a reference to the original storage (released later, on a thread
// that holds no GIL, when that storage has a Python object). Strided dense
// tensors only; other layouts get a plain detach(). Any thread.
at::Tensor CrossingAlias(const at::Tensor& tensor);

// The storage whose memory `tensor` uses, looking through crossing aliases:
// one and the same for every interpreter's alias of one tensor (identity for
// tests and memory accounting; do not use it to reach the memory). Any thread.
const c10::StorageImpl* RootStorage(const at::Tensor& tensor);

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_TENSOR_CROSSING_H_
