"""Rule declarations: every rewrite is a named, categorized egglog rule.

Rules are written in egglog's own syntax (patterns over the constructors the
op table generates, see egraph_compiler/egraph/schema.py), so what is proved
(tests/prove.py) is exactly what runs. `rewrite()` covers the common
lhs -> rhs shape; `rule()` takes raw facts and actions for analyses and
multi-pattern rules.

Pattern shorthands used across the rule files:
    k(v)  -> (CONST dt (I v))       integer constant of the pattern's dtype
    kf(v) -> (CONST dt (F v))       float constant
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rule:
    name: str
    category: str
    ruleset: str
    body: tuple[str, ...]
    head: tuple[str, ...]
    doc: str = ""
    # how soundness is checked: "z3" (integer/boolean), "float" (random evaluation), "structural"
    # (helper bookkeeping with no value meaning of its own, checked through the rules that consume it)
    check: str = "z3"
    subsume: bool = False

    def to_egglog(self) -> str:
        body, head = " ".join(self.body), " ".join(self.head)
        return f'(rule ({body})\n      ({head})\n      :ruleset {self.ruleset} :name "{self.name}")'


@dataclass
class RuleSet:
    """A named group of rules that run together (one egglog ruleset)."""

    name: str
    rules: list[Rule] = field(default_factory=list)

    def add(self, r: Rule) -> Rule:
        if r.ruleset != self.name:
            raise ValueError(f"rule {r.name} belongs to ruleset {r.ruleset}, not {self.name}")
        if any(x.name == r.name for x in self.rules):
            raise ValueError(f"duplicate rule name {r.name}")
        self.rules.append(r)
        return r

    def to_egglog(self) -> str:
        return "\n".join([f"(ruleset {self.name})", *(r.to_egglog() for r in self.rules)])


def k(v: int | str, dt: str = "dt") -> str:
    return f"(CONST {dt} (I {v}))"


def kf(v: float | str, dt: str = "dt") -> str:
    return f"(CONST {dt} (F {v}))"


def rewrite(
    rs: RuleSet,
    name: str,
    lhs: str,
    rhs: str,
    *,
    when: tuple[str, ...] | list[str] = (),
    category: str,
    doc: str = "",
    check: str = "z3",
) -> Rule:
    """lhs -> rhs (both kept in the e-graph); `when` adds conditions on the match."""
    return rs.add(Rule(name, category, rs.name, (f"(= __e {lhs})", *when), (f"(union __e {rhs})",), doc, check))


def rule(
    rs: RuleSet,
    name: str,
    body: list[str] | tuple[str, ...],
    head: list[str] | tuple[str, ...],
    *,
    category: str,
    doc: str = "",
    check: str = "z3",
) -> Rule:
    return rs.add(Rule(name, category, rs.name, tuple(body), tuple(head), doc, check))
