"""The CPU a program is compiled for: host, named CPUs, $EGC_CPU, and code for an older ISA that runs here."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from helpers import conv_ref
from hypothesis import example, given, settings
from hypothesis import strategies as st

from egraph_compiler import AxisType, Ops, Tensor, UOp, optimize
from egraph_compiler.backends.llvm import LLVMBackend
from egraph_compiler.extract.loop_cost import OP_CYCLES, CPUMachine, estimate
from egraph_compiler.ir.diagnostics import InvalidArgument
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.kernel.cpu_target import ENV, NAMED, CPUTarget, cpu_target, host_cpu
from egraph_compiler.kernel.program import BufferSpec, Kernel, Program

HOST = host_cpu()
HAS_AVX2 = HOST.isa in ("avx2", "avx512")
NEEDS_AVX512 = pytest.mark.skipif(HOST.isa != "avx512", reason="runs AVX-512 code: needs an AVX-512 host")


def test_host_is_the_default_and_describes_itself() -> None:
    assert cpu_target(None) == HOST and HOST.host
    assert cpu_target("host") == HOST
    assert HOST.isa in ("avx512", "avx2", "avx", "sse") and HOST.name in HOST.describe()


def test_a_named_cpu_sets_the_vector_model() -> None:
    hsw = cpu_target("haswell")
    assert (hsw.isa, hsw.simd_bytes, hsw.vector_regs, hsw.host) == ("avx2", 32, 16, False)
    m = CPUMachine.for_cpu(hsw)
    assert (m.simd_bytes, m.vector_regs) == (32, 16) and "haswell" in m.describe()
    sse = CPUMachine.for_cpu(cpu_target("x86-64"))
    assert sse.lanes(4) == 4
    # Zen 4 runs a 512-bit FMA as two halves: its AVX-512 peak equals AVX2's two 256-bit FMAs a cycle
    assert CPUMachine.for_cpu(CPUTarget("znver4", "", "avx512", False)).peak_flops() == m.peak_flops()
    assert CPUMachine.for_cpu(CPUTarget("skylake-avx512", "", "avx512", False)).peak_flops() == 2 * m.peak_flops()


def test_unknown_cpu_is_a_diagnostic() -> None:
    with pytest.raises(InvalidArgument) as e:
        cpu_target("pentium9")
    assert "haswell" in e.value.suggestion


def test_cpu_the_host_cannot_run_is_refused() -> None:
    wider = [n for n, isa in NAMED.items() if isa == "avx512"]
    if HOST.isa == "avx512":
        pytest.skip("this host runs every CPU in the table")
    with pytest.raises(InvalidArgument):
        cpu_target(wider[0])


def test_cpu_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_AVX2:
        pytest.skip("needs an AVX2 host")
    monkeypatch.setenv(ENV, "haswell")
    assert LLVMBackend().cpu.name == "haswell"
    monkeypatch.setenv(ENV, "nonsense")
    with pytest.raises(InvalidArgument):
        LLVMBackend()


def test_cpu_needs_the_llvm_target() -> None:
    a = Tensor.empty((4, 4), dtype="float32", name="a")
    with pytest.raises(InvalidArgument):
        optimize(a + 1, target="reference", cpu="haswell")


@pytest.mark.skipif(not HAS_AVX2, reason="needs an AVX2 host")
def test_haswell_code_has_no_avx512() -> None:
    a = Tensor.empty((64, 48), dtype="float32", name="a")
    b = Tensor.empty((48, 80), dtype="float32", name="b")
    prog = optimize(a @ b, target="llvm", cpu="haswell")
    k = prog.kernels[0]
    assert '"target-cpu"="haswell"' in prog.backend.optimized_ir(k, prog)
    asm = prog.backend.assembly(k, prog)
    assert "%ymm" in asm and "%zmm" not in asm  # AVX2 vectors, no AVX-512 register
    assert "haswell" in prog.report.extra["machine"]
    av = np.random.default_rng(1).standard_normal((64, 48), dtype=np.float32)
    bv = np.random.default_rng(2).standard_normal((48, 80), dtype=np.float32)
    np.testing.assert_allclose(prog(a=av, b=bv), av @ bv, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="needs an AVX2 host")
@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 70), k=st.integers(1, 70), n=st.integers(1, 70), cpu=st.sampled_from([None, "haswell"]))
def test_gemm_at_any_size_for_both_isas(m: int, k: int, n: int, cpu: str | None) -> None:
    """Primes, sizes below a tile and sizes the tiles do not divide: native and AVX2 code match numpy."""
    a = Tensor.empty((m, k), dtype="float32", name="a")
    b = Tensor.empty((k, n), dtype="float32", name="b")
    prog = optimize(a @ b, target="llvm", cpu=cpu)
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    av, bv = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    np.testing.assert_allclose(prog(a=av, b=bv), av.astype(np.float64) @ bv, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not HAS_AVX2, reason="needs an AVX2 host")
def test_avx2_gemm_reads_a_wide_operand_once() -> None:
    """128x3072 @ 3072x768 in AVX2 code (B unpacked: its rows step 3 KiB): with the row tiles outside the column
    tiles, B would come from memory once per row tile, each line waiting on the latency (measured 28-40 ms against
    11-12); the estimate puts the column tiles outside, so B is read once. The product matches numpy."""
    a = Tensor.empty((128, 3072), dtype="float32", name="a")
    b = Tensor.empty((3072, 768), dtype="float32", name="b")
    prog = optimize(a @ b, target="llvm", cpu="haswell")
    (nest,) = [k["schedule"] for k in prog.report.extra["kernels"] if "red[" in k["schedule"]]
    outer = int(nest.strip("[").split("L")[0])  # the outermost loop: over the 768 columns' tiles, not the 128 rows'
    assert outer in (96, 48, 24), nest
    rng = np.random.default_rng(3)
    av, bv = rng.standard_normal((128, 3072), dtype=np.float32), rng.standard_normal((3072, 768), dtype=np.float32)
    np.testing.assert_allclose(prog(a=av, b=bv), av.astype(np.float64) @ bv, rtol=1e-3, atol=1e-2)


def test_narrow_vectors_add_four_and_six_row_tiles() -> None:
    """AVX2's 16 registers hold a tile of 4 or 6 rows x 2 vectors, not 8 x 8 (load-bound) or 8 x 16 (spills):
    code for 8 float32 lanes is offered tiles of 4 and 6 (and padding to 16, and to 6 where that adds little);
    AVX-512 code is not."""
    from egraph_compiler.rules.optops import target_kinds

    narrow, wide = target_kinds("llvm", lanes=8), target_kinds("llvm", lanes=16)
    assert {4, 6} <= set(narrow["u"]) and 16 in narrow["pad-u"] and narrow["pad-u-thrifty"] == (6,)
    assert not {4, 6} & set(wide["u"]) and 16 not in wide["pad-u"] and "pad-u-thrifty" not in wide
    assert target_kinds("cuda", lanes=8) == target_kinds("cuda")


def test_accumulators_leave_registers_for_the_operands() -> None:
    """A tile's accumulators spill (in the estimate) past 3/4 of the vector registers or where a step's operands
    (the vectors along the accumulators' axis and a broadcast) no longer fit beside them: AVX2's 6 x 2 vectors
    (12 + 3 of 16) fit, 8 x 2 do not; AVX-512's 8 x 2 (16 + 3 of 32) fit, 14 x 2 (28 + 3) do not."""

    def tile(rows: int, cols: int) -> UOp:
        m, k, n = rows * 4, 64, cols * 2
        mo, mu = UOp.range(4, 0), UOp.range(rows, 1, AxisType.UPCAST)
        no, nu = UOp.range(2, 2), UOp.range(cols, 3, AxisType.UPCAST)
        kk = UOp.range(k, 4, AxisType.REDUCE)
        row, col = mo * rows + mu, no * cols + nu

        def read(name: str, size: int, idx: UOp) -> UOp:
            return UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (UOp(Ops.BUFFER, dtypes.float32, (), (name, (size,))), idx)),))

        prod = read("a", m * k, row * k + kk) * read("b", k * n, kk * n + col)
        red = UOp(Ops.REDUCE, dtypes.float32, (prod, kk), (Ops.ADD, ()))
        y = UOp(Ops.BUFFER, dtypes.float32, (), ("y", (m * n,)))
        store = UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (y, row * n + col)), red))
        return UOp.build(Ops.SINK, (UOp.build(Ops.END, (store, mo, no, mu, nu)),))

    avx2 = CPUMachine(simd_bytes=32, vector_regs=16)
    avx512 = CPUMachine(simd_bytes=64, vector_regs=32)
    assert not estimate(tile(6, 16), avx2).spills and estimate(tile(8, 16), avx2).spills
    assert not estimate(tile(8, 32), avx512).spills and estimate(tile(14, 32), avx512).spills


