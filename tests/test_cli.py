"""The `egc` command line: diagnostics instead of tracebacks, exit codes, run/check, dumps, reports, bench.

Most tests call `main(argv)` in-process. Those marked "end to end" use the real `optimize()`; the others
replace it with a small hand-built Program (`fake_optimize`) so the CLI's own logic is tested on its own.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from egraph_compiler import AxisType, Ops, UOp, cli
from egraph_compiler.backends.reference import ReferenceBackend
from egraph_compiler.egraph.report import IterationStats, Report
from egraph_compiler.frontend.frontend_ir import FrontendGraph
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.kernel.program import BufferSpec, Kernel, Program

ROOT = Path(__file__).resolve().parent.parent
GEMM = ROOT / "examples" / "gemm_bias_relu.json"
F32 = dtypes.float32

# y = relu(x + bias): small enough to hand-write its kernel
SMALL = {
    "signature": {"inputs": [{"tensor": "x"}, {"tensor": "bias"}], "outputs": [{"tensor": "y"}]},
    "tensors": {
        "x": {"dtype": "fp32", "shape": [4, 8]},
        "bias": {"dtype": "fp32", "shape": [8]},
        "t": {"dtype": "fp32", "shape": [4, 8]},
        "y": {"dtype": "fp32", "shape": [4, 8]},
    },
    "graph": [
        {"op": "Elementwise", "name": "add", "fn": "add", "inputs": ["x", "bias"], "outputs": ["t"]},
        {"op": "Elementwise", "name": "relu", "fn": "relu", "inputs": ["t"], "outputs": ["y"]},
    ],
}


def write_json(tmp_path: Path, doc: Any, name: str = "g.json") -> str:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


def egc(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_diagnostic(rc: int, err: str, code: str) -> None:
    assert rc == 2, err
    assert code in err and "suggestion:" in err and "at:" in err, err
    assert "Traceback" not in err


# ---- a stand-in for optimize(): one hand-written reference kernel for SMALL ------------------------------------------


def _buf(name: str, n: int) -> UOp:
    return UOp(Ops.BUFFER, F32, (), (name, (n,)))


def small_program(wrong: bool = False) -> Program:
    x, bias, y = _buf("x", 32), _buf("bias", 8), _buf("y", 32)
    i, j = UOp.range(4, "i", AxisType.LOOP), UOp.range(8, "j", AxisType.LOOP)

    def load(b: UOp, idx: UOp) -> UOp:
        return UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (b, idx)),))

    v = (load(x, i * 8 + j) + load(bias, j)).maximum(UOp.const(0.0, F32))
    if wrong:
        v = v + UOp.const(0.5, F32)
    st = UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (y, i * 8 + j)), v))
    ast = UOp.build(Ops.SINK, (UOp.build(Ops.END, (st, i, j)),))
    k = Kernel.from_ast("k0_add_relu", ast)
    k.cost = {"flops": 64.0, "bytes": 288.0, "total": 1.5e-9}
    report = Report(
        iterations=[
            IterationStats(0, "rangeify", 40, 20, 0.01, {"at-add": 2}),
            IterationStats(1, "rangeify", 55, 24, 0.02, {"at-buffer": 3}),
        ],
        rule_category={"at-add": "rangeify", "at-buffer": "rangeify"},
        rule_ruleset={"at-add": "rangeify", "at-buffer": "rangeify"},
        phases={"saturate": 0.03, "extract": 0.01},
        stop_reason="saturated",
        egraph_nodes=55,
        egraph_classes=24,
    )
    report.extra["kernels"] = [
        {
            "name": "k0_add_relu",
            "cost": k.cost,
            "alternatives": [{"description": "materialize t", "cost": {"total": 3e-9}}],
            "source": "// k0_add_relu\n...",
        }
    ]
    bufs = {
        "x": BufferSpec("x", F32, 32, "input", (4, 8)),
        "bias": BufferSpec("bias", F32, 8, "input", (8,)),
        "y": BufferSpec("y", F32, 32, "output", (4, 8)),
    }
    return Program([k], bufs, ["x", "bias"], ["y"], ReferenceBackend(), "reference", report)


class FakeOptimize:
    """Records its calls, reports progress, returns small_program() (wrong=True: a kernel that adds 0.5)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.wrong = False

    def __call__(self, graph: FrontendGraph, target: str = "llvm", **kw: Any) -> Program:
        self.calls.append({"graph": graph, "target": target, **kw})
        if kw.get("progress") is not None:
            for it in small_program().report.iterations:
                kw["progress"](it)
        return small_program(wrong=self.wrong)


