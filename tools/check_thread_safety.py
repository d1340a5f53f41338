#!/usr/bin/env python3
"""Checks clang's thread-safety analysis over every chorus translation unit.

Usage: check_thread_safety.py BUILD_DIR

Each chorus C++ file of BUILD_DIR/compile_commands.json (generated sources
excepted) is compiled with clang++ -fsyntax-only -Werror=thread-safety
-Werror=unused-result and the build's own flags, two at a time. A file whose
command and dependencies (as ninja recorded them for the build) are unchanged
since it last passed is not compiled again. Exits non-zero and prints clang's
findings if any.
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# Options of the build's compiler (GCC) that clang does not take or that
# would make its output a file.
DROPPED = {"-c", "-fno-gnu-unique"}
CACHE_NAME = "thread-safety-passed.json"


def clang_command(entry):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = ["clang++", "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
           "-Werror=unused-result", "-Wno-unknown-warning-option",
           "-Wno-unused-command-line-argument"]
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


def ninja_dependencies(build):
    """Object file (relative to BUILD) -> the files it was compiled from."""
    text = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True,
                          text=True, check=True).stdout
    deps, current = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            current = line.split(":", 1)[0]
            deps[current] = []
        elif line.strip() and current is not None:
            deps[current].append(line.strip())
    return deps


def object_file(entry):
    args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
    return args[args.index("-o") + 1] if "-o" in args else ""


def fingerprint(entry, build, deps):
    """A key that changes when the file's command or anything it includes does."""
    digest = hashlib.sha256(json.dumps(clang_command(entry)).encode())
    for path in deps.get(object_file(entry), [entry["file"]]):
        full = os.path.join(build, path)
        try:
            stat = os.stat(full)
            digest.update(f"{path}:{stat.st_mtime_ns}:{stat.st_size}".encode())
        except OSError:
            digest.update(f"{path}:missing".encode())
    return digest.hexdigest()


def check(entry):
    result = subprocess.run(clang_command(entry), cwd=entry["directory"], capture_output=True,
                            text=True)
    return entry["file"], result.returncode, result.stderr


def main():
    build = os.path.abspath(sys.argv[1])
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f)
                   if e["file"].endswith(".cc") and not e["file"].startswith(build + "/")]
    cache_path = os.path.join(build, CACHE_NAME)
    try:
        with open(cache_path) as f:
            passed = json.load(f)
    except (OSError, ValueError):
        passed = {}
    deps = ninja_dependencies(build)
    keys = {e["file"]: fingerprint(e, build, deps) for e in entries}
    todo = [e for e in entries if passed.get(e["file"]) != keys[e["file"]]]
    failed = 0
    with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
        for path, code, errors in pool.map(check, todo):
            if code != 0:
                failed += 1
                passed.pop(path, None)
                print(f"thread-safety: {path}\n{errors}", file=sys.stderr)
            else:
                passed[path] = keys[path]
    with open(cache_path, "w") as f:
        json.dump(passed, f, indent=0, sort_keys=True)
    print(f"thread-safety: {len(entries)} files, {len(todo)} checked now "
          f"({len(entries) - len(todo)} unchanged since they passed), {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
