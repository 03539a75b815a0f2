"""OptOps as rewrite rules: alternative loop nests for each kernel, in the same e-graph.

A split of range r (bound n) by a factor f makes two ranges named by the
split itself (invariant 4: `RKSplit key f 0` is the outer part, `RKSplit key f
1` the inner one) and two equalities:

  r == outer * f + inner                      (unioned: index math simplifies through it)
  END(x, .. r ..) == END(x, .. outer, inner ..)   (the loop nest that binds the parts)

One part takes the split's target AxisType (the spec's "split from" table):

  split-upcast-<pos>          END  L -> L outer, UPCAST inner           (registers / SIMD lanes)
  split-upcast-odd-<pos>      the same by 7 or 14, where 8 does not divide the range (rows of 28 pixels)
  split-local-<pos>           END  L -> L outer, LOCAL inner            (threads of a GPU block)
  split-thread                END  L -> THREAD outer (one per core), L inner
  split-unroll-<pos>          REDUCE R -> R outer, UNROLL inner
  split-group-threads-<pos>   REDUCE R -> R outer, GROUP_REDUCE inner   (a block's threads, shared-memory tree)
  split-group                 REDUCE R -> GROUP_REDUCE outer (one slice per core), R inner
  split-accumulate-<pos>      REDUCE R -> partial reduces over R outer, combined over an UPCAST inner part
  swap-0                      END: the two outermost ranges trade places
  padto-<kind>-<pos>          a split whose factor does not divide the bound: the range is padded up to
                              a multiple (or up to f itself, from more than f/2: a row of 7 becomes one
                              tile of 8), and the padding is masked (a gated store, or the reduce
                              identity under WHERE); an END whose store another padding gated already
                              pads a second range too (`-gated`: the gates are ANDed)
  tc                          tensor cores: a float16/bfloat16 GEMM's two output ranges split into
                              WARP tiles of 16 and its reduce range into an UNROLL part of 16
  tc-block-<wm>x<wn>-<um>x<un>  the tile ranges of a TC nest split again: blocks of wm x wn warps
                              (LOCAL), um x un tiles per warp (UPCAST)

A loop nest binds either r or its parts; decoding defines the unbound one from
the bound ones (split_ranges.bind_split_ranges), so whatever index form the
extractor picks is well formed. Only ranges that come straight from rangeify
are split (their key is RKOut/RKRed), so a split is never split again and
every schedule is one term: splitting i then j gives the same END as
splitting j then i. The one exception, tc-block, splits the tile ranges of a
tc nest (nothing else splits them) in one step.

Legality is in the guards: the factor divides the bound (Padto: it does not,
and the padding is masked; a whole range: it equals the bound, nothing
padded), output axes split into output AxisTypes and reduce axes into reduce
ones, and facts set per target by optimize.py (`split-factor
kind f`, see SPLIT_FACTORS) name the factors tried, so each target explores
only what its backend can use. Nolocals is the target option that sets no
LOCAL/GROUP_REDUCE/TC facts: every kernel keeps its unsplit, block-free
alternative in the e-graph anyway, so Nolocals only narrows the search.

A padded range is not unioned with outer*f + inner: that sum exceeds r's
bound in the padding, and interval analysis would use r's bound to drop the
very mask that guards it. Its parts are keyed `RKPad key f part`, and decoding
defines r from them.
"""

from __future__ import annotations

import os

from egraph_compiler.egraph.dsl import RuleSet, rule

IX = '"index"'
GROUP_MIN = 1 << 16  # a reduce shorter than this is not worth a thread hand-off
MAX_POSITION = 4  # ranges after the 4th of one loop nest are not split (kernels here have at most 4-5 axes)
TC_TILE = 16  # the WMMA tile (m16n16k16) the CUDA backend renders
# TC block shapes tried: (warps along m, warps along n, tiles per warp along m, along n); 64x64 to 128x128 outputs
TC_BLOCKS = ((1, 1, 2, 2), (2, 2, 2, 2), (2, 2, 4, 4), (2, 4, 4, 2), (4, 2, 2, 4))

DECLARATIONS = """
(constructor RKSplit (RKey i64 i64) RKey)
(constructor RKPad (RKey i64 i64) RKey)
(relation split-factor (String i64))
(relation tc-value (U U))
"""

