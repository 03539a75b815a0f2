"""An egglog e-graph session: schema, rules, insertion, bounded saturation.

egglog has no node limit or timeout of its own, so saturation runs in
steps: each step saturates the analysis rulesets (bounded), then applies
the stage's rules once under a back-off scheduler (a rule that matches too
often is banned for a few steps), then checks the limits. Hitting a limit
ends the stage with the e-graph as it is; the report says which limit.
Durations are measured here, not taken from egglog's run report.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from egglog import bindings

from egraph_compiler.diagnostics import InvalidArgument
from egraph_compiler.encode import Encoder, Registry
from egraph_compiler.extract.view import EGraphView, build_view
from egraph_compiler.report import IterationStats, Report
from egraph_compiler.rules.dsl import RuleSet
from egraph_compiler.schema import EGG_TO_OP, schema_program
from egraph_compiler.uop import UOp

BASE_CONSTRUCTORS = {"I", "F", "INil", "ICons", "UNil", "UCons", "RK", *EGG_TO_OP}


@dataclass(frozen=True)
class Limits:
    """Bounds on e-graph growth. Every optimize/simplify call takes these as keyword arguments."""

    node_limit: int = 60_000
    iter_limit: int = 40
    time_limit: float = 30.0      # seconds of saturation, over all stages
    match_limit: int = 2_000      # back-off: a rule matching more often than this in a step is banned
    ban_length: int = 3           # ... for this many steps
    analysis_steps: int = 30      # bound on analysis saturation per step

    @staticmethod
    def make(**kw: object) -> Limits:
        bad = set(kw) - set(Limits.__dataclass_fields__)
        if bad:
            raise InvalidArgument(at="limits", why=f"unknown limit(s) {sorted(bad)}",
                                  suggestion=f"use {', '.join(Limits.__dataclass_fields__)}")
        for k, v in kw.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
                raise InvalidArgument(at=f"limit {k}", why=f"{k}={v!r} is not a positive number",
                                      suggestion="limits are positive numbers")
        return Limits(**kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Stage:
    """One saturation stage: `rulesets` applied each step after saturating `analyses`."""

    name: str
    rulesets: tuple[str, ...]
    analyses: tuple[str, ...] = ()
    max_steps: int | None = None   # a terminating ruleset may run longer than limits.iter_limit


_DECL = re.compile(r"\((?:constructor|datatype)\s+([^\s()]+)")
_DATATYPE_VARIANTS = re.compile(r"\(datatype\s+\S+((?:\s*\([^()]*\))+)\)")


def declared_constructors(text: str) -> set[str]:
    """Names of the constructors (e-node tables) a declaration text introduces."""
    names = {m.group(1) for m in re.finditer(r"\(constructor\s+([^\s()]+)", text)}
    for m in _DATATYPE_VARIANTS.finditer(text):
        names |= {v.split()[0] for v in re.findall(r"\(([^()]*)\)", m.group(1)) if v.split()}
    return names


class EGraphSession:
    def __init__(self, rulesets: Sequence[RuleSet], declarations: Sequence[str] = (),
                 unextractable: Iterable[str] = ()) -> None:
        self.eg = bindings.EGraph()
        self.reg = Registry()
        self.encoder = Encoder(self.reg)
        self.rulesets = {rs.name: rs for rs in rulesets}
        decl_text = "\n".join(declarations)
        self.constructors = BASE_CONSTRUCTORS | declared_constructors(decl_text)
        self.unextractable = set(unextractable)
        self._run(schema_program())
        self._run(decl_text)
        for rs in rulesets:
            self._run(rs.to_egglog())
        self._combined: dict[tuple[str, ...], str] = {}
        self._schedulers: dict[str, str] = {}
        self._scheduler_ids = itertools.count()

    def _run(self, text: str) -> list[object]:
        return self.eg.parse_and_run_program(text) if text.strip() else []

    def run_commands(self, text: str) -> list[object]:
        return self._run(text)

    # ---- insertion -----------------------------------------------------------------------------

    def add(self, roots: Iterable[UOp], batch: int = 2000) -> None:
        cmds = self.encoder.commands(roots)
        for i in range(0, len(cmds), batch):
            self._run("\n".join(cmds[i:i + batch]))

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
                self._run(f"(let-scheduler {sched} (back-off :match-limit {limits.match_limit} "
                          f":ban-length {limits.ban_length}))")
            self._schedulers[stage.name] = name

    @contextmanager
    def scope(self, stages: Sequence[Stage], limits: Limits) -> Iterator[EGraphSession]:
        """Work on one problem and forget it afterwards: the schema and rules stay, the terms go."""
        self._new_schedulers(stages, limits)
        for stage in stages:  # combined rulesets are declarations too: make them outside the scope
            self._ruleset_for(stage.rulesets)
            if stage.analyses:
                self._ruleset_for(stage.analyses)
        self._run("(push)")
        names, reg = self.encoder.names, self.reg
        self.encoder.names = {}
        try:
            yield self
        finally:
            self._run("(pop)")
            self.encoder.names = names
            self.reg = reg

    def size(self) -> int:
        out = self._run("(print-size)")
        sizes = getattr(out[-1], "sizes", [])
        return sum(n for name, n in sizes if name in self.constructors)

    def saturate(self, stages: Sequence[Stage], limits: Limits, report: Report,
                 progress: Callable[[IterationStats], None] | None = None, count_classes: int = 20_000) -> str:
        """Run the stages in order under `limits`; returns (and records) the stop reason."""
        report.limits = asdict(limits)
        for rs in self.rulesets.values():
            for r in rs.rules:
                report.rule_category[r.name] = r.category
                report.rule_ruleset[r.name] = rs.name
        start = time.perf_counter()
        reason = "saturated"
        for stage in stages:
            main = self._ruleset_for(stage.rulesets)
            if stage.name not in self._schedulers:
                self._new_schedulers([stage], limits)
            sched = self._schedulers[stage.name]
            pre = (f"(repeat {limits.analysis_steps} (run-with {sched}_an {self._ruleset_for(stage.analyses)}))"
                   if stage.analyses else "")
            step_cmd = f"(run-schedule (seq {pre} (run-with {sched} {main})))"
            stage_reason = "saturated"
            while True:
                t0 = time.perf_counter()
                out = self._run(step_cmd)
                dt = time.perf_counter() - t0
                run_report = out[-1].report  # type: ignore[attr-defined]
                nodes = self.size()
                classes = self.view().num_classes if nodes <= count_classes else None
                stats = IterationStats(len(report.iterations), stage.name, nodes, classes, dt,
                                       {k: v for k, v in run_report.num_matches_per_rule.items() if v})
                report.iterations.append(stats)
                if progress is not None:
                    progress(stats)
                steps = sum(1 for it in report.iterations if it.stage == stage.name)
                if not run_report.updated and run_report.can_stop:
                    break
                if nodes > limits.node_limit:
                    stage_reason = "node_limit"
                elif time.perf_counter() - start > limits.time_limit:
                    stage_reason = "time_limit"
                elif steps >= (stage.max_steps or limits.iter_limit):
                    stage_reason = "iter_limit"
                if stage_reason != "saturated":
                    break
            if stage_reason != "saturated":
                reason = stage_reason
                report.notes.append(f"stage {stage.name!r} stopped at its {stage_reason.replace('_', ' ')}; "
                                    "the result is the best program found so far")
                if stage_reason in ("node_limit", "time_limit"):
                    break
        report.add_phase("saturate", time.perf_counter() - start)
        report.stop_reason = reason
        return reason

    # ---- reading back --------------------------------------------------------------------------

    def view(self, functions: Iterable[str] = ()) -> EGraphView:
        return build_view(self.eg, self.constructors, functions)
