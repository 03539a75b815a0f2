"""The direct lowering (kernel/lowering.py): under a time limit too short for the search, optimize() lowers the
graph without the e-graph, and the program must still be right.

Every program is checked against an independent model: the API fuzzer's numpy model of the same ops
(test_api_fuzz.py), or the tensor-level reference interpreter (the input graph evaluated with numpy, not the
kernels). A limit of a microsecond forces the direct path; the report says it was taken.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import examples
from hypothesis import HealthCheck, given, note, settings
from test_api_fuzz import int_programs, programs
from test_cuda_random_programs import RandomProgram, check_on_cuda, random_programs
from test_fusion import _wide_random_dag
from test_optimize_programs import PROGRAMS, _check, _inputs

from egraph_compiler import Tensor, optimize
from egraph_compiler.extract.schedule import cost_model_for
from egraph_compiler.ir.interpret import evaluate
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.kernel import lowering
from egraph_compiler.kernel.lowering import register_tiles
from egraph_compiler.kernel.program import Kernel, Program

TIGHT = 1e-6  # seconds: shorter than any search


def _direct(prog: Program) -> bool:
    return any("lowered without the e-graph" in n for n in prog.report.notes)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_tensor_programs_lowered_directly_match_numpy(case: tuple) -> None:
    t, want, inputs, scale, trace = case
    prog = optimize(t, target="llvm", time_limit=TIGHT, cache=False)
    assert _direct(prog), prog.report.notes
    got = prog(**{k: v for k, v in inputs.items() if k in prog.inputs})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale, err_msg=" -> ".join(trace))


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(int_programs())
def test_random_integer_programs_lowered_directly_match_numpy(case: tuple) -> None:
    t, want, inputs, trace = case
    prog = optimize(t, target="llvm", time_limit=TIGHT, cache=False)
    assert _direct(prog)
    got = prog(**{k: v for k, v in inputs.items() if k in prog.inputs})
    np.testing.assert_array_equal(got, want, err_msg=" -> ".join(trace))


@pytest.mark.parametrize("target", ["reference", "llvm"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_named_programs_lowered_directly_match_the_interpreter(name: str, target: str) -> None:
    t, shapes = PROGRAMS[name]()
    prog = optimize(t, target=target, time_limit=TIGHT, cache=False)
    assert _direct(prog) and prog.report.limit_hit
    x = _inputs(shapes, t)
    _check(prog(**x), evaluate(t.uop, x))


def test_reduction_kernels_get_the_register_tile_the_estimate_prefers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GEMM lowered directly is one plain loop per axis; its register tiles (a vector of columns, rows beside
    it) are priced, and the cheapest is kept: the chosen kernel is tiled, estimated faster than the plain nest,
    and right."""
    a, b = Tensor.empty((64, 96), name="a"), Tensor.empty((96, 128), name="b")
    prog = optimize(a @ b, target="llvm", time_limit=TIGHT, cache=False)
    (k,) = [k for k in prog.kernels if "red[" in k.schedule]  # (beside the copy of b into panels)
    assert "u" in k.schedule, k.schedule
    monkeypatch.setattr(lowering, "register_tiles", lambda ast, lanes: [])
    (plain,) = [k for k in optimize(a @ b, target="llvm", time_limit=TIGHT, cache=False).kernels if "red[" in k.schedule]
    assert "u" not in plain.schedule
    model = cost_model_for("llvm")
    assert model.estimate(k.ast).seconds < model.estimate(plain.ast).seconds
    rng = np.random.default_rng(0)
    x = {"a": rng.standard_normal((64, 96), dtype=np.float32), "b": rng.standard_normal((96, 128), dtype=np.float32)}
    np.testing.assert_allclose(prog(**x), x["a"] @ x["b"], rtol=1e-4, atol=1e-4)