@pytest.mark.parametrize("simd", [32, 64])
def test_exp_costs_its_sequence_per_vector_however_it_vectorizes(simd: int) -> None:
    """EXP2 is a long inline sequence of vector instructions: a vectorized loop over it is priced at EXP2's
    cycles a vector, as an upcast of one vector's lanes is, not halved for two vectors in flight (elementwise exp
    ran 18-20 cycles a vector on Zen 5, native and AVX2 code, 2.2-2.4x the halved estimate)."""
    n, lanes = 1 << 16, simd // 4

    def exp_kernel(upcast: int) -> UOp:
        outer = UOp.range(n // upcast, 0)
        ranges = (outer,) if upcast == 1 else (outer, UOp.range(upcast, 1, AxisType.UPCAST))
        idx = outer if upcast == 1 else outer * upcast + ranges[1]
        x = UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (UOp(Ops.BUFFER, dtypes.float32, (), ("x", (n,))), idx)),))
        y = UOp(Ops.BUFFER, dtypes.float32, (), ("y", (n,)))
        store = UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (y, idx)), UOp(Ops.EXP2, dtypes.float32, (x,))))
        return UOp.build(Ops.SINK, (UOp.build(Ops.END, (store, *ranges)),))

    m = CPUMachine(simd_bytes=simd, vector_regs=32 if simd == 64 else 16)
    looped, upcast = estimate(exp_kernel(1), m), estimate(exp_kernel(lanes), m)
    assert looped.cycles >= n // lanes * OP_CYCLES[Ops.EXP2]
    assert 0.8 < looped.cycles / upcast.cycles < 1.25, (looped.cycles, upcast.cycles)


