"""Block-shared REDUCEs on CUDA: a REDUCE whose value is the same for every thread of a block (a softmax row's max
computed inside the elementwise kernel) is split over the block's threads and combined with warp shuffles and
shared memory, instead of being run whole by each thread.

Hand-built kernels are compared with the reference interpreter through the host emulation of the CUDA execution
model (barriers and shuffles included), compiled with nvcc for sm_80 and sm_90, and, where sharing would be wrong
(a flat grid with a tail, a thread-dependent value, a gated store, a loop whose trip count differs between threads)
must render without it. A seeded sweep covers block sizes, reduction sizes, ops and dtypes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import gpu_or_skip
from test_cuda_backend import (
    BACKEND,
    Case,
    EmulatedCUDABackend,
    buf,
    compare_with_reference,
    emulation_library,
    load,
    reduce,
    rng,
    sink,
    softmax_rows,
    store,
)

import egraph_compiler.backends.cuda as cuda
import egraph_compiler.kernel.gpu_launch as gpu_launch
from egraph_compiler import AxisType, Ops
from egraph_compiler.backends import get_backend
from egraph_compiler.backends.cuda_toolchain import compile_ptx, find_nvcc
from egraph_compiler.extract.gpu_cost import GPUMachine, estimate_gpu
from egraph_compiler.ir.dtypes import DType, dtypes

A = AxisType
F32, F16, I32 = dtypes.float32, dtypes.float16, dtypes.int32


def _shared_count(case: Case) -> int:
    """How many block-shared reductions (shuffle butterflies) the rendered kernel holds."""
    return BACKEND.plan(case.kernel).source.count("for (int o = 16; o > 0; o >>= 1)")


# ---- kernels that must share -------------------------------------------------------------------------------


def flat_softmax() -> Case:
    """Rows on the auto grid (3 blocks of 256 threads, one row each): the max and the sum of the row are shared."""
    return softmax_rows(3, 256, "shared_flat_softmax")


def local_tails() -> Case:
    """64-thread blocks, reductions whose trip counts are no multiple of the block: a float mean, an int32 sum that
    wraps around, and a float16 max accumulated in float."""
    g, l_ = rng(3, "g", A.GLOBAL), rng(64, "l", A.LOCAL)
    x, z, y = buf("X", 192), buf("Z", 600), buf("Y", 192)
    w, yi = buf("W", 450, I32), buf("YI", 192, I32)
    h, yh = buf("H", 390, F16), buf("YH", 192, F16)
    r, r2, r3 = rng(200, "r", A.REDUCE), rng(150, "r2", A.REDUCE), rng(130, "r3", A.REDUCE)
    out = g * 64 + l_
    mean = reduce(load(z, g * 200 + r), r) * (1 / 200)
    big = np.random.default_rng(3).integers(2**30, 2**31 - 1, 450).astype(np.int32)  # the sums wrap around
    return Case(
        "shared_local_tails",
        sink(
            (store(y, out, load(x, out) - mean), (g, l_)),
            (store(yi, out, reduce(load(w, g * 150 + r2), r2) + out.cast(I32)), (g, l_)),
            (store(yh, out, reduce(load(h, g * 130 + r3), r3, op=Ops.MAX)), (g, l_)),
        ),
        {"W": big},
        rtol=1e-5,
        atol=1e-5,
    )


def block_3d() -> Case:
    """A 16x4x2 block (threadIdx.x/y/z) and a reduction over two ranges (300 iterations, decomposed)."""
    g = rng(2, "g", A.GLOBAL)
    la, lb, lc = rng(2, "la", A.LOCAL), rng(4, "lb", A.LOCAL), rng(16, "lc", A.LOCAL)
    ra, rb = rng(10, "ra", A.REDUCE), rng(30, "rb", A.REDUCE)
    x, y = buf("X", 600), buf("Y", 256)
    out = g * 128 + la * 64 + lb * 16 + lc
    total = reduce(load(x, g * 300 + ra * 30 + rb) * 0.5, ra, rb)
    return Case("shared_block_3d", sink((store(y, out, total + out.cast(F32)), (g, la, lb, lc))), rtol=1e-5, atol=1e-5)


def in_loops() -> Case:
    """A shared reduce inside the item's loop (the shared array is reused each iteration), holding a REDUCE over
    the shared range itself (run by each thread inside the shared loop, never shared again)."""
    g, l_, s = rng(2, "g", A.GLOBAL), rng(64, "l", A.LOCAL), rng(3, "s", A.LOOP)
    r, q = rng(128, "r", A.REDUCE), rng(130, "q", A.REDUCE)
    x, x2, y, y2 = buf("X", 2 * 128 * 130), buf("X2", 6 * 128), buf("Y", 6 * 64), buf("Y2", 128)
    row = g * 3 + s
    inner = reduce(load(x, (g * 128 + r) * 130 + q), q, op=Ops.MAX)
    return Case(
        "shared_in_loops",
        sink(
            (store(y, row * 64 + l_, reduce(load(x2, row * 128 + r), r) - l_.cast(F32)), (g, s, l_)),
            (store(y2, g * 64 + l_, reduce(inner, r)), (g, l_)),
        ),
        rtol=1e-5,
        atol=1e-5,
    )


SHARED = [flat_softmax(), local_tails(), block_3d(), in_loops()]
EXPECTED = {"shared_flat_softmax": 2, "shared_local_tails": 3, "shared_block_3d": 1, "shared_in_loops": 2}


# ---- kernels that must not ----------------------------------------------------------------------------------


def flat_tail() -> Case:
    """300 threads on the auto grid: the last block stops early, so no barrier may be used."""
    i, r = rng(300, "i"), rng(200, "r", A.REDUCE)
    x, y = buf("X", 300), buf("Y", 300)
    return Case("unshared_flat_tail", sink((store(y, i, load(x, i) + reduce(load(x, r), r)), (i,))), rtol=1e-5, atol=1e-5)


def thread_dependent() -> Case:
    """Each thread's reduce reads its own row; a gated store; a short reduce; a 48-thread block."""
    g, l_ = rng(2, "g", A.GLOBAL), rng(32, "l", A.LOCAL)
    l48 = rng(48, "l48", A.LOCAL)
    r, rs = rng(200, "r", A.REDUCE), rng(100, "rs", A.REDUCE)
    x, y, yg, ys, y48 = buf("X", 64 * 200), buf("Y", 64), buf("YG", 64), buf("YS", 64), buf("Y48", 96)
    out = g * 32 + l_
    return Case(
        "unshared",
        sink(
            (store(y, out, reduce(load(x, out * 200 + r), r)), (g, l_)),
            (store(yg, out, reduce(load(x, g * 200 + r), r), gate=l_ < 7), (g, l_)),
            (store(ys, out, reduce(load(x, g * 100 + rs), rs)), (g, l_)),
            (store(y48, g * 48 + l48, reduce(load(x, g * 200 + r), r)), (g, l48)),
        ),
        rtol=1e-5,
        atol=1e-5,
    )


