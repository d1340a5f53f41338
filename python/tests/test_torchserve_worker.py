"""chorus.torchserve in plain Python: TorchServe's own test archives (../shared/torchserve
beside the checkout, as torch-model-archiver wrote them) loaded and run by a Worker, with
TorchServe's `ts` package; the answers are those TorchServe's frontend tests expect."""

import json
import os
import sys
import textwrap
import threading
import zipfile

import pytest
import torch

from chorus.model_namespaces import ROOT
from chorus.torchserve.handlers import load_entry_point
from chorus.torchserve.worker import (Failure, Input, Request, Response, Worker, decoded_value,
                                      encoded_answer)

ARCHIVES = os.path.join(os.environ.get("CHORUS_SOURCE_DIR", "."), "..", "shared", "torchserve",
                        "serve", "frontend", "archive", "src", "test", "resources", "models")
needs_archives = pytest.mark.skipif(not os.path.isdir(ARCHIVES),
                                    reason="TorchServe's test archives are not beside the checkout")


def _extracted(mar, tmp_path):
    """The .mar `mar` extracted into a folder of its own, as TorchServe extracts it."""
    folder = tmp_path / mar
    with zipfile.ZipFile(os.path.join(ARCHIVES, mar)) as archive:
        archive.extractall(folder)
    return str(folder)


def _manifest_handler(model_dir):
    with open(os.path.join(model_dir, "MAR-INF", "MANIFEST.json")) as file:
        handler = json.load(file)["model"]["handler"]
    module, _, function = handler.partition(":")
    return module.removesuffix(".py").split("/")[-1], function


def _worker(mar, tmp_path, key=None, **options):
    model_dir = _extracted(mar, tmp_path)
    module, function = _manifest_handler(model_dir)
    return Worker(key or mar, mar.removesuffix(".mar"), model_dir, module, function, **options)


def _body(data, content_type="application/octet-stream", request_id="r0", headers=None):
    return Request(request_id, headers or {}, [Input("body", content_type, data)])


@needs_archives
def test_a_module_handle_function_is_the_entry_point_and_sets_the_content_type(tmp_path):
    worker = _worker("noop.mar", tmp_path)  # a class and a module-level handle: the function
    answers = worker.predict([_body(b"x", request_id="a"), _body(b"y", request_id="b")])
    assert answers == [Response(200, "", {"content-type": "text/plain"}, "text/plain", b"OK"),
                       Response(200, "", {}, "", b"OK")]
    context = worker.context
    assert context.request_ids == {0: "a", 1: "b"}
    assert context.system_properties["model_dir"].endswith("noop.mar")
    assert context.system_properties["server_name"] == "MMS"
    assert context.manifest["model"]["modelVersion"] == "1.11"
    worker.close()


@needs_archives
def test_a_named_function_is_the_entry_point(tmp_path):
    worker = _worker("noop_entrypntfunc.mar", tmp_path)  # handler:handle_request
    assert worker.predict([_body(b"x"), _body(b"y")]) == [Response(200, "", {}, "", b"OK")] * 2
    worker.close()


@needs_archives
def test_headers_and_statuses_the_handler_sets_reach_the_answer(tmp_path):
    worker = _worker("respheader-test.mar", tmp_path)
    [answer] = worker.predict([_body(b"x", headers={"Content-Type": "text/plain"})])
    assert answer.headers == {"content-type": "text/plain", "dummy": "1"}
    worker.close()
    worker = _worker("error_batch.mar", tmp_path)
    [answer] = worker.predict([_body(b"x")])
    assert (answer.status, answer.body) == (507, b"Invalid response")
    worker.close()


@needs_archives
def test_a_prediction_exception_fails_the_batch_with_its_code(tmp_path):
    worker = _worker("pred-custom-return-code.mar", tmp_path)
    assert worker.predict([_body(b"x")]) == Failure(599, "Some Prediction Error")
    worker.close()


@needs_archives
def test_an_initialize_that_raises_fails_the_load_and_leaves_no_modules(tmp_path):
    with pytest.raises(RuntimeError, match="Initialize failure."):
        _worker("init-error.mar", tmp_path)
    assert not [n for n in sys.modules if n.startswith(ROOT + ".m_init_error")]


