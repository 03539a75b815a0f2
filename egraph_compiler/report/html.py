"""The optimization report as one self-contained HTML page.

No external JS, CSS, fonts or images: charts are inline SVG, the e-graph
picture is Graphviz's SVG inlined (when `dot` is on PATH), and a few lines of
inline JS make the tables sortable. The full report JSON is embedded as
`<script type="application/json" id="report-json">` for tools.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

from egraph_compiler.egraph.report import Report
from egraph_compiler.ir.uop import pretty
from egraph_compiler.report.dot import render_svg

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
MAX_BARS = 30

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1200px;
  padding:1em 2em;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f4f6f8}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:hover{background:#e6ebf0}
pre{background:#f7f7f9;border:1px solid #e1e1e8;padding:.6em;overflow:auto;max-height:32em;font-size:.85em}
.summary{display:flex;flex-wrap:wrap;gap:.6em;margin:.8em 0}
.card{border:1px solid #ddd;border-radius:6px;padding:.4em .8em;background:#fafbfc}
.card b{display:block;font-size:1.2em}.muted{color:#777}.warn{color:#a94442}
.egraph{overflow:auto;max-height:60em;border:1px solid #eee}
.scroll{max-height:30em;overflow:auto;display:inline-block}details{margin:.4em 0}summary{cursor:pointer}
details.kernel{border-left:3px solid #d0d7de;padding-left:.8em;margin:1em 0}
"""

