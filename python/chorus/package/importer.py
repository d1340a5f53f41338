"""Loading chorus packages inside chorus interpreters.

The host opens an archive once per process (C++, package/include/chorus/
package/archive.h) and hands every interpreter the same
``torch.classes.chorus.Archive`` object. ``ChorusImporter`` is torch.package's
PackageImporter reading through it: code and pickles come from the host's
validated reader, and tensor storages are views of the archive file mapped
once per process, so every interpreter's weights are the same memory.
"""

import builtins
import contextlib
import functools
import io
import linecache
import warnings
import weakref

import torch
from torch.package import PackageImporter
from torch.package.package_importer import _PackageNode
from torch.package._mangling import PackageMangler
from torch.package._package_unpickler import PackageUnpickler

from chorus.package import _format as fmt
from chorus.package import strings


@contextlib.contextmanager
def torch_package_warnings_silenced():
    """torch.package's own pickler and unpickler still go through TypedStorage on
    torch 2.x and warn about it; that is not the user's to fix."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TypedStorage is deprecated", UserWarning)
        yield


class ArchiveReader:
    """torch.package's zip-reader interface over the host's archive object.

    Storages come back on `device`: the archive's mapped pages on the CPU, on
    another device one copy per process that every interpreter shares."""

    def __init__(self, archive, device="cpu"):
        self._archive = archive
        self._device = device
        self._records = list(archive.records())

    def get_all_records(self):
        return list(self._records)

    def has_record(self, name):
        return self._archive.has(name)

    def get_record(self, name):
        data = self._archive.record(name)
        return data.numpy().tobytes()

    def get_storage_from_record(self, name, numel, dtype):
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        # A uint8 view of the mapped record; the importer rewraps its storage
        # with the right dtype.
        return self._archive.storage(name, nbytes, self._device)


class ChorusImporter(PackageImporter):
    """PackageImporter over an ArchiveReader (no copy of the archive is made)."""

    def __init__(self, archive, module_allowed=lambda name: True, device="cpu"):
        # PackageImporter.__init__ builds its reader from a path or buffer; this
        # sets up the same state around the host's reader instead.
        self.filename = archive.path()
        self.device = device
        self.zip_reader = ArchiveReader(archive, device)
        self.root = _PackageNode(None)
        self.modules = {}
        self.extern_modules = self._read_extern()
        for extern_module in self.extern_modules:
            if not module_allowed(extern_module):
                raise ImportError(f"package {self.filename} needs the disallowed module "
                                  f"{extern_module!r}")
            self._add_extern(extern_module)
        for name in self.zip_reader.get_all_records():
            self._add_file(name)
        self.patched_builtins = builtins.__dict__.copy()
        self.patched_builtins["__import__"] = self.__import__
        self.modules["torch_package_importer"] = self
        self._mangler = PackageMangler()
        self.storage_context = None
        self.last_map_location = None
        self.Unpickler = lambda *args, **kwargs: PackageUnpickler(self, *args, **kwargs)
        # linecache entries of this importer's modules, dropped when it goes.
        self._linecache_keys: list[str] = []
        weakref.finalize(self, _forget_lines, self._linecache_keys)

    def _make_module(self, *args, **kwargs):
        # torch.package puts a lazy linecache entry per module whose loader is
        # the importer itself: linecache's global cache would keep every
        # importer (its modules, the archive's mapping) alive for good, so that
        # each unload or job deletion leaked it. The entry keeps a weak
        # reference instead.
        module = super()._make_module(*args, **kwargs)
        filename = module.__dict__.get("__file__")
        entry = linecache.cache.get(filename) if filename else None
        if entry is not None and len(entry) == 1:  # still lazy: holds this importer
            linecache.cache[filename] = (
                functools.partial(_source_if_alive, weakref.ref(self), module.__name__),)
            self._linecache_keys.append(filename)
        return module


def _source_if_alive(importer_ref, module_name):
    importer = importer_ref()
    return importer.get_source(module_name) if importer is not None else None


def _forget_lines(keys):
    for key in keys:
        linecache.cache.pop(key, None)


def _keep_placed(storage, location):
    """map_location that keeps each storage where the reader placed it."""
    return storage


def load_model(archive, entry_point, device="cpu"):
    """The model object an archive's entry point names (a dict from the manifest, or
    {"kind": "export"} for a torch.export program), its weights on `device`:
    unpickled straight into the device storages every interpreter shares; a
    factory's or a program's model is moved there in this interpreter."""
    if entry_point["kind"] == fmt.ENTRY_POINT_EXPORT:
        from chorus.package import exported
        return _placed(exported.load_program(archive), device)
    importer = ChorusImporter(archive, device=device)
    if entry_point["kind"] == fmt.ENTRY_POINT_PICKLE:
        map_location = None if device == "cpu" else _keep_placed
        with torch_package_warnings_silenced():
            model = importer.load_pickle(entry_point["package"], entry_point["resource"],
                                         map_location=map_location)
    elif entry_point["kind"] == fmt.ENTRY_POINT_FACTORY:
        module = importer.import_module(entry_point["module"])
        model = getattr(module, entry_point["factory"])(**entry_point.get("kwargs", {}))
    else:
        raise ValueError(f"unknown entry point kind {entry_point['kind']!r}")
    if isinstance(model, torch.nn.Module):
        model.eval()
    return _placed(model, device)


def _placed(model, device):
    """`model` on `device` (a no-op for weights already there)."""
    if device != "cpu" and isinstance(model, torch.nn.Module):
        model.to(device)
    return model


def load_examples(archive):
    """(example inputs, recorded outputs) stored in the archive."""
    reader = ArchiveReader(archive)
    inputs = torch.load(io.BytesIO(reader.get_record(fmt.EXAMPLE_INPUTS_RECORD)))
    outputs = torch.load(io.BytesIO(reader.get_record(fmt.EXAMPLE_OUTPUTS_RECORD)))
    return inputs, outputs


def flatten_outputs(outputs):
    """A model's outputs as a list, each a tensor or a string tensor (strings.py), as
    chorus serves them: one tensor, one string tensor (a str or nested lists of str),
    or a tuple, list or dict (in its order) of those. A list that holds no tensor is one
    string tensor; a list holding tensors is several outputs. TypeError otherwise."""
    if isinstance(outputs, torch.Tensor) or strings.is_string_tensor(outputs):
        return [outputs]
    items = list(outputs.values()) if isinstance(outputs, dict) else outputs
    if isinstance(items, (tuple, list)) and items and all(
            isinstance(o, torch.Tensor) or strings.is_string_tensor(o) for o in items):
        return list(items)
    raise TypeError("the model must return a tensor or a string tensor (str, nested lists "
                    "of str), or a tuple/list/dict of them "
                    f"(got {_describe_kinds(outputs)})")


def _describe_kinds(outputs) -> str:
    if isinstance(outputs, dict):
        return "dict of " + ", ".join(sorted({type(o).__name__ for o in outputs.values()}))
    if isinstance(outputs, (tuple, list)) and outputs:
        kinds = sorted({type(o).__name__ for o in outputs})
        return f"{type(outputs).__name__} of " + ", ".join(kinds)
    return type(outputs).__name__


def describe(value) -> str:
    """"torch.float32[2, 4]" for a tensor, "string[2]" for a string tensor, for messages."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype}{list(value.shape)}"
    try:
        return f"string{strings.string_shape(value, 'value')}"
    except strings.StringTensorError:
        return type(value).__name__


