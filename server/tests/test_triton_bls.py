"""BLS and model control from Triton Python-backend models on chorus-server: a model calling
others with `InferenceRequest(...).exec()`, `async_exec()` and `exec(decoupled=True)`,
errors coming back as `has_error()`, request parameters and ids reaching the called model,
`ResponseIterator.cancel()` reaching it as a cancellation, calls from a thread the model
started, the called model run on the caller's thread when idle (never two executions of an
instance at once), BLS refused in `initialize`, and `load_model` / `unload_model` /
`is_model_ready` (in `initialize` too) with the server in explicit model-control mode; and
(the server runs with --log-verbose) a model's verbose log lines."""

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient

from triton_models import Stream, TritonServer, final, wait_until, write_model

# Called by BLS: SUM and DIFF of A and B, and INFO: what the request carried.
ADDER_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            info = {"parameters": json.loads(request.parameters()), "id": request.request_id(),
                    "correlation_id": request.correlation_id(), "flags": request.flags(),
                    "requested": sorted(request.requested_output_names())}
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", a + b), pb_utils.Tensor("DIFF", a - b),
                pb_utils.Tensor("INFO", np.array([json.dumps(info).encode()], np.object_))],
                parameters={"from": "adder"}))
        return responses
"""

ADDER_CONFIG = """
backend: "python"
input [ { name: "A" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "DIFF" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Decoupled, called by BLS: N >= 0 sends OUT = 0..N-1, then the final flag alone; N = -1
# a final error response; N = -2 streams from a thread until cancelled (a minute at most),
# then writes what it saw into the file its request's parameters name.
REPEATER_PY = """
import json, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def out(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            if n == -1:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "repeater failed", pb_utils.TritonError.INVALID_ARG)), flags=FINAL)
            elif n == -2:
                threading.Thread(target=self.until_cancelled, args=(request,)).start()
            elif n == -3:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("midway")))
                sender.send(out(1))
                sender.send(flags=FINAL)
            else:
                for i in range(n):
                    sender.send(out(i))
                sender.send(flags=FINAL)

    def until_cancelled(self, request):
        sender, sent = request.get_response_sender(), 0
        deadline = time.monotonic() + 60
        while not request.is_cancelled() and time.monotonic() < deadline:
            sender.send(out(sent))
            sent += 1
            time.sleep(0.01)
        cancelled = request.is_cancelled()
        sender.send(flags=FINAL)
        with open(json.loads(request.parameters())["marker"], "w") as f:
            json.dump({"cancelled": cancelled, "sent": sent}, f)
"""

REPEATER_CONFIG = """
backend: "python"
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
"""

# The caller: MODE picks a BLS use; TEXT answers what came back (JSON). Request parameters
# "marker" name the file the repeater writes when cancelled.
CALLER_PY = """
import asyncio, json, threading
import numpy as np
import triton_python_backend_utils as pb_utils


def tensor(name, values):
    return pb_utils.Tensor(name, np.array(values, dtype=np.int32))


def adder_request(**kwargs):
    inputs = kwargs.pop("inputs", [tensor("A", [5, 6]), tensor("B", [1, 2])])
    kwargs.setdefault("requested_output_names", ["SUM", "DIFF", "INFO"])
    return pb_utils.InferenceRequest(model_name=kwargs.pop("model_name", "adder"),
                                     inputs=inputs, **kwargs)


def repeater_request(n, **kwargs):
    return pb_utils.InferenceRequest(model_name="repeater", inputs=[tensor("N", [n])],
                                     requested_output_names=["OUT"], **kwargs)


def described(response):
    if response.has_error():
        return {"error": response.error().message(), "code": int(response.error().code())}
    seen = {}
    for t in response.output_tensors():
        value = t.as_numpy()
        seen[t.name()] = (json.loads(value[0]) if value.dtype == np.object_
                          else value.tolist())
    return {"outputs": seen, "parameters": response.parameters()}


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_verbose("caller says verbose")
        try:
            adder_request().exec()
            self.init_refusal = "none"
        except pb_utils.TritonModelException as e:
            self.init_refusal = str(e)

    def execute(self, requests):
        return [self.answer(r) for r in requests]

    def answer(self, request):
        mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
        parameters = json.loads(request.parameters())
        if mode == 0:
            got = described(adder_request(
                parameters={"a": 1, "b": "x", "c": True}, request_id="bls-1",
                correlation_id=77, flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
                requested_output_names=["SUM", "INFO"]).exec())
        elif mode == 1:
            got = described(adder_request(model_name="nosuch").exec())
        elif mode == 2:
            got = described(adder_request(inputs=[tensor("A", [1])]).exec())
        elif mode == 3:
            responses = repeater_request(3).exec(decoupled=True)
            got = [[described(r) for r in responses] for _ in range(2)]  # iterated again too
            got.append([described(r) for r in adder_request().exec(decoupled=True)])
        elif mode == 4:
            got = [described(r) for r in repeater_request(-1).exec(decoupled=True)]
        elif mode == 5:
            responses = repeater_request(-2, parameters=parameters).exec(decoupled=True)
            first = [described(next(responses)) for _ in range(2)]
            responses.cancel()
            rest = [described(r) for r in responses]
            responses.cancel()  # after the end: nothing happens
            got = {"first": first, "rest": rest}
        elif mode == 6:
            result = {}
            thread = threading.Thread(
                target=lambda: result.update(described(adder_request().exec())))
            thread.start()
            thread.join()
            got = result
        elif mode == 7:
            got = self.init_refusal
        elif mode == 8:
            got = [described(r) for r in repeater_request(-3).exec(decoupled=True)]
        elif mode == 9:
            got = described(adder_request(timeout=1).exec())
        elif mode == 10:
            got = [described(pb_utils.InferenceRequest(
                model_name="versioned", inputs=[tensor("MODE", [0])],
                requested_output_names=["TEXT"], **version).exec())["outputs"]["TEXT"]
                for version in ({}, {"model_version": 1}, {"model_version": 2})]
        elif mode == 11:
            occupant = pb_utils.InferenceRequest(
                model_name="occupant", inputs=[tensor("MODE", [0])],
                requested_output_names=["TEXT"]).exec()
            got = {"thread": threading.get_ident(),
                   "occupant": described(occupant)["outputs"]["TEXT"]}
        text = np.array([json.dumps(got).encode()], np.object_)
        return pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)])
"""

CALLER_CONFIG = """
backend: "python"
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Decoupled caller: a thread started in execute makes the BLS calls after execute returned
# and sends what came back.
THREAD_CALLER_PY = """
import json, threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.call, args=(request.get_response_sender(),)).start()

    def call(self, sender):
        inputs = [pb_utils.Tensor("A", np.array([3], np.int32)),
                  pb_utils.Tensor("B", np.array([4], np.int32))]
        response = pb_utils.InferenceRequest(model_name="adder", inputs=inputs,
                                             requested_output_names=["SUM"]).exec()
        total = pb_utils.get_output_tensor_by_name(response, "SUM").as_numpy().tolist()
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor(
            "TEXT", np.array([json.dumps(total).encode()], np.object_))]),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

