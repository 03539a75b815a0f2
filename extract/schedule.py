"""Choosing each kernel's schedule among the loop nests the OptOps rules put in the e-graph.

The DAG extractor picks every e-class's node by a per-node cost, which cannot
tell a vectorized loop nest from a scalar one. So after it ran, the classes
that hold several binders (END or REDUCE nodes: one per schedule, see
rules/optops.py) are decided per kernel: every combination of their
alternatives (or, when there are too many, one class at a time, keeping the
others at their best so far) is decoded to a kernel, its split ranges bound,
and estimated by the target's roofline (extract/loop_cost.py for the CPU,
extract/gpu_cost.py for CUDA; `cost_model_for`). The cheapest wins; the rest
are kept, ranked, for the report and for tuning. `ScheduleSpace` is one kernel's choices and shape;
`rank_like` ranks a kernel by replaying the best schedules of another of the same shape.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from egraph_compiler.egraph.view import ClassRef, EGraphView, ENode, chosen_nodes
from egraph_compiler.extract import gpu_cost
from egraph_compiler.extract.extractor import Extraction
from egraph_compiler.extract.loop_cost import MAX_UNROLLED, CPUMachine, KernelEstimate, estimate, work_floor
from egraph_compiler.ir.ops import Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.analysis import index_of, store_items
from egraph_compiler.kernel.cpu_target import CPUTarget, host_cpu
from egraph_compiler.kernel.program import linear_terms
from egraph_compiler.kernel.split_ranges import BindMemo, bind_split_ranges

BINDERS = ("END", "REDUCE")
UNROLLED_LETTERS = ("u", "r")
RANGE_KEYS = ("RKOut", "RKRed")
Estimator = Callable[[UOp], KernelEstimate]
# decode(c, choose, memo): the kernel at SINK class c alone (its AFTER inputs as plain buffers) under `choose`,
# starting from and filling `memo` (e-class -> UOp)
Decode = Callable[[int, Callable[[int], ENode], dict[int, UOp]], UOp]
MAX_COMBINATIONS = 96
HURRIED_CAPS = (16, 64, 256)  # the unrolling caps of the guesses a kernel ranked past the caller's deadline gets
QUICK_COMBINATIONS = 24  # a quick ranking (a fusion trial) enumerates fewer combinations ...
EXACT_TIE = 1e-3  # nests with the same code and estimates this close: the one whose outer loop steps the store furthest
CODE_TIE = 0.05  # schedules within 5% of the best, their compute within 5% of its time: the least code is chosen
DESCENT_ROUNDS = 3  # ... and runs one round of coordinate descent, not three
REPLAYED = 8  # a kernel shaped like one ranked before: its best schedules are tried, no others
# a quick ranking tries the binders of a schedule class that did best in its last full ranking. 6 left out the
# partial-sum binders a softmax's row sum needs once fused into the normalizing kernel (12x128 rows of 128: three
# kernels, 247 us; at 12 two, 215 us, and optimize no slower); GPT-2 T=128 15 -> 14 kernels, 1.15x; every other
# suite model and variant the same program, optimize times within noise
QUICK_PRIOR = 12


class Choices(Protocol):
    """What ranking reads of an extraction: the classes that have a node chosen (`best`), and each one's node
    and cost. An Extraction, or an Overridden one."""

    @property
    def best(self) -> Container[int]: ...

    def node(self, c: int) -> ENode: ...

    def cost(self, c: int) -> float: ...


class _Either:
    """Membership in either of two collections (the classes an Overridden extraction has a node for)."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def __contains__(self, c: object) -> bool:
        return c in self.a or c in self.b


class Overridden:
    """An extraction with some e-classes' choices replaced or added (same interface as Extraction where used
    here): the fusion search's loads from other kernels, which the per-node extraction never picks."""

    def __init__(self, ex: Extraction, choice: dict[int, ENode]) -> None:
        self.ex, self.choice, self.best = ex, choice, _Either(choice, ex.best)

    def node(self, c: int) -> ENode:
        return self.choice.get(c) or self.ex.node(c)

    def cost(self, c: int) -> float:
        return self.ex.cost(c)


@dataclass
class Candidate:
    choice: dict[int, ENode]  # schedule class -> its binder node
    kernel: UOp  # decoded, split ranges bound
    estimate: KernelEstimate

    def describe(self) -> str:
        return describe_schedule(self.kernel)


@dataclass
class KernelSchedule:
    sink_class: int
    ranked: list[Candidate] = field(default_factory=list)  # best first

    @property
    def best(self) -> Candidate:
        return self.ranked[0]


