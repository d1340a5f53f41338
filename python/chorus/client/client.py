"""Client: the Open Inference Protocol over gRPC, with numpy in and out."""

from typing import Dict, List, Optional

import grpc
import numpy as np

from chorus import dtypes
from chorus.inference import grpc_service_pb2 as pb
from chorus.inference import grpc_service_pb2_grpc as pb_grpc

# numpy dtype -> wire datatype. BF16 has no numpy type: it arrives as raw
# uint16 bits (use torch to interpret them), and uint16 arrays are not sent.
_WIRE = {np.dtype(d.numpy).str: d.wire for d in dtypes.DTYPES if d.wire != "BF16"}


class ClientError(RuntimeError):
    """A call failed; `code` is the grpc.StatusCode."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


def wire_datatype(array: np.ndarray) -> str:
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
    return np.frombuffer(raw, dtype=numpy_dtype(datatype)).reshape(tuple(shape))


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
            array = np.ascontiguousarray(array)
            request.inputs.add(name=name, datatype=wire_datatype(array), shape=list(array.shape))
            request.raw_input_contents.append(array.tobytes())
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
