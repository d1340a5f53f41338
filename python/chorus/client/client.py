"""Client: the Open Inference Protocol over gRPC, with numpy in and out.

BYTES (string) tensors are numpy object arrays, as in tritonclient: str or bytes
elements in, bytes out (decode them as the model's strings were meant).
"""

import struct
from typing import Dict, List, Optional

import grpc
import numpy as np

from chorus import dtypes
from chorus.inference import grpc_service_pb2 as pb
from chorus.inference import grpc_service_pb2_grpc as pb_grpc

# numpy dtype -> wire datatype. BF16 has no numpy type: it arrives as raw
# uint16 bits (use torch to interpret them); uint16 arrays are sent as UINT16.
_WIRE = {np.dtype(d.numpy).str: d.wire for d in dtypes.DTYPES if d.wire != "BF16"}
BYTES = dtypes.STRING.wire
# numpy kinds sent as BYTES: object arrays (of str or bytes), fixed-size bytes ('S')
# and unicode ('U', what np.array(["a", "b"]) makes).
_BYTES_KINDS = ("O", "S", "U")
# Each BYTES element on the wire: its length (4 bytes, little-endian), then its bytes.
_LENGTH = struct.Struct("<I")


class ClientError(RuntimeError):
    """A call failed; `code` is the grpc.StatusCode."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def wire_datatype(array: np.ndarray) -> str:
    if array.dtype.kind in _BYTES_KINDS:
        return BYTES
    try:
        return _WIRE[array.dtype.str]
    except KeyError:
        raise ValueError(f"no protocol datatype for numpy {array.dtype}") from None


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy type of a wire datatype ("FP32" -> float32; "BF16" -> uint16 bits)."""
    try:
        return np.dtype(dtypes.BY_WIRE[datatype].numpy)
    except KeyError:
        raise ValueError(f"unknown protocol datatype {datatype!r}") from None


def to_numpy(datatype: str, shape, raw: bytes) -> np.ndarray:
    """The array `raw` holds: a BYTES tensor as an object array of bytes."""
    if datatype == BYTES:
        return deserialize_bytes(raw, shape)
    return np.frombuffer(raw, dtype=numpy_dtype(datatype)).reshape(tuple(shape))


def raw_contents(array: np.ndarray) -> bytes:
    """`array`'s raw contents on the wire: its bytes in C order, or for a BYTES array
    serialize_bytes'."""
    if wire_datatype(array) == BYTES:
        return serialize_bytes(array)
    return np.ascontiguousarray(array).tobytes()


def serialize_bytes(array: np.ndarray) -> bytes:
    """A BYTES tensor's raw contents, as Triton's: for each element in row-major order,
    its length (uint32, little-endian), then its bytes (str encoded as UTF-8)."""
    parts: List[bytes] = []
    for index, element in enumerate(np.asarray(array).flat):
        if isinstance(element, str):
            element = element.encode("utf-8")
        if not isinstance(element, bytes):
            raise ValueError(f"BYTES element {index} is {type(element).__name__}, "
                             "not str or bytes")
        parts += (_LENGTH.pack(len(element)), element)
    return b"".join(parts)


def deserialize_bytes(raw: bytes, shape) -> np.ndarray:
    """serialize_bytes' inverse: an object array of bytes with `shape`. ValueError when
    `raw` is truncated or holds another number of elements than `shape` has."""
    count = int(np.prod(shape, dtype=np.int64))
    elements: List[bytes] = []
    view, at = memoryview(raw), 0
    while at < len(view):
        if at + _LENGTH.size > len(view):
            raise ValueError(f"BYTES contents truncated in the length of element "
                             f"{len(elements)}")
        (length,) = _LENGTH.unpack_from(view, at)
        at += _LENGTH.size
        if at + length > len(view):
            raise ValueError(f"BYTES contents truncated in element {len(elements)} "
                             f"({length} bytes announced, {len(view) - at} left)")
        elements.append(bytes(view[at:at + length]))
        at += length
    if len(elements) != count:
        raise ValueError(f"BYTES contents hold {len(elements)} elements; shape "
                         f"{list(shape)} has {count}")
    array = np.empty(count, dtype=object)
    array[:] = elements
    return array.reshape(tuple(shape))


