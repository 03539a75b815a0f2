"""The reference interpreter at kernel level: hand-built kernel ASTs run on numpy buffers.

Kernels are SINK(END(STORE(INDEX(BUFFER, idx), value), *ranges)); values load
with LOAD(INDEX(buf, idx)) or the gated LOAD(INDEX(buf, idx), alt, gate), and
reduce with REDUCE(value, *ranges) and arg (Ops.ADD | Ops.MAX, ()).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import check, rand_array

from egraph_compiler import AxisType, Ops, UOp
from egraph_compiler.backends.reference import kernel_ranges, range_axes, run_kernel
from egraph_compiler.ir.diagnostics import OutOfBounds, UnsupportedOp
from egraph_compiler.ir.dtypes import DType, dtypes

F32 = dtypes.float32


def buf(name: str, n: int, dt: DType = F32) -> UOp:
    return UOp(Ops.BUFFER, dt, (), (name, (n,)))


def load(b: UOp, idx: UOp, alt: UOp | None = None, gate: UOp | None = None) -> UOp:
    extra = () if gate is None else (alt if alt is not None else UOp.const(0, b.dtype), gate)
    return UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (b, idx)), *extra))


def store(b: UOp, idx: UOp, value: UOp, gate: UOp | None = None) -> UOp:
    return UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (b, idx)), value, *(() if gate is None else (gate,))))


def kernel(*stores_with_ranges: tuple[UOp, tuple[UOp, ...]]) -> UOp:
    return UOp.build(Ops.SINK, tuple(UOp.build(Ops.END, (st, *rs)) if rs else st for st, rs in stores_with_ranges))


def reduce(value: UOp, *ranges: UOp, op: Ops = Ops.ADD) -> UOp:
    return UOp(Ops.REDUCE, value.dtype, (value, *ranges), (op, ()))


def loop(n: int, key: Any) -> UOp:
    return UOp.range(n, key, AxisType.LOOP)


def red(n: int, key: Any) -> UOp:
    return UOp.range(n, key, AxisType.REDUCE)


# ---- computing kernels -------------------------------------------------------------------------


@pytest.mark.parametrize("max_elements", [1 << 22, 7, 1])  # also the sliced path for big loop nests
def test_gemm_kernel_matches_numpy(max_elements: int) -> None:
    m, k, n = 5, 4, 3
    a, b, c = buf("A", m * k), buf("B", k * n), buf("C", m * n)
    i, j, r = loop(m, 0), loop(n, 1), red(k, 2)
    ast = kernel((store(c, i * n + j, reduce(load(a, i * k + r) * load(b, r * n + j), r)), (i, j)))
    av, bv, cv = rand_array((m * k,), seed=1), rand_array((k * n,), seed=2), np.zeros(m * n, np.float32)
    run_kernel(ast, {"A": av, "B": bv, "C": cv}, max_elements=max_elements)
    check(cv.reshape(m, n), av.reshape(m, k) @ bv.reshape(k, n))


def test_elementwise_kernel_with_broadcast_index() -> None:
    x, bias, y = buf("X", 12), buf("bias", 4), buf("Y", 12)
    i, j = loop(3, "i"), loop(4, "j")
    v = (load(x, i * 4 + j) + load(bias, j)).maximum(UOp.const(0.0, F32))
    xv, bv, yv = rand_array((12,), seed=3), rand_array((4,), seed=4), np.zeros(12, np.float32)
    run_kernel(kernel((store(y, i * 4 + j, v), (i, j))), {"X": xv, "bias": bv, "Y": yv})
    check(yv.reshape(3, 4), np.maximum(xv.reshape(3, 4) + bv, 0))


def test_transposed_store_and_flip() -> None:
    x, y = buf("X", 12), buf("Y", 12)
    i, j = loop(3, 0), loop(4, 1)
    xv, yv = rand_array((12,), seed=5), np.zeros(12, np.float32)
    run_kernel(kernel((store(y, j * 3 + (2 - i), load(x, i * 4 + j)), (i, j))), {"X": xv, "Y": yv})
    check(yv.reshape(4, 3), xv.reshape(3, 4)[::-1].T)


def test_max_reduce_with_where_padding() -> None:
    x, y = buf("X", 12), buf("Y", 3)
    i, r = loop(3, 0), red(5, 1)
    v = (r < 4).where(load(x, i * 4 + r), UOp.const(-np.inf, F32))  # r == 4 would read the next row: masked off
    xv, yv = rand_array((12,), seed=6), np.zeros(3, np.float32)
    run_kernel(kernel((store(y, i, reduce(v, r, op=Ops.MAX)), (i,))), {"X": xv, "Y": yv})
    check(yv, xv.reshape(3, 4).max(1))


def test_two_reduces_and_two_stores_in_one_kernel() -> None:
    x, s, q = buf("X", 20), buf("S", 4), buf("Q", 4)
    i, r = loop(4, 0), red(5, 1)
    xi = load(x, i * 5 + r)
    ast = kernel((store(s, i, reduce(xi, r)), (i,)), (store(q, i, reduce(xi * xi, r) - reduce(xi, r)), (i,)))
    xv, sv, qv = rand_array((20,), seed=7), np.zeros(4, np.float32), np.zeros(4, np.float32)
    run_kernel(ast, {"X": xv, "S": sv, "Q": qv})
    x2 = xv.reshape(4, 5).astype(np.float64)
    check(sv, x2.sum(1))
    check(qv, (x2 * x2).sum(1) - x2.sum(1))


def test_nested_reduce_over_two_ranges() -> None:
    x, y = buf("X", 24), buf("Y", 2)
    i, r1, r2 = loop(2, 0), red(3, 1), red(4, 2)
    xv, yv = rand_array((24,), seed=8), np.zeros(2, np.float32)
    run_kernel(kernel((store(y, i, reduce(load(x, i * 12 + r1 * 4 + r2), r1, r2)), (i,))), {"X": xv, "Y": yv})
    check(yv, xv.reshape(2, 12).sum(1))


def test_integer_kernel_uses_floor_division_and_floor_modulo() -> None:
    src, dst = buf("I", 8, dtypes.int32), buf("O", 8, dtypes.int32)
    i = loop(8, 0)
    v = load(src, i)
    ast = kernel((store(dst, i, (v // UOp.const(3, dtypes.int32)) * 100 + v % UOp.const(3, dtypes.int32)), (i,)))
    iv, ov = np.array([-7, -6, -1, 0, 1, 5, 9, 100], np.int32), np.zeros(8, np.int32)
    run_kernel(ast, {"I": iv, "O": ov})
    check(ov, (iv // 3) * 100 + iv % 3)


def test_index_arithmetic_with_div_mod_reshape() -> None:
    x, y = buf("X", 24), buf("Y", 24)
    i = loop(24, 0)  # read a (4, 6) array as its transpose (6, 4) through // and %
    xv, yv = rand_array((24,), seed=9), np.zeros(24, np.float32)
    run_kernel(kernel((store(y, i, load(x, (i % 4) * 6 + i // 4)), (i,))), {"X": xv, "Y": yv})
    check(yv, xv.reshape(4, 6).T.reshape(-1))


def test_gated_load_uses_the_alternative_value() -> None:
    x, y = buf("X", 4), buf("Y", 6)
    i = loop(6, 0)
    v = load(x, i, UOp.const(7.5, F32), i < 4)
    xv, yv = rand_array((4,), seed=10), np.zeros(6, np.float32)
    run_kernel(kernel((store(y, i, v), (i,))), {"X": xv, "Y": yv})
    check(yv, np.concatenate([xv, [7.5, 7.5]]))


def test_gated_store_writes_only_where_the_gate_holds() -> None:
    y = buf("Y", 4)
    i = loop(6, 0)
    yv = np.full(4, -1.0, np.float32)
    run_kernel(kernel((store(y, i, i.cast(F32) * 2, gate=i < 4), (i,))), {"Y": yv})
    check(yv, np.arange(4) * 2.0)
    y2, yv2 = buf("Y2", 6), np.full(6, -1.0, np.float32)
    run_kernel(kernel((store(y2, i, i.cast(F32), gate=(i % 2).eq(0)), (i,))), {"Y2": yv2})
    check(yv2, [0, -1, 2, -1, 4, -1])


# ---- bounds checking ---------------------------------------------------------------------------


def test_out_of_bounds_load_raises() -> None:
    x, y = buf("X", 4), buf("Y", 5)
    i = loop(5, 0)
    with pytest.raises(OutOfBounds):
        run_kernel(kernel((store(y, i, load(x, i)), (i,))), {"X": np.zeros(4, np.float32), "Y": np.zeros(5, np.float32)})


def test_negative_index_raises() -> None:
    x, y = buf("X", 4), buf("Y", 4)
    i = loop(4, 0)
    with pytest.raises(OutOfBounds):
        run_kernel(kernel((store(y, i, load(x, i - 1)), (i,))), {"X": np.zeros(4, np.float32), "Y": np.zeros(4, np.float32)})


def test_out_of_bounds_store_raises() -> None:
    y = buf("Y", 4)
    i = loop(5, 0)
    with pytest.raises(OutOfBounds):
        run_kernel(kernel((store(y, i, i.cast(F32)), (i,))), {"Y": np.zeros(4, np.float32)})


def test_out_of_bounds_inside_a_reduce_raises() -> None:
    x, y = buf("X", 12), buf("Y", 3)
    i, r = loop(3, 0), red(5, 1)
    with pytest.raises(OutOfBounds):
        run_kernel(
            kernel((store(y, i, reduce(load(x, i * 4 + r), r)), (i,))),
            {"X": np.zeros(12, np.float32), "Y": np.zeros(3, np.float32)},
        )


def test_where_guarded_access_does_not_raise() -> None:
    x, y = buf("X", 4), buf("Y", 5)
    i = loop(5, 0)
    v = (i < 4).where(load(x, i), UOp.const(-1.0, F32))
    xv, yv = rand_array((4,), seed=11), np.zeros(5, np.float32)
    run_kernel(kernel((store(y, i, v), (i,))), {"X": xv, "Y": yv})
    check(yv, np.concatenate([xv, [-1.0]]))


def test_gate_guarded_access_does_not_raise() -> None:
    x, y = buf("X", 4), buf("Y", 8)
    i = loop(8, 0)
    v = load(x, i - 2, UOp.const(0.0, F32), (i >= 2) & (i < 6))  # a padded read: zeros around X
    xv, yv = rand_array((4,), seed=12), np.ones(8, np.float32)
    run_kernel(kernel((store(y, i, v), (i,))), {"X": xv, "Y": yv})
    check(yv, np.pad(xv, (2, 2)))


def test_nested_where_guards_each_branch_separately() -> None:
    x, y = buf("X", 4), buf("Y", 3)
    i = loop(3, 0)
    v = (i < 2).where((i < 1).where(load(x, i), load(x, i + 1)), load(x, i * 100 - 200))
    xv, yv = rand_array((4,), seed=13), np.zeros(3, np.float32)
    run_kernel(kernel((store(y, i, v), (i,))), {"X": xv, "Y": yv})
    check(yv, xv[[0, 2, 0]])
    bad = (i < 2).where((i < 1).where(load(x, i), load(x, i + 5)), load(x, i))  # i == 1 reads X[6]
    with pytest.raises(OutOfBounds):
        run_kernel(kernel((store(y, i, bad), (i,))), {"X": xv, "Y": yv})


def test_guarded_reduce_over_a_padded_window() -> None:
    x, y = buf("X", 6), buf("Y", 6)
    i, r = loop(6, 0), red(3, 1)
    pos = i + r - 1  # 3-tap box filter with zero padding
    v = reduce(((pos >= 0) & (pos < 6)).where(load(x, pos), UOp.const(0.0, F32)), r)
    xv, yv = rand_array((6,), seed=14), np.zeros(6, np.float32)
    run_kernel(kernel((store(y, i, v), (i,))), {"X": xv, "Y": yv})
    check(yv, np.convolve(xv.astype(np.float64), np.ones(3), mode="same"))


def test_kernel_must_be_rooted_at_sink() -> None:
    y = buf("Y", 2)
    i = loop(2, 0)
    with pytest.raises(UnsupportedOp):
        run_kernel(UOp.build(Ops.END, (store(y, i, i.cast(F32)), i)), {"Y": np.zeros(2, np.float32)})


def test_a_kernel_of_more_ranges_than_numpy_has_axes() -> None:
    """Forty sibling reductions in one kernel: 41 ranges, beyond numpy's 32 axes. Ranges never live at once share
    an axis (`range_axes`), so the kernel runs (it raised a raw RuntimeError)."""
    x, y = buf("X", 20), buf("Y", 4)
    i = loop(4, 0)
    terms = [reduce(load(x, i * 5 + red(5, k)) * float(k), red(5, k)) for k in range(1, 41)]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    xv, yv = rand_array((20,), seed=9), np.zeros(4, np.float32)
    ast = kernel((store(y, i, total), (i,)))
    assert len(kernel_ranges(ast)) == 41
    assert range_axes(ast)[1] == 2
    run_kernel(ast, {"X": xv, "Y": yv})
    check(yv, xv.reshape(4, 5).astype(np.float64).sum(1) * sum(range(1, 41)))


def test_nested_reductions_keep_apart_axes() -> None:
    x = buf("X", 24)
    i, r1, r2 = loop(2, 0), red(3, 1), red(4, 2)
    inner = reduce(load(x, i * 12 + r1 * 4 + r2), r2)
    ast = kernel((store(buf("Y", 2), i, reduce(inner * inner, r1)), (i,)))
    axis, n = range_axes(ast)
    assert n == 3 and len({axis[i], axis[r1], axis[r2]}) == 3
