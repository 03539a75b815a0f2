"""Compile workers (backends/compile_workers.py): a program's modules compiled in worker processes give the
same machine code and results as compiled in process, and any failure of a worker leaves its modules to the
caller."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from egraph_compiler import Tensor, optimize
from egraph_compiler.backends import compile_workers, llvm
from egraph_compiler.ir.diagnostics import InvalidArgument


def _program() -> tuple[object, dict[str, np.ndarray], list[np.ndarray]]:
    """Three outputs, so at least three kernels, with their numpy values."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((48, 40)).astype(np.float32)
    b = rng.standard_normal((40, 56)).astype(np.float32)
    ta, tb = Tensor.empty(48, 40, name="a"), Tensor.empty(40, 56, name="b")
    prog = optimize([(ta @ tb).relu(), ta.exp().sum(axis=0), tb.max(axis=1)], target="llvm")
    want = [np.maximum(a @ b, 0), np.exp(a).sum(axis=0), b.max(axis=1)]
    return prog, {"a": a, "b": b}, want


@pytest.fixture
def workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker, and batches of any size go to it; no worker left over from another test."""
    compile_workers.close_workers()
    llvm.clear_cache()
    monkeypatch.setenv("EGC_COMPILE_WORKERS", "1")
    monkeypatch.setattr(compile_workers, "MIN_BATCH_CHARS", 0)
    yield
    compile_workers.close_workers()
    llvm.clear_cache()


def test_workers_compile_the_same_code_as_the_process(workers: None) -> None:
    prog, inputs, want = _program()
    before = llvm.CACHE_STATS["worker_compiles"]
    got = prog(**inputs)  # type: ignore[operator]
    assert llvm.CACHE_STATS["worker_compiles"] > before, "no module went to the worker"
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    llvm.clear_cache()  # each kernel again, in process: the same optimized module
    backend = prog.backend  # type: ignore[attr-defined]
    for kernel, compiled in zip(prog.kernels, prog.compile()):  # type: ignore[attr-defined]
        assert compiled.native.optimized_ir == backend.compile(kernel, prog).native.optimized_ir, kernel.name


def test_a_worker_that_dies_leaves_its_modules_to_the_caller(
    workers: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dead = tmp_path / "dead_worker.py"
    dead.write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setattr(compile_workers, "WORKER_SCRIPT", dead)
    before = llvm.CACHE_STATS["worker_compiles"]
    prog, inputs, want = _program()
    got = prog(**inputs)  # type: ignore[operator]
    assert llvm.CACHE_STATS["worker_compiles"] == before
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    # and the dead worker is not lent again: the next program starts a new one (it dies too) and still runs
    prog2, inputs2, want2 = _program()
    llvm.clear_cache()
    np.testing.assert_allclose(prog2(**inputs2)[2], want2[2])  # type: ignore[operator,index]


def test_a_worker_error_is_the_callers_to_compile(workers: None) -> None:
    """IR a worker cannot compile comes back as an error, and the module is compiled in process."""
    batch = compile_workers.Batch({i: f"this is not IR ({i})" for i in range(6)}, "generic", "")
    mine = []
    for i in batch.mine():  # the caller takes what the worker has not (it is slow: the worker gets some)
        mine.append(i)
        time.sleep(0.05)
    assert sorted(mine + batch.theirs) == list(range(6))
    assert batch.theirs and all(batch.result(i) is None for i in batch.theirs)


def test_no_workers_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    compile_workers.close_workers()
    llvm.clear_cache()
    monkeypatch.setenv("EGC_COMPILE_WORKERS", "0")
    monkeypatch.setattr(compile_workers, "MIN_BATCH_CHARS", 0)
    before = llvm.CACHE_STATS["worker_compiles"]
    prog, inputs, want = _program()
    np.testing.assert_allclose(prog(**inputs)[0], want[0], rtol=1e-4, atol=1e-4)  # type: ignore[operator,index]
    assert llvm.CACHE_STATS["worker_compiles"] == before
    assert not compile_workers._STARTED


@pytest.mark.parametrize("value", ["many", "-1", "1.5", ""])
def test_a_bad_worker_count_is_a_diagnostic(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("EGC_COMPILE_WORKERS", value)
    with pytest.raises(InvalidArgument, match="EGC_COMPILE_WORKERS"):
        compile_workers.worker_limit()


def test_workers_end_when_closed(workers: None) -> None:
    prog, inputs, _ = _program()
    prog(**inputs)  # type: ignore[operator]
    procs = [w.proc for w in compile_workers._STARTED]
    assert procs
    compile_workers.close_workers()
    assert all(p.poll() is not None for p in procs)
