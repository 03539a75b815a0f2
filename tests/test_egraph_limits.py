"""Saturation limits, the optimization report, and DAG-aware extraction.

The growing input is a chain of mod/div over ten variables: unbounded it takes several steps and ~1000 e-nodes to
saturate, so each limit visibly cuts it short. Results are compared with the reference interpreter at sampled
points, never with the optimizer's own view of them.
"""

from __future__ import annotations

import json
import math
import random
import time

import numpy as np
import pytest
from oracle import tree_size, value

from egraph_compiler import UOp
from egraph_compiler.egraph.report import IterationStats
from egraph_compiler.egraph.session import Limits
from egraph_compiler.egraph.view import ClassRef, EGraphView, ENode
from egraph_compiler.extract.cost import OP_COSTS
from egraph_compiler.extract.extractor import extract
from egraph_compiler.ir.diagnostics import InvalidArgument
from egraph_compiler.ir.ops import Ops
from egraph_compiler.ir.uop import toposort
from egraph_compiler.rules import intervals, linear, refine, symbolic
from egraph_compiler.simplify import SimplifyResult, simplify, uop_cost

ALL_RULES = {
    r.name: (rs.name, r.category)
    for rs in (intervals.ANALYSIS, linear.LINEAR, symbolic.SYMBOLIC, refine.REFINE)
    for r in rs.rules
}


def growing_expr() -> UOp:
    xs = [UOp.variable(f"x{i}", 0, 10 + i) for i in range(10)]
    u = xs[0]
    for i, x in enumerate(xs[1:]):
        u = (u + x * (i + 2)) % 97 + x // 3
    return u


def points(u: UOp, n: int = 60, seed: int = 0) -> list[dict[str, int]]:
    rng = random.Random(seed)
    vs = sorted({v.arg for v in toposort([u]) if v.op is Ops.DEFINE_VAR})
    corners = [{name: (lo if k == 0 else hi) for name, lo, hi in vs} for k in (0, 1)]
    return corners + [{name: rng.randint(lo, hi) for name, lo, hi in vs} for _ in range(n)]


def assert_equivalent(u: UOp, r: SimplifyResult) -> None:
    for env in points(u):
        want = value(u, env)
        assert value(r.result, env) == want, f"at {env}: {r.result.render()} != {u.render()}"
        if r.vmin is not None:
            assert r.vmin <= want
        if r.vmax is not None:
            assert want <= r.vmax


def exploding_expr() -> UOp:
    """tinygrad's test_div_mod_recombine_after_asymmetric_fold: one step takes it from ~200 e-nodes to thousands."""
    a, b = UOp.variable("a", 0, 7), UOp.variable("b", 0, 14)
    return (a * 15 + b) // 10 * 2 + (a * 15 + b) // 5 % 2


@pytest.fixture(scope="module")
def unlimited() -> SimplifyResult:
    return simplify(growing_expr(), rounds=0, patience=1_000)  # one saturation, no early stop


# ---- limits ----------------------------------------------------------------------------------------


def test_unlimited_run_grows_then_saturates(unlimited: SimplifyResult) -> None:
    rep = unlimited.report
    assert rep.stop_reason == "saturated"
    nodes = [it.nodes for it in rep.iterations]
    assert len(nodes) >= 3 and nodes[-1] > nodes[0], f"the test input must grow over several steps: {nodes}"
    assert not rep.notes
    assert_equivalent(growing_expr(), unlimited)


def test_node_limit_stops_growth(unlimited: SimplifyResult) -> None:
    final = unlimited.report.iterations[-1].nodes
    first = unlimited.report.iterations[0].nodes
    limit = first - 1
    u = growing_expr()
    r = simplify(u, node_limit=limit, rounds=0)
    rep = r.report
    assert rep.stop_reason == "node_limit"
    assert len(rep.iterations) == 1 and rep.iterations[0].nodes > limit
    assert rep.egraph_nodes < final
    assert any("node limit" in n for n in rep.notes)
    assert_equivalent(u, r)


def test_node_limit_checks_every_step(unlimited: SimplifyResult) -> None:
    """A limit between the sizes of steps 1 and 2 stops right after the step that crosses it."""
    its = unlimited.report.iterations
    limit = (its[0].nodes + its[1].nodes) // 2
    r = simplify(growing_expr(), node_limit=limit, rounds=0)
    nodes = [it.nodes for it in r.report.iterations]
    assert r.report.stop_reason == "node_limit"
    assert all(n <= limit for n in nodes[:-1]) and nodes[-1] > limit, nodes
    assert len(nodes) == 2


@pytest.mark.parametrize("k", [1, 2])
def test_iter_limit_stops_growth(unlimited: SimplifyResult, k: int) -> None:
    u = growing_expr()
    r = simplify(u, iter_limit=k, rounds=0)
    assert r.report.stop_reason == "iter_limit"
    assert len(r.report.iterations) == k
    assert r.report.egraph_nodes < unlimited.report.egraph_nodes
    assert any("iter limit" in n for n in r.report.notes)
    assert_equivalent(u, r)