@pytest.mark.parametrize("op", [Ops.MAX, Ops.ADD])
def test_loads_across_the_accumulators_lanes_are_gathered(op: Ops) -> None:
    """32 rows' maxima (or sums) over 256 columns keep a vector of 32 accumulators along the rows; with the
    reduction unrolled by 4 along the contiguous columns, its copies still add into those vectors one after
    another, so each step loads 128 scalars and inserts them into lanes, not 32 vectors of 4: priced like the
    loop that is not unrolled (both ran 7-8 us on Zen 5, where the vector-load estimate said 3.6 for the
    unrolled one; as scalar chains, before a max kept vector accumulators, such nests ran 35-60 us)."""
    rows, cols = 256, 256

    def row_max(unroll: int) -> UOp:
        ro, ru = UOp.range(rows // 32, 0), UOp.range(32, 1, AxisType.UPCAST)
        if unroll > 1:
            ks = (UOp.range(cols // unroll, 2, AxisType.REDUCE), UOp.range(unroll, 3, AxisType.UNROLL))
            col = ks[0] * unroll + ks[1]
        else:
            ks = (UOp.range(cols, 2, AxisType.REDUCE),)
            col = ks[0]
        row = ro * 32 + ru
        x = UOp(Ops.BUFFER, dtypes.float32, (), ("x", (rows * cols,)))
        load = UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (x, row * cols + col)),))
        red = UOp(Ops.REDUCE, dtypes.float32, (load, *ks), (op, ()))
        y = UOp(Ops.BUFFER, dtypes.float32, (), ("y", (rows,)))
        store = UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (y, row)), red))
        return UOp.build(Ops.SINK, (UOp.build(Ops.END, (store, ro, ru)),))

    m = CPUMachine(simd_bytes=64, vector_regs=32)
    unrolled, looped = estimate(row_max(4), m), estimate(row_max(1), m)
    assert 0.8 <= unrolled.cycles / looped.cycles <= 1.25, (unrolled.cycles, looped.cycles)


