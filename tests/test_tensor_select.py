"""The shaping, selection, scan and einsum part of the Tensor API (tensor_select.py) against numpy (and torch and
tinygrad where installed): through the reference interpreter (cheap), through optimize + LLVM (several outputs per
compile), hypothesis over shapes, axes and tied values, and the diagnostics for bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import check, examples, rand_array, run, tinygrad_cpu_or_skip
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler import Tensor, optimize
from egraph_compiler.ir.diagnostics import (
    AxisError,
    BroadcastMismatch,
    CompilerError,
    DTypeError,
    InvalidArgument,
    InvalidSize,
    ShapeMismatch,
    UnsupportedOp,
)
from egraph_compiler.ir.interpret import evaluate

A = rand_array((3, 5), seed=1)
I = rand_array((3, 5), np.int32, seed=2, lo=-3, hi=4)  # noqa: E741  (many ties)
X = np.arange(24, dtype=np.int32).reshape(2, 3, 4)


def ev(t: Tensor) -> np.ndarray:
    """A tensor computed by the reference interpreter."""
    return np.asarray(evaluate(t.uop, {}))


def stable_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """numpy's stable argsort (NaN last); descending keeps equal values in index order and puts NaN first (torch's
    stable descending sort)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    if x.dtype.kind == "b":
        return np.argsort(~x, axis=axis, kind="stable")
    f = x.astype(np.float64)
    nan = np.isnan(f)
    return np.lexsort((np.where(nan, 0.0, -f), ~nan), axis=axis)


def scatter_oracle(base: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, reduce: str | None, include_self: bool):
    """torch's scatter / scatter_reduce written as loops (the last write wins for a plain scatter)."""
    out = base.astype(np.float64).copy()
    groups: dict[tuple[int, ...], list[float]] = {}
    for pos in np.ndindex(index.shape):
        tgt = list(pos)
        tgt[dim] = int(index[pos])
        if not 0 <= tgt[dim] < base.shape[dim]:
            continue
        groups.setdefault(tuple(tgt), []).append(float(src[pos]))
    for tgt, vals in groups.items():
        if reduce is None:
            out[tgt] = vals[-1]
            continue
        allv = ([float(base[tgt])] if include_self else []) + vals
        out[tgt] = {"sum": sum, "prod": np.prod, "mean": np.mean, "amax": max, "amin": min}[reduce](allv)
    return out


# ---- shaping -----------------------------------------------------------------------------------


def test_split_and_chunk_match_numpy() -> None:
    t = Tensor(X)
    got = [ev(p) for p in t.split(3, dim=2)]
    check(got[0], X[:, :, :3])
    check(got[1], X[:, :, 3:])
    got = [ev(p) for p in t.split([1, 2], dim=-2)]
    check(got[0], X[:, :1])
    check(got[1], X[:, 1:])
    chunks = t.chunk(3, dim=2)  # ceil(4 / 3) = 2: two chunks, as tinygrad and torch
    assert isinstance(chunks, list) and len(chunks) == 2
    for g, w in zip(chunks, np.split(X, 2, axis=2)):
        check(ev(g), w, dtype=np.int32)
    assert [p.shape for p in Tensor.arange(11).chunk(6)] == [(2,)] * 5 + [(1,)]


def test_unflatten_and_shrink_to_pad_to() -> None:
    t = Tensor(X)
    check(ev(t.unflatten(2, (2, -1))), X.reshape(2, 3, 2, 2))
    check(ev(t.unflatten(-1, (1, 4, 1))), X.reshape(2, 3, 1, 4, 1))
    check(ev(t.shrink_to(1, None, 3)), X[:1, :, :3])
    want = np.full((3, 3, 6), 7, np.int32)
    want[:2, :, :4] = X
    check(ev(t.pad_to((3, None, 6), value=7)), want, dtype=np.int32)
    check(ev(t.pad_to(None, None, 5)), np.pad(X, ((0, 0), (0, 0), (0, 1))))


@pytest.mark.parametrize("shifts,dims", [(1, 0), (-2, 1), ((1, 3), (0, 2)), ((1, 1), (2, 2)), (7, None), (5, 2)])
def test_roll_matches_numpy(shifts: Any, dims: Any) -> None:
    check(ev(Tensor(X).roll(shifts, dims)), np.roll(X, shifts, dims), dtype=np.int32)


def test_repeat_interleave_matches_numpy() -> None:
    check(ev(Tensor(X).repeat_interleave(3, 1)), np.repeat(X, 3, 1))
    check(ev(Tensor(X).repeat_interleave(2, -1)), np.repeat(X, 2, -1))
    check(ev(Tensor(X).repeat_interleave(2)), np.repeat(X, 2))


def test_diag_and_diagonal_match_numpy() -> None:
    check(ev(Tensor(A[0]).diag()), np.diag(A[0]), dtype=np.float32)
    check(ev(Tensor([True]).diag()), np.diag([True]))
    for off in (-2, -1, 0, 1, 4):
        check(ev(Tensor(A).diagonal(off)), np.diagonal(A, off))
    check(ev(Tensor(X).diagonal(1, 0, 2)), np.diagonal(X, 1, 0, 2))
    check(ev(Tensor(X).diagonal(0, -1, 1)), np.diagonal(X, 0, -1, 1))


