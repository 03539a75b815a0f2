"""The symbolic ruleset: constant folding, identities, div/mod, comparisons,
boolean algebra, where/cast folding, and the div/mod/compare rules that work
on linear forms (rules/linear.py).

Dtype scope is explicit in every rule: `(dt-int dt)`, `(dt-bool dt)`,
`(dt-intlike dt)` (int or bool), `(dt-float dt)`, or the literal "index".
Integer rules hold under fixed-width wraparound unless they are restricted
to "index" (index arithmetic is assumed not to overflow int64) or guarded
by interval bounds, which are only recorded when no wraparound is possible.
tests/prove.py proves each integer/boolean rule with Z3 for every dtype it
can match; float rules are checked by random evaluation.
"""

from __future__ import annotations

from egraph_compiler.egraph.dsl import RuleSet, k, kf, rewrite, rule
from egraph_compiler.ir.ops import OP_TABLE, Category, Ops
from egraph_compiler.rules.intervals import MUL_BOUND, bounds_of, floordiv, floormod, in_dtype, small, wildcards
from egraph_compiler.rules.linear import can_be_index, ik, lin_of

IX = '"index"'
BOOL = '"bool"'
T, F_ = f"(CONST {BOOL} (I 1))", f"(CONST {BOOL} (I 0))"


_INFIX = {"ADD": "+", "MUL": "*", "FDIV": "/", "MOD": "%", "IDIV": "//", "CMPLT": "<", "CMPNE": "!="}
_INFIX |= {"XOR": "^", "OR": "|", "AND": "&", "SHR": ">>", "SHL": "<<"}


def _show(op: str, *args: str) -> str:
    """An op applied to arguments in math notation, for rule descriptions: `a + b`, `max(a, b)`."""
    if op in _INFIX and len(args) == 2:
        return f"{args[0]} {_INFIX[op]} {args[1]}"
    return f"{op.lower()}({', '.join(args)})"


def _wrap(v: str) -> str:
    """v wrapped into dtype `dt` of `bits` < 64 (mn = dt-min, m = 2**bits)."""
    return f"(+ {floormod(f'(- {v} mn)', 'm')} mn)"


def _narrow(vars_: tuple[str, ...]) -> list[str]:
    return [
        "(dt-int dt)",
        "(= bits (dt-bits dt))",
        "(< bits 64)",
        "(= mn (dt-min dt))",
        "(= m (<< 1 bits))",
        *small(*vars_, bound=1 << 40),
    ]


def _wide(result: str) -> list[str]:
    return [
        "(dt-int dt)",
        "(= bits (dt-bits dt))",
        "(= bits 64)",
        "(= mn (dt-min dt))",
        "(= mx (dt-max dt))",
        f"(>= {result} mn)",
        f"(<= {result} mx)",
    ]


def _fold_int(rs: RuleSet, name: str, op: str, result: str, guards: tuple[str, ...] = (), *, show: str) -> None:
    """Constant folding of `op` on two integer constants, with wraparound for narrow dtypes.
    `show` is the fold in math notation, for the rules' descriptions."""
    lhs = f"({op} dt {k('a')} {k('b')})"
    rewrite(
        rs,
        f"fold-{name}",
        lhs,
        k(_wrap(result)),
        when=[*_narrow(("a", "b")), *guards],
        category="constant-fold",
        doc=f"{show} of int constants folds, wrapped to a < 64-bit dtype",
    )
    bound = MUL_BOUND if op in ("MUL", "SHL") else 1 << 61
    rewrite(
        rs,
        f"fold-{name}-wide",
        lhs,
        k(result),
        when=[*small("a", "b", bound=bound), *guards, *_wide(result)],
        category="constant-fold",
        doc=f"{show} of int constants folds in a 64-bit dtype if the result fits",
    )


def constant_folding(rs: RuleSet) -> None:
    _fold_int(rs, "add", "ADD", "(+ a b)", show="a + b")
    _fold_int(rs, "mul", "MUL", "(* a b)", tuple(small("a", "b", bound=MUL_BOUND)), show="a * b")
    _fold_int(rs, "max", "MAX", "(max a b)", show="max(a, b)")
    _fold_int(rs, "idiv-pos", "IDIV", floordiv("a", "b"), ("(> b 0)",), show="a // b (floor, b > 0)")
    _fold_int(rs, "idiv-neg", "IDIV", floordiv("(- 0 a)", "(- 0 b)"), ("(< b 0)",), show="a // b (floor, b < 0)")
    _fold_int(rs, "mod-pos", "MOD", floormod("a", "b"), ("(> b 0)",), show="a % b (floor, b > 0)")
    _fold_int(rs, "mod-neg", "MOD", f"(- 0 {floormod('(- 0 a)', '(- 0 b)')})", ("(< b 0)",), show="a % b (floor, b < 0)")
    _fold_int(rs, "and", "AND", "(& a b)", show="a & b")
    _fold_int(rs, "or", "OR", "(| a b)", show="a | b")
    _fold_int(rs, "xor", "XOR", "(^ a b)", show="a ^ b")
    _fold_int(
        rs,
        "shl",
        "SHL",
        "(<< a b)",
        ("(>= b 0)", "(< b bits)", "(< b 31)", *small("a", bound=1 << 31)),
        show="a << b (0 <= b < min(bits, 31), |a| < 2**31)",
    )
    _fold_int(rs, "shr", "SHR", "(>> a b)", ("(>= b 0)", "(< b bits)"), show="a >> b (0 <= b < bits)")
    cf = "constant-fold"
    rewrite(
        rs,
        "fold-cmplt-true",
        f"(CMPLT dt {k('a')} {k('b')})",
        T,
        when=["(dt-intlike dt)", "(< a b)"],
        category=cf,
        doc="c1 < c2 -> true for bool constants c1 < c2 (dt is the bool result; ints fold via bounds)",
    )
    rewrite(
        rs,
        "fold-cmplt-false",
        f"(CMPLT dt {k('a')} {k('b')})",
        F_,
        when=["(dt-intlike dt)", "(>= a b)"],
        category=cf,
        doc="c1 < c2 -> false for bool constants c1 >= c2 (dt is the bool result; ints fold via bounds)",
    )
    rewrite(
        rs,
        "fold-cmpne-true",
        f"(CMPNE dt {k('a')} {k('b')})",
        T,
        when=["(dt-intlike dt)", "(!= a b)"],
        category=cf,
        doc="c1 != c2 -> true for distinct bool constants (dt is the bool result; ints fold via bounds)",
    )
    rewrite(
        rs,
        "fold-cmpne-false",
        f"(CMPNE dt {k('a')} {k('b')})",
        F_,
        when=["(dt-intlike dt)", "(= a b)"],
        category=cf,
        doc="c != c -> false for equal bool constants (dt is the bool result; ints fold via bounds)",
    )
    for name, fn in (("and", "min"), ("or", "max")):
        rewrite(
            rs,
            f"fold-{name}-bool",
            f"({name.upper()} dt {k('a')} {k('b')})",
            k(f"({fn} a b)"),
            when=["(dt-bool dt)"],
            category=cf,
            doc=f"a {'&' if name == 'and' else '|'} b of two bool constants folds to {fn}(a, b)",
        )
    rewrite(
        rs,
        "fold-xor-bool",
        f"(XOR dt {k('a')} {k('b')})",
        k("(^ a b)"),
        when=["(dt-bool dt)"],
        category=cf,
        doc="a ^ b of two bool constants folds",
    )
    rewrite(rs, "fold-where-true", "(WHERE dt (CONST dc (I 1)) a b)", "a", category=cf, doc="where(true, a, b) -> a")
    rewrite(rs, "fold-where-false", "(WHERE dt (CONST dc (I 0)) a b)", "b", category=cf, doc="where(false, a, b) -> b")
    # casts of constants
    rewrite(
        rs,
        "fold-cast-int-narrow",
        f"(CAST dt {k('a', 'ds')})",
        k(_wrap("a")),
        when=["(dt-intlike ds)", *_narrow(("a",))],
        category=cf,
        doc="cast of an int/bool constant to a narrow (< 64-bit) int folds, wrapped to the dtype's width",
    )
    rewrite(
        rs,
        "fold-cast-int-wide",
        f"(CAST dt {k('a', 'ds')})",
        k("a"),
        when=["(dt-intlike ds)", *small("a", bound=1 << 62), *_wide("a")],
        category=cf,
        doc="cast of an int/bool constant to a 64-bit int folds when the value fits the dtype",
    )
    rewrite(
        rs,
        "fold-cast-to-bool-true",
        f"(CAST dt {k('a', 'ds')})",
        k(1),
        when=["(dt-bool dt)", "(dt-intlike ds)", "(!= a 0)"],
        category=cf,
        doc="bool(c) -> true for a nonzero int/bool constant c",
    )
    rewrite(
        rs,
        "fold-cast-to-bool-false",
        f"(CAST dt {k(0, 'ds')})",
        k(0),
        when=["(dt-bool dt)", "(dt-intlike ds)"],
        category=cf,
        doc="bool(0) -> false",
    )
    rewrite(
        rs,
        "fold-cast-int-to-float",
        f"(CAST dt {k('a', 'ds')})",
        kf("(to-f64 a)"),
        when=["(dt-float dt)", "(dt-intlike ds)", *small("a", bound=1 << 53)],
        category=cf,
        check="float",
        doc="float(c) of an int constant |c| < 2**53 folds (exact in f64, rounded to the dtype on decode)",
    )
    # float folding (f64 arithmetic; results are rounded to the dtype when decoded) - checked numerically
    ff = "float-fold"

    def finite(d: str) -> list[str]:
        return [f"(dt-float {d})", "(<= a inf)", "(<= b inf)", "(>= a -inf)", "(>= b -inf)"]

    fin = finite("dt")
    for name, op, fn in (("add", "ADD", "+"), ("mul", "MUL", "*"), ("max", "MAX", "max")):
        show = f"{fn}(a, b)" if fn == "max" else f"a {fn} b"
        rewrite(
            rs,
            f"fold-float-{name}",
            f"({op} dt {kf('a')} {kf('b')})",
            kf(f"({fn} a b)"),
            when=fin,
            category=ff,
            check="float",
            doc=f"{show} of two non-NaN float constants folds in f64 (rounded to the dtype on decode)",
        )
    rewrite(
        rs,
        "fold-float-cmplt-true",
        f"(CMPLT dt {kf('a', 'ds')} {kf('b', 'ds')})",
        T,
        when=[*finite("ds"), "(< a b)"],
        category=ff,
        check="float",
        doc="c1 < c2 -> true for non-NaN float constants with c1 < c2",
    )
    rewrite(
        rs,
        "fold-float-cmplt-false",
        f"(CMPLT dt {kf('a', 'ds')} {kf('b', 'ds')})",
        F_,
        when=[*finite("ds"), "(>= a b)"],
        category=ff,
        check="float",
        doc="c1 < c2 -> false for non-NaN float constants with c1 >= c2",
    )
    rewrite(
        rs,
        "fold-float-div",
        f"(FDIV dt {kf('a')} {kf('b')})",
        kf("(/ a b)"),
        when=[*fin, "(!= b 0.0)"],
        category=ff,
        check="float",  # f64's 53 bits: no double rounding to f32
        doc="c1 / c2 of non-NaN float constants, c2 != 0, folds in f64 (53 bits: no double rounding to f32)",
    )
    m, n = "(abs a)", "(to-i64 (abs a))"
    for scale, pow2 in (
        ("up", [f"(>= {m} 2.0)", f"(= {m} (to-f64 {n}))"]),
        ("down", [f"(< {m} 1.0)", f"(> {m} 0.0)", f"(= (/ 1.0 {m}) (to-f64 (to-i64 (/ 1.0 {m}))))"]),
    ):
        bits = n if scale == "up" else f"(to-i64 (/ 1.0 {m}))"
        rewrite(
            rs,
            f"recip-scaled-{scale}",
            f"(MUL dt {kf('a')} (RECIP dt (MUL dt {kf('a')} x)))",
            "(RECIP dt x)",
            when=["(dt-float dt)", *pow2, f"(= 0 (& {bits} (- {bits} 1)))"],
            category=ff,
            check="float",
            doc=f"c * (1 / (c*x)) -> 1/x for a power of two |c| {'>= 2' if scale == 'up' else '< 1'}: exact, except where "
            "c*x overflows or underflows, and there 1/x is the closer result",
        )
    rewrite(
        rs,
        "fold-float-recip",
        f"(RECIP dt {kf('a')})",
        kf("(/ 1.0 a)"),
        when=["(dt-float dt)", "(<= a inf)", "(>= a -inf)", "(!= a 0.0)"],
        category=ff,
        check="float",
        doc="1/c of a non-NaN, nonzero float constant folds in f64",
    )


