"""Triton's request priorities and queue policies with Triton's clients: a first-priority
request overtakes a full queue of lower ones, each level's queue has its own size, requests
past their queue timeout are rejected, and a priority out of range is refused by name."""

import json
import threading
import time

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
from conftest import ServerProcess, package
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("priorities") / "repository"
    configs = {
        "ranked": {"dynamic_batching": False, "priority_levels": 2, "default_priority_level": 2,
                   "priority_queue_policy": {"2": {"max_queue_size": 3}}},
        "impatient": {"dynamic_batching": False,
                      "queue_policy": {"default_timeout_microseconds": 100000,
                                       "allow_timeout_override": True}},
    }
    for name, config in configs.items():
        (repo / name / "1").mkdir(parents=True)
        package(repo / name / "1" / "model.pt", servable_models.Sleeper(1.0), torch.zeros(1, 4),
                name)
        (repo / name / "config.json").write_text(json.dumps(config))
    process = ServerProcess(repo, interpreters=1)
    yield process
    assert process.stop() == 0


class Calls:
    """Asynchronous calls; records the order in which they are answered."""

    def __init__(self, client, model):
        self.client, self.model = client, model
        self.answered, self.errors = [], {}
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)

    def send(self, tag, **kwargs):
        tensor = triton_grpc.InferInput("x", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))

        def callback(result, error, tag=tag):
            with self.lock:
                self.answered.append(tag)
                if error is not None:
                    self.errors[tag] = str(error)
                self.done.notify_all()

        self.client.async_infer(self.model, [tensor], callback, **kwargs)

    def wait(self, count, seconds=30):
        with self.lock:
            assert self.done.wait_for(lambda: len(self.answered) >= count, timeout=seconds)


def test_a_first_priority_request_overtakes_a_full_queue(server):
    client = triton_grpc.InferenceServerClient(server.address)
    calls = Calls(client, "ranked")
    calls.send("running")
    time.sleep(0.5)  # it runs (1 s); the next ones queue behind it
    for i in range(3):
        calls.send(f"low{i}")
    time.sleep(0.3)
    calls.send("refused")  # level 2's queue holds 3
    calls.wait(1)
    assert "level 2 is full" in calls.errors["refused"]
    calls.send("urgent", priority=1)
    calls.wait(6)
    order = [tag for tag in calls.answered if tag != "refused"]
    # (the three low ones go out on concurrent streams: they arrive in any order)
    assert order[:2] == ["running", "urgent"]
    assert sorted(order[2:]) == ["low0", "low1", "low2"]
    assert set(calls.errors) == {"refused"}
    client.close()


def test_a_priority_out_of_range_is_refused_by_name(server):
    client = triton_grpc.InferenceServerClient(server.address)
    batching = client.get_model_config("ranked").config.dynamic_batching
    assert (batching.priority_levels, batching.default_priority_level) == (2, 2)
    assert batching.priority_queue_policy[2].max_queue_size == 3
    tensor = triton_grpc.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    with pytest.raises(InferenceServerException,
                       match="priority 3 is out of range: the model's levels are 1"):
        client.infer("ranked", [tensor], priority=3)
    client.close()


def test_requests_past_their_queue_timeout_are_rejected(server):
    client = triton_grpc.InferenceServerClient(server.address)
    calls = Calls(client, "impatient")
    calls.send("running")
    time.sleep(0.05)
    calls.send("expires")  # default: 0.1 s in the queue, behind 1 s of work
    calls.send("waits", timeout=30_000_000)  # its own timeout (allowed): 30 s
    calls.wait(3)
    assert "timed out in the model's queue" in calls.errors["expires"]
    assert "running" not in calls.errors and "waits" not in calls.errors
    client.close()
