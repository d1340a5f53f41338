"""Writing a chorus package: torch.package plus the chorus manifest.

The archive is an ordinary torch.package archive (stock PackageImporter loads
it). chorus adds, under .data/chorus/, a manifest (model name and version,
entry point, input/output signature, batching hints, device, sha256 of every
record) and the example inputs with the outputs the model gave for them.
Inputs and outputs are tensors or string tensors (nested lists of str, see
strings.py).
"""

import ctypes
import hashlib
import inspect
import io
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch.package import PackageExporter

from chorus import dtypes
from chorus.package import _format as fmt
from chorus.package import manifest as manifest_lib
from chorus.package import strings
from chorus.package.importer import (describe, flatten_outputs,
                                     torch_package_warnings_silenced)

# Modules that stay outside the archive by default: torch, numpy, the stdlib.
DEFAULT_EXTERN = ["torch", "torch.**", "numpy", "numpy.**", "torchvision", "torchvision.**",
                  # chorus itself, where archives run; and the importer packaged code
                  # may import to read its own resources.
                  "chorus", "chorus.**", "torch_package_importer"]
PROGRESS_THRESHOLD_BYTES = 16 << 20


class PackagingError(RuntimeError):
    """The model cannot be packaged as asked."""


@dataclass
class PackagingRules:
    """torch.package dependency rules, applied in order: mock, extern, then intern."""

    intern: List[str] = field(default_factory=lambda: ["**"])
    extern: List[str] = field(default_factory=list)
    mock: List[str] = field(default_factory=list)

    def apply(self, exporter: PackageExporter) -> None:
        for pattern in self.mock:
            exporter.mock(pattern)
        stdlib = sorted(getattr(sys, "stdlib_module_names", ()))
        extern = DEFAULT_EXTERN + [p for name in stdlib for p in (name, name + ".**")]
        exporter.extern(extern + self.extern)
        for pattern in self.intern:
            exporter.intern(pattern)


def installed_modules() -> List[str]:
    """Extern patterns for every installed distribution's modules: a model whose code is
    a library's (a transformers network, which reaches compiled extensions) imports them
    where the archive runs, and only the caller's own code is packaged."""
    from importlib.metadata import packages_distributions
    return [p for name in sorted(packages_distributions()) for p in (name, name + ".**")]


class _Progress:
    """Cumulative bytes written, on stderr, once weights get large."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.written = 0
        self.shown = False

    def add(self, size: int) -> None:
        self.written += size
        if self.enabled and self.written >= PROGRESS_THRESHOLD_BYTES:
            end = "\r" if sys.stderr.isatty() else "\n"
            print(f"chorus-package: wrote {self.written / (1 << 20):8.1f} MiB", end=end,
                  file=sys.stderr, flush=True)
            self.shown = True

    def finish(self) -> None:
        if self.shown and sys.stderr.isatty():
            print(file=sys.stderr)


class _HashingWriter:
    """Wraps torch's zip writer: records the sha256 and size of every record."""

    def __init__(self, writer, progress: _Progress):
        self._writer = writer
        self._progress = progress
        self.files: Dict[str, Dict[str, Any]] = {}

    def write_record(self, name, data, size):
        if isinstance(data, torch.UntypedStorage):  # tensor storages
            view = memoryview((ctypes.c_char * size).from_address(data.data_ptr())) if size else b""
        else:
            view = data
        self.files[name] = {"sha256": hashlib.sha256(view).hexdigest(), "size": size}
        self._writer.write_record(name, data, size)
        self._progress.add(size)

    def __getattr__(self, name):
        return getattr(self._writer, name)


class _ChorusExporter(PackageExporter):
    """PackageExporter that hashes every record and writes the manifest last."""

    def __init__(self, path: str, progress: _Progress, importer=None):
        if importer is None:
            super().__init__(path)
        else:
            from torch.package import sys_importer
            super().__init__(path, importer=(importer, sys_importer))
        # PackageExporter's writer, wrapped (torch's attribute, untyped here).
        self.zip_file = _HashingWriter(self.zip_file, progress)  # type: ignore[has-type]
        self.manifest: Optional[dict] = None

    def close(self):
        # PackageExporter.close(), with the manifest written after every other
        # record is known. torch's zip writer adds .data/version itself when it
        # is finalized; that record and the manifest are not hashed.
        self._execute_dependency_graph()
        self._write_python_version()
        self.script_module_serializer.write_files()
        if self.manifest is not None:
            self.manifest["files"] = dict(sorted(self.zip_file.files.items()))
            manifest_lib.validate(self.manifest)
            self._write(fmt.MANIFEST_RECORD, json.dumps(self.manifest, indent=2) + "\n")
        self._finalize_zip()


