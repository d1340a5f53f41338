"""One TorchServe worker inside a chorus interpreter: a handler's Context, its
`initialize`, and batches of requests through its entry point.

TorchServe's frontend sends a worker a batch of requests (each: an id, its HTTP headers,
and its inputs: the raw body as `body`, or a form's fields, each with its content type);
the worker gives the handler `data` (one dict per request, each input decoded by its
content type: JSON parsed, text as str, anything else bytes) and the Context, and
answers each request with what the handler returned for it: bytes as they are, str in
UTF-8, a tensor as `torch.save` writes it, anything else as indented JSON; with the
status, headers and content type the handler set on the Context. A batch fails as a whole
(`Failure`) when the handler raises (PredictionException: its code and message;
MemoryError or a CUDA error: 507 "Out of resources"; anything else: 503 "Prediction
failed") or returns something other than one answer per request (503). This module does
what `ts/service.py` and `ts/protocol/otf_message_handler.py` do around the handler,
with TorchServe's Service building the Context and the handler's `data` as in TorchServe.

The handler runs as in a TorchServe worker process, whose working directory is the model's
folder and whose sys.path has it: while it initializes or handles a batch, the thread
running it has a working directory of its own (Linux's unshare(CLONE_FS): the process'
other threads, other workers among them, keep theirs), the model's folder, and importlib's
imports of the archive's modules by bare name (BaseHandler's import of the manifest's
modelFile) find them (`ModelNamespace.active`). A worker runs one batch at a time.

The archive's weights are held once for all the model's workers (`chorus.mapped_weights`):
a checkpoint `torch.load` reads from the archive is mapped, and the state dict
`load_state_dict` gives a module during `initialize` becomes its parameters (where it
fits them) rather than a copy; TorchServe holds one copy per worker process.

Where chorus differs from TorchServe: metrics a handler adds go to TorchServe's metrics
cache (configured by TorchServe's default metrics.yaml); they are not yet on chorus'
metrics endpoint.
"""

import contextlib
import ctypes
import dataclasses
import io
import json
import logging
import os
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Union

from .. import mapped_weights
from ..model_namespaces import ModelNamespace
from .handlers import load_entry_point

__all__ = ["Input", "Request", "Response", "Failure", "Worker"]

logger = logging.getLogger(__name__)

_CLONE_FS = 0x00000200  # <sched.h>: the working directory, root and umask
_thread_state = threading.local()


def _own_working_directory() -> None:
    """Gives the calling thread a working directory of its own, once: its chdir then moves
    no other thread of the process."""
    if getattr(_thread_state, "own_directory", False):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_FS) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"unshare(CLONE_FS): {os.strerror(error)}")
    _thread_state.own_directory = True


@contextlib.contextmanager
def _as_in_a_worker_process(namespace: ModelNamespace, model_dir: str) -> Iterator[None]:
    """The calling thread in the model's folder, with the archive's modules importable by
    bare name, for the scope's life."""
    _own_working_directory()
    previous = os.getcwd()
    os.chdir(model_dir)
    try:
        with namespace.active():
            yield
    finally:
        os.chdir(previous)


@dataclasses.dataclass
class Input:
    """One input of a request: the raw body (named `body`) or a form field."""

    name: str
    content_type: str
    data: bytes


@dataclasses.dataclass
class Request:
    """One request of a batch, as TorchServe's frontend hands it to a worker."""

    request_id: str
    headers: Dict[str, str]  # the client's header names, as it wrote them
    inputs: List[Input]


@dataclasses.dataclass
class Response:
    """One request's answer."""

    status: int
    phrase: str
    headers: Dict[str, str]  # what the handler set, content type included
    content_type: str  # "" when the handler set none
    body: bytes


@dataclasses.dataclass
class Failure:
    """A batch that failed as a whole: every request gets `code` and `message`."""

    code: int
    message: str


def decoded_value(content_type: str, data: bytes, decode: bool = True) -> Any:
    """An input's value as TorchServe's worker gives it to the handler (bytes as a
    bytearray, as it reads them from its socket)."""
    if decode and content_type == "application/json":
        try:
            return json.loads(data.decode("utf-8"))
        except Exception:  # noqa: BLE001 (TorchServe forwards the bytes, whatever failed)
            logger.warning("Failed json decoding of input data. Forwarding encoded payload")
    elif decode and content_type.startswith("text"):
        try:
            return data.decode("utf-8")
        except Exception:  # noqa: BLE001 (as above)
            logger.warning("Failed utf-8 decoding of input data. Forwarding encoded payload")
    return bytearray(data)


