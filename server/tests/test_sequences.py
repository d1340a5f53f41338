"""Stateful models through Triton's sequence batcher, with Triton's clients: requests
name their sequence (sequence_id, sequence_start, sequence_end); chorus fills the control
inputs (START, END, READY, CORRID) and carries implicit state; the direct strategy keeps a
sequence in one interpreter (so Python state works), the oldest strategy batches requests
of many sequences together."""

import json
import signal
import threading
import time

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from chorus.package.create import create_package
from conftest import ServerProcess
from tritonclient.utils import InferenceServerException

CONTROLS = {"START": "CONTROL_SEQUENCE_START", "END": "CONTROL_SEQUENCE_END",
            "READY": "CONTROL_SEQUENCE_READY", "CORRID": "CONTROL_SEQUENCE_CORRID"}


def write_model(repo, name, model, input_names, output_names, sequence_batching, **config):
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    examples = tuple(torch.zeros(1, 1, dtype=torch.int32 if n == "INPUT" else torch.int64)
                     for n in input_names)
    create_package(str(folder / "1" / "model.pt"), model, examples, name=name, progress=False,
                   max_batch_size=8, input_names=input_names, output_names=output_names)
    (folder / "config.json").write_text(json.dumps(
        {"sequence_batching": sequence_batching, **config}))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("sequences") / "repository"
    state = [{"input_name": "INPUT_STATE", "output_name": "OUTPUT_STATE"}]
    for strategy in ("direct", "oldest"):
        write_model(repo, f"accumulator_{strategy}", servable_models.Accumulator(),
                    ["INPUT", "START", "READY", "INPUT_STATE"], ["OUTPUT", "OUTPUT_STATE"],
                    {"strategy": strategy, "state": state,
                     "control_inputs": [{"name": n, "kind": CONTROLS[n]}
                                        for n in ("START", "READY")]},
                    max_queue_delay_us=2000)
    write_model(repo, "python_sum", servable_models.PythonStateSum(),
                ["INPUT", "START", "END", "CORRID"], ["OUTPUT"],
                {"strategy": "direct", "control_inputs": [
                    {"name": n, "kind": CONTROLS[n]} for n in ("START", "END", "CORRID")]})
    write_model(repo, "forgetful", servable_models.Accumulator(),
                ["INPUT", "START", "READY", "INPUT_STATE"], ["OUTPUT", "OUTPUT_STATE"],
                {"max_sequence_idle_microseconds": 1500000, "state": state,
                 "control_inputs": [{"name": n, "kind": CONTROLS[n]} for n in ("START", "READY")]})
    write_model(repo, "misconfigured", servable_models.Accumulator(),
                ["INPUT", "START", "READY", "INPUT_STATE"], ["OUTPUT", "OUTPUT_STATE"],
                {"control_inputs": [{"name": "BEGIN", "kind": "CONTROL_SEQUENCE_START"}]})
    process = ServerProcess(repo, interpreters=2)
    yield process
    assert process.stop() == 0


def send(client, module, model, value, sequence_id, start=False, end=False):
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer(model, [tensor], sequence_id=sequence_id, sequence_start=start,
                          sequence_end=end)
    return int(result.as_numpy("OUTPUT")[0, 0])


def test_clients_see_only_their_own_inputs_and_outputs(server):
    client = triton_grpc.InferenceServerClient(server.address)
    metadata = client.get_model_metadata("accumulator_direct")
    assert [t.name for t in metadata.inputs] == ["INPUT"]
    assert [t.name for t in metadata.outputs] == ["OUTPUT"]
    # The model config says how it is batched, as Triton's does.
    config = client.get_model_config("accumulator_direct").config
    assert [i.name for i in config.input] == ["INPUT"]
    sequences = config.sequence_batching
    assert sequences.HasField("direct") and sequences.max_sequence_idle_microseconds == 1000000
    assert [(c.name, c.control[0].kind, list(c.control[0].int32_false_true))
            for c in sequences.control_input] == [("START", 0, [0, 1]), ("READY", 1, [0, 1])]
    assert [(s.input_name, s.output_name) for s in sequences.state] == [
        ("INPUT_STATE", "OUTPUT_STATE")]
    assert client.get_model_config("accumulator_oldest").config.sequence_batching.HasField(
        "oldest")
    client.close()
    rest = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    assert rest.get_model_config("forgetful")["sequence_batching"][
        "max_sequence_idle_microseconds"] == 1500000
    rest.close()


