"""dtypes: names, numpy mapping, value ranges, NEP-50 promotion, constant normalization, bfloat16 rounding."""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from egraph_compiler.ir.diagnostics import CompilerError, DTypeError
from egraph_compiler.ir.dtypes import (
    ALL_DTYPES,
    as_const,
    bf16_from_bits,
    bf16_round,
    bf16_to_bits,
    dtypes,
    from_numpy,
    promote,
    sum_acc_dtype,
    to_dtype,
    weak_scalar_dtype,
)

NUMPY_BACKED = [
    dtypes.bool,
    dtypes.int8,
    dtypes.int16,
    dtypes.int32,
    dtypes.int64,
    dtypes.uint8,
    dtypes.uint16,
    dtypes.uint32,
    dtypes.uint64,
    dtypes.float16,
    dtypes.float32,
    dtypes.float64,
]
VALUE_DTYPES = [d for d in ALL_DTYPES if d is not dtypes.void]


def test_every_numpy_backed_dtype_round_trips_through_numpy() -> None:
    for d in NUMPY_BACKED:
        assert from_numpy(np.dtype(d.np_name)) is d
        assert d.itemsize == np.dtype(d.np_name).itemsize


@pytest.mark.parametrize("d", [d for d in NUMPY_BACKED if d.is_int])
def test_integer_ranges_match_numpy_iinfo(d) -> None:
    info = np.iinfo(d.np)
    assert (d.min, d.max) == (int(info.min), int(info.max))


def test_float_and_bool_ranges() -> None:
    assert (dtypes.bool.min, dtypes.bool.max) == (0, 1)
    for d in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
        assert d.min == -float("inf") and d.max == float("inf")
    assert (dtypes.index.min, dtypes.index.max) == (-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("float32", dtypes.float32),
        ("fp16", dtypes.float16),
        ("half", dtypes.float16),
        ("f32", dtypes.float32),
        ("dtypes.float", dtypes.float32),
        ("bf16", dtypes.bfloat16),
        ("int", dtypes.int32),
        ("i64", dtypes.int64),
        ("uint8", dtypes.uint8),
        ("BOOL", dtypes.bool),
        ("double", dtypes.float64),
        ("index", dtypes.index),
    ],
)
def test_to_dtype_accepts_names_and_aliases(name: str, want) -> None:
    assert to_dtype(name) is want


def test_to_dtype_accepts_python_and_numpy_types() -> None:
    assert to_dtype(bool) is dtypes.bool
    assert to_dtype(int) is dtypes.int32  # default int policy
    assert to_dtype(float) is dtypes.float32  # default float policy
    assert to_dtype(np.int16) is dtypes.int16
    assert to_dtype(np.dtype("uint32")) is dtypes.uint32
    assert to_dtype(dtypes.float64) is dtypes.float64


@pytest.mark.parametrize("bad", ["float128", "fp13", "", "complex64", 5, None, object, np.complex64, [1], "dtypes."])
def test_to_dtype_rejects_unknown_dtypes_with_a_diagnostic(bad) -> None:
    with pytest.raises(DTypeError):
        to_dtype(bad)


def test_from_numpy_rejects_unsupported_numpy_dtypes() -> None:
    for d in (np.dtype("complex64"), np.dtype("U3"), np.dtype("O"), np.dtype("datetime64[s]")):
        with pytest.raises(CompilerError):
            from_numpy(d)


def test_promotion_matches_numpy_result_type_for_all_pairs() -> None:
    for a, b in itertools.product(NUMPY_BACKED, repeat=2):
        assert promote(a, b).np == np.result_type(a.np, b.np), (a, b)


def test_promotion_is_commutative_and_idempotent_for_every_dtype() -> None:
    for a, b in itertools.product(VALUE_DTYPES, repeat=2):
        assert promote(a, b) is promote(b, a), (a, b)
    for a in VALUE_DTYPES:
        assert promote(a, a) is a


def test_bfloat16_and_index_promotion_rules() -> None:
    assert promote(dtypes.bfloat16, dtypes.float16) is dtypes.float32
    assert promote(dtypes.bfloat16, dtypes.int8) is dtypes.bfloat16
    assert promote(dtypes.bfloat16, dtypes.float32) is dtypes.float32
    assert promote(dtypes.index, dtypes.int32) is dtypes.index
    assert promote(dtypes.index, dtypes.bool) is dtypes.index
    assert promote(dtypes.index, dtypes.float32) is dtypes.float32


def test_python_scalars_are_weak_next_to_tensors() -> None:
    assert weak_scalar_dtype(3, dtypes.int8) is dtypes.int8
    assert weak_scalar_dtype(3, dtypes.float16) is dtypes.float16
    assert weak_scalar_dtype(3, dtypes.bool) is dtypes.int32
    assert weak_scalar_dtype(2.5, dtypes.float16) is dtypes.float16
    assert weak_scalar_dtype(2.5, dtypes.int64) is dtypes.float32
    assert weak_scalar_dtype(True, dtypes.uint8) is dtypes.uint8


def test_sum_accumulation_policy() -> None:
    assert sum_acc_dtype(dtypes.bool) is dtypes.int32
    assert sum_acc_dtype(dtypes.int8) is dtypes.int32
    assert sum_acc_dtype(dtypes.uint16) is dtypes.uint32
    assert sum_acc_dtype(dtypes.int64) is dtypes.int64
    assert sum_acc_dtype(dtypes.float16) is dtypes.float16  # accumulates in float32, result comes back as half


@given(st.integers(-(2**70), 2**70), st.sampled_from([d for d in NUMPY_BACKED if d.is_int]))
def test_as_const_wraps_ints_like_numpy_two_complement(v: int, d) -> None:
    want = int(np.array(v & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64).astype(d.np))
    assert as_const(v, d) == want


@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_as_const_rounds_floats_to_the_dtype(v: float) -> None:
    with np.errstate(over="ignore"):
        assert as_const(v, dtypes.float32) == float(np.float32(v))
        assert as_const(v, dtypes.float16) == float(np.float16(v))
    assert as_const(v, dtypes.float64) == v
    assert as_const(v, dtypes.bool) is bool(v)


def _bf16_oracle(x: float) -> float:
    """Round-to-nearest-even to 8 significant bits, computed on the float32 bit pattern with python ints."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    lower, rest = bits >> 16, bits & 0xFFFF
    if rest > 0x8000 or (rest == 0x8000 and lower & 1):
        lower += 1
    return struct.unpack("<f", struct.pack("<I", (lower << 16) & 0xFFFFFFFF))[0]


@given(st.floats(width=32, allow_nan=False))
def test_bfloat16_rounding_is_round_to_nearest_even(x: float) -> None:
    got = float(bf16_round(np.array([x], np.float32))[0])
    assert got == _bf16_oracle(x) or (np.isinf(got) and np.isinf(_bf16_oracle(x)))
    assert float(bf16_from_bits(bf16_to_bits(np.array([x], np.float32)))[0]) == got


def test_bfloat16_rounding_keeps_nan() -> None:
    assert np.isnan(bf16_round(np.array([np.nan], np.float32))).all()


def test_bf16_round_keeps_a_scalar_a_scalar() -> None:
    from egraph_compiler import Tensor
    from egraph_compiler.ir.interpret import evaluate

    x = Tensor.empty(4, 5, dtype="bfloat16", name="x")
    assert evaluate(x.sum().uop, {"x": np.ones((4, 5), np.float32)}).shape == ()
