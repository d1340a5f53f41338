"""`InferenceResponse` and `InferenceResponseSender`: a model's answers, and how they reach
the C++ request handle (a `_chorus.HostObject`, whose `send` answers the request).

Every request ends with exactly one final send on its handle. A default-mode (not
decoupled) model's one response is sent final at once, whether it came back from
`execute` or through the sender; a later `send(flags=FINAL)` then only closes the
sender. A decoupled model's responses are sent as they come, and the final flag either
rides on the last one or comes alone: a final send with no outputs, no error and no
parameters, which the C++ side takes for "no more responses" rather than a response.

A send to a request the server has already ended because the client cancelled it is
dropped without an error, as Triton drops it.
"""

import json
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .errors import ErrorCode, TritonError, TritonModelException
from .tensor import Tensor, wire_form

__all__ = ["InferenceResponse", "InferenceResponseSender", "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
           "get_output_tensor_by_name", "parameters_json"]

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

# error_code a handle's send takes for "no error".
_NO_ERROR = -1


def parameters_json(parameters: Any) -> Tuple[Dict[str, Any], str]:
    """Checks request or response parameters as Triton does (a dict, str keys, bool, int or
    str values; None for none) and returns them with their JSON text."""
    if parameters is None or (type(parameters) is dict and not parameters):
        return {}, "{}"  # most requests and responses: no json.dumps per call
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}")
    return dict(parameters), json.dumps(parameters)


class InferenceResponse:
    """`InferenceResponse(output_tensors=[], error=None, parameters=None)`."""

    def __init__(self, output_tensors: Sequence[Tensor] = (), error: Optional[TritonError] = None,
                 parameters: Optional[Dict[str, Any]] = None):
        if not isinstance(output_tensors, (list, tuple)):
            raise TypeError("InferenceResponse(): output_tensors must be a list of Tensor, got "
                            f"{type(output_tensors)}")
        for tensor in output_tensors:
            if tensor is None:
                raise TritonModelException("Output tensor for inference response should not be "
                                           "empty.")
            if not isinstance(tensor, Tensor):
                raise TypeError(f"InferenceResponse(): output tensors must be Tensor, got "
                                f"{type(tensor)}")
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"InferenceResponse(): error must be a TritonError, got {type(error)}")
        self._outputs = list(output_tensors)
        self._error = error
        self._parameters, self._parameters_json = parameters_json(parameters)

    @classmethod
    def _stream_end(cls) -> "InferenceResponse":
        """The empty response that ends a BLS stream (no parameters, as in Triton)."""
        response = cls()
        response._parameters_json = ""
        return response

    def output_tensors(self) -> List[Tensor]:
        return list(self._outputs)

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> Optional[TritonError]:
        return self._error

    def parameters(self) -> str:
        """The parameters as JSON text ("" for the empty response ending a BLS stream)."""
        return self._parameters_json


def get_output_tensor_by_name(inference_response: InferenceResponse,
                              name: str) -> Optional[Tensor]:
    """The output Tensor called `name`, None if there is none."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def _wire_outputs(response: InferenceResponse,
                  requested: Sequence[str]) -> Tuple[Dict[str, Any], Dict[str, List[int]]]:
    outputs: Dict[str, Any] = {}
    bytes_shapes: Dict[str, List[int]] = {}
    for tensor in response.output_tensors():
        if requested and tensor.name() not in requested:
            continue  # the client asked for others: pruned, as Triton does
        data, bytes_shape = wire_form(tensor)
        outputs[tensor.name()] = data
        if bytes_shape is not None:
            bytes_shapes[tensor.name()] = bytes_shape
    return outputs, bytes_shapes


def send_to_handle(handle: Any, response: Optional[InferenceResponse], final: bool,
                   requested: Sequence[str]) -> None:
    """Sends `response` (None: only the final flag) on a request handle; of its outputs
    only those in `requested` (all when empty)."""
    outputs: Dict[str, Any] = {}
    bytes_shapes: Dict[str, List[int]] = {}
    code, message, parameters = _NO_ERROR, "", {}
    if response is not None:
        parameters = response._parameters
        error = response.error()
        if error is not None:
            code, message = int(error.code()), error.message()
        else:
            outputs, bytes_shapes = _wire_outputs(response, requested)
    _send(handle, outputs, bytes_shapes, final, code, message, parameters)


def send_error_to_handle(handle: Any, message: str, code: ErrorCode) -> None:
    """Ends a request with an error."""
    _send(handle, {}, {}, True, int(code), message, {})


def _send(handle: Any, outputs: Dict[str, Any], bytes_shapes: Dict[str, List[int]], final: bool,
          code: int, message: str, parameters: Dict[str, Any]) -> None:
    try:
        handle.send(outputs, bytes_shapes, final, code, message, parameters)
    except RuntimeError as e:
        if handle.is_cancelled():
            return  # the server ended the request for its client: the answer goes nowhere
        raise TritonModelException(str(e)) from None


class InferenceResponseSender:
    """A request's sender (`request.get_response_sender()`): usable from any thread, also
    after `execute` returned."""

    def __init__(self, handle: Any, decoupled: bool, requested: Sequence[str] = ()):
        self._handle = handle  # None for a request the model built (BLS)
        self._decoupled = decoupled
        self._requested = requested  # the outputs the client asked for (empty: all)
        self._lock = threading.Lock()
        self._responses_accepted = 0
        self._closed = False  # a final flag was accepted: no more sends
        self._finished = False  # the handle got its final send

    def send(self, response: Optional[InferenceResponse] = None, flags: int = 0) -> None:
        """Sends `response`; `flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL` ends the request."""
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if response is None and flags == 0:
            raise TritonModelException("Inference Response object must be provided when the "
                                       "response flags is set to zero.")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(f"send(): response must be an InferenceResponse, got {type(response)}")
        with self._lock:
            self._accept(response, flags)
            self._deliver(response, flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self) -> bool:
        return self._handle is not None and bool(self._handle.is_cancelled())

    def _accept(self, response: Optional[InferenceResponse], flags: int) -> None:
        """Triton's rules on what a sender may send next; counts what it accepts."""
        if self._handle is None:
            raise TritonModelException("Unable to send response. Response sender has no "
                                       "reference to the decoupled state of the model.")
        if not self._decoupled:
            if response is not None and self._responses_accepted > 0:
                raise TritonModelException("Unable to send response. Non-decoupled model cannot "
                                           "send more than one response.")
            if response is None and self._responses_accepted == 0:
                raise TritonModelException("Unable to send response. Non-decoupled model cannot "
                                           "send complete final before sending a response.")
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been "
                                       "closed.")
        if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self._closed = True
        self._responses_accepted += 1

    def _deliver(self, response: Optional[InferenceResponse], final: bool) -> None:
        if self._finished:
            return  # a default-mode model's final flag after its one response
        final = final or not self._decoupled
        send_to_handle(self._handle, response, final, self._requested)
        self._finished = final

    # What the backend does with a request after `execute` (chorus.triton.execution).

    def accept_returned(self, response: InferenceResponse) -> None:
        """Accepts a response `execute` returned, as a final one."""
        with self._lock:
            self._accept(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def deliver_returned(self, response: InferenceResponse) -> None:
        with self._lock:
            self._deliver(response, True)

    def fail(self, message: str, code: ErrorCode) -> None:
        """Ends the request with an error unless it has ended; closes the sender."""
        with self._lock:
            self._closed = True
            if self._finished or self._handle is None:
                return
            self._finished = True
            send_error_to_handle(self._handle, message, code)

    def finished(self) -> bool:
        return self._finished
