"""Triton's data types: the TRITONSERVER_DataType numbers, their numpy and torch types,
and the BYTES codec.

A BYTES tensor crosses the wire (and chorus' request handles) serialized: per element, a
4-byte little-endian length, then the bytes. In a model it is a numpy object array of
`bytes`. BF16 has no numpy type: it exists only as torch.bfloat16 (through DLPack).

Where chorus differs from Triton: `serialize_byte_tensor` of an empty array returns
`b""` (Triton returns `()`), and elements that are neither `bytes` nor `np.bytes_` are
written as `str(element)` encoded in UTF-8 (Triton also writes `np.bytes_` elements of
object arrays that way, as their repr).
"""

import struct
from typing import Any, Dict, Optional

import numpy as np
import torch

from .errors import TritonModelException

__all__ = ["TYPE_INVALID", "TYPE_BOOL", "TYPE_BYTES", "TYPE_BF16", "TRITON_STRING_TO_NUMPY",
           "triton_string_to_numpy", "triton_to_numpy_type", "numpy_to_triton_type",
           "triton_type_of_array", "triton_type_of_torch", "serialize_byte_tensor",
           "deserialize_bytes_tensor", "type_name"]

# TRITONSERVER_DataType.
TYPE_INVALID = 0
TYPE_BOOL = 1
TYPE_UINT8 = 2
TYPE_UINT16 = 3
TYPE_UINT32 = 4
TYPE_UINT64 = 5
TYPE_INT8 = 6
TYPE_INT16 = 7
TYPE_INT32 = 8
TYPE_INT64 = 9
TYPE_FP16 = 10
TYPE_FP32 = 11
TYPE_FP64 = 12
TYPE_BYTES = 13
TYPE_BF16 = 14

# Every fixed-size type: numpy's and torch's (BF16: torch's only).
_NUMPY_OF_TYPE: Dict[int, Any] = {
    TYPE_BOOL: np.bool_, TYPE_UINT8: np.uint8, TYPE_UINT16: np.uint16,
    TYPE_UINT32: np.uint32, TYPE_UINT64: np.uint64, TYPE_INT8: np.int8,
    TYPE_INT16: np.int16, TYPE_INT32: np.int32, TYPE_INT64: np.int64,
    TYPE_FP16: np.float16, TYPE_FP32: np.float32, TYPE_FP64: np.float64,
    TYPE_BYTES: np.object_,
}
_TYPE_OF_NUMPY: Dict[Any, int] = {
    np.dtype(numpy_type): triton_type for triton_type, numpy_type in _NUMPY_OF_TYPE.items()
}
_TYPE_OF_TORCH: Dict[Any, int] = {
    torch.bool: TYPE_BOOL, torch.uint8: TYPE_UINT8, torch.uint16: TYPE_UINT16,
    torch.uint32: TYPE_UINT32, torch.uint64: TYPE_UINT64, torch.int8: TYPE_INT8,
    torch.int16: TYPE_INT16, torch.int32: TYPE_INT32, torch.int64: TYPE_INT64,
    torch.float16: TYPE_FP16, torch.float32: TYPE_FP32, torch.float64: TYPE_FP64,
    torch.bfloat16: TYPE_BF16,
}
_NAMES = {
    TYPE_INVALID: "INVALID", TYPE_BOOL: "BOOL", TYPE_UINT8: "UINT8", TYPE_UINT16: "UINT16",
    TYPE_UINT32: "UINT32", TYPE_UINT64: "UINT64", TYPE_INT8: "INT8", TYPE_INT16: "INT16",
    TYPE_INT32: "INT32", TYPE_INT64: "INT64", TYPE_FP16: "FP16", TYPE_FP32: "FP32",
    TYPE_FP64: "FP64", TYPE_BYTES: "BYTES", TYPE_BF16: "BF16",
}

# config.pbtxt's data_type names; TYPE_BF16 is absent, as in Triton (no numpy type).
TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


def type_name(triton_type: int) -> str:
    """The wire name of a TRITONSERVER_DataType ("FP32")."""
    return _NAMES.get(triton_type, str(triton_type))


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """The numpy type of a config data_type ("TYPE_FP32"); KeyError for unknown ones."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """The numpy type of a TRITONSERVER_DataType (1..13), None for others (BF16 too)."""
    return _NUMPY_OF_TYPE.get(data_type)


def numpy_to_triton_type(data_type: Any) -> Optional[int]:
    """The TRITONSERVER_DataType of a numpy dtype or type, None when there is none.
    Object and fixed-size bytes (`S`) arrays are BYTES."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind == "S":
        return TYPE_BYTES
    return _TYPE_OF_NUMPY.get(dtype)


def triton_type_of_array(array: np.ndarray) -> int:
    """The TRITONSERVER_DataType of `array`; TritonModelException (Triton's text) if none."""
    triton_type = numpy_to_triton_type(array.dtype)
    if triton_type is None:
        raise TritonModelException("NumPy dtype is not supported.")
    return triton_type


def triton_type_of_torch(dtype: Any) -> int:
    """The TRITONSERVER_DataType of a torch dtype; TritonModelException if none."""
    triton_type = _TYPE_OF_TORCH.get(dtype)
    if triton_type is None:
        raise TritonModelException(f"Tensor dtype {dtype} is not supported by the Python "
                                   "backend.")
    return triton_type


def _element_bytes(element: Any) -> bytes:
    return element if isinstance(element, bytes) else str(element).encode("utf-8")


def serialize_byte_tensor(input_tensor: np.ndarray) -> Optional[bytes]:
    """The elements of an object or `S` array, in C order, each as a 4-byte little-endian
    length and its bytes; None for arrays of any other dtype."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype != np.object_ and input_tensor.dtype.kind != "S":
        return None
    parts = []
    for element in np.ravel(input_tensor, order="C").tolist():
        data = _element_bytes(element)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor: Any) -> np.ndarray:
    """The 1-D object array of `bytes` a serialized BYTES buffer holds (any buffer)."""
    view = memoryview(encoded_tensor).cast("B")
    elements = []
    offset = 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise TritonModelException("Invalid bytes tensor data: incomplete length field")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > len(view):
            raise TritonModelException("Invalid bytes tensor data: string extends beyond "
                                       "buffer")
        elements.append(bytes(view[offset:offset + length]))
        offset += length
    array = np.empty(len(elements), dtype=np.object_)
    array[:] = elements
    return array
