// Element loops behind the in-process collectives: reductions over the
// buffers of several ranks, read in place.
#ifndef CHORUS_TRAINING_COLLECTIVES_REDUCE_KERNELS_H_
#define CHORUS_TRAINING_COLLECTIVES_REDUCE_KERNELS_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/training/collectives/communicator.h"

namespace chorus::kernels {

// out[i] = op over k of inputs[k][i], for i in [begin, end). Accumulates in
// float for half types and in the type itself otherwise, in rank order, so
// the result equals a reduction computed on one rank in that order. `out` may
// be one of `inputs` (in place).
Status Reduce(c10::ScalarType dtype, ReduceOp op, const std::vector<const void*>& inputs, void* out,
              int64_t begin, int64_t end);

}  // namespace chorus::kernels

#endif  // CHORUS_TRAINING_COLLECTIVES_REDUCE_KERNELS_H_
