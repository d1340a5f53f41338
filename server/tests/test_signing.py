"""chorus-server --trusted-keys: signed archives serve, the others are refused with why."""

import os
import shutil
import subprocess
import zipfile

import grpc
import numpy as np
import pytest
import torch

from chorus.client import ClientError
from chorus.client.training import TrainingClient
from conftest import BIN_DIR, ServerProcess, package
from training_specs import package_tiny_llama, spec

TOOL = os.path.join(BIN_DIR, "chorus-package")


def tool(*args):
    result = subprocess.run([TOOL, *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result


def tampered(signed, out, suffix, change):
    """A copy of `signed` with the record ending in `suffix` changed."""
    with zipfile.ZipFile(signed) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith(suffix):
                data = change(data)
            target.writestr(info, data, compress_type=zipfile.ZIP_STORED)
    return out


def add(repo, name, archive):
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(archive, repo / name / "1" / "model.pt")


@pytest.fixture(scope="module")
def signed_server(tmp_path_factory):
    work = tmp_path_factory.mktemp("signing")
    tool("keygen", str(work / "operator"))
    tool("keygen", str(work / "stranger"))
    trusted = work / "trusted"
    trusted.mkdir()
    shutil.copy(work / "operator.pub.pem", trusted)

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).eval()
    unsigned = work / "linear.pt"
    package(unsigned, model, torch.randn(2, 4), "linear")
    signed, foreign = work / "signed.pt", work / "foreign.pt"
    tool("sign", str(unsigned), "--key", str(work / "operator.key.pem"), "--output", str(signed))
    tool("sign", str(unsigned), "--key", str(work / "stranger.key.pem"), "--output", str(foreign))
    repo = work / "repository"
    add(repo, "signed", signed)
    add(repo, "unsigned", unsigned)
    add(repo, "foreign", foreign)
    add(repo, "tampered_record", tampered(signed, work / "r.pt", "chorus_model/model.pkl",
                                          lambda b: b[:-1] + bytes([b[-1] ^ 1])))
    add(repo, "tampered_manifest", tampered(signed, work / "m.pt", ".data/chorus/manifest.json",
                                            lambda b: b.replace(b'"linear"', b'"linean"')))
    llama = package_tiny_llama(work / "llama3.pt")
    server = ServerProcess(repo, "--trusted-keys", str(trusted), "--strict-readiness", "false")
    yield server, model, llama
    assert server.stop() == 0


def test_only_the_archive_signed_by_a_trusted_key_serves(signed_server):
    server, model, _ = signed_server
    with server.client() as client:
        index = {m.name: m for m in client.models()}
        assert index["signed"].state == "READY"
        x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
        name = client.metadata("signed").inputs[0].name
        (y,) = client.infer("signed", {name: x}).values()
        with torch.no_grad():
            expected = model(torch.from_numpy(x)).numpy()
        assert float(np.abs(y - expected).max()) <= 1e-6
        reasons = {name: index[name].reason for name in
                   ("unsigned", "foreign", "tampered_record", "tampered_manifest")}
    assert all(index[name].state == "UNAVAILABLE" for name in reasons)
    assert all(reason.startswith("PERMISSION_DENIED") for reason in reasons.values()), reasons
    assert "is not signed (sign it with chorus-package sign" in reasons["unsigned"]
    assert "which is not trusted" in reasons["foreign"]
    assert "a record changed after signing (sha256 mismatch for record chorus_model/model.pkl" \
        in reasons["tampered_record"]
    assert "the manifest changed after signing" in reasons["tampered_manifest"]
    assert "serving only archives signed by 1 trusted key(s)" in server.log_text()


def test_a_training_job_on_an_unsigned_archive_is_refused(signed_server):
    server, _, llama = signed_server
    with TrainingClient(server.address) as client:
        with pytest.raises(ClientError) as refused:
            client.create_job(**spec(llama))
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "llama3.pt: is not signed" in refused.value.message
