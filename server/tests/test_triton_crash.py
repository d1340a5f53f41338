"""A Triton Python-backend model that crashes the server is handled as any model is: a crash
report naming the model, the request and the Python stack, the supervisor's restart, and
quarantine of a model that keeps crashing (Triton: "Stub process ... is not healthy")."""

import re
import signal
import textwrap
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import ServerProcess
from tritonclient.utils import InferenceServerException

CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

# X = 13 dereferences NULL (SIGSEGV), X = 7 ends the process with os._exit(7),
# anything else is doubled.
CRASHER = """
import ctypes
import os
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x[0] == 13:
                ctypes.string_at(0)
            if x[0] == 7:
                os._exit(7)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", 2 * x)]))
        return responses
"""


def write_repo(tmp_path):
    repo = tmp_path / "repository"
    for name, text in (("crashy", CRASHER), ("steady", CRASHER)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG)
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(text))
    return repo


def infer(client, model, value, request_id="", timeout=60):
    x = grpcclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.array([value], np.float32))
    return client.infer(model, [x], request_id=request_id, client_timeout=timeout).as_numpy("Y")


def until_serving(client, model, deadline_s=120):
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return infer(client, model, 1.0, timeout=10)
        except InferenceServerException:
            assert time.monotonic() < deadline, f"{model} did not serve again"
            time.sleep(0.2)


@pytest.mark.parametrize("value, ending", [(13.0, -signal.SIGSEGV), (7.0, 7)])
def test_a_crash_in_execute_is_reported_with_the_model_request_and_python_stack(
        tmp_path, value, ending):
    server = ServerProcess(write_repo(tmp_path), "--no-supervisor", interpreters=2)
    client = grpcclient.InferenceServerClient(server.address)
    assert infer(client, "crashy", 1.0).tolist() == [2.0]
    with pytest.raises(InferenceServerException):
        infer(client, "crashy", value, request_id="poison")
    assert server.process.wait(60) == ending
    log = server.log_text()
    assert "  running: model crashy version 1, request poison\n" in log, log
    assert re.search(r'File ".*crashy/1/model.py", line \d+ in execute', log), log


def test_a_python_model_that_keeps_crashing_is_quarantined_until_loaded_again(tmp_path):
    server = ServerProcess(write_repo(tmp_path), interpreters=1)  # supervised
    try:
        client = grpcclient.InferenceServerClient(server.address)
        until_serving(client, "crashy")
        for attempt in (1, 2):
            with pytest.raises(InferenceServerException):
                infer(client, "crashy", 13.0, request_id=f"poison-{attempt}")
            until_serving(client, "steady")
        with pytest.raises(InferenceServerException) as refused:
            infer(client, "crashy", 1.0, timeout=10)
        assert "is quarantined" in refused.value.message() and "poison-2" in refused.value.message()
        assert client.is_model_ready("steady") and not client.is_model_ready("crashy")
        client.load_model("crashy")  # an explicit load re-admits it
        assert infer(client, "crashy", 1.0).tolist() == [2.0]
        assert "supervisor: model crashy is quarantined" in server.log_text()
    finally:
        assert server.stop() == 0