def _strided_window_max(step: int) -> UOp:
    """y[j] = max over k < 3 of x[step * j + k], 16 columns of j a tile (vector accumulators along them)."""
    n = 1024
    jo, ju, k = UOp.range(n // 16, 0), UOp.range(16, 1, AxisType.UPCAST), UOp.range(3, 2, AxisType.UNROLL)
    j = jo * 16 + ju
    x = UOp(Ops.BUFFER, dtypes.float32, (), ("x", (step * n + 2,)))
    load = UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (x, j * step + k)),))
    red = UOp(Ops.REDUCE, dtypes.float32, (load, k), (Ops.MAX, ()))
    y = UOp(Ops.BUFFER, dtypes.float32, (), ("y", (n,)))
    store = UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (y, j)), red))
    return UOp.build(Ops.SINK, (UOp.build(Ops.END, (store, jo, ju)),))


def test_lanes_far_apart_pay_an_insert_each() -> None:
    """Lanes 2 elements apart (a stride-2 pool's row) are one load of their span and a shuffle, priced as the
    scalar loads of the distinct elements; 8 apart, each lane is a scalar load and an insert into the vector,
    priced higher by the inserts. Both compute the max."""
    m = CPUMachine(simd_bytes=64, vector_regs=32)
    stepped, gathered = estimate(_strided_window_max(2), m), estimate(_strided_window_max(8), m)
    assert stepped.cycles < gathered.cycles, (stepped.cycles, gathered.cycles)
    for step in (2, 8):
        x = np.random.default_rng(step).standard_normal(step * 1024 + 2).astype(np.float32)
        ast = _strided_window_max(step)
        specs = {"x": BufferSpec("x", dtypes.float32, x.size, "input", x.shape)}
        specs["y"] = BufferSpec("y", dtypes.float32, 1024, "output", (1024,))
        got = Program([Kernel.from_ast("k", ast)], specs, ["x"], ["y"], LLVMBackend(), "llvm")(x=x)
        want = np.max([x[k : k + step * 1024 : step] for k in range(3)], axis=0)
        assert np.array_equal(got, want)


