"""Triton's server surface where a Triton client can tell, with Triton's own clients: CUDA
shared-memory calls answered as a CPU-only Triton answers them, errors never compressed,
Triton's error texts (unknown models and versions, failed loads), loads that carry their
own config and files, an ensemble's output labels, and Triton's command-line flags."""

import asyncio
import base64
import functools
import glob
import gzip
import http.client
import json
import os
import subprocess
import tempfile
import textwrap

import numpy as np
import pytest
import servable_models
import torch

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import BIN_DIR, ServerProcess, package
from tritonclient.utils import InferenceServerException
from triton_models import ADD_SUB

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


# add_sub's config in Triton's JSON form, as a load call's "config" carries it.
ADD_SUB_JSON = {
    "backend": "python",
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
              {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
               {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
}

# An ensemble over add_sub whose SUM output has labels (one per element).
LABELLED_CONFIG = """
platform: "ensemble"
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
ensemble_scheduling { step [ {
  model_name: "add_sub" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } } ] }
"""


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("surface") / "repository"
    write(root / "add_sub" / "config.pbtxt", ADD_SUB_CONFIG)
    write(root / "add_sub" / "1" / "model.py", ADD_SUB)
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "model.pt").write_bytes(b"not an archive")
    write(root / "badcfg" / "config.pbtxt", "this is { not a config")
    write(root / "badcfg" / "1" / "model.py", ADD_SUB)
    write(root / "labelled" / "config.pbtxt", LABELLED_CONFIG)
    write(root / "labelled" / "labels.txt", "zero\none\ntwo\nthree\n")
    (root / "scale" / "1").mkdir(parents=True)
    package(root / "scale" / "1" / "model.pt", servable_models.Scale(2.0), torch.zeros(2, 4),
            "scale", max_batch_size=8)
    return root


@pytest.fixture(scope="module")
def server(repo):
    process = ServerProcess(repo, interpreters=1)
    yield process
    assert process.stop() == 0


def clients(server):
    return (triton_grpc.InferenceServerClient(server.address),
            triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}"))


def fetch(server, method, path, body=None, headers=None):
    """(status, headers, raw body) of one request over plain http.client."""
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    answer = (response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    connection.close()
    return answer


def refusal(call):
    with pytest.raises(InferenceServerException) as refused:
        call()
    return refused.value


def add_sub_inputs(module, a, b):
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.asarray(a, np.float32))
    inputs[1].set_data_from_numpy(np.asarray(b, np.float32))
    return inputs


def test_cuda_shared_memory_is_answered_as_a_cpu_only_triton_answers_it(server):
    grpc_client, http_client = clients(server)
    assert len(grpc_client.get_cuda_shared_memory_status().regions) == 0
    assert grpc_client.get_cuda_shared_memory_status(as_json=True) == {}
    assert http_client.get_cuda_shared_memory_status() == []
    for client in (grpc_client, http_client):
        missing = refusal(lambda client=client: client.get_cuda_shared_memory_status("foo"))
        assert "Unable to find cuda shared memory region: 'foo'" in str(missing)
        client.unregister_cuda_shared_memory()  # all: there are none
        client.unregister_cuda_shared_memory("foo")  # an unknown one: nothing to do
        refused = refusal(lambda client=client: client.register_cuda_shared_memory(
            "foo", base64.b64encode(bytes(64)), 0, 16))
        assert "chorus serves no CUDA shared memory" in str(refused)
    status, headers, body = fetch(server, "POST", "/v2/cudasharedmemory/region/foo/unregister")
    assert (status, body, headers.get("content-length")) == (200, b"", "0")
    status, _, body = fetch(server, "GET", "/v2/cudasharedmemory/region/foo/status")
    assert (status, json.loads(body)) == (
        404, {"error": "Unable to find cuda shared memory region: 'foo'"})
    grpc_client.close()
    http_client.close()


def test_errors_are_never_compressed(server):
    gzip_please = {"Accept-Encoding": "gzip", "Content-Type": "application/json"}
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4],
                                   "data": [1, 2, 3, 4]}]})
    for path, expected in (("/v2/models/nosuch/infer", 404), ("/v2/models/add_sub/infer", 400),
                           ("/v2/models/nosuch/config", 404)):
        status, headers, answer = fetch(server, "POST" if path.endswith("infer") else "GET", path,
                                        body, gzip_please)
        assert status == expected and "content-encoding" not in headers, path
        assert "error" in json.loads(answer)
    # A successful answer is compressed.
    both = json.loads(body)
    both["inputs"].append(dict(both["inputs"][0], name="INPUT1"))
    status, headers, answer = fetch(server, "POST", "/v2/models/add_sub/infer", json.dumps(both),
                                    gzip_please)
    assert status == 200 and headers.get("content-encoding") == "gzip"
    assert json.loads(gzip.decompress(answer))["outputs"][0]["data"] == [2, 4, 6, 8]

    import tritonclient.http.aio as triton_aio

    async def infer_unknown_model():
        client = triton_aio.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            await client.infer("nosuch", add_sub_inputs(triton_http, [1] * 4, [1] * 4),
                               response_compression_algorithm="gzip")
        finally:
            await client.close()

    with pytest.raises(InferenceServerException) as refused:
        asyncio.run(asyncio.wait_for(infer_unknown_model(), 60))
    assert "Request for unknown model: 'nosuch' is not found" in str(refused.value)
    assert refused.value.status() == "404"


