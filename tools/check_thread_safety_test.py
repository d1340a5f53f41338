"""check_thread_safety.py's pass cache: one key for the same file in any clone, a new key
when anything the file includes changes."""

import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("check_thread_safety",
                                              os.path.join(HERE, "check_thread_safety.py"))
check_thread_safety = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_thread_safety)


def make_clone(root, header_text):
    """A checkout with one source file including one header, and its build folder."""
    (root / "common").mkdir(parents=True)
    (root / "common" / "a.h").write_text(header_text)
    (root / "common" / "a.cc").write_text('#include "common/a.h"\n')
    build = root / "build"
    build.mkdir()
    entry = {"directory": str(build), "file": str(root / "common" / "a.cc"),
             "command": f"c++ -I{root} -I{build}/generated -c {root}/common/a.cc -o a.o"}
    deps = {"a.o": [f"{root}/common/a.cc", f"{root}/common/a.h", "/usr/include/stdio.h"]}
    return entry, str(build), deps


def key(monkeypatch, root, header_text):
    entry, build, deps = make_clone(root, header_text)
    monkeypatch.setattr(check_thread_safety, "SOURCE_DIR", str(root))
    return check_thread_safety.fingerprint(entry, build, deps, {})


def test_two_clones_of_the_same_code_share_a_key(tmp_path, monkeypatch):
    assert key(monkeypatch, tmp_path / "one", "int a();\n") == \
        key(monkeypatch, tmp_path / "two", "int a();\n")


def test_a_changed_header_changes_the_key(tmp_path, monkeypatch):
    assert key(monkeypatch, tmp_path / "one", "int a();\n") != \
        key(monkeypatch, tmp_path / "two", "int a(int);\n")


@pytest.mark.parametrize("flag", ["-DNDEBUG", "-O0"])
def test_a_changed_command_changes_the_key(tmp_path, monkeypatch, flag):
    entry, build, deps = make_clone(tmp_path / "one", "int a();\n")
    monkeypatch.setattr(check_thread_safety, "SOURCE_DIR", str(tmp_path / "one"))
    before = check_thread_safety.fingerprint(entry, build, deps, {})
    entry["command"] += " " + flag
    assert check_thread_safety.fingerprint(entry, build, deps, {}) != before