@pytest.mark.parametrize("cpu", [None, pytest.param("haswell", marks=pytest.mark.skipif(not HAS_AVX2, reason="AVX2"))])
@pytest.mark.parametrize("m", [2, 3, 4, 8])
def test_gemm_of_a_few_rows_tiles_them(m: int, cpu: str | None) -> None:
    """m x 256 @ 256 x 1024 (a small batch through a dense layer): its rows are a register tile's rows, all of
    them one UPCAST (u-whole, u-whole-rows: an axis of exactly a tile factor, which a split cannot offer), not a
    loop over rows around a tile of columns (8 rows: 150-240 us against 22-38 on Zen 5; 4 rows 78 against 20).
    AVX2's 8 rows x 2 vectors fill its 16 registers, and the operands spill, not the accumulators: B read once
    ran 35-38 us against 51 for two tiles of 4 rows (Zen 5, AVX2 code). The product matches numpy."""
    a = Tensor.empty((m, 256), dtype="float32", name="a")
    b = Tensor.empty((256, 1024), dtype="float32", name="b")
    prog = optimize(a @ b, target="llvm", cpu=cpu)
    (nest,) = [k["schedule"] for k in prog.report.extra["kernels"] if "red[" in k["schedule"]]
    assert f"1L {m}u" in nest, nest
    rng = np.random.default_rng(8)
    av, bv = rng.standard_normal((m, 256), dtype=np.float32), rng.standard_normal((256, 1024), dtype=np.float32)
    np.testing.assert_allclose(prog(a=av, b=bv), av.astype(np.float64) @ bv, rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(not HAS_AVX2, reason="needs an AVX2 host")
@pytest.mark.parametrize(("m", "k", "n"), [(512, 512, 512), (128, 512, 512), (128, 768, 2304)])
def test_avx2_gemm_takes_a_tile_of_six_rows(m: int, k: int, n: int) -> None:
    """m x k @ k x n in AVX2 code: the estimate picks the 6-row tile of two 8-lane vectors of columns (12
    accumulators: 1.3x faster than 4 rows on Zen 4, which was 1.2x faster than 8 x 8 on Emerald Rapids), its
    rows padded to a multiple of 6 (the padding's rows neither read past A nor stored); the product matches numpy.
    The 4-row tile's 8 accumulator chains just cover the FMAs' latency, which the estimate once took as hidden
    (128 x 768 @ 768 x 2304 picked 4 rows and ran 1.16x slower on Zen 5)."""
    a = Tensor.empty((m, k), dtype="float32", name="a")
    b = Tensor.empty((k, n), dtype="float32", name="b")
    prog = optimize(a @ b, target="llvm", cpu="haswell")
    (nest,) = [s["schedule"] for s in prog.report.extra["kernels"] if "red[" in s["schedule"]]
    assert f"{-(-m // 6)}L 6u" in nest and "16u" in nest, nest
    rng = np.random.default_rng(4)
    av, bv = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    np.testing.assert_allclose(prog(a=av, b=bv), av.astype(np.float64) @ bv, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("simd", [32, 64])
def test_a_padding_copy_is_priced_as_masked_vector_loads(simd: int) -> None:
    """A padding copy (rows of w + 2 from rows of w, the border zero): its gated load of consecutive elements in
    the innermost loop is one masked vector load a step (LLVM if-converts the branch), priced within 2x of the
    same copy without the border, not as a branch per element (estimated at 4-5x its time on Zen 5)."""
    h = w = 112

    def copy(padded: bool) -> UOp:
        p = 1 if padded else 0
        y_, x_ = UOp.range(h + 2 * p, 0), UOp.range(w + 2 * p, 1)
        src = UOp(Ops.BUFFER, dtypes.float32, (), ("x", (h * w,)))
        dst = UOp(Ops.BUFFER, dtypes.float32, (), ("y", ((h + 2 * p) * (w + 2 * p),)))
        idx = UOp.build(Ops.INDEX, (src, (y_ - p) * w + (x_ - p)))
        if padded:
            valid = (y_ >= 1) & (y_ < h + 1) & (x_ >= 1) & (x_ < w + 1)
            val = UOp.build(Ops.LOAD, (idx, UOp.const(0.0, dtypes.float32), valid))
        else:
            val = UOp.build(Ops.LOAD, (idx,))
        store = UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (dst, y_ * (w + 2 * p) + x_)), val))
        return UOp.build(Ops.SINK, (UOp.build(Ops.END, (store, y_, x_)),))

    m = CPUMachine(simd_bytes=simd, vector_regs=32 if simd == 64 else 16)
    plain, padded = estimate(copy(False), m), estimate(copy(True), m)
    assert padded.cycles < 2 * plain.cycles * ((h + 2) * (w + 2)) / (h * w), (plain.cycles, padded.cycles)


@pytest.mark.parametrize("simd", [32, 64])
def test_a_window_wider_than_l1_is_reread_at_every_step(simd: int) -> None:
    """y[i] = sum_k x[i + k] over a window of 256 KiB: the window slides by one element a step, but its lines are
    evicted before the next step comes back to them, so every step misses the whole window in L1 (a batch-8
    convolution's tile of 4 images, 3 KB of lines a pixel, was priced as re-reading a sixteenth of them and ran
    1.1-1.2x slower than the tile of one image's pixels the estimate ranked below it)."""
    n, k = 64, 1 << 16
    i, r = UOp.range(n, 0), UOp.range(k, 1, AxisType.REDUCE)
    x = UOp(Ops.BUFFER, dtypes.float32, (), ("x", (n + k,)))
    y = UOp(Ops.BUFFER, dtypes.float32, (), ("y", (n,)))
    val = UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (x, i + r)),))
    red = UOp(Ops.REDUCE, dtypes.float32, (val, r), (Ops.ADD, ()))
    ast = UOp.build(Ops.SINK, (UOp.build(Ops.END, (UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (y, i)), red)), i)),))
    m = CPUMachine(simd_bytes=simd, vector_regs=32 if simd == 64 else 16)
    assert estimate(ast, m).l1_misses >= 0.5 * n * k * 4 / 64


