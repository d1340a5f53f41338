"""One model instance: a `TritonPythonModel` object and what runs its methods.

`execute` may be a coroutine function; as in Triton, its coroutines run on an asyncio
loop of the instance's own, on a background thread, started the first time. In default
mode the batch waits for the coroutine; in decoupled mode it runs in the background, so
the instance takes the next batch meanwhile (its requests are answered through their
senders, or failed if the coroutine raises).

Where chorus differs from Triton: a decoupled coroutine that raises also fails its
requests not yet finished (Triton only logs the error), so none waits for ever.
"""

import asyncio
import concurrent.futures
import inspect
import threading
import traceback
from typing import Any, Callable, List, Optional

from . import bls
from .execution import (BackendError, checked_return, deliver, fail_rescheduled,
                        fail_unfinished, failure_message)
from .logger import LogLevel, server_log
from .requests import InferenceRequest

__all__ = ["ModelInstance"]

# Triton's limit on an instance's is_ready() (seconds); longer counts as not ready.
_READY_TIMEOUT_S = 5.0


class _LoopThread:
    """An asyncio event loop running on a daemon thread of its own."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Any, timeout: Optional[float] = None) -> Any:
        """Runs `coroutine` on the loop and waits for its result."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def start(self, coroutine: Any, on_error: Callable[[BaseException], None]) -> None:
        """Runs `coroutine` on the loop without waiting; `on_error` gets its exception."""
        def done(future: "concurrent.futures.Future[Any]") -> None:
            if not future.cancelled() and future.exception() is not None:
                on_error(future.exception())  # type: ignore[arg-type]
        asyncio.run_coroutine_threadsafe(coroutine, self.loop).add_done_callback(done)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=_READY_TIMEOUT_S)
        if not self._thread.is_alive():
            self.loop.close()


class ModelInstance:
    """A `TritonPythonModel` object named `name` (Triton's `<model>_<group>_<index>`)."""

    def __init__(self, name: str, model: Any, model_file: str, output_names: List[str]):
        self.name = name
        self.model = model
        self.model_file = model_file
        self.output_names = output_names  # what a request that names none asks for
        self._loop: Optional[_LoopThread] = None
        self._loop_lock = threading.Lock()

    def _loop_thread(self) -> _LoopThread:
        with self._loop_lock:
            if self._loop is None:
                self._loop = _LoopThread(f"{self.name} asyncio loop")
            return self._loop

    def execute(self, received: List[Any], decoupled: bool) -> None:
        """Runs `execute` on a batch of received requests (backend.execute's) and answers
        each request."""
        requests = [InferenceRequest._received(request, decoupled, self.output_names)
                    for request in received]
        try:
            returned = self._call_execute(requests)
            if inspect.iscoroutine(returned):
                if decoupled:
                    self._loop_thread().start(returned, lambda e: self._fail(requests, e))
                    return
                returned = self._loop_thread().run(returned)
            responses = checked_return(returned, requests, decoupled, self.name)
            if responses is not None:
                deliver(requests, responses)
            fail_rescheduled(requests)
        except BaseException as error:
            self._fail(requests, error)
            if not isinstance(error, Exception):
                raise  # KeyboardInterrupt, chorus' DeadlineExceeded...: the caller's to see

    def _call_execute(self, requests: List[InferenceRequest]) -> Any:
        execute = getattr(self.model, "execute", None)
        if execute is None:
            raise BackendError(f"Python model {self.model_file} does not implement `execute` "
                               "method.")
        return execute(requests)

    def _fail(self, requests: List[InferenceRequest], error: BaseException) -> None:
        message = failure_message(self.name, error)
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        server_log(LogLevel.ERROR, f"{message}\n{trace}")
        for send_error in fail_unfinished(requests, message):
            server_log(LogLevel.ERROR, f"{self.name}: could not fail a request: {send_error}")

    def is_ready(self) -> bool:
        """The model's `is_ready()` (sync or async) if it has one; errors, non-bool answers
        and answers slower than 5 s count as not ready."""
        is_ready = getattr(self.model, "is_ready", None)
        if is_ready is None:
            return True
        try:
            ready = is_ready()
            if inspect.iscoroutine(ready):
                ready = self._loop_thread().run(ready, timeout=_READY_TIMEOUT_S)
        except Exception as error:
            server_log(LogLevel.ERROR, f"{self.name}: is_ready() failed: "
                                       f"{type(error).__name__}: {error}")
            return False
        return ready if isinstance(ready, bool) else False

    def finalize(self) -> None:
        """Calls the model's `finalize()` (errors are logged), then stops the loop."""
        finalize = getattr(self.model, "finalize", None)
        try:
            if finalize is not None:
                with bls.forbidden():
                    finalize()
        except Exception as error:
            server_log(LogLevel.ERROR, f"{self.name}: finalize() failed: "
                                       f"{''.join(traceback.format_exception(error))}")
        finally:
            if self._loop is not None:
                self._loop.stop()
