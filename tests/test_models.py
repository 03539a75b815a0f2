"""The model benchmark's models (bench/model_defs.py) at small sizes, through optimize + LLVM.

Each is compared with the tensor-level reference interpreter (no torch needed), and, where torch is installed,
bench/models.py runs end to end against PyTorch eager on the same inputs. No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from helpers import gpu_or_skip

from egraph_compiler import Tensor, optimize
from egraph_compiler.ir.diagnostics import InvalidArgument
from egraph_compiler.ir.interpret import evaluate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import model_defs  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("model", model_defs.suite(quick=True), ids=lambda m: m.name)
def test_model_matches_the_reference_interpreter(model: model_defs.Model) -> None:
    x = model.inputs()
    out = model.ours(**{k: Tensor.empty(*v.shape, dtype="float32", name=k) for k, v in x.items()})
    prog = optimize(out, target="llvm")
    np.testing.assert_allclose(prog(**x), evaluate(out.uop, x), rtol=1e-4, atol=1e-4)
    f = prog.report.extra["fusion"]
    assert f["chosen_s"] <= f["baseline_s"]


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (pip install -e '.[models]')")
def test_models_bench_against_torch(tmp_path: Path) -> None:
    out = tmp_path / "models.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "models.py"),
            "--quick",
            "--no-compile",
            "--repeat",
            "2",
            "--rounds",
            "2",
            "--only",
            "mlp,dense_chain_2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["model"] for r in rows] == ["mlp_64x128x256", "dense_chain_2"]
    for r in rows:
        assert r["ok"] and r["ours_ms"] is not None and r["eager_ms"] is not None and r["estimate_ms"] is not None
        assert r["x_eager"] > 0 and r["x_compiled"] is None  # the rounds' ratio; --no-compile: no compiled peer
    assert "geomean" in proc.stdout and "x PyTorch eager" in proc.stdout


def test_a_chain_of_small_kernels_and_a_parallel_one_run_as_one_native_call() -> None:
    """The LLVM runner runs the whole program as one native driver: the chain's kernels called directly, the big
    kernel's slices (split over the cores) handed to the native pool. It gives the reference's values, also when
    the same program is called from two threads at once (one of them then runs its slices alone)."""
    from concurrent.futures import ThreadPoolExecutor

    x = Tensor.empty(16, 32, name="x")
    ws = [Tensor.empty(32, 32, name=f"w{i}") for i in range(4)]
    big = Tensor.empty(512, 512, name="big")
    h = x
    for w in ws:
        h = (h @ w).relu().contiguous()  # a kernel each, whatever the fusion search would decide
    out = h.sum() + (big @ big).sum()  # a parallel GEMM beside the chain
    prog = optimize(out, target="llvm")
    rng = np.random.default_rng(5)
    inputs = {
        "x": rng.standard_normal((16, 32), dtype=np.float32),
        "big": rng.standard_normal((512, 512), dtype=np.float32) / np.float32(16),
        **{f"w{i}": rng.standard_normal((32, 32), dtype=np.float32) / np.float32(6) for i in range(4)},
    }
    compiled = prog.compile()
    assert any(n is None for c in compiled for n in c.parallel) and any(n for c in compiled for n in c.parallel)
    driver_ir = prog.backend.runner(prog, compiled).keep[-1].optimized_ir
    assert "@t0(" in driver_ir  # a pool task: the parallel kernel's slices
    want = evaluate(out.uop, inputs)
    np.testing.assert_allclose(prog(**inputs), want, rtol=1e-3, atol=1e-2)
    with ThreadPoolExecutor(2) as pool:
        for got in pool.map(lambda _: prog(**inputs), range(6)):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-2)


def test_repeated_calls_reuse_intermediates_and_stay_correct() -> None:
    """A program's intermediates are reused by later calls: each call's result depends on its own inputs only
    (different inputs in turn, and a result kept from an earlier call is not overwritten)."""
    m = model_defs.suite(quick=True)[0]
    x = m.inputs()
    out = m.ours(**{k: Tensor.empty(*v.shape, dtype="float32", name=k) for k, v in x.items()})
    prog = optimize(out, target="llvm")
    other = {k: (v * np.float32(0.5) + np.float32(0.1)).astype(np.float32) for k, v in x.items()}
    first = prog(**x)
    second = prog(**other)
    np.testing.assert_allclose(prog(**x), evaluate(out.uop, x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(first, evaluate(out.uop, x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(second, evaluate(out.uop, other), rtol=1e-4, atol=1e-4)
    for v in x.values():  # the same arrays, changed in place: the new values are read
        v *= np.float32(-0.5)
    np.testing.assert_allclose(prog(**x), evaluate(out.uop, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [128, 4])  # 64 KiB and 64 B of float32
def test_a_dropped_output_is_written_again_and_a_kept_one_never(n: int) -> None:
    """A call whose result the caller dropped hands its memory to the next call (no fresh pages to fault in, no
    new address to take); a result the caller keeps, or a view of it, is never written again, also across
    threads."""
    x = Tensor.empty((n, n), dtype="float32", name="x")
    prog = optimize((x * 2.0).relu(), target="llvm")
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    address = prog(x=a).__array_interface__["data"][0]  # dropped at once
    assert prog(x=a).__array_interface__["data"][0] == address
    kept = prog(x=a)
    view = prog(x=a * 2)[3:]
    later = [prog(x=a * 3) for _ in range(3)]
    np.testing.assert_array_equal(kept, np.maximum(a * 2, 0))
    np.testing.assert_array_equal(view, np.maximum(a * 4, 0)[3:])
    for got in later:
        np.testing.assert_array_equal(got, np.maximum(a * 6, 0))
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda k: (k, prog(x=a * k)), range(1, 9)))
    for k, got in results:
        np.testing.assert_array_equal(got, np.maximum(a * 2 * k, 0))


@pytest.mark.parametrize("target", ["llvm", "reference"])
def test_outputs_are_written_into_the_callers_arrays(target: str) -> None:
    """prog(out=...) writes each output into the given array and returns it (no output allocated); the same
    tensor returned twice fills both arrays; wrong arrays are diagnostics, never a silent copy."""
    a, b = Tensor.empty(6, 40, name="a"), Tensor.empty(40, 8, name="b")
    prod = (a @ b).relu()
    prog = optimize([prod, prod.sum(axis=1), prod], target=target)
    rng = np.random.default_rng(3)
    av, bv = rng.standard_normal((6, 40), dtype=np.float32), rng.standard_normal((40, 8), dtype=np.float32)
    want = np.maximum(av @ bv, 0)
    outs = (np.empty((6, 8), np.float32), np.empty(6, np.float32), np.empty((6, 8), np.float32))
    for _ in range(2):
        got = prog(a=av, b=bv, out=outs)
        assert got is outs
        for o, w in zip(outs, (want, want.sum(1), want)):
            np.testing.assert_allclose(o, w, rtol=1e-4, atol=1e-5)
    bad = [
        (outs[:2], "3 output"),
        ((outs[0], np.empty(6, np.float64), outs[2]), "float64"),
        ((outs[0], np.empty(12, np.float32)[::2], outs[2]), "not C-contiguous"),
        ((outs[0], outs[1], outs[0]), None),  # fine: the same tensor twice may share its array
        ((outs[0], outs[0].reshape(-1)[:6], outs[2]), "overlaps the array given for output 0"),
        ((av[:, :8].copy(), outs[1], outs[2]), None),  # fine: a separate array
    ]
    for arrays, why in bad:
        if why is None:
            prog(a=av, b=bv, out=arrays)
            continue
        with pytest.raises(InvalidArgument, match=why):
            prog(a=av, b=bv, out=arrays)
    single = optimize(a * 2.0, target=target)
    with pytest.raises(InvalidArgument, match="overlaps input 'a'"):
        single(a=av, out=av)
    # the checks of a serving loop's arrays are kept from one call to the next, never past a change
    o = np.empty((6, 40), np.float32)
    single(a=av, out=o)
    single(a=av, out=o)
    with pytest.raises(InvalidArgument, match="overlaps input 'a'"):
        single(a=o, out=o)  # another input: checked again
    o.flags.writeable = False
    with pytest.raises(InvalidArgument, match="read-only"):
        single(a=av, out=o)


def test_describe_gives_each_kernels_nest_buffers_and_estimate_beside_its_measured_time() -> None:
    """Program.describe() in units a person reads; profile() times each kernel alone (never asserted: only that
    every kernel has a positive time and the text carries it)."""
    a, b = Tensor.empty(64, 96, name="a"), Tensor.empty(96, 32, name="b")
    prog = optimize((a @ b).softmax(axis=1), target="llvm")
    plain = prog.describe()
    for k in prog.kernels:
        assert f"  {k.name}  " in plain
    assert "a (24.0 KiB)" in plain and "estimate" in plain and " us (compute " in plain
    rng = np.random.default_rng(0)
    times = prog.profile(a=rng.standard_normal((64, 96), dtype=np.float32), b=rng.standard_normal((96, 32), dtype=np.float32))
    assert set(times) == {k.name for k in prog.kernels} and all(t > 0 for t in times.values())
    assert "measured" in prog.describe(times) and "GFLOP/s measured" in prog.describe(times)


@pytest.mark.parametrize("m,k,n", [(64, 96, 32), (7, 300, 5), (16, 1, 8)])
def test_each_kernel_counts_its_flops_and_has_its_own_source(m: int, k: int, n: int) -> None:
    """A GEMM with bias and ReLU: 2*M*N*K for the product, one op per output for the bias and the ReLU, however
    the schedule splits or fuses the loops (a schedule that pads a range to a multiple executes the padding's
    ops too, and counts them); prog.source is every kernel's text and, by name, each one's."""
    a, b, c = Tensor.empty(m, k, name="a"), Tensor.empty(k, n, name="b"), Tensor.empty(n, name="c")
    prog = optimize((a @ b + c).relu(), target="llvm")
    useful = 2 * m * n * k + 2 * m * n
    executed = sum(kern.flops for kern in prog.kernels)
    # at most the padded ranges' share more (7 -> 8 and 5 -> 8 rows and columns; AVX2's 6-row tiles pad 64 to 66)
    assert useful <= executed <= useful * 2, (executed, useful)
    assert (m, k, n) != (16, 1, 8) or executed == useful  # whole vectors and tiles: nothing padded
    assert "FLOP" in prog.describe()
    src = prog.source
    assert list(src.keys()) == [kern.name for kern in prog.kernels]
    assert all(src[kern.name] in src and "define" in src[kern.name] for kern in prog.kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("model", model_defs.suite(quick=True), ids=lambda m: m.name)
def test_model_on_the_gpu_matches_the_reference_interpreter(model: model_defs.Model) -> None:
    gpu_or_skip()
    import cupy

    x = model.inputs()
    out = model.ours(**{k: Tensor.empty(*v.shape, dtype="float32", name=k) for k, v in x.items()})
    prog = optimize(out, target="cuda")
    got = prog(**{k: cupy.asarray(v) for k, v in x.items()})
    np.testing.assert_allclose(cupy.asnumpy(got), evaluate(out.uop, x), rtol=1e-4, atol=1e-4)
