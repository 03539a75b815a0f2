"""The HTML report and the e-graph DOT snapshot, from a real Report (simplify of a div/mod expression).

The page is checked for content here, and loaded in headless Chromium when one is installed (CI installs
it): no script errors, the inline script ran, the rule table is in the DOM.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from egraph_compiler import AxisType, Ops, UOp
from egraph_compiler.backends.reference import ReferenceBackend
from egraph_compiler.egraph.report import IterationStats, Report
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.kernel.program import BufferSpec, Kernel, Program
from egraph_compiler.report import dot as egraph_dot_mod
from egraph_compiler.report.dot import render_svg, snapshot
from egraph_compiler.report.html import render_html
from egraph_compiler.simplify import SimplifyResult, simplify

CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def simplified() -> SimplifyResult:
    x, y = UOp.variable("x", 0, 100), UOp.variable("y", 0, 3)
    e = ((x * 4 + y) // 4) * 4 + ((x * 4 + y) % 4) + y * 0
    return simplify(e, snapshot=True, patience=1_000, step_growth=100.0)  # run to saturation


@pytest.fixture(scope="module")
def page(simplified: SimplifyResult) -> str:
    return render_html(simplified.report, title="simplify <test>", input_graph_text="x*4+y & friends")


def tiny_program() -> Program:
    f32 = dtypes.float32
    x, y = UOp(Ops.BUFFER, f32, (), ("x", (8,))), UOp(Ops.BUFFER, f32, (), ("y", (8,)))
    i = UOp.range(8, "i", AxisType.LOOP)
    v = UOp.build(Ops.LOAD, (UOp.build(Ops.INDEX, (x, i)),)) * UOp.const(2.0, f32)
    ast = UOp.build(Ops.SINK, (UOp.build(Ops.END, (UOp.build(Ops.STORE, (UOp.build(Ops.INDEX, (y, i)), v)), i)),))
    k = Kernel.from_ast("k_double", ast)
    k.cost = {"flops": 8.0, "bytes": 64.0}
    report = Report(stop_reason="iter_limit", limits={"iter_limit": 3}, notes=["stage 'kernel' stopped at its limit"])
    report.extra["kernels"] = [
        {
            "name": "k_double",
            "cost": k.cost,
            "alternatives": [
                {"description": "x+x instead of x*2", "cost": {"total": 2.0}, "differs": "upcast 8 (chosen: none)"},
                {"description": "unroll by 4", "cost": 1.5},
            ],
        }
    ]
    bufs = {"x": BufferSpec("x", f32, 8, "input", (8,)), "y": BufferSpec("y", f32, 8, "output", (8,))}
    return Program([k], bufs, ["x"], ["y"], ReferenceBackend(), "reference", report)


# ---- content -----------------------------------------------------------------------------------------------------------


def test_page_shows_rules_charts_and_limits(simplified: SimplifyResult, page: str) -> None:
    rep = simplified.report
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<title>simplify &lt;test&gt;</title>" in page and "x*4+y &amp; friends" in page
    assert rep.fired_rules, "the expression should fire rules"
    for rule in rep.fired_rules[:10]:
        assert f"<td>{rule}</td>" in page
    assert '<table class="sortable rules">' in page
    assert page.count("<svg") >= 3  # rule bars, category bars, growth plot, phases
    assert "<polyline" in page and "e-nodes" in page and "e-classes" in page
    assert "Saturation stopped: <b>saturated</b>" in page and "node_limit" in page
    for phase in rep.phases:
        assert f"<td>{phase}</td>" in page
    assert page.count("<table") == page.count("</table>")
    assert page.count("<details") == page.count("</details>")
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', ""
    )  # self-contained: nothing fetched


def test_embedded_json_is_the_report(simplified: SimplifyResult, page: str) -> None:
    m = re.search(r'<script type="application/json" id="report-json">(.*?)</script>', page, re.S)
    assert m
    doc = json.loads(m.group(1))
    assert doc == json.loads(simplified.report.to_json())


def test_egraph_picture(simplified: SimplifyResult, page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    info = simplified.report.extra["egraph_snapshot"]
    assert info["classes_drawn"] <= info["max_classes"] and info["classes_total"] == simplified.report.egraph_classes
    assert "truncated" in page and f"{info['classes_omitted']} e-classes left out" in page
    assert "DOT source" in page and "digraph" in page
    if shutil.which("dot"):
        assert '<div class="egraph"><svg' in page
    monkeypatch.setattr(egraph_dot_mod.shutil, "which", lambda name: None)
    no_dot = render_html(simplified.report, title="t")
    assert "Graphviz &#x27;dot&#x27; not found; e-graph picture omitted" in no_dot
    assert '<div class="egraph">' not in no_dot and "digraph" in no_dot


def test_kernels_section_and_escaping() -> None:
    prog = tiny_program()
    prog.report.iterations = [IterationStats(0, "s", 5, 3, 0.001, {"<script>alert(1)</script>": 2})]
    page = render_html(prog.report, title="kernels", program=prog)
    assert "k_double" in page and "x+x instead of x*2" in page and "total=2" in page and "unroll by 4" in page
    assert "what differs from the chosen one" in page and "upcast 8 (chosen: none)" in page
    assert "flops" in page and "STORE" in page and "// k_double" in page  # AST and reference 'source'
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a limit was hit" in page and "stage &#x27;kernel&#x27; stopped" in page
    assert "This report has no e-graph snapshot" in page


def test_a_degraded_program_says_why_and_a_bounded_one_does_not() -> None:
    """The notes of `report.degraded` (a limit made the program worse) stand apart as a warning; a stage that stopped
    at its node budget alone only reports its stop reason."""
    prog = tiny_program()
    plain = render_html(prog.report, title="bounded", program=prog)
    assert "made this program worse" not in plain and "a limit was hit" in plain
    cut = "the fusion search stopped at its time budget (20 s); the best program found so far is used"
    prog.report.notes.append(cut)
    prog.report.degraded.append(cut)
    page = render_html(prog.report, title="degraded", program=prog)
    assert "made this program worse" in page and f'<li class="warn">{cut}</li>' in page
    assert f"<li>{cut}</li>" not in page  # not repeated among the other notes


def test_empty_report_renders() -> None:
    page = render_html(Report(), title="empty")
    assert "No saturation iterations recorded" in page and "No kernels in this report" in page


# ---- the DOT snapshot -------------------------------------------------------------------------------------------------


def test_snapshot_truncates_and_says_so() -> None:
    from egraph_compiler.egraph.session import Limits
    from egraph_compiler.simplify import SYMBOLIC_STAGE, shared_session, symbolic_session

    sess = shared_session("symbolic", symbolic_session)
    x = UOp.variable("x", 0, 100)
    e = (x * 4 + 3) // 4 + (x % 4)
    lim = Limits.make(iter_limit=3)
    with sess.scope([SYMBOLIC_STAGE], lim):
        sess.add([e])
        sess.saturate([SYMBOLIC_STAGE], lim, Report())
        view = sess.view()
        root = view.lets[sess.name_of(e)]
    small = snapshot(view, roots=[root], max_classes=3, hide=sess.unextractable)
    assert small.classes_drawn == 3 and small.classes_omitted > 0
    assert small.dot.count("subgraph cluster_") == 3
    assert f"… {small.classes_omitted} e-classes left out" in small.dot and "limit 3" in small.dot
    assert f"cluster_c{root}" in small.dot
    big = snapshot(view, roots=[root], max_classes=10_000, hide=sess.unextractable)
    assert big.classes_drawn + big.classes_inlined + big.classes_omitted == big.classes_total
    assert "DEFINE_VAR index x 0 100" in big.dot and "CONST index 4" in big.dot
    if shutil.which("dot"):
        svg, msg = render_svg(small.dot)
        assert svg is not None and svg.startswith("<svg"), msg
        assert render_svg("digraph { broken")[0] is None


def test_snapshot_highlights_the_chosen_program() -> None:
    """(x*4 + y) // 4 is x for y in [0, 3]: the root class's chosen e-node is the variable itself, drawn first and
    green, while the class's other e-nodes (the division it was rewritten from) stay plain."""
    x, y = UOp.variable("x", 0, 100), UOp.variable("y", 0, 3)
    r = simplify((x * 4 + y) // 4, snapshot=True, patience=1_000, step_growth=100.0)
    assert r.result is x
    dot = r.report.extra["egraph_dot"]
    root = dot[dot.index("subgraph cluster_") : dot.index("}", dot.index("subgraph cluster_"))]
    nodes = re.findall(r'\[label="([^"]*)"(, fillcolor="#c8ecd3")?', root)
    assert nodes[0] == ("DEFINE_VAR index x 0 100", ', fillcolor="#c8ecd3"'), nodes
    assert len(nodes) > 1 and not any(mark for _, mark in nodes[1:]) and any("IDIV" in n for n, _ in nodes)
    assert r.report.extra["egraph_snapshot"]["chosen_drawn"] == dot.count('fillcolor="#c8ecd3"')


def test_an_optimized_program_s_snapshot_marks_its_nodes() -> None:
    from egraph_compiler import Tensor, optimize

    prog = optimize(Tensor.empty(16, 8, name="a") @ Tensor.empty(8, 4, name="b"), target="reference", cache=False)
    dot, info = prog.report.extra["egraph_dot"], prog.report.extra["egraph_snapshot"]
    assert info["chosen_drawn"] == dot.count('fillcolor="#c8ecd3"') > 0
    assert "green: the chosen program's e-nodes" in dot
    assert re.search(r'\[label="SINK[^"]*", fillcolor="#c8ecd3"', dot)  # the kernel's root is among them


@pytest.mark.parametrize("provenance", [False, True])
def test_egglogs_serialization_reads_as_the_frozen_tables_do(monkeypatch: pytest.MonkeyPatch, provenance: bool) -> None:
    """Two independent readings of each e-graph optimize builds (a GEMM with softmax, with and without the rule
    stamps): egglog's own serialization (serialized_view) and its frozen tables (build_view) give the same e-nodes
    in every class, with the same sorts and lets."""
    from collections import Counter

    from egraph_compiler import Tensor, optimize
    from egraph_compiler.egraph import session
    from egraph_compiler.egraph.view import serialized_view

    compared: list[int] = []
    view_of = session.EGraphSession.view

    def both(self: session.EGraphSession, functions: tuple[str, ...] = ()) -> object:
        view = view_of(self, functions)
        other = serialized_view(self.eg, self.constructors, view)
        assert {c: Counter(ns) for c, ns in other.nodes.items()} == {c: Counter(ns) for c, ns in view.nodes.items()}
        assert other.sort_of == view.sort_of and other.lets == view.lets
        compared.append(view.num_nodes)
        return view

    monkeypatch.setattr(session.EGraphSession, "view", both)
    x, w = Tensor.empty(16, 32, name="x"), Tensor.empty(32, 8, name="w")
    optimize((x @ w).relu().softmax(-1), cache=False, provenance=provenance)
    assert compared and min(compared) > 1_000


def test_a_small_e_graphs_picture_is_drawn_from_egglogs_serialization() -> None:
    """Up to SERIALIZED_PICTURE_NODES e-nodes the pictures come from egglog's serialization, the chosen program's
    e-nodes still marked (they compare equal across the two readings), and the page says where it was read."""
    from egraph_compiler import Tensor, optimize

    prog = optimize(Tensor.empty(16, 8, name="a") @ Tensor.empty(8, 4, name="b"), target="reference", cache=False)
    info, dot = prog.report.extra["egraph_snapshot"], prog.report.extra["egraph_dot"]
    assert info["source"] == "egglog serialize" and info["chosen_drawn"] == dot.count('fillcolor="#c8ecd3"') > 0
    assert all(p["dot"].count('fillcolor="#c8ecd3"') > 0 for p in prog.report.extra["egraph_kernels"])
    assert "read from egglog's own serialization" in render_html(prog.report, title="t", program=prog)


def test_each_kernel_has_a_picture_of_its_own_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """h = relu(x @ w), read by two outputs, gets a buffer: three kernels. Each kernel's picture draws only the
    e-classes its program is made of, its own SINK (green) among them and no other kernel's, and the HTML page
    offers the whole program and every kernel."""
    from egraph_compiler import Tensor, optimize

    x, w, v = Tensor.empty(64, 32, name="x"), Tensor.empty(32, 16, name="w"), Tensor.empty(16, 8, name="v")
    h = (x @ w).relu()
    prog = optimize([h.sum(0), h @ v], target="reference", cache=False)
    pictures = prog.report.extra["egraph_kernels"]
    assert len(prog.kernels) == 3 and [p["kernel"] for p in pictures] == [k.name for k in prog.kernels]
    for pic, k in zip(pictures, prog.kernels):
        assert pic["writes"] == sorted(k.writes)
        assert pic["chosen_drawn"] == pic["classes_drawn"] > 0  # only e-classes the kernel's program is made of
        assert len(re.findall(r'\[label="SINK', pic["dot"])) == 1
        assert re.search(r'\[label="SINK[^"]*", fillcolor="#c8ecd3"', pic["dot"])
    page = render_html(prog.report, program=prog, render_egraph=False)
    assert 'id="egraph-pick"' in page and page.count("data-pic=") == 1 + len(pictures)
    assert all(f'<option value="{k.name}">kernel {k.name} (writes' in page for k in prog.kernels)
    monkeypatch.setattr(egraph_dot_mod.shutil, "which", lambda name: None)  # no Graphviz: said once, not per picture
    no_dot = render_html(prog.report, program=prog)
    assert no_dot.count("Graphviz &#x27;dot&#x27; not found") == 1 and no_dot.count("DOT source") == 1 + len(pictures)


# ---- headless Chromium ------------------------------------------------------------------------------------------------


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUMS) if p), None)


