"""The tensor element types chorus carries, as one table.

The same table as the C++ one (chorus/package/dtype.h; a test compares them):
each dtype's name in manifests (torch's, without "torch."), its name on the
wire (Open Inference Protocol), its size, and the numpy type its raw bytes
read as (bfloat16 has none: its bits travel as uint16). Strings ("string",
BYTES on the wire) have no torch dtype and no fixed size: numpy holds them in
object arrays, models see nested lists of str (chorus/package/strings.py).
"""

from dataclasses import dataclass
from typing import Dict, Tuple


@dataclass(frozen=True)
class Dtype:
    name: str  # "float32"
    wire: str  # "FP32"
    element_size: int  # bytes; 0 for strings, whose elements vary in size
    numpy: str  # numpy's name for the raw bytes' type


DTYPES: Tuple[Dtype, ...] = (
    Dtype("bool", "BOOL", 1, "bool"),
    Dtype("uint8", "UINT8", 1, "uint8"),
    Dtype("int8", "INT8", 1, "int8"),
    Dtype("int16", "INT16", 2, "int16"),
    Dtype("int32", "INT32", 4, "int32"),
    Dtype("int64", "INT64", 8, "int64"),
    Dtype("float16", "FP16", 2, "float16"),
    Dtype("bfloat16", "BF16", 2, "uint16"),
    Dtype("float32", "FP32", 4, "float32"),
    Dtype("float64", "FP64", 8, "float64"),
    Dtype("uint16", "UINT16", 2, "uint16"),
    Dtype("uint32", "UINT32", 4, "uint32"),
    Dtype("uint64", "UINT64", 8, "uint64"),
    Dtype("string", "BYTES", 0, "object"),
)
BY_NAME: Dict[str, Dtype] = {d.name: d for d in DTYPES}
BY_WIRE: Dict[str, Dtype] = {d.wire: d for d in DTYPES}
# The one dtype without a torch dtype (or a fixed element size).
STRING: Dtype = BY_NAME["string"]
