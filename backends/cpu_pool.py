"""A native thread pool for the LLVM backend's parallel kernels: one hand-off costs about a microsecond.

A parallel step of a program calls `egc_parallel(task, ctx, n)` from native code (the program's driver, see
`llvm._Runner`): it runs `task(ctx, part)` for every part in [0, n) on the calling thread and the pool's
workers, and returns when all are done. Handing work to Python threads (a ThreadPoolExecutor) cost about 50 us
per parallel kernel, more than many kernels of a real model take.

How it works (all state in one JIT module, compiled once per process):
- A job is published by storing (task, ctx, n) and then a ticket word `generation << 32 | next part`. Every
  thread, the caller included, claims parts by compare-and-swap on the ticket (a claim fails once the
  generation moved on), runs them, and counts them done; the caller waits until n are done. Parts are
  claimed, not assigned, so a job never waits for a worker that is asleep or descheduled: the caller runs
  what nobody took.
- An idle worker spins (with `pause`) for about SPIN_CYCLES timestamp-counter cycles, so the next kernel of a
  program finds it awake, and then sleeps on a futex that every publish bumps (and wakes, when a worker sleeps).
- The pool serves one job at a time. A second thread that calls while a job runs (two programs called from
  two threads) runs all its parts itself, in order: correct, only not parallel.
- Workers are Python daemon threads that enter the native worker loop once and never return (ctypes releases
  the GIL for them). A forked child starts a fresh pool for the programs it compiles; a program compiled
  before the fork still calls the parent's pool there, whose parts its caller then claims alone (serially).

Linux on x86-64 or AArch64 (the futex system call); elsewhere `egc_parallel` runs every part on the caller.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

import llvmlite.binding as llvm

SPIN_CYCLES = 200_000  # about 70 us at 3 GHz: an idle worker's spin before it sleeps
_FUTEX = {"x86_64": 202, "aarch64": 98}  # SYS_futex
_PAUSE = {"x86_64": "call void @llvm.x86.sse2.pause()", "aarch64": "call void @llvm.aarch64.hint(i32 1)"}
_PAUSE_DECL = {"x86_64": "declare void @llvm.x86.sse2.pause()", "aarch64": "declare void @llvm.aarch64.hint(i32)"}


def _ir(arch: str) -> str:
    futex, pause, pause_decl = _FUTEX[arch], _PAUSE[arch], _PAUSE_DECL[arch]
    return (
        _SERIAL
        + f"""
@ticket = internal global i64 0
@epoch = internal global i32 0
@sleepers = internal global i32 0
@busy = internal global i32 0
@fn = internal global ptr null
@ctx = internal global ptr null
@parts = internal global i64 0
@done = internal global i64 0

declare i64 @syscall(i64, ...)
{pause_decl}
declare i64 @llvm.readcyclecounter()

define internal void @drain(i64 %gen) {{
entry:
  br label %loop
loop:
  %t = load atomic i64, ptr @ticket acquire, align 8
  %g = lshr i64 %t, 32
  %same = icmp eq i64 %g, %gen
  br i1 %same, label %check, label %out
check:
  %k = and i64 %t, 4294967295
  %n = load i64, ptr @parts, align 8
  %more = icmp ult i64 %k, %n
  br i1 %more, label %claim, label %out
claim:
  %t1 = add i64 %t, 1
  %r = cmpxchg ptr @ticket, i64 %t, i64 %t1 acq_rel acquire
  %ok = extractvalue {{ i64, i1 }} %r, 1
  br i1 %ok, label %run, label %loop
run:
  %f = load ptr, ptr @fn, align 8
  %c = load ptr, ptr @ctx, align 8
  call void %f(ptr %c, i64 %k)
  %d = atomicrmw add ptr @done, i64 1 release
  br label %loop
out:
  ret void
}}

define void @egc_parallel(ptr %f, ptr %c, i64 %n) {{
entry:
  %free = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %free, 1
  br i1 %got, label %publish, label %alone
alone:
  call void @serial(ptr %f, ptr %c, i64 %n)
  ret void
publish:
  store ptr %f, ptr @fn, align 8
  store ptr %c, ptr @ctx, align 8
  store i64 %n, ptr @parts, align 8
  store i64 0, ptr @done, align 8
  %t = load i64, ptr @ticket, align 8
  %g = lshr i64 %t, 32
  %g1 = add i64 %g, 1
  %t1 = shl i64 %g1, 32
  store atomic i64 %t1, ptr @ticket seq_cst, align 8
  %e = atomicrmw add ptr @epoch, i32 1 seq_cst
  %s = load atomic i32, ptr @sleepers seq_cst, align 4
  %wake = icmp ne i32 %s, 0
  br i1 %wake, label %dowake, label %work
dowake:
  %w = call i64 (i64, ...) @syscall(i64 {futex}, ptr @epoch, i32 129, i32 2147483647)
  br label %work
work:
  call void @drain(i64 %g1)
  br label %wait
wait:
  %dn = load atomic i64, ptr @done acquire, align 8
  %fin = icmp uge i64 %dn, %n
  br i1 %fin, label %release, label %pause
pause:
  {pause}
  br label %wait
release:
  store atomic i32 0, ptr @busy release, align 4
  ret void
}}

