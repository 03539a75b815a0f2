"""OptOps as rewrite rules: alternative loop nests for each kernel, in the same e-graph.

A split of range r (bound n) by a factor f makes two ranges named by the
split itself (invariant 4: `RKSplit key f 0` is the outer part, `RKSplit key f
1` the inner one) and two equalities:

  r == outer * f + inner                      (unioned: index math simplifies through it)
  END(x, .. r ..) == END(x, .. outer, inner ..)   (the loop nest that binds the parts)

The inner part takes the split's target AxisType (UPCAST for an output axis,
UNROLL for a reduce axis); the outer part keeps the parent's. A loop nest
binds either r or its parts; decoding defines the unbound one from the bound
ones (optimize.bind_split_ranges), so whatever index form the extractor picks
is well formed. Only ranges that come straight from rangeify are split (their
key is RKOut/RKRed), so a split is never split again and every schedule is one
term: splitting i then j gives the same END as splitting j then i.

Legality is in the guards: the factor divides the bound (no tail loop), and
`split-factor` facts (set per target by optimize.py) name the factors tried.
"""

from __future__ import annotations

import os

from egraph_compiler.rules.dsl import RuleSet, rule

IX = '"index"'
GROUP_MIN = 1 << 16  # a reduce shorter than this is not worth a thread hand-off
MAX_POSITION = 4   # ranges after the 4th of one loop nest are not split (kernels here have at most 4-5 axes)

DECLARATIONS = """
(constructor RKSplit (RKey i64 i64) RKey)
(relation split-factor (String i64))
"""

# (binder op, the AxisType letter of the ranges it splits, the inner part's AxisType, rangeify's key constructor)
SPLITS = (("END", "L", "u", "RKOut"), ("REDUCE", "R", "r", "RKRed"))


def ik(v: str | int) -> str:
    return f"(CONST {IX} (I {v}))"


def _nest(prefix: list[str], tail: str) -> str:
    out = tail
    for x in reversed(prefix):
        out = f"(UCons {x} {out})"
    return out


def _split_rule(rs: RuleSet, binder: str, kind: str, inner: str, keyc: str, pos: int) -> None:
    """Split the range at position `pos` of the binder's range list (after its body)."""
    before = [f"x{i}" for i in range(pos)]
    lst = _nest(before, "(UCons r rest)")
    new = _nest(before, "(UCons ro (UCons ri rest))")
    if binder == "END":
        e, e_new = f"(END d (UCons body {lst}))", f"(END d (UCons body {new}))"
    else:
        e, e_new = f"(REDUCE d op ax (UCons body {lst}))", f"(REDUCE d op ax (UCons body {new}))"
    part = "upcast" if inner == "u" else "unroll"
    rule(rs, f"split-{part}-{pos}",
         [f"(= e {e})", f'(= r (RANGE {IX} key "{kind}" (CONST {IX} (I n))))', f"(= key ({keyc} t k))",
          f'(split-factor "{inner}" f)', "(< f n)", "(= (% n f) 0)"],
         [f'(let ro (RANGE {IX} (RKSplit key f 0) "{kind}" {ik("(/ n f)")}))',
          f'(let ri (RANGE {IX} (RKSplit key f 1) "{inner}" {ik("f")}))',
          f"(union r (ADD {IX} (MUL {IX} ro {ik('f')}) ri))",
          f"(union e {e_new})"],
         category="optops", check="structural",
         doc=f"range {pos} of a {binder} split by f: outer part keeps its AxisType, inner part becomes "
             f"{'UPCAST' if inner == 'u' else 'UNROLL'} (r == outer*f + inner, proved in tests/test_optops.py)")


def _accumulate_rule(rs: RuleSet, pos: int, key_pattern: str, suffix: str) -> None:
    """A reduce over r becomes a reduce over the UPCAST part of partial reduces over the outer part: f
    independent accumulators instead of one dependency chain (a reassociation: float sums change by rounding)."""
    before = [f"x{i}" for i in range(pos)]
    rule(rs, f"split-accumulate-{pos}{suffix}",
         [f"(= e (REDUCE d op ax (UCons body {_nest(before, '(UCons r rest)')})))",
          f'(= r (RANGE {IX} key "R" (CONST {IX} (I n))))', f"(= key {key_pattern})",
          '(split-factor "acc" f)', "(< f n)", "(= (% n f) 0)"],
         [f'(let ro (RANGE {IX} (RKSplit key f 0) "R" {ik("(/ n f)")}))',
          f'(let ri (RANGE {IX} (RKSplit key f 1) "u" {ik("f")}))',
          f"(union r (ADD {IX} (MUL {IX} ro {ik('f')}) ri))",
          f"(union e (REDUCE d op ax (UCons (REDUCE d op ax (UCons body {_nest(before, '(UCons ro rest)')})) "
          "(UCons ri (UNil)))))"],
         category="optops", check="structural",
         doc="f partial accumulators (UPCAST) over the outer part, combined after the loop")


def _group_rule(rs: RuleSet) -> None:
    """A whole reduce over one big range becomes a GROUP_REDUCE over T contiguous slices (one per core) of
    partial reduces; the backend combines the partials in slice order (a reassociation, like the above)."""
    rule(rs, "split-group",
         ["(= e (REDUCE d op ax (UCons body (UCons r (UNil)))))",
          f'(= r (RANGE {IX} key "R" (CONST {IX} (I n))))', "(= key (RKRed t k))",
          '(split-factor "group" g)', f"(>= n {GROUP_MIN})", "(= (% n g) 0)"],
         ["(let f (/ n g))",
          f'(let rg (RANGE {IX} (RKSplit key f 0) "G" {ik("g")}))',
          f'(let ro (RANGE {IX} (RKSplit key f 1) "R" {ik("f")}))',
          f"(union r (ADD {IX} (MUL {IX} rg {ik('f')}) ro))",
          "(union e (REDUCE d op ax (UCons (REDUCE d op ax (UCons body (UCons ro (UNil)))) (UCons rg (UNil)))))"],
         category="optops", check="structural",
         doc="GROUP_REDUCE: g slices of the reduce run on g cores, partials combined in order")


def build() -> RuleSet:
    rs = RuleSet("optops")
    for binder, kind, inner, keyc in SPLITS:
        for pos in range(MAX_POSITION):
            _split_rule(rs, binder, kind, inner, keyc, pos)
    for pos in range(MAX_POSITION):
        _accumulate_rule(rs, pos, "(RKRed t k)", "")
    # the slice of a group reduce gets accumulators too
    _accumulate_rule(rs, 0, "(RKSplit kk ff 1)", "-slice")
    _group_rule(rs)
    return rs


OPTOPS = build()

# Factors tried per target: UPCAST (u) of an output axis, UNROLL (r) of a reduce axis, partial accumulators
# (acc) of a reduce axis. The reference
# interpreter gains nothing from a schedule, so it explores none.
SPLIT_FACTORS: dict[str, dict[str, tuple[int, ...]]] = {
    "llvm": {"u": (4, 8, 16), "r": (4,), "acc": (16, 32)},
    "cuda": {},
    "reference": {},
}


def split_facts(target: str) -> list[str]:
    facts = [f'(split-factor "{kind}" {f})' for kind, fs in SPLIT_FACTORS.get(target, {}).items() for f in fs]
    cores = os.cpu_count() or 1
    if target == "llvm" and cores > 1:  # GROUP_REDUCE: one slice per core
        facts.append(f'(split-factor "group" {cores})')
    return facts
