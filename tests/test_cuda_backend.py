"""The CUDA backend on hand-built kernels.

(a) No GPU needed: every kernel is rendered, its launch plan checked against the CUDA limits, and
    all kernels are compiled together with nvcc for sm_80 and sm_90 (one nvcc call per arch;
    skipped when nvcc is absent).
(b) No GPU needed: the rendered CUDA C runs on a host emulation of the CUDA execution model (g++
    with the CUDA headers: blocks in turn, threads in turn or as std::threads with a barrier,
    wmma as whole-tile math) and is compared with the reference backend (skipped without g++ or
    CUDA headers).
(c) `@pytest.mark.gpu`: the same kernels through Program(...) on a real GPU with CuPy, compared with
    the reference backend (skipped without CuPy or a GPU).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from helpers import check, gpu_or_skip

from egraph_compiler import AxisType, Ops, UOp
from egraph_compiler.backends.cuda import CUDABackend, KernelPlan, c_storage_type
from egraph_compiler.backends.cuda_toolchain import compile_ptx, cuda_include_dirs, find_nvcc, nvcc_version
from egraph_compiler.backends.reference import ReferenceBackend
from egraph_compiler.ir.diagnostics import BackendUnavailable, UnsupportedOp
from egraph_compiler.ir.dtypes import DType, bf16_round, dtypes
from egraph_compiler.kernel.program import BufferSpec, HostBuffers, Kernel, Program, buffer_of

F32, F16, BF16, I32, IDX = dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.index
A = AxisType

# ---- kernel builders ---------------------------------------------------------------------------


def buf(name: str, n: int, dt: DType = F32) -> UOp:
    return UOp(Ops.BUFFER, dt, (), (name, (n,)))


def load(b: UOp, idx: UOp, alt: UOp | None = None, gate: UOp | None = None) -> UOp:
    extra = () if gate is None else (alt if alt is not None else UOp.const(0, b.dtype), gate)
    return UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (b, idx)), *extra))


def store(b: UOp, idx: UOp, value: UOp, gate: UOp | None = None) -> UOp:
    return UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (b, idx)), value, *(() if gate is None else (gate,))))


def sink(*stores_with_ranges: tuple[UOp, tuple[UOp, ...]]) -> UOp:
    return UOp.build(Ops.SINK, tuple(UOp.build(Ops.END, (st, *rs)) if rs else st for st, rs in stores_with_ranges))


def reduce(value: UOp, *ranges: UOp, op: Ops = Ops.ADD) -> UOp:
    return UOp(Ops.REDUCE, value.dtype, (value, *ranges), (op, ()))


def rng(n: int, key: Any, t: AxisType = A.LOOP) -> UOp:
    return UOp.range(n, key, t)


def c(v: Any, dt: DType = F32) -> UOp:
    return UOp.const(v, dt)


@dataclass
class Case:
    name: str
    ast: UOp
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-5
    runnable: bool = True  # False: too big to run, render/compile only

    @property
    def kernel(self) -> Kernel:
        return Kernel.from_ast(self.name, self.ast)


def _rand(dt: DType, n: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    if dt.is_bool:
        return r.random(n) < 0.5
    if dt.is_float:
        return r.standard_normal(n).astype(np.float32 if dt is BF16 else dt.np)
    lo = 0 if dt.is_unsigned else -8
    return r.integers(lo, 8, n).astype(dt.np)


def make_program(case: Case, backend: Any, target: str) -> Program:
    written = {buffer_of(u.src[0]).arg[0] for u in case.ast.toposort() if u.op is Ops.STORE}
    specs: dict[str, BufferSpec] = {}
    for u in case.ast.toposort():
        if u.op is Ops.BUFFER:
            name, (size,) = u.arg
            specs[name] = BufferSpec(name, u.dtype, size, "output" if name in written else "input", (size,))
    inputs = [n for n, s in specs.items() if s.kind == "input"]
    outputs = [n for n, s in specs.items() if s.kind == "output"]
    return Program([case.kernel], specs, inputs, outputs, backend, target, single_output=False)


def case_inputs(case: Case) -> dict[str, np.ndarray]:
    prog = make_program(case, None, "none")
    return {
        name: case.inputs[name]
        if name in case.inputs
        else _rand(prog.buffers[name].dtype, prog.buffers[name].size, seed=17 * k + len(name))
        for k, name in enumerate(prog.inputs)
    }


# ---- the cases ---------------------------------------------------------------------------------

ALL_DT = [
    dtypes.bool,
    dtypes.int8,
    dtypes.int16,
    dtypes.int32,
    dtypes.int64,
    dtypes.uint8,
    dtypes.uint16,
    dtypes.uint32,
    dtypes.uint64,
    F16,
    BF16,
    F32,
    dtypes.float64,
]
N_ALU = 64


def alu_case(d: DType) -> Case:
    """Every ALU op of the table that applies to d, every cast from d, and bitcasts, as stores of one kernel."""
    i = rng(N_ALU, "i")
    x, y = buf("X", N_ALU, d), buf("Y", N_ALU, d)
    xv, yv = load(x, i), load(y, i)
    binary = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE]
    if d.is_int:
        binary += [Ops.IDIV, Ops.MOD, Ops.XOR, Ops.OR, Ops.AND, Ops.SHL, Ops.SHR]
    if d.is_float:
        binary += [Ops.FDIV]
    if d.is_bool:
        binary += [Ops.XOR, Ops.OR, Ops.AND]
    items: list[tuple[str, UOp]] = [(op.name, xv.alu(op, yv)) for op in binary]
    unary = (
        [Ops.RECIP, Ops.TRUNC, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT]
        if d.is_float
        else [Ops.TRUNC]
        if d.is_int
        else []
    )
    items += [(op.name, xv.alu(op)) for op in unary]
    items.append(("WHERE", (xv < yv).where(xv, yv)))
    items += [(f"CAST_{t.name}", UOp(Ops.CAST, t, (xv,))) for t in ALL_DT if t is not d]
    if not d.is_bool:
        items += [
            (f"BITCAST_{t.name}", UOp(Ops.BITCAST, t, (xv,)))
            for t in ALL_DT
            if t is not d and t.itemsize == d.itemsize and not t.is_bool
        ]
    stores = [(store(buf(f"O_{name}", N_ALU, v.dtype), i, v), (i,)) for name, v in items]
    inputs = {"X": _rand(d, N_ALU, 1), "Y": _rand(d, N_ALU, 2)}
    if d is I32:  # wrap-around and floor division of big values
        inputs["X"][:4] = [2**31 - 1, -(2**31), 123456789, -987654321]
        inputs["Y"][:4] = [3, 7, -5, 2]
    if d is dtypes.int64:
        inputs["X"][:3] = [2**62 + 12345, -(2**63), -(2**40) - 7]
        inputs["Y"][:3] = [5, 3, -9]
    if d.is_float:  # finite only: a host float->int cast of NaN differs from the GPU's (see nan_max)
        inputs["X"][:3] = [0.0, -0.0, 2.5]
    tol = {F16: (2e-3, 1e-3), BF16: (1e-2, 1e-2)}.get(d, (1e-5, 1e-6))
    return Case(f"alu_{d.name}", sink(*stores), inputs, *tol)


def gemm_loop() -> Case:
    m, k, n = 7, 5, 6
    a, b, out = buf("A", m * k), buf("B", k * n), buf("C", m * n)
    i, j, r = rng(m, 0), rng(n, 1), rng(k, 2, A.REDUCE)
    return Case("gemm_loop", sink((store(out, i * n + j, reduce(load(a, i * k + r) * load(b, r * n + j), r)), (i, j))))


def gemm_tiled() -> Case:
    """GLOBAL x LOCAL x UPCAST output tiles, REDUCE x UNROLL k."""
    mm, nn, kk = 16, 12, 12
    gm, lm, um = rng(2, "gm", A.GLOBAL), rng(4, "lm", A.LOCAL), rng(2, "um", A.UPCAST)
    gn, ln, un = rng(2, "gn", A.GLOBAL), rng(3, "ln", A.LOCAL), rng(2, "un", A.UPCAST)
    kr, ku = rng(3, "kr", A.REDUCE), rng(4, "ku", A.UNROLL)
    m, n, k = gm * 8 + lm * 2 + um, gn * 6 + ln * 2 + un, kr * 4 + ku
    a, b, out = buf("A", mm * kk), buf("B", kk * nn), buf("C", mm * nn)
    val = reduce(load(a, m * kk + k) * load(b, k * nn + n), kr, ku)
    return Case("gemm_tiled", sink((store(out, m * nn + n, val), (gm, gn, lm, ln, um, un))), rtol=1e-4, atol=1e-5)


def max_reduce_where() -> Case:
    x, y = buf("X", 12), buf("Y", 3)
    i, r = rng(3, 0), rng(5, 1, A.REDUCE)
    v = (r < 4).where(load(x, i * 4 + r), c(-np.inf))
    return Case("max_reduce_where", sink((store(y, i, reduce(v, r, op=Ops.MAX)), (i,))))


def nan_max() -> Case:
    x, z, y, ym = buf("X", 8), buf("Z", 8), buf("Y", 8), buf("YM", 2)
    i, r, j = rng(8, 0), rng(4, 1, A.REDUCE), rng(2, 2)
    xv = np.array([1, np.nan, -np.inf, 3, np.inf, 0, -1, np.nan], np.float32)
    zv = np.array([np.nan, 2, 5, -np.inf, 1, -0.0, np.nan, np.nan], np.float32)
    return Case(
        "nan_max",
        sink(
            (store(y, i, load(x, i).maximum(load(z, i))), (i,)), (store(ym, j, reduce(load(x, j * 4 + r), r, op=Ops.MAX)), (j,))
        ),
        {"X": xv, "Z": zv},
    )


def two_reduces() -> Case:
    x, s, q = buf("X", 20), buf("S", 4), buf("Q", 4)
    i, r = rng(4, 0), rng(5, 1, A.REDUCE)
    xi = load(x, i * 5 + r)
    return Case(
        "two_reduces",
        sink((store(s, i, reduce(xi, r)), (i,)), (store(q, i, reduce(xi * xi, r) - reduce(xi, r)), (i,))),
        rtol=1e-4,
        atol=1e-5,
    )


def softmax_rows(rows: int = 5, cols: int = 7, name: str = "softmax_rows") -> Case:
    """A REDUCE inside another REDUCE's body (hoisted out of the loop)."""
    x, y = buf("X", rows * cols), buf("Y", rows * cols)
    i, j = rng(rows, "i"), rng(cols, "j")
    r1, r2 = rng(cols, "r1", A.REDUCE), rng(cols, "r2", A.REDUCE)
    mx = reduce(load(x, i * cols + r1), r1, op=Ops.MAX)
    den = reduce((load(x, i * cols + r2) - mx).exp2(), r2)
    return Case(name, sink((store(y, i * cols + j, (load(x, i * cols + j) - mx).exp2() / den), (i, j))), rtol=1e-4, atol=1e-6)


