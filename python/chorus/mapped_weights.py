"""Weights a model's code reads from its own folder, held once for all its instances.

Triton runs each instance of a Python-backend model in a process of its own, and
TorchServe each worker, so a model whose code calls `torch.load("model.pt")` holds one copy
of its weights per instance (Triton's server#4975: a 3 GB model with 2 instances takes
6 GB; TorchServe's serve#1320). chorus runs the instances in one process: while a model's
file lies under a shared folder (a Triton Python-backend model's, a TorchServe archive's),
`torch.load` of it maps the file (`mmap=True`) instead of reading it, so every instance, in
every interpreter, uses the same pages of the page cache. A tensor written to gets its own
copy of the pages it writes (the mapping is private), so models see what `torch.load`
always gave them.

Only checkpoints in torch's zip format (every `torch.save` since torch 1.6) under a shared
folder are mapped, and only when the call does not say `mmap` itself; other loads are
untouched. `safetensors.torch.load_file` and `safe_open` already map their file.

A state dict is then copied into the module's own parameters by `load_state_dict`, one
copy per instance again. Inside `assigning_state_dicts()` (a TorchServe worker's
initialize), the calling thread's `load_state_dict` calls assign the mapped tensors as the
parameters instead (`assign=True`, as torch recommends with `mmap=True`), where each
tensor's shape and dtype are the parameter's and it lies on the CPU; others copy as usual.
"""

import contextlib
import functools
import os
import threading
import zipfile
from typing import Any, Dict, Iterator

__all__ = ["share_folder", "forget_folder", "assigning_state_dicts"]

# Folder -> how many loaded models (versions, interpreters aside) hold it.
_folders: Dict[str, int] = {}
_lock = threading.Lock()
_installed = False
_assigning = threading.local()  # .depth > 0: this thread assigns state dicts
_assign_installed = False


def share_folder(folder: str) -> None:
    """Maps the checkpoints `torch.load` reads from under `folder` (a model's folder)."""
    global _installed
    real = os.path.realpath(folder)
    with _lock:
        _folders[real] = _folders.get(real, 0) + 1
        if not _installed:
            _install()
            _installed = True


def forget_folder(folder: str) -> None:
    """Undoes one `share_folder(folder)`."""
    real = os.path.realpath(folder)
    with _lock:
        _folders[real] = _folders.get(real, 1) - 1
        if _folders[real] <= 0:
            del _folders[real]


def _in_shared_folder(path: str) -> bool:
    real = os.path.realpath(path)
    with _lock:
        return any(os.path.commonpath([real, folder]) == folder for folder in _folders)


def _mappable(file: Any, kwargs: Any) -> bool:
    if "mmap" in kwargs or not isinstance(file, (str, os.PathLike)):
        return False
    path = os.fspath(file)
    return os.path.isfile(path) and _in_shared_folder(path) and zipfile.is_zipfile(path)


def _install() -> None:
    import torch

    original = torch.load

    @functools.wraps(original)
    def load(f: Any, *args: Any, **kwargs: Any) -> Any:
        if _mappable(f, kwargs):
            kwargs["mmap"] = True
        return original(f, *args, **kwargs)

    torch.load = load


@contextlib.contextmanager
def assigning_state_dicts() -> Iterator[None]:
    """For the scope, this thread's `Module.load_state_dict` assigns a state dict's
    tensors that fit the module's as its parameters and buffers, rather than copying."""
    global _assign_installed
    with _lock:
        if not _assign_installed:
            _install_assigning_load()
            _assign_installed = True
    _assigning.depth = getattr(_assigning, "depth", 0) + 1
    try:
        yield
    finally:
        _assigning.depth -= 1


def _fits(module: Any, state_dict: Any) -> bool:
    """Whether every tensor of `state_dict` could stand in for the module's own."""
    import torch

    own = module.state_dict(keep_vars=True)
    if set(own) != set(state_dict):
        return False
    for name, value in state_dict.items():
        mine = own[name]
        if not isinstance(value, torch.Tensor) or not isinstance(mine, torch.Tensor):
            return False
        if (value.shape != mine.shape or value.dtype != mine.dtype
                or value.device.type != "cpu" or mine.device.type != "cpu"):
            return False
    return True


def _install_assigning_load() -> None:
    import torch

    original = torch.nn.Module.load_state_dict

    @functools.wraps(original)
    def load_state_dict(self: Any, state_dict: Any, strict: bool = True,
                        assign: bool = False) -> Any:
        if (not assign and getattr(_assigning, "depth", 0) > 0
                and _fits(self, state_dict)):
            assign = True
        return original(self, state_dict, strict=strict, assign=assign)

    torch.nn.Module.load_state_dict = load_state_dict
