"""Serving cells (--cells, --spare): a crash takes one cell down while the others answer,
the spare takes its place, and quarantine counts crashes across cells."""

import os
import re
import subprocess

import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

import cells
from chorus.client import ClientError
from chorus.client.training import TrainingClient
from conftest import BIN_DIR, ServerProcess, wait_until
from training_specs import spec


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


def test_cells_refuse_what_would_change_one_cell_only(tmp_path):
    repo = cells.make_repository(str(tmp_path))
    server = ServerProcess(repo, "--cells", "2", interpreters=1)
    try:
        cells.wait_ready(server, 2)
        # Each cell prints its listening line; cell i serves metrics on --metrics-port + i.
        second = re.search(r"\(metrics (\d+)\)", server.process.stdout.readline())
        assert {server.metrics_port, int(second.group(1))} == \
            {min(server.metrics_port, int(second.group(1))) + i for i in (0, 1)}
        client = triton.InferenceServerClient(server.address)
        for change in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException, match=r"runs 2 cells.*poll"):
                change("whoami")
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
