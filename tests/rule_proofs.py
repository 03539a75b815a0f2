"""Shared by the test_rule_proofs*.py files: every rule of the three rule sets, split into shards.

The full proof run takes minutes, so the rules are dealt round-robin into SHARDS files that
`pytest -n auto --dist loadfile` spreads over the workers (the expensive div/mod rules sit next to each
other in the rule files, so dealing them out balances the shards).
"""

from __future__ import annotations

from prove import check_rule, signatures

from egraph_compiler.egraph.dsl import Rule
from egraph_compiler.rules import intervals, linear, symbolic

RULESETS = (intervals.ANALYSIS, linear.LINEAR, symbolic.SYMBOLIC)
ALL_RULES: list[Rule] = [r for rs in RULESETS for r in rs.rules]
SHARDS = 4
SIG = signatures(intervals.DECLARATIONS, linear.DECLARATIONS)
CHECKS = {"z3": ("z3",), "float": ("float",), "z3+float": ("z3", "float"), "structural": ()}


def shard(k: int) -> list[Rule]:
    return [r for i, r in enumerate(ALL_RULES) if i % SHARDS == k]


def assert_rule_sound(rule: Rule) -> None:
    """Integer/boolean rules: proved by Z3 for every dtype they match (exactly, or for every instance of their
    constants in a box when the claim is nonlinear in them). Float rules: agree on random float32 inputs."""
    results = check_rule(rule, SIG)
    if rule.check == "structural":
        assert [r.status for r in results] == ["skipped"] and "structural" in results[0].detail, results
        return
    kinds = CHECKS[rule.check]
    assert len(results) == len(kinds), results
    for kind, res in zip(kinds, results):
        assert res.rule == rule.name
        if kind == "z3":
            assert res.status in ("proved", "proved-bounded"), f"{rule.name}: {res.status}: {res.detail}"
            assert res.dtypes_checked, f"{rule.name}: proved without checking any dtype"
        else:
            assert res.status == "proved", f"{rule.name} (float): {res.status}: {res.detail}"
            assert int(res.detail.split()[0]) >= 50, f"{rule.name}: too few float samples: {res.detail}"