# name, binder op, the AxisType letter of the ranges it splits, the inner part's AxisType, rangeify's key constructor
SPLITS = (
    ("upcast", "END", "L", "u", "RKOut"),
    ("local", "END", "L", "l", "RKOut"),
    ("unroll", "REDUCE", "R", "r", "RKRed"),
    ("group-threads", "REDUCE", "R", "G", "RKRed"),
)
PADS = (("upcast", "END", "u"), ("local", "END", "l"), ("unroll", "REDUCE", "r"), ("group-threads", "REDUCE", "G"))
PADDED_REDUCES = {"ADD": "(F 0.0)", "MAX": "(F -inf)"}  # the identity of each float reduce op


def ik(v: str | int) -> str:
    return f"(CONST {IX} (I {v}))"


def _nest(prefix: list[str], tail: str) -> str:
    out = tail
    for x in reversed(prefix):
        out = f"(UCons {x} {out})"
    return out


def _binder(binder: str, body: str, ranges: str, op: str = "op") -> str:
    return f"(END d (UCons {body} {ranges}))" if binder == "END" else f"(REDUCE d {op} ax (UCons {body} {ranges}))"


def _parts(key: str, outer: str, inner: str, outer_bound: str = "(/ n f)") -> list[str]:
    """Actions making the outer part `ro` and the inner part `ri` (bound f) of a split keyed `(key part)`."""
    return [
        f'(let ro (RANGE {IX} ({key} 0) "{outer}" {ik(outer_bound)}))',
        f'(let ri (RANGE {IX} ({key} 1) "{inner}" {ik("f")}))',
    ]


SPLIT_IDENTITY = f"(union r (ADD {IX} (MUL {IX} ro {ik('f')}) ri))"  # r == outer*f + inner


def _split_rule(
    rs: RuleSet, name: str, binder: str, kind: str, inner: str, keyc: str, pos: int, odd: bool = False, wide: bool = False
) -> None:
    """Split the range at position `pos` of the binder's range list (after its body). `odd`: the factors of
    kind `<inner>-odd`, tried only on ranges that 8 does not divide (a row of 28 pixels: 7 or 14). `wide`: the
    factors of kind `<inner>-wide`, tried only on a binder's one and only range (a matrix-vector product's
    columns: 128 a step of its rows). Never the whole range: its outer part of one iteration is 0, so the inner
    part is proved equal to the range itself and the loop nest binds the same range twice."""
    before = [f"x{i}" for i in range(pos)]
    rest = "(UNil)" if wide else "rest"
    e = _binder(binder, "body", _nest(before, f"(UCons r {rest})"))
    e_new = _binder(binder, "body", _nest(before, f"(UCons ro (UCons ri {rest}))"))
    variant = "-odd" if odd else "-wide" if wide else ""
    fact = [f'(split-factor "{inner}{variant}" f)'] + (["(!= (% n 8) 0)"] if odd else [])
    rule(
        rs,
        f"split-{name}{variant}-{pos}",
        [
            f"(= e {e})",
            f'(= r (RANGE {IX} key "{kind}" (CONST {IX} (I n))))',
            f"(= key ({keyc} t k))",
            *fact,
            "(< f n)",
            "(= (% n f) 0)",
        ],
        [*_parts("RKSplit key f", kind, inner), SPLIT_IDENTITY, f"(union e {e_new})"],
        category="optops",
        check="structural",
        doc=f"range {pos} of a {binder} split by f: outer part keeps its AxisType, inner part becomes "
        f"{name.upper()} (r == outer*f + inner, proved in tests/test_optops.py)"
        + ("; for ranges 8 does not divide" if odd else "; for a binder's only range" if wide else ""),
    )


# Padto's variants (factor kind "pad-<inner>-<variant>"): the ranges each admits, and its rules' doc suffix.
# thrifty: 64 or more, grown by at most an eighth; snug: 9 or more, grown by at most an eighth where padding to 8
# grows it more and neither 8 nor 7 divides (a 17-pixel row: 3 x 6, not 3 x 8); short: 16 to 63, grown by at most
# an eighth, not a multiple of 16 (a convolution's row of 28 pixels as 5 x 6)
EIGHTH = "(<= (* 8 (- f (% n f))) n)"
PAD_VARIANTS: dict[str, tuple[list[str], str]] = {
    "": ([], ""),
    "thrifty": ([EIGHTH, "(>= n 64)"], "; only a range of 64 or more, grown by at most an eighth"),
    "snug": (
        [EIGHTH, "(!= (% n 8) 0)", "(> (* 8 (- 8 (% n 8))) n)", "(!= (% n 7) 0)", "(>= n 9)"],
        "; only a range of 9 or more, grown by at most an eighth where 8 grows it more",
    ),
    "short": (
        [EIGHTH, "(>= n 16)", "(< n 64)", "(!= (% n 16) 0)"],
        "; only a range of 16 to 63 that 16 does not divide, grown by at most an eighth",
    ),
}