def commutativity(rs: RuleSet) -> None:
    """Commutative ops get both operand orders, except index sums and products: their linear forms are canonical."""
    for sp in OP_TABLE.values():
        if sp.commutative:
            guard = [f"(!= dt {IX})"] if sp.egg_name in ("ADD", "MUL") else []
            rewrite(
                rs,
                f"commute-{sp.egg_name.lower()}",
                f"({sp.egg_name} dt a b)",
                f"({sp.egg_name} dt b a)",
                when=guard,
                category="canonical",
                doc=f"{_show(sp.egg_name, 'a', 'b')} -> {_show(sp.egg_name, 'b', 'a')}"
                + (" (not index: linear forms keep index sums/products canonical)" if guard else ""),
            )


def products(rs: RuleSet) -> None:
    """Index products keep constants outermost (so linear forms see them); other factors are found by
    `has-factor` / `pdiv` (rules/linear.py) instead of associativity and commutativity."""
    c = "canonical"
    nz = ["(!= q 1)", "(!= q 0)"]
    rewrite(
        rs,
        "mul-pull-const-left",
        f"(MUL {IX} (MUL {IX} a {ik('q')}) b)",
        f"(MUL {IX} (MUL {IX} a b) {ik('q')})",
        when=nz,
        category=c,
        doc="(a*c)*b -> (a*b)*c for index products: the constant moves outermost for the linear forms",
    )
    rewrite(
        rs,
        "mul-pull-const-right",
        f"(MUL {IX} b (MUL {IX} a {ik('q')}))",
        f"(MUL {IX} (MUL {IX} b a) {ik('q')})",
        when=nz,
        category=c,
        doc="b*(a*c) -> (b*a)*c for index products: the constant moves outermost for the linear forms",
    )
    rewrite(
        rs,
        "mul-const-to-right",
        f"(MUL {IX} {ik('q')} a)",
        f"(MUL {IX} a {ik('q')})",
        category=c,
        doc="c*a -> a*c for index products: constants go on the right",
    )


