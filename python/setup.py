"""pip's build step for chorus: setuptools builds the package (pyproject.toml)
and this adds the generated modules, as CMake does (build_support.py)."""

import glob
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import build_support  # noqa: E402


class BuildPyWithGenerated(build_py):
    def run(self):
        super().run()
        header = os.path.join(ROOT, "package", "include", "chorus", "package", "format.h")
        proto_root = os.path.join(ROOT, "proto")
        if not os.path.exists(header) or not os.path.isdir(proto_root):
            raise RuntimeError("build chorus' Python package from a chorus checkout "
                               "(it generates modules from ../proto and ../package)")
        build_support.write_if_changed(
            os.path.join(self.build_lib, "chorus", "package", "_format.py"),
            build_support.constants_module(header))
        protos = sorted(os.path.relpath(p, proto_root)
                        for p in glob.glob(os.path.join(proto_root, "chorus", "**", "*.proto"),
                                           recursive=True))
        build_support.generate_protos(proto_root, self.build_lib, protos)


setup(cmdclass={"build_py": BuildPyWithGenerated})