def _padto_rule(
    rs: RuleSet,
    name: str,
    binder: str,
    inner: str,
    pos: int,
    op: str = "",
    variant: str = "",
    whole: str = "",
) -> None:
    """Pad range `pos` up to a multiple of f and split it; the padding is masked off. `variant` (factor kind
    "pad-<inner>-<variant>"): only the ranges PAD_VARIANTS admits. `whole` (factor kind "<inner>-whole"): a
    range of exactly f, split into one outer iteration and all of it inner (a split cannot: its outer part is
    proved 0, see _split_rule), with no padding; the mask is provably true (a REDUCE's: "r-whole", its body kept
    as it is). `whole="rows"` (factor kind
    "<inner>-whole-rows", pos 1): only the second range of an END of two (a matrix's rows inside its column panel,
    as swap-0 orders them)."""
    before = [f"x{i}" for i in range(pos)]
    kind, keyc = ("L", "RKOut") if binder == "END" else ("R", "RKRed")
    quoted_op = f'"{op}"'
    valid = f'(CMPLT "bool" (ADD {IX} (MUL {IX} ro {ik("f")}) ri) {ik("n")})'
    rest = "(UNil)" if whole == "rows" else "rest"
    ranges, ranges_new = _nest(before, f"(UCons r {rest})"), _nest(before, f"(UCons ro (UCons ri {rest}))")
    rows = "-rows" if whole == "rows" else ""
    guards = [
        f'(= r (RANGE {IX} key "{kind}" (CONST {IX} (I n))))',
        f"(= key ({keyc} t k))",
        f'(split-factor "{inner}-whole{rows}" f)'
        if whole
        else f'(split-factor "pad-{inner}{f"-{variant}" if variant else ""}" f)',
        *(["(= n f)"] if whole else ["(< f (* 2 n))", "(!= (% n f) 0)"]),
        *PAD_VARIANTS[variant][0],
    ]
    prefix = f"{variant}-" if variant else f"whole{rows}-" if whole else ""
    if binder == "END":  # the store of a padded iteration is skipped (its loads run under the gate too)
        # an ungated store, or one a padding of another range already gates (both ranges of a tile padded)
        for suffix, gate, both in (("", "", valid), ("-gated", " (UCons g (UNil))", f'(AND "bool" g {valid})')):
            body = f"(STORE sd (UCons i (UCons v{gate or ' (UNil)'})))"
            masked = f"(STORE sd (UCons i (UCons v (UCons {both} (UNil)))))"
            rule(
                rs,
                f"padto-{prefix}{name}-{pos}{suffix}",
                [f"(= e (END d (UCons {body} {ranges})))", *guards],
                [
                    "(let np (* (/ (+ n (- f 1)) f) f))",
                    *_parts("RKPad key f", kind, inner, "(/ np f)"),
                    f"(union e {_binder(binder, masked, ranges_new, quoted_op)})",
                ],
                category="optops",
                check="structural",
                doc=(
                    f"range {pos} of an END{' of two ranges' if rows else ''} of exactly f iterations, all of them "
                    f"one {name.upper()} (split 1 x f; the mask is always true{', AND its gate' if suffix else ''})"
                    if whole
                    else f"Padto: range {pos} of an END padded to a multiple of f and split (inner part "
                    f"{name.upper()}); padded iterations skip the store{' (AND its gate)' if suffix else ''}"
                    + PAD_VARIANTS[variant][1]
                ),
            )
        return
    # a REDUCE: a padded iteration adds the identity (a whole range has none: its body stays as it is)
    guards = [f"(= e {_binder(binder, 'body', ranges, quoted_op)})", *guards, "(dt-float d)"]
    masked = "body" if whole else f"(WHERE d {valid} body (CONST d {PADDED_REDUCES[op]}))"
    rule(
        rs,
        f"padto-{prefix}{name}-{op.lower()}-{pos}",
        guards,
        [
            "(let np (* (/ (+ n (- f 1)) f) f))",
            *_parts("RKPad key f", kind, inner, "(/ np f)"),
            f"(union e {_binder(binder, masked, ranges_new, quoted_op)})",
        ],
        category="optops",
        check="structural",
        doc=f"range {pos} of a {op} REDUCE of exactly f iterations, all of them one UNROLL (split 1 x f)"
        if whole
        else f"Padto: range {pos} of a {binder} padded to a multiple of f and split (inner part "
        f"{name.upper()}); padded iterations add the identity",
    )