def identities(rs: RuleSet) -> None:
    c = "identity"
    ints = ["(dt-int dt)"]
    rewrite(rs, "add-zero", f"(ADD dt x {k(0)})", "x", when=["(dt-intlike dt)"], category=c, doc="x + 0 -> x (ints and bools)")
    rewrite(rs, "mul-one", f"(MUL dt x {k(1)})", "x", when=["(dt-intlike dt)"], category=c, doc="x * 1 -> x (ints and bools)")
    rewrite(
        rs,
        "mul-zero",
        f"(MUL dt x {k(0)})",
        k(0),
        when=ints,
        category=c,
        doc="x * 0 -> 0 for integers only: for floats x*0 is not 0 when x is inf or NaN",
    )
    rewrite(
        rs,
        "float-add-zero",
        f"(ADD dt x {kf('0.0')})",
        "x",
        when=["(dt-float dt)"],
        category=c,
        check="float",
        doc="x + 0.0 -> x for floats",
    )
    rewrite(
        rs,
        "float-mul-one",
        f"(MUL dt x {kf('1.0')})",
        "x",
        when=["(dt-float dt)"],
        category=c,
        check="float",
        doc="x * 1.0 -> x for floats",
    )
    rewrite(rs, "idiv-one", f"(IDIV dt x {k(1)})", "x", when=ints, category=c, doc="x // 1 -> x")
    rewrite(
        rs,
        "idiv-minus-one",
        f"(IDIV dt x {k(-1)})",
        f"(MUL dt x {k(-1)})",
        when=ints,
        category=c,
        doc="x // -1 -> x * -1 (both wrap alike at the dtype's minimum)",
    )
    rewrite(rs, "mod-one", f"(MOD dt x {k(1)})", k(0), when=ints, category=c, doc="x % 1 -> 0")
    rewrite(rs, "mod-minus-one", f"(MOD dt x {k(-1)})", k(0), when=ints, category=c, doc="x % -1 -> 0")
    rewrite(rs, "max-self", "(MAX dt x x)", "x", category=c, doc="max(x, x) -> x")
    rewrite(rs, "and-self", "(AND dt x x)", "x", category=c, doc="x & x -> x")
    rewrite(rs, "or-self", "(OR dt x x)", "x", category=c, doc="x | x -> x")
    rewrite(rs, "xor-self", "(XOR dt x x)", k(0), when=["(dt-intlike dt)"], category=c, doc="x ^ x -> 0 (ints and bools)")
    rewrite(
        rs,
        "xor-cancel",
        "(XOR dt (XOR dt x y) y)",
        "x",
        when=["(dt-intlike dt)"],
        category=c,
        doc="(x ^ y) ^ y -> x (ints and bools)",
    )
    rewrite(
        rs,
        "cmplt-self",
        "(CMPLT dt x x)",
        F_,
        category=c,
        check="z3+float",
        doc="x < x -> false (also for floats: NaN < NaN is false)",
    )
    rewrite(
        rs,
        "cmpne-self",
        "(CMPNE dt x x)",
        F_,
        when=["(= dx (dtype-of x))", "(dt-intlike dx)"],
        category=c,
        doc="x != x -> false for ints and bools; not for floats: NaN != NaN",
    )
    rewrite(rs, "where-same", "(WHERE dt p x x)", "x", category=c, doc="where(p, x, x) -> x")
    rewrite(rs, "and-zero", f"(AND dt x {k(0)})", k(0), when=["(dt-intlike dt)"], category=c, doc="x & 0 -> 0 (ints and bools)")
    rewrite(rs, "or-zero", f"(OR dt x {k(0)})", "x", when=["(dt-intlike dt)"], category=c, doc="x | 0 -> x (ints and bools)")
    rewrite(rs, "xor-zero", f"(XOR dt x {k(0)})", "x", when=["(dt-intlike dt)"], category=c, doc="x ^ 0 -> x (ints and bools)")
    rewrite(
        rs,
        "and-all-ones",
        f"(AND dt x {k(-1)})",
        "x",
        when=["(dt-signed dt)"],
        category=c,
        doc="x & -1 -> x for signed ints (-1 is all ones)",
    )
    rewrite(rs, "and-true", f"(AND dt x {k(1)})", "x", when=["(dt-bool dt)"], category=c, doc="x & true -> x for bools")
    rewrite(rs, "or-true", f"(OR dt x {k(1)})", k(1), when=["(dt-bool dt)"], category=c, doc="x | true -> true for bools")
    rewrite(rs, "shl-zero", f"(SHL dt x {k(0)})", "x", when=ints, category=c, doc="x << 0 -> x")
    rewrite(rs, "shr-zero", f"(SHR dt x {k(0)})", "x", when=ints, category=c, doc="x >> 0 -> x")
    # integer associativity of constants holds exactly under wraparound (index sums use linear forms instead)
    fixed = [*ints, f"(!= dt {IX})"]
    rewrite(
        rs,
        "add-const-assoc",
        f"(ADD dt (ADD dt x {k('a')}) {k('b')})",
        f"(ADD dt x (ADD dt {k('a')} {k('b')}))",
        when=fixed,
        category="canonical",
        doc="(x + c1) + c2 -> x + (c1 + c2): constants gather to fold (exact under wraparound; not index)",
    )
    rewrite(
        rs,
        "mul-const-assoc",
        f"(MUL dt (MUL dt x {k('a')}) {k('b')})",
        f"(MUL dt x (MUL dt {k('a')} {k('b')}))",
        when=fixed,
        category="canonical",
        doc="(x * c1) * c2 -> x * (c1 * c2): constants gather to fold (exact under wraparound; not index)",
    )
    rewrite(
        rs,
        "add-self-int",
        "(ADD dt x x)",
        f"(MUL dt x {k(2)})",
        when=fixed,
        category=c,
        doc="x + x -> x * 2 for fixed-width ints (not index: linear forms combine those)",
    )
    rewrite(
        rs,
        "sub-self-int",
        f"(ADD dt x (MUL dt x {k(-1)}))",
        k(0),
        when=fixed,
        category=c,
        doc="x + x*-1 -> 0 for fixed-width ints (not index: linear forms cancel those)",
    )
    rewrite(
        rs,
        "shl-to-mul",
        f"(SHL dt x {k('s')})",
        f"(MUL dt x (SHL dt {k(1)} {k('s')}))",
        when=[*ints, "(= bits (dt-bits dt))", "(>= s 0)", "(< s bits)", "(< s 62)"],
        category=c,
        doc="x << s -> x * (1 << s) for a constant shift 0 <= s < bits",
    )
    rewrite(
        rs,
        "shr-to-idiv",
        f"(SHR dt x {k('s')})",
        f"(IDIV dt x {k('(<< 1 s)')})",
        when=[*ints, "(= bits (dt-bits dt))", "(>= s 0)", "(< s bits)", "(< s 62)"],
        category=c,
        doc="x >> s -> x // 2**s for a constant shift 0 <= s < bits (arithmetic shift is floor division)",
    )
    shift = [*ints, f"(!= dt {IX})", "(= bits (dt-bits dt))", "(>= s 0)", "(< s bits)", "(< s 62)"]
    for kind, full in (
        ("signed", ["(dt-signed dt)", "(< m 0)", "(>= m (- 0 (<< 1 s)))"]),
        ("unsigned", ["(= 0 (dt-min dt))", "(= mx (dt-max dt))", "(< mx (<< 1 62))", "(>= m (- (+ mx 1) (<< 1 s)))"]),
    ):
        rewrite(
            rs,
            f"shr-and-mask-{kind}",
            f"(SHR dt (AND dt x {k('m')}) {k('s')})",
            f"(SHR dt x {k('s')})",
            when=[*shift, *full],
            category=c,
            doc=f"(x & m) >> s -> x >> s when m keeps every bit from s up ({kind} fixed-width ints: m >= "
            + ("-2**s)" if kind == "signed" else "2**bits - 2**s)"),
        )
    rewrite(rs, "trunc-int", "(TRUNC dt x)", "x", when=["(dt-intlike dt)"], category=c, doc="trunc(x) -> x for ints and bools")
    rewrite(
        rs,
        "max-const-assoc",
        f"(MAX dt (MAX dt x {k('a')}) {k('b')})",
        f"(MAX dt x {k('(max a b)')})",
        when=["(dt-intlike dt)"],
        category=c,
        doc="max(max(x, c1), c2) -> max(x, max(c1, c2)) (ints and bools)",
    )
    rewrite(
        rs,
        "where-lt-max",
        "(WHERE dt (CMPLT dc x y) y x)",
        "(MAX dt x y)",
        when=["(dt-intlike dt)"],
        category=c,
        doc="where(x < y, y, x) -> max(x, y) for ints and bools (not floats: NaN)",
    )
    rewrite(
        rs,
        "where-gt-max",
        "(WHERE dt (CMPLT dc y x) x y)",
        "(MAX dt x y)",
        when=["(dt-intlike dt)"],
        category=c,
        doc="where(y < x, x, y) -> max(x, y) for ints and bools (not floats: NaN)",
    )


def bounds_rules(rs: RuleSet) -> None:
    """Anything whose bounds meet is that constant."""
    for sp in OP_TABLE.values():
        if ((sp.is_alu or sp.category is Category.LOAD) and can_be_index(sp)) or sp.op in (Ops.CMPLT, Ops.CMPNE):
            rule(
                rs,
                f"const-from-bounds-{sp.egg_name.lower()}",
                [f"(= e ({sp.egg_name} dt {wildcards(sp)}))", "(dt-intlike dt)", "(= l (lo e))", "(= h (hi e))", "(= l h)"],
                [f"(union e {k('l')})"],
                category="interval",
                doc=f"an int/bool {sp.egg_name.lower()} node whose bounds meet (lo == hi) is that constant",
            )
    c = "interval"
    lx = ["(= lx (lo x))", "(= hx (hi x))"]
    rewrite(
        rs,
        "idiv-below-divisor",
        f"(IDIV dt x {k('q')})",
        k(0),
        when=["(dt-int dt)", *lx, "(>= lx 0)", "(< hx q)"],
        category=c,
        doc="x // c -> 0 when 0 <= x < c (from the interval bounds)",
    )
    rewrite(
        rs,
        "mod-below-divisor",
        f"(MOD dt x {k('q')})",
        "x",
        when=["(dt-int dt)", *lx, "(>= lx 0)", "(< hx q)"],
        category=c,
        doc="x % c -> x when 0 <= x < c (from the interval bounds)",
    )
    rewrite(
        rs,
        "mod-one-period",
        f"(MOD {IX} x {ik('q')})",
        f"(ADD {IX} x {ik('(- 0 (* q blk))')})",
        when=[
            "(> q 0)",
            *lx,
            *small("lx", "hx"),
            f"(= blk {floordiv('lx', 'q')})",
            f"(= blk {floordiv('hx', 'q')})",
            *small("blk", "q", bound=MUL_BOUND),
        ],
        category=c,
        doc="x % c -> x - c*m for index x whose bounds lie in one period [c*m, c*(m+1))",
    )
    rewrite(
        rs,
        "max-left",
        "(MAX dt a b)",
        "a",
        when=["(= la (lo a))", "(= hb (hi b))", "(>= la hb)"],
        category=c,
        doc="max(a, b) -> a when lo(a) >= hi(b)",
    )
    small_x = ["(dt-int dt)", *lx, "(= ld (lo d))", "(>= lx 0)", "(< hx ld)"]
    rewrite(
        rs,
        "idiv-below-var-divisor",
        "(IDIV dt x d)",
        k(0),
        when=small_x,
        category=c,
        doc="x // d -> 0 when 0 <= x < lo(d) (from the interval bounds)",
    )
    rewrite(
        rs,
        "mod-below-var-divisor",
        "(MOD dt x d)",
        "x",
        when=small_x,
        category=c,
        doc="x % d -> x when 0 <= x < lo(d) (from the interval bounds)",
    )
    rewrite(
        rs,
        "where-bounds-true",
        "(WHERE dt p a b)",
        "a",
        when=["(= lp (lo p))", "(>= lp 1)"],
        category=c,
        doc="where(p, a, b) -> a when the bounds of p say it is always true",
    )


