"""Tree extraction: each e-class's node of the smallest expression written out.

The DAG extractor (extractor.py) prices what a kernel computes, a shared subterm once. A person reading
`simplify`'s result counts every use: `v + v + v` is the cheaper DAG, `v * 3` the smaller expression. Here the
size is the node count of the tree (a subterm counted at every use), ties broken by the model's cost of the
tree, then by the node's key. With positive sizes the chosen nodes never form a cycle: a class only takes a node
whose children are smaller than the class's result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from egraph_compiler.egraph.view import EGraphView, ENode, settle
from egraph_compiler.extract.extractor import EMPTY, Choice, Extraction, NodeCost, node_key


@dataclass
class TreeExtraction(Extraction):
    """An Extraction whose choices are the smallest trees; `cost` is a class's tree cost under the model and
    `dag_cost` what the chosen expression costs with shared subterms once (as the DAG extractor reports it)."""

    own: dict[int, float] = field(default_factory=dict)  # class -> its chosen node's own cost
    kids: dict[int, list[int]] = field(default_factory=dict)  # class -> its chosen node's children

    def dag_cost(self, roots: Iterable[int]) -> float:
        seen: dict[int, float] = {}
        stack = list(roots)
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen[c] = self.own[c]
            stack.extend(self.kids[c])
        return sum(seen.values())


def extract_tree(view: EGraphView, model: NodeCost, max_visits: int = 200) -> TreeExtraction:
    own_cost = {id(n): model.node_cost(n, view) for ns in view.nodes.values() for n in ns}
    options = {
        c: [(n, kids, own_cost[id(n)]) for n, kids in zip(nodes, view.kids[c]) if own_cost[id(n)] != math.inf]
        for c, nodes in view.nodes.items()
    }
    best: dict[int, tuple[int, float, tuple[str, str], ENode, list[int]]] = {}

    def choose(c: int) -> bool:
        cur = best.get(c)
        changed = False
        for n, kids, nc in options[c]:
            if any(k not in best for k in kids):
                continue
            cand = (1 + sum(best[k][0] for k in kids), nc + sum(best[k][1] for k in kids), node_key(n), n, kids)
            if cur is None or cand[:3] < cur[:3]:
                cur = best[c] = cand
                changed = True
        return changed

    settle(view, {c: [kids for _, kids, _ in opts] for c, opts in options.items()}, choose, max_visits)
    return TreeExtraction(
        view,
        {c: Choice(b[3], b[1], EMPTY) for c, b in best.items()},
        own={c: own_cost[id(b[3])] for c, b in best.items()},
        kids={c: b[4] for c, b in best.items()},
    )


__all__ = ["TreeExtraction", "extract_tree"]
