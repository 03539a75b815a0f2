"""Fusion: which intermediates get a buffer of their own, decided by the loop-nest estimate.

Rangeify offers every materialization candidate (tinygrad's realize points: every REDUCE, every CONTIGUOUS,
every value with several consumers and every value read through a broadcast) in two forms wherever it is
read: computed inline, or loaded from its own buffer after its own kernel ran. The per-node extraction this
module starts from computes everything inline (a load from another kernel is not extractable there, except
from a CONTIGUOUS buffer: CONTIGUOUS is a barrier and has no inline form).

The search starts from the safe baseline, every candidate materialized: no value is ever recomputed once per
element of another kernel, so its estimate is an upper bound the result never exceeds. It then tries fusions,
one buffer at a time: the buffer's loads become inline computations and its kernel goes away. A fusion is
kept when the program's estimate (each changed kernel at its best schedule: ranked quickly, and in full, with
the kernels it replaces, when the quick ranking misses by little or wins narrowly on a big kernel) drops by
more than a noise margin of the changed kernels' estimate, so the chosen estimate is never above the
baseline's. A trial whose work floor (a lower bound of any schedule's estimate) is already above what it
replaces is refused without ranking.
The candidates are the buffers the current program still materializes, tried in order of the traffic they
would save; the search passes over them until a whole pass keeps nothing, or until its time budget is spent.
Every decision is recorded for the report.

A kernel's content depends only on its SINK and the buffers it loads (a class with a load from a
materialized buffer takes it; which buffer wins where a class has several is fixed by their order), so
rankings are memoized on that pair and a trial re-walks only the kernels that load the fused buffer. A kernel
of the same shape as one ranked before (a model's repeated layers) replays that ranking's best schedules
(`schedule.rank_like`). With more than BATCH_ABOVE buffers, single fusions that pay are tried in doubling
batches (a graph of thousands of small ops would otherwise take one trial per buffer, each over a growing kernel).

A memory limit (bytes of the intermediates' arena, the memory plan's greedy placement over the kernels'
lifetimes in dependency order) is met after the search by fusing, one at a time, the buffer (else the pair of
buffers) whose fusion costs the least estimated time per arena byte it frees, until the arena fits or nothing
left frees any; the chosen estimate may then be above the baseline's, and a note says by how much. A program
whose own memory plan already meets the limit (the runner keeps a packed operand chunk by chunk, which this
arena counts whole) is kept as the search left it.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from egraph_compiler.egraph.view import EGraphView, ENode
from egraph_compiler.extract.extractor import Extraction
from egraph_compiler.extract.kernel_cost import ulist
from egraph_compiler.extract.loop_cost import KernelEstimate
from egraph_compiler.extract.schedule import (
    REPLAYED,
    Candidate,
    CostModel,
    Decode,
    KernelSchedule,
    Overridden,
    ScheduleSpace,
    binder_order,
    extracted_kernel,
    rank_kernel,
    rank_like,
    term_children,
)
from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.memory_plan import lifetimes, plan
from egraph_compiler.kernel.program import canonical_kernel

NOISE = 0.001  # a fusion must save this fraction of the estimate of the kernels it changes
RECHECK = 0.3  # a trial the quick ranking rejects (or, on big kernels, keeps) by less than this: ranked in full
VERIFY_ABOVE_S = 1e-3  # kernels estimated above this whose quick win is narrow (below RECHECK) are ranked in full
MAX_PAIRED = 6  # buffers of one kernel tried in pairs (when no single fusion pays)
BATCH_ABOVE = 128  # with more buffers than this, single fusions are tried in doubling batches
CHOICES_KEPT = 4  # a trial asks for its program's choice and the current one's in turn: both are kept


@dataclass(frozen=True)
class Offer:
    """A buffer the e-graph offers: its AFTER class and node, its kernel's SINK class, the class its kernel
    stores (never loaded from the buffer itself), and every class that can load from it, with the nodes of
    that load down to the AFTER (the per-node extraction has none there: it computes inline)."""

    name: str
    after: int
    after_node: ENode
    sink: int
    own: int | None
    loads: dict[int, tuple[tuple[int, ENode], ...]]


def _first(view: EGraphView, c: int, fn: str) -> ENode | None:
    return next((n for n in view.nodes.get(c, []) if n.fn == fn), None)


def _head(view: EGraphView, c: int) -> int | None:
    """The first element's class of the list class c."""
    cons = _first(view, c, "UCons")
    return cons.args[0].id if cons is not None else None


