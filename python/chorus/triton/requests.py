"""`pb_utils.InferenceRequest`: a request `execute` receives, or one a model builds to call
another model (BLS, `chorus.triton.bls`).

A received request reads what it holds from its C++ handle (a `_chorus.HostObject`)
when asked; a built one holds what its constructor was given, checked as Triton checks
it.

Where chorus differs from Triton: when the client named no outputs,
`requested_output_names()` is every output of the model's config (Triton's server fills
them in the same way); `trace()` has no context (chorus does not trace requests); and a
request released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE is failed as unsupported,
as chorus' scheduler does not take requests back.
"""

import asyncio
import enum
import numbers
from typing import Any, Dict, List, Optional, Sequence, Set

from . import bls
from .errors import TritonModelException
from .responses import InferenceResponseSender, parameters_json
from .tensor import Tensor

__all__ = ["InferenceRequest", "PreferredMemory", "MemoryType", "InferenceTrace",
           "TRITONSERVER_MEMORY_GPU", "TRITONSERVER_MEMORY_CPU", "get_input_tensor_by_name",
           "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START", "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
           "TRITONSERVER_REQUEST_RELEASE_ALL", "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE"]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class MemoryType(enum.IntEnum):
    """Where a BLS call would like its outputs (chorus gives them on the CPU)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU
_MEMORY_DEFAULT = 2  # PreferredMemory's "no preference"


class PreferredMemory:
    """`PreferredMemory(preferred_memory_type, preferred_device_id=0)` for BLS requests."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0):
        if preferred_memory_type is None or preferred_device_id is None:
            raise TypeError("PreferredMemory(): arguments must not be None")
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A request's trace; chorus does not trace requests, so it has no context."""

    def get_context(self) -> Optional[str]:
        return None


class _Missing:
    """Stands for a required argument not given (the constructor keeps Triton's order)."""


_MISSING: Any = _Missing()


def _require(value: Any, types: Any, what: str) -> Any:
    if value is _MISSING:
        raise TypeError(f"InferenceRequest(): missing required argument '{what}'")
    if not isinstance(value, types):
        raise TypeError(f"InferenceRequest(): '{what}' has type {type(value)}")
    return value


def _integer(value: Any, what: str) -> int:
    if type(value) is int:
        return value  # the common case, without the ABC check below
    return int(_require(value, numbers.Integral, what))  # numpy's integers too, as in Triton


def _checked_inputs(inputs: Any, request_id: str, model_name: str) -> List[Tensor]:
    _require(inputs, (list, tuple), "inputs")
    for tensor in inputs:
        if tensor is None:
            raise TritonModelException(f"Input tensor for request with id '{request_id}' and "
                                       f"model name '{model_name}' should not be empty.")
        _require(tensor, Tensor, "inputs")
    return list(inputs)


def _checked_output_names(names: Any, request_id: str, model_name: str) -> List[str]:
    _require(names, (list, tuple, set), "requested_output_names")
    for name in names:
        _require(name, str, "requested_output_names")
        if name == "":
            raise TritonModelException(f"Requested output name for request with id "
                                       f"'{request_id}' and model name '{model_name}' should "
                                       "not be empty.")
    return list(dict.fromkeys(names))


def _checked_correlation_id(correlation_id: Any) -> Any:
    if correlation_id is None:
        raise TypeError("InferenceRequest(): 'correlation_id' must not be None")
    if isinstance(correlation_id, str):
        return correlation_id
    if isinstance(correlation_id, numbers.Integral) and int(correlation_id) >= 0:
        return int(correlation_id)
    raise TritonModelException("Correlation ID must be integer or string")


