"""Serving cells (--cells, --spare): a crash takes one cell down while the others answer,
the spare takes its place, quarantine counts crashes across cells, and repository load and
unload calls are carried out by every serving process."""

import json
import os
import re
import signal
import subprocess
import urllib.request

import numpy as np
import pytest
import servable_models
import torch
import tritonclient.grpc as triton
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

import cells
from chorus.client import ClientError
from chorus.client.training import TrainingClient
from conftest import BIN_DIR, ServerProcess, package, wait_until
from training_specs import spec

# A Python-backend model pushed with its load call (Triton's "config" and "file:" parameters).
PUSHED_CONFIG = {
    "backend": "python",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
}
PUSHED_MODEL = b"""
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy() * 0
            + np.float32(os.getpid()))]) for request in requests]
"""


def test_a_crashing_cell_loses_no_request_of_the_other_and_the_spare_takes_its_place(
        tmp_path):
    figures = cells.run(str(tmp_path))
    server, poison_client = figures.pop("server"), figures.pop("poison_client")
    try:
        log = figures.pop("log")
        assert figures["poison_error"] is not None, figures
        # Clients on the surviving cell lost nothing; on the dead one, at most the request
        # on its broken connection (one per client); nothing was refused afterwards.
        assert figures["surviving_cell_errors"] == 0, figures
        assert figures["refused_during_crash"] == 0, figures
        assert figures["dead_cell_connections_broken"] <= figures["clients_on_dead_cell"], figures
        assert figures["requests"] > 100, figures
        # The spare, not a fresh process, took the dead cell's place, and answers.
        assert re.search(r"the spare \d+ serves in its place, a new spare in 250 ms", log), log
        assert figures["spare_took_over"], figures
        # A second crash of the same model, in whichever cell: quarantined everywhere,
        # including the cell that never crashed.
        with pytest.raises(InferenceServerException):
            cells.call(poison_client, "crashy", cells.POISON)
        cells.wait_ready(server, 3)
        # The surviving cell and the spare (now a cell) were told; a new spare starts
        # without it.
        wait_until(lambda: server.log_text().count("] model crashy is quarantined") == 2, 60,
                   server.log_text)
        for _ in range(12):
            client = cells.connect(server)
            with pytest.raises(InferenceServerException, match="quarantined"):
                cells.call(client, "crashy", 1.0)
            assert cells.whoami(client) > 0
        assert log.count("the spare serves as cell") == 1, log
    finally:
        assert server.stop() == 0


def test_cells_refuse_training_jobs_and_carry_repository_calls_to_every_cell(tmp_path):
    repo = cells.make_repository(str(tmp_path))
    server = ServerProcess(repo, "--cells", "2", interpreters=1)
    try:
        cells.wait_ready(server, 2)
        # Each cell prints its listening line; cell i serves metrics on --metrics-port + i.
        second = re.search(r"\(metrics (\d+)\)", server.process.stdout.readline())
        assert {server.metrics_port, int(second.group(1))} == \
            {min(server.metrics_port, int(second.group(1))) + i for i in (0, 1)}
        ports = [min(server.metrics_port, int(second.group(1))) + i for i in (0, 1)]
        # Repository calls reach every cell, whichever cell the call reached.
        client = triton.InferenceServerClient(server.address)
        client.unload_model("crashy")
        assert not any(serves(port, "crashy") for port in ports)
        client.load_model("crashy")
        assert all(serves(port, "crashy") for port in ports)
        assert cells.whoami(client) > 0
        # A training job lives in one process: refused before anything is built.
        with TrainingClient(server.address) as training:
            with pytest.raises(ClientError, match=r"FAILED_PRECONDITION: training jobs run "
                                                  r"on a server of one serving process; this "
                                                  r"one runs 2 cells"):
                training.create_job(**spec(str(tmp_path / "no-archive.pt")))
    finally:
        assert server.stop() == 0


def test_one_cell_owns_its_ports(tmp_path):
    """Without cells, a second server on the same port is an error, not a silent share."""
    repo = cells.make_repository(str(tmp_path))
    first = ServerProcess(repo, "--no-supervisor", interpreters=1)
    try:
        second = subprocess.run(
            [os.path.join(BIN_DIR, "chorus-server"), "--model-repository", str(repo),
             "--no-supervisor", "--interpreters", "1", "--host", "127.0.0.1",
             "--port", str(first.port), "--http-port", "-1", "--metrics-port", "-1"],
            capture_output=True, text=True, timeout=300)
        assert second.returncode == 1, second
        assert f"cannot listen on 127.0.0.1:{first.port}" in second.stderr, second.stderr
    finally:
        assert first.stop() == 0


