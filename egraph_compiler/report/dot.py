"""A picture of an e-graph: a truncated Graphviz DOT snapshot of an EGraphView.

Each drawn e-class is a dashed cluster holding its e-nodes; an edge goes from
an e-node to the e-class of each child. E-classes are taken breadth-first
from the roots, up to `max_classes`; the graph's label says how many were
left out. Small leaf classes (constants, i64 lists, range keys) are written
into their parent's label instead of being drawn, and a source list
(UCons/UNil chain) becomes numbered edges straight to the list's elements.

Given the extraction's choice (`chosen`: e-class -> e-node), the chosen e-nodes are drawn first in their
class, filled green with a bold border, and the walk from the roots follows them first: the picture is the
program that was picked, with the alternatives it was picked from around it.

`snapshot(...)` returns the DOT text with its counts; `attach_snapshot` puts
both into a Report (`extra["egraph_dot"]`, `extra["egraph_snapshot"]`, see
docs/REPORT_SCHEMA.md); `render_svg` runs Graphviz `dot -Tsvg` when present.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from egraph_compiler.egraph.view import ClassRef, EGraphView, ENode

INLINE_SORTS = {"Val", "IL", "RKey"}  # leaf sorts written into the parent's label
LIST_NODES = {"UCons", "UNil"}  # source lists, drawn as numbered edges
MAX_LABEL = 60


@dataclass
class EGraphSnapshot:
    dot: str
    classes_total: int  # e-classes in the view
    nodes_total: int  # e-nodes in the view
    classes_drawn: int  # e-classes drawn as clusters
    classes_inlined: int  # leaf/list e-classes folded into a parent's label or edges
    classes_omitted: int  # e-classes neither drawn nor inlined (beyond max_classes, or unreachable)
    nodes_drawn: int
    max_classes: int
    chosen_drawn: int = 0  # e-nodes of the chosen program among those drawn

    def info(self) -> dict[str, int]:
        """The counts, without the DOT text (JSON-able)."""
        d = asdict(self)
        d.pop("dot")
        return d


def _esc(s: str) -> str:
    s = s if len(s) <= MAX_LABEL else s[: MAX_LABEL - 1] + "…"
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


class _Drawer:
    def __init__(self, view: EGraphView, hide: set[str]) -> None:
        self.view = view
        self.hide = hide
        self._inline: dict[int, str | None] = {}
        self.inlined: set[int] = set()

    def visible_nodes(self, c: int) -> list[ENode]:
        return [n for n in self.view.nodes.get(c, []) if n.fn not in self.hide]

    def inline_text(self, c: int, depth: int = 0) -> str | None:
        """Short text for a leaf class (one e-node, leaf sort, leaf children), else None."""
        if c in self._inline:
            return self._inline[c]
        text: str | None = None
        nodes = self.view.nodes.get(c, [])
        if len(nodes) == 1 and self.view.sort_of.get(c) in INLINE_SORTS and depth < 64:
            n = nodes[0]
            parts = [self.arg_text(a, depth + 1) for a in n.args]
            if all(p is not None for p in parts):
                ps = [p for p in parts if p is not None]
                if n.fn in ("I", "F", "RK"):
                    text = ps[0]
                elif n.fn == "INil":
                    text = "[]"
                elif n.fn == "ICons":
                    rest = ps[1]
                    text = f"[{ps[0]}]" if rest == "[]" else f"[{ps[0]}, {rest[1:]}"
                else:
                    text = f"{n.fn}({', '.join(ps)})"
        self._inline[c] = text
        if text is not None:
            self.inlined.add(c)
        return text

    def arg_text(self, a: Any, depth: int = 0) -> str | None:
        if isinstance(a, ClassRef):
            return self.inline_text(a.id, depth)
        return a if isinstance(a, str) else repr(a)

    def list_items(self, c: int) -> list[int] | None:
        """Element classes of a source list with a single UCons/UNil chain, else None."""
        items: list[int] = []
        seen: set[int] = set()
        while c not in seen:
            seen.add(c)
            nodes = self.view.nodes.get(c, [])
            if len(nodes) != 1 or nodes[0].fn not in LIST_NODES:
                return None
            n = nodes[0]
            if n.fn == "UNil":
                self.inlined.update(seen)
                return items
            head, tail = n.args
            if not (isinstance(head, ClassRef) and isinstance(tail, ClassRef)):
                return None
            items.append(head.id)
            c = tail.id
        return None

    def node_parts(self, n: ENode) -> tuple[str, list[tuple[str, int]]]:
        """An e-node's label and its (edge label, child class) pairs."""
        label, edges = [n.fn], []
        k = 0
        for a in n.args:
            if isinstance(a, ClassRef):
                t = self.inline_text(a.id)
                if t is not None:
                    label.append(t)
                    continue
                items = self.list_items(a.id)
                for child in items if items is not None else [a.id]:
                    edges.append((str(k), child))
                    k += 1
            else:
                label.append(self.arg_text(a) or "")
        return " ".join(label), edges


