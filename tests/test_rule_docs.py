"""Every rule is a named declaration with a one-line description, a category and a check kind, and docs/RULES.md is
the table `egc rules --markdown` generates from the rule sets."""

from __future__ import annotations

from pathlib import Path

from egraph_compiler.cli import main
from egraph_compiler.rules import catalog

RULES_MD = Path(__file__).resolve().parent.parent / "docs" / "RULES.md"


def test_every_rule_has_a_one_line_description_a_category_and_a_check_kind() -> None:
    rules = catalog.rules()
    assert len({r.name for r in rules}) == len(rules), "rule names are unique"
    missing = [r.name for r in rules if not r.doc.strip()]
    assert not missing, f"{len(missing)} rules without a description, e.g. {missing[:10]}"
    assert not [r.name for r in rules if "\n" in r.doc], "one line each"
    assert {r.check for r in rules} <= set(catalog.CHECKS)
    assert all(r.category for r in rules)


def test_the_rule_table_in_the_docs_is_current(capsys: object) -> None:
    assert main(["rules", "--markdown"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert RULES_MD.read_text() == out, "regenerate it: egc rules --markdown > docs/RULES.md"
    assert all(f"`{r.name}`" in out for r in catalog.rules())