def _accumulate_rule(rs: RuleSet, pos: int, key_pattern: str, suffix: str) -> None:
    """A reduce over r becomes a reduce over the UPCAST part of partial reduces over the outer part: f
    independent accumulators instead of one dependency chain (a reassociation: float sums change by rounding)."""
    before = [f"x{i}" for i in range(pos)]
    rule(
        rs,
        f"split-accumulate-{pos}{suffix}",
        [
            f"(= e (REDUCE d op ax (UCons body {_nest(before, '(UCons r rest)')})))",
            f'(= r (RANGE {IX} key "R" (CONST {IX} (I n))))',
            f"(= key {key_pattern})",
            '(split-factor "acc" f)',
            "(< f n)",
            "(= (% n f) 0)",
        ],
        [
            *_parts("RKSplit key f", "R", "u"),
            SPLIT_IDENTITY,
            f"(union e (REDUCE d op ax (UCons (REDUCE d op ax (UCons body {_nest(before, '(UCons ro rest)')})) "
            "(UCons ri (UNil)))))",
        ],
        category="optops",
        check="structural",
        doc="f partial accumulators (UPCAST) over the outer part, combined after the loop",
    )


def _top_split_rule(rs: RuleSet, name: str, binder: str, outer: str, factor_kind: str, doc: str) -> None:
    """Split the first range of a binder into `g` outer slices (the factor is the outer part's bound: the spec's
    "top" split) of type `outer`; the inner part keeps the parent's AxisType."""
    kind, keyc = ("L", "RKOut") if binder == "END" else ("R", "RKRed")
    whole = binder == "REDUCE"  # a group reduce splits a reduce over one range only
    tail = "(UNil)" if whole else "rest"
    e = _binder(binder, "body", f"(UCons r {tail})")
    if whole:  # the slices' partial reduces, combined over the group range
        e_new = "(REDUCE d op ax (UCons (REDUCE d op ax (UCons body (UCons ro (UNil)))) (UCons rg (UNil))))"
    else:
        e_new = _binder(binder, "body", f"(UCons rg (UCons ro {tail}))")
    rule(
        rs,
        name,
        [
            f"(= e {e})",
            f'(= r (RANGE {IX} key "{kind}" (CONST {IX} (I n))))',
            f"(= key ({keyc} t k))",
            f'(split-factor "{factor_kind}" g)',
            f"(>= n {GROUP_MIN if whole else 2} )",
            "(< g n)",
            "(= (% n g) 0)",
        ],
        [
            "(let f (/ n g))",
            f'(let rg (RANGE {IX} (RKSplit key f 0) "{outer}" {ik("g")}))',
            f'(let ro (RANGE {IX} (RKSplit key f 1) "{kind}" {ik("f")}))',
            f"(union r (ADD {IX} (MUL {IX} rg {ik('f')}) ro))",
            f"(union e {e_new})",
        ],
        category="optops",
        check="structural",
        doc=doc,
    )


def _swap_rule(rs: RuleSet) -> None:
    rule(
        rs,
        "swap-0",
        [
            "(= e (END d (UCons body (UCons a (UCons b rest)))))",
            f'(= a (RANGE {IX} ka "L" na))',
            f'(= b (RANGE {IX} kb "L" nb))',
            "(= ka (RKOut ta ia))",
            "(= kb (RKOut tb ib))",
            '(split-factor "swap" 1)',
        ],
        ["(union e (END d (UCons body (UCons b (UCons a rest)))))"],
        category="optops",
        check="structural",
        doc="Swap: the two outermost output ranges of a loop nest trade places (which one is innermost)",
    )


