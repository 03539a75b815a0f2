"""Interval analysis inside the e-graph: (lo e) <= value(e) <= (hi e).

Both are egglog functions with lattice merges (keep the tighter bound), so
every representation of an e-class contributes and the class gets the best
bound any of them proves. A bound is only recorded for integer/bool dtypes
and only when it lies inside the dtype's range (otherwise the value may
wrap around); i64 arithmetic in the rules is guarded against overflow.
Symbolic rules use these bounds as conditions.
"""

from __future__ import annotations

from egraph_compiler.egraph.dsl import RuleSet, k, rule
from egraph_compiler.egraph.schema import constructor_fields
from egraph_compiler.ir.ops import OP_TABLE, OpSpec


def wildcards(sp: OpSpec) -> str:
    """Pattern variables for every field of an op's constructor after the dtype."""
    return " ".join(f"_f{i}" for i in range(len(constructor_fields(sp)) - 1))


DECLARATIONS = """
(function lo (U) i64 :merge (max old new))
(function hi (U) i64 :merge (min old new))
(function dtype-of (U) String :merge old)
"""

ADD_BOUND = 1 << 61  # |x| below this: sums of two cannot overflow i64
MUL_BOUND = 3_037_000_499  # floor(sqrt(2**63 - 1)): products of two cannot overflow


def small(*xs: str, bound: int = ADD_BOUND) -> list[str]:
    return [c for x in xs for c in (f"(< {x} {bound})", f"(> {x} {-bound})")]


def in_dtype(lo: str, hi: str) -> list[str]:
    """The bound [lo, hi] fits the dtype `dt` (no wraparound)."""
    return ["(= mn (dt-min dt))", "(= mx (dt-max dt))", f"(>= {lo} mn)", f"(<= {hi} mx)"]


def bounds_of(*xs: str) -> list[str]:
    return [f for x in xs for f in (f"(= l{x} (lo {x}))", f"(= h{x} (hi {x}))")]


def floordiv(a: str, c: str) -> str:
    """floor(a / c) for c > 0 with egglog's truncating / and %."""
    return f"(/ (- {a} (% (+ (% {a} {c}) {c}) {c})) {c})"


def floormod(a: str, c: str) -> str:
    """a - c*floor(a / c) for c > 0."""
    return f"(% (+ (% {a} {c}) {c}) {c})"


def _set(e: str, lo: str, hi: str) -> list[str]:
    return [f"(set (lo {e}) {lo})", f"(set (hi {e}) {hi})"]


