"""UPCAST on CUDA: the expanded lane copies, their fused REDUCE loops and vector loads/stores (float4, packed halves).

Rendered schedules are compared with numpy through the host emulation and compiled with nvcc; `vector_runs` (which
accesses may become one vector access) is checked against the alignment rule it promises.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import check, gpu_or_skip, rand_array
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cuda_backend import Case, EmulatedCUDABackend, emulation_library

import egraph_compiler.backends.cuda as cuda
from egraph_compiler import Tensor, UOp, optimize
from egraph_compiler.backends import get_backend
from egraph_compiler.backends.cuda import vector_runs
from egraph_compiler.backends.cuda_toolchain import compile_ptx, find_nvcc
from egraph_compiler.ir.diagnostics import BackendError
from egraph_compiler.ir.dtypes import DType, dtypes
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.kernel.program import Kernel, Program
from egraph_compiler.rules.optops import SPLIT_FACTORS

UPCASTS = {"u": (4, 8), "l": (16,)}  # register tiles and vector widths, on 16-thread blocks


def _upcast_schedules(
    name: str, build: Any, shapes: dict[str, tuple[tuple[int, ...], str]], marker: str
) -> list[tuple[str, Program]]:
    """Every schedule of the program whose source holds `marker` (a vector access), kernels uniquely named."""
    alts: list[tuple[str, Program]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(SPLIT_FACTORS, "cuda", UPCASTS)
        optimize(build(*(Tensor.empty(s, dtype=d, name=n) for n, (s, d) in shapes.items())), target="cuda", alternatives=alts)
    out = []
    for j, (desc, prog) in enumerate(alts):
        if marker in prog.source:
            prog.kernels = [Kernel.from_ast(f"{name}_{j}_{k.name}", k.ast) for k in prog.kernels]
            out.append((desc, prog))
    return out


# name -> (program, inputs, numpy reference, the vector access its upcast schedules must use)
PROGRAMS: dict[str, tuple[Any, dict[str, tuple[tuple[int, ...], str]], Any, str]] = {
    "gemm_f32": (
        lambda a, b: a @ b,
        {"a": ((32, 40), "float32"), "b": ((40, 64), "float32")},
        lambda a, b: a @ b,
        "make_float4(",
    ),
    "gemm_f16": (
        lambda a, b: a @ b,
        {"a": ((16, 24), "float16"), "b": ((24, 64), "float16")},
        lambda a, b: (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16),
        "uint4",
    ),
    "axpy_f32": (
        lambda a, b: a * 3.0 + b,
        {"a": ((64, 32), "float32"), "b": ((64, 32), "float32")},
        lambda a, b: a * np.float32(3) + b,
        "const float4",
    ),
}


@pytest.fixture(scope="module")
def schedules() -> list[tuple[str, str, Program]]:
    out = []
    for name, (build, shapes, _, marker) in PROGRAMS.items():
        found = _upcast_schedules(name, build, shapes, marker)
        assert found, f"no schedule of {name} renders a vector access ({marker})"
        out += [(name, desc, prog) for desc, prog in found[:6]]
    return out


def _cases(scheds: list[tuple[str, str, Program]]) -> list[Case]:
    return [Case(k.name, k.ast) for _, _, p in scheds for k in p.kernels]


def _check_schedules(schedules: list[tuple[str, str, Program]], backend: Any) -> None:
    for name, desc, prog in schedules:
        _, shapes, ref, _ = PROGRAMS[name]
        inputs = {n: rand_array(s, seed=i, lo=-2, hi=2).astype(d) for i, (n, (s, d)) in enumerate(shapes.items())}
        prog.backend, prog._compiled = backend, None
        tol = 2e-2 if "f16" in name else 1e-4
        try:
            check(prog(**inputs), ref(*inputs.values()), rtol=tol, atol=tol)
        except AssertionError as e:
            raise AssertionError(f"{name} {desc}: {e}") from None


def test_vector_schedules_match_numpy(schedules: list[tuple[str, str, Program]]) -> None:
    with emulation_library(_cases(schedules)) as lib:
        _check_schedules(schedules, EmulatedCUDABackend(lib))


@pytest.mark.gpu
def test_gpu_vector_schedules_match_numpy(schedules: list[tuple[str, str, Program]]) -> None:
    gpu_or_skip()
    _check_schedules(schedules, cuda.CUDABackend())


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_vector_schedules_compile_with_nvcc(arch: str, schedules: list[tuple[str, str, Program]]) -> None:
    if find_nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or put nvcc on PATH)")
    ptx = compile_ptx("\n\n".join(get_backend("cuda").plan(c.kernel).source for c in _cases(schedules)), arch)
    assert "ld.global.v4.f32" in ptx or "ld.global.nc.v4.f32" in ptx, "no float4 load reached PTX"
    assert "st.global.v4" in ptx, "no vector store reached PTX"


def test_register_tile_shares_loads_across_lanes() -> None:
    """A 4x4 upcast GEMM tile: one loop over k with 16 accumulators, 4 loads of a and one float4 load of b per k."""
    [(_, prog)] = [
        (d, p)
        for d, p in _upcast_schedules("tile", *PROGRAMS["gemm_f32"][:2], "make_float4(")
        if d.count("4u") == 2 and "G" not in d and "l" not in d
    ][:1]
    body = prog.source.split("for (int ridx")[1].split("\n  }")[0]
    assert body.count("acc") == 32 and body.count("reinterpret_cast<const float4*>") == 1 and body.count("buf_a[") == 4, body


# ---- vector_runs ---------------------------------------------------------------------------------------------------


def _range(name: str, n: int) -> UOp:
    return UOp(Ops.RANGE, dtypes.index, (UOp.const(n),), (name, AxisType.LOOP))


@settings(max_examples=200, deadline=None)
@given(
    coef=st.sampled_from([1, 2, 4, 8, 6, 16]),
    offsets=st.lists(st.integers(0, 24), min_size=1, max_size=16),
    dt=st.sampled_from([dtypes.float32, dtypes.float16, dtypes.float64, dtypes.int8]),
)
def test_vector_runs_are_consecutive_and_aligned(coef: int, offsets: list[int], dt: DType) -> None:
    r = _range("r", 8)
    buf = UOp(Ops.BUFFER, dt, (), ("x", (1024,)))
    accesses = [(buf, r * coef + o) for o in offsets]
    runs = vector_runs(accesses)
    assert sorted(k for run in runs for k in run) == list(range(len(offsets)))  # a partition, nothing lost
    for run in runs:
        if len(run) == 1:
            continue
        w, first = len(run), offsets[run[0]]
        assert [offsets[k] for k in run] == list(range(first, first + w))  # consecutive, in order
        assert w * dt.itemsize in (4, 8, 16) and dt.itemsize in (2, 4, 8)  # fills a vector type
        assert first % w == 0 and coef % w == 0  # aligned for every r
    # a full aligned block of 16-byte vectors is found whole
    if (
        coef % 4 == 0
        and dt is dtypes.float32
        and set(offsets) == set(range(min(offsets), max(offsets) + 1))
        and min(offsets) % 4 == 0
        and len(offsets) % 4 == 0
        and len(set(offsets)) == len(offsets)
    ):
        assert all(len(run) == 4 for run in runs)


def test_misaligned_vector_buffer_is_a_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel with vector accesses refuses a buffer that does not start on 16 bytes (a view at an offset) with a
    diagnostic, instead of a misaligned-address fault; aligned buffers launch."""
    [(_, prog)] = _upcast_schedules("align", *PROGRAMS["axpy_f32"][:2], "const float4")[:1]
    kernel = prog.kernels[0]
    launched: list[int] = []
    monkeypatch.setattr(cuda, "import_cupy", lambda: None)
    monkeypatch.setattr(cuda.CUDABackend, "_function", lambda self, cp, plan: lambda *a: launched.append(1))

    class Array:  # what the launch looks at of a CuPy array
        def __init__(self, ptr: int) -> None:
            self.data = type("Mem", (), {"ptr": ptr})()

    backend = cuda.CUDABackend()
    run = backend.compile(kernel)
    names = [n for n, _ in backend.plan(kernel).params]
    assert set(backend.plan(kernel).aligned) == set(names)
    run({n: Array(4096) for n in names})
    assert launched
    with pytest.raises(BackendError, match="16-byte"):
        run({n: Array(4096 + 4 * (n == "a")) for n in names})