# async def execute: four adder calls gathered, and a decoupled call's responses.
ASYNC_CALLER_PY = """
import asyncio, json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        calls = [pb_utils.InferenceRequest(
            model_name="adder", requested_output_names=["SUM"],
            inputs=[pb_utils.Tensor("A", np.array([i], np.int32)),
                    pb_utils.Tensor("B", np.array([10], np.int32))]).async_exec()
            for i in range(4)]
        stream = pb_utils.InferenceRequest(
            model_name="repeater", requested_output_names=["OUT"],
            inputs=[pb_utils.Tensor("N", np.array([2], np.int32))]).async_exec(decoupled=True)
        *sums, streamed = await asyncio.gather(*calls, stream)
        got = {"sums": [pb_utils.get_output_tensor_by_name(r, "SUM").as_numpy().tolist()
                        for r in sums],
               "streamed": [[t.as_numpy().tolist() for t in r.output_tensors()]
                            for r in streamed]}
        text = np.array([json.dumps(got).encode()], np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]) for _ in requests]
"""

# Model control from a model. MODE: 0 is_model_ready("victim"); 1 unload_model("victim");
# 2 load_model("victim"); 3 is_model_ready of an unknown model; 4 load_model of a model the
# repository lacks, from a config and files (Triton's bls_model_loading); 5 unload_model
# with unload_dependents.
CONTROLLER_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

