"""String tensors (dtype "string", BYTES on the wire) as Python models see them.

torch has no string dtype, so a string tensor is plain Python: a str for a 0-d
tensor, else a list of str nested once per dimension, rectangular (shape
[2, 3] is a list of 2 lists of 3 str). Models receive str; they may return
bytes elements too (the server encodes str as UTF-8). The packaging tool, the
example check and the importer all classify and measure them here.
"""

from typing import List

import torch

# What a model may return as an element; it always receives str.
OUTPUT_ELEMENTS = (str, bytes)
INPUT_ELEMENTS = (str,)


class StringTensorError(ValueError):
    """A value meant as a string tensor is ragged or has an element that is not a string."""


def _holds_tensor(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, list) and any(_holds_tensor(item) for item in value)


def is_string_tensor(value) -> bool:
    """Whether `value` stands for one string tensor: a str or bytes, or a list that holds
    no torch.Tensor at any depth (an empty list is a string tensor of shape [0]). It may
    still be ragged or hold non-strings: string_shape says so."""
    return isinstance(value, (str, bytes)) or (isinstance(value, list)
                                               and not _holds_tensor(value))


def string_shape(value, what: str, elements=OUTPUT_ELEMENTS) -> List[int]:
    """The shape of string tensor `value`: its nesting lengths ([] for a str).
    StringTensorError naming `what` (e.g. "input 'words'") when it is ragged or an
    element is not one of `elements`."""
    return _shape(value, what, elements, [])


def _shape(value, what, elements, index) -> List[int]:
    if isinstance(value, elements):
        return []
    if not isinstance(value, list):
        kinds = " or ".join(kind.__name__ for kind in elements)
        if not index:
            raise StringTensorError(f"{what} is {type(value).__name__}, not a string tensor "
                                    f"({kinds}, or rectangular nested lists of them)")
        raise StringTensorError(f"{what}: element {_position(index)} is "
                                f"{type(value).__name__}, not {kinds}")
    shapes = [_shape(item, what, elements, index + [i]) for i, item in enumerate(value)]
    for i, shape in enumerate(shapes):
        if shape != shapes[0]:
            raise StringTensorError(
                f"{what} is ragged: {_position(index + [0])} has shape {shapes[0]} but "
                f"{_position(index + [i])} has shape {shape} (a string tensor is a "
                "rectangular nested list)")
    return [len(value)] + (shapes[0] if shapes else [])


def _position(index) -> str:
    return "".join(f"[{i}]" for i in index)


def as_bytes(value):
    """String tensor `value` with every element as the bytes the wire carries (str as
    UTF-8; surrogate escapes back to the bytes they stand for), nesting kept."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes):
        return value
    return [as_bytes(item) for item in value]
