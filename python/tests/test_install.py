"""`pip install ./python` makes a working chorus package, generated modules included."""

import os
import re
import subprocess
import sys
import tomllib

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ROOT = os.path.join(PYTHON_DIR, "..")


def test_pip_installs_the_package_its_generated_modules_and_its_tools(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--no-build-isolation", "--target", str(target), PYTHON_DIR], check=True)
    probe = ("import chorus.client, chorus.dtypes, chorus.training.spec\n"
             "from chorus.package import _format\n"
             "from chorus.inference import grpc_service_pb2 as pb\n"
             "from chorus.training import training_service_pb2_grpc\n"
             "print(chorus.client.__file__)\n"
             "print(_format.FORMAT_NAME, _format.FORMAT_VERSION)\n"
             "print(pb.ModelInferRequest.DESCRIPTOR.full_name)\n")
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         check=True, cwd=tmp_path).stdout.splitlines()
    assert out[0].startswith(str(target))  # the installed copy, not the build tree's
    assert out[1:] == ["chorus-package 1", "inference.ModelInferRequest"]
    assert (target / "chorus" / "inference" / "grpc_service_pb2.pyi").exists()
    for tool in ("chorus-package", "chorus-client"):
        help_text = subprocess.run([sys.executable, str(target / "bin" / tool), "--help"],
                                   env=env, capture_output=True, text=True, check=True).stdout
        assert "usage" in help_text


def test_the_package_version_is_the_projects():
    with open(os.path.join(PYTHON_DIR, "pyproject.toml"), "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        cmake = re.search(r"project\(chorus VERSION ([0-9.]+)", f.read()).group(1)
    assert version == cmake