def divmod_rules(rs: RuleSet) -> None:
    c = "divmod"
    ints = ["(dt-int dt)"]
    # nested divisions combine while the combined divisor stays within the dividend's range (beyond it the
    # quotient is a constant anyway, and unbounded nesting would keep making new divisors)
    in_reach = ["(= lx (lo x))", "(= hx (hi x))", *small("lx", "hx", bound=1 << 40), "(<= (* a b) (max hx (- 0 lx)))"]
    rewrite(
        rs,
        "idiv-nested",
        f"(IDIV dt (IDIV dt x {k('a')}) {k('b')})",
        f"(IDIV dt x {k('(* a b)')})",
        when=[*ints, "(> a 0)", "(> b 0)", *small("a", "b", bound=1 << 20), "(= mx (dt-max dt))", "(<= (* a b) mx)", *in_reach],
        category=c,
        doc="(x // a) // b -> x // (a*b) for a, b > 0, a*b in the dtype and within x's range",
    )
    rewrite(
        rs,
        "idiv-nested-neg",
        f"(IDIV {IX} (IDIV {IX} x {ik('a')}) {ik('b')})",
        f"(IDIV {IX} x {ik('(* a b)')})",
        when=[
            "(< a 0)",
            "(> b 0)",
            *small("a", "b", bound=1 << 20),
            "(= lx (lo x))",
            "(= hx (hi x))",
            *small("lx", "hx", bound=1 << 40),
            "(<= (- 0 (* a b)) (max hx (- 0 lx)))",
        ],
        category=c,
        doc="(x // a) // b -> x // (a*b) for a < 0 < b; index only: at fixed width x // -1 can wrap",
    )
    rewrite(
        rs,
        "mod-nested",
        f"(MOD dt (MOD dt x {k('a')}) {k('b')})",
        f"(MOD dt x {k('b')})",
        when=[*ints, "(!= a 0)", "(> b 0)", "(= 0 (% a b))"],
        category=c,
        doc="(x % a) % b -> x % b when b > 0 divides a",
    )
    rewrite(
        rs,
        "mod-then-idiv",
        f"(IDIV dt (MOD dt x {k('a')}) {k('b')})",
        f"(MOD dt (IDIV dt x {k('b')}) {k('(/ a b)')})",
        when=[*ints, "(> a 0)", "(> b 0)", "(= 0 (% a b))"],
        category=c,
        doc="(x % a) // b -> (x // b) % (a/b) when a, b > 0 and b divides a",
    )
    rewrite(
        rs,
        "idiv-neg-divisor",
        f"(IDIV {IX} x {ik('q')})",
        f"(IDIV {IX} (MUL {IX} x {ik(-1)}) {ik('(- 0 q)')})",
        when=["(< q 0)", *small("q")],
        category=c,
        doc="x // c -> (-x) // (-c) for a negative index divisor c",
    )
    rewrite(
        rs,
        "mod-neg-divisor",
        f"(MOD {IX} x {ik('q')})",
        f"(MUL {IX} (MOD {IX} (MUL {IX} x {ik(-1)}) {ik('(- 0 q)')}) {ik(-1)})",
        when=["(< q 0)", *small("q")],
        category=c,
        doc="x % c -> -((-x) % (-c)) for a negative index divisor c",
    )
    # on linear forms: S = c*Q + R  =>  S // c = Q + R // c,  S % c = R % c; and when R stays inside one
    # period [c*m, c*(m+1)) by its bounds, S // c = Q + m and S % c = R - c*m
    split_modes = {
        0: "Q gets the terms with c | coef",
        1: "Q gets floor(p/c) of each coef p",
        2: "Q gets round(p/c) of each coef p",
    }
    for mode in (0, 1, 2):
        how = split_modes[mode]
        split = [f"(= e ({{op}} {IX} s {ik('q')}))", "(> q 0)", *lin_of("s", "t", "k0"), *small("k0", "q")]
        have = [f"(= (TS qs rs q) (tsplit t q {mode}))"]
        rem = f"(ToU (L rs {floormod('k0', 'q')}))"
        quo = f"(ToU (L qs {floordiv('k0', 'q')}))"
        for op in ("IDIV", "MOD"):
            sp = [x.format(op=op) for x in split]
            shown = _show(op, "S", "c")
            rule(
                rs,
                f"{op.lower()}-split{mode}-request",
                sp,
                [f"(tsplit t q {mode})"],
                category=c,
                check="structural",
                doc=f"helper: for index {shown}, c > 0, split S = c*Q + R; {how}",
            )
            rule(
                rs,
                f"{op.lower()}-split{mode}-remainder",
                [*sp, *have],
                [rem],
                category=c,
                check="structural",
                doc=f"helper: for index {shown} build the remainder sum R of S = c*Q + R, so its bounds are known",
            )
        rule(
            rs,
            f"idiv-split{mode}",
            [*[x.format(op="IDIV") for x in split], *have],
            [f"(union e (ADD {IX} {quo} (IDIV {IX} {rem} {ik('q')})))"],
            category=c,
            doc=f"(c*Q + R) // c -> Q + R // c, c > 0, on index sums; {how}",
        )
        rule(
            rs,
            f"mod-split{mode}",
            [*[x.format(op="MOD") for x in split], *have],
            [f"(union e (MOD {IX} {rem} {ik('q')}))"],
            category=c,
            doc=f"(c*Q + R) % c -> R % c, c > 0, on index sums; {how}",
        )
        period = [
            f"(= rr {rem})",
            "(= lr (lo rr))",
            "(= hr (hi rr))",
            *small("lr", "hr"),
            f"(= per {floordiv('lr', 'q')})",
            f"(= per {floordiv('hr', 'q')})",
            *small("per", bound=1 << 30),
        ]
        rule(
            rs,
            f"idiv-one-period{mode}",
            [*[x.format(op="IDIV") for x in split], *have, *period],
            [f"(union e (ADD {IX} {quo} {ik('per')}))"],
            category=c,
            doc=f"(c*Q + R) // c -> Q + m when R's bounds lie in [c*m, c*(m+1)); {how}",
        )
        rule(
            rs,
            f"mod-one-period{mode}",
            [*[x.format(op="MOD") for x in split], *have, *period],
            [f"(union e (ADD {IX} rr {ik('(- 0 (* q per))')}))"],
            category=c,
            doc=f"(c*Q + R) % c -> R - c*m when R's bounds lie in [c*m, c*(m+1)); {how}",
        )
    # common factor g of all coefficients and the divisor: (g*T + k) // (g*m) = (T + k//g) // m, likewise %
    gcd = [
        "(> q 1)",
        *lin_of("s", "t", "k0"),
        *small("k0", "q"),
        "(= tg (tgcd t))",
        "(= g (gcd tg q))",
        "(> g 1)",
        "(< g q)",
        "(= 0 (% q g))",
    ]
    rule(
        rs,
        "divisor-gcd-request",
        [f"(= e (IDIV {IX} s {ik('q')}))", "(> q 1)", *lin_of("s", "t", "k0"), "(= tg (tgcd t))"],
        ["(want-gcd tg q)"],
        category=c,
        check="structural",
        doc="helper: for S // c ask for g = gcd(S's coefficients, c)",
    )
    rule(
        rs,
        "mod-gcd-request",
        [f"(= e (MOD {IX} s {ik('q')}))", "(> q 1)", *lin_of("s", "t", "k0"), "(= tg (tgcd t))"],
        ["(want-gcd tg q)"],
        category=c,
        check="structural",
        doc="helper: for S % c ask for g = gcd(S's coefficients, c)",
    )
    rule(
        rs,
        "idiv-gcd",
        [f"(= e (IDIV {IX} s {ik('q')}))", *gcd, "(= d (tdivexact t g))", "(= d (TCons da dk dr))"],
        [f"(union e (IDIV {IX} (ToU (L d {floordiv('k0', 'g')})) {ik('(/ q g)')}))"],
        category=c,
        doc="(g*T + k) // (g*m) -> (T + k//g) // m, g the gcd of the coefficients and the divisor",
    )
    rule(
        rs,
        "mod-gcd",
        [f"(= e (MOD {IX} s {ik('q')}))", *gcd, "(= d (tdivexact t g))", "(= d (TCons da dk dr))"],
        [
            f"(union e (ADD {IX} (MUL {IX} (MOD {IX} (ToU (L d {floordiv('k0', 'g')})) {ik('(/ q g)')}) {ik('g')}) "
            f"{ik(floormod('k0', 'g'))}))"
        ],
        category=c,
        doc="(g*T + k) % (g*m) -> ((T + k//g) % m)*g + k%g, g the gcd of the coefficients and the divisor",
    )
    rule(
        rs,
        "gcd-divide-request",
        [f"(= e (IDIV {IX} s {ik('q')}))", *gcd],
        ["(tdivexact t g)"],
        category=c,
        check="structural",
        doc="helper: for S // c divide S's terms by their common factor g with c",
    )
    rule(
        rs,
        "gcd-mod-divide-request",
        [f"(= e (MOD {IX} s {ik('q')}))", *gcd],
        ["(tdivexact t g)"],
        category=c,
        check="structural",
        doc="helper: for S % c divide S's terms by their common factor g with c",
    )
    # drop a small term: S = g*Q + R with 0 <= R < g and g | c  =>  S // c = Q // (c/g),  S % c = (Q % (c/g))*g + R
    for op in ("IDIV", "MOD"):
        pick = [
            f"(= e ({op} {IX} s {ik('q')}))",
            "(> q 1)",
            *lin_of("s", "t", "k0"),
            *small("k0", "q"),
            "(has-term t a p)",
            *small("p", bound=1 << 30),
        ]
        shown = _show(op, "S", "c")
        rule(
            rs,
            f"{op.lower()}-drop-term-request",
            pick,
            ["(tmerge t (TCons a (- 0 p) (TNil)))"],
            category=c,
            check="structural",
            doc=f"helper: for index {shown} take one term a*p out of the sum S",
        )
        base = [*pick, "(= t2 (tmerge t (TCons a (- 0 p) (TNil))))"]
        rule(
            rs,
            f"{op.lower()}-drop-term-gcd",
            [*base, "(= tg (tgcd t2))"],
            ["(want-gcd tg q)"],
            category=c,
            check="structural",
            doc=f"helper: for index {shown} ask for g = gcd(coefficients of S without a*p, c)",
        )
        cond = [
            *base,
            "(= tg (tgcd t2))",
            "(= g (gcd tg q))",
            "(> g 1)",
            "(< g q)",
            "(= 0 (% q g))",
            "(= kr (% (+ (% k0 g) g) g))",
        ]
        rule(
            rs,
            f"{op.lower()}-drop-term-rest",
            cond,
            ["(ToU (L (TCons a p (TNil)) kr))", "(tdivexact t2 g)"],
            category=c,
            check="structural",
            doc=f"helper: for index {shown} build R = a*p + (k mod g) and the rest of S divided by g",
        )
        fire = [
            *cond,
            "(= rr (ToU (L (TCons a p (TNil)) kr)))",
            "(= lr (lo rr))",
            "(= hr (hi rr))",
            "(>= lr 0)",
            "(< hr g)",
            "(= d (tdivexact t2 g))",
            "(= d (TCons da dk dr))",
        ]
        qpart = f"(ToU (L d {floordiv('(- k0 kr)', 'g')}))"
        if op == "IDIV":
            rule(
                rs,
                "idiv-drop-term",
                fire,
                [f"(union e (IDIV {IX} {qpart} {ik('(/ q g)')}))"],
                category=c,
                doc="(g*Q + R) // c -> Q // (c/g) when 0 <= R < g (bounds) and g | c: the small term R drops out",
            )
        else:
            rule(
                rs,
                "mod-drop-term",
                fire,
                [f"(union e (ADD {IX} (MUL {IX} (MOD {IX} {qpart} {ik('(/ q g)')}) {ik('g')}) rr))"],
                category=c,
                doc="(g*Q + R) % c -> (Q % (c/g))*g + R when 0 <= R < g (bounds) and g | c",
            )
    # (x // a) // b == x // (a*b): make the nested form where x // a exists, so recombination can see it
    rule(
        rs,
        "idiv-factor-through",
        [
            f"(= e1 (IDIV dt x {k('a')}))",
            f"(= e2 (IDIV dt x {k('b')}))",
            "(dt-int dt)",
            "(> a 0)",
            "(> b a)",
            "(= 0 (% b a))",
            "(= lx (lo x))",
            "(= hx (hi x))",
            *small("lx", "hx", bound=1 << 40),
            "(<= b (max hx (- 0 lx)))",
        ],
        [f"(union e2 (IDIV dt e1 {k('(/ b a)')}))"],
        category=c,
        doc="x // b -> (x // a) // (b/a) where x // a exists and a | b: lets recombination see it",
    )
    rule(
        rs,
        "mod-var-quotient-request",
        [f"(= e (MOD {IX} x y))", "(= ly (lo y))", "(> ly 0)"],
        [f"(IDIV {IX} x y)"],
        category=c,
        check="structural",
        doc="helper: for index x % y with y > 0 build x // y, so its bounds are known",
    )
    rule(
        rs,
        "mod-var-const-quotient",
        [
            f"(= e (MOD {IX} x y))",
            "(= ly (lo y))",
            "(> ly 0)",
            f"(= dq (IDIV {IX} x y))",
            "(= lq (lo dq))",
            "(= hq (hi dq))",
            "(= lq hq)",
            *small("lq", bound=1 << 30),
        ],
        [f"(union e (ADD {IX} x (MUL {IX} y {ik('(- 0 lq)')})))"],
        category=c,
        doc="x % y -> x - y*c when y > 0 and the bounds pin x // y to the constant c",
    )
    rule(
        rs,
        "idiv-plus-through",
        [
            f"(= e (IDIV {IX} s {ik('b')}))",
            "(> b 0)",
            "(= ps (lvl s))",
            "(= (L (TCons x 1 (TNil)) k0) (lin s ps))",
            f"(= dv (IDIV {IX} x {ik('a')}))",
            "(> a 1)",
            "(< a b)",
            "(= 0 (% b a))",
            "(= 0 (% k0 a))",
            *small("k0", bound=1 << 40),
        ],
        [f"(union e (IDIV {IX} (ADD {IX} dv {ik('(/ k0 a)')}) {ik('(/ b a)')}))"],
        category=c,
        doc="(x + k*a) // (a*b) == (x//a + k) // b where x//a exists",
    )
    # a symbolic factor f of every term and of the divisor cancels: (f*X) // (K*f*Y) == X // (K*Y), f != 0
    for name, div in (("product", "(has-factor dv f)"), ("factor", "(= dv f)")):
        sym = [
            f"(= e (IDIV {IX} s dd))",
            *lin_of("s", "t", "k0"),
            "(= k0 0)",
            "(= pdd (lvl dd))",
            "(= (L (TCons dv kd (TNil)) 0) (lin dd pdd))",
            div,
            "(= lf (lo f))",
            "(= hf (hi f))",
        ]
        divisor, cancelled = ("(K*f*Y)", "(K*Y)") if name == "product" else ("(K*f)", "K")
        rule(
            rs,
            f"idiv-cancel-{name}-request",
            sym,
            ["(tdivsym t f)"],
            category=c,
            check="structural",
            doc=f"helper: for index S // {divisor} divide every term of S by the symbolic factor f",
        )
        quot = "(ToU (L (TCons (pdiv dv f) kd (TNil)) 0))" if name == "product" else ik("kd")
        for sign, cnd in (("pos", "(> lf 0)"), ("neg", "(< hf 0)")):
            rule(
                rs,
                f"idiv-cancel-{name}-{sign}",
                [*sym, cnd, "(= d (tdivsym t f))", "(= d (TCons da dk dr))"],
                [f"(union e (IDIV {IX} (ToU (L d 0)) {quot}))"],
                category=c,
                doc=f"(f*X) // {divisor} -> X // {cancelled} when f {'> 0' if sign == 'pos' else '< 0'} by its bounds "
                "(f a factor of every term)",
            )
    rule(
        rs,
        "idiv-of-idiv-plus",
        [
            f"(= e (IDIV {IX} s {ik('b')}))",
            "(> b 0)",
            "(= ps (lvl s))",
            "(= (L (TCons dv 1 (TNil)) k0) (lin s ps))",
            f"(= dv (IDIV {IX} x {ik('a')}))",
            "(> a 0)",
            *small("a", "b", "k0", bound=1 << 30),
        ],
        [f"(union e (IDIV {IX} (ADD {IX} x {ik('(* k0 a)')}) {ik('(* a b)')}))"],
        category=c,
        doc="(x//a + k)//b == (x + k*a)//(a*b) for a, b > 0",
    )
    # a symbolic divisor K*D that divides a term: (D*x*p + R) // (K*D) == x*(p/K) + R // (K*D) when K | p, D != 0
    dvs = ["(= pdd (lvl dd))", "(= (L (TCons dv kd (TNil)) 0) (lin dd pdd))", "(> kd 0)", "(= ld (lo dv))", "(= hd (hi dv))"]
    sym = [*lin_of("s", "t", "k0"), "(has-term t m p)", "(has-factor m dv)", *dvs, "(= 0 (% p kd))"]
    rest = "(ToU (L (tmerge t (TCons m (- 0 p) (TNil))) k0))"
    for sign, cnd in (("pos", "(> ld 0)"), ("neg", "(< hd 0)")):
        sgn = "> 0" if sign == "pos" else "< 0"
        rule(
            rs,
            f"idiv-symbolic-factor-{sign}",
            [f"(= e (IDIV {IX} s dd))", *sym, cnd],
            [f"(union e (ADD {IX} (MUL {IX} (pdiv m dv) {ik('(/ p kd)')}) (IDIV {IX} {rest} dd)))"],
            category=c,
            doc=f"(D*x*p + R) // (K*D) -> x*(p/K) + R // (K*D) when K > 0 divides p and D {sgn} (bounds)",
        )
        rule(
            rs,
            f"mod-symbolic-factor-{sign}",
            [f"(= e (MOD {IX} s dd))", *sym, cnd],
            [f"(union e (MOD {IX} {rest} dd))"],
            category=c,
            doc=f"(D*x*p + R) % (K*D) -> R % (K*D) when K > 0 divides p and D {sgn} (bounds)",
        )
    # a constant factor shared by every coefficient and a symbolic divisor K*D: (g*X) // (g*K'*D) == X // (K'*D)
    gsym = [f"(= e (IDIV {IX} s dd))", *lin_of("s", "t", "k0"), *dvs, "(> kd 1)", "(= tg (tgcd t))"]
    rule(
        rs,
        "idiv-symbolic-gcd-request",
        gsym,
        ["(want-gcd tg kd)"],
        category=c,
        check="structural",
        doc="helper: for S // (K*D) ask for g = gcd(S's coefficients, K)",
    )
    gfire = [*gsym, "(= g (gcd tg kd))", "(> g 1)", "(= 0 (% k0 g))", "(= 0 (% kd g))"]
    rule(
        rs,
        "idiv-symbolic-gcd-divide",
        gfire,
        ["(tdivexact t g)"],
        category=c,
        check="structural",
        doc="helper: for S // (K*D) divide S's terms by their common factor g with K",
    )
    rule(
        rs,
        "idiv-symbolic-gcd",
        [*gfire, "(= d (tdivexact t g))", "(= d (TCons da dk dr))"],
        [f"(union e (IDIV {IX} (ToU (L d (/ k0 g))) (ToU (L (TCons dv (/ kd g) (TNil)) 0))))"],
        category=c,
        doc="(g*X + k) // (g*K*D) -> (X + k/g) // (K*D) when g divides every coefficient, k and g*K",
    )
    # (x // c) * c*m + (x % c) * m  ->  x * m   (anywhere in a sum)
    rule(
        rs,
        "divmod-recombine",
        [
            *lin_of("e", "t", "k0"),
            "(has-term t dv cd)",
            f"(= dv (IDIV {IX} x {ik('q')}))",
            "(has-term t md cm)",
            f"(= md (MOD {IX} x {ik('q')}))",
            "(> q 0)",
            *small("cm", "q", bound=MUL_BOUND),
            "(= cd (* cm q))",
        ],
        [
            "(union e (ToU (L (tmerge t (tmerge (TCons dv (- 0 cd) (TNil)) (tmerge (TCons md (- 0 cm) (TNil)) "
            "(TCons x cm (TNil))))) k0)))"
        ],
        category=c,
        doc="(x // c)*(c*m) + (x % c)*m -> x*m anywhere in an index sum",
    )
    # x%a + ((x//a)%b)*a == x%(a*b), anywhere in a sum, with any common multiplier
    rule(
        rs,
        "mod-recombine",
        [
            *lin_of("e", "t", "k0"),
            "(has-term t m1 c1)",
            f"(= m1 (MOD {IX} x {ik('a')}))",
            "(has-term t m2 c2)",
            f"(= m2 (MOD {IX} (IDIV {IX} x {ik('a')}) {ik('b')}))",
            "(> a 0)",
            "(> b 0)",
            *small("c1", "a", "b", bound=1 << 30),
            "(= c2 (* c1 a))",
        ],
        [
            "(union e (ToU (L (tmerge t (tmerge (TCons m1 (- 0 c1) (TNil)) (tmerge (TCons m2 (- 0 c2) (TNil)) "
            f"(TCons (MOD {IX} x {ik('(* a b)')}) c1 (TNil))))) k0)))"
        ],
        category=c,
        doc="(x % a)*m + ((x // a) % b)*(a*m) -> (x % (a*b))*m anywhere in an index sum",
    )


