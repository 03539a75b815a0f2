"""Linear normal forms for index arithmetic, computed inside the e-graph.

Every index-typed e-class gets a linear form  sum(coef_i * atom_i) + const
(`Lin`): a list of (atom, coef) sorted by atom e-class (`Terms`), and a
constant. Atoms are the e-classes that are not sums or scaled sums (ranges,
variables, div/mod, products of two non-constants, ...). Because equal
forms are the same term, like terms combine and constants fold without any
associativity or commutativity rules, which is what keeps index math from
blowing up the e-graph. Each class is unioned with the sum rebuilt from its
form (`ToU`), and div/mod/compare rules work on the term list directly.

A class may be derivable as an atom (level 0), a sum (level 1) or a constant
(level 2); consumers use the best level, and `lin` keeps one form per level,
the newest (by e-class order): later forms are built from better forms of the
children (a scaled term's own form instead of the term as an atom), so they
combine more like terms.
"""

from __future__ import annotations

from egraph_compiler.egraph.dsl import RuleSet, rewrite, rule
from egraph_compiler.ir.ops import OP_TABLE, Ops, OpSpec
from egraph_compiler.rules.intervals import floordiv, floormod, small, wildcards

IX = '"index"'

DECLARATIONS = """
(sort Terms)
(constructor TNil () Terms :unextractable)
(constructor TCons (U i64 Terms) Terms :unextractable)
(sort Lin)
(constructor L (Terms i64) Lin :unextractable)
(sort TSplit)
(constructor TS (Terms Terms i64) TSplit :unextractable)
(constructor tmerge (Terms Terms) Terms :unextractable)
(constructor tscale (Terms i64) Terms :unextractable)
(constructor tsplit (Terms i64 i64) TSplit :unextractable)
(constructor tdivexact (Terms i64) Terms :unextractable)
(constructor tdivsym (Terms U) Terms :unextractable)
(constructor pdiv (U U) U :unextractable)
(relation has-factor (U U))
(constructor ToU (Lin) U :unextractable)
(constructor ToT (Terms) U :unextractable)
(function lin (U i64) Lin :merge (ordering-max old new))
(function lvl (U) i64 :merge (max old new))
(function tgcd (Terms) i64 :merge (max old new))
(function gcd (i64 i64) i64 :merge (max old new))
(relation want-gcd (i64 i64))
(relation has-term (Terms U i64))
"""

HELPERS = ("TNil", "TCons", "L", "TS", "tmerge", "tscale", "tsplit", "tdivexact", "tdivsym", "pdiv", "ToU", "ToT")
COEF_BOUND = 1 << 30


def ik(v: str | int) -> str:
    return f"(CONST {IX} (I {v}))"


def can_be_index(sp: OpSpec) -> bool:
    """Whether the op's dtype rule allows an index-typed result (not float-only, bool-only or void)."""
    return getattr(sp.dtype_rule, "__name__", "") not in (
        "_dt_float_unary",
        "_dt_float_binary",
        "_dt_cmp",
        "_dt_bool",
        "_dt_void",
    )


def atom_ops() -> list[OpSpec]:
    """Ops whose index-typed nodes are atoms of a linear form (all but sums and constants)."""
    return [sp for sp in OP_TABLE.values() if sp.op not in (Ops.ADD, Ops.CONST) and can_be_index(sp)]