PUSHED_CONFIG = json.dumps({
    "backend": "python",
    "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "Y", "data_type": "TYPE_INT32", "dims": [1]}]})
PUSHED_MODEL = "\\n".join([
    "import triton_python_backend_utils as pb_utils",
    "class TritonPythonModel:",
    "    def execute(self, requests):",
    "        return [pb_utils.InferenceResponse([pb_utils.Tensor('Y', 3 *",
    "                pb_utils.get_input_tensor_by_name(r, 'X').as_numpy())]) for r in requests]",
    ""]).encode()


def push():
    pb_utils.load_model("pushed", config=PUSHED_CONFIG, files={"file:1/model.py": PUSHED_MODEL})
    return pb_utils.is_model_ready("pushed")


def attempt(call):
    try:
        return {"value": call()}
    except pb_utils.TritonModelException as e:
        return {"error": str(e)}


class TritonPythonModel:
    def execute(self, requests):
        mode = int(pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0])
        got = [lambda: pb_utils.is_model_ready("victim"),
               lambda: pb_utils.unload_model("victim"),
               lambda: pb_utils.load_model("victim"),
               lambda: pb_utils.is_model_ready("nosuch"),
               push,
               lambda: pb_utils.unload_model("victim", unload_dependents=True)][mode]
        text = np.array([json.dumps(attempt(got)).encode()], np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]) for _ in requests]
"""

# One instance, called by BLS: answers the thread its execute ran on and whether another
# execution of this instance was running meanwhile (each takes 20 ms).
OCCUPANT_PY = """
import json, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.running = False

    def execute(self, requests):
        overlapped = self.running
        self.running = True
        time.sleep(0.02)
        overlapped = overlapped or not self.running
        self.running = False
        seen = {"thread": threading.get_ident(), "overlapped": overlapped}
        text = np.array([json.dumps(seen).encode()], np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]) for _ in requests]
"""

ONE_INSTANCE = 'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
FOUR_INSTANCES = 'instance_group [ { count: 4 kind: KIND_CPU } ]\n'

# Loads the model its config's parameter LOAD names in initialize; answers what it saw.
INIT_LOADER_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        name = json.loads(args["model_config"])["parameters"]["LOAD"]["string_value"]
        before = pb_utils.is_model_ready(name)
        pb_utils.load_model(name)
        self.seen = {"before": before, "after": pb_utils.is_model_ready(name)}

    def execute(self, requests):
        text = np.array([json.dumps(self.seen).encode()], np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]) for _ in requests]
"""

INIT_LOADER_CONFIG = CALLER_CONFIG + """
parameters { key: "LOAD" value { string_value: "%s" } }
"""

# Versions 1 and 2 both serve; each answers what its initialize got.
VERSIONED_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = [args["model_version"], args["model_instance_name"]]

    def execute(self, requests):
        text = np.array([json.dumps(self.seen).encode()], np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]) for _ in requests]
