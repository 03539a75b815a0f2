"""Scalar data types, their numpy storage, value ranges and promotion.

`index` is the integer type of index arithmetic (ranges, offsets, symbolic
variables). It is stored as int64; the optimizer treats it as unbounded
within that range.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from egraph_compiler.ir.diagnostics import DTypeError


@dataclass(frozen=True, eq=False)  # one instance per name (see __reduce__): identity is equality, hashed in C
class DType:
    name: str
    itemsize: int
    kind: str  # 'b' bool, 'i' signed int, 'u' unsigned int, 'f' float, 'x' void
    np_name: str  # numpy storage dtype ('uint16' for bfloat16)
    short: str  # C-ish short name used in dumps and kernel names

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    def __reduce__(self) -> tuple[Any, ...]:
        # unpickled (the disk cache) as the one instance of its name: the backends compare dtypes by identity
        return (to_dtype, (self.name,))

    @cached_property
    def np(self) -> np.dtype:
        return np.dtype(self.np_name)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    @property
    def min(self) -> int | float:
        if self.kind == "b":
            return 0
        if self.kind == "u":
            return 0
        if self.kind == "i":
            return -(1 << (self.bits - 1))
        return -float("inf")

    @property
    def max(self) -> int | float:
        if self.kind == "b":
            return 1
        if self.kind == "u":
            return (1 << self.bits) - 1
        if self.kind == "i":
            return (1 << (self.bits - 1)) - 1
        return float("inf")


class dtypes:  # noqa: N801 - mirrors tinygrad's `dtypes` namespace
    bool = DType("bool", 1, "b", "bool", "bool")
    int8 = DType("int8", 1, "i", "int8", "char")
    int16 = DType("int16", 2, "i", "int16", "short")
    int32 = DType("int32", 4, "i", "int32", "int")
    int64 = DType("int64", 8, "i", "int64", "long")
    uint8 = DType("uint8", 1, "u", "uint8", "uchar")
    uint16 = DType("uint16", 2, "u", "uint16", "ushort")
    uint32 = DType("uint32", 4, "u", "uint32", "uint")
    uint64 = DType("uint64", 8, "u", "uint64", "ulong")
    float16 = DType("float16", 2, "f", "float16", "half")
    bfloat16 = DType("bfloat16", 2, "f", "uint16", "bf16")
    float32 = DType("float32", 4, "f", "float32", "float")
    float64 = DType("float64", 8, "f", "float64", "double")
    index = DType("index", 8, "i", "int64", "idx")
    void = DType("void", 0, "x", "void", "void")

    default_float = float32
    default_int = int32

    @staticmethod
    def all() -> tuple[DType, ...]:
        return ALL_DTYPES


ALL_DTYPES: tuple[DType, ...] = tuple(v for k, v in vars(dtypes).items() if isinstance(v, DType) and k == v.name)

_ALIASES: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
_ALIASES.update(
    {
        "half": dtypes.float16,
        "fp16": dtypes.float16,
        "f16": dtypes.float16,
        "float": dtypes.float32,
        "fp32": dtypes.float32,
        "f32": dtypes.float32,
        "double": dtypes.float64,
        "fp64": dtypes.float64,
        "f64": dtypes.float64,
        "bf16": dtypes.bfloat16,
        "int": dtypes.int32,
        "i32": dtypes.int32,
        "long": dtypes.int64,
        "i64": dtypes.int64,
        "i8": dtypes.int8,
        "i16": dtypes.int16,
        "u8": dtypes.uint8,
        "u16": dtypes.uint16,
        "u32": dtypes.uint32,
        "u64": dtypes.uint64,
        "uint": dtypes.uint32,
        "char": dtypes.int8,
        "uchar": dtypes.uint8,
        "short": dtypes.int16,
        "weakint": dtypes.index,
    }
)
_NP_TO_DTYPE = {np.dtype(d.np_name): d for d in ALL_DTYPES if d not in (dtypes.bfloat16, dtypes.index, dtypes.void)}


def to_dtype(x: Any) -> DType:
    """Accept a DType, a name ("float32", "fp16", "dtypes.float"), a numpy dtype or python type."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        key = x.removeprefix("dtypes.").lower()
        if key in _ALIASES:
            return _ALIASES[key]
        raise DTypeError(
            at=f"dtype {x!r}",
            why=f"{x!r} is not a known dtype name",
            suggestion=f"use one of: {', '.join(sorted(d.name for d in ALL_DTYPES if d is not dtypes.void))}",
        )
    if x is bool:
        return dtypes.bool
    if x is int:
        return dtypes.default_int
    if x is float:
        return dtypes.default_float
    if x is None:  # numpy would read None as float64
        raise DTypeError(at="dtype None", why="None is not a dtype", suggestion="pass a DType such as dtypes.float32")
    try:
        npd = np.dtype(x)
    except Exception:  # numpy raises TypeError, ValueError, ... for things that are not dtypes
        npd = None
    if npd is not None and npd in _NP_TO_DTYPE:
        return _NP_TO_DTYPE[npd]
    raise DTypeError(
        at=f"dtype {x!r}",
        why=f"{x!r} cannot be interpreted as a dtype",
        suggestion="pass a DType such as dtypes.float32 or a name such as 'float32'",
    )


