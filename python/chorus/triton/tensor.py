"""`pb_utils.Tensor`: a named tensor of a request, a response or a BLS call.

A Tensor holds its elements in one of three forms and makes the others when asked:

- a numpy array (made by the model: `Tensor(name, array)`);
- a torch tensor (a request's input, a BLS output, `Tensor.from_dlpack`): `as_numpy()`
  is a zero-copy view of it (Triton copies inputs out of shared memory; chorus hands the
  request's own buffer, which the model must not write to);
- for BYTES, Triton's serialized layout (a request's BYTES input), decoded by `as_numpy()`
  into an object array of `bytes`.

BF16 has no numpy type: such tensors exist as torch.bfloat16 and cross only through
DLPack (`to_dlpack`, `from_dlpack`, `__dlpack__`), as in Triton.
"""

import threading
from typing import Any, List, Optional, Tuple

import numpy as np
import torch
import torch.utils.dlpack

from .datatypes import (TYPE_BF16, TYPE_BYTES, deserialize_bytes_tensor, serialize_byte_tensor,
                        triton_type_of_array, triton_type_of_torch, type_name)
from .errors import TritonModelException

__all__ = ["Tensor", "wire_form", "call_input_form", "tensor_of_call_output"]

# DLPack's device type for CPU memory (kDLCPU).
_DLPACK_CPU = 1

# Builds a Tensor's numpy view at most once, so as_numpy() returns one object in every thread.
_view_lock = threading.Lock()


def _check_name(name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"Tensor name must be a str, got {type(name)}")
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")


class Tensor:
    """`Tensor(name, numpy_array)`; inputs, outputs and BLS tensors are Tensors too."""

    def __init__(self, name: str, numpy_array: np.ndarray):
        # Types first, then the empty name: Tensor("", None) is a TypeError in Triton.
        if not isinstance(name, str) or not isinstance(numpy_array, np.ndarray):
            raise TypeError("Tensor(): expected (name: str, numpy_array: numpy.ndarray), got "
                            f"({type(name)}, {type(numpy_array)})")
        _check_name(name)
        triton_type = triton_type_of_array(numpy_array)
        if not numpy_array.flags.c_contiguous:
            numpy_array = np.ascontiguousarray(numpy_array)
        self._set(name, triton_type, list(numpy_array.shape), array=numpy_array)

    def _set(self, name: str, triton_type: int, shape: List[int],
             array: Optional[np.ndarray] = None, data: Optional[torch.Tensor] = None,
             serialized: Optional[torch.Tensor] = None) -> None:
        self._name = name
        self._type = triton_type
        self._shape = shape
        self._array = array  # the numpy view as_numpy() returns, once made
        self._data = data  # the elements as a torch tensor (not for BYTES)
        self._serialized = serialized  # BYTES in Triton's layout, as a uint8 torch tensor

    @classmethod
    def _of_torch(cls, name: str, data: torch.Tensor) -> "Tensor":
        tensor = cls.__new__(cls)
        tensor._set(name, triton_type_of_torch(data.dtype), list(data.shape), data=data)
        return tensor

    @classmethod
    def _of_serialized_bytes(cls, name: str, serialized: torch.Tensor,
                             shape: List[int]) -> "Tensor":
        tensor = cls.__new__(cls)
        tensor._set(name, TYPE_BYTES, list(shape), serialized=serialized)
        return tensor

    def name(self) -> str:
        return self._name

    def shape(self) -> List[int]:
        return list(self._shape)

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType (TYPE_FP32 is 11...)."""
        return self._type

    def is_cpu(self) -> bool:
        return self._data is None or self._data.is_cpu  # no torch.device made per call

    def as_numpy(self) -> np.ndarray:
        """The elements as a numpy array, the same object on every call (BYTES: an object
        array of `bytes`). CPU tensors other than BF16 only."""
        if self._array is not None:
            return self._array
        if not self.is_cpu():
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to "
                                       "NumPy.")
        if self._type == TYPE_BF16:
            raise TritonModelException("Tensor dtype is BF16 and cannot be converted to NumPy. "
                                       "Use to_dlpack() and from_dlpack() instead.")
        if self._array is None:
            with _view_lock:
                if self._array is None:
                    self._array = self._numpy_view()
        return self._array

    def _numpy_view(self) -> np.ndarray:
        if self._serialized is not None:
            return deserialize_bytes_tensor(self._serialized.numpy()).reshape(self._shape)
        assert self._data is not None
        return self._data.detach().numpy()

    def _torch_data(self) -> torch.Tensor:
        """The elements as a torch tensor sharing their memory (fixed-size types)."""
        if self._data is None:
            array = self._array
            assert array is not None
            # torch warns about read-only arrays; those few are copied.
            self._data = torch.from_numpy(array if array.flags.writeable else array.copy())
        return self._data

    def _dlpack_source(self) -> torch.Tensor:
        if self._type == TYPE_BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self._torch_data()

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing the tensor's memory."""
        return torch.utils.dlpack.to_dlpack(self._dlpack_source())

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._dlpack_source().__dlpack__(stream=stream)

    def __dlpack_device__(self) -> Tuple[int, int]:
        if self._type == TYPE_BYTES:
            return (_DLPACK_CPU, 0)
        device_type, device_id = self._torch_data().__dlpack_device__()
        return (int(device_type), int(device_id))

    @staticmethod
    def from_dlpack(tensor_name: str, dlpack_tensor: Any) -> "Tensor":
        """A Tensor sharing the memory of a DLPack capsule or of an object with
        `__dlpack__` and `__dlpack_device__` (torch, numpy, cupy...). C-contiguous only."""
        _check_name(tensor_name)
        data = _torch_of_dlpack(dlpack_tensor)
        if data.device.type not in ("cpu", "cuda"):
            raise TritonModelException(f"DLDevice type {data.device.type} is not support by "
                                       "Python backend.")
        if not data.is_contiguous():
            raise TritonModelException("DLPack tensor is not contiguous. Only contiguous "
                                       "DLPack tensors that are stored in C-Order are "
                                       "supported.")
        return Tensor._of_torch(tensor_name, data)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {type_name(self._type)}, shape={self._shape})"


