"""chorus.distributed: collectives, FSDP and tensor parallelism for chorus ranks.

In chorus, a rank is an interpreter (one per device on GPU machines), and the
host hands each rank its communicators. The heavy lifting runs in C++
(chorus/runtime): the collectives, the flattening and sharding of parameters.
This package only wires modules:

    from chorus import distributed as dist
    world = dist.Communicator(comm_handle)          # what the host passed in
    fully_shard(model.layers[0], world); fully_shard(model, world)
    parallelize_module(model, tp, {"layers.*.attention.wq": dist.ColwiseParallel()})
"""

from chorus.distributed._comm import Communicator
from chorus.distributed.fsdp import MixedPrecision, fully_shard, full_parameters
from chorus.distributed.tensor_parallel import (ColwiseParallel, RowwiseParallel,
                                                parallelize_module)

__all__ = ["Communicator", "MixedPrecision", "fully_shard", "full_parameters",
           "ColwiseParallel", "RowwiseParallel", "parallelize_module"]