def from_numpy(d: np.dtype) -> DType:
    if d in _NP_TO_DTYPE:
        return _NP_TO_DTYPE[d]
    raise DTypeError(
        at=f"numpy dtype {d}",
        why=f"numpy dtype {d} has no counterpart here",
        suggestion="convert the array to a supported dtype (bool, int8..int64, uint8..uint64, float16/32/64)",
    )


# ---- promotion ---------------------------------------------------------------------------------


def _np_for_promotion(d: DType) -> np.dtype:
    # bfloat16 promotes like float16 but wins over it (as in tinygrad / torch)
    return np.dtype("float16") if d is dtypes.bfloat16 else d.np


def promote(a: DType, b: DType) -> DType:
    """numpy (NEP 50) promotion between two tensor dtypes; index behaves as int64."""
    if a == b:
        return a
    if dtypes.index in (a, b):
        other = b if a is dtypes.index else a
        return dtypes.index if other.is_int or other.is_bool else other
    if {a, b} == {dtypes.float16, dtypes.bfloat16}:
        return dtypes.float32
    if dtypes.bfloat16 in (a, b):
        other = b if a is dtypes.bfloat16 else a
        return dtypes.bfloat16 if other.itemsize <= 1 or other.is_bool else promote(dtypes.float32, other)
    return from_numpy(np.result_type(_np_for_promotion(a), _np_for_promotion(b)))


def weak_scalar_dtype(value: Any, other: DType) -> DType:
    """The dtype a python scalar takes next to a tensor of dtype `other` (weak typing, as NEP 50)."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return other if not other.is_bool else dtypes.default_int
    if isinstance(value, float):
        return other if other.is_float else dtypes.default_float
    return other


def default_dtype_for(value: Any) -> DType:
    if isinstance(value, (bool, np.bool_)):
        return dtypes.bool
    if isinstance(value, (int, np.integer)):
        return dtypes.default_int
    return dtypes.default_float


def sum_acc_dtype(d: DType) -> DType:
    """Accumulation/result dtype of a sum (tinygrad's rule: small ints widen to 32 bits, halves accumulate in float32)."""
    if d.is_bool or (d.kind == "i" and d.itemsize < 4):
        return dtypes.int32
    if d.kind == "u" and d.itemsize < 4:
        return dtypes.uint32
    return d


# ---- value conversion --------------------------------------------------------------------------


def wrap_int(v: int, d: DType) -> int:
    """Two's-complement wraparound of a python int into dtype d (index wraps as int64)."""
    if d.is_bool:
        return int(bool(v))
    bits = d.bits
    v &= (1 << bits) - 1
    if d.kind == "i" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def as_const(v: Any, d: DType) -> bool | int | float:
    """Normalize a python value into the canonical constant of dtype d."""
    if d.is_bool:
        return bool(v)
    if d.is_int:
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                return 0
            v = int(v)
        return wrap_int(int(v), d)
    if d.is_float:
        f = float(v)
        with np.errstate(over="ignore"):  # out of range rounds to +-inf, as a cast does
            if d is dtypes.float32:
                f = float(np.float32(f))
            elif d is dtypes.float16:
                f = float(np.float16(f))
            elif d is dtypes.bfloat16:
                f = float(bf16_round(np.array([f], dtype=np.float32))[0])
        return f
    return v


def bf16_round(x: Any, xp: Any = np) -> Any:
    """Round float32 values to bfloat16 precision (round to nearest even), returned as float32. `xp`: the array
    module (numpy, or CuPy for arrays on a GPU)."""
    x = xp.asarray(x, dtype=np.float32)
    bits = xp.ascontiguousarray(x).view(np.uint32).reshape(x.shape)  # ascontiguousarray makes 0-d arrays 1-d
    rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    rounded = xp.where(xp.isnan(x), bits | 0x00400000, rounded)  # keep NaN a NaN
    return rounded.view(np.float32)


def bf16_to_bits(x: np.ndarray) -> np.ndarray:
    return (bf16_round(x).view(np.uint32) >> 16).astype(np.uint16)


def bf16_from_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def compute_np(d: DType) -> np.dtype:
    """The numpy dtype used to compute values of d (bfloat16 computes in float32)."""
    return np.dtype(np.float32) if d is dtypes.bfloat16 else d.np
