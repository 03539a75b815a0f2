"""`optimize(..., tune=True)`: time the cost model's top candidates on the device and keep the fastest.

Like tinygrad's BEAM, but the candidates are the schedules the e-graph holds
(extract/schedule.py ranks them). Each kernel is tuned with the others at
their chosen schedule, by running the whole program on random inputs. The
decision is cached on disk by the kernel's structure (its best-ranked
candidate's AST), the target and the machine, so tuning the same kernel again
times nothing. The cache lives in the disk cache's folder (disk_cache.directory(): $EGC_CACHE_DIR, default
~/.cache/egraph-compiler).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.egraph.view import ENode
from egraph_compiler.extract.schedule import KernelSchedule
from egraph_compiler.kernel import disk_cache
from egraph_compiler.kernel.program import Program

TOP_K = 4
REPEATS = 3


def cache_dir() -> Path:
    return disk_cache.directory()


def _key(ks: KernelSchedule, target: str) -> str:
    text = "\n".join(
        [target, platform.machine(), str(os.cpu_count()), ks.best.kernel.render(), *sorted(c.describe() for c in ks.ranked)]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _random_inputs(program: Program, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in program.inputs:
        spec = program.buffers[name]
        d = spec.dtype
        out[name] = (rng.integers(0, 8, spec.shape) if d.is_int else rng.random(spec.shape)).astype(
            np.float32 if d.name == "bfloat16" else d.np
        )
    return out


def time_program(program: Program, repeats: int = REPEATS) -> float:
    """Median seconds of a run (compiled first, one warm-up run)."""
    inputs = _random_inputs(program)
    program.compile()
    program(**inputs)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        program(**inputs)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def tune_schedules(
    schedules: dict[int, KernelSchedule],
    chosen: dict[int, ENode],
    target: str,
    assemble: Callable[[dict[int, ENode]], Program],
    report: Any,
    progress: Callable[[str], None] | None = None,
) -> dict[int, ENode]:
    """Pick each kernel's schedule by timing; returns the new choice (and records timings in the report)."""
    chosen = dict(chosen)
    store = cache_dir() / "schedules.json"
    cache = _read_cache(store, report)
    learned: dict[str, str] = {}
    log: list[dict[str, Any]] = []
    for ks in schedules.values():
        if len(ks.ranked) < 2:
            continue
        key = _key(ks, target)
        if key in cache and (hit := next((c for c in ks.ranked if c.describe() == cache[key]), None)):
            chosen.update(hit.choice)
            log.append({"kernel": ks.sink_class, "cached": True, "chosen": cache[key]})
            continue
        timings: list[tuple[float, int]] = []
        for i, cand in enumerate(ks.ranked[:TOP_K]):
            if progress is not None:
                progress(f"tuning: timing candidate {i + 1}/{min(TOP_K, len(ks.ranked))}: {cand.describe()}")
            timings.append((time_program(assemble({**chosen, **cand.choice})), i))
        best = ks.ranked[min(timings)[1]]
        chosen.update(best.choice)
        cache[key] = learned[key] = best.describe()
        log.append(
            {
                "kernel": ks.sink_class,
                "cached": False,
                "chosen": best.describe(),
                "timings": [
                    {"schedule": ks.ranked[i].describe(), "seconds": t, "estimate": ks.ranked[i].estimate.seconds}
                    for t, i in timings
                ],
            }
        )
    if learned:
        try:
            _merge_into_cache(store, learned, report)
        except OSError as e:  # a read-only home still tunes, it just does not remember
            report.notes.append(f"tuning cache not written: {e}")
    report.extra["tuning"] = log
    return chosen


def _read_cache(store: Path, report: Any) -> dict[str, str]:
    """The cached decisions; an unreadable or malformed file is said in the report and treated as empty."""
    if not store.is_file():
        return {}
    try:
        data = json.loads(store.read_text())
    except (OSError, ValueError) as e:
        report.notes.append(f"tuning cache {store} unreadable ({e}): ignored, and rewritten with new decisions")
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        report.notes.append(f"tuning cache {store} is not an object of schedule names: ignored, and rewritten")
        return {}
    return data


def _merge_into_cache(store: Path, learned: dict[str, str], report: Any) -> None:
    """Add this run's decisions to the file under an exclusive lock (another process tuning at the same time
    keeps its own), written to a temporary file and renamed into place (a reader never sees half a file)."""
    store.parent.mkdir(parents=True, exist_ok=True)
    with open(store.with_suffix(".lock"), "a") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # no fcntl (Windows): the rename still keeps the file whole
            pass
        merged = {**_read_cache(store, report), **learned}
        tmp = store.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged, indent=1))
        os.replace(tmp, store)
