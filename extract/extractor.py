"""DAG-aware greedy extraction over an EGraphView.

Each e-class gets the e-node whose whole sub-DAG is cheapest, counting a
shared sub-term once (unlike tree extraction, where a subterm used twice
is paid twice). Iterates to a fixed point; cycles are never chosen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from egraph_compiler.egraph.view import EGraphView, ENode, settle


class NodeCost(Protocol):
    def node_cost(self, n: ENode, view: EGraphView) -> float: ...


class Dag:
    """The classes of a chosen sub-DAG, each with the cost of its chosen node: disjoint layers, the first ones shared
    with the largest child's DAG (not copied), merged into one past MAX_LAYERS of them. A deep chain
    copies its DAG every MAX_LAYERS levels instead of at every level (copying was quadratic in depth)."""

    __slots__ = ("layers", "size")

    def __init__(self, layers: tuple[dict[int, float], ...]) -> None:
        if len(layers) > MAX_LAYERS:
            merged: dict[int, float] = {}
            for layer in layers:
                merged.update(layer)
            layers = (merged,)
        self.layers = layers
        self.size = sum(map(len, layers))

    def __contains__(self, c: int) -> bool:
        for layer in self.layers:  # noqa: SIM110 (a hot path: a loop, not any() over a generator)
            if c in layer:
                return True
        return False

    def __len__(self) -> int:
        return self.size

    def items(self) -> Iterator[tuple[int, float]]:
        for layer in self.layers:
            yield from layer.items()

    def missing_from(self, other: Dag) -> dict[int, float]:
        """The entries whose class `other` does not hold (a layer the two share holds none). Each difference walks
        the smaller side in C: the set left over, checked against each of the other's layers."""
        shared = {id(layer) for layer in other.layers}
        out: dict[int, float] = {}
        for layer in self.layers:
            if id(layer) in shared:
                continue
            keys = set(layer)
            for o in other.layers:
                keys = keys.difference(o)
                if not keys:
                    break
            for x in keys:
                out[x] = layer[x]
        return out


MAX_LAYERS = 8
EMPTY = Dag(())


@dataclass
class Choice:
    node: ENode
    cost: float  # total cost of the sub-DAG
    dag: Dag  # e-class -> cost of its chosen node, for every class in the sub-DAG


@dataclass
class Extraction:
    view: EGraphView
    best: dict[int, Choice]

    def node(self, c: int) -> ENode:
        return self.best[c].node

    def chosen(self, c: int) -> ENode | None:
        """The e-node chosen for class c, None where none is (unextractable)."""
        return self.best[c].node if c in self.best else None

    def cost(self, c: int) -> float:
        return self.best[c].cost if c in self.best else math.inf

    def dag_cost(self, roots: Iterable[int]) -> float:
        merged: dict[int, float] = {}
        for r in roots:
            merged.update(self.best[r].dag.items())
        return sum(merged.values())


def node_key(n: ENode) -> tuple[str, str]:
    return (n.fn, repr(n.args))


def extract(view: EGraphView, model: NodeCost, max_visits: int = 200, within: set[int] | None = None) -> Extraction:
    """Each class's node of the cheapest DAG, to a fixed point (`settle`: a class is evaluated once a node of it
    has a choice for every child, and again when a child's choice changed). `max_visits` bounds the evaluations
    per class (a guard: choices only change while costs drop); `within`: the classes to extract (closed under
    the extractable nodes' children; default every class)."""
    best: dict[int, Choice] = {}
    classes = {c: view.nodes[c] for c in (view.nodes if within is None else within) if c in view.nodes}
    own_cost = {id(n): model.node_cost(n, view) for ns in classes.values() for n in ns}
    kids_of = view.kids
    # the nodes each class can choose (most are unextractable helpers: skipped once here, not on every visit)
    options = {
        c: [(n, kids, own_cost[id(n)]) for n, kids in zip(nodes, kids_of[c]) if own_cost[id(n)] != math.inf]
        for c, nodes in classes.items()
    }
    kernels = {c for c, nodes in classes.items() if any(n.fn == "SINK" for n in nodes)}
    usable = {c: [kids for _, kids, _ in opts] for c, opts in options.items()}
    settle(view, usable, lambda c: _choose(c, options[c], best, kernels), max_visits)
    return Extraction(view, best)


def _choose(c: int, options: list[tuple[ENode, list[int], float]], best: dict[int, Choice], kernels: set[int]) -> bool:
    """Give class c its node of the cheapest DAG (ties: the smaller DAG, then the node's key) among `options`
    (node, its children, its own cost) whose children all have a choice and do not reach c (no cycles); True
    when c's choice changed."""
    cur = best.get(c)
    changed = False
    for n, kids, nc in options:
        if any(k not in best or k == c or c in best[k].dag for k in kids):
            continue
        below, base, extra = _children_dag(kids, best, kernels)
        total = below + nc
        size = len(base) + len(extra) + 1
        better = (
            cur is None
            or total < cur.cost - 1e-12
            or (
                abs(total - cur.cost) <= 1e-12
                and cur.node is not n
                and (size, node_key(n)) < (len(cur.dag), node_key(cur.node))
            )
        )
        if better:  # the union is built only for a better choice
            extra[c] = nc
            cur = Choice(n, total, Dag((*base.layers, extra)))
            best[c] = cur
            changed = True
    return changed


def _children_dag(kids: list[int], best: dict[int, Choice], kernels: set[int]) -> tuple[float, Dag, dict[int, float]]:
    """The cost of the children's DAG, as the largest child's DAG (`base`, shared, not copied) plus what the
    others add to it (`extra`): small into large, so a deep chain does not copy its whole DAG per candidate.
    Another kernel is one entry at its whole cost: what it computes is not shared with its readers."""
    inner = [k for k in kids if k not in kernels]
    big = (inner[0] if len(inner) == 1 else max(inner, key=lambda k: len(best[k].dag))) if inner else None
    base = best[big].dag if big is not None else EMPTY
    extra: dict[int, float] = {}
    for k in kids:
        if k in kernels:
            if k not in base:
                extra[k] = best[k].cost
        elif k != big:
            extra.update(best[k].dag.missing_from(base))
    return (best[big].cost if big is not None else 0.0) + sum(extra.values()), base, extra
