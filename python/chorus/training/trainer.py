"""One rank of a training job: model, parallelism, optimizer, data and checkpoints.

Everything model-specific comes from the job's archive (a chorus package):
  model_factory   "module:function" -> nn.Module, called with model_config and seed
  parallelize     "module:function"(model, dp, tp, mp_policy) applying TP/FSDP
                  (optional: FSDP over each block-like child then the root); for
                  HSDP across hosts it is called with replicate=<the group across hosts>
  data_loader     "module:function"(step, global_batch, seq_len, seed) ->
                  int64 tokens [global_batch, seq_len + 1] for that step
Jobs live in this interpreter's `_JOBS`, keyed by job id.
"""

import gc
import json
import math
import os
import resource
import time

import torch
import torch.nn.functional as F

from chorus.distributed import Communicator, MixedPrecision, full_parameters, fully_shard
from chorus.package.importer import ChorusImporter
from chorus.training.spec import JobSpec

_JOBS: dict = {}


def _resolve(importer, spec_name, what):
    module, _, function = spec_name.partition(":")
    if not module or not function:
        raise ValueError(f"{what} must be 'module:function', got {spec_name!r}")
    return getattr(importer.import_module(module), function)


def _default_parallelize(model, dp, tp, mp_policy, replicate=None):
    if tp is not None and tp.size > 1:
        raise ValueError("tensor parallelism needs the archive's parallelize function")
    if dp is None:
        return
    for child in model.modules():
        if isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            for block in child.children():
                fully_shard(block, dp, mp_policy=mp_policy, replicate=replicate)
    fully_shard(model, dp, mp_policy=mp_policy, replicate=replicate)


def _rank_device(devices, rank, world):
    """The device of `rank`: devices[rank], or the CPU when none are listed."""
    if not devices:
        return torch.device("cpu")
    if len(devices) != world:
        raise ValueError(f"devices lists {len(devices)} devices for {world} ranks")
    device = torch.device(devices[rank])
    if device.type == "cuda" and (not torch.cuda.is_available() or
                                  (device.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"device {devices[rank]} is not available on this server")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {devices[rank]} is not supported (cpu, cuda:N)")
    return device


def _lr_lambda(schedule):
    kind = schedule.kind
    if kind == "constant":
        return lambda step: 1.0
    if kind == "warmup_cosine":
        warmup = max(1, int(schedule.warmup_steps))
        total = max(warmup + 1, int(schedule.total_steps))
        floor = float(schedule.min_lr_ratio)

        def factor(step):
            if step < warmup:
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / (total - warmup))
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        return factor
    raise ValueError(f"unknown lr schedule {kind!r} (constant, warmup_cosine)")


