"""Triton's perf_analyzer (its default gRPC mode) against chorus-server, unmodified: it
reads ModelMetadata, ModelConfig and ServerMetadata, runs, and reports the server-side
statistics it reads from ModelStatistics."""

import csv
import os
import subprocess

import pytest

PERF_ANALYZER = os.environ.get("CHORUS_PERF_ANALYZER", "")


@pytest.fixture(scope="module")
def perf_analyzer():
    if not os.access(PERF_ANALYZER, os.X_OK):
        pytest.fail("perf_analyzer not found (CHORUS_PERF_ANALYZER="
                    f"{PERF_ANALYZER!r}): `make configure` installs it "
                    "(tools/install-perf-analyzer.sh)")
    return PERF_ANALYZER


def test_perf_analyzer_measures_chorus_with_server_side_statistics(server, perf_analyzer,
                                                                   tmp_path):
    report = tmp_path / "mlp.csv"
    done = subprocess.run(
        [perf_analyzer, "-m", "mlp", "-i", "grpc", "-u", server.address, "-p", "500",
         "--concurrency-range", "1:2", "--max-trials", "6", "--stability-percentage", "50",
         "-f", str(report)],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Server: \n    Inference count:" in done.stdout
    rows = list(csv.DictReader(report.open()))
    assert [int(r["Concurrency"]) for r in rows] == [1, 2]
    for row in rows:
        assert float(row["Inferences/Second"]) > 0
        # Server-side columns are there because chorus advertises "statistics".
        assert int(row["Server Compute Infer"]) > 0
        assert int(row["p99 latency"]) >= int(row["p50 latency"]) > 0


@pytest.mark.parametrize("streaming", [False, True], ids=["http", "grpc-streaming"])
def test_perf_analyzer_over_http_and_over_a_stream(server, perf_analyzer, tmp_path, streaming):
    """perf_analyzer's HTTP mode reads the REST config and statistics JSON; its streaming
    mode sends every request through ModelStreamInfer."""
    report = tmp_path / "identity.csv"
    protocol = (["-i", "grpc", "-u", server.address, "--streaming", "--async"] if streaming
                else ["-i", "http", "-u", f"127.0.0.1:{server.http_port}"])
    done = subprocess.run(
        [perf_analyzer, "-m", "identity", *protocol, "-b", "1", "-p", "500",
         "--concurrency-range", "2", "--max-trials", "6", "--stability-percentage", "50",
         "-f", str(report)],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = list(csv.DictReader(report.open()))
    assert float(row["Inferences/Second"]) > 0
    assert int(row["Server Compute Infer"]) > 0