@needs_archives
def test_inputs_are_decoded_by_their_content_type(tmp_path):
    worker = _worker("echo.mar", tmp_path)  # answers each request's `data` input
    requests = [Request("j", {}, [Input("data", "application/json", b'{"a": [1, 2]}')]),
                Request("t", {}, [Input("data", "text/plain; charset=utf-8", b"caf\xc3\xa9")]),
                Request("b", {}, [Input("data", "image/png", b"\x89PNG")])]
    answers = worker.predict(requests)
    assert [a.body for a in answers] == [json.dumps({"a": [1, 2]}, indent=2).encode(),
                                         "café".encode(), b"\x89PNG"]
    worker.close()


@needs_archives
def test_two_archives_with_the_same_file_names_load_side_by_side(tmp_path):
    # Both carry handler.py and model.py; each worker imports its own, under names of its
    # own (whatever other tests left under the bare names stays as it was).
    bare = {name: sys.modules.get(name) for name in ("handler", "model")}
    first = _worker("noop_entrypntfunc.mar", tmp_path)
    second = _worker("noop_handlername.mar", tmp_path)
    assert first.predict([_body(b"x")])[0].body == b"OK"
    assert second.predict([_body(b"x")])[0].body == b"OK"
    assert {name: sys.modules.get(name) for name in bare} == bare
    assert first._handle.__module__ != second._handle.__module__
    first.close()
    second.close()


WORKER_STATE = """
    import model
    CALLS = []

    def handle(data, context):
        if data is None:
            return None
        CALLS.append(len(data))
        return [{"from": model.NAME, "calls": len(CALLS), "cwd": INITIAL_CWD}] * len(data)

    import os
    INITIAL_CWD = os.path.basename(os.getcwd())
    """


def test_each_worker_has_its_own_module_globals_and_the_archives_own_modules(tmp_path):
    model_dir = tmp_path / "counter"
    model_dir.mkdir()
    (model_dir / "handler.py").write_text(textwrap.dedent(WORKER_STATE))
    (model_dir / "model.py").write_text("NAME = 'the archive model.py'\n")
    workers = [Worker(f"counter/{i}", "counter", str(model_dir), "handler", "") for i in (0, 1)]
    assert json.loads(workers[0].predict([_body(b"")])[0].body)["calls"] == 1
    assert json.loads(workers[0].predict([_body(b"")])[0].body)["calls"] == 2
    answer = json.loads(workers[1].predict([_body(b"")])[0].body)
    assert answer == {"from": "the archive model.py", "calls": 1, "cwd": "counter"}
    assert os.getcwd() != str(model_dir)  # only while the handler initialized
    for worker in workers:
        worker.close()


def test_answers_are_encoded_as_torchserve_encodes_them():
    assert encoded_answer(b"raw") == b"raw" and encoded_answer(bytearray(b"ab")) == b"ab"
    assert encoded_answer("é") == "é".encode()
    assert encoded_answer({"k": 1}) == b'{\n  "k": 1\n}'
    tensor = torch.arange(3)
    assert torch.equal(torch.load(__import__("io").BytesIO(encoded_answer(tensor))), tensor)
    with pytest.raises(TypeError):
        encoded_answer(object())
    assert decoded_value("application/json", b"not json") == b"not json"
    assert decoded_value("application/json", b"[1]", decode=False) == b"[1]"
    assert decoded_value("text/csv", b"\xff") == b"\xff"


def test_a_handler_found_nowhere_is_an_import_error_and_a_module_without_entry_a_value_error(
        tmp_path):
    from chorus.model_namespaces import ModelNamespace

    namespace = ModelNamespace("missing", [str(tmp_path)], folders_first=True)
    with pytest.raises(ImportError):
        load_entry_point(namespace, str(tmp_path), "no_such_handler_anywhere", "", None)
    (tmp_path / "two.py").write_text("class A:\n    pass\nclass B:\n    pass\n")
    with pytest.raises(ValueError, match="Expected only one class"):
        load_entry_point(namespace, str(tmp_path), "two", "", None)
    namespace.close()


def test_a_bad_answer_fails_the_batch(tmp_path):
    (tmp_path / "bad.py").write_text(textwrap.dedent("""
        def handle(data, context):
            if data is None:
                return None
            if data[0]["body"] == b"dict":
                return {"n": 1}
            if data[0]["body"] == b"short":
                return ["one"]
            return [object()] * len(data)
        """))
    worker = Worker("bad", "bad", str(tmp_path), "bad", "")
    assert worker.predict([_body(b"dict")]) == Failure(503, "Invalid model predict output")
    assert worker.predict([_body(b"obj")]) == Failure(503, "Unsupported model output data type.")
    assert worker.predict([_body(b"short"), _body(b"b")]) == Failure(
        503, "number of batch response mismatched")
    worker.close()