def metrics_ports(server):
    """Each cell's metrics port: cell i's is the first + i (the two listening lines name both)."""
    second = re.search(r"\(metrics (\d+)\)", server.process.stdout.readline())
    first = min(server.metrics_port, int(second.group(1)))
    return [first, first + 1]


def serves(port, model):
    """Whether the cell whose metrics are on `port` serves `model` (False: it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            return f'{{model="{model}",' in response.read().decode()
    except OSError:
        return False


def cell_pid(server, cell):
    """The serving process that serves as `cell` now, as the supervisor's log tells."""
    pid = None
    for line in server.log_text().splitlines():
        started = re.search(rf"cell {cell}'s serving process (\d+) started", line)
        adopted = re.search(rf"cell {cell}'s serving process died \(.*\); the spare (\d+) serves",
                            line)
        if started or adopted:
            pid = int((started or adopted).group(1))
    return pid


def spares_started(server):
    return len(re.findall(r"the spare serving process \d+ started", server.log_text()))


def spare_ready(server):
    """Whether the spare the supervisor started last has loaded its models."""
    started = spares_started(server)
    return started > 0 and server.log_text().count("ready as the spare:") >= started


def replace_with_the_spare(server, cell, ports, models, absent=()):
    """Kills `cell`'s serving process once the spare is ready; waits until the spare serves
    in its place with `models` loaded and `absent` not, and the next spare is ready."""
    wait_until(lambda: spare_ready(server), 300, server.log_text)
    spares = spares_started(server)
    victim = None

    def killed():
        nonlocal victim
        victim = cell_pid(server, cell)
        try:
            os.kill(victim, signal.SIGKILL)
            return True
        except ProcessLookupError:  # gone already: the log names its successor soon
            return False

    wait_until(killed, 120, server.log_text)
    wait_until(lambda: cell_pid(server, cell) != victim, 120, server.log_text)
    wait_until(lambda: all(serves(ports[cell], m) for m in models)
               and not any(serves(ports[cell], m) for m in absent), 120, server.log_text)
    # The next spare starts with the record of changes.
    wait_until(lambda: spares_started(server) > spares and spare_ready(server), 300,
               server.log_text)


# Loads "other" in its initialize() (each process at its start) and "third" in execute()
# (one call, in one cell: every process carries it out).
LOADER_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
LOADER_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.load_model("other")

    def execute(self, requests):
        pb_utils.load_model("third")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.ones(1, np.float32))])
                for _ in requests]
"""


def add_scale(repo, name):
    os.makedirs(os.path.join(repo, name, "1"))
    package(os.path.join(repo, name, "1", "model.pt"), servable_models.Scale(2.0),
            torch.zeros(1, 4), name, batchable=False)


def start_cells(repo, *flags):
    server = ServerProcess(repo, "--cells", "2", "--spare", "--model-control-mode", "explicit",
                           "--load-model", "whoami", "--load-model", "crashy", *flags,
                           interpreters=1)
    cells.wait_ready(server, 3)
    wait_until(lambda: spare_ready(server), 300, server.log_text)
    return server


def pushed_answers(server):
    """The pushed model's answers (its process id) over new connections."""
    tensor = triton.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(np.zeros(4, np.float32))
    return {int(cells.connect(server).infer("pushed", [tensor]).as_numpy("OUTPUT0")[0])
            for _ in range(8)}


