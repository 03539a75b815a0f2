"""What `simplify` adds in its later rounds (simplify.py): deeper div/mod rewrites and shorter written forms.

Its first round runs the symbolic rules alone, as optimize's kernels do; each later round starts from the smaller
result of the one before, where these rules can afford the growth they cause:

  (p*(x % q) + R) % n  ->  (p*x + R) % n            n divides p*q
  p*(y // q) + p*j     ->  p*((y + j*q) // q)
  S // c               ->  Q // (c/f)               S = f*Q + R, 0 <= R < f, f = gcd(c, a coefficient of S)

and the factored forms a person writes for a sum, which extraction keeps where they are smaller (the rebuild of a
linear form, rules/linear.py, writes every term as atom * coefficient):

  a*-1 + b*-2 + c   ->  c + (a + b*2) * -1     (the negative terms under one sign)
  a*6 + b*4         ->  (a*3 + b*2) * 2        (the coefficients' common factor)
  a*9 + b*9 + c     ->  c + (a + b) * 9        (the terms that share a coefficient)

The sign and coefficient splits are modes of linear.py's `tsplit` (value c*Q + R), so tests/prove.py proves them
with the other splits.
"""

from __future__ import annotations

from egraph_compiler.egraph.dsl import RuleSet, rule
from egraph_compiler.rules.intervals import floormod, small
from egraph_compiler.rules.linear import IX, ik, lin_of

SIGN, GROUP = 3, 4  # tsplit modes: c = -1 splits by sign; c = p splits off the atoms with coefficient p


def divmod_rules(rs: RuleSet) -> None:
    c = "divmod"
    rule(
        rs,
        "mod-inner-mod",
        [
            f"(= e (MOD {IX} s {ik('n')}))",
            "(!= n 0)",
            *lin_of("s", "t", "k0"),
            "(has-term t m p)",
            f"(= m (MOD {IX} x {ik('q')}))",
            "(!= q 0)",
            *small("p", "q", "n", bound=1 << 30),
            "(= 0 (% (* p q) n))",
        ],
        [f"(union e (MOD {IX} (ToU (L (tmerge t (tmerge (TCons m (- 0 p) (TNil)) (TCons x p (TNil)))) k0)) {ik('n')}))"],
        category=c,
        doc="(p*(x % q) + R) % n -> (p*x + R) % n when n divides p*q, anywhere in an index sum",
    )
    rule(
        rs,
        "idiv-absorb-constant",
        [
            *lin_of("e", "t", "k0"),
            "(!= k0 0)",
            "(has-term t dv p)",
            f"(= dv (IDIV {IX} y {ik('q')}))",
            "(> q 0)",
            *small("p", "q", "k0", bound=1 << 30),
            "(= 0 (% k0 p))",
        ],
        [
            f"(union e (ToU (L (tmerge t (tmerge (TCons dv (- 0 p) (TNil)) (TCons (IDIV {IX} (ADD {IX} y "
            f"{ik('(* (/ k0 p) q)')}) {ik('q')}) p (TNil)))) 0)))"
        ],
        category=c,
        doc="p*(y // q) + p*j -> p*((y + j*q) // q) for q > 0: the constant of an index sum moves into a quotient",
    )


def near_factor_rules(rs: RuleSet) -> None:
    """S // c and S % c through a factor f of c that is nearly a factor of S: S = f*Q + R with 0 <= R < f by R's
    bounds, where f = gcd(c, a coefficient of S) and Q takes floor(p/f) or round(p/f) of each coefficient p."""
    c = "divmod"
    for op in ("IDIV", "MOD"):
        shown = f"S {'//' if op == 'IDIV' else '%'} c"
        pick = [
            f"(= e ({op} {IX} s {ik('q')}))",
            "(> q 1)",
            *lin_of("s", "t", "k0"),
            "(has-term t a p)",
            *small("p", "q", "k0", bound=1 << 30),
        ]
        rule(
            rs,
            f"{op.lower()}-near-factor-gcd",
            pick,
            ["(want-gcd (abs p) q)"],
            category=c,
            check="structural",
            doc=f"helper: for index {shown} ask for f = gcd(c, p) of each coefficient p of S",
        )
        factor = [*pick, "(= f (gcd (abs p) q))", "(> f 1)", "(< f q)", "(= 0 (% q f))", f"(= kr {floormod('k0', 'f')})"]
        for mode in (1, 2):
            how = "floor(p/f)" if mode == 1 else "round(p/f)"
            rule(
                rs,
                f"{op.lower()}-near-factor-request{mode}",
                [*factor, f"(= (TS qs rs f) (tsplit t f {mode}))"],
                ["(ToU (L rs kr))"],
                category=c,
                check="structural",
                doc=f"helper: for index {shown} build R of S = f*Q + R, Q taking {how} of each coefficient",
            )
            rule(
                rs,
                f"{op.lower()}-near-factor-split{mode}",
                factor,
                [f"(tsplit t f {mode})"],
                category=c,
                check="structural",
                doc=f"helper: for index {shown} split S by f = gcd(c, p), Q taking {how} of each coefficient",
            )
            fire = [
                *factor,
                f"(= (TS qs rs f) (tsplit t f {mode}))",
                "(= rr (ToU (L rs kr)))",
                "(= lr (lo rr))",
                "(= hr (hi rr))",
                "(>= lr 0)",
                "(< hr f)",
            ]
            quo = "(ToU (L qs (/ (- k0 kr) f)))"
            if op == "IDIV":
                rule(
                    rs,
                    f"idiv-near-factor{mode}",
                    fire,
                    [f"(union e (IDIV {IX} {quo} {ik('(/ q f)')}))"],
                    category=c,
                    doc=f"(f*Q + R) // c -> Q // (c/f) when 0 <= R < f (bounds), f = gcd(c, a coefficient); Q: {how}",
                )
            else:
                rule(
                    rs,
                    f"mod-near-factor{mode}",
                    fire,
                    [f"(union e (ADD {IX} (MUL {IX} (MOD {IX} {quo} {ik('(/ q f)')}) {ik('f')}) rr))"],
                    category=c,
                    doc=f"(f*Q + R) % c -> (Q % (c/f))*f + R when 0 <= R < f (bounds), f = gcd(c, a coefficient); Q: {how}",
                )