class Job:
    """One rank's training: the one loop behind the training service and
    examples/llama3/train.py.

    `model_factory(seed=..., **spec.model_config)` builds the model;
    `parallelize(model, dp, tp, mp_policy)` shards it (default: FSDP over each
    block-like child, then the root); `data_loader(step, global_batch, seq_len,
    seed)` makes a step's tokens when step() is given none. `importer` is the
    archive the pieces came from (needed by export). HSDP: with `shard` and
    `replicate`, parameters are sharded over the first (a host's ranks) and
    gradients averaged over the second (across hosts); `dp` (every rank) still
    splits the data and averages the loss.
    """

    def __init__(self, spec, dp, tp, model_factory, parallelize=None, data_loader=None,
                 importer=None, shard=None, replicate=None):
        self.spec = spec
        self.dp, self.tp = dp, tp
        self.rank = (dp.rank if dp else 0) * (tp.size if tp else 1) + (tp.rank if tp else 0)
        self.importer = importer
        self.model_factory = model_factory
        self.model = model_factory(seed=int(spec.seed), **spec.model_config)
        self.flops_per_token = self._flops_per_token()  # on the whole model, before sharding
        self.device = _rank_device(spec.devices, self.rank,
                                   (dp.size if dp else 1) * (tp.size if tp else 1))
        self.model.to(self.device)
        param_dtype = spec.param_dtype
        mp = MixedPrecision(param_dtype=getattr(torch, param_dtype) if param_dtype else None,
                            reduce_dtype=torch.float32)
        if replicate is None:
            (parallelize or _default_parallelize)(self.model, dp, tp, mp)
        else:
            (parallelize or _default_parallelize)(self.model, shard, tp, mp, replicate=replicate)
        # FSDP casts parameters itself; without it, autocast gives the same
        # low-precision compute with fp32 master weights.
        self.autocast_dtype = mp.param_dtype if dp is None else None
        self.data = data_loader
        opt = spec.optimizer
        if opt.name != "adamw":
            raise ValueError(f"unknown optimizer {opt.name!r} (adamw)")
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=float(opt.lr), betas=(float(opt.beta1), float(opt.beta2)),
            eps=float(opt.eps), weight_decay=float(opt.weight_decay))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _lr_lambda(spec.lr_schedule))
        self.loss = spec.loss
        if self.loss not in ("cross_entropy", "mse"):
            raise ValueError(f"unknown loss {self.loss!r} (cross_entropy, mse)")
        self.step_count = 0

    @classmethod
    def from_archive(cls, archive, spec, dp, tp, shard=None, replicate=None):
        """The job whose pieces are the spec's "module:function" names in `archive`."""
        importer = ChorusImporter(archive)

        def piece(name, what):
            return _resolve(importer, name, what) if name else None
        return cls(spec, dp, tp,
                   model_factory=_resolve(importer, spec.model_factory, "model_factory"),
                   parallelize=piece(spec.parallelize, "parallelize"),
                   data_loader=piece(spec.data_loader, "data_loader"), importer=importer,
                   shard=shard, replicate=replicate)

    def _flops_per_token(self):
        """torchtitan's: 6 (N - N_embedding) + 12 L H head_dim seq_len, on the full model."""
        args = getattr(self.model, "args", None)
        total = sum(p.numel() for p in self.model.parameters())
        if args is None:
            return 6.0 * total
        embedding = args.vocab_size * args.dim
        seq_len = int(self.spec.seq_len)
        return (6.0 * (total - embedding) +
                12.0 * args.n_layers * args.n_heads * (args.dim // args.n_heads) * seq_len)

    def _local_batch(self, tokens):
        dp_rank, dp_size = (self.dp.rank, self.dp.size) if self.dp else (0, 1)
        if tokens.shape[0] % dp_size:
            raise ValueError(f"batch of {tokens.shape[0]} does not divide among {dp_size} "
                             "data-parallel ranks")
        share = tokens.shape[0] // dp_size
        return tokens[dp_rank * share:(dp_rank + 1) * share].to(self.device)

    def step(self, tokens=None):
        if tokens is None:
            if self.data is None:
                raise ValueError("no batch given and the job has no data_loader")
            tokens = self.data(self.step_count, int(self.spec.global_batch),
                               int(self.spec.seq_len), int(self.spec.seed))
        local = self._local_batch(tokens)
        start = time.perf_counter()
        self.model.train()
        with torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.bfloat16,
                            enabled=self.autocast_dtype is not None):
            if self.loss == "cross_entropy":
                inputs, targets = local[:, :-1], local[:, 1:]
                logits = self.model(inputs)
                loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
                local_tokens = targets.numel()
            else:
                inputs, targets = local[..., :-1], local[..., -1:]
                loss = F.mse_loss(self.model(inputs).float(), targets.float())
                local_tokens = inputs.shape[0]
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        loss = loss.detach().reshape(1).clone()
        if self.dp is not None:
            self.dp.all_reduce(loss, "avg")
        self.step_count += 1
        seconds = time.perf_counter() - start
        return {"step": self.step_count, "loss": float(loss), "lr": lr, "step_s": seconds,
                "tokens": float(local_tokens), "flops_per_token": self.flops_per_token,
                "memory_mib": _memory_mib(self.device)}

    def state(self):
        # Tensors, and whatever extra state a module keeps (get_extra_state).
        return {"model": {name: value.detach().clone() if isinstance(value, torch.Tensor) else value
                          for name, value in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "step": self.step_count}

    def save(self, directory):
        torch.save(self.state(), os.path.join(directory, f"rank-{self.rank:05d}.pt"))

    def load(self, directory):
        state = torch.load(os.path.join(directory, f"rank-{self.rank:05d}.pt"))
        missing, unexpected = self.model.load_state_dict(state["model"], strict=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step_count = int(state["step"])

    def evaluate(self, tokens):
        self.model.eval()
        with torch.no_grad():
            return self.model(tokens.to(self.device)).float().cpu()

    def full_state(self):
        return full_parameters(self.model, self.tp)


def _memory_mib(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / (1 << 20)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --- What the host calls on every rank ------------------------------------

def create_rank(job_id, archive, spec_json, dp_handle, tp_handle, shard_handle=None,
                replicate_handle=None):
    def group(handle):
        return Communicator(handle) if handle is not None else None
    spec = JobSpec.from_dict(json.loads(spec_json))
    _JOBS[job_id] = Job.from_archive(archive, spec, group(dp_handle), group(tp_handle),
                                     group(shard_handle), group(replicate_handle))


def agree(job_id, ok):
    """True when every rank of the job (every host's) says ok: a collective, so a
    lost host fails it rather than leaving the others to decide alone."""
    job = _JOBS[job_id]
    votes = torch.tensor([1.0 if ok else 0.0])
    for group in (job.dp, job.tp):
        if group is not None:
            group.all_reduce(votes, "sum")
    world = (job.dp.size if job.dp else 1) * (job.tp.size if job.tp else 1)
    return bool(votes.item() == world)


def step(job_id, tokens):
    return _JOBS[job_id].step(tokens)


def save(job_id, directory):
    _JOBS[job_id].save(directory)


def load(job_id, directory):
    _JOBS[job_id].load(directory)


def evaluate(job_id, tokens):
    return _JOBS[job_id].evaluate(tokens)


def full_state(job_id):
    return _JOBS[job_id].full_state()


def export(job_id, path, name, version, example_len):
    """Every rank gathers the weights (a collective); rank 0 writes them, with the
    archive's model code, as a servable chorus package at `path`."""
    from chorus.package import create_package
    job = _JOBS[job_id]
    weights = job.full_state()
    if job.rank != 0:
        return
    model = job.model_factory(seed=int(job.spec.seed), **job.spec.model_config)
    model.load_state_dict(weights)
    model.eval()
    example = torch.zeros(1, int(example_len), dtype=torch.long)
    # A language model takes sequences of any length: dim 1 of tokens and logits.
    sequence = {"tokens": [1], "logits": [1]} if job.loss == "cross_entropy" else {}
    # The job's other pieces travel too, so the export can itself be trained on.
    pieces = [job.spec.parallelize, job.spec.data_loader]
    modules = sorted({piece.split(":")[0] for piece in pieces if piece})
    create_package(path, model, (example,), name=name, version=str(version), progress=False,
                   importer=job.importer, output_names=["logits"], input_names=["tokens"],
                   dynamic_axes=sequence, modules=modules)


def delete(job_id):
    _JOBS.pop(job_id, None)
    # A job's model, optimizer and modules hold each other in cycles: collected
    # now, its memory is back when DeleteJob answers, not at a later collection.
    gc.collect()