def _flatten_outputs(outputs) -> list:
    try:
        return flatten_outputs(outputs)
    except TypeError as e:
        raise PackagingError(f"to declare a signature, {e}") from None


def _output_names(outputs, count: int) -> List[str]:
    if isinstance(outputs, dict):
        return [str(k) for k in outputs]
    return ["output"] if count == 1 else [f"output{i}" for i in range(count)]


def _input_names(model, count: int) -> List[str]:
    if callable(getattr(model, "input_names", None)):  # a converted program knows its own
        names = list(model.input_names())[:count]
        return names + [f"input{i}" for i in range(len(names), count)]
    forward = getattr(model, "forward", model)
    try:
        params = [p for p in inspect.signature(forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params][:count]
    return names + [f"input{i}" for i in range(len(names), count)]


def _specs(kind: str, names, values, batchable: bool, batch_dim: int):
    """The signature entries of `values` (tensors or string tensors), `kind` being
    "input" or "output". Models receive str but may return bytes too."""
    elements = strings.INPUT_ELEMENTS if kind == "input" else strings.OUTPUT_ELEMENTS
    specs = []
    for name, value in zip(names, values):
        if isinstance(value, torch.Tensor):
            dtype, shape = manifest_lib.dtype_name(value.dtype), list(value.shape)
        else:
            try:
                shape = strings.string_shape(value, f"{kind} {name!r}", elements)
            except strings.StringTensorError as e:
                raise PackagingError(str(e)) from None
            dtype = dtypes.STRING.name
            if batchable and batch_dim != 0:
                # The server joins lists of str only along their outer dimension.
                raise PackagingError(f"{kind} {name!r} is a string tensor: it batches along "
                                     f"dim 0 only (batch_dim is {batch_dim})")
        if batchable and shape:
            if batch_dim >= len(shape):
                raise PackagingError(f"batch_dim {batch_dim} is out of range for {name}")
            shape[batch_dim] = -1
        specs.append({"name": name, "dtype": dtype, "shape": shape})
    return specs


def _torch_save_bytes(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def error_summary(error: BaseException) -> str:
    """One line saying what went wrong, "Type: message": the message's first line, or,
    for TorchScript's multi-line reports (which start with a preamble), its last."""
    kind = type(error).__name__
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return kind
    line = lines[0]
    if line.startswith("The following operation failed in the TorchScript interpreter"):
        line = lines[-1]
    return line if line.startswith(kind + ":") else f"{kind}: {line}"


@dataclass
class _Recorded:
    """What one run of the model on its example inputs records: the signature
    (manifest entries) and the example records saved beside the model."""

    inputs: List[dict]
    outputs: List[dict]
    example_inputs: bytes  # torch.save'd, as the model got them
    example_outputs: list  # flattened; torch.save'd once the model is packaged


def _checked_example_inputs(example_inputs: Sequence[Any]) -> tuple:
    example_inputs = tuple(example_inputs)
    if not example_inputs or not all(isinstance(t, torch.Tensor) or strings.is_string_tensor(t)
                                     for t in example_inputs):
        raise PackagingError("example_inputs must be a non-empty sequence of tensors or string "
                             "tensors (str, or nested lists of str)")
    return example_inputs


def _run_on_examples(model: Any, example_inputs: tuple):
    """The model's outputs on the example inputs (of a decoupled model, its first
    response)."""
    if isinstance(model, torch.nn.Module):
        model.eval()
    with torch.no_grad():
        try:
            outputs = model(*example_inputs)
        except Exception as e:
            shapes = ", ".join(describe(t) for t in example_inputs)
            raise PackagingError(f"the model fails on the example inputs ({shapes}): "
                                 f"{error_summary(e)}") from e
    if inspect.isgenerator(outputs):
        # A decoupled model (it streams responses): its first response stands for all.
        first = next(outputs, None)
        outputs.close()
        if first is None:
            raise PackagingError("the model yields nothing on the example inputs")
        outputs = first
    return outputs


def _record(model: Any, example_inputs: tuple, input_names: Optional[List[str]],
            output_names: Optional[List[str]], batchable: bool, batch_dim: int,
            dynamic_axes: Dict[str, List[int]]) -> _Recorded:
    """Runs the model once on its example inputs; the signature and the records."""
    input_names = input_names or _input_names(model, len(example_inputs))
    if len(input_names) != len(example_inputs):
        raise PackagingError("input names do not match the example inputs")
    # Checked before the model runs: a ragged example is the user's to fix, not the model's.
    inputs = _specs("input", input_names, example_inputs, batchable, batch_dim)
    # Recorded before the run, as the model got them: it may change lists (or tensors) in place.
    recorded_inputs = _torch_save_bytes(list(example_inputs))
    outputs = _run_on_examples(model, example_inputs)
    output_values = _flatten_outputs(outputs)
    output_names = output_names or _output_names(outputs, len(output_values))
    if len(output_names) != len(output_values):
        raise PackagingError("output names do not match the example outputs")

    output_specs = _specs("output", output_names, output_values, batchable, batch_dim)
    for spec in inputs + output_specs:
        for dim in dynamic_axes.get(spec["name"], []):
            if dim >= len(spec["shape"]):
                raise PackagingError(f"dynamic axis {dim} is out of range for {spec['name']}")
            spec["shape"][dim] = -1
    return _Recorded(inputs, output_specs, recorded_inputs, output_values)


def _write_archive(output: str, model: Any, manifest: dict, recorded: _Recorded, *,
                   rules: PackagingRules, progress: bool, importer,
                   resources: Dict[tuple, Any], modules: Sequence[str]) -> None:
    bar = _Progress(progress)
    try:
        with _ChorusExporter(output, bar, importer) as exporter:
            rules.apply(exporter)
            for (package_name, resource), content in resources.items():
                if isinstance(content, str):
                    exporter.save_text(package_name, resource, content)
                else:
                    exporter.save_binary(package_name, resource, content)
            for module_name in modules:
                exporter.save_module(module_name)
            with torch_package_warnings_silenced():
                exporter.save_pickle(fmt.MODEL_PICKLE_PACKAGE, fmt.MODEL_PICKLE_RESOURCE, model)
            exporter._write(fmt.EXAMPLE_INPUTS_RECORD, recorded.example_inputs)
            exporter._write(fmt.EXAMPLE_OUTPUTS_RECORD,
                            _torch_save_bytes(recorded.example_outputs))
            exporter.manifest = manifest
    except torch.package.PackagingError as e:
        raise PackagingError(f"{e}\nhint: extern modules that cannot be packaged "
                             "(--extern NAME.**) or mock the ones not needed (--mock)") from e
    finally:
        bar.finish()


def create_package(output: str, model: Any, example_inputs: Sequence[Any], *,
                   name: str, version: str = "1", rules: Optional[PackagingRules] = None,
                   batchable: bool = True, batch_dim: int = 0, max_batch_size: int = 32,
                   device: str = "cpu", input_names: Optional[List[str]] = None,
                   output_names: Optional[List[str]] = None, source: str = "",
                   progress: bool = True, importer=None,
                   dynamic_axes: Optional[Dict[str, List[int]]] = None,
                   resources: Optional[Dict[tuple, Any]] = None,
                   modules: Sequence[str] = ()) -> dict:
    """Writes `model` (any picklable callable, usually an nn.Module) to `output`.

    `example_inputs`: one value per input, a tensor or a string tensor (a str, or
    rectangular nested lists of str). The model runs once on them to record the
    signature and the reference outputs that `chorus-package check` compares
    against. `importer`: where the model's code comes from when it was itself
    loaded from a package (a PackageImporter); plain imports otherwise. `dynamic_axes`: per input or
    output name, dims of any size (besides the batch dim) in the signature.
    `resources`: {(package, resource): str or bytes} saved into the archive.
    `modules`: modules interned even though the model never imports them (a
    training job's data loader or parallelize plan). Returns the manifest.
    """
    recorded = _record(model, _checked_example_inputs(example_inputs), input_names,
                       output_names, batchable, batch_dim, dynamic_axes or {})
    manifest = {
        "format": fmt.FORMAT_NAME,
        "format_version": fmt.FORMAT_VERSION,
        "model": {"name": name, "version": str(version)},
        "entry_point": {"kind": fmt.ENTRY_POINT_PICKLE, "package": fmt.MODEL_PICKLE_PACKAGE,
                        "resource": fmt.MODEL_PICKLE_RESOURCE},
        "source": source,
        "inputs": recorded.inputs,
        "outputs": recorded.outputs,
        "batching": {"batchable": batchable, "batch_dim": batch_dim,
                     "max_batch_size": max_batch_size if batchable else 0},
        "device": device,
        "files": {},
    }
    _write_archive(output, model, manifest, recorded, rules=rules or PackagingRules(),
                   progress=progress, importer=importer, resources=resources or {},
                   modules=modules)
    return manifest