def load_path(view: EGraphView, n: ENode) -> tuple[tuple[int, ENode], ...] | None:
    """For a LOAD(INDEX(AFTER(buffer, kernel), idx)) node: (class, node) from the load down to the AFTER (the
    load, its source list, the INDEX, the INDEX's list, the AFTER); None for any other node."""
    if n.fn != "LOAD":
        return None
    path = [(n.eclass, n)]
    for fn in ("UCons", "INDEX", "UCons", "AFTER"):
        c = path[-1][1].args[0].id if fn != "UCons" and path[-1][1].fn == "UCons" else view.children(path[-1][1])[-1]
        node = _first(view, c, fn)
        if node is None:
            return None
        path.append((c, node))
    return tuple(path)


def _stored_value(view: EGraphView, sink: int) -> int | None:
    """The class a kernel SINK(END(STORE(INDEX, value), ranges)) (or SINK(STORE)) stores."""
    node = _first(view, sink, "SINK")
    first = _head(view, view.children(node)[0]) if node is not None else None
    if first is None:
        return None
    end = _first(view, first, "END")
    store_class = _head(view, view.children(end)[-1]) if end is not None else first
    store = _first(view, store_class, "STORE") if store_class is not None else None
    parts = ulist(view, view.children(store)[-1]) if store is not None else []
    return parts[1] if len(parts) > 1 else None


def self_loads(view: EGraphView) -> frozenset[int]:
    """The id()s of the LOADs in a class a kernel stores that read the buffer that kernel writes: where the
    e-graph proves a value equal to its own load (values repeating along a chain), the extraction, which prices
    another kernel as one leaf, would otherwise see no cycle in computing a buffer from itself."""
    out: set[int] = set()
    for a, nodes in view.nodes.items():
        for after in nodes:
            parts = ulist(view, view.children(after)[-1]) if after.fn == "AFTER" else []
            own = _stored_value(view, parts[1]) if len(parts) > 1 else None
            for n in view.nodes.get(own, []) if own is not None else []:
                if (path := load_path(view, n)) is not None and path[-1][0] == a:
                    out.add(id(n))
    return frozenset(out)


def offers(view: EGraphView) -> dict[str, Offer]:
    """Every buffer some class can load from, by name."""
    loads: dict[int, dict[int, tuple[tuple[int, ENode], ...]]] = {}
    for c, nodes in view.nodes.items():
        for n in nodes:
            if (path := load_path(view, n)) is not None:
                loads.setdefault(path[-1][0], {}).setdefault(c, path[:-1])
    out: dict[str, Offer] = {}
    for a, ls in loads.items():
        after = _first(view, a, "AFTER")
        parts = ulist(view, view.children(after)[-1]) if after is not None else []
        buf = _first(view, parts[0], "BUFFER") if parts else None
        if after is None or buf is None or len(parts) < 2:
            continue
        out[str(buf.args[1])] = Offer(str(buf.args[1]), a, after, parts[1], _stored_value(view, parts[1]), ls)
    return out


@dataclass
class Decision:
    buffer: str
    label: str
    bytes: int
    fused: bool
    saving_s: float  # estimated seconds the fusion saves (negative: it would cost)

    def to_dict(self) -> dict[str, object]:
        return {
            "buffer": self.buffer,
            "tensor": self.label,
            "bytes": self.bytes,
            "decision": "fused" if self.fused else "materialized",
            "saving_s": self.saving_s,
        }


@dataclass
class FusionResult:
    choice: dict[int, ENode]
    schedules: dict[int, KernelSchedule]
    baseline_s: float
    chosen_s: float
    decisions: list[Decision] = field(default_factory=list)
    materialized: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)  # the notes that say a limit cut the search short

    def to_dict(self) -> dict[str, object]:
        return {
            "baseline_s": self.baseline_s,
            "chosen_s": self.chosen_s,
            "materialized": self.materialized,
            "decisions": [d.to_dict() for d in self.decisions],
            "notes": self.notes,
        }


