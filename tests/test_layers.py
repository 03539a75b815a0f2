"""The package's layers import one way: ir <- kernel/egraph <- rules <- extract <- driver <- frontend <- cli.

The import graph is read from the source (every `import`, at module level or inside a function; imports
under `if TYPE_CHECKING:` are annotations only and do not count) and each edge is checked against the layer
order below. Backends see the kernel contract and the IR only. A module may import its own layer and the
layers beneath it, never one above, and no modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "egraph_compiler"
# folders of the checkout that install as subpackages of egraph_compiler
FOLDERS = ("rules", "extract", "backends")

# layer -> the layers it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "ir": set(),
    "kernel": {"ir"},
    "egraph": {"ir"},
    "rules": {"ir", "egraph"},
    "extract": {"ir", "kernel", "egraph", "rules"},
    "backends": {"ir", "kernel"},
    "report": {"ir", "kernel", "egraph"},
    "driver": {"ir", "kernel", "egraph", "rules", "extract", "backends", "report"},
    "frontend": {"ir", "kernel", "driver"},
    "top": {"ir", "kernel", "egraph", "rules", "extract", "backends", "report", "driver", "frontend"},
}
DRIVER = {"optimize", "simplify", "late_simplify", "tuning", "compile_cache", "shape_sets"}
TOP = {"", "cli", "demo"}  # the package's __init__ (the public API), the CLI and the demo


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package as it installs."""
    found = {}
    for base, prefix in [(ROOT / PACKAGE, PACKAGE)] + [(ROOT / d, f"{PACKAGE}.{d}") for d in FOLDERS]:
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def layer(module: str) -> str:
    parts = module.split(".")[1:]
    head = parts[0] if parts else ""
    if head in ALLOWED:
        return head
    if head in DRIVER:
        return "driver"
    assert head in TOP, f"{module} belongs to no layer: add it to tests/test_layers.py"
    return "top"


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import the module can execute: blocks under `if TYPE_CHECKING:` (annotations only) are left out."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported project module, line) for every import in the file, resolved to the deepest known module
    (`from a.b import c` is a.b.c where c is a module, else a.b)."""
    out = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _runtime_imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t.startswith(PACKAGE + ".") and t != module:
                out.add((t, node.lineno))
    return sorted(out)


def import_graph() -> dict[str, list[str]]:
    known = modules()
    return {m: sorted({t for t, _ in imports(m, p, known)}) for m, p in known.items()}


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(graph[v]):
                work.append((v, i + 1))
                w = graph[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return found


def back_edges() -> list[str]:
    known = modules()
    bad = []
    for module, path in sorted(known.items()):
        mine = layer(module)
        for target, line in imports(module, path, known):
            theirs = layer(target)
            if theirs != mine and theirs not in ALLOWED[mine]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module} ({mine}) imports {target} ({theirs})")
    return sorted(set(bad))


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer(module)


def test_imports_point_down_the_layers() -> None:
    bad = back_edges()
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or through others (a type-only import does not count)."""
    found = cycles(import_graph())
    assert not found, f"import cycles: {found}"


def test_the_cycle_finder_sees_a_cycle() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_checker_sees_a_back_edge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: an IR module importing the driver is reported."""
    known = modules()
    fake = tmp_path / "fake.py"
    fake.write_text("def f():\n    from egraph_compiler.optimize import optimize\n")
    assert imports(f"{PACKAGE}.ir.fake", fake, known) == [(f"{PACKAGE}.optimize", 2)]
    assert layer(f"{PACKAGE}.optimize") not in ALLOWED[layer(f"{PACKAGE}.ir.fake")]
