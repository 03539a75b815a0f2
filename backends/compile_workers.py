"""Compile workers: processes that compile a program's LLVM modules side by side with the backend.

llvmlite serializes every LLVM call of one process, so a program's kernels compile one after another however
many cores there are (GPT-2 block: 16 modules, ~1 s). A batch puts a program's modules in one queue, largest
first, and worker processes (backends/llvm_worker.py: llvmlite and the shared pipeline alone, ~0.1 s to start)
take from it while the caller takes and compiles the others; the workers send back MCJIT object code, which the
backend loads as it loads a disk cache entry, so the machine code is the same either way.

Workers start on the first batch big enough to pay for them and stay for later ones (one batch at a time each;
a batch that finds none idle compiles in process). `EGC_COMPILE_WORKERS` caps their number (0: none; default:
the cores beyond the first, at most MAX_WORKERS). Any failure (a worker that cannot start, dies or answers
with an error) leaves that module to the caller, whose own compile reports a real error as usual.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from egraph_compiler.backends.llvm_worker import read_message, write_message
from egraph_compiler.ir.diagnostics import InvalidArgument

WORKER_SCRIPT = Path(__file__).with_name("llvm_worker.py")
MAX_WORKERS = 4
MIN_BATCH_CHARS = 150_000  # IR smaller than this compiles in ~0.2 s: not worth a hand-off


def worker_limit() -> int:
    """How many compile workers may run: `EGC_COMPILE_WORKERS`, else the cores beyond the first (at most
    MAX_WORKERS)."""
    raw = os.environ.get("EGC_COMPILE_WORKERS")
    if raw is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(0, min(MAX_WORKERS, cores - 1))
    if not raw.strip().isdigit():
        raise InvalidArgument(
            at="EGC_COMPILE_WORKERS",
            why=f"{raw!r} is not a count of processes",
            suggestion="set it to 0 (compile in process only) or a small positive integer",
        )
    return int(raw)


class _Worker:
    """One worker process and its pipes; `compile` is called by one thread at a time (the pool lends it)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=str(WORKER_SCRIPT.parent),
        )
        self.alive = True

    def compile(self, ir: str, cpu_name: str, cpu_features: str) -> tuple[bytes, str] | None:
        """The IR's (object code, optimized IR), or None where the worker failed (it is not used again)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            write_message(self.proc.stdin, (ir, cpu_name, cpu_features))
            reply = read_message(self.proc.stdout)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            reply = None
        if not isinstance(reply, tuple) or len(reply) != 3:
            self.close()
            return None
        obj, optimized, error = reply
        return None if error is not None else (obj, optimized)

    def close(self) -> None:
        self.alive = False
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


_IDLE: list[_Worker] = []
_STARTED: list[_Worker] = []
_POOL_LOCK = threading.Lock()


def _borrow(n: int) -> list[_Worker]:
    """Up to n workers for one batch: idle ones first, new ones up to the limit."""
    with _POOL_LOCK:
        _STARTED[:] = [w for w in _STARTED if w.alive and w.proc.poll() is None]
        _IDLE[:] = [w for w in _IDLE if w in _STARTED]
        got = [_IDLE.pop() for _ in range(min(n, len(_IDLE)))]
        while len(got) < n and len(_STARTED) < worker_limit():
            try:
                w = _Worker()
            except OSError:
                break
            _STARTED.append(w)
            got.append(w)
        return got


def _give_back(workers: list[_Worker]) -> None:
    with _POOL_LOCK:
        _IDLE.extend(w for w in workers if w.alive)


@atexit.register
def close_workers() -> None:
    """End every worker (at exit; tests call it too)."""
    with _POOL_LOCK:
        for w in _STARTED:
            w.close()
        _STARTED.clear()
        _IDLE.clear()


class Batch:
    """Modules (IR texts) compiled by worker processes and the caller side by side, from one queue, largest first:
    whoever is free takes the next, so the split follows how fast each side really goes. The caller iterates
    `mine()` (compiling each module it yields itself) until the queue is empty, then asks `result(i)` for the
    modules workers took (`theirs`): (object code, optimized IR), or None where the caller must compile it."""

    def __init__(self, irs: dict[int, str], cpu_name: str, cpu_features: str) -> None:
        self._queue = deque(sorted(irs, key=lambda i: -len(irs[i])))
        self._lock = threading.Lock()
        self._taken: dict[int, threading.Event] = {}
        self._results: dict[int, tuple[bytes, str] | None] = {}
        if len(irs) < 2 or sum(map(len, irs.values())) < MIN_BATCH_CHARS or worker_limit() == 0:
            return
        workers = _borrow(min(worker_limit(), len(irs) - 1))
        for w in workers:
            threading.Thread(target=self._run, args=(w, irs, cpu_name, cpu_features), daemon=True).start()

    def _take(self, worker: bool) -> int | None:
        with self._lock:
            if not self._queue:
                return None
            i = self._queue.popleft()
            if worker:
                self._taken[i] = threading.Event()
            return i

    def _run(self, w: _Worker, irs: dict[int, str], cpu_name: str, cpu_features: str) -> None:
        try:
            while w.alive and (i := self._take(worker=True)) is not None:
                try:
                    self._results[i] = w.compile(irs[i], cpu_name, cpu_features)
                finally:  # whatever happened, the caller must not wait on it forever
                    self._taken[i].set()
        finally:
            _give_back([w])

    def mine(self) -> Iterator[int]:
        """The modules the caller compiles itself, as it gets to them."""
        while (i := self._take(worker=False)) is not None:
            yield i

    @property
    def theirs(self) -> list[int]:
        with self._lock:
            return sorted(self._taken)

    def result(self, i: int) -> tuple[bytes, str] | None:
        done = self._taken.get(i)
        if done is None:
            return None
        done.wait()
        return self._results.get(i)


__all__ = ["Batch", "close_workers", "worker_limit"]
