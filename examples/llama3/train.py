"""Training the Llama 3 model on one rank of any (dp, tp) layout.

`run_rank` is what each rank's interpreter runs: build the model from a seed
(identical on every rank), parallelize it, train on this rank's share of each
global batch, and report the global loss of every step. The loop is the
training service's (chorus.training.trainer.Job), fed from model.py and
parallelize.py directly instead of from an archive.
"""

from dataclasses import dataclass
from typing import List, Optional

import torch

import model as llama
import parallelize as llama_parallelize
from chorus.distributed import Communicator
from chorus.training.spec import JobSpec, OptimizerSpec
from chorus.training.trainer import Job


@dataclass
class TrainConfig:
    model: str = "debug"
    n_kv_heads: Optional[int] = None
    steps: int = 10
    global_batch: int = 8
    seq_len: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.1
    seed: int = 0


def synthetic_batches(vocab: int, config: TrainConfig) -> List[torch.Tensor]:
    """Deterministic, learnable token batches (global_batch, seq_len + 1) from `seed`.

    Each row counts up by a per-row stride from a random start, so the next
    token is predictable from the previous ones and the loss can fall.
    """
    generator = torch.Generator().manual_seed(config.seed + 1)
    positions = torch.arange(config.seq_len + 1)
    batches = []
    for _ in range(config.steps):
        start = torch.randint(0, vocab, (config.global_batch, 1), generator=generator)
        stride = torch.randint(1, 4, (config.global_batch, 1), generator=generator)
        batches.append((start + stride * positions) % vocab)
    return batches


def job_spec(config: TrainConfig, param_dtype: str = "") -> JobSpec:
    model_config = {"name": config.model}
    if config.n_kv_heads:
        model_config["n_kv_heads"] = config.n_kv_heads
    return JobSpec(model_factory="model:build", model_config=model_config, seed=config.seed,
                   optimizer=OptimizerSpec(lr=config.lr, weight_decay=config.weight_decay),
                   global_batch=config.global_batch, seq_len=config.seq_len,
                   param_dtype=param_dtype)


def run_rank(dp_handle, tp_handle, config: dict, param_dtype: str = "", shard_handle=None,
             replicate_handle=None):
    """Trains on this rank; returns {"losses": [global loss per step], "weights": full params,
    "step_s": [seconds per step]}.

    `dp_handle` / `tp_handle`: the host's communicators (None: no such parallelism).
    HSDP: with `shard_handle` and `replicate_handle`, parameters are sharded across the
    first (a host's ranks) and gradients averaged across the second (one rank per
    host); `dp_handle` (every rank) still splits the data and averages the loss.
    """
    config = TrainConfig(**config)
    dp = Communicator(dp_handle) if dp_handle is not None else None
    tp = Communicator(tp_handle) if tp_handle is not None else None
    parallelize = llama_parallelize.parallelize_for_job
    if shard_handle is not None:
        shard, replicate = Communicator(shard_handle), Communicator(replicate_handle)

        def parallelize(model, dp, tp, mp_policy):
            llama_parallelize.parallelize(model, dp=shard, tp=tp, mp_policy=mp_policy,
                                          replicate=replicate)
    job = Job(job_spec(config, param_dtype), dp, tp, model_factory=llama.build,
              parallelize=parallelize)
    losses, step_s = [], []
    for tokens in synthetic_batches(job.model.args.vocab_size, config):
        metrics = job.step(tokens)
        losses.append(metrics["loss"])
        step_s.append(metrics["step_s"])
    weights = job.full_state() if (dp or tp) else {
        name: p.detach() for name, p in job.model.named_parameters()}
    return {"losses": losses, "weights": weights, "step_s": step_s}