def _torch_of_dlpack(dlpack_tensor: Any) -> torch.Tensor:
    if type(dlpack_tensor).__name__ == "PyCapsule":
        try:
            return torch.utils.dlpack.from_dlpack(dlpack_tensor)
        except RuntimeError as e:  # a capsule already consumed, or not a DLPack one
            raise TritonModelException(str(e)) from None
    if not (hasattr(dlpack_tensor, "__dlpack__") and hasattr(dlpack_tensor, "__dlpack_device__")):
        raise TritonModelException("Provided tensor is not supported. Tensor must be a DLPack "
                                   "capsule or have `__dlpack__` and `__dlpack_device__` "
                                   "attributes")
    return torch.from_dlpack(dlpack_tensor)


def _serialized_bytes(array: np.ndarray) -> torch.Tensor:
    serialized = serialize_byte_tensor(array)
    if not serialized:
        return torch.empty(0, dtype=torch.uint8)
    # A bytearray, as torch warns about read-only buffers.
    return torch.frombuffer(bytearray(serialized), dtype=torch.uint8)


def wire_form(tensor: Tensor) -> Tuple[torch.Tensor, Optional[List[int]]]:
    """What a request handle's `send` takes for `tensor`: a contiguous CPU torch tensor, and
    for BYTES (then the tensor is Triton's serialized layout, uint8) the element shape."""
    if tensor._type == TYPE_BYTES:
        if tensor._serialized is not None and tensor._array is None:
            return tensor._serialized, tensor.shape()  # a BYTES input echoed back as is
        return _serialized_bytes(tensor.as_numpy()), tensor.shape()
    return tensor._torch_data().cpu().contiguous(), None


def call_input_form(tensor: Tensor) -> Any:
    """What `_chorus.model_call_start` takes for `tensor`: a torch tensor, or for BYTES
    nested lists of `bytes` (one level per dimension)."""
    if tensor._type != TYPE_BYTES:
        return tensor._torch_data()
    array = tensor.as_numpy()
    elements = [element if isinstance(element, bytes) else str(element).encode("utf-8")
                for element in np.ravel(array, order="C").tolist()]
    return _object_array(elements, list(array.shape)).tolist()


def _object_array(elements: List[Any], shape: List[int]) -> np.ndarray:
    # Filled element by element: np.array() would look inside list elements.
    array = np.empty(len(elements), dtype=np.object_)
    array[:] = elements
    return array.reshape(shape)


def _nested_shape(nested: Any) -> List[int]:
    shape = []
    while isinstance(nested, list):
        shape.append(len(nested))
        if not nested:
            break
        nested = nested[0]
    return shape


def _flatten(nested: Any) -> List[Any]:
    if not isinstance(nested, list):
        return [nested]
    return [element for item in nested for element in _flatten(item)]


def tensor_of_call_output(name: str, value: Any) -> Tensor:
    """The Tensor of a `_chorus.model_call_next` output: a torch tensor, or for BYTES
    nested lists of `str` decoded with "surrogateescape" (encoded back to the raw bytes)."""
    if isinstance(value, torch.Tensor):
        return Tensor._of_torch(name, value)
    elements = [element.encode("utf-8", "surrogateescape") if isinstance(element, str)
                else element for element in _flatten(value)]
    return Tensor(name, _object_array(elements, _nested_shape(value)))