@pytest.mark.parametrize("model", ["accumulator_direct", "accumulator_oldest", "python_sum"])
def test_interleaved_sequences_from_8_clients_each_get_their_own_running_sum(server, model):
    rng = np.random.default_rng(7)
    plans = {1000 + i: rng.integers(-50, 50, size=12).tolist() for i in range(8)}
    errors, answers = [], {}

    def run(sequence_id, values):
        module = triton_grpc if sequence_id % 2 else triton_http
        address = server.address if module is triton_grpc else f"127.0.0.1:{server.http_port}"
        client = module.InferenceServerClient(address)
        try:
            got = []
            for i, value in enumerate(values):
                got.append(send(client, module, model, value, sequence_id, start=i == 0,
                                end=i == len(values) - 1))
                time.sleep(0.001 * (sequence_id % 3))
            answers[sequence_id] = got
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            client.close()

    threads = [threading.Thread(target=run, args=item) for item in plans.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for sequence_id, values in plans.items():
        assert answers[sequence_id] == np.cumsum(values).tolist(), sequence_id
    if model == "accumulator_oldest":  # requests of several sequences ran as one batch
        client = triton_grpc.InferenceServerClient(server.address)
        (stats,) = client.get_inference_statistics(model).model_stats
        client.close()
        assert stats.inference_count == 96 and stats.execution_count < 96


def test_a_sequence_restarts_with_start_and_string_ids_work(server):
    client = triton_grpc.InferenceServerClient(server.address)
    assert [send(client, triton_grpc, "accumulator_direct", v, "session-a", start=i == 0)
            for i, v in enumerate([5, 6, 7])] == [5, 11, 18]
    assert send(client, triton_grpc, "accumulator_direct", 1, "session-a", start=True) == 1
    assert send(client, triton_grpc, "accumulator_direct", 2, "session-a", end=True) == 3
    client.close()


def test_unknown_ended_and_idle_sequences_are_refused_by_name(server):
    client = triton_grpc.InferenceServerClient(server.address)
    with pytest.raises(InferenceServerException, match="sequence 999 is not active"):
        send(client, triton_grpc, "accumulator_direct", 1, 999)
    assert send(client, triton_grpc, "accumulator_direct", 4, 77, start=True, end=True) == 4
    with pytest.raises(InferenceServerException, match="sequence 77 is not active"):
        send(client, triton_grpc, "accumulator_direct", 1, 77)
    with pytest.raises(InferenceServerException, match="needs a sequence_id"):
        send(client, triton_grpc, "accumulator_direct", 1, 0)
    assert send(client, triton_grpc, "forgetful", 3, 5, start=True) == 3
    assert send(client, triton_grpc, "forgetful", 3, 5) == 6
    time.sleep(4.0)  # past max_sequence_idle_microseconds (1.5 s): ended, its state freed
    with pytest.raises(InferenceServerException, match="sequence 5 is not active"):
        send(client, triton_grpc, "forgetful", 3, 5)
    (index,) = [m for m in client.get_model_repository_index().models if m.name == "misconfigured"]
    assert index.state == "UNAVAILABLE"
    assert 'config.json: sequence_batching: the model has no input "BEGIN"' in index.reason
    client.close()


def ready(client):
    """Whether both models serve (the server itself never is ready: "misconfigured")."""
    try:
        return all(client.is_model_ready(m) for m in ("accumulator_direct", "python_sum"))
    except InferenceServerException:  # restarting: nothing listens for a moment
        return False


def test_a_crash_ends_every_sequence_with_an_error_never_with_wrong_state(server):
    """Last in this module: it restarts the module's server."""
    client = triton_grpc.InferenceServerClient(server.address)
    for model in ("accumulator_direct", "python_sum"):
        assert send(client, triton_grpc, model, 5, 4242, start=True) == 5
        assert send(client, triton_grpc, model, 6, 4242) == 11
    server.kill_serving(signal.SIGSEGV)  # the supervisor starts a new serving process
    deadline = time.monotonic() + 120
    while not ready(client):
        assert time.monotonic() < deadline, "the server did not come back"
        time.sleep(0.2)
    for model in ("accumulator_direct", "python_sum"):
        with pytest.raises(InferenceServerException, match="sequence 4242 is not active"):
            send(client, triton_grpc, model, 7, 4242)
        # Started again, the sequence begins from nothing: no state survived the crash.
        assert send(client, triton_grpc, model, 7, 4242, start=True) == 7
        assert send(client, triton_grpc, model, 1, 4242, end=True) == 8
    client.close()