@pytest.fixture
def fake_optimize(monkeypatch: pytest.MonkeyPatch) -> FakeOptimize:
    fake = FakeOptimize()
    monkeypatch.setattr(cli, "_optimize_fn", lambda: fake)
    return fake


# ---- help and argument errors -----------------------------------------------------------------------------------------


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = egc(capsys, "--help")
    subcommands = ("run", "optimize", "report", "rules", "onnx", "cache", "demo", "bench")
    assert rc == 0 and all(c in out for c in subcommands)
    for sub in subcommands:
        rc, out, _ = egc(capsys, sub, "--help")
        assert rc == 0 and "usage: egc " + sub in out


def test_console_script_help_and_diagnostic(tmp_path: Path) -> None:
    """The installed entry point: `python -m egraph_compiler.cli` behaves like `egc`."""
    ok = subprocess.run(
        [sys.executable, "-m", "egraph_compiler.cli", "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert ok.returncode == 0 and "usage: egc" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "egraph_compiler.cli", "run", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2 and "E1401" in bad.stderr and "Traceback" not in bad.stderr


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert egc(capsys)[0] == 2
    assert egc(capsys, "frobnicate")[0] == 2
    rc, _, err = egc(capsys, "run", str(GEMM), "--target", "tpu")
    assert rc == 2 and "invalid choice" in err
    rc, _, err = egc(capsys, "run", str(GEMM), "--node-limit", "-5")
    assert rc == 2 and "positive" in err and "Traceback" not in err
    for flag, value, words in (
        ("--seed", "-5", "seed"),
        ("--rtol", "nan", "tolerance"),
        ("--atol", "-1", "tolerance"),
        ("--atol", "inf", "tolerance"),
    ):
        rc, _, err = egc(capsys, "run", str(GEMM), flag, value)
        assert rc == 2 and words in err and "Traceback" not in err, (flag, value, err)


# ---- bad input files --------------------------------------------------------------------------------------------------


def _unknown_op() -> dict[str, Any]:
    doc = json.loads(json.dumps(SMALL))
    doc["graph"][1]["op"] = "Frobnicate"
    return doc


def _shape_mismatch() -> dict[str, Any]:
    doc = json.loads(json.dumps(SMALL))
    doc["tensors"]["bias"]["shape"] = [5]  # (4, 8) + (5,) does not broadcast
    return doc


def _declared_shape_mismatch() -> dict[str, Any]:
    doc = json.loads(json.dumps(SMALL))
    doc["tensors"]["y"]["shape"] = [8, 4]  # the node computes (4, 8)
    return doc


BAD_FILES = {
    "missing": (None, "E1401"),
    "invalid-json": ('{"signature": {"inputs": [}', "E1401"),
    "not-utf8": (b"\xff\xfe\x00garbage", "E1401"),
    "not-an-object": ("[1, 2, 3]", "E1401"),
    "unknown-op": (_unknown_op(), "E1101"),
    "broadcast-mismatch": (_shape_mismatch(), "E1001"),
    "declared-shape-mismatch": (_declared_shape_mismatch(), "E1304"),
}


@pytest.mark.parametrize("command", [["run", "--check"], ["optimize", "--dump=frontend"], ["report", "-o", "r.html"]])
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_give_diagnostics(
    case: str, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_optimize: FakeOptimize
) -> None:
    doc, code = BAD_FILES[case]
    if doc is None:
        path = str(tmp_path / "does_not_exist.json")
    elif isinstance(doc, bytes):
        (tmp_path / "g.json").write_bytes(doc)
        path = str(tmp_path / "g.json")
    else:
        path = write_json(tmp_path, doc)
    argv = [command[0], path, *command[1:]]
    if command[0] == "report":
        argv[-1] = str(tmp_path / "r.html")
    rc, _, err = egc(capsys, *argv)
    assert_diagnostic(rc, err, code)
    assert not fake_optimize.calls, "optimize() must not run on a bad file"


def test_unknown_dump_stage(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = egc(capsys, "optimize", str(GEMM), "--dump=frontend,bogus")
    assert_diagnostic(rc, err, "E1006")
    assert "bogus" in err


def test_frontend_and_uops_dumps_need_no_optimizer(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_optimize_fn", lambda: pytest.fail("optimize() should not be needed"))
    rc, out, err = egc(capsys, "optimize", str(GEMM), "--dump=frontend,uops")
    assert rc == 0, err
    assert "==== frontend" in out and "node   gemm: GEMM(A, B) -> C0" in out
    assert "==== uops" in out and "REDUCE" in out and "output C2:" in out


# ---- internal errors --------------------------------------------------------------------------------------------------


def test_internal_error_is_a_diagnostic_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("something broke deep inside")

    monkeypatch.setattr(cli, "_optimize_fn", lambda: boom)
    path = write_json(tmp_path, SMALL)
    rc, _, err = egc(capsys, "run", path)
    assert rc == 3 and "E9000 InternalError" in err and "something broke" in err and "--traceback" in err
    assert "Traceback" not in err
    rc, _, err = egc(capsys, "run", path, "--traceback")
    assert rc == 3 and "Traceback" in err and "E9000" in err


def test_compiler_error_from_optimize(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from egraph_compiler.ir.diagnostics import BackendUnavailable

    def no_gpu(*a: Any, **k: Any) -> Any:
        raise BackendUnavailable(at="target 'cuda'", why="no NVIDIA GPU", suggestion="use --target llvm")

    monkeypatch.setattr(cli, "_optimize_fn", lambda: no_gpu)
    rc, _, err = egc(capsys, "run", write_json(tmp_path, SMALL), "--target", "cuda")
    assert_diagnostic(rc, err, "E1601")


# ---- run / check / dumps / report with the stand-in optimizer ---------------------------------------------------------


def test_run_check_passes(capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_optimize: FakeOptimize) -> None:
    rc, out, err = egc(
        capsys,
        "run",
        write_json(tmp_path, SMALL),
        "--check",
        "--target",
        "reference",
        "--seed",
        "3",
        "--node-limit",
        "1000",
        "--iter-limit",
        "5",
        "--time-limit",
        "2.5",
        "--no-progress",
    )
    assert rc == 0, out + err
    assert "y: shape (4, 8) dtype float32 min" in out and "mean" in out
    assert "check y: ok: max abs err 0" in out and "check: PASS" in out
    call = fake_optimize.calls[0]
    assert call["target"] == "reference" and call["progress"] is None
    assert (call["node_limit"], call["iter_limit"], call["time_limit"]) == (1000, 5, 2.5)
    assert call["nolocals"] is False and call["tune"] is False


def test_nolocals_and_tune_reach_optimize(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_optimize: FakeOptimize
) -> None:
    rc, out, err = egc(
        capsys, "run", write_json(tmp_path, SMALL), "--target", "reference", "--nolocals", "--tune", "--no-progress"
    )
    assert rc == 0, out + err
    assert fake_optimize.calls[0]["nolocals"] is True and fake_optimize.calls[0]["tune"] is True


def test_run_check_mismatch_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_optimize: FakeOptimize) -> None:
    fake_optimize.wrong = True
    rc, out, _ = egc(capsys, "run", write_json(tmp_path, SMALL), "--check")
    assert rc == 1 and "MISMATCH" in out and "max abs err 0.5" in out and "check: FAIL" in out


def test_run_with_npz_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_optimize: FakeOptimize) -> None:
    path = write_json(tmp_path, SMALL)
    x = -np.ones((4, 8), np.float32)
    np.savez(tmp_path / "in.npz", x=x, bias=np.arange(8, dtype=np.float32))
    rc, out, err = egc(capsys, "run", path, "--inputs", str(tmp_path / "in.npz"), "--check")
    assert rc == 0, err
    assert "min 0 max 6 mean 2.625" in out  # relu(-1 + arange(8)) = 0,0,1,...,6
    np.savez(tmp_path / "short.npz", x=x)
    calls = len(fake_optimize.calls)
    rc, _, err = egc(capsys, "run", path, "--inputs", str(tmp_path / "short.npz"))
    assert_diagnostic(rc, err, "E1404")
    assert "bias" in err and len(fake_optimize.calls) == calls  # inputs are checked before optimizing
    (tmp_path / "junk.npz").write_text("not a zip")
    rc, _, err = egc(capsys, "run", path, "--inputs", str(tmp_path / "junk.npz"))
    assert_diagnostic(rc, err, "E1006")
    rc, _, err = egc(capsys, "run", path, "--inputs", str(tmp_path / "nope.npz"))
    assert_diagnostic(rc, err, "E1401")


def test_progress_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_optimize: FakeOptimize) -> None:
    rc, _, err = egc(capsys, "run", write_json(tmp_path, SMALL), "--progress")
    assert rc == 0
    lines = [ln for ln in err.splitlines() if ln.startswith("[egc] saturating")]
    assert len(lines) == 2 and "iteration 1 (rangeify), 55 nodes, 24 classes" in lines[1] and "elapsed" in lines[1]


def test_progress_rewrites_one_line_on_a_tty() -> None:
    import io

    buf = io.StringIO()
    p = cli.Progress(buf, tty=True)
    p(IterationStats(0, "s", 10, None, 0.0, {}))
    p(IterationStats(1, "s", 20, 5, 0.0, {"r": 1}))
    p.close()
    text = buf.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1


def test_optimize_dumps_all(capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_optimize: FakeOptimize) -> None:
    rc, out, err = egc(capsys, "optimize", write_json(tmp_path, SMALL), "--dump=all")
    assert rc == 0, err
    for stage in cli.DUMP_STAGES:
        assert f"==== {stage} " in out
    assert "stop: saturated" in out and "iteration  stage" in out  # egraph
    assert "-- kernel k0_add_relu" in out and "flops=64" in out and "rejected: materialize t" in out  # kernels
    assert "STORE" in out and "// k0_add_relu" in out  # kernel AST and source


def test_optimize_without_dump_prints_summary(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_optimize: FakeOptimize
) -> None:
    rc, out, _ = egc(capsys, "optimize", write_json(tmp_path, SMALL))
    assert rc == 0 and "1 kernel(s)" in out and "stop: saturated" in out


def test_report_writes_html_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_optimize: FakeOptimize) -> None:
    html_path, json_path = tmp_path / "r.html", tmp_path / "r.json"
    rc, _, err = egc(capsys, "report", write_json(tmp_path, SMALL), "-o", str(html_path), "--json", str(json_path))
    assert rc == 0, err
    page = html_path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "at-add" in page and "k0_add_relu" in page
    assert "materialize t" in page and "Frontend-IR" in page and "<svg" in page
    doc = json.loads(json_path.read_text())
    assert doc["schema_version"] >= 1 and doc["kernels"][0]["name"] == "k0_add_relu"
    rc, _, err = egc(capsys, "report", write_json(tmp_path, SMALL), "-o", str(tmp_path / "no" / "dir" / "r.html"))
    assert_diagnostic(rc, err, "E1006")


@pytest.mark.parametrize(
    ("degraded", "flags", "warned"),
    [
        ([], [], False),  # a stage stopping at its node budget under default limits: the search's normal bound
        ([], ["--node-limit", "5000"], True),  # a limit the user set stopped the search
        (["the fusion search stopped at its time budget (20 s)"], [], True),  # a limit made the program worse
    ],
)
def test_limit_warning(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    degraded: list[str],
    flags: list[str],
    warned: bool,
) -> None:
    def limited(*a: Any, **k: Any) -> Program:
        p = small_program()
        p.report.stop_reason = "node_limit"
        p.report.degraded = list(degraded)
        return p

    monkeypatch.setattr(cli, "_optimize_fn", lambda: limited)
    rc, _, err = egc(capsys, "run", write_json(tmp_path, SMALL), *flags)
    assert rc == 0 and ("W2001 LimitReached" in err) == warned
    if warned:
        assert (degraded[0] if degraded else "node limit") in err


def test_the_readme_example_runs_without_a_limit_warning(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command: its kernel stage stops at its node budget, as most do, and a larger one gives the
    same program; nothing there is worth a warning."""
    rc, out, err = egc(capsys, "run", str(GEMM))
    assert rc == 0 and "ran" in out and "W2001" not in err


# ---- bench ------------------------------------------------------------------------------------------------------------


def test_bench_dispatch(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "find_bench", lambda: None)
    rc, _, err = egc(capsys, "bench")
    assert_diagnostic(rc, err, "E1006")
    assert "bench/run.py" in err
    script = tmp_path / "run.py"
    script.write_text("import sys\nprint('bench args', sys.argv[1:])\nsys.exit(7)\n")
    monkeypatch.setattr(cli, "find_bench", lambda: script)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from egraph_compiler import cli; "
            f"cli.find_bench = lambda: __import__('pathlib').Path({str(script)!r}); "
            "sys.exit(cli.main(['bench', '--quick', '-k', 'gemm']))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 7 and "bench args ['--quick', '-k', 'gemm']" in proc.stdout


# ---- numerics of --check ---------------------------------------------------------------------------------------------


def test_compare() -> None:
    a = np.array([1.0, 2.0, np.nan, np.inf], np.float32)
    assert cli.compare(a, a)[0]
    ok, abs_err, _, _ = cli.compare(a + np.float32(5e-3), a)
    assert not ok and abs_err == pytest.approx(5e-3, rel=1e-3)
    assert cli.compare(np.array([1.0005]), np.array([1.0]))[0]
    assert not cli.compare(np.array([np.nan]), np.array([1.0]))[0]
    assert not cli.compare(np.array([-np.inf]), np.array([np.inf]))[0]
    assert not cli.compare(np.zeros(3), np.zeros(4))[0]
    assert cli.compare(np.array([1, 2], np.int32), np.array([1, 2], np.int64))[0]


# ---- end to end: these need the real optimize() (egraph_compiler/optimize.py) -----------------------------------------


def require_optimize() -> None:
    try:
        importlib.import_module("egraph_compiler.optimize").optimize  # noqa: B018
    except (ImportError, AttributeError) as e:
        pytest.fail(f"waiting on egraph_compiler.optimize.optimize(), which is not there yet: {e}")


def test_e2e_run_check_reference(capsys: pytest.CaptureFixture[str]) -> None:
    require_optimize()
    rc, out, err = egc(capsys, "run", str(GEMM), "--check", "--target", "reference")
    assert rc == 0, out + err
    assert "C2: shape (128, 64) dtype float16" in out and "check: PASS" in out
    assert "Traceback" not in err


def test_e2e_optimize_dump_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    require_optimize()
    rc, out, err = egc(capsys, "optimize", str(GEMM), "--dump=kernels,egraph", "--target", "reference")
    assert rc == 0, err
    assert "-- kernel " in out and "STORE" in out and "REDUCE" in out and "stop:" in out


def test_e2e_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    require_optimize()
    html_path, json_path = tmp_path / "r.html", tmp_path / "r.json"
    rc, _, err = egc(capsys, "report", str(GEMM), "-o", str(html_path), "--json", str(json_path), "--target", "reference")
    assert rc == 0, err
    page = html_path.read_text()
    assert "Rule firings" in page and "<svg" in page and "Chosen kernels" in page and "GEMM" in page
    doc = json.loads(json_path.read_text())
    assert doc["schema_version"] >= 1 and doc["rules"] and doc["iterations"]


def test_nest_difference_names_each_axis_kind_that_differs() -> None:
    from egraph_compiler.extract.schedule import nest_difference

    assert nest_difference("[16L 8u 2L 32u] red[256R]", "[2L 32u 16L 8u] red[256R]") == (
        "upcast 8x32 (chosen: 32x8); loops 16x2 (chosen: 2x16)"
    )
    assert nest_difference("[64L 256L] red[4r 64R]", "[64L 256L] red[256R]") == (
        "unroll 4 (chosen: none); reduce loops 64 (chosen: 256)"
    )
    assert nest_difference("[4L 8L]", "[8L 4L]") == "loops 4x8 (chosen: 8x4)"
    assert nest_difference("[8L]", "[8L]") == "the same loops in another order"


def test_dump_says_what_each_rejected_schedule_does_differently(capsys: pytest.CaptureFixture[str]) -> None:
    """A real optimize (no stand-in): every rejected loop nest the kernels dump lists comes with its estimate and
    what differs from the chosen nest."""
    example = Path(__file__).resolve().parent.parent / "examples" / "gemm_bias_relu.json"
    rc, out, err = egc(capsys, "optimize", str(example), "--dump", "kernels", "--no-progress")
    assert rc == 0, err
    rejected = [ln for ln in out.splitlines() if ln.strip().startswith("rejected:")]
    assert rejected and all("us estimated: " in ln and "(chosen: " in ln for ln in rejected), rejected
