"""chorus.dtypes is the C++ table (chorus/package/dtype.h), entry for entry."""

import os
import re

import numpy as np
import pytest
import torch

from chorus import dtypes
from chorus.package import manifest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEADER = os.path.join(ROOT, "package", "include", "chorus", "package", "dtype.h")
ENTRY = re.compile(r'\{Dtype::k\w+, "(\w+)", "(\w+)", (\d+)\}')


def test_python_table_is_the_cpp_table():
    with open(HEADER) as f:
        cpp = [(name, wire, int(size)) for name, wire, size in ENTRY.findall(f.read())]
    assert len(cpp) == 14
    assert [(d.name, d.wire, d.element_size) for d in dtypes.DTYPES] == cpp


def test_names_are_torchs_and_sizes_are_numpys():
    for d in dtypes.DTYPES:
        if d is dtypes.STRING:  # torch has no string dtype
            continue
        assert getattr(torch, d.name).itemsize == d.element_size, d.name
        assert np.dtype(d.numpy).itemsize == d.element_size, d.name


def test_string_is_bytes_on_the_wire_and_an_object_array_in_numpy():
    assert dtypes.STRING == dtypes.Dtype("string", "BYTES", 0, "object")
    assert dtypes.BY_WIRE["BYTES"] is dtypes.STRING
    assert np.dtype(dtypes.STRING.numpy) == np.dtype(object)
    assert not hasattr(torch, "string")
    # A manifest may declare strings; no torch dtype maps to them.
    assert "string" in manifest.DTYPES and "string" not in manifest.TORCH_DTYPES


@pytest.mark.parametrize("dtype", [torch.complex64, torch.uint1, torch.float8_e4m3fn])
def test_dtype_name_refuses_torch_dtypes_chorus_does_not_carry(dtype):
    with pytest.raises(manifest.ManifestError, match="is not supported in a signature"):
        manifest.dtype_name(dtype)


def test_dtype_name_of_every_torch_dtype_chorus_carries():
    assert [manifest.dtype_name(getattr(torch, name)) for name in manifest.TORCH_DTYPES] == [
        "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
        "float64", "uint16", "uint32", "uint64"]
