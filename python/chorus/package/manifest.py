"""The chorus manifest: what an archive declares about its model.

The C++ reader (package/src/manifest.cc) enforces the same schema; both follow
docs/package-format.md, and the constants come from the one header
(chorus/package/format.h, generated into _format.py).
"""

import json
import re
import zipfile

from chorus import dtypes
from chorus.package import _format as fmt

# dtype names as the manifest spells them (torch's names without "torch.", and
# "string", which torch has no dtype for).
DTYPES = tuple(dtypes.BY_NAME)
TORCH_DTYPES = tuple(d.name for d in dtypes.DTYPES if d is not dtypes.STRING)
DEVICE_PATTERN = r"^(cpu|cuda(:\d+)?)$"  # where the model runs: "cpu", "cuda", "cuda:1"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]*$")  # also TensorFlow-style "input:0"


class ManifestError(ValueError):
    """The manifest is missing or does not follow the schema."""


def dtype_name(dtype) -> str:
    """torch.float32 -> "float32"; ManifestError for torch dtypes chorus does not carry."""
    name = str(dtype).replace("torch.", "")
    if name not in TORCH_DTYPES:
        raise ManifestError(f"dtype {dtype} is not supported in a signature")
    return name


def _check_tensor_specs(specs, where):
    if not isinstance(specs, list) or not specs:
        raise ManifestError(f"{where} must be a non-empty list")
    names = set()
    for spec in specs:
        if not isinstance(spec, dict) or set(spec) != {"name", "dtype", "shape"}:
            raise ManifestError(f"{where}: each entry has exactly name, dtype, shape")
        if not isinstance(spec["name"], str) or not _NAME.match(spec["name"]):
            raise ManifestError(f"{where}: bad name {spec['name']!r}")
        if spec["name"] in names:
            raise ManifestError(f"{where}: duplicate name {spec['name']!r}")
        names.add(spec["name"])
        if spec["dtype"] not in DTYPES:
            raise ManifestError(f"{where}: unknown dtype {spec['dtype']!r}")
        shape = spec["shape"]
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in shape):
            raise ManifestError(f"{where}: shape must be a list of ints >= -1")


def validate(manifest: dict) -> dict:
    """Raises ManifestError unless `manifest` follows the schema; returns it."""
    if not isinstance(manifest, dict):
        raise ManifestError("manifest must be a JSON object")
    if manifest.get("format") != fmt.FORMAT_NAME:
        raise ManifestError(f"format must be {fmt.FORMAT_NAME!r}")
    if manifest.get("format_version") != fmt.FORMAT_VERSION:
        raise ManifestError(f"unsupported format_version {manifest.get('format_version')!r}")
    model = manifest.get("model")
    if not isinstance(model, dict) or not all(
            isinstance(model.get(k), str) and model.get(k) for k in ("name", "version")):
        raise ManifestError("model must have non-empty string name and version")
    entry = manifest.get("entry_point")
    if not isinstance(entry, dict) or entry.get("kind") not in (fmt.ENTRY_POINT_PICKLE,
                                                                fmt.ENTRY_POINT_FACTORY):
        raise ManifestError("entry_point.kind must be 'pickle' or 'factory'")
    required = ("package", "resource") if entry["kind"] == fmt.ENTRY_POINT_PICKLE else (
        "module", "factory")
    if not all(isinstance(entry.get(k), str) and entry.get(k) for k in required):
        raise ManifestError(f"entry_point of kind {entry['kind']} needs {', '.join(required)}")
    _check_tensor_specs(manifest.get("inputs"), "inputs")
    _check_tensor_specs(manifest.get("outputs"), "outputs")
    batching = manifest.get("batching")
    if not isinstance(batching, dict) or not isinstance(batching.get("batchable"), bool):
        raise ManifestError("batching.batchable must be a bool")
    for key in ("batch_dim", "max_batch_size"):
        value = batching.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ManifestError(f"batching.{key} must be an int >= 0")
    if not re.match(DEVICE_PATTERN, str(manifest.get("device"))):
        raise ManifestError('device must be "cpu", "cuda" or "cuda:N"')
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise ManifestError("files must map record names to {sha256, size}")
    for name, info in files.items():
        if not isinstance(info, dict) or not re.match(r"^[0-9a-f]{64}$", str(info.get("sha256"))) \
                or not isinstance(info.get("size"), int) or info["size"] < 0:
            raise ManifestError(f"files[{name!r}] must have a sha256 hex digest and a size")
    return manifest


def read_manifest(path: str) -> dict:
    """The validated manifest of the archive at `path`."""
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.split("/", 1)[-1] == fmt.MANIFEST_RECORD]
        if not names:
            raise ManifestError(f"{path} has no chorus manifest ({fmt.MANIFEST_RECORD})")
        try:
            manifest = json.loads(archive.read(names[0]))
        except json.JSONDecodeError as e:
            raise ManifestError(f"manifest is not valid JSON: {e}") from e
    return validate(manifest)
