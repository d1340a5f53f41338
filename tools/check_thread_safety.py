#!/usr/bin/env python3
"""Checks clang's thread-safety analysis over every source with lock annotations.

Usage: check_thread_safety.py BUILD_DIR

Each C++ file of BUILD_DIR/compile_commands.json that uses the annotations of
common/include/chorus/common/thread_annotations.h (or whose own header does)
is compiled with clang++ -fsyntax-only -Werror=thread-safety and the build's
own flags, two at a time. Exits non-zero and prints clang's findings if any.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ANNOTATION = re.compile(r"CHORUS_(GUARDED_BY|PT_GUARDED_BY|REQUIRES|EXCLUDES|ACQUIRE|RELEASE)|MutexLock")
# Options of the build's compiler (GCC) that clang does not take or that
# would make its output a file.
DROPPED = {"-c", "-fno-gnu-unique"}


def annotated(path):
    header = os.path.splitext(path)[0] + ".h"
    for candidate in (path, header):
        if os.path.exists(candidate):
            with open(candidate, encoding="utf-8", errors="replace") as f:
                if ANNOTATION.search(f.read()):
                    return True
    return False


def clang_command(entry):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = ["clang++", "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
           "-Wno-unknown-warning-option", "-Wno-unused-command-line-argument"]
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if arg in DROPPED or arg.startswith(("-MD", "-MMD")):
            continue
        out.append(arg)
    return out


def check(entry):
    result = subprocess.run(clang_command(entry), cwd=entry["directory"], capture_output=True,
                            text=True)
    return entry["file"], result.returncode, result.stderr


def main():
    build = sys.argv[1]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f)
                   if e["file"].endswith(".cc") and "/_deps/" not in e["file"]
                   and annotated(e["file"])]
    failed = 0
    with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
        for path, code, errors in pool.map(check, entries):
            if code != 0:
                failed += 1
                print(f"thread-safety: {path}\n{errors}", file=sys.stderr)
    print(f"thread-safety: {len(entries)} annotated files checked, {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