def test_time_limit_stops_growth(unlimited: SimplifyResult) -> None:
    u = growing_expr()
    r = simplify(u, time_limit=1e-6, rounds=0)
    assert r.report.stop_reason == "time_limit"
    assert len(r.report.iterations) == 1  # a step is never interrupted, but no second one starts
    assert r.report.egraph_nodes < unlimited.report.egraph_nodes
    assert any("time limit" in n for n in r.report.notes)
    assert_equivalent(u, r)


def test_limits_are_recorded_and_validated() -> None:
    r = simplify(UOp.variable("x", 0, 5) + 0, node_limit=1234, iter_limit=7, time_limit=3.5, rounds=0)
    assert r.report.limits["node_limit"] == 1234
    assert r.report.limits["iter_limit"] == 7
    assert r.report.limits["time_limit"] == 3.5
    x = UOp.variable("x", 0, 5)
    for bad in (
        {"node_limt": 5},
        {"node_limit": 0},
        {"iter_limit": -1},
        {"time_limit": True},
        {"time_limit": "1"},
        {"time_limit": float("nan")},
        {"search_time": float("nan")},
        {"node_limit": 1.5},
        {"iter_limit": 2.0},
    ):
        with pytest.raises(InvalidArgument):
            simplify(x, **bad, rounds=0)
    assert Limits.make(node_limit=5).node_limit == 5
    assert Limits.make(node_limit=np.int64(5), time_limit=np.float32(0.5)).node_limit == 5  # numpy numbers


def test_patience_stops_a_run_whose_result_stopped_improving(unlimited: SimplifyResult) -> None:
    r = simplify(growing_expr(), patience=1, rounds=0)
    assert r.report.stop_reason == "converged"
    assert len(r.report.iterations) < len(unlimited.report.iterations)
    assert any("not improved for 1 steps" in n for n in r.report.notes)
    assert_equivalent(growing_expr(), r)


def test_growth_limit_stops_an_exploding_step() -> None:
    """Without the growth limit, the step after the crossing goes past 20_000 e-nodes (measured)."""
    u = exploding_expr()
    r = simplify(u, step_growth=4.0, rounds=0)
    rep = r.report
    assert rep.stop_reason == "growth_limit"
    assert any("growth limit" in n for n in rep.notes)
    sizes = [it.nodes for it in rep.iterations]
    assert all(n <= 3_000 for n in sizes[:-1]) and sizes[-1] < 20_000, sizes
    assert_equivalent(u, r)
    loose = simplify(u, step_growth=1e9, node_limit=20_000, patience=1_000, rounds=0)
    assert loose.report.stop_reason == "node_limit"


def test_node_limit_is_checked_between_analysis_iterations() -> None:
    """The analyses alone can multiply the e-graph within one step; the limit is checked after each of their
    iterations, so the overshoot is one analysis iteration, not a whole step."""
    u = exploding_expr()
    r = simplify(u, node_limit=2_000, step_growth=1e9, rounds=0)
    assert r.report.stop_reason == "node_limit"
    assert r.report.iterations[-1].nodes < 10_000, [it.nodes for it in r.report.iterations]
    assert_equivalent(u, r)


def test_saturating_input_is_not_limited() -> None:
    x = UOp.variable("x", 0, 5)
    r = simplify((x + 3) * 1 + 0, rounds=0)
    assert r.report.stop_reason == "saturated"
    assert tree_size(r.result) == 3, r.result.render()  # x + 3
    assert_equivalent((x + 3) * 1 + 0, r)


# ---- the report ------------------------------------------------------------------------------------


def test_report_contents(unlimited: SimplifyResult) -> None:
    rep = unlimited.report
    assert rep.iterations and [it.index for it in rep.iterations] == list(range(len(rep.iterations)))
    for it in rep.iterations:
        assert it.stage == "symbolic"
        assert it.nodes > 0 and it.classes is not None and 0 < it.classes <= it.nodes
        assert it.seconds >= 0
        assert all(isinstance(m, int) and m > 0 for m in it.matches.values())
        assert set(it.matches) <= set(ALL_RULES), f"unknown rule names {set(it.matches) - set(ALL_RULES)}"
    assert rep.iterations[-1].nodes == rep.egraph_nodes
    assert rep.iterations[-1].classes == rep.egraph_classes
    # totals are the per-iteration matches summed
    want: dict[str, int] = {}
    for it in rep.iterations:
        for name, m in it.matches.items():
            want[name] = want.get(name, 0) + m
    assert rep.rule_totals == want
    assert list(rep.rule_totals.values()) == sorted(rep.rule_totals.values(), reverse=True)
    assert set(rep.fired_rules) == set(want)
    for name in want:
        assert (rep.rule_ruleset[name], rep.rule_category[name]) == ALL_RULES[name]
    # rules from all three rule sets take part in a div/mod simplification
    assert {ALL_RULES[n][0] for n in want} >= {"analysis", "linear", "symbolic"}
    # phases
    assert set(rep.phases) >= {"encode", "saturate", "extract", "decode"}
    assert all(v >= 0 for v in rep.phases.values())
    assert rep.phases["saturate"] >= sum(it.seconds for it in rep.iterations) * 0.999
    # costs: the input is a tree here, so its DAG cost is the sum of its node costs
    assert rep.cost_before == sum(OP_COSTS[u.op] for u in toposort([growing_expr()]))
    assert rep.cost_after is not None and rep.cost_after <= rep.cost_before
    assert rep.stop_reason == "saturated"
    text = str(rep)
    assert "saturated" in text and "rules fired" in text