def test_unknown_models_and_versions_get_tritons_texts(server):
    grpc_client, http_client = clients(server)
    for module, client in ((triton_grpc, grpc_client), (triton_http, http_client)):
        inputs = add_sub_inputs(module, [1] * 4, [1] * 4)
        found, unavailable = (("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")
                              if module is triton_grpc else ("404", "503"))
        cases = [
            (client.infer, ("nosuch", inputs), {}, found,
             "Request for unknown model: 'nosuch' is not found"),
            (client.get_model_metadata, ("nosuch",), {}, found,
             "Request for unknown model: 'nosuch' is not found"),
            (client.get_model_config, ("add_sub", "7"), {}, found,
             "Request for unknown model: 'add_sub' version 7 is not found"),
            (client.infer, ("add_sub", inputs), {"model_version": "7"}, found,
             "Request for unknown model: 'add_sub' version 7 is not found"),
            # It failed to load: no version is available, and version 1 is not ready.
            (client.infer, ("broken", inputs), {}, unavailable,
             "Request for unknown model: 'broken' has no available versions"),
            (client.get_model_metadata, ("broken", "1"), {}, unavailable,
             "Request for unknown model: 'broken' version 1 is not at ready state"),
        ]
        for call, args, kwargs, code, text in cases:
            refused = refusal(functools.partial(call, *args, **kwargs))
            assert refused.message().startswith(text), (text, refused)
            assert refused.status() == code, refused
    grpc_client.close()
    http_client.close()


def test_loads_that_fail_get_tritons_texts(server):
    grpc_client, http_client = clients(server)
    for client in (grpc_client, http_client):
        for name in ("no_such_folder", "badcfg"):
            refused = refusal(lambda client=client, name=name: client.load_model(name))
            assert refused.message().startswith(
                f"failed to load '{name}', failed to poll from model repository"), refused
        refused = refusal(lambda client=client: client.load_model("broken"))
        assert refused.message().startswith(
            "load failed for model 'broken': version 1 is at UNAVAILABLE state: "), refused
        refused = refusal(lambda client=client: client.load_model(
            "add_sub", files={"file:1/model.py": ADD_SUB.encode()}))
        assert refused.message() == \
            "Load parameter 'config' must be specified for model file override"
        client.unload_model("no_such_model")  # nothing to unload: OK, as Triton answers
        assert client.is_model_ready("add_sub")
    grpc_client.close()
    http_client.close()


