"""A Python view of a frozen egglog e-graph: e-classes, e-nodes, analysis values.

egglog hands back opaque `Value`s; this module numbers e-classes, converts
primitive fields to Python values, and separates constructors (the e-nodes
the extractor chooses between) from analysis functions (lo/hi, ...).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # egglog is imported where an e-graph is built (session.py): a cached program needs none
    from egglog import bindings

PRIMITIVE_SORTS = {"i64", "String", "f64", "bool", "Unit"}


@dataclass(frozen=True)
class ENode:
    fn: str  # constructor name
    args: tuple[Any, ...]  # primitive python values, or ClassRef for e-class children
    eclass: int
    sort: str


@dataclass(frozen=True)
class ClassRef:
    id: int

    def __repr__(self) -> str:
        return f"c{self.id}"


@dataclass
class EGraphView:
    nodes: dict[int, list[ENode]] = field(default_factory=dict)  # e-class -> its e-nodes
    sort_of: dict[int, str] = field(default_factory=dict)
    lets: dict[str, int] = field(default_factory=dict)  # global binding -> e-class
    functions: dict[str, dict[tuple[Any, ...], Any]] = field(default_factory=dict)  # analysis tables
    egglog_ids: dict[Any, ClassRef] = field(default_factory=dict, repr=False)  # egglog value -> class (build_view)

    @cached_property
    def num_nodes(self) -> int:  # a view is not changed once built
        return sum(len(v) for v in self.nodes.values())

    @property
    def num_classes(self) -> int:
        return len(self.nodes)

    def children(self, n: ENode) -> list[int]:
        return [a.id for a in n.args if isinstance(a, ClassRef)]

    @cached_property
    def kids(self) -> dict[int, list[list[int]]]:
        """Each class's nodes' children, in node order (the bottom-up analyses share them)."""
        return {c: [self.children(n) for n in ns] for c, ns in self.nodes.items()}

    @cached_property
    def parents(self) -> dict[int, set[int]]:
        """Each class's parents: the classes with a node over it."""
        out: dict[int, set[int]] = {}
        for c, per_node in self.kids.items():
            for kids in per_node:
                for k in kids:
                    out.setdefault(k, set()).add(c)
        return out

    @cached_property
    def children_first(self) -> list[int]:
        """Every class, each after the classes its nodes point to (a depth-first post-order; on a cycle, the
        class met first goes last): the order in which bottom-up analyses settle with the fewest re-evaluations."""
        below = {c: [k for kids in per_node for k in kids] for c, per_node in self.kids.items()}
        out: list[int] = []
        seen: set[int] = set()
        for root in self.nodes:
            if root in seen:
                continue
            seen.add(root)
            stack = [(root, iter(below[root]))]
            while stack:
                c, todo = stack[-1]
                for k in todo:
                    if k not in seen and k in below:
                        seen.add(k)
                        stack.append((k, iter(below[k])))
                        break
                else:
                    stack.pop()
                    out.append(c)
        return out

    def lookup(self, fn: str, *key: Any) -> Any:
        return self.functions.get(fn, {}).get(tuple(key))


def reachable(view: EGraphView, roots: Iterable[int], skip: Iterable[str] = ()) -> set[int]:
    """The classes reachable from `roots` through e-nodes whose constructor is not in `skip` (helpers no program
    is made of): a bottom-up analysis for programs needs no other class."""
    skipped = set(skip)
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        for n, kids in zip(view.nodes.get(c, ()), view.kids.get(c, ())):
            if n.fn not in skipped:
                stack.extend(kids)
    return seen


