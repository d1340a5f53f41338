"""chorus-package keygen / sign, and the reader's verdict on signed archives (inspect
--trusted-keys runs the C++ check chorus-server --trusted-keys runs)."""

import json
import os
import shutil
import subprocess
import zipfile

import pytest
import torch

from chorus.package import create_package

TOOL = os.path.join(os.environ["CHORUS_BIN_DIR"], "chorus-package")


def run(*args, cwd):
    return subprocess.run([TOOL, *args], cwd=cwd, capture_output=True, text=True)


def one_line_error(result, code=3):
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def rewrite(path, out, replace=None, add=None):
    """A copy of the zip at `path` with records replaced (name -> bytes) or added."""
    replace, add = replace or {}, add or {}
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            for suffix, new in replace.items():
                if info.filename.endswith(suffix):
                    data = new(data) if callable(new) else new
            target.writestr(info, data, compress_type=zipfile.ZIP_STORED)
        for name, data in add.items():
            target.writestr(name, data)
    return out


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    work = tmp_path_factory.mktemp("keys")
    for name in ("ours", "theirs"):
        result = run("keygen", name, cwd=work)
        assert result.returncode == 0, result.stderr
        assert f"public {name}.pub.pem" in result.stdout
    trusted = work / "trusted"
    trusted.mkdir()
    shutil.copy(work / "ours.pub.pem", trusted)
    return work


@pytest.fixture
def unsigned(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    path = tmp_path / "model.pt"
    create_package(str(path), model, (torch.randn(2, 4),), name="linear", progress=False)
    return path


def signed_copy(unsigned, keys, key="ours"):
    out = unsigned.parent / f"signed-{key}.pt"
    result = run("sign", str(unsigned), "--key", str(keys / f"{key}.key.pem"), "--output",
                 str(out), cwd=unsigned.parent)
    assert result.returncode == 0, result.stderr
    return out


def verdict(path, keys):
    return run("inspect", str(path), "--trusted-keys", str(keys / "trusted"), cwd=path.parent)


def test_keygen_writes_an_owner_only_private_key_and_never_overwrites(keys):
    assert oct(os.stat(keys / "ours.key.pem").st_mode & 0o777) == "0o600"
    assert "BEGIN PUBLIC KEY" in (keys / "ours.pub.pem").read_text()
    assert "ours.key.pem exists" in one_line_error(run("keygen", "ours", cwd=keys))


def test_a_signed_archive_is_trusted_and_still_loads_as_before(keys, unsigned):
    path = signed_copy(unsigned, keys)
    result = verdict(path, keys)
    assert result.returncode == 0, result.stderr
    assert "signed   by a key trusted in" in result.stdout
    with zipfile.ZipFile(path) as archive:
        (record,) = [n for n in archive.namelist() if "/.data/chorus/signatures/" in n]
        body = json.loads(archive.read(record))
    assert body["algorithm"] == "ed25519" and record.endswith(body["key_id"] + ".json")
    # Signing added one record and changed nothing else.
    with zipfile.ZipFile(unsigned) as before, zipfile.ZipFile(path) as after:
        assert {i.filename: i.CRC for i in before.infolist()}.items() <= \
            {i.filename: i.CRC for i in after.infolist()}.items()
    assert "already signed by key" in one_line_error(
        run("sign", str(path), "--key", str(keys / "ours.key.pem"), cwd=path.parent))


def test_each_way_to_fail_trust_has_its_own_message(keys, unsigned, tmp_path):
    signed = signed_copy(unsigned, keys)
    cases = {
        "unsigned": (unsigned, "is not signed (sign it with chorus-package sign"),
        "foreign": (signed_copy(unsigned, keys, "theirs"), "which is not trusted"),
        "tampered record": (
            rewrite(signed, tmp_path / "record.pt",
                    replace={"chorus_model/model.pkl": lambda b: b[:-1] + bytes([b[-1] ^ 1])}),
            "a record changed after signing (sha256 mismatch for record chorus_model/model.pkl"),
        "tampered manifest": (
            rewrite(signed, tmp_path / "manifest.pt", replace={
                ".data/chorus/manifest.json": lambda b: b.replace(b'"linear"', b'"linean"')}),
            "the manifest changed after signing"),
        "added record": (
            rewrite(signed, tmp_path / "added.pt", add={"model/evil.py": b"import os\n"}),
            "record evil.py was added after signing"),
        "altered signature": (
            rewrite(signed, tmp_path / "signature.pt", replace={
                ".json": lambda b: b.replace(b'"signature": "', b'"signature": "AAAA')
                if b'"signature"' in b else b}),
            "does not verify: the signature record was changed"),
    }
    for case, (path, message) in cases.items():
        line = one_line_error(verdict(path, keys))
        assert "PERMISSION_DENIED" in line and message in line, (case, line)


def test_signing_refuses_what_it_cannot_sign(keys, tmp_path):
    torch.jit.script(torch.nn.Linear(4, 2)).save(tmp_path / "script.pt")
    (tmp_path / "notes.txt").write_text("not a key")
    key = str(keys / "ours.key.pem")
    assert "is a TorchScript file without a chorus manifest: only chorus packages are signed" \
        in one_line_error(run("sign", "script.pt", "--key", key, cwd=tmp_path))
    assert "missing.pt does not exist" in one_line_error(
        run("sign", "missing.pt", "--key", key, cwd=tmp_path))
    create_package(str(tmp_path / "m.pt"), torch.nn.Linear(4, 2), (torch.zeros(1, 4),),
                   name="m", progress=False)
    assert "notes.txt is not an unencrypted private key in PEM" in one_line_error(
        run("sign", "m.pt", "--key", "notes.txt", cwd=tmp_path))
    assert "no trusted keys (*.pem) in" in one_line_error(
        run("inspect", "m.pt", "--trusted-keys", str(tmp_path), cwd=tmp_path))
    (tmp_path / "bad").mkdir()
    shutil.copy(tmp_path / "notes.txt", tmp_path / "bad" / "notes.pem")
    assert "notes.pem is not an Ed25519 public key in PEM" in one_line_error(
        run("inspect", "m.pt", "--trusted-keys", str(tmp_path / "bad"), cwd=tmp_path))
