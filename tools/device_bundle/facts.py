"""What a machine offers chorus' bundle, printed for people and as shell assignments.

    python facts.py [--shell BUNDLE]

Run by the Python the bundle is to embed (it must import torch). Without
--shell: one line per fact (the bundle's first step prints them, so a surprise
on the device shows in one call). With --shell: `export` lines that env.sh
evaluates: the three paths chorus reads at run time (CHORUS_PYTHON,
CHORUS_LIBPYTHON, CHORUS_TORCH_PYTHON_LIB) and the library and Python paths.
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig


def libpython_of_this_python():
    """This Python's shared libpython, or None (a statically linked python)."""
    soname = sysconfig.get_config_var("INSTSONAME") or ""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for candidate in (os.path.join(libdir, soname), os.path.join(libdir, multiarch, soname)):
        if soname.endswith((".so", ".so.1.0")) and os.path.exists(candidate):
            return os.path.realpath(candidate)
    return None


def compiler():
    for name in ("c++", "g++", "clang++"):
        path = shutil.which(name)
        if path:
            out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
            return f"{path}: {out.splitlines()[0] if out else '?'}"
    return "none"


def facts():
    import torch

    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    site = os.path.dirname(os.path.dirname(torch.__file__))
    nvidia = sorted(set(glob.glob(os.path.join(site, "nvidia", "*", "lib"))))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {
        "python": sys.executable,
        "python_version": sys.version.split()[0],
        "LDLIBRARY": sysconfig.get_config_var("LDLIBRARY"),
        "LIBDIR": sysconfig.get_config_var("LIBDIR"),
        "Py_ENABLE_SHARED": sysconfig.get_config_var("Py_ENABLE_SHARED"),
        "libpython": libpython_of_this_python(),
        "include_dir_has_Python_h": os.path.exists(
            os.path.join(sysconfig.get_paths()["include"], "Python.h")),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_lib": torch_lib,
        "nvidia_libs": nvidia,
        "gpus": gpus,
        "gpu_name": torch.cuda.get_device_name(0) if gpus else None,
        "compiler": compiler(),
        "cmake": shutil.which("cmake"),
        "nvcc": shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and
                                         "/usr/local/cuda/bin/nvcc") or None,
    }


def shell(found, bundle):
    libpython = found["libpython"]
    carried = sorted(glob.glob(os.path.join(bundle, "python-lib", "libpython*.so*")))
    if os.environ.get("CHORUS_BUNDLE_LIBPYTHON") == "1" or libpython is None:
        libpython = carried[0] if carried else ""
    major_minor = ".".join(found["python_version"].split(".")[:2])
    if libpython and f"libpython{major_minor}" not in os.path.basename(libpython):
        sys.exit(f"facts: {libpython} is not Python {major_minor}'s libpython")
    paths = [os.path.join(bundle, "lib"), found["torch_lib"], *found["nvidia_libs"]]
    if os.environ.get("LD_LIBRARY_PATH"):
        paths.append(os.environ["LD_LIBRARY_PATH"])
    python_dir = os.path.join(bundle, "share", "chorus", "python")
    exports = {
        "CHORUS_PYTHON": found["python"],
        "CHORUS_LIBPYTHON": libpython,
        "CHORUS_TORCH_PYTHON_LIB": os.path.realpath(
            os.path.join(found["torch_lib"], "libtorch_python.so")),
        "CHORUS_PYTHON_DIR": python_dir,
        "CHORUS_BIN_DIR": os.path.join(bundle, "bin"),
        "LD_LIBRARY_PATH": ":".join(paths),
        "PYTHONPATH": ":".join([python_dir, os.path.join(bundle, "python-deps")]),
    }
    for key, value in exports.items():
        print(f"export {key}={shlex.quote(value)}")


def main():
    found = facts()
    if len(sys.argv) == 3 and sys.argv[1] == "--shell":
        shell(found, os.path.abspath(sys.argv[2]))
        return
    for key, value in found.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
