"""BYTES tensors in the client: Triton's raw encoding (per element, a little-endian uint32
length, then the bytes), numpy object arrays in and out, and the CLI's JSON."""

import json

import numpy as np
import pytest

from chorus.client import __main__ as cli
from chorus.client.client import (Client, deserialize_bytes, serialize_bytes, to_numpy,
                                  wire_datatype)

# [["ab", ""], [b"\xff\x00", "é"]] by hand: "é" is UTF-8 c3 a9; b"\xff\x00" is no UTF-8.
ELEMENTS = np.array([["ab", ""], [b"\xff\x00", "é"]], dtype=object)
RAW = (b"\x02\x00\x00\x00ab" + b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\xff\x00"
       + b"\x02\x00\x00\x00\xc3\xa9")


def test_a_request_carries_bytes_as_triton_encodes_them():
    request = Client.make_request("upper", {"words": ELEMENTS})
    assert request.inputs[0].datatype == "BYTES"
    assert list(request.inputs[0].shape) == [2, 2]
    assert request.raw_input_contents[0] == RAW


def test_raw_bytes_read_back_as_an_object_array_of_bytes():
    array = to_numpy("BYTES", [2, 2], RAW)
    assert array.dtype == object and array.shape == (2, 2)
    assert array.tolist() == [[b"ab", b""], [b"\xff\x00", b"\xc3\xa9"]]
    assert serialize_bytes(array) == RAW


def test_zero_and_empty_shapes():
    assert serialize_bytes(np.array("hi", dtype=object)) == b"\x02\x00\x00\x00hi"
    assert to_numpy("BYTES", [], b"\x02\x00\x00\x00hi").tolist() == b"hi"
    assert serialize_bytes(np.empty((0, 3), dtype=object)) == b""
    assert to_numpy("BYTES", [0, 3], b"").shape == (0, 3)


@pytest.mark.parametrize("raw,shape,message", [
    (RAW[:-1], [2, 2], r"truncated in element 3 \(2 bytes announced, 1 left\)"),
    (RAW[:2], [2, 2], "truncated in the length of element 0"),
    (RAW, [3], r"hold 4 elements; shape \[3\] has 3"),
    (RAW + b"\x00\x00\x00\x00", [2, 2], r"hold 5 elements; shape \[2, 2\] has 4"),
])
def test_malformed_bytes_are_refused(raw, shape, message):
    with pytest.raises(ValueError, match=message):
        deserialize_bytes(raw, shape)


def test_numpy_string_arrays_are_bytes_on_the_wire():
    assert wire_datatype(ELEMENTS) == "BYTES"
    assert wire_datatype(np.array([b"ab", b"c"])) == "BYTES"  # 'S2'
    assert wire_datatype(np.array(["ab", "é"])) == "BYTES"  # 'U2'
    assert wire_datatype(np.zeros(2, np.float32)) == "FP32"
    assert serialize_bytes(np.array([b"ab", b"c"])) == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert serialize_bytes(np.array(["é"])) == b"\x02\x00\x00\x00\xc3\xa9"


def test_elements_must_be_str_or_bytes():
    with pytest.raises(ValueError, match="BYTES element 1 is int, not str or bytes"):
        serialize_bytes(np.array(["a", 3], dtype=object))


def test_cli_reads_json_strings_as_bytes():
    inputs = cli._parse_inputs(['x=["a", "é"]', 'y=[["a"], ["b"]]', "z=[1, 2]"], ["y=BYTES"])
    assert inputs["x"].dtype == object and inputs["x"].tolist() == ["a", "é"]
    assert inputs["y"].shape == (2, 1) and wire_datatype(inputs["y"]) == "BYTES"
    assert inputs["z"].dtype == np.float32  # no strings: FP32, as before
    with pytest.raises(SystemExit, match="rectangular nested lists of strings"):
        cli._parse_inputs(['x=[["a", "b"], ["c"]]'], [])
    with pytest.raises(SystemExit, match="rectangular nested lists of strings"):
        cli._parse_inputs(["x=[1]"], ["x=BYTES"])


def test_cli_prints_bytes_outputs_as_text():
    line = cli._output_json("out", to_numpy("BYTES", [2, 2], RAW))
    assert json.loads(line) == {"name": "out", "datatype": "BYTES", "shape": [2, 2],
                                "data": [["ab", ""], ["\ufffd\x00", "é"]]}
