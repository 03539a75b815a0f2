"""The LLVM backend against the reference interpreter, on hand-built kernel ASTs.

Every test runs one Program twice, on LLVMBackend and on ReferenceBackend, and
compares: integers and bools exactly, floats within tolerance (NaN == NaN).
Run as a script (`python tests/test_llvm_backend.py`) for a speed sanity check.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
from helpers import check, rand_array
from hypothesis import assume, given
from hypothesis import strategies as st

from egraph_compiler import AxisType, Ops, UOp
from egraph_compiler.backends import llvm as llvm_backend
from egraph_compiler.backends.llvm import CACHE_STATS, LLVMBackend
from egraph_compiler.backends.reference import ReferenceBackend
from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.dtypes import DType, dtypes
from egraph_compiler.kernel.memory_plan import Coslice
from egraph_compiler.kernel.program import BufferSpec, Kernel, Program

F32 = dtypes.float32
ALL = [d for d in dtypes.all() if d is not dtypes.void]
INTS = [d for d in ALL if d.is_int]
FLOATS = [d for d in ALL if d.is_float]


# ---- kernel builders (the style of test_reference_kernels.py) ------------------------------------


def buf(name: str, n: int, dt: DType = F32) -> UOp:
    return UOp(Ops.BUFFER, dt, (), (name, (n,)))


def load(b: UOp, idx: UOp | None, alt: UOp | None = None, gate: UOp | None = None) -> UOp:
    extra = () if gate is None else (alt if alt is not None else UOp.const(0, b.dtype), gate)
    index = UOp.build(Ops.INDEX, (b,) if idx is None else (b, idx))
    return UOp.build(Ops.LOAD, (index, *extra))


def store(b: UOp, idx: UOp, value: UOp, gate: UOp | None = None) -> UOp:
    return UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (b, idx)), value, *(() if gate is None else (gate,))))


def kernel(*stores_with_ranges: tuple[UOp, tuple[UOp, ...]]) -> UOp:
    return UOp.build(Ops.SINK, tuple(UOp.build(Ops.END, (s, *rs)) if rs else s for s, rs in stores_with_ranges))


def reduce(value: UOp, *ranges: UOp, op: Ops = Ops.ADD) -> UOp:
    return UOp(Ops.REDUCE, value.dtype, (value, *ranges), (op, ()))


def rng(n: int, key: Any, t: AxisType = AxisType.LOOP) -> UOp:
    return UOp.range(n, key, t)


def alu(op: Ops, *src: UOp) -> UOp:
    return UOp.build(op, src)


# ---- running one kernel on both backends ---------------------------------------------------------


def run_both(
    ast: UOp, inputs: dict[str, np.ndarray], backend: LLVMBackend | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run the kernel as a Program on LLVM and on the reference; every non-input buffer is an output."""
    specs: dict[str, BufferSpec] = {}
    for u in ast.toposort():
        if u.op is Ops.BUFFER:
            name, shape = u.arg
            kind = "input" if name in inputs else "output"
            specs[name] = BufferSpec(name, u.dtype, math.prod(shape), kind, tuple(shape))
    outs = [n for n, s in specs.items() if s.kind == "output"]
    ins = [n for n in specs if n in inputs]
    got: list[dict[str, np.ndarray]] = []
    for be in (backend or LLVMBackend(), ReferenceBackend()):
        prog = Program([Kernel.from_ast("k", ast)], specs, ins, outs, be, be.name, single_output=False)
        got.append(dict(zip(outs, prog(**inputs))))
    return got[0], got[1]


def tol(d: DType) -> float:
    return {dtypes.float16: 2e-3, dtypes.bfloat16: 1e-2}.get(d, 1e-4)


def compare(ast: UOp, inputs: dict[str, np.ndarray], rtol: float = 1e-4, backend: LLVMBackend | None = None) -> None:
    mine, ref = run_both(ast, inputs, backend)
    for name in ref:
        check(mine[name], ref[name], rtol=rtol, atol=rtol)