def forms_rules(rs: RuleSet) -> None:
    c = "forms"
    step = ["(= x (tsplit (TCons a p r) q m))", "(= (TS qs rs q) (tsplit r q m))", *small("p", "q")]
    rule(
        rs,
        "tsplit-sign-negative",
        [*step, f"(= m {SIGN})", "(= q -1)", "(< p 0)"],
        ["(union x (TS (TCons a (- 0 p) qs) rs q))"],
        category=c,
        doc="sign split (mode 3, c = -1): a negative term p*a goes to Q as (-p)*a",
    )
    rule(
        rs,
        "tsplit-sign-positive",
        [*step, f"(= m {SIGN})", "(= q -1)", "(> p 0)"],
        ["(union x (TS qs (TCons a p rs) q))"],
        category=c,
        doc="sign split (mode 3, c = -1): a positive term stays in R",
    )
    rule(
        rs,
        "tsplit-group-take",
        [*step, f"(= m {GROUP})", "(= p q)"],
        ["(union x (TS (TCons a 1 qs) rs q))"],
        category=c,
        doc="coefficient split (mode 4): a term with coefficient c goes to Q as 1*a",
    )
    rule(
        rs,
        "tsplit-group-keep",
        [*step, f"(= m {GROUP})", "(!= p q)"],
        ["(union x (TS qs (TCons a p rs) q))"],
        category=c,
        doc="coefficient split (mode 4): a term with another coefficient stays in R",
    )
    two = ["(= e (ToT t))", "(= t (TCons a p (TCons b pb r)))", *small("p", "pb")]
    rule(
        rs,
        "sign-split-request",
        [*two, "(has-term t n pn)", "(< pn 0)"],
        [f"(tsplit t -1 {SIGN})"],
        category=c,
        check="structural",
        doc="helper: a sum of two or more terms, one negative, asks for its split by sign",
    )
    rule(
        rs,
        "negatives-factored",
        [*two, f"(= (TS ns ps -1) (tsplit t -1 {SIGN}))", "(= ns (TCons na nk (TCons nb nl nr)))"],
        [f"(union e (ADD {IX} (ToT ps) (MUL {IX} (ToT ns) {ik(-1)})))"],
        category=c,
        doc="P - N -> P + N * -1 for the positive terms P and the two or more negated negative terms N of a sum",
    )
    rule(
        rs,
        "common-factor-request",
        [*two, "(= g (tgcd t))", "(> g 1)"],
        ["(tdivexact t g)"],
        category=c,
        check="structural",
        doc="helper: a sum whose coefficients share a factor g > 1 asks for its terms divided by g",
    )
    rule(
        rs,
        "common-factor",
        [*two, "(= g (tgcd t))", "(> g 1)", "(= d (tdivexact t g))", "(= d (TCons da dk dr))"],
        [f"(union e (MUL {IX} (ToT d) {ik('g')}))"],
        category=c,
        doc="g*T -> T * g for the common factor g > 1 of a sum's coefficients",
    )
    rule(
        rs,
        "same-coefficient-request",
        [*two, "(!= p 1)", "(!= p -1)"],
        [f"(tsplit t p {GROUP})"],
        category=c,
        check="structural",
        doc="helper: a sum led by a term with coefficient p (not +-1) asks for its terms with coefficient p",
    )
    rule(
        rs,
        "same-coefficient-grouped",
        [*two, "(!= p 1)", "(!= p -1)", f"(= (TS gs os p) (tsplit t p {GROUP}))", "(= gs (TCons ga gk (TCons gb gl gr)))"],
        [f"(union e (ADD {IX} (ToT os) (MUL {IX} (ToT gs) {ik('p')})))"],
        category=c,
        doc="p*a + p*b + R -> R + (a + b) * p: the terms that share the leading term's coefficient p, grouped",
    )


def build() -> RuleSet:
    rs = RuleSet("refine")
    divmod_rules(rs)
    near_factor_rules(rs)
    forms_rules(rs)
    return rs


REFINE = build()

__all__ = ["REFINE"]