# Click a header to sort its table (numbers numerically); marks the page ready when it has run.
JS = """
(function(){
  function key(td){var t=td.getAttribute('data-v');if(t===null)t=td.textContent;var n=parseFloat(t);
    return isNaN(n)?t.toLowerCase():n;}
  document.querySelectorAll('table.sortable').forEach(function(tbl){
    tbl.querySelectorAll('th').forEach(function(th,col){
      th.addEventListener('click',function(){
        var body=tbl.tBodies[0],rows=Array.prototype.slice.call(body.rows);
        var asc=th.getAttribute('data-dir')!=='asc';th.setAttribute('data-dir',asc?'asc':'desc');
        rows.sort(function(a,b){var x=key(a.cells[col]),y=key(b.cells[col]);
          if(typeof x!==typeof y){x=String(x);y=String(y);}return (x<y?-1:x>y?1:0)*(asc?1:-1);});
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
  });
  var pick=document.getElementById('egraph-pick');
  if(pick)pick.addEventListener('change',function(){
    document.querySelectorAll('[data-pic]').forEach(function(d){d.hidden=d.getAttribute('data-pic')!==pick.value;});
  });
  document.documentElement.setAttribute('data-report-ready','1');
})();
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.2f} s"


def _color(name: str, names: Sequence[str]) -> str:
    return PALETTE[list(names).index(name) % len(PALETTE)] if name in names else PALETTE[-1]


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, numeric: Sequence[int] = (), sortable: bool = False, cls: str = ""
) -> str:
    """rows of cell values; numeric columns are right-aligned and sort by value."""
    klass = " ".join(c for c in ("sortable" if sortable else "", cls) if c)
    out = [f'<table class="{klass}">' if klass else "<table>", "<thead><tr>"]
    out += [f'<th class="num">{_e(h)}</th>' if i in numeric else f"<th>{_e(h)}</th>" for i, h in enumerate(headers)]
    out.append("</tr></thead><tbody>")
    for r in rows:
        cells = []
        for i, v in enumerate(r):
            if i in numeric:
                cells.append(f'<td class="num" data-v="{_e(v)}">{_e(_fmt(v))}</td>')
            else:
                cells.append(f"<td>{_e(v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


# ---- inline SVG charts ---------------------------------------------------------------------------------------------


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= v:
            return m * mag
    return 10 * mag


def svg_bars(items: Sequence[tuple[str, float, str]], *, title: str, unit: str = "", width: int = 760) -> str:
    """Horizontal bar chart: (label, value, color) per bar."""
    if not items:
        return f'<p class="muted">{_e(title)}: nothing to show.</p>'
    label_w, bar_h, gap, top = 260, 16, 4, 22
    plot_w = width - label_w - 90
    vmax = max(v for _, v, _ in items) or 1.0
    height = top + len(items) * (bar_h + gap) + 6
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_e(title)}" font-family="sans-serif" font-size="11">',
        f'<text x="0" y="14" font-weight="bold">{_e(title)}</text>',
    ]
    for i, (label, v, color) in enumerate(items):
        y = top + i * (bar_h + gap)
        w = max(1.0, plot_w * v / vmax) if v > 0 else 0.0
        short = label if len(label) <= 40 else label[:39] + "…"
        out.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{_e(short)}<title>{_e(label)}</title></text>')
        out.append(
            f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}">'
            f"<title>{_e(label)}: {_e(_fmt(v))}{_e(unit)}</title></rect>"
        )
        out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 12}">{_e(_fmt(v))}{_e(unit)}</text>')
    out.append("</svg>")
    return "".join(out)


def svg_lines(
    series: dict[str, list[tuple[float, float]]],
    *,
    title: str,
    x_label: str,
    marks: Sequence[tuple[float, str]] = (),
    width: int = 760,
    height: int = 300,
) -> str:
    """Line plot of named series of (x, y) points; `marks` are labelled vertical lines (stage starts)."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return f'<p class="muted">{_e(title)}: no data.</p>'
    left, right, top, bottom = 64, 130, 28, 40
    pw, ph = width - left - right, height - top - bottom
    xmin, xmax = min(x for x, _ in pts), max(x for x, _ in pts)
    xmax = xmax if xmax > xmin else xmin + 1
    ymax = _nice_max(max(y for _, y in pts))

    def sx(x: float) -> float:
        return left + pw * (x - xmin) / (xmax - xmin)

    def sy(y: float) -> float:
        return top + ph * (1 - y / ymax)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_e(title)}" font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="16" font-weight="bold">{_e(title)}</text>',
    ]
    for k in range(5):  # y grid and ticks
        yv = ymax * k / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#eee"/>')
        tick = _fmt(int(yv) if yv == int(yv) else yv)
        out.append(f'<text x="{left - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end">{_e(tick)}</text>')
    n_xt = min(10, int(xmax - xmin) + 1)
    for k in range(n_xt):
        xv = xmin + (xmax - xmin) * k / max(1, n_xt - 1)
        out.append(f'<text x="{sx(xv):.1f}" y="{top + ph + 16}" text-anchor="middle">{round(xv)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}" stroke="#888"/>')
    out.append(f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="#888"/>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 6}" text-anchor="middle">{_e(x_label)}</text>')
    for x, label in marks:
        out.append(
            f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{top}" y2="{top + ph}" stroke="#bbb" '
            f'stroke-dasharray="4 3"/><text x="{sx(x) + 3:.1f}" y="{top + 10}" fill="#777">{_e(label)}</text>'
        )
    for i, (name, s) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        if s:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
            for x, y in s:
                out.append(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}">'
                    f"<title>{_e(name)} @ {round(x)}: {_e(_fmt(y))}</title></circle>"
                )
        ly = top + 12 + 18 * i
        out.append(
            f'<rect x="{left + pw + 14}" y="{ly - 9}" width="12" height="12" fill="{color}"/>'
            f'<text x="{left + pw + 30}" y="{ly + 1}">{_e(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


# ---- sections ------------------------------------------------------------------------------------------------------


def _summary(report: Report, program: Any) -> str:
    cards = [
        ("stop reason", report.stop_reason or "—"),
        ("iterations", len(report.iterations)),
        ("e-graph", f"{report.egraph_nodes} nodes / {report.egraph_classes} classes"),
        ("rules fired", f"{len(report.fired_rules)} of {len(report.rule_category) or len(report.rule_totals)}"),
    ]
    if report.cost_unit == "s" and report.cost_after is not None:
        before = f"{report.cost_before * 1e6:.1f} us → " if report.cost_before is not None else ""
        cards.append(("estimated time (baseline → chosen)", f"{before}{report.cost_after * 1e6:.1f} us"))
    elif report.cost_before is not None or report.cost_after is not None:
        cards.append(("cost (weighted ops)", f"{_fmt(report.cost_before)} → {_fmt(report.cost_after)}"))
    if report.phases:
        cards.append(("total time", _ms(sum(report.phases.values()))))
    if program is not None:
        cards.append(("kernels", f"{len(getattr(program, 'kernels', []))} for {getattr(program, 'target', '?')}"))
    return (
        '<div class="summary">'
        + "".join(f'<div class="card"><span class="muted">{_e(k)}</span><b>{_e(v)}</b></div>' for k, v in cards)
        + "</div>"
    )


def _stop_section(report: Report) -> str:
    out = ['<h2 id="stop">Stop reason and limits</h2>', f"<p>Saturation stopped: <b>{_e(report.stop_reason or 'unknown')}</b>"]
    if report.limit_hit:
        out.append(' <span class="warn">(a limit was hit: the result is the best program found so far)</span>')
    out.append("</p>")
    if report.degraded:
        out.append('<p class="warn">A limit made this program worse than the search would have found without it:</p>')
        out.append("<ul>" + "".join(f'<li class="warn">{_e(n)}</li>' for n in report.degraded) + "</ul>")
    if report.limits:
        out.append(_table(["limit", "value"], [(k, v) for k, v in report.limits.items()], numeric=(1,)))
    if notes := [n for n in report.notes if n not in report.degraded]:
        out.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    return "".join(out)


def _phase_section(report: Report) -> str:
    out = ['<h2 id="phases">Time per phase</h2>']
    if not report.phases:
        return out[0] + '<p class="muted">No phase times recorded.</p>'
    total = sum(report.phases.values()) or 1.0
    rows = [(k, round(v * 1e3, 3), round(100 * v / total, 1)) for k, v in report.phases.items()]
    out.append(_table(["phase", "ms", "%"], rows, numeric=(1, 2)))
    names = list(report.phases)
    out.append(
        svg_bars(
            [(k, round(v * 1e3, 2), _color(k, names)) for k, v in report.phases.items()], title="time per phase", unit=" ms"
        )
    )
    return "".join(out)


def _growth_section(report: Report) -> str:
    its = report.iterations
    out = ['<h2 id="growth">E-graph size per iteration</h2>']
    if not its:
        return out[0] + '<p class="muted">No saturation iterations recorded.</p>'
    nodes = [(float(it.index), float(it.nodes)) for it in its]
    classes = [(float(it.index), float(it.classes)) for it in its if it.classes is not None]
    marks, prev = [], None
    for it in its:
        if it.stage != prev:
            marks.append((float(it.index), it.stage))
            prev = it.stage
    out.append(
        svg_lines(
            {"e-nodes": nodes, "e-classes": classes},
            title="e-graph size",
            x_label="iteration",
            marks=marks if len(marks) > 1 else (),
        )
    )
    if len(classes) < len(nodes):
        out.append(
            '<p class="muted">E-classes are not counted on iterations where the e-graph was too large to count cheaply.</p>'
        )
    rows = []
    for it in its:
        top = sorted(it.matches.items(), key=lambda kv: -kv[1])[:3]
        rows.append(
            (
                it.index,
                it.stage,
                it.nodes,
                "" if it.classes is None else it.classes,
                round(it.seconds * 1e3, 2),
                sum(it.matches.values()),
                ", ".join(f"{r} ({m})" for r, m in top),
            )
        )
    out.append(f"<details><summary>Iterations table ({len(its)})</summary>")
    out.append(
        _table(
            ["iteration", "stage", "e-nodes", "e-classes", "ms", "matches", "top rules"],
            rows,
            numeric=(0, 2, 3, 4, 5),
            sortable=True,
        )
    )
    out.append("</details>")
    return "".join(out)


def _rules_section(report: Report) -> str:
    totals = report.rule_totals
    steps: dict[str, int] = {}
    for it in report.iterations:
        for r, m in it.matches.items():
            if m:
                steps[r] = steps.get(r, 0) + 1
    cats = sorted({report.rule_category.get(r, "") for r in totals} | set(report.rule_category.values()))
    out = [
        '<h2 id="rules">Rule firings</h2>',
        f"<p>{len([m for m in totals.values() if m])} rules matched, out of {len(report.rule_category)} registered. "
        "Matches are counted per saturation step (a match may or may not change the e-graph). "
        "Click a column header to sort.</p>",
    ]
    doc = report.rule_doc
    rows = [
        (r, report.rule_category.get(r, ""), report.rule_ruleset.get(r, ""), m, steps.get(r, 0), doc.get(r, ""))
        for r, m in totals.items()
        if m
    ]
    top = [(r, float(m), _color(report.rule_category.get(r, ""), cats)) for r, m in list(totals.items())[:MAX_BARS] if m]
    out.append(svg_bars(top, title=f"matches per rule (top {len(top)}, coloured by category)"))
    out.append(
        '<div class="scroll">'
        + _table(
            ["rule", "category", "ruleset", "matches", "steps fired", "what it does"],
            rows,
            numeric=(3, 4),
            sortable=True,
            cls="rules",
        )
        + "</div>"
    )
    cat_tot: dict[str, int] = {}
    for r, m in totals.items():
        c = report.rule_category.get(r, "")
        cat_tot[c] = cat_tot.get(c, 0) + m
    if cat_tot:
        out.append(
            svg_bars(
                [(c or "(none)", float(m), _color(c, cats)) for c, m in sorted(cat_tot.items(), key=lambda kv: -kv[1])],
                title="matches per category",
            )
        )
    never = sorted(r for r in report.rule_category if not totals.get(r))
    if never:
        out.append(f"<details><summary>Rules that never matched ({len(never)})</summary>")
        out.append(
            _table(
                ["rule", "category", "ruleset", "what it does"],
                [(r, report.rule_category.get(r, ""), report.rule_ruleset.get(r, ""), doc.get(r, "")) for r in never],
                sortable=True,
            )
        )
        out.append("</details>")
    return "".join(out)


def _cost_cell(c: Any) -> str:
    if isinstance(c, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in c.items())
    return _fmt(c)


def _kernel_entries(report: Report, program: Any) -> list[dict[str, Any]]:
    """Kernels from report.extra["kernels"], completed from the Program (AST, reads/writes, source)."""
    extra = {k.get("name"): dict(k) for k in report.extra.get("kernels", []) if isinstance(k, dict)}
    entries: list[dict[str, Any]] = []
    for k in getattr(program, "kernels", None) or []:
        e = extra.pop(k.name, {"name": k.name})
        e.setdefault("cost", dict(k.cost))
        e["reads"], e["writes"] = list(k.reads), list(k.writes)
        try:
            e["ast"] = pretty(k.ast, max_lines=200)
        except Exception as err:  # a broken AST must not break the page
            e["ast"] = f"(cannot print the AST: {err})"
        if "source" not in e:
            try:
                e["source"] = program.backend.render(k, program)
            except Exception as err:
                e["source"] = f"(cannot render the source: {err})"
        entries.append(e)
    return entries + list(extra.values())


def _kernels_section(report: Report, program: Any) -> str:
    entries = _kernel_entries(report, program)
    out = ['<h2 id="kernels">Chosen kernels</h2>']
    if not entries:
        return out[0] + '<p class="muted">No kernels in this report (a scalar simplification has none).</p>'
    if program is not None:
        out.append(
            f"<p>Target <b>{_e(getattr(program, 'target', '?'))}</b>; inputs {_e(getattr(program, 'inputs', []))}, "
            f"outputs {_e(getattr(program, 'outputs', []))}.</p>"
        )
    for e in entries:
        out.append(f'<details class="kernel" open><summary><b>{_e(e.get("name", "?"))}</b>')
        if e.get("reads") is not None:
            out.append(f' <span class="muted">reads {_e(e["reads"])} writes {_e(e["writes"])}</span>')
        out.append("</summary>")
        cost = e.get("cost")
        if isinstance(cost, dict) and cost:
            out.append("<p>Cost breakdown:</p>" + _table(["term", "value"], list(cost.items()), numeric=(1,)))
        elif cost is not None:
            out.append(f"<p>Cost: {_e(_fmt(cost))}</p>")
        alts = e.get("alternatives") or []
        if alts:
            rows = [
                (
                    a.get("description", "?") if isinstance(a, dict) else str(a),
                    a.get("differs", "") if isinstance(a, dict) else "",
                    _cost_cell(a.get("cost")) if isinstance(a, dict) else "",
                )
                for a in alts
            ]
            table = _table(["alternative", "what differs from the chosen one", "cost"], rows)
            out.append(f"<p>Rejected alternatives ({len(alts)}):</p>" + table)
        if e.get("ast"):
            out.append(f"<details><summary>Kernel AST</summary><pre>{_e(e['ast'])}</pre></details>")
        if e.get("source"):
            out.append(f"<details open><summary>Source</summary><pre>{_e(e['source'])}</pre></details>")
        out.append("</details>")
    return "".join(out)


def _egraph_section(report: Report, render: bool) -> str:
    out = ['<h2 id="egraph">E-graph picture</h2>']
    dot = report.extra.get("egraph_dot")
    if not dot:
        return out[0] + '<p class="muted">This report has no e-graph snapshot.</p>'
    info = report.extra.get("egraph_snapshot") or {}
    if info:
        trunc = info.get("classes_omitted", 0)
        out.append(
            f"<p>{info.get('classes_drawn', '?')} of {info.get('classes_total', '?')} e-classes drawn"
            + (
                f" — <b>truncated</b>: {trunc} e-classes left out (limit {info.get('max_classes', '?')}); "
                f"{info.get('classes_inlined', 0)} small constant/list classes are written into their parents"
                if trunc
                else ""
            )
            + (
                "; read from egglog's own serialization of the e-graph (EGraph.serialize)"
                if info.get("source") == "egglog serialize"
                else ""
            )
            + ".</p>"
        )
    pictures = (
        [("all", "the whole program", dot)]
        + [
            (p["kernel"], f"kernel {p['kernel']} (writes {', '.join(p['writes'])})", p["dot"])
            for p in report.extra.get("egraph_kernels") or []
        ]
        + [
            (f"rule:{p['rule']}", f"rule {p['rule']} (built {p['nodes']} of the program's e-nodes)", p["dot"])
            for p in report.extra.get("egraph_rules") or []
        ]
    )
    if prov := report.extra.get("provenance"):  # optimize(provenance=True)
        out.append(
            f"<p>The program's {prov['nodes']} op e-nodes by the rule whose firing built them (input: the caller's "
            "graph); the rules with most have a picture of their e-classes below.</p>"
        )
        rows = [
            (r["rule"], r["category"], r["nodes"], ", ".join(f"{o} {n}" for o, n in r["ops"].items()), ", ".join(r["kernels"]))
            for r in prov["rules"]
        ]
        out.append(_table(["rule", "category", "e-nodes", "ops", "kernels"], rows, numeric=(2,), sortable=True))
    if len(pictures) > 1:  # one picture per kernel (and rule) too: its e-classes only, chosen e-nodes green
        options = "".join(f'<option value="{_e(key)}">{_e(label)}</option>' for key, label, _ in pictures)
        out.append(f'<p><label>show: <select id="egraph-pick">{options}</select></label></p>')
    drawn = [render_svg(text) if render else (None, "picture not rendered (disabled)") for _, _, text in pictures]
    failures = {msg for svg, msg in drawn if svg is None}
    said_once = len(failures) == 1 and all(svg is None for svg, _ in drawn)  # Graphviz missing: say it once
    if said_once:
        out.append(f'<p class="warn">{_e(failures.pop())}</p>')
    for i, ((key, _, text), (svg, msg)) in enumerate(zip(pictures, drawn)):
        body = f'<div class="egraph">{svg}</div>' if svg is not None else "" if said_once else f'<p class="warn">{_e(msg)}</p>'
        body += f"<details><summary>DOT source</summary><pre>{_e(text)}</pre></details>"
        out.append(f'<div data-pic="{_e(key)}"{" hidden" if i else ""}>{body}</div>')
    return "".join(out)


def _json_blob(report: Report) -> str:
    try:
        text = report.to_json(indent=None)
    except Exception as err:  # unserialisable extras: say so rather than fail the page
        text = json.dumps({"error": f"report.to_json() failed: {err}"})
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(
    report: Report,
    *,
    title: str = "egraph-compiler report",
    input_graph_text: str | None = None,
    program: Any = None,
    render_egraph: bool = True,
) -> str:
    """One self-contained HTML page for `report` (and the Program it belongs to, if given)."""
    graph_text = input_graph_text if input_graph_text is not None else report.extra.get("input_graph")
    nav = " · ".join(
        f'<a href="#{a}">{t}</a>'
        for a, t in (
            ("input", "input graph"),
            ("rules", "rules"),
            ("growth", "e-graph size"),
            ("phases", "phases"),
            ("stop", "stop reason"),
            ("kernels", "kernels"),
            ("egraph", "e-graph picture"),
        )
    )
    body = [
        f"<h1>{_e(title)}</h1>",
        f"<nav>{nav}</nav>",
        _summary(report, program),
        '<h2 id="input">Input graph</h2>',
        f"<pre>{_e(graph_text)}</pre>" if graph_text else '<p class="muted">Not recorded.</p>',
        _rules_section(report),
        _growth_section(report),
        _phase_section(report),
        _stop_section(report),
        _kernels_section(report, program),
        _egraph_section(report, render_egraph),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(body)
        + f'\n<script type="application/json" id="report-json">{_json_blob(report)}</script>'
        f"\n<script>{JS}</script>\n</body></html>\n"
    )


__all__ = ["render_html", "svg_bars", "svg_lines"]
