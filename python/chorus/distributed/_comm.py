"""Communicator: one rank's handle on a group of ranks (C++: chorus/runtime)."""

import torch


class Communicator:
    """Wraps the torch.classes.chorus.Communicator the host hands a rank.

    Every rank of the group calls each collective in the same order with
    matching tensors; a rank that does not, or is missing, makes the call fail
    (RuntimeError) on every rank instead of hanging.
    """

    def __init__(self, handle):
        self.handle = handle

    @property
    def rank(self) -> int:
        return self.handle.rank()

    @property
    def size(self) -> int:
        return self.handle.size()

    @property
    def backend(self) -> str:
        return self.handle.backend()

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In place: `tensor` becomes the reduction ("sum", "avg", "max") over ranks."""
        if not tensor.is_contiguous():
            raise ValueError("all_reduce works in place on a contiguous tensor")
        return self.handle.all_reduce(tensor, op)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `tensor`, flattened and concatenated in rank order."""
        return self.handle.all_gather(tensor)

    def reduce_scatter(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """This rank's chunk (flat; chunks as even as possible) of the reduction."""
        return self.handle.reduce_scatter(tensor, op)

    def broadcast(self, tensor: torch.Tensor, root: int = 0) -> torch.Tensor:
        """In place: `tensor` becomes rank `root`'s."""
        if not tensor.is_contiguous():
            raise ValueError("broadcast works in place on a contiguous tensor")
        return self.handle.broadcast(tensor, root)

    def barrier(self) -> None:
        self.handle.barrier()

    def __repr__(self):
        return f"Communicator(rank={self.rank}, size={self.size}, backend={self.backend})"
