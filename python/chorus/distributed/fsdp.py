"""fully_shard: FSDP2-style sharded data parallelism.

Apply it to each unit (a transformer block), then to the root:

    for block in model.layers.values():
        fully_shard(block, comm)
    fully_shard(model, comm)

Each unit's own parameters are sharded on dim 0 across the ranks of `comm`
(padded to divide evenly); a rank keeps only its flat shard (an fp32
nn.Parameter that the optimizer updates). Around the unit's forward, the full
parameters are all-gathered (in `param_dtype`) and freed afterwards; backward
all-gathers them again where autograd needs them, then reduce-scatters the
gradients (averaged, in `reduce_dtype`) into the shard's .grad. Layout and
collectives are C++ (torch.classes.chorus.FlatShard); this module only hooks
modules and autograd.

HSDP: with `replicate` (the ranks that hold the same shard: one per host when
`comm` joins a host's ranks), each shard's gradient is then averaged across it,
so parameters never cross hosts, only one gradient reduction per step.
"""

import dataclasses
from typing import Any, Dict, List, Optional

import torch
from torch import nn

SHARD_NAME = "_fsdp_flat_shard"


@dataclasses.dataclass(frozen=True)
class MixedPrecision:
    """param_dtype: gathered parameters (compute); reduce_dtype: gradient reduction.

    None keeps the shard's dtype (param_dtype) or the param_dtype (reduce_dtype).
    """

    param_dtype: Optional[torch.dtype] = None
    reduce_dtype: Optional[torch.dtype] = None


class _Saved:
    """What autograd keeps instead of a gathered parameter (or a view of one)."""

    __slots__ = ("index", "size", "stride", "offset")

    def __init__(self, index, tensor):
        self.index = index
        self.size = tensor.size()
        self.stride = tensor.stride()
        self.offset = tensor.storage_offset()


class _Unshard(torch.autograd.Function):
    """flat shard -> full parameters; backward reduce-scatters their gradients."""

    @staticmethod
    def forward(ctx, unit, flat):
        ctx.unit = unit
        return tuple(unit.gather())

    @staticmethod
    def backward(ctx, *grads):
        unit = ctx.unit
        unit.regathered = None  # every use of the parameters in backward is done
        full_grads = [g.to(unit.reduce_dtype) if g is not None else
                      torch.zeros(shape, dtype=unit.reduce_dtype)
                      for g, shape in zip(grads, unit.shapes)]
        shard_grad = unit.layout.reduce_gradients(unit.comm.handle, full_grads, "avg")
        if unit.replicate is not None:
            shard_grad = shard_grad.contiguous()
            unit.replicate.all_reduce(shard_grad, "avg")
        return None, shard_grad.to(unit.flat.dtype)


class _Unit:
    def __init__(self, module: nn.Module, comm, mp: MixedPrecision, replicate=None):
        self.comm = comm
        self.replicate = replicate
        self.mp = mp
        self.entries = []  # (owner module, attribute, name relative to `module`)
        params = []
        for name, param in list(module.named_parameters()):
            if SHARD_NAME in name:
                continue  # an inner unit owns it
            owner_path, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            self.entries.append((owner, attr, name))
            params.append(param)
        if not params:
            raise ValueError("fully_shard: the module has no parameters of its own")
        self.shapes = [list(p.shape) for p in params]
        self.layout = torch.classes.chorus.FlatShard(self.shapes, comm.size, comm.rank)
        with torch.no_grad():
            flat = self.layout.shard([p.detach().contiguous() for p in params])
        self.flat = nn.Parameter(flat, requires_grad=any(p.requires_grad for p in params))
        for owner, attr, _ in self.entries:
            del owner._parameters[attr]
            owner.__dict__[attr] = torch.empty(0)  # set to the gathered tensor in forward
        module.register_parameter(SHARD_NAME, self.flat)
        self.storages: Dict[int, int] = {}  # storage address of a gathered parameter -> index
        self.regathered: Optional[List[torch.Tensor]] = None
        self.saving: Optional[Any] = None  # saved_tensors_hooks while forward runs
        module.register_forward_pre_hook(self.pre_forward)
        module.register_forward_hook(self.post_forward)

    @property
    def param_dtype(self):
        return self.mp.param_dtype or self.flat.dtype

    @property
    def reduce_dtype(self):
        return self.mp.reduce_dtype or self.param_dtype

    def gather(self):
        with torch.no_grad():
            return self.layout.unshard(self.comm.handle, self.flat.detach().to(self.param_dtype))

    def pre_forward(self, module, args):
        fulls = _Unshard.apply(self, self.flat)
        self.storages = {t.untyped_storage().data_ptr(): i for i, t in enumerate(fulls)}
        self.fulls = fulls
        for (owner, attr, _), tensor in zip(self.entries, fulls):
            owner.__dict__[attr] = tensor
        if torch.is_grad_enabled():
            self.saving = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
            self.saving.__enter__()

    def post_forward(self, module, args, output):
        if self.saving is not None:
            self.saving.__exit__(None, None, None)
            self.saving = None
        # Autograd kept markers, not the gathered parameters: free them now.
        for tensor in self.fulls:
            tensor.untyped_storage().resize_(0)
        self.fulls = None
        self.storages = {}
        return output

    def pack(self, tensor):
        try:
            index = self.storages.get(tensor.untyped_storage().data_ptr())
        except (RuntimeError, NotImplementedError):
            index = None
        return tensor if index is None else _Saved(index, tensor)

    def unpack(self, saved):
        if not isinstance(saved, _Saved):
            return saved
        if self.regathered is None:
            self.regathered = self.gather()
        return self.regathered[saved.index].as_strided(saved.size, saved.stride, saved.offset)


def fully_shard(module: nn.Module, comm, *, mp_policy: MixedPrecision = MixedPrecision(),
                replicate=None):
    """Shards `module`'s own parameters (those no inner unit took) across `comm`; with
    `replicate`, their gradients are also averaged across it (HSDP)."""
    if hasattr(module, "_fsdp_unit"):
        raise ValueError("fully_shard: module is already sharded")
    module._fsdp_unit = _Unit(module, comm, mp_policy, replicate)
    return module


def full_parameters(module: nn.Module, tp_comm=None) -> Dict[str, torch.Tensor]:
    """Every parameter of `module` in full, by its original name (a collective).

    Sharded units are all-gathered; with `tp_comm`, tensor-parallel shards are
    gathered across it too. Every rank gets the same result.
    """
    from chorus.distributed.tensor_parallel import gather_tensor_parallel
    result = {}
    for prefix, sub in module.named_modules():
        unit = sub.__dict__.get("_fsdp_unit")
        if unit is None:
            continue
        for (owner, attr, name), tensor in zip(unit.entries, unit.gather()):
            result[(prefix + "." if prefix else "") + name] = (owner, attr, tensor)
    for name, param in module.named_parameters():
        if SHARD_NAME not in name:
            owner_path, _, attr = name.rpartition(".")
            owner = module.get_submodule(owner_path) if owner_path else module
            result[name] = (owner, attr, param.detach())
    return {name: gather_tensor_parallel(owner, attr, tensor, tp_comm)
            for name, (owner, attr, tensor) in sorted(result.items())}
