"""Triton Python-backend models (config.pbtxt + 1/model.py) on chorus-server, through
Triton's clients: what `initialize` gets, instances and their interpreters, each model's own
modules, failures in initialize and execute with Triton's texts and statuses, dynamic
batching, auto_complete_config, model_warmup, finalize and the model's log lines. What requests and
responses carry: test_triton_requests.py."""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from triton_models import (InferenceServerException, TritonServer, error_of, wait_until,
                           write_model)

PROBE_PY = """
import json, os, threading, time
import chorus
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dump_dir = config["parameters"]["DUMP_DIR"]["string_value"]
        record = {"args": args, "keys": list(args), "interpreter": chorus.interpreter_index()}
        with open(os.path.join(self.dump_dir, args["model_instance_name"] + ".json"), "w") as f:
            json.dump(record, f)
        self.name = args["model_instance_name"]
        self.lock = threading.Lock()
        self.active = self.most_active = 0

    def execute(self, requests):
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        time.sleep(0.02)  # room for another call to come in, were calls not serialized
        with self.lock:
            self.active -= 1
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("INSTANCE", np.array([self.name.encode()], dtype=np.object_)),
            pb_utils.Tensor("MOST_ACTIVE", np.array([self.most_active], dtype=np.int32))])
            for _ in requests]
"""

PROBE_CONFIG = """
name: "args_probe"
backend: "python"
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INSTANCE" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "MOST_ACTIVE" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 3 kind: KIND_CPU } ]
parameters { key: "DUMP_DIR" value { string_value: "%s" } }
"""

# Models A and B, each with a util.py and a sub.py of its own (in the version folder) and a
# helper in its model folder: bare imports, from-imports and relative imports find the
# model's own files, and module-level state is the model's own.
NAMESPACE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils
import util
from util import WHO
from . import sub
import folder_helper