def build() -> RuleSet:
    rs = RuleSet("linear")
    c = "linear"
    # ---- forms of each e-class --------------------------------------------------------------------
    rule(
        rs,
        "lin-const",
        [f"(= e {ik('v')})"],
        ["(set (lin e 2) (L (TNil) v))", "(set (lvl e) 2)"],
        category=c,
        doc="an index constant v has the constant linear form v (no terms, level 2)",
    )
    for sp in atom_ops():
        rule(
            rs,
            f"lin-atom-{sp.egg_name.lower()}",
            [f"(= e ({sp.egg_name} {IX} {wildcards(sp)}))"],
            ["(set (lin e 0) (L (TCons e 1 (TNil)) 0))", "(set (lvl e) 0)"],
            category=c,
            doc="an index-typed MUL is an atom (form 1*itself, level 0); a MUL by a constant also gets a scaled form"
            if sp.op is Ops.MUL
            else f"an index-typed {sp.egg_name} is an atom: its own linear form is 1*itself (level 0)",
        )
    rule(
        rs,
        "lin-add",
        [
            f"(= e (ADD {IX} a b))",
            "(= pa (lvl a))",
            "(= (L ta ka) (lin a pa))",
            "(= pb (lvl b))",
            "(= (L tb kb) (lin b pb))",
            *small("ka", "kb"),
        ],
        ["(set (lin e 1) (L (tmerge ta tb) (+ ka kb)))", "(set (lvl e) 1)"],
        category=c,
        doc="the linear form of a + b is the sum of their best forms (terms merged, constants added)",
    )
    rule(
        rs,
        "lin-scale",
        [
            f"(= e (MUL {IX} a {ik('q')}))",
            "(!= q 0)",
            "(= pa (lvl a))",
            "(= (L ta ka) (lin a pa))",
            *small("q", "ka", bound=COEF_BOUND),
        ],
        ["(set (lin e 1) (L (tscale ta q) (* ka q)))", "(set (lvl e) 1)"],
        category=c,
        doc="the linear form of a * q (q a nonzero constant) is a's best form scaled by q",
    )
    rule(
        rs,
        "lin-scale-left",
        [
            f"(= e (MUL {IX} {ik('q')} a))",
            "(!= q 0)",
            "(= pa (lvl a))",
            "(= (L ta ka) (lin a pa))",
            *small("q", "ka", bound=COEF_BOUND),
        ],
        ["(set (lin e 1) (L (tscale ta q) (* ka q)))", "(set (lvl e) 1)"],
        category=c,
        doc="the linear form of q * a (q a nonzero constant) is a's best form scaled by q",
    )
    rule(
        rs,
        "lin-scale-zero",
        [f"(= e (MUL {IX} a {ik(0)}))"],
        ["(set (lin e 2) (L (TNil) 0))", "(set (lvl e) 2)"],
        category=c,
        doc="a * 0 has the constant linear form 0",
    )
    # ---- sorted merge / scale of term lists --------------------------------------------------------
    rewrite(
        rs, "tmerge-nil-left", "(tmerge (TNil) t)", "t", category=c, doc="merging no terms with a term list gives that list"
    )
    rewrite(
        rs, "tmerge-nil-right", "(tmerge t (TNil))", "t", category=c, doc="merging a term list with no terms gives that list"
    )
    rule(
        rs,
        "tmerge-same-atom",
        ["(= m (tmerge (TCons a p ra) (TCons a q rb)))", "(!= (+ p q) 0)", *small("p", "q", bound=COEF_BOUND)],
        ["(union m (TCons a (+ p q) (tmerge ra rb)))"],
        category=c,
        doc="merge: like terms combine by adding their coefficients (sum nonzero)",
    )
    rule(
        rs,
        "tmerge-cancel",
        ["(= m (tmerge (TCons a p ra) (TCons a q rb)))", "(= (+ p q) 0)"],
        ["(union m (tmerge ra rb))"],
        category=c,
        doc="merge: like terms whose coefficients cancel drop out",
    )
    rule(
        rs,
        "tmerge-left-first",
        ["(= m (tmerge (TCons a p ra) (TCons b q rb)))", "(!= a b)", "(= b (ordering-max a b))"],
        ["(union m (TCons a p (tmerge ra (TCons b q rb))))"],
        category=c,
        doc="merge: the left head atom sorts first (lower e-class order), so it leads",
    )
    rule(
        rs,
        "tmerge-right-first",
        ["(= m (tmerge (TCons a p ra) (TCons b q rb)))", "(!= a b)", "(= a (ordering-max a b))"],
        ["(union m (TCons b q (tmerge (TCons a p ra) rb)))"],
        category=c,
        doc="merge: the right head atom sorts first (lower e-class order), so it leads",
    )
    rewrite(rs, "tscale-nil", "(tscale (TNil) q)", "(TNil)", category=c, doc="scaling no terms gives no terms")
    rule(
        rs,
        "tscale-cons",
        ["(= x (tscale (TCons a p r) q))", *small("p", "q", bound=COEF_BOUND)],
        ["(union x (TCons a (* p q) (tscale r q)))"],
        category=c,
        doc="scaling a term list by q multiplies every coefficient by q",
    )
    # ---- rebuilding a sum from a form (the canonical expression of the class) ----------------------
    rule(
        rs,
        "lin-rebuild",
        ["(= p (lvl e))", "(= l (lin e p))"],
        ["(union e (ToU l))"],
        category=c,
        doc="every index class equals the sum rebuilt from its best linear form",
    )
    rewrite(
        rs, "rebuild-no-const", "(ToU (L t 0))", "(ToT t)", category=c, doc="a form with constant 0 rebuilds as just its terms"
    )
    rule(
        rs,
        "rebuild-const",
        ["(= e (ToU (L t q)))", "(!= q 0)"],
        [f"(union e (ADD {IX} (ToT t) {ik('q')}))"],
        category=c,
        doc="a form with a nonzero constant q rebuilds as its terms + q",
    )
    rewrite(rs, "rebuild-empty", "(ToT (TNil))", ik(0), category=c, doc="an empty term list rebuilds as 0")
    rewrite(rs, "rebuild-one", "(ToT (TCons a 1 (TNil)))", "a", category=c, doc="a lone term 1*a rebuilds as a")
    rule(
        rs,
        "rebuild-scaled",
        ["(= e (ToT (TCons a q (TNil))))", "(!= q 1)"],
        [f"(union e (MUL {IX} a {ik('q')}))"],
        category=c,
        doc="a lone term q*a (q != 1) rebuilds as a * q",
    )
    rule(
        rs,
        "rebuild-sum",
        ["(= e (ToT (TCons a 1 (TCons b q r))))"],
        [f"(union e (ADD {IX} (ToT (TCons b q r)) a))"],
        category=c,
        doc="a term list led by 1*a rebuilds as (the rest) + a",
    )
    rule(
        rs,
        "rebuild-scaled-sum",
        ["(= e (ToT (TCons a p (TCons b q r))))", "(!= p 1)"],
        [f"(union e (ADD {IX} (ToT (TCons b q r)) (MUL {IX} a {ik('p')})))"],
        category=c,
        doc="a term list led by p*a (p != 1) rebuilds as (the rest) + a * p",
    )
    # ---- term membership (for pattern search inside a sum) ------------------------------------------
    rule(
        rs,
        "has-term-head",
        ["(= t (TCons a p r))"],
        ["(has-term t a p)"],
        category=c,
        check="structural",
        doc="a term list contains its head term (atom, coefficient)",
    )
    rule(
        rs,
        "has-term-tail",
        ["(= t (TCons a p r))", "(has-term r b q)"],
        ["(has-term t b q)"],
        category=c,
        check="structural",
        doc="a term list contains every term of its tail",
    )
    # ---- division of term lists ------------------------------------------------------------------
    # tsplit(T, c, mode) = TS(Q, R, c) with value(T) = c*value(Q) + value(R). The pair carries c: its value is
    # (c*Q + R, c), so hash-consing only ever shares a pair between splits of equal terms by the same divisor.
    # Modes choose which part of each coefficient p goes to Q: 0 = all of p when c divides it, else none;
    # 1 = floor(p/c); 2 = round(p/c). rules/forms.py adds 3 (c = -1: Q the negated negative terms, R the
    # positive ones) and 4 (Q the atoms whose coefficient is c, R the others).
    rewrite(
        rs,
        "tsplit-nil",
        "(tsplit (TNil) q m)",
        "(TS (TNil) (TNil) q)",
        category=c,
        doc="splitting no terms by q gives an empty quotient and remainder",
    )
    rule(
        rs,
        "tsplit-request",
        ["(= x (tsplit (TCons a p r) q m))"],
        ["(tsplit r q m)"],
        category=c,
        check="structural",
        doc="splitting a term list asks for the split of its tail first",
    )
    step = ["(= x (tsplit (TCons a p r) q m))", "(= (TS qs rs q) (tsplit r q m))", "(> q 0)", *small("p", "q")]
    rule(
        rs,
        "tsplit-divisible",
        [*step, "(<= m 2)", "(= 0 (% p q))"],
        ["(union x (TS (TCons a (/ p q) qs) rs q))"],
        category=c,
        doc="split (modes 0-2): a coefficient p divisible by q > 0 goes to the quotient as p/q",
    )
    rule(
        rs,
        "tsplit-keep",
        [*step, "(= m 0)", "(!= 0 (% p q))"],
        ["(union x (TS qs (TCons a p rs) q))"],
        category=c,
        doc="split mode 0: a coefficient not divisible by q stays whole in the remainder",
    )
    for mode, name, quot in ((1, "floor", floordiv("p", "q")), (2, "nearest", floordiv("(+ (* 2 p) q)", "(* 2 q)"))):
        qd = "floor(p/q)" if mode == 1 else "round(p/q)"
        rule(
            rs,
            f"tsplit-{name}",
            [*step, f"(= m {mode})", "(!= 0 (% p q))", f"(= d {quot})", "(!= d 0)"],
            ["(union x (TS (TCons a d qs) (TCons a (- p (* d q)) rs) q))"],
            category=c,
            doc=f"split mode {mode}: an indivisible coefficient p puts d = {qd} in the quotient, p - d*q in the rest",
        )
        rule(
            rs,
            f"tsplit-{name}-small",
            [*step, f"(= m {mode})", "(!= 0 (% p q))", f"(= 0 {quot})"],
            ["(union x (TS qs (TCons a p rs) q))"],
            category=c,
            doc=f"split mode {mode}: an indivisible coefficient p with {qd} = 0 stays whole in the remainder",
        )
    rewrite(rs, "tdivexact-nil", "(tdivexact (TNil) g)", "(TNil)", category=c, doc="exact division of no terms gives no terms")
    rule(
        rs,
        "tdivexact-cons",
        ["(= x (tdivexact (TCons a p r) g))", "(> g 0)", "(= 0 (% p g))"],
        ["(union x (TCons a (/ p g) (tdivexact r g)))"],
        category=c,
        doc="exact division by g > 0 divides every coefficient by g (each must be divisible)",
    )
    # factors of index products (found through nesting, without associativity/commutativity rules)
    rule(
        rs,
        "factor-left",
        [f"(= m (MUL {IX} a b))"],
        ["(has-factor m a)"],
        category=c,
        check="structural",
        doc="the left operand of an index product is one of its factors",
    )
    rule(
        rs,
        "factor-right",
        [f"(= m (MUL {IX} a b))"],
        ["(has-factor m b)"],
        category=c,
        check="structural",
        doc="the right operand of an index product is one of its factors",
    )
    rule(
        rs,
        "factor-nested",
        [f"(= m (MUL {IX} a b))", "(has-factor a f)"],
        ["(has-factor m f)"],
        category=c,
        check="structural",
        doc="a factor of a product's left operand is a factor of the product",
    )
    rule(
        rs,
        "factor-nested-right",
        [f"(= m (MUL {IX} a b))", "(has-factor b f)"],
        ["(has-factor m f)"],
        category=c,
        check="structural",
        doc="a factor of a product's right operand is a factor of the product",
    )
    # pdiv(m, f) = m / f for a product m with factor f
    rewrite(rs, "pdiv-left", f"(pdiv (MUL {IX} f b) f)", "b", category=c, doc="(f * b) divided by its factor f is b")
    rewrite(rs, "pdiv-right", f"(pdiv (MUL {IX} a f) f)", "a", category=c, doc="(a * f) divided by its factor f is a")
    rule(
        rs,
        "pdiv-nested-left",
        ["(= x (pdiv m f))", f"(= m (MUL {IX} a b))", "(has-factor a f)"],
        [f"(union x (MUL {IX} (pdiv a f) b))"],
        category=c,
        doc="a * b divided by a factor f of a is (a / f) * b",
    )
    rule(
        rs,
        "pdiv-nested-right",
        ["(= x (pdiv m f))", f"(= m (MUL {IX} a b))", "(has-factor b f)"],
        [f"(union x (MUL {IX} a (pdiv b f)))"],
        category=c,
        doc="a * b divided by a factor f of b is a * (b / f)",
    )
    # tdivsym(T, f): every atom of T divided by its factor f
    rewrite(
        rs,
        "tdivsym-nil",
        "(tdivsym (TNil) f)",
        "(TNil)",
        category=c,
        doc="dividing no terms by a symbolic factor gives no terms",
    )
    rule(
        rs,
        "tdivsym-cons",
        ["(= x (tdivsym (TCons a p r) f))", "(has-factor a f)"],
        ["(union x (TCons (pdiv a f) p (tdivsym r f)))"],
        category=c,
        doc="dividing terms by f: an atom with factor f becomes atom / f, its coefficient kept",
    )
    rule(
        rs,
        "tdivsym-self",
        ["(= x (tdivsym (TCons f p r) f))"],
        [f"(union x (TCons {ik(1)} p (tdivsym r f)))"],
        category=c,
        doc="dividing terms by f: the atom f itself becomes the constant 1, its coefficient kept",
    )
    # ---- gcd of coefficients (Euclid, on demand) --------------------------------------------------
    rule(rs, "gcd-base", ["(want-gcd a 0)"], ["(set (gcd a 0) a)"], category=c, check="structural", doc="gcd(a, 0) is a")
    rule(
        rs,
        "gcd-step",
        ["(want-gcd a b)", "(> b 0)"],
        ["(want-gcd b (% a b))"],
        category=c,
        check="structural",
        doc="Euclid: asking for gcd(a, b) with b > 0 asks for gcd(b, a % b)",
    )
    rule(
        rs,
        "gcd-result",
        ["(want-gcd a b)", "(> b 0)", "(= g (gcd b (% a b)))"],
        ["(set (gcd a b) g)"],
        category=c,
        check="structural",
        doc="Euclid: gcd(a, b) = gcd(b, a % b) for b > 0",
    )
    rule(
        rs,
        "tgcd-one",
        ["(= t (TCons a p (TNil)))", *small("p")],
        ["(set (tgcd t) (abs p))"],
        category=c,
        check="structural",
        doc="the coefficient gcd of a one-term list is |p|",
    )
    rule(
        rs,
        "tgcd-request",
        ["(= t (TCons a p r))", "(= g (tgcd r))", *small("p")],
        ["(want-gcd (abs p) g)"],
        category=c,
        check="structural",
        doc="the coefficient gcd of a term list asks for gcd(|p|, coefficient gcd of its tail)",
    )
    rule(
        rs,
        "tgcd-cons",
        ["(= t (TCons a p r))", "(= g (tgcd r))", *small("p"), "(= h (gcd (abs p) g))"],
        ["(set (tgcd t) h)"],
        category=c,
        check="structural",
        doc="the coefficient gcd of a term list is gcd(|p|, coefficient gcd of its tail)",
    )
    return rs


LINEAR = build()


def lin_of(var: str, t: str, q: str) -> list[str]:
    """Premises binding the best linear form of e-class `var` to terms `t` and constant `q`."""
    return [f"(= p{var} (lvl {var}))", f"(= (L {t} {q}) (lin {var} p{var}))"]


__all__ = ["DECLARATIONS", "HELPERS", "LINEAR", "floordiv", "floormod", "ik", "lin_of"]
