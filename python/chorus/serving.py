"""Calling other served models from inside a model, in process.

A model served by chorus may call any other model the server serves, as Triton's
"business logic scripting" does, but without leaving the process: the call goes through
the other model's scheduler (its batching, queue and statistics), tensors cross
interpreters without copies, and the request being served passes on its deadline and
cancellation. A call back into a model already on the call's path (a cycle) is refused.

    from chorus import serving

    class Pipeline(torch.nn.Module):
        def forward(self, x):
            features = serving.infer("encoder", {"x": x})["features"]
            return serving.infer("head", {"features": features}, timeout=0.5)["logits"]

`infer_async` returns the same for `await` (calls run concurrently); `infer_stream` yields
each response of a decoupled (streaming) model. Failures raise `ModelCallError`, whose
`code` is the status ("NOT_FOUND", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", ...).

Outside a chorus server (packaging a model, unit tests) `stand_ins` gives the models to
call as plain Python callables: `with serving.stand_ins({"encoder": fn}): ...`, where
`fn(**inputs)` returns the outputs by name.
"""

import asyncio
import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional

try:
    import _chorus
except ImportError:  # plain Python: only stand-ins answer
    _chorus = None

__all__ = ["infer", "infer_async", "infer_stream", "stand_ins", "ModelCallError"]

Outputs = Dict[str, Any]
_stand_ins: Optional[Dict[str, Callable[..., Outputs]]] = None


class ModelCallError(RuntimeError):
    """A call to a served model failed; `code` names the status, the message says why."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


@contextlib.contextmanager
def stand_ins(models: Dict[str, Callable[..., Outputs]]):
    """Answers calls to `models` (name -> `fn(**inputs) -> {output: value}`) while active."""
    global _stand_ins
    previous, _stand_ins = _stand_ins, dict(models)
    try:
        yield
    finally:
        _stand_ins = previous


def _stand_in(model: str, inputs: Dict[str, Any], outputs: Optional[List[str]]) -> Outputs:
    if _stand_ins is None or model not in _stand_ins:
        raise ModelCallError(f'no model "{model}" to call: not inside a chorus server, and no '
                             "stand-in given (chorus.serving.stand_ins)", "UNAVAILABLE")
    answer = _stand_ins[model](**inputs)
    return {name: answer[name] for name in outputs} if outputs else dict(answer)


def _start(model: str, inputs: Dict[str, Any], version: str, outputs: Optional[List[str]],
           timeout: Optional[float], stream: bool, wait: bool = True) -> int:
    """Starts a call; with `wait` (the caller only waits for it) it may run here."""
    try:
        return _chorus.model_call_start(model, inputs, version, outputs, timeout or 0.0, stream,
                                        wait)
    except _chorus.ModelCallFailed as e:
        raise ModelCallError(*e.args) from None


def _next(handle: int) -> Optional[Outputs]:
    try:
        return _chorus.model_call_next(handle)
    except _chorus.ModelCallFailed as e:
        raise ModelCallError(*e.args) from None


def _outputs_of(handle: int) -> Outputs:
    try:
        outputs = _next(handle)
    finally:
        _chorus.model_call_end(handle)
    if outputs is None:  # a decoupled model that answered nothing
        raise ModelCallError("the model answered nothing (call it with infer_stream)",
                             "INTERNAL")
    return outputs


def infer(model: str, inputs: Dict[str, Any], *, outputs: Optional[List[str]] = None,
          version: str = "", timeout: Optional[float] = None) -> Outputs:
    """Calls served model `model` (`version`, "" for the one serving) with `inputs` by
    name (tensors, or str / nested lists of str for string inputs); returns its outputs
    by name (those in `outputs`, else all). `timeout` (seconds) caps the deadline the
    request being served already has."""
    if _chorus is None or _stand_ins is not None:
        return _stand_in(model, inputs, outputs)
    return _outputs_of(_start(model, inputs, version, outputs, timeout, False))


async def infer_async(model: str, inputs: Dict[str, Any], *,
                      outputs: Optional[List[str]] = None, version: str = "",
                      timeout: Optional[float] = None) -> Outputs:
    """`infer` for `await`: the call starts at once, and the coroutine waits for its
    answer without holding the event loop (run several with asyncio.gather)."""
    if _chorus is None or _stand_ins is not None:
        return _stand_in(model, inputs, outputs)
    handle = _start(model, inputs, version, outputs, timeout, False, wait=False)
    return await asyncio.get_running_loop().run_in_executor(None, _outputs_of, handle)


def infer_stream(model: str, inputs: Dict[str, Any], *, outputs: Optional[List[str]] = None,
                 version: str = "", timeout: Optional[float] = None) -> Iterator[Outputs]:
    """Yields each response of `model` as it comes: every one of a decoupled model, the
    one of another. Closing the generator early stops the model."""
    if _chorus is None or _stand_ins is not None:
        yield _stand_in(model, inputs, outputs)
        return
    handle = _start(model, inputs, version, outputs, timeout, True)
    try:
        while (response := _next(handle)) is not None:
            yield response
    finally:
        _chorus.model_call_end(handle)