def test_meshgrid_matches_numpy() -> None:
    a, b, c = np.arange(3, dtype=np.int32), np.arange(2, dtype=np.float32) + 0.5, np.arange(4, dtype=np.int32)
    for indexing in ("ij", "xy"):
        got = Tensor(a).meshgrid(Tensor(b), Tensor(c), indexing=indexing)
        for g, w in zip(got, np.meshgrid(a, b, c, indexing=indexing)):
            check(ev(g), w, dtype=w.dtype)


def test_unfold_matches_sliding_windows() -> None:
    for dim, size, step in [(2, 2, 1), (2, 3, 2), (1, 3, 1), (-1, 4, 3), (0, 1, 1)]:
        want = np.lib.stride_tricks.sliding_window_view(X, size, axis=dim)
        want = np.take(want, np.arange(0, want.shape[dim % X.ndim], step), axis=dim % X.ndim)
        check(ev(Tensor(X).unfold(dim, size, step)), want)


@pytest.mark.parametrize(
    "pattern,sizes,want",
    [
        ("a b c -> c a b", {}, lambda x: x.transpose(2, 0, 1)),
        ("a b (c d) -> a (b c) d", {"d": 2}, lambda x: x.reshape(2, 3, 2, 2).reshape(2, 6, 2)),
        ("a b (c d) -> d c b a", {"c": 4}, lambda x: x.reshape(2, 3, 4, 1).transpose(3, 2, 1, 0)),
        ("... c -> c ...", {}, lambda x: np.moveaxis(x, -1, 0)),
        ("a ... -> (...) a", {}, lambda x: x.transpose(1, 2, 0).reshape(12, 2)),
        ("a b c -> 1 (a b) c 1", {}, lambda x: x.reshape(1, 6, 4, 1)),
        ("a b c -> (c b a)", {"b": 3}, lambda x: x.transpose(2, 1, 0).reshape(-1)),
    ],
)
def test_rearrange_matches_numpy(pattern: str, sizes: dict[str, int], want: Any) -> None:
    check(ev(Tensor(X).rearrange(pattern, **sizes)), want(X))


def test_rearrange_squeezes_a_one() -> None:
    check(
        ev(Tensor(X.reshape(2, 1, 12)).rearrange("a 1 (b c) -> (a c) b", b=3)),
        X.reshape(2, 3, 4).transpose(0, 2, 1).reshape(8, 3),
    )


# ---- selection ---------------------------------------------------------------------------------


def test_one_hot_is_int32_and_zero_outside_the_classes() -> None:
    idx = np.array([[0, 3], [2, 5]], np.int8)
    got = ev(Tensor(idx).one_hot(4))
    check(got, (idx[..., None] == np.arange(4)).astype(np.int32), dtype=np.int32)
    check(ev(Tensor(np.array([-1, 1], np.int64)).one_hot(2)), np.array([[0, 0], [0, 1]]), dtype=np.int32)


def test_masked_fill_matches_numpy_where() -> None:
    m = A > 0
    check(ev(Tensor(A).masked_fill(Tensor(m), -1.5)), np.where(m, np.float32(-1.5), A), dtype=np.float32)
    row = np.array([True, False, True, False, False])
    check(ev(Tensor(I).masked_fill(Tensor(row), Tensor(np.int32(9)))), np.where(row, 9, I), dtype=np.int32)


def test_any_and_all_match_numpy() -> None:
    f = np.array([[0.0, np.nan, 0.0], [0.0, 0.0, 0.0], [1.0, 2.0, -3.0]], np.float32)
    for arr in (f, I, I > 0):
        for axis, keep in [(None, False), (0, False), (1, True), ((0, 1), False)]:
            check(ev(Tensor(arr).any(axis, keep)), np.any(arr, axis=axis, keepdims=keep), dtype=np.bool_)
            check(ev(Tensor(arr).all(axis, keep)), np.all(arr, axis=axis, keepdims=keep), dtype=np.bool_)


def test_argmax_argmin_take_the_first_tie_and_the_first_nan() -> None:
    for arr in (I, I.astype(np.uint8), I > 0, I.astype(np.float32)):
        for axis in (None, 0, 1, -1):
            check(ev(Tensor(arr).argmax(axis)), np.argmax(arr, axis=axis), dtype=np.int32)
            check(ev(Tensor(arr).argmin(axis)), np.argmin(arr, axis=axis), dtype=np.int32)
    check(ev(Tensor(I).argmax(1, keepdim=True)), np.argmax(I, 1, keepdims=True))
    check(ev(Tensor(I).argmin(None, keepdim=True)), np.argmin(I, keepdims=True))
    f = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, 2.0, -np.inf, np.inf]], np.float32)
    check(ev(Tensor(f).argmax(1)), np.argmax(f, 1))
    check(ev(Tensor(f).argmin(1)), np.argmin(f, 1))
    check(ev(Tensor(np.float32(3)).argmax()), np.array(0), dtype=np.int32)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_and_puts_nan_at_the_large_end(descending: bool) -> None:
    f = np.array([[3.0, np.nan, -1.0, 3.0, -0.0, np.inf], [0.0, -np.inf, np.nan, 0.0, 2.0, np.nan]], np.float32)
    for arr, axis in [(I, 1), (I, 0), (I > 0, 1), (f, 1), (I.astype(np.int8), -1)]:
        vals, idx = Tensor(arr).sort(axis, descending=descending)
        order = stable_order(arr, axis, descending)
        check(ev(idx), order, dtype=np.int32)
        check(ev(vals), np.take_along_axis(arr, order, axis), dtype=arr.dtype)
        check(ev(Tensor(arr).argsort(axis, descending)), order)
    assert np.signbit(ev(Tensor(f).sort(1)[0])[0, 1])  # -0.0 keeps its sign through the placement