def compare_examples(archive, model, atol, rtol):
    """Runs the example inputs; returns (number of outputs, max abs diff, error or "")."""
    inputs, expected = load_examples(archive)
    with torch.no_grad():
        try:
            actual = flatten_outputs(model(*inputs))
        except TypeError as error:
            return 0, float("inf"), str(error)
    return compare_outputs(actual, expected, atol, rtol)


def compare_outputs(actual, expected, atol, rtol):
    """(number of outputs, max abs diff, error or "") of a model's flattened outputs
    against the recorded ones: tensors within atol/rtol, string tensors exactly (their
    diff is 0.0; a str and the bytes of its UTF-8 are equal, as on the wire)."""
    if len(actual) != len(expected):
        return len(actual), float("inf"), (
            f"model returned {len(actual)} outputs, {len(expected)} were recorded")
    worst = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(e, torch.Tensor):
            diff, error = _compare_tensor(i, a, e, atol, rtol)
        else:
            diff, error = _compare_strings(i, a, e)
        worst = max(worst, diff)
        if error:
            return len(actual), worst, error
    return len(actual), worst, ""


def _compare_tensor(i, a, e, atol, rtol):
    if not isinstance(a, torch.Tensor) or a.shape != e.shape or a.dtype != e.dtype:
        return float("inf"), f"output {i}: got {describe(a)}, recorded {describe(e)}"
    diff = (a.double() - e.double()).abs().max().item() if a.numel() else 0.0
    if not torch.allclose(a, e, atol=atol, rtol=rtol):
        return diff, f"output {i} differs (max abs diff {diff:.3g})"
    return diff, ""


def _compare_strings(i, a, e):
    try:
        shape = None if isinstance(a, torch.Tensor) else strings.string_shape(a, f"output {i}")
    except strings.StringTensorError as error:
        return float("inf"), str(error)
    if shape != strings.string_shape(e, f"recorded output {i}"):
        return float("inf"), f"output {i}: got {describe(a)}, recorded {describe(e)}"
    for (index, g), (_, r) in zip(_elements(strings.as_bytes(a)),
                                  _elements(strings.as_bytes(e))):
        if g != r:
            at = " at " + "".join(f"[{j}]" for j in index) if index else ""
            return float("inf"), f"output {i} differs{at}: got {g!r}, recorded {r!r}"
    return 0.0, ""


def _elements(value, index=()):
    """(index, element) of a string tensor, in row-major order."""
    if not isinstance(value, list):
        yield index, value
        return
    for j, item in enumerate(value):
        yield from _elements(item, index + (j,))
