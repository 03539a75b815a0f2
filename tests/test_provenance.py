"""Provenance: which rule's firing built each e-node of the chosen program (`optimize(..., provenance=True)`).

The mechanism is checked on a one-rule e-graph whose answer is known; on real programs against what must hold
whatever the rules: kernel structure (ranges, stores, loads) never comes from the caller's tensor graph, every rule
named fired, and the caller's graph only contributes ops it has.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from egraph_compiler import Tensor, optimize
from egraph_compiler.egraph.dsl import RuleSet, built_terms, parse_sexprs, rewrite, unparse
from egraph_compiler.egraph.provenance import INPUT, producer
from egraph_compiler.egraph.report import Report
from egraph_compiler.egraph.schema import EGG_TO_OP
from egraph_compiler.egraph.session import EGraphSession, Limits, Stage
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.ops import OP_TABLE, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.optimize import kernel_session

ROOT = Path(__file__).resolve().parent.parent
KERNEL_STRUCTURE = {"RANGE", "END", "STORE", "LOAD", "INDEX", "SINK"}


def E(*shape: int, name: str) -> Tensor:
    return Tensor.empty(*shape, dtype="float32", name=name)


def test_every_rule_head_parses_and_prints_back() -> None:
    """The s-expression reader the stamps are made with reads every action of every kernel rule as written."""
    sess = kernel_session()
    for rs in sess.rulesets.values():
        for r in rs.rules:
            for action in r.head:
                assert " ".join(map(unparse, parse_sexprs(action))) == " ".join(action.split()).replace("( ", "(")


def test_built_terms_are_the_constructor_applications_an_action_builds() -> None:
    actions = ("(union __e (ADD dt (MUL dt a b) (CONST dt (I 1))))", "(delete (SUB dt a b))", "(set (lo (RECIP dt a)) 0)")
    built = [unparse(t) for t in built_terms(actions, EGG_TO_OP)]
    assert built == ["(MUL dt a b)", "(CONST dt (I 1))", "(ADD dt (MUL dt a b) (CONST dt (I 1)))", "(RECIP dt a)"]


def test_a_rules_firing_stamps_the_e_nodes_it_builds() -> None:
    """x * 2 -> x + x on an e-graph holding x * 2: the ADD is the rule's, the MUL and x the caller's."""
    mul, add = OP_TABLE[Ops.MUL].egg_name, OP_TABLE[Ops.ADD].egg_name
    rs = RuleSet("double")
    rewrite(rs, "twice-is-sum", f"({mul} dt x (CONST dt (I 2)))", f"({add} dt x x)", category="test", doc="x*2 = x+x")
    sess = EGraphSession([rs], provenance=True)
    x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", 0, 10))
    e = x * 2
    with sess.scope([Stage("s", ("double",), growth_check=False)], Limits()):
        sess.add([e])
        sess.saturate([Stage("s", ("double",), growth_check=False)], Limits(), Report())
        view = sess.view()
    stamps = {n.fn: producer(view, n) for ns in view.nodes.values() for n in ns if n.fn in EGG_TO_OP}
    assert stamps[add] == "twice-is-sum"
    assert stamps[mul] == INPUT
    assert stamps[OP_TABLE[Ops.DEFINE_VAR].egg_name] == INPUT


def _programs() -> list[Tensor]:
    x, w = E(16, 32, name="x"), E(32, 24, name="w")
    img, k = E(1, 4, 8, 8, name="img"), E(4, 4, 3, 3, name="k")
    q, kk, v = (E(2, 16, 8, name=n) for n in "qkv")
    return [
        (x @ w + 1.0).relu(),
        x.softmax(-1),
        img.conv2d(k, padding=1),
        q.scaled_dot_product_attention(kk, v, is_causal=True),
    ]


@pytest.mark.parametrize("i", range(4))
def test_the_chosen_programs_e_nodes_come_from_rules_that_fired(i: int) -> None:
    t = _programs()[i]
    prog = optimize(t, target="llvm", provenance=True)
    plain = optimize(t, target="llvm", cache=False)
    assert prog.source == plain.source  # the stamps change nothing the optimizer does
    report = prog.report
    prov = report.extra["provenance"]
    rows = {r["rule"]: r for r in prov["rules"]}
    assert sum(r["nodes"] for r in rows.values()) == prov["nodes"] > 0
    fired = set(report.fired_rules)
    for rule, row in rows.items():
        if rule != INPUT:
            assert rule in fired, rule  # a rule that never matched built nothing
            assert row["kernels"], rule
    given = {u.op for u in t.uop.toposort()}
    for op in rows.get(INPUT, {"ops": {}})["ops"]:  # the caller's graph brings only its own ops
        assert EGG_TO_OP[op] in given, op
        assert op not in KERNEL_STRUCTURE
    structure = sum(n for r in rows.values() for op, n in r["ops"].items() if op in KERNEL_STRUCTURE)
    assert structure > 0
    text = str(report)
    assert "chosen e-nodes by the rule that built them" in text
    pictures = report.extra["egraph_rules"]
    assert pictures and all(p["rule"] in fired and f"rule {p['rule']}" in p["dot"] for p in pictures)


def test_provenance_in_the_html_report_and_the_cli(tmp_path: Path) -> None:
    out, js = tmp_path / "r.html", tmp_path / "r.json"
    cmd = [sys.executable, "-m", "egraph_compiler.cli", "report", str(ROOT / "examples" / "gemm_bias_relu.json")]
    done = subprocess.run([*cmd, "--provenance", "-o", str(out), "--json", str(js)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = json.loads(js.read_text())
    assert data["provenance"]["nodes"] > 0 and data["egraph_rules"]
    page = out.read_text()
    assert "by the rule whose firing built them" in page
    assert len(re.findall(r'data-pic="rule:', page)) == len(data["egraph_rules"])
