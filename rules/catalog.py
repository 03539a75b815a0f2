"""Every rule the compiler runs, as one table: ruleset, name, category, how it is checked, and what it does.

`egc rules` prints it; docs/RULES.md is its Markdown form (`egc rules --markdown > docs/RULES.md`, kept current
by a test), and tests/test_rule_docs.py fails on a rule without a description.
"""

from __future__ import annotations

from egraph_compiler.egraph.dsl import Rule, RuleSet
from egraph_compiler.rules import intervals, linear, optops, rangeify, refine, symbolic

CHECKS = {
    "z3": "proved with Z3 for every integer/boolean value",
    "float": "checked by evaluation on random floats",
    "z3+float": "both: proved with Z3 for integer dtypes and checked on random floats",
    "structural": "helper bookkeeping, checked through the rules that consume it",
}


def rulesets() -> list[RuleSet]:
    """The rule sets in the order the stages use them: analyses, index math (and what simplify's later rounds add),
    rangeify, schedules (OptOps)."""
    return [intervals.ANALYSIS, linear.LINEAR, symbolic.SYMBOLIC, refine.REFINE, rangeify.RANGEIFY, *optops.OPTOPS.values()]


def rules() -> list[Rule]:
    return [r for rs in rulesets() for r in rs.rules]


def table(markdown: bool = False, category: str | None = None) -> str:
    """One line per rule (a Markdown table with a heading per rule set when `markdown`)."""
    chosen = [rs for rs in rulesets() if any(category in (None, r.category) for r in rs.rules)]
    lines: list[str] = []
    if markdown:
        total = sum(len(rs.rules) for rs in chosen)
        lines += [
            "# Rules",
            "",
            f"Generated from the rule sets by `egc rules --markdown` ({total} rules); do not edit by hand. Check kinds: "
            + "; ".join(f"`{k}`: {v}" for k, v in CHECKS.items())
            + ".",
        ]
    for rs in chosen:
        rows = [r for r in rs.rules if category in (None, r.category)]
        if markdown:
            lines += ["", f"## {rs.name} ({len(rows)})", "", "| rule | category | check | what it does |", "|---|---|---|---|"]
            lines += [f"| `{r.name}` | {r.category} | {r.check} | {r.doc.replace('|', '\\|')} |" for r in rows]
        else:
            lines += [f"{rs.name:14s} {r.name:34s} {r.category:16s} {r.check:10s} {r.doc}" for r in rows]
    return "\n".join(lines) + "\n"