def compare_rules(rs: RuleSet) -> None:
    c = "compare"
    # S + k0 < c  <=>  S < c - k0;  g*T < c  <=>  T < ceil(c / g)
    rule(
        rs,
        "lt-move-const",
        [f"(= e (CMPLT dt s {ik('q')}))", *lin_of("s", "t", "k0"), "(!= k0 0)", *small("k0", "q")],
        [f"(union e (CMPLT dt (ToT t) {ik('(- q k0)')}))"],
        category=c,
        doc="S + k < c -> S < c - k (index linear forms)",
    )
    rule(
        rs,
        "gt-move-const",
        [f"(= e (CMPLT dt {ik('q')} s))", *lin_of("s", "t", "k0"), "(!= k0 0)", *small("k0", "q")],
        [f"(union e (CMPLT dt {ik('(- q k0)')} (ToT t)))"],
        category=c,
        doc="c < S + k -> c - k < S (index linear forms)",
    )
    rule(
        rs,
        "lt-gcd-request",
        [f"(= e (CMPLT dt s {ik('q')}))", *lin_of("s", "t", "k0"), "(= tg (tgcd t))", "(> tg 1)"],
        ["(tdivexact t tg)"],
        category=c,
        check="structural",
        doc="helper: for S < c divide S's terms by their gcd",
    )
    rule(
        rs,
        "lt-gcd",
        [
            f"(= e (CMPLT dt s {ik('q')}))",
            *lin_of("s", "t", "k0"),
            "(= k0 0)",
            "(= g (tgcd t))",
            "(> g 1)",
            *small("q", "g"),
            "(= d (tdivexact t g))",
            "(= d (TCons da dk dr))",
        ],
        [f"(union e (CMPLT dt (ToT d) {ik(floordiv('(+ q (- g 1))', 'g'))}))"],
        category=c,
        doc="g*T < c -> T < ceil(c/g), g the gcd of the coefficients",
    )
    rule(
        rs,
        "gt-gcd-request",
        [f"(= e (CMPLT dt {ik('q')} s))", *lin_of("s", "t", "k0"), "(= tg (tgcd t))", "(> tg 1)"],
        ["(tdivexact t tg)"],
        category=c,
        check="structural",
        doc="helper: for c < S divide S's terms by their gcd",
    )
    rule(
        rs,
        "gt-gcd",
        [
            f"(= e (CMPLT dt {ik('q')} s))",
            *lin_of("s", "t", "k0"),
            "(= k0 0)",
            "(= g (tgcd t))",
            "(> g 1)",
            *small("q", "g"),
            "(= d (tdivexact t g))",
            "(= d (TCons da dk dr))",
        ],
        [f"(union e (CMPLT dt {ik(floordiv('q', 'g'))} (ToT d)))"],
        category=c,
        doc="c < g*T -> c//g < T, g the gcd of the coefficients",
    )
    rewrite(
        rs,
        "lt-both-negated",
        f"(CMPLT dt (MUL {IX} x {ik(-1)}) (MUL {IX} y {ik(-1)}))",
        "(CMPLT dt y x)",
        category=c,
        doc="-x < -y -> y < x for index values",
    )
    # S < c with S = g*Q + R, 0 <= R < g and g | c  <=>  Q < c/g
    pick = [
        f"(= e (CMPLT dt s {ik('q')}))",
        *lin_of("s", "t", "k0"),
        *small("k0", "q"),
        "(has-term t a p)",
        *small("p", bound=1 << 30),
    ]
    rule(
        rs,
        "lt-drop-term-pick",
        pick,
        ["(tmerge t (TCons a (- 0 p) (TNil)))"],
        category=c,
        check="structural",
        doc="helper: for S < c take one term a*p out of the sum S",
    )
    base = [*pick, "(= t2 (tmerge t (TCons a (- 0 p) (TNil))))", "(= g (tgcd t2))", "(> g 1)", "(= kr (% (+ (% k0 g) g) g))"]
    rule(
        rs,
        "lt-drop-term-request",
        base,
        ["(ToU (L (TCons a p (TNil)) kr))", "(tdivexact t2 g)"],
        category=c,
        check="structural",
        doc="helper: for S < c build R = a*p + (k mod g) and the rest of S divided by g",
    )
    rule(
        rs,
        "lt-drop-term",
        [
            *base,
            "(= rr (ToU (L (TCons a p (TNil)) kr)))",
            "(= lr (lo rr))",
            "(= hr (hi rr))",
            "(>= lr 0)",
            "(< hr g)",
            "(= cq (+ (- q k0) kr))",
            "(= 0 (% cq g))",
            "(= d (tdivexact t2 g))",
            "(= d (TCons da dk dr))",
        ],
        [f"(union e (CMPLT dt (ToT d) {ik('(/ cq g)')}))"],
        category=c,
        doc="g*Q + R < c -> Q < c/g when 0 <= R < g (bounds) and g | c: the small term R drops out",
    )
    for side, summed in {"left": "(ADD dt y (MUL dt x {c}))", "right": "(ADD dt (MUL dt x {c}) y)"}.items():
        rewrite(
            rs,
            f"lt-sum-fold-{side}",
            f"(CMPLT db {summed.format(c=k('m'))} {k('n')})",
            f"(CMPLT db x {k('t')})",
            when=[
                "(dt-int dt)",
                "(>= m 1)",
                *bounds_of("x", "y"),
                *small("m", "n", "lx", "hx", "ly", "hy"),
                *in_dtype("(+ (* m lx) ly)", "(+ (* m hx) hy)"),
                f"(= t (- 0 {floordiv('(- ly n)', 'm')}))",  # from here on m*x + y >= n for every y
                f"(= (- t 1) {floordiv('(- (- n 1) hy)', 'm')})",  # ... and below it m*x + y < n for every y
            ],
            category=c,
            doc="m*x + y < n -> x < t when y's bounds put the threshold of x at the same t for every y",
        )
    rewrite(
        rs,
        "lt-negated",
        f"(CMPLT dt (MUL {IX} x {ik(-1)}) {ik('q')})",
        f"(CMPLT dt {ik('(- 0 q)')} x)",
        when=small("q"),
        category=c,
        doc="-x < c -> -c < x for index values",
    )
    rewrite(
        rs,
        "gt-negated",
        f"(CMPLT dt {ik('q')} (MUL {IX} x {ik(-1)}))",
        f"(CMPLT dt x {ik('(- 0 q)')})",
        when=small("q"),
        category=c,
        doc="c < -x -> x < -c for index values",
    )
    rewrite(
        rs,
        "lt-idiv",
        f"(CMPLT dt (IDIV {IX} x {ik('d')}) {ik('q')})",
        f"(CMPLT dt x {ik('(* q d)')})",
        when=["(> d 0)", *small("q", "d", bound=MUL_BOUND)],
        category=c,
        doc="x // d < c -> x < c*d for d > 0",
    )
    rewrite(
        rs,
        "gt-idiv",
        f"(CMPLT dt {ik('q')} (IDIV {IX} x {ik('d')}))",
        f"(CMPLT dt {ik('(- (* (+ q 1) d) 1)')} x)",
        when=["(> d 0)", *small("q", "d", bound=MUL_BOUND)],
        category=c,
        doc="c < x // d -> (c+1)*d - 1 < x for d > 0",
    )
    rule(
        rs,
        "ne-move-const",
        [f"(= e (CMPNE dt s {ik('q')}))", *lin_of("s", "t", "k0"), "(!= k0 0)", *small("k0", "q")],
        [f"(union e (CMPNE dt (ToT t) {ik('(- q k0)')}))"],
        category=c,
        doc="S + k != c -> S != c - k (index linear forms)",
    )
    # negations of comparisons
    rewrite(
        rs,
        "not-lt",
        f"(CMPNE dt (CMPLT dt x {k('q', 'dx')}) {T})",
        f"(CMPLT dt {k('(- q 1)', 'dx')} x)",
        when=["(dt-int dx)", "(= mn (dt-min dx))", "(> q mn)"],
        category=c,
        doc="!(x < c) -> c-1 < x for ints, c above the dtype's minimum",
    )
    rewrite(
        rs,
        "not-gt",
        f"(CMPNE dt (CMPLT dt {k('q', 'dx')} x) {T})",
        f"(CMPLT dt x {k('(+ q 1)', 'dx')})",
        when=["(dt-int dx)", "(= mx (dt-max dx))", "(< q mx)"],
        category=c,
        doc="!(c < x) -> x < c+1 for ints, c below the dtype's maximum",
    )


