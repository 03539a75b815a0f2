"""bench/run.py end to end at --quick sizes: it runs, writes its JSON, and our outputs agree with numpy.

No timing is ever asserted: only that numbers were produced and results were correct.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "bench" / "run.py"
CHEAP = ["gemm_32", "mul_add", "sum"]
HAVE_TINYGRAD = importlib.util.find_spec("tinygrad") is not None
TINYGRAD_RUNS = HAVE_TINYGRAD and shutil.which("clang") is not None  # its CPU device compiles with clang


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--only", ",".join(CHEAP), "--repeat", "2", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.is_file(), f"no JSON written (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads(out.read_text())


def test_bench_runs_and_ours_is_correct(bench_json: tuple[subprocess.CompletedProcess[str], dict[str, Any]]) -> None:
    proc, doc = bench_json
    results = {r["name"]: r for r in doc["results"]}
    assert sorted(results) == sorted(CHEAP)
    for name, r in results.items():
        ours = r["ours"]
        assert ours["error"] is None, (name, ours["error"])
        assert ours["ok"] is True, (name, ours["check"])
        assert ours["median_ms"] is not None and ours["first_call_s"] is not None
        assert r["peers"]["numpy"]["median_ms"] is not None
        assert r["peers"]["numpy_1t"]["median_ms"] is not None
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "geomean speedup over tinygrad" in proc.stdout
    assert "copy bandwidth" in proc.stdout


def test_bench_tinygrad_peer(bench_json: tuple[subprocess.CompletedProcess[str], dict[str, Any]]) -> None:
    if not TINYGRAD_RUNS:
        pytest.skip("tinygrad is not installed (pip install -e '.[bench]'), or its CPU device lacks clang")
    _, doc = bench_json
    for r in doc["results"]:
        tg = r["peers"]["tinygrad"]
        assert tg["error"] is None, (r["name"], tg["error"])
        assert tg["median_ms"] is not None and tg["first_call_s"] is not None
        assert tg["ok"] is True, (r["name"], tg["check"])
        assert r["speedup"]["tinygrad"] is not None or not r["ours"]["ok"]


def test_bench_without_tinygrad_says_so(tmp_path: Path) -> None:
    """A Python path where `import tinygrad` finds nothing: the bench still runs, and says tinygrad is missing."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import importlib.abc, sys\n"
        "class _NoTinygrad(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tinygrad' or name.startswith('tinygrad.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _NoTinygrad())\n"
    )
    out = tmp_path / "b.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--only", "mul_add", "--repeat", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: ours was wrong, tested above
    assert "tinygrad was not installed" in proc.stdout
    doc = json.loads(out.read_text())
    (r,) = doc["results"]
    assert (
        doc["meta"]["tinygrad"] is None
        and "tinygrad" not in r["peers"]
        and r["speedup"] == {"numpy": r["speedup"]["numpy"], "numpy_1t": r["speedup"]["numpy_1t"]}
    )
    assert "geomean speedup over tinygrad" in proc.stdout and "n/a" in proc.stdout


def test_bench_list_and_bad_name() -> None:
    proc = subprocess.run([sys.executable, str(RUN), "--list"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "gemm_1024" in proc.stdout and "attention" in proc.stdout
    proc = subprocess.run([sys.executable, str(RUN), "--only", "nope"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "unknown benchmark" in proc.stderr


GPU_BENCH = ROOT / "bench" / "gpu.py"


def test_gpu_bench_compile_only_renders_compiles_and_estimates(tmp_path: Path) -> None:
    """Without a GPU, bench/gpu.py --compile-only optimizes for cuda, compiles the source with nvcc for sm_80 and
    sm_90 and reports the estimate (the GPU run itself is for a machine with one)."""
    from egraph_compiler.backends.cuda_toolchain import find_nvcc

    if find_nvcc() is None:
        pytest.skip("nvcc not found")
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(GPU_BENCH), "--quick", "--compile-only", "--only", "softmax,mul_add", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert [r["name"] for r in doc["results"]] == ["softmax", "mul_add"]
    for r in doc["results"]:
        assert r["error"] is None and r["ptx"] == {"sm_80": True, "sm_90": True}, r
        assert 0 < r["estimate_s"] < 1
    assert "sm_80 ok, sm_90 ok" in proc.stdout


def test_gpu_bench_without_a_gpu_says_what_to_do() -> None:
    proc = subprocess.run(
        [sys.executable, str(GPU_BENCH), "--quick", "--only", "nothing_matches"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "no program matches" in proc.stderr
    try:
        import cupy  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        proc = subprocess.run(
            [sys.executable, str(GPU_BENCH), "--quick", "--only", "sum"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 2 and "--compile-only" in proc.stderr, proc.stderr


def _run_kernels(*args: str) -> subprocess.CompletedProcess[str]:
    """bench/kernels.py with these arguments, two timed calls a contestant."""
    cmd = [sys.executable, str(ROOT / "bench" / "kernels.py"), *args, "--repeat", "2"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_kernel_bench_quick_runs_checks_and_names_its_machine(tmp_path: Path) -> None:
    """bench/kernels.py: a padded GEMM and a depthwise convolution, native and AVX2 code, checked against numpy
    (float64); the header names the machine model, and the peers are held to AVX2 when ours is; no timing is
    asserted."""
    from egraph_compiler.kernel.cpu_target import host_cpu

    out = tmp_path / "k.json"
    for cpu in ([], ["--cpu", "haswell"]) if host_cpu().isa in ("avx2", "avx512") else ([],):
        r = _run_kernels("--quick", "--only", "gemm_250,dw", "--json", str(out), *cpu)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "machine model:" in r.stdout and ("haswell" in r.stdout) == bool(cpu)
        report = json.loads(out.read_text())
        assert ("oneDNN AVX2 ISA" in report["peers"]) == (bool(cpu) and "torch not installed" not in report["peers"])
        rows = report["rows"]
        assert [x["name"] for x in rows] == ["gemm_250", "dw3x3_b1_c64_28"] and all(x["ok"] for x in rows)


def test_kernel_bench_extra_shapes_run_and_check(tmp_path: Path) -> None:
    """bench/kernels.py --extra: held-out-like shapes (here a 33-row GEMM and a grouped convolution) run and are
    checked against numpy; each summary line counts its own kind."""
    out = tmp_path / "k.json"
    r = _run_kernels("--extra", "--only", "x_gemm_33x511x129,x_g2conv", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(x["name"], x["kind"]) for x in rows] == [
        ("x_gemm_33x511x129", "gemm"),
        ("x_g2conv3x3_s1_b2_c64_28_to64", "conv"),
    ]
    assert all(x["ok"] for x in rows)
    assert "gemm: geomean" in r.stdout and "(1 shapes)" in r.stdout.split("gemm: geomean")[1].splitlines()[0]


def test_calibration_quick_runs_and_summarizes(tmp_path: Path) -> None:
    """bench/calibrate.py: every candidate of two small kernels timed, the estimate's pick and its regret
    printed; regrets are at least 1 by construction (no timing is asserted)."""
    out = tmp_path / "c.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "calibrate.py"), "--quick", "--limit", "3", "--repeat", "2", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "machine model:" in r.stdout and "geomean regret" in r.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {x["kernel"].split(":")[0] for x in rows} == {"gemm_64", "softmax_32x64"}
    assert all(x["regret"] >= 1.0 and 1 <= x["candidates"] <= 3 for x in rows)