@pytest.mark.parametrize("simd", [32, 64])
def test_a_guarded_window_tile_is_priced_as_masked_vector_loads(simd: int) -> None:
    """A depthwise 3x3 window read straight from the unpadded image (the padding as guards), 7 rows x 32 columns
    a tile: the backend loads each row of the tile as masked vectors (the guards a compare or two a vector), so it
    is priced as vector loads plus the guards' arithmetic per row, within 4x of the same sums over an image padded
    beforehand (the guards cost about as much as the sums themselves), not as a branch per element: that was 40x,
    and a padding copy beside the window always won where the fused window ran 1.2-1.5x faster."""
    h = w = 28

    def window(guarded: bool) -> UOp:
        p = 1 if guarded else 0
        wp = w + 2 - 2 * p  # the row pitch of the image read
        ro, ru = UOp.range(h // 7, 0), UOp.range(7, 1, AxisType.UPCAST)
        cu = UOp.range(32, 2, AxisType.UPCAST)
        kh, kw = UOp.range(3, 3, AxisType.REDUCE), UOp.range(3, 4, AxisType.REDUCE)
        row, col = ro * 7 + ru + kh - p, cu + kw - p
        src = UOp(Ops.BUFFER, dtypes.float32, (), ("x", ((h + 2 - 2 * p) * wp,)))
        idx = UOp.build(Ops.INDEX, (src, row * wp + col))
        if guarded:
            valid = (row >= 0) & (row < h) & (col >= 0) & (col < w)
            val = UOp.build(Ops.LOAD, (idx, UOp.const(0.0, dtypes.float32), valid))
        else:
            val = UOp.build(Ops.LOAD, (idx,))
        red = UOp(Ops.REDUCE, dtypes.float32, (val, kh, kw), (Ops.ADD, ()))
        dst = UOp(Ops.BUFFER, dtypes.float32, (), ("y", (h * 32,)))
        store = UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (dst, (ro * 7 + ru) * 32 + cu)), red))
        return UOp.build(Ops.SINK, (UOp.build(Ops.END, (store, ro, ru, cu)),))

    m = CPUMachine(simd_bytes=simd, vector_regs=32 if simd == 64 else 16)
    plain, guarded = estimate(window(False), m), estimate(window(True), m)
    assert guarded.cycles < 4 * plain.cycles, (plain.cycles, guarded.cycles)


