"""Every packaging recipe packages, then passes `chorus-package check`."""

import os
import subprocess
import sys

import pytest

TOOL = os.path.join(os.environ["CHORUS_BIN_DIR"], "chorus-package")
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("recipe", ["mlp", "resnet18", "control_flow"])
def test_recipe_packages_and_checks(recipe, tmp_path):
    archive = str(tmp_path / f"{recipe}.pt")
    created = subprocess.run(
        [TOOL, "create", archive, "--module", "model:build", "--example-inputs",
         "model:example_inputs", "--name", recipe, "--quiet"],
        cwd=os.path.join(HERE, recipe), capture_output=True, text=True)
    assert created.returncode == 0, created.stderr
    checked = subprocess.run([TOOL, "check", archive], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "reproduces" in checked.stdout


FORMATS = [("--from-package", "mlp_package.pt"), ("--from-torchscript", "mlp_torchscript.pt"),
           ("--from-export", "mlp_export.pt2")]


@pytest.fixture(scope="module")
def stock_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("stock")
    script = os.path.join(HERE, "stock_formats", "export_stock.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # stock torch alone
    subprocess.run([sys.executable, script, str(out)], check=True, env=env, capture_output=True)
    return out


@pytest.mark.parametrize("option,file", FORMATS, ids=[f for _, f in FORMATS])
def test_stock_formats_convert_and_check(stock_files, option, file):
    archive = str(stock_files / f"converted-{file}.pt")
    created = subprocess.run(
        [TOOL, "create", archive, option, str(stock_files / file), "--example-inputs",
         str(stock_files / "example_inputs.pt"), "--name", "mlp", "--quiet"],
        capture_output=True, text=True)
    assert created.returncode == 0, created.stderr
    checked = subprocess.run([TOOL, "check", archive], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_stock_files_serve_unconverted(stock_files, tmp_path):
    """The repository recipe: every stock file serves what the model computes."""
    import numpy as np
    import torch
    from chorus.client import Client
    repository = tmp_path / "repository"
    subprocess.run([sys.executable, os.path.join(HERE, "stock_formats", "make_repository.py"),
                    str(stock_files), str(repository)], check=True)
    server = subprocess.Popen(
        [os.path.join(os.environ["CHORUS_BIN_DIR"], "chorus-server"), "--model-repository",
         str(repository), "--port", "0", "--metrics-port", "-1", "--http-port", "-1",
         "--interpreters", "2", "--host", "127.0.0.1", "--no-supervisor"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = server.stdout.readline().split("port ")[1].split()[0]
        (x,) = torch.load(stock_files / "example_inputs.pt")
        expected = torch.export.load(str(stock_files / "mlp_export.pt2")).module()(x)
        with Client(f"127.0.0.1:{port}") as client:
            assert sorted(m.name for m in client.models(ready_only=True)) == [
                "mlp_aoti", "mlp_export", "mlp_package", "mlp_torchscript"]
            for name in ("mlp_aoti", "mlp_export", "mlp_package", "mlp_torchscript"):
                (y,) = client.infer(name, {"x": x.numpy()}).values()
                assert float(np.abs(y - expected.detach().numpy()).max()) <= 1e-5, name
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0


def test_signing_recipe(stock_files, tmp_path):
    """keygen, sign, and the server's verdict (inspect --trusted-keys) before serving."""
    archive = str(tmp_path / "mlp.pt")
    for command in (
            ["create", archive, "--from-export", str(stock_files / "mlp_export.pt2"),
             "--example-inputs", str(stock_files / "example_inputs.pt"), "--quiet"],
            ["keygen", str(tmp_path / "release")],
            ["sign", archive, "--key", str(tmp_path / "release.key.pem")]):
        done = subprocess.run([TOOL, *command], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    os.replace(tmp_path / "release.pub.pem", trusted / "release.pub.pem")
    verdict = subprocess.run([TOOL, "inspect", archive, "--trusted-keys", str(trusted)],
                             capture_output=True, text=True)
    assert verdict.returncode == 0, verdict.stderr
    assert "signed   by a key trusted in" in verdict.stdout
