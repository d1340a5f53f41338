"""ChorusImporter outside the host: over a stand-in for the host's archive object (the
methods ArchiveReader calls), backed by a real torch.package zip."""

import gc
import linecache
import weakref
import zipfile

import torch
from torch.package import PackageExporter

from chorus.package.importer import ChorusImporter


class ZipArchive:
    """The host's torch.classes.chorus.Archive, as far as ArchiveReader uses it."""

    def __init__(self, path):
        self._path = path
        with zipfile.ZipFile(path) as archive:
            self._records = {name.split("/", 1)[1]: archive.read(name)
                             for name in archive.namelist()}

    def path(self):
        return self._path

    def records(self):
        return list(self._records)

    def has(self, name):
        return name in self._records

    def record(self, name):  # the host returns a uint8 tensor over the mapping
        return torch.frombuffer(bytearray(self._records[name]), dtype=torch.uint8)

    def storage(self, name, nbytes):
        return torch.frombuffer(bytearray(self._records[name]), dtype=torch.uint8)


def make_package(path):
    with PackageExporter(str(path)) as exporter:
        exporter.save_source_string("scaler",
                                    "FACTOR = 3\n\ndef scale(x):\n    return x * FACTOR\n")
    return ZipArchive(str(path))


def test_an_importer_and_its_modules_are_freed_when_dropped(tmp_path):
    archive = make_package(tmp_path / "scaler.pt")
    before = set(linecache.cache)
    importer = ChorusImporter(archive)
    module = importer.import_module("scaler")
    assert torch.equal(module.scale(torch.ones(2)), torch.full((2,), 3.0))
    # Tracebacks still show the package's source.
    assert linecache.getline(module.__file__, 1) == "FACTOR = 3\n"
    dropped = weakref.ref(importer)
    del importer, module
    gc.collect()
    # torch.package's lazy linecache entries used to hold every importer forever.
    assert dropped() is None
    assert set(linecache.cache) == before