def test_sort_matches_torch_stable_sort() -> None:
    torch = pytest.importorskip("torch")
    f = np.array([[3.0, np.nan, -1.0, 3.0, 0.5, np.inf, 3.0]], np.float32)
    for desc in (False, True):
        tv, ti = torch.sort(torch.from_numpy(f), dim=1, descending=desc, stable=True)
        v, i = Tensor(f).sort(1, desc)
        check(ev(v), tv.numpy())
        check(ev(i), ti.numpy().astype(np.int32))


def test_topk_matches_torch_values_and_stable_indices() -> None:
    torch = pytest.importorskip("torch")
    for k, dim, largest in [(2, 1, True), (3, 0, False), (5, -1, False), (1, 0, True)]:
        tv, _ = torch.topk(torch.from_numpy(A), k, dim=dim, largest=largest)
        v, i = Tensor(A).topk(k, dim, largest)
        check(ev(v), tv.numpy())
        check(ev(i), np.take(stable_order(A, dim, largest), np.arange(k), axis=dim))
    v, i = Tensor(I).topk(3, 1)  # ties: the earlier index first
    order = stable_order(I, 1, True)[:, :3]
    check(ev(i), order, dtype=np.int32)
    check(ev(v), np.take_along_axis(I, order, 1), dtype=np.int32)


def test_scatter_matches_torch_and_the_last_write_wins() -> None:
    torch = pytest.importorskip("torch")
    base = rand_array((4, 5), seed=5)
    src = rand_array((3, 5), seed=6)
    index = np.array([[0, 1, 2, 3, 0], [1, 2, 3, 0, 1], [2, 3, 0, 1, 2]])  # distinct targets per column
    want = torch.from_numpy(base).scatter(0, torch.from_numpy(index), torch.from_numpy(src)).numpy()
    check(ev(Tensor(base).scatter(0, Tensor(index), Tensor(src))), want)
    dup = np.array([[1, 1, 3], [0, 1, 1]], np.int32)  # repeats along dim 1: the later source wins
    got = ev(Tensor(base).scatter(1, Tensor(dup), Tensor(src)))
    check(got, scatter_oracle(base, 1, dup, src[:2, :3], None, True), dtype=np.float32)
    for reduce, tr in (("add", "add"), ("multiply", "multiply")):
        want = torch.from_numpy(base).scatter(1, torch.from_numpy(dup.astype(np.int64)), 1.5, reduce=tr).numpy()
        check(ev(Tensor(base).scatter(1, Tensor(dup), 1.5, reduce=reduce)), want)
    check(
        ev(Tensor(I).scatter(0, Tensor(np.array([[2, 0]])), 7)),
        scatter_oracle(I, 0, np.array([[2, 0]]), np.full((1, 2), 7), None, True),
    )


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_torch(reduce: str, include_self: bool) -> None:
    torch = pytest.importorskip("torch")
    base = rand_array((3, 4), seed=7)
    src = rand_array((4, 3), seed=8)
    index = np.array([[0, 0, 2], [1, 0, 2], [0, 0, 0], [2, 1, 0]], np.int64)  # row 3 of base is never hit off column 0
    want = torch.from_numpy(base).scatter_reduce(
        0, torch.from_numpy(index), torch.from_numpy(src), reduce, include_self=include_self
    )
    got = ev(Tensor(base).scatter_reduce(0, Tensor(index), Tensor(src), reduce, include_self=include_self))
    check(got, want.numpy(), rtol=1e-5, dtype=np.float32)


def test_scatter_reduce_on_ints_keeps_the_dtype_and_mean_is_float() -> None:
    base, src = I[:2], (I[1:] + 5).astype(np.int32)
    index = np.array([[1, 0, 1, 1, 0], [1, 1, 0, 1, 1]], np.int32)
    for reduce in ("sum", "prod", "amax", "amin"):
        got = ev(Tensor(base).scatter_reduce(0, Tensor(index), Tensor(src), reduce))
        check(got, scatter_oracle(base, 0, index, src, reduce, True).astype(np.int32), dtype=np.int32)
    got = ev(Tensor(base).scatter_reduce(0, Tensor(index), Tensor(src), "mean", include_self=False))
    check(got, scatter_oracle(base, 0, index, src, "mean", False), dtype=np.float32)


