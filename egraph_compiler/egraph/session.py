"""An egglog e-graph session: schema, rules, insertion, bounded saturation.

egglog has no node limit or timeout of its own, so saturation runs in
steps: each step runs the analysis rulesets one iteration at a time (up to
`analysis_steps`), then applies the stage's rules once; both under back-off
schedulers (a rule that matches too often is banned for a few iterations)
once the e-graph has `plain_below` nodes, plainly before (a scheduler
compiles its rules on first use, which costs more than it saves there).
The limits are checked after every analysis iteration and every step: node
count, time, step count, and growth (a step may not multiply a large
e-graph by more than `step_growth`). Hitting one ends saturation with the
e-graph as it is; the report says which. `simplify` also stops a stage whose
watched root has not improved for `patience` steps ("converged").
Durations are measured here, not taken from egglog's run report."""

from __future__ import annotations

import itertools
import numbers
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from egraph_compiler.egraph import bindings as egglog_bindings
from egraph_compiler.egraph.dsl import RuleSet
from egraph_compiler.egraph.encode import Encoder, Registry
from egraph_compiler.egraph.report import IterationStats, Report
from egraph_compiler.egraph.schema import EGG_TO_OP, PROVENANCE_PREFIX, PROVENANCE_SEED, provenance_program, schema_program
from egraph_compiler.egraph.view import EGraphView, build_view, serialized_view
from egraph_compiler.ir.diagnostics import InvalidArgument
from egraph_compiler.ir.uop import UOp

ANALYSIS_CHUNK = 1  # analysis iterations between two limit checks
GROWTH_FLOOR = 3_000  # e-graphs smaller than this may grow by any factor in one step
MAX_BATCH, FAST_STEP_S, SLOW_STEP_S = 16, 0.01, 0.1  # iterations a baseline step may batch, and when it does
COUNT_ALLOWANCE_S = 0.05  # class counts for the report always fit in this much time, then in 10% of saturation
# even the unlimited stages stop here (optimize then rebuilds with every candidate behind a barrier): past it,
# extracting the e-graph and ranking its kernels takes longer than a first call may (~30 us a node to extract;
# the largest inline e-graphs that finish, transformers' ONNX exports, have 190k-260k nodes), and far past it
# more memory than a machine has (a 544-op graph whose values are read in many index contexts reached 2.5M
# nodes and was killed for memory). ResNet-18 and MobileNetV2 from ONNX spent 7 and 13 s growing an e-graph
# to the old ceiling of 1M before dropping it.
SERIALIZED_PICTURE_NODES = 6_000  # e-graphs up to this size are drawn from egglog's own serialization
BASELINE_CEILING = 400_000
CEILINGS = ("node_ceiling", "time_ceiling")  # stop reasons that leave the unlimited stages (the baseline) incomplete
BASE_CONSTRUCTORS = {"I", "F", "INil", "ICons", "UNil", "UCons", "RK", *EGG_TO_OP}