def boolean_rules(rs: RuleSet) -> None:
    c = "boolean"
    b = ["(dt-bool dt)"]
    rewrite(
        rs, "not-not", f"(CMPNE dt (CMPNE dt x {T}) {T})", "x", when=b, category=c, doc="!!x -> x for bools (!x is x != true)"
    )
    rewrite(rs, "ne-false", f"(CMPNE dt x {F_})", "x", when=b, category=c, doc="x != false -> x for bools")
    rewrite(
        rs,
        "and-lt-lt",
        f"(AND {BOOL} (CMPLT {BOOL} x {k('c1')}) (CMPLT {BOOL} x {k('c2')}))",
        f"(CMPLT {BOOL} x {k('(min c1 c2)')})",
        category=c,
        doc="(x < c1) & (x < c2) -> x < min(c1, c2)",
    )
    rewrite(
        rs,
        "and-gt-gt",
        f"(AND {BOOL} (CMPLT {BOOL} {k('c1')} x) (CMPLT {BOOL} {k('c2')} x))",
        f"(CMPLT {BOOL} {k('(max c1 c2)')} x)",
        category=c,
        doc="(c1 < x) & (c2 < x) -> max(c1, c2) < x",
    )
    for side, (lhs, rhs) in {
        "left": ("(ADD dt (MUL dt a {c}) r)", "(ADD dt a r)"),
        "right": ("(ADD dt r (MUL dt a {c}))", "(ADD dt r a)"),
    }.items():
        rewrite(
            rs,
            f"pos-sum-unscale-{side}",
            f"(CMPLT {BOOL} {k(0)} {lhs.format(c=k('m'))})",
            f"(CMPLT {BOOL} {k(0)} {rhs})",
            when=[
                "(dt-int dt)",
                "(>= m 1)",
                *bounds_of("a", "r"),
                "(>= la 0)",
                "(>= lr 0)",
                *small("m", "ha", "hr"),
                *in_dtype("0", "(+ (* m ha) hr)"),
            ],
            category=c,
            doc="0 < m*a + r -> 0 < a + r for m >= 1, a and r never negative and the sum within the dtype",
        )
    rewrite(rs, "and-not-self", f"(AND dt x (CMPNE dt x {T}))", F_, when=b, category=c, doc="x & !x -> false for bools")
    rewrite(rs, "or-not-self", f"(OR dt x (CMPNE dt x {T}))", T, when=b, category=c, doc="x | !x -> true for bools")
    rewrite(rs, "xor-true", f"(XOR dt x {T})", f"(CMPNE dt x {T})", when=b, category=c, doc="x ^ true -> !x for bools")


