"""Every OptOp rule is legal. With all of them enabled at small factors (so that small kernels split), every
schedule the e-graph offers computes what numpy computes: on the reference interpreter and on LLVM, and for the
CUDA target as CUDA C compiled by nvcc (sm_80, sm_90) and run by the host emulation of the CUDA execution model
(tests/test_cuda_backend.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import z3
from helpers import check, rand_array
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cuda_backend import Case, EmulatedCUDABackend, emulation_library
from test_optops import bound_ranges_ok

from egraph_compiler import Tensor, optimize
from egraph_compiler.backends import get_backend
from egraph_compiler.backends.cuda_toolchain import compile_ptx, find_nvcc
from egraph_compiler.kernel.program import Kernel, Program
from egraph_compiler.rules.optops import RULES, SPLIT_FACTORS

# every kind of split at a factor small kernels admit ("group": one slice per core on the CPU, here 2)
ALL_OPTOPS = {
    "u": (2,),
    "l": (4,),
    "r": (2,),
    "G": (4,),
    "acc": (4,),
    "pad-u": (8,),
    "pad-u-thrifty": (6,),
    "pad-u-snug": (6,),
    "pad-u-short": (6,),
    "u-whole": (4,),
    "u-whole-rows": (4,),
    "r-whole": (3,),
    "pad-l": (8,),
    "pad-r": (8,),
    "pad-G": (8,),
    "thread": (2,),
    "group": (2,),
    "swap": (1,),
    "tc": (16,),
}
FAMILIES = (
    "split-upcast-",
    "split-local-",
    "split-unroll-",
    "split-group-threads-",
    "split-accumulate-",
    "split-group",
    "split-thread",
    "padto-upcast-",
    "padto-thrifty-upcast-",
    "padto-snug-upcast-",
    "padto-short-upcast-",
    "padto-whole-upcast-",
    "padto-whole-rows-upcast-",
    "padto-whole-unroll-",
    "padto-local-",
    "padto-unroll-",
    "padto-group-threads-",
    "swap-0",
    "tc",
)
BENCH_PROGRAMS = Path(__file__).resolve().parent.parent / "bench" / "programs.py"
MAX_CHECKED = 24  # schedules checked per program (evenly spread over the ranked list)
BLOCK_KINDS = "lGw"  # LOCAL, GROUP_REDUCE, WARP


@pytest.fixture
def all_optops(monkeypatch: pytest.MonkeyPatch) -> None:
    for target in ("llvm", "cuda"):
        monkeypatch.setitem(SPLIT_FACTORS, target, ALL_OPTOPS)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# name -> (tensor program, input shapes and dtypes, numpy reference)
PROGRAMS: dict[str, tuple[Any, dict[str, tuple[tuple[int, ...], str]], Any]] = {
    "gemm_f16_relu": (
        lambda a, b: (a.cast("float32") @ b.cast("float32")).relu(),
        {"a": ((32, 48), "float16"), "b": ((48, 32), "float16")},
        lambda a, b: np.maximum(a.astype(np.float32) @ b.astype(np.float32), 0),
    ),
    "softmax_odd": (lambda a: a.softmax(-1), {"a": ((6, 20), "float32")}, _softmax),
    "row_sum_odd": (lambda a: a.sum(1), {"a": ((12, 36), "float32")}, lambda a: a.sum(1)),
    "ew_odd": (lambda a, b: a * b + a, {"a": ((12, 20), "float32"), "b": ((12, 20), "float32")}, lambda a, b: a * b + a),
    # 100 columns: padded to 102 by 6 (an eighth or less of 64 or more), not to 104 by 8 alone; its 4 rows are
    # one whole UPCAST (u-whole, u-whole-rows)
    "ew_wide": (lambda a: a * 2.0 + 1.0, {"a": ((4, 100), "float32")}, lambda a: a * 2.0 + 1.0),
    # rows of 17: padded to 18 by 6 (8 would pad them to 24)
    "ew_17": (lambda a: a - 1.0, {"a": ((2, 17), "float32")}, lambda a: a - 1.0),
    # rows of 3: the reduction unrolled whole (r-whole), the REDUCE running no loop
    "row_max_3": (lambda a: a.max(1), {"a": ((10, 3), "float32")}, lambda a: a.max(1)),
    "long_sum": (lambda a: a.sum(), {"a": ((1 << 16,), "float32")}, lambda a: a.sum(dtype=np.float64)),
}


def _inputs(spec: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, np.ndarray]:
    return {n: rand_array(s, seed=i, lo=-2, hi=2).astype(d) for i, (n, (s, d)) in enumerate(spec.items())}


def _schedules(name: str, target: str) -> tuple[Program, list[tuple[str, Program]]]:
    build, spec, _ = PROGRAMS[name]
    alts: list[tuple[str, Program]] = []
    prog = optimize(build(*(Tensor.empty(s, dtype=d, name=n) for n, (s, d) in spec.items())), target=target, alternatives=alts)
    picked = alts[:: max(1, len(alts) // MAX_CHECKED)]
    for kind in BLOCK_KINDS:  # at least one schedule with each kind of workgroup range, when offered
        picked += [a for a in alts if _has(a[0], kind) and a not in picked][:1]
    return prog, [("chosen", prog), *picked]


def _has(schedule: str, kind: str) -> bool:
    """Does a schedule description ("[4L 4l] red[3R 4G]") hold a range of AxisType letter `kind`?"""
    return any(f"{x}{kind}" in schedule for x in "0123456789")


def _tolerance(name: str) -> dict[str, float]:
    return {"rtol": 1e-3, "atol": 1e-3} if name == "long_sum" else {"rtol": 1e-4, "atol": 1e-4}


def test_padded_split_covers_the_range_once() -> None:
    """Padto: the parts (outer < ceil(n/f), inner < f) under the mask outer*f + inner < n map one to one onto
    [0, n) (floor division, as the spec defines it): what the padded loop nest binds instead of r."""
    n, f, o, i, r = z3.Ints("n f o i r")
    padded = (n + f - 1) / f
    s = z3.Solver()
    s.add(
        f > 0,
        n > 0,
        z3.Not(
            z3.Implies(
                z3.And(o >= 0, o < padded, i >= 0, i < f, o * f + i < n),
                z3.And(o * f + i >= 0, (o * f + i) / f == o, (o * f + i) % f == i),
            )
        ),
    )
    assert s.check() == z3.unsat
    s = z3.Solver()  # onto: every r in [0, n) has parts in the padded ranges
    s.add(f > 0, n > 0, r >= 0, r < n, z3.Not(z3.And(r / f < padded, r % f < f, r % f >= 0)))
    assert s.check() == z3.unsat


def test_every_optop_family_fires(all_optops: None) -> None:
    fired: set[str] = set()
    for name in PROGRAMS:
        for target in ("llvm", "cuda"):
            fired |= set(
                optimize(
                    PROGRAMS[name][0](*(Tensor.empty(s, dtype=d, name=n) for n, (s, d) in PROGRAMS[name][1].items())),
                    target=target,
                ).report.fired_rules
            )
    missing = [f for f in FAMILIES if not any(r.startswith(f) for r in fired)]
    assert not missing, f"never fired: {missing}"
    assert all(r.name.startswith(FAMILIES) or r.name.startswith("tc-") for r in RULES)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_schedule_is_legal_on_reference_and_llvm(name: str, all_optops: None) -> None:
    _, spec, ref = PROGRAMS[name]
    inputs = _inputs(spec)
    want = ref(*inputs.values())
    _, scheds = _schedules(name, "llvm")
    assert len(scheds) > 2
    for desc, prog in scheds:
        for k in prog.kernels:
            assert not bound_ranges_ok(k.ast), (desc, bound_ranges_ok(k.ast))
        check(prog(**inputs), want, **_tolerance(name))
        prog.backend, prog._compiled = get_backend("reference"), None
        check(prog(**inputs), want, **_tolerance(name))


@st.composite
def random_kernel(draw: st.DrawFn) -> tuple[str, tuple[int, int]]:
    shape = (draw(st.sampled_from([3, 6, 12])), draw(st.sampled_from([5, 12, 20, 24])))
    return draw(st.sampled_from(["ew", "sum1", "max1", "sum0", "bcast"])), shape


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(random_kernel())
def test_random_kernels_every_schedule_matches_numpy(all_optops: None, case: tuple[str, tuple[int, int]]) -> None:
    kind, shape = case
    ops = {
        "ew": lambda a, b: a * b - a,
        "sum1": lambda a, b: a.sum(1),
        "max1": lambda a, b: a.max(1),
        "sum0": lambda a, b: (a * b).sum(0),
        "bcast": lambda a, b: a + b[:1],
    }[kind]
    x, y = rand_array(shape, seed=1, lo=-2, hi=2), rand_array(shape, seed=2, lo=-2, hi=2)
    want = ops(x, y)
    alts: list[tuple[str, Program]] = []
    optimize(ops(Tensor.empty(shape, name="a"), Tensor.empty(shape, name="b")), target="llvm", alternatives=alts)
    for _, p in alts[:: max(1, len(alts) // MAX_CHECKED)]:
        inputs = {k: v for k, v in {"a": x, "b": y}.items() if k in p.inputs}
        check(p(**inputs), want, rtol=1e-4, atol=1e-4)
        p.backend, p._compiled = get_backend("reference"), None
        check(p(**inputs), want, rtol=1e-4, atol=1e-4)


def test_nolocals_explores_no_workgroup_dims() -> None:
    a, b = Tensor.empty((64, 256), dtype="float16", name="a"), Tensor.empty((256, 512), dtype="float16", name="b")
    t = a.cast("float32") @ b.cast("float32")
    for nolocals in (False, True):
        alts: list[tuple[str, Program]] = []
        optimize(t, target="cuda", nolocals=nolocals, alternatives=alts)
        blocky = [d for d, _ in alts if any(_has(d, k) for k in BLOCK_KINDS)]
        assert bool(blocky) is not nolocals, (nolocals, [d for d, _ in alts])


# ---- CUDA schedules: nvcc and the host emulation -----------------------------------------------------------

CUDA_PROGRAMS = ("gemm_f16_relu", "softmax_odd", "row_sum_odd")


@pytest.fixture(scope="module")
def cuda_schedules() -> list[tuple[str, str, Program]]:
    """(program, schedule, Program with uniquely named kernels) for every checked CUDA schedule."""
    out: list[tuple[str, str, Program]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(SPLIT_FACTORS, "cuda", ALL_OPTOPS)
        for name in CUDA_PROGRAMS:
            for j, (desc, prog) in enumerate(_schedules(name, "cuda")[1]):
                prog.kernels = [Kernel.from_ast(f"{name}_{j}_{k.name}", k.ast) for k in prog.kernels]
                out.append((name, desc, prog))
    return out


def _cases(scheds: list[tuple[str, str, Program]]) -> list[Case]:
    return [Case(k.name, k.ast) for _, _, p in scheds for k in p.kernels]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_every_cuda_schedule(arch: str, cuda_schedules: list[tuple[str, str, Program]]) -> None:
    if find_nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or put nvcc on PATH)")
    sources = "\n\n".join(get_backend("cuda").plan(c.kernel).source for c in _cases(cuda_schedules))
    ptx = compile_ptx(sources, arch)
    assert "wmma.mma.sync" in ptx, "no tensor-core schedule reached PTX"


def test_emulated_cuda_schedules_match_numpy(cuda_schedules: list[tuple[str, str, Program]]) -> None:
    with emulation_library(_cases(cuda_schedules)) as lib:
        backend = EmulatedCUDABackend(lib)
        kinds: set[str] = set()
        for name, desc, prog in cuda_schedules:
            _, spec, ref = PROGRAMS[name]
            inputs = _inputs(spec)
            prog.backend, prog._compiled = backend, None
            check(prog(**inputs), ref(*inputs.values()), **_tolerance(name))
            kinds |= {k for k in BLOCK_KINDS if _has(desc, k)}
        assert kinds == set(BLOCK_KINDS), f"no schedule with {set(BLOCK_KINDS) - kinds} ranges was run"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_benchmark_programs_compile_for_cuda(arch: str) -> None:
    """The benchmark suite at full size (what a held-out GPU check renders), with the schedules the GPU estimate
    picks, compiles with nvcc; the float16 GEMM gets tensor cores."""
    if find_nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or put nvcc on PATH)")
    spec = importlib.util.spec_from_file_location("bench_programs", BENCH_PROGRAMS)
    assert spec is not None and spec.loader is not None
    programs = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = programs  # dataclasses look their module up while the class is made
    spec.loader.exec_module(programs)
    kernels: list[Kernel] = []
    for bench in programs.suite():
        prog = optimize(bench.expr(**{k: Tensor.empty(s, name=k) for k, s in bench.shapes.items()}), target="cuda")
        kernels += [Kernel.from_ast(f"{bench.name}_{k.name}", k.ast) for k in prog.kernels]
    a, b = Tensor.empty((4096, 4096), dtype="float16", name="a"), Tensor.empty((4096, 4096), dtype="float16", name="b")
    gemm = optimize(a.cast("float32") @ b.cast("float32"), target="cuda")
    assert "wmma" in gemm.source
    kernels += [Kernel.from_ast(f"gemm_f16_{k.name}", k.ast) for k in gemm.kernels]
    ptx = compile_ptx("\n\n".join(get_backend("cuda").plan(k).source for k in kernels), arch)
    assert "wmma.mma.sync" in ptx and ptx.count(".entry") == len(kernels)