def test_masked_select_and_nonzero_with_a_size() -> None:
    m = I > 0
    sel = I[m]
    got = ev(Tensor(I).masked_select(Tensor(m), size=sel.size + 2, fill_value=-9))
    check(got, np.concatenate([sel, [-9, -9]]), dtype=np.int32)
    check(ev(Tensor(I).masked_select(Tensor(m), size=2)), sel[:2])
    check(ev(Tensor(A).masked_select(Tensor(m[0]), size=3)), A[np.broadcast_to(m[0], A.shape)][:3])  # mask broadcasts
    nz = np.argwhere(I)
    check(ev(Tensor(I).nonzero(size=len(nz) + 1, fill_value=-1)), np.concatenate([nz, [[-1, -1]]]), dtype=np.int32)
    f = np.array([0.0, np.nan, -0.0, 2.0], np.float32)
    check(ev(Tensor(f).nonzero(size=2)), np.argwhere(f))


def test_masked_select_and_nonzero_without_a_size_say_why_and_what_to_do() -> None:
    with pytest.raises(UnsupportedOp, match="fixed") as e:
        Tensor(A).masked_select(Tensor(A > 0))
    assert "masked_fill" in e.value.suggestion and "size=" in e.value.suggestion
    with pytest.raises(UnsupportedOp, match="size=") as e:
        Tensor(A).nonzero()
    assert "where" in e.value.suggestion


# ---- scans and statistics ----------------------------------------------------------------------


def cum_arg(x: np.ndarray, axis: int, op: Any) -> tuple[np.ndarray, np.ndarray]:
    """Running max/min and the first index of the running value (tinygrad's rule), by loops."""
    x = np.moveaxis(x, axis, -1)
    vals, idx = op.accumulate(x, axis=-1), np.zeros(x.shape, np.int32)
    for pos in np.ndindex(x.shape):
        row = x[pos[:-1]][: pos[-1] + 1]
        hit = np.flatnonzero((row == vals[pos]) | (np.isnan(row) & np.isnan(vals[pos])))
        idx[pos] = hit[0]
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


def test_cumprod_matches_numpy_in_the_input_dtype() -> None:
    check(ev(Tensor(A).cumprod(1)), np.cumprod(A, 1), dtype=np.float32)
    small = rand_array((3, 6), np.int8, seed=3)
    with np.errstate(over="ignore"):
        check(ev(Tensor(small).cumprod(1)), np.cumprod(small, 1, dtype=np.int8), dtype=np.int8)
    check(ev(Tensor(I > -2).cumprod(0)), np.logical_and.accumulate(I > -2, 0), dtype=np.bool_)
    check(ev(Tensor(np.float32(2.5)).cumprod(0)), np.array(2.5, np.float32))


def test_cummax_and_cummin_values_and_first_indices() -> None:
    f = np.array([[1.0, 3.0, np.nan, 4.0, np.nan], [-1.0, -1.0, -3.0, -3.0, 2.0]], np.float32)
    for arr, axis in [(I, 1), (I, 0), (f, 1), (I.astype(np.uint8), 1)]:
        for name, op in (("cummax", np.maximum), ("cummin", np.minimum)):
            v, i = getattr(Tensor(arr), name)(axis)
            wv, wi = cum_arg(arr, axis, op)
            check(ev(v), wv, dtype=arr.dtype)
            check(ev(i), wi, dtype=np.int32)


def test_logcumsumexp_matches_numpy_and_survives_infinities() -> None:
    big = np.array([[1000.0, 1000.0, -1000.0, 999.0], [-np.inf, -np.inf, 0.0, np.inf]], np.float32)
    for arr, axis in [(A, 1), (A, 0), (big, 1), (I, 1)]:
        with np.errstate(invalid="ignore"):
            want = np.logaddexp.accumulate(arr.astype(np.float64), axis)
        check(ev(Tensor(arr).logcumsumexp(axis)), want, rtol=1e-5, atol=1e-4, dtype=np.float32)


@pytest.mark.parametrize("axis,keep,corr", [(None, False, 1), (1, True, 0), ((0, 1), False, 2), (0, False, 1)])
def test_var_mean_and_std_mean_match_numpy(axis: Any, keep: bool, corr: int) -> None:
    v, m = Tensor(A).var_mean(axis, keepdim=keep, correction=corr)
    s, m2 = Tensor(I).std_mean(axis, keepdim=keep, correction=corr)
    check(ev(v), np.var(A, axis=axis, keepdims=keep, ddof=corr), rtol=1e-4)
    check(ev(m), np.mean(A, axis=axis, keepdims=keep), rtol=1e-5)
    check(ev(s), np.std(I, axis=axis, keepdims=keep, ddof=corr), rtol=1e-4, dtype=np.float32)
    check(ev(m2), np.mean(I, axis=axis, keepdims=keep), rtol=1e-5, dtype=np.float32)


