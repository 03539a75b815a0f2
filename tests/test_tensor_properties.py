"""Property tests: random shapes, broadcasts, movement chains, reductions and matmuls against numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import arrays, broadcastable_pair, check, rand_array, run, shapes
from hypothesis import given
from hypothesis import strategies as st

from egraph_compiler import Tensor
from egraph_compiler.ir.diagnostics import DTypeError

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32]
ALL_DTYPES = [np.bool_, *INT_DTYPES, np.float16, np.float32, np.float64]

ARITH = {
    "add": lambda p, q: p + q,
    "sub": lambda p, q: p - q,
    "mul": lambda p, q: p * q,
    "max": lambda p, q: p.maximum(q) if isinstance(p, Tensor) else np.maximum(p, q),
    "min": lambda p, q: p.minimum(q) if isinstance(p, Tensor) else np.minimum(p, q),
    "lt": lambda p, q: p < q,
    "eq": lambda p, q: p == q,
    "ne": lambda p, q: p != q,
    "ge": lambda p, q: p >= q,
}


@given(broadcastable_pair(), st.sampled_from(sorted(ARITH)), st.sampled_from([np.int32, np.float32]), st.data())
def test_broadcast_binary_ops_match_numpy(shp: Any, op: str, dt: Any, data: st.DataObject) -> None:
    x, y = data.draw(arrays(shp[0], dt)), data.draw(arrays(shp[1], dt))
    check(run(ARITH[op](Tensor(x), Tensor(y))), ARITH[op](x, y), dtype=ARITH[op](x, y).dtype)


@given(
    st.sampled_from(ALL_DTYPES),
    st.sampled_from(ALL_DTYPES),
    st.sampled_from(["add", "mul", "lt", "max"]),
    st.integers(0, 2**16),
)
def test_random_dtype_pairs_promote_and_compute_like_numpy(a: Any, b: Any, op: str, seed: int) -> None:
    x, y = rand_array((2, 3), a, seed), rand_array((3,), b, seed + 1)
    with np.errstate(all="ignore"):
        want = ARITH[op](x, y)
    got = run(ARITH[op](Tensor(x), Tensor(y)))
    check(got, want, dtype=want.dtype, rtol=1e-3 if want.dtype == np.float16 else 1e-6)


@given(st.sampled_from(INT_DTYPES), st.sampled_from(["add", "sub", "mul"]), st.integers(-100, 100), st.integers(0, 99))
def test_python_int_scalars_are_weak_and_wrap_like_numpy(dt: Any, op: str, k: int, seed: int) -> None:
    """A python int takes the tensor's dtype (NEP 50) and the arithmetic wraps as numpy's does; an int out of
    that dtype's bounds is an error (E1004), as numpy's OverflowError, never a silently wrapped operand."""
    info = np.iinfo(dt)
    if not info.min <= k <= info.max:
        with pytest.raises(DTypeError, match="out of bounds"):
            ARITH[op](Tensor(np.zeros(5, dt)), k)
        k = int(np.array(k).astype(dt))
    x = np.random.default_rng(seed).integers(info.min, int(info.max) + 1, (5,), dtype=dt)
    with np.errstate(all="ignore"):
        want = ARITH[op](x, dt(k))
    check(run(ARITH[op](Tensor(x), k)), want, dtype=dt)


# ---- movement chains ---------------------------------------------------------------------------


@st.composite
def movement_chain(draw: st.DrawFn, max_ops: int = 5) -> tuple[np.ndarray, list[tuple[str, Any]]]:
    """A start array and a list of movement ops that are valid for the shapes they meet."""
    x = draw(arrays(draw(shapes(1, 3)), np.float32))
    shape, ops = x.shape, []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["reshape", "permute", "pad", "shrink", "flip", "expand", "getitem", "transpose"]))
        nd = len(shape)
        if kind == "reshape":
            n = int(np.prod(shape))
            divs = [d for d in range(1, n + 1) if n % d == 0]
            a = draw(st.sampled_from(divs))
            arg: Any = draw(st.sampled_from([(a, n // a), (n,), (a, -1), (-1, 1, a)]))
        elif kind == "permute":
            arg = tuple(draw(st.permutations(range(nd))))
        elif kind == "transpose":
            arg = (draw(st.integers(-nd, nd - 1)), draw(st.integers(-nd, nd - 1)))
        elif kind == "pad":
            arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
        elif kind == "shrink":
            arg = tuple((b, draw(st.integers(b + 1, s))) for s in shape for b in [draw(st.integers(0, s - 1))])
        elif kind == "flip":
            axes = st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=nd, unique_by=lambda a, nd=nd: a % nd)
            arg = tuple(draw(axes))
        elif kind == "expand":
            ones = [i for i, s in enumerate(shape) if s == 1]
            if not ones:
                kind, arg = "reshape", (1, *shape)
            else:
                arg = tuple(draw(st.integers(1, 3)) if i in ones else s for i, s in enumerate(shape))
        else:
            idx: list[Any] = []
            for s in shape:
                choice = draw(st.sampled_from(["int", "slice", "none", "all"]))
                if choice == "int":
                    idx.append(draw(st.integers(-s, s - 1)))
                elif choice == "slice":
                    step = draw(st.sampled_from([1, 2, 3, -1, -2]))
                    start, stop = draw(st.integers(-s - 1, s + 1)), draw(st.integers(-s - 1, s + 1))
                    if len(range(*slice(start, stop, step).indices(s))) == 0:
                        start, stop = (None, None)
                    idx.append(slice(start, stop, step))
                elif choice == "none":
                    idx += [None, slice(None)]
                else:
                    idx.append(slice(None))
            arg = tuple(idx)
        ops.append((kind, arg))
        shape = _apply_np(np.empty(shape), kind, arg).shape
        if len(shape) == 0 or len(shape) > 6 or int(np.prod(shape)) > 512:
            ops.pop()
            break
    return x, ops


def _apply_np(x: np.ndarray, kind: str, arg: Any) -> np.ndarray:
    if kind == "reshape":
        return x.reshape(arg)
    if kind == "permute":
        return x.transpose(arg)
    if kind == "transpose":
        return np.swapaxes(x, *arg)
    if kind == "pad":
        return np.pad(x, arg)
    if kind == "shrink":
        return x[tuple(slice(b, e) for b, e in arg)]
    if kind == "flip":
        return np.flip(x, arg)
    if kind == "expand":
        return np.broadcast_to(x, arg)
    return x[arg]


def _apply_tensor(t: Tensor, kind: str, arg: Any) -> Tensor:
    if kind == "getitem":
        return t[arg]
    if kind == "transpose":
        return t.transpose(*arg)
    return getattr(t, kind)(arg)


@given(movement_chain())
def test_movement_chains_match_numpy(chain: tuple[np.ndarray, list[tuple[str, Any]]]) -> None:
    x, ops = chain
    t, want = Tensor(x), x
    for kind, arg in ops:
        t, want = _apply_tensor(t, kind, arg), _apply_np(want, kind, arg)
        assert t.shape == want.shape, (kind, arg)
    check(run(t), want, rtol=0, atol=0)


@given(movement_chain(max_ops=3), st.data())
def test_elementwise_after_movement_chains(chain: tuple[np.ndarray, list[tuple[str, Any]]], data: st.DataObject) -> None:
    x, ops = chain
    t, want = Tensor(x), x
    for kind, arg in ops:
        t, want = _apply_tensor(t, kind, arg), _apply_np(want, kind, arg)
    y = data.draw(arrays(want.shape, np.float32))
    check(run((t * Tensor(y) + 1).relu()), np.maximum(want * y + 1, 0))


# ---- reductions and matmul ---------------------------------------------------------------------


@st.composite
def reduce_case(draw: st.DrawFn) -> tuple[np.ndarray, Any, bool]:
    shape = draw(shapes(1, 4))
    x = draw(arrays(shape, draw(st.sampled_from([np.float32, np.int32, np.int8, np.uint8]))))
    nd = len(shape)
    axis = draw(
        st.one_of(
            st.none(),
            st.integers(-nd, nd - 1),
            st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True).map(tuple),
        )
    )
    return x, axis, draw(st.booleans())


def _acc(x: np.ndarray) -> Any:
    """Accumulation dtype of sum/prod (policy: small ints widen to 32 bits)."""
    if x.dtype.kind == "f":
        return x.dtype
    return np.uint32 if x.dtype.kind == "u" and x.dtype.itemsize < 4 else np.result_type(x.dtype, np.int32)


@given(reduce_case(), st.sampled_from(["sum", "max", "min", "mean", "prod"]))
def test_reductions_match_numpy(case: tuple[np.ndarray, Any, bool], op: str) -> None:
    x, axis, keepdim = case
    t = getattr(Tensor(x), op)(axis, keepdim)
    if op in ("sum", "prod"):
        with np.errstate(over="ignore"):
            want = getattr(x, op)(axis=axis, keepdims=keepdim, dtype=_acc(x))
    elif op == "mean":
        want = x.astype(np.float64).mean(axis=axis, keepdims=keepdim).astype(np.float32)
    else:
        want = getattr(x, op)(axis=axis, keepdims=keepdim)
    check(run(t), want, dtype=want.dtype, rtol=1e-5, atol=1e-5)


@st.composite
def matmul_case(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    batch = draw(shapes(0, 2, 3))
    a_batch = tuple(1 if draw(st.booleans()) else s for s in batch)[draw(st.integers(0, len(batch))) :]
    a_shape = draw(st.sampled_from([(k,), (*a_batch, m, k)]))
    b_shape = draw(st.sampled_from([(k,), (*batch, k, n)]))
    dt = draw(st.sampled_from([np.float32, np.int32]))
    return draw(arrays(a_shape, dt)), draw(arrays(b_shape, dt))


@given(matmul_case())
def test_matmul_matches_numpy(case: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = case
    want = np.matmul(a, b)
    check(run(Tensor(a) @ Tensor(b)), want, dtype=want.dtype, rtol=1e-5, atol=1e-5)


@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**16))
def test_softmax_rows_sum_to_one_and_match_numpy(rows: int, cols: int, scale: int, seed: int) -> None:
    x = rand_array((rows, cols), seed=seed) * scale
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    got = run(Tensor(x).softmax())
    check(got, e / e.sum(-1, keepdims=True))
    check(got.sum(-1), np.ones(rows), rtol=1e-5, atol=1e-5)
