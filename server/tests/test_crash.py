"""A model that kills chorus-server leaves a report naming the model, the request,
the interpreter and the Python stack (issue: crashes never take the service away)."""

import os
import re
import signal
import time

import grpc
import numpy as np
import pytest
import torch

import servable_models
from chorus.client import ClientError
from conftest import ServerProcess, metric, package


@pytest.fixture
def crash_repository(tmp_path):
    repo = tmp_path / "repository"
    (repo / "crashy" / "1").mkdir(parents=True)
    package(repo / "crashy" / "1" / "model.pt", servable_models.Crasher(), torch.zeros(1, 4),
            "crashy", batchable=False)
    return repo


def crash_with(repo, value, request_id):
    server = ServerProcess(repo, "--no-supervisor", interpreters=2)
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


def wait_until_serving(client, deadline_s=120):
    """The next successful ModelInfer on crashy (retried while the server restarts)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            (answer,) = client.infer("crashy", {"x": np.ones((1, 4), np.float32)},
                                     timeout=10).values()
            return answer
        except ClientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_supervisor_restarts_a_crashed_serving_process_on_the_same_port(crash_repository):
    server = ServerProcess(crash_repository, interpreters=1)  # supervised: the default
    try:
        with server.client() as client:
            assert np.array_equal(wait_until_serving(client), np.full((1, 4), 2, np.float32))
            poison = client.make_request("crashy", {"x": np.full((1, 4), 13.0, np.float32)},
                                         request_id="poison-1")
            with pytest.raises(ClientError):
                client.infer_request(poison, timeout=60)
            # The same address serves again, and says what happened.
            assert np.array_equal(wait_until_serving(client), np.full((1, 4), 2, np.float32))
        assert server.process.poll() is None
        metrics = server.metrics()
        assert metric(metrics, "chorus_server_restarts_total") == 1, metrics
        assert 'chorus_server_last_exit_info{reason="signal SIGSEGV"} 1' in metrics, metrics
        log = server.log_text()
        assert "  running: model crashy version 1, request poison-1\n" in log, log
        assert "supervisor: serving process died (signal SIGSEGV); restart 1 in 250 ms" in log
    finally:
        # SIGTERM reaches the serving process through the supervisor: a clean drain.
        assert server.stop() == 0
    assert "supervisor: serving process stopped (exit status 0)" in server.log_text()


def test_the_supervisor_stays_small_and_never_loads_torch(crash_repository):
    """Only the serving process loads libtorch (and the server library); the supervisor,
    which outlives every crash, holds a few MiB, not a second copy of torch's start-up."""
    server = ServerProcess(crash_repository, interpreters=1)
    try:
        with server.client() as client:
            wait_until_serving(client)

        def mapped(pid):
            return open(f"/proc/{pid}/maps").read()

        assert "libtorch_cpu.so" in mapped(server.serving_pid())
        assert "libchorus_server.so" in mapped(server.serving_pid())
        supervisor_maps = mapped(server.process.pid)
        assert "libtorch" not in supervisor_maps and "libchorus_server" not in supervisor_maps
        status = open(f"/proc/{server.process.pid}/status").read()
        rss_mib = int(status.split("VmRSS:")[1].split()[0]) / 1024
        assert rss_mib < 32, f"supervisor RSS {rss_mib:.1f} MiB"
    finally:
        assert server.stop() == 0


def test_a_killed_supervisor_takes_its_serving_process_along(crash_repository):
    server = ServerProcess(crash_repository, interpreters=1)
    with server.client() as client:
        wait_until_serving(client)
    child = server.serving_pid()
    server.process.kill()
    server.process.wait(30)
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        state = open(f"/proc/{child}/stat").read().split(") ")[-1].split()[0]
        if state == "Z":
            break  # exited, waiting for init to reap it
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{child}") or state == "Z"


