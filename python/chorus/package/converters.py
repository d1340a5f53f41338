"""Models in the formats people already have, as picklable modules a chorus package can
carry: a TorchScript file or a torch.export program, kept as the bytes of the file and
loaded again (by torch) wherever the package is unpickled. chorus is extern in every
package, so the interpreters import this module from the installed chorus.

Stock torch.package archives need no wrapper: their model is re-exported with its code.
"""

import io
import warnings
import zipfile

import torch

from chorus.package import _format as fmt
from chorus.package.importer import torch_package_warnings_silenced


class FormatError(ValueError):
    """A file is not what it was given as; the message names it and says what it is."""


def describe_zip(path: str) -> str:
    """What a file is, by its contents: one of format.h's kind names ("torch.package
    archive", "TorchScript file", "torch.export program", "AOTInductor package"),
    "torch.save file", "zip file" or "not a zip file"."""
    if not zipfile.is_zipfile(path):
        return "not a zip file"
    with zipfile.ZipFile(path) as archive:
        names = [n.split("/", 1)[1] for n in archive.namelist() if "/" in n]
    if ".data/extern_modules" in names:
        return fmt.KIND_TORCH_PACKAGE
    if any(n.startswith("data/aotinductor/") for n in names):
        return fmt.KIND_AOT_INDUCTOR
    if "archive_format" in names and any(n.startswith("models/") for n in names):
        return fmt.KIND_TORCH_EXPORT
    if "constants.pkl" in names or any(n.startswith("code/") for n in names):
        return fmt.KIND_TORCH_SCRIPT
    if "data.pkl" in names:
        return "torch.save file"
    return "zip file"


def expect_kind(path: str, expected: str, option: str) -> None:
    """FormatError naming the option that fits when `path` is not `expected`."""
    actual = describe_zip(path)
    if actual == expected:
        return
    fitting = {fmt.KIND_TORCH_PACKAGE: "--from-package",
               fmt.KIND_TORCH_SCRIPT: "--from-torchscript",
               fmt.KIND_TORCH_EXPORT: "--from-export", "torch.save file": "--pickle"}
    what = actual if actual == "not a zip file" else f"a {actual}"
    hint = f"; use {fitting[actual]}" if actual in fitting else ""
    raise FormatError(f"{path} is {what}, not a {expected} ({option}){hint}")


class _Program(torch.nn.Module):
    """A loaded program, pickled as its file's bytes. The program is not a submodule:
    train()/eval() must not reach an exported graph (which refuses them)."""

    def __init__(self, data: bytes):
        super().__init__()
        self._data = data
        self.__dict__["program"] = self._load(data)

    @staticmethod
    def _load(data: bytes):
        raise NotImplementedError

    def forward(self, *inputs):
        return self.program(*inputs)

    def input_names(self):
        """The program's positional input names (for the package's signature)."""
        raise NotImplementedError

    def __reduce__(self):
        return (type(self), (self._data,))


class TorchScriptProgram(_Program):
    """A TorchScript module (torch.jit.save's file)."""

    @staticmethod
    def _load(data: bytes):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)  # jit's deprecation
            program = torch.jit.load(io.BytesIO(data), map_location="cpu")
        return program.eval()

    def input_names(self):
        return [argument.name for argument in self.program.forward.schema.arguments[1:]]


class ExportedProgram(_Program):
    """A torch.export program (torch.export.save's file), run as its module()."""

    @staticmethod
    def _load(data: bytes):
        return torch.export.load(io.BytesIO(data)).module()

    def input_names(self):
        import inspect
        return [name for name in inspect.signature(self.program.forward).parameters
                if name != "self"]


def load_torchscript(path: str) -> TorchScriptProgram:
    expect_kind(path, fmt.KIND_TORCH_SCRIPT, "--from-torchscript")
    with open(path, "rb") as f:
        return TorchScriptProgram(f.read())


def load_export(path: str) -> ExportedProgram:
    expect_kind(path, fmt.KIND_TORCH_EXPORT, "--from-export")
    with open(path, "rb") as f:
        return ExportedProgram(f.read())


def load_stock_package(path: str, resource: str = ""):
    """(the model, its importer) from a stock torch.package archive: the pickle named
    "PACKAGE/RESOURCE" (dots or slashes in PACKAGE), or the archive's one pickle."""
    from torch.package import PackageImporter
    expect_kind(path, fmt.KIND_TORCH_PACKAGE, "--from-package")
    with zipfile.ZipFile(path) as archive:
        records = [n.split("/", 1)[1] for n in archive.namelist() if "/" in n]
    pickles = [r for r in records if r.endswith(".pkl") and not r.startswith(".data/")]
    if resource:
        package, _, name = resource.rpartition("/")
        wanted = f"{package.replace('.', '/')}/{name}" if package else name
        if wanted not in pickles:
            raise FormatError(f"{path} has no pickle {resource} (it has: "
                              f"{', '.join(pickles) or 'none'}); name one with --resource")
    elif len(pickles) == 1:
        wanted = pickles[0]
    else:
        raise FormatError(f"{path} has {len(pickles)} pickles ({', '.join(pickles) or 'none'}); "
                          "name the model's with --resource PACKAGE/RESOURCE")
    package, _, name = wanted.rpartition("/")
    importer = PackageImporter(path)
    with torch_package_warnings_silenced():
        return importer.load_pickle(package.replace("/", "."), name), importer
