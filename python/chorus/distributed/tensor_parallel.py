"""parallelize_module: Megatron-style tensor parallelism for nn.Linear layers.

    parallelize_module(block, tp, {"attention.wq": ColwiseParallel(),
                                   "attention.wo": RowwiseParallel()})

ColwiseParallel splits a Linear's output features across the ranks of `tp`:
its input is replicated, its output sharded on the last dim; forward needs no
communication, backward all-reduces the input gradient. RowwiseParallel
splits input features: its input arrives sharded (from a colwise layer), its
output is all-reduced to be replicated again; backward needs nothing. The
collectives are chorus' (C++); parameters keep their names.
"""

import fnmatch
from typing import Dict, Union

import torch
from torch import nn


class _CopyToParallel(torch.autograd.Function):
    """Identity forward; all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_reduce(grad.contiguous().clone(), "sum"), None


class _ReduceFromParallel(torch.autograd.Function):
    """All-reduce forward; identity backward."""

    @staticmethod
    def forward(ctx, x, comm):
        return comm.all_reduce(x.contiguous().clone(), "sum")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _shard(tensor: torch.Tensor, dim: int, comm) -> nn.Parameter:
    if tensor.shape[dim] % comm.size:
        raise ValueError(f"tensor parallel: dim {dim} of size {tensor.shape[dim]} does not "
                         f"divide among {comm.size} ranks")
    piece = tensor.detach().chunk(comm.size, dim=dim)[comm.rank].contiguous().clone()
    return nn.Parameter(piece, requires_grad=tensor.requires_grad)


class ColwiseParallel:
    def apply(self, linear: nn.Linear, comm) -> None:
        linear.weight = _shard(linear.weight, 0, comm)
        dims = {"weight": 0}
        if linear.bias is not None:
            linear.bias = _shard(linear.bias, 0, comm)
            dims["bias"] = 0
        linear._tp_shard_dims = dims
        linear.register_forward_pre_hook(
            lambda module, args: (_CopyToParallel.apply(args[0], comm),) + tuple(args[1:]))


class RowwiseParallel:
    def apply(self, linear: nn.Linear, comm) -> None:
        linear.weight = _shard(linear.weight, 1, comm)
        linear._tp_shard_dims = {"weight": 1}
        bias = linear.bias
        if bias is not None:
            # Added once, after the reduction.
            del linear._parameters["bias"]
            linear.bias = None
            linear.register_parameter("replicated_bias", bias)

        def reduce(module, args, output):
            output = _ReduceFromParallel.apply(output, comm)
            return output + module.replicated_bias if bias is not None else output
        linear.register_forward_hook(reduce)


def parallelize_module(module: nn.Module, comm,
                       plan: Dict[str, Union[ColwiseParallel, RowwiseParallel]]) -> nn.Module:
    """Applies each style of `plan` to the Linear layers whose names match its pattern."""
    for pattern, style in plan.items():
        matched = [sub for name, sub in module.named_modules()
                   if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise ValueError(f"parallelize_module: no module matches {pattern!r}")
        for sub in matched:
            if not isinstance(sub, nn.Linear):
                raise TypeError(f"parallelize_module: {pattern!r} matched a {type(sub).__name__}")
            style.apply(sub, comm)
    return module


def gather_tensor_parallel(owner: nn.Module, attr: str, tensor: torch.Tensor, comm):
    """The full tensor of a tensor-parallel shard (a collective), or `tensor`."""
    dim = getattr(owner, "_tp_shard_dims", {}).get(attr)
    if dim is None or comm is None:
        return tensor
    pieces = comm.all_gather(tensor.contiguous()).view(comm.size, *tensor.shape)
    return torch.cat(list(pieces.unbind(0)), dim=dim)
