"""What the Triton Python-backend server tests share: model folders they write (a
`config.pbtxt` and `<version>/model.py` in a repository under tmp_path), a chorus-server on
such a repository, Triton's clients (tritonclient HTTP and gRPC) and raw HTTP, and a reader
of gRPC streams.

The models are the tests' own, small and written for what each test checks; none is
copied from Triton's examples."""

import json
import queue
import textwrap
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import ServerProcess, wait_until
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

__all__ = ["ADD_SUB", "write_model", "TritonServer", "Stream", "inputs_of", "error_of", "final",
           "wait_until", "grpcclient", "httpclient", "InferenceServerException"]


# Triton's add_sub example model in the Python backend: OUTPUT0 = INPUT0 + INPUT1,
# OUTPUT1 = INPUT0 - INPUT1.
ADD_SUB = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""


def write_model(repo, name, config_text, model_py, extra_files=None, version="1",
                file_name="model.py"):
    """Writes `<repo>/<name>/config.pbtxt` (none when `config_text` is None) and
    `<repo>/<name>/<version>/<file_name>`; `extra_files` maps paths relative to the model's
    folder to their contents (str or bytes). Returns the model's folder."""
    folder = Path(repo) / name
    (folder / version).mkdir(parents=True, exist_ok=True)
    if config_text is not None:
        (folder / "config.pbtxt").write_text(textwrap.dedent(config_text))
    (folder / version / file_name).write_text(textwrap.dedent(model_py))
    for relative, content in (extra_files or {}).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content))
    return folder


def inputs_of(module, values, binary_data=None):
    """tritonclient InferInputs (of `module`: tritonclient.http or .grpc) for a dict of
    numpy arrays; a (array, "BF16") pair names its datatype."""
    inputs = []
    for name, value in values.items():
        array, datatype = value if isinstance(value, tuple) else (value, None)
        datatype = datatype or np_to_triton_dtype(array.dtype)
        tensor = module.InferInput(name, list(array.shape), datatype)
        if binary_data is None:
            tensor.set_data_from_numpy(array)
        else:
            tensor.set_data_from_numpy(array, binary_data=binary_data)
        inputs.append(tensor)
    return inputs


def error_of(call):
    """The InferenceServerException `call()` raises (fails when it raises none)."""
    try:
        call()
    except InferenceServerException as e:
        return e
    raise AssertionError("the call succeeded")


class TritonServer:
    """A chorus-server (2 interpreters) on `repo`, with Triton's clients."""

    def __init__(self, repo, *args):
        self.process = ServerProcess(repo, *args, interpreters=2)
        self._owner = threading.get_ident()
        self.http = self.http_client()
        self.grpc = grpcclient.InferenceServerClient(self.process.address)

    def stop(self):
        self.http.close()
        self.grpc.close()
        return self.process.stop()

    def log_text(self):
        return self.process.log_text()

    def metrics(self):
        return self.process.metrics()

    def raw(self, method, path, body=None):
        """(HTTP status, body bytes) of a request to the server's HTTP port."""
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.process.http_port}{path}", data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def http_client(self):
        """A new tritonclient HTTP client (one per thread: it is not thread-safe)."""
        return httpclient.InferenceServerClient(f"127.0.0.1:{self.process.http_port}",
                                                connection_timeout=120, network_timeout=120)

    def infer(self, protocol, model, values, outputs=None, **kwargs):
        """tritonclient's infer over "http" or "grpc" with numpy inputs; `outputs` names
        the outputs to ask for (None: all). Any thread: HTTP calls from threads other
        than the first get a client of their own."""
        module = httpclient if protocol == "http" else grpcclient
        requested = None if outputs is None else [module.InferRequestedOutput(name)
                                                  for name in outputs]
        inputs = inputs_of(module, values)
        if protocol == "grpc":
            return self.grpc.infer(model, inputs, outputs=requested, **kwargs)
        if threading.get_ident() == self._owner:
            return self.http.infer(model, inputs, outputs=requested, **kwargs)
        with self.http_client() as client:
            return client.infer(model, inputs, outputs=requested, **kwargs)

    def index(self):
        """The repository index: name -> its entry (state, reason)."""
        status, body = self.raw("POST", "/v2/repository/index", {})
        assert status == 200, body
        return {entry["name"]: entry for entry in json.loads(body)}

    def wait_for_state(self, model, state, timeout=120):
        wait_until(lambda: self.index().get(model, {}).get("state") == state, timeout,
                   lambda: f"{model} never {state}: {self.index().get(model)}")


def final(result):
    """Whether a stream result carries Triton's final-response flag."""
    return result.get_response().parameters["triton_final_response"].bool_param


class Stream:
    """A tritonclient gRPC stream whose callback's results are read in order."""

    def __init__(self, server):
        self.client = grpcclient.InferenceServerClient(server.process.address)
        self.results = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(self, model, values, request_id="", empty_final=None, **kwargs):
        if empty_final is not None:
            kwargs["enable_empty_final_response"] = empty_final
        self.client.async_stream_infer(model, inputs_of(grpcclient, values),
                                       request_id=request_id, **kwargs)

    def next(self, timeout=60):
        """The next (result, error) pair."""
        return self.results.get(timeout=timeout)

    def until_final(self, timeout=60):
        """The (result, error) pairs up to the first flagged final (or an error)."""
        got = []
        while True:
            result, error = self.next(timeout)
            got.append((result, error))
            if error is not None or final(result):
                return got

    def assert_quiet(self):
        """Nothing is waiting to be read."""
        assert self.results.empty(), self.results.queue[0]

    def close(self, cancel=False):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def bytes_array(*elements):
    """An object array of bytes (Triton's BYTES)."""
    array = np.empty(len(elements), dtype=np.object_)
    array[:] = list(elements)
    return array