def describe_schedule(kernel: UOp) -> str:
    """The loop nest in words: each binder's ranges as bound + AxisType letter, outermost first (another
    kernel behind an AFTER is not part of this one)."""
    parts: list[str] = []
    seen: set[UOp] = set()
    stack = [kernel]  # depth first, sources in order (a loop, not recursion: a chain of 1,000 ops is deep)
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if u.op in (Ops.END, Ops.REDUCE):
            rs = [f"{r.src[0].arg}{r.arg[1].value}" for r in u.src[1:] if r.op is Ops.RANGE]
            parts.append(("red[" if u.op is Ops.REDUCE else "[") + " ".join(rs) + "]")
        stack.extend(reversed(u.src[:1] if u.op is Ops.AFTER else u.src))
    return " ".join(parts)


NEST_WORDS = {  # describe_schedule's axis letters, in words
    "u": "upcast",
    "r": "unroll",
    "L": "loops",
    "R": "reduce loops",
    "G": "group reduce",
    "l": "local",
    "t": "threads",
    "w": "warp",
    "g": "global",
}


def nest_difference(other: str, chosen: str) -> str:
    """What a rejected loop nest (describe_schedule's words) does differently from the chosen one, by axis kind:
    "upcast 8x16 (chosen: 16x16); unroll 4 (chosen: none)"."""

    def sizes(nest: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for token in nest.replace("red[", " ").replace("[", " ").replace("]", " ").split():
            out.setdefault(token[-1], []).append(token[:-1])
        return out

    mine, theirs = sizes(other), sizes(chosen)
    words = []
    for kind, word in NEST_WORDS.items():
        a, b = mine.get(kind, []), theirs.get(kind, [])
        if a != b:
            words.append(f"{word} {'x'.join(a) or 'none'} (chosen: {'x'.join(b) or 'none'})")
    return "; ".join(words) or "the same loops in another order"


def _walk_kernel(
    view: EGraphView, ex: Choices, sink: int, nodes_of: Callable[[int], list[ENode]]
) -> Iterator[tuple[int, list[ENode]]]:
    """Each e-class of the kernel at `sink` once (not crossing into other kernels), with the nodes `nodes_of` gives
    it: their children are visited next."""
    seen: set[int] = set()
    stack = [sink]
    while stack:
        c = stack.pop()
        if c in seen or c not in ex.best:
            continue
        seen.add(c)
        nodes = nodes_of(c)
        yield c, nodes
        for n in nodes:
            stack.extend(_children_in_kernel(view, ex, n))


def kernel_classes(view: EGraphView, ex: Choices, sink: int, choice: Mapping[int, ENode]) -> set[int]:
    """The e-classes of the kernel at `sink` under `choice` (else the extraction's nodes), not crossing into the
    kernels it loads from."""
    return {c for c, _ in _walk_kernel(view, ex, sink, lambda c: [choice.get(c) or ex.node(c)])}


def schedule_classes(view: EGraphView, ex: Choices, sink: int) -> list[int]:
    """Classes with several binders reachable from a kernel's SINK class, not crossing into other kernels."""

    def nodes_of(c: int) -> list[ENode]:
        chosen = ex.node(c)
        if chosen.fn not in BINDERS:  # e.g. a REDUCE's value the fusion search loads from its own kernel
            return [chosen]
        binders = [n for n in view.nodes.get(c, []) if n.fn in BINDERS]
        return binders if len(binders) > 1 else [chosen]

    return sorted(c for c, nodes in _walk_kernel(view, ex, sink, nodes_of) if len(nodes) > 1)


def term_children(view: EGraphView, n: ENode) -> list[int]:
    """n's children as a kernel's term has them: a range's key (RKOut/RKRed: the term the range comes from, and
    an axis) names the range by that term's class, and decoding never visits the term."""
    kids = view.children(n)
    return kids[1:] if n.fn in RANGE_KEYS else kids


def _children_in_kernel(view: EGraphView, ex: Choices, n: ENode) -> list[int]:
    """n's term children, except that AFTER(buffer, kernel) leads only to the buffer: the kernel is another one."""
    kids = term_children(view, n)
    if n.fn != "AFTER":
        return kids
    first = ex.node(kids[0])
    return [first.args[0].id] if first.fn == "UCons" else []


def kernel_sinks(view: EGraphView, ex: Choices, roots: list[int]) -> list[int]:
    """Every kernel's SINK class under the extracted roots, sub-kernels (through AFTER) included."""
    return sorted(c for c, n in chosen_nodes(view, roots, lambda c: ex.node(c) if c in ex.best else None) if n.fn == "SINK")


@dataclass(frozen=True)
class CostModel:
    """A target's kernel estimate, and the unrolling (product of UPCAST/UNROLL bounds) past which it calls a
    kernel infinitely slow: such candidates are not even decoded. `renders`: the backend's own check, for
    what the estimate cannot see; a best candidate that fails it goes to the end of the ranking. `roofline`:
    the least time any program needs for (flops, bytes) on the target, to flag estimates far above it."""

    estimate: Estimator
    max_unrolled: int | None = None
    renders: Callable[[UOp], bool] | None = None  # does the backend render it (checked on the best few only)
    roofline: Callable[[float, float], float] | None = None
    machine: str = ""  # the machine model, in words (for reports and benchmarks)
    floor: Callable[[UOp], float] | None = None  # a lower bound of the estimate, whatever the schedule (seconds)


def cost_model_for(target: str, cpu: CPUTarget | None = None, renders: Callable[[UOp], bool] | None = None) -> CostModel:
    """The GPU roofline for CUDA, the CPU loop-nest one (for `cpu`, default the host) otherwise. `renders`: the
    backend's check that it emits a kernel (the GPU estimate does not model every rule of emission)."""
    if target == "cuda":
        gpu = gpu_cost.GPUMachine.device()
        return CostModel(
            lambda k: gpu_cost.estimate_gpu(k, gpu),
            renders=renders,
            roofline=lambda f, b: max(f / (gpu.fp32_tflops * 1e12), b / (gpu.hbm_gbps * 1e9)) + gpu.launch_us * 1e-6,
            machine=str(gpu),
        )
    machine = CPUMachine.for_cpu(cpu or host_cpu())
    # the reference target interprets kernels with numpy: the CPU estimate still ranks its choices, but its
    # distance from the CPU roofline says nothing about a slow program
    return CostModel(
        lambda k: estimate(k, machine),
        MAX_UNROLLED,
        roofline=machine.roofline if target == "llvm" else None,
        machine=machine.describe(),
        floor=lambda k: work_floor(k, machine),
    )


def _unrolled(view: EGraphView, ex: Choices, sink: int, choice: dict[int, ENode]) -> int:
    """Product of the UPCAST/UNROLL bounds the kernel's loop nests bind under `choice` (what decoding it would
    give), read off the e-graph."""
    out = 1
    for _, (n,) in _walk_kernel(view, ex, sink, lambda c: [choice.get(c) or ex.node(c)]):
        if n.fn in BINDERS and not _straight(view, ex, n, choice):  # as loop_cost.straight_windows
            for r in _ulist(ex, view.children(n)[-1], choice)[1:]:
                rn = choice.get(r) or ex.node(r)
                if rn.fn == "RANGE" and rn.args[2] in UNROLLED_LETTERS:
                    out *= _const(view, rn.args[3].id)
    return out


def _straight(view: EGraphView, ex: Choices, n: ENode, choice: Mapping[int, ENode]) -> bool:
    """Does binder n run no loop: a REDUCE of an UNROLL range whose every range is unrolled or of one iteration (a
    depthwise window unrolled whole; not partial sums combined over an UPCAST range)?"""
    if n.fn != "REDUCE":
        return False
    unroll = False
    for r in _ulist(ex, view.children(n)[-1], dict(choice))[1:]:
        rn = choice.get(r) or (ex.node(r) if r in ex.best else None)
        if rn is None or rn.fn != "RANGE" or not (rn.args[2] in UNROLLED_LETTERS or _const(view, rn.args[3].id) == 1):
            return False
        unroll |= rn.args[2] == "r"
    return unroll


def _own_unrolled(view: EGraphView, ex: Choices, n: ENode) -> int:
    """Product of the UPCAST/UNROLL bounds a binder node itself binds."""
    out = 1
    for r in _ulist(ex, view.children(n)[-1], {})[1:]:
        rn = ex.node(r) if r in ex.best else None
        if rn is not None and rn.fn == "RANGE" and rn.args[2] in UNROLLED_LETTERS:
            out *= _const(view, rn.args[3].id)
    return out


def _ulist(ex: Choices, c: int, choice: dict[int, ENode]) -> list[int]:
    out: list[int] = []
    while (n := choice.get(c) or ex.node(c)).fn == "UCons":
        out.append(n.args[0].id)
        c = n.args[1].id
    return out


def _const(view: EGraphView, c: int) -> int:
    """The value of an integer CONST e-class (1 if it has none)."""
    for n in view.nodes.get(c, []):
        if n.fn == "CONST" and (val := view.nodes[n.args[1].id][0]).fn == "I":
            return max(1, int(val.args[0]))
    return 1


# literal fields that only name something (a buffer, a range): a kernel's shape leaves them out
NAMING_FIELDS = {"RK": (0,), "BUFFER": (1,), "PARAM": (1,)}


@dataclass
class _Structure:
    """One depth-first walk of a kernel's classes (see ScheduleSpace): each class's structural hash, each
    node's (by id), each class's users, and whether a cycle runs through an alternative."""

    of_class: dict[int, int] = field(default_factory=dict)
    of_node: dict[int, int] = field(default_factory=dict)
    users: dict[int, set[int]] = field(default_factory=dict)
    cyclic: bool = False
    reduces: int = 0  # classes with a REDUCE node


def _structure(view: EGraphView, ex: Choices, sink: int, alts: dict[int, list[ENode]]) -> _Structure:
    """Hash the kernel's classes bottom-up from `sink` (a schedule class by all its binders, any other by its
    chosen node), noting who uses each class; a kernel with no choice to make is not walked (one shape: none)."""
    out = _Structure()
    open_: set[int] = set()  # expanded, not finished: the current path (the stack is LIFO)
    stack: list[tuple[int, bool]] = [(sink, False)] if alts else []
    while stack:
        c, done = stack.pop()
        nodes = alts.get(c) or [ex.node(c)] if c in ex.best else []
        if done:
            hashes = [_node_hash(view, ex, n, out) for n in nodes]
            out.of_class[c] = hash(tuple(sorted(hashes))) if c in alts else hashes[0]
            out.reduces += any(n.fn == "REDUCE" for n in nodes)
            open_.discard(c)
            continue
        if c in out.of_class or not nodes:
            continue
        if c in open_:
            out.cyclic = True
            continue
        open_.add(c)
        stack.append((c, True))
        for n in nodes:
            for k in _children_in_kernel(view, ex, n):
                out.users.setdefault(k, set()).add(c)
                stack.append((k, False))
    return out


def _node_hash(view: EGraphView, ex: Choices, n: ENode, walk: _Structure) -> int:
    """n's structural hash (recorded in `walk.of_node`): its function, its literals but those that only name
    something, and its children's class hashes."""
    skip = NAMING_FIELDS.get(n.fn, ())
    lits = tuple(a for i, a in enumerate(n.args) if not isinstance(a, ClassRef) and i not in skip)
    h = hash((n.fn, lits, tuple(walk.of_class.get(k, 0) for k in _children_in_kernel(view, ex, n))))
    walk.of_node[id(n)] = h
    return h


def _users_of(classes: list[int], users: dict[int, set[int]]) -> set[int]:
    """`classes` and every class that uses one of them, directly or not."""
    out: set[int] = set()
    todo = list(classes)
    while todo:
        c = todo.pop()
        if c not in out:
            out.add(c)
            todo.extend(users.get(c, ()))
    return out


class ScheduleSpace:
    """A kernel's schedule choices as the e-graph offers them, from one walk of its classes (not crossing into
    other kernels): the schedule classes and their binders (`alts`), the classes whose decoding depends on a
    choice (`variant`), and the kernel's shape: a structural hash of each class from its nodes' functions,
    literals (names of buffers and ranges left out) and children, a schedule class's binders all included.
    Kernels of one shape offer the same schedules (a model's repeated layers), so a ranking of one is replayed
    on the others (`rank_like`); `shape` is None where the hashes cannot tell the schedule classes or binders
    apart (or a cycle runs through an alternative). `reduces`: the kernel's REDUCE classes, schedule classes
    or not (a prior's key: binder_order)."""

    def __init__(self, view: EGraphView, ex: Choices, sink: int) -> None:
        offered = {c: [n for n in view.nodes[c] if n.fn in BINDERS] for c in schedule_classes(view, ex, sink)}
        self.alts = {
            c: ns
            for c, ns in offered.items()  # every binder's parts extractable
            if all(math.isfinite(ex.cost(k)) for n in ns for k in view.children(n))
        }
        walk = _structure(view, ex, sink, self.alts)
        self.reduces = walk.reduces
        self.variant = _users_of(list(self.alts), walk.users)
        classes = {walk.of_class[c]: c for c in self.alts}
        binders = {(walk.of_class[c], walk.of_node[id(n)]): n for c, ns in self.alts.items() for n in ns}
        unique = len(classes) == len(self.alts) and len(binders) == sum(map(len, self.alts.values()))
        # (schedule class hash, binder hash) -> binder, and the hashes of each binder
        self.shape: dict[tuple[int, int], ENode] | None = binders if unique and not walk.cyclic else None
        self.key_of = {id(n): k for k, n in binders.items()}

    def translate(self, choice: dict[int, ENode], donor: ScheduleSpace) -> dict[int, ENode] | None:
        """`donor`'s choice as the same choice here (None where a binder has no counterpart)."""
        if self.shape is None or donor.shape is None:
            return None
        out: dict[int, ENode] = {}
        for n in choice.values():
            mine = self.shape.get(donor.key_of[id(n)])
            if mine is None:
                return None
            out[mine.eclass] = mine
        return out


def extracted_kernel(ex: Choices, sink: int, decode: Decode) -> UOp | None:
    """The kernel at `sink` as the extraction (with its overrides) has it; None where a part is unextractable."""
    try:
        return bind_split_ranges(decode(sink, ex.node, {}))
    except (KeyError, ValueError):
        return None


def outer_stride(kernel: UOp) -> int:
    """How far the kernel's outermost loop steps its (first) store's address: among nests priced alike, the one
    walking its output's slowest axis outermost splits across threads as the kernels beside it do (a batch of
    images), so the backend may run a producer and this consumer chunk by chunk."""
    (item, *_) = store_items(kernel)
    idx = index_of(item.store.src[0]) if item.ranges else None
    terms = linear_terms(idx) if idx is not None else None
    return abs((terms or {}).get(item.ranges[0], 0)) if item.ranges else 0


def tie_winner(estimates: list[KernelEstimate]) -> int:
    """The index of the estimate a ranking puts first: estimates within CODE_TIE of the best, their compute
    sides within CODE_TIE of its time too, are a tie, and the least code wins it (LLVM's time grows with the
    unrolled copies). Where memory dominates, estimates differ by little whatever their compute; the memory side
    is the less certain one (a batch-one GEMV's weights, priced from memory, stay in the L3 between calls), so a
    nest with much less compute is no tie (GEMV 1x768 @ 768x3072: 32 columns a tile 0.37 ms, the 16 that tied on
    less code 0.55). A copy's compute is a few percent of its time whatever the nest: its plain loop, which LLVM
    vectorizes, ties with the unrolled ones (a packed GEMM operand 768x2304: 256 copies compiled in 0.4-1.7 s,
    the plain loop in ~0.05 s)."""
    best = min(estimates, key=lambda e: e.seconds)
    near = [
        i
        for i, e in enumerate(estimates)
        if e.seconds <= best.seconds * (1 + CODE_TIE) and e.compute_s - best.compute_s <= CODE_TIE * best.seconds
    ]
    return min(near, key=lambda i: (estimates[i].code, estimates[i].seconds))


def _decoder(
    ex: Choices, sink: int, decode: Decode, model: CostModel, variant: set[int]
) -> Callable[[dict[int, ENode]], Candidate | None]:
    """Decode and estimate the kernel under a choice of its schedule classes (None: a part is unextractable).
    The classes no choice changes are decoded once, for every candidate, and the parts candidates share get their
    split ranges bound once."""
    shared: dict[int, UOp] = {}
    bound = BindMemo()

    def candidate(choice: dict[int, ENode]) -> Candidate | None:
        try:
            memo = dict(shared)
            kernel = bind_split_ranges(decode(sink, lambda c: choice.get(c) or ex.node(c), memo), bound)
            shared.update((c, u) for c, u in memo.items() if c not in variant)
            return Candidate(dict(choice), kernel, model.estimate(kernel))
        except (KeyError, ValueError):  # an alternative with an unextractable part is not a program
            return None

    return candidate


def _ranked(sink: int, found: list[Candidate], model: CostModel) -> KernelSchedule:
    """The candidates best first, one per kernel: the best within CODE_TIE with the least code, then the rest
    by estimate; the best ones the backend cannot render go last."""
    unique: dict[UOp, Candidate] = {}
    for cand in sorted(found, key=lambda x: x.estimate.seconds):
        unique.setdefault(cand.kernel, cand)
    ranked = list(unique.values())
    if ranked:
        ranked.insert(0, ranked.pop(tie_winner([c.estimate for c in ranked])))
        same = [
            c
            for c in ranked
            if c.estimate.code == ranked[0].estimate.code and c.estimate.seconds <= ranked[0].estimate.seconds * (1 + EXACT_TIE)
        ]
        ranked.insert(0, ranked.pop(ranked.index(max(same, key=lambda c: outer_stride(c.kernel)))))
    if model.renders is not None:  # the best candidates the backend cannot render go last
        ok = next((i for i, c in enumerate(ranked) if model.renders(c.kernel)), 0)
        ranked = ranked[ok:] + ranked[:ok]
    return KernelSchedule(sink, ranked)


class _Evaluations:
    """A kernel's candidates, each decoded once (`evaluated`: keyed by the ids of the binders the schedule classes
    get), and not at all when their loop nests would unroll past the model's limit."""

    def __init__(
        self,
        view: EGraphView,
        ex: Choices,
        sink: int,
        model: CostModel,
        alts: dict[int, list[ENode]],
        candidate: Callable[[dict[int, ENode]], Candidate | None],
        evaluated: dict[tuple[int, ...], Candidate | None],
    ) -> None:
        self.view, self.ex, self.sink, self.model, self.alts = view, ex, sink, model, alts
        self.candidate, self.evaluated = candidate, evaluated
        self.own: dict[int, int] = {}  # id(binder) -> the unrolling it binds itself
        self.too_unrolled: set[tuple[int, ...]] = set()
        self.deadline: float | None = None  # a perf_counter time past which no new candidate is decoded

    @functools.cached_property
    def fixed(self) -> int:
        """An upper bound of a choice's unrolling but for the schedule classes' own: every binder outside them
        that some choice reaches."""
        ex, alts = self.ex, self.alts
        return math.prod(
            self.own_unrolled(ex.node(c))
            for c, _ in _walk_kernel(self.view, ex, self.sink, lambda c: alts.get(c) or [ex.node(c)])
            if c not in alts and ex.node(c).fn in BINDERS
        )

    def own_unrolled(self, n: ENode) -> int:
        """The unrolling binder n binds itself (memoized)."""
        if id(n) not in self.own:
            self.own[id(n)] = _own_unrolled(self.view, self.ex, n)
        return self.own[id(n)]

    def over_limit(self, choice: dict[int, ENode], key: tuple[int, ...]) -> bool:
        """Does the choice unroll past the model's limit? Decided on the bound where it is enough, else on the
        kernel's own binders under the choice."""
        ex, limit = self.ex, self.model.max_unrolled
        if limit is None or self.fixed * math.prod(self.own_unrolled(choice.get(c) or ex.node(c)) for c in self.alts) <= limit:
            return False
        if key not in self.too_unrolled and _unrolled(self.view, ex, self.sink, choice) > limit:
            self.too_unrolled.add(key)
        return key in self.too_unrolled

    def __call__(self, choice: dict[int, ENode], prefilter: bool = True) -> Candidate | None:
        """The candidate of `choice` (None: unextractable, or unrolled past the limit when `prefilter`)."""
        key = tuple(id(choice.get(c) or self.ex.node(c)) for c in self.alts)
        if key in self.evaluated:
            return self.evaluated[key]
        if prefilter and (self.over_limit(choice, key) or (self.deadline is not None and time.perf_counter() > self.deadline)):
            return None
        self.evaluated[key] = self.candidate(choice)
        return self.evaluated[key]


def _every_combination(alts: dict[int, list[ENode]], evaluate: _Evaluations) -> list[Candidate]:
    """The candidates of every combination of the schedule classes' binders."""
    return [cand for pick in itertools.product(*alts.values()) if (cand := evaluate(dict(zip(alts, pick)))) is not None]


def _coordinate_descent(
    view: EGraphView, ex: Choices, alts: dict[int, list[ENode]], evaluate: _Evaluations, quick: bool
) -> list[Candidate]:
    """The candidates coordinate descent meets: one class at a time, the others at their best so far, until no
    change (DESCENT_ROUNDS rounds at most; `quick`: one). It starts from the extraction's choice and from the
    plainest loop nests (`quick`: the first alone), the classes with most alternatives first: from the first
    alone, a class whose choice unrolls a lot (many accumulators) keeps every unrolling of the others over the
    limit."""
    plainest = {c: min(nodes, key=lambda n: _own_unrolled(view, ex, n)) for c, nodes in alts.items()}
    order = sorted(alts, key=lambda c: -len(alts[c]))
    starts = [{c: ex.node(c) for c in alts}, plainest]
    # and from the plainest tiles with their windows straight (a REDUCE that runs no loop): a tile of output rows
    # whose window reads each input row once (a depthwise convolution's, kh unrolled) pays only with both, and
    # from either alone the descent stays where it is (a quick ranking too: a fusion trial found no such tile and
    # kept a depthwise convolution's output in a buffer of its own)
    straight = {
        c: max(ns, key=lambda n: _own_unrolled(view, ex, n))
        for c, nodes in alts.items()
        if (ns := [n for n in nodes if _straight(view, ex, n, {})])
    }
    windows = [{**plainest, **straight}] if straight else []
    found: list[Candidate] = []
    for start in starts[:1] + windows if quick else starts + windows:
        current = dict(start)
        for _ in range(1 if quick else DESCENT_ROUNDS):
            before = dict(current)
            for c in order:
                tried = [cand for n in alts[c] if (cand := evaluate({**current, c: n})) is not None]
                found += tried
                if tried:
                    current = dict(min(tried, key=lambda x: x.estimate.seconds).choice)
            if current == before:
                break
    return found


def _guess(alts: dict[int, list[ENode]], own_unrolled: Callable[[ENode], int], cap: int) -> dict[int, ENode]:
    """A loop nest chosen without estimates: class by class (most alternatives first), the binder unrolling
    the most while the kernel's unrolling stays within `cap` (the least unrolling where none fits)."""
    choice: dict[int, ENode] = {}
    total = 1
    for c in sorted(alts, key=lambda c: -len(alts[c])):
        sized = [(own_unrolled(n), n) for n in alts[c]]
        fits = [x for x in sized if total * x[0] <= cap]
        own, choice[c] = max(fits, key=lambda x: x[0]) if fits else min(sized, key=lambda x: x[0])
        total *= own
    return choice


def rank_kernel(
    view: EGraphView,
    ex: Choices,
    sink: int,
    decode: Decode,
    model: CostModel,
    quick: bool = False,
    space: ScheduleSpace | None = None,
    evaluated: dict[tuple[int, ...], Candidate | None] | None = None,
    hurried: bool = False,
    deadline: float | None = None,
    prior: Mapping[tuple[int, int], Sequence[ENode]] | None = None,
) -> KernelSchedule:
    """The kernel's schedules ranked by estimate. `quick` (fusion trials): every combination only up to
    QUICK_COMBINATIONS, else one round of coordinate descent from the extraction's choice. `prior` ((schedule
    class, REDUCE classes in its kernel) -> its binders, best first in a full ranking of such a kernel) narrows
    a quick ranking to the QUICK_PRIOR best binders of each class it knows: a fusion trial's kernel keeps the
    schedule classes of the kernels it merges, and a class's best loop nests stay the best while its kernel
    nests as many REDUCEs (an elementwise kernel's best tiles are not those it needs once a GEMM is fused in). `evaluated`: the
    candidates decoded so far, by their binders (coordinate descent comes back to the same choices, and a full
    ranking to a quick one's), filled in. `hurried` (the caller's time is up): the extraction's loop nest and
    a guess per cap of HURRIED_CAPS (see _guess) alone; the extraction's nest is rarely vectorized, and GEMMs
    and convolutions ran 60-250x slower in it than at their best, their best guess within 1-4x. `deadline`:
    those first, then the search until that perf_counter time (a ranking stops where it is then)."""
    space = space or ScheduleSpace(view, ex, sink)
    alts = space.alts
    if quick and prior:
        alts = {c: narrowed(ns, prior.get((c, space.reduces), ())) for c, ns in alts.items()}
    evaluated = {} if evaluated is None else evaluated
    candidate = _decoder(ex, sink, decode, model, space.variant)
    evaluate = _Evaluations(view, ex, sink, model, alts, candidate, evaluated)
    guessed: list[Candidate] = []
    if not alts or hurried or deadline is not None:  # the extraction's loop nest, and a few guesses besides it
        guesses: list[dict[int, ENode]] = [{}] + [_guess(alts, evaluate.own_unrolled, cap) for cap in HURRIED_CAPS if alts]
        guessed = [c for g in guesses if (c := evaluate(g, prefilter=False)) is not None]
        if not alts or hurried:
            return _ranked(sink, guessed, model)
        evaluate.deadline = deadline
    if math.prod(len(a) for a in alts.values()) <= (QUICK_COMBINATIONS if quick else MAX_COMBINATIONS):
        found = _every_combination(alts, evaluate)
    else:
        found = _coordinate_descent(view, ex, alts, evaluate, quick)
    found += guessed
    viable = [c for c in found if math.isfinite(c.estimate.seconds)]  # e.g. not unrolled beyond reason
    found = viable or found or [c for c in [evaluate({}, prefilter=False)] if c is not None]
    return _ranked(sink, found, model)


def narrowed(offered: list[ENode], best_first: Sequence[ENode]) -> list[ENode]:
    """The QUICK_PRIOR binders of `best_first` that are `offered` (all of `offered` where none is)."""
    ids = {id(n) for n in offered}
    known = [n for n in best_first if id(n) in ids][:QUICK_PRIOR]
    return known or offered


def binder_order(ks: KernelSchedule, space: ScheduleSpace) -> dict[tuple[int, int], list[ENode]]:
    """(schedule class, the kernel's REDUCE classes) -> the class's binders in the order of the ranking's best
    candidate using each (the prior of rank_kernel). The key counts every REDUCE of the kernel, not only those
    with schedules to choose: a depthwise convolution's 3x3 window offers no split, and keyed by schedule
    classes alone, the copy it fuses into handed it a copy's tiles (AVX2: 1.2 ms against 0.1)."""
    out: dict[tuple[int, int], list[ENode]] = {}
    for cand in ks.ranked:
        for c, n in cand.choice.items():
            order = out.setdefault((c, space.reduces), [])
            if all(m is not n for m in order):
                order.append(n)
    return out


def rank_like(
    ex: Choices,
    sink: int,
    decode: Decode,
    model: CostModel,
    space: ScheduleSpace,
    donor: KernelSchedule,
    donor_space: ScheduleSpace,
    top: int = REPLAYED,
) -> KernelSchedule | None:
    """The kernel ranked by replaying the `top` best schedules of a kernel of the same shape (`donor`): each
    is decoded and estimated here, so the ranking is this kernel's own, narrowed to what won there. None where
    a choice has no counterpart here, or none decodes."""
    candidate = _decoder(ex, sink, decode, model, space.variant)
    found: list[Candidate] = []
    for cand in donor.ranked[:top]:
        choice = space.translate(cand.choice, donor_space)
        if choice is None:
            return None
        if (mine := candidate(choice)) is not None:
            found.append(mine)
    return _ranked(sink, found, model) if found else None


def chosen_candidate(ks: KernelSchedule, chosen: Mapping[int, ENode]) -> Candidate:
    """The ranked candidate whose choice the program makes (else the best)."""
    return next((c for c in ks.ranked if all(chosen.get(k) is n for k, n in c.choice.items())), ks.best)


def schedule_report(ks: KernelSchedule, chosen: dict[int, ENode]) -> dict[str, object]:
    """One kernel's schedule decision for the report: the chosen loop nest, its estimate, the best rejected."""
    pick = chosen_candidate(ks, chosen)
    nest = pick.describe()
    shown = {nest}  # loop nests that differ only in which range is which read the same: show one
    rejected: list[dict[str, object]] = []
    for c in ks.ranked:
        if len(rejected) == 5:
            break
        if (other := c.describe()) not in shown:
            shown.add(other)
            differs = nest_difference(other, nest)
            rejected.append({"schedule": other, "estimate": c.estimate.to_dict(), "differs": differs})
    return {"candidates": len(ks.ranked), "chosen": nest, "estimate": pick.estimate.to_dict(), "rejected": rejected}


def _estimate_cell(est: dict[str, Any]) -> dict[str, Any]:
    keep = ("seconds", "compute_s", "memory_s", "overhead_s", "bytes", "parallel", "spills")
    return {k: est[k] for k in keep if k in est}


def kernel_entry(kernel: Any, schedules: list[dict[str, Any]]) -> dict[str, Any]:
    """A program kernel for the report: its schedule, cost breakdown and best rejected schedules (matched to
    the schedule decisions by loop nest)."""
    entry: dict[str, Any] = {"name": kernel.name, "reads": list(kernel.reads), "writes": list(kernel.writes)}
    nest = describe_schedule(kernel.ast)
    for s in schedules:
        if s["chosen"] == nest:
            entry["schedule"] = nest
            entry["cost"] = _estimate_cell(s["estimate"])
            entry["alternatives"] = [
                {"description": r["schedule"], "cost": _estimate_cell(r["estimate"]), "differs": r.get("differs", "")}
                for r in s["rejected"]
            ]
            break
    return entry


__all__ = [
    "Candidate",
    "CostModel",
    "chosen_candidate",
    "Estimator",
    "KernelSchedule",
    "Overridden",
    "ScheduleSpace",
    "cost_model_for",
    "describe_schedule",
    "extracted_kernel",
    "kernel_classes",
    "kernel_entry",
    "kernel_sinks",
    "rank_kernel",
    "rank_like",
    "schedule_classes",
    "schedule_report",
    "term_children",
    "tie_winner",
]