# ---- einsum ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "formula,shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("ij,jk", [(3, 4), (4, 5)]),
        ("ii->i", [(4, 4)]),
        ("ii", [(4, 4)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("ij->ji", [(3, 4)]),
        ("ij->", [(3, 4)]),
        ("i,j->ij", [(3,), (4,)]),
        ("iij->ji", [(3, 3, 2)]),
        ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
        ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
        ("b...,b->...", [(2, 3, 4), (2,)]),
        ("ij, jk ,kl->li", [(2, 3), (3, 4), (4, 2)]),
        ("i,i->", [(5,), (5,)]),
    ],
)
def test_einsum_matches_numpy(formula: str, shapes: list[tuple[int, ...]]) -> None:
    arrs = [rand_array(s, seed=k) for k, s in enumerate(shapes)]
    check(ev(Tensor.einsum(formula, *[Tensor(a) for a in arrs])), np.einsum(formula, *arrs), rtol=1e-4, atol=1e-5)


def test_einsum_takes_a_list_ints_and_a_dtype() -> None:
    a, b = rand_array((3, 4), np.int8, seed=1), rand_array((4, 2), np.int8, seed=2)
    got = ev(Tensor.einsum("ij,jk->ik", [Tensor(a), Tensor(b)], dtype="int64"))
    check(got, a.astype(np.int64) @ b.astype(np.int64), dtype=np.int64)


# ---- through the compiler ----------------------------------------------------------------------


def test_everything_through_optimize_and_llvm() -> None:
    """One compile for many outputs; each output compared with numpy."""
    x, i = Tensor.empty((3, 5), dtype="float32", name="x"), Tensor.empty((3, 5), dtype="int32", name="i")
    a = rand_array((3, 5), seed=11)
    a[0, 2] = a[0, 4]  # a tie
    b = rand_array((3, 5), np.int32, seed=12, lo=-2, hi=3)
    hit = np.abs(b) % 3
    wants: list[tuple[Tensor, Any]] = [
        (x.sort(1)[0], np.sort(a, 1)),
        (x.sort(1, descending=True)[1], stable_order(a, 1, True)),
        (i.argsort(0), np.argsort(b, 0, kind="stable")),
        (i.sort(1, descending=True)[0], -np.sort(-b, 1)),
        (x.topk(2, 1)[0], -np.sort(-a, 1)[:, :2]),
        (i.topk(2, 0, largest=False)[1], np.argsort(b, 0, kind="stable")[:2]),
        (x.argmax(1), np.argmax(a, 1)),
        (i.argmin(0), np.argmin(b, 0)),
        (i.argmax(), np.argmax(b)),
        (x.cumprod(1), np.cumprod(a, 1)),
        (i.cummax(1)[0], np.maximum.accumulate(b, 1)),
        (i.cummin(1)[1], cum_arg(b, 1, np.minimum)[1]),
        (x.logcumsumexp(1), np.logaddexp.accumulate(a, 1)),
        (x.roll((1, 2), (0, 1)), np.roll(a, (1, 2), (0, 1))),
        (x.diagonal(1), np.diagonal(a, 1)),
        (x.unfold(1, 2, 2), np.lib.stride_tricks.sliding_window_view(a, 2, 1)[:, ::2]),
        (x.rearrange("a (b c) -> c a b", c=1), a.reshape(3, 5, 1).transpose(2, 0, 1)),
        (Tensor.einsum("ij,kj->ik", x, x), a @ a.T),
        (Tensor.einsum("ii->i", x[:, :3]), np.diagonal(a[:, :3])),
        (x.scatter(1, i.abs() % 3, x), scatter_oracle(a, 1, hit, a, None, True)),
        (x.scatter_reduce(0, i.abs() % 3, x, "amax", include_self=False), scatter_oracle(a, 0, hit, a, "amax", False)),
        (x.scatter_reduce(0, i.abs() % 3, x, "mean"), scatter_oracle(a, 0, hit, a, "mean", True)),
        ((i + 2).one_hot(5), np.eye(5, dtype=np.int32)[b + 2]),
        (x.masked_select(x > 0, size=15, fill_value=0.0), np.concatenate([a[a > 0], np.zeros(15 - (a > 0).sum())])),
        (i.nonzero(size=15, fill_value=-1), np.concatenate([np.argwhere(b), -np.ones((15 - np.count_nonzero(b), 2))])),
        ((x > 0).any(1), (a > 0).any(1)),
        (i.all(0), b.all(0)),
        (x.masked_fill(x < 0, 0.0), np.maximum(a, 0)),
        (x.var_mean(1)[0], a.var(1, ddof=1)),
        (x.repeat_interleave(2, 0), np.repeat(a, 2, 0)),
        (x.split([2, 3], 1)[1], a[:, 2:]),
        (x[0].diag(), np.diag(a[0])),
        (x[0].meshgrid(x[1, :2], indexing="xy")[0], np.meshgrid(a[0], a[1, :2], indexing="xy")[0]),
    ]
    prog = optimize([t for t, _ in wants], target="llvm")
    got = prog(x=a, i=b)
    for k, (g, (t, w)) in enumerate(zip(got, wants)):
        assert g.dtype == t.dtype.np, f"output {k}: {g.dtype} != {t.dtype.np}"
        check(g, np.asarray(w), rtol=1e-5, atol=1e-5)


def test_realize_through_the_default_backend() -> None:
    i = Tensor(I).sort(1)[1]
    check(run(i), np.argsort(I, 1, kind="stable"), dtype=np.int32)
    check(run(Tensor.einsum("ij->j", Tensor(A))), A.sum(0), rtol=1e-5)


