"""Models made with stock torch tools (no chorus in the exporting process), served from
the repository with a config.json, as Triton's PyTorch backend serves them."""

import json
import os
import subprocess
import sys
import time

import grpc
import numpy as np
import pytest
import torch

from chorus.client import ClientError
from conftest import ServerProcess

HERE = os.path.dirname(os.path.abspath(__file__))
PLATFORMS = {"stock_package": "pytorch_torch_package", "torchscript": "pytorch_libtorch",
             "torch_export": "pytorch_torch_export", "aot_inductor": "pytorch_aot_inductor",
             "aot_inductor_config": "pytorch_aot_inductor"}
SIGNATURE = {"max_batch_size": 4,
             "inputs": [{"name": "image", "datatype": "FP32", "dims": [3, 8, 8]}]}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    out = tmp_path_factory.mktemp("stock")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, os.path.join(HERE, "stock_exports.py"), str(out)], check=True,
                   env=env)
    return out


def add(repo, name, source, config):
    (repo / name / "1").mkdir(parents=True)
    os.link(source, repo / name / "1" / ("model" + source.suffix))
    if config is not None:
        (repo / name / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def served(exports, tmp_path_factory):
    repo = tmp_path_factory.mktemp("formats") / "repository"
    package, script = exports / "stock_package.pt", exports / "torchscript.pt"
    entry = {"entry_point": {"package": "model", "resource": "model.pkl"}}
    # Outputs learned from a run on zeros:
    add(repo, "stock_package", package, {**entry, **SIGNATURE, "format": "torch_package"})
    add(repo, "torchscript", script, {
        **SIGNATURE, "outputs": [{"name": "logits", "datatype": "FP32", "dims": [10]}]})
    # Signatures read from the file:
    add(repo, "torch_export", exports / "export.pt2", None)
    add(repo, "aot_inductor", exports / "aoti.pt2", None)
    add(repo, "aot_inductor_config", exports / "aoti_unsigned.pt2", {
        **SIGNATURE, "format": "aot_inductor",
        "outputs": [{"name": "logits", "datatype": "FP32", "dims": [10]}]})
    # Each of these is refused with its reason; the others serve.
    add(repo, "no_config_aot_inductor", exports / "aoti_unsigned.pt2", None)
    add(repo, "export_given_a_signature", exports / "export.pt2", SIGNATURE)
    add(repo, "no_config_package", package, None)
    add(repo, "no_config_script", script, None)
    add(repo, "typo", script, {**SIGNATURE, "max_batch_sise": 4})
    add(repo, "wrong_format", script, {**SIGNATURE, "format": "torch_package"})
    add(repo, "missing_resource", package, {"entry_point": {"package": "model",
                                                            "resource": "nothing.pkl"},
                                            **SIGNATURE})
    server = ServerProcess(repo, "--strict-readiness", "false")
    yield server
    assert server.stop() == 0


@pytest.mark.parametrize("name", ["stock_package", "torchscript", "torch_export", "aot_inductor",
                                  "aot_inductor_config"])
def test_a_stock_file_serves_what_the_exporting_process_computed(served, exports, name):
    expected = torch.load(exports / "expected.pt")
    with served.client() as client:
        metadata = client.metadata(name)
        assert metadata.platform == PLATFORMS[name]
        assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == \
            [("image", "FP32", [-1, 3, 8, 8])]
        assert [(t.datatype, list(t.shape)) for t in metadata.outputs] == [("FP32", [-1, 10])]
        # Three requests of one image each: the dynamic batcher may gather them.
        images = np.split(expected["image"].numpy(), 3)
        outputs = [client.infer(name, {"image": image}) for image in images]
    logits = np.concatenate([next(iter(output.values())) for output in outputs])
    diff = float(np.abs(logits - expected["logits"].numpy()).max())
    print(f"{name}: max abs diff {diff:.3g}")
    assert diff <= 1e-5


def test_files_without_a_usable_config_are_refused_with_what_to_write(served):
    with served.client() as client:
        index = {m.name: m for m in client.models()}
        assert index["stock_package"].state == "READY"
        reasons = {name: index[name].reason for name in
                   ("no_config_package", "no_config_script", "typo", "wrong_format",
                    "missing_resource", "no_config_aot_inductor", "export_given_a_signature")}
        assert all(index[name].state == "UNAVAILABLE" for name in reasons)
        assert "without a chorus manifest: give its entry point and signature" in \
            reasons["no_config_package"]
        assert "is a TorchScript file that carries no signature" in reasons["no_config_script"]
        assert "config.json: max_batch_sise: unknown key" in reasons["typo"]
        assert "config.json: format: " in reasons["wrong_format"]
        assert "is of format torchscript, not what format says" in reasons["wrong_format"]
        assert "nothing.pkl" in reasons["missing_resource"]
        assert "is an AOTInductor package that carries no signature" in \
            reasons["no_config_aot_inductor"]
        assert "(format torch_export) carries its own entry point and signature" in \
            reasons["export_given_a_signature"]
        with pytest.raises(ClientError) as refused:
            client.infer("typo", {"image": np.zeros((1, 3, 8, 8), np.float32)})
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
        assert "max_batch_sise" in refused.value.message


def export_with_stock_torch(tmp_path, module, source, cls):
    """A stock torch.package (no chorus in the exporting process) of `module.cls()`,
    `module` written from `source` and interned; returns its path."""
    folder = tmp_path / "source"
    folder.mkdir(exist_ok=True)
    (folder / f"{module}.py").write_text(source)
    archive = tmp_path / f"{module}.pt"
    exporter = f"""
import sys
sys.path.insert(0, {str(folder)!r})
import {module}
from torch.package import PackageExporter
with PackageExporter({str(archive)!r}) as exporter:
    exporter.intern({module!r})
    exporter.extern(["torch", "torch.**"])
    exporter.save_pickle("model", "model.pkl", {module}.{cls}())
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", exporter], check=True, env=env)
    return archive


ENDLESS_SOURCE = '''
import torch


class Endless(torch.nn.Module):
    """Refines until the input stops changing, which zeros never do here (a model bug)."""

    def forward(self, image):
        while float(image.abs().sum()) == 0:
            pass
        return image.flatten(1)[:, :10]
'''


def test_a_model_that_never_answers_zeros_fails_to_load_and_the_rest_serve(exports, tmp_path):
    # Its config.json leaves out the outputs, so chorus runs it on zeros to learn them: that
    # run is bounded by --request-timeout-ms (60 s without it) and then interrupted.
    endless = export_with_stock_torch(tmp_path, "endless_def", ENDLESS_SOURCE, "Endless")
    repo = tmp_path / "repository"
    entry = {"entry_point": {"package": "model", "resource": "model.pkl"}}
    add(repo, "endless", endless, {**entry, **SIGNATURE})
    add(repo, "stock_package", exports / "stock_package.pt", {**entry, **SIGNATURE})
    started = time.monotonic()
    server = ServerProcess(repo, "--request-timeout-ms", "2000", "--strict-readiness", "false",
                           interpreters=1)
    try:
        assert time.monotonic() - started < 60
        with server.client() as client:
            index = {m.name: m for m in client.models()}
            assert index["endless"].state == "UNAVAILABLE"
            assert "DEADLINE_EXCEEDED" in index["endless"].reason, index["endless"].reason
            assert "running the model on zeros to learn its outputs (give \"outputs\" in " \
                "config.json instead)" in index["endless"].reason
            # The interrupted interpreter serves on.
            assert index["stock_package"].state == "READY"
            image = np.ones((1, 3, 8, 8), np.float32)
            (logits,) = client.infer("stock_package", {"image": image}).values()
            assert logits.shape == (1, 10)
    finally:
        assert server.stop() == 0


STUCK_SOURCE = '''
import torch


class Stuck(torch.nn.Module):
    """Waits at unpickling for something that never comes (a model bug)."""

    def __setstate__(self, state):
        while True:
            pass

    def forward(self, image):
        return image.flatten(1)[:, :10]
'''


def test_a_model_that_never_finishes_unpickling_fails_to_load_and_the_rest_serve(exports,
                                                                               tmp_path):
    # Making the model in an interpreter is bounded by --model-load-timeout-ms (2 minutes by
    # default), then interrupted like a call past its deadline.
    stuck = export_with_stock_torch(tmp_path, "stuck_def", STUCK_SOURCE, "Stuck")
    repo = tmp_path / "repository"
    entry = {"entry_point": {"package": "model", "resource": "model.pkl"}}
    outputs = {"outputs": [{"name": "logits", "datatype": "FP32", "dims": [10]}]}
    add(repo, "stuck", stuck, {**entry, **SIGNATURE, **outputs})
    add(repo, "stock_package", exports / "stock_package.pt", {**entry, **SIGNATURE})
    started = time.monotonic()
    server = ServerProcess(repo, "--model-load-timeout-ms", "2000", "--strict-readiness",
                           "false", interpreters=1)
    try:
        assert time.monotonic() - started < 60
        with server.client() as client:
            index = {m.name: m for m in client.models()}
            assert index["stuck"].state == "UNAVAILABLE"
            reason = index["stuck"].reason
            assert "DEADLINE_EXCEEDED" in reason, reason
            assert "making the model in interpreter 0 took longer than 2000 ms" in reason, reason
            # The interrupted interpreter serves on.
            assert index["stock_package"].state == "READY"
            image = np.ones((1, 3, 8, 8), np.float32)
            (logits,) = client.infer("stock_package", {"image": image}).values()
            assert logits.shape == (1, 10)
            # Loading it again is bounded the same way.
            with pytest.raises(ClientError) as error:
                client.load("stuck")
            assert "took longer than 2000 ms" in str(error.value)
    finally:
        assert server.stop() == 0
