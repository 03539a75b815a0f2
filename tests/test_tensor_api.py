"""The Tensor API against numpy, one feature at a time (ints exact, floats rtol=atol=1e-5)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import check, rand_array, run, tinygrad_cpu_or_skip

from egraph_compiler import Tensor
from egraph_compiler.ir.diagnostics import MissingInput
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.interpret import evaluate

A = rand_array((3, 4), seed=1)
B = rand_array((4, 5), seed=2)
I = rand_array((3, 4), np.int32, seed=3)  # noqa: E741
J = rand_array((3, 4), np.int32, seed=4, lo=1, hi=9)  # non-zero divisors


# ---- creation ----------------------------------------------------------------------------------


def test_tensor_from_numpy_list_and_scalar() -> None:
    check(run(Tensor(A)), A, dtype=np.float32)
    check(run(Tensor(I)), I, dtype=np.int32)
    check(run(Tensor([[1, 2], [3, 4]])), np.array([[1, 2], [3, 4]]), dtype=np.int32)  # lists default to int32
    check(run(Tensor([1.5, 2.0])), np.array([1.5, 2.0]), dtype=np.float32)  # ... and float32
    check(run(Tensor([True, False])), np.array([True, False]), dtype=np.bool_)
    check(run(Tensor(3)), np.array(3), dtype=np.int32)
    check(run(Tensor(2.5)), np.array(2.5), dtype=np.float32)
    check(run(Tensor(np.array([1, 2], np.uint16))), np.array([1, 2]), dtype=np.uint16)
    check(run(Tensor([1, 2], dtype="float16")), np.array([1, 2]), dtype=np.float16)


def test_shape_dtype_and_numpy_properties() -> None:
    t = Tensor(A)
    assert t.shape == (3, 4) and t.dtype is dtypes.float32 and t.ndim == 2 and t.numel() == 12
    assert Tensor(I).dtype is dtypes.int32
    assert isinstance(t.numpy(), np.ndarray)


def test_empty_is_a_named_placeholder() -> None:
    x = Tensor.empty(2, 3, dtype="float16", name="xin")
    assert x.shape == (2, 3) and x.dtype is dtypes.float16
    val = rand_array((2, 3), np.float16)
    check(evaluate((x * 2).uop, {"xin": val}), val * np.float16(2), dtype=np.float16)
    with pytest.raises(MissingInput):
        (x * 2).numpy()
    with pytest.raises(MissingInput):
        evaluate(x.uop, {"xin": np.zeros((3, 2), np.float16)})


def test_zeros_ones_full_arange() -> None:
    check(run(Tensor.zeros(2, 3)), np.zeros((2, 3)), dtype=np.float32)
    check(run(Tensor.ones((2, 3), dtype="int8")), np.ones((2, 3)), dtype=np.int8)
    check(run(Tensor.full((2, 2), 7)), np.full((2, 2), 7), dtype=np.int32)
    check(run(Tensor.full(3, 1.5)), np.full(3, 1.5), dtype=np.float32)
    check(run(Tensor.arange(5)), np.arange(5), dtype=np.int32)
    check(run(Tensor.arange(2, 11, 3)), np.arange(2, 11, 3))
    check(run(Tensor.arange(5, 0, -2)), np.arange(5, 0, -2))
    check(run(Tensor.arange(0, 1, 0.25)), np.arange(0, 1, 0.25), dtype=np.float32)


def test_rand_is_uniform_and_reproducible_from_its_seed() -> None:
    a, b, c = Tensor.rand(4, 5, seed=7).numpy(), Tensor.rand(4, 5, seed=7).numpy(), Tensor.rand(4, 5, seed=8).numpy()
    assert a.shape == (4, 5) and a.dtype == np.float32
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert ((a >= 0) & (a < 1)).all()
    assert np.array_equal(Tensor.rand(3, seed=-1).numpy(), Tensor.rand(3, seed=-1).numpy())


# ---- elementwise, promotion, comparisons --------------------------------------------------------

BINARY: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("add", lambda p, q: p + q),
    ("sub", lambda p, q: p - q),
    ("mul", lambda p, q: p * q),
    ("lt", lambda p, q: p < q),
    ("gt", lambda p, q: p > q),
    ("le", lambda p, q: p <= q),
    ("ge", lambda p, q: p >= q),
    ("eq", lambda p, q: p == q),
    ("ne", lambda p, q: p != q),
]


@pytest.mark.parametrize(("name", "fn"), BINARY, ids=[b[0] for b in BINARY])
def test_binary_ops_broadcast_like_numpy(name: str, fn: Callable) -> None:
    row, col = rand_array((1, 4), seed=5), rand_array((3, 1), seed=6)
    check(run(fn(Tensor(A), Tensor(row))), fn(A, row))
    check(run(fn(Tensor(col), Tensor(row))), fn(col, row))
    check(run(fn(Tensor(I), Tensor(J[0]))), fn(I, J[0]))
    check(run(fn(Tensor(A), 0.5)), fn(A, np.float32(0.5)))
    check(run(fn(2, Tensor(I))), fn(np.int32(2), I))


def test_division_floor_division_and_modulo() -> None:
    check(run(Tensor(A) / Tensor(B[0, :4])), A / B[0, :4])
    check(run(Tensor(I) / Tensor(J)), (I / J).astype(np.float32), dtype=np.float32)  # int/int -> float32
    check(run(Tensor(I) // Tensor(J)), I // J, dtype=np.int32)  # floor division
    check(run(Tensor(I) % Tensor(J)), I % J, dtype=np.int32)  # floor remainder
    check(run(Tensor(I) // -3), I // -3)
    check(run(Tensor(I) % -3), I % -3)
    check(run(17 // Tensor(J)), 17 // J)
    f = np.array([-7.5, -0.5, 0.5, 7.5], np.float32)
    check(run(Tensor(f) // 2), f // 2)
    check(run(Tensor(f) % 2), f % 2)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (np.int8, np.int16),
        (np.int8, np.uint8),
        (np.uint8, np.float16),
        (np.int32, np.float32),
        (np.int64, np.uint32),
        (np.float16, np.float32),
        (np.bool_, np.int8),
        (np.uint16, np.int16),
        (np.int32, np.float64),
    ],
)
def test_tensor_tensor_promotion_follows_numpy(a: Any, b: Any) -> None:
    x, y = rand_array((2, 3), a, seed=1), rand_array((2, 3), b, seed=2)
    check(run(Tensor(x) + Tensor(y)), x + y, dtype=np.result_type(a, b))
    check(run(Tensor(x) * Tensor(y)), x * y, dtype=np.result_type(a, b))
    check(run(Tensor(x) < Tensor(y)), x < y, dtype=np.bool_)


def test_python_scalars_are_weak() -> None:
    x8 = np.array([1, -2, 3], np.int8)
    check(run(Tensor(x8) + 3), x8 + 3, dtype=np.int8)
    check(run(Tensor(x8) * 2.5), x8 * np.float32(2.5), dtype=np.float32)
    h = np.array([1.5, 2.25], np.float16)
    check(run(Tensor(h) * 3), h * 3, dtype=np.float16)
    check(run(Tensor(h) + 0.1), h + np.float16(0.1), dtype=np.float16)
    check(run(Tensor([True, False]) + 1), np.array([2, 1]), dtype=np.int32)


def test_subtraction_promotes_before_negating() -> None:
    u8 = np.array([1, 2, 200], np.uint8)
    check(run(2.5 - Tensor(u8)), 2.5 - u8.astype(np.float32), dtype=np.float32)
    check(run(Tensor(np.float32([1, 2, 3])) - Tensor(u8)), np.float32([1, 2, 3]) - u8)
    i8 = np.array([-128, 5], np.int8)
    check(run(Tensor(np.array([1, 1], np.int16)) - Tensor(i8)), np.int16(1) - i8, dtype=np.int16)
    check(run(Tensor(np.array([3, 3], np.int8)) - Tensor([True, False])), np.array([2, 3]), dtype=np.int8)
    check(run(2 - Tensor([True, False])), np.array([1, 2]), dtype=np.int32)
    check(run(Tensor(u8) - Tensor(np.array([2, 2, 2], np.uint8))), u8 - np.uint8(2), dtype=np.uint8)  # wraps


def test_where_maximum_minimum() -> None:
    check(run((Tensor(A) > 0).where(Tensor(A), 0.5)), np.where(A > 0, A, np.float32(0.5)))
    check(run(Tensor(I).where(1, 2)), np.where(I != 0, 1, 2))
    check(run((Tensor(I) > 0).where(Tensor(I), Tensor(A))), np.where(I > 0, I, A))
    check(run(Tensor(A).maximum(Tensor(A[0]))), np.maximum(A, A[0]))
    check(run(Tensor(A).minimum(0.25)), np.minimum(A, np.float32(0.25)))
    check(run(Tensor(I).maximum(Tensor(J))), np.maximum(I, J))
    check(run(Tensor(I).minimum(Tensor(J))), np.minimum(I, J))


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.int64, np.uint8])
def test_integer_minimum_and_min_are_exact_at_the_dtype_limits(dt: Any) -> None:
    info = np.iinfo(dt)
    x = np.array([info.min, 5, info.max, 0], dt)
    y = np.array([5, info.min, info.min, info.max], dt)
    check(run(Tensor(x).minimum(Tensor(y))), np.minimum(x, y), dtype=dt)
    check(run(Tensor(x).min()), x.min(), dtype=dt)
    check(run(Tensor(x).max()), x.max(), dtype=dt)


UNARY: list[tuple[str, Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = [
    ("relu", Tensor.relu, lambda x: np.maximum(x, 0)),
    ("sigmoid", Tensor.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    ("tanh", Tensor.tanh, np.tanh),
    ("gelu", Tensor.gelu, lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
    ("exp", Tensor.exp, np.exp),
    ("sin", Tensor.sin, np.sin),
    ("cos", Tensor.cos, np.cos),
    ("abs", Tensor.abs, np.abs),
    ("neg", lambda t: -t, np.negative),
    ("reciprocal", Tensor.reciprocal, lambda x: 1 / x),
    ("square", lambda t: t * t, np.square),
]


@pytest.mark.parametrize(("name", "fn", "ref"), UNARY, ids=[u[0] for u in UNARY])
def test_unary_math_matches_numpy(name: str, fn: Callable, ref: Callable) -> None:
    x = rand_array((4, 5), seed=11) * 3
    check(run(fn(Tensor(x))), ref(x.astype(np.float64)), rtol=1e-5, atol=1e-5)


def test_log_and_sqrt_including_edge_values() -> None:
    x = np.array([0.0, 0.5, 1.0, 2.0, 1e-30, 1e30, np.inf, -1.0], np.float32)
    with np.errstate(all="ignore"):
        check(run(Tensor(x).log()), np.log(x))
        check(run(Tensor(x).sqrt()), np.sqrt(x))
        check(run(Tensor(x).exp()), np.exp(x.astype(np.float64)))


def test_int_inputs_to_float_math_become_float32() -> None:
    check(run(Tensor(I).sqrt()), np.sqrt(np.abs(I)) * np.where(I < 0, np.nan, 1), dtype=np.float32)
    check(run(Tensor(I).abs()), np.abs(I), dtype=np.int32)
    check(run(Tensor(I).relu()), np.maximum(I, 0), dtype=np.int32)
    check(run(Tensor(I).sigmoid()), 1 / (1 + np.exp(-I.astype(np.float64))), dtype=np.float32)


def test_cast() -> None:
    f = np.array([1.7, -1.7, 0.0, 300.5, -0.2], np.float32)
    check(run(Tensor(f).cast("int32")), f.astype(np.int32), dtype=np.int32)  # truncates toward zero
    check(run(Tensor(f).cast(dtypes.bool)), f.astype(bool))
    check(run(Tensor(f).cast("float16")), f.astype(np.float16), dtype=np.float16)
    check(run(Tensor(np.array([300, -1], np.int32)).cast("uint8")), np.array([300, -1]).astype(np.uint8))
    check(run(Tensor([True, False]).cast("float32")), np.array([1.0, 0.0]), dtype=np.float32)


# ---- movement ----------------------------------------------------------------------------------

X3 = rand_array((2, 3, 4), seed=21)


@pytest.mark.parametrize(
    ("name", "fn", "ref"),
    [
        ("reshape", lambda t: t.reshape(4, 6), lambda x: x.reshape(4, 6)),
        ("reshape-1", lambda t: t.reshape(-1, 4), lambda x: x.reshape(-1, 4)),
        ("reshape-tuple", lambda t: t.reshape((3, -1)), lambda x: x.reshape(3, -1)),
        ("permute", lambda t: t.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
        ("transpose", lambda t: t.transpose(0, 2), lambda x: x.swapaxes(0, 2)),
        ("T", lambda t: t.T, lambda x: x.T),
        ("expand", lambda t: t[:, :1].expand(2, 5, 4), lambda x: np.broadcast_to(x[:, :1], (2, 5, 4))),
        ("expand-new-axis", lambda t: t.expand(3, 2, 3, 4), lambda x: np.broadcast_to(x, (3, 2, 3, 4))),
        ("pad", lambda t: t.pad(((1, 0), (0, 2), (1, 1))), lambda x: np.pad(x, ((1, 0), (0, 2), (1, 1)))),
        (
            "pad-value",
            lambda t: t.pad(((0, 0), (1, 1), (0, 0)), value=-2.0),
            lambda x: np.pad(x, ((0, 0), (1, 1), (0, 0)), constant_values=-2),
        ),
        ("shrink", lambda t: t.shrink(((1, 2), (0, 3), (1, 3))), lambda x: x[1:2, 0:3, 1:3]),
        ("flip", lambda t: t.flip(1), lambda x: np.flip(x, 1)),
        ("flip-many", lambda t: t.flip((0, -1)), lambda x: np.flip(x, (0, 2))),
        ("getitem-int", lambda t: t[1], lambda x: x[1]),
        ("getitem-neg", lambda t: t[-1, -2], lambda x: x[-1, -2]),
        ("getitem-slices", lambda t: t[:, 1:, ::2], lambda x: x[:, 1:, ::2]),
        ("getitem-neg-step", lambda t: t[::-1, ::-2, 3:0:-2], lambda x: x[::-1, ::-2, 3:0:-2]),
        ("getitem-none", lambda t: t[None, 0, None, :, 1], lambda x: x[None, 0, None, :, 1]),
        ("getitem-ellipsis", lambda t: t[..., 1:3], lambda x: x[..., 1:3]),
        ("getitem-step3", lambda t: t[:, :, ::3], lambda x: x[:, :, ::3]),
        ("getitem-scalar", lambda t: t[1, 2, 3], lambda x: x[1, 2, 3]),
        ("flatten", lambda t: t.flatten(1), lambda x: x.reshape(2, 12)),
        ("unsqueeze", lambda t: t.unsqueeze(-1), lambda x: x[..., None]),
    ],
)
def test_movement_matches_numpy(name: str, fn: Callable, ref: Callable) -> None:
    check(run(fn(Tensor(X3))), ref(X3))


def test_cat_and_stack() -> None:
    a, b = rand_array((2, 3), seed=1), rand_array((2, 5), seed=2)
    check(run(Tensor(a).cat(Tensor(b), dim=1)), np.concatenate([a, b], 1))
    check(run(Tensor(a).cat(Tensor(a), Tensor(a), dim=0)), np.concatenate([a, a, a], 0))
    check(run(Tensor.cat(Tensor(a), Tensor(a), dim=-1)), np.concatenate([a, a], -1))
    want = np.concatenate([np.int32([1, 2]), np.float32([3.5])])  # promoted like numpy: float64
    check(run(Tensor([1, 2]).cat(Tensor([3.5]))), want, dtype=want.dtype)
    check(run(Tensor(a).stack(Tensor(a * 2), dim=1)), np.stack([a, a * 2], 1))
    check(run(Tensor.stack(Tensor(a), Tensor(a), Tensor(a))), np.stack([a, a, a]))


# ---- reductions --------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (0, 1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_with_axis_and_keepdim(axis: Any, keepdim: bool) -> None:
    t, ti = Tensor(X3), Tensor(rand_array((2, 3, 4), np.int32, seed=5, lo=-3, hi=4))
    xi = ti.numpy()
    check(run(t.sum(axis, keepdim)), X3.sum(axis, keepdims=keepdim))
    check(run(t.max(axis, keepdim)), X3.max(axis, keepdims=keepdim))
    check(run(t.min(axis, keepdim)), X3.min(axis, keepdims=keepdim))
    check(run(t.mean(axis, keepdim)), X3.mean(axis, keepdims=keepdim))
    check(run(t.prod(axis, keepdim)), X3.prod(axis, keepdims=keepdim))
    check(run(ti.sum(axis, keepdim)), xi.sum(axis, keepdims=keepdim))
    check(run(ti.prod(axis, keepdim)), xi.prod(axis, keepdims=keepdim))
    check(run(ti.max(axis, keepdim)), xi.max(axis, keepdims=keepdim))


def test_reduction_accumulation_dtypes() -> None:
    i8 = np.full(300, 100, np.int8)
    check(run(Tensor(i8).sum()), np.int32(30000), dtype=np.int32)  # small ints accumulate in int32
    check(run(Tensor(np.full(40, 200, np.uint8)).sum()), np.uint32(8000), dtype=np.uint32)
    check(run(Tensor(np.ones(10, bool)).sum()), np.int32(10), dtype=np.int32)
    h = np.full(4096, 1.0, np.float16)  # exact in float32, not when accumulated in float16
    check(run(Tensor(h).sum()), np.float16(4096), dtype=np.float16)
    check(run(Tensor(I).mean()), I.mean(), dtype=np.float32)


# ---- matmul, nn ops ----------------------------------------------------------------------------


def test_matmul_dot_and_at_operator() -> None:
    check(run(Tensor(A) @ Tensor(B)), A @ B)
    check(run(Tensor(A).matmul(Tensor(B))), A @ B)
    check(run(Tensor(A).dot(Tensor(B))), A @ B)
    v = rand_array((4,), seed=3)
    check(run(Tensor(A) @ Tensor(v)), A @ v)
    check(run(Tensor(v) @ Tensor(B)), v @ B)
    check(run(Tensor(v) @ Tensor(v)), v @ v)
    ba, bb = rand_array((2, 1, 3, 4), seed=4), rand_array((5, 4, 2), seed=5)
    check(run(Tensor(ba) @ Tensor(bb)), ba @ bb)
    ii, jj = rand_array((3, 4), np.int32, seed=6), rand_array((4, 2), np.int32, seed=7)
    check(run(Tensor(ii) @ Tensor(jj)), ii @ jj, dtype=np.int32)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def test_softmax_log_softmax_layernorm() -> None:
    x = rand_array((3, 5), seed=9).astype(np.float64) * 4
    t = Tensor(x.astype(np.float32))
    check(run(t.softmax()), _softmax(x, -1))
    check(run(t.softmax(0)), _softmax(x, 0))
    check(run(t.log_softmax()), np.log(_softmax(x, -1)))
    check(run(t.log_softmax(axis=0)), np.log(_softmax(x, 0)))
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    check(run(t.layernorm()), (x - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    mu0, var0 = x.mean(0, keepdims=True), x.var(0, keepdims=True)
    check(run(t.layernorm(axis=0, eps=1e-3)), (x - mu0) / np.sqrt(var0 + 1e-3), rtol=1e-4, atol=1e-5)


def conv2d_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, padding: int, dilation: int, groups: int
) -> np.ndarray:
    """Direct loops over output positions (float64)."""
    n = x.shape[0]
    cout, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    ho = (xp.shape[2] - dilation * (kh - 1) - 1) // stride + 1
    wo = (xp.shape[3] - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, cout, ho, wo))
    for o in range(cout):
        g = o // (cout // groups)
        for i in range(ho):
            for j in range(wo):
                patch = xp[
                    :,
                    g * cg : (g + 1) * cg,
                    i * stride : i * stride + dilation * (kh - 1) + 1 : dilation,
                    j * stride : j * stride + dilation * (kw - 1) + 1 : dilation,
                ]
                out[:, o, i, j] = (patch * w[o]).sum((1, 2, 3))
    return out if b is None else out + b.reshape(1, -1, 1, 1)


@pytest.mark.parametrize("width", [6, 12])  # outputs narrower than 5 take the im2col + GEMM lowering
@pytest.mark.parametrize(
    ("stride", "padding", "dilation", "groups", "bias"),
    [
        (1, 0, 1, 1, False),
        (2, 1, 1, 1, True),
        (1, 2, 2, 1, False),
        (3, 1, 1, 2, True),
        (2, 0, 2, 2, False),
    ],
)
def test_conv2d_matches_direct_convolution(
    stride: int, padding: int, dilation: int, groups: int, bias: bool, width: int
) -> None:
    x, w = rand_array((2, 4, 7, width), seed=31), rand_array((6, 4 // groups, 3, 2), seed=32)
    b = rand_array((6,), seed=33) if bias else None
    got = Tensor(x).conv2d(
        Tensor(w), None if b is None else Tensor(b), stride=stride, padding=padding, dilation=dilation, groups=groups
    )
    check(run(got), conv2d_ref(x, w, b, stride, padding, dilation, groups), rtol=1e-5, atol=1e-5)


def _sdpa_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return _softmax(s, -1) @ v


def test_scaled_dot_product_attention() -> None:
    q, k, v = rand_array((2, 3, 5, 4), seed=41), rand_array((2, 3, 6, 4), seed=42), rand_array((2, 3, 6, 3), seed=43)
    check(run(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v))), _sdpa_ref(q, k, v, None))
    causal = np.tril(np.ones((5, 6), bool))
    check(run(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True)), _sdpa_ref(q, k, v, causal))
    bmask = np.random.default_rng(0).random((5, 6)) < 0.6
    bmask[:, 0] = True
    check(run(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(bmask))), _sdpa_ref(q, k, v, bmask))
    fmask = rand_array((5, 6), seed=44)
    check(run(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=Tensor(fmask))), _sdpa_ref(q, k, v, fmask))


# ---- the spec's compositions -------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(axis: int) -> None:
    check(run(Tensor(X3).cumsum(axis)), np.cumsum(X3, axis))
    xi = rand_array((3, 4), np.int8, seed=2)
    check(run(Tensor(xi).cumsum(axis if axis != 1 else 0)), np.cumsum(xi, axis if axis != 1 else 0, dtype=np.int32))
    check(run(Tensor(2.5).cumsum()), np.array(2.5))


def _torch_gather(x: np.ndarray, dim: int, idx: np.ndarray) -> np.ndarray:
    out = np.empty(idx.shape, x.dtype)
    for pos in np.ndindex(*idx.shape):
        src = list(pos)
        src[dim] = idx[pos]
        out[pos] = x[tuple(src)]
    return out


def _torch_scatter_add(x: np.ndarray, dim: int, idx: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = x.astype(np.float64)
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        out[tuple(tgt)] += src[pos]
    return out


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather_along_each_dim(dim: int) -> None:
    idx_shape = tuple(4 if d == dim % 3 else s for d, s in enumerate((2, 2, 3)))
    idx = np.random.default_rng(dim + 5).integers(0, X3.shape[dim], idx_shape).astype(np.int32)
    check(run(Tensor(X3).gather(dim, Tensor(idx))), _torch_gather(X3, dim % 3, idx))


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_scatter_add_along_each_dim(dim: int) -> None:
    idx_shape = tuple(3 if d == dim else s for d, s in enumerate((2, 2, 3)))
    idx = np.random.default_rng(dim).integers(0, X3.shape[dim], idx_shape).astype(np.int64)
    src = rand_array((3, 3, 4), seed=dim + 50)  # at least as large as idx
    check(run(Tensor(X3).scatter_add(dim, Tensor(idx), Tensor(src))), _torch_scatter_add(X3, dim, idx, src))


def test_programs_compose_many_features() -> None:
    x, w1, w2 = rand_array((4, 6), seed=60), rand_array((6, 8), seed=61), rand_array((8, 3), seed=62)
    h = np.maximum(x @ w1, 0)
    want = _softmax(h @ w2, -1).sum(0)
    got = ((Tensor(x) @ Tensor(w1)).relu() @ Tensor(w2)).softmax().sum(0)
    check(run(got), want)


@pytest.mark.parametrize("target", ["llvm", "reference"])
def test_inputs_are_never_changed_silently(target: str) -> None:
    """An input converts to its placeholder's dtype only when every value survives exactly; a wrong shape is
    refused even when the element count matches. The diagnostic says what to convert."""
    from egraph_compiler import optimize

    i = Tensor.empty(3, dtype="int32", name="i")
    f = Tensor.empty(2, 2, dtype="float32", name="f")
    pi, pf = optimize(i + 1, target=target), optimize(f * 2, target=target)
    np.testing.assert_array_equal(pi(i=np.array([1, 2, 3], np.int64)), [2, 3, 4])  # exact: accepted
    np.testing.assert_array_equal(pf(f=np.array([[1.5, 2], [3, -4]])), [[3, 4], [6, -8]])  # float64, exact
    with pytest.raises(MissingInput, match="exactly") as e:
        pi(i=np.array([1, 2, 2**40 + 5], np.int64))  # would wrap to 5
    assert "np.asarray" in str(e.value)
    with pytest.raises(MissingInput, match="exactly"):
        pf(f=np.array([[0.1, 0], [0, 0]]))  # would round
    with pytest.raises(MissingInput, match="shape") as e:
        pf(f=np.zeros(4, np.float32))  # flat: not reshaped
    assert "reshape" in str(e.value)


def test_python_ints_never_wrap_silently() -> None:
    """A python int too big for the default int32 makes an int64 tensor (as numpy infers); one that does not fit
    a dtype asked for, or a tensor's dtype it is combined with (NEP 50), is E1004; negation still wraps."""
    from egraph_compiler.ir.diagnostics import DTypeError

    big = Tensor(2**40)
    assert big.dtype is dtypes.int64 and run(big) == 2**40
    lst = Tensor([1, -(2**40)])
    assert lst.dtype is dtypes.int64
    np.testing.assert_array_equal(run(lst), [1, -(2**40)])
    assert Tensor([1, 2]).dtype is dtypes.int32
    for bad in (
        lambda: Tensor(2**40, dtype="int32"),
        lambda: Tensor([0, 300], dtype="int8"),
        lambda: Tensor(np.array([1, 2], np.int8)) + 300,
        lambda: Tensor(np.array([1], np.uint8)) - (-1),
        lambda: Tensor(2**70),
    ):
        with pytest.raises(DTypeError):
            bad()
    check(run(Tensor(np.array([1, 2], np.int8)) + 100), np.array([101, 102], np.int8), dtype=np.int8)
    check(run(-Tensor(np.array([1, 0], np.uint8))), -np.array([1, 0], np.uint8), dtype=np.uint8)


