"""Business logic scripting (BLS): `InferenceRequest.exec()` calling another served model.

Triton's stub sends a BLS request to its server process; chorus calls the model in
process through the interpreter's native model calls (`_chorus.model_call_start/next/end`,
the same path as `chorus.serving.infer`): the call goes through the other model's
scheduler, and its tensors cross interpreters without copies. Errors of the call come
back as the response's `error()`, never raised.

`exec(decoupled=True)` returns a `ResponseIterator` over the called model's responses,
error responses among them: it ends with the response the model sent with the final flag
(a model that answers once: its one response), or with an empty response when the final
flag came alone. `cancel()` stops the call; the iterator then ends with a CANCELLED error
response. An iterator dropped before its end stops the call (Triton reads the rest).

BLS is refused while `initialize`, `finalize` or `auto_complete_config` runs on the
calling thread (`forbidden()`), with Triton's message. Triton, with one instance per
process, also refuses it on other threads during those calls; chorus, with many models in
one interpreter, cannot tell which model another thread works for, and allows it there.
"""

import contextlib
import dataclasses
import json
import threading
import weakref
from typing import Any, Iterator, List, Optional, Tuple

from .errors import ErrorCode, TritonError, TritonModelException, error_code_of_status
from .native import chorus_module
from .responses import InferenceResponse
from .tensor import Tensor, call_input_form, tensor_of_call_output

__all__ = ["Call", "ResponseIterator", "call", "check_allowed", "forbidden"]

_phase = threading.local()


@contextlib.contextmanager
def forbidden() -> Iterator[None]:
    """Refuses BLS on this thread while active (around initialize, finalize...)."""
    depth = getattr(_phase, "forbidden", 0)
    _phase.forbidden = depth + 1
    try:
        yield
    finally:
        _phase.forbidden = depth


def check_allowed() -> None:
    if getattr(_phase, "forbidden", 0):
        raise TritonModelException("BLS is only supported during the 'execute' function.")


@dataclasses.dataclass
class Call:
    """What a BLS request asks for (made by `InferenceRequest.exec`)."""

    model_name: str
    model_version: int  # -1: the version serving
    inputs: List[Tensor]
    requested_output_names: List[str]  # empty: every output
    timeout_us: int  # 0: none
    parameters: str  # JSON text
    request_id: str
    correlation_id: Any
    flags: int


def _start(chorus: Any, spec: Call, stream: bool) -> int:
    inputs = {tensor.name(): call_input_form(tensor) for tensor in spec.inputs}
    version = str(spec.model_version) if spec.model_version >= 0 else ""
    parameters = json.loads(spec.parameters) if spec.parameters not in ("", "{}") else {}
    return chorus.model_call_start(
        spec.model_name, inputs, version, spec.requested_output_names or None,
        spec.timeout_us / 1e6, stream, True, parameters=parameters,
        request_id=spec.request_id, correlation_id=spec.correlation_id, flags=spec.flags)


def _failure(error: BaseException) -> InferenceResponse:
    """The response for a failed call (`_chorus.ModelCallFailed(message, code)`)."""
    message = str(error.args[0]) if error.args else str(error)
    status = str(error.args[1]) if len(error.args) > 1 else ""
    return InferenceResponse(error=TritonError(message, error_code_of_status(status)))


def _response_of(answer: Tuple[Any, ...]) -> InferenceResponse:
    """The response for one answer of `_chorus.model_call_next(handle, detailed=True)`:
    (outputs, parameters, error, final), error (message, status) for an error response."""
    outputs, parameters, error, _ = answer
    if error is not None:
        return InferenceResponse(error=TritonError(error[0], error_code_of_status(error[1])),
                                 parameters=parameters)
    return InferenceResponse([tensor_of_call_output(name, value)
                              for name, value in (outputs or {}).items()], parameters=parameters)


def call(spec: Call, decoupled: bool) -> Any:
    """Runs a BLS request: its InferenceResponse, or with `decoupled` a ResponseIterator."""
    if decoupled:
        return ResponseIterator(spec)
    chorus = chorus_module("BLS (InferenceRequest.exec)")
    try:
        handle = _start(chorus, spec, stream=False)
        try:
            answer = chorus.model_call_next(handle, True)
        finally:
            chorus.model_call_end(handle)
    except chorus.ModelCallFailed as e:
        return _failure(e)
    if answer is None:
        return InferenceResponse(error=TritonError("Unexpected empty response."))
    return _response_of(answer)


class _Stream:
    """A started streaming call, ended exactly once (by the reader, cancel(), or the
    iterator's collection)."""

    def __init__(self, chorus: Any, handle: int):
        self.chorus = chorus
        self._handle: Optional[int] = handle
        self._lock = threading.Lock()

    def next(self) -> Any:
        """The next answer, (outputs, parameters, error); None at the end."""
        handle = self._handle
        return None if handle is None else self.chorus.model_call_next(handle, True)

    def end(self) -> None:
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            self.chorus.model_call_end(handle)


class ResponseIterator:
    """The responses of a decoupled BLS call (`exec(decoupled=True)`), as they come.
    Iterating again after the end replays them."""

    def __init__(self, spec: Call):
        self._lock = threading.Lock()  # guards the fields below
        self._read_lock = threading.Lock()  # one reader of the stream at a time
        self._responses: List[InferenceResponse] = []
        self._replay_at = 0
        self._finished = False
        self._cancelled = False
        self._stream: Optional[_Stream] = None
        chorus = chorus_module("BLS (InferenceRequest.exec)")
        try:
            self._stream = _Stream(chorus, _start(chorus, spec, stream=True))
        except chorus.ModelCallFailed as e:
            self._responses.append(_failure(e))
            self._finished = True
            return
        weakref.finalize(self, self._stream.end)

    def __iter__(self) -> "ResponseIterator":
        with self._lock:
            if self._finished and self._replay_at >= len(self._responses):
                self._replay_at = 0
        return self

    def __next__(self) -> InferenceResponse:
        with self._lock:
            if self._finished:
                if self._replay_at >= len(self._responses):
                    raise StopIteration
                self._replay_at += 1
                return self._responses[self._replay_at - 1]
        with self._read_lock:
            response, last = self._receive()
        with self._lock:
            self._responses.append(response)
            if last:
                self._finished = True
                self._replay_at = len(self._responses)
        return response

    def _receive(self) -> Tuple[InferenceResponse, bool]:
        """The next response, and whether it is the last."""
        assert self._stream is not None
        if self._cancelled:
            return _cancelled_response(), True
        try:
            answer = self._stream.next()
        except self._stream.chorus.ModelCallFailed as e:
            self._stream.end()
            return (_cancelled_response() if self._cancelled else _failure(e)), True
        if answer is None:
            self._stream.end()
            if self._cancelled:
                return _cancelled_response(), True
            return InferenceResponse._stream_end(), True
        final = bool(answer[3])
        if final:
            self._stream.end()
        return _response_of(answer), final

    def cancel(self) -> None:
        """Stops the call (nothing happens once it has ended)."""
        with self._lock:
            if self._finished or self._stream is None:
                return
            self._cancelled = True
        self._stream.end()


def _cancelled_response() -> InferenceResponse:
    return InferenceResponse(error=TritonError("Request was cancelled", ErrorCode.CANCELLED))
