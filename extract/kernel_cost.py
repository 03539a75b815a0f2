"""Costs of kernel programs in the e-graph: work weighted by how often it runs.

A value inside a loop nest runs once per iteration of the ranges it depends
on (renderers hoist it to the outermost loop where its ranges are bound), so
an e-node costs `op cost x trip count of its e-class`, where the trip count
is the product of the bounds of the class's free ranges: the RANGEs it
mentions minus those a REDUCE or END binds. Each class takes the smallest
footprint any of its e-nodes gives (`r*0` depends on no range).

Memory traffic is charged per element loaded or stored (bytes x a bandwidth
weight) and every kernel pays a launch/sync overhead, so inlining a value
that is used in many places competes with materializing it once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from egraph_compiler.egraph.schema import EGG_TO_OP
from egraph_compiler.egraph.view import EGraphView, ENode, chosen_nodes, settle
from egraph_compiler.extract.cost import OP_COSTS
from egraph_compiler.ir.dtypes import to_dtype
from egraph_compiler.ir.ops import OP_TABLE, Category, Ops

INF = math.inf
# a load of a buffer the fusion search decides about (not a barrier): the first extraction takes every value inline
# where the e-graph offers it, and such a load only where it offers nothing else (a REDUCE read inside another
# reduction's loop, see rules/rangeify.py `at-reduce`): those buffers are then always materialized (`forced_loads`)
UNDECIDED_LOAD = 1e12
Footprint = frozenset[int]
EMPTY: Footprint = frozenset()


@dataclass
class CPUParams:
    """Machine figures the cost model uses (cost unit: one scalar add)."""

    kernel_overhead: float = 20_000.0  # launch + thread-pool sync, in adds
    byte_cost: float = 0.5  # per byte loaded or stored
    store_extra: float = 1.0  # a store also costs a read-for-ownership


def ulist(view: EGraphView, c: int) -> list[int]:
    """The element classes of the source-list class c (its first UCons chain)."""
    out: list[int] = []
    while True:
        ns = [n for n in view.nodes.get(c, []) if n.fn in ("UCons", "UNil")]
        if not ns or ns[0].fn == "UNil":
            return out
        out.append(ns[0].args[0].id)
        c = ns[0].args[1].id


def _buffer_name(view: EGraphView, after: ENode) -> str | None:
    """The name of the buffer an AFTER(buffer, kernel) node orders."""
    head = ulist(view, after.args[-1].id)
    return next((str(n.args[1]) for n in view.nodes.get(head[0], []) if n.fn == "BUFFER"), None) if head else None


def forced_loads(view: EGraphView, chosen: Callable[[int], ENode | None], roots: list[int], barriers: set[str]) -> set[str]:
    """The buffers other than `barriers` that the program under `chosen` (class -> node) loads: with
    KernelCost(loads_from=barriers), those the e-graph offers no inline alternative for somewhere."""
    names = (_buffer_name(view, n) for _, n in chosen_nodes(view, roots, chosen) if n.fn == "AFTER")
    return {name for name in names if name is not None and name not in barriers}


def range_bounds(view: EGraphView) -> dict[int, int]:
    """RANGE e-class -> its trip count."""
    out: dict[int, int] = {}
    for c, ns in view.nodes.items():
        for n in ns:
            if n.fn == "RANGE":
                bound = n.args[-1]
                for k in view.nodes.get(bound.id, []):
                    if k.fn == "CONST":
                        val = view.nodes[k.args[1].id][0]
                        out[c] = max(1, int(val.args[0]))
    return out


def footprints(
    view: EGraphView,
    bounds: dict[int, int],
    unextractable: set[str] | frozenset[str] = frozenset(),
    max_visits: int = 64,
    within: set[int] | None = None,
) -> dict[int, Footprint]:
    """Free ranges of every class (smallest trip product over its extractable nodes), to a fixed point (`settle`:
    a class is evaluated once a node of it has a footprint for every child, and again when a child's changed). A
    node that contains its own class (`r + 0` in a RANGE's class) can never be extracted and says nothing about
    the class's ranges, and neither does an unextractable helper: both are skipped. `within`: the classes to
    analyse (closed under the extractable nodes' children; default every class)."""
    fp: dict[int, Footprint] = {}
    trips: dict[Footprint, int] = {}

    def trip(f: Footprint) -> int:
        if f not in trips:
            trips[f] = math.prod(bounds.get(r, 1) for r in f)
        return trips[f]

    binds: dict[int, frozenset[int]] = {}  # range-list class -> the ranges it binds
    bound_by: dict[int, frozenset[int]] = {}
    kids_of: dict[int, list[list[int] | None]] = {}
    for c in view.nodes if within is None else within:
        ns = view.nodes.get(c, [])
        kids_of[c] = []
        for n, children in zip(ns, view.kids.get(c, [])):
            if n.fn in ("REDUCE", "END"):  # many binders share one list of ranges
                ranges = n.args[-1].id
                if ranges not in binds:
                    binds[ranges] = frozenset(ulist(view, ranges)[1:])
                bound_by[id(n)] = binds[ranges]
            kids_of[c].append(None if c in children or n.fn in unextractable else children)

    def evaluate(c: int) -> bool:
        best = fp.get(c)
        for n, kids in zip(view.nodes[c], kids_of[c]):
            if kids is None or any(k not in fp for k in kids):
                continue
            ff = fp[kids[0]].union(*(fp[k] for k in kids[1:])) if kids else EMPTY
            if n.fn == "RANGE":
                ff |= {c}
            if (bound := bound_by.get(id(n))) is not None:
                ff -= bound
            if best is None or trip(ff) < trip(best) or (trip(ff) == trip(best) and len(ff) < len(best)):
                best = ff
        if best is None or fp.get(c) == best:
            return False
        fp[c] = best
        return True

    settle(view, {c: [k for k in per_node if k is not None] for c, per_node in kids_of.items()}, evaluate, max_visits)
    return fp


@dataclass
class KernelCost:
    """Node costs for extracting kernel programs from the e-graph."""

    view: EGraphView
    unextractable: set[str] = field(default_factory=set)
    params: CPUParams = field(default_factory=CPUParams)
    loads_from: frozenset[str] | None = None  # if given, a load from another kernel's buffer costs UNDECIDED_LOAD
    #                                            but for these buffers: every value the e-graph offers inline is
    #                                            computed inline (the fusion search decides what to materialize,
    #                                            extract/fusion.py)
    # the buffers the search decides about, producers before consumers: where a read has no inline alternative,
    # a later buffer's load costs less (the value closest to its reader is loaded, and its producers stay free
    # to fuse into it: a GEMM's output into the GELU the next GEMM's loop reads)
    undecided: tuple[str, ...] = ()
    within: set[int] | None = None  # the classes programs can be made of (egraph.view.reachable); default all
    never: frozenset[int] = frozenset()  # id()s of e-nodes never to extract (fusion.self_loads)

    def __post_init__(self) -> None:
        self.bounds = range_bounds(self.view)
        self.fp = footprints(self.view, self.bounds, self.unextractable, within=self.within)
        self._trips: dict[int, int] = {}
        n = max(1, len(self.undecided))
        self._undecided_cost = {b: UNDECIDED_LOAD * (2 - i / n) for i, b in enumerate(self.undecided)}

    def trip(self, c: int) -> int:
        if c not in self._trips:
            self._trips[c] = math.prod(self.bounds.get(r, 1) for r in self.fp.get(c, frozenset()))
        return self._trips[c]

    def node_cost(self, n: ENode, view: EGraphView) -> float:
        if n.fn in self.unextractable or id(n) in self.never:
            return INF
        if n.fn == "AFTER" and self.loads_from is not None and (name := _buffer_name(view, n)) not in self.loads_from:
            return self._undecided_cost.get(name or "", 2 * UNDECIDED_LOAD)
        op = EGG_TO_OP.get(n.fn)
        if op is None:
            return 0.0
        t = self.trip(n.eclass)
        if op is Ops.SINK:
            return self.params.kernel_overhead
        if op is Ops.REDUCE:  # the accumulate runs once per iteration of its body
            body = ulist(view, n.args[-1].id)
            return 2.0 * (self.trip(body[0]) if body else t)
        if op in (Ops.LOAD, Ops.STORE):
            d = to_dtype(n.args[0])
            if op is Ops.STORE:
                idx = ulist(view, n.args[-1].id)
                d = to_dtype(view.nodes[idx[0]][0].args[0]) if idx else d
                t = max(t, max((self.trip(k) for k in idx), default=1))
            nbytes = max(1, d.itemsize) * (1 + (self.params.store_extra if op is Ops.STORE else 0))
            return (1.0 + self.params.byte_cost * nbytes) * t
        base = OP_COSTS.get(op)
        if base is None:
            cat = OP_TABLE[op].category
            base = 0.0 if cat in (Category.SOURCE, Category.ORDERING, Category.MOVEMENT) else 4.0
        if n.args and n.args[0] == "index":
            # index math is priced by its operations alone: weighted by trip counts, `p0*32768 + p1*1024` over the
            # parts of a split range (32 trips each) looks cheaper than `k*1024` (1024 trips), yet a loop nest that
            # does not bind those parts must compute them as k // 32 and k % 32
            return float(base)
        return float(base) * t
