"""Regenerates the archive corpus in this folder (committed; rerun only to change it).

    PYTHONPATH=build/share/chorus/python /usr/bin/python3 tests/data/package_corpus/make_corpus.py

good.pt is a tiny MLP packaged by chorus; every other archive breaks one rule
and is expected to fail with the error named in EXPECTED (also read by the C++
tests, package/src/archive_test.cc and package/model/model_test.cc).
"""

import json
import os
import sys
import zipfile

import torch
from torch.package import PackageExporter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# archive -> (what fails, the start of the error message)
EXPECTED = {
    "not_zip.pt": ("open", "not a zip archive"),
    "truncated.pt": ("open", "truncated"),
    "bad_crc.pt": ("open", "bad CRC"),
    "dotdot.pt": ("open", "unsafe record name"),
    "absolute.pt": ("open", "unsafe record name"),
    "nul_name.pt": ("open", "unsafe record name"),
    "duplicate.pt": ("open", "duplicate record"),
    "zip_bomb.pt": ("open", "compression ratio"),
    "encrypted.pt": ("open", "encrypted record"),
    "size_mismatch.pt": ("open", "size mismatch"),
    "bad_manifest_json.pt": ("open", "manifest invalid: not valid JSON"),
    "bad_manifest_schema.pt": ("open", "manifest invalid: inputs[0]: unknown dtype"),
    "sha256_mismatch.pt": ("sha256", "sha256 mismatch"),
    "no_manifest.pt": ("load", "has no chorus manifest"),
    "short_storage.pt": ("load", "storage record shorter than its tensor"),
}


def tiny_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def path(name):
    return os.path.join(HERE, name)


def patch(src, dst, old: bytes, new: bytes, count=2):
    """Copies src to dst replacing `old` by `new` (same length) `count` times."""
    assert len(old) == len(new)
    data = open(path(src), "rb").read()
    assert data.count(old) == count, (old, data.count(old))
    open(path(dst), "wb").write(data.replace(old, new))


def rebuild(src, dst, change=lambda name, data: [(name, data)], extra=()):
    """Rewrites an archive record by record through `change(name, data)`."""
    with zipfile.ZipFile(path(src)) as zin, zipfile.ZipFile(path(dst), "w") as zout:
        for info in zin.infolist():
            for name, data in change(info.filename, zin.read(info)):
                zout.writestr(zipfile.ZipInfo(name), data)
        for name, data, compression in extra:
            zout.writestr(zipfile.ZipInfo(name), data, compress_type=compression)


# Zip header signatures (local, central) and where each header's name starts.
LOCAL, CENTRAL = b"PK\x03\x04", b"PK\x01\x02"
NAME_AT = {LOCAL: 30, CENTRAL: 46}


def edit_record_headers(src, dst, record, edit):
    """Copies src to dst, calling edit(data, header_start, signature) on both of
    `record`'s headers (local and central)."""
    data = bytearray(open(path(src), "rb").read())
    name = record.encode()
    for signature, name_at in NAME_AT.items():
        at = data.find(signature)
        while at != -1:
            if data[at + name_at:at + name_at + len(name)] == name:
                edit(data, at, signature)
            at = data.find(signature, at + 1)
    open(path(dst), "wb").write(bytes(data))


def set_flag_bit(src, dst, record):
    """Marks `record` encrypted (general purpose flag bit 0) in both headers."""
    flag_at = {LOCAL: 6, CENTRAL: 8}

    def edit(data, at, signature):
        data[at + flag_at[signature]] |= 1
    edit_record_headers(src, dst, record, edit)


def grow_declared_size(src, dst, record):
    """Declares `record` one byte larger than it holds, in both headers."""
    size_at = {LOCAL: 22, CENTRAL: 24}

    def edit(data, at, signature):
        field = slice(at + size_at[signature], at + size_at[signature] + 4)
        data[field] = (int.from_bytes(data[field], "little") + 1).to_bytes(4, "little")
    edit_record_headers(src, dst, record, edit)


def with_manifest(transform):
    def change(name, data):
        if name.endswith(".data/chorus/manifest.json"):
            data = transform(data)
        return [(name, data)]
    return change


def main():
    from chorus.package import create_package
    model = tiny_mlp()
    torch.manual_seed(1)
    create_package(path("good.pt"), model, (torch.randn(3, 4),), name="tiny_mlp", progress=False)
    with PackageExporter(path("no_manifest.pt")) as exporter:
        exporter.extern(["torch.**"])
        exporter.save_pickle("model", "model.pkl", model)

    open(path("not_zip.pt"), "w").write("this is not a zip archive\n")
    good = open(path("good.pt"), "rb").read()
    open(path("truncated.pt"), "wb").write(good[: len(good) * 6 // 10])
    pickle = zipfile.ZipFile(path("good.pt")).read("good/chorus_model/model.pkl")
    marker = pickle[100:116]
    patch("good.pt", "bad_crc.pt", marker, bytes(b ^ 0xFF for b in marker), count=1)
    patch("good.pt", "dotdot.pt", b"good/chorus_model/model.pkl", b"good/chorus_model/../de.pkl")
    patch("good.pt", "absolute.pt", b"good/chorus_model/model.pkl", b"/ood/chorus_model/model.pkl")
    patch("good.pt", "nul_name.pt", b"good/chorus_model/model.pkl", b"good/chorus_model/mo\0el.pkl")
    rebuild("good.pt", "duplicate.pt",
            lambda n, d: [(n, d)] * (2 if n.endswith("model.pkl") else 1))
    rebuild("good.pt", "zip_bomb.pt",
            extra=[("good/bomb.bin", bytes(64 << 20), zipfile.ZIP_DEFLATED)])
    set_flag_bit("good.pt", "encrypted.pt", "good/chorus_model/model.pkl")
    grow_declared_size("good.pt", "size_mismatch.pt", "good/chorus_model/model.pkl")
    rebuild("good.pt", "bad_manifest_json.pt", with_manifest(lambda data: b"{not json"))

    def bad_dtype(data):
        manifest = json.loads(data)
        manifest["inputs"][0]["dtype"] = "float33"
        return json.dumps(manifest).encode()
    rebuild("good.pt", "bad_manifest_schema.pt", with_manifest(bad_dtype))
    rebuild("good.pt", "sha256_mismatch.pt",
            lambda n, d: [(n, d + b"\x00" if n.endswith(".data/1.storage") else d)])

    # A weight record cut in half, with a manifest that agrees: only loading
    # the tensor can notice.
    import hashlib
    short = {}

    def cut(name, data):
        if name.endswith(".data/0.storage"):
            data = data[: len(data) // 2]
            short["digest"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        return [(name, data)]
    rebuild("good.pt", "short_storage.tmp", cut)

    def fix(data):
        manifest = json.loads(data)
        manifest["files"][".data/0.storage"] = short["digest"]
        return json.dumps(manifest).encode()
    rebuild("short_storage.tmp", "short_storage.pt", with_manifest(fix))
    os.remove(path("short_storage.tmp"))
    with open(path("expected.json"), "w") as out:
        json.dump(EXPECTED, out, indent=2, sort_keys=True)
        out.write("\n")


if __name__ == "__main__":
    main()
