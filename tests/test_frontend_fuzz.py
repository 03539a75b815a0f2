"""Hostile Frontend-IR documents: the examples, mutated at random, must load or fail with a diagnostic.

A mutation picks a place in the document (a key of an object or an item of a list, at any depth) and deletes
it, replaces it with a value of another kind (null, a negative, zero or huge number, a string, a list, an
object, a bool, a float), or duplicates a list item. The loader either builds a graph or raises a
CompilerError with a code, a place and a suggestion; any other exception is a crash a user would see as a
traceback.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egraph_compiler.diagnostics import CompilerError
from egraph_compiler.frontend_ir import load_frontend_ir

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.json"))
ODD_VALUES = [None, -1, 0, 2**70, -(2**70), 1.5, float("nan"), True, "", "K", "x" * 300, [], [1, -2], {}, {"a": 1}]


def _places(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in the document, as the keys and indices that reach it."""
    out = [path] if path else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _places(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _places(v, (*path, i))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    doc = json.loads(draw(st.sampled_from(EXAMPLES)).read_text())
    done: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        places = _places(doc)
        path = draw(st.sampled_from(places))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        how = draw(st.sampled_from(["delete", "replace", "duplicate"]))
        if how == "delete":
            del parent[key]
        elif how == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[key] = copy.deepcopy(draw(st.sampled_from(ODD_VALUES)))
        done.append(f"{how} {'/'.join(map(str, path))}")
    return doc, done


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_documents_load_or_give_a_diagnostic(case: tuple[dict[str, Any], list[str]]) -> None:
    doc, _ = case
    try:
        graph = load_frontend_ir(copy.deepcopy(doc))
    except CompilerError as e:
        assert e.code and e.at and e.suggestion
        return
    assert graph.outputs, "a graph that loads has outputs"


def test_the_examples_load() -> None:
    """The seeds themselves are valid (a mutation of a broken seed would test nothing)."""
    assert EXAMPLES
    for p in EXAMPLES:
        assert load_frontend_ir(p).outputs
