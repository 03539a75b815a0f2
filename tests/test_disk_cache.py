"""The on-disk compile cache (egraph_compiler/kernel/disk_cache.py): a new process reuses the optimized program and its
kernels' machine code, gets the values numpy gives, and every change of graph, options, target or compiler
version misses; processes share one cache folder safely; the size limit holds; `egc cache` shows and empties it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from egraph_compiler import Tensor, compile_cache, optimize
from egraph_compiler.backends import llvm
from egraph_compiler.cli import main
from egraph_compiler.kernel import disk_cache

pytestmark = pytest.mark.compile_cache  # conftest gives each test a cache folder of its own

# optimize and run a program in a fresh process; prints what the caches did and the result's distance from numpy
CHILD = """
import json, sys
import numpy as np
from egraph_compiler import Tensor, optimize
from egraph_compiler.backends import llvm
scale = float(sys.argv[1])
a, b = Tensor.empty(48, 64, name="a"), Tensor.empty(64, 40, name="b")
prog = optimize(((a @ b) * scale).softmax(axis=1) + a.sum(axis=1, keepdim=True), target="llvm")
rng = np.random.default_rng(int(scale * 10))
av, bv = rng.standard_normal((48, 64), dtype=np.float32), rng.standard_normal((64, 40), dtype=np.float32)
z = (av @ bv) * scale
e = np.exp(z - z.max(1, keepdims=True))
want = e / e.sum(1, keepdims=True) + av.sum(1, keepdims=True)
got = prog(a=av, b=bv)
print(json.dumps({"err": float(np.abs(got - want).max()), "kernels": len(prog.kernels), **llvm.CACHE_STATS,
                  "loaded": any("disk cache" in n for n in prog.report.notes),
                  "egglog": "egglog.bindings" in sys.modules, "egglog_api": "egglog" in sys.modules,
                  "onnx": "egraph_compiler.frontend.onnx.importer" in sys.modules}))
