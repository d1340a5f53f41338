"""Prints what CMake needs to know about the pinned Python, as KEY=VALUE lines.

Run by the Python that chorus embeds (CHORUS_PYTHON); fails loudly if that
Python cannot import torch, since nothing in chorus works without it.
"""
import os
import sys
import sysconfig


def main() -> None:
    import torch  # noqa: F401  (must import: chorus embeds torch)

    libdir = sysconfig.get_config_var("LIBDIR")
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    soname = sysconfig.get_config_var("INSTSONAME")
    candidates = [os.path.join(libdir, soname), os.path.join(libdir, multiarch, soname)]
    libpython = next((p for p in candidates if os.path.exists(p)), None)
    if libpython is None:
        sys.exit(f"python_facts: cannot find {soname} (is the Python built with --enable-shared?)")
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    torch_python = os.path.realpath(os.path.join(torch_lib, "libtorch_python.so"))
    facts = {
        "PY_VERSION": f"{sys.version_info.major}.{sys.version_info.minor}",
        "PY_INCLUDE": sysconfig.get_paths()["include"],
        "PY_LIBPYTHON": os.path.realpath(libpython),
        "PY_EXECUTABLE": sys.executable,
        "PY_EXT_SUFFIX": sysconfig.get_config_var("EXT_SUFFIX"),
        "TORCH_VERSION": torch.__version__,
        "TORCH_PYTHON_LIB": torch_python,
        "TORCH_CMAKE_PREFIX": torch.utils.cmake_prefix_path,
    }
    for key, value in facts.items():
        print(f"{key}={value}")


if __name__ == "__main__":
    main()
