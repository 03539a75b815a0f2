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
from egraph_compiler.ir.diagnostics import InvalidArgument
from egraph_compiler.ir.ops import OP_TABLE
from egraph_compiler.ir.uop import UOp
from egraph_compiler.report.dot import attach_snapshot
from egraph_compiler.rules import intervals, linear, symbolic

SYMBOLIC_STAGE = Stage("symbolic", rulesets=("symbolic",), analyses=("analysis", "linear"))


def symbolic_session() -> EGraphSession:
    return EGraphSession(
        [intervals.ANALYSIS, linear.LINEAR, symbolic.SYMBOLIC],
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
    u: UOp, progress: Callable[[IterationStats], None] | None = None, snapshot: bool = False, **limits: Any
) -> SimplifyResult:
    """Simplify a scalar UOp expression with the symbolic rules; returns the cheapest equivalent found.

    snapshot: also put a truncated DOT picture of the final e-graph into report.extra (report.dot.attach_snapshot)."""
    if not isinstance(u, UOp):
        raise InvalidArgument(at="simplify", why=f"expected a UOp, got {type(u).__name__}", suggestion="pass a UOp")
    return _simplify([u], progress, snapshot, **limits)[0]


def simplify_all(us: list[UOp], session: EGraphSession | None = None, **limits: Any) -> list[SimplifyResult]:
    """Several expressions in one e-graph (one scope: egglog prepares its rules once per scope, which costs more
    than simplifying a small expression). They share the limits and the report. `session`: any session holding
    the symbolic and analysis rulesets (default: the shared symbolic one)."""
    return _simplify(us, None, False, session, **limits) if us else []


def _simplify(
    us: list[UOp],
    progress: Callable[[IterationStats], None] | None,
    snapshot: bool,
    session: EGraphSession | None = None,
    **limits: Any,
) -> list[SimplifyResult]:
    lim = Limits.make(**limits)
    report = Report()
    t0 = time.perf_counter()
    sess = session or shared_session("symbolic", symbolic_session)
    with sess.scope([SYMBOLIC_STAGE], lim):
        sess.add(us)
        report.add_phase("encode", time.perf_counter() - t0)
        sess.saturate([SYMBOLIC_STAGE], lim, report, progress, watch=[sess.name_of(u) for u in us])
        t0 = time.perf_counter()
        view = sess.view(functions=("lo", "hi"))
        roots = [view.lets[sess.name_of(u)] for u in us]
        reg = sess.reg
    ex = extract(view, ScalarCost(unextractable=sess.unextractable))
    report.add_phase("extract", time.perf_counter() - t0)
    t0 = time.perf_counter()
    dec = Decoder(view, ex.node, reg)
    outs = [dec.decode(r) for r in roots]
    report.add_phase("decode", time.perf_counter() - t0)
    if snapshot:
        t0 = time.perf_counter()
        attach_snapshot(report, view, roots=roots, hide=sess.unextractable, chosen=ex.chosen)
        report.add_phase("snapshot", time.perf_counter() - t0)
    report.cost_before, report.cost_after = sum(uop_cost(u) for u in us), ex.dag_cost(roots)
    report.egraph_nodes, report.egraph_classes = view.num_nodes, view.num_classes
    return [SimplifyResult(out, report, view.lookup("lo", r), view.lookup("hi", r)) for out, r in zip(outs, roots)]


__all__ = ["EGG_TO_OP", "SimplifyResult", "simplify", "simplify_all", "symbolic_session"]