def test_a_model_that_crashes_the_server_twice_is_quarantined_until_loaded_again(tmp_path):
    # The first crash is a segfault (the crash handler names the request); the second a
    # SIGKILL, which nothing in the process can report (the OOM killer's way): the
    # supervisor reads what was running from the memory it shares with the process.
    repo = tmp_path / "repository"
    models = {"crashy": servable_models.Crasher(), "steady": servable_models.Scale(3.0)}
    for name, model in models.items():
        (repo / name / "1").mkdir(parents=True)
        package(repo / name / "1" / "model.pt", model, torch.zeros(1, 4), name, batchable=False)
    server = ServerProcess(repo, interpreters=1)
    x = np.ones((1, 4), np.float32)
    try:
        with server.client() as client:
            wait_until_serving(client)
            for attempt, value in ((1, 13.0), (2, 9.0)):
                poison = client.make_request("crashy", {"x": np.full((1, 4), value, np.float32)},
                                             request_id=f"poison-{attempt}")
                with pytest.raises(ClientError):
                    client.infer_request(poison, timeout=60)
                # Back again: the steady model answers (retried while restarting).
                deadline = time.monotonic() + 120
                while True:
                    try:
                        (steady,) = client.infer("steady", {"x": x}, timeout=10).values()
                        break
                    except ClientError:
                        assert time.monotonic() < deadline
                        time.sleep(0.2)
                assert np.array_equal(steady, 3 * x)
            # After the second crash, crashy stays away with the reason; steady serves.
            with pytest.raises(ClientError) as refused:
                client.infer("crashy", {"x": x}, timeout=10)
            assert refused.value.code.name == "UNAVAILABLE"
            assert "is quarantined" in refused.value.message
            assert "poison-2" in refused.value.message
            assert "signal SIGKILL" in refused.value.message
            assert not client.ready("crashy")
            assert client.ready()  # a quarantined model does not hold the server back
            index = {m.name: m for m in client.models()}
            assert index["crashy"].state == "UNAVAILABLE"
            assert "quarantined" in index["crashy"].reason
            assert index["steady"].state == "READY"
            # An explicit load re-admits it.
            client.load("crashy")
            (again,) = client.infer("crashy", {"x": x}, timeout=30).values()
            assert np.array_equal(again, 2 * x)
        assert metric(server.metrics(), "chorus_server_restarts_total") == 2
        log = server.log_text()
        assert "supervisor: model crashy is quarantined" in log, log
        assert ("supervisor: the serving process was running: model crashy version 1, "
                "request poison-2") in log, log
        assert "model crashy re-admitted from quarantine by an explicit load" in log, log
    finally:
        assert server.stop() == 0


def test_a_serving_process_killed_from_outside_is_reported_with_its_peak_memory(
        crash_repository):
    server = ServerProcess(crash_repository, interpreters=1)
    try:
        with server.client() as client:
            wait_until_serving(client)
            time.sleep(1.5)  # the supervisor samples the peak memory every second
            server.kill_serving(signal.SIGKILL)  # as the kernel's OOM killer would
            wait_until_serving(client)
        metrics = server.metrics()
        match = re.search(r'chorus_server_last_exit_info\{reason="signal SIGKILL \(killed from '
                          r'outside: out of memory\? peak RSS (\d+) MiB\)"\} 1', metrics)
        assert match, metrics
        assert int(match.group(1)) > 100  # an interpreter with torch, at least
    finally:
        assert server.stop() == 0


MEMORY_LIMIT_MIB = 3072


def test_a_request_past_the_memory_limit_is_resource_exhausted_and_the_server_serves_on(
        tmp_path):
    repo = tmp_path / "repository"
    for name, model in {"hog": servable_models.Hog(), "steady": servable_models.Scale(3.0)}.items():
        (repo / name / "1").mkdir(parents=True)
        package(repo / name / "1" / "model.pt", model, torch.zeros(1, 4), name, batchable=False)
    server = ServerProcess(repo, "--memory-limit-mib", str(MEMORY_LIMIT_MIB), interpreters=1)
    x = np.ones((1, 4), np.float32)

    def hog(mib, python=False):
        request = np.zeros((1, 4), np.float32)
        request[0, 0], request[0, 1] = mib, float(python)
        (answer,) = client.infer("hog", {"x": request}, timeout=60).values()
        return answer[0, 2]  # the blocks it held

    try:
        with server.client() as client:
            metrics = server.metrics()
            limit = metric(metrics, "chorus_process_memory_limit_bytes")
            assert limit == MEMORY_LIMIT_MIB << 20
            in_use_mib = metric(metrics, "chorus_process_data_bytes") / (1 << 20)
            assert in_use_mib < MEMORY_LIMIT_MIB - 1024, in_use_mib  # room for the test
            assert hog(256) == 16
            past = int(MEMORY_LIMIT_MIB - in_use_mib) + 256
            for python in (False, True):
                with pytest.raises(ClientError) as refused:
                    hog(past, python)
                assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
                expected = "MemoryError" if python else "can't allocate memory"
                assert expected in refused.value.message, refused.value.message
                # The memory went back; everything serves on.
                assert hog(256) == 16
                (steady,) = client.infer("steady", {"x": x}, timeout=10).values()
                assert np.array_equal(steady, 3 * x)
            peak_mib = server.serving_memory_mib("VmHWM")
            assert peak_mib < MEMORY_LIMIT_MIB, peak_mib
        assert metric(server.metrics(), "chorus_server_restarts_total") == 0
    finally:
        assert server.stop() == 0
