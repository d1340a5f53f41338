"""`triton_python_backend_utils`: what `import triton_python_backend_utils as pb_utils` gives
a Triton Python-backend model run by chorus.

`chorus.triton.backend` registers this module under that name (and each model's own
modules get a copy whose `get_model_dir()` knows their model). It gathers Triton's whole
model-facing API from the modules of this package; `c_utils` holds the names Triton puts
in `c_python_backend_utils`.
"""

from .bls import ResponseIterator
from .datatypes import (TRITON_STRING_TO_NUMPY, deserialize_bytes_tensor, numpy_to_triton_type,
                        serialize_byte_tensor, triton_string_to_numpy, triton_to_numpy_type)
from .errors import TritonError, TritonModelException
from .logger import Logger
from .metrics import Metric, MetricFamily, MetricKind
from .model_config import (ModelConfig, get_input_config_by_name, get_output_config_by_name,
                           using_decoupled_model_transaction_policy)
from .model_control import get_model_dir, is_model_ready, load_model, unload_model
from .requests import (TRITONSERVER_MEMORY_CPU, TRITONSERVER_MEMORY_GPU,
                       TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
                       TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
                       TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
                       InferenceRequest, InferenceTrace, MemoryType, PreferredMemory,
                       get_input_tensor_by_name)
from .responses import (TRITONSERVER_RESPONSE_COMPLETE_FINAL, InferenceResponse,
                        InferenceResponseSender, get_output_tensor_by_name)
from .tensor import Tensor

__all__ = [
    # Tensors and their types.
    "Tensor", "TRITON_STRING_TO_NUMPY", "triton_string_to_numpy", "triton_to_numpy_type",
    "numpy_to_triton_type", "serialize_byte_tensor", "deserialize_bytes_tensor",
    # Requests and responses.
    "InferenceRequest", "InferenceResponse", "InferenceResponseSender", "ResponseIterator",
    "PreferredMemory", "MemoryType", "InferenceTrace", "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU", "get_input_tensor_by_name", "get_output_tensor_by_name",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START", "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL", "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    # Errors.
    "TritonError", "TritonModelException",
    # The model's configuration.
    "ModelConfig", "get_input_config_by_name", "get_output_config_by_name",
    "using_decoupled_model_transaction_policy",
    # Logging, metrics, model control.
    "Logger", "MetricFamily", "Metric", "MetricKind", "load_model", "unload_model",
    "is_model_ready", "get_model_dir",
]