# clicks the rule table's "matches" header and records whether the rows came out in ascending order
SORT_PROBE = """<script>(function(){var t=document.querySelector('table.rules');t.querySelectorAll('th')[3].click();
var v=Array.prototype.map.call(t.tBodies[0].rows,function(r){return parseFloat(r.cells[3].getAttribute('data-v'));});
var ok=v.length>1&&v.every(function(x,i){return i===0||v[i-1]<=x;})&&v[0]<v[v.length-1];
document.documentElement.setAttribute('data-probe-sorted',ok?'asc':'no');})();</script>"""


@pytest.mark.skipif(_chromium() is None, reason="no Chromium on PATH (CI installs it: apt-get install chromium)")
def test_page_loads_in_headless_chromium(page: str, tmp_path: Path) -> None:
    html_file = tmp_path / "report.html"
    html_file.write_text(page.replace("</body>", SORT_PROBE + "</body>"), encoding="utf-8")
    exe = _chromium()
    assert exe is not None
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom",
        html_file.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    console = [ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    assert not console, "console messages:\n" + "\n".join(console)
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'data-report-ready="1"' in dom, "the inline script did not run to the end"
    assert '<table class="sortable rules">' in dom and "Rule firings" in dom
    assert "<polyline" in dom
    assert 'data-probe-sorted="asc"' in dom, "clicking the 'matches' header did not sort the rule table"