class Connection:
    """A gRPC channel to one chorus server, with the caller's credentials: what
    Client and TrainingClient share. Thread-safe (gRPC channels are)."""

    def __init__(self, stub_class, address: str = "localhost:8001", token: Optional[str] = None,
                 root_certificates: Optional[bytes] = None, max_message_bytes: int = 64 << 20):
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
        if root_certificates is not None:
            credentials = grpc.ssl_channel_credentials(root_certificates)
            self._channel = grpc.secure_channel(address, credentials, options)
        else:
            self._channel = grpc.insecure_channel(address, options)
        self._stub = stub_class(self._channel)
        self._metadata = [("authorization", f"Bearer {token}")] if token else []

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def stub(self):
        """The raw gRPC stub, for calls this class does not wrap."""
        return self._stub

    def _call(self, method, request, timeout=None):
        try:
            return getattr(self._stub, method)(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ClientError(e.code(), e.details()) from None


class Client(Connection):
    """The inference service (Open Inference Protocol) of one server."""

    def __init__(self, address: str = "localhost:8001", token: Optional[str] = None,
                 root_certificates: Optional[bytes] = None, max_message_bytes: int = 64 << 20):
        super().__init__(pb_grpc.GRPCInferenceServiceStub, address, token, root_certificates,
                         max_message_bytes)

    def live(self) -> bool:
        return self._call("ServerLive", pb.ServerLiveRequest()).live

    def ready(self, model: Optional[str] = None, version: str = "") -> bool:
        if model is None:
            return self._call("ServerReady", pb.ServerReadyRequest()).ready
        return self._call("ModelReady", pb.ModelReadyRequest(name=model, version=version)).ready

    def server_metadata(self) -> pb.ServerMetadataResponse:
        return self._call("ServerMetadata", pb.ServerMetadataRequest())

    def metadata(self, model: str, version: str = "") -> pb.ModelMetadataResponse:
        return self._call("ModelMetadata", pb.ModelMetadataRequest(name=model, version=version))

    def models(self, ready_only: bool = False) -> List[pb.RepositoryIndexResponse.ModelIndex]:
        return list(self._call("RepositoryIndex",
                               pb.RepositoryIndexRequest(ready=ready_only)).models)

    def load(self, model: str) -> None:
        self._call("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name=model))

    def unload(self, model: str) -> None:
        self._call("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name=model))

    def statistics(self, model: str = "") -> pb.ModelStatisticsResponse:
        return self._call("ModelStatistics", pb.ModelStatisticsRequest(name=model))

    @staticmethod
    def make_request(model: str, inputs: Dict[str, np.ndarray], version: str = "",
                     outputs: Optional[List[str]] = None,
                     request_id: str = "") -> pb.ModelInferRequest:
        """A ModelInferRequest with raw (binary) contents."""
        request = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
        for name, array in inputs.items():
            request.inputs.add(name=name, datatype=wire_datatype(array), shape=list(array.shape))
            request.raw_input_contents.append(raw_contents(array))
        for name in outputs or []:
            request.outputs.add(name=name)
        return request

    def infer_request(self, request: pb.ModelInferRequest, timeout: Optional[float] = None):
        """Sends a prepared request; returns {output name: numpy array}."""
        response = self._call("ModelInfer", request, timeout)
        return {out.name: to_numpy(out.datatype, out.shape, raw)
                for out, raw in zip(response.outputs, response.raw_output_contents)}

    def infer(self, model: str, inputs: Dict[str, np.ndarray], version: str = "",
              outputs: Optional[List[str]] = None, timeout: Optional[float] = None):
        """Runs `model` on `inputs`; returns {output name: numpy array}."""
        return self.infer_request(self.make_request(model, inputs, version, outputs), timeout)