@pytest.mark.parametrize("path", ["optimize", "reference"])
def test_two_placeholders_with_one_name_are_refused(path: str) -> None:
    """One name for two different inputs would be one buffer read as two dtypes (a silently wrong result): E1006
    naming both; the same placeholder used twice is fine."""
    from egraph_compiler import optimize
    from egraph_compiler.ir.diagnostics import InvalidArgument

    a, b = Tensor.empty(3, name="a"), Tensor.empty(3, name="a", dtype="int32")
    with pytest.raises(InvalidArgument, match=r"float32\[3\] and int32\[3\]"):
        optimize(a + b, target="llvm") if path == "optimize" else evaluate((a + b).uop, {"a": np.ones(3, np.float32)})
    same = a + Tensor.empty(3, name="a")
    x = {"a": np.array([1, 2, 3], np.float32)}
    got = optimize(same, target="llvm")(**x) if path == "optimize" else evaluate(same.uop, x)
    np.testing.assert_array_equal(got, [2, 4, 6])


def test_truth_membership_and_iteration() -> None:
    """bool(t) and `x in t` would need the lazy tensor computed: E1006 saying how, not an always-True or a
    misleading index error; iteration yields the sub-tensors along the first axis, as numpy's does."""
    from egraph_compiler.ir.diagnostics import InvalidArgument

    t = Tensor(np.array([[1, 2], [3, 4]], np.int32))
    assert [run(x).tolist() for x in t] == [[1, 2], [3, 4]]
    for bad in (lambda: bool(t), lambda: 2 in t, lambda: list(Tensor(3))):
        with pytest.raises(InvalidArgument):
            bad()