def where_rules(rs: RuleSet) -> None:
    c = "where"
    rewrite(
        rs,
        "where-not",
        f"(WHERE dt (CMPNE dc p {T}) a b)",
        "(WHERE dt p b a)",
        category=c,
        doc="where(!p, a, b) -> where(p, b, a)",
    )
    rewrite(rs, "where-bool-same", f"(WHERE dt p {T} {F_})", "p", category=c, doc="where(p, true, false) -> p")
    rewrite(rs, "where-bool-not", f"(WHERE dt p {F_} {T})", f"(CMPNE dt p {T})", category=c, doc="where(p, false, true) -> !p")
    rewrite(
        rs,
        "where-nested-then",
        "(WHERE dt p (WHERE dt p a b) c)",
        "(WHERE dt p a c)",
        category=c,
        doc="where(p, where(p, a, b), c) -> where(p, a, c)",
    )
    rewrite(
        rs,
        "where-nested-else",
        "(WHERE dt p a (WHERE dt p b c))",
        "(WHERE dt p a c)",
        category=c,
        doc="where(p, a, where(p, b, c)) -> where(p, a, c)",
    )
    rewrite(
        rs,
        "where-then-merge",
        "(WHERE dt p (WHERE dt q a b) b)",
        f"(WHERE dt (AND {BOOL} p q) a b)",
        category=c,
        doc="where(p, where(q, a, b), b) -> where(p & q, a, b)",
    )
    rewrite(
        rs,
        "where-else-merge",
        "(WHERE dt p a (WHERE dt q a b))",
        f"(WHERE dt (OR {BOOL} p q) a b)",
        category=c,
        doc="where(p, a, where(q, a, b)) -> where(p | q, a, b)",
    )
    rewrite(
        rs,
        "where-max-merge",
        "(MAX dt (WHERE dt p a b) (WHERE dt p c d))",
        "(WHERE dt p (MAX dt a c) (MAX dt b d))",
        category=c,
        doc="max(where(p, a, b), where(p, c, d)) -> where(p, max(a, c), max(b, d))",
    )
    rewrite(
        rs,
        "where-add-merge",
        "(ADD dt (WHERE dt p a b) (WHERE dt p c d))",
        "(WHERE dt p (ADD dt a c) (ADD dt b d))",
        category=c,
        check="z3+float",
        doc="where(p, a, b) + where(p, c, d) -> where(p, a + c, b + d)",
    )


