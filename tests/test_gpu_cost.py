"""The GPU roofline estimate (extract/gpu_cost.py) ranks known-good CUDA mappings above known-bad ones and stays
near the bytes/bandwidth bound where a kernel is memory bound. Every hand-built kernel is rendered by the CUDA
backend (no GPU needed) and, at a small size, run through the reference interpreter against numpy."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from test_llvm_backend import buf, kernel, load, reduce, rng, store

from egraph_compiler import AxisType, Ops, UOp
from egraph_compiler.backends.cuda import _Renderer, plan_kernel
from egraph_compiler.backends.reference import run_kernel
from egraph_compiler.extract.gpu_cost import GPUMachine, estimate_gpu, from_properties
from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.kernel.gpu_launch import LaunchPlanner
from egraph_compiler.kernel.program import Kernel, buffer_of

H100 = GPUMachine()  # fixed, so rankings don't depend on the machine the tests run on
A = AxisType
F16 = dtypes.float16


def _hbm_bound(n_bytes: int) -> float:
    return n_bytes / (H100.hbm_gbps * 1e9)


# ---- kernels ---------------------------------------------------------------------------------------------


def _sum(n: int, group: int) -> UOp:
    """y[0] = sum(x): one thread (group 1) or one block of `group` threads combined by a shared-memory tree."""
    x, y = buf("X", n), buf("Y", 1)
    if group == 1:
        r = rng(n, "r", A.REDUCE)
        return kernel((store(y, UOp.const(0), reduce(load(x, r), r)), ()))
    rr, g = rng(n // group, "r", A.REDUCE), rng(group, "g", A.GROUP_REDUCE)
    return kernel((store(y, UOp.const(0), reduce(load(x, rr * group + g), rr, g)), ()))


def _row_sum(rows: int, cols: int, group: int) -> UOp:
    """y[i] = sum_k x[i, k]: one thread per row (the row range on the auto grid) or a block of `group` threads per
    row (GLOBAL rows, GROUP_REDUCE columns, consecutive threads on consecutive columns)."""
    x, y = buf("X", rows * cols), buf("Y", rows)
    if group == 1:
        i, k = rng(rows, "i"), rng(cols, "k", A.REDUCE)
        return kernel((store(y, i, reduce(load(x, i * cols + k), k)), (i,)))
    i, kr, g = rng(rows, "i", A.GLOBAL), rng(cols // group, "k", A.REDUCE), rng(group, "g", A.GROUP_REDUCE)
    return kernel((store(y, i, reduce(load(x, i * cols + kr * group + g), kr, g)), (i,)))


def _fma(n: int) -> UOp:
    a, b, c, d = buf("A", n), buf("B", n), buf("C", n), buf("D", n)
    i = rng(n, "i")
    return kernel((store(d, i, load(a, i) * load(b, i) + load(c, i)), (i,)))


def _gemm(n: int, threads_on_j: bool) -> UOp:
    """C = A @ B, one thread per output over the auto grid; the innermost (fastest) thread index is j (B and C
    unit stride across a warp, A broadcast) or i (A and C strided by n)."""
    a, b, c = buf("A", n * n), buf("B", n * n), buf("C", n * n)
    i, j, k = rng(n, "i"), rng(n, "j"), rng(n, "k", A.REDUCE)
    return kernel((store(c, i * n + j, reduce(load(a, i * n + k) * load(b, k * n + j), k)), (i, j) if threads_on_j else (j, i)))


def _gemm_tile(n: int) -> UOp:
    """C = A @ B with a 4x4 register tile per thread: UPCAST i and j by 4 (the renderer expands 16 copies sharing
    one k loop, 4 loads of A and one float4 load of B per k), threads over the tiles, j fastest."""
    a, b, c = buf("A", n * n), buf("B", n * n), buf("C", n * n)
    io, jo, k = rng(n // 4, "io"), rng(n // 4, "jo"), rng(n, "k", A.REDUCE)
    iu, ju = rng(4, "iu", A.UPCAST), rng(4, "ju", A.UPCAST)
    i, j = io * 4 + iu, jo * 4 + ju
    return kernel((store(c, i * n + j, reduce(load(a, i * n + k) * load(b, k * n + j), k)), (io, jo, iu, ju)))


def _gemm16(n: int, tc: bool) -> UOp:
    """fp16 GEMM with fp32 accumulation in 16x16 output tiles: a tensor-core region (two WARP 16 ranges, an
    UNROLL 16 k range: one warp per tile), or the same tiles as 16x16 LOCAL threads doing scalar FMAs."""
    a, b, c = buf("A", n * n, F16), buf("B", n * n, F16), buf("C", n * n)
    gm, gn = rng(n // 16, "gm", A.GLOBAL), rng(n // 16, "gn", A.GLOBAL)
    tm, tn = (rng(16, "mw", A.WARP), rng(16, "nw", A.WARP)) if tc else (rng(16, "lm", A.LOCAL), rng(16, "ln", A.LOCAL))
    ko, kw = rng(n // 16, "ko", A.REDUCE), rng(16, "kw", A.UNROLL)
    m, nn, k = gm * 16 + tm, gn * 16 + tn, ko * 16 + kw
    acc = reduce(load(a, m * n + k).cast(dtypes.float32) * load(b, k * n + nn).cast(dtypes.float32), ko, kw)
    return kernel((store(c, m * n + nn, acc), (gm, gn, tm, tn)))


def _local(threads: int) -> UOp:
    x, y = buf("X", 4 * threads), buf("Y", 4 * threads)
    g, loc = rng(4, "g", A.GLOBAL), rng(threads, "l", A.LOCAL)
    return kernel((store(y, g * threads + loc, load(x, g * threads + loc) * 2.0), (g, loc)))


# ---- the kernels are programs the renderer and the interpreter accept --------------------------------------


def _run(ast: UOp, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    bufs = {
        u.arg[0]: inputs.get(u.arg[0], np.zeros(u.arg[1][0], np.float32 if u.dtype is dtypes.float32 else u.dtype.np))
        for u in ast.toposort()
        if u.op is Ops.BUFFER
    }
    run_kernel(ast, bufs)
    return bufs


SMALL: list[tuple[str, Callable[[], UOp], Callable[[dict[str, np.ndarray]], tuple[str, np.ndarray]]]] = [
    ("sum1", lambda: _sum(1024, 1), lambda v: ("Y", v["X"].sum(keepdims=True))),
    ("sum256", lambda: _sum(1024, 256), lambda v: ("Y", v["X"].sum(keepdims=True))),
    ("rows1", lambda: _row_sum(8, 512, 1), lambda v: ("Y", v["X"].reshape(8, 512).sum(1))),
    ("rows256", lambda: _row_sum(8, 512, 256), lambda v: ("Y", v["X"].reshape(8, 512).sum(1))),
    ("fma", lambda: _fma(1000), lambda v: ("D", v["A"] * v["B"] + v["C"])),
    ("gemm_j", lambda: _gemm(24, True), lambda v: ("C", (v["A"].reshape(24, 24) @ v["B"].reshape(24, 24)).ravel())),
    ("gemm_tile", lambda: _gemm_tile(24), lambda v: ("C", (v["A"].reshape(24, 24) @ v["B"].reshape(24, 24)).ravel())),
    ("gemm_i", lambda: _gemm(24, False), lambda v: ("C", (v["A"].reshape(24, 24) @ v["B"].reshape(24, 24)).ravel())),
    ("copy_t", lambda: _copy(16, True), lambda v: ("Y", v["X"].reshape(16, 16).T.ravel())),
    ("local", lambda: _local(8), lambda v: ("Y", v["X"] * 2)),
    (
        "gemm16_tc",
        lambda: _gemm16(32, True),
        lambda v: ("C", (v["A"].astype(np.float32).reshape(32, 32) @ v["B"].astype(np.float32).reshape(32, 32)).ravel()),
    ),
    (
        "gemm16",
        lambda: _gemm16(32, False),
        lambda v: ("C", (v["A"].astype(np.float32).reshape(32, 32) @ v["B"].astype(np.float32).reshape(32, 32)).ravel()),
    ),
]


@pytest.mark.parametrize("build,expect", [(b, e) for _, b, e in SMALL], ids=[n for n, _, _ in SMALL])
def test_hand_built_kernels_are_valid_programs(
    build: Callable[[], UOp], expect: Callable[[dict[str, np.ndarray]], tuple[str, np.ndarray]]
) -> None:
    ast = build()
    rs = np.random.default_rng(0)
    loaded = {buffer_of(u.src[0]) for u in ast.toposort() if u.op is Ops.LOAD}
    inputs = {b.arg[0]: rs.standard_normal(b.arg[1][0]).astype(b.dtype.np if b.dtype is F16 else np.float32) for b in loaded}
    got = _run(ast, inputs)
    name, want = expect(inputs)
    np.testing.assert_allclose(got[name], want, rtol=1e-3, atol=1e-3)
    assert plan_kernel(Kernel.from_ast("k", ast)).launches


def test_big_kernels_render_with_the_launches_the_model_assumes() -> None:
    def launch(ast: UOp) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        (lc,) = plan_kernel(Kernel.from_ast("k", ast)).launches
        return lc.grid, lc.block

    partials, combine = plan_kernel(Kernel.from_ast("k", _sum(1 << 24, 1))).launches  # split over the grid
    assert (partials.grid, partials.block, combine.grid, combine.block) == ((1024, 1, 1), (256, 1, 1), (1, 1, 1), (256, 1, 1))
    assert launch(_sum(1 << 24, 256)) == ((1, 1, 1), (256, 1, 1))
    assert launch(_row_sum(4096, 4096, 1)) == ((16, 1, 1), (256, 1, 1))
    assert launch(_row_sum(4096, 4096, 256)) == ((4096, 1, 1), (256, 1, 1))
    assert launch(_fma(1 << 24)) == ((1 << 16, 1, 1), (256, 1, 1))
    assert launch(_gemm(1024, True)) == ((4096, 1, 1), (256, 1, 1))
    assert launch(_gemm16(1024, False)) == ((64, 64, 1), (16, 16, 1))
    src = plan_kernel(Kernel.from_ast("k", _gemm16(1024, True)))
    assert "mma_sync" in src.source and src.launches[0].block == (32, 1, 1)


# ---- rankings and absolute sanity --------------------------------------------------------------------------


def test_a_group_reduce_beats_one_thread_and_a_grid_split_beats_both(monkeypatch: pytest.MonkeyPatch) -> None:
    split, group = estimate_gpu(_sum(1 << 24, 1), H100), estimate_gpu(_sum(1 << 24, 256), H100)
    monkeypatch.setattr(LaunchPlanner, "grid_split", lambda self, ph: None)
    one = estimate_gpu(_sum(1 << 24, 1), H100)
    assert split.seconds * 10 < group.seconds and group.seconds * 10 < one.seconds, (split, group, one)
    assert one.parallel == 1 and group.parallel == 256 and split.parallel == 1024 * 256


def test_row_reduce_prefers_a_block_per_row() -> None:
    """4096 rows of 4096 float32 (64 MiB). A block of 256 threads per row launches 1M threads on every SM, its
    loads are coalesced (consecutive threads, consecutive columns) and the 8-level tree is small next to the 16
    elements each thread adds: it should run near the HBM bound. One thread per row launches 4096 threads (16
    blocks: 16 of 132 SMs) whose loads are 16 KiB apart across a warp, so every warp load moves 32 sectors
    through L1 (the rest of each sector is read by the same thread later, from cache): several times slower.
    Both stay within 1x-20x of bytes/HBM."""
    per_row, per_block = estimate_gpu(_row_sum(4096, 4096, 1), H100), estimate_gpu(_row_sum(4096, 4096, 256), H100)
    bound = _hbm_bound(4096 * 4096 * 4)
    assert per_block.seconds * 2 < per_row.seconds, (per_block, per_row)
    for e in (per_row, per_block):
        assert bound <= e.seconds <= 20 * bound, (e, bound)


def test_elementwise_runs_at_the_bandwidth_bound() -> None:
    n = 1 << 24
    e = estimate_gpu(_fma(n), H100)
    bound = _hbm_bound(4 * n * 4)
    assert bound <= e.seconds <= 1.5 * bound, (e, bound)
    assert e.bytes == 4 * n * 4 and e.parallel == n


def test_gemm_prefers_threads_on_the_unit_stride_axis() -> None:
    coalesced, strided = estimate_gpu(_gemm(1024, True), H100), estimate_gpu(_gemm(1024, False), H100)
    assert coalesced.seconds * 2 < strided.seconds, (coalesced, strided)


def test_a_register_tile_beats_one_output_per_thread() -> None:
    """Upcast copies share their loads: a 4x4 tile moves a quarter of the bytes through L1 per FMA, and its 16
    accumulators hide the add latency."""
    tile, plain = estimate_gpu(_gemm_tile(1024), H100), estimate_gpu(_gemm(1024, True), H100)
    assert tile.seconds * 1.5 < plain.seconds, (tile, plain)
    assert tile.seconds >= 2 * 1024**3 / (H100.fp32_tflops * 1e12)


def test_tensor_cores_beat_scalar_fma() -> None:
    tc, fma = estimate_gpu(_gemm16(1024, True), H100), estimate_gpu(_gemm16(1024, False), H100)
    assert tc.seconds * 5 < fma.seconds, (tc, fma)
    assert "TC" in tc.notes[0]
    flops = 2 * 1024**3
    assert tc.seconds >= flops / (H100.fp16_tc_tflops * 1e12)


def test_invalid_launches_are_infinitely_slow() -> None:
    assert math.isfinite(estimate_gpu(_local(1024), H100).seconds)
    with pytest.raises(UnsupportedOp, match="2048 threads per block"):
        plan_kernel(Kernel.from_ast("k", _local(2048)))
    bad = estimate_gpu(_local(2048), H100)
    assert bad.seconds == math.inf and "2048 threads per block" in bad.notes[-1]
    n = (2**31 - 1) * 65535 * 256 + 1  # one thread more than a flat 2D grid of 256-thread blocks holds
    huge = rng(n, "a", A.GLOBAL)
    ast = kernel((store(buf("Y", n), huge, huge.cast(dtypes.float32)), (huge,)))
    with pytest.raises(UnsupportedOp, match="exceed the CUDA grid"):
        plan_kernel(Kernel.from_ast("k", ast))
    over = estimate_gpu(ast, H100)
    assert over.seconds == math.inf and "grid" in over.notes[-1]
    free = rng(8, "r")  # a stored value over a range no END binds: the renderer refuses it
    assert estimate_gpu(kernel((store(buf("Y", 8), free, load(buf("X", 8), free)), ())), H100).seconds == math.inf


def test_device_without_a_gpu_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    GPUMachine.device.cache_clear()
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy fails, as without CuPy
    try:
        assert GPUMachine.device() == GPUMachine()
        GPUMachine.device.cache_clear()
        monkeypatch.setenv("EGC_GPU_HBM_GBPS", "2000")
        monkeypatch.setenv("EGC_GPU_SMS", "100")
        m = GPUMachine.device()
        assert m.hbm_gbps == 2000.0 and m.sms == 100 and isinstance(m.sms, int)
    finally:
        GPUMachine.device.cache_clear()


def test_h100_properties_give_about_the_defaults() -> None:
    """What CuPy reports for an H100 SXM5 (cudaDeviceProp) comes out within 10% of the documented defaults."""
    props = {
        "multiProcessorCount": 132,
        "maxThreadsPerMultiProcessor": 2048,
        "maxThreadsPerBlock": 1024,
        "sharedMemPerBlockOptin": 232448,
        "l2CacheSize": 50 << 20,
        "memoryClockRate": 2619000,
        "memoryBusWidth": 5120,
        "clockRate": 1980000,
        "major": 9,
        "minor": 0,
        "warpSize": 32,
    }
    m = from_properties(props)
    for f in ("sms", "max_threads_per_sm", "l2_bytes", "fp32_tflops", "fp16_tc_tflops", "hbm_gbps", "clock_ghz"):
        assert getattr(m, f) == pytest.approx(getattr(H100, f), rel=0.1), f
    assert from_properties({}) == H100  # nothing known: the defaults


def _copy(n: int, transpose: bool) -> UOp:
    x, y = buf("X", n * n), buf("Y", n * n)
    i, j = rng(n, "i"), rng(n, "j")  # j is the innermost thread index
    return kernel((store(y, i * n + j, load(x, j * n + i if transpose else i * n + j)), (i, j)))


def test_strided_reads_waste_sectors_only_when_the_buffer_leaves_l2() -> None:
    """A transposed read moves a 32-byte sector per 4-byte element from HBM when the matrix is bigger than L2
    (64 MiB > 50 MiB); a 4 MiB one is read from L2 after its first touch, so only L1 traffic grows."""
    big, big_t = estimate_gpu(_copy(4096, False), H100), estimate_gpu(_copy(4096, True), H100)
    assert big_t.bytes == 4 * 4096**2 + 8 * 4 * 4096**2 and big.bytes == 2 * 4 * 4096**2
    assert big_t.seconds > 3 * big.seconds
    small, small_t = estimate_gpu(_copy(1024, False), H100), estimate_gpu(_copy(1024, True), H100)
    assert small.bytes == small_t.bytes and small_t.seconds >= small.seconds


def test_a_best_schedule_the_renderer_rejects_is_not_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without hoisting group reductions out of a padded sum's WHERE, the estimate's favourite does not render: the
    ranking moves it back and the program still renders."""
    import egraph_compiler.backends.cuda as cuda
    from egraph_compiler import Tensor, optimize

    x, y = Tensor.empty(8, 4097, name="x"), Tensor.empty(8, 3, name="y")
    program = (y * x.sum(1, keepdim=True)).sum(1).pad(((1, 1),))
    checked: list[bool] = []
    check = cuda.renders.__wrapped__
    monkeypatch.setattr(cuda, "renders", lambda k: checked.append(check(k)) or checked[-1])
    monkeypatch.setattr(_Renderer, "pre_group", lambda self, root, scope: None)
    prog = optimize(program, target="cuda")
    assert "__global__" in prog.source
    assert False in checked and checked[-1], checked
