"""What the optimizer did: rule firings, e-graph growth, phase times, stop reason, costs.

Every optimization result carries a Report. `str(report)` is a readable
summary; `report.to_json()` follows the schema in docs/REPORT_SCHEMA.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class IterationStats:
    index: int
    stage: str
    nodes: int
    classes: int | None
    seconds: float
    matches: dict[str, int]


# stop reasons that mean "cut short": saturated and converged (no improvement for `patience` steps) are not
LIMIT_REASONS = ("node_limit", "iter_limit", "time_limit", "growth_limit")
ITERATIONS_SHOWN = 20  # str(report) shows the last iterations and the most-matched rules; to_dict() has all
RULES_SHOWN = 12


@dataclass
class Report:
    iterations: list[IterationStats] = field(default_factory=list)
    rule_category: dict[str, str] = field(default_factory=dict)  # rule name -> category
    rule_ruleset: dict[str, str] = field(default_factory=dict)  # rule name -> ruleset
    rule_doc: dict[str, str] = field(default_factory=dict)  # rule name -> its one-line description
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    stop_reason: str = ""
    limits: dict[str, Any] = field(default_factory=dict)
    cost_before: float | None = None
    cost_after: float | None = None
    cost_unit: str = "ops"  # "s": estimated seconds (programs: baseline -> chosen); "ops": weighted operations
    egraph_nodes: int = 0
    egraph_classes: int = 0
    notes: list[str] = field(default_factory=list)
    # the notes that say a limit made the program worse than the search would have found without it (the default
    # schedule instead of the fusion search, a search cut short, kernels left unranked); a stage stopping at its
    # node budget is the search's normal bound and is not one
    degraded: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # stage-specific sections (kernels, ...)

    # ---- derived ---------------------------------------------------------------------------------

    @property
    def limit_hit(self) -> bool:
        """True when a limit (not saturation or convergence) ended the run."""
        return self.stop_reason in LIMIT_REASONS

    @property
    def rule_totals(self) -> dict[str, int]:
        tot: dict[str, int] = {}
        for it in self.iterations:
            for r, m in it.matches.items():
                tot[r] = tot.get(r, 0) + m
        return dict(sorted(tot.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def fired_rules(self) -> list[str]:
        return [r for r, m in self.rule_totals.items() if m > 0]

    def add_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    # ---- export ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "stop_reason": self.stop_reason,
            "limits": self.limits,
            "cost": {"before": self.cost_before, "after": self.cost_after, "unit": self.cost_unit},
            "egraph": {"nodes": self.egraph_nodes, "classes": self.egraph_classes},
            "phases": self.phases,
            "iterations": [asdict(it) for it in self.iterations],
            "rules": [
                {
                    "name": r,
                    "category": self.rule_category.get(r, ""),
                    "ruleset": self.rule_ruleset.get(r, ""),
                    "matches": m,
                    "description": self.rule_doc.get(r, ""),
                }
                for r, m in self.rule_totals.items()
            ],
            "notes": self.notes,
            "degraded": self.degraded,
            **{k: v for k, v in self.extra.items()},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    def __str__(self) -> str:
        return self.format()

    def format(self, iterations: int | None = ITERATIONS_SHOWN) -> str:
        """Readable summary: stop reason, cost, phases, the last `iterations` steps (None: all), top rules."""
        lines = [
            f"stop: {self.stop_reason}; {len(self.iterations)} iterations; e-graph {self.egraph_nodes} nodes / "
            f"{self.egraph_classes} classes"
        ]
        if self.cost_unit == "s" and self.cost_after is not None:
            base = f"{self.cost_before * 1e6:.1f} us (safe baseline) -> " if self.cost_before is not None else ""
            lines.append(f"estimated time: {base}{self.cost_after * 1e6:.1f} us (chosen program)")
        elif self.cost_before is not None:
            lines.append(f"cost: {self.cost_before:.6g} -> {self.cost_after:.6g} (weighted operations)")
        if self.phases:
            lines.append("phases: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.phases.items()))
        if self.iterations:
            lines.append("iteration  stage       e-nodes  e-classes       ms  top rules (matches)")
            for it in self.iterations[-iterations if iterations else 0 :]:
                top = ", ".join(f"{r} {m}" for r, m in sorted(it.matches.items(), key=lambda kv: -kv[1])[:3])
                classes = "-" if it.classes is None else str(it.classes)
                lines.append(f"{it.index:9d}  {it.stage:10s} {it.nodes:8d} {classes:>10s} {it.seconds * 1e3:8.1f}  {top}")
        fired = [(r, m) for r, m in self.rule_totals.items() if m > 0]
        if fired:
            lines.append(f"rules fired ({len(fired)}):")
            lines += [
                f"  {m:6d}  {r}  [{self.rule_category.get(r, '')}]  {self.rule_doc.get(r, '')}" for r, m in fired[:RULES_SHOWN]
            ]
            if len(fired) > RULES_SHOWN:
                lines.append(f"  ... {len(fired) - RULES_SHOWN} more")
        lines += self._fusion_lines()
        lines += self._provenance_lines()
        if m := self.extra.get("memory"):
            lines.append(
                f"memory: {m['peak_bytes']:,} bytes at peak with the arena plan, {m['peak_bytes_unplanned']:,} "
                f"without ({m['intermediates']} intermediate(s) in {m['arena_bytes']:,} bytes)"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _provenance_lines(self) -> list[str]:
        """optimize(provenance=True): the chosen program's e-nodes by the rule whose firing built them."""
        p = self.extra.get("provenance")
        if not p:
            return []
        out = [f"chosen e-nodes by the rule that built them ({p['nodes']} in all; input: the caller's graph):"]
        for r in p["rules"][:RULES_SHOWN]:
            ops = ", ".join(f"{op} {n}" for op, n in list(r["ops"].items())[:4])
            kernels = ", ".join(r["kernels"][:4]) + (" ..." if len(r["kernels"]) > 4 else "")
            out.append(f"  {r['nodes']:6d}  {r['rule']}  [{r['category']}]  {ops}  (kernels {kernels or '-'})")
        if len(p["rules"]) > RULES_SHOWN:
            out.append(f"  ... {len(p['rules']) - RULES_SHOWN} more")
        return out

    def _fusion_lines(self) -> list[str]:
        """The fusion search: the baseline's estimate beside the chosen one, and each decision with its saving."""
        f = self.extra.get("fusion")
        if not f:
            return []
        out = [
            f"fusion: estimate {f['chosen_s'] * 1e3:.4g} ms chosen, {f['baseline_s'] * 1e3:.4g} ms for the baseline "
            f"(every candidate materialized); {len(f['materialized'])} buffer(s) kept"
        ]
        for d in f["decisions"]:
            saving = "untried" if d["saving_s"] != d["saving_s"] else f"saves {d['saving_s'] * 1e3:+.4g} ms if fused"
            out.append(f"  {d['decision']:12s} {d['buffer']:8s} {d['tensor']:36s} {saving}")
        return out