def where_closure(rs: RuleSet) -> None:
    """Inside a branch of where(c, ...) the condition is known: a nested where on c picks its side.
    One operator level at a time; nested levels simplify bottom-up."""
    c = "where"
    for sp in OP_TABLE.values():
        if not sp.is_alu or sp.op.name == "WHERE":
            continue
        n = sp.arity[0]
        for pos in range(n):

            def with_arg(x: str, pos: int = pos, n: int = n) -> str:
                return " ".join(x if i == pos else f"o{i}" for i in range(n))

            def shown(x: str, pos: int = pos, n: int = n, op: str = sp.egg_name) -> str:
                return _show(op, *(x if i == pos else "z" for i in range(n)))

            op = sp.egg_name
            kind = getattr(sp.dtype_rule, "__name__", "")
            check = (
                "z3"
                if kind in ("_dt_int", "_dt_int_or_bool")
                else "float"
                if kind in ("_dt_float_unary", "_dt_float_binary")
                else "z3+float"
            )
            rewrite(
                rs,
                f"where-then-{op.lower()}{pos}",
                f"(WHERE dt p ({op} do {with_arg('(WHERE dw p a b)')}) y)",
                f"(WHERE dt p ({op} do {with_arg('a')}) y)",
                category=c,
                check=check,
                doc=f"where(p, {shown('where(p, a, b)')}, y) -> where(p, {shown('a')}, y): p holds in the then-branch",
            )
            rewrite(
                rs,
                f"where-else-{op.lower()}{pos}",
                f"(WHERE dt p y ({op} do {with_arg('(WHERE dw p a b)')}))",
                f"(WHERE dt p y ({op} do {with_arg('b')}))",
                category=c,
                check=check,
                doc=f"where(p, y, {shown('where(p, a, b)')}) -> where(p, y, {shown('b')}): p fails in the else-branch",
            )


def cast_rules(rs: RuleSet) -> None:
    c = "cast"
    rewrite(
        rs,
        "cast-bool-ne-zero",
        f"(CMPNE dt (CAST di b) {k(0, 'di')})",
        "b",
        when=["(dt-int di)", "(= db (dtype-of b))", "(dt-bool db)"],
        category=c,
        doc="int(b) != 0 -> b for a bool b",
    )
    rewrite(
        rs,
        "cast-bool-ne-one",
        f"(CMPNE dt (CAST di b) {k(1, 'di')})",
        f"(CMPNE dt b {T})",
        when=["(dt-int di)", "(= db (dtype-of b))", "(dt-bool db)"],
        category=c,
        doc="int(b) != 1 -> !b for a bool b",
    )
    rewrite(
        rs,
        "cast-to-bool",
        "(CAST dt x)",
        f"(CMPNE dt x {k(0, 'dx')})",
        when=["(dt-bool dt)", "(= dx (dtype-of x))", "(dt-int dx)"],
        category=c,
        doc="bool(x) -> x != 0 for an int x",
    )
    wider = ["(dt-int dt)", "(dt-int dw)", "(= dt (dtype-of x))", "(= bt (dt-bits dt))", "(= bw (dt-bits dw))", "(> bw bt)"]
    rewrite(
        rs,
        "cast-roundtrip-signed",
        "(CAST dt (CAST dw x))",
        "x",
        when=[*wider, "(dt-signed dw)"],
        category=c,
        doc="cast(cast(x, w), t) -> x for an int x of type t: widening to a wider signed w and back is exact",
    )
    rewrite(
        rs,
        "cast-roundtrip-unsigned",
        "(CAST dt (CAST dw x))",
        "x",
        when=[*wider, "(dt-unsigned dt)"],
        category=c,
        doc="cast(cast(x, w), t) -> x for an unsigned x of type t: it survives any wider int type w",
    )


def shorter_forms(rs: RuleSet) -> None:
    """Forms with fewer nodes: a negated index numerator moved into the divisor's sign (the reverse of the
    positive-divisor forms above, so both are in the e-graph and extraction takes the smaller), and a division
    of a value that takes only two values written as the line through them."""
    c = "divmod"
    neg = f"(MUL {IX} x {ik(-1)})"
    rewrite(
        rs,
        "idiv-neg-numerator",
        f"(IDIV {IX} {neg} {ik('q')})",
        f"(IDIV {IX} x {ik('(- 0 q)')})",
        when=["(> q 0)", *small("q")],
        category=c,
        doc="(-x) // c -> x // (-c) for an index divisor c > 0",
    )
    rewrite(
        rs,
        "idiv-neg-sum",
        f"(IDIV {IX} (ADD {IX} {neg} {ik('d')}) {ik('q')})",
        f"(IDIV {IX} (ADD {IX} x {ik('(- 0 d)')}) {ik('(- 0 q)')})",
        when=["(> q 0)", *small("q", "d")],
        category=c,
        doc="(d - x) // c -> (x - d) // (-c) for an index divisor c > 0",
    )
    rewrite(
        rs,
        "mod-neg-numerator",
        f"(MUL {IX} (MOD {IX} {neg} {ik('q')}) {ik(-1)})",
        f"(MOD {IX} x {ik('(- 0 q)')})",
        when=["(> q 0)", *small("q")],
        category=c,
        doc="-((-x) % c) -> x % (-c) for an index divisor c > 0",
    )
    two_values = [
        "(> q 0)",
        *lin_of("s", "t", "d"),
        "(= t (TCons v p (TNil)))",
        *small("q", "d", "p", bound=1 << 30),
        "(= lv (lo v))",
        "(= hv (hi v))",
        "(= hv (+ lv 1))",
        *small("lv", bound=1 << 30),
    ]
    for op, name, f in (("IDIV", "idiv", floordiv), ("MOD", "mod", floormod)):
        at_lo, at_hi = f("(+ (* p lv) d)", "q"), f("(+ (* p (+ lv 1)) d)", "q")
        rule(
            rs,
            f"{name}-two-values",
            [f"(= e ({op} {IX} s {ik('q')}))", *two_values],
            [f"(union e (ADD {IX} (MUL {IX} (ADD {IX} v {ik('(- 0 lv)')}) {ik(f'(- {at_hi} {at_lo})')}) {ik(at_lo)}))"],
            category=c,
            doc=f"(p*v + d) {'//' if op == 'IDIV' else '%'} c for v of two values lo, lo+1: the line through them",
        )


def build() -> RuleSet:
    rs = RuleSet("symbolic")
    constant_folding(rs)
    commutativity(rs)
    products(rs)
    identities(rs)
    bounds_rules(rs)
    divmod_rules(rs)
    compare_rules(rs)
    boolean_rules(rs)
    where_rules(rs)
    where_closure(rs)
    cast_rules(rs)
    shorter_forms(rs)
    return rs


SYMBOLIC = build()
