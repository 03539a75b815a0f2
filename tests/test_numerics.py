"""IEEE numerics against numpy, on LLVM and the reference interpreter alike: comparisons with NaN, abs of -0.0,
tanh near 0 and over the float range, with infinities, NaN, signed zeros and denormals among the inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler import Tensor, optimize
from egraph_compiler.ir.interpret import evaluate

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-40, 1.0, -1.0, 3.4e38], np.float32)


@st.composite
def floats32(draw: st.DrawFn, n: int = 12) -> np.ndarray:
    """Any float32, special values included."""
    xs = draw(
        st.lists(
            st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True) | st.sampled_from(SPECIAL.tolist()),
            min_size=n,
            max_size=n,
        )
    )
    return np.array(xs, np.float32)


def _both(t: Tensor, **inputs: np.ndarray) -> list[np.ndarray]:
    """The LLVM program's result and the reference interpreter's."""
    return [np.asarray(optimize(t, target="llvm")(**inputs)), np.asarray(evaluate(t.uop, inputs))]


CMPS = {
    "lt": (lambda p, q: p < q),
    "le": (lambda p, q: p <= q),
    "gt": (lambda p, q: p > q),
    "ge": (lambda p, q: p >= q),
    "eq": (lambda p, q: p == q),
    "ne": (lambda p, q: p != q),
}


@pytest.mark.parametrize("op", sorted(CMPS))
@settings(max_examples=15, deadline=None)
@given(x=floats32(), y=floats32())
def test_comparisons_with_nan_are_numpys(op: str, x: np.ndarray, y: np.ndarray) -> None:
    """NaN on either side compares False (but !=, True); a <= b was not (b < a), True for NaN."""
    a, b = Tensor.empty(x.size, name="a"), Tensor.empty(y.size, name="b")
    for got in _both(CMPS[op](a, b), a=x, b=y):
        np.testing.assert_array_equal(got, CMPS[op](x, y))


@settings(max_examples=20, deadline=None)
@given(x=floats32())
def test_abs_clears_the_sign_bit(x: np.ndarray) -> None:
    """abs(-0.0) is +0.0 and abs(-NaN) a NaN, as IEEE fabs and numpy (a select on x < 0 kept -0.0)."""
    a = Tensor.empty(x.size, name="a")
    for got in _both(a.abs(), a=x):
        np.testing.assert_array_equal(got, np.abs(x))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(np.abs(x)))


@settings(max_examples=20, deadline=None)
@given(x=floats32(), y=floats32())
def test_maximum_is_numpys_bit_for_bit(x: np.ndarray, y: np.ndarray) -> None:
    """maximum propagates a NaN from either side, and of -0.0 and 0.0 gives the second, as numpy (LLVM's
    llvm.maximum gave 0.0 for maximum(0.0, -0.0))."""
    x = np.concatenate([np.array([0.0, -0.0, np.nan, 1.0], np.float32), x])  # the cases that differed, always
    y = np.concatenate([np.array([-0.0, 0.0, 1.0, np.nan], np.float32), y])
    a, b = Tensor.empty(x.size, name="a"), Tensor.empty(y.size, name="b")
    want = np.maximum(x, y)
    for got in _both(a.maximum(b), a=x, b=y):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@settings(max_examples=20, deadline=None)
@given(x=floats32(n=24))
def test_max_reduction_is_numpys(x: np.ndarray) -> None:
    """A row max (the reduce's accumulator) with NaN, infinities and signed zeros among the values."""
    a = Tensor.empty(4, 6, name="a")
    xs = x.reshape(4, 6)
    want = xs.max(-1)
    for got in _both(a.max(-1), a=xs):
        np.testing.assert_array_equal(got, want)
        nonzero = want != 0  # which zero a row of -0.0 and 0.0 keeps depends on the order the reduction visits it
        np.testing.assert_array_equal(np.signbit(got)[nonzero], np.signbit(want)[nonzero])


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place (NaN against NaN: 0)."""
    g, w = got.astype(np.float32), want.astype(np.float32)
    both_nan = np.isnan(g) & np.isnan(w)
    gi, wi = (v.view(np.int32).astype(np.int64) for v in (g, w))
    gi, wi = (np.where(v < 0, np.int64(-(2**31)) - v, v) for v in (gi, wi))  # monotone order over the sign
    return np.where(both_nan, 0, np.abs(gi - wi))


@settings(max_examples=25, deadline=None)
@given(x=floats32())
def test_tanh_is_within_a_few_ulp_everywhere(x: np.ndarray) -> None:
    """tanh(1e-8) is 1e-8, not 0 (1 - 2/(e^2x + 1) cancels near 0: the series takes over below 1/4)."""
    a = Tensor.empty(x.size, name="a")
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    for got in _both(a.tanh(), a=x):
        assert _ulps(got, want).max() <= 4, (x, got, want)


def test_tanh_of_tiny_values_keeps_them() -> None:
    x = np.array([1e-8, -3e-5, 1e-30, 0.24, 0.26, -0.25], np.float32)
    a = Tensor.empty(x.size, name="a")
    for got in _both(a.tanh(), a=x):
        assert _ulps(got, np.tanh(x.astype(np.float64))).max() <= 2, got


@settings(max_examples=15, deadline=None)
@given(x=floats32())
def test_sin_and_cos_are_libms_over_the_whole_range(x: np.ndarray) -> None:
    """cos is an op of its own (cos(2**31) was sin(pi/2 - 2**31) = 0.971, where 0.238 is right)."""
    x = np.concatenate([x, np.array([2.0**31, 1e20, -3e8], np.float32)])
    a = Tensor.empty(x.size, name="a")
    for f, ref in ((Tensor.sin, np.sin), (Tensor.cos, np.cos)):
        with np.errstate(invalid="ignore"):  # sin/cos of an infinity is NaN
            want = ref(x.astype(np.float64)).astype(np.float32)
        for got in _both(f(a), a=x):
            assert _ulps(got, want).max() <= 2, (f, x, got, want)


@settings(max_examples=20, deadline=None)
@given(x=floats32(), y=floats32())
def test_division_is_true_division(x: np.ndarray, y: np.ndarray) -> None:
    """a / b is correctly rounded, as numpy's (it was a * (1/b): an ulp off, and inf or NaN where 1/b overflows
    though the quotient does not, as 1e-30 / 1e-39)."""
    x[:2], y[:2] = [1e-30, 3.0], [1e-39, 7.0]
    a, b = Tensor.empty(x.size, name="a"), Tensor.empty(y.size, name="b")
    with np.errstate(all="ignore"):
        want = x / y
    for got in _both(a / b, a=x, b=y):
        np.testing.assert_array_equal(got, want)
