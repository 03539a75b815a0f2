"""EXP2/LOG2/SIN/SQRT built from primitive ops, checked against numpy in float32 ulps."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from egraph_compiler.backends.reference import evaluate
from hypothesis import given
from hypothesis import strategies as st

from egraph_compiler import Ops, Tensor, UOp, dtypes
from egraph_compiler.decompositions import DECOMPOSITIONS, decompose, exp2, log2, sin, sqrt
from egraph_compiler.ops import OP_TABLE

Decomp = Callable[[UOp], UOp]
MIN_NORMAL = float(np.finfo(np.float32).tiny)
MAX = float(np.finfo(np.float32).max)
SUBNORMALS = [1e-45, 1.4e-45, 3e-42, 1e-40, 1.1754942e-38, -1e-45, -1e-40]
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, MIN_NORMAL, -MIN_NORMAL, MAX, -MAX, 1.0, -1.0, 0.5, 2.0, *SUBNORMALS]


def run(fn: Decomp, xs: list[float] | np.ndarray, dtype: type = np.float32) -> np.ndarray:
    x = np.asarray(xs, dtype=dtype)
    dt = dtypes.float32 if x.dtype == np.float32 else dtypes.float16
    placeholder = UOp(Ops.BUFFER, dt, (), ("x", x.shape))
    out = fn(placeholder)
    assert out.dtype is dt
    return evaluate(out, {"x": x})


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 steps (0 for equal values, +-0 equal; NaN vs NaN is 0, NaN vs number is huge)."""

    def ordered(x: np.ndarray) -> np.ndarray:
        i = x.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    d = np.abs(ordered(a) - ordered(b))
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.where(np.isnan(a) | np.isnan(b), 2**40, d))


def reference(fn: Callable[[np.ndarray], np.ndarray], xs: np.ndarray) -> np.ndarray:
    """numpy in float64, rounded once to float32."""
    with np.errstate(all="ignore"):
        return fn(np.asarray(xs, np.float32).astype(np.float64)).astype(np.float32)


def assert_ulps(fn: Decomp, ref: Callable[[np.ndarray], np.ndarray], xs: list[float], max_ulps: int) -> None:
    got, want = run(fn, xs), reference(ref, np.asarray(xs, np.float32))
    dist = ulp_distance(got, want)
    assert (dist <= max_ulps).all(), [(x, g, w) for x, g, w, d in zip(xs, got, want, dist) if d > max_ulps]


f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
batches = st.lists  # one evaluation per batch keeps the tests fast


@given(batches(f32.filter(lambda v: -160 < v < 140), min_size=1, max_size=64))
def test_exp2_within_two_ulps(xs: list[float]) -> None:
    assert_ulps(exp2, np.exp2, xs, 2)


@given(batches(st.floats(width=32, min_value=0, exclude_min=True, allow_infinity=False), min_size=1, max_size=64))
def test_log2_within_four_ulps(xs: list[float]) -> None:
    assert_ulps(log2, np.log2, xs, 4)


@given(batches(st.floats(width=32, min_value=0, allow_infinity=False), min_size=1, max_size=64))
def test_sqrt_within_two_ulps(xs: list[float]) -> None:
    assert_ulps(sqrt, np.sqrt, xs, 2)


@given(batches(st.floats(width=32, min_value=-1e4, max_value=1e4), min_size=1, max_size=64))
def test_sin_within_a_few_ulps_for_moderate_arguments(xs: list[float]) -> None:
    got, want = run(sin, xs), reference(np.sin, np.asarray(xs, np.float32))
    # near multiples of pi the result is tiny: there, compare with the argument's own rounding scale
    ok = (ulp_distance(got, want) <= 4) | (np.abs(got.astype(np.float64) - want) <= 1e-12 * np.abs(np.asarray(xs)))
    assert ok.all(), [(x, g, w) for x, g, w, k in zip(xs, got, want, ok) if not k]


def test_sin_near_multiples_of_half_pi_keeps_the_reduction_accurate() -> None:
    base = (np.arange(1, 6366) * (np.pi / 2)).astype(np.float32)
    xs = np.concatenate([base, np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf))])
    got, want = run(sin, xs), reference(np.sin, xs)
    # results near 0 are tiny, so ulps of the result are too strict there: bound the absolute error by |x|
    ok = (ulp_distance(got, want) <= 4) | (np.abs(got.astype(np.float64) - want) <= 1e-12 * np.abs(xs))
    assert ok.all(), xs[~ok][:5]


@pytest.mark.parametrize(
    ("name", "fn", "ref"), [("exp2", exp2, np.exp2), ("log2", log2, np.log2), ("sin", sin, np.sin), ("sqrt", sqrt, np.sqrt)]
)
def test_special_values_match_numpy(name: str, fn: Decomp, ref: Callable[[np.ndarray], np.ndarray]) -> None:
    xs = [v for v in SPECIAL if not (name == "sin" and np.isfinite(v) and abs(v) > 1e4)]
    assert_ulps(fn, ref, xs, 4)


def test_exp2_edges_of_the_float32_range() -> None:
    xs = [127.0, 127.99, 128.0, 1000.0, -126.0, -140.5, -149.0, -149.5, -150.0, -151.0, -1000.0]
    assert_ulps(exp2, np.exp2, xs, 2)


def test_log2_of_exact_powers_of_two_is_exact() -> None:
    xs = [2.0**k for k in range(-149, 128)]
    np.testing.assert_array_equal(run(log2, xs), np.arange(-149, 128, dtype=np.float32))


def test_sin_stays_within_minus_one_and_one_for_huge_finite_arguments() -> None:
    xs = np.array([1e5, 1e7, 3e8, 4e9, 1e20, 1e30, MAX, -MAX], np.float32)
    got = run(sin, xs)
    assert np.isfinite(got).all() and (np.abs(got) <= 1).all()


def test_float16_inputs_give_float16_results() -> None:
    xs = np.array([0.0, 0.5, 1.0, 3.0, 7.25], np.float16)
    for fn, ref in ((exp2, np.exp2), (log2, np.log2), (sin, np.sin), (sqrt, np.sqrt)):
        got = run(fn, xs, np.float16)
        with np.errstate(divide="ignore"):
            want = ref(xs.astype(np.float64))
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-3)


def test_op_table_names_the_decompositions() -> None:
    named = {spec.decomposition for spec in OP_TABLE.values() if spec.decomposition}
    assert named == set(DECOMPOSITIONS) == {"exp2", "log2", "sin", "sqrt"}


def test_decompose_rewrites_a_whole_graph_into_primitives() -> None:
    x = np.array([0.1, 0.5, 1.5, 3.0, 10.0], np.float32)
    t = Tensor.empty(5, name="x")
    graph = ((t.exp() + t.sin()) * t.log() + t.sqrt() + t.cos()).uop
    low = decompose(graph)
    assert not {u.op for u in low.toposort()} & {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT}
    x64 = x.astype(np.float64)
    want = (np.exp(x64) + np.sin(x64)) * np.log(x64) + np.sqrt(x64) + np.cos(x64)
    np.testing.assert_allclose(evaluate(low, {"x": x}), want, rtol=1e-5, atol=1e-5)
