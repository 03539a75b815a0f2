"""Shared by the test_rule_proofs*.py files: every rule of the three rule sets, split into shards.

The full proof run takes minutes, so the rules are dealt into SHARDS files that `pytest -n auto --dist loadfile`
spreads over the workers. The shards are balanced by cost: a handful of rules (those Z3 cannot prove outright,
which are then proved instance by instance) take most of the time, so they are dealt first, costliest first, each
to the shard with the least so far. Numbered variants of a rule (idiv-one-period0, 1, 2) stay in one shard: they
often pose Z3 the same obligations, which tests/prove.py then decides once per process.
"""

from __future__ import annotations

import re

from prove import check_rule, signatures

from egraph_compiler.egraph.dsl import Rule
from egraph_compiler.rules import intervals, linear, refine, symbolic

RULESETS = (intervals.ANALYSIS, linear.LINEAR, symbolic.SYMBOLIC, refine.REFINE)
ALL_RULES: list[Rule] = [r for rs in RULESETS for r in rs.rules]
SHARDS = 4
SIG = signatures(intervals.DECLARATIONS, linear.DECLARATIONS)
CHECKS = {"z3": ("z3",), "float": ("float",), "z3+float": ("z3", "float"), "structural": ()}

# Seconds on one core that the costliest proofs took when last measured (`pytest --durations`, -n 0); any other
# rule counts as DEFAULT_COST, a structural one (nothing to prove) as next to nothing. These figures only balance the
# shards: a stale or missing one costs some balance, never a check.
COSTS = {
    "bounds-and-nonneg": 12,
    "lt-sum-fold-left": 8,
    "lt-sum-fold-right": 8,
    "bounds-mod-one-period": 7,
    "bounds-shr-const": 7,
    "mod-gcd": 6,
    "fold-and": 6,
    "bounds-idiv-var-neg": 5,
    "bounds-idiv-var": 5,
    "bounds-idiv-neg": 5,
    "bounds-idiv-pos": 5,
    "mod-nested": 4,
    "mod-then-idiv": 4,
    "fold-xor": 4,
    "fold-or": 3,
    "idiv-drop-term": 3,
    "mod-symbolic-factor-neg": 3,
    "idiv-nested": 3,
    "xor-cancel": 3,
    "idiv-two-values": 3,
    "mod-drop-term": 3,
    "mod-one-period": 3,
    "bounds-mul": 3,
    "fold-mod-pos": 3,
    "idiv-factor-through": 3,
    "idiv-gcd": 3,
    "idiv-one-period0": 2,
    "mod-two-values": 2,
    "mod-symbolic-factor-pos": 2,
    "mod-one-period0": 2,
    "fold-idiv-pos": 2,
    "fold-mul": 2,
    "fold-mod-neg": 2,
    "fold-idiv-neg-wide": 2,
    "fold-shl": 2,
    "idiv-split0": 2,
}
DEFAULT_COST = 0.1


def cost(rule: Rule) -> float:
    return 0.01 if rule.check == "structural" else COSTS.get(rule.name, DEFAULT_COST)


def family(rule: Rule) -> str:
    return re.sub(r"\d+$", "", rule.name)


def _deal() -> list[list[Rule]]:
    families: dict[str, list[Rule]] = {}
    for r in ALL_RULES:
        families.setdefault(family(r), []).append(r)
    shards: list[list[Rule]] = [[] for _ in range(SHARDS)]
    load = [0.0] * SHARDS
    for members in sorted(families.values(), key=lambda rs: -sum(map(cost, rs))):  # stable: ties in rule order
        k = min(range(SHARDS), key=lambda i: (load[i], len(shards[i])))
        shards[k] += members
        load[k] += sum(map(cost, members))
    order = {r.name: i for i, r in enumerate(ALL_RULES)}
    return [sorted(s, key=lambda r: order[r.name]) for s in shards]


_SHARDS = _deal()


def shard(k: int) -> list[Rule]:
    return _SHARDS[k]


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
