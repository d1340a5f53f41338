// The NCCL transport: one rank per GPU, all in this process.
//
// Built when the CUDA toolkit and NCCL are found (training/collectives/nccl/CMakeLists.txt),
// as its own library so that CPU-only users never load CUDA. Every collective
// is enqueued on the rank's own CUDA stream (a blocking stream, so it is
// ordered after work on the device's legacy default stream, where torch puts
// it) and waited for with the communicator's timeout: a rank that does not
// join is detected by polling, and the communicator is aborted, so no rank
// hangs.
#ifndef CHORUS_TRAINING_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
#define CHORUS_TRAINING_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/training/collectives/communicator.h"

namespace chorus {

// A group of ranks, rank r on CUDA device devices[r], in this process.
class NcclGroup {
 public:
  // Errors: no CUDA device, NCCL failures.
  static StatusOr<std::shared_ptr<NcclGroup>> Create(const std::vector<int>& devices,
                                                     const CommunicatorOptions& options = {});
  virtual ~NcclGroup() = default;
  virtual int size() const = 0;
  // Rank r's communicator. Initializes NCCL on first use; call it on the thread
  // that will act as rank r (every rank must, within the timeout).
  virtual StatusOr<std::shared_ptr<Communicator>> Rank(int rank) = 0;
};

}  // namespace chorus

#endif  // CHORUS_TRAINING_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
