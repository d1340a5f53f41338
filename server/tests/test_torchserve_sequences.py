"""TorchServe's sequence batching (a stateful model, model-config.yaml's
sequenceBatching) on chorus-server: a sequence's requests run in order on the one worker
that holds its state, a request naming no sequence starts a new one, and the limits
(maxNumSequence, maxSequenceJobQueueSize) refuse with TorchServe's 503."""

import json
import os
import re
import threading

import pytest
from conftest import ServerProcess, wait_until
from test_torchserve_api import call
from torchserve_archives import stateful_archive

SEQUENCE = "ts_request_sequence_id"

STATEFUL_CONFIG = """
minWorkers: 2
batchSize: 4
maxBatchDelay: 10
sequenceBatching: true
sequenceMaxIdleMSec: 60000
maxNumSequence: 16
maxSequenceJobQueueSize: 1
"""

# Two sequences at most, each idle for 10 s ends it (long enough for a loaded machine
# to send three requests within it).
SHORT_CONFIG = """
minWorkers: 1
sequenceBatching: true
sequenceMaxIdleMSec: 10000
maxNumSequence: 2
"""

# Stateful without the idle time TorchServe needs to be.
NO_IDLE_CONFIG = """
sequenceBatching: true
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("sequences") / "store")
    stateful_archive(store, "stateful", STATEFUL_CONFIG)
    stateful_archive(store, "short", SHORT_CONFIG)
    started = ServerProcess(store, "--models", "stateful.mar,short.mar",
                            "--torchserve-inference-port", "0", interpreters=2)
    yield started
    assert started.stop() == 0


def add(server, model, value, sequence=None):
    headers = {SEQUENCE: sequence} if sequence else {}
    status, _, body = call(server, f"/predictions/{model}", str(value).encode(), headers)
    return status, json.loads(body)


def pending(server, model):
    """The model's requests queued or running (chorus' metrics)."""
    found = re.search(rf'^nv_inference_pending_request_count{{model="{model}"[^}}]*}} (\S+)$',
                      server.metrics(), re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def test_each_sequence_keeps_its_sum_on_one_worker(server):
    answers = {"a": [], "b": []}
    for sequence, value in (("a", 1), ("b", 10), ("a", 2), ("b", 20), ("a", 3), ("b", 30)):
        status, answer = add(server, "stateful", value, sequence)
        assert status == 200, answer
        answers[sequence].append(answer)
    assert [a["sum"] for a in answers["a"]] == [1, 3, 6]
    assert [b["sum"] for b in answers["b"]] == [10, 30, 60]
    assert {a["sequence"] for a in answers["a"]} == {"a"}
    workers = {name: {a["worker"] for a in answers[name]} for name in answers}
    # Each sequence stays on its worker; the two are spread over both workers.
    assert len(workers["a"]) == 1 and len(workers["b"]) == 1
    assert workers["a"] != workers["b"]
    # A sequence the client names is started by its first request, as TorchServe's.
    assert all(a["start"] is None for a in answers["a"])


def test_concurrent_sequences_run_in_order_and_share_batches(server):
    sequences = [f"seq-{i}" for i in range(3)]
    results = {name: [] for name in sequences}

    def run(name):
        for value in range(1, 6):
            status, answer = add(server, "stateful", value, name)
            assert status == 200, answer
            results[name].append(answer["sum"])

    threads = [threading.Thread(target=run, args=(name,)) for name in sequences]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in sequences:
        assert results[name] == [1, 3, 6, 10, 15], name


def test_a_request_naming_no_sequence_starts_a_new_one(server):
    status, first = add(server, "stateful", 5)
    assert status == 200, first
    assert re.fullmatch(r"ts-seq-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                        r"[0-9a-f]{12}", first["sequence"]), first
    assert first["start"] == "true" and first["sum"] == 5
    status, second = add(server, "stateful", 7)
    assert status == 200 and second["sequence"] != first["sequence"] and second["sum"] == 7


def test_a_sequence_waits_behind_its_running_request_up_to_its_queue(server, tmp_path):
    gate = str(tmp_path / "gate")
    outcomes = {}

    def send(key, body):
        outcomes[key] = call(server, "/predictions/stateful", body, {SEQUENCE: "queued"})

    first = threading.Thread(target=send, args=("running", f"wait:{gate}".encode()))
    second = threading.Thread(target=send, args=("waiting", b"4"))
    try:
        first.start()
        wait_until(lambda: os.path.exists(gate + ".started"), why=lambda: "the first never ran")
        second.start()
        wait_until(lambda: pending(server, "stateful") == 2,
                   why=lambda: "the second request never queued")
        # The second waits behind the first (maxSequenceJobQueueSize 1): a third is refused.
        status, _, body = call(server, "/predictions/stateful", b"9", {SEQUENCE: "queued"})
    finally:
        open(gate, "w").close()  # whatever failed, the handler stops waiting
        for thread in (first, second):
            if thread.ident is not None:  # started
                thread.join()
    assert status == 503
    error = json.loads(body)
    assert error["code"] == 503 and error["type"] == "ServiceUnavailableException"
    assert "queued" in error["message"] and "waiting" in error["message"]
    assert outcomes["running"][0] == 200 and json.loads(outcomes["running"][2])["sum"] == 0
    assert outcomes["waiting"][0] == 200 and json.loads(outcomes["waiting"][2])["sum"] == 4


def test_more_sequences_than_max_num_sequence_wait_for_one_to_idle_out(server):
    assert add(server, "short", 1, "one")[0] == 200
    assert add(server, "short", 1, "two")[0] == 200
    status, error = add(server, "short", 1, "three")
    assert status == 503 and error["type"] == "ServiceUnavailableException", error
    assert "three" in error["message"]
    # sequenceMaxIdleMSec (10 s) ends both: a third sequence may start.
    wait_until(lambda: add(server, "short", 1, "three")[0] == 200,
               why=lambda: "the idle sequences never ended")


def test_a_stateful_model_without_an_idle_time_is_refused_naming_why(tmp_path):
    store = str(tmp_path / "store")
    stateful_archive(store, "no_idle", NO_IDLE_CONFIG)
    started = ServerProcess(store, "--models", "no_idle.mar", "--torchserve-inference-port", "0",
                            interpreters=1)
    try:
        status, _, body = call(started, "/predictions/no_idle", b"1", {SEQUENCE: "s"})
        error = json.loads(body)
        assert status == 503 and error["type"] == "ServiceUnavailableException", error
        assert "sequenceMaxIdleMSec" in error["message"]
    finally:
        assert started.stop() == 0
