"""Soundness of every rewrite and analysis rule (tests/prove.py), and the rules' metadata.

Integer/boolean rules ("z3") must come out proved or proved-bounded, never failed or unknown; float rules
are checked by random evaluation and must pass; "structural" rules (bookkeeping with no value meaning of
their own) are listed as such, and checked here to really have no value meaning: they never union e-classes
and never set a bound or a linear form. The proofs are split over this file (shard 0) and
test_rule_proofs_{1,2,3}.py; see tests/rule_proofs.py.
"""

from __future__ import annotations

import pytest
from prove import parse_sexprs
from rule_proofs import ALL_RULES, CHECKS, RULESETS, SHARDS, assert_rule_sound, shard

from egraph_compiler.egraph.dsl import Rule
from egraph_compiler.egraph.schema import EGG_TO_OP

VALUE_FUNCTIONS = ("lo", "hi", "lin")


def test_rule_names_and_categories() -> None:
    names = [r.name for r in ALL_RULES]
    dups = sorted({n for n in names if names.count(n) > 1})
    assert not dups, f"rule names must be unique across rule sets: {dups}"
    for rs in RULESETS:
        assert rs.rules, f"rule set {rs.name} is empty"
        for r in rs.rules:
            assert r.name.strip() and r.name == r.name.strip() and '"' not in r.name, repr(r.name)
            assert r.category.strip(), f"{r.name} has no category"
            assert r.ruleset == rs.name
            assert r.check in CHECKS, f"{r.name}: unknown check {r.check!r}"
            assert r.body and r.head, f"{r.name} has an empty body or head"


def test_shards_cover_every_rule_once() -> None:
    seen = [r.name for k in range(SHARDS) for r in shard(k)]
    assert sorted(seen) == sorted(r.name for r in ALL_RULES)


def test_rules_parse_as_egglog() -> None:
    """Body and head are single s-expressions each (what the prover reads is what egglog runs)."""
    for r in ALL_RULES:
        for part in (*r.body, *r.head):
            forms = parse_sexprs(part)
            assert len(forms) == 1 and isinstance(forms[0], list), f"{r.name}: {part!r}"


STRUCTURAL = [r for r in ALL_RULES if r.check == "structural"]


def test_structural_rules_are_listed() -> None:
    print(f"\n{len(STRUCTURAL)} structural rules: " + ", ".join(r.name for r in STRUCTURAL))
    assert len(STRUCTURAL) < len(ALL_RULES) // 2, "most rules must have a value meaning to prove"


@pytest.mark.parametrize("rule", STRUCTURAL, ids=[r.name for r in STRUCTURAL])
def test_structural_rule_has_no_value_meaning(rule: Rule) -> None:
    body = [parse_sexprs(f)[0] for f in rule.body]
    for action in (parse_sexprs(a)[0] for a in rule.head):
        assert action[0] != "union", f"{rule.name} unions e-classes, so its soundness must be proved"
        if action[0] == "set":
            fn, *args = action[1]
            assert fn not in VALUE_FUNCTIONS, f"{rule.name} sets ({fn} ...): a value claim that must be proved"
            if fn == "dtype-of":  # the dtype of e is the dtype field of a constructor e matched
                e, dt = args[0], action[2]
                assert any(
                    f[0] == "=" and f[1] == e and isinstance(f[2], list) and f[2][0] in EGG_TO_OP and f[2][1] == dt
                    for f in body
                ), f"{rule.name}: dtype-of not read from the node"


@pytest.mark.parametrize("rule", shard(0), ids=[r.name for r in shard(0)])
def test_rule_is_sound(rule: Rule) -> None:
    assert_rule_sound(rule)
