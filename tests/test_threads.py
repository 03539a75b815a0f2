"""Concurrency and long runs: optimize(), Tensor.numpy() and program calls from many threads at once give the
values numpy gives, a process that ran them keeps working (each thread has its own e-graph session), and caches
and sessions keep memory bounded over many calls."""

from __future__ import annotations

import gc
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from egraph_compiler import Tensor, optimize


def _job(i: int) -> bool:
    rng = np.random.default_rng(i)
    rows = 8 + i % 5
    a, b = Tensor.empty(rows, 16, name="a"), Tensor.empty(16, 4, name="b")
    kinds = [(a @ b).relu() + 1.0, (a @ b).softmax(axis=1), a.sum(axis=1) * 2.0]
    out = kinds[i % len(kinds)]
    prog = optimize(out, target="llvm")
    av, bv = rng.standard_normal((rows, 16), dtype=np.float32), rng.standard_normal((16, 4), dtype=np.float32)
    ab = av @ bv
    want = [
        np.maximum(ab, 0) + 1,
        np.exp(ab - ab.max(1, keepdims=True)) / np.exp(ab - ab.max(1, keepdims=True)).sum(1, keepdims=True),
        av.sum(1) * 2,
    ][i % len(kinds)]
    ok = np.allclose(prog(a=av, b=bv) if i % len(kinds) < 2 else prog(a=av), want, rtol=1e-4, atol=1e-4)
    realized = (Tensor(av) * float(i)).sum().numpy()  # Tensor.numpy() optimizes through the runtime's cache
    return ok and np.allclose(realized, (av * i).sum(), rtol=1e-4, atol=1e-3)


def test_optimize_and_run_from_many_threads() -> None:
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(_job, range(12)))
    assert all(results), results
    assert _job(0)  # the process is not poisoned: a later call on this thread works too


def test_the_jit_cache_is_bounded_and_evicted_programs_still_run(monkeypatch: object) -> None:
    """Compiled modules are kept least-recently-used up to a bound; a program keeps its own engine alive, so one
    whose module left the cache still runs."""
    from egraph_compiler.backends import llvm

    monkeypatch.setattr(llvm, "MAX_CACHED_MODULES", 3)  # type: ignore[attr-defined]
    x = Tensor.empty(5, 7, name="x")
    progs = [optimize(x * float(k) + float(k), target="llvm") for k in range(8)]
    xv = np.arange(35, dtype=np.float32).reshape(5, 7)
    for k, p in enumerate(progs):
        np.testing.assert_allclose(p(x=xv), xv * k + k)
        assert llvm.cached_modules() <= 3


def test_sessions_are_replaced_after_a_bounded_amount_of_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """egglog keeps some memory of each problem after its scope is popped (about 0.8 MB per optimize of a 64x64
    softmax; RSS grew without bound): a session that has held RECYCLE_AFTER_NODES e-nodes is replaced by a fresh
    one, which gives the same program."""
    from egraph_compiler import simplify as pipeline
    from egraph_compiler.optimize import kernel_session

    a, b = Tensor.empty(16, 24, name="a"), Tensor.empty(24, 8, name="b")
    out = (a @ b).softmax(axis=1)
    # the tests before this one may have brought the session near its limit: this call must not replace it
    monkeypatch.setattr(pipeline, "RECYCLE_AFTER_NODES", 1 << 62)
    first = optimize(out, target="llvm")
    used = pipeline.shared_session("kernel", kernel_session)
    assert used.worked > 0
    monkeypatch.setattr(pipeline, "RECYCLE_AFTER_NODES", used.worked - 1)
    again = optimize(out, target="llvm")
    assert pipeline.shared_session("kernel", kernel_session) is not used
    assert [str(k.ast) for k in again.kernels] == [str(k.ast) for k in first.kernels]
    av, bv = np.ones((16, 24), np.float32), np.ones((24, 8), np.float32)
    np.testing.assert_allclose(again(a=av, b=bv), np.full((16, 8), 1 / 8, np.float32), rtol=1e-6)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set size from /proc")
def test_repeated_optimize_keeps_memory_flat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Optimizing and running the same graph again and again: after a warm-up (caches filled, the e-graph
    session replaced a few times), the process's resident memory stays flat (it grew 0.8 MB per optimize)."""
    from egraph_compiler import simplify as pipeline

    monkeypatch.setattr(pipeline, "RECYCLE_AFTER_NODES", 5_000)  # replace sessions often: many cycles per test
    a = Tensor.empty(16, 24, name="a")
    out = a.sum(axis=1) * 2.0 + 1.0
    av = np.ones((16, 24), np.float32)

    def calls(n: int) -> None:
        for _ in range(n):
            np.testing.assert_allclose(optimize(out, target="llvm")(a=av), np.full(16, 49.0, np.float32))
        gc.collect()

    calls(30)
    before = _rss_mib()
    calls(60)
    assert _rss_mib() - before < 4.0, f"resident memory grew {_rss_mib() - before:.1f} MiB over 60 optimize calls"


@pytest.mark.compile_cache
def test_the_compile_cache_answers_a_rebuilt_graph_and_tells_options_apart() -> None:
    """optimize() of a graph built again from scratch (same structure, new Python objects) returns the program
    of the first call within milliseconds; other options, another target or another graph compile afresh."""
    import time

    from egraph_compiler import compile_cache

    def graph(scale: float) -> Tensor:
        a, b = Tensor.empty(32, 48, name="a"), Tensor.empty(48, 16, name="b")
        return ((a @ b) * scale).softmax(axis=1)

    first = optimize(graph(2.0), target="llvm")
    t0 = time.perf_counter()
    again = optimize(graph(2.0), target="llvm")
    took = time.perf_counter() - t0
    assert again is first and took < 0.05, took
    assert optimize(graph(3.0), target="llvm") is not first
    assert optimize(graph(2.0), target="llvm", search_time=0.5) is not first
    assert optimize(graph(2.0), target="reference") is not first
    assert optimize(graph(2.0), target="llvm", cache=False) is not first
    av = np.random.default_rng(0).standard_normal((32, 48), dtype=np.float32)
    bv = np.random.default_rng(1).standard_normal((48, 16), dtype=np.float32)
    z = (av @ bv) * 2.0
    want = np.exp(z - z.max(1, keepdims=True)) / np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)
    np.testing.assert_allclose(again(a=av, b=bv), want, rtol=1e-4, atol=1e-6)
    with compile_cache.disabled():
        assert optimize(graph(2.0), target="llvm") is not first