def _tc_rules(rs: RuleSet) -> None:
    """TC: a GEMM accumulating float32 products of two float16 (or bfloat16) loads, stored by a loop nest over two
    output ranges, gets the WARP/UNROLL split the CUDA backend renders with WMMA tiles.

    The tiled reduce is not unioned with the plain one: its value is rebuilt up to the store (`tc-value v v2`:
    v with the reduce replaced by its tiled twin, through an elementwise epilogue), so the tiled loop nest owns
    its reduce and the extractor picks the two together."""
    tiles = {
        p: (
            f'(let {p}o (RANGE {IX} (RKSplit k{p} {TC_TILE} 0) "{t}" {ik(f"(/ n{p} {TC_TILE})")}))',
            f'(let {p}i (RANGE {IX} (RKSplit k{p} {TC_TILE} 1) "{ti}" {ik(TC_TILE)}))',
            f"(union {p} (ADD {IX} (MUL {IX} {p}o {ik(TC_TILE)}) {p}i))",
        )
        for p, t, ti in (("m", "L", "w"), ("n", "L", "w"), ("k", "R", "r"))
    }
    for d in ("float16", "bfloat16"):
        rule(
            rs,
            f"tc-reduce-{d}",
            [
                '(= red (REDUCE "float32" "ADD" ax (UCons body (UCons k (UNil)))))',
                '(= body (MUL "float32" (CAST "float32" la) (CAST "float32" lb)))',
                f'(= la (LOAD "{d}" sa))',
                f'(= lb (LOAD "{d}" sb))',
                '(split-factor "tc" 16)',
                f'(= k (RANGE {IX} kk "R" (CONST {IX} (I nk))))',
                "(= kk (RKRed tk ak))",
                f"(= (% nk {TC_TILE}) 0)",
            ],
            [*tiles["k"], '(tc-value red (REDUCE "float32" "ADD" ax (UCons body (UCons ko (UCons ki (UNil))))))'],
            category="optops",
            check="structural",
            doc=f"a {d} x {d} -> float32 dot product a tensor core can compute, over k in steps of 16 (UNROLL)",
        )
    # the stored value may wrap the reduce in an elementwise epilogue (bias, activation, cast)
    for op, args in (
        ("CAST", "x"),
        ("ADD", "x y"),
        ("ADD", "y x"),
        ("MUL", "x y"),
        ("MUL", "y x"),
        ("MAX", "x y"),
        ("MAX", "y x"),
    ):
        rule(
            rs,
            f"tc-epilogue-{op.lower()}-{args.index('x') // 2}",
            [f"(= v ({op} dv {args}))", "(tc-value x x2)"],
            [f"(tc-value v ({op} dv {args.replace('x', 'x2')}))"],
            category="optops",
            check="structural",
            doc=f"a {op} of a tensor-core result, computed from the tiles",
        )
    rule(
        rs,
        "tc",
        [
            "(= e (END d (UCons (STORE sd (UCons i (UCons v (UNil)))) (UCons m (UCons n (UNil))))))",
            "(tc-value v v2)",
            f'(= m (RANGE {IX} km "L" (CONST {IX} (I nm))))',
            "(= km (RKOut tm am))",
            f'(= n (RANGE {IX} kn "L" (CONST {IX} (I nn))))',
            "(= kn (RKOut tn an))",
            f"(= (% nm {TC_TILE}) 0)",
            f"(= (% nn {TC_TILE}) 0)",
        ],
        [
            *tiles["m"],
            *tiles["n"],
            "(union e (END d (UCons (STORE sd (UCons i (UCons v2 (UNil)))) "
            "(UCons mo (UCons no (UCons mi (UCons ni (UNil))))))))",
        ],
        category="optops",
        check="structural",
        doc="TC: 16x16 output tiles, one per warp (WARP ranges), storing the tiled reduce's value",
    )
    for shape in TC_BLOCKS:
        _tc_block_rule(rs, *shape)


