"""DAG-aware greedy extraction over an EGraphView.

Each e-class gets the e-node whose whole sub-DAG is cheapest, counting a
shared sub-term once (unlike tree extraction, where a subterm used twice
is paid twice). Iterates to a fixed point; cycles are never chosen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from egraph_compiler.extract.view import EGraphView, ENode


class NodeCost(Protocol):
    def node_cost(self, n: ENode, view: EGraphView) -> float: ...


@dataclass
class Choice:
    node: ENode
    cost: float                      # total cost of the sub-DAG
    dag: dict[int, float]            # e-class -> cost of its chosen node, for every class in the sub-DAG


@dataclass
class Extraction:
    view: EGraphView
    best: dict[int, Choice]

    def node(self, c: int) -> ENode:
        return self.best[c].node

    def cost(self, c: int) -> float:
        return self.best[c].cost if c in self.best else math.inf

    def dag_cost(self, roots: Iterable[int]) -> float:
        merged: dict[int, float] = {}
        for r in roots:
            merged.update(self.best[r].dag)
        return sum(merged.values())


def _key(n: ENode) -> tuple[str, str]:
    return (n.fn, repr(n.args))


def extract(view: EGraphView, model: NodeCost, max_passes: int = 200) -> Extraction:
    """Passes over all classes until no choice changes; a pass re-evaluates only classes a child of which
    changed (the others would choose the same)."""
    best: dict[int, Choice] = {}
    own_cost = {id(n): model.node_cost(n, view) for ns in view.nodes.values() for n in ns}
    kids_of: dict[int, list[list[int]]] = {}
    parents: dict[int, set[int]] = {}
    for c, nodes in view.nodes.items():
        kids_of[c] = [view.children(n) for n in nodes]
        for kids in kids_of[c]:
            for k in kids:
                parents.setdefault(k, set()).add(c)
    dirty = set(view.nodes)
    for _ in range(max_passes):
        changed = False
        for c, nodes in view.nodes.items():
            if c not in dirty:
                continue
            dirty.discard(c)
            cur = best.get(c)
            for n, kids in zip(nodes, kids_of[c]):
                nc = own_cost[id(n)]
                if nc == math.inf:
                    continue
                if any(k not in best or k == c or c in best[k].dag for k in kids):
                    continue
                dag: dict[int, float] = {}
                for k in kids:
                    dag.update(best[k].dag)
                dag[c] = nc
                total = sum(dag.values())
                better = cur is None or total < cur.cost - 1e-12 or (
                    abs(total - cur.cost) <= 1e-12 and cur.node is not n
                    and (len(dag), _key(n)) < (len(cur.dag), _key(cur.node)))
                if better:
                    cur = Choice(n, total, dag)
                    best[c] = cur
                    changed = True
                    dirty |= parents.get(c, set())
        if not changed:
            break
    return Extraction(view, best)
