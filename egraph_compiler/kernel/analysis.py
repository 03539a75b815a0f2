"""The facts every consumer of a kernel AST reads off it, computed one way for all of them: the ranges a value
depends on, the items of a kernel (each STORE with the END ranges around it, checked against the contract), the
flat index of an address, the conditions a value is guarded by, and which values are evaluated whenever others are.

The renderers (backends/llvm.py, backends/cuda.py through kernel/gpu_launch.py), the reference backend and the
CPU estimate (extract/loop_cost.py) all take these from here, so they agree on what a kernel is: a range a stored
value uses must be bound by an END around its STORE (or reduced over inside it), everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.ir.uop import UOp

CONTRACT = "check the kernel AST against egraph_compiler/kernel/program.py"


def axis_type(r: UOp) -> AxisType:
    """A RANGE's axis type (GLOBAL, LOCAL, REDUCE, UPCAST, ...)."""
    return r.arg[1]


def range_size(r: UOp) -> int:
    """A RANGE's trip count, for code: a symbolic bound is refused (sizes are bound before lowering)."""
    b = r.src[0]
    if b.op is not Ops.CONST:
        raise UnsupportedOp(
            at=f"RANGE {r.arg[0]!r}",
            why="kernels need constant range bounds",
            suggestion="bind symbolic sizes before lowering",
        )
    return int(b.arg)


def trip_count(r: UOp) -> int:
    """A RANGE's trip count, for estimates: 1 where the bound is not a constant."""
    b = r.src[0]
    return int(b.arg) if b.op is Ops.CONST else 1


class RangeDeps(dict[UOp, frozenset[UOp]]):
    """RANGEs each node's value depends on, computed on first lookup and kept: a RANGE depends on itself, a
    REDUCE binds its own ranges, an AFTER (a buffer after other kernels' stores) depends on its buffer only, any
    other node on the union of its sources'. Deep kernels are walked iteratively."""

    def __missing__(self, u: UOp) -> frozenset[UOp]:
        # sources first, each one's entry there when x needs it; a node whose sources are all known needs no walk
        # (so asking node by node in topological order stays linear)
        for x in (u,) if all(s in self for s in u.src) else u.toposort():
            if x in self:
                continue
            if x.op is Ops.RANGE:
                d = frozenset((x,))
            elif x.op is Ops.REDUCE:
                d = self[x.src[0]] - frozenset(x.src[1:])
            elif x.op is Ops.AFTER:
                d = self[x.src[0]]
            else:
                d = frozenset().union(*(self[s] for s in x.src))
            self[x] = d
        return self[u]


@dataclass(frozen=True)
class StoreItem:
    """One entry of a kernel's SINK: a STORE and the END ranges around it, outermost first."""

    store: UOp
    ranges: tuple[UOp, ...]


def store_items(ast: UOp, deps: RangeDeps | None = None) -> list[StoreItem]:
    """The kernel's items, in order. A constant in an END's list is a range of one proven 0: it binds nothing and
    is left out. Raises UnsupportedOp for anything else the contract does not allow: a root that is not SINK, an
    entry that is not a STORE under ENDs, an END over something other than distinct RANGEs, or a stored value
    over a range no END around it binds."""
    if ast.op is not Ops.SINK:
        raise UnsupportedOp(at=ast.op.name, why="a kernel must be rooted at SINK", suggestion="wrap it in SINK(...)")
    deps = RangeDeps() if deps is None else deps
    out = []
    for entry in ast.src:
        ranges: list[UOp] = []
        st = entry
        while st.op is Ops.END:  # an outer END's ranges are the outer loops
            ranges += [r for r in st.src[1:] if r.op is not Ops.CONST]
            st = st.src[0]
        if st.op is not Ops.STORE:
            raise UnsupportedOp(at=st.op.name, why="expected STORE under END", suggestion=CONTRACT)
        if any(r.op is not Ops.RANGE for r in ranges) or len(set(ranges)) != len(ranges):
            raise UnsupportedOp(at="END", why="END closes distinct RANGEs", suggestion=CONTRACT)
        if deps[st] - set(ranges):  # name the first in the store's order, so the message is the same every run
            free = next(r for r in st.toposort() if r in deps[st] and r not in ranges)
            raise UnsupportedOp(
                at=f"RANGE {free.arg[0]!r}",
                why="a stored value uses a range no END binds",
                suggestion="close every range the store uses with END, or reduce over it",
            )
        out.append(StoreItem(st, tuple(ranges)))
    return out


def value_nodes(root: UOp, skip: Iterable[UOp] = ()) -> Iterator[UOp]:
    """Every node of a kernel's value under `root` once (users before their sources; nodes in `skip` and below
    them left out): a REDUCE is yielded but not entered (its body runs inside its own loops), and an AFTER only
    leads to its buffer (the kernel it waits on is another one)."""
    seen: set[UOp] = set(skip)
    stack = [root]
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        yield u
        if u.op is Ops.AFTER:
            stack.append(u.src[0])
        elif u.op is not Ops.REDUCE:
            stack.extend(u.src)