def floor_divmod() -> Case:
    src, dst, t = buf("I", 8, I32), buf("O", 8, I32), buf("T", 24)
    x, y = buf("X", 24), buf("Y", 24)
    i, k = rng(8, 0), rng(24, 1)
    v = load(src, i)
    three = UOp.const(3, I32)
    return Case(
        "floor_divmod",
        sink(
            (store(dst, i, (v // three) * 100 + v % three), (i,)),
            (store(y, k, load(x, (k % 4) * 6 + k // 4)), (k,)),
            (store(t, k, ((k - 11) // 4 * 10 + (k - 11) % 4).cast(F32)), (k,)),
        ),
        {"I": np.array([-7, -6, -1, 0, 1, 5, 9, 100], np.int32)},
    )


def gated() -> Case:
    x, y, y2, y3, y4 = buf("X", 4), buf("Y", 8), buf("Y2", 6), buf("Y3", 5), buf("Y4", 3)
    i8, i6, i5, i3 = rng(8, 0), rng(6, 1), rng(5, 2), rng(3, 3)
    pad = load(x, i8 - 2, c(0.0), (i8 >= 2) & (i8 < 6))
    alt = load(x, i6, c(7.5), i6 < 4)
    wh = (i5 < 4).where(load(x, i5), c(-1.0))
    nested = (i3 < 2).where((i3 < 1).where(load(x, i3), load(x, i3 + 1)), load(x, i3 * 100 - 200))
    return Case(
        "gated",
        sink(
            (store(y, i8, pad), (i8,)),
            (store(y2, i6, alt, gate=(i6 % 2).eq(0)), (i6,)),
            (store(y3, i5, wh), (i5,)),
            (store(y4, i3, nested), (i3,)),
        ),
    )


def gather() -> Case:
    """Indices loaded from memory; a gated gather whose address itself loads (rendered under `if`)."""
    table, ids, y, y2 = buf("T", 10), buf("ID", 6, I32), buf("Y", 6), buf("Y2", 6)
    i = rng(6, 0)
    idv = load(ids, i).cast(IDX)
    ok = (load(ids, i) >= 0) & (load(ids, i) < 10)
    return Case(
        "gather",
        sink((store(y, i, load(table, idv % 10)), (i,)), (store(y2, i, load(table, idv, c(-3.0), ok)), (i,))),
        {"ID": np.array([3, -1, 9, 12, 0, 5], np.int32)},
    )


def group_reduce_sum() -> Case:
    x, y = buf("X", 6 * 80), buf("Y", 6)
    i, jg, jr = rng(6, "i", A.GLOBAL), rng(16, "jg", A.GROUP_REDUCE), rng(5, "jr", A.REDUCE)
    return Case(
        "group_reduce_sum", sink((store(y, i, reduce(load(x, i * 80 + jr * 16 + jg), jr, jg)), (i,))), rtol=1e-4, atol=1e-4
    )


def group_reduce_local() -> Case:
    """LOCAL outputs x a non-power-of-two GROUP_REDUCE, two group reductions in one phase."""
    x, ymax, ysum = buf("X", 12 * 36), buf("YMAX", 12), buf("YSUM", 12)
    g, loc = rng(3, "g", A.GLOBAL), rng(4, "l", A.LOCAL)
    jg, jr = rng(12, "jg", A.GROUP_REDUCE), rng(3, "jr", A.REDUCE)
    row = g * 4 + loc
    xv = load(x, row * 36 + jr * 12 + jg)
    return Case(
        "group_reduce_local",
        sink(
            (store(ymax, row, reduce(xv, jr, jg, op=Ops.MAX)), (g, loc)), (store(ysum, row, reduce(xv * 2.0, jr, jg)), (g, loc))
        ),
        rtol=1e-4,
        atol=1e-4,
    )


def globals5(local: bool) -> Case:
    sizes = (2, 3, 2, 3, 2)
    rs = [rng(s, f"g{k}", A.GLOBAL) for k, s in enumerate(sizes)]
    extra = [rng(4, "l", A.LOCAL)] if local else []
    lin = rs[0]
    for r, s in zip(rs[1:], sizes[1:]):
        lin = lin * s + r
    if local:
        lin = lin * 4 + extra[0]
    n = int(np.prod(sizes)) * (4 if local else 1)
    x, y = buf("X", n), buf("Y", n)
    name = f"globals5_{'local' if local else 'flat'}"
    return Case(name, sink((store(y, lin, load(x, lin) * 3.0 + lin.cast(F32)), (*rs, *extra))))


def big_y() -> Case:
    """70000 on a GLOBAL range that would land on blockIdx.y (limit 65535) if mapped one to one."""
    a, b = rng(70000, "a", A.GLOBAL), rng(3, "b", A.GLOBAL)
    loc = rng(2, "l", A.LOCAL)
    lin = (a * 3 + b) * 2 + loc
    y = buf("Y", 70000 * 6, I32)
    return Case("big_y", sink((store(y, lin, (lin * 7).cast(I32)), (a, b, loc))))


def huge(kind: str) -> Case:
    if kind == "blocks":  # a range beyond blockIdx.x: flattened over a 3D grid
        a, b, loc = rng(3, "a", A.GLOBAL), rng(2**31 + 5, "b", A.GLOBAL), rng(2, "l", A.LOCAL)
        lin, rs, n = (a * (2**31 + 5) + b) * 2 + loc, (a, b, loc), 3 * (2**31 + 5) * 2
    else:  # more than 2^31 blocks of 256 threads
        a = rng(600_000_000_000, "a", A.GLOBAL)
        lin, rs, n = a, (a,), 600_000_000_000
    return Case(f"huge_{kind}", sink((store(buf("Y", n), lin, lin.cast(F32)), rs)), runnable=False)


def halves() -> Case:
    """float16/bfloat16 storage: per-op rounding, reductions, conversions between them."""
    h, hb = buf("H", 32, F16), buf("HB", 32, BF16)
    o1, o2, o3, o4 = buf("O1", 32, F16), buf("O2", 4, F16), buf("O3", 32, BF16), buf("O4", 4, F32)
    i, r, j = rng(32, "i"), rng(8, "r", A.REDUCE), rng(4, "j")
    hv, bv = load(h, i), load(hb, i)
    mixed = reduce(load(hb, j * 8 + r).cast(F32) * load(h, j * 8 + r).cast(F32), r)
    return Case(
        "halves",
        sink(
            (store(o1, i, hv * hv + hv / 3.0), (i,)),
            (store(o2, j, reduce(load(h, j * 8 + r), r)), (j,)),
            (store(o3, i, (bv * bv + hv.cast(BF16)).sqrt()), (i,)),
            (store(o4, j, mixed), (j,)),
        ),
        rtol=1e-2,
        atol=1e-2,
    )


def multi_phase() -> Case:
    x, t, y = buf("X", 16), buf("T", 16), buf("Y", 16)
    i, k = rng(16, "i"), rng(16, "k")
    return Case("multi_phase", sink((store(t, i, load(x, i) * 2.0), (i,)), (store(y, k, load(t, 15 - k) + 1.0), (k,))))


def scalar_store() -> Case:
    x, y = buf("X", 50), buf("Y", 1)
    r = rng(50, "r", A.REDUCE)
    return Case("scalar_store", sink((store(y, c(0, IDX), reduce(load(x, r), r)), ())), rtol=1e-4, atol=1e-4)


def loops_in_thread() -> Case:
    """GLOBAL x LOOP x UPCAST: sequential loops in a thread, the row sum hoisted out of them."""
    x, y = buf("X", 4 * 12), buf("Y", 4 * 12)
    g, lp, u, r = rng(4, "g", A.GLOBAL), rng(3, "lp", A.LOOP), rng(4, "u", A.UPCAST), rng(12, "r", A.REDUCE)
    idx = g * 12 + lp * 4 + u
    v = load(x, idx) - reduce(load(x, g * 12 + r), r) * (1 / 12)
    return Case("loops_in_thread", sink((store(y, idx, v), (g, lp, u))), rtol=1e-4, atol=1e-5)


def wmma(dt: DType, local: bool, epilogue: bool) -> Case:
    """A TC region: two WARP(16) output ranges, an UNROLL(16) k range, float accumulation of 16-bit loads."""
    mm, nn, kk = (64, 32, 32) if local else (32, 48, 64)
    a, b = buf("A", mm * kk, dt), buf("B", kk * nn, dt)
    mw, nw, kw = rng(16, "mw", A.WARP), rng(16, "nw", A.WARP), rng(16, "kw", A.UNROLL)
    ko, gn = rng(kk // 16, "ko", A.REDUCE), rng(nn // 16, "gn", A.GLOBAL)
    if local:
        gm, lm = rng(mm // 32, "gm", A.GLOBAL), rng(2, "lm", A.LOCAL)
        m, outer = (gm * 2 + lm) * 16 + mw, (gm, gn, lm)
    else:
        gm = rng(mm // 16, "gm", A.GLOBAL)
        m, outer = gm * 16 + mw, (gm, gn)
    n, k = gn * 16 + nw, ko * 16 + kw
    b_idx = n * kk + k if epilogue else k * nn + n  # B column major (stored N x K) or row major
    acc = reduce(load(a, m * kk + k).cast(F32) * load(b, b_idx).cast(F32), ko, kw)
    if epilogue:
        out, val = buf("C", mm * nn, dt), (acc + load(buf("BIAS", nn), n)).maximum(c(0.0)).cast(dt)
    else:
        out, val = buf("C", mm * nn), acc
    name = f"wmma_{dt.name}{'_local' if local else ''}{'_epilogue' if epilogue else ''}"
    return Case(name, sink((store(out, m * nn + n, val), (*outer, mw, nw))), rtol=2e-2, atol=2e-2)


def wmma_fallback() -> Case:
    """WARP-tagged, but an operand load is gated: rendered with WARP ranges as threads, with a note."""
    a, b, out = buf("A", 256, F16), buf("B", 256, F16), buf("C", 256)
    mw, nw, kw = rng(16, "mw", A.WARP), rng(16, "nw", A.WARP), rng(16, "kw", A.UNROLL)
    av = load(a, mw * 16 + kw, UOp.const(0.0, F16), kw < 12).cast(F32)
    acc = reduce(av * load(b, kw * 16 + nw).cast(F32), kw)
    return Case("wmma_fallback", sink((store(out, mw * 16 + nw, acc), (mw, nw))), rtol=1e-3, atol=1e-3)


def local_autogrid() -> Case:
    """LOCAL ranges without GLOBAL: the LOOP range becomes the grid; an UPCAST loop and a gated store inside."""
    x, y = buf("X", 5 * 8 * 2), buf("Y", 5 * 8 * 2)
    i, loc, u = rng(5, "i"), rng(8, "l", A.LOCAL), rng(2, "u", A.UPCAST)
    idx = (i * 8 + loc) * 2 + u
    return Case("local_autogrid", sink((store(y, idx, load(x, idx) * 2.0 + 1.0, gate=(loc < 6) | u.eq(0)), (i, loc, u))))


def group_reduce_gated() -> Case:
    """A group reduction whose store is gated (the gate and the group-leader predicate combine)."""
    x, y = buf("X", 4 * 8), buf("Y", 4)
    i, jg = rng(4, "i", A.GLOBAL), rng(8, "jg", A.GROUP_REDUCE)
    return Case(
        "group_reduce_gated", sink((store(y, i, reduce(load(x, i * 8 + jg), jg), gate=i < 3), (i,))), rtol=1e-4, atol=1e-5
    )


def sizes_one_and_zero() -> Case:
    """Ranges of size 1 (flat and block mapped) next to an empty loop nest that must store nothing."""
    x, y, z, w = buf("X", 3), buf("Y", 3), buf("Z", 1), buf("W", 4)
    one, three, none = rng(1, "one"), rng(3, "three"), rng(0, "none")
    g1, loc = rng(1, "g1", A.GLOBAL), rng(4, "l", A.LOCAL)
    return Case(
        "sizes_one_and_zero",
        sink(
            (store(y, one * 3 + three, load(x, one * 3 + three) + 1.0), (one, three)),
            (store(z, one, load(x, one + 2)), (one,)),
            (store(y, none, load(x, none + 100)), (none,)),
            (store(w, g1 * 4 + loc, loc.cast(F32)), (g1, loc)),
        ),
    )


CASES: list[Case] = [alu_case(d) for d in ALL_DT] + [
    gemm_loop(),
    gemm_tiled(),
    max_reduce_where(),
    nan_max(),
    two_reduces(),
    softmax_rows(),
    floor_divmod(),
    gated(),
    gather(),
    group_reduce_sum(),
    group_reduce_local(),
    globals5(True),
    globals5(False),
    big_y(),
    huge("blocks"),
    huge("threads"),
    halves(),
    multi_phase(),
    scalar_store(),
    loops_in_thread(),
    wmma(F16, False, True),
    wmma(BF16, True, False),
    wmma(F16, True, False),
    wmma_fallback(),
    local_autogrid(),
    group_reduce_gated(),
    sizes_one_and_zero(),
]
RUNNABLE = [cs for cs in CASES if cs.runnable]
BACKEND = CUDABackend()


def plan_of(case: Case) -> KernelPlan:
    return BACKEND.plan(case.kernel)


# ---- (a) rendering, launch plans, nvcc ---------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda cs: cs.name)
def test_render_and_launch_limits(case: Case) -> None:
    plan = plan_of(case)
    assert 'extern "C" __global__ void __launch_bounds__(' in plan.source and f" {plan.name}(" in plan.source
    assert plan.launches, "every case has work to launch"
    for lc in plan.launches:
        gx, gy, gz = lc.grid
        bx, by, bz = lc.block
        assert 1 <= gx <= 2**31 - 1 and 1 <= gy <= 65535 and 1 <= gz <= 65535, lc
        assert bx <= 1024 and by <= 1024 and bz <= 64 and bx * by * bz <= 1024, lc


def test_program_source_is_the_rendered_kernels() -> None:
    prog = make_program(gemm_loop(), BACKEND, "cuda")
    assert prog.source == BACKEND.render(prog.kernels[0], prog)
    assert prog.source.count("__global__") == 1


def test_rendering_features() -> None:
    src = {cs.name: plan_of(cs).source for cs in CASES}
    floor_fix = re.compile(r"!= 0 && \(\w+ \^ \w+\) < 0")  # a truncated quotient's floor correction
    assert floor_fix.search(src["alu_int32"])
    assert not floor_fix.search(src["alu_uint32"])  # unsigned: truncation is floor
    assert "(unsigned int)" in src["alu_int32"]  # signed ADD/MUL wrap around
    fd = src["floor_divmod"]  # index math proven non-negative: plain / and %; possibly negative: floor fix-up
    assert re.search(r"\(\w+%4\)", fd) and re.search(r"\(\w+/4\)", fd) and floor_fix.search(fd)
    assert "__syncthreads" in src["group_reduce_sum"] and "__shared__" in src["group_reduce_sum"]
    assert "#pragma unroll" in src["gemm_tiled"] and "threadIdx.y" in src["gemm_tiled"]
    assert "nvcuda::wmma::mma_sync" in src["wmma_float16_epilogue"] and "col_major" in src["wmma_float16_epilogue"]
    assert "__nv_bfloat16, nvcuda::wmma::row_major" in src["wmma_bfloat16_local"]
    assert "mma_sync" not in src["wmma_fallback"] and "TC not used" in src["wmma_fallback"]
    assert "#include <cuda_fp16.h>" in src["halves"] and "#include <cuda_bf16.h>" in src["halves"]
    assert "#include <cuda_fp16.h>" not in src["gemm_loop"]
    assert "_egc_rh(" in src["alu_float16"] and "__nv_bfloat16*" in src["alu_bfloat16"]
    assert "unsigned char* __restrict__" in src["alu_bool"]
    assert "exp2f(" in src["alu_float32"] and "exp2(" in src["alu_float64"] and "exp2f(" not in src["alu_float64"]
    assert "blockIdx.x * 42u + threadIdx.x" in src["gemm_loop"]  # auto-parallel LOOP ranges
    sm = src["softmax_rows"]  # the row max is computed once, before the sum's loop
    assert sm.count("_egc_fmax(") == 3 and sm.index("_egc_fmax(acc") < sm.index("for (int ridxr2")


def test_phases_and_grid_mappings() -> None:
    plans = {cs.name: plan_of(cs) for cs in CASES}
    mp = plans["multi_phase"]
    assert mp.phased and [lc.phase for lc in mp.launches] == [0, 1] and "const int phase" in mp.source
    assert not plans["two_reduces"].phased  # independent stores over the same ranges share one launch
    assert plans["globals5_local"].launches[0].grid == (72, 1, 1)  # five GLOBAL ranges merged into x
    assert plans["globals5_local"].launches[0].block == (4, 1, 1)
    assert plans["globals5_flat"].launches[0].block == (72, 1, 1)
    assert plans["big_y"].launches[0].grid == (210000, 1, 1)
    hb = plans["huge_blocks"]
    assert hb.launches[0].grid[1] > 1 and "if (bid >= " in hb.source
    ht = plans["huge_threads"]
    assert ht.launches[0].grid[1] > 1 and ht.launches[0].block == (256, 1, 1) and "unsigned long long gid" in ht.source
    assert plans["gemm_tiled"].launches[0].grid == (2, 2, 1) and plans["gemm_tiled"].launches[0].block == (3, 4, 1)
    assert plans["wmma_bfloat16_local"].launches[0].block == (32, 2, 1)
    assert plans["group_reduce_local"].launches[0].block == (48, 1, 1)
    assert plans["local_autogrid"].launches[0].grid == (5, 1, 1) and plans["local_autogrid"].launches[0].block == (8, 1, 1)
    assert len(plans["gated"].launches) == 1  # independent flat stores over different ranges: one launch


def test_unsupported_kernels_raise_diagnostics() -> None:
    x, y = buf("X", 4), buf("Y", 4)
    i, g = rng(4, 0), rng(4, 1, A.GLOBAL)
    with pytest.raises(UnsupportedOp):  # a range no END binds
        BACKEND.plan(Kernel.from_ast("free", sink((store(y, i, load(x, i)), ()))))
    with pytest.raises(UnsupportedOp):  # reducing over a GLOBAL range would need atomics
        BACKEND.plan(Kernel.from_ast("greduce", sink((store(y, c(0, IDX), reduce(load(x, g), g)), ()))))
    big = rng(2048, 2, A.LOCAL)
    with pytest.raises(UnsupportedOp):  # more than 1024 threads per block
        BACKEND.plan(Kernel.from_ast("bigblock", sink((store(buf("Z", 2048), big, c(1.0)), (big,)))))


def test_compile_without_cupy_says_what_to_install() -> None:
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(BackendUnavailable, match="cupy"):
            BACKEND.compile(gemm_loop().kernel, None)
    else:
        pytest.skip("cupy is installed")


@pytest.fixture(scope="module")
def all_source() -> str:
    return "\n\n".join(plan_of(cs).source for cs in CASES)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_every_kernel(arch: str, all_source: str) -> None:
    if find_nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or put nvcc on PATH)")
    assert nvcc_version() is not None
    ptx = compile_ptx(all_source, arch)
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    missing = [plan_of(cs).name for cs in CASES if plan_of(cs).name not in entries]
    assert not missing, f"no PTX entry for {missing}"
    assert "wmma.mma.sync" in ptx  # the tensor-core path reached PTX


# ---- (b) host emulation of the CUDA execution model --------------------------------------------

_EMU_PRELUDE = r"""
#include <cstring>
#include <cmath>
#include <math.h>
#include <thread>
#include <barrier>
#include <vector>
#include <type_traits>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#undef __global__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __shared__ static
#define __launch_bounds__(n)
struct egc_dim3 { unsigned int x, y, z; };
static thread_local egc_dim3 threadIdx;
static egc_dim3 blockIdx, blockDim, gridDim;
static std::barrier<>* egc_bar = nullptr;
static inline void __syncthreads() { egc_bar->arrive_and_wait(); }
static inline void __syncwarp() { egc_bar->arrive_and_wait(); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) {  // the whole block exchanges
  static T lanes[1024];
  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  lanes[t] = v;
  egc_bar->arrive_and_wait();
  T r = lanes[t ^ (unsigned)o];
  egc_bar->arrive_and_wait();
  return r;
}
// cp.async: a copy lands only when a later wait retires its group, so a read before the wait sees stale data
#define EGC_CUDA_ASYNC
struct egc_copy { void* dst; const void* src; };
static thread_local std::vector<egc_copy> egc_pending;
static thread_local std::vector<std::vector<egc_copy>> egc_groups;
static inline void _egc_cp16(void* dst, const void* src) { egc_pending.push_back({dst, src}); }
static inline void _egc_cp_commit() { egc_groups.push_back(egc_pending); egc_pending.clear(); }
template <int N> static inline void _egc_cp_wait() {
  while (egc_groups.size() > N) {
    for (auto& c : egc_groups.front()) std::memcpy(c.dst, c.src, 16);
    egc_groups.erase(egc_groups.begin());
  }
}
template <class To, class From> static inline To egc_pun(From x) { To t; std::memcpy(&t, &x, sizeof(To)); return t; }
static inline unsigned int __float_as_uint(float x) { return egc_pun<unsigned int>(x); }
static inline float __uint_as_float(unsigned int x) { return egc_pun<float>(x); }
static inline float __int_as_float(int x) { return egc_pun<float>(x); }
static inline long long __double_as_longlong(double x) { return egc_pun<long long>(x); }
static inline double __longlong_as_double(long long x) { return egc_pun<double>(x); }
namespace nvcuda { namespace wmma {
struct matrix_a {}; struct matrix_b {}; struct accumulator {}; struct row_major {}; struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment { float v[256]; };
static inline float egc_f(half x) { return __half2float(x); }
static inline float egc_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class U, class T, class L> void fill_fragment(fragment<U, 16, 16, 16, T, L>& f, float x) {
  for (int e = 0; e < 256; e++) f.v[e] = x;
}
template <class U, class T, class L> void load_matrix_sync(fragment<U, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  for (int r = 0; r < 16; r++) for (int q = 0; q < 16; q++)
    f.v[r * 16 + q] = egc_f(std::is_same<L, row_major>::value ? p[r * ldm + q] : p[r + q * ldm]);
}
template <class T, class LA, class LB> void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
    const fragment<matrix_a, 16, 16, 16, T, LA>& a, const fragment<matrix_b, 16, 16, 16, T, LB>& b,
    const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int m = 0; m < 16; m++) for (int n = 0; n < 16; n++) {
    float s = c.v[m * 16 + n];
    for (int k = 0; k < 16; k++) s += a.v[m * 16 + k] * b.v[k * 16 + n];
    out[m * 16 + n] = s;
  }
  std::memcpy(d.v, out, sizeof out);
}
static inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                                     layout_t) {
  for (int r = 0; r < 16; r++) for (int q = 0; q < 16; q++) p[r * ldm + q] = f.v[r * 16 + q];
}
} }
template <class F> static void egc_launch(F call, egc_dim3 g, egc_dim3 b, bool threaded) {
  gridDim = g; blockDim = b;
  for (unsigned z = 0; z < g.z; z++) for (unsigned y = 0; y < g.y; y++) for (unsigned x = 0; x < g.x; x++) {
    blockIdx = {x, y, z};
    if (!threaded) {
      for (unsigned tz = 0; tz < b.z; tz++) for (unsigned ty = 0; ty < b.y; ty++) for (unsigned tx = 0; tx < b.x; tx++) {
        threadIdx = {tx, ty, tz};
        call();
      }
      continue;
    }
    std::barrier<> bar(b.x * b.y * b.z);
    egc_bar = &bar;
    std::vector<std::thread> ts;
    for (unsigned tz = 0; tz < b.z; tz++) for (unsigned ty = 0; ty < b.y; ty++) for (unsigned tx = 0; tx < b.x; tx++)
      ts.emplace_back([&, tx, ty, tz] { threadIdx = {tx, ty, tz}; call(); bar.arrive_and_drop(); });
    for (auto& t : ts) t.join();
  }
}
"""


def emulation_source(cases: list[Case]) -> str:
    parts = [_EMU_PRELUDE]
    for cs in cases:
        plan = plan_of(cs)
        parts.append(plan.source.replace("#include <mma.h>", ""))
        args = [f"({c_storage_type(dt)}*)a[{k}]" for k, (_, dt) in enumerate(plan.params)]
        args += ["phase"] if plan.phased else []
        threaded = "true" if any(b in plan.source for b in ("__syncthreads", "__syncwarp", "__shfl")) else "false"
        parts.append(
            f'extern "C" void egc_run_{plan.name}(void** a, int phase, unsigned gx, unsigned gy, '
            f"unsigned gz, unsigned bx, unsigned by, unsigned bz) {{\n"
            f"  egc_launch([&] {{ {plan.name}({', '.join(args)}); }}, {{gx, gy, gz}}, {{bx, by, bz}}, "
            f"{threaded});\n}}"
        )
    return "\n".join(parts)


@contextmanager
def emulation_library(cases: list[Case]) -> Iterator[ctypes.CDLL]:
    """The cases' kernels compiled for the host emulation (skips without g++ or the CUDA headers)."""
    gxx, inc = shutil.which("g++"), cuda_include_dirs()
    if gxx is None or not inc:
        pytest.skip("the host emulation needs g++ and the CUDA headers (cuda_fp16.h)")
    with tempfile.TemporaryDirectory(prefix="egc_emu_") as d:
        src, lib = os.path.join(d, "emu.cpp"), os.path.join(d, "emu.so")
        with open(src, "w") as f:
            f.write(emulation_source(cases))
        cmd = [gxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", f"-I{inc[0]}", "-o", lib, src]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr[-6000:]
        yield ctypes.CDLL(lib)


@pytest.fixture(scope="module")
def emulator() -> Iterator[ctypes.CDLL]:
    with emulation_library(RUNNABLE) as lib:
        yield lib


class EmulatedCUDABackend(CUDABackend):
    """The CUDA backend's source and launch plan, run by the host emulation on numpy buffers."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        super().__init__()
        self.lib = lib
        self.host = HostBuffers()

    def compile(self, kernel: Kernel, program: Any = None) -> Callable[[dict[str, Any]], None]:
        plan = self.plan(kernel)
        fn = getattr(self.lib, f"egc_run_{plan.name}")

        scratch = {n: np.empty(size, dtype=dt.np) for n, dt, size in plan.scratch}

        def run(bufs: dict[str, Any]) -> None:
            bufs = {**bufs, **scratch}
            ptrs = (ctypes.c_void_p * max(1, len(plan.params)))(*[bufs[n].ctypes.data for n, _ in plan.params])
            for lc in plan.launches:
                fn(ptrs, ctypes.c_int(lc.phase), *(ctypes.c_uint(v) for v in (*lc.grid, *lc.block)))

        return run

    def alloc(self, spec: BufferSpec) -> np.ndarray:
        return self.host.alloc(spec)

    def put(self, spec: BufferSpec, host: Any) -> np.ndarray:
        return self.host.put(spec, host)

    def get(self, spec: BufferSpec, buf: Any) -> np.ndarray:
        return self.host.get(spec, buf)


def compare_with_reference(case: Case, backend: Any, target: str) -> None:
    inputs = case_inputs(case)
    want = make_program(case, ReferenceBackend(), "reference")(**inputs)
    prog = make_program(case, backend, target)
    got = prog(**inputs)
    bad = []
    for name, g, w in zip(prog.outputs, got, want):
        try:
            check(g, w, rtol=case.rtol, atol=case.atol)
        except AssertionError as e:
            bad.append(f"output {name!r}: {e}")
    assert not bad, f"{case.name}:\n" + "\n".join(bad)


@pytest.mark.parametrize("case", RUNNABLE, ids=lambda cs: cs.name)
def test_emulated_kernels_match_reference(case: Case, emulator: ctypes.CDLL) -> None:
    compare_with_reference(case, EmulatedCUDABackend(emulator), "cuda-emulated")


# ---- (c) on a GPU --------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("case", RUNNABLE, ids=lambda cs: cs.name)
def test_gpu_kernels_match_reference(case: Case) -> None:
    gpu_or_skip()
    compare_with_reference(case, CUDABackend(), "cuda")


@pytest.mark.gpu
def test_gpu_put_accepts_cupy_and_numpy() -> None:
    gpu_or_skip()
    import cupy

    be = CUDABackend()
    for dt in (F32, BF16, dtypes.bool, F16, I32):
        spec = BufferSpec("x", dt, 4, "input", (4,))
        host = np.array([1.5, -2.0, 0.0, 3.25], np.float32)
        want = be.get(spec, be.put(spec, host))
        check(be.get(spec, be.put(spec, cupy.asarray(host))), want)


@pytest.mark.gpu
def test_cupy_inputs_are_read_in_place_and_the_outputs_stay_on_the_gpu() -> None:
    gpu_or_skip()
    import cupy

    from egraph_compiler import Tensor, optimize
    from egraph_compiler.ir.diagnostics import MissingInput

    a, n = Tensor.empty(4, 8, name="a"), Tensor.empty(4, 8, dtype="int32", name="n")
    h = Tensor.empty(4, 8, dtype="bfloat16", name="h")
    prog = optimize([a * 2.0 + n.cast("float32"), (h * 3.0).cast("float32")], target="cuda")
    rs = np.random.default_rng(3)
    x, k = rs.standard_normal((4, 8)).astype(np.float32), rs.integers(-50, 50, (4, 8))  # int64 values that fit
    hv = rs.standard_normal((4, 8)).astype(np.float32)
    want = (x * 2 + k, bf16_round(bf16_round(hv) * 3))
    for given in ({"a": cupy.asarray(x), "n": cupy.asarray(k), "h": cupy.asarray(hv)}, {"a": x, "n": cupy.asarray(k), "h": hv}):
        got = prog(**given)
        for g, w in zip(got, want):
            assert isinstance(g, cupy.ndarray) and g.shape == w.shape and g.dtype == np.float32
            np.testing.assert_allclose(cupy.asnumpy(g), w, rtol=1e-6)
    # the same checks as for host arrays, made on the GPU: a value int32 cannot hold, a wrong shape
    with pytest.raises(MissingInput, match="do not all convert"):
        prog(a=cupy.asarray(x), n=cupy.asarray(k + 2**40), h=cupy.asarray(hv))
    with pytest.raises(MissingInput, match="expected shape"):
        prog(a=cupy.asarray(x.reshape(-1)), n=cupy.asarray(k), h=cupy.asarray(hv))
