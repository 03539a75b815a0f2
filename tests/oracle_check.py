"""Shared by test_oracle_symbolic*.py: run tinygrad's symbolic cases through `simplify` and judge the results.

The 360 cases take minutes, so they are dealt into CHUNKS test files that `pytest -n auto --dist loadfile`
spreads over the workers; every chunk checks its own cases, and a process that ran all chunks (a serial run)
also prints the figures for all cases together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from oracle import assignments, build, divides_by_zero, expected_size, load_cases, oracle_path, tree_size, value

from egraph_compiler.simplify import simplify

CHUNKS = 2
NO_LARGER_MIN = 0.90

# The default limits, as a user gets them: the node, growth and convergence limits (all counted in nodes and
# steps) stop the few cases whose rewriting explodes (#75, #92, #195: one step can take a few hundred e-nodes to
# ~100_000) long before the time limit, so the figures do not depend on machine load.
LIMITS: dict[str, float] = {}


@dataclass
class Outcome:
    id: int
    expr: str
    result: str = ""
    equivalent: bool = False
    sound_bounds: bool = False
    tight: bool = False
    no_larger: bool = False
    ours: tuple[Any, Any] = (None, None)
    theirs: tuple[Any, Any] = (None, None)
    sizes: tuple[int, int] = (0, 0)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"#{self.id}: {self.expr[:80]}  =>  {self.result[:80]}  bounds {self.ours} vs tinygrad {self.theirs}, "
            f"size {self.sizes[0]} vs {self.sizes[1]}; {', '.join(self.problems)}"
        )


def run_case(case: dict[str, Any]) -> Outcome:
    u = build(case["expr"])
    oc = Outcome(case["id"], case["expr_str"], theirs=(case["expected_min"], case["expected_max"]))
    try:
        r = simplify(u, **LIMITS)
    except Exception as e:  # a crash is a failure of every figure, reported with the case
        oc.problems.append(f"simplify raised {e!r}")
        return oc
    out = r.result
    oc.result = out.render()
    lo = out.vmin if r.vmin is None else max(r.vmin, out.vmin)
    hi = out.vmax if r.vmax is None else min(r.vmax, out.vmax)
    oc.ours = (lo, hi)
    oc.equivalent = oc.sound_bounds = out.dtype is u.dtype
    if not oc.equivalent:
        oc.problems.append(f"dtype {out.dtype} != {u.dtype}")
    for env in assignments(u, 150):
        if divides_by_zero(u, env):
            continue
        want = value(u, env)
        if oc.equivalent and value(out, env) != want:
            oc.equivalent = False
            oc.problems.append(f"differs at {env}: {value(out, env)} vs {want}")
        if oc.sound_bounds and not lo <= want <= hi:
            oc.sound_bounds = False
            oc.problems.append(f"value {want} at {env} outside the bounds")
    oc.tight = oc.sound_bounds and lo >= case["expected_min"] and hi <= case["expected_max"]
    if oc.sound_bounds and not oc.tight:
        oc.problems.append("bounds looser than tinygrad's")
    oc.sizes = (tree_size(out), expected_size(case["expected_str"]))
    oc.no_larger = oc.sizes[0] <= oc.sizes[1]
    if not oc.no_larger:
        oc.problems.append("larger than tinygrad's result")
    return oc


def figures(ocs: list[Outcome]) -> str:
    n = len(ocs)
    eq, tight, small = (sum(getattr(o, k) for o in ocs) for k in ("equivalent", "tight", "no_larger"))
    return (
        f"tinygrad symbolic oracle: equivalent {eq}/{n}, bounds at least as tight {tight}/{n}, "
        f"no larger {small}/{n} ({small / n:.1%})"
    )


RESULTS: dict[int, list[Outcome]] = {}  # chunk -> outcomes, for the figures of all chunks in a serial run


def chunk_outcomes(k: int) -> list[Outcome]:
    if oracle_path() is None:
        pytest.skip("the oracle file ../shared/oracle/tinygrad_symbolic_public.jsonl is not there")
    if k not in RESULTS:
        RESULTS[k] = [run_case(c) for c in chunk_cases(k)]
    return RESULTS[k]


def chunk_cases(k: int) -> list[dict[str, Any]]:
    """Chunk k of the cases, by id (this spreads the few slow cases: #92, #195 and #210)."""
    return [c for c in load_cases() if c["id"] % CHUNKS == k]


def report_figures(k: int, ocs: list[Outcome], capsys: pytest.CaptureFixture[str], record_property: Any) -> None:
    """Print the figures of chunk k (captured: `-rP` shows them, also under xdist) and straight to the terminal
    (a serial run shows them without -s); after the last chunk of a serial run, the figures of all cases."""
    lines = [f"chunk {k + 1}/{CHUNKS}: {figures(ocs)}"]
    lines += ["  " + o.line() for o in ocs if o.problems and o.problems != ["larger than tinygrad's result"]]
    if len(RESULTS) == CHUNKS:
        lines.append("all chunks: " + figures([o for c in sorted(RESULTS) for o in RESULTS[c]]))
    record_property("oracle", lines[-1])
    text = "\n".join(lines)
    print(text)
    with capsys.disabled():
        print("\n" + text)


class OracleChunkTests:
    """The tests of one chunk; a test file subclasses this as `TestChunk<k>` with CHUNK = k."""

    CHUNK = 0

    def test_figures(self, capsys: pytest.CaptureFixture[str], record_property: Any) -> None:
        ocs = chunk_outcomes(self.CHUNK)
        report_figures(self.CHUNK, ocs, capsys, record_property)
        assert len(ocs) == len(chunk_cases(self.CHUNK)) > 0
        assert sum(len(chunk_cases(k)) for k in range(CHUNKS)) == len(load_cases()) == 360

    def test_all_equivalent(self) -> None:
        ocs = chunk_outcomes(self.CHUNK)
        bad = [o.line() for o in ocs if not o.equivalent]
        assert not bad, figures(ocs) + "\n" + "\n".join(bad)

    def test_all_bounds_sound_and_tight(self) -> None:
        ocs = chunk_outcomes(self.CHUNK)
        bad = [o.line() for o in ocs if not o.tight]
        assert not bad, figures(ocs) + "\n" + "\n".join(bad)

    def test_mostly_no_larger(self) -> None:
        """At least 90% of each chunk (so at least 90% of all cases) no larger than tinygrad's result."""
        ocs = chunk_outcomes(self.CHUNK)
        small = sum(o.no_larger for o in ocs)
        larger = [o.line() for o in ocs if not o.no_larger]
        assert small >= NO_LARGER_MIN * len(ocs), figures(ocs) + "\n" + "\n".join(larger)