def test_report_phase_times_add_up() -> None:
    u = growing_expr() * 2
    t0 = time.perf_counter()
    r = simplify(u, rounds=0)
    wall = time.perf_counter() - t0
    assert 0 < sum(r.report.phases.values()) <= wall + 1e-3


def test_progress_callback_sees_every_iteration() -> None:
    seen: list[IterationStats] = []
    r = simplify(growing_expr(), progress=seen.append, iter_limit=3, rounds=0)
    assert seen == r.report.iterations and len(seen) == 3


def test_report_json_roundtrip(unlimited: SimplifyResult) -> None:
    rep = unlimited.report
    d = json.loads(rep.to_json())
    assert d == json.loads(json.dumps(rep.to_dict()))
    assert d["schema_version"] == 1
    assert d["stop_reason"] == "saturated"
    assert d["cost"] == {"before": rep.cost_before, "after": rep.cost_after, "unit": "ops"}
    assert all(r["description"] for r in d["rules"])
    assert d["egraph"] == {"nodes": rep.egraph_nodes, "classes": rep.egraph_classes}
    assert len(d["iterations"]) == len(rep.iterations)
    assert [it["matches"] for it in d["iterations"]] == [it.matches for it in rep.iterations]
    assert [it["nodes"] for it in d["iterations"]] == [it.nodes for it in rep.iterations]
    assert {r["name"]: r["matches"] for r in d["rules"]} == rep.rule_totals
    assert all(r["category"] and r["ruleset"] for r in d["rules"])
    assert set(d["phases"]) == set(rep.phases)
    assert d["limits"] == rep.limits
    compact = json.loads(rep.to_json(indent=None))
    assert compact == d


# ---- DAG-aware extraction ----------------------------------------------------------------------------


class ByName:
    def __init__(self, costs: dict[str, float]) -> None:
        self.costs = costs

    def node_cost(self, n: ENode, view: EGraphView) -> float:
        return self.costs[n.fn]


def make_view(classes: dict[int, list[tuple[str, tuple[int, ...]]]]) -> EGraphView:
    view = EGraphView()
    for c, nodes in classes.items():
        view.nodes[c] = [ENode(fn, tuple(ClassRef(k) for k in kids), c, "U") for fn, kids in nodes]
        view.sort_of[c] = "U"
    return view


def test_extractor_counts_a_shared_subterm_once() -> None:
    # class 0: either pair(1, 1), using the expensive class 1 twice, or an opaque leaf costing 150
    # class 1: big (100), built on class 2
    view = make_view({0: [("pair", (1, 1)), ("leaf150", ())], 1: [("big", (2,))], 2: [("x", ())]})
    ex = extract(view, ByName({"pair": 2, "leaf150": 150, "big": 99, "x": 1}))
    assert ex.node(0).fn == "pair"  # DAG cost 2 + 99 + 1 = 102; as a tree it would be 2 + 2 * 100 = 202 > 150
    assert ex.cost(0) == 102
    assert ex.cost(1) == 100
    assert ex.dag_cost([0, 1, 2]) == 102


def test_extractor_shares_across_children() -> None:
    # f(a, b) where a and b both contain the same costly class 3: it is paid once, not once per child
    view = make_view({0: [("f", (1, 2))], 1: [("g", (3,))], 2: [("h", (3,))], 3: [("costly", ())]})
    ex = extract(view, ByName({"f": 1, "g": 1, "h": 1, "costly": 50}))
    assert ex.cost(1) == ex.cost(2) == 51
    assert ex.cost(0) == 53  # a tree extractor would report 1 + 51 + 51 = 103
    assert dict(ex.best[0].dag.items()) == {0: 1, 1: 1, 2: 1, 3: 50}