@settings(max_examples=12, deadline=None)
@given(
    c=st.integers(1, 24),
    hw=st.integers(1, 40),
    stride=st.sampled_from([1, 2]),
    cpu=st.sampled_from([None, "haswell"]),
)
def test_depthwise_convolutions_match_numpy(c: int, hw: int, stride: int, cpu: str | None) -> None:
    """Depthwise 3x3 convolutions (MobileNet's), padded by 1, at random channel counts and image sizes (primes and
    images smaller than a tile included), for native and AVX2 code: whichever schedule the estimate picks (the
    padding fused into the window as masked loads, or a padded copy first) matches numpy's sums."""
    rng = np.random.default_rng(c * 100 + hw)
    xv = rng.standard_normal((1, c, hw, hw), dtype=np.float32)
    wv = rng.standard_normal((c, 1, 3, 3), dtype=np.float32)
    x, w = Tensor.empty(xv.shape, dtype="float32", name="x"), Tensor.empty(wv.shape, dtype="float32", name="w")
    prog = optimize(x.conv2d(w, stride=stride, padding=1, groups=c), target="llvm", cpu=cpu, cache=False)
    xp = np.pad(xv.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = (hw - 1) // stride + 1
    ref = np.zeros((1, c, out, out))
    for kh in range(3):
        for kw in range(3):
            win = xp[:, :, kh : kh + stride * (out - 1) + 1 : stride, kw : kw + stride * (out - 1) + 1 : stride]
            ref += win * wv[:, 0, kh, kw].astype(np.float64)[None, :, None, None]
    np.testing.assert_allclose(prog(x=xv, w=wv), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpu", [None, pytest.param("haswell", marks=pytest.mark.skipif(not HAS_AVX2, reason="AVX2"))])
@pytest.mark.parametrize(("c", "hw", "groups"), [(8, 31, 8), (4, 13, 1)])
def test_stride_two_rows_load_as_one_span_and_a_shuffle(cpu: str | None, c: int, hw: int, groups: int) -> None:
    """A stride-2 convolution whose tile runs along a row of output pixels reads every other input pixel: the
    LLVM backend loads the span from the first to the last and keeps every second element with one shuffle, not
    a load and an insert per pixel. Every ranked schedule of a depthwise and of a dense one (odd sizes, so the
    span ends on the row's last pixel) matches numpy, native and in AVX2 code, and some schedule takes that path."""
    rng = np.random.default_rng(c + hw)
    xv = rng.standard_normal((1, c, hw, hw), dtype=np.float32)
    wv = rng.standard_normal((c, c // groups, 3, 3), dtype=np.float32)
    x, w = Tensor.empty(xv.shape, dtype="float32", name="x"), Tensor.empty(wv.shape, dtype="float32", name="w")
    alts: list[tuple[str, Any]] = []
    optimize(x.conv2d(w, stride=2, padding=1, groups=groups), target="llvm", cpu=cpu, alternatives=alts, cache=False)
    if groups == 1:
        ref = conv_ref(xv, wv, stride=2, padding=1)
    else:
        ref = np.concatenate([conv_ref(xv[:, i : i + 1], wv[i : i + 1], 2, 1) for i in range(c)], axis=1)
    stepped = 0
    for sched, prog in alts:
        stepped += "shufflevector <" in str(prog.source) and " x i32> <i32 0, i32 2," in str(prog.source)
        np.testing.assert_allclose(prog(x=xv, w=wv), ref, rtol=1e-4, atol=1e-4, err_msg=sched)
    assert stepped, [s for s, _ in alts]


@pytest.mark.parametrize(
    ("cpu", "hw", "tile"),
    [
        (None, 17, "3L 6u"),
        ("haswell", 17, "3L 6u"),
        ("haswell", 28, "5L 6u"),
        pytest.param("skylake-avx512", 13, "2L 7u", marks=NEEDS_AVX512),
    ],
)
def test_a_row_no_tile_divides_is_padded_snugly(cpu: str | None, hw: int, tile: str) -> None:
    """A 3x3 convolution over 17x17 images: its rows of 17 pixels are tiled 3 x 6 (one pixel masked off), not
    3 x 8 (seven of 24 masked off: 1.3-2x slower); AVX-512 code tiles rows of 13 by 2 x 7, not 2 x 8; AVX2 code
    tiles rows of 28 by 5 x 6 (two masked off: 12 accumulators beside two vectors of channels, not 7 x 4's 8). The
    output matches numpy's sums."""
    c = 32
    rng = np.random.default_rng(hw)
    xv = rng.standard_normal((1, c, hw, hw), dtype=np.float32)
    wv = rng.standard_normal((c, c, 3, 3), dtype=np.float32)
    x, w = Tensor.empty(xv.shape, dtype="float32", name="x"), Tensor.empty(wv.shape, dtype="float32", name="w")
    prog = optimize(x.conv2d(w, padding=1), target="llvm", cpu=cpu, cache=False)
    nests = [k["schedule"] for k in prog.report.extra["kernels"]]
    assert any(tile in n and "red[" in n for n in nests), nests
    np.testing.assert_allclose(prog(x=xv, w=wv), conv_ref(xv, wv, padding=1), rtol=1e-3, atol=1e-3)


@settings(max_examples=4, deadline=None)
@given(
    wo=st.integers(16, 63).filter(lambda n: n % 16 and n % 6 and 8 * (6 - n % 6) <= n),
    cin=st.sampled_from([3, 8]),
    stride=st.sampled_from([1, 2]),
)
@example(wo=28, cin=8, stride=1)  # ResNet's 28-pixel rows: padded by this rule alone
def test_avx2_rows_padded_short_match_numpy(wo: int, cin: int, stride: int) -> None:
    """AVX2 code: a convolution whose output rows are 16 to 63 pixels wide (not a multiple of 16) has schedules
    with each row padded to a multiple of 6 ("pad-u-short": 28 as 5 x 6); every such schedule matches numpy's
    sums, at the row's end too, where the padded pixels are masked off."""
    hw, cout = (wo - 1) * stride + 1, 16
    rng = np.random.default_rng(wo * 10 + cin)
    xv = rng.standard_normal((1, cin, hw, hw), dtype=np.float32)
    wv = rng.standard_normal((cout, cin, 3, 3), dtype=np.float32)
    x, w = Tensor.empty(xv.shape, dtype="float32", name="x"), Tensor.empty(wv.shape, dtype="float32", name="w")
    alts: list[tuple[str, Any]] = []
    optimize(x.conv2d(w, stride=stride, padding=1), target="llvm", cpu="haswell", cache=False, alternatives=alts)
    padded = [(s, p) for s, p in alts if f"{-(-wo // 6)}L 6u" in s]
    assert padded, [s for s, _ in alts]
    ref = conv_ref(xv, wv, stride, padding=1)
    for s, p in padded[:3]:
        np.testing.assert_allclose(p(x=xv, w=wv), ref, rtol=1e-3, atol=1e-3, err_msg=s)


@NEEDS_AVX512
def test_levels_of_line_traffic_that_are_level_both_count() -> None:
    """A 3x3 convolution of 64 channels over a 224x224 image (12 MiB: more than the L2, more than half the L3), 8
    output channels a register tile: with the blocks of channels outside the rows every block streams the whole
    image from L3 again (its L2 traffic level with its L1 fills); with the rows outside, each row's window stays
    in L2 for every block. On Zen 5's caches the estimate ranks the rows outside first (both levels count where
    they are level; the larger of them alone had priced the two alike), and both match numpy's sums."""
    c, hw = 64, 224
    x, w = Tensor.empty((1, c, hw, hw), dtype="float32", name="x"), Tensor.empty((c, c, 3, 3), dtype="float32", name="w")
    alts: list[tuple[str, Any]] = []
    optimize(x.conv2d(w, padding=1), target="llvm", cpu="skylake-avx512", cache=False, alternatives=alts)
    conv = {s: p for s, p in alts if s.startswith((f"[{hw}L 8L 8u", f"[8L 8u {hw}L"))}
    rows, blocks = (next(p for s, p in conv.items() if s.startswith(first)) for first in (f"[{hw}L", "[8L"))
    m = CPUMachine(simd_bytes=64, vector_regs=32, ghz=4.0, l1_bytes=48 << 10, l1_ways=12, l2_bytes=1 << 20)
    m = dataclasses.replace(m, l3_bytes=32 << 20, l3_gbps=55.0, mem_gbps=20.0, mem_gbps_all=35.0)
    (kr,), (kb,) = ([k for k in p.kernels if any(u.op is Ops.REDUCE for u in k.ast.toposort())] for p in (rows, blocks))
    assert estimate(kr.ast, m).memory_s < estimate(kb.ast, m).memory_s
    rng = np.random.default_rng(224)
    xv, wv = rng.standard_normal((1, c, hw, hw), dtype=np.float32), rng.standard_normal((c, c, 3, 3), dtype=np.float32)
    ref = conv_ref(xv, wv, padding=1)
    for p in (rows, blocks):
        np.testing.assert_allclose(p(x=xv, w=wv), ref, rtol=2e-3, atol=2e-3)
