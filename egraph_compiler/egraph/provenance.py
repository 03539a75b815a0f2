"""Which rule built each e-node of the chosen program.

A session made with `provenance=True` stamps every op e-node a rule firing builds with the rule's name (egglog
tables `prov-OP`, keeping the first stamp; egraph/schema.py declares them, egraph/dsl.py adds the stamps to each
rule's actions) and the caller's own graph's e-nodes with INPUT. Here the stamps are read back from a view and the
program's e-nodes grouped by the rule that produced them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from egraph_compiler.egraph.schema import INPUT, PROVENANCE_PREFIX
from egraph_compiler.egraph.view import ClassRef, EGraphView, ENode

UNKNOWN = "(not stamped)"  # an e-node of no op table (a helper), or a view without stamps


def producer(view: EGraphView, node: ENode) -> str:
    """The rule whose firing first built `node` (INPUT: the caller's graph; UNKNOWN where it has no stamp)."""
    key = tuple(a.id if isinstance(a, ClassRef) else a for a in node.args)
    found = view.lookup(PROVENANCE_PREFIX + node.fn, *key)
    return found if isinstance(found, str) else UNKNOWN


def program_nodes(
    roots: Iterable[int], picked: Callable[[int], ENode | None], children: Callable[[ENode], list[int]]
) -> dict[int, ENode]:
    """The program's e-node in each e-class it reaches from `roots` (`picked`: its choice in a class, `children`:
    the classes an e-node's term goes on to)."""
    out: dict[int, ENode] = {}
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in out:
            continue
        n = picked(c)
        if n is None:
            continue
        out[c] = n
        stack.extend(children(n))
    return out


def by_producer(view: EGraphView, nodes: dict[int, ENode]) -> dict[str, list[int]]:
    """The e-classes of `nodes` grouped by the rule that built their e-node, most first (INPUT among them)."""
    groups: dict[str, list[int]] = {}
    for c, n in nodes.items():
        groups.setdefault(producer(view, n), []).append(c)
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))


__all__ = ["INPUT", "UNKNOWN", "by_producer", "producer", "program_nodes"]
