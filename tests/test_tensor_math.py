"""TensorMath: tinygrad's elementwise math, activations and dtype helpers, against numpy (math.erf for erf), through
the reference interpreter, the default backend and one optimize(..., target="llvm"), and against tinygrad itself."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import check, examples, rand_array, run, tinygrad_cpu_or_skip
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler import Tensor, optimize
from egraph_compiler.ir.diagnostics import AxisError, BroadcastMismatch, DTypeError, InvalidArgument, MissingInput
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.interpret import evaluate

F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)
SELU_ALPHA, SELU_GAMMA = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-8, -1e-8, 1e-30, -1e-30, 1e-40, 3e-45, 0.5, -0.5, 1.0, -1.0]
SPECIAL += [0.99999994, -0.99999994, 1.0000001, 2.5, -3.5, 20.0, 88.5, -89.2, 100.0, -100.0, 1e4, 3e38, -3e38, F32_MAX]


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _expm1_branch(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(x))


# name -> (numpy in float64, relative tolerance, absolute tolerance); every function is accurate far beyond these
# tolerances' textbook counterparts: see the delicate points below
UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], float, float]] = {
    "sinh": (np.sinh, 1e-6, 0.0),
    "cosh": (np.cosh, 1e-6, 0.0),
    "asinh": (np.arcsinh, 1e-6, 0.0),
    "acosh": (np.arccosh, 1e-6, 0.0),
    "atanh": (np.arctanh, 1e-6, 0.0),
    "asin": (np.arcsin, 1e-6, 0.0),
    "acos": (np.arccos, 1e-6, 0.0),
    "atan": (np.arctan, 1e-6, 0.0),
    "erf": (_erf, 1e-6, 3e-7),
    "log10": (np.log10, 1e-6, 0.0),
    "softplus": (lambda x: np.logaddexp(x, 0.0), 1e-6, 0.0),
    "logsigmoid": (lambda x: -np.logaddexp(0.0, -x), 1e-6, 0.0),
    "elu": (lambda x: _expm1_branch(x, 1.0), 1e-6, 0.0),
    "selu": (lambda x: SELU_GAMMA * _expm1_branch(x, SELU_ALPHA), 1e-6, 0.0),
    "mish": (lambda x: x * np.tanh(np.logaddexp(x, 0.0)), 2e-6, 0.0),
    "softsign": (lambda x: np.where(np.isinf(x), np.sign(x), x / (1 + np.abs(x))), 1e-6, 0.0),
    "round": (np.round, 0.0, 0.0),
}


def ref(t: Tensor, **inputs: np.ndarray) -> np.ndarray:
    """The tensor computed by the reference interpreter (numpy, cheap: no optimize)."""
    return np.asarray(evaluate(t.uop, inputs))


def ev(fn: Callable[[Tensor], Tensor], x: np.ndarray) -> np.ndarray:
    return ref(fn(Tensor.empty(x.shape, dtype=str(x.dtype), name="x")), x=x)


def method(name: str) -> Callable[[Tensor], Tensor]:
    """The Tensor method `name`, called without arguments."""
    return lambda t: getattr(t, name)()


def assert_close(
    got: np.ndarray, want64: np.ndarray, rtol: float, atol: float, what: str = "", signed_zero: bool = True
) -> None:
    """float32 results against a float64 oracle: NaN where it is NaN, the sign of its zeros, within rtol/atol
    otherwise (and, where the oracle lies beyond the float32 range or within rounding of it, the overflowed
    value); values below the smallest normal float32 (subnormal results) within that much."""
    got, want = np.asarray(got, np.float64), np.asarray(want64, np.float64)
    assert got.shape == want.shape
    with np.errstate(all="ignore"):
        w32 = want.astype(np.float32).astype(np.float64)
        ok = (np.isnan(got) & np.isnan(want)) | (got == w32)
        ok |= np.abs(got - want) <= atol + F32_TINY + rtol * np.abs(want)
        ok |= np.isinf(got) & (np.abs(want) >= F32_MAX * (1 - 4 * max(rtol, 1e-7))) & (np.sign(got) == np.sign(want))
    zero = want == 0
    if signed_zero:
        ok &= ~zero | (np.signbit(got) == np.signbit(want))
    assert ok.all(), f"{what}: at {np.flatnonzero(~ok)[:5]}: got {got[~ok][:5]}, want {want[~ok][:5]}"


def spread(n: int = 400, seed: int = 0, scale: float = 30.0) -> np.ndarray:
    """Special values, a dense stretch of [-4, 4], and log-uniform magnitudes from 1e-30 to `scale`, both signs."""
    r = np.random.default_rng(seed)
    mags = np.exp(r.uniform(math.log(1e-30), math.log(scale), n)) * r.choice([-1.0, 1.0], n)
    return np.concatenate([SPECIAL, np.linspace(-4, 4, n + 1), mags]).astype(np.float32)


# ---- unary functions against numpy, special values included --------------------------------------------------


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_numpy_over_special_and_random_values(name: str) -> None:
    fn, rtol, atol = UNARY[name]
    x = spread()
    with np.errstate(all="ignore"):
        want = fn(x.astype(np.float64))
    got = ev(method(name), x)
    assert got.dtype == np.float32
    assert_close(got, want, rtol, atol, name)


def _softplus(v: float) -> float:
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


@pytest.mark.parametrize(
    "name, x, exact",
    [
        ("asinh", 1e-8, math.asinh),
        ("asinh", -3e-5, math.asinh),
        ("asinh", 1e30, math.asinh),
        ("asinh", 3e38, math.asinh),
        ("acosh", 1e4, math.acosh),
        ("acosh", 1.0000001, math.acosh),
        ("acosh", 3e38, math.acosh),
        ("atanh", 0.99999994, math.atanh),
        ("atanh", -0.99999994, math.atanh),
        ("atanh", 1e-7, math.atanh),
        ("sinh", 1e-6, math.sinh),
        ("sinh", -2e-3, math.sinh),
        ("sinh", 89.0, math.sinh),
        ("cosh", -89.0, math.cosh),
        ("asin", 1e-8, math.asin),
        ("asin", 0.99999994, math.asin),
        ("acos", 0.99999994, math.acos),
        ("acos", -0.99999994, math.acos),
        ("atan", 1e-8, math.atan),
        ("atan", 1e30, math.atan),
        ("erf", 1e-8, math.erf),
        ("erf", -3e-4, math.erf),
        ("erf", 0.999, math.erf),
        ("erf", 3.0, math.erf),
        ("softplus", 100.0, _softplus),
        ("softplus", -100.0, _softplus),
        ("softplus", -20.0, _softplus),
        ("logsigmoid", -100.0, lambda v: -_softplus(-v)),
        ("logsigmoid", 100.0, lambda v: -_softplus(-v)),
        ("elu", -1e-7, math.expm1),
        ("mish", 100.0, lambda v: v * math.tanh(_softplus(v))),
        ("mish", -20.0, lambda v: v * math.tanh(_softplus(v))),
    ],
)
def test_delicate_points_keep_their_digits(name: str, x: float, exact: Callable[[float], float]) -> None:
    """Near 0 (where a difference of nearly equal values would leave nothing), near 1 and for large arguments
    (where squares and exponentials overflow): within a few float32 ulps of the exact value."""
    x32 = np.array([x], np.float32)
    got = float(ev(method(name), x32)[0])
    want = exact(float(x32[0]))
    assert math.isclose(got, want, rel_tol=5e-7, abs_tol=1e-44), (name, x, got, want)


def test_erf_is_within_1e_6_of_math_erf_over_the_float32_range() -> None:
    r = np.random.default_rng(1)
    x = np.concatenate([np.linspace(-6, 6, 20001), r.standard_normal(5000) * 1e3, np.exp(r.uniform(-80, 4, 5000))])
    x = x.astype(np.float32)
    got = ev(lambda t: t.erf(), x).astype(np.float64)
    want = _erf(x.astype(np.float64))
    assert np.max(np.abs(got - want)) < 3e-7
    small = np.abs(x) < 0.5
    assert np.max(np.abs(got[small] - want[small]) / np.maximum(np.abs(want[small]), 1e-38)) < 5e-7  # relative near 0


def test_results_keep_half_dtypes_and_ints_become_float() -> None:
    x16 = np.array([-2.0, -0.5, 0.25, 1.5, 3.0], np.float16)
    for name in ("erf", "sinh", "asinh", "atan", "softplus", "elu", "selu", "logsigmoid"):
        got = ev(method(name), x16)
        assert got.dtype == np.float16, name
        check(got, UNARY[name][0](x16.astype(np.float64)), rtol=1e-3, atol=1e-3)
    xi = np.array([-3, -1, 0, 2, 5], np.int32)
    out = Tensor(xi).sinh()
    assert out.dtype is dtypes.float32
    check(ref(out), np.sinh(xi.astype(np.float64)), rtol=1e-6, dtype=np.float32)
    assert Tensor(xi).round().dtype is dtypes.int32 and Tensor([True]).round().dtype is dtypes.bool
    assert Tensor(np.float16([1.5])).round().dtype is dtypes.float16
    b = Tensor(np.array([0.3, -1.7, 2.2], np.float32)).bfloat16().erf()
    assert b.dtype is dtypes.bfloat16
    check(ref(b), _erf(np.array([0.30078125, -1.703125, 2.203125])), rtol=8e-3, atol=0)


def test_float64_inputs_compute_in_float64() -> None:
    x = np.array([-2.0, -1e-9, 0.3, 1.5, 40.0], np.float64)
    for name in ("sinh", "asinh", "atan", "erf", "softplus"):
        got = ev(method(name), x)
        assert got.dtype == np.float64
        check(got, UNARY[name][0](x), rtol=1e-6, atol=3e-7)


# ---- binary math ---------------------------------------------------------------------------------------------


def test_logaddexp_is_stable_and_exact_at_equal_infinities() -> None:
    a = np.array([100.0, -100.0, 0.0, 1e-8, math.inf, -math.inf, -math.inf, math.nan, 88.0, 3.0, -1e30], np.float32)
    b = np.array([100.0, -100.0, 0.0, 0.0, math.inf, -math.inf, 5.0, 1.0, -88.0, 3.5, 1e30], np.float32)
    got = ref(Tensor(a).logaddexp(Tensor(b)))
    with np.errstate(all="ignore"):
        assert_close(got, np.logaddexp(a.astype(np.float64), b.astype(np.float64)), 5e-7, 0.0, "logaddexp")
    got = ref(Tensor(np.array([1, 2], np.int32)).logaddexp(0.5))  # ints and python floats promote as numpy's
    check(got, np.logaddexp(np.array([1, 2], np.int32), 0.5), rtol=1e-6, dtype=np.float64)
    check(ref(Tensor([1, 2]).logaddexp(Tensor([0, 2]))), np.logaddexp([1.0, 2.0], [0.0, 2.0]), rtol=1e-6, dtype=np.float32)


def test_copysign_uses_the_sign_bit() -> None:
    a = np.array([1.0, 2.0, -3.0, 0.0, -0.0, math.inf, math.nan, 4.0, 5.0], np.float32)
    b = np.array([-1.0, -0.0, 0.0, -2.0, 3.0, -1.0, -1.0, math.inf, -math.nan], np.float32)
    got = ref(Tensor(a).copysign(Tensor(b)))
    want = np.copysign(a, b)
    assert np.array_equal(np.signbit(got), np.signbit(want)) and np.array_equal(np.abs(got), np.abs(want), equal_nan=True)
    check(ref(Tensor([3, -4, 5], dtype="int32").copysign(Tensor([-1, -2, 7], dtype="int32"))), [-3, -4, 5], dtype=np.int32)
    check(ref(Tensor(np.float32([1.5, -2.5])).copysign(-1)), [-1.5, -2.5], dtype=np.float32)


def test_fmod_matches_numpy_for_ints_and_floats() -> None:
    ai = np.array([-7, 7, -7, 7, 0, 5, -5, 9], np.int32)
    bi = np.array([3, -3, -3, 3, 4, 0, 0, 10], np.int32)
    with np.errstate(all="ignore"):
        check(ref(Tensor(ai).fmod(Tensor(bi))), np.fmod(ai, bi), dtype=np.int32)
    au = np.array([7, 200, 3], np.uint8)
    check(ref(Tensor(au).fmod(Tensor(np.array([3, 7, 5], np.uint8)))), np.fmod(au, np.array([3, 7, 5], np.uint8)))
    af = np.array([5.5, -5.5, 1e10, -1e10, 7.0, -6.0, 0.0, -0.0, 5.0, math.inf, 5.0, math.nan, 1e-30, 3.0], np.float32)
    bf = np.array([2.0, 2.0, 3.0, 3.0, -0.7, 3.0, 1.0, 1.0, math.inf, 2.0, 0.0, 1.0, 7e-31, -math.inf], np.float32)
    got = ref(Tensor(af).fmod(Tensor(bf)))
    with np.errstate(all="ignore"):
        want = np.fmod(af, bf)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)  # exact (numpy's fmod is), NaN where numpy's is
    assert np.array_equal(np.signbit(got[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
    h = np.array([7.5, -7.5, 100.0], np.float16)
    np.testing.assert_array_equal(ref(Tensor(h).fmod(2)), np.fmod(h, np.float16(2)))


def test_lerp_is_exact_at_both_ends_and_promotes_ints() -> None:
    a = np.array([1.0, -3.0, 1e8, 0.1], np.float32)
    b = np.array([4.0, 5.0, 1.0, 0.7], np.float32)
    for w in (0.0, 1.0):
        np.testing.assert_array_equal(ref(Tensor(a).lerp(Tensor(b), w)), a if w == 0 else b)
    w = np.array([0.25, 0.75, 1.0, -0.5], np.float32)
    a64, b64, w64 = a.astype(np.float64), b.astype(np.float64), w.astype(np.float64)
    check(ref(Tensor(a).lerp(Tensor(b), Tensor(w))), a64 + w64 * (b64 - a64), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(ref(Tensor(a).lerp(Tensor(b), Tensor(np.ones(4, np.float32)))), b)
    out = Tensor([1, 2, 250], dtype="uint8").lerp(Tensor([5, 0, 10], dtype="uint8"), 0.5)  # no wrap of end - self
    assert out.dtype is dtypes.float32
    check(ref(out), [3.0, 1.0, 130.0])


def test_round_is_half_to_even() -> None:
    x = np.array([-3.5, -2.5, -1.5, -0.5, -0.4, 0.5, 1.5, 2.5, 3.5, 0.49999997, 2.5000002, 8388607.5, 1e30, -0.0], np.float32)
    x = np.concatenate([x, np.array([math.inf, -math.inf, math.nan], np.float32), rand_array((200,), seed=3) * 10])
    got = ref(Tensor(x).round())
    np.testing.assert_array_equal(got, np.round(x))
    assert np.array_equal(np.signbit(got), np.signbit(np.round(x)))  # -0.5 and -0.4 round to -0.0
    np.testing.assert_array_equal(ref(Tensor(np.float16([0.5, 1.5, 2.5, -2.5])).round()), np.float16([0, 2, 2, -2]))


# ---- classification, closeness, comparisons, bits ------------------------------------------------------------


def test_isinf_isnan_isfinite() -> None:
    x = np.array([1.0, math.inf, -math.inf, math.nan, -0.0, F32_MAX], np.float32)
    t = Tensor(x)
    check(ref(t.isinf()), np.isinf(x), dtype=np.bool_)
    check(ref(t.isinf(detect_negative=False)), np.isposinf(x))
    check(ref(t.isinf(detect_positive=False)), np.isneginf(x))
    check(ref(t.isinf(False, False)), np.zeros(6, bool))
    check(ref(t.isnan()), np.isnan(x), dtype=np.bool_)
    check(ref(t.isfinite()), np.isfinite(x), dtype=np.bool_)
    i = Tensor([[1, -2], [3, 4]], dtype="int64")
    check(ref(i.isinf()), np.zeros((2, 2), bool))
    check(ref(i.isnan()), np.zeros((2, 2), bool))
    check(ref(i.isfinite()), np.ones((2, 2), bool))


def test_isclose_and_allclose_follow_numpy() -> None:
    a = np.array([1.0, 1.0, 1e-7, 1e-9, math.inf, math.inf, math.nan, math.nan, 100.0, -math.inf], np.float32)
    b = np.array([1.0 + 1e-6, 1.1, 0.0, 0.0, math.inf, -math.inf, math.nan, 1.0, 100.001, 1.0], np.float32)
    for kw in ({}, {"equal_nan": True}, {"rtol": 0.2, "atol": 1e-6}, {"rtol": 0.0, "atol": 0.0}):
        check(ref(Tensor(a).isclose(Tensor(b), **kw)), np.isclose(a, b, **kw), dtype=np.bool_)
    check(ref(Tensor([1, 2, 3]).isclose(Tensor([1, 3, 3]))), np.isclose([1, 2, 3], [1, 3, 3]))
    check(ref(Tensor(np.float32([1.0, 2.0])).isclose(2.0)), [False, True])
    x = rand_array((3, 4), seed=5)
    assert Tensor(x).allclose(Tensor(x * (1 + 1e-7))) is True
    assert Tensor(x).allclose(Tensor(x + 1e-3)) is False
    assert Tensor(x).allclose(Tensor(x[:1] * (1 + 1e-7) + 0 * x)) is False  # broadcast rows differ from row 0
    nan = np.array([1.0, math.nan], np.float32)
    assert Tensor(nan).allclose(Tensor(nan)) is False
    assert Tensor(nan).allclose(Tensor(nan), equal_nan=True) is True
    assert Tensor(2.0).allclose(2.0000001) is True


def test_eq_ne_and_bitwise_match_numpy() -> None:
    x, y = rand_array((3, 4), np.int32, seed=1), rand_array((4,), np.int32, seed=2)
    check(ref(Tensor(x).eq(Tensor(y))), x == y, dtype=np.bool_)
    check(ref(Tensor(x).ne(3)), x != 3, dtype=np.bool_)
    check(ref(Tensor(x).bitwise_and(Tensor(y))), x & y, dtype=np.int32)
    check(ref(Tensor(x).bitwise_or(Tensor(y))), x | y, dtype=np.int32)
    check(ref(Tensor(x).bitwise_xor(Tensor(y))), x ^ y, dtype=np.int32)
    check(ref(Tensor(x).bitwise_not()), ~x, dtype=np.int32)
    check(ref(Tensor(x).bitwise_and(6, reverse=True)), 6 & x, dtype=np.int32)
    u = np.array([0, 5, 255], np.uint8)
    check(ref(Tensor(u).bitwise_not()), ~u, dtype=np.uint8)
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    check(ref(Tensor(p).bitwise_and(Tensor(q))), p & q, dtype=np.bool_)
    check(ref(Tensor(p).bitwise_xor(Tensor(q))), p ^ q, dtype=np.bool_)
    check(ref(Tensor(p).bitwise_not()), ~p, dtype=np.bool_)
    f = np.array([1.0, math.nan, -0.0], np.float32)
    check(ref(Tensor(f).eq(Tensor(f))), f == f)
    check(ref(Tensor(f).ne(0.0)), f != 0.0)


# ---- activations ---------------------------------------------------------------------------------------------


def _sig(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


ACTIVATIONS: list[tuple[str, Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = [
    ("celu", lambda t: t.celu(), lambda x: np.maximum(0, x) + np.minimum(0, np.expm1(x))),
    ("celu_half", lambda t: t.celu(alpha=0.5), lambda x: np.maximum(0, x) + np.minimum(0, 0.5 * np.expm1(x / 0.5))),
    ("elu_2", lambda t: t.elu(alpha=2.0), lambda x: np.where(x > 0, x, 2.0 * np.expm1(x))),
    ("selu_args", lambda t: t.selu(alpha=1.5, gamma=2.0), lambda x: 2.0 * np.where(x > 0, x, 1.5 * np.expm1(x))),
    ("softplus_beta", lambda t: t.softplus(beta=2.0), lambda x: np.logaddexp(2 * x, 0) / 2),
    ("softplus_negbeta", lambda t: t.softplus(beta=-0.5), lambda x: np.logaddexp(-0.5 * x, 0) / -0.5),
    ("swish", lambda t: t.swish(), lambda x: x * _sig(x)),
    ("quick_gelu", lambda t: t.quick_gelu(), lambda x: x * _sig(1.702 * x)),
    ("hardsigmoid", lambda t: t.hardsigmoid(), lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    ("hardsigmoid_onnx", lambda t: t.hardsigmoid(0.2, 0.5), lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    ("hardswish", lambda t: t.hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6),
    ("hardtanh", lambda t: t.hardtanh(), lambda x: np.clip(x, -1, 1)),
    ("hardtanh_args", lambda t: t.hardtanh(-2.0, 0.5), lambda x: np.clip(x, -2, 0.5)),
    ("relu6", lambda t: t.relu6(), lambda x: np.clip(x, 0, 6)),
]


@pytest.mark.parametrize("name, fn, want", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activations_match_numpy(name: str, fn: Callable[[Tensor], Tensor], want: Callable[[np.ndarray], np.ndarray]) -> None:
    x = np.concatenate([[0.0, -0.0, 1e-8, -1e-8, 3.0, -3.0, 6.0, 100.0, -100.0], rand_array((300,), seed=7) * 5])
    x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        assert_close(ev(fn, x), want(x.astype(np.float64)), 2e-6, 1e-7, name, signed_zero=False)


def test_activations_at_infinities_and_nan() -> None:
    x = np.array([math.inf, -math.inf, math.nan], np.float32)
    for name, want in {
        "softplus": [math.inf, 0.0, math.nan],
        "logsigmoid": [0.0, -math.inf, math.nan],
        "elu": [math.inf, -1.0, math.nan],
        "softsign": [1.0, -1.0, math.nan],
        "mish": [math.inf, math.nan, math.nan],  # -inf * tanh(0): as numpy's x * tanh(softplus(x))
        "hardswish": [math.inf, math.nan, math.nan],
        "erf": [1.0, -1.0, math.nan],
        "atan": [math.pi / 2, -math.pi / 2, math.nan],
        "sinh": [math.inf, -math.inf, math.nan],
        "cosh": [math.inf, math.inf, math.nan],
        "asinh": [math.inf, -math.inf, math.nan],
    }.items():
        check(ev(method(name), x), np.array(want), rtol=1e-7, atol=0)


def test_softmin_matches_numpy_along_an_axis() -> None:
    x = rand_array((3, 5), seed=9) * 4
    for axis in (-1, 0):
        e = np.exp(-(x - x.min(axis=axis, keepdims=True)))
        check(ref(Tensor(x).softmin(axis)), e / e.sum(axis=axis, keepdims=True), rtol=1e-6, atol=1e-7)
    out = Tensor(x).softmin(dtype="float16")
    assert out.dtype is dtypes.float16
    e = np.exp(-(x - x.min(axis=-1, keepdims=True)))
    check(ref(out), e / e.sum(axis=-1, keepdims=True), rtol=3e-3, atol=3e-3)
    check(ref(Tensor([[1, 2], [3, 3]]).softmin()), [[1 / (1 + math.exp(-1)), 1 - 1 / (1 + math.exp(-1))], [0.5, 0.5]])


# ---- dtype helpers -------------------------------------------------------------------------------------------


def test_dtype_casts_and_properties() -> None:
    x = np.array([1.5, -2.25, 3e4, -0.0], np.float32)
    t = Tensor(x)
    for method, dt, npdt in (("double", dtypes.float64, np.float64), ("long", dtypes.int64, np.int64)):
        out = getattr(t, method)()
        assert out.dtype is dt
        check(run(out), x.astype(npdt), dtype=npdt)
    s = Tensor(np.array([1.5, -2.5, 300.0], np.float32)).short()
    assert s.dtype is dtypes.int16
    check(run(s), np.array([1, -2, 300], np.int16), dtype=np.int16)
    b = Tensor(np.array([1.0, 3.140625, 1.00390625, -7.5], np.float32)).bfloat16()
    assert b.dtype is dtypes.bfloat16
    check(run(b), np.array([1.0, 3.140625, 1.0, -7.5], np.float32), rtol=0, atol=0)  # 1 + 2^-8 rounds to even
    assert t.is_floating_point() and b.is_floating_point() and not Tensor([1]).is_floating_point()
    assert not Tensor([True]).is_floating_point()
    m = Tensor.empty(2, 3, 4, dtype="int16", name="m")
    assert m.element_size() == 2 and m.nbytes() == 48 and t.double().nbytes() == 32 and b.element_size() == 2
    assert m.size() == (2, 3, 4) and m.size(1) == 3 and m.size(-1) == 4 and Tensor(1.0).size() == ()


def test_clone_and_const_like() -> None:
    x = rand_array((2, 3), seed=4)
    t = Tensor(x)
    c = t.clone()
    assert c is not t and c.shape == t.shape and c.dtype is t.dtype
    t.uop = (t + 1).uop  # rebinding the original (as an in-place update would) leaves the clone's value alone
    check(run(c), x, rtol=0, atol=0)
    k = t.const_like(2.5)
    assert k.shape == (2, 3) and k.dtype is dtypes.float32
    check(ref(k), np.full((2, 3), 2.5, np.float32), dtype=np.float32)
    i = Tensor.empty(4, dtype="uint8", name="i").const_like(255)
    assert i.dtype is dtypes.uint8
    check(ref(i), np.full(4, 255, np.uint8), dtype=np.uint8)
    check(ref(t.const_like(7, dtype="int64")), np.full((2, 3), 7), dtype=np.int64)
    check(ref(t.const_like(True, dtype="bool")), np.ones((2, 3), bool), dtype=np.bool_)
    check(ref(Tensor(3).const_like(-4)), np.array(-4, np.int32), dtype=np.int32)
    check(ref(t.const_like(-math.inf)), np.full((2, 3), -np.inf, np.float32), dtype=np.float32)
    check(ref(t.half().const_like(65504)), np.full((2, 3), 65504, np.float16), dtype=np.float16)


# ---- diagnostics ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, err",
    [
        (lambda f, i: f.bitwise_and(i), DTypeError),
        (lambda f, i: f.bitwise_or(1), DTypeError),
        (lambda f, i: i.bitwise_xor(1.5), DTypeError),
        (lambda f, i: f.bitwise_not(), DTypeError),
        (lambda f, i: Tensor([True]).copysign(Tensor([False])), DTypeError),
        (lambda f, i: Tensor([True]).fmod(True), DTypeError),
        (lambda f, i: f.fmod("a"), InvalidArgument),
        (lambda f, i: f.lerp(i, "w"), InvalidArgument),
        (lambda f, i: f.logaddexp(object()), InvalidArgument),
        (lambda f, i: i.fmod(1 << 40), DTypeError),
        (lambda f, i: f.softplus(beta=0), InvalidArgument),
        (lambda f, i: f.softplus(beta="2"), InvalidArgument),
        (lambda f, i: f.celu(alpha=0.0), InvalidArgument),
        (lambda f, i: f.elu(alpha=math.nan), InvalidArgument),
        (lambda f, i: f.selu(gamma=None), InvalidArgument),
        (lambda f, i: f.hardsigmoid(alpha=True), InvalidArgument),
        (lambda f, i: f.hardtanh(1.0, -1.0), InvalidArgument),
        (lambda f, i: f.isclose(f, rtol="big"), InvalidArgument),
        (lambda f, i: f.isclose(f, atol=math.inf), InvalidArgument),
        (lambda f, i: f.isclose(f, equal_nan=1), InvalidArgument),
        (lambda f, i: f.isclose(Tensor.empty(4, name="y")), BroadcastMismatch),
        (lambda f, i: f.isinf(detect_positive=1), InvalidArgument),
        (lambda f, i: f.softmin(dtype="int32"), DTypeError),
        (lambda f, i: f.softmin(dtype="float128"), DTypeError),
        (lambda f, i: f.softmin(axis=3), AxisError),
        (lambda f, i: f.size(2), AxisError),
        (lambda f, i: f.size(-3), AxisError),
        (lambda f, i: f.size(1.0), InvalidArgument),
        (lambda f, i: Tensor(1.0).size(0), AxisError),
        (lambda f, i: i.const_like(1.5), DTypeError),
        (lambda f, i: i.const_like(math.nan), DTypeError),
        (lambda f, i: Tensor.empty(2, dtype="uint8", name="u").const_like(256), DTypeError),
        (lambda f, i: Tensor.empty(2, dtype="int8", name="s").const_like(-129), DTypeError),
        (lambda f, i: f.const_like(2, dtype="bool"), DTypeError),
        (lambda f, i: f.const_like("1"), InvalidArgument),
        (lambda f, i: f.const_like(1e39), DTypeError),
        (lambda f, i: f.const_like(10**400), DTypeError),
        (lambda f, i: f.half().const_like(70000.0), DTypeError),
        (lambda f, i: f.const_like(1, dtype="nope"), DTypeError),
    ],
)
def test_bad_inputs_raise_diagnostics(make: Callable[[Tensor, Tensor], Any], err: type[Exception]) -> None:
    f, i = Tensor.empty(2, 3, name="f"), Tensor.empty(2, 3, dtype="int32", name="i")
    with pytest.raises(err) as info:
        make(f, i)
    assert type(info.value).__module__ == "egraph_compiler.ir.diagnostics"


def test_allclose_of_a_placeholder_says_which_input_is_missing() -> None:
    x = Tensor.empty(3, name="x")
    with pytest.raises(MissingInput, match="'x'"):
        x.allclose(x + 0)


# ---- hypothesis: the delicate functions over all float32 values, through the reference interpreter ------------

FLOATS = st.floats(width=32, allow_nan=True, allow_infinity=True)
EDGES = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-38, -1e-45, 1e-7, 0.5, 1.0, -1.0, 89.4, F32_MAX])
VALUES = st.lists(st.one_of(FLOATS, EDGES), min_size=1, max_size=12)


@settings(max_examples=examples(60))
@given(st.sampled_from(sorted(n for n in UNARY if n != "round")), VALUES)
def test_unary_functions_over_any_float32(name: str, xs: list[float]) -> None:
    fn, rtol, atol = UNARY[name]
    x = np.array(xs, np.float32)
    with np.errstate(all="ignore"):
        want = fn(x.astype(np.float64))
    assert_close(ev(method(name), x), want, rtol, atol, name)


@settings(max_examples=examples(40))
@given(VALUES)
def test_round_over_any_float32(xs: list[float]) -> None:
    x = np.array(xs, np.float32)
    got = ev(lambda t: t.round(), x)
    np.testing.assert_array_equal(got, np.round(x))
    assert np.array_equal(np.signbit(got), np.signbit(np.round(x)))


@settings(max_examples=examples(40))
@given(st.lists(st.tuples(st.one_of(FLOATS, EDGES), st.one_of(FLOATS, EDGES)), min_size=1, max_size=10))
def test_binary_functions_over_any_float32(pairs: list[tuple[float, float]]) -> None:
    a = np.array([p[0] for p in pairs], np.float32)
    b = np.array([p[1] for p in pairs], np.float32)
    ta, tb = Tensor.empty(a.shape, name="a"), Tensor.empty(b.shape, name="b")
    outs = (ta.logaddexp(tb), ta.copysign(tb), ta.fmod(tb), ta.isclose(tb), ta.isclose(tb, rtol=1e-3, equal_nan=True))
    got = evaluate([o.uop for o in outs], {"a": a, "b": b})
    with np.errstate(all="ignore"):
        assert_close(got[0], np.logaddexp(a.astype(np.float64), b.astype(np.float64)), 5e-7, 0.0, "logaddexp")
        np.testing.assert_array_equal(got[1], np.copysign(a, b))
        assert np.array_equal(np.signbit(got[1]), np.signbit(np.copysign(a, b)))
        want = np.fmod(a, b)
        exact = np.abs(a.astype(np.float64) / b.astype(np.float64)) < 2.0**29  # the documented exact range
        exact |= ~np.isfinite(a) | ~np.isfinite(b) | (b == 0)
        np.testing.assert_array_equal(got[2][exact], want[exact])
        check(got[3], np.isclose(a, b))
        check(got[4], np.isclose(a, b, rtol=1e-3, equal_nan=True))


@settings(max_examples=examples(30))
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=10))
def test_int_fmod_over_any_int32(pairs: list[tuple[int, int]]) -> None:
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] for p in pairs], np.int32)
    b = np.where((a == -(2**31)) & (b == -1), 1, b).astype(np.int32)  # INT_MIN % -1 overflows in C
    with np.errstate(all="ignore"):
        check(ref(Tensor(a).fmod(Tensor(b))), np.fmod(a, b), dtype=np.int32)


# ---- through the compiler: many outputs, one optimize ---------------------------------------------------------


def test_compiled_llvm_matches_numpy() -> None:
    """Every function of the file in one program through optimize and LLVM (whose exp2/log2 differ from numpy's
    by an ulp or so), against numpy."""
    x = spread(200, seed=11)
    y = np.concatenate([rand_array((x.size - 10,), seed=12) * 3, [0.0, -0.0, math.inf, -1.0, 2.0, 1e10, 3, -0.5, 7, 1e-3]])
    y = y.astype(np.float32)
    z = rand_array((4, 50), seed=15) * 5
    xi = rand_array((x.size,), np.int32, seed=13, lo=-50, hi=50)
    yi = np.where(xi == 0, 7, rand_array((x.size,), np.int32, seed=14, lo=-9, hi=9)).astype(np.int32)
    tx, ty, tz = Tensor.empty(x.shape, name="x"), Tensor.empty(y.shape, name="y"), Tensor.empty(z.shape, name="z")
    ti, tj = Tensor.empty(x.shape, dtype="int32", name="i"), Tensor.empty(x.shape, dtype="int32", name="j")
    unary = sorted(UNARY)
    acts = ACTIVATIONS[:8]
    outs = [getattr(tx, n)() for n in unary] + [fn(tx) for _, fn, _ in acts]
    outs += [tx.logaddexp(ty), tx.copysign(ty), tx.fmod(ty), tx.lerp(ty, 0.3), tx.isclose(ty, rtol=0.5)]
    outs += [tx.isinf(), tx.isnan(), tx.isfinite(), ti.fmod(tj), ti.bitwise_xor(tj), ti.bitwise_not(), ti.eq(tj)]
    outs += [tz.softmin(0), ti.copysign(tj), tx.double(), ti.short(), tz.bfloat16(), tx.round()]
    prog = optimize(outs, target="llvm")
    got = prog(x=x, y=y, z=z, i=xi, j=yi)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        for k, n in enumerate(unary):
            fn, rtol, atol = UNARY[n]
            assert_close(got[k], fn(x64), 2 * rtol, atol, f"llvm {n}")
        for k, (name, _, want) in enumerate(acts, len(unary)):
            assert_close(got[k], want(x64), 4e-6, 1e-7, f"llvm {name}", signed_zero=False)
        k = len(unary) + len(acts)
        assert_close(got[k], np.logaddexp(x64, y64), 1e-6, 0.0, "llvm logaddexp")
        np.testing.assert_array_equal(got[k + 1], np.copysign(x, y))
        exact = (np.abs(x64 / y64) < 2.0**29) | ~np.isfinite(x) | ~np.isfinite(y) | (y == 0)
        np.testing.assert_array_equal(got[k + 2][exact], np.fmod(x, y)[exact])
        check(got[k + 3], x + np.float32(0.3) * (y - x), rtol=1e-5, atol=1e-5)
        check(got[k + 4], np.isclose(x, y, rtol=0.5))
        check(got[k + 5], np.isinf(x))
        check(got[k + 6], np.isnan(x))
        check(got[k + 7], np.isfinite(x))
        check(got[k + 8], np.fmod(xi, yi), dtype=np.int32)
        check(got[k + 9], xi ^ yi, dtype=np.int32)
        check(got[k + 10], ~xi, dtype=np.int32)
        check(got[k + 11], xi == yi)
        e = np.exp(-(z - z.min(axis=0)))
        check(got[k + 12], e / e.sum(axis=0), rtol=1e-5, atol=1e-7)
        check(got[k + 13], np.where(yi < 0, -np.abs(xi), np.abs(xi)), dtype=np.int32)
        check(got[k + 14], x64, dtype=np.float64)
        check(got[k + 15], xi.astype(np.int16), dtype=np.int16)
        check(got[k + 16], z, rtol=2**-8, atol=0)
        np.testing.assert_array_equal(got[k + 17], np.round(x))


# ---- against tinygrad ------------------------------------------------------------------------------------------


def test_against_tinygrad() -> None:
    """tinygrad's own results (on its CPU device, stacked into one kernel: each kernel costs a clang compile)."""
    tinygrad = tinygrad_cpu_or_skip()
    x = np.array([-3.5, -2.5, -1.3, -0.5, -1e-3, 0.0, 0.4, 0.5, 1.5, 2.5, 3.7, 20.0], np.float32)
    y = np.array([1.5, -2.0, 0.7, 3.0, 2.0, 1.0, -1.0, 0.3, -0.25, 2.0, 1.5, -7.0], np.float32)
    names = ["round", "hardswish", "hardsigmoid", "relu6", "softsign", "quick_gelu", "elu", "celu", "softplus", "mish"]
    names += ["asinh", "atan", "erf", "sinh", "logsigmoid", "selu", "softmin", "swish", "hardtanh", "cosh", "log10"]

    def build(t: Any, u: Any) -> list[Any]:
        outs = [getattr(t, n)() for n in names]
        return outs + [t.fmod(u), t.copysign(u), t.logaddexp(u), t.lerp(u, 0.25), t.isclose(u, rtol=0.5).float()]

    theirs = build(tinygrad.Tensor(x, device="CPU"), tinygrad.Tensor(y, device="CPU"))
    want = tinygrad.Tensor.stack(*theirs).numpy()
    ours = build(Tensor(x), Tensor(y))
    assert [(o.dtype.itemsize, o.dtype.is_float) for o in ours] == [
        (t.dtype.itemsize, tinygrad.dtypes.is_float(t.dtype)) for t in theirs
    ]
    got = ref(ours[0].stack(*ours[1:]))
    assert got.shape == want.shape == (len(ours), x.size)
    for name, g, w in zip([*names, "fmod", "copysign", "logaddexp", "lerp", "isclose"], got, want):
        # tinygrad's erf is Abramowitz-Stegun 7.1.26 (1.5e-7 absolute), its selu constants 6 digits (2e-6 relative),
        # its asinh/sinh lose digits near 0 (absolute error ~1e-7 at x = -1e-3)
        assert np.array_equal(np.isnan(g), np.isnan(w)), name
        check(g, w, rtol=1e-5, atol=3e-7)