# ---- hypothesis --------------------------------------------------------------------------------


@st.composite
def tied(draw: st.DrawFn, max_dims: int = 3, max_side: int = 5) -> tuple[np.ndarray, int]:
    """An array with many ties (ints in [-2, 2], floats with NaN sometimes) and an axis."""
    shape = tuple(draw(st.lists(st.integers(1, max_side), min_size=1, max_size=max_dims)))
    seed = draw(st.integers(0, 2**32 - 1))
    arr = rand_array(shape, np.int32, seed, lo=-2, hi=3)
    kind = draw(st.sampled_from(["int", "float", "nanfloat", "bool"]))
    if kind != "int":
        arr = arr.astype(np.float32) / 2 if kind != "bool" else arr > 0
    if kind == "nanfloat":
        arr = np.where(arr == 1.0, np.float32(np.nan), arr)
    return arr, draw(st.integers(-len(shape), len(shape) - 1))


@settings(max_examples=examples(30))
@given(tied(), st.booleans())
def test_sort_argsort_topk_match_a_stable_numpy_sort(arg: tuple[np.ndarray, int], descending: bool) -> None:
    arr, axis = arg
    order = stable_order(arr, axis, descending)
    v, i = Tensor(arr).sort(axis, descending)
    check(ev(i), order, dtype=np.int32)
    check(ev(v), np.take_along_axis(arr, order, axis), dtype=arr.dtype)
    k = max(1, arr.shape[axis] // 2)
    tv, ti = Tensor(arr).topk(k, axis, largest=descending)
    check(ev(ti), np.take(order, np.arange(k), axis=axis))
    check(ev(tv), np.take(np.take_along_axis(arr, order, axis), np.arange(k), axis=axis))


@settings(max_examples=examples(30))
@given(tied(), st.booleans())
def test_argmax_argmin_cummax_match_numpy(arg: tuple[np.ndarray, int], keep: bool) -> None:
    arr, axis = arg
    check(ev(Tensor(arr).argmax(axis, keep)), np.argmax(arr, axis, keepdims=keep), dtype=np.int32)
    check(ev(Tensor(arr).argmin(axis, keep)), np.argmin(arr, axis, keepdims=keep), dtype=np.int32)
    v, i = Tensor(arr).cummax(axis)
    wv, wi = cum_arg(arr, axis, np.maximum)
    check(ev(v), wv, dtype=arr.dtype)
    check(ev(i), wi)


@settings(max_examples=examples(25))
@given(st.data(), st.sampled_from([None, "sum", "prod", "mean", "amax", "amin"]), st.booleans())
def test_scatter_and_scatter_reduce_match_loops(data: st.DataObject, reduce: str | None, include_self: bool) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dim = data.draw(st.integers(0, len(shape) - 1))
    ishape = tuple(data.draw(st.integers(1, s + 1 if k == dim else s)) for k, s in enumerate(shape))
    seed = data.draw(st.integers(0, 2**31))
    base, src = rand_array(shape, seed=seed), rand_array(ishape, seed=seed + 1)
    index = rand_array(ishape, np.int32, seed + 2, lo=-1, hi=shape[dim] + 1)  # some outside the axis: ignored
    if reduce is None:
        got = ev(Tensor(base).scatter(dim, Tensor(index), Tensor(src)))
    else:
        got = ev(Tensor(base).scatter_reduce(dim, Tensor(index), Tensor(src), reduce, include_self=include_self))
    check(got, scatter_oracle(base, dim, index, src, reduce, include_self), rtol=1e-5, atol=1e-6)


@settings(max_examples=examples(25))
@given(st.data())
def test_movement_ops_match_numpy(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    x = rand_array(shape, np.int32, data.draw(st.integers(0, 2**31)))
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[d]
    shift = data.draw(st.integers(-7, 7))
    check(ev(Tensor(x).roll(shift, d)), np.roll(x, shift, d))
    size = data.draw(st.integers(1, n))
    check([ev(p) for p in Tensor(x).split(size, d)][-1], np.split(x, range(size, n, size), d)[-1])
    step = data.draw(st.integers(1, 3))
    want = np.lib.stride_tricks.sliding_window_view(x, size, axis=d)
    a = d % x.ndim  # the windows axis (the window itself is the new last one)
    check(ev(Tensor(x).unfold(d, size, step)), np.take(want, np.arange(0, want.shape[a], step), axis=a))
    check(ev(Tensor(x).cumprod(d)), np.cumprod(x, d, dtype=np.int32))
    if len(shape) >= 2:
        off = data.draw(st.integers(-shape[0] + 1, shape[1] - 1))
        check(ev(Tensor(x).diagonal(off)), np.diagonal(x, off))


# ---- tinygrad itself ---------------------------------------------------------------------------


def test_against_tinygrad() -> None:
    """tinygrad's own answers for its tie rules and dtypes (sort and topk stable, cummax's first index, scatter's
    last write, one_hot's int32)."""
    tinygrad = tinygrad_cpu_or_skip()

    def tg(a: np.ndarray) -> Any:
        return tinygrad.Tensor(a, device="CPU")

    x = np.array([[2, 0, 2, -1, 0, 2], [1, 1, 1, 1, 1, 1]], np.int32)
    index = np.array([[0, 0, 2], [2, 0, 0]], np.int32)
    src = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    theirs = [
        tg(x).sort(1, descending=True)[1],
        tg(x).topk(3, 1, largest=False)[1],
        tg(x).cummax(1)[1],
        tg(x).cummin(1)[1],
        tg(x).argmax(1),
        tg(x[:, :3]).scatter(1, tg(index), tg(src)),
        tg(x[:, :3]).scatter_reduce(0, tg(index), tg(src), "amax", include_self=False),
        tg(index).one_hot(3),
        tg(x).rearrange("a (b c) -> (c a) b", c=2),
        tg(x).unfold(1, 3, 2),
        tinygrad.Tensor.einsum("ij,kj->ik", tg(x), tg(x)),
    ]
    ours = [
        Tensor(x).sort(1, descending=True)[1],
        Tensor(x).topk(3, 1, largest=False)[1],
        Tensor(x).cummax(1)[1],
        Tensor(x).cummin(1)[1],
        Tensor(x).argmax(1),
        Tensor(x[:, :3]).scatter(1, Tensor(index), Tensor(src)),
        Tensor(x[:, :3]).scatter_reduce(0, Tensor(index), Tensor(src), "amax", include_self=False),
        Tensor(index).one_hot(3),
        Tensor(x).rearrange("a (b c) -> (c a) b", c=2),
        Tensor(x).unfold(1, 3, 2),
        Tensor.einsum("ij,kj->ik", Tensor(x), Tensor(x)),
    ]
    tinygrad.Tensor.realize(*theirs)
    for t, o in zip(theirs, ours):
        want = t.numpy()
        check(ev(o), want, dtype=want.dtype)


# ---- diagnostics -------------------------------------------------------------------------------


BAD: list[tuple[str, Any, type[CompilerError], str]] = [
    ("split sizes", lambda: Tensor(X).split([1, 1], 1), ShapeMismatch, "add up to"),
    ("split zero", lambda: Tensor(X).split(0), InvalidArgument, "below 1"),
    ("split float", lambda: Tensor(X).split(1.5), InvalidArgument, "integer"),
    ("split axis", lambda: Tensor(X).split(1, 3), AxisError, "out of range"),
    ("split 0-d", lambda: Tensor(1.0).split(1), ShapeMismatch, "at least one axis"),
    ("chunk", lambda: Tensor(X).chunk(0), InvalidArgument, "below 1"),
    ("unflatten", lambda: Tensor(X).unflatten(2, (3, -1)), ShapeMismatch, "cannot split"),
    ("roll", lambda: Tensor(X).roll((1, 2), 0), InvalidArgument, "one shift per dim"),
    ("roll axis", lambda: Tensor(X).roll(1, 5), AxisError, "out of range"),
    ("repeat_interleave", lambda: Tensor(X).repeat_interleave(0), InvalidArgument, "below 1"),
    ("diag", lambda: Tensor(A).diag(), ShapeMismatch, "1-d"),
    ("diagonal same", lambda: Tensor(A).diagonal(0, 1, -1), InvalidArgument, "different"),
    ("diagonal empty", lambda: Tensor(A).diagonal(5), InvalidSize, "no diagonal"),
    ("meshgrid", lambda: Tensor(A[0]).meshgrid(Tensor(A[1]), indexing="yx"), InvalidArgument, "indexing"),
    ("meshgrid 2d", lambda: Tensor(A[0]).meshgrid(Tensor(A)), ShapeMismatch, "1-d"),
    ("shrink_to", lambda: Tensor(A).shrink_to(4, 5), ShapeMismatch, "larger"),
    ("pad_to", lambda: Tensor(A).pad_to(2, None), ShapeMismatch, "smaller"),
    ("pad_to rank", lambda: Tensor(A).pad_to(4), ShapeMismatch, "one size"),
    ("unfold", lambda: Tensor(A).unfold(1, 6, 1), ShapeMismatch, "longer"),
    ("unfold step", lambda: Tensor(A).unfold(1, 2, 0), InvalidArgument, "below 1"),
    ("rearrange arrow", lambda: Tensor(X).rearrange("a b c"), InvalidArgument, "->"),
    ("rearrange names", lambda: Tensor(X).rearrange("a b c -> a b d"), InvalidArgument, "every axis once"),
    ("rearrange rank", lambda: Tensor(X).rearrange("a b -> b a"), ShapeMismatch, "input axes"),
    ("rearrange group", lambda: Tensor(X).rearrange("a b (c d) -> a b c d"), ShapeMismatch, "cannot split"),
    ("rearrange size", lambda: Tensor(X).rearrange("a b (c d) -> a b c d", c=3), ShapeMismatch, "cannot split"),
    ("rearrange paren", lambda: Tensor(X).rearrange("a b (c -> a b c"), InvalidArgument, "unclosed"),
    ("rearrange token", lambda: Tensor(X).rearrange("a b c! -> a b c"), InvalidArgument, "axis name"),
    ("one_hot float", lambda: Tensor(A).one_hot(3), DTypeError, "one_hot of float32"),
    ("one_hot classes", lambda: Tensor(I).one_hot(0), InvalidArgument, "below 1"),
    ("masked_fill int mask", lambda: Tensor(A).masked_fill(Tensor(I), 0.0), DTypeError, "bool mask"),
    ("masked_fill grows", lambda: Tensor(A[0]).masked_fill(Tensor(A > 0), 0.0), ShapeMismatch, "grow"),
    ("masked_fill shape", lambda: Tensor(A).masked_fill(Tensor(A[:, :2] > 0), 0.0), BroadcastMismatch, "neither"),
    ("argmax axis", lambda: Tensor(A).argmax(2), AxisError, "out of range"),
    ("argmax keepdim", lambda: Tensor(A).argmax(0, keepdim=1), InvalidArgument, "bool"),
    ("sort axis", lambda: Tensor(A).sort(-3), AxisError, "out of range"),
    ("sort descending", lambda: Tensor(A).sort(0, descending="yes"), InvalidArgument, "bool"),
    ("topk k", lambda: Tensor(A).topk(6), InvalidArgument, "outside"),
    ("topk k float", lambda: Tensor(A).topk(2.0), InvalidArgument, "integer"),
    ("scatter float index", lambda: Tensor(A).scatter(0, Tensor(A), Tensor(A)), DTypeError, "index"),
    ("scatter list index", lambda: Tensor(A).scatter(0, [[0]], Tensor(A)), InvalidArgument, "not a Tensor"),
    ("scatter dtype", lambda: Tensor(A).scatter(0, Tensor(I), Tensor(I)), DTypeError, "cast src"),
    ("scatter shape", lambda: Tensor(A[:2]).scatter(1, Tensor(I), Tensor(A)), ShapeMismatch, "do not fit"),
    ("scatter scalar", lambda: Tensor(I).scatter(0, Tensor(I), 1.5), DTypeError, "int32"),
    ("scatter reduce", lambda: Tensor(A).scatter(0, Tensor(I), 1.0, reduce="max"), InvalidArgument, "reduce"),
    ("scatter reduce src", lambda: Tensor(A).scatter(0, Tensor(I), Tensor(A), reduce="add"), InvalidArgument, "scatter_reduce"),
    ("scatter_reduce", lambda: Tensor(A).scatter_reduce(0, Tensor(I), Tensor(A), "max"), InvalidArgument, "reduce"),
    ("scatter_reduce bool", lambda: Tensor(A > 0).scatter_reduce(0, Tensor(I), Tensor(A > 0), "sum"), DTypeError, "bools"),
    ("masked_select mask", lambda: Tensor(A).masked_select(Tensor(I), size=2), DTypeError, "bool mask"),
    ("masked_select size", lambda: Tensor(A).masked_select(Tensor(A > 0), size=0), InvalidArgument, "below 1"),
    ("masked_select fill", lambda: Tensor(I).masked_select(Tensor(I > 0), size=2, fill_value=0.5), DTypeError, "int32"),
    ("nonzero 0-d", lambda: Tensor(1.0).nonzero(size=1), ShapeMismatch, "0-d"),
    ("cumprod axis", lambda: Tensor(A).cumprod(2), AxisError, "out of range"),
    ("cummax axis", lambda: Tensor(A).cummax(-3), AxisError, "out of range"),
    ("logcumsumexp axis", lambda: Tensor(A).logcumsumexp(2), AxisError, "out of range"),
    ("var_mean correction", lambda: Tensor(A).var_mean(correction=0.5), InvalidArgument, "integer"),
    ("einsum operands", lambda: Tensor.einsum("ij,jk->ik", Tensor(A)), InvalidArgument, "operands"),
    ("einsum letters", lambda: Tensor.einsum("i1->i", Tensor(A)), InvalidArgument, "subscripts"),
    ("einsum arrows", lambda: Tensor.einsum("ij->j->i", Tensor(A)), InvalidArgument, "more than one"),
    ("einsum rank", lambda: Tensor.einsum("ijk->i", Tensor(A)), ShapeMismatch, "3 axes"),
    ("einsum sizes", lambda: Tensor.einsum("ij,ij->i", Tensor(A), Tensor(A.T)), ShapeMismatch, "size"),
    ("einsum output", lambda: Tensor.einsum("ij->k", Tensor(A)), InvalidArgument, "output"),
    ("einsum diagonal", lambda: Tensor.einsum("ii->i", Tensor(A)), ShapeMismatch, "repeated index"),
    ("einsum not tensor", lambda: Tensor.einsum("ij->i", A), InvalidArgument, "Tensor"),
    ("einsum formula", lambda: Tensor.einsum(3, Tensor(A)), InvalidArgument, "string"),
]


@pytest.mark.parametrize("case", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_diagnostic(case: tuple[str, Any, type[CompilerError], str]) -> None:
    _, build, kind, words = case
    with pytest.raises(kind) as e:
        build()
    assert words in str(e.value), str(e.value)
    assert e.value.at and e.value.why and e.value.suggestion