def _tc_block_rule(rs: RuleSet, wm: int, wn: int, um: int, un: int) -> None:
    """Tensor-core block tiles: the tile ranges of a TC loop nest split into blocks of wm x wn warps (LOCAL), each
    computing um x un tiles (UPCAST): the CUDA backend stages a block's operand tiles in shared memory and keeps a
    warp's accumulators in registers, so every loaded fragment feeds several MMAs."""
    acts: list[str] = []
    outer, local, upcast = [], [], []
    for p, w, u in (("m", wm, um), ("n", wn, un)):
        f, key = w * u, f"(RKSplit k{p}o {w * u} 1)"
        kind = "L" if w > 1 and u > 1 else "l" if w > 1 else "u"  # "L": split again below, never bound
        acts += [
            f'(let {p}b (RANGE {IX} (RKSplit k{p}o {f} 0) "L" {ik(f"(/ n{p}o {f})")}))',
            f'(let {p}t (RANGE {IX} {key} "{kind}" {ik(f)}))',
            f"(union {p}o (ADD {IX} (MUL {IX} {p}b {ik(f)}) {p}t))",
        ]
        outer.append(f"{p}b")
        if kind == "L":  # warps (LOCAL) x tiles per warp (UPCAST)
            acts += [
                f'(let {p}l (RANGE {IX} (RKSplit {key} {u} 0) "l" {ik(w)}))',
                f'(let {p}u (RANGE {IX} (RKSplit {key} {u} 1) "u" {ik(u)}))',
                f"(union {p}t (ADD {IX} (MUL {IX} {p}l {ik(u)}) {p}u))",
            ]
        local += [f"{p}l" if kind == "L" else f"{p}t"] if w > 1 else []
        upcast += [f"{p}u" if kind == "L" else f"{p}t"] if u > 1 else []
    ranges = _nest([*outer, *local, *upcast, "mi", "ni"], "(UNil)")
    rule(
        rs,
        f"tc-block-{wm}x{wn}-{um}x{un}",
        [
            f"(= e (END d (UCons st {_nest(['mo', 'no', 'mi', 'ni'], '(UNil)')})))",
            f'(= mi (RANGE {IX} kmi "w" {ik(TC_TILE)}))',
            f'(= ni (RANGE {IX} kni "w" {ik(TC_TILE)}))',
            f'(= mo (RANGE {IX} kmo "L" (CONST {IX} (I nmo))))',
            f'(= no (RANGE {IX} kno "L" (CONST {IX} (I nno))))',
            f"(= kmo (RKSplit km {TC_TILE} 0))",
            f"(= kno (RKSplit kn {TC_TILE} 0))",
            '(split-factor "tc" 16)',
            f"(= (% nmo {wm * um}) 0)",
            f"(= (% nno {wn * un}) 0)",
        ],
        [*acts, f"(union e (END d (UCons st {ranges})))"],
        category="optops",
        check="structural",
        doc=f"TC blocks of {wm}x{wn} warps (LOCAL), each computing {um}x{un} tiles (UPCAST)",
    )


def build() -> dict[str, RuleSet]:
    """The rules by the factor kind their guards need (one egglog ruleset each), so a target runs only the rules
    it can use: the others would find no `split-factor` fact, but matching them still costs time every step."""
    by_kind: dict[str, RuleSet] = {}

    def rs(kind: str) -> RuleSet:
        return by_kind.setdefault(kind, RuleSet("optops_" + kind.replace("-", "_")))

    for name, binder, kind, inner, keyc in SPLITS:
        for pos in range(MAX_POSITION):
            _split_rule(rs(inner), name, binder, kind, inner, keyc, pos)
            if inner == "u":
                _split_rule(rs("u-odd"), name, binder, kind, inner, keyc, pos, odd=True)
    _split_rule(rs("u-wide"), "upcast", "END", "L", "u", "RKOut", 0, wide=True)
    for name, binder, inner in PADS:
        for pos in range(MAX_POSITION):
            if binder == "END":
                _padto_rule(rs(f"pad-{inner}"), name, binder, inner, pos)
                if inner == "u":
                    for variant in ("thrifty", "snug", "short"):
                        _padto_rule(rs(f"pad-u-{variant}"), name, binder, inner, pos, variant=variant)
                    _padto_rule(rs("u-whole"), name, binder, inner, pos, whole="any")
                    if pos == 1:  # as the first of two, egglog's match took 10x GPT-2's optimize time
                        _padto_rule(rs("u-whole-rows"), name, binder, inner, pos, whole="rows")
            else:
                for op in PADDED_REDUCES:
                    _padto_rule(rs(f"pad-{inner}"), name, binder, inner, pos, op)
                    if inner == "r":
                        _padto_rule(rs("r-whole"), name, binder, inner, pos, op, whole="any")
    for pos in range(MAX_POSITION):
        _accumulate_rule(rs("acc"), pos, "(RKRed t k)", "")
    # the slice of a group reduce gets accumulators too
    _accumulate_rule(rs("acc"), 0, "(RKSplit kk ff 1)", "-slice")
    _top_split_rule(
        rs("group"),
        "split-group",
        "REDUCE",
        "G",
        "group",
        "GROUP_REDUCE: g slices of the reduce run on g cores, partials combined in order",
    )
    _top_split_rule(
        rs("thread"), "split-thread", "END", "t", "thread", "THREAD: the outermost output range in g slices, one per core"
    )
    _swap_rule(rs("swap"))
    _tc_rules(rs("tc"))
    return by_kind


