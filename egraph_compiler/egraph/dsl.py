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

import re
from collections.abc import Collection
from dataclasses import dataclass, field

from egraph_compiler.egraph.schema import PROVENANCE_PREFIX

# actions whose terms must exist already: they build nothing
_NOT_BUILDING = ("delete", "subsume")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[()]|[^\s()]+')

SExpr = str | list["SExpr"]


def parse_sexprs(text: str) -> list[SExpr]:
    """egglog text as nested lists of atoms (strings keep their quotes)."""
    out: list[SExpr] = []
    stack: list[list[SExpr]] = [out]
    for tok in _TOKEN.findall(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    if len(stack) != 1:
        raise ValueError(f"unbalanced parentheses in {text!r}")
    return out


def unparse(e: SExpr) -> str:
    return e if isinstance(e, str) else "(" + " ".join(map(unparse, e)) + ")"


def built_terms(actions: tuple[str, ...], constructors: Collection[str]) -> list[SExpr]:
    """Every application of one of `constructors` the actions build (each distinct term once, innermost first),
    not those inside delete or subsume (their terms exist already)."""
    seen: dict[str, SExpr] = {}

    def walk(e: SExpr) -> None:
        if isinstance(e, str) or not e:
            return
        if e[0] in _NOT_BUILDING:
            return
        for x in e[1:]:
            walk(x)
        if isinstance(e[0], str) and e[0] in constructors:
            seen.setdefault(unparse(e), e)

    for action in actions:
        for e in parse_sexprs(action):
            walk(e)
    return list(seen.values())


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

    def to_egglog(self, provenance: Collection[str] = ()) -> str:
        """The rule in egglog syntax. `provenance`: constructors whose e-nodes the rule's firings stamp with its
        name (`(set (prov-OP ...) "name")` for every term of theirs the head builds; a table keeps the first)."""
        stamps = [
            f'(set ({PROVENANCE_PREFIX}{t[0]} {" ".join(map(unparse, t[1:]))}) "{self.name}")'
            for t in built_terms(self.head, provenance)
        ]
        body, head = " ".join(self.body), " ".join((*self.head, *stamps))
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

    def to_egglog(self, provenance: Collection[str] = ()) -> str:
        return "\n".join([f"(ruleset {self.name})", *(r.to_egglog(provenance) for r in self.rules)])


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