def values(d: DType, n: int, seed: int, special: bool = True) -> np.ndarray:
    """Random values of d with the edge cases of its type mixed in."""
    r = np.random.default_rng(seed)
    if d.is_bool:
        return r.random(n) < 0.5
    if d.is_float:
        x = (r.standard_normal(n) * 4).astype(np.float32 if d is dtypes.bfloat16 else d.np)
        if special:
            x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.5]
        return x
    lo, hi = int(d.min), int(d.max)
    x = r.integers(lo, hi, n, endpoint=True, dtype=np.int64 if d.kind == "i" else np.uint64).astype(d.np)
    x[: n // 2] = r.integers(-9 if d.kind == "i" else 0, 10, n // 2).astype(d.np)
    if special:
        x[n // 2 : n // 2 + 4] = np.array([lo, hi, 0, 1 if d.is_unsigned else -1], dtype=object).astype(d.np)
    return x


def elementwise(op: Ops, in_dts: list[DType], n: int = 67, out_dt: DType | None = None) -> tuple[UOp, list[str]]:
    i = rng(n, "i")
    srcs = [load(buf(f"x{k}", n, d), i) for k, d in enumerate(in_dts)]
    value = alu(op, *srcs) if out_dt is None else UOp(op, out_dt, tuple(srcs))
    return kernel((store(buf("out", n, value.dtype), i, value), (i,))), [f"x{k}" for k in range(len(in_dts))]


# ---- every ALU op on every dtype -----------------------------------------------------------------

BINARY_ALL = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE]
BINARY_INT = [Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR]
BITWISE = [Ops.XOR, Ops.OR, Ops.AND]
BINARY_CASES = (
    [(op, d) for op in BINARY_ALL for d in ALL]
    + [(op, d) for op in BINARY_INT for d in INTS]
    + [(Ops.FDIV, d) for d in FLOATS]
    + [(op, d) for op in BITWISE for d in [*INTS, dtypes.bool]]
)


def _name(x: Any) -> str:
    return str(getattr(x, "name", x))


@pytest.mark.parametrize("op,d", BINARY_CASES, ids=_name)
def test_binary_op(op: Ops, d: DType) -> None:
    ast, names = elementwise(op, [d, d])
    a, b = values(d, 67, 1), values(d, 67, 2)
    if op in (Ops.SHL, Ops.SHR):  # amounts around [0, bits), negative and too big ones too
        b = np.random.default_rng(3).integers(0 if d.is_unsigned else -3, d.bits + 3, 67).astype(d.np)
    if op in (Ops.IDIV, Ops.MOD) and d.kind == "i":
        a[:4], b[:4] = [d.min, d.min, -7, 7], [-1, 0, 2, -2]
    compare(ast, dict(zip(names, (a, b))), rtol=tol(d))


UNARY_CASES = [(op, d) for op in (Ops.RECIP, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT, Ops.TRUNC) for d in FLOATS]


@pytest.mark.parametrize("op,d", UNARY_CASES + [(Ops.TRUNC, d) for d in INTS], ids=_name)
def test_unary_op(op: Ops, d: DType) -> None:
    ast, names = elementwise(op, [d])
    compare(ast, {names[0]: values(d, 67, 4)}, rtol=tol(d))


@pytest.mark.parametrize("s,d", [(s, d) for s in ALL for d in ALL if s != d], ids=_name)
def test_cast(s: DType, d: DType) -> None:
    ast, names = elementwise(Ops.CAST, [s], out_dt=d)
    x = values(s, 67, 5)
    if s.is_float and d.is_int and s is not dtypes.float16:
        x[6:9] = [1e30, -1e30, 3e9]  # out of range: the reference's int64 conversion
    compare(ast, {names[0]: x}, rtol=max(tol(d), tol(s)))


@pytest.mark.parametrize(
    "s,d",
    [(s, d) for s in ALL for d in ALL if s != d and s.itemsize == d.itemsize and not s.is_bool and not d.is_bool],
    ids=_name,
)
def test_bitcast(s: DType, d: DType) -> None:
    ast, names = elementwise(Ops.BITCAST, [s], out_dt=d)
    compare(ast, {names[0]: values(s, 67, 6, special=not d.is_float)}, rtol=0)


@pytest.mark.parametrize("d", ALL, ids=_name)
def test_where(d: DType) -> None:
    ast, names = elementwise(Ops.WHERE, [dtypes.bool, d, d])
    compare(ast, {names[0]: values(dtypes.bool, 67, 7), names[1]: values(d, 67, 8), names[2]: values(d, 67, 9)})


@pytest.mark.parametrize("d", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32, dtypes.index], ids=_name)
@pytest.mark.parametrize("c", [1, 2, 8, 7, -1, -2, -8, -7, 0])
def test_divmod_by_constants(d: DType, c: int) -> None:
    if d.is_unsigned and c < 0:
        pytest.skip("no negative unsigned divisors")
    n = 50
    i = rng(n, "i")
    x = load(buf("x", n, d), i)
    k = UOp.const(c, d)
    r = i.cast(d)  # a non-negative numerator: the udiv/urem path
    outs = [x // k, x % k, r // k, r % k]
    ast = kernel(*((store(buf(f"o{j}", n, d), i, v), (i,)) for j, v in enumerate(outs)))
    compare(ast, {"x": values(d, n, 10)}, rtol=0)


def test_divmod_by_positive_ranges() -> None:
    n = 40
    i, j = rng(n, 0), rng(5, 1)
    x = load(buf("x", n, dtypes.int32), i)
    den = (j + 1).cast(dtypes.int32)  # vmin >= 1: no zero guard; x may be negative: floor fix-up
    ast = kernel(
        (store(buf("q", n * 5, dtypes.int32), i * 5 + j, x // den), (i, j)),
        (store(buf("m", n * 5, dtypes.int32), i * 5 + j, x % den), (i, j)),
    )
    compare(ast, {"x": values(dtypes.int32, n, 11)}, rtol=0)


@pytest.mark.parametrize("d", ALL, ids=_name)
def test_constants_of_every_dtype(d: DType) -> None:
    if d.is_float:
        consts: list[Any] = [0.0, -0.0, 1.0, -2.5, 0.1, math.inf, -math.inf, math.nan, 1e-30, 65504.0]
    elif d.is_bool:
        consts = [False, True]
    else:
        consts = [0, 1, d.max, d.min, 3 if d.is_unsigned else -3]
    y = buf("Y", len(consts), d)
    ast = kernel(*((store(y, UOp.const(k, dtypes.index), UOp.const(c, d)), ()) for k, c in enumerate(consts)))
    mine, ref = run_both(ast, {})
    check(mine["Y"], ref["Y"], rtol=0, atol=0)


# ---- loops, reductions, memory -------------------------------------------------------------------


@pytest.mark.parametrize("fast_math", [False, True])
def test_gemm_with_reduce(fast_math: bool) -> None:
    m, k, n = 9, 13, 11
    a, b, c = buf("A", m * k), buf("B", k * n), buf("C", m * n)
    i, j, r = rng(m, 0), rng(n, 1), rng(k, 2, AxisType.REDUCE)
    ast = kernel((store(c, i * n + j, reduce(load(a, i * k + r) * load(b, r * n + j), r)), (i, j)))
    av, bv = rand_array((m * k,), seed=1), rand_array((k * n,), seed=2)
    mine, _ = run_both(ast, {"A": av, "B": bv}, LLVMBackend(fast_math=fast_math))
    check(mine["C"], (av.reshape(m, k) @ bv.reshape(k, n)).reshape(-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "d",
    [F32, dtypes.float64, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.uint8, dtypes.int64, dtypes.bool],
    ids=_name,
)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX, Ops.MUL], ids=_name)
def test_reduce_ops_and_dtypes(d: DType, op: Ops) -> None:
    rows, cols = 5, 7
    x, y = buf("X", rows * cols, d), buf("Y", rows, d)
    i, r = rng(rows, 0), rng(cols, 1, AxisType.REDUCE)
    ast = kernel((store(y, i, reduce(load(x, i * cols + r), r, op=op)), (i,)))
    xv = values(d, rows * cols, 12, special=False)
    if d.is_float:
        xv = (xv / 8 + 1).astype(xv.dtype)  # products stay moderate
        if op is Ops.MAX:
            xv[3] = np.nan  # NaN propagates through max
    compare(ast, {"X": xv}, rtol=tol(d))


def test_empty_reduce_is_zero_and_empty_loop_stores_nothing() -> None:
    x, y, z = buf("X", 4), buf("Y", 3), buf("Z", 3)
    i, r, e = rng(3, 0), rng(0, 1, AxisType.REDUCE), rng(0, 2)
    ast = kernel((store(y, i, reduce(load(x, i), r, op=Ops.MUL)), (i,)), (store(z, e, UOp.const(1.0, F32)), (e,)))
    compare(ast, {"X": rand_array((4,), seed=1)})


def test_nested_and_hoisted_reduces() -> None:
    # sum_j (x[i,j] - max_k x[i,k]) * sum_k x[i,k]: the inner reduces do not depend on j
    rows, cols = 6, 37
    x, y = buf("X", rows * cols), buf("Y", rows)
    i, j, k = rng(rows, 0), rng(cols, 1, AxisType.REDUCE), rng(cols, 2, AxisType.REDUCE)
    mx = reduce(load(x, i * cols + k), k, op=Ops.MAX)
    sm = reduce(load(x, i * cols + k), k)
    ast = kernel((store(y, i, reduce((load(x, i * cols + j) - mx) * sm, j)), (i,)))
    compare(ast, {"X": rand_array((rows * cols,), seed=3)}, rtol=1e-3)
    ir = LLVMBackend().render(Kernel.from_ast("k", ast), None)
    assert ir.count("icmp slt i64") == 4  # rows, two hoisted k loops, j: nothing recomputed per j


def test_two_reduces_over_one_range_and_two_stores() -> None:
    x, s, q = buf("X", 20), buf("S", 4), buf("Q", 4)
    i, r = rng(4, 0), rng(5, 1, AxisType.REDUCE)
    xi = load(x, i * 5 + r)
    ast = kernel((store(s, i, reduce(xi, r)), (i,)), (store(q, i, reduce(xi * xi, r) - reduce(xi, r)), (i,)))
    compare(ast, {"X": rand_array((20,), seed=7)})


def test_gated_load_pads_without_touching_memory() -> None:
    n, pad = 10, 3
    x, y = buf("X", n), buf("Y", n + 2 * pad)
    i = rng(n + 2 * pad, 0)
    v = load(x, i - pad, UOp.const(7.5, F32), (i >= pad) & (i < n + pad))
    ast = kernel((store(y, i, v), (i,)))
    compare(ast, {"X": rand_array((n,), seed=12)})
    assert ", label %ld" in LLVMBackend().render(Kernel.from_ast("k", ast), None)  # a branch around the load


def test_a_gate_that_is_the_constant_true_guards_nothing() -> None:
    """The rules may fold a padded view's gate to True. LOAD(index, alt, True) and STORE(index, value, True) are
    the ungated accesses (Kernel.from_ast drops the gate), so a padded tile's load past its buffer takes its
    store's gate, as an ungated one does (taken for a guard, the constant let it load past the buffer)."""
    n = 10
    x, y = buf("X", n), buf("Y", n)
    o, u = rng(3, 0), rng(4, 1, AxisType.UPCAST)  # a tile of 4 rows, 12 rows for 10
    row = o * 4 + u
    true = UOp.const(True, dtypes.bool)
    ast = kernel((store(y, row, load(x, row, UOp.const(0.0, F32), true) * 2.0, gate=row < n), (o, u)))
    k = Kernel.from_ast("k", ast)
    assert not any(w.op in (Ops.LOAD, Ops.STORE) and len(w.src) == 3 and w.src[2] is true for w in k.ast.toposort())
    assert "br i1 true" not in LLVMBackend().render(k, None)
    compare(ast, {"X": rand_array((n,), seed=3)})


def test_where_guarded_loads() -> None:
    x, y, z = buf("X", 4), buf("Y", 5), buf("Z", 3)
    i, k = rng(5, 0), rng(3, 1)
    v = (i < 4).where(load(x, i), UOp.const(-1.0, F32))  # i == 4 would read X[4]
    w = (k < 2).where((k < 1).where(load(x, k), load(x, k + 1)), load(x, k * 100 - 200))
    compare(kernel((store(y, i, v), (i,)), (store(z, k, w), (k,))), {"X": rand_array((4,), seed=13)})


def test_guarded_reduce_over_a_padded_window() -> None:
    x, y = buf("X", 6), buf("Y", 6)
    i, r = rng(6, 0), rng(3, 1, AxisType.REDUCE)
    pos = i + r - 1
    v = reduce(((pos >= 0) & (pos < 6)).where(load(x, pos), UOp.const(0.0, F32)), r)
    compare(kernel((store(y, i, v), (i,))), {"X": rand_array((6,), seed=14)})


def test_unguarded_load_is_clamped_into_the_buffer() -> None:
    x, y = buf("X", 4), buf("Y", 4)
    i = rng(4, 0)
    idx = load(buf("I", 4, dtypes.int32), i)  # data-dependent index: bounds unknown
    compare(kernel((store(y, i, load(x, idx)), (i,))), {"X": rand_array((4,), seed=15), "I": np.array([3, 0, 2, 1], np.int32)})


def test_gated_stores() -> None:
    y, y2 = buf("Y", 4), buf("Y2", 6)
    i = rng(6, 0)
    ast = kernel((store(y, i, i.cast(F32) * 2, gate=i < 4), (i,)), (store(y2, i, i.cast(F32) + 1.0, gate=(i % 2).eq(0)), (i,)))
    mine, ref = run_both(ast, {})
    check(mine["Y"], [0.0, 2.0, 4.0, 6.0])
    check(mine["Y2"], ref["Y2"])


def test_scalar_load_after_and_two_items_in_order() -> None:
    # item 2 reads what item 1 stored (through AFTER); LOAD(INDEX(buf)) without an index reads element 0
    s, x, t, y = buf("S", 1), buf("X", 8), buf("T", 8), buf("Y", 8)
    i = rng(8, 0)
    first = store(t, i, load(x, i) * load(s, None))
    t_after = UOp.build(Ops.AFTER, (t, first))
    ast = kernel((first, (i,)), (store(y, i, load(t_after, 7 - i) + 1.0), (i,)))
    compare(ast, {"S": np.array([3.0], np.float32), "X": rand_array((8,), seed=15)})


def test_every_backend_refuses_a_range_no_end_binds() -> None:
    """The kernel contract is one (kernel/analysis.store_items): a stored value over a range that no END around
    its STORE binds is refused alike by the reference backend, LLVM and the CUDA renderer, naming the range."""
    from egraph_compiler.backends.cuda import plan_kernel
    from egraph_compiler.backends.reference import run_kernel

    x, y = buf("X", 6), buf("Y", 6)
    i = rng(6, 0)
    ast = UOp.build(Ops.SINK, (store(y, i, load(x, i) * 2.0),))  # no END around the store
    refusals = [
        lambda: run_kernel(ast, {"X": np.zeros(6, np.float32), "Y": np.zeros(6, np.float32)}),
        lambda: run_both(ast, {"X": rand_array((6,), seed=16)}),  # LLVM compiles first
        lambda: plan_kernel(Kernel.from_ast("k", ast)),
    ]
    for refuse in refusals:
        with pytest.raises(UnsupportedOp, match="a stored value uses a range no END binds") as err:
            refuse()
        assert err.value.at == "RANGE 0"


# ---- UPCAST / UNROLL / THREAD ----------------------------------------------------------------------


@pytest.mark.parametrize("inner", [1, 3, 5, 8, 13])
def test_upcast_elementwise_and_out_of_order_end(inner: int) -> None:
    outer = 7
    n = outer * inner
    x, b, y, z = buf("X", n), buf("B", inner), buf("Y", n), buf("Z", n)
    o, u = rng(outer, 0), rng(inner, 1, AxisType.UPCAST)
    idx = o * inner + u
    v = (load(x, idx) + load(b, u)).maximum(UOp.const(0.0, F32))
    ast = kernel((store(y, idx, v), (o, u)), (store(z, idx, v * 2.0), (u, o)))  # upcast listed outermost too
    compare(ast, {"X": rand_array((n,), seed=17), "B": rand_array((inner,), seed=18)})


@pytest.mark.parametrize("up,unroll", [(1, 1), (3, 2), (4, 5), (16, 3)])
def test_gemm_with_upcast_and_unroll(up: int, unroll: int) -> None:
    m, n, kk = 5, 3 * up, 2 * unroll
    a, b, c = buf("A", m * kk), buf("B", kk * n), buf("C", m * n)
    i = rng(m, 0)
    jo, ju = rng(3, 1), rng(up, 2, AxisType.UPCAST)
    ko, ku = rng(2, 3, AxisType.REDUCE), rng(unroll, 4, AxisType.UNROLL)
    j, k = jo * up + ju, ko * unroll + ku
    ast = kernel((store(c, i * n + j, reduce(load(a, i * kk + k) * load(b, k * n + j), ko, ku)), (i, jo, ju)))
    compare(ast, {"A": rand_array((m * kk,), seed=19), "B": rand_array((kk * n,), seed=20)})
    if up > 1:  # one k loop holds all upcast accumulators
        assert LLVMBackend().render(Kernel.from_ast("k", ast), None).count("icmp slt i64") == 3


@pytest.mark.parametrize("d,op", [(F32, Ops.ADD), (dtypes.float64, Ops.ADD), (F32, Ops.MUL), (F32, Ops.MAX)], ids=_name)
@pytest.mark.parametrize("swap", [False, True])
def test_gemm_tile_with_epilogue(d: DType, op: Ops, swap: bool) -> None:
    """A register tile (rows x columns upcast) with a residual epilogue, its column loop nested outside or
    inside the row loop: the column copies accumulate in one vector, a max's too."""
    m, n, kk, um, un = 6, 16, 7, 3, 8
    a, b, x, c = buf("A", m * kk, d), buf("B", kk * n, d), buf("X", m * n, d), buf("C", m * n, d)
    io, iu, jo, ju = rng(m // um, 0), rng(um, 1, AxisType.UPCAST), rng(n // un, 2), rng(un, 3, AxisType.UPCAST)
    k = rng(kk, 4, AxisType.REDUCE)
    i, j = io * um + iu, jo * un + ju
    acc = reduce(load(a, i * kk + k) * load(b, k * n + j), k, op=op)
    ranges = (jo, ju, io, iu) if swap else (io, iu, jo, ju)
    ast = kernel((store(c, i * n + j, load(x, i * n + j) + acc), ranges))
    scale = 0.5 if op is Ops.MUL else 1.0  # products of 7 normals stay in range
    compare(
        ast,
        {
            "A": (rand_array((m * kk,), seed=40) * scale).astype(d.np),
            "B": (rand_array((kk * n,), seed=41) * scale).astype(d.np),
            "X": rand_array((m * n,), seed=42).astype(d.np),
        },
    )
    vector = f"alloca <{un} x {'double' if d is dtypes.float64 else 'float'}>"
    assert vector in LLVMBackend().render(Kernel.from_ast("k", ast), None)


def test_vector_max_accumulators_keep_nan_and_zero_order() -> None:
    """A max tile with vector accumulators (8 columns a vector, the window of 3 unrolled) does per lane what the
    scalar chain does: a NaN anywhere in a lane's window propagates, and of -0.0 and 0.0 the later one wins, bit
    for bit as the reference interpreter gives them."""
    rows, cols, win = 3, 16, 3
    x, y = buf("X", rows * (cols + win - 1)), buf("Y", rows * cols)
    i, jo, ju = rng(rows, 0), rng(cols // 8, 1), rng(8, 2, AxisType.UPCAST)
    k = rng(win, 3, AxisType.UNROLL)
    j = jo * 8 + ju
    ast = kernel((store(y, i * cols + j, reduce(load(x, i * (cols + win - 1) + j + k), k, op=Ops.MAX)), (i, jo, ju)))
    assert "alloca <8 x float>" in LLVMBackend().render(Kernel.from_ast("k", ast), None)
    data = values(F32, rows * (cols + win - 1), seed=44)
    data[10:14] = [-0.0, 0.0, -0.0, np.nan]
    data[20:23] = [0.0, -0.0, -np.inf]
    mine, ref = run_both(ast, {"X": data})
    assert mine["Y"].tobytes() == ref["Y"].tobytes()


def test_tile_without_a_contiguous_axis_keeps_scalar_accumulators() -> None:
    m, kk = 8, 5
    a, y = buf("A", m * kk), buf("Y", m * 3)
    iu, k = rng(m, 0, AxisType.UPCAST), rng(kk, 1, AxisType.REDUCE)
    ast = kernel((store(y, iu * 3, reduce(load(a, iu * kk + k), k)), (iu,)))  # stride 3: not contiguous
    compare(ast, {"A": rand_array((m * kk,), seed=43)})
    assert "alloca <" not in LLVMBackend().render(Kernel.from_ast("k", ast), None)


def test_reduce_of_only_unrolled_ranges() -> None:
    x, y = buf("X", 4 * 6), buf("Y", 4)
    i, r = rng(4, 0, AxisType.UPCAST), rng(6, 1, AxisType.UNROLL)
    ast = kernel((store(y, i, reduce(load(x, i * 6 + r), r, op=Ops.MAX)), (i,)))
    compare(ast, {"X": rand_array((24,), seed=21)})


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64])
def test_thread_range_splits_across_cores(n: int) -> None:
    x, y = buf("X", n * 5), buf("Y", n * 5)
    t, j = rng(n, 0, AxisType.THREAD), rng(5, 1)
    ast = kernel((store(y, t * 5 + j, load(x, t * 5 + j) * 3.0 + 1.0), (t, j)))
    be = LLVMBackend(threads=2)
    assert ("slices range 0" in be.render(Kernel.from_ast("k", ast), None)) == (n > 1)
    compare(ast, {"X": rand_array((n * 5,), seed=22)}, backend=be)


def test_thread_range_inside_a_loop_and_more_threads_than_cores() -> None:
    x, y = buf("X", 4 * 9), buf("Y", 4 * 9)
    o, t = rng(4, 0), rng(9, 1, AxisType.THREAD)
    ast = kernel((store(y, o * 9 + t, load(x, o * 9 + t) + 1.0), (o, t)))
    compare(ast, {"X": rand_array((36,), seed=23)}, backend=LLVMBackend(threads=5))


def test_big_loops_are_parallel_only_when_safe() -> None:
    n = 1 << 17
    x, y = buf("X", n), buf("Y", n)
    i = rng(n, 0)
    be = LLVMBackend(threads=2)
    ok = kernel((store(y, i, load(x, i) + 1.0), (i,)))
    assert "slices" in be.render(Kernel.from_ast("k", ok), None)
    compare(ok, {"X": rand_array((n,), seed=24)}, backend=be)
    shifted = kernel((store(y, i, load(y, (i + 1) % n)), (i,)))  # reads what another slice writes
    assert "slices" not in be.render(Kernel.from_ast("k", shifted), None)
    s = rng(16, 0)
    small = kernel((store(buf("Y", 16), s, UOp.const(1.0, F32)), (s,)))
    assert "slices" not in be.render(Kernel.from_ast("k", small), None)


# ---- GROUP_REDUCE: parallel partials -----------------------------------------------------------------

G = AxisType.GROUP_REDUCE


def scalar_items(*values: UOp) -> UOp:
    """One item per value, storing it to its own one-element buffer o<k> (no END loops)."""
    zero = UOp.const(0, dtypes.index)
    return UOp.build(Ops.SINK, tuple(store(buf(f"o{k}", 1, v.dtype), zero, v) for k, v in enumerate(values)))


def run_llvm(ast: UOp, inputs: dict[str, np.ndarray], backend: LLVMBackend) -> dict[str, np.ndarray]:
    specs = {
        u.arg[0]: BufferSpec(
            u.arg[0], u.dtype, math.prod(u.arg[1]), "input" if u.arg[0] in inputs else "output", tuple(u.arg[1])
        )
        for u in ast.toposort()
        if u.op is Ops.BUFFER
    }
    outs = [n for n, s in specs.items() if s.kind == "output"]
    prog = Program(
        [Kernel.from_ast("k", ast)], specs, [n for n in specs if n in inputs], outs, backend, backend.name, single_output=False
    )
    return dict(zip(outs, prog(**inputs)))


def compare_group(
    ast: UOp, inputs: dict[str, np.ndarray], rtol: float = 1e-4, groups: int | None = 1, threads: tuple[int, ...] = (1, 2, 3)
) -> None:
    """Against the reference, and bit-identical for every thread count; `groups`: partials functions expected."""
    mine, ref = run_both(ast, inputs, LLVMBackend(threads=threads[0]))
    for name in ref:
        check(mine[name], ref[name], rtol=rtol, atol=rtol)
    for t in threads[1:]:
        other = run_llvm(ast, inputs, LLVMBackend(threads=t))
        for name in mine:
            assert mine[name].tobytes() == other[name].tobytes(), f"{name}: threads={threads[0]} vs {t}"
    if groups is not None:
        ir = LLVMBackend().render(Kernel.from_ast("k", ast), None)
        assert ir.count("(..., %p): [%start, %end) slices group range") == groups


def group_values(d: DType, n: int, seed: int, op: Ops) -> np.ndarray:
    """Values whose reductions stay moderate (no cancellation in sums, products near 1)."""
    if d.is_float:
        r = np.random.default_rng(seed)
        x = r.uniform(0.5, 1.5, n) if op is Ops.ADD else r.uniform(0.9, 1.1, n) if op is Ops.MUL else r.normal(0, 4, n)
        return x.astype(np.float32 if d is dtypes.bfloat16 else d.np)
    return values(d, n, seed, special=False)


@pytest.mark.parametrize(
    "d", [F32, dtypes.float64, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.uint8, dtypes.bool], ids=_name
)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX, Ops.MUL], ids=_name)
def test_group_reduce_ops_and_dtypes(d: DType, op: Ops) -> None:
    t, m = 3, 7  # three groups on two threads
    x = buf("X", t * m, d)
    g, r = rng(t, "g", G), rng(m, "r", AxisType.REDUCE)
    ast = scalar_items(reduce(reduce(load(x, g * m + r), r, op=op), g, op=op))
    compare_group(ast, {"X": group_values(d, t * m, 30, op)}, rtol=tol(d))