UNSHARED = [flat_tail(), thread_dependent()]


# ---- a seeded sweep ----------------------------------------------------------------------------------------


def sweep_case(k: int, rs: np.random.Generator) -> Case:
    """Blocks of 32..256 threads (LOCAL, or rows on the auto grid), reductions of 128..700 iterations, every op."""
    d: DType = [F32, dtypes.float64, I32, F16][int(rs.integers(4))]
    op = [Ops.ADD, Ops.MAX, Ops.MUL][int(rs.integers(3))]
    threads, n = int(rs.choice([32, 64, 96, 128, 256])), int(rs.integers(128, 701))
    blocks = int(rs.integers(1, 4))
    x, y = buf("X", blocks * n, d), buf("Y", blocks * threads, d)
    flat = threads == 256 or bool(rs.integers(2))
    g = rng(blocks, "g", A.LOOP if flat else A.GLOBAL)
    t = rng(threads if not flat else 256, "t", A.LOOP if flat else A.LOCAL)
    threads = 256 if flat else threads
    y = buf("Y", blocks * threads, d)
    r = rng(n, "r", A.REDUCE)
    v = load(x, g * n + r)
    inputs = {}
    if op is Ops.MUL:  # products of values near 1 stay finite (integers: +-1)
        rv = np.random.default_rng(k)
        inputs["X"] = (rv.choice([-1, 1], blocks * n) if not d.is_float else 1 + rv.uniform(-0.01, 0.01, blocks * n)).astype(
            d.np
        )
    tol = 2e-2 if d is F16 else 1e-4
    return Case(
        f"shared_sweep_{k}_{d.name}_{op.name}_{'flat' if flat else 'local'}{threads}_n{n}",
        sink((store(y, g * threads + t, reduce(v, r, op=op)), (g, t))),
        inputs,
        rtol=tol,
        atol=tol,
    )


SWEEP = [sweep_case(k, np.random.default_rng(1000 + k)) for k in range(12)]
ALL = SHARED + UNSHARED + SWEEP


# ---- tests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", SHARED, ids=lambda cs: cs.name)
def test_block_uniform_reductions_are_shared(case: Case) -> None:
    src = BACKEND.plan(case.kernel).source
    assert _shared_count(case) == EXPECTED[case.name], src
    assert "__shfl_xor_sync(0xffffffffu" in src and "__shared__" in src


def test_sharing_is_refused_where_it_would_be_wrong() -> None:
    assert _shared_count(flat_tail()) == 0
    assert _shared_count(thread_dependent()) == 0
    src = BACKEND.plan(in_loops().kernel).source  # the MAX over q runs per thread inside the shared loop over r
    assert re.search(r"for \(int \w+ = 0; \w+ < 130; \+\+\w+\)", src), src


def test_sweep_shares_every_reduction() -> None:
    for case in SWEEP:
        assert _shared_count(case) == 1, case.name


def test_emulated_shared_reductions_match_reference() -> None:
    with emulation_library(ALL) as lib:
        backend = EmulatedCUDABackend(lib)
        for case in ALL:
            compare_with_reference(case, backend, "cuda-emulated")