"""


def _child(cache: Path, scale: float = 2.0) -> dict[str, object]:
    env = {**os.environ, "EGC_CACHE_DIR": str(cache), "EGC_DISK_CACHE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(scale)], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _graph(scale: float = 2.0) -> Tensor:
    a, b = Tensor.empty(16, 24, name="a"), Tensor.empty(24, 8, name="b")
    return ((a @ b) * scale).relu().sum(axis=1)


def test_a_new_process_skips_optimize_and_llvm(tmp_path: Path) -> None:
    cold = _child(tmp_path)
    assert not cold["loaded"] and cold["disk_hits"] == 0 and cold["err"] < 1e-4
    warm = _child(tmp_path)
    assert warm["loaded"] and warm["err"] < 1e-4
    assert warm["disk_hits"] == warm["kernels"]  # every kernel's machine code from disk
    assert warm["summary_hits"] == warm["kernels"] and cold["summary_hits"] == 0  # and none rendered to IR again
    assert warm["compiles"] <= 1  # only the program's driver (it holds this process's addresses) is compiled
    # nor is anything imported that only optimizing needs: egglog's bindings, the ONNX importer's modules; egglog's
    # Python API (0.4 s) is never imported (egraph/bindings.py)
    assert cold["egglog"] and not warm["egglog"] and not warm["onnx"] and not cold["egglog_api"]


def test_the_cache_tells_graphs_options_targets_and_versions_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    def fresh(**kw: object) -> object:
        compile_cache.clear()  # the in-memory cache would answer first
        return optimize(_graph(kw.pop("scale", 2.0)), **kw)  # type: ignore[arg-type]

    def loaded(prog: object) -> bool:
        return any("disk cache" in n for n in prog.report.notes)  # type: ignore[attr-defined]

    assert not loaded(fresh(target="llvm"))
    assert loaded(fresh(target="llvm"))
    assert not loaded(fresh(target="llvm", scale=3.0))  # another graph
    assert not loaded(fresh(target="llvm", search_time=0.5))  # other options
    assert not loaded(fresh(target="reference"))  # another target
    assert not loaded(fresh(target="llvm", cache=False))  # off for this call: no read ...
    monkeypatch.setattr(disk_cache, "_version", "another compiler")
    assert not loaded(fresh(target="llvm"))  # ... and any change to the compiler misses
    monkeypatch.setenv("EGC_DISK_CACHE", "0")
    assert not loaded(fresh(target="llvm"))


def test_a_loaded_program_and_its_loaded_machine_code_compute_numpys_values() -> None:
    a = np.random.default_rng(0).standard_normal((16, 24), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((24, 8), dtype=np.float32)
    want = np.maximum((a @ b) * 2.0, 0).sum(1)
    np.testing.assert_allclose(optimize(_graph(), target="llvm")(a=a, b=b), want, rtol=1e-5, atol=1e-5)
    compile_cache.clear()
    llvm.clear_cache()  # the machine code too must come from disk
    hits = llvm.CACHE_STATS["disk_hits"]
    prog = optimize(_graph(), target="llvm")
    np.testing.assert_allclose(prog(a=a, b=b), want, rtol=1e-5, atol=1e-5)
    assert llvm.CACHE_STATS["disk_hits"] == hits + len(prog.kernels)
    assert "define" in prog.backend.optimized_ir(prog.kernels[0], prog)  # the optimized IR is kept beside it


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "bool"])
def test_a_loaded_program_of_narrow_dtypes_computes_what_a_fresh_one_does(dtype: str) -> None:
    """Unpickled dtypes are the very instances the backends compare with `is` (a loaded float16 program failed to
    compile: its dtypes were copies)."""
    import pickle

    from egraph_compiler.ir.dtypes import ALL_DTYPES

    assert all(pickle.loads(pickle.dumps(d)) is d for d in ALL_DTYPES)
    x = Tensor.empty(6, dtype=dtype, name="x")
    graph = lambda: ((x.cast("float32") < 0.5).where(x.cast("float32"), 1.0).cast(dtype), x)
    value = (np.arange(6) % 2 == 0) if dtype == "bool" else np.array([7.5, -7.5, 0.25, 3, -1, 0.5])
    value = value.astype(np.float32 if dtype == "bfloat16" else dtype)  # bfloat16 inputs come as float32 values
    want = optimize(list(graph()), target="llvm")(x=value)[0]
    compile_cache.clear()
    llvm.clear_cache()
    prog = optimize(list(graph()), target="llvm")
    assert any("disk cache" in n for n in prog.report.notes)
    np.testing.assert_array_equal(np.asarray(prog(x=value)[0], np.float32), np.asarray(want, np.float32))


def test_processes_share_one_cache_folder(tmp_path: Path) -> None:
    """Four processes at once, two graphs between them: every result right, every entry whole."""
    env = {**os.environ, "EGC_CACHE_DIR": str(tmp_path), "EGC_DISK_CACHE": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(s)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for s in (2.0, 3.0, 2.0, 3.0)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        assert json.loads(out.strip().splitlines()[-1])["err"] < 1e-4
    assert not list(tmp_path.rglob(".tmp-*")), "no temporary file is left behind"
    assert _child(tmp_path, 3.0)["loaded"]


def test_a_damaged_entry_is_a_miss_and_goes(tmp_path: Path) -> None:
    optimize(_graph(), target="llvm")
    entries = list((disk_cache.directory() / "programs").glob("*.pkl"))
    assert len(entries) == 1
    entries[0].write_bytes(b"not a pickle")
    compile_cache.clear()
    prog = optimize(_graph(), target="llvm")
    assert not any("disk cache" in n for n in prog.report.notes)
    assert disk_cache.load("programs", entries[0].stem) is not None  # written again, whole


def test_the_size_limit_drops_the_least_recently_used(monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(6):
        disk_cache.store("objects", f"e{i}", bytes(1000))
        os.utime(disk_cache.directory() / "objects" / f"e{i}.pkl", (1_000_000 + i, 1_000_000 + i))
    disk_cache.load("objects", "e0")  # read: now the most recently used
    monkeypatch.setenv("EGC_CACHE_SIZE", "4K")  # a write past it trims to LOW_WATER (90%): three entries
    disk_cache.store("objects", "new", bytes(1000))
    left = sorted(p.stem for p in (disk_cache.directory() / "objects").glob("*.pkl"))
    assert left == ["e0", "e5", "new"], left
    monkeypatch.setenv("EGC_CACHE_SIZE", "lots")
    with pytest.raises(Exception, match="not a size"):
        disk_cache.size_limit()


def test_writes_list_the_folder_only_when_the_limit_may_be_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process lists the cache at its first write, then only when its own writes could pass the limit: the
    limit still holds over many writes, without one listing a write."""
    listings = 0
    entries = disk_cache._entries

    def counted() -> list[tuple[float, int, Path]]:
        nonlocal listings
        listings += 1
        return entries()

    monkeypatch.setattr(disk_cache, "_entries", counted)
    monkeypatch.setenv("EGC_CACHE_SIZE", "100K")
    for i in range(300):
        disk_cache.store("objects", f"w{i}", bytes(1000))
        held = sum(p.stat().st_size for p in (disk_cache.directory() / "objects").glob("*.pkl"))
        assert held <= 100 * 1024, (i, held)
    # the first write, then one each time the writes fill the tenth of the limit a trim leaves free
    assert 1 <= listings <= 300 // 8, listings


def test_egc_cache_info_and_clear(capsys: pytest.CaptureFixture[str]) -> None:
    optimize(_graph(), target="llvm")
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(disk_cache.directory()) in out and "programs: 1" in out
    assert main(["cache", "clear"]) == 0
    assert "removed" in capsys.readouterr().out
    assert disk_cache.info()["bytes"] == 0
