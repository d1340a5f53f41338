"""Training the Llama 3 model on one rank of any (dp, tp) layout.

`run_rank` is what each rank's interpreter runs: build the model from a seed
(identical on every rank), parallelize it, train on this rank's share of each
global batch with AdamW, and report the global loss of every step.
"""

import time
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn.functional as F

import model as llama
import parallelize as llama_parallelize
from chorus.distributed import Communicator, MixedPrecision, full_parameters


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


def train_step(model, optimizer, tokens: torch.Tensor) -> torch.Tensor:
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits = model(inputs)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()


def run_rank(dp_handle, tp_handle, config: dict, param_dtype: str = ""):
    """Trains on this rank; returns {"losses": [global loss per step], "weights": full params,
    "step_s": [seconds per step]}.

    `dp_handle` / `tp_handle`: the host's communicators (None: no such parallelism).
    """
    config = TrainConfig(**config)
    dp = Communicator(dp_handle) if dp_handle is not None else None
    tp = Communicator(tp_handle) if tp_handle is not None else None
    overrides = {"n_kv_heads": config.n_kv_heads} if config.n_kv_heads else {}
    model = llama.build(config.model, seed=config.seed, **overrides)
    mp = MixedPrecision(param_dtype=getattr(torch, param_dtype) if param_dtype else None,
                        reduce_dtype=torch.float32)
    llama_parallelize.parallelize(model, dp=dp, tp=tp, mp_policy=mp)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    dp_rank, dp_size = (dp.rank, dp.size) if dp else (0, 1)
    if config.global_batch % dp_size:
        raise ValueError(f"global batch {config.global_batch} does not divide among {dp_size} ranks")
    share = config.global_batch // dp_size
    losses, step_s = [], []
    for tokens in synthetic_batches(model.args.vocab_size, config):
        start = time.perf_counter()
        loss = train_step(model, optimizer, tokens[dp_rank * share:(dp_rank + 1) * share])
        if dp is not None:
            dp.all_reduce(loss.reshape(1), "avg")
        step_s.append(time.perf_counter() - start)
        losses.append(float(loss))
    weights = full_parameters(model, tp) if (dp or tp) else {
        name: p.detach() for name, p in model.named_parameters()}
    return {"losses": losses, "weights": weights, "step_s": step_s}
