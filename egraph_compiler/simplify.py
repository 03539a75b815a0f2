"""Scalar expressions simplified through the e-graph: `simplify` saturates the symbolic rules (with the interval
and linear analyses) and extracts by the scalar cost model; `shared_session` keeps one e-graph per thread for
the many small calls of optimize's late simplifier."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from egraph_compiler.egraph.decode import Decoder
from egraph_compiler.egraph.report import IterationStats, Report
from egraph_compiler.egraph.schema import EGG_TO_OP
from egraph_compiler.egraph.session import EGraphSession, Limits, Stage
from egraph_compiler.extract.cost import OP_COSTS, ScalarCost
from egraph_compiler.extract.extractor import extract
from egraph_compiler.extract.tree import extract_tree
from egraph_compiler.ir.diagnostics import InvalidArgument
from egraph_compiler.ir.ops import OP_TABLE
from egraph_compiler.ir.uop import UOp
from egraph_compiler.report.dot import attach_snapshot
from egraph_compiler.rules import intervals, linear, refine, symbolic

SYMBOLIC_STAGE = Stage("symbolic", rulesets=("symbolic",), analyses=("analysis", "linear"))
# `simplify` runs again on its own result while that keeps getting smaller, at most MAX_ROUNDS more times, with
# rules/refine.py's rules too: a large expression's first round is cut by the growth limits before its deepest
# parts are simplified, and the smaller result saturates further and affords the deeper rules
REFINED_STAGE = Stage("symbolic", rulesets=("symbolic", "refine"), analyses=("analysis", "linear"))
MAX_ROUNDS = 4
# the later rounds wait this many times Limits.patience for a smaller root before they count as converged: a div/mod
# rewrite can take several steps of analysis (a new linear form, its gcd) before the root shrinks, and a later
# round's e-graph, grown from a smaller expression, can afford them (the first round's could grow for long)
LATER_PATIENCE = 2


def symbolic_session() -> EGraphSession:
    return EGraphSession(
        [intervals.ANALYSIS, linear.LINEAR, symbolic.SYMBOLIC, refine.REFINE],
        declarations=[intervals.DECLARATIONS, linear.DECLARATIONS],
        unextractable=linear.HELPERS,
    )


_SHARED = threading.local()
# egglog keeps some memory of every problem a session held, even after its scope is popped (~1 MB per optimize of
# a small graph): a session that has held this many e-nodes in all is replaced by a fresh one (0.2 s to build)
RECYCLE_AFTER_NODES = 200_000


def shared_session(kind: str, make: Callable[[], EGraphSession]) -> EGraphSession:
    """One session per kind and thread: the schema and rules are parsed once, each problem works in its own
    scope. An egglog e-graph serves one caller at a time, so threads never share one (concurrent optimize()
    calls need no lock, and a call that fails leaves no other thread's session half-used). A session that has
    done RECYCLE_AFTER_NODES of work is replaced, so memory stays bounded over any number of calls."""
    sessions: dict[str, EGraphSession] = getattr(_SHARED, "sessions", None) or {}
    _SHARED.sessions = sessions
    if kind not in sessions or sessions[kind].worked > RECYCLE_AFTER_NODES:
        sessions[kind] = make()
    return sessions[kind]


def has_session(kind: str) -> bool:
    """Has this thread a session of that kind already (shared_session then costs nothing)?"""
    return kind in (getattr(_SHARED, "sessions", None) or {})


def uop_cost(u: UOp) -> float:
    """The scalar cost model applied to a UOp DAG (shared nodes once), for 'cost before'."""
    return sum(OP_COSTS.get(n.op, 1.0 if not OP_TABLE[n.op].is_alu else 4.0) for n in u.toposort())


@dataclass
class SimplifyResult:
    result: UOp
    report: Report
    vmin: int | None = None  # tightest bounds the e-graph proved for the root
    vmax: int | None = None


def simplify(
    u: UOp,
    progress: Callable[[IterationStats], None] | None = None,
    snapshot: bool = False,
    rounds: int = MAX_ROUNDS,
    **limits: Any,
) -> SimplifyResult:
    """Simplify a scalar UOp expression with the symbolic rules; returns the smallest equivalent expression found
    (extract/tree.py; ties: the cheapest by the scalar cost model). The result is simplified again, with
    rules/refine.py's rules too, while that makes it smaller (`rounds` more at most; limits.time_limit and iter_limit
    bound all rounds together, node_limit each round's e-graph); the report holds every round's iterations.

    snapshot: also put a truncated DOT picture of the final e-graph into report.extra (report.dot.attach_snapshot).
    rounds: how many later rounds at most (0: one saturation, as optimize's kernels get)."""
    if not isinstance(u, UOp):
        raise InvalidArgument(at="simplify", why=f"expected a UOp, got {type(u).__name__}", suggestion="pass a UOp")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise InvalidArgument(
            at="simplify", why=f"rounds={rounds!r} is not a whole number >= 0", suggestion="pass rounds=0 for one round"
        )
    t0 = time.perf_counter()
    lim = Limits.make(**limits)
    report = Report()
    best = _simplify([u], progress, snapshot, report=report, tree=True, **limits)[0]
    for _ in range(rounds):
        left, steps = lim.time_limit - (time.perf_counter() - t0), lim.iter_limit - len(report.iterations)
        if not best.result.src or left < 0.1 * lim.time_limit or steps < 1:  # a leaf is as small as it gets
            break
        more = {**limits, "patience": lim.patience * LATER_PATIENCE, "time_limit": left, "iter_limit": steps}
        kept = (
            (report.cost_after, report.egraph_nodes, report.egraph_classes),
            {k: v for k, v in report.extra.items() if k in ("egraph_dot", "egraph_snapshot")},
        )
        nxt = _simplify([best.result], progress, snapshot, REFINED_STAGE, report, tree=True, **more)[0]
        vmin, vmax = _tighter(best.vmin, nxt.vmin, max), _tighter(best.vmax, nxt.vmax, min)
        smaller = _tree_size(nxt.result) < _tree_size(best.result)
        if smaller:
            best = nxt
        best.vmin, best.vmax = vmin, vmax
        if not smaller:  # the report's cost, e-graph size and picture stay those of the round whose result it is
            report.cost_after, report.egraph_nodes, report.egraph_classes = kept[0]
            report.extra.update(kept[1])
            break
    return best


def _tree_size(u: UOp) -> int:
    """Nodes of u written out as a tree (shared subterms counted at every use): the size a reader sees."""
    sizes: dict[UOp, int] = {}
    for n in u.toposort():
        sizes[n] = 1 + sum(sizes[s] for s in n.src)
    return sizes[u]


def _tighter(a: int | None, b: int | None, pick: Callable[[int, int], int]) -> int | None:
    return b if a is None else a if b is None else pick(a, b)


def simplify_all(us: list[UOp], session: EGraphSession | None = None, **limits: Any) -> list[SimplifyResult]:
    """Several expressions in one e-graph (one scope: egglog prepares its rules once per scope, which costs more
    than simplifying a small expression). They share the limits and the report. `session`: any session holding
    the symbolic and analysis rulesets (default: the shared symbolic one)."""
    return _simplify(us, None, False, session=session, **limits) if us else []


def _simplify(
    us: list[UOp],
    progress: Callable[[IterationStats], None] | None,
    snapshot: bool,
    stage: Stage = SYMBOLIC_STAGE,
    report: Report | None = None,
    session: EGraphSession | None = None,
    tree: bool = False,
    **limits: Any,
) -> list[SimplifyResult]:
    """`report`: one to go on with (a later round's iterations follow the earlier ones; the first round's cost
    before is kept). `tree`: extract the smallest expression written out (extract/tree.py, what a reader of
    `simplify`'s result counts) instead of the cheapest DAG (what a kernel computes)."""
    lim = Limits.make(**limits)
    report = report or Report()
    t0 = time.perf_counter()
    sess = session or shared_session("symbolic", symbolic_session)
    with sess.scope([stage], lim):
        sess.add(us)
        report.add_phase("encode", time.perf_counter() - t0)
        sess.saturate([stage], lim, report, progress, watch=[sess.name_of(u) for u in us])
        t0 = time.perf_counter()
        view = sess.view(functions=("lo", "hi"))
        roots = [view.lets[sess.name_of(u)] for u in us]
        reg = sess.reg
    cost = ScalarCost(unextractable=sess.unextractable)
    ex = extract_tree(view, cost) if tree else extract(view, cost)
    report.add_phase("extract", time.perf_counter() - t0)
    t0 = time.perf_counter()
    dec = Decoder(view, ex.node, reg)
    outs = [dec.decode(r) for r in roots]
    report.add_phase("decode", time.perf_counter() - t0)
    if snapshot:
        t0 = time.perf_counter()
        attach_snapshot(report, view, roots=roots, hide=sess.unextractable, chosen=ex.chosen)
        report.add_phase("snapshot", time.perf_counter() - t0)
    if report.cost_before is None:
        report.cost_before = sum(uop_cost(u) for u in us)
    report.cost_after = ex.dag_cost(roots)
    report.egraph_nodes, report.egraph_classes = view.num_nodes, view.num_classes
    return [SimplifyResult(out, report, view.lookup("lo", r), view.lookup("hi", r)) for out, r in zip(outs, roots)]


__all__ = ["EGG_TO_OP", "SimplifyResult", "simplify", "simplify_all", "symbolic_session"]
