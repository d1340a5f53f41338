"""check_structure.py on small trees: it fails exactly on the floors it guards."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import check_structure  # noqa: E402


def write(root, path, text=""):
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)
    return path


def tree(tmp_path, sources):
    """Headers of every folder the sources below include, then the sources."""
    headers = [
        "server/training/include/chorus/server/training/training_service.h",
        "server/models/include/chorus/server/models/inference_core.h",
        "server/frontends/http/include/chorus/server/frontends/http/http_endpoint.h",
        "serving/include/chorus/serving/scheduler.h",
        "common/include/chorus/common/status.h",
    ]
    for header in headers:
        write(tmp_path, header)
    return [write(tmp_path, path, text) for path, text in sources.items()]


def includes(*headers):
    return "".join(f'#include "{header}"\n' for header in headers)


def test_a_frontend_that_includes_the_training_service_fails(tmp_path):
    files = tree(tmp_path, {"server/frontends/grpc/src/service.cc": includes(
        "chorus/server/models/inference_core.h", "chorus/server/training/training_service.h")})
    findings = check_structure.check_includes(str(tmp_path), files)
    assert len(findings) == 1
    assert "server/frontends/grpc/ may not use server/training/" in findings[0]


def test_serving_and_training_never_include_the_server(tmp_path):
    files = tree(tmp_path, {
        "serving/src/scheduler.cc": includes("chorus/server/models/inference_core.h"),
        "training/job/src/job.cc": includes("chorus/server/training/training_service.h"),
    })
    findings = check_structure.check_includes(str(tmp_path), files)
    assert len(findings) == 2
    assert any("serving/ may not use server/models/" in f for f in findings)
    assert any("training/job/ may not use server/training/" in f for f in findings)


def test_what_the_floors_allow_passes_and_unknown_headers_fail(tmp_path):
    files = tree(tmp_path, {
        "server/frontends/openai/src/service.cc": includes(
            "chorus/server/frontends/http/http_endpoint.h", "chorus/serving/scheduler.h",
            "chorus/common/status.h"),
        "server/training/src/core.cc": includes("chorus/server/models/inference_core.h"),
        "server/models/src/core.cc": includes("chorus/no/such/header.h"),
    })
    findings = check_structure.check_includes(str(tmp_path), files)
    assert findings == ['server/models/src/core.cc: #include "chorus/no/such/header.h": '
                        'no folder provides it']


def test_long_files_and_functions_fail_and_tables_pass(tmp_path):
    body = "".join(f"  x += {i};\n" for i in range(61))
    files = [
        write(tmp_path, "common/src/long.cc", "int Long() {\n  int x = 0;\n" + body + "}\n"),
        write(tmp_path, "common/src/big.py", "x = 1\n" * 601),
    ]
    findings = (check_structure.check_file_sizes(str(tmp_path), files) +
                check_structure.check_function_sizes(str(tmp_path), files))
    assert any("big.py: 601 lines" in f for f in findings)
    assert any("Long is 64 lines" in f for f in findings)
    assert len(findings) == 2
