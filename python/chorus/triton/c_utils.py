"""`c_python_backend_utils`: the names Triton's stub defines in its native module, for the
models that import it directly (`chorus.triton.backend` registers this module under that
name). They are the same objects as in `triton_python_backend_utils`.

Triton's internal test hook `shared_memory` has no counterpart (chorus uses no shared
memory between processes).
"""

import traceback
from typing import Any

from .bls import ResponseIterator
from .errors import TritonError, TritonModelException
from .logger import Logger, LogLevel, server_log
from .metrics import Metric, MetricFamily, MetricKind
from .model_control import is_model_ready, load_model, unload_model
from .requests import (TRITONSERVER_MEMORY_CPU, TRITONSERVER_MEMORY_GPU, InferenceRequest,
                       InferenceTrace, MemoryType, PreferredMemory)
from .responses import InferenceResponse, InferenceResponseSender
from .tensor import Tensor

__all__ = ["TritonError", "TritonModelException", "PreferredMemory", "MemoryType",
           "TRITONSERVER_MEMORY_GPU", "TRITONSERVER_MEMORY_CPU", "InferenceTrace",
           "InferenceRequest", "Tensor", "InferenceResponse", "InferenceResponseSender",
           "ResponseIterator", "Logger", "Metric", "MetricKind", "MetricFamily", "load_model",
           "unload_model", "is_model_ready", "async_event_future_done_callback"]


def async_event_future_done_callback(py_future: Any) -> None:
    """Logs the exception a finished background future ended with (a Triton internal)."""
    if py_future.cancelled() or py_future.exception() is None:
        return
    error = py_future.exception()
    server_log(LogLevel.ERROR, "".join(traceback.format_exception(error)))