def test_emulation_catches_a_wrong_combine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulated comparison can fail: a butterfly that skips its last level leaves each warp's halves apart."""
    real = cuda._Renderer.block_combine

    def skip_level(self, op, d, t, accs, shared):  # type: ignore[no-untyped-def]
        out = real(self, op, d, t, accs, shared)
        self.lines = [ln.replace("o > 0; o >>= 1", "o > 1; o >>= 1") for ln in self.lines]
        return out

    monkeypatch.setattr(cuda._Renderer, "block_combine", skip_level)
    case = Case("mutated_combine", flat_softmax().ast)  # a new name: plans are cached by name and AST
    with emulation_library([case]) as lib, pytest.raises(AssertionError):
        compare_with_reference(case, EmulatedCUDABackend(lib), "cuda-emulated")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_shared_reductions(arch: str) -> None:
    if find_nvcc() is None:
        pytest.skip("nvcc not found (install the CUDA toolkit or put nvcc on PATH)")
    ptx = compile_ptx("\n".join(BACKEND.plan(cs.kernel).source for cs in ALL), arch)
    assert "shfl.sync.bfly" in ptx and "bar.sync" in ptx


def test_the_estimate_counts_shared_reductions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row softmax on 4096x1024: shared, the row reductions no longer bound each thread (about 1024/256 of
    the per-thread work), and the kernel is near its bytes over the bandwidth."""
    rows, cols = 4096, 1024
    x, y = buf("X", rows * cols), buf("Y", rows * cols)
    i, j = rng(rows, "i", A.GLOBAL), rng(cols // 4, "j", A.LOCAL)
    u = rng(4, "u", A.UPCAST)
    r1, r2 = rng(cols, "r1", A.REDUCE), rng(cols, "r2", A.REDUCE)
    mx = reduce(load(x, i * cols + r1), r1, op=Ops.MAX)
    den = reduce((load(x, i * cols + r2) - mx).exp2(), r2)
    col = j * 4 + u
    ast = sink((store(y, i * cols + col, (load(x, i * cols + col) - mx).exp2() / den), (i, j, u)))
    m = GPUMachine()
    shared = estimate_gpu(ast, m)
    monkeypatch.setattr(gpu_launch, "COOP_MIN_TRIPS", 10**9)
    whole = estimate_gpu(ast, m)
    assert whole.seconds > 20 * shared.seconds, (whole, shared)
    assert shared.seconds < 3 * (2 * rows * cols * 4) / (m.hbm_gbps * 1e9) + 10e-6, shared.notes


def test_cuda_softmax_program_picks_shared_rows() -> None:
    from egraph_compiler import Tensor, optimize

    prog = optimize(Tensor.empty(4096, 1024, name="x").softmax(-1), target="cuda")
    assert "__shfl_xor_sync" in prog.source
    total = sum(s["estimate"]["seconds"] for s in prog.report.extra["schedules"])
    assert total < 100e-6, [(s["chosen"], s["estimate"]) for s in prog.report.extra["schedules"]]


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_cuda_programs_with_shared_rows_match_numpy() -> None:
    """Softmax, layernorm and attention optimized for cuda, run whole through the host emulation: softmax's and
    layernorm's row reductions are block-shared, and attention's scores are their own kernel (every use of them
    loads it)."""
    from egraph_compiler import Tensor, optimize

    rs = np.random.default_rng(5)
    q, k, v = (rs.standard_normal((2, 128, 32)).astype(np.float32) for _ in range(3))
    x = rs.standard_normal((8, 256)).astype(np.float32)
    att = _np_softmax(q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(32))) @ v
    xc = x - x.mean(-1, keepdims=True)
    programs = {
        "softmax": (lambda t: t["x"].softmax(-1), {"x": x}, _np_softmax(x)),
        "layernorm": (
            lambda t: t["x"].layernorm(-1, eps=1e-5),
            {"x": x},
            xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + np.float32(1e-5)),
        ),
        "attention": (lambda t: t["q"].scaled_dot_product_attention(t["k"], t["v"]), {"q": q, "k": k, "v": v}, att),
    }
    progs = {}
    for name, (build, inputs, _) in programs.items():
        prog = optimize(build({n: Tensor.empty(*a.shape, name=n) for n, a in inputs.items()}), target="cuda")
        if name != "attention":  # attention's rows (128 long, 64-thread blocks): the estimate picks per-thread rows
            assert "__shfl_xor_sync" in prog.source, name
        prog.kernels = [type(kk).from_ast(f"{name}_{kk.name}", kk.ast) for kk in prog.kernels]
        progs[name] = prog
    assert len(progs["attention"].kernels) == 2
    with emulation_library([Case(kk.name, kk.ast) for p in progs.values() for kk in p.kernels]) as lib:
        for name, prog in progs.items():
            _, inputs, want = programs[name]
            prog.backend, prog._compiled = EmulatedCUDABackend(lib), None
            np.testing.assert_allclose(prog(**inputs), want, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.gpu
def test_gpu_shared_reductions_match_reference() -> None:
    gpu_or_skip()
    backend = get_backend("cuda")
    for case in ALL:
        compare_with_reference(case, backend, "cuda")
