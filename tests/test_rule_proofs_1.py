"""Soundness of the rules in shard 1 of 4 (see tests/test_rule_proofs.py and tests/rule_proofs.py)."""

from __future__ import annotations

import pytest
from rule_proofs import assert_rule_sound, shard

from egraph_compiler.egraph.dsl import Rule

RULES = shard(1)


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_rule_is_sound(rule: Rule) -> None:
    assert_rule_sound(rule)
