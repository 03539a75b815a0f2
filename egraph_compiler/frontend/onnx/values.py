"""Values of the ONNX import: what a node computes with (a numpy array known at import, or a Tensor), the element
types it knows, and the small readers every op uses (a Tensor of a value, a known value, an attribute's text, an
axis). The import (importer.py) and the op families in modules of their own (recurrent.py, ...) share them."""

from __future__ import annotations

from typing import Any

import numpy as np

from egraph_compiler.frontend.tensor import Tensor
from egraph_compiler.ir.diagnostics import UnsupportedOp

Value = Any  # np.ndarray (known at import) or Tensor

# TensorProto element types -> our dtype names
DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}
NP = {
    "float32": np.float32,
    "uint8": np.uint8,
    "int8": np.int8,
    "uint16": np.uint16,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
    "float16": np.float16,
    "float64": np.float64,
    "uint32": np.uint32,
    "uint64": np.uint64,
}


class NotSupportedError(Exception):
    """What a node lacks; from_onnx turns it into a diagnostic naming the node."""


def dtype_of(elem: int, what: str) -> str:
    if elem not in DTYPES:
        raise UnsupportedOp(
            at=what, why=f"ONNX element type {elem} is not supported", suggestion="use a float, int or bool type"
        )
    return DTYPES[elem]


def optional(ins: list[Value | None], i: int) -> Value | None:
    """Optional input i of a node, None where it is not given (absent, or an empty name)."""
    return ins[i] if len(ins) > i else None


def given(ins: list[Value | None], i: int) -> bool:
    """Is optional input i of a node given?"""
    return optional(ins, i) is not None


def tensor_of(v: Value) -> Tensor:
    """A Tensor of a value (a known array becomes a data-backed tensor)."""
    if isinstance(v, Tensor):
        return v
    a = np.asarray(v)
    if a.dtype.kind not in "biuf":
        raise NotSupportedError(f"a {a.dtype} value")
    return Tensor(a if a.flags.c_contiguous else np.ascontiguousarray(a))  # (ascontiguousarray makes 0-d 1-d)


def known(v: Value, what: str) -> np.ndarray:
    if isinstance(v, Tensor):
        raise NotSupportedError(f"its {what} must be known at import (a constant or a static= input)")
    return np.asarray(v)


def text(at: dict[str, Any], name: str, default: str) -> str:
    """A string attribute (onnx gives bytes)."""
    v = at.get(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def ints(v: Value, what: str) -> list[int]:
    return [int(x) for x in known(v, what).reshape(-1)]


def axis_of(a: int, ndim: int) -> int:
    if not -max(ndim, 1) <= a < max(ndim, 1):
        raise ValueError(f"axis {a} out of range for rank {ndim}")
    return a % max(ndim, 1)


def shape_of(v: Value) -> tuple[int, ...]:
    return tuple(v.shape)
