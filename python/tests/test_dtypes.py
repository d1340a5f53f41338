"""chorus.dtypes is the C++ table (chorus/package/dtype.h), entry for entry."""

import os
import re

import numpy as np
import torch

from chorus import dtypes

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEADER = os.path.join(ROOT, "package", "include", "chorus", "package", "dtype.h")
ENTRY = re.compile(r'\{Dtype::k\w+, "(\w+)", "(\w+)", (\d+)\}')


def test_python_table_is_the_cpp_table():
    with open(HEADER) as f:
        cpp = [(name, wire, int(size)) for name, wire, size in ENTRY.findall(f.read())]
    assert len(cpp) == 10
    assert [(d.name, d.wire, d.element_size) for d in dtypes.DTYPES] == cpp


def test_names_are_torchs_and_sizes_are_numpys():
    for d in dtypes.DTYPES:
        assert getattr(torch, d.name).itemsize == d.element_size, d.name
        assert np.dtype(d.numpy).itemsize == d.element_size, d.name