def test_numpy_functions_compute_the_tensor() -> None:
    """np.asarray(t) realizes the tensor (as torch and tinygrad do), instead of iterating its sub-tensors."""
    t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)) * 2.0
    np.testing.assert_array_equal(np.asarray(t), np.arange(6, dtype=np.float32).reshape(2, 3) * 2)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    with pytest.raises(MissingInput):
        np.asarray(Tensor.empty(3, name="x"))


def test_values_a_dtype_cannot_hold_are_refused_not_wrapped() -> None:
    """full, arange and where's scalars keep numpy's rule: a value outside the dtype (or with a fraction, for
    integers) is a diagnostic; values that fit are exact."""
    from egraph_compiler.ir.diagnostics import DTypeError

    for bad in (
        lambda: Tensor.full((2,), 300, "uint8"),
        lambda: Tensor.full(2, 1.5, "int32"),
        lambda: Tensor.full(2, -1, "uint8"),
    ):
        with pytest.raises(DTypeError):
            bad()
    check(run(Tensor.full((2,), 255, "uint8")), np.full(2, 255), dtype=np.uint8)
    with pytest.raises(DTypeError, match="wrap"):
        Tensor.arange(130, dtype="int8")
    check(run(Tensor.arange(-128, 128, 5, dtype="int8")), np.arange(-128, 128, 5), dtype=np.int8)
    with pytest.raises(DTypeError):
        Tensor.randn(3, dtype="int32")
    # a python scalar takes the other branch's dtype: int64's extremes fit
    lo = np.iinfo(np.int64).min
    check(run(Tensor([True, False]).where(Tensor(np.array([5, 6], np.int64)), lo)), np.array([5, lo]), dtype=np.int64)