@pytest.mark.parametrize("t", [1, 2, 3, 5, 8])
def test_group_reduce_bounds_and_thread_counts(t: int) -> None:
    m = 11
    x = buf("X", t * m)
    g, r = rng(t, "g", G), rng(m, "r", AxisType.REDUCE)
    ast = scalar_items(reduce(reduce(load(x, g * m + r), r), g))
    compare_group(ast, {"X": group_values(F32, t * m, 31, Ops.ADD)}, threads=(1, 2, 3, 8))


def test_group_reduce_of_a_plain_load_and_of_an_empty_range() -> None:
    x = buf("X", 6)
    g, e = rng(6, "g", G), rng(0, "e", G)
    ast = scalar_items(reduce(load(x, g), g, op=Ops.MAX), reduce(load(x, e), e))  # the empty reduce is 0
    compare_group(ast, {"X": rand_array((6,), seed=32)}, groups=1)


@pytest.mark.parametrize("d", [F32, dtypes.float16, dtypes.int32], ids=_name)
@pytest.mark.parametrize("t,up", [(2, 16), (3, 8), (1, 4)])
def test_group_sum_with_upcast_accumulators(d: DType, t: int, up: int) -> None:
    # the optimizer's x.sum(): T slices, each summing with `up` independent accumulators
    n = t * up * 37
    x = buf("X", n, d)
    g, ro, ri = rng(t, "g", G), rng(n // t // up, "ro", AxisType.REDUCE), rng(up, "ri", AxisType.UPCAST)
    ast = scalar_items(reduce(reduce(reduce(load(x, g * (n // t) + ro * up + ri), ro), ri), g))
    compare_group(ast, {"X": group_values(d, n, 33, Ops.ADD)}, rtol=tol(d))


def test_group_sum_is_vectorized() -> None:
    n = 1 << 12
    x = buf("X", n)
    g, ro, ri = rng(2, "g", G), rng(n // 32, "ro", AxisType.REDUCE), rng(16, "ri", AxisType.UPCAST)
    ast = scalar_items(reduce(reduce(reduce(load(x, g * (n // 2) + ro * 16 + ri), ro), ri), g))
    ir = LLVMBackend(threads=2).optimized_ir(Kernel.from_ast("sum", ast))
    partials = ir[ir.index("define void @k0_g0") :]
    assert " x float>" in partials[: partials.index("\n}")]


def test_group_reduce_with_epilogue_and_two_groups_in_one_item() -> None:
    # sqrt(sum x^2) * 2 and the variance E[x^2] - E[x]^2: two group REDUCEs sharing one GROUP_REDUCE range
    t, m = 3, 50
    n = t * m
    x = buf("X", n)
    g, r = rng(t, "g", G), rng(m, "r", AxisType.REDUCE)
    xi = load(x, g * m + r)
    sq = reduce(reduce(xi * xi, r), g)
    s = reduce(reduce(xi, r), g)
    mean = s * (1.0 / n)
    ast = scalar_items(sq.sqrt() * 2.0, sq * (1.0 / n) - mean * mean)
    compare_group(ast, {"X": rand_array((n,), seed=34)}, groups=3)  # sq once per item that uses it


def test_group_reduce_body_with_hoisted_and_nested_reduces() -> None:
    # sum_g max_r (x[g, r] - max_k x[k]) * sum_j x[g, j]: the max over k does not depend on g
    t, m = 4, 9
    x = buf("X", t * m)
    g, r, k, j = rng(t, "g", G), rng(m, "r", AxisType.REDUCE), rng(t * m, "k", AxisType.REDUCE), rng(m, "j")
    whole = reduce(load(x, k), k, op=Ops.MAX)
    row = reduce(load(x, g * m + j), j)
    ast = scalar_items(reduce(reduce(load(x, g * m + r) - whole, r, op=Ops.MAX) * row, g))
    compare_group(ast, {"X": rand_array((t * m,), seed=35)})


def test_group_reduce_items_run_in_order() -> None:
    # item 1 writes T (in parallel slices of a THREAD range); item 2's group REDUCE reads it through AFTER
    n, t = 64, 4
    x, tb = buf("X", n), buf("T", n)
    i = rng(n, "i", AxisType.THREAD)
    first = store(tb, i, load(x, i) * 2.0)
    g, r = rng(t, "g", G), rng(n // t, "r", AxisType.REDUCE)
    total = reduce(reduce(load(UOp.build(Ops.AFTER, (tb, first)), g * (n // t) + r), r), g)
    ast = UOp.build(Ops.SINK, (UOp.build(Ops.END, (first, i)), store(buf("S", 1), UOp.const(0, dtypes.index), total)))
    compare_group(ast, {"X": rand_array((n,), seed=36)})


def test_group_reduce_elsewhere_is_a_sequential_loop() -> None:
    rows, t, m = 5, 3, 4
    x = buf("X", rows * t * m)
    i, g, r = rng(rows, "i"), rng(t, "g", G), rng(m, "r", AxisType.REDUCE)
    per_row = reduce(reduce(load(x, i * (t * m) + g * m + r), r), g)  # in an item with loops
    in_loops = kernel((store(buf("Y", rows), i, per_row), (i,)))
    g2, q = rng(t, "g2", G), rng(rows, "q", AxisType.REDUCE)
    inner = reduce(load(x, q * (t * m) + g2), g2, op=Ops.MAX)  # inside another REDUCE's body
    in_body = scalar_items(reduce(inner * 2.0, q))
    # a REDUCE over a group range and another range is no group REDUCE either
    both = scalar_items(reduce(load(x, g * m + r), g, r, op=Ops.MAX))
    for ast in (in_loops, in_body, both):
        compare_group(ast, {"X": rand_array((rows * t * m,), seed=37)}, groups=0)


def test_reference_treats_group_ranges_as_ordinary_ranges() -> None:
    t, m = 3, 5
    xv = rand_array((t * m,), seed=38)
    outs = []
    for axis in (G, AxisType.REDUCE):
        g, r = rng(t, "g", axis), rng(m, "r", AxisType.REDUCE)
        ast = scalar_items(reduce(reduce(load(buf("X", t * m), g * m + r), r), g, op=Ops.MAX))
        outs.append(run_both(ast, {"X": xv})[1]["o0"])
    assert outs[0].tobytes() == outs[1].tobytes()
    check(outs[0], [xv.reshape(t, m).sum(1).max()])


def test_group_kernel_cache_and_concurrent_calls() -> None:
    from concurrent.futures import ThreadPoolExecutor

    t, m = 4, 1000
    g, r = rng(t, "g", G), rng(m, "r", AxisType.REDUCE)
    k = Kernel.from_ast("k", scalar_items(reduce(reduce(load(buf("X", t * m), g * m + r), r), g)))
    llvm_backend.clear_cache()
    before = dict(CACHE_STATS)
    fn = LLVMBackend(threads=2).compile(k, None)
    LLVMBackend(threads=1).compile(k, None)  # the thread count does not change the code
    assert CACHE_STATS["compiles"] == before["compiles"] + 1
    xs = [rand_array((t * m,), seed=s) for s in range(8)]
    outs = [np.zeros(1, np.float32) for _ in xs]
    with ThreadPoolExecutor(4) as ex:  # each call has its own partials
        list(ex.map(lambda a: fn({"X": a[0], "o0": a[1]}), zip(xs, outs)))
    for xv, o in zip(xs, outs):
        check(o, [xv.sum()], rtol=1e-4, atol=1e-4)


# ---- storage -------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [dtypes.float16, dtypes.bfloat16], ids=_name)
def test_half_storage_round_trip_and_arithmetic(d: DType) -> None:
    n = 40
    x, y, z = buf("X", n, d), buf("Y", n, d), buf("Z", n, F32)
    i = rng(n, 0)
    xv = values(d, n, 25)
    ast = kernel((store(y, i, load(x, i) * load(x, i) + UOp.const(0.3, d)), (i,)), (store(z, i, load(x, i).cast(F32)), (i,)))
    mine, ref = run_both(ast, {"X": xv})
    check(mine["Z"], ref["Z"], rtol=0, atol=0)  # loads are exact
    check(mine["Y"], ref["Y"], rtol=tol(d), atol=tol(d))
    be = LLVMBackend()
    spec = BufferSpec("X", d, n, "input", (n,))
    raw = be.put(spec, xv)
    assert raw.dtype.itemsize == 2 and raw.dtype.kind in "uf"  # native 16-bit storage
    check(be.get(spec, raw), ref["Z"], rtol=0, atol=0)


def test_bf16_stores_round_to_nearest_even() -> None:
    x, y = buf("X", 4), buf("Y", 4, dtypes.bfloat16)
    i = rng(4, 0)
    xv = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, np.nan], np.float32)
    mine, ref = run_both(kernel((store(y, i, load(x, i).cast(dtypes.bfloat16)), (i,))), {"X": xv})
    check(mine["Y"], [1.0, 1 + 2**-6, 1 + 2**-7, np.nan], rtol=0, atol=0)
    check(mine["Y"], ref["Y"], rtol=0, atol=0)


def test_bool_storage() -> None:
    n = 33
    x, m, y = buf("X", n), buf("M", n, dtypes.bool), buf("Y", n, dtypes.bool)
    i = rng(n, 0)
    ast = kernel((store(y, i, (load(x, i) < 0.0) ^ load(m, i)), (i,)))
    mine, ref = run_both(ast, {"X": rand_array((n,), seed=26), "M": values(dtypes.bool, n, 27)})
    check(mine["Y"], ref["Y"])
    assert LLVMBackend().storage_np(dtypes.bool).itemsize == 1


def test_store_casts_to_the_buffer_dtype() -> None:
    x, y = buf("X", 5), buf("Y", 5, dtypes.float64)
    i = rng(5, 0)
    compare(kernel((store(y, i, load(x, i) * 2.0), (i,))), {"X": rand_array((5,), seed=28)})


# ---- random elementwise kernels ----------------------------------------------------------------------

AXIS_TYPES = [AxisType.LOOP, AxisType.GLOBAL, AxisType.UPCAST, AxisType.UNROLL, AxisType.THREAD]
RANDOM_DTYPES = [F32, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint16, dtypes.float16]


@st.composite
def elementwise_kernels(draw: st.DrawFn) -> tuple[UOp, dict[str, np.ndarray], DType]:
    """A random expression over broadcast loads, stored over a random loop nest with random axis types."""
    d = draw(st.sampled_from(RANDOM_DTYPES))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    ranges = [rng(s, k, draw(st.sampled_from(AXIS_TYPES))) for k, s in enumerate(shape)]
    inputs: dict[str, np.ndarray] = {}

    def leaf() -> UOp:
        if inputs and draw(st.booleans()):
            return UOp.const(draw(st.integers(-3, 3)), d)
        keep = [r for r in ranges if draw(st.booleans())]  # broadcast over the others
        sizes = [int(r.src[0].arg) for r in keep]
        idx = UOp.const(0, dtypes.index)
        for q, r in enumerate(keep):
            idx = idx + r * math.prod(sizes[q + 1 :])
        name = f"in{len(inputs)}"
        inputs[name] = values(d, math.prod(sizes), len(inputs), special=False)
        return load(buf(name, math.prod(sizes), d), idx)

    def expr(depth: int) -> UOp:
        if depth == 0 or draw(st.integers(0, 3)) == 0:
            return leaf()
        ops: list[Any] = [Ops.ADD, Ops.MUL, Ops.MAX, "where", "neg"]
        ops += [Ops.IDIV, Ops.MOD, Ops.AND, Ops.XOR] if d.is_int else []
        op = draw(st.sampled_from(ops))
        a, b = expr(depth - 1), expr(depth - 1)
        if op == "where":
            return (a < b).where(a, b * b)
        if op == "neg":
            return a + 1 if d.is_unsigned else -a
        return alu(op, a, b)

    value = expr(3)
    flat = UOp.const(0, dtypes.index)
    for k, r in enumerate(ranges):
        flat = flat + r * math.prod(shape[k + 1 :])
    order = tuple(draw(st.permutations(ranges)))
    ast = kernel((store(buf("out", math.prod(shape), d), flat, value), order))
    used = {u.arg[0] for u in ast.toposort() if u.op is Ops.BUFFER}
    return ast, {k: v for k, v in inputs.items() if k in used}, d


@given(elementwise_kernels())
def test_random_elementwise_kernels(case: tuple[UOp, dict[str, np.ndarray], DType]) -> None:
    ast, inputs, d = case
    compare(ast, inputs, rtol=tol(d), backend=LLVMBackend(threads=2))


# ---- cache and code quality ----------------------------------------------------------------------


def test_compiling_an_equal_kernel_twice_does_no_llvm_work() -> None:
    def make(names: tuple[str, str], key: str) -> Kernel:
        i = rng(29, key)
        x, y = buf(names[0], 29), buf(names[1], 29)
        return Kernel.from_ast("k", kernel((store(y, i, load(x, i) * 5.0 + 0.25), (i,))))

    llvm_backend.clear_cache()
    before = dict(CACHE_STATS)
    LLVMBackend().compile(make(("P", "Q"), "a"), None)
    assert CACHE_STATS["compiles"] == before["compiles"] + 1
    again = LLVMBackend().compile(make(("R", "S"), "b"), None)  # other buffer and range names, same structure
    assert CACHE_STATS["compiles"] == before["compiles"] + 1
    assert CACHE_STATS["hits"] == before["hits"] + 1
    assert again.buffer_order == ["S", "R"]
    x, y = np.arange(29, dtype=np.float32), np.zeros(29, np.float32)
    again({"R": x, "S": y})
    check(y, x * 5 + 0.25)


def test_inner_loops_are_vectorized() -> None:
    n = 1000
    i = rng(n, 0)
    a, b, c, y = buf("a", n), buf("b", n), buf("c", n), buf("y", n)
    k = Kernel.from_ast("axpy", kernel((store(y, i, load(a, i) * load(b, i) + load(c, i)), (i,))))
    assert " x float>" in LLVMBackend(threads=1).optimized_ir(k)


@pytest.mark.skipif(
    "+avx2" not in __import__("llvmlite.binding").binding.get_host_cpu_features().flatten(),
    reason="masked loads need AVX2 or AVX-512",
)
def test_padded_loads_become_masked_vector_loads() -> None:
    n = 4096
    x, y = buf("X", n), buf("Y", n + 8)
    i = rng(n + 8, 0)
    valid = (i >= 4) & (i < n + 4)
    for v in (load(x, i - 4, UOp.const(0.0, F32), valid), valid.where(load(x, i - 4), UOp.const(0.0, F32))):
        k = Kernel.from_ast("pad", kernel((store(y, i, v * 2.0), (i,))))
        assert "llvm.masked.load" in LLVMBackend(threads=1).optimized_ir(k)


def test_exp2_is_inline_vectorized_and_within_one_ulp() -> None:
    """EXP2 in float32 is rendered from arithmetic (no libm call), so its loop vectorizes; against numpy in
    float64 it is within one float32 ulp everywhere, subnormal results and the overflow edge included."""
    v = np.concatenate(
        [
            np.linspace(-160, 140, 20011),
            [np.nan, np.inf, -np.inf, 0.0, -0.0, 127.999, 128.0, -126.0, -149.0, -149.5, -150.0, -150.5],
        ]
    ).astype(np.float32)
    n = v.size
    i = rng(n, 0)
    x, y = buf("X", n), buf("Y", n)
    k = Kernel.from_ast("e", kernel((store(y, i, alu(Ops.EXP2, load(x, i))), (i,))))
    ir = LLVMBackend(threads=1).optimized_ir(k)
    assert "llvm.exp2" not in ir and "exp2f" not in ir and " x float>" in ir
    out = run_llvm(kernel((store(y, i, alu(Ops.EXP2, load(x, i))), (i,))), {"X": v}, LLVMBackend())["Y"]
    ref = np.exp2(v.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(out), np.isnan(ref)) and np.array_equal(np.isinf(out), np.isinf(ref))
    fin = np.isfinite(ref)
    ulps = np.abs(out[fin].view(np.int32).astype(np.int64) - ref[fin].view(np.int32).astype(np.int64))
    assert ulps.max() <= 1


@given(st.integers(1, 9), st.integers(1, 40), st.sampled_from([8, 16]))
def test_unproven_loads_of_a_padded_tile_are_masked_vector_loads(kk: int, n: int, up: int) -> None:
    """Column sums over a tile padded past the end of its buffer (`up` columns, the last tile's past n): the loads
    in the reduce are not proven in bounds, so the lanes outside are masked off in one vector load per step
    instead of a clamped address per copy, the gated store skips them, and the sums match the reference. The
    index is non-negative, so the mask is one 32-bit compare of the lanes with what is left of the buffer, not a
    64-bit compare per lane (4 compares, packs and shuffles per AVX2 vector), and only where the vector reaches
    past the buffer's end: every other step is a plain vector load."""
    tiles = -(-n // up)
    x, y = buf("X", kk * n), buf("Y", n)
    jo, ju, k = rng(tiles, 0), rng(up, 1, AxisType.UPCAST), rng(kk, 2, AxisType.REDUCE)
    j = jo * up + ju
    ast = kernel((store(y, j, reduce(load(x, k * n + j), k), j < n), (jo, ju)))
    compare(ast, {"X": rand_array((kk * n,), seed=44 + n)})
    text = LLVMBackend().render(Kernel.from_ast("k", ast), None)
    if tiles * up > n:
        assert f"llvm.masked.load.v{up}f32" in text and "umin" not in text, text
        assert f"icmp slt <{up} x i32>" in text and f"icmp ult <{up} x i64>" not in text, text
        assert f"load <{up} x float>" in text and "llvm.expect.i1" in text, text


@given(st.integers(1, 13), st.integers(1, 9), st.sampled_from([2, 4, 8]), st.integers(1, 3))
def test_padded_gemm_rows_clamp_outside_the_reduction(m: int, kk: int, up: int, n: int) -> None:
    """A GEMM tile of `up` rows over m rows (the last tile padded past the end of A): A's row loads are not
    proven in bounds, and their clamp is taken of the row alone (umin(row * K, (m - 1) * K) + k), which the
    reduction does not change, so LLVM hoists it out of the k loop; the products match the reference."""
    tiles = -(-m // up)
    a, b, y = buf("A", m * kk), buf("B", kk * n), buf("Y", m * n)
    mo, mu = rng(tiles, 0), rng(up, 1, AxisType.UPCAST)
    j, k = rng(n, 2), rng(kk, 3, AxisType.REDUCE)
    row = mo * up + mu
    ast = kernel((store(y, row * n + j, reduce(load(a, row * kk + k) * load(b, k * n + j), k), row < m), (mo, mu, j)))
    compare(ast, {"A": rand_array((m * kk,), seed=m), "B": rand_array((kk * n,), seed=kk)})
    text = LLVMBackend().render(Kernel.from_ast("k", ast), None)
    if tiles * up > m and kk > 1:  # padded (and not a masked vector load): clamped, by the row's block
        assert f"i64 {(m - 1) * kk})" in text and f"i64 {m * kk - 1})" not in text, text


@given(st.integers(1, 13), st.integers(1, 5), st.sampled_from([2, 4]), st.sampled_from([4, 8]), st.integers(1, 3))
def test_padded_gemm_rows_with_k_unrolled_stay_scalar_broadcasts(m: int, ko: int, ku: int, up: int, n: int) -> None:
    """The same tile with k split into a loop and an unrolled part (k = ko * ku + kr): A's row reads are
    consecutive along the unrolled part, but its copies are accumulated one by one, so they are not one masked
    vector load (each copy would be extracted and splat again, two shuffles an FMA); they are scalar loads whose
    clamp is of the row alone, the loop's and the unrolled part's terms outside it. The products match."""
    kk, tiles = ko * ku, -(-m // up)
    a, b, y = buf("A", m * kk), buf("B", kk * n), buf("Y", m * n)
    mo, mu = rng(tiles, 0), rng(up, 1, AxisType.UPCAST)
    j, kl, kr = rng(n, 2), rng(ko, 3, AxisType.REDUCE), rng(ku, 4, AxisType.UNROLL)
    row, k = mo * up + mu, kl * ku + kr
    body = load(a, row * kk + k) * load(b, k * n + j)
    ast = kernel((store(y, row * n + j, reduce(body, kl, kr), row < m), (mo, mu, j)))
    compare(ast, {"A": rand_array((m * kk,), seed=m), "B": rand_array((kk * n,), seed=kk)})
    text = LLVMBackend().render(Kernel.from_ast("k", ast), None)
    assert "llvm.masked.load" not in text
    if tiles * up > m:  # padded: clamped by the row's block
        assert f"i64 {(m - 1) * kk})" in text and f"i64 {m * kk - 1})" not in text, text


@given(
    gated=st.booleans(),
    n=st.integers(1, 45),
    up=st.sampled_from([4, 8, 16, 32]),
    kk=st.integers(1, 5),
    pad=st.integers(0, 3),
    cpu=st.sampled_from([None, "haswell"]),
    flip=st.booleans(),
)
def test_guarded_copies_of_a_window_are_one_masked_load(
    gated: bool, n: int, up: int, kk: int, pad: int, cpu: str | None, flip: bool
) -> None:
    """A padded window read by an upcast tile (a convolution's padding, `pad` columns before the row and the
    tile's last columns past it): the guard is evaluated over the lanes as a vector and the copies are one masked
    vector load, no branch per copy; WHERE-guarded or gated, for AVX-512 and AVX2 code. Each bound of the window
    is one 32-bit compare of the lane numbers with a scalar (no 64-bit lane vectors), with the lanes on either
    side of the comparison, and the sums match the reference at every size, the tiles that cross both edges
    included."""
    tiles = -(-n // up)
    x, y = buf("X", n), buf("Y", n)
    jo, ju, k = rng(tiles, 0), rng(up, 1, AxisType.UPCAST), rng(kk, 2, AxisType.REDUCE)
    j = jo * up + ju
    pos = j + k - pad
    # the lower bound as pos >= 0, or as -1 < pos (the lanes on the comparison's right)
    valid = ((UOp.const(-1, pos.dtype) < pos) if flip else (pos >= 0)) & (pos < n)
    v = load(x, pos, UOp.const(0.0, F32), valid) if gated else valid.where(load(x, pos), UOp.const(0.0, F32))
    ast = kernel((store(y, j, reduce(v, k), j < n), (jo, ju)))
    backend = LLVMBackend(cpu=cpu)
    compare(ast, {"X": rand_array((n,), seed=45 + n)}, backend=backend)
    text = backend.render(Kernel.from_ast("k", ast), None)
    if pad > 0 or tiles * up + kk - 2 - pad >= n:  # the window reaches outside the row: guarded lanes
        assert f"llvm.masked.load.v{up}f32" in text, text
    assert "label %ld" not in text and "x i64> " not in text, text
    # the sums are vectors over the columns and the tile's columns past the row are one masked vector store
    assert f"llvm.masked.store.v{up}f32" in text and "label %st" not in text, text


@given(
    lanes=st.sampled_from([4, 8, 16]),
    blocks=st.integers(1, 3),
    rows=st.integers(1, 3),
    panels=st.integers(1, 3),
    cpu=st.sampled_from([None, "haswell"]),
)
def test_a_tile_copied_to_a_transposed_layout_is_transposed_in_registers(
    lanes: int, blocks: int, rows: int, panels: int, cpu: str | None
) -> None:
    """A packed panel's copy: out[p, k, c] = W[p*lanes + c, k], the store contiguous along c (the lane) and the
    load along k (another unrolled range, `blocks` squares of lanes x lanes): the load's copies are vector loads
    along k transposed by shuffles, no scalar load per element, and the panel matches the reference."""
    kk = lanes * blocks * rows
    p, ko = rng(panels, "p"), rng(rows, "ko")
    ku, c = rng(lanes * blocks, "ku", AxisType.UPCAST), rng(lanes, "c", AxisType.UPCAST)
    k = ko * (lanes * blocks) + ku
    w, out = buf("W", panels * lanes * kk), buf("O", panels * kk * lanes)
    ast = kernel((store(out, p * (kk * lanes) + k * lanes + c, load(w, (p * lanes + c) * kk + k)), (p, ko, ku, c)))
    backend = LLVMBackend(cpu=cpu)
    compare(ast, {"W": rand_array((panels * lanes * kk,), seed=lanes + blocks)}, backend=backend)
    text = backend.render(Kernel.from_ast("k", ast), None)
    assert f"shufflevector <{lanes} x float>" in text and "load float" not in text, text


@given(
    lanes=st.sampled_from([2, 4, 8, 16]),
    step=st.sampled_from([2, 3, 4]),
    n=st.integers(1, 3),
    cpu=st.sampled_from([None, "haswell"]),
)
def test_a_load_stepping_along_the_lane_is_one_span_and_a_shuffle(lanes: int, step: int, n: int, cpu: str | None) -> None:
    """out[i, c] = W[(i*lanes + c) * step]: the copies along the lane `step` elements apart load the span from
    the first to the last (the last copy reads the buffer's last element: nothing past it) and keep every
    step-th element by a shuffle; the values match the reference interpreter."""
    i, c = rng(n, "i"), rng(lanes, "c", AxisType.UPCAST)
    size = (n * lanes - 1) * step + 1
    w, out = buf("W", size), buf("O", n * lanes)
    ast = kernel((store(out, i * lanes + c, load(w, (i * lanes + c) * step)), (i, c)))
    backend = LLVMBackend(cpu=cpu)
    compare(ast, {"W": rand_array((size,), seed=lanes + step)}, backend=backend)
    text = backend.render(Kernel.from_ast("k", ast), None)
    assert f"load <{(lanes - 1) * step + 1} x float>" in text and "load float" not in text, text


def test_render_names_arguments_in_order() -> None:
    i = rng(3, 0)
    k = Kernel.from_ast("k", kernel((store(buf("out", 3), i, load(buf("inp", 3), i)), (i,))))
    text = LLVMBackend().render(k, None)
    assert "args (%b0=out, %b1=inp, %start, %end)" in text
    assert "define void @k0(ptr noalias %b0, ptr noalias %b1, i64 %start, i64 %end)" in text


def test_wrong_buffer_is_a_diagnostic() -> None:
    from egraph_compiler.ir.diagnostics import InvalidArgument

    i = rng(3, 0)
    fn = LLVMBackend().compile(Kernel.from_ast("k", kernel((store(buf("o", 3), i, load(buf("x", 3), i)), (i,)))), None)
    with pytest.raises(InvalidArgument):
        fn({"o": np.zeros(3, np.float32), "x": np.zeros(3, np.float64)})


# ---- speed sanity check (a script, not a test) -----------------------------------------------------


def _speed() -> None:
    import time

    def timed(fn: Any, bufs: dict[str, np.ndarray], reps: int = 3) -> float:
        fn(bufs)
        best = math.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(bufs)
            best = min(best, time.perf_counter() - t0)
        return best

    n = 1024
    a, b, c = buf("A", n * n), buf("B", n * n), buf("C", n * n)
    rs = np.random.default_rng(0)
    bufs = {
        "A": rs.standard_normal(n * n, np.float32),
        "B": rs.standard_normal(n * n, np.float32),
        "C": np.zeros(n * n, np.float32),
    }
    i, j, k = rng(n, 0), rng(n, 1), rng(n, 2, AxisType.REDUCE)
    plain = kernel((store(c, i * n + j, reduce(load(a, i * n + k) * load(b, k * n + j), k)), (i, j)))
    jo, ju = rng(n // 16, 1), rng(16, 3, AxisType.UPCAST)
    jj = jo * 16 + ju
    upcast = kernel((store(c, i * n + jj, reduce(load(a, i * n + k) * load(b, k * n + jj), k)), (i, jo, ju)))
    want = bufs["A"].reshape(n, n) @ bufs["B"].reshape(n, n)
    for label, ast, fm in [
        ("(i,j,k) strict", plain, False),
        ("(i,j,k) fast_math", plain, True),
        ("(i,j/16,k) upcast 16", upcast, False),
        ("(i,j/16,k) upcast 16 fm", upcast, True),
    ]:
        t0 = time.perf_counter()
        fn = LLVMBackend(fast_math=fm).compile(Kernel.from_ast("gemm", ast), None)
        tc = time.perf_counter() - t0
        t = timed(fn, bufs, reps=1 if label.startswith("(i,j,k)") else 3)
        err = float(np.abs(bufs["C"].reshape(n, n) - want).max())
        print(
            f"gemm 1024^3 {label:26s}: {2 * n**3 / t / 1e9:7.2f} GFLOP/s ({t * 1e3:.0f} ms, "
            f"compile {tc * 1e3:.0f} ms, max err {err:.1e})"
        )
    t0 = time.perf_counter()
    _ = bufs["A"].reshape(n, n) @ bufs["B"].reshape(n, n)
    print(f"numpy matmul: {2 * n**3 / (time.perf_counter() - t0) / 1e9:.1f} GFLOP/s")
    m = 1 << 24
    i = rng(m, 0)
    ew = kernel((store(buf("y", m), i, load(buf("a", m), i) * load(buf("b", m), i) + load(buf("c", m), i)), (i,)))
    bufs = {nm: rs.standard_normal(m, np.float32) for nm in "abcy"}
    for threads in (1, 2):
        fn = LLVMBackend(threads=threads).compile(Kernel.from_ast("fma", ew), None)
        t = timed(fn, bufs, reps=5)
        print(f"a*b+c 16M float32, {threads} thread(s): {16 * m / t / 1e9:6.2f} GB/s ({t * 1e3:.1f} ms)")
    t0 = time.perf_counter()
    for _ in range(3):
        np.add(np.multiply(bufs["a"], bufs["b"], out=bufs["y"]), bufs["c"], out=bufs["y"])
    print(f"numpy a*b+c: {16 * m / ((time.perf_counter() - t0) / 3) / 1e9:6.2f} GB/s (counting 16 B/element)")


if __name__ == "__main__":
    _speed()


# ---- float32 values outside REDUCE bodies as vectors over the store's contiguous unrolled range ----------


def _lane_kernel(value_of: Any, n: int = 48, up: int = 16) -> tuple[UOp, UOp]:
    """y[i*up + j] = value_of(x[i*up + j], i, j) with j an UPCAST range of `up` copies (the item's lane)."""
    i, j = rng(n // up, "i"), rng(up, "j", AxisType.UPCAST)
    idx = i * up + j
    x, y = buf("X", n), buf("Y", n)
    return kernel((store(y, idx, value_of(load(x, idx), i, j)), (i, j))), j


@pytest.mark.parametrize("op", [Ops.EXP2, Ops.RECIP, Ops.SQRT, Ops.TRUNC])
def test_unary_float32_ops_on_lane_vectors_match_numpy(op: Ops) -> None:
    """An elementwise float32 op over an unrolled contiguous range is emitted as vector instructions over it
    (one vector load, op and store per 16 copies, no scalar copy): EXP2 within one ulp of numpy in float64,
    special values included; RECIP, SQRT and TRUNC exactly numpy's."""
    v = np.concatenate(
        [
            np.linspace(-160, 140, 4000),
            [np.nan, np.inf, -np.inf, 0.0, -0.0, 127.999, 128.0, -126.0, -149.0, -150.0, -150.5, 1e-40],
        ]
    ).astype(np.float32)
    n = 16 * (-(-v.size // 16))
    x = np.resize(v, n)
    ast, _ = _lane_kernel(lambda a, i, j: alu(op, a), n)
    text = LLVMBackend().render(Kernel.from_ast("k", ast), None)
    assert "store <16 x float>" in text and "load <16 x float>" in text and "extractelement" not in text
    with np.errstate(all="ignore"):
        out = run_llvm(ast, {"X": x}, LLVMBackend())["Y"]
        ref = {Ops.EXP2: np.exp2(x.astype(np.float64)), Ops.RECIP: 1 / x, Ops.SQRT: np.sqrt(x), Ops.TRUNC: np.trunc(x)}[op]
    ref = ref.astype(np.float32)
    assert np.array_equal(np.isnan(out), np.isnan(ref)) and np.array_equal(np.isinf(out), np.isinf(ref))
    fin = np.isfinite(ref)
    ulps = np.abs(out[fin].view(np.int32).astype(np.int64) - ref[fin].view(np.int32).astype(np.int64))
    assert ulps.max() <= (1 if op is Ops.EXP2 else 0)


def test_gemm_epilogue_is_lane_vectors_and_matches_the_reference() -> None:
    """A REDUCE whose accumulators are one vector over the lane hands that vector to its epilogue: a bias read
    along the lane (a vector load), a per-row scalar (a splat), compares, WHERE, MAX (numpy's NaN rule) and
    FDIV stay vectors up to one vector store per row; the results match the reference interpreter."""
    m, kk, up = 4, 8, 16
    i, j, k = rng(m, "i"), rng(up, "j", AxisType.UPCAST), rng(kk, "k", AxisType.REDUCE)
    a, b, bias, row, y = buf("A", m * kk), buf("B", kk * up), buf("bias", up), buf("row", m), buf("Y", m * up)
    acc = reduce(load(a, i * kk + k) * load(b, k * up + j), k)
    h = acc + load(bias, j)
    r = load(row, i)
    value = alu(Ops.WHERE, alu(Ops.CMPLT, h, r), alu(Ops.MAX, h * r, UOp.const(0.25, F32)), alu(Ops.FDIV, h, r))
    ast = kernel((store(y, i * up + j, value), (i, j)))
    text = LLVMBackend().render(Kernel.from_ast("k", ast), None)
    assert "fcmp olt <16 x float>" in text and "select <16 x i1>" in text and "store <16 x float>" in text
    assert "extractelement" not in text
    inputs = {"A": rand_array((m * kk,), seed=1), "B": rand_array((kk * up,), seed=2), "bias": rand_array((up,), seed=3)}
    rows = rand_array((m,), seed=4)
    rows[0] = np.nan  # MAX and the compare see NaN lanes
    compare(ast, inputs | {"row": rows})


def test_lane_vector_read_by_a_later_reduce_is_used_whole_there() -> None:
    """A vector value over the lane that a later REDUCE's body reads (inside its loop): the body's values are
    vectors over the accumulators' lane too, so it is multiplied as a vector there, and the results match the
    reference (whatever lanes are taken apart are valid where they are placed)."""
    m, kk, up = 3, 5, 8
    i, j = rng(m, "i"), rng(up, "j", AxisType.UPCAST)
    k, k2 = rng(kk, "k", AxisType.REDUCE), rng(kk, "k2", AxisType.REDUCE)
    x, w, w2, y = buf("X", m * kk), buf("W", kk * up), buf("W2", kk * up), buf("Y", m * up)
    e = alu(Ops.EXP2, reduce(load(x, i * kk + k) * load(w, k * up + j), k))  # a vector, emitted first
    s = reduce(e * load(w2, k2 * up + j), k2)  # its body reads e inside its loop
    ast = kernel((store(y, i * up + j, alu(Ops.ADD, s, e)), (i, j)))
    text = LLVMBackend().render(Kernel.from_ast("k", ast), None)
    assert re.search(r"fmul contract <8 x float> %t\d+, %t\d+", text) and "extractelement" not in text
    inputs = {"X": rand_array((m * kk,), seed=5), "W": rand_array((kk * up,), seed=6), "W2": rand_array((kk * up,), seed=7)}
    compare(ast, inputs)


# ---- co-sliced kernels: a producer and its consumer chunk by chunk -----------------------------------------


def _pair(n: int, s: int, shift: int = 0) -> tuple[UOp, UOp, dict[str, BufferSpec]]:
    """Producer X[p*s + r] = 2 * IN[r*n + p] (a transposing copy, as a packed panel); consumer
    Y[p*s + r] = X[((p + shift) % n)*s + r] + 1, each over its own loop p of n steps."""
    p, r = rng(n, "p"), rng(s, "r")
    x, inp, y = buf("X", n * s), buf("IN", n * s), buf("Y", n * s)
    producer = kernel((store(x, p * s + r, load(inp, r * n + p) * UOp.const(2.0, F32)), (p, r)))
    q, r2 = rng(n, "q"), rng(s, "r2")
    src = q if shift == 0 else alu(Ops.MOD, q + shift, UOp.const(n, dtypes.index))
    consumer = kernel((store(y, q * s + r2, load(x, src * s + r2) + UOp.const(1.0, F32)), (q, r2)))
    specs = {
        "IN": BufferSpec("IN", F32, n * s, "input", (n * s,)),
        "X": BufferSpec("X", F32, n * s, "intermediate", (n * s,)),
        "Y": BufferSpec("Y", F32, n * s, "output", (n * s,)),
    }
    return producer, consumer, specs


def test_coslice_chunk_accepts_blockwise_reads_and_refuses_others() -> None:
    """Two kernels run chunk by chunk only where the consumer reads, at each step of its parallel range, the block
    the producer writes at the same step; a read of another step's block (a shifted index) keeps them apart."""
    producer, consumer, _ = _pair(40, 4096)
    assert llvm_backend.coslice_chunk(producer, consumer, 2, True) == ("X", llvm_backend.COSLICE_BYTES // (4096 * 4), 4096 * 4)
    producer, shifted, _ = _pair(40, 4096, shift=1)
    assert llvm_backend.coslice_chunk(producer, shifted, 2, True) is None
    assert llvm_backend.coslice_chunk(shifted, producer, 2, True) is None  # the consumer does not read X at all


@pytest.mark.parametrize("threads", [1, 2])
def test_a_cosliced_pair_is_one_step_of_the_memory_plan(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run one after the other, Y (written by the third kernel) may take the bytes of A (read by the second, dead
    after it); chunk by chunk that is wrong (the third's first chunk of Y would overwrite the A the second's next
    chunk reads). The LLVM program's plan makes the co-sliced pair one step, so Y keeps apart from A, and X, which
    only the pair touches, has no bytes at all (each thread's chunk of it lives in the scratch): the reference's
    values, whose plan does share A's bytes with Y."""
    monkeypatch.setattr(llvm_backend, "COSLICE_BYTES", 1)
    n, s = 6, 32768  # big enough for the kernels to run in parallel slices (small ones run whole)
    i, i2 = rng(n * s, "i"), rng(2 * n * s, "i2")
    p, r, q, r2, t = rng(n, "p"), rng(s, "r"), rng(n, "q"), rng(s, "r2"), rng(2, "t")
    inp, a, x, y, out = buf("IN", n * s), buf("A", n * s), buf("X", n * s), buf("Y", 2 * n * s), buf("OUT", 2 * n * s)
    kernels = [
        kernel((store(a, i, load(inp, i) + UOp.const(1.0, F32)), (i,))),
        kernel((store(x, p * s + r, load(a, p * s + r) * UOp.const(2.0, F32)), (p, r))),
        kernel((store(y, q * (2 * s) + r2 * 2 + t, load(x, q * s + r2)), (q, r2, t))),  # each X twice
        kernel((store(out, i2, load(y, i2) + UOp.const(3.0, F32)), (i2,))),
    ]
    specs = {
        "IN": BufferSpec("IN", F32, n * s, "input", (n * s,)),
        **{b: BufferSpec(b, F32, n * s, "intermediate", (n * s,)) for b in ("A", "X")},
        "Y": BufferSpec("Y", F32, 2 * n * s, "intermediate", (2 * n * s,)),
        "OUT": BufferSpec("OUT", F32, 2 * n * s, "output", (2 * n * s,)),
    }
    inputs = {"IN": rand_array((n * s,), seed=10)}
    got, plans = [], []
    for be in (LLVMBackend(threads=threads), ReferenceBackend()):
        prog = Program([Kernel.from_ast(f"k{j}", k) for j, k in enumerate(kernels)], specs, ["IN"], ["OUT"], be, be.name)
        got.append(np.asarray(prog(**inputs)))
        plans.append(prog.memory_plan())
        if isinstance(be, LLVMBackend):  # one thread runs no parallel slices, so nothing chunk by chunk
            pairs = {1: Coslice(1, "X", 4 * s, True)} if threads > 1 else {}
            assert prog.coslices() == pairs and prog.chunk_local() == {c.buffer for c in pairs.values()}
    ours, ref = plans
    assert ours is not None and ref is not None
    assert ref.share_bytes("A", "Y")  # the case
    assert ours.share_bytes("A", "Y") == ("X" in ours.offsets) == (threads == 1)  # the plan that keeps it safe
    check(got[0], got[1], rtol=0, atol=0)


@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_cosliced_kernels_compute_what_they_compute_apart(shift: int, threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A co-sliced pair (chunks of one step: many chunks per slice, 13 steps over 2 or 3 slices) gives the
    reference interpreter's values, and so does a pair that may not be co-sliced."""
    monkeypatch.setattr(llvm_backend, "COSLICE_BYTES", 1)
    n, s = 13, 8192
    producer, consumer, specs = _pair(n, s, shift)
    inputs = {"IN": rand_array((n * s,), seed=9)}
    got = []
    for be in (LLVMBackend(threads=threads), ReferenceBackend()):
        prog = Program([Kernel.from_ast("p", producer), Kernel.from_ast("c", consumer)], specs, ["IN"], ["Y"], be, be.name)
        got.append(np.asarray(prog(**inputs)))
    check(got[0], got[1], rtol=0, atol=0)


_AUDITED: list[str] = []
_AUDITING = [False]


def _count_audit_events(event: str, args: object) -> None:
    if _AUDITING[0]:
        _AUDITED.append(event)


def test_a_repeated_call_raises_no_audit_events() -> None:
    """A call with the same arrays again raises no audit event: with an audit hook in the process (filelock, which
    torch.compile brings, installs one), each event runs Python code, and the two id() calls a buffer the runner
    made doubled the call time of 48 small kernels. The results stay right, and a new array in a place is read
    from its own address (numpy)."""
    import sys

    from egraph_compiler import Tensor, optimize

    x, w = Tensor.empty(4, 8, name="x"), Tensor.empty(8, 8, name="w")
    y = x
    for _ in range(3):
        y = (y @ w).relu().contiguous()
    prog = optimize(y, target="llvm", cache=False)
    rng = np.random.default_rng(3)
    xv, wv = rng.standard_normal((4, 8), dtype=np.float32), rng.standard_normal((8, 8), dtype=np.float32)

    def want(a: np.ndarray) -> np.ndarray:
        for _ in range(3):
            a = np.maximum(a.astype(np.float64) @ wv, 0)
        return a

    prog(x=xv, w=wv)
    sys.addaudithook(_count_audit_events)  # stays for the process: it records only while _AUDITING is set
    _AUDITING[0] = True
    try:
        out = prog(x=xv, w=wv)
    finally:
        _AUDITING[0] = False
    assert _AUDITED == [], _AUDITED
    np.testing.assert_allclose(out, want(xv), rtol=1e-4, atol=1e-4)
    other = rng.standard_normal((4, 8), dtype=np.float32)
    np.testing.assert_allclose(prog(x=other, w=wv), want(other), rtol=1e-4, atol=1e-4)


def test_a_tile_whose_index_may_look_negative_is_one_masked_load() -> None:
    """A tile's copies at consecutive elements whose index the interval analysis cannot keep non-negative
    (j + r//2 - r//2: in bounds when run, not provably so): one masked vector load, both ends of the buffer
    masked, and the values match the reference."""
    n, up = 24, 8
    jo, ju, r = rng(n // up, "jo"), rng(up, "ju", AxisType.UPCAST), rng(4, "r")
    j = jo * up + ju
    half = alu(Ops.IDIV, r, UOp.const(2, dtypes.index))
    x, y = buf("X", n), buf("Y", 4 * n)
    ast = kernel((store(y, r * n + j, load(x, j + half - half) * UOp.const(2.0, F32)), (r, jo, ju)))
    compare(ast, {"X": rand_array((n,), seed=3)})
    text = LLVMBackend().render(Kernel.from_ast("k", ast), None)
    assert f"llvm.masked.load.v{up}f32" in text, text


@given(
    pixels=st.sampled_from([3, 5, 6]),
    vectors=st.integers(1, 2),
    blocks=st.integers(1, 3),
    step=st.sampled_from([1, 2]),
    cpu=st.sampled_from([None, "haswell"]),
)
def test_accumulators_along_a_range_the_store_does_not_step_by_1_load_their_operand_as_vectors(
    pixels: int, vectors: int, blocks: int, step: int, cpu: str | None
) -> None:
    """A 1x1 convolution's tile: out[o, p] = sum_k W[k, o] * X[k, p*step], the store contiguous along the pixels
    p (too few for a vector) and the accumulators along the output channels o (a packed weight's row), the
    reduction unrolled by 4 inside its loop. The weight's copies are vector loads along o, in the copies of the
    unrolled k too (they were scalar loads packed lane by lane: AVX2 code, 64 -> 128 channels at 28x28 stride 2,
    0.097 -> 0.064 ms), and the values match the reference interpreter."""
    lanes = LLVMBackend(cpu=cpu).cpu.simd_bytes // 4
    n_o, n_k = lanes * vectors, 4 * blocks
    o, p = rng(n_o, "o", AxisType.UPCAST), rng(pixels, "p", AxisType.UPCAST)
    ko, kr = rng(blocks, "ko", AxisType.REDUCE), rng(4, "kr", AxisType.UNROLL)
    k = ko * 4 + kr
    w, x, out = buf("W", n_k * n_o), buf("X", n_k * pixels * step), buf("O", n_o * pixels)
    acc = reduce(alu(Ops.MUL, load(w, k * n_o + o), load(x, k * (pixels * step) + p * step)), ko, kr)
    ast = kernel((store(out, o * pixels + p, acc), (o, p)))
    backend = LLVMBackend(cpu=cpu)
    inputs = {"W": rand_array((n_k * n_o,), seed=pixels), "X": rand_array((n_k * pixels * step,), seed=blocks)}
    compare(ast, inputs, backend=backend)
    text = backend.render(Kernel.from_ast("k", ast), None)
    # every scalar load is one of X's broadcasts: one per pixel and copy of k
    assert text.count("load float,") == pixels * 4, text


@given(
    pixels=st.integers(7, 40),
    tile=st.sampled_from([4, 6]),
    k=st.integers(1, 9),
    cpu=st.sampled_from([None, "haswell"]),
)
def test_the_last_iteration_of_a_padded_tile_is_emitted_apart(pixels: int, tile: int, k: int, cpu: str | None) -> None:
    """A tile padded past its row (out[o, p] = sum_k W[k, o] * X[k, p], p = po*tile + pi < pixels gating the
    store and X's load): the loop over po runs all but its last iteration, which is emitted apart as straight
    code where the gates are constants (LLVM drops the copies past the row with their work), and the values
    match the reference interpreter whatever the remainder."""
    if pixels % tile == 0:
        pixels += 1
    lanes = LLVMBackend(cpu=cpu).cpu.simd_bytes // 4
    tiles = -(-pixels // tile)
    assume(k not in (tiles - 1, tiles))  # the loops' bounds tell the tile loop apart
    o, pi = rng(lanes, "o", AxisType.UPCAST), rng(tile, "pi", AxisType.UPCAST)
    po, r = rng(tiles, "po"), rng(k, "k", AxisType.REDUCE)
    p = po * tile + pi
    valid = alu(Ops.CMPLT, p, UOp.const(pixels, dtypes.index))
    w, x, out = buf("W", k * lanes), buf("X", k * pixels), buf("O", lanes * pixels)
    acc = reduce(alu(Ops.MUL, load(w, r * lanes + o), load(x, r * pixels + p, gate=valid)), r)
    ast = kernel((store(out, o * pixels + p, acc, gate=valid), (po, o, pi)))
    backend = LLVMBackend(cpu=cpu)
    compare(ast, {"W": rand_array((k * lanes,), seed=k), "X": rand_array((k * pixels,), seed=pixels)}, backend=backend)
    text = backend.render(Kernel.from_ast("k", ast), None)
    bounds = {int(b) for b in re.findall(r"icmp slt i64 %t\d+, (\d+)", text)}
    assert tiles - 1 in bounds and tiles not in bounds, bounds