def snapshot(
    view: EGraphView,
    roots: Iterable[int] | None = None,
    *,
    max_classes: int = 40,
    max_nodes_per_class: int = 8,
    hide: Iterable[str] = (),
    title: str = "e-graph",
    chosen: Callable[[int], ENode | None] | None = None,
    within: set[int] | None = None,
) -> EGraphSnapshot:
    """Draw at most `max_classes` e-classes, breadth-first from `roots` (default: the view's let-bound classes,
    else every class). E-nodes whose constructor is in `hide` (e.g. unextractable helpers) are not drawn.
    `chosen`: the e-node the program uses in a class (None where it uses none), highlighted and followed first.
    `within`: the e-classes that may be drawn (one kernel's, say); edges to others go to the "left out" note."""
    d = _Drawer(view, set(hide))
    pick = chosen or (lambda c: None)
    start = list(dict.fromkeys(roots if roots is not None else view.lets.values())) or sorted(view.nodes)
    root_set = set(start)
    order: list[int] = []
    queue, queued = deque(start), set(start)
    parts: dict[int, list[tuple[str, list[tuple[str, int]]]]] = {}
    picked: dict[int, int] = {}  # class -> position of its chosen e-node among those drawn
    reachable_beyond: set[int] = set()
    while queue:
        c = queue.popleft()
        if c in root_set or d.inline_text(c) is None:
            if len(order) >= max_classes or (within is not None and c not in within):
                reachable_beyond.add(c)
                continue
            order.append(c)
            # the chosen e-node, then leaves and small nodes first; only the e-nodes shown lead on to further classes
            mine = pick(c)
            ranked = sorted(((n != mine, d.node_parts(n)) for n in d.visible_nodes(c)), key=lambda p: (p[0], len(p[1][1])))
            parts[c] = [part for _, part in ranked]
            if ranked and not ranked[0][0]:
                picked[c] = 0
            for _, edges in parts[c][:max_nodes_per_class]:
                for _, child in edges:
                    if child not in queued:
                        queued.add(child)
                        queue.append(child)
    drawn = set(order)
    omitted = len(view.nodes) - len(drawn) - len(d.inlined - drawn)
    lines = [
        f"digraph {_quote(title)} {{",
        '  compound=true; rankdir=TB; newrank=true; fontname="Helvetica";',
        '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8, color="#555555"];',
    ]
    nodes_drawn = 0
    anchor: dict[int, str] = {}
    for c in order:
        ns = parts[c]
        shown = ns[:max_nodes_per_class]
        style = 'style="dashed,bold"; color="#c0392b"' if c in root_set else 'style=dashed; color="#7f8c8d"'
        lines.append(f'  subgraph cluster_c{c} {{ label="c{c} : {_esc(view.sort_of.get(c, "?"))}"; fontsize=9; {style};')
        if not shown:
            lines.append(f'    c{c}_0 [label="(hidden helper nodes)", shape=plaintext, style=""];')
        for i, (label, _) in enumerate(shown):
            mark = ', fillcolor="#c8ecd3", penwidth=2, color="#1e8449"' if picked.get(c) == i else ""
            lines.append(f'    c{c}_{i} [label="{_esc(label)}"{mark}];')
        if len(ns) > len(shown):
            lines.append(f'    c{c}_more [label="+{len(ns) - len(shown)} more e-nodes", shape=plaintext, style=""];')
        lines.append("  }")
        anchor[c] = f"c{c}_0"
        nodes_drawn += len(shown)
    beyond = False
    for c in order:
        for i, (_, edges) in enumerate(parts[c][:max_nodes_per_class]):
            for lab, child in edges:
                if child in anchor:  # (no lhead on an edge back into its own cluster: dot rejects it)
                    head = f"lhead=cluster_c{child}, " if child != c else ""
                    lines.append(f'  c{c}_{i} -> {anchor[child]} [{head}label="{lab}"];')
                else:
                    beyond = True
                    lines.append(f'  c{c}_{i} -> omitted [label="{lab}", style=dashed];')
    if beyond:
        lines.append(f'  omitted [label="… {omitted} e-classes left out", shape=note, fillcolor="#fdf2e9"];')
    caption = (
        f"{title}: {len(drawn)} of {len(view.nodes)} e-classes drawn ({len(d.inlined - drawn)} inlined as "
        f"constants/lists, {omitted} left out, limit {max_classes}); {view.num_nodes} e-nodes in all"
        + ("; green: the chosen program's e-nodes" if picked else "")
    )
    lines.append(f'  label="{_esc_long(caption)}"; labelloc=t; fontname="Helvetica"; fontsize=11;')
    lines.append("}")
    return EGraphSnapshot(
        "\n".join(lines) + "\n",
        len(view.nodes),
        view.num_nodes,
        len(drawn),
        len(d.inlined - drawn),
        omitted,
        nodes_drawn,
        max_classes,
        len(picked),
    )


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _esc_long(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def to_dot(view: EGraphView, **kw: Any) -> str:
    """Just the DOT text of `snapshot(view, **kw)`."""
    return snapshot(view, **kw).dot


def attach_snapshot(report: Any, view: EGraphView, **kw: Any) -> EGraphSnapshot:
    """Put a snapshot into `report.extra` as "egraph_dot" (text) and "egraph_snapshot" (counts)."""
    snap = snapshot(view, **kw)
    report.extra["egraph_dot"] = snap.dot
    report.extra["egraph_snapshot"] = snap.info()
    return snap


def dot_available() -> bool:
    return shutil.which("dot") is not None


def render_svg(dot_text: str, timeout: float = 30.0) -> tuple[str | None, str]:
    """SVG markup (XML prolog stripped, ready to inline in HTML) and a status message.

    Returns (None, why) when Graphviz is missing, times out or fails."""
    exe = shutil.which("dot")
    if exe is None:
        return None, "Graphviz 'dot' not found; e-graph picture omitted"
    try:
        proc = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"Graphviz 'dot' took longer than {timeout:g} s; e-graph picture omitted"
    except OSError as e:
        return None, f"Graphviz 'dot' could not run ({e}); e-graph picture omitted"
    start = proc.stdout.find("<svg")
    if proc.returncode != 0 or start < 0:
        err = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return None, f"Graphviz 'dot' failed ({err[0][:200]}); e-graph picture omitted"
    return proc.stdout[start:], "rendered by Graphviz dot"