define void @egc_worker(i64 %spin) {{
entry:
  %t0 = load atomic i64, ptr @ticket acquire, align 8
  %g0 = lshr i64 %t0, 32
  br label %idle
idle:
  %mine = phi i64 [%g0, %entry], [%g, %got], [%mine, %unsleep]
  %start = call i64 @llvm.readcyclecounter()
  br label %spinloop
spinloop:
  %t = load atomic i64, ptr @ticket acquire, align 8
  %g = lshr i64 %t, 32
  %new = icmp ne i64 %g, %mine
  br i1 %new, label %got, label %spinmore
got:
  call void @drain(i64 %g)
  br label %idle
spinmore:
  {pause}
  %now = call i64 @llvm.readcyclecounter()
  %el = sub i64 %now, %start
  %long = icmp ugt i64 %el, %spin
  br i1 %long, label %sleep, label %spinloop
sleep:
  %s0 = atomicrmw add ptr @sleepers, i32 1 seq_cst
  %e = load atomic i32, ptr @epoch seq_cst, align 4
  %t2 = load atomic i64, ptr @ticket seq_cst, align 8
  %g2 = lshr i64 %t2, 32
  %new2 = icmp ne i64 %g2, %mine
  br i1 %new2, label %unsleep, label %dowait
dowait:
  %r = call i64 (i64, ...) @syscall(i64 {futex}, ptr @epoch, i32 128, i32 %e, ptr null)
  br label %unsleep
unsleep:
  %s1 = atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %idle
}}
"""
    )


# every part on the calling thread, in order: where there is no pool, and for a caller that finds it busy
_SERIAL = """
define internal void @serial(ptr %f, ptr %c, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %body]
  %fin = icmp uge i64 %i, %n
  br i1 %fin, label %out, label %body
body:
  call void %f(ptr %c, i64 %i)
  %i1 = add i64 %i, 1
  br label %loop
out:
  ret void
}
"""
_SERIAL_ONLY = (
    _SERIAL
    + """
define void @egc_parallel(ptr %f, ptr %c, i64 %n) {
  call void @serial(ptr %f, ptr %c, i64 %n)
  ret void
}
"""
)


class _Pool:
    def __init__(self, workers: int) -> None:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        arch = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
        native = platform.system() == "Linux" and arch in _FUTEX and workers > 0
        if native:
            libc = ctypes.CDLL(None)
            llvm.add_symbol("syscall", ctypes.cast(libc.syscall, ctypes.c_void_p).value)
        mod = llvm.parse_assembly(_ir(arch) if native else _SERIAL_ONLY)
        mod.verify()
        tm = llvm.Target.from_default_triple().create_target_machine(opt=2, jit=True)
        self.engine = llvm.create_mcjit_compiler(mod, tm)  # kept: the code lives as long as the engine
        self.engine.finalize_object()
        self.address = self.engine.get_function_address("egc_parallel")
        self.workers = workers if native else 0
        if native:
            loop = ctypes.CFUNCTYPE(None, ctypes.c_int64)(self.engine.get_function_address("egc_worker"))
            self._loop = loop
            for i in range(workers):
                threading.Thread(target=loop, args=(SPIN_CYCLES,), name=f"egc-pool-{i}", daemon=True).start()


_LOCK = threading.Lock()
_POOL: _Pool | None = None


def parallel_address() -> int:
    """The address of `void egc_parallel(ptr task, ptr ctx, i64 n)`, starting the pool (cores - 1 workers) on the
    first call in this process."""
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = _Pool(max(0, (os.cpu_count() or 1) - 1))
        return _POOL.address


def workers() -> int:
    """How many worker threads the pool runs (0 before its first use, or where it runs every part serially)."""
    return _POOL.workers if _POOL is not None else 0


def _forget() -> None:  # in a forked child: the parent's workers do not exist here
    global _POOL
    if _POOL is not None:
        _RETIRED.append(_POOL)  # its code stays: drivers compiled before the fork still call it
    _POOL = None


_RETIRED: list[_Pool] = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
