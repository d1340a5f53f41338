#!/usr/bin/env python3
"""Checks clang's thread-safety analysis over every chorus translation unit.

Usage: check_thread_safety.py BUILD_DIR

Each chorus C++ file of BUILD_DIR/compile_commands.json (generated sources
excepted) is compiled with clang++ -fsyntax-only -Werror=thread-safety
-Werror=unused-result and the build's own flags, two at a time. A file whose
command and dependencies (as ninja recorded them for the build: their contents)
are unchanged since it last passed, in this build tree or any other clone's, is
not compiled again: what passed is kept in chorus' cache (thread-safety/), keyed
with the checkout's and the build's own paths taken out, as ccache keys the build
(CCACHE_BASEDIR). Exits non-zero and prints clang's findings if any.
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
CACHE_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "chorus", "thread-safety")
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def relative(text, build):
    """`text` with the build's and the checkout's paths made placeholders (any clone's
    key is the same)."""
    return text.replace(build, "<build>").replace(SOURCE_DIR, "<source>")


def content_digest(path, memo):
    """sha256 of a file's contents, once per file and run."""
    if path not in memo:
        try:
            with open(path, "rb") as f:
                memo[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            memo[path] = "missing"
    return memo[path]


def fingerprint(entry, build, deps, memo):
    """A key that changes when the file's command or anything it includes does."""
    digest = hashlib.sha256(relative(json.dumps(clang_command(entry)), build).encode())
    for path in deps.get(object_file(entry), [entry["file"]]):
        full = os.path.normpath(os.path.join(build, path))
        digest.update(f"{relative(full, build)}:{content_digest(full, memo)}".encode())
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
    os.makedirs(CACHE_DIR, exist_ok=True)
    deps, memo = ninja_dependencies(build), {}
    keys = {e["file"]: fingerprint(e, build, deps, memo) for e in entries}
    todo = [e for e in entries if not os.path.exists(os.path.join(CACHE_DIR, keys[e["file"]]))]
    failed = 0
    with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
        for path, code, errors in pool.map(check, todo):
            if code != 0:
                failed += 1
                print(f"thread-safety: {path}\n{errors}", file=sys.stderr)
            else:  # an empty file named by the key: clones and concurrent runs share it
                open(os.path.join(CACHE_DIR, keys[path]), "w").close()
    print(f"thread-safety: {len(entries)} files, {len(todo)} checked now "
          f"({len(entries) - len(todo)} unchanged since they passed), {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