def encoded_answer(value: Any) -> bytes:
    """A handler's answer for one request as the bytes the client gets. Raises TypeError
    or ValueError for a value JSON cannot hold."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    import torch

    if isinstance(value, torch.Tensor):
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()
    return json.dumps(value, indent=2).encode("utf-8")


def _frontend_batch(requests: List[Request], decode: bool) -> List[Dict[str, Any]]:
    """`requests` in the form TorchServe's worker decodes from its frontend's message."""
    return [{
        "requestId": request.request_id.encode("utf-8"),
        "headers": [{"name": name.encode("utf-8"), "value": value.encode("utf-8")}
                    for name, value in request.headers.items()],
        "parameters": [{"name": item.name, "contentType": item.content_type,
                        "value": decoded_value(item.content_type, item.data, decode)}
                       for item in request.inputs],
    } for request in requests]


def _metrics_cache(model_name: str) -> Any:
    import ts
    from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

    config = os.path.join(os.path.dirname(ts.__file__), "configs", "metrics.yaml")
    cache = MetricsCacheYamlImpl(config_file_path=config)
    cache.initialize_cache()
    cache.model_name = model_name
    return cache


class Worker:
    """One worker of a TorchServe model: its handler loaded in a module namespace of its
    own (`key`, unique to the worker), initialized with its Context."""

    def __init__(self, key: str, model_name: str, model_dir: str, module: str, function: str,
                 gpu_id: Optional[int] = None, batch_size: int = 1,
                 envelope: Optional[str] = None, limit_max_image_pixels: bool = True,
                 decode_input: bool = True):
        from ts.service import Service

        model_dir = os.path.abspath(model_dir)
        self.model_name = model_name
        self._model_dir = model_dir
        self._decode_input = decode_input
        self._lock = threading.Lock()  # one batch at a time, as a worker process runs them
        self._namespace = ModelNamespace(key, [model_dir], folders_first=True)
        mapped_weights.share_folder(model_dir)
        try:
            with _as_in_a_worker_process(self._namespace, model_dir), \
                    mapped_weights.assigning_state_dicts():
                self._handle, initialize = load_entry_point(
                    self._namespace, model_dir, module, function, envelope)
                self._service = Service(model_name, model_dir, _manifest(model_dir),
                                        self._handle, gpu_id, batch_size,
                                        limit_max_image_pixels, _metrics_cache(model_name))
                initialize(self._service.context)
        except BaseException:
            self.close()
            raise

    @property
    def context(self) -> Any:
        return self._service.context

    def predict(self, requests: List[Request]) -> Union[List[Response], Failure]:
        """The handler's answers to `requests` (one batch), or the batch's failure. Any
        thread; a worker's batches run one at a time."""
        with self._lock, _as_in_a_worker_process(self._namespace, self._model_dir):
            return self._predict(requests)

    def _predict(self, requests: List[Request]) -> Union[List[Response], Failure]:
        from ts.service import Service

        headers, data, request_ids = Service.retrieve_data_for_inference(
            _frontend_batch(requests, self._decode_input))
        context = self._service.context
        context.request_ids = request_ids
        context.request_processor = headers
        context.metrics.request_ids = request_ids
        started = time.time()
        answers = self._call(data, context)
        if isinstance(answers, Failure):
            return answers
        if not isinstance(answers, list):
            logger.warning("model: %s, Invalid return type: %s.", self.model_name, type(answers))
            return Failure(503, "Invalid model predict output")
        if len(answers) != len(data):
            logger.warning("model: %s, number of batch response mismatched, expect: %d, "
                           "got: %d.", self.model_name, len(data), len(answers))
            return Failure(503, "number of batch response mismatched")
        context.metrics.add_time("PredictionTime", round((time.time() - started) * 1000, 2))
        return self._responses(answers, context)

    def _call(self, data: List[Dict[str, Any]], context: Any) -> Any:
        from ts.utils.util import PredictionException

        try:
            return self._handle(data, context)
        except MemoryError:
            logger.error("System out of memory", exc_info=True)
            return Failure(507, "Out of resources")
        except PredictionException as e:
            logger.error("Prediction error", exc_info=True)
            return Failure(e.error_code, e.message)
        except Exception as e:  # the handler's failure is the batch's answer
            if "CUDA" in str(e):
                logger.error("CUDA out of memory", exc_info=True)
                return Failure(507, "Out of resources")
            logger.warning("Invoking custom service failed.", exc_info=True)
            return Failure(503, "Prediction failed")

    @staticmethod
    def _responses(answers: List[Any], context: Any) -> Union[List[Response], Failure]:
        responses = []
        for index, answer in enumerate(answers):
            try:
                body = encoded_answer(answer)
            except (TypeError, ValueError):
                logger.warning("Unable to serialize model output.", exc_info=True)
                return Failure(503, "Unsupported model output data type.")
            code, phrase = context.get_response_status(index)
            response_headers = dict(context.get_response_headers(index))
            responses.append(Response(
                status=code if code is not None else 200, phrase=phrase or "",
                headers=response_headers,
                content_type=context.get_response_content_type(index) or "", body=body))
        return responses

    def close(self) -> None:
        """Forgets the worker's modules and its hold on the archive's weights."""
        self._namespace.close()
        mapped_weights.forget_folder(self._model_dir)


def _manifest(model_dir: str) -> Optional[Dict[str, Any]]:
    path = os.path.join(model_dir, "MAR-INF", "MANIFEST.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as file:
        return json.load(file)

