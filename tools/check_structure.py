#!/usr/bin/env python3
"""Checks the shape of chorus' code, as `make test` runs it (docs/architecture.md).

Usage: check_structure.py [ROOT]

1. Floors: every #include "..." of a C++ file resolves to a folder (a
   subsystem: one target, one include directory) that its own folder may
   use (FOLDERS below). Among others: a frontend never includes the training
   service, and serving/ and training/ never include server/.
2. Size: no source file over 600 lines, no function over 60 (lizard counts
   them), but the tables listed in TABLES.
3. Each folder's main header opens with a paragraph saying what the folder
   owns, starting "// <folder>/:".

Prints each finding and exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60

# Folder -> (include prefix of its headers, main header, folders it may use).
# Lower floors first; a folder may always use itself and "proto" only where listed.
FOLDERS = {
    "common": ("chorus/common", "status.h", []),
    "interpreter": ("chorus/interpreter", "interpreter_manager.h", ["common"]),
    "package": ("chorus/package", "archive.h", ["common", "interpreter"]),
    "serving": ("chorus/serving", "scheduler.h", ["common", "interpreter", "package"]),
    "training/collectives": ("chorus/training/collectives", "communicator.h", ["common"]),
    "training/job": ("chorus/training/job", "training_job.h",
                     ["common", "interpreter", "package", "training/collectives"]),
    "proto": ("chorus", None, []),
    "server/rpc": ("chorus/server/rpc", "authorizer.h", ["common", "proto"]),
    "server/config": ("chorus/server/config", "model_config.h",
                      ["common", "package", "serving", "proto"]),
    "server/python_backend": ("chorus/server/python_backend", "python_backend_model.h",
                              ["common", "interpreter", "package", "serving", "server/config",
                               "proto"]),
    "server/torchserve": ("chorus/server/torchserve", "torchserve_model.h",
                          ["common", "interpreter", "package", "serving", "server/config"]),
    "server/models": ("chorus/server/models", "inference_core.h",
                      ["common", "interpreter", "package", "serving", "server/config",
                       "server/python_backend", "server/torchserve", "proto"]),
    "server/frontends/grpc": ("chorus/server/frontends/grpc", "inference_service.h",
                              ["common", "package", "serving", "server/rpc", "server/config",
                               "server/models", "proto"]),
    "server/frontends/http": ("chorus/server/frontends/http", "http_endpoint.h",
                              ["common", "package", "serving", "server/rpc", "server/config",
                               "server/models", "proto"]),
    "server/frontends/openai": ("chorus/server/frontends/openai", "openai_service.h",
                                ["common", "serving", "server/rpc", "server/config",
                                 "server/models", "server/frontends/http", "proto"]),
    "server/frontends/torchserve": ("chorus/server/frontends/torchserve",
                                    "torchserve_inference_api.h",
                                    ["common", "serving", "server/rpc", "server/config",
                                     "server/models", "server/frontends/http", "server/torchserve",
                                     "proto"]),
    "server/training": ("chorus/server/training", "training_service.h",
                        ["common", "interpreter", "package", "training/collectives",
                         "training/job", "server/rpc", "server/config", "server/models", "proto"]),
    "server/process": ("chorus/server", "server.h",
                       ["common", "interpreter", "package", "serving", "training/collectives",
                        "training/job", "server/rpc", "server/config", "server/python_backend",
                        "server/torchserve", "server/models", "server/frontends/grpc",
                        "server/frontends/http", "server/frontends/openai",
                        "server/frontends/torchserve", "server/training", "proto"]),
    # Tests, benchmarks and examples use any floor; their own helpers are theirs.
    "tests": (None, None, "*"),
    "examples": (None, None, "*"),
}

# Where a folder's headers are, when not <folder>/include.
INCLUDE_DIRS = {"package": ["package/include", "package/model/include"]}

# Headers generated into the build tree, by the folder that generates them.
GENERATED = {
    re.compile(r"chorus/(inference|health|training)/[a-z_]+(\.grpc)?\.pb\.h"): "proto",
    re.compile(r"interpreter/src/build_info\.h"): "interpreter",
}

# What a folder's tests (*_test.cc) may use besides the folder's own floors:
# the test support and interpreters to run Python on.
TEST_EXTRA = ["tests", "interpreter"]

# Functions that are tables (a case per value), exempt from the length limit.
TABLES = {"chorus::StatusCodeName", "chorus::HttpStatusCode"}

SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".py")


def tracked_files(root):
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    return [path for path in out.splitlines() if os.path.exists(os.path.join(root, path))]


def folder_of(path):
    """The folder (FOLDERS key) a repository path belongs to, or None."""
    best = None
    for folder in FOLDERS:
        if (path == folder or path.startswith(folder + "/")) and (
                best is None or len(folder) > len(best)):
            best = folder
    return best


def header_owner(root, include):
    """The folder that provides `include`, or None if no folder does."""
    for pattern, folder in GENERATED.items():
        if pattern.fullmatch(include):
            return folder
    for folder, (prefix, _, _) in FOLDERS.items():
        if prefix is None:
            continue
        for include_dir in INCLUDE_DIRS.get(folder, [folder + "/include"]):
            if os.path.exists(os.path.join(root, include_dir, include)):
                return folder
    if os.path.exists(os.path.join(root, include)):  # a private header, from the root
        return folder_of(include)
    return None


def check_includes(root, files):
    findings = []
    include_line = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for path in files:
        if not path.endswith((".cc", ".h", ".cu")):
            continue
        folder = folder_of(path)
        if folder is None:
            continue
        allowed = FOLDERS[folder][2]
        if re.search(r"_test(_support)?\.(cc|h)$", path) and allowed != "*":
            allowed = allowed + TEST_EXTRA
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        for include in include_line.findall(text):
            owner = header_owner(root, include)
            if owner is None:
                findings.append(f"{path}: #include \"{include}\": no folder provides it")
            elif owner != folder and allowed != "*" and owner not in allowed:
                findings.append(f"{path}: #include \"{include}\": {folder}/ may not use "
                                f"{owner}/ (tools/check_structure.py, FOLDERS)")
    return findings


def check_file_sizes(root, files):
    findings = []
    for path in files:
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_FILE_LINES:
            findings.append(f"{path}: {lines} lines (at most {MAX_FILE_LINES})")
    return findings


def check_function_sizes(root, files):
    import lizard  # the lint venv's (tools/requirements/lint.txt)

    findings = []
    for path in files:
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        analysis = lizard.analyze_file(os.path.join(root, path))
        for function in analysis.function_list:
            if function.length > MAX_FUNCTION_LINES and function.name not in TABLES:
                findings.append(f"{path}:{function.start_line}: {function.name} is "
                                f"{function.length} lines (at most {MAX_FUNCTION_LINES})")
    return findings


def check_main_headers(root):
    findings = []
    for folder, (prefix, main, _) in FOLDERS.items():
        if main is None:
            continue
        dirs = INCLUDE_DIRS.get(folder, [folder + "/include"])
        path = os.path.join(root, dirs[0], prefix, main)
        if not os.path.exists(path):
            findings.append(f"{folder}/: its main header {prefix}/{main} does not exist")
            continue
        with open(path, encoding="utf-8") as f:
            opening = []
            for line in f:
                if not line.startswith("//"):
                    break
                opening.append(line)
        if len(opening) < 2 or not opening[0].startswith(f"// {folder}/"):
            findings.append(f"{os.path.relpath(path, root)}: opens without a paragraph "
                            f"(\"// {folder}/: ...\") saying what the folder owns")
    return findings


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    files = tracked_files(root)
    findings = (check_includes(root, files) + check_file_sizes(root, files) +
                check_function_sizes(root, files) + check_main_headers(root))
    for finding in findings:
        print(finding)
    if findings:
        print(f"check_structure: {len(findings)} finding(s)")
        return 1
    print("check_structure: clean (floors, file and function sizes, main headers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