EAGER_HANDLER = """
    import json
    import os
    import time

    import torch
    from ts.torch_handler.base_handler import BaseHandler


    class LinearHandler(BaseHandler):
        def initialize(self, context):
            super().initialize(context)  # imports the manifest's modelFile by its bare name
            self.labels = open("labels.txt").read().split()  # relative: the model's folder
            time.sleep(0.2)  # the other worker initializes meanwhile, in its own folder
            self.cwd_at_initialize = os.getcwd()

        def preprocess(self, data):
            return torch.tensor([row["body"] for row in data])  # JSON: decoded already

        def postprocess(self, output):
            with open("labels.txt") as f:  # relative in handle too
                labels = f.read().split()
            return [{"y": row, "label": labels[0], "cwd": os.getcwd()} for row in output.tolist()]
    """


def _eager_archive(folder, seed):
    """A .mar's files as torch-model-archiver lays out an eager model: modelFile (net.py),
    serializedFile (a state dict) and a BaseHandler subclass."""
    folder.mkdir()
    (folder / "net.py").write_text("import torch\n\n\nclass Net(torch.nn.Linear):\n"
                                   "    def __init__(self):\n        super().__init__(4, 2)\n")
    torch.manual_seed(seed)
    net = torch.nn.Linear(4, 2)
    torch.save(net.state_dict(), folder / "weights.pt")
    (folder / "handler.py").write_text(textwrap.dedent(EAGER_HANDLER))
    (folder / "labels.txt").write_text(f"seed{seed}\n")
    (folder / "MAR-INF").mkdir()
    (folder / "MAR-INF" / "MANIFEST.json").write_text(json.dumps({
        "runtime": "python", "model": {"modelName": folder.name, "modelVersion": "1.0",
                                       "serializedFile": "weights.pt", "modelFile": "net.py",
                                       "handler": "handler.py"}}))
    return net


def test_eager_archives_load_their_model_file_and_read_relative_files_in_their_own_folder(
        tmp_path, monkeypatch):
    # No folder of the test's on sys.path: the archive's modules must come from its own.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    nets = {seed: _eager_archive(tmp_path / f"linear{seed}", seed) for seed in (1, 2)}
    cwd, bare_net = os.getcwd(), sys.modules.get("net")
    workers, errors = {}, []

    def start(seed):
        try:
            name = f"linear{seed}"
            workers[seed] = Worker(name, name, str(tmp_path / name), "handler", "")
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=start, args=(seed,)) for seed in nets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert os.getcwd() == cwd and sys.modules.get("net") is bare_net
    x = [0.5, -1.0, 2.0, 0.25]
    for seed, net in nets.items():
        folder = str(tmp_path / f"linear{seed}")
        assert workers[seed].context.system_properties["model_dir"] == folder
        handler = workers[seed]._handle.__self__  # the LinearHandler
        assert handler.cwd_at_initialize == folder and handler.labels == [f"seed{seed}"]
        [answer] = workers[seed].predict([_body(json.dumps(x).encode(), "application/json")])
        got = json.loads(answer.body)
        expected = net(torch.tensor([x])).tolist()[0]
        assert got["label"] == f"seed{seed}" and got["cwd"] == folder
        assert got["y"] == pytest.approx(expected)
    assert os.getcwd() == cwd and sys.modules.get("net") is bare_net
    for worker in workers.values():
        worker.close()


def test_worker_settings_maps_model_config_yaml_and_names_a_bad_value(tmp_path):
    from chorus.torchserve.backend import worker_settings

    (tmp_path / "good.yaml").write_text(
        "minWorkers: 2\nbatchSize: 4\nsequenceBatching: true\nsequenceMaxIdleMSec: 60000\n"
        "maxNumSequence: 4\nhandler:\n  cache: {capacity: 4}\n")
    assert worker_settings(str(tmp_path), "good.yaml") == {
        "minWorkers": 2, "batchSize": 4, "sequenceMaxIdleMSec": 60000, "maxNumSequence": 4,
        "sequenceBatching": 1}
    assert worker_settings(str(tmp_path), "") == {}
    for name, text, key in (("count.yaml", "batchSize: four\n", "batchSize"),
                            ("flag.yaml", "sequenceBatching: 1\n", "sequenceBatching"),
                            ("bool.yaml", "minWorkers: true\n", "minWorkers")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=key):
            worker_settings(str(tmp_path), name)
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="not a mapping"):
        worker_settings(str(tmp_path), "list.yaml")
