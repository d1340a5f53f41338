"""A model that kills chorus-server leaves a report naming the model, the request,
the interpreter and the Python stack (issue: crashes never take the service away)."""

import re
import signal

import numpy as np
import pytest
import torch

import servable_models
from chorus.client import ClientError
from conftest import ServerProcess, package


@pytest.fixture
def crash_repository(tmp_path):
    repo = tmp_path / "repository"
    (repo / "crashy" / "1").mkdir(parents=True)
    package(repo / "crashy" / "1" / "model.pt", servable_models.Crasher(), torch.zeros(1, 4),
            "crashy", batchable=False)
    return repo


def crash_with(repo, value, request_id):
    server = ServerProcess(repo, interpreters=2)
    with server.client() as client:
        (answer,) = client.infer("crashy", {"x": np.ones((1, 4), np.float32)}).values()
        assert np.array_equal(answer, np.full((1, 4), 2, np.float32))
        request = client.make_request("crashy", {"x": np.full((1, 4), value, np.float32)},
                                      request_id=request_id)
        with pytest.raises(ClientError):
            client.infer_request(request, timeout=60)
    code = server.process.wait(60)
    return code, server.log_text()


def test_a_segfaulting_model_is_reported_with_its_request_interpreter_and_python_stack(
        crash_repository):
    code, log = crash_with(crash_repository, 13.0, "poison-1")
    assert code == -signal.SIGSEGV, log
    assert re.search(r"chorus-server: fatal signal SIGSEGV \(address 0x0\) on thread \d+", log), log
    assert "  running: model crashy version 1, request poison-1\n" in log, log
    assert re.search(r"  interpreter [01]\n", log), log
    # The Python stack, innermost first (faulthandler's format): ctypes, then forward.
    stack = log[log.index("Stack (most recent call first):"):]
    assert re.search(r'File ".*ctypes/__init__.py", line \d+ in string_at', stack), log
    assert re.search(r'File ".*", line \d+ in forward', stack), log
    assert "  native stack:" in log


def test_a_model_calling_os_exit_is_reported_before_the_process_ends(crash_repository):
    code, log = crash_with(crash_repository, 7.0, "exit-7")
    assert code == 7, log
    assert "chorus: model code called os._exit(7)" in log, log
    assert "  running: model crashy version 1, request exit-7\n" in log, log
    assert re.search(r'File ".*", line \d+ in forward', log), log
