"""Every packaging recipe packages, then passes `chorus-package check`."""

import os
import subprocess

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