def test_every_register_tile_keeps_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tile register_tiles offers for a plain reduction kernel (vectors of 16 and 8 of the 48 columns, alone
    or with 4 of the 12 rows, in the plain loop order or the columns' outermost) is an UPCAST nest that computes
    the same values (run on the reference backend, which interprets kernel ASTs)."""
    a, b = Tensor.empty((12, 20), name="a"), Tensor.empty((20, 48), name="b")
    monkeypatch.setattr(lowering, "register_tiles", lambda ast, lanes: [])
    prog = optimize((a @ b).relu(), target="reference", time_limit=TIGHT, cache=False)
    i = next(i for i, k in enumerate(prog.kernels) if "red[" in k.schedule)
    tiles = register_tiles(prog.kernels[i].ast, 16)
    assert len(tiles) == 8
    rng = np.random.default_rng(1)
    x = {"a": rng.standard_normal((12, 20), dtype=np.float32), "b": rng.standard_normal((20, 48), dtype=np.float32)}
    want = np.maximum(x["a"] @ x["b"], 0)
    for t in tiles:
        assert any(r.op is Ops.RANGE and r.arg[1] is AxisType.UPCAST for r in t.toposort())
        kernels = [*prog.kernels[:i], Kernel.from_ast(prog.kernels[i].name, t), *prog.kernels[i + 1 :]]
        tiled = Program(kernels, prog.buffers, prog.inputs, prog.outputs, prog.backend, prog.target)
        np.testing.assert_allclose(tiled(**x), want, rtol=1e-4, atol=1e-4)


def test_a_deep_chain_is_lowered_without_recursion() -> None:
    """A chain of 1,000 ops is one kernel's value, built with a stack (a recursive walk raised RecursionError)."""
    t = Tensor.empty(64, name="x")
    for i in range(1000):
        t = t + 1.0 if i % 3 else (t * 1.001 if i % 2 else t.relu())
    prog = optimize(t, target="llvm", time_limit=TIGHT, cache=False)
    assert _direct(prog)
    x = {"x": np.linspace(-2, 2, 64, dtype=np.float32)}
    np.testing.assert_allclose(prog(**x), evaluate(t.uop, x), rtol=1e-4, atol=1e-4)


def test_outputs_read_by_other_outputs_and_returned_twice() -> None:
    x = Tensor.empty((4, 6), name="x")
    s = x.sum(1, keepdim=True)
    outs = [s, x / s, s]
    prog = optimize(outs, target="llvm", time_limit=TIGHT, cache=False)
    v = {"x": np.random.default_rng(2).uniform(1, 2, (4, 6)).astype(np.float32)}
    for got, want in zip(prog(**v), evaluate([o.uop for o in outs], v)):
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_cuda_programs_lowered_directly_compile() -> None:
    """On the CUDA target the direct lowering's plain loops are a flat launch (a thread per output element, its
    reductions a loop): no register tiles, the CUDA C compiles for sm_80 and sm_90."""
    from egraph_compiler.backends.cuda_toolchain import compile_ptx, find_nvcc

    t = (Tensor.empty((8, 12), name="x").softmax(-1) @ Tensor.empty((12, 16), name="w")).relu()
    prog = optimize(t, target="cuda", time_limit=TIGHT, cache=False)
    assert _direct(prog) and all("u" not in k.schedule for k in prog.kernels)
    assert "__global__" in prog.source
    if find_nvcc() is None:
        pytest.skip("nvcc is not installed")
    for arch in ("sm_80", "sm_90"):
        assert ".entry" in compile_ptx(prog.source, arch)


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_programs())
def test_random_programs_lowered_directly_run_on_the_cuda_emulation(program: RandomProgram) -> None:
    """The CUDA target's direct programs, nvcc-compiled and run on the host emulation of CUDA
    (test_cuda_backend.py), against the reference interpreter."""
    check_on_cuda(program, note, time_limit=TIGHT)


@pytest.mark.parametrize("name", ["matmul", "gemm_bias_relu", "conv2d_stride_pad", "attention_causal"])
def test_avx2_code_lowered_directly_matches_the_interpreter(name: str) -> None:
    """Register tiles are sized by the target's vectors: AVX2's 8 lanes for cpu="haswell"."""
    t, shapes = PROGRAMS[name]()
    prog = optimize(t, target="llvm", cpu="haswell", time_limit=TIGHT, cache=False)
    assert _direct(prog)
    x = _inputs(shapes, t)
    _check(prog(**x), evaluate(t.uop, x))


@pytest.mark.filterwarnings("ignore::egraph_compiler.ir.diagnostics.EstimateWarning")  # ~600 tiny kernels
def test_a_random_dag_of_2000_uops_lowered_directly() -> None:
    """Row and column reductions broadcast back into a wide DAG of elementwise ops: ~600 kernels, each
    materialized value computed once, the result the interpreter's."""
    t = _wide_random_dag(0, 2000)
    prog = optimize(t, target="llvm", time_limit=0.25, cache=False)
    assert _direct(prog)
    v = {
        u.arg[0]: np.random.default_rng(0).standard_normal(u.arg[1]).astype(np.float32)
        for u in t.uop.toposort()
        if u.op is Ops.BUFFER
    }
    np.testing.assert_allclose(prog(**v), evaluate(t.uop, v), rtol=1e-3, atol=1e-3)


def test_two_padded_convolutions_lowered_directly_run_chunk_by_chunk_right() -> None:
    """Each padded copy may run chunk by chunk with the convolution reading it once a weight's packing copy moves
    ahead of the pair; the run order and its chunk pairs are decided on the tiled kernels (decided on the plain
    ones, a tile that split other axes across threads failed the runner's check of the pairs)."""
    x = Tensor.empty((4, 64, 28, 28), name="x")
    w1, w2 = Tensor.empty((64, 64, 3, 3), name="w1"), Tensor.empty((64, 64, 3, 3), name="w2")
    t = x.conv2d(w1, padding=1).relu().conv2d(w2, padding=1) + x
    prog = optimize(t, target="llvm", time_limit=TIGHT, cache=False)
    assert _direct(prog)
    rng = np.random.default_rng(3)
    v = {"x": rng.standard_normal((4, 64, 28, 28), dtype=np.float32)}
    v |= {w: rng.standard_normal((64, 64, 3, 3), dtype=np.float32) * 0.1 for w in ("w1", "w2")}
    np.testing.assert_allclose(prog(**v), evaluate(t.uop, v), rtol=1e-3, atol=1e-3)
