"""Weights a Python-backend model reads from its own folder, held once for all its instances.

Triton runs each instance in a process of its own, so a model whose `initialize` calls
`torch.load("model.pt")` holds one copy of its weights per instance (server#4975: a 3 GB
model with 2 instances takes 6 GB). chorus runs the instances in one process: while a
model's file lies under a Python-backend model's folder, `torch.load` of it maps the file
(`mmap=True`) instead of reading it, so every instance, in every interpreter, uses the same
pages of the page cache. A tensor written to gets its own copy of the pages it writes
(the mapping is private), so models see what `torch.load` always gave them.

Only checkpoints in torch's zip format (every `torch.save` since torch 1.6) under the folder
of a model loaded through `chorus.triton.backend` are mapped, and only when the call does
not say `mmap` itself; other loads are untouched. `safetensors.torch.load_file` and
`safe_open` already map their file.
"""

import functools
import os
import threading
import zipfile
from typing import Any, Dict

__all__ = ["share_folder", "forget_folder"]

# Folder -> how many loaded models (versions, interpreters aside) hold it.
_folders: Dict[str, int] = {}
_lock = threading.Lock()
_installed = False


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