def chosen_nodes(view: EGraphView, roots: Iterable[int], chosen: Callable[[int], ENode | None]) -> Iterator[tuple[int, ENode]]:
    """(e-class, chosen e-node) of every class reachable from `roots` through chosen nodes, each once; `chosen`
    gives a class's node (None: none is chosen, and nothing below it is reached)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in seen or (n := chosen(c)) is None:
            continue
        seen.add(c)
        yield c, n
        stack.extend(view.children(n))


def settle(
    view: EGraphView, usable: Mapping[int, Sequence[Sequence[int]]], evaluate: Callable[[int], bool], max_visits: int
) -> None:
    """Run a bottom-up analysis over the view's classes to a fixed point. `usable[c]`: the children of each of c's
    nodes the analysis may use; `evaluate(c)`: compute c's value again from its children's, True when it changed.
    A class is evaluated first once one of its usable nodes has a value for every child (counted per node), and
    again only when a child's value changed, first in first out from the children-first order: deep programs
    and their cycles settle without whole passes. `max_visits` bounds the evaluations per class (a guard)."""
    ready: set[int] = set()
    missing: list[int] = []  # per usable node with children: how many of them have no value yet
    waiting: dict[int, list[tuple[int, int]]] = {}  # class -> (parent, node index) of the nodes waiting on it
    for c, nodes in usable.items():
        for kids in nodes:
            if not kids:
                ready.add(c)
                continue
            distinct = kids if len(kids) == 1 else set(kids)
            entry = (c, len(missing))
            for k in distinct:
                if k in waiting:
                    waiting[k].append(entry)
                else:
                    waiting[k] = [entry]
            missing.append(len(distinct))
    settled: set[int] = set()
    parents = view.parents
    queue = deque(c for c in view.children_first if c in ready)
    queued = set(queue)
    budget = max_visits * max(1, len(view.nodes))
    while queue and budget > 0:
        budget -= 1
        c = queue.popleft()
        queued.discard(c)
        if not evaluate(c):
            continue
        if c not in settled:
            settled.add(c)
            for p, i in waiting.get(c, ()):
                missing[i] -= 1
                if missing[i] == 0:
                    ready.add(p)
        for p in parents.get(c, ()):
            if p in ready and p not in queued:
                queued.add(p)
                queue.append(p)


def build_view(
    eg: bindings.EGraph, constructors: Iterable[str], functions: Iterable[str] = (), annotations: Iterable[str] = ()
) -> EGraphView:
    """Freeze `eg` and convert it. `constructors` are the e-node tables; `functions` analysis tables to keep;
    `annotations` tables to keep that are read after everything else, so that the classes are numbered as they
    would be without them (the extraction breaks ties by class number). Each e-class is numbered once and has
    one ClassRef, shared by every e-node pointing to it."""
    cons, funs, notes = set(constructors), set(functions), set(annotations)
    frozen = eg.freeze()
    view = EGraphView()
    refs = view.egglog_ids  # egglog value -> its class's ClassRef (numbered in first-seen order)
    readers = {"i64": eg.value_to_i64, "String": eg.value_to_string, "f64": eg.value_to_f64, "bool": eg.value_to_bool}

    def ref(v: Any) -> ClassRef:
        r = refs.get(v)
        if r is None:
            r = refs[v] = ClassRef(len(refs))
        return r

    def converter(sort: str) -> Callable[[Any], Any]:
        if sort not in PRIMITIVE_SORTS:
            return ref
        read = readers.get(sort)
        return read if read is not None else (lambda _v: None)

    for name, fn in frozen.functions.items():
        if fn.is_let_binding:
            for row in fn.rows:
                view.lets[name] = ref(row.output).id
            continue
        convs = [converter(s) for s in fn.input_sorts]
        if name in cons:
            nodes, sort_of, out_sort = view.nodes, view.sort_of, fn.output_sort
            for row in fn.rows:
                if row.subsumed:
                    continue
                c = ref(row.output).id
                node = ENode(name, tuple(f(v) for f, v in zip(convs, row.inputs)), c, out_sort)
                if c in nodes:
                    nodes[c].append(node)
                else:
                    nodes[c] = [node]
                    sort_of[c] = out_sort
        elif name in funs:
            _read_table(view, fn, name, convs, converter(fn.output_sort))
    for name, fn in frozen.functions.items():
        if name in notes:
            _read_table(view, fn, name, [converter(s) for s in fn.input_sorts], converter(fn.output_sort))
    return view


_LITERALS: dict[str, Callable[[str], Any]] = {"i64": int, "f64": float, "String": json.loads, "bool": lambda t: t == "true"}


def serialized_view(eg: bindings.EGraph, constructors: Iterable[str], like: EGraphView) -> EGraphView:
    """The e-graph as egglog serializes it (`EGraph.serialize`, the format of egglog's own visualizer), read into
    a view of the constructor tables alone (analysis and helper tables dropped), its e-classes numbered as
    `like` (build_view of the same e-graph) numbers them: e-nodes compare equal across the two, so a choice made
    on one marks the other. Where they differ, one of the two readings of the e-graph is wrong (tested)."""
    cons = set(constructors)
    data = json.loads(eg.serialize([]).to_json())
    nodes, sorts = data["nodes"], data["class_data"]
    number = {int(str(v)[6:-1]): ref for v, ref in like.egglog_ids.items()}  # egglog's "Value(N)" -> class

    def ref(eclass: str) -> ClassRef:
        return number[int(eclass.rsplit("-", 1)[1])]

    def arg(child: str) -> Any:
        node = nodes[child]
        read = _LITERALS.get(sorts[node["eclass"]]["type"])
        return read(node["op"]) if read is not None else ref(node["eclass"])

    view = EGraphView(lets=like.lets)
    for node in nodes.values():
        if node["op"] not in cons or node["subsumed"]:
            continue
        c, sort = ref(node["eclass"]).id, sorts[node["eclass"]]["type"]
        view.nodes.setdefault(c, []).append(ENode(node["op"], tuple(arg(k) for k in node["children"]), c, sort))
        view.sort_of[c] = sort
    return view


def _read_table(view: EGraphView, fn: Any, name: str, convs: list[Callable[[Any], Any]], out: Callable[[Any], Any]) -> None:
    """A function table into view.functions[name]: its rows' inputs (class ids for e-classes) -> output."""
    table = view.functions.setdefault(name, {})
    for row in fn.rows:
        key = tuple(a.id if isinstance(a, ClassRef) else a for a in (f(v) for f, v in zip(convs, row.inputs)))
        table[key] = out(row.output)
