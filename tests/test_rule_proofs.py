"""Soundness of every rewrite and analysis rule (tests/prove.py), and the rules' metadata.

Integer/boolean rules ("z3") must come out proved or proved-bounded, never failed or unknown; float rules
are checked by random evaluation and must pass; "structural" rules (bookkeeping with no value meaning of
their own) are listed as such, and checked here to really have no value meaning: they never union e-classes
and never set a bound or a linear form. The proofs are split over this file (shard 0) and
test_rule_proofs_{1,2,3}.py; see tests/rule_proofs.py. Unsound rules must fail, whichever way the prover gets to
its verdict (outright, or instance by instance).
"""

from __future__ import annotations

import prove
import pytest
from prove import parse_sexprs
from rule_proofs import ALL_RULES, CHECKS, RULESETS, SHARDS, SIG, assert_rule_sound, shard

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


def _rule(name: str, body: tuple[str, ...], head: tuple[str, ...], check: str = "z3") -> Rule:
    return Rule(name, "test", "symbolic", body, head, check=check)


MOD_NESTED_BODY = ("(= __e (MOD dt (MOD dt x (CONST dt (I a))) (CONST dt (I b))))", "(dt-int dt)", "(!= a 0)", "(> b 0)")
MOD_NESTED_HEAD = ("(union __e (MOD dt x (CONST dt (I b))))",)
MOD_NESTED = _rule("mod-nested-test", (*MOD_NESTED_BODY, "(= 0 (% a b))"), MOD_NESTED_HEAD)
MOD_NESTED_UNSOUND = _rule("unsound-mod-nested", MOD_NESTED_BODY, MOD_NESTED_HEAD)  # b need not divide a
UNSOUND = [
    _rule("unsound-add-one", ("(= __e (ADD dt x (CONST dt (I 1))))", "(dt-intlike dt)"), ("(union __e x)",)),
    MOD_NESTED_UNSOUND,
    _rule(
        "unsound-bounds-and",
        ("(= e (AND dt a b))", "(dt-int dt)", "(= lb (lo b))", "(= hb (hi b))", "(>= lb 0)"),
        ("(set (lo e) 0)", "(set (hi e) (- hb 1))"),
    ),
    _rule("unsound-float", ("(= __e (MUL dt x (CONST dt (F 2.0))))", "(dt-float dt)"), ("(union __e x)",), "float"),
]


@pytest.mark.parametrize("rule", UNSOUND, ids=[r.name for r in UNSOUND])
def test_unsound_rule_fails(rule: Rule) -> None:
    with pytest.raises(AssertionError, match=rf"^{rule.name}( \(float\))?: failed: "):
        assert_rule_sound(rule)


def test_instances_decide_when_the_rule_is_not_proved_outright(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the outright proof and the bit-vector retry left undecided, a rule is proved (or refuted) instance by
    instance: the fast path and the default solvers behind it must find the counterexample of an unsound
    rule and prove every instance of a sound one."""
    solve = prove._solve

    def undecided_outright(assumptions: list, goals: list, timeout_ms: int, memo: bool = False) -> tuple:
        if memo:  # the outright attempt and the bit-vector retry
            return "unknown", None
        return solve(assumptions, goals, timeout_ms)

    monkeypatch.setattr(prove, "_solve", undecided_outright)
    sound = prove.prove_rule(MOD_NESTED, SIG)
    assert sound.status == "proved-bounded", sound
    assert sound.dtypes_checked == ["index", "int8", "uint8"] and "instances of ['a', 'b']" in sound.detail, sound
    unsound = prove.prove_rule(MOD_NESTED_UNSOUND, SIG)
    assert unsound.status == "failed" and "counterexample" in unsound.detail, unsound
    monkeypatch.setattr(prove._Instances, "decide", lambda self, fix: ("unknown", "unknown", None))  # default solvers only
    assert prove.prove_rule(MOD_NESTED, SIG).detail == sound.detail
    assert prove.prove_rule(MOD_NESTED_UNSOUND, SIG).status == "failed"