def build() -> RuleSet:
    rs = RuleSet("analysis")
    for sp in OP_TABLE.values():
        rule(
            rs,
            f"dtype-{sp.egg_name.lower()}",
            [f"(= e ({sp.egg_name} dt {wildcards(sp)}))"],
            ["(set (dtype-of e) dt)"],
            category="dtype",
            check="structural",
            doc=f"dtype-of a {sp.egg_name} node is its dtype field (bookkeeping for dtype-aware rules)",
        )
    c = "interval"
    rule(
        rs,
        "bounds-const",
        ["(= e (CONST dt (I v)))", "(dt-intlike dt)"],
        _set("e", "v", "v"),
        category=c,
        doc="an int/bool constant v has bounds [v, v]",
    )
    rule(
        rs,
        "bounds-variable",
        ["(= e (DEFINE_VAR dt name a b))"],
        _set("e", "a", "b"),
        category=c,
        doc="a DEFINE_VAR with declared range [a, b] has bounds [a, b]",
    )
    rule(
        rs,
        "bounds-range",
        [f"(= e (RANGE dt key at {k('n', 'dn')}))", "(> n 0)"],
        _set("e", "0", "(- n 1)"),
        category=c,
        doc="a RANGE over a constant bound n > 0 lies in [0, n-1]",
    )
    rule(
        rs,
        "bounds-special",
        [f"(= e (SPECIAL dt name {k('n', 'dn')}))", "(> n 0)"],
        _set("e", "0", "(- n 1)"),
        category=c,
        doc="a SPECIAL (launch index) with constant size n > 0 lies in [0, n-1]",
    )
    for op in ("LOAD", "CAST", "BITCAST"):
        fields = "src" if op != "LOAD" else "srcs"
        rule(
            rs,
            f"bounds-dtype-{op.lower()}",
            [f"(= e ({op} dt {fields}))", "(dt-intlike dt)", "(= mn (dt-min dt))", "(= mx (dt-max dt))", '(!= dt "index")'],
            _set("e", "mn", "mx"),
            category=c,
            doc=f"a {op} of a fixed-width int/bool dtype (not index) lies in the dtype's range [dt-min, dt-max]",
        )
    rule(rs, "bounds-cmplt-bool", ["(= e (CMPLT dt a b))"], _set("e", "0", "1"), category=c, doc="a < b is a bool: [0, 1]")
    rule(rs, "bounds-cmpne-bool", ["(= e (CMPNE dt a b))"], _set("e", "0", "1"), category=c, doc="a != b is a bool: [0, 1]")

    rule(
        rs,
        "bounds-add",
        ["(= e (ADD dt a b))", *bounds_of("a", "b"), *small("la", "ha", "lb", "hb"), *in_dtype("(+ la lb)", "(+ ha hb)")],
        _set("e", "(+ la lb)", "(+ ha hb)"),
        category=c,
        doc="bounds of a + b: [amin + bmin, amax + bmax], when that fits the dtype",
    )
    corners = ["(* la lb)", "(* la hb)", "(* ha lb)", "(* ha hb)"]
    lo_c = f"(min (min {corners[0]} {corners[1]}) (min {corners[2]} {corners[3]}))"
    hi_c = f"(max (max {corners[0]} {corners[1]}) (max {corners[2]} {corners[3]}))"
    rule(
        rs,
        "bounds-mul",
        ["(= e (MUL dt a b))", *bounds_of("a", "b"), *small("la", "ha", "lb", "hb", bound=MUL_BOUND), *in_dtype(lo_c, hi_c)],
        _set("e", lo_c, hi_c),
        category=c,
        doc="bounds of a * b: min and max of the four corner products, when they fit the dtype",
    )
    rule(
        rs,
        "bounds-max",
        ["(= e (MAX dt a b))", *bounds_of("a", "b")],
        _set("e", "(max la lb)", "(max ha hb)"),
        category=c,
        doc="bounds of max(a, b): [max(amin, bmin), max(amax, bmax)]",
    )
    # floor division by a positive constant is monotone in the numerator
    rule(
        rs,
        "bounds-idiv-pos",
        [f"(= e (IDIV dt a {k('q')}))", "(> q 0)", *bounds_of("a"), *small("la", "ha")],
        _set("e", floordiv("la", "q"), floordiv("ha", "q")),
        category=c,
        doc="bounds of a // q for constant q > 0: the bounds of a divided (floor) by q",
    )
    rule(
        rs,
        "bounds-idiv-neg",
        [
            f"(= e (IDIV dt a {k('q')}))",
            "(< q 0)",
            *bounds_of("a"),
            *small("la", "ha", "q"),
            *in_dtype(floordiv("(- 0 ha)", "(- 0 q)"), floordiv("(- 0 la)", "(- 0 q)")),
        ],
        _set("e", floordiv("(- 0 ha)", "(- 0 q)"), floordiv("(- 0 la)", "(- 0 q)")),
        category=c,
        doc="bounds of a // q for constant q < 0: [-amax // -q, -amin // -q], when that fits the dtype",
    )
    # a positive divisor range: the extremes are at the corners
    rule(
        rs,
        "bounds-idiv-var",
        ["(= e (IDIV dt a b))", *bounds_of("a", "b"), "(> lb 0)", *small("la", "ha", "hb")],
        _set(
            "e", f"(min {floordiv('la', 'lb')} {floordiv('la', 'hb')})", f"(max {floordiv('ha', 'lb')} {floordiv('ha', 'hb')})"
        ),
        category=c,
        doc="bounds of a // b for b > 0: extremes of amin, amax divided (floor) by bmin, bmax",
    )
    # a negative divisor range: floor(x/d) = floor(-x / -d)
    neg_lo = f"(min {floordiv('(- 0 ha)', '(- 0 hb)')} {floordiv('(- 0 ha)', '(- 0 lb)')})"
    neg_hi = f"(max {floordiv('(- 0 la)', '(- 0 hb)')} {floordiv('(- 0 la)', '(- 0 lb)')})"
    rule(
        rs,
        "bounds-idiv-var-neg",
        ["(= e (IDIV dt a b))", *bounds_of("a", "b"), "(< hb 0)", *small("la", "ha", "lb"), *in_dtype(neg_lo, neg_hi)],
        _set("e", neg_lo, neg_hi),
        category=c,
        doc="bounds of a // b for b < 0: corners of -a // -b; must fit the dtype (INT_MIN // -1 wraps)",
    )
    rule(
        rs,
        "bounds-mod-pos",
        [f"(= e (MOD dt a {k('q')}))", "(> q 0)"],
        _set("e", "0", "(- q 1)"),
        category=c,
        doc="bounds of a % q for constant q > 0 (floor mod): [0, q-1]",
    )
    rule(
        rs,
        "bounds-mod-neg",
        [f"(= e (MOD dt a {k('q')}))", "(< q 0)", *small("q")],
        _set("e", "(+ q 1)", "0"),
        category=c,
        doc="bounds of a % q for constant q < 0 (sign of the divisor): [q+1, 0]",
    )
    rule(
        rs,
        "bounds-mod-nonneg",
        [f"(= e (MOD dt a {k('q')}))", "(> q 0)", *bounds_of("a"), "(>= la 0)"],
        _set("e", "0", "(min ha (- q 1))"),
        category=c,
        doc="bounds of a % q for constant q > 0 and a >= 0: [0, min(amax, q-1)]",
    )
    rule(
        rs,
        "bounds-mod-one-period",
        [
            f"(= e (MOD dt a {k('q')}))",
            "(> q 0)",
            *bounds_of("a"),
            *small("la", "ha"),
            f"(= {floordiv('la', 'q')} {floordiv('ha', 'q')})",
        ],
        _set("e", floormod("la", "q"), floormod("ha", "q")),
        category=c,
        doc="bounds of a % q for q > 0 when amin, amax share a period (same a // q): [amin % q, amax % q]",
    )
    rule(
        rs,
        "bounds-mod-var",
        ["(= e (MOD dt a b))", *bounds_of("a", "b"), "(> lb 0)", "(>= la 0)"],
        _set("e", "0", "(min ha (- hb 1))"),
        category=c,
        doc="bounds of a % b for b > 0 and a >= 0: [0, min(amax, bmax-1)]",
    )
    rule(
        rs,
        "bounds-cmplt-true",
        ["(= e (CMPLT dt a b))", *bounds_of("a", "b"), "(< ha lb)"],
        _set("e", "1", "1"),
        category=c,
        doc="a < b is always true (1) when amax < bmin",
    )
    rule(
        rs,
        "bounds-cmplt-false",
        ["(= e (CMPLT dt a b))", *bounds_of("a", "b"), "(>= la hb)"],
        _set("e", "0", "0"),
        category=c,
        doc="a < b is always false (0) when amin >= bmax",
    )
    rule(
        rs,
        "bounds-cmpne-true-lt",
        ["(= e (CMPNE dt a b))", *bounds_of("a", "b"), "(< ha lb)"],
        _set("e", "1", "1"),
        category=c,
        doc="a != b is always true (1) when amax < bmin",
    )
    rule(
        rs,
        "bounds-cmpne-true-gt",
        ["(= e (CMPNE dt a b))", *bounds_of("a", "b"), "(< hb la)"],
        _set("e", "1", "1"),
        category=c,
        doc="a != b is always true (1) when bmax < amin",
    )
    rule(
        rs,
        "bounds-cmpne-false",
        ["(= e (CMPNE dt a b))", *bounds_of("a", "b"), "(= la ha)", "(= lb hb)", "(= la lb)"],
        _set("e", "0", "0"),
        category=c,
        doc="a != b is always false (0) when a and b are the same single value",
    )
    rule(
        rs,
        "bounds-where",
        ["(= e (WHERE dt p a b))", *bounds_of("a", "b")],
        _set("e", "(min la lb)", "(max ha hb)"),
        category=c,
        doc="bounds of where(p, a, b): the union [min(amin, bmin), max(amax, bmax)]",
    )
    rule(
        rs,
        "bounds-where-true",
        ["(= e (WHERE dt p a b))", "(= lp (lo p))", "(>= lp 1)", *bounds_of("a")],
        _set("e", "la", "ha"),
        category=c,
        doc="where(p, a, b) with p always true (pmin >= 1) has the bounds of a",
    )
    rule(
        rs,
        "bounds-where-false",
        ["(= e (WHERE dt p a b))", "(= hp (hi p))", "(<= hp 0)", *bounds_of("b")],
        _set("e", "lb", "hb"),
        category=c,
        doc="where(p, a, b) with p always false (pmax <= 0) has the bounds of b",
    )
    rule(
        rs,
        "bounds-and-bool",
        ["(= e (AND dt a b))", "(dt-bool dt)", *bounds_of("a", "b")],
        _set("e", "(min la lb)", "(min ha hb)"),
        category=c,
        doc="bounds of bool a & b: [min(amin, bmin), min(amax, bmax)]",
    )
    rule(
        rs,
        "bounds-or-bool",
        ["(= e (OR dt a b))", "(dt-bool dt)", *bounds_of("a", "b")],
        _set("e", "(max la lb)", "(max ha hb)"),
        category=c,
        doc="bounds of bool a | b: [max(amin, bmin), max(amax, bmax)]",
    )
    rule(
        rs,
        "bounds-and-nonneg",
        ["(= e (AND dt a b))", "(dt-int dt)", *bounds_of("b"), "(>= lb 0)"],
        _set("e", "0", "hb"),
        category=c,
        doc="bounds of int a & b for b >= 0: [0, bmax] (AND with a non-negative value cannot exceed it)",
    )
    rule(
        rs,
        "bounds-shr-const",
        [
            f"(= e (SHR dt a {k('s')}))",
            "(>= s 0)",
            "(< s 62)",
            "(= bits (dt-bits dt))",
            "(< s bits)",
            *bounds_of("a"),
            *small("la", "ha"),
        ],
        _set("e", floordiv("la", "(<< 1 s)"), floordiv("ha", "(<< 1 s)")),
        category=c,
        doc="bounds of a >> s for constant 0 <= s < bits: the bounds of a divided (floor) by 2**s",
    )
    rule(
        rs,
        "bounds-shl-const",
        [
            f"(= e (SHL dt a {k('s')}))",
            "(>= s 0)",
            "(< s 30)",
            "(= bits (dt-bits dt))",
            "(< s bits)",
            *bounds_of("a"),
            *small("la", "ha", bound=1 << 30),
            *in_dtype("(* la (<< 1 s))", "(* ha (<< 1 s))"),
        ],
        _set("e", "(* la (<< 1 s))", "(* ha (<< 1 s))"),
        category=c,
        doc="bounds of a << s for constant 0 <= s < 30: the bounds of a times 2**s, when that fits the dtype",
    )
    rule(
        rs,
        "bounds-cast-int",
        ["(= e (CAST dt a))", "(dt-int dt)", *bounds_of("a"), *in_dtype("la", "ha")],
        _set("e", "la", "ha"),
        category=c,
        doc="an int cast keeps a's bounds when they fit the target dtype (no wraparound)",
    )
    rule(
        rs,
        "bounds-cast-bool-true",
        ["(= e (CAST dt a))", "(dt-bool dt)", *bounds_of("a"), "(> la 0)"],
        _set("e", "1", "1"),
        category=c,
        doc="a cast to bool is always true (1) when amin > 0",
    )
    rule(
        rs,
        "bounds-cast-bool",
        ["(= e (CAST dt a))", "(dt-bool dt)"],
        _set("e", "0", "1"),
        category=c,
        doc="a cast to bool lies in [0, 1]",
    )
    return rs


ANALYSIS = build()
