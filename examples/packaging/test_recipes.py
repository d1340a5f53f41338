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