def index_of(ptr: UOp) -> UOp | None:
    """The flat index of a LOAD/STORE address INDEX(buffer[, idx]) (None: the buffer's one element)."""
    if ptr.op is not Ops.INDEX or len(ptr.src) > 2:
        raise UnsupportedOp(
            at=ptr.op.name,
            why="loads and stores address memory through INDEX(buffer[, idx]), one flat element",
            suggestion="lower multi-dimensional INDEX to one flat index first",
        )
    return ptr.src[1] if len(ptr.src) > 1 else None


def value_order(root: UOp) -> list[UOp]:
    """Nodes under root in topological order (sources first), not entering the stores an AFTER waits on (other
    items): the order code computes an item's values in."""
    out: list[UOp] = []
    seen: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        u, ready = stack.pop()
        if ready:
            out.append(u)
            continue
        if u in seen:
            continue
        seen.add(u)
        stack.append((u, True))
        stack.extend((s, False) for s in reversed(u.src[:1] if u.op is Ops.AFTER else u.src))
    return out


Cond = tuple[UOp, bool]  # a boolean value and the polarity under which code runs


def guards(order: list[UOp]) -> dict[UOp, frozenset[Cond]]:
    """Conditions (node, polarity) that hold wherever each node of `order` (topological) is used.

    They come from WHERE branches, load gates and store gates; a load whose index is not proven in bounds is
    executed only under them. They do not enter a REDUCE's body: a REDUCE may be hoisted above the code that
    computes them (the body's loads are clamped instead; the value is used only where the condition holds, and
    there the index is in bounds).
    """
    conds: dict[UOp, frozenset[Cond]] = {}

    def give(s: UOp, c: frozenset[Cond]) -> None:
        conds[s] = c if s not in conds else conds[s] & c

    for u in reversed(order):  # every user before its sources
        c = conds.get(u, frozenset()) if u.op is not Ops.REDUCE else frozenset()
        for i, s in enumerate(u.src):
            extra: frozenset[Cond] = frozenset()
            if u.op is Ops.WHERE and i in (1, 2):
                extra = frozenset({(u.src[0], i == 1)})
            elif len(u.src) == 3 and ((u.op is Ops.LOAD and i == 0) or (u.op is Ops.STORE and i < 2)):
                extra = frozenset({(u.src[2], True)})  # a gate guards the address (and a store's value)
            give(s, c | extra)
    return conds


class Evaluation:
    """When a kernel's values are evaluated, for code that emits them once, at first use: the ranges each depends
    on, whether evaluating it touches memory (then it must not be hoisted out of a condition), and the values
    evaluated whenever some roots are (WHERE branches and gated addresses are not)."""

    def __init__(self, deps: RangeDeps | None = None) -> None:
        self.deps = RangeDeps() if deps is None else deps
        self._unsafe: dict[UOp, bool] = {}

    def unsafe(self, u: UOp) -> bool:
        """Does evaluating u touch memory (a LOAD or a REDUCE under it)?"""
        if u not in self._unsafe:
            for n in u.toposort():
                if n not in self._unsafe:
                    self._unsafe[n] = n.op in (Ops.LOAD, Ops.REDUCE) or any(self._unsafe[s] for s in n.src)
        return self._unsafe[u]

    def uncond_edges(self, n: UOp) -> tuple[UOp, ...]:
        """Sources that are evaluated whenever n is (WHERE branches and gated addresses are not)."""
        if n.op is Ops.REDUCE:
            return ()
        if n.op is Ops.WHERE:
            return tuple(s for i, s in enumerate(n.src) if i == 0 or not self.unsafe(s))
        if n.op is Ops.LOAD:
            idx = index_of(n.src[0])
            if len(n.src) > 2:
                return (n.src[1], n.src[2]) + ((idx,) if idx is not None and not self.unsafe(idx) else ())
            return (idx,) if idx is not None else ()
        return n.src

    def uncond_order(self, roots: Iterable[UOp], computed: Callable[[UOp], bool] = lambda u: False) -> list[UOp]:
        """The values evaluated whenever `roots` are, sources first (`computed`: values already at hand, and
        what only they read, are left out)."""
        order: list[UOp] = []
        seen: set[UOp] = set()
        stack: list[tuple[UOp, bool]] = [(r, False) for r in roots]
        while stack:
            u, done = stack.pop()
            if done:
                order.append(u)
                continue
            if u in seen or u.op is Ops.CONST or computed(u):
                continue
            seen.add(u)
            stack.append((u, True))
            stack.extend((s, False) for s in reversed(self.uncond_edges(u)))
        return order