def test_extractor_never_chooses_a_cycle() -> None:
    view = make_view({0: [("loop", (0,)), ("leaf", ())], 1: [("wrap", (0,))]})
    ex = extract(view, ByName({"loop": 0, "leaf": 7, "wrap": 1}))
    assert ex.node(0).fn == "leaf" and ex.cost(0) == 7 and ex.cost(1) == 8


def test_extractor_skips_unextractable_nodes() -> None:
    view = make_view({0: [("helper", ()), ("op", (1,))], 1: [("x", ())], 2: [("helper", ())]})
    ex = extract(view, ByName({"helper": math.inf, "op": 3, "x": 1}))
    assert ex.node(0).fn == "op" and ex.cost(0) == 4
    assert 2 not in ex.best and ex.cost(2) == math.inf


def test_simplify_cost_is_dag_cost() -> None:
    """A large sub-expression used twice: the reported costs count it once (shared), unlike the tree size."""
    xs = [UOp.variable(f"v{i}", 1, 9) for i in range(6)]
    big = xs[0]
    for x in xs[1:]:
        big = (big * x + 7) // (x + 1)
    u = (big < 5).where(big, big * 3)
    dag_before = sum(OP_COSTS[n.op] for n in toposort([u]))
    tree_before = 0.0
    sizes: dict[UOp, float] = {}
    for n in toposort([u]):
        sizes[n] = OP_COSTS[n.op] + sum(sizes[s] for s in n.src)
    tree_before = sizes[u]
    r = simplify(u, rounds=0)
    assert r.report.cost_before == dag_before < tree_before
    after = r.report.cost_after
    assert after is not None and after <= dag_before
    assert after == sum(OP_COSTS[n.op] for n in toposort([r.result]))  # the decoded result costs what was reported
    assert tree_size(r.result) > len(toposort([r.result]))  # ... and it still shares the subterm
    assert_equivalent(u, r)


def test_a_baseline_past_the_ceiling_is_a_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rangeify, which no limit cuts, still stops at BASELINE_CEILING nodes (a 544-op graph whose values are read
    in many index contexts reached 2.5M nodes and was killed for memory): a graph it leaves without kernels gets
    a diagnostic that names the way out, never a kill."""
    from egraph_compiler import Tensor, optimize
    from egraph_compiler.egraph import session as egraph
    from egraph_compiler.ir.diagnostics import UnsupportedOp

    monkeypatch.setattr(egraph, "BASELINE_CEILING", 300)
    x = Tensor.empty(8, 6, name="x")
    t = x
    for _ in range(6):
        t = (t - t.max(1, keepdim=True)).exp() + x
    with pytest.raises(UnsupportedOp) as err:
        optimize(t, target="llvm")
    assert "contiguous" in err.value.suggestion and "nodes" in err.value.why


def test_the_compiler_running_out_of_memory_is_a_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MemoryError while optimizing (extraction of a huge e-graph) is E1502 with the e-graph's size and a way
    out, not a traceback."""
    import importlib

    from egraph_compiler import Tensor, optimize
    from egraph_compiler.ir.diagnostics import OutOfMemory

    def no_memory(*args: object, **kw: object) -> None:
        raise MemoryError

    monkeypatch.setattr(importlib.import_module("egraph_compiler.extract.extractor"), "extract", no_memory)
    x = Tensor.empty(8, 6, name="x")
    with pytest.raises(OutOfMemory) as err:
        optimize((x * 2).relu(), target="llvm")
    assert err.value.code == "E1502" and "e-graph" in err.value.why and "nodes" in err.value.why


def test_later_rounds_go_on_in_one_report_and_share_the_step_limit() -> None:
    """simplify runs again on its result while that shrinks (with rules/refine.py's rules and twice the patience):
    the rounds' iterations follow each other in one report, and iter_limit counts them all."""
    v = UOp.variable("v", 0, 64)
    u = ((((v - 2) % 7) * 2) % 8) // 6 + v  # ((v+5)%7%4)//3 + v: the gcd of 2 and 8 takes a later round's patience
    one, more = simplify(u, rounds=0), simplify(u)
    assert tree_size(more.result) < tree_size(one.result), (one.result.render(), more.result.render())
    assert_equivalent(u, more)
    its = more.report.iterations
    assert len(its) > len(one.report.iterations) and [it.index for it in its] == list(range(len(its)))
    # the last round did not shrink it: the report's cost and picture are those of the round it came from
    pictured = simplify(u, snapshot=True)
    assert pictured.report.cost_after == uop_cost(pictured.result) and "egraph_dot" in pictured.report.extra
    assert pictured.report.extra["egraph_snapshot"]["classes_total"] == pictured.report.egraph_classes
    capped = simplify(u, iter_limit=len(one.report.iterations) + 1)
    assert len(capped.report.iterations) <= len(one.report.iterations) + 1
    assert_equivalent(u, capped)
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidArgument):
            simplify(u, rounds=bad)