def test_explicit_loads_and_unloads_reach_every_cell_the_spare_and_later_processes(tmp_path):
    repo = cells.make_repository(str(tmp_path))
    add_scale(repo, "other")
    os.makedirs(os.path.join(repo, "broken", "1"))
    with open(os.path.join(repo, "broken", "1", "model.pt"), "wb") as broken:
        broken.write(b"not an archive")
    server = start_cells(repo)
    try:
        ports = metrics_ports(server)
        grpc_client = triton.InferenceServerClient(server.address)
        http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        assert not any(serves(port, "other") for port in ports)
        # A load answers once every cell (and the spare) has done it.
        grpc_client.load_model("other")
        assert all(serves(port, "other") for port in ports)
        assert all(cells.connect(server).is_model_ready("other") for _ in range(8))
        # A load's config and files reach every process too.
        http_client.load_model("pushed", config=json.dumps(PUSHED_CONFIG),
                               files={"file:1/model.py": PUSHED_MODEL})
        assert all(serves(port, "pushed") for port in ports)
        assert pushed_answers(server) <= {cell_pid(server, 0), cell_pid(server, 1)}
        http_client.unload_model("other")
        assert not any(serves(port, "other") for port in ports)
        assert not any(cells.connect(server).is_model_ready("other") for _ in range(8))
        # A load that fails in the cells answers the error, naming the first cell.
        with pytest.raises(InferenceServerException,
                           match=r"cell 0: load failed for model 'broken'"):
            grpc_client.load_model("broken")
        with pytest.raises(InferenceServerException, match=r"cell 0: .*'broken'"):
            http_client.load_model("broken")
        # The spare carried every change out: in a dead cell's place it serves the same.
        replace_with_the_spare(server, 1, ports, ["pushed", "whoami"], absent=["other"])
        # A spare started after the changes follows the record: pushed from its files.
        replace_with_the_spare(server, 0, ports, ["pushed", "whoami"], absent=["other"])
        assert pushed_answers(server) <= {cell_pid(server, 0), cell_pid(server, 1)}
        grpc_client.close()
        http_client.close()
    finally:
        assert server.stop() == 0


def test_an_explicit_load_readmits_a_quarantined_model_everywhere_and_after_restarts(tmp_path):
    repo = cells.make_repository(str(tmp_path))
    server = start_cells(repo)
    try:
        ports = metrics_ports(server)
        # Two crashes of crashy, each taking a cell down: quarantined in every process.
        for _ in range(2):
            with pytest.raises(InferenceServerException):
                cells.call(cells.connect(server), "crashy", cells.POISON)
            wait_until(lambda: cells.listeners(server.port) == 2, 120, server.log_text)
        wait_until(lambda: "model crashy is quarantined" in server.log_text(), 120,
                   server.log_text)
        wait_until(lambda: not any(serves(port, "crashy") for port in ports), 120,
                   server.log_text)
        with pytest.raises(InferenceServerException, match="quarantined"):
            cells.call(cells.connect(server), "crashy", 1.0)
        # The spare, told or started after the quarantine, does not serve it either.
        replace_with_the_spare(server, 0, ports, ["whoami"], absent=["crashy"])
        # An explicit load re-admits it in every cell.
        triton.InferenceServerClient(server.address).load_model("crashy")
        assert all(serves(port, "crashy") for port in ports)
        for _ in range(8):
            assert cells.call(cells.connect(server), "crashy", 1.0).tolist() == [[2.0] * 4]
        assert "model crashy is re-admitted by an explicit load" in server.log_text()
        # And in the processes started since: the spares that take the cells' places.
        replace_with_the_spare(server, 0, ports, ["crashy"])
        replace_with_the_spare(server, 1, ports, ["crashy"])
        for _ in range(8):
            assert cells.call(cells.connect(server), "crashy", 1.0).tolist() == [[2.0] * 4]
    finally:
        assert server.stop() == 0


def test_model_code_loads_at_start_in_each_process_and_later_in_every_process(tmp_path):
    repo = cells.make_repository(str(tmp_path))
    add_scale(repo, "other")
    add_scale(repo, "third")
    os.makedirs(os.path.join(repo, "loader", "1"))
    with open(os.path.join(repo, "loader", "config.pbtxt"), "w") as config:
        config.write(LOADER_CONFIG)
    with open(os.path.join(repo, "loader", "1", "model.py"), "w") as model:
        model.write(LOADER_MODEL)
    server = start_cells(repo, "--load-model", "loader")
    try:
        ports = metrics_ports(server)
        # initialize()'s load, in each process as it started (no supervisor to wait for).
        assert all(serves(port, "other") and serves(port, "loader") for port in ports)
        assert not any(serves(port, "third") for port in ports)
        tensor = triton.InferInput("X", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        cells.connect(server).infer("loader", [tensor])
        assert all(serves(port, "third") for port in ports)
        replace_with_the_spare(server, 0, ports, ["other", "third", "loader"])
    finally:
        assert server.stop() == 0
