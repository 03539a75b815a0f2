"""The native thread pool of the LLVM backend (backends/cpu_pool.py): every part of a job runs exactly once,
whoever calls; concurrent callers, idle workers and forked children behave; big parallel kernels give numpy's
values through it."""

from __future__ import annotations

import ctypes
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm
import numpy as np
import pytest

from egraph_compiler import Tensor, optimize
from egraph_compiler.backends import cpu_pool
from egraph_compiler.backends.llvm import optimize_ir

# task(ctx, part): ctx[part] += 1 (each part is one slot, so counts show a part run twice or never)
TASK = """
define void @task(ptr %c, i64 %p) {
  %a = getelementptr i64, ptr %c, i64 %p
  %v = load i64, ptr %a
  %v1 = add i64 %v, 1
  store i64 %v1, ptr %a
  ret void
}
define void @run(ptr %c, i64 %n) {
  call void inttoptr (i64 POOL to ptr)(ptr @task, ptr %c, i64 %n)
  ret void
}
"""


def _runner(pool_address: int) -> tuple[object, object]:
    mod = optimize_ir(TASK.replace("POOL", str(pool_address)))
    engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple().create_target_machine(jit=True))
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("run"))
    return engine, lambda counts: fn(counts.ctypes.data, counts.size)


@pytest.fixture(scope="module")
def run_parts() -> object:
    engine, run = _runner(cpu_pool.parallel_address())
    yield run
    del engine


def test_without_workers_every_part_runs_on_the_caller() -> None:
    """Where the pool cannot run (no futex, or one core), egc_parallel runs the parts in order itself."""
    pool = cpu_pool._Pool(0)
    assert pool.workers == 0
    engine, run = _runner(pool.address)
    counts = np.zeros(9, np.int64)
    run(counts)  # type: ignore[operator]
    assert (counts == 1).all()
    del engine


def test_every_part_runs_exactly_once(run_parts: object) -> None:
    for n in (0, 1, 2, 3, 7, 64, 1000):
        counts = np.zeros(n, np.int64)
        for _ in range(50):
            run_parts(counts)  # type: ignore[operator]
        assert (counts == 50).all(), (n, np.unique(counts))


def test_callers_on_many_threads_each_get_all_their_parts(run_parts: object) -> None:
    """One caller uses the pool at a time; another runs its parts itself meanwhile."""

    def job(i: int) -> bool:
        counts = np.zeros(17 + i, np.int64)
        for _ in range(200):
            run_parts(counts)  # type: ignore[operator]
        return bool((counts == 200).all())

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(job, range(8)))


def test_idle_workers_sleep(run_parts: object) -> None:
    """Workers spin only briefly after a job (SPIN_CYCLES), then sleep: an idle process uses no CPU."""
    run_parts(np.zeros(8, np.int64))  # type: ignore[operator]
    time.sleep(0.05)
    t0, c0 = time.perf_counter(), time.process_time()
    time.sleep(0.3)
    used = time.process_time() - c0
    assert used < 0.1 * (time.perf_counter() - t0), f"{used:.3f} s of CPU while idle"


def _child(q: object) -> None:
    a = np.arange(512 * 300, dtype=np.float32).reshape(512, 300) / 1e4
    ok = np.allclose(PROG(x=a), np.exp(a).sum(1), rtol=1e-5)  # type: ignore[misc]
    x = Tensor.empty(512, 300, name="x")
    fresh = optimize((x * 2.0).sum(1), target="llvm")  # its driver calls this process's own pool
    q.put(bool(ok and np.allclose(fresh(x=a), (a * 2).sum(1), rtol=1e-5)))  # type: ignore[attr-defined]


PROG = None


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_forked_child_runs_programs_compiled_before_and_after_the_fork() -> None:
    global PROG
    x = Tensor.empty(512, 300, name="x")
    PROG = optimize(x.exp().sum(1), target="llvm")
    a = np.ones((512, 300), np.float32)
    np.testing.assert_allclose(PROG(x=a), np.full(512, 300 * np.e, np.float32), rtol=1e-5)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and q.get(timeout=5)


def test_parallel_kernels_match_numpy_through_the_pool() -> None:
    """Kernels big enough to split their outer loop, and a full reduction computed as parallel partials."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 257), dtype=np.float32), rng.standard_normal((257, 129), dtype=np.float32)
    x, y = Tensor.empty(300, 257, name="a"), Tensor.empty(257, 129, name="b")
    prog = optimize([(x @ y).relu(), x.sum()], target="llvm")
    for _ in range(3):
        mm, total = prog(a=a, b=b)
        np.testing.assert_allclose(mm, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(total, a.sum(dtype=np.float64), rtol=1e-4)
