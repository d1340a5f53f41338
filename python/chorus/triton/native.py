"""The native pieces of a chorus interpreter this package calls, looked up when used.

Inside a chorus interpreter `_chorus` (the interpreter's native module) and the torch
classes `torch.classes.chorus.*` exist; in plain Python they do not, and every feature
that needs them raises `TritonModelException` saying so, while the rest of the package
keeps working (tests, tools, model code run outside a server).
"""

from typing import Any

from .errors import TritonModelException

try:
    import _chorus
except ImportError:  # plain Python, not a chorus interpreter
    _chorus = None


def inside_chorus() -> bool:
    """True when running in an interpreter created by chorus."""
    return _chorus is not None


def chorus_module(feature: str) -> Any:
    """`_chorus`, or TritonModelException naming `feature` when not inside chorus."""
    if _chorus is None:
        raise TritonModelException(f"{feature} needs a chorus server (no _chorus module here)")
    return _chorus


def optional_chorus_module() -> Any:
    """`_chorus`, or None outside chorus."""
    return _chorus


def torch_class(name: str, feature: str) -> Any:
    """`torch.classes.chorus.<name>`, or TritonModelException naming `feature`."""
    import torch

    try:
        return getattr(torch.classes.chorus, name)
    except (RuntimeError, AttributeError):  # torch raises RuntimeError for unknown classes
        raise TritonModelException(
            f"{feature} needs a chorus server (torch.classes.chorus.{name} is not loaded)"
        ) from None