class _Search:
    def __init__(
        self,
        view: EGraphView,
        ex: Extraction,
        roots: list[int],
        decode: Decode,
        model: CostModel,
        candidates: dict[str, tuple[str, int]],
        barriers: set[str],
        deadline: float | None = None,
    ) -> None:
        # trials re-rank kernels, mostly into the same loop nests (the same UOps: they are interned), and a
        # replayed ranking (a model's repeated layers) gives the same kernels over other buffers: those are
        # matched by structure (canonical_kernel), which costs a fifth of an estimate, so only replays pay for it
        estimates: dict[UOp, KernelEstimate] = {}
        self.by_structure: dict[tuple[tuple[Any, ...], ...], KernelEstimate] = {}

        def remembered(kernel: UOp) -> KernelEstimate:
            if kernel not in estimates:
                estimates[kernel] = model.estimate(kernel)
            return estimates[kernel]

        def replayed(kernel: UOp) -> KernelEstimate:
            key = canonical_kernel(kernel)
            if key not in self.by_structure:
                self.by_structure[key] = remembered(kernel)
            return self.by_structure[key]

        self.view, self.ex, self.roots, self.decode = view, ex, roots, decode
        self.deadline = deadline
        self.unranked: set[int] = set()  # kernels (SINK classes) ranked in a hurry past the deadline (a few guesses)
        self.model = replace(model, estimate=remembered)
        self.replay_model = replace(model, estimate=replayed)
        self.offers = offers(view)
        self.order = [n for n in [*sorted(barriers), *candidates] if n in self.offers]  # load preference order
        self.barriers = barriers
        self.name_of_after = {o.after: o.name for o in self.offers.values()}
        # each buffer's loads alone; where no two buffers' loads share a class (as a rule), a choice is their union
        self.own_loads: dict[str, dict[int, ENode]] = {n: {} for n in self.order}
        for name, loads in self.own_loads.items():
            self._add_loads(name, loads)
        self.apart = sum(map(len, self.own_loads.values())) == len(set().union(*self.own_loads.values()))
        self._choices: OrderedDict[frozenset[str], dict[int, ENode]] = OrderedDict()  # the last few asked for
        self.rankings: dict[tuple[int, frozenset[str], bool], KernelSchedule] = {}  # (sink, loads, quick?)
        self.floors: dict[tuple[int, frozenset[str]], float] = {}
        self.kernels: dict[tuple[int, frozenset[str]], UOp | None] = {}
        self.decoded: dict[tuple[int, frozenset[str]], dict[tuple[int, ...], Candidate | None]] = {}  # by rank_kernel
        # (kernel shape, quick?) -> the first ranking of that shape, and its schedule space
        self.donors: dict[tuple[object, bool], tuple[KernelSchedule, ScheduleSpace]] = {}
        # (schedule class, REDUCE classes in its kernel) -> its binders, best first in the last full ranking
        self.prior: dict[tuple[int, int], list[ENode]] = {}

    def choice(self, mat: frozenset[str]) -> dict[int, ENode]:
        """The loads (and their AFTER nodes) that materialize the buffers in `mat` and the barriers."""
        if mat in self._choices:
            self._choices.move_to_end(mat)
            return self._choices[mat]
        ch: dict[int, ENode] = {}
        for name in self.order:
            if name in mat or name in self.barriers:
                if self.apart:
                    ch.update(self.own_loads[name])
                else:
                    self._add_loads(name, ch)
        self._choices[mat] = ch
        if len(self._choices) > CHOICES_KEPT:
            self._choices.popitem(last=False)
        return ch

    def _add_loads(self, name: str, ch: dict[int, ENode]) -> None:
        """Buffer `name`'s AFTER node and loads into `ch`, where no buffer before it put a load already."""
        o = self.offers[name]
        ch[o.after] = o.after_node
        for c, path in o.loads.items():
            if c != o.own and c not in ch:
                for k, n in path:
                    ch.setdefault(k, n)

    def loaded(self, sink: int, ch: dict[int, ENode]) -> frozenset[str]:
        """The buffers the kernel at `sink` loads under `ch` (the walk does not cross into other kernels)."""
        seen: set[int] = set()
        loaded: set[str] = set()
        stack = [sink]
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen.add(c)
            if c in self.name_of_after and c in ch:
                loaded.add(self.name_of_after[c])
                continue
            n = ch.get(c) or (self.ex.node(c) if c in self.ex.best else None)
            if n is not None:
                stack.extend(term_children(self.view, n))
        return frozenset(loaded)

    def program(
        self,
        mat: frozenset[str],
        known: dict[int, frozenset[str]] | None = None,
        changed: frozenset[str] | set[str] = frozenset(),
    ) -> dict[int, frozenset[str]] | None:
        """Every kernel of the program under `mat`: SINK class -> buffers it loads; None when the kernels would
        depend on each other in a cycle. `known`/`changed`: the kernels of a program that materialized
        `changed` too (only those that loaded one of them are walked again)."""
        ch = self.choice(mat)
        kernels: dict[int, frozenset[str]] = {}
        stack = list(self.roots)
        while stack:
            sink = stack.pop()
            if sink in kernels:
                continue
            if known is not None and sink in known and not changed & known[sink]:
                loaded = known[sink]
            else:
                loaded = self.loaded(sink, ch)
            kernels[sink] = loaded
            stack.extend(self.offers[b].sink for b in sorted(loaded))  # sets of names: their order is per-process
        return None if _cyclic(kernels, self.offers) else kernels

    def kernel(self, sink: int, loaded: frozenset[str], mat: frozenset[str]) -> UOp | None:
        """The kernel at `sink` as the extraction has it under `mat` (None where a part is unextractable)."""
        if (sink, loaded) not in self.kernels:
            self.kernels[(sink, loaded)] = extracted_kernel(Overridden(self.ex, self.choice(mat)), sink, self.decode)
        return self.kernels[(sink, loaded)]

    def rank(self, sink: int, loaded: frozenset[str], mat: frozenset[str], quick: bool = False) -> KernelSchedule:
        """The kernel's schedules ranked (each kernel's own, whatever the rankings before it: a fused REDUCE
        brings loop nests of its own, such as a GEMM's tensor-core tiles). `quick` for trials; a full ranking,
        once made, serves both. A kernel shaped like one ranked before (the same kernel over other buffers, and
        the same schedules offered) replays that ranking's best schedules. Past the caller's deadline a kernel
        not ranked yet is ranked in a hurry: the extraction's loop nest and a few guesses (rank_kernel)."""
        for key in ((sink, loaded, False), (sink, loaded, True)) if quick else ((sink, loaded, False),):
            if key in self.rankings:
                return self.rankings[key]
        ex = Overridden(self.ex, self.choice(mat))
        space = ScheduleSpace(self.view, ex, sink)
        if self.deadline is not None and time.perf_counter() > self.deadline:
            decoded = self.decoded.setdefault((sink, loaded), {})
            hurried = rank_kernel(self.view, ex, sink, self.decode, self.model, quick, space, decoded, hurried=True)
            self.rankings[(sink, loaded, quick)] = hurried
            self.unranked.add(sink)
            return hurried
        kernel = self.kernel(sink, loaded, mat)
        shape = None if kernel is None or space.shape is None else (canonical_kernel(kernel), frozenset(space.shape))
        # a full ranking of the shape serves any request; a quick one serves only quick ones
        donor = (
            None if shape is None else self.donors.get((shape, False)) or (self.donors.get((shape, True)) if quick else None)
        )
        top = 1 if quick else REPLAYED  # a trial needs the best estimate alone
        ks = None
        if donor is not None:
            for cand in donor[0].ranked[:top]:  # the donor's estimates, by structure
                self.by_structure.setdefault(canonical_kernel(cand.kernel), cand.estimate)
            ks = rank_like(ex, sink, self.decode, self.replay_model, space, *donor, top)
        if ks is None:
            decoded = self.decoded.setdefault((sink, loaded), {})
            ks = rank_kernel(
                self.view, ex, sink, self.decode, self.model, quick, space, decoded, deadline=self.deadline, prior=self.prior
            )
            if not quick:
                self.prior.update(binder_order(ks, space))
            if shape is not None:
                self.donors.setdefault((shape, quick), (ks, space))
        self.rankings[(sink, loaded, quick)] = ks
        return ks

    def floor(self, kernels: dict[int, frozenset[str]], mat: frozenset[str]) -> float:
        """A lower bound of the kernels' estimates whatever their schedules (0 where the model has none)."""
        if self.model.floor is None:
            return 0.0
        for sink, loaded in kernels.items():
            if (sink, loaded) not in self.floors:
                k = self.kernel(sink, loaded, mat)
                self.floors[(sink, loaded)] = 0.0 if k is None else self.model.floor(k)
        return sum(self.floors[k] for k in kernels.items())

    def cost(self, kernels: dict[int, frozenset[str]], mat: frozenset[str], quick: bool = False) -> dict[int, float]:
        out: dict[int, float] = {}
        for sink, loaded in kernels.items():
            ks = self.rank(sink, loaded, mat, quick)
            out[sink] = ks.best.estimate.seconds if ks.ranked else math.inf
        return out