@dataclass(frozen=True)
class Limits:
    """Bounds on e-graph growth. Every optimize/simplify call takes these as keyword arguments."""

    node_limit: int = 60_000
    iter_limit: int = 40
    time_limit: float = 30.0  # seconds of saturation, over all stages
    match_limit: int = 2_000  # back-off: a rule matching more often than this in a step is banned
    ban_length: int = 3  # ... for this many steps
    analysis_steps: int = 30  # bound on analysis saturation per step
    step_growth: float = 4.0  # a step may multiply the e-graph by at most this (once past GROWTH_FLOOR nodes)
    patience: int = 4  # steps without a better watched root before a stage counts as converged
    search_time: float = 20.0  # seconds of fusion trials after saturation (extract/fusion.py)
    plain_below: int = 2_000  # smaller e-graphs run their rules without the back-off scheduler (no bans):
    #                               a scheduler compiles every rule on its first run, which costs more here

    @staticmethod
    def make(**kw: object) -> Limits:
        bad = set(kw) - set(Limits.__dataclass_fields__)
        if bad:
            raise InvalidArgument(
                at="limits", why=f"unknown limit(s) {sorted(bad)}", suggestion=f"use {', '.join(Limits.__dataclass_fields__)}"
            )
        for k, v in kw.items():
            count = Limits.__dataclass_fields__[k].type == "int"
            kind = numbers.Integral if count else numbers.Real
            # numbers.Real declares only the ABC's __lt__ and __le__, though every Real compares with an int by `>`
            if isinstance(v, bool) or not isinstance(v, kind) or not v > 0:  # type: ignore[operator]
                raise InvalidArgument(
                    at=f"limit {k}",
                    why=f"{k}={v!r} is not a positive {'whole number' if count else 'number'}",
                    suggestion=f"{k} is a count of {'items' if count else 'seconds or a factor'}: "
                    "pass a positive value (NaN, 0 and negatives turn nothing off)",
                )
        # each value was checked against its field's kind above: mypy cannot follow that to the fields' types
        return Limits(**kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Stage:
    """One saturation stage: `rulesets` applied each step after saturating `analyses`."""

    name: str
    rulesets: tuple[str, ...]
    analyses: tuple[str, ...] = ()
    max_steps: int | None = None  # a terminating ruleset may run longer than limits.iter_limit
    growth_check: bool = True  # False for a terminating ruleset that must finish (limits.step_growth)
    after_limit_steps: int = 0  # steps it still gets when a limit ended saturation: no analyses, and ...
    after_limit_rulesets: tuple[str, ...] = ()  # ... only these rulesets (default: its own)
    plain_factor: float = 1.0  # it runs without the scheduler below this many times limits.plain_below
    limited: bool = True  # False: the safe baseline (rangeify) that no limit may cut; it runs to completion
    #                                (max_steps bounds it) and node_limit/time_limit count only what comes after it
    extra_nodes: int = 0  # nodes this stage may grow past node_limit (a budget that scales with the program)
    # seconds per e-node (of the e-graph it starts from) its after-limit steps and what they add to the caller's
    # later work take: an earlier stage stops this much sooner before the caller's deadline to leave them time
    reserve_s_per_node: float = 0.0


_DECL = re.compile(r"\((?:constructor|datatype)\s+([^\s()]+)")
_DATATYPE_VARIANTS = re.compile(r"\(datatype\s+\S+((?:\s*\([^()]*\))+)\)")


def declared_constructors(text: str) -> set[str]:
    """Names of the constructors (e-node tables) a declaration text introduces."""
    names = {m.group(1) for m in re.finditer(r"\(constructor\s+([^\s()]+)", text)}
    for m in _DATATYPE_VARIANTS.finditer(text):
        names |= {v.split()[0] for v in re.findall(r"\(([^()]*)\)", m.group(1)) if v.split()}
    return names


class EGraphSession:
    def __init__(
        self,
        rulesets: Sequence[RuleSet],
        declarations: Sequence[str] = (),
        unextractable: Iterable[str] = (),
        provenance: bool = False,
    ) -> None:
        """`provenance`: every rule firing stamps the op e-nodes it builds with the rule's name, and saturation
        first stamps the encoded graph's as INPUT (`producer` reads the stamps back; about twice the inserts)."""
        # here, not at import: a program from the compile cache needs no e-graph
        self.eg = egglog_bindings.load().EGraph()
        self.reg = Registry()
        self.encoder = Encoder(self.reg)
        self.rulesets = {rs.name: rs for rs in rulesets}
        decl_text = "\n".join(declarations)
        self.constructors = BASE_CONSTRUCTORS | declared_constructors(decl_text)
        self.unextractable = set(unextractable)
        self._run(schema_program())
        self._run(decl_text)
        self.provenance = provenance
        if provenance:
            self._run(provenance_program())
        for rs in rulesets:
            self._run(rs.to_egglog(EGG_TO_OP if provenance else ()))
        self._combined: dict[tuple[str, ...], str] = {}
        self.worked = 0  # e-nodes of the problems it has held: egglog keeps some memory per problem after a pop
        self._schedulers: dict[str, str] = {}
        self._scheduler_ids = itertools.count()

    def _run(self, text: str) -> Sequence[object]:
        return self.eg.parse_and_run_program(text) if text.strip() else []

    def run_commands(self, text: str) -> Sequence[object]:
        return self._run(text)

    # ---- insertion -----------------------------------------------------------------------------

    def add(self, roots: Iterable[UOp], batch: int = 2000) -> None:
        cmds = self.encoder.commands(roots)
        for i in range(0, len(cmds), batch):
            self._run("\n".join(cmds[i : i + batch]))

    def name_of(self, u: UOp) -> str:
        return self.encoder.names[u]

    # ---- saturation ----------------------------------------------------------------------------

    def _ruleset_for(self, names: tuple[str, ...]) -> str:
        if len(names) == 1:
            return names[0]
        if names not in self._combined:
            cname = "combined_" + "_".join(names)
            self._run(f"(unstable-combined-ruleset {cname} {' '.join(names)})")
            self._combined[names] = cname
        return self._combined[names]

    def _new_schedulers(self, stages: Sequence[Stage], limits: Limits) -> None:
        """A fresh back-off scheduler per stage (no ban state carries over between problems). Schedulers are
        top-level egglog objects, so they are made outside any push/pop scope."""
        for stage in stages:
            name = f"bo_{next(self._scheduler_ids)}"
            for sched in (name, name + "_an"):  # analyses get their own: a runaway analysis rule is banned too
                self._run(
                    f"(let-scheduler {sched} (back-off :match-limit {limits.match_limit} :ban-length {limits.ban_length}))"
                )
            self._schedulers[stage.name] = name

    @contextmanager
    def scope(self, stages: Sequence[Stage], limits: Limits) -> Iterator[EGraphSession]:
        """Work on one problem and forget it afterwards: the schema and rules stay, the terms go."""
        self._new_schedulers(stages, limits)
        for stage in stages:  # combined rulesets are declarations too: make them outside the scope
            for ruleset_names in (stage.rulesets, stage.analyses, stage.after_limit_rulesets):
                if ruleset_names:
                    self._ruleset_for(ruleset_names)
        self._run("(push)")
        names, reg = self.encoder.names, self.reg
        self.encoder.names = {}
        try:
            yield self
        finally:
            try:
                self.worked += self.size()
            except Exception:  # egglog failed on this problem: the session is replaced before its next one
                self.worked = 1 << 62
            self._run("(pop)")
            self.encoder.names = names
            self.reg = reg

    def size(self) -> int:
        out = self._run("(print-size)")
        sizes = getattr(out[-1], "sizes", [])
        return sum(n for name, n in sizes if name in self.constructors)

    def num_classes(self) -> int:
        """E-classes of the term tables, counted on a frozen copy (far cheaper than building a view)."""
        frozen = self.eg.freeze()
        return len(
            {
                row.output
                for name, fn in frozen.functions.items()
                if name in self.constructors
                for row in fn.rows
                if not row.subsumed
            }
        )

    def tree_cost(self, let_name: str) -> int:
        """egglog's own (tree, node-count) extraction cost of a bound term: a cheap progress signal."""
        out = self._run(f"(extract {let_name})")[-1]
        assert isinstance(out, egglog_bindings.load().ExtractBest)
        return int(out.cost)

    def _run_counted(self, cmd: str, matches: dict[str, int]) -> tuple[bool, bool]:
        """Run one schedule, add its rule matches to `matches`; returns (updated, can_stop)."""
        out = self._run(cmd)[-1]
        assert isinstance(out, egglog_bindings.load().RunScheduleOutput)
        rep = out.report
        for k, v in rep.num_matches_per_rule.items():
            if v:
                matches[k] = matches.get(k, 0) + v
        return rep.updated, rep.can_stop

    def _steps_after_limit(
        self, stage: Stage, main_cmd: str, report: Report, progress: Callable[[IterationStats], None] | None
    ) -> None:
        """A few steps of cheap rules, no analyses: the e-graph is already at its budget."""
        for _ in range(stage.after_limit_steps):
            t0 = time.perf_counter()
            matches: dict[str, int] = {}
            updated, _ = self._run_counted(main_cmd, matches)
            nodes = self.size()
            stats = IterationStats(len(report.iterations), stage.name, nodes, None, time.perf_counter() - t0, matches)
            report.iterations.append(stats)
            if progress is not None:
                progress(stats)
            if not updated:
                break
        report.notes.append(
            f"stage {stage.name!r} ran {stage.after_limit_rulesets or stage.rulesets} only, without analyses, after the limit"
        )

    def saturate(
        self,
        stages: Sequence[Stage],
        limits: Limits,
        report: Report,
        progress: Callable[[IterationStats], None] | None = None,
        count_classes: int = 20_000,
        watch: Sequence[str] = (),
        deadline: float | None = None,
        cut_baseline: float | bool = True,
        reserve_per_node: float = 0.0,
    ) -> str:
        """Run the stages in order under `limits`; returns (and records) the stop reason.

        `deadline` (a perf_counter time: the caller's time limit for its whole call) stops every stage, the
        unlimited ones too where `cut_baseline` ("time_ceiling": their result is then incomplete, like at the node
        ceiling); a float `cut_baseline` is an earlier perf_counter time at which they stop. `reserve_per_node`:
        seconds per e-node the caller needs after saturation (optimize: extraction); a limited stage stops once
        what is left before the deadline would not cover the e-graph it has.

        Each step saturates the analyses in chunks of ANALYSIS_CHUNK iterations, checking the limits after every
        chunk (an analysis iteration can grow the e-graph as much as a rule step), then runs the stage's rules
        once. `watch` names let-bound roots: when their tree cost has not improved for `limits.patience`
        steps, the stage stops as "converged" (more rewriting is then unlikely to pay for its growth)."""
        report.limits = asdict(limits)
        for rs in self.rulesets.values():
            for r in rs.rules:
                report.rule_category[r.name] = r.category
                report.rule_doc[r.name] = r.doc
                report.rule_ruleset[r.name] = rs.name
        if self.provenance:  # what is here now came from the caller's graph
            self._run(f"(run {PROVENANCE_SEED} 1)")
        run = _Saturation(self, limits, report, progress, count_classes, deadline, cut_baseline, reserve_per_node)
        for i, stage in enumerate(stages):
            if not run.run_stage(stage, watch, later=stages[i + 1 :]):
                break
        report.add_phase("saturate", time.perf_counter() - run.start)
        report.stop_reason = run.reason
        return run.reason

    # ---- reading back --------------------------------------------------------------------------

    def picture_view(self, view: EGraphView) -> EGraphView:
        """What a picture of the e-graph is drawn from: egglog's own serialization of it (the format of egglog's
        visualizer) where it is small enough to read whole (SERIALIZED_PICTURE_NODES; ~15 us an e-node), else
        `view`, this session's reading of the same e-graph (build_view), which serves every other purpose."""
        if view.num_nodes > SERIALIZED_PICTURE_NODES:
            return view
        return serialized_view(self.eg, self.constructors, view)

    def view(self, functions: Iterable[str] = ()) -> EGraphView:
        """The e-graph as it is now; with provenance, the producers' tables come along."""
        stamps = [PROVENANCE_PREFIX + name for name in EGG_TO_OP] if self.provenance else []
        return build_view(self.eg, self.constructors, functions, annotations=stamps)


def _baseline_ceiling(deadline: float | None, cut_baseline: float | bool) -> float | None:
    """The perf_counter time at which the unlimited stages stop (see EGraphSession.saturate); None: never."""
    if deadline is None or cut_baseline is False:
        return None
    return deadline if cut_baseline is True else cut_baseline


def _next_batch(batch: int, seconds: float) -> int:
    """The baseline's iterations per step after a step of `seconds`: doubled while steps are quick, halved when slow."""
    if seconds < FAST_STEP_S:
        return min(MAX_BATCH, 2 * batch)
    return max(1, batch // 2) if seconds > SLOW_STEP_S else batch


class _Patience:
    """Whether the watched roots have stopped improving: their tree costs found no new best for `patience` checks."""

    def __init__(self, sess: EGraphSession, watch: Sequence[str], patience: int) -> None:
        self.sess, self.watch, self.patience = sess, watch, patience
        self.best: tuple[int, ...] | None = None
        self.stale = 0

    def converged(self) -> bool:
        """Check the watched roots once more: True once `patience` checks in a row found no new best."""
        costs = tuple(self.sess.tree_cost(w) for w in self.watch)
        self.stale = self.stale + 1 if self.best is not None and costs >= self.best else 0
        self.best = costs if self.best is None else min(self.best, costs)
        return self.stale >= self.patience


class _Saturation:
    """One EGraphSession.saturate call: its clocks, the baseline's size, and why it stopped.

    `cut`: a node, time or growth limit ended saturation (the later stages get only their after_limit_steps);
    `base`: nodes of the unlimited stages (the baseline), past which node_limit counts; `clock`: when the
    limited stages began, for limits.time_limit; `counting`: seconds spent counting e-classes for the report."""

    def __init__(
        self,
        sess: EGraphSession,
        limits: Limits,
        report: Report,
        progress: Callable[[IterationStats], None] | None,
        count_classes: int,
        deadline: float | None,
        cut_baseline: float | bool,
        reserve_per_node: float,
    ) -> None:
        self.sess, self.limits, self.report, self.progress = sess, limits, report, progress
        self.count_classes, self.deadline, self.reserve_per_node = count_classes, deadline, reserve_per_node
        self.start = self.clock = time.perf_counter()
        self.counting = 0.0
        self.reason = "saturated"
        self.cut = False
        self.base = 0
        self.ceiling = _baseline_ceiling(deadline, cut_baseline)
        self.later: Sequence[Stage] = ()  # the stages after the one running

    def out_of_time(self, nodes: int) -> bool:
        """Would the caller's deadline leave too little time for an e-graph of `nodes` after saturation (and for
        the later stages' after-limit steps)?"""
        per_node = self.reserve_per_node + sum(s.reserve_s_per_node for s in self.later)
        return self.deadline is not None and time.perf_counter() + per_node * nodes > self.deadline

    def over_limit(self, stage: Stage, step_start: int) -> str | None:
        """The limit the e-graph has reached (None: none), for a step that began with `step_start` nodes."""
        if not stage.limited:
            late = self.ceiling is not None and time.perf_counter() > self.ceiling
            return "node_ceiling" if self.sess.size() > BASELINE_CEILING else "time_ceiling" if late else None
        limits = self.limits
        nodes = self.sess.size()
        if self.out_of_time(nodes):
            return "time_limit"
        if nodes - self.base > limits.node_limit + stage.extra_nodes:
            return "node_limit"
        if stage.growth_check and nodes > max(GROWTH_FLOOR, limits.step_growth * step_start):
            return "growth_limit"
        if time.perf_counter() - self.clock > limits.time_limit:
            return "time_limit"
        return None

    def run_stage(self, stage: Stage, watch: Sequence[str], later: Sequence[Stage] = ()) -> bool:
        """Run one stage (only its after_limit_steps once a limit cut saturation); False when saturation must
        end: the baseline is incomplete, and later stages cannot help."""
        sess = self.sess
        main = sess._ruleset_for(stage.rulesets)
        if stage.name not in sess._schedulers:
            sess._new_schedulers([stage], self.limits)
        sched = sess._schedulers[stage.name]
        analyses = sess._ruleset_for(stage.analyses) if stage.analyses else ""
        self.later = later
        if self.cut:  # a few cheap steps, even past the caller's deadline (they offer what the program needs)
            if stage.after_limit_steps:
                only = sess._ruleset_for(stage.after_limit_rulesets or stage.rulesets)
                sess._steps_after_limit(stage, f"(run-schedule (run-with {sched} {only}))", self.report, self.progress)
            return True
        stage_reason = self.run_steps(stage, main, sched, analyses, watch)
        if stage_reason is not None:
            self.stopped(stage, stage_reason)
            if stage_reason in CEILINGS:  # an incomplete baseline: later stages cannot help
                return False
        if not stage.limited:
            self.base, self.clock = sess.size(), time.perf_counter()
        return True

    def run_steps(self, stage: Stage, main: str, sched: str, analyses: str, watch: Sequence[str]) -> str | None:
        """Step the stage until nothing changes (None) or a limit, its step bound or convergence stops it (why)."""
        limits = self.limits
        patience = _Patience(self.sess, watch, limits.patience)
        steps = 0
        # the baseline's rules (no analyses, no limit) run several iterations a step while steps are quick: a deep
        # graph's rangeify takes hundreds of tiny steps, each paying for the limit checks and the report
        batch = 1
        while True:
            t0 = time.perf_counter()
            step_start = self.sess.size()
            scheduled = step_start >= limits.plain_below * stage.plain_factor
            matches: dict[str, int] = {}
            updated, stage_reason = self.run_analyses(stage, sched, analyses, scheduled, step_start, matches)
            can_stop = True
            if stage_reason is None:
                main_cmd = (f"(run {main} {batch})", f"(run-schedule (repeat {batch} (run-with {sched} {main})))")
                main_updated, can_stop = self.sess._run_counted(main_cmd[scheduled], matches)
                updated |= main_updated
            dt = time.perf_counter() - t0
            self.record(stage, dt, matches)
            steps += batch
            if not stage.limited and not analyses:
                batch = _next_batch(batch, dt)
            if stage_reason is not None:
                return stage_reason
            if not updated and can_stop:
                return None
            stage_reason = self.over_limit(stage, step_start)
            if stage_reason is None and steps >= (stage.max_steps or limits.iter_limit):
                stage_reason = "iter_limit" if stage.limited else "max_steps"
            if stage_reason is None and watch and patience.converged():
                stage_reason = "converged"
            if stage_reason is not None:
                return stage_reason

    def run_analyses(
        self, stage: Stage, sched: str, analyses: str, scheduled: bool, step_start: int, matches: dict[str, int]
    ) -> tuple[bool, str | None]:
        """Saturate the stage's analyses (if any) ANALYSIS_CHUNK iterations at a time, checking the limits after each
        chunk; returns (did they change anything, the limit that stopped them)."""
        cmd = (
            f"(run {analyses} {ANALYSIS_CHUNK})",
            f"(run-schedule (repeat {ANALYSIS_CHUNK} (run-with {sched}_an {analyses})))",
        )[scheduled]
        updated = False
        for _ in range(0, self.limits.analysis_steps, ANALYSIS_CHUNK) if analyses else ():
            an_updated, _ = self.sess._run_counted(cmd, matches)
            updated |= an_updated
            stage_reason = self.over_limit(stage, step_start)
            if not an_updated or stage_reason:
                return updated, stage_reason
        return updated, None

    def record(self, stage: Stage, seconds: float, matches: dict[str, int]) -> None:
        """Add a step's statistics to the report and pass them to `progress`."""
        nodes = self.sess.size()
        # counting classes freezes the e-graph (~5 ms at 10k nodes): for the report, at most ~10% of the time
        classes = None
        if nodes <= self.count_classes and self.counting <= 0.1 * (time.perf_counter() - self.start) + COUNT_ALLOWANCE_S:
            t_count = time.perf_counter()
            classes = self.sess.num_classes()
            self.counting += time.perf_counter() - t_count
        stats = IterationStats(len(self.report.iterations), stage.name, nodes, classes, seconds, matches)
        self.report.iterations.append(stats)
        if self.progress is not None:
            self.progress(stats)

    def stopped(self, stage: Stage, stage_reason: str) -> None:
        """Record why a stage stopped early: the report's note, the call's stop reason, and whether it cut saturation."""
        self.reason = stage_reason
        why = (
            f"its result had not improved for {self.limits.patience} steps"
            if stage_reason == "converged"
            else f"it reached its {stage_reason.replace('_', ' ')}"
        )
        self.report.notes.append(f"stage {stage.name!r} stopped because {why}; the result is the best program found so far")
        self.cut = stage_reason in ("node_limit", "time_limit", "growth_limit", *CEILINGS)
