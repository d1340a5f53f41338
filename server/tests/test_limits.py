"""Limits and lifecycle, each on a server of its own: auth, message size,
queue bounds, and draining on SIGTERM."""

import re
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
import torch

from chorus.client.training import TrainingClient
from conftest import ServerProcess, copy_model, rpc_code


def test_bearer_token_is_required(repository):
    server = ServerProcess(repository[0], "--auth-token", "s3cret")
    try:
        x = {"x": np.ones((1, 4), np.float32)}
        with server.client() as anonymous:
            assert anonymous.live()  # probes stay open
            assert rpc_code(lambda: anonymous.infer("mlp", x)) == grpc.StatusCode.UNAUTHENTICATED
        with server.client(token="wrong") as wrong:
            assert rpc_code(lambda: wrong.infer("mlp", x)) == grpc.StatusCode.UNAUTHENTICATED
        with server.client(token="s3cret") as right:
            assert right.infer("mlp", x)["output"].shape == (1, 3)
        # The training service checks the same token.
        with TrainingClient(server.address) as anonymous:
            assert rpc_code(lambda: anonymous.stats("no-such-job")) == \
                grpc.StatusCode.UNAUTHENTICATED
        with TrainingClient(server.address, token="s3cret") as right:
            assert rpc_code(lambda: right.stats("no-such-job")) == grpc.StatusCode.NOT_FOUND
    finally:
        assert server.stop() == 0


def test_message_over_the_limit_is_resource_exhausted(repository):
    server = ServerProcess(repository[0], "--max-message-bytes", str(1 << 20))
    try:
        with server.client() as client:
            big = {"x": np.ones((1 << 17, 4), np.float32)}  # 2 MiB
            assert rpc_code(lambda: client.infer("identity", big)) == \
                grpc.StatusCode.RESOURCE_EXHAUSTED
            assert client.infer("identity",
                                {"x": np.ones((1, 4), np.float32)})["output"].shape == (1, 4)
    finally:
        assert server.stop() == 0


def test_full_queue_is_unavailable(repository):
    repo, spares = repository
    if not (repo / "slow").exists():
        copy_model(spares, repo, "slow")
    server = ServerProcess(repo, "--max-queue", "2", interpreters=1)
    try:
        with server.client() as client, ThreadPoolExecutor(10) as pool:
            codes = list(pool.map(
                lambda _: rpc_code(lambda: client.infer("slow", {"x": np.ones((1, 4), np.float32)},
                                                        timeout=30)), range(10)))
        assert grpc.StatusCode.UNAVAILABLE in codes
        assert None in codes  # some were served
        with server.client() as client:
            refused = [c for c in codes if c is not None]
            assert all(c == grpc.StatusCode.UNAVAILABLE for c in refused)
            assert client.infer("slow", {"x": np.ones((1, 4), np.float32)})["output"][0, 0] == 2.0
    finally:
        assert server.stop() == 0


def test_sigterm_drains_fifty_requests_in_flight_then_exits_zero(repository):
    server = ServerProcess(repository[0])
    with server.client() as client, ThreadPoolExecutor(50) as pool:
        futures = [pool.submit(client.infer, "sleeper", {"x": np.full((1, 4), i, np.float32)},
                               timeout=60) for i in range(50)]
        time.sleep(0.5)  # all 50 are in the server by now; 2 interpreters at 50 ms each
        assert sum(f.done() for f in futures) < 50
        exit_code = server.stop()
        results = [f.result() for f in futures]
    assert exit_code == 0
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result["output"], np.full((1, 4), 2.0 * i))


@pytest.mark.skipif(torch.cuda.is_available() or torch.version.cuda is None,
                    reason="for torch's CUDA wheels on a host without a GPU")
def test_without_a_gpu_the_pages_of_the_cuda_libraries_are_given_back(repository):
    # torch's CUDA wheels load the CUDA libraries into every process, GPU or not; loading
    # touches about 140 MiB of their pages, which a CPU host never uses again. Here the
    # serving process says it pages them out and serves on; how much that gives back is
    # measured by interpreter_test (pages this test's own process maps too, as it imports
    # torch, are not reclaimed) and make bench-peers.
    server = ServerProcess(repository[0], "--idle-memory-release-ms", "200", interpreters=1)
    try:
        x = {"x": np.ones((2, 4), np.float32)}
        with server.client() as client:
            y = client.infer("mlp", x)["output"]
        deadline = time.monotonic() + 30
        pattern = r"idle memory release: paged out \d+ MiB of mapped library pages"
        while not re.search(pattern, server.log_text()):
            assert time.monotonic() < deadline, server.log_text()
            time.sleep(0.1)
        with server.client() as client:  # still serving, the same answers
            np.testing.assert_array_equal(client.infer("mlp", x)["output"], y)
    finally:
        assert server.stop() == 0