OPTOPS = build()  # factor kind -> its rules
RULES = [r for rs in OPTOPS.values() for r in rs.rules]

# Factors tried per target (kinds: the new part's AxisType letter, "acc" partial accumulators, "pad-<letter>"
# Padto, "group"/"thread" one slice per core, "swap"/"tc" on or off). The LLVM backend already runs the outermost
# loop on every core (a THREAD split of it, which is why "thread" is not searched there); on the CPU, register
# tiles are 8 to 32 copies along an axis (rows of a tile, or one to two AVX-512 vectors of columns; 4 added
# nothing with AVX-512 and doubled the ranking time, but AVX2 gets it: NARROW_FACTORS), or 7 and 14 where 8
# does not divide the range (a convolution's rows of 28 or 14 pixels beside a vector of output channels), swap
# puts a GEMM's column panel outside its rows (the panel stays in L2), and Padto pads a tile axis to 8 or 32 when
# neither divides it; an axis of exactly 32 is a tile axis whole ("u-whole": 32 channels made a ResNet block of
# 8x32x32 1.2x faster, for 1.7x its optimize time; 16 gained nothing there for 1.2x more), and so are the 2 to 4
# or 8 rows of a matrix ("u-whole-rows": a GEMM of 8 rows, 8 x 256 @ 256 x 1024, had only its columns tiled and ran
# in 150-240 us, 8 x 32 tiles run it in 22-38; 4 rows 78 -> 20 us, 2 rows 45 -> 27; offered on every output axis,
# they made ResNet blocks of batch 2 and 4 optimize 1.3-1.75x longer for the same programs, and 8 tiled a batch-8
# convolution's images, each a whole feature map apart: 1.2-2x slower than a tile of pixels of one row); an
# output of one range (a matrix-vector product, whose every step of the reduction moves a
# page down its rows) is also tiled 64 to 512 wide (1 x 4096 @ 4096 x 4096: 512 columns a tile, 2 KiB of each row
# a step, 1.14-1.66 ms against 1.67-2.12 for 128 on Zen 5, numpy 1.1-1.7 in the same runs; 1 x 768 @ 768 x 3072
# 256 wide 57-59 us against 66-68, numpy 54-60). The reference interpreter gains nothing from a schedule.
SPLIT_FACTORS: dict[str, dict[str, tuple[int, ...]]] = {
    "llvm": {
        "u": (8, 16, 32),
        "u-odd": (7, 14),
        "u-wide": (64, 128, 256, 512),
        "r": (4,),
        "acc": (16, 32),
        "pad-u": (8, 32),
        "pad-u-snug": (6,),
        "u-whole": (32,),
        "u-whole-rows": (2, 3, 4, 8),
        "swap": (1,),
    },
    "cuda": {"l": (64, 256), "G": (256,), "u": (4,), "pad-l": (256,), "pad-G": (256,), "swap": (1,), "tc": (16,)},
    "reference": {},
}
BLOCK_KINDS = ("l", "G", "pad-l", "pad-G", "tc")  # what Nolocals leaves out: no workgroup dims
# CPUs of 8 float32 lanes or fewer (AVX2: 16 vector registers) also tile by 4 and 6: a GEMM's 8x8 tile (8
# accumulators, 9 loads a step) is load-bound and 16x8 or 8x16 spill, where 4 rows x 2 vectors of columns with the
# reduction unrolled by 4 ran 1.17-1.28x faster (AVX2 code on Emerald Rapids: 1024^3 112 -> 132 GFLOP/s, 128x768
# @ 768x2304 79 -> 97, 128x3072 @ 3072x768 77 -> 99, 512^3 103 -> 125; interleaved in one process), and 6 rows x
# 2 vectors (12 accumulators, 2 vectors of B and a broadcast: 15 of the 16 registers) another 1.04-1.34x (Zen 4:
# 768^3 143 -> 158 GFLOP/s, 512^3 98 -> 132, 128x768 @ 768x768 133 -> 156, 1024^3 92 -> 96; GPT-2 blocks and MLPs
# 0.84-0.98x their time, in-process A/B). Rows 6 does not divide are padded to a multiple of 6 where that adds at
# most an eighth of 64 or more rows ("pad-u-thrifty": padding every range to 6 tripled a convolution block's
# optimize time for nothing; 56-pixel rows gained no program), and an axis of exactly 16 (two vectors) is a tile
# axis whole. Every CPU pads to 6 a range of 9 to 63 that padding to 8 grows by more than an eighth, 6 by at most
# that, and neither 8 nor 7 divides ("pad-u-snug": a 17-pixel row as 3 x 6, not 3 x 8 of which 7 are masked off;
# 5x5 and 3x3 convolutions at 17x17 0.78x their time natively, 0.51-0.55x in AVX2 code, optimize times the same).
# AVX2 code also pads to 6 a range of 16 to 63 that this grows by at most an eighth and 16 does not divide
# ("pad-u-short": a 28-pixel row as 5 x 6 beside two vectors of channels, 12 accumulators instead of 7 x 4's 8; 3x3
# convolutions at 28 and 56 pixels 0.89-0.95x their time, ResNet blocks 0.89-0.92x, in-process A/B on Zen 5 and
# Zen 3, one batch-1 shape 1.06x on Zen 3; a 1x1 stride-2 one at batch 1 ran 1.5x slower until the backend
# loaded its weight's copies as vectors along the accumulators' range with the reduction unrolled by 4, and runs
# as fast as 7 x 4 now; multiples of 16 are left out: 32-wide blocks optimized 1.6x longer)
NARROW_LANES = 8
NARROW_FACTORS: dict[str, tuple[int, ...]] = {
    "u": (4, 6),
    "pad-u": (16,),
    "pad-u-thrifty": (6,),
    "pad-u-short": (6,),
    "u-whole": (16,),
}
# wider vectors (AVX-512) also pad snugly to 7: rows of 13, 19 or 26 pixels as 2, 3 or 4 x 7 beside 32 output
# channels (0.87-0.89x their time); AVX2 code took none of them, for 1.35-1.45x the optimize time. They also unroll
# a reduction range of exactly 3 whole ("r-whole": a 3x3 window's row or column), which the estimate admits only
# where it leaves its REDUCE no loop (loop_cost.straight_windows): a depthwise window in a tile of output rows,
# each input row loaded once for the three output rows that read it (Zen 5, 256 channels of 28x28 27 -> 14 us, 32
# of 112x112 53 -> 25 us; stride 2, 144 of 56x56, 48-52 -> 52-55 us). In AVX2 code (16 registers) the same tiles
# ran 1.04-1.22x slower, and a dense convolution's window inside its loop over input channels no faster natively
# and up to 1.16x slower in AVX2 code than the reduction unrolled by 4
WIDE_FACTORS: dict[str, tuple[int, ...]] = {"pad-u-snug": (7,), "r-whole": (3,)}