def test_var_with_no_degrees_of_freedom_left_is_nan_as_in_numpy() -> None:
    with np.errstate(all="ignore"):
        check(run(Tensor([1.0]).var()), np.var(np.float32([1.0]), ddof=1))
        check(run(Tensor([1.0, 3.0]).var(correction=2)), np.var(np.float32([1.0, 3.0]), ddof=2))
    check(run(Tensor([1.0, 2.0, 4.0]).var()), np.var([1.0, 2.0, 4.0], ddof=1))


def test_conv2d_takes_tinygrads_positional_order() -> None:
    """(weight, bias, groups, stride, dilation, padding), as tinygrad: conv2d(w, None, 2) groups by two."""
    x, w = rand_array((1, 4, 5, 5), seed=70), rand_array((4, 2, 3, 3), seed=71)
    grouped = run(Tensor(x).conv2d(Tensor(w), None, 2))
    want = np.zeros((1, 4, 3, 3), np.float32)
    for g in range(2):
        for o in range(2 * g, 2 * g + 2):
            for i in range(3):
                for j in range(3):
                    want[0, o, i, j] = (x[0, 2 * g : 2 * g + 2, i : i + 3, j : j + 3] * w[o]).sum()
    check(grouped, want, rtol=1e-4, atol=1e-4)