def private_folders(name):
    return glob.glob(os.path.join(tempfile.gettempdir(), f".chorus-load-{name}-*"))


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_load_with_a_config_and_files_serves_them_from_a_private_folder(server, repo,
                                                                         transport):
    grpc_client, http_client = clients(server)
    client, module = ((grpc_client, triton_grpc) if transport == "grpc"
                      else (http_client, triton_http))
    name = f"pushed_{transport}"
    client.load_model(name, config=json.dumps(ADD_SUB_JSON),
                      files={"file:1/model.py": ADD_SUB.encode()})
    assert client.is_model_ready(name)
    result = client.infer(name, add_sub_inputs(module, [1, 2, 3, 4], [1, 1, 1, 1]))
    assert result.as_numpy("OUTPUT1").tolist() == [0, 1, 2, 3]
    assert not (repo / name).exists()  # never written into the repository
    (folder,) = private_folders(name)
    assert os.stat(folder).st_mode & 0o077 == 0  # private to the server
    index = {(m["name"], m.get("version")): m for m in http_client.get_model_repository_index()}
    assert index[(name, "1")]["state"] == "READY"
    client.unload_model(name)
    assert not client.is_model_ready(name) and private_folders(name) == []
    grpc_client.close()
    http_client.close()


def test_a_config_override_replaces_the_folders_config_for_that_load_only(server):
    grpc_client, http_client = clients(server)
    assert int(grpc_client.get_model_config("scale", as_json=True)["config"]["max_batch_size"]) \
        == 8  # the package's
    http_client.load_model("scale", config=json.dumps({"backend": "chorus", "max_batch_size": 2}))
    assert int(grpc_client.get_model_config("scale", as_json=True)["config"]["max_batch_size"]) \
        == 2
    tensor = triton_grpc.InferInput("x", [2, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((2, 4), np.float32))
    assert grpc_client.infer("scale", [tensor]).as_numpy("output").tolist() == [[2.0] * 4] * 2
    grpc_client.load_model("scale")  # the folder's config again
    assert int(grpc_client.get_model_config("scale", as_json=True)["config"]["max_batch_size"]) \
        == 8
    grpc_client.close()
    http_client.close()


def test_an_ensembles_label_file_is_read_when_it_loads(server, repo):
    client = triton_grpc.InferenceServerClient(server.address)
    assert client.is_model_ready("labelled")
    write(repo / "unlabelled" / "config.pbtxt", LABELLED_CONFIG)  # no labels.txt beside it
    refused = refusal(lambda: client.load_model("unlabelled"))
    assert refused.message().startswith(
        "load failed for model 'unlabelled': version 1 is at UNAVAILABLE state: "), refused
    assert "label_filename: cannot read labels.txt in the model's folder" in refused.message()
    client.close()


def test_a_load_override_is_checked_before_anything_is_written(server, repo):
    grpc_client, http_client = clients(server)
    config = json.dumps(ADD_SUB_JSON)
    for client in (grpc_client, http_client):
        for path in ("../escaped.py", "/tmp/escaped.py", "1/../../escaped.py", "1//model.py"):
            refused = refusal(lambda client=client, path=path: client.load_model(
                "sneaky", config=config, files={f"file:{path}": b"x = 1"}))
            assert "the path must name a file within the model's folder" in str(refused), refused
        refused = refusal(lambda client=client: client.load_model(
            "add_sub", config=json.dumps(dict(ADD_SUB_JSON, name="other"))))
        assert "the config override names model 'other', not 'add_sub'" in str(refused)
        refused = refusal(lambda client=client: client.load_model("add_sub", config="{not json"))
        assert "Invalid config override" in str(refused)
    assert not (repo.parent / "escaped.py").exists() and not (repo / "sneaky").exists()
    assert private_folders("sneaky") == []
    # A parameter Triton's extension does not define is refused, not ignored.
    status, _, body = fetch(server, "POST", "/v2/repository/models/add_sub/load",
                            json.dumps({"parameters": {"unknownparam": "x"}}))
    assert status == 400 and "load parameter 'unknownparam' is not supported" in \
        json.loads(body)["error"]
    status, _, body = fetch(server, "POST", "/v2/repository/models/add_sub/load",
                            json.dumps({"parameters": {"config": config,
                                                       "file:1/model.py": "%%% not base64"}}))
    assert status == 400 and "is not base64" in json.loads(body)["error"]
    assert grpc_client.is_model_ready("add_sub")
    grpc_client.close()
    http_client.close()


def test_an_ensembles_output_labels_classify_its_answers(server):
    client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    inputs = [triton_http.InferInput("A", [4], "FP32"), triton_http.InferInput("B", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.array([0, 5, 1, 2], np.float32))
    inputs[1].set_data_from_numpy(np.zeros(4, np.float32))
    output = triton_http.InferRequestedOutput("SUM", class_count=2)
    result = client.infer("labelled", inputs, outputs=[output])
    assert [c.decode() for c in result.as_numpy("SUM")] == ["5.000000:1:one", "2.000000:3:three"]
    client.close()


def start(repo, *flags):
    """chorus-server on `repo` with `flags`: (None, its log) once it listened and was stopped,
    or (its exit status, its output) if it never listened."""
    command = [os.path.join(BIN_DIR, "chorus-server"), "--model-repository", str(repo),
               "--port", "0", "--http-port", "-1", "--metrics-port", "-1", "--interpreters", "1",
               "--host", "127.0.0.1", *flags]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    first = process.stdout.readline()
    if "listening" not in first:
        out, err = process.communicate(timeout=120)
        return process.returncode, first + out + err
    process.terminate()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return None, err


AUTO_COMPLETED = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(4)
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


@pytest.fixture(scope="module")
def flags_repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("flags") / "repository"
    config = """
        name: "{name}"
        backend: "python"
        {more}
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        """
    write(root / "auto" / "config.pbtxt", config.format(name="auto", more=""))
    write(root / "auto" / "1" / "model.py", AUTO_COMPLETED)
    write(root / "named" / "config.pbtxt", config.format(name="named", more=""))
    write(root / "named" / "configs" / "big.pbtxt",
          config.format(name="named", more="max_batch_size: 8"))
    write(root / "named" / "1" / "model.py", ADD_SUB.replace("a - b", "a").replace("a + b", "a"))
    return root


@pytest.mark.parametrize("flags,auto_batch,named_batch", [
    ((), 4, 0),
    (("--strict-model-config=false", "--model-config-name", "big"), 4, 8),
    (("--strict-model-config=true",), 0, 0),
    (("--disable-auto-complete-config", "--model-config-name", "none_such"), 0, 0),
])
def test_tritons_flags_for_configs_map_onto_chorus(flags_repo, flags, auto_batch, named_batch):
    server = ServerProcess(flags_repo, *flags, interpreters=1)
    try:
        client = triton_grpc.InferenceServerClient(server.address)
        for name, expected in (("auto", auto_batch), ("named", named_batch)):
            config = client.get_model_config(name, as_json=True)["config"]
            assert int(config.get("max_batch_size", 0)) == expected, (name, flags)
        client.close()
    finally:
        assert server.stop() == 0


def test_tritons_other_flags_are_accepted_where_they_mean_something_here(repo):
    status, output = start(repo, "--no-supervisor", "--backend-directory", "/opt/backends",
                           "--backend-config", "python,shm-default-byte-size=1048576",
                           "--backend-config", "python,stub-timeout-seconds=30",
                           "--log-verbose", "1", "--exit-timeout-secs", "5",
                           "--allow-metrics", "false", "--exit-on-error=false")
    assert status is None, output  # served (with broken and badcfg UNAVAILABLE)
    assert "[debug]" in output  # --log-verbose 1
    status, output = start(repo, "--no-supervisor", "--backend-config",
                           "python,default-max-batch-size=8")
    assert status not in (None, 0), output
    assert "chorus has no equivalent of --backend-config python,default-max-batch-size=8" in output
    # Triton's default, asked for: a model that fails to load stops the server.
    status, output = start(repo, "--no-supervisor", "--exit-on-error=true")
    assert status == 1 and "failed to load all models" in output, output
    status, output = start(repo, "--exit-on-error", "true")
    assert status == 2 and "--exit-on-error true needs --no-supervisor" in output, output