class InferenceRequest:
    """A request of the batch `execute` receives, or, built by a model,
    `InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...], ...)`
    for `exec()` / `async_exec()` (BLS)."""

    def __init__(self, request_id: str = "", correlation_id: Any = 0,
                 inputs: Sequence[Tensor] = _MISSING,
                 requested_output_names: Sequence[str] = _MISSING, model_name: str = _MISSING,
                 model_version: int = -1, flags: int = 0, timeout: int = 0,
                 preferred_memory: Optional[PreferredMemory] = None,
                 trace: Optional[InferenceTrace] = None,
                 parameters: Optional[Dict[str, Any]] = None):
        # A model name read from a BYTES tensor is bytes; Triton takes it as a string.
        if isinstance(model_name, bytes):
            model_name = model_name.decode("utf-8")
        self._model_name = _require(model_name, str, "model_name")
        self._request_id = _require(request_id, str, "request_id")
        self._correlation_id = _checked_correlation_id(correlation_id)
        self._inputs: Optional[List[Tensor]] = _checked_inputs(inputs, request_id, model_name)
        self._requested = _checked_output_names(requested_output_names, request_id, model_name)
        self._model_version = _integer(model_version, "model_version")
        self._flags: Optional[int] = _integer(flags, "flags")
        self._timeout = _integer(timeout, "timeout")
        self._preferred_memory = preferred_memory or PreferredMemory(_MEMORY_DEFAULT, 0)
        self._trace = trace or InferenceTrace()
        self._parameters_json = parameters_json(parameters)[1]
        self._handle: Any = None
        self._received_inputs: Any = None  # a received request's (inputs, bytes shapes)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._sender = InferenceResponseSender(None, False)

    @classmethod
    def _received(cls, received: Any, decoupled: bool,
                  output_names: List[str]) -> "InferenceRequest":
        """A request `execute` receives: `received` is (C++ handle, inputs, BYTES inputs'
        shapes, the outputs the client asked for); `output_names` are the model's outputs
        (what the client asked for when it named none)."""
        handle, inputs, bytes_shapes, client_requested = received
        request = cls.__new__(cls)
        request._handle = handle
        request._inputs = None  # Tensors made when first asked for
        request._received_inputs = (inputs, bytes_shapes)
        request._requested = list(client_requested) or output_names
        request._flags = None  # the handle's until set_flags()
        request._trace = InferenceTrace()
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        request._sender = InferenceResponseSender(handle, decoupled, client_requested)
        return request

    def inputs(self) -> List[Tensor]:
        if self._inputs is None:
            self._inputs = _tensors_of_inputs(*self._received_inputs)
        return self._inputs

    def request_id(self) -> str:
        return self._handle.request_id() if self._handle is not None else self._request_id

    def correlation_id(self) -> Any:
        """The sequence id: an int, or a str for string ids (0 when none)."""
        if self._handle is None:
            return self._correlation_id
        return self._handle.correlation_id_string() or self._handle.correlation_id()

    def flags(self) -> int:
        return self._handle.flags() if self._flags is None else self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = _integer(flags, "flags")

    def parameters(self) -> str:
        """The request's parameters as JSON text."""
        return self._handle.parameters() if self._handle is not None else self._parameters_json

    def requested_output_names(self) -> Set[str]:
        return set(self._requested)

    def timeout(self) -> int:
        """The request's timeout in microseconds (0: none)."""
        return self._handle.timeout() if self._handle is not None else self._timeout

    def trace(self) -> InferenceTrace:
        return self._trace

    def get_response_sender(self) -> InferenceResponseSender:
        return self._sender

    def is_cancelled(self) -> bool:
        return self._handle is not None and bool(self._handle.is_cancelled())

    def set_release_flags(self, flags: int) -> None:
        self._release_flags = _integer(flags, "flags")

    def release_flags(self) -> int:
        return self._release_flags

    def exec(self, decoupled: bool = False) -> Any:
        """Calls the model (BLS) and returns its InferenceResponse, or with `decoupled` a
        ResponseIterator over its responses. Errors come back in the response."""
        bls.check_allowed()
        return bls.call(self._call(), decoupled)

    def async_exec(self, decoupled: bool = False) -> "asyncio.Future[Any]":
        """`exec` run in the running event loop's default executor."""
        bls.check_allowed()
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, bls.call, self._call(), decoupled)

    def _call(self) -> bls.Call:
        if self._handle is not None:
            raise TritonModelException("Only a request the model built with InferenceRequest() "
                                       "can be executed.")
        return bls.Call(model_name=self._model_name, model_version=self._model_version,
                        inputs=self.inputs(), requested_output_names=self._requested,
                        timeout_us=self._timeout, parameters=self._parameters_json,
                        request_id=self._request_id, correlation_id=self._correlation_id,
                        flags=self.flags())


def _tensors_of_inputs(received: Dict[str, Any], bytes_shapes: Dict[str, List[int]]
                       ) -> List[Tensor]:
    inputs = []
    for name, data in received.items():
        if name in bytes_shapes:
            inputs.append(Tensor._of_serialized_bytes(name, data, bytes_shapes[name]))
        else:
            inputs.append(Tensor._of_torch(name, data))
    return inputs


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Optional[Tensor]:
    """The input Tensor called `name`, None if the request has none."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None