def test_squeeze_of_all_ones_is_zero_dimensional_as_in_numpy() -> None:
    check(run(Tensor(np.full((1, 1), 5.0, np.float32)).squeeze()), np.full((1, 1), 5.0).squeeze(), dtype=np.float32)
    check(run(Tensor(np.ones((1, 3, 1), np.int32)).squeeze()), np.ones((1, 3, 1)).squeeze(), dtype=np.int32)


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.bool_])
def test_small_integer_matmul_sums_in_int32_and_keeps_the_operands_dtype(dt: Any) -> None:
    """int8 @ int8 is int8, as in numpy and tinygrad: the products are summed in int32 and the sum cast back (each
    element here wraps: 100 * 100 * 8 is not an int8); `dot(w, dtype=...)` keeps the accumulator's dtype, as
    tinygrad's does (its products still in the operands' dtype)."""
    rng = np.random.default_rng(0)
    if dt is np.bool_:
        x, y = rng.random((5, 8)) < 0.5, rng.random((8, 3)) < 0.5
    else:
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, (5, 8), endpoint=True).astype(dt)
        y = rng.integers(info.min, info.max, (8, 3), endpoint=True).astype(dt)
        x[0], y[:, 0] = 100 % (int(info.max) + 1), 100 % (int(info.max) + 1)
    check(run(Tensor(x) @ Tensor(y)), x @ y, dtype=dt)
    if dt is not np.bool_:
        wide = (x[:, :, None] * y[None]).astype(np.int32).sum(1)  # numpy's products wrap in dt too
        check(run(Tensor(x).dot(Tensor(y), dtype="int32")), wide, dtype=np.int32)


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.bool_])
def test_small_integer_matmul_is_tinygrads(dt: Any) -> None:
    tinygrad = tinygrad_cpu_or_skip()
    rng = np.random.default_rng(1)
    x = (rng.random((5, 8)) < 0.5) if dt is np.bool_ else rng.integers(0, 120, (5, 8)).astype(dt)
    y = (rng.random((8, 3)) < 0.5) if dt is np.bool_ else rng.integers(0, 120, (8, 3)).astype(dt)
    check(run(Tensor(x) @ Tensor(y)), (tinygrad.Tensor(x) @ tinygrad.Tensor(y)).numpy(), dtype=dt)