def _cyclic(kernels: dict[int, frozenset[str]], offs: dict[str, Offer]) -> bool:
    """Do the kernels (SINK class -> buffers loaded) depend on each other in a cycle?"""
    state: dict[int, int] = {}  # 1: on the path, 2: done

    for start in kernels:
        if start in state:
            continue
        stack: list[tuple[int, list[int]]] = [(start, [offs[b].sink for b in kernels[start]])]
        state[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                state[node] = 2
                stack.pop()
                continue
            nxt = todo.pop()
            if state.get(nxt) == 1:
                return True
            if nxt not in state and nxt in kernels:
                state[nxt] = 1
                stack.append((nxt, [offs[b].sink for b in kernels[nxt]]))
    return False


def choose_fusion(
    view: EGraphView,
    ex: Extraction,
    roots: list[int],
    decode: Decode,
    model: CostModel,
    candidates: dict[str, tuple[str, int]],
    barriers: set[str],
    time_budget: float,
    progress: Callable[[str], None] | None = None,
    deadline: float | None = None,
    pairs: bool = True,
    memory_limit: int | None = None,
    fits: Callable[[FusionResult], bool] | None = None,
) -> FusionResult:
    """The materialized buffers and every kernel's schedules, from the baseline by estimated savings.

    candidates: buffer name -> (a label for the report, bytes) for each intermediate that may be fused;
    barriers: buffers that are never fused (CONTIGUOUS); time_budget: seconds of trials (`Limits.search_time`;
    the baseline and the final ranking are not counted); deadline: a perf_counter time past which no trial
    starts and kernels ranked quickly are not ranked again in full (`optimize`'s time_limit); pairs: when no single
    fusion pays, try the buffers one kernel loads two at a time (a GEMM's two cast operands enable tensor cores
    only together: on CPUs no pair has paid where no single did, and the pass cost GPT-2 ~0.8 s); memory_limit:
    bytes the intermediates' arena may take (see the module docstring); fits: does the program of a result meet
    it? (the program's own memory plan, where the backend keeps some buffers chunk by chunk, which the search's
    arena counts whole): a program that does is kept as it is."""
    s = _Search(view, ex, roots, decode, model, candidates, barriers, deadline)
    notes: list[str] = []
    mat, kernels = _baseline(s, candidates, notes)
    late = deadline is not None and time.perf_counter() > deadline  # the caller's time is up: quick rankings only
    costs = s.cost(kernels, mat, quick=late)
    baseline = sum(costs.values())
    start = time.perf_counter()
    if deadline is not None:
        time_budget = min(time_budget, max(0.0, deadline - start))
    trials = _Trials(s, candidates, mat, kernels, costs, progress)
    degraded: list[str] = []  # the notes that say a limit cut the search short
    if trials.search(pairs, lambda: time.perf_counter() - start > time_budget):
        degraded.append(
            f"the fusion search stopped at its time budget ({time_budget:g} s); the best program found so far is used"
        )
    met = fits is not None and memory_limit is not None and fits(_result(trials, baseline, deadline, [], []))
    if memory_limit is not None and not met and (fused := trials.fit(memory_limit)):
        cost = -sum(d.saving_s for d in fused)
        notes.append(
            f"memory_limit {memory_limit:,} bytes: {len(fused)} more buffer(s) fused to fit it, "
            f"{cost * 1e3:+.3g} ms by the estimate"
        )
    return _result(trials, baseline, deadline, notes, degraded)


def _baseline(
    s: _Search, candidates: dict[str, tuple[str, int]], notes: list[str]
) -> tuple[frozenset[str], dict[int, frozenset[str]]]:
    """The safe baseline: every candidate the e-graph offers materialized, and its kernels (SINK class -> buffers
    loaded). A cycle through values the e-graph proved equal drops the newest candidates until none is left."""
    mat = frozenset(n for n in candidates if n in s.offers)
    kernels = s.program(mat)
    while kernels is None and mat:
        mat = frozenset(sorted(mat, key=list(candidates).index)[:-1])
        kernels = s.program(mat)
        notes.append("a materialization that would make kernels read each other was left out")
    if kernels is None:  # the barriers alone make a cycle
        raise UnsupportedOp(
            at="fusion",
            why="the e-graph proved values behind different buffers equal so that a kernel would read its own "
            "output (a chain that repeats itself, such as one folding to a constant, can do this)",
            suggestion="simplify the repeating part of the graph (compute it once), or report the graph as a bug",
        )
    return mat, kernels


class _Trials:
    """The greedy search: the program so far (the buffers it materializes, its kernels and their estimates), the
    fusions tried on it, and every decision, for the report."""

    def __init__(
        self,
        s: _Search,
        candidates: dict[str, tuple[str, int]],
        mat: frozenset[str],
        kernels: dict[int, frozenset[str]],
        costs: dict[int, float],
        progress: Callable[[str], None] | None,
    ) -> None:
        self.s, self.candidates, self.progress = s, candidates, progress
        self.mat, self.kernels, self.costs = mat, kernels, costs
        self.decisions: dict[str, Decision] = {}
        # ties between trials go by the candidates' order: the search must not depend on how a process hashes names
        self.order = {b: i for i, b in enumerate(candidates)}

    def live(self, b: str) -> bool:
        """Is buffer b still materialized and loaded by a kernel?"""
        return b in self.mat and any(b in v for v in self.kernels.values())

    def search(self, pairs: bool, out_of_time: Callable[[], bool]) -> bool:
        """Pass over the buffers still loaded, single fusions first, then pairs (`pairs`), back to singles after
        every pass that kept one, until a pass keeps nothing; True when `out_of_time` ended it first. With many
        buffers (a graph of thousands of small ops), single fusions that pay are tried in batches that double
        while they keep paying and fall back to one at a time when one does not: every trial decodes the
        kernels it grows, so one buffer at a time costs quadratic time."""
        batching = sum(map(self.live, self.candidates)) > BATCH_ABOVE
        size = 1
        while size <= (2 if pairs else 1):
            improved = self.sweep(size, batching, out_of_time)
            if improved is None:
                return True
            size = 1 if improved else size + 1
        return False

    def sweep(self, size: int, batching: bool, out_of_time: Callable[[], bool]) -> bool | None:
        """One pass over the groups of `size` buffers, most traffic saved first; whether it kept a fusion (a pass
        of pairs ends at the first), None when `out_of_time` stopped it."""
        improved = False
        todo, i, batch = self.groups(size), 0, 1
        while i < len(todo):
            if out_of_time():
                return None
            if batch > 1:
                chunk = tuple(g[0] for g in todo[i : i + batch] if self.live(g[0]))
                if len(chunk) > 1 and self.attempt(chunk):
                    improved, i, batch = True, i + batch, 2 * batch
                else:
                    batch = 1
                continue
            group = todo[i]
            i += 1
            if not all(map(self.live, group)):
                continue
            if self.attempt(group):  # the pass goes on with the new program; the next pass retries the rest
                improved = True
                if size > 1:
                    break
                batch = 2 if batching else 1
        return improved

    def groups(self, size: int) -> list[tuple[str, ...]]:
        """Materialized buffers still loaded, alone (size 1) or in pairs loaded by one kernel (size 2: a GEMM's
        two cast operands only enable tensor cores together), most traffic saved first."""
        used: dict[str, int] = {}
        for loaded in self.kernels.values():
            for b in loaded:
                used[b] = used.get(b, 0) + 1
        weight = {b: self.candidates[b][1] * (1 + used[b]) for b in used if b in self.mat}
        order = self.order
        if size == 1:
            return [(b,) for b in sorted(weight, key=lambda b: (-weight[b], order[b]))]
        twos = {
            tuple(sorted(p))
            for loaded in self.kernels.values()
            for p in itertools.combinations(sorted(b for b in loaded if b in weight)[:MAX_PAIRED], 2)
        }
        return sorted(twos, key=lambda p: (-sum(weight[b] for b in p), [order[b] for b in p]))

    def attempt(self, group: tuple[str, ...]) -> bool:
        """Fuse every buffer of `group` at once; keep the program if its estimate drops past the margin."""
        trial_mat = self.mat - set(group)
        trial = self.s.program(trial_mat, self.kernels, set(group))
        if trial is None:
            return False
        trial_costs, changed, replaced = self.compare(trial)
        keep, before, after, ranked = self.judge(trial_mat, trial_costs, changed, replaced)
        for b in group:
            self.decisions[b] = Decision(b, self.candidates[b][0], self.candidates[b][1], keep, before - after)
        if self.progress is not None:
            self.progress(self.describe(group, keep, before, after, ranked))
        if keep:
            self.mat, self.kernels, self.costs = trial_mat, trial, trial_costs
        return keep

    def judge(
        self,
        trial_mat: frozenset[str],
        trial_costs: dict[int, float],
        changed: dict[int, frozenset[str]],
        replaced: dict[int, frozenset[str]],
    ) -> tuple[bool, float, float, bool]:
        """(keep?, seconds before, after, ranked?) of a trial whose kernels `changed` replace `replaced`: the
        work floor rules most losing trials out unranked (a GEMM recomputed for every element of its consumer);
        a near miss on the quick ranking is ranked again in full, and a win in full is confirmed against the
        replaced kernels in full. Fills `trial_costs` with the changed kernels' estimates."""
        s, costs = self.s, self.costs
        before = sum(costs[k] for k in replaced)
        after = s.floor(changed, trial_mat)
        keep, ranked = False, after <= before * (1 + NOISE)
        for quick in (True, False) if ranked else ():
            trial_costs.update(s.cost(changed, trial_mat, quick=quick))
            after = sum(trial_costs[k] for k in changed)
            keep = math.isfinite(after) and before - after > NOISE * before
            if keep and not quick:
                costs.update((k, min(costs[k], v)) for k, v in s.cost(replaced, self.mat).items())
                before = sum(costs[k] for k in replaced)
                keep = before - after > NOISE * before
            # a quick ranking of a big kernel can miss its best loop nest by 2x: a narrow quick win there is
            # checked in full as well (a convolution's padded copy looks no dearer than its guards otherwise)
            narrow = quick and keep and before - after < RECHECK * before and before > VERIFY_ABOVE_S
            if (keep and not narrow) or not math.isfinite(after) or after > before * (1 + RECHECK):
                break
        return keep, before, after, ranked

    def compare(
        self, trial: dict[int, frozenset[str]]
    ) -> tuple[dict[int, float], dict[int, frozenset[str]], dict[int, frozenset[str]]]:
        """A trial program against the current one: the estimates of the kernels it keeps, the kernels it
        changes, and the current kernels they replace."""
        kernels, costs = self.kernels, self.costs
        kept = {k: costs[k] for k in trial if k in costs and trial[k] == kernels[k]}
        changed = {k: v for k, v in trial.items() if k not in kept}
        replaced = {k: v for k, v in kernels.items() if k not in trial or trial[k] != v}
        return kept, changed, replaced

    def arena(self, kernels: dict[int, frozenset[str]]) -> int:
        """Bytes of the arena the materialized candidates of a program need, planned over their lifetimes with
        the kernels in dependency order (the program's own order may differ a little)."""
        offs = self.s.offers
        order: list[int] = []
        done: set[int] = set()

        def visit(k: int) -> None:  # writers before readers (the kernels are acyclic)
            stack = [(k, iter(sorted(kernels[k])))]
            done.add(k)
            while stack:
                node, todo = stack[-1]
                nxt = next((offs[b].sink for b in todo if offs[b].sink in kernels and offs[b].sink not in done), None)
                if nxt is None:
                    stack.pop()
                    order.append(node)
                else:
                    done.add(nxt)
                    stack.append((nxt, iter(sorted(kernels[nxt]))))

        for k in sorted(kernels):
            if k not in done:
                visit(k)
        writes: dict[int, list[str]] = {}
        for b, o in offs.items():
            writes.setdefault(o.sink, []).append(b)
        live = {b for loaded in kernels.values() for b in loaded if b in self.candidates}
        spans = lifetimes([(kernels[k], writes.get(k, ())) for k in order], live)
        return plan({b: self.candidates[b][1] for b in spans}, spans).size

    def fit(self, limit: int) -> list[Decision]:
        """Fuse buffers until the arena fits `limit` bytes: each time the buffer (else the pair of them: two
        values live at once, a convolution's padded input beside its output, free nothing one by one) whose
        fusion costs the least estimated time per arena byte it frees (the floor rules out the hopeless
        unranked). The decisions it took (a pair's saving counted once)."""
        taken: list[Decision] = []
        size = self.arena(self.kernels)
        while size > limit:
            live = sorted((b for b in self.candidates if self.live(b)), key=lambda b: -self.candidates[b][1])
            best = self._cheapest([(b,) for b in live], size) or self._cheapest(
                list(itertools.combinations(live[:MAX_PAIRED], 2)), size
            )
            if best is None:
                break
            _, group, self.mat, self.kernels, self.costs, size, saving = best
            for i, b in enumerate(group):
                self.decisions[b] = Decision(b, self.candidates[b][0], self.candidates[b][1], True, saving)
                taken.append(replace(self.decisions[b], saving_s=saving if i == 0 else 0.0))
            if self.progress is not None:
                names = " + ".join(f"{b} ({self.candidates[b][0]})" for b in group)
                self.progress(f"fusion: {names} fused to fit the memory limit: arena {size:,} bytes")
        return taken

    def _cheapest(
        self, groups: list[tuple[str, ...]], size: int
    ) -> tuple[float, tuple[str, ...], frozenset[str], dict[int, frozenset[str]], dict[int, float], int, float] | None:
        """Of fusing each group, the one with the least estimated time per arena byte freed (None: none frees
        any): (seconds per byte, the group, its program's buffers, kernels and costs, the arena, the saving)."""
        best = None
        for group in groups:
            trial_mat = self.mat - set(group)
            trial = self.s.program(trial_mat, self.kernels, set(group))
            if trial is None or (freed := size - self.arena(trial)) <= 0:
                continue
            costs, changed, replaced = self.compare(trial)
            before = sum(self.costs[k] for k in replaced)
            if best is not None and (self.s.floor(changed, trial_mat) - before) / freed >= best[0]:
                continue
            costs.update(self.s.cost(changed, trial_mat, quick=True))
            after = sum(costs[k] for k in changed)
            rate = (after - before) / freed
            if math.isfinite(after) and (best is None or rate < best[0]):
                best = (rate, group, trial_mat, trial, costs, size - freed, before - after)
        return best

    def describe(self, group: tuple[str, ...], keep: bool, before: float, after: float, ranked: bool) -> str:
        """A trial in one line, for `progress`."""
        names = " + ".join(group) if len(group) <= 4 else f"{len(group)} buffers ({group[0]} ... {group[-1]})"
        labels = ", ".join(self.candidates[b][0] for b in group) if len(group) <= 4 else "a batch"
        return (
            f"fusion: {names} ({labels}) "
            f"{'fused' if keep else 'kept'}: {before * 1e3:.3f} -> {'' if ranked else 'at least '}"
            f"{after * 1e3:.3f} ms"
        )


def _result(trials: _Trials, baseline: float, deadline: float | None, notes: list[str], degraded: list[str]) -> FusionResult:
    """The kept program with its kernels ranked in full (unless the caller's time is up): a full ranking contains
    every quick one's candidates' region and is kept only where it is no worse, so the chosen estimate stays
    below the baseline's. Buffers never tried are recorded as materialized."""
    s, mat, kernels, costs, candidates = trials.s, trials.mat, trials.kernels, trials.costs, trials.candidates
    past = deadline is not None and time.perf_counter() > deadline
    full = costs if past else s.cost(kernels, mat)
    scheds = {
        k: s.rankings.get((k, kernels[k], full[k] > costs[k]))
        or s.rankings.get((k, kernels[k], True))
        or s.rankings[(k, kernels[k], False)]
        for k in kernels
    }
    if past:
        degraded.append("the time limit was reached: kernels ranked quickly in the fusion search keep that ranking")
    if unranked := s.unranked & set(kernels):
        degraded.append(
            f"the time limit was reached before {len(unranked)} of {len(kernels)} kernels were ranked: each got the "
            "best of its extraction's loop nest and a guessed unrolling per cap (no schedule search)"
        )
    chosen = sum(min(full[k], costs[k]) for k in kernels)
    choice = s.choice(mat)
    decisions = trials.decisions
    for b in candidates:
        if b in s.offers and b not in decisions and trials.live(b):
            decisions[b] = Decision(b, candidates[b][0], candidates[b][1], False, math.nan)
    return FusionResult(
        choice,
        scheds,
        baseline,
        chosen,
        list(decisions.values()),
        sorted(b for b in mat if trials.live(b)),
        notes + degraded,
        degraded,
    )


__all__ = ["Decision", "FusionResult", "Offer", "choose_fusion", "offers"]