class TritonPythonModel:
    def execute(self, requests):
        import util as again  # at run time too
        util.STATE.append(WHO)
        seen = {"dir": pb_utils.get_model_dir(), "util": util.WHO, "from": WHO, "sub": sub.WHO,
                "sub_util": sub.util_who(), "helper": folder_helper.WHO, "same": again is util,
                "state": util.STATE}
        out = np.array([repr(seen).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", out)]) for _ in requests]
"""

NAMESPACE_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

# MODE picks what execute does: 0 answers, 1 raises, 2-5 return what Triton refuses,
# 100+c a TritonError with code c, 200 one with no code, 201 one with outputs too.
FAILING_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = int(pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy()[0])
        out = pb_utils.Tensor("OUT", np.array([mode], dtype=np.int32))
        if mode == 1:
            raise ValueError("boom in execute")
        if mode == 2:
            return "notalist"
        if mode == 3:
            return tuple(pb_utils.InferenceResponse([out]) for _ in requests)
        if mode == 4:
            return []
        if mode == 5:
            return ["notaresponse" for _ in requests]
        if mode >= 100:
            error = (pb_utils.TritonError("code %d" % (mode - 100), mode - 100) if mode < 200
                     else pb_utils.TritonError("no code"))
            tensors = [out] if mode == 201 else []
            return [pb_utils.InferenceResponse(tensors, error=error) for _ in requests]
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

FAILING_CONFIG = """
backend: "python"
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

INIT_FAIL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        raise pb_utils.TritonModelException("deliberate init failure")

    def execute(self, requests):
        return []
"""

# One instance; a request whose parameters name a file waits (up to a minute) for it; a
# batch with an X of -1 raises.
BATCHER_PY = """
import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            wait_for = json.loads(request.parameters()).get("wait_for")
            if wait_for:
                open(wait_for + ".started", "w").close()
            deadline = time.monotonic() + 60
            while wait_for and not os.path.exists(wait_for) and time.monotonic() < deadline:
                time.sleep(0.01)
            if pb_utils.get_input_tensor_by_name(request, "X").as_numpy()[0][0] == -1:
                raise RuntimeError("batch with a -1")
        size = np.array([[len(requests)]], dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SIZE", size)]) for _ in requests]
"""

BATCHER_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SIZE" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

AUTO_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        if config.as_dict()["name"] == "auto_invalid":
            return None
        if config.as_dict()["name"] == "auto_raises":
            raise ValueError("auto-complete refused")
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
        if config.as_dict()["name"] == "auto_batch":
            config.set_max_batch_size(4)
            config.set_dynamic_batching()
        if config.as_dict()["name"] == "auto_decoupled":
            config.set_model_transaction_policy({"decoupled": True})
        return config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]) for r in requests]
"""

# Counts its executions; its config asks for one warm-up request.
WARMED_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", np.array([self.executions], np.int32))]) for _ in requests]
"""

WARMED_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_warmup [ { name: "zeros" batch_size: 1
                 inputs { key: "X" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }
               } ]
"""

LIFECYCLE_PY = """
import json, os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dump_dir = config["parameters"]["DUMP_DIR"]["string_value"]
        pb_utils.Logger.log_info("lifecycle says info")
        pb_utils.Logger.log_warn("lifecycle says warning")
        pb_utils.Logger.log_error("lifecycle says error")
        pb_utils.Logger.log("lifecycle says log", pb_utils.Logger.INFO)
        pb_utils.Logger.log_verbose("lifecycle says verbose")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([1], np.int32))])
                for _ in requests]

    def is_ready(self):
        return False

    def finalize(self):
        with open(os.path.join(self.dump_dir, "finalized"), "w") as f:
            f.write("finalized")
"""

LIFECYCLE_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "DUMP_DIR" value { string_value: "%s" } }
"""


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton_python_models")
    repo, dumps = root / "repository", root / "dumps"
    dumps.mkdir()
    write_model(repo, "args_probe", PROBE_CONFIG % dumps, PROBE_PY)
    write_model(repo, "groups", PROBE_CONFIG.replace('name: "args_probe"', "").replace(
        "instance_group [ { count: 3 kind: KIND_CPU } ]",
        'instance_group [ { count: 2 kind: KIND_CPU }, { name: "mygroup" kind: KIND_MODEL } ]')
        % dumps, PROBE_PY)
    for who in ("a", "b"):
        write_model(repo, f"ns_{who}", NAMESPACE_CONFIG, NAMESPACE_PY, {
            "1/util.py": f"WHO = 'util {who}'\nSTATE = []\n",
            "1/sub.py": f"import util\nWHO = 'sub {who}'\ndef util_who():\n    return util.WHO\n",
            "folder_helper.py": f"WHO = 'helper {who}'\n"})
    write_model(repo, "failing", FAILING_CONFIG, FAILING_PY)
    write_model(repo, "init_fail", FAILING_CONFIG, INIT_FAIL_PY)
    write_model(repo, "no_execute", FAILING_CONFIG, "class TritonPythonModel:\n    pass\n")
    write_model(repo, "renamed", FAILING_CONFIG + 'default_model_filename: "entry.py"\n',
                FAILING_PY, file_name="entry.py")
    (repo / "no_model_py" / "1").mkdir(parents=True)
    (repo / "no_model_py" / "config.pbtxt").write_text(FAILING_CONFIG)
    write_model(repo, "batcher", BATCHER_CONFIG, BATCHER_PY)
    for name in ("auto_batch", "auto_nobatch", "auto_invalid", "auto_decoupled", "auto_raises"):
        write_model(repo, name, None, AUTO_PY)
    write_model(repo, "lifecycle", LIFECYCLE_CONFIG % dumps, LIFECYCLE_PY)
    write_model(repo, "warmed", WARMED_CONFIG, WARMED_PY)
    server = TritonServer(repo)
    server.dumps = dumps
    server.repo = repo
    yield server
    assert server.stop() == 0


PROTOCOLS = ["http", "grpc"]


def _init_records(triton):
    return {p.stem: json.loads(p.read_text()) for p in triton.dumps.glob("args_probe_*.json")}


def test_initialize_gets_tritons_seven_args_for_each_instance(triton):
    records = _init_records(triton)
    assert sorted(records) == ["args_probe_0_0", "args_probe_0_1", "args_probe_0_2"]
    config = triton.http.get_model_config("args_probe")
    for name, record in records.items():
        args = record["args"]
        assert record["keys"] == ["model_config", "model_instance_kind", "model_instance_name",
                                  "model_instance_device_id", "model_repository",
                                  "model_version", "model_name"]
        assert all(isinstance(value, str) for value in args.values())
        assert json.loads(args["model_config"]) == config
        # Compact, in the protobuf's field order, as Triton prints it.
        assert args["model_config"].startswith(
            '{"name":"args_probe","platform":"","backend":"python","runtime":"",'
            '"version_policy":{"latest":{"num_versions":1}},"max_batch_size":0,"input":[')
        assert args["model_instance_name"] == name
        assert (args["model_instance_kind"], args["model_instance_device_id"]) == ("CPU", "0")
        assert args["model_repository"] == str(triton.repo / "args_probe")
        assert (args["model_version"], args["model_name"]) == ("1", "args_probe")
    assert config["instance_group"][0]["name"] == "args_probe_0"
    assert config["instance_group"][0]["count"] == 3
    # Three instances on two interpreters: placed in turn.
    where = {name: record["interpreter"] for name, record in records.items()}
    assert where["args_probe_0_0"] == where["args_probe_0_2"] != where["args_probe_0_1"]
    assert set(where.values()) == {0, 1}


def test_initialize_model_config_is_the_http_config_byte_for_byte(triton):
    status, body = triton.raw("GET", "/v2/models/args_probe/config")
    assert status == 200
    for record in _init_records(triton).values():
        assert record["args"]["model_config"].encode() == body


def test_instances_of_several_groups_are_named_as_triton_names_them(triton):
    records = {p.stem: json.loads(p.read_text())["args"] for p in triton.dumps.glob("*.json")}
    kinds = {name: args["model_instance_kind"] for name, args in records.items()
             if args["model_name"] == "groups"}
    assert kinds == {"groups_0_0": "CPU", "groups_0_1": "CPU", "mygroup_0": "MODEL"}


def test_calls_to_one_instance_never_overlap(triton):
    def call(i):
        result = triton.infer(PROTOCOLS[i % 2], "args_probe", {"X": np.array([i], np.int32)})
        return result.as_numpy("INSTANCE")[0].decode(), int(result.as_numpy("MOST_ACTIVE")[0])

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(call, range(48)))
    assert {instance for instance, _ in answers} <= {f"args_probe_0_{i}" for i in range(3)}
    assert {most for _, most in answers} == {1}


def test_each_model_has_its_own_modules_in_one_interpreter(triton):
    for who in ("a", "b"):
        for round_ in range(4):  # two instances, both interpreters hold both models
            result = triton.infer(PROTOCOLS[round_ % 2], f"ns_{who}",
                                  {"X": np.array([0], np.int32)})
            seen = eval(result.as_numpy("SEEN")[0].decode())  # a repr of str/bool/list
            assert seen["util"] == seen["from"] == seen["sub_util"] == f"util {who}"
            assert seen["sub"] == f"sub {who}" and seen["helper"] == f"helper {who}"
            assert seen["same"] is True
            assert seen["dir"] == str(triton.repo / f"ns_{who}" / "1")
            assert set(seen["state"]) == {f"util {who}"}  # the other model's state is its own


def test_an_exception_in_initialize_fails_only_that_models_load(triton):
    entry = triton.index()["init_fail"]
    assert entry["state"] == "UNAVAILABLE"
    assert "deliberate init failure" in entry["reason"]
    assert not triton.http.is_model_ready("init_fail")
    assert triton.index()["failing"]["state"] == "READY"
    assert triton.infer("http", "failing", {"MODE": np.array([0], np.int32)}).as_numpy(
        "OUT").tolist() == [0]


def test_model_files_as_triton_finds_them(triton):
    assert triton.infer("grpc", "renamed", {"MODE": np.array([0], np.int32)}).as_numpy(
        "OUT").tolist() == [0]  # 1/entry.py, the config's default_model_filename
    entry = triton.index()["no_model_py"]
    assert entry["state"] == "UNAVAILABLE"
    # The index leaves the repository's own path out of its reasons (chorus'; Triton's has it).
    assert "Python model file not found in 'no_model_py/1/model.py'" in entry["reason"]
    error = error_of(lambda: triton.infer("http", "no_execute",
                                          {"MODE": np.array([0], np.int32)}))
    assert error.message() == (
        "Failed to process the request(s) for model 'no_execute_0', message: Python model "
        f"{triton.repo / 'no_execute' / '1' / 'model.py'} does not implement `execute` method.")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_exception_in_execute_fails_the_request_with_tritons_text(triton, protocol):
    error = error_of(lambda: triton.infer(protocol, "failing", {"MODE": np.array([1], np.int32)}))
    model_py = triton.repo / "failing" / "1" / "model.py"
    line = model_py.read_text().splitlines().index(
        '            raise ValueError("boom in execute")') + 1
    assert error.message() == ("Failed to process the request(s) for model 'failing_0', "
                               "message: ValueError: boom in execute\n\nAt:\n"
                               f"  {model_py}({line}): execute\n")
    assert error.status() == ("500" if protocol == "http" else "StatusCode.INTERNAL")
    # The instance goes on serving.
    assert triton.infer(protocol, "failing", {"MODE": np.array([0], np.int32)}).as_numpy(
        "OUT").tolist() == [0]


RETURN_ERRORS = {
    2: "Expected a list in the execute return, found type '<class 'str'>'.",
    3: "Expected a list in the execute return, found type '<class 'tuple'>'.",
    4: "Number of InferenceResponse objects do not match the number of InferenceRequest "
       "objects. InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0\n",
    5: "Expected an 'InferenceResponse' object in the execute function return list, found "
       "type '<class 'str'>'.",
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", sorted(RETURN_ERRORS))
def test_what_execute_returns_is_checked_with_tritons_texts(triton, protocol, mode):
    error = error_of(lambda: triton.infer(protocol, "failing",
                                          {"MODE": np.array([mode], np.int32)}))
    assert error.message() == ("Failed to process the request(s) for model 'failing_0', "
                               f"message: {RETURN_ERRORS[mode]}")
    assert error.status() == ("500" if protocol == "http" else "StatusCode.INTERNAL")


# TritonError code -> (Triton's HTTP status, its gRPC code), facts section 4.
ERROR_CODES = [
    pytest.param(0, "400", "UNKNOWN"),
    pytest.param(1, "500", "INTERNAL"),
    pytest.param(2, "404", "NOT_FOUND"),
    pytest.param(3, "400", "INVALID_ARGUMENT"),
    pytest.param(4, "503", "UNAVAILABLE"),
    pytest.param(5, "501", "UNIMPLEMENTED"),
    pytest.param(6, "400", "ALREADY_EXISTS"),
    pytest.param(7, "400", "CANCELLED"),
    pytest.param(100, "500", "INTERNAL"),  # TritonError("no code")
]


@pytest.mark.parametrize("code, http_status, grpc_code", ERROR_CODES)
def test_triton_error_codes_map_to_tritons_statuses(triton, code, http_status, grpc_code):
    mode = np.array([100 + code], np.int32)
    message = "no code" if code == 100 else f"code {code}"
    error = error_of(lambda: triton.infer("grpc", "failing", {"MODE": mode}))
    assert (error.message(), error.status()) == (message, f"StatusCode.{grpc_code}")
    error = error_of(lambda: triton.infer("http", "failing", {"MODE": mode}))
    assert (error.message(), error.status()) == (message, http_status)


def test_an_error_response_drops_its_outputs(triton):
    status, body = triton.raw("POST", "/v2/models/failing/infer", {"inputs": [
        {"name": "MODE", "datatype": "INT32", "shape": [1], "data": [201]}]})
    assert (status, json.loads(body)) == (500, {"error": "no code"})


def _batcher_pending(triton):
    found = re.search(r'^nv_inference_pending_request_count\{model="batcher"[^}]*\} (\S+)$',
                      triton.metrics(), re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def _batches(triton, tmp_path, xs):
    """Holds the one instance with a first request, queues one request per x of `xs`, then
    lets the first go: the batch sizes execute saw (or the errors) for each of `xs`."""
    release = tmp_path / "release"

    def call(i, x, parameters=None):
        try:
            result = triton.infer(PROTOCOLS[i % 2], "batcher", {"X": np.array([[x]], np.int32)},
                                  parameters=parameters)
            return int(result.as_numpy("SIZE")[0][0])
        except InferenceServerException as e:
            return e

    def pending():
        return _batcher_pending(triton)

    with ThreadPoolExecutor(len(xs) + 1) as pool:
        first = pool.submit(call, 0, 0, {"wait_for": str(release)})
        wait_until((tmp_path / "release.started").exists)
        rest = [pool.submit(call, i + 1, x) for i, x in enumerate(xs)]
        wait_until(lambda: pending() == len(xs) + 1, why=lambda: f"pending {pending()}")
        release.write_text("go")
        assert first.result() == 1
        return [f.result() for f in rest]


def test_dynamic_batching_hands_queued_requests_to_one_execute(triton, tmp_path):
    assert _batches(triton, tmp_path, [1, 2, 3, 4, 5]) == [5] * 5  # the five queued: one batch


def test_an_exception_in_execute_fails_every_request_of_the_batch(triton, tmp_path):
    errors = _batches(triton, tmp_path, [1, -1, 2])
    assert all(isinstance(e, InferenceServerException) for e in errors), errors
    for error in errors:
        assert error.message().startswith("Failed to process the request(s) for model "
                                          "'batcher_0_0', message: RuntimeError: batch with a -1")


def test_auto_complete_config_completes_batch_and_no_batch_configs(triton):
    batch = triton.http.get_model_config("auto_batch")
    assert batch["max_batch_size"] == 4 and batch["backend"] == "python"
    assert batch["dynamic_batching"]["preferred_batch_size"] == [4]
    assert [(t["name"], t["data_type"], t["dims"]) for t in batch["input"]] == \
        [("X", "TYPE_FP32", [2])]
    nobatch = triton.http.get_model_config("auto_nobatch")
    assert nobatch["max_batch_size"] == 0 and "dynamic_batching" not in nobatch
    assert [(t["name"], t["dims"]) for t in nobatch["output"]] == [("Y", [2])]
    x = np.array([[1.0, 2.0]], np.float32)
    assert triton.infer("http", "auto_batch", {"X": x}).as_numpy("Y").tolist() == [[2.0, 3.0]]
    assert triton.infer("grpc", "auto_nobatch", {"X": x[0]}).as_numpy("Y").tolist() == [2.0, 3.0]
    decoupled = triton.http.get_model_config("auto_decoupled")
    assert decoupled["model_transaction_policy"] == {"decoupled": True}
    assert "decoupled" in error_of(lambda: triton.infer("grpc", "auto_decoupled", {"X": x[0]}))\
        .message()
    entry = triton.index()["auto_invalid"]
    assert entry["state"] == "UNAVAILABLE"
    assert ("auto_complete_config function in model 'auto_invalid' must return a valid "
            "pb.ModelConfig object.") in entry["reason"]
    entry = triton.index()["auto_raises"]
    assert entry["state"] == "UNAVAILABLE" and "auto-complete refused" in entry["reason"]


def test_model_warmup_runs_execute_before_the_model_serves(triton):
    assert triton.infer("http", "warmed", {"X": np.array([0], np.int32)}).as_numpy(
        "Y").tolist() == [2]  # the warm-up request was the first


def test_logger_lines_reach_the_server_log_at_their_levels(triton):
    log = triton.log_text()
    for line in ("[info] lifecycle says info", "[warning] lifecycle says warning",
                 "[error] lifecycle says error", "[info] lifecycle says log"):
        assert line in log
    assert "lifecycle says verbose" not in log  # verbose lines need --log-verbose


def test_is_ready_false_makes_the_model_unready(triton):
    assert not triton.http.is_model_ready("lifecycle")


def test_finalize_runs_when_the_model_is_unloaded(triton):
    assert triton.infer("http", "lifecycle", {"X": np.array([0], np.int32)}).as_numpy(
        "Y").tolist() == [1]
    triton.http.unload_model("lifecycle")
    marker = triton.dumps / "finalized"
    wait_until(marker.exists, why=lambda: f"no {marker}: {triton.index().get('lifecycle')}")
    assert marker.read_text() == "finalized"
    triton.wait_for_state("lifecycle", "UNAVAILABLE")
