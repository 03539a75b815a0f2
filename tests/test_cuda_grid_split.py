"""Grid-split reductions on the CUDA backend: a long REDUCE in a kernel with few outputs (a full sum) runs in two
launches, many blocks per output writing partials to a scratch buffer, then one block per output combining them.

Hand-built kernels run through the host emulation against the reference interpreter and compile with nvcc for
sm_80 and sm_90; kernels where a split would be wrong are not split; optimized sums run whole through the emulation
against numpy; the GPU estimate prices the split.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
from helpers import gpu_or_skip
from test_cuda_backend import (
    BF16,
    F16,
    F32,
    I32,
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

from egraph_compiler import Ops
from egraph_compiler.backends import get_backend
from egraph_compiler.backends.cuda_toolchain import compile_ptx, find_nvcc
from egraph_compiler.ir.dtypes import DType, dtypes


def rows_reduce(
    name: str, rows: int, n: int, dt: DType, op: Ops = Ops.ADD, epilogue: bool = False, two_ranges: bool = False
) -> Case:
    """out[i] = op over j of x[i, j] (optionally x[i, j] * 2 - 1, then an epilogue reading a bias)."""
    x, out = buf("X", rows * n, dt), buf("OUT", rows, dt)
    i = rng(rows, "i")
    if two_ranges:
        j1, j2 = rng(n // 64, "j1", A.REDUCE), rng(64, "j2", A.REDUCE)
        idx, rs = i * n + j1 * 64 + j2, (j1, j2)
    else:
        j = rng(n, "j", A.REDUCE)
        idx, rs = i * n + j, (j,)
    v = load(x, idx)
    red = reduce(v * c(2, dt) - c(1, dt) if epilogue else v, *rs, op=op)
    val = (red + load(buf("BIAS", rows, dt), i)) * c(3, dt) if epilogue else red
    return Case(
        name,
        sink((store(out, i, val), (i,) if rows > 1 else ())),
        rtol=2e-2 if dt in (F16, BF16) else 1e-4,
        atol=2e-2 if dt in (F16, BF16) else 1e-4,
    )


def _scalar_sum(name: str, n: int, dt: DType) -> Case:
    x, out = buf("X", n, dt), buf("OUT", 1, dt)
    j = rng(n, "j", A.REDUCE)
    return Case(name, sink((store(out, c(0, dtypes.index), reduce(load(x, j), j)), ())), rtol=1e-4, atol=1e-3)


SPLIT = [
    _scalar_sum("gs_sum_f32", 1 << 17, F32),
    _scalar_sum("gs_sum_i32", 1 << 17, I32),  # wraps around like the reference
    rows_reduce("gs_rows_max_f16", 3, 1 << 16, F16, Ops.MAX, epilogue=True),
    rows_reduce("gs_rows_add_bf16_two", 2, 1 << 16, BF16, two_ranges=True),
    rows_reduce("gs_rows_mul_f64", 2, 1 << 16, dtypes.float64, Ops.MUL),
]


def _not_split() -> list[Case]:
    x, out = buf("X", 1 << 17), buf("OUT", 2)
    j, i = rng(1 << 17, "j", A.REDUCE), rng(2, "i")
    gated = Case("ns_gated", sink((store(out, i, reduce(load(x, j), j), gate=i < 1), (i,))))
    two = Case("ns_two_reduces", sink((store(out, i, reduce(load(x, j), j) + reduce(load(x, j) * 2.0, j)), (i,))))
    under_where = Case("ns_under_where", sink((store(out, i, (i < 1).where(reduce(load(x, j), j), c(0.0))), (i,))))
    short = rows_reduce("ns_short", 2, 4096, F32)
    cases = [gated, two, under_where, short]
    for case in cases:  # one thread sums 2^17 floats in order: rounding differs from numpy's pairwise sum
        case.rtol, case.atol = 1e-4, 1e-2
    return cases


def test_long_reductions_with_few_outputs_are_split() -> None:
    for case in SPLIT:
        plan = plan_of(case)
        assert len(plan.launches) == 2 and plan.scratch, case.name
        assert plan.launches[0].grid[0] >= 4 * plan.launches[1].grid[0], case.name
    for case in _not_split():
        assert not plan_of(case).scratch, case.name


def test_emulated_split_reductions_match_reference() -> None:
    cases = SPLIT + _not_split()
    with emulation_library(cases) as lib:
        backend = EmulatedCUDABackend(lib)
        for case in cases:
            compare_with_reference(case, backend, "cuda-emulated")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_split_reductions(arch: str) -> None:
    if find_nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or put nvcc on PATH)")
    assert ".entry" in compile_ptx("\n".join(plan_of(case).source for case in SPLIT), arch)


def _optimized() -> dict[str, tuple[Any, dict[str, np.ndarray], np.ndarray]]:
    from egraph_compiler import Tensor, optimize

    rs = np.random.default_rng(2)
    x = rs.standard_normal(1 << 17).astype(np.float32)
    y = rs.standard_normal((2, 1 << 16)).astype(np.float32)
    progs = {
        "sum": (optimize(Tensor.empty(1 << 17, name="x").sum(), target="cuda"), {"x": x}, x.sum(dtype=np.float64)),
        "rows_max": (optimize(Tensor.empty(2, 1 << 16, name="y").max(1), target="cuda"), {"y": y}, y.max(1)),
    }
    for name, (prog, _, _) in progs.items():
        prog.kernels = [type(kk).from_ast(f"{name}_{kk.name}", kk.ast) for kk in prog.kernels]
    return progs


def test_optimized_sums_split_and_match_numpy() -> None:
    progs = _optimized()
    for name, (prog, _, _) in progs.items():
        assert "__egc_partials" in prog.source, name
    with emulation_library([Case(kk.name, kk.ast) for p, _, _ in progs.values() for kk in p.kernels]) as lib:
        for name, (prog, inputs, want) in progs.items():
            prog.backend, prog._compiled = EmulatedCUDABackend(lib), None
            np.testing.assert_allclose(prog(**inputs), want, rtol=1e-4, atol=1e-3, err_msg=name)


def test_the_estimate_prices_the_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sum of 2^26 floats split over 1024 blocks is DRAM bound (~0.1 ms on an H100); one block is ~100x slower."""
    from egraph_compiler.extract.gpu_cost import GPUMachine, estimate_gpu
    from egraph_compiler.kernel.gpu_launch import LaunchPlanner

    case = _scalar_sum("gs_big", 1 << 26, F32)
    split = estimate_gpu(case.ast, GPUMachine())
    monkeypatch.setattr(LaunchPlanner, "grid_split", lambda self, ph: None)
    whole = estimate_gpu(case.ast, GPUMachine())
    assert split.seconds < 2e-4 < whole.seconds / 10, (split.notes, whole.notes)


@pytest.mark.gpu
def test_gpu_split_reductions_match_reference() -> None:
    gpu_or_skip()
    backend = get_backend("cuda")
    for case in SPLIT:
        compare_with_reference(case, backend, "cuda")
    for name, (prog, inputs, want) in _optimized().items():
        np.testing.assert_allclose(prog(**inputs), want, rtol=1e-4, atol=1e-3, err_msg=name)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