def target_kinds(target: str, nolocals: bool = False, lanes: int | None = None) -> dict[str, tuple[int, ...]]:
    """The factor kinds (and factors) a target explores; `lanes`: the float32 lanes of the CPU code is generated
    for (target "llvm"), whose narrow vectors add NARROW_FACTORS, and wider ones WIDE_FACTORS."""
    kinds = {k: fs for k, fs in SPLIT_FACTORS.get(target, {}).items() if not (nolocals and k in BLOCK_KINDS)}
    if target == "llvm" and lanes is not None:
        for k, fs in (NARROW_FACTORS if lanes <= NARROW_LANES else WIDE_FACTORS).items():
            kinds[k] = tuple(sorted({*kinds.get(k, ()), *fs}))
    cores = os.cpu_count() or 1
    if target == "llvm" and cores > 1:  # GROUP_REDUCE: one slice per core
        kinds["group"] = (cores,)
    return kinds


def split_facts(target: str, nolocals: bool = False, lanes: int | None = None) -> list[str]:
    return [f'(split-factor "{kind}" {f})' for kind, fs in target_kinds(target, nolocals, lanes).items() for f in fs]


def rulesets_for(target: str, nolocals: bool = False, lanes: int | None = None) -> tuple[str, ...]:
    """Names of the rulesets a target's schedule stage runs (`lanes` as for target_kinds)."""
    return tuple(OPTOPS[k].name for k in target_kinds(target, nolocals, lanes) if k in OPTOPS)
