"""Parallelism for the Llama 3 model, applied from outside model.py (torchtitan's split).

Tensor parallelism inside each block (Megatron: wq/wk/wv and w1/w3 column-wise,
wo and w2 row-wise), then FSDP over the data-parallel ranks: every block is a
unit, and the root keeps embeddings, final norm and output. Either may be
absent; with both, this is 2D parallelism (TP inside FSDP).
"""

from chorus.distributed import (ColwiseParallel, MixedPrecision, RowwiseParallel, fully_shard,
                                parallelize_module)

TP_PLAN = {
    "attention.wq": ColwiseParallel(),
    "attention.wk": ColwiseParallel(),
    "attention.wv": ColwiseParallel(),
    "attention.wo": RowwiseParallel(),
    "feed_forward.w1": ColwiseParallel(),
    "feed_forward.w3": ColwiseParallel(),
    "feed_forward.w2": RowwiseParallel(),
}


def apply_tp(model, tp):
    args = model.args
    n_kv_heads = args.n_kv_heads or args.n_heads
    if args.n_heads % tp.size or n_kv_heads % tp.size:
        raise ValueError(f"tensor parallel degree {tp.size} must divide n_heads ({args.n_heads}) "
                         f"and n_kv_heads ({n_kv_heads})")
    for block in model.layers.values():
        parallelize_module(block, tp, TP_PLAN)


def apply_fsdp(model, dp, mp_policy=None, replicate=None):
    if mp_policy is None:
        mp_policy = MixedPrecision()
    for block in model.layers.values():
        fully_shard(block, dp, mp_policy=mp_policy, replicate=replicate)
    fully_shard(model, dp, mp_policy=mp_policy, replicate=replicate)


def parallelize(model, dp=None, tp=None, mp_policy=None, replicate=None):
    """Applies TP (if `tp`) then FSDP (if `dp`; HSDP with `replicate`) in place; returns
    the model."""
    if mp_policy is None:
        mp_policy = MixedPrecision()
    if tp is not None and tp.size > 1:
        apply_tp(model, tp)
    if dp is not None:
        apply_fsdp(model, dp, mp_policy, replicate)
    return model


def parallelize_for_job(model, dp, tp, mp_policy, replicate=None):
    """The signature chorus.training jobs call (see chorus/training/trainer.py); HSDP
    jobs across servers pass `replicate`."""
    parallelize(model, dp=dp, tp=tp, mp_policy=mp_policy, replicate=replicate)
