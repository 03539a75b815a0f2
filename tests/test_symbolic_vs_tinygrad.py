"""`simplify` against tinygrad's own simplifier on random index expressions (where tinygrad is installed).

tests/oracle.py's tinygrad_case builds an expression the way tinygrad's symbolic fuzzer does and records what
tinygrad makes of it; oracle_check.run_case judges ours as the oracle tests do: equal to the input at every
sampled assignment (by the reference interpreter), bounds at least as tight as tinygrad's, and no larger than
tinygrad's result. `python bench/symbolic_fuzz.py` runs the same check over hundreds of cases and prints figures.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from oracle import tinygrad_case
from oracle_check import run_case

pytest.importorskip("tinygrad", reason="tinygrad (the bench extra) is the oracle here")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.integers(0, 2**32 - 1))
def test_random_index_expressions_are_no_worse_than_tinygrads(seed: int) -> None:
    case = tinygrad_case(random.Random(seed), seed)
    assume(case is not None)
    assert case is not None
    oc = run_case(case)
    assert oc.equivalent and oc.tight and oc.no_larger, f"{oc.line()}\n  tinygrad: {case['expected_str']}"