"""

LOADED_AT_START = ["adder", "repeater", "caller", "thread_caller", "async_caller",
                   "controller", "startup_loader", "versioned", "occupant", "crowd"]


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    repo = tmp_path_factory.mktemp("triton_bls") / "repository"
    write_model(repo, "adder", ADDER_CONFIG, ADDER_PY)
    write_model(repo, "repeater", REPEATER_CONFIG, REPEATER_PY)
    write_model(repo, "caller", CALLER_CONFIG, CALLER_PY)
    write_model(repo, "thread_caller",
                CALLER_CONFIG + "model_transaction_policy { decoupled: true }\n",
                THREAD_CALLER_PY)
    write_model(repo, "async_caller", CALLER_CONFIG, ASYNC_CALLER_PY)
    write_model(repo, "occupant", CALLER_CONFIG + ONE_INSTANCE, OCCUPANT_PY)
    write_model(repo, "crowd", CALLER_CONFIG + FOUR_INSTANCES, CALLER_PY)
    write_model(repo, "controller", CALLER_CONFIG, CONTROLLER_PY)
    for version in ("1", "2"):
        write_model(repo, "versioned", CALLER_CONFIG + "version_policy { all { } }\n",
                    VERSIONED_PY, version=version)
    write_model(repo, "init_loader", INIT_LOADER_CONFIG % "early", INIT_LOADER_PY)
    write_model(repo, "startup_loader", INIT_LOADER_CONFIG % "early_too", INIT_LOADER_PY)
    for name in ("victim", "early", "early_too"):
        write_model(repo, name, ADDER_CONFIG, ADDER_PY)
    loads = [f"--load-model={name}" for name in LOADED_AT_START]
    server = TritonServer(repo, "--model-control-mode", "explicit", "--log-verbose=1", *loads)
    yield server
    assert server.stop() == 0


def call(triton, model, mode, protocol="grpc", **kwargs):
    result = triton.infer(protocol, model, {"MODE": np.array([mode], np.int32)}, **kwargs)
    return json.loads(result.as_numpy("TEXT")[0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_exec_calls_a_model_with_the_requests_fields(triton, protocol):
    got = call(triton, "caller", 0, protocol)
    assert got["outputs"]["SUM"] == [6, 8] and "DIFF" not in got["outputs"]
    info = got["outputs"]["INFO"]
    assert info["parameters"] == {"a": 1, "b": "x", "c": True}
    assert (info["id"], info["correlation_id"], info["flags"]) == ("bls-1", 77, 1)
    assert info["requested"] == ["INFO", "SUM"]


def test_exec_returns_the_called_models_response_parameters(triton):
    assert json.loads(call(triton, "caller", 0)["parameters"]) == {"from": "adder"}


def test_versions_get_their_own_instances_and_bls_picks_one(triton):
    assert call(triton, "versioned", 0, "http") == ["2", "versioned_0"]  # the latest
    assert call(triton, "versioned", 0, "grpc", model_version="1") == ["1", "versioned_0"]
    assert call(triton, "caller", 10) == [["2", "versioned_0"], ["1", "versioned_0"],
                                          ["2", "versioned_0"]]


def test_exec_errors_come_back_in_the_response(triton):
    unknown = call(triton, "caller", 1)
    assert "nosuch" in unknown["error"] and unknown["code"] == 2  # NOT_FOUND
    missing = call(triton, "caller", 2)
    assert "B" in missing["error"] and missing["code"] == 3  # INVALID_ARG


def test_exec_decoupled_iterates_the_called_models_responses(triton):
    streamed, again, not_decoupled = call(triton, "caller", 3)
    # Three responses, then the empty one the final flag makes; the same when iterated again.
    assert [r["outputs"] for r in streamed] == [{"OUT": [0]}, {"OUT": [1]}, {"OUT": [2]}, {}]
    assert again == streamed
    # A model that is not decoupled: its one response, which is the final one.
    assert [sorted(r["outputs"]) for r in not_decoupled] == [["DIFF", "INFO", "SUM"]]
    (error,) = call(triton, "caller", 4)
    assert error == {"error": "repeater failed", "code": 3}


def test_exec_decoupled_goes_on_after_an_error_response(triton):
    got = call(triton, "caller", 8)
    assert got == [{"error": "midway", "code": 1}, {"outputs": {"OUT": [1]}, "parameters": "{}"},
                   {"outputs": {}, "parameters": ""}]


def test_exec_timeout_expires_as_an_error_response(triton):
    expired = call(triton, "caller", 9)  # a 1 us timeout
    # Triton's: UNAVAILABLE "Request timeout expired"; chorus words it its own way.
    assert expired["code"] == 4 and expired["error"]


def test_response_iterator_cancel_reaches_the_called_model(triton, tmp_path):
    marker = tmp_path / "repeater.json"
    got = call(triton, "caller", 5, parameters={"marker": str(marker)})
    assert [r["outputs"] for r in got["first"]] == [{"OUT": [0]}, {"OUT": [1]}]
    assert all("outputs" in r or r.get("code") == 7 for r in got["rest"])  # CANCELLED
    wait_until(marker.exists, why=lambda: f"{marker} never written")
    assert json.loads(marker.read_text())["cancelled"] is True


def test_exec_from_threads_the_model_started(triton):
    assert call(triton, "caller", 6)["outputs"]["SUM"] == [6, 8]
    stream = Stream(triton)
    try:
        stream.send("thread_caller", {"MODE": np.array([0], np.int32)})
        ((result, error),) = stream.until_final()
        assert error is None and final(result)
        assert json.loads(result.as_numpy("TEXT")[0]) == [7]
    finally:
        stream.close()


def test_exec_runs_an_idle_instance_on_the_callers_thread(triton):
    # chorus runs the called model's execute on the calling thread when one of its
    # instances is idle (no hand-off to its worker and back); Triton's stub runs it in the
    # called model's own process.
    got = call(triton, "caller", 11)
    assert got["occupant"] == {"thread": got["thread"], "overlapped": False}


def test_exec_never_overlaps_an_instances_executions(triton):
    # Four callers at once on a one-instance model (20 ms a run): the first runs it on its
    # own thread, the others queue for its worker, which waits until that run ends.
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: call(triton, "crowd", 11), range(48)))
    assert not [g for g in got if g["occupant"]["overlapped"]]
    on_caller = [g["occupant"]["thread"] == g["thread"] for g in got]
    assert any(on_caller) and not all(on_caller), on_caller


def test_bls_is_refused_in_initialize(triton):
    assert call(triton, "caller", 7) == "BLS is only supported during the 'execute' function."


def test_verbose_logger_lines_with_log_verbose(triton):
    assert "[debug] caller says verbose" in triton.log_text()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_async_exec_gathered_in_async_execute(triton, protocol):
    got = call(triton, "async_caller", 0, protocol)
    assert got["sums"] == [[10], [11], [12], [13]]
    assert got["streamed"] == [[[0]], [[1]], []]


def test_load_unload_and_readiness_from_a_model(triton):
    triton.http.load_model("init_loader")  # its initialize loads "early"
    assert call(triton, "init_loader", 0) == {"before": False, "after": True}
    assert triton.index()["early"]["state"] == "READY"
    assert call(triton, "controller", 0) == {"value": False}  # in the repository, not loaded
    assert call(triton, "controller", 2) == {"value": None}
    assert call(triton, "controller", 0) == {"value": True}
    assert triton.http.is_model_ready("victim")
    assert call(triton, "controller", 1) == {"value": None}
    triton.wait_for_state("victim", "UNAVAILABLE")
    assert call(triton, "controller", 0) == {"value": False}
    unknown = call(triton, "controller", 3)["error"]
    assert unknown.startswith("Failed to check model readiness: ") and "nosuch" in unknown


def test_a_model_loads_a_model_from_a_config_and_files(triton):
    assert call(triton, "controller", 4) == {"value": True}
    x = httpclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([5], np.int32))
    assert triton.http.infer("pushed", [x]).as_numpy("Y").tolist() == [15]


def test_unload_dependents_is_refused(triton):
    dependents = call(triton, "controller", 5)["error"]
    assert dependents.startswith("Failed to unload model: ") and "unload_dependents" in dependents


def test_model_control_in_initialize_while_the_server_starts(triton):
    assert triton.index()["startup_loader"]["state"] == "READY", triton.index()["startup_loader"]
    assert call(triton, "startup_loader", 0) == {"before": False, "after": True}
