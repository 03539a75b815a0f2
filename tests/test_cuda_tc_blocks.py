"""Tensor-core block tiles on the CUDA backend: warps (LOCAL) x tiles per warp (UPCAST) with operands staged in
shared memory by cp.async, double-buffered.

Hand-built TC kernels over a sweep of block shapes, operand layouts, dtypes and k loops run through the host
emulation (whose cp.async lands a copy only when a later wait retires it) against the reference interpreter and
compile with nvcc for sm_80 and sm_90; the optimizer's f16 GEMM picks a block tile and runs through the emulation
against numpy.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from test_cuda_backend import (
    BF16,
    F16,
    F32,
    A,
    Case,
    EmulatedCUDABackend,
    buf,
    c,
    compare_with_reference,
    emulation_library,
    load,
    plan_of,
    reduce,
    rng,
    sink,
    store,
)

from egraph_compiler import UOp
from egraph_compiler.backends.cuda_toolchain import compile_ptx, find_nvcc
from egraph_compiler.ir.dtypes import DType


def tc_block(
    dt: DType,
    wm: int,
    wn: int,
    um: int,
    un: int,
    *,
    a_col: bool = False,
    b_col: bool = False,
    k_loops: int = 1,
    epilogue: bool = False,
    blocks: tuple[int, int] = (2, 1),
    kk: int = 64,
) -> Case:
    """out[m, n] = sum_k A[m, k] B[k, n] with m = ((gm*wm + lm)*um + mu)*16 + mw (n likewise): blocks of wm x wn
    warps, each um x un tiles. k_loops=2 splits the k loop into two sequential ranges (no staging then)."""

    def side(p: str, g: int, w: int, u: int) -> tuple[UOp, list[UOp], int]:
        gr = rng(g, f"g{p}", A.GLOBAL)
        lr = rng(w, f"l{p}", A.LOCAL) if w > 1 else None
        ur = rng(u, f"u{p}", A.UPCAST) if u > 1 else None
        tile = gr * w + lr if lr is not None else gr
        tile = tile * u + ur if ur is not None else tile
        wr = rng(16, f"{p}w", A.WARP)
        return tile * 16 + wr, [gr, *([lr] if lr else []), *([ur] if ur else []), wr], g * w * u * 16

    m, mrs, mm = side("m", blocks[0], wm, um)
    n, nrs, nn = side("n", blocks[1], wn, un)
    kw = rng(16, "kw", A.UNROLL)
    if k_loops == 1:
        kos = [rng(kk // 16, "ko", A.REDUCE)]
        k = kos[0] * 16 + kw
    else:
        kos = [rng(2, "ko1", A.REDUCE), rng(kk // 32, "ko2", A.REDUCE)]
        k = (kos[0] * (kk // 32) + kos[1]) * 16 + kw
    a, b = buf("A", mm * kk, dt), buf("B", kk * nn, dt)
    av = load(a, k * mm + m if a_col else m * kk + k).cast(F32)
    bv = load(b, n * kk + k if b_col else k * nn + n).cast(F32)
    acc = reduce(av * bv, *kos, kw)
    if epilogue:
        out, val = buf("C", mm * nn, dt), (acc + load(buf("BIAS", nn), n)).maximum(c(0.0)).cast(dt)
    else:
        out, val = buf("C", mm * nn), acc
    ranges = (mrs[0], nrs[0], *mrs[1:-1], *nrs[1:-1], mrs[-1], nrs[-1])
    name = (
        f"tcb_{dt.name}_{wm}x{wn}_{um}x{un}{'_acol' if a_col else ''}{'_bcol' if b_col else ''}"
        f"_k{k_loops}{'_epi' if epilogue else ''}"
    )
    return Case(name, sink((store(out, m * nn + n, val), ranges)), rtol=2e-2, atol=2e-2)


CASES = [
    tc_block(F16, 2, 2, 2, 2),
    tc_block(F16, 1, 1, 2, 2, a_col=True, kk=128),
    tc_block(F16, 2, 1, 1, 2, b_col=True, epilogue=True, kk=32),
    tc_block(BF16, 1, 2, 2, 1, a_col=True, b_col=True),
    tc_block(F16, 2, 2, 1, 1, k_loops=2),
    tc_block(BF16, 1, 1, 2, 4, k_loops=2, epilogue=True),
    tc_block(F16, 2, 2, 4, 2, blocks=(1, 2), kk=16),
]


def _staged(case: Case) -> bool:
    return "_egc_cp16(" in plan_of(case).source


def test_tiles_per_warp_and_staging() -> None:
    """Every UPCAST combination has its accumulator; a one-range k loop is staged through shared memory."""
    for case in CASES:
        src = plan_of(case).source
        ups = case.name.split("_")[3].split("x")
        assert src.count("fill_fragment(") == int(ups[0]) * int(ups[1]), case.name
        assert _staged(case) == ("_k1" in case.name), case.name


def test_emulated_block_tiles_match_reference() -> None:
    with emulation_library(CASES) as lib:
        backend = EmulatedCUDABackend(lib)
        for case in CASES:
            compare_with_reference(case, backend, "cuda-emulated")


def test_emulation_catches_a_read_before_the_copy_lands(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: waiting for all but the newest two groups retires nothing in time."""
    import egraph_compiler.backends.cuda as cuda

    line = cuda._Renderer.line
    monkeypatch.setattr(cuda._Renderer, "line", lambda self, s: line(self, s.replace("_egc_cp_wait<1>", "_egc_cp_wait<2>")))
    case = Case("tcb_wait_too_little", tc_block(F16, 2, 2, 2, 2).ast)  # a fresh name: not a cached plan
    with emulation_library([case]) as lib, pytest.raises(AssertionError):
        compare_with_reference(case, EmulatedCUDABackend(lib), "cuda-emulated")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_block_tiles(arch: str) -> None:
    if find_nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or put nvcc on PATH)")
    ptx = compile_ptx("\n".join(plan_of(case).source for case in CASES), arch)
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group" in ptx
    assert "mma.sync" in ptx


def test_optimized_f16_gemm_uses_block_tiles() -> None:
    """The optimizer's GEMM picks warps x tiles per warp, staged; run whole through the emulation against numpy."""
    from egraph_compiler import Tensor, optimize

    rs = np.random.default_rng(0)
    x, y = rs.standard_normal((512, 256)).astype(np.float16), rs.standard_normal((256, 512)).astype(np.float16)
    bias = rs.standard_normal(512).astype(np.float32)
    a, b = Tensor.empty(512, 256, name="a", dtype="float16"), Tensor.empty(256, 512, name="b", dtype="float16")
    bt = Tensor.empty(512, name="bias")
    prog = optimize((a.cast("float32") @ b.cast("float32") + bt).relu(), target="cuda")
    src = prog.source
    assert "_egc_cp16(" in src and src.count("fill_fragment(") >= 4, src[:400]
    prog.kernels = [type(kk).from_ast(f"gemm_{kk.name}", kk.ast) for kk in prog.kernels]
    with emulation_library([Case(kk.name, kk.ast) for kk in prog.kernels]) as lib:
        prog.backend, prog._compiled = EmulatedCUDABackend(lib), None
        want = np.maximum(x.astype(np.float32) @ y.astype(np.float32) + bias, 0)
        np.testing.assert_allclose(prog(a=x, b=y, bias=bias), want, rtol=2e-3, atol=2e-3)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
