"""Rangeify: tensor graphs become kernels, as rewrite rules in the same e-graph.

The bridge is `(At t idx g)`: "the scalar of tensor t at index list idx",
where g is a boolean gate (the validity accumulated through PADs; loads
under it are gated). Rules push `At` through every tensor op until only
kernel-level terms remain:

  elementwise      At(op(a, b), i)        = op(At(a, i), At(b, i))
  RESHAPE          At(reshape(x), i)      = At(x, Unflat(Flat(i, new), old))
  EXPAND           At(expand(x), i)       = At(x, i with broadcast axes -> 0)
  PERMUTE          At(permute(x, p), i)   = At(x, i picked by p's inverse)
  FLIP / SHRINK    i -> n-1-i / i + start
  PAD              At(pad(x), i)          = WHERE(valid, At(x, i - lo, g & valid), 0)
  REDUCE           At(reduce(x), i)       = REDUCE(At(x, i with reduced axes -> R), R...)
  BUFFER           At(buf, i)             = LOAD(INDEX(buf, Flat(i, shape)), 0, g)

Ranges are named by the term they come from (`RKOut t k`: output axis k of
t's kernel; `RKRed t k`: reduce axis k of the REDUCE t), never by a counter.
Buffers are facts, not equalities: `in-buf t b` (t is an input read from b)
and `mat-buf t b` (t may be stored to b by `KernelOf t b`) are relations, so
when rewriting proves an intermediate or output equal to an input, their
buffers stay apart (a union would let loads pick the wrong one).
Every materialization candidate t (chosen by the caller: multi-consumer
intermediates, reduces, CONTIGUOUS, outputs) also gets the alternative
"load it from its own buffer, after its kernel ran": the extractor's cost
model decides between recomputing inline and a separate kernel.

Shapes, inverse permutations and reduce masks are facts about the input
graph, set by the caller (`shape`, `invperm`, `rmask`).
"""

from __future__ import annotations

from egraph_compiler.egraph.dsl import RuleSet, rewrite, rule
from egraph_compiler.ir.dtypes import ALL_DTYPES
from egraph_compiler.ir.ops import OP_TABLE, ArgKind, Category, Ops

IX = '"index"'
TRUE = '(CONST "bool" (I 1))'
VOID = '"void"'

DECLARATIONS = """
(constructor At (U UL U) U :unextractable)
(constructor Flat (UL IL) U :unextractable)
(datatype Grp (GKeep) (GNewUnit) (GOldUnit) (GMix IL IL))
(datatype GL (GNil) (GCons Grp GL))
(constructor Regroup (UL GL) UL :unextractable)
(constructor TakeL (UL IL) UL :unextractable)
(constructor DropL (UL IL) UL :unextractable)
(constructor Append (UL UL) UL :unextractable)
(function reshape-plan (U) GL :merge old)
(constructor Unflat (U IL) UL :unextractable)
(constructor Bcast (UL IL) UL :unextractable)
(constructor Offs (UL IL) UL :unextractable)
(constructor PadIx (UL IL) UL :unextractable)
(constructor PadValid (UL IL IL) U :unextractable)
(constructor FlipIx (UL IL IL) UL :unextractable)
(constructor Pick (UL IL) UL :unextractable)
(constructor Get (UL i64) U :unextractable)
(constructor RedIx (UL IL IL U i64) UL :unextractable)
(constructor RedRanges (IL IL U i64) UL :unextractable)
(constructor OutRanges (U IL i64) UL :unextractable)
(constructor OutIx (U IL i64) UL :unextractable)
(constructor KernelOf (U U) U :unextractable)
(relation in-buf (U U))
(relation mat-buf (U U))
(relation out-index (U))
(relation out-index-list (UL))
(relation inline-anywhere (U))
(constructor RKOut (U i64) RKey)
(constructor RKRed (U i64) RKey)
(function shape (U) IL :merge old)
(function invperm (U) IL :merge old)
(function rmask (U) IL :merge old)
(relation is-shape (IL))
(function prod (IL) i64 :merge old)
(function zero (String) Val :merge old)
""" + "\n".join(f'(set (zero "{d.name}") {"(F 0.0)" if d.is_float else "(I 0)"})' for d in ALL_DTYPES if d.name != "void")

HELPERS = (
    "At",
    "Flat",
    "Regroup",
    "TakeL",
    "DropL",
    "Append",
    "Unflat",
    "Bcast",
    "Offs",
    "PadIx",
    "PadValid",
    "FlipIx",
    "Pick",
    "Get",
    "RedIx",
    "RedRanges",
    "OutRanges",
    "OutIx",
    "KernelOf",
)


def ik(v: str | int) -> str:
    return f"(CONST {IX} (I {v}))"


def ul(*xs: str) -> str:
    out = "(UNil)"
    for x in reversed(xs):
        out = f"(UCons {x} {out})"
    return out


def load(d: str, buf: str, idx: str, gate: str) -> str:
    """A gated load of element idx of buf (the alternative value is the dtype's zero `z`)."""
    return f"(LOAD {d} {ul(f'(INDEX {d} {ul(buf, idx)})', f'(CONST {d} z)', gate)})"


def _distribute(rs: RuleSet) -> None:
    """At distributes over every op that maps elements to elements (one op-table driven rule each)."""
    for sp in OP_TABLE.values():
        elementwise = sp.is_alu or sp.op in (Ops.BITCAST,)
        if not elementwise or sp.arg is not ArgKind.NONE:
            continue
        n = sp.arity[0]
        xs = [f"x{i}" for i in range(n)]
        rewrite(
            rs,
            f"at-{sp.egg_name.lower()}",
            f"(At ({sp.egg_name} d {' '.join(xs)}) idx g)",
            f"({sp.egg_name} d {' '.join(f'(At {x} idx g)' for x in xs)})",
            category="elementwise",
            check="structural",
            doc=f"{sp.egg_name} read at an index is {sp.egg_name} of its {'operand' if n == 1 else 'operands'} "
            "read at that index (same gate)",
        )
    for sp in OP_TABLE.values():
        if sp.category is Category.MARKER and sp.op is not Ops.CONTIGUOUS:
            rewrite(
                rs,
                f"at-{sp.egg_name.lower()}",
                f"(At ({sp.egg_name} d x) idx g)",
                "(At x idx g)",
                category="marker",
                check="structural",
                doc=f"{sp.egg_name} leaves values unchanged: reading it at an index reads its operand there",
            )
    # CONTIGUOUS is a barrier: its value is computed only in its own kernel (at its own output ranges); every
    # other read loads its buffer (`materialize`). A scalar one has no buffer and no ranges: it is a plain marker.
    rule(
        rs,
        "at-contiguous-own",
        ["(= e (At t rs g))", "(= t (CONTIGUOUS d x))", "(= rs (OutIx t s k))"],
        ["(union e (At x rs g))"],
        category="marker",
        check="structural",
        doc="CONTIGUOUS read at its own kernel's output index computes its operand there (a barrier elsewhere)",
    )
    rewrite(
        rs,
        "at-contiguous-scalar",
        "(At (CONTIGUOUS d x) (UNil) g)",
        "(At x (UNil) g)",
        category="marker",
        check="structural",
        doc="a scalar CONTIGUOUS has no buffer of its own",
    )


def _index_helpers(rs: RuleSet) -> None:
    c = "index-helper"
    rule(
        rs,
        "shape-tail",
        ["(is-shape (ICons n s))"],
        ["(is-shape s)"],
        category=c,
        check="structural",
        doc="every tail of a shape is a shape too (so its product gets computed)",
    )
    rule(
        rs,
        "prod-nil",
        ["(is-shape l)", "(= l (INil))"],
        ["(set (prod l) 1)"],
        category=c,
        check="structural",
        doc="the product of the empty shape is 1",
    )
    rule(
        rs,
        "prod-cons",
        ["(is-shape l)", "(= l (ICons n s))", "(= p (prod s))"],
        ["(set (prod l) (* n p))"],
        category=c,
        check="structural",
        doc="the product of a shape is its first size times the product of the rest",
    )
    rule(
        rs,
        "flat-step",
        ["(= e (Flat l (ICons n s)))", "(= l (UCons i r))", "(= p (prod s))"],
        [f"(union e (ADD {IX} (MUL {IX} i {ik('p')}) (Flat r s)))"],
        category=c,
        check="structural",
        doc="row-major linearization: sum of index times stride",
    )
    rewrite(
        rs,
        "flat-end",
        "(Flat (UNil) (INil))",
        ik(0),
        category=c,
        check="structural",
        doc="flattening an empty index list gives offset 0",
    )
    rule(
        rs,
        "unflat-step",
        ["(= e (Unflat x (ICons n s)))", "(= p (prod s))", "(> p 1)"],
        [f"(union e (UCons (MOD {IX} (IDIV {IX} x {ik('p')}) {ik('n')}) (Unflat x s)))"],
        category=c,
        check="structural",
        doc="unflatten: an axis of size n and stride p > 1 is (x // p) % n of the linear index x",
    )
    rule(
        rs,
        "unflat-last",
        ["(= e (Unflat x (ICons n s)))", "(= p (prod s))", "(= p 1)"],
        [f"(union e (UCons (MOD {IX} x {ik('n')}) (Unflat x s)))"],
        category=c,
        check="structural",
        doc="unflatten: an axis of size n and stride 1 is x % n (no division needed)",
    )
    rewrite(
        rs,
        "unflat-end",
        "(Unflat x (INil))",
        "(UNil)",
        category=c,
        check="structural",
        doc="unflattening into the empty shape gives no indices",
    )
    rule(
        rs,
        "bcast-one",
        ["(= e (Bcast l (ICons 1 s)))", "(= l (UCons i r))"],
        [f"(union e (UCons {ik(0)} (Bcast r s)))"],
        category=c,
        check="structural",
        doc="expand: a size-1 source axis (broadcast) is read at index 0",
    )
    rule(
        rs,
        "bcast-keep",
        ["(= e (Bcast l (ICons n s)))", "(!= n 1)", "(= l (UCons i r))"],
        ["(union e (UCons i (Bcast r s)))"],
        category=c,
        check="structural",
        doc="expand: a source axis of size other than 1 keeps its index",
    )
    rewrite(
        rs,
        "bcast-end",
        "(Bcast l (INil))",
        "(UNil)",
        category=c,
        check="structural",
        doc="expand: no source axes left, no indices",
    )
    rule(
        rs,
        "offs-step",
        ["(= e (Offs l (ICons a (ICons b p))))", "(= l (UCons i r))"],
        [f"(union e (UCons (ADD {IX} i {ik('a')}) (Offs r p)))"],
        category=c,
        check="structural",
        doc="shrink: each axis's index is offset by that axis's shrink start",
    )
    rewrite(rs, "offs-end", "(Offs l (INil))", "(UNil)", category=c, check="structural", doc="shrink: no axes left, no indices")
    rule(
        rs,
        "padix-step",
        ["(= e (PadIx l (ICons a (ICons b p))))", "(= l (UCons i r))"],
        [f"(union e (UCons (ADD {IX} i {ik('(- 0 a)')}) (PadIx r p)))"],
        category=c,
        check="structural",
        doc="pad: each axis's index is shifted back by the padding before it",
    )
    rewrite(rs, "padix-end", "(PadIx l (INil))", "(UNil)", category=c, check="structural", doc="pad: no axes left, no indices")
    rule(
        rs,
        "padvalid-step",
        ["(= e (PadValid l (ICons a (ICons b p)) (ICons n s)))", "(= l (UCons i r))"],
        [
            f'(union e (AND "bool" (AND "bool" (CMPLT "bool" {ik("(- a 1)")} i) (CMPLT "bool" i {ik("(+ a n)")})) '
            "(PadValid r p s)))"
        ],
        category=c,
        check="structural",
        doc="pad validity: lo <= i < lo + n (n the source size) on every axis, ANDed together",
    )
    rewrite(
        rs,
        "padvalid-end",
        "(PadValid l (INil) (INil))",
        TRUE,
        category=c,
        check="structural",
        doc="pad validity over no axes is true",
    )
    rule(
        rs,
        "flip-step",
        ["(= e (FlipIx l (ICons 1 f) (ICons n s)))", "(= l (UCons i r))"],
        [f"(union e (UCons (ADD {IX} {ik('(- n 1)')} (MUL {IX} i {ik(-1)})) (FlipIx r f s)))"],
        category=c,
        check="structural",
        doc="flip: a flipped axis of size n reads index n-1-i",
    )
    rule(
        rs,
        "flip-keep",
        ["(= e (FlipIx l (ICons 0 f) (ICons n s)))", "(= l (UCons i r))"],
        ["(union e (UCons i (FlipIx r f s)))"],
        category=c,
        check="structural",
        doc="flip: an axis that is not flipped keeps its index",
    )
    rewrite(
        rs,
        "flip-end",
        "(FlipIx l (INil) (INil))",
        "(UNil)",
        category=c,
        check="structural",
        doc="flip: no axes left, no indices",
    )
    rewrite(
        rs,
        "pick-step",
        "(Pick l (ICons p r))",
        "(UCons (Get l p) (Pick l r))",
        category=c,
        check="structural",
        doc="permute: each source axis takes the output index at its inverse-permutation position",
    )
    rewrite(
        rs,
        "pick-end",
        "(Pick l (INil))",
        "(UNil)",
        category=c,
        check="structural",
        doc="permute: no positions left to pick, no indices",
    )
    rule(
        rs,
        "regroup-keep",
        ["(= e (Regroup l (GCons (GKeep) rest)))", "(= l (UCons i r))"],
        ["(union e (UCons i (Regroup r rest)))"],
        category=c,
        check="structural",
        doc="reshape: an axis kept as is passes its index through",
    )
    rule(
        rs,
        "regroup-new-unit",
        ["(= e (Regroup l (GCons (GNewUnit) rest)))", "(= l (UCons i r))"],
        ["(union e (Regroup r rest))"],
        category=c,
        check="structural",
        doc="reshape: a new size-1 axis indexes nothing (its index is dropped)",
    )
    rewrite(
        rs,
        "regroup-old-unit",
        "(Regroup l (GCons (GOldUnit) rest))",
        f"(UCons {ik(0)} (Regroup l rest))",
        category=c,
        check="structural",
        doc="reshape: a dropped size-1 source axis is indexed by 0",
    )
    rewrite(
        rs,
        "regroup-mix",
        "(Regroup l (GCons (GMix nd od) rest))",
        "(Append (Unflat (Flat (TakeL l nd) nd) od) (Regroup (DropL l nd) rest))",
        category=c,
        check="structural",
        doc="reshape: axes that merge or split: flatten the new indices, unflatten with the old sizes",
    )
    rewrite(
        rs,
        "regroup-end",
        "(Regroup l (GNil))",
        "(UNil)",
        category=c,
        check="structural",
        doc="reshape: the plan is done, no indices left",
    )
    rule(
        rs,
        "take-step",
        ["(= e (TakeL l (ICons n s)))", "(= l (UCons i r))"],
        ["(union e (UCons i (TakeL r s)))"],
        category=c,
        check="structural",
        doc="take as many leading indices as sizes in the list: keep the head, take from the tail",
    )
    rewrite(
        rs,
        "take-end",
        "(TakeL l (INil))",
        "(UNil)",
        category=c,
        check="structural",
        doc="taking for an empty size list gives no indices",
    )
    rule(
        rs,
        "drop-step",
        ["(= e (DropL l (ICons n s)))", "(= l (UCons i r))"],
        ["(union e (DropL r s))"],
        category=c,
        check="structural",
        doc="drop as many leading indices as sizes in the list: drop the head, drop from the tail",
    )
    rewrite(
        rs,
        "drop-end",
        "(DropL l (INil))",
        "l",
        category=c,
        check="structural",
        doc="dropping for an empty size list leaves the index list as is",
    )
    rule(
        rs,
        "append-step",
        ["(= e (Append l m))", "(= l (UCons a r))"],
        ["(union e (UCons a (Append r m)))"],
        category=c,
        check="structural",
        doc="appending index lists: keep the first list's head, append its tail",
    )
    rewrite(
        rs,
        "append-end",
        "(Append (UNil) m)",
        "m",
        category=c,
        check="structural",
        doc="appending to the empty list gives the other list",
    )
    rule(
        rs,
        "get-head",
        ["(= e (Get l 0))", "(= l (UCons a r))"],
        ["(union e a)"],
        category=c,
        check="structural",
        doc="element 0 of an index list is its head",
    )
    rule(
        rs,
        "get-tail",
        ["(= e (Get l k))", "(> k 0)", "(= l (UCons a r))"],
        ["(union e (Get r (- k 1)))"],
        category=c,
        check="structural",
        doc="element k > 0 of an index list is element k-1 of its tail",
    )


def _range(kind: str, t: str, k: str, n: str) -> str:
    key = "RKOut" if kind == "L" else "RKRed"
    return f'(RANGE {IX} ({key} {t} {k}) "{kind}" {ik(n)})'


def _ranges(rs: RuleSet) -> None:
    c = "range"
    rule(
        rs,
        "redix-range",
        ["(= e (RedIx l (ICons n s) (ICons 1 f) t k))", "(= l (UCons i r))"],
        [f"(union e (UCons {_range('R', 't', 'k', 'n')} (RedIx r s f t (+ k 1))))"],
        category=c,
        check="structural",
        doc="a reduced axis is indexed by the reduce range named (t, k)",
    )
    rule(
        rs,
        "redix-keep",
        ["(= e (RedIx l (ICons n s) (ICons 0 f) t k))", "(= l (UCons i r))"],
        ["(union e (UCons i (RedIx r s f t (+ k 1))))"],
        category=c,
        check="structural",
        doc="an axis the reduce keeps is read at the output index",
    )
    rewrite(
        rs,
        "redix-end",
        "(RedIx l (INil) (INil) t k)",
        "(UNil)",
        category=c,
        check="structural",
        doc="reduce source index: no axes left, no indices",
    )
    rule(
        rs,
        "redranges-range",
        ["(= e (RedRanges (ICons n s) (ICons 1 f) t k))"],
        [f"(union e (UCons {_range('R', 't', 'k', 'n')} (RedRanges s f t (+ k 1))))"],
        category=c,
        check="structural",
        doc="reduced axis k of the REDUCE t gets its reduce range (t, k) of size n",
    )
    rule(
        rs,
        "redranges-skip",
        ["(= e (RedRanges (ICons n s) (ICons 0 f) t k))"],
        ["(union e (RedRanges s f t (+ k 1)))"],
        category=c,
        check="structural",
        doc="an axis the REDUCE keeps gets no reduce range",
    )
    rewrite(
        rs,
        "redranges-end",
        "(RedRanges (INil) (INil) t k)",
        "(UNil)",
        category=c,
        check="structural",
        doc="reduce ranges: no axes left, no ranges",
    )
    # a kernel loops over its output's axes but a size-1 one, which its index reads as 0: no loop of one trip
    # sits between two others (a materialized reduce keeps its reduced axis), so every loop order is a swap away
    rule(
        rs,
        "outranges-range",
        ["(= e (OutRanges t (ICons n s) k))", "(!= n 1)"],
        [f"(union e (UCons {_range('L', 't', 'k', 'n')} (OutRanges t s (+ k 1))))"],
        category=c,
        check="structural",
        doc="a loop range for output axis k (size n != 1) of t's kernel",
    )
    rewrite(
        rs,
        "outranges-unit",
        "(OutRanges t (ICons 1 s) k)",
        "(OutRanges t s (+ k 1))",
        category=c,
        check="structural",
        doc="a size-1 output axis needs no loop",
    )
    rewrite(
        rs,
        "outranges-end",
        "(OutRanges t (INil) k)",
        "(UNil)",
        category=c,
        check="structural",
        doc="output ranges: no axes left, no ranges",
    )
    rule(
        rs,
        "outix-range",
        ["(= e (OutIx t (ICons n s) k))", "(!= n 1)"],
        [f"(union e (UCons {_range('L', 't', 'k', 'n')} (OutIx t s (+ k 1))))"],
        category=c,
        check="structural",
        doc="t's kernel indexes output axis k by its range",
    )
    rewrite(
        rs,
        "outix-unit",
        "(OutIx t (ICons 1 s) k)",
        f"(UCons {ik(0)} (OutIx t s (+ k 1)))",
        category=c,
        check="structural",
        doc="t's kernel indexes a size-1 output axis by 0 (it has no loop)",
    )
    rewrite(
        rs,
        "outix-end",
        "(OutIx t (INil) k)",
        "(UNil)",
        category=c,
        check="structural",
        doc="t's kernel output index: no axes left, no indices",
    )


def _movement(rs: RuleSet) -> None:
    c = "movement"
    rewrite(
        rs,
        "at-const",
        "(At (CONST d v) idx g)",
        "(CONST d v)",
        category=c,
        check="structural",
        doc="a constant reads the same at every index",
    )
    rewrite(
        rs,
        "at-variable",
        "(At (DEFINE_VAR d nm a b) idx g)",
        "(DEFINE_VAR d nm a b)",
        category=c,
        check="structural",
        doc="a symbolic variable (DEFINE_VAR) reads the same at every index",
    )
    rule(
        rs,
        "at-reshape",
        ["(= e (At t idx g))", "(= t (RESHAPE d new x))", "(= pl (reshape-plan t))"],
        ["(union e (At x (Regroup idx pl) g))"],
        category=c,
        check="structural",
        doc="reshape: regroup the index by the reshape plan (flatten new axes, unflatten into old ones)",
    )
    rule(
        rs,
        "at-expand",
        ["(= e (At t idx g))", "(= t (EXPAND d new x))", "(= sx (shape x))"],
        ["(union e (At x (Bcast idx sx) g))"],
        category=c,
        check="structural",
        doc="expand: read the source with broadcast (size-1 source) axes indexed by 0",
    )
    rule(
        rs,
        "at-permute",
        ["(= e (At t idx g))", "(= t (PERMUTE d p x))", "(= ip (invperm t))"],
        ["(union e (At x (Pick idx ip) g))"],
        category=c,
        check="structural",
        doc="permute: read the source at the index reordered by the inverse permutation",
    )
    rule(
        rs,
        "at-flip",
        ["(= e (At t idx g))", "(= t (FLIP d fl x))", "(= sx (shape x))"],
        ["(union e (At x (FlipIx idx fl sx) g))"],
        category=c,
        check="structural",
        doc="flip: read the source at n-1-i on every flipped axis",
    )
    rule(
        rs,
        "at-shrink",
        ["(= e (At t idx g))", "(= t (SHRINK d pr x))"],
        ["(union e (At x (Offs idx pr) g))"],
        category=c,
        check="structural",
        doc="shrink: read the source at the index offset by each axis's start",
    )
    rule(
        rs,
        "at-pad",
        ["(= e (At t idx g))", "(= t (PAD d pr x))", "(= sx (shape x))", "(= z (zero d))"],
        ["(let v (PadValid idx pr sx))", '(union e (WHERE d v (At x (PadIx idx pr) (AND "bool" g v)) (CONST d z)))'],
        category=c,
        check="structural",
        doc="padding reads zero outside; loads inside are gated by validity",
    )
    # one head, two gates: a REDUCE read at an index of output ranges alone (any REDUCE), or at any index (one the
    # caller marks `inline-anywhere`; see _contexts)
    for name, gate, doc in (
        (
            "at-reduce",
            "(out-index-list idx)",
            "a REDUCE read at an index of output ranges alone becomes a loop over its reduced axes at that index",
        ),
        (
            "at-reduce-anywhere",
            "(inline-anywhere t)",
            "a REDUCE the caller marks (one of no other REDUCE; every one under a memory limit) read at any index "
            "becomes a loop over its reduced axes there",
        ),
    ):
        rule(
            rs,
            name,
            ["(= e (At t idx g))", "(= t (REDUCE d op ax (UCons x (UNil))))", gate, "(= sx (shape x))", "(= f (rmask t))"],
            ["(union e (REDUCE d op (INil) (UCons (At x (RedIx idx sx f t 0) g) (RedRanges sx f t 0))))"],
            category="reduce",
            check="structural",
            doc=doc,
        )
    rule(
        rs,
        "at-buffer",
        ["(= e (At t idx g))", "(= t (BUFFER d nm shp bs))", "(in-buf t b)", "(= z (zero d))"],
        [f"(union e {load('d', 'b', '(Flat idx shp)', 'g')})"],
        category="memory",
        check="structural",
        doc="an input BUFFER read at an index is a gated LOAD of its buffer at the flattened index",
    )
    rewrite(
        rs,
        "load-ungate",
        f"(LOAD d (UCons p (UCons a (UCons {TRUE} (UNil)))))",
        "(LOAD d (UCons p (UNil)))",
        category="memory",
        check="structural",
        doc="a load gated by true needs no gate",
    )


def _contexts(rs: RuleSet) -> None:
    """Which index expressions use output ranges alone (no reduce range): a REDUCE is offered inline only at
    such an index. Read inside another REDUCE's loop at an index that mentions that loop's range (a matmul's
    operand that is itself a matmul), it would be recomputed for every output element the index leaves out, and
    each inline expansion offers the REDUCEs it reads in turn: a chain of matmuls grew its e-graph with the
    square of its depth, for alternatives the fusion search always refused. Its buffer (`materialize`) is the
    alternative there. The caller marks REDUCEs offered everywhere (`inline-anywhere`): one that reads no other (a
    sum of a sum of an input), whose expansion offers nothing below it, so the e-graph stays linear; and under a
    memory limit, every one: recomputing may be what frees the bytes the limit asks for."""
    c = "reduce"
    rule(
        rs,
        "outindex-const",
        [f"(= e (CONST {IX} v))"],
        ["(out-index e)"],
        category=c,
        check="structural",
        doc="a constant index uses no reduce range",
    )
    rule(
        rs,
        "outindex-range",
        [f'(= e (RANGE {IX} (RKOut t k) "L" n))'],
        ["(out-index e)"],
        category=c,
        check="structural",
        doc="an output range is an output range",
    )
    for op in ("ADD", "MUL", "IDIV", "MOD"):
        rule(
            rs,
            f"outindex-{op.lower()}",
            [f"(= e ({op} {IX} a b))", "(out-index a)", "(out-index b)"],
            ["(out-index e)"],
            category=c,
            check="structural",
            doc=f"{op} of indices that use output ranges alone uses output ranges alone",
        )
    rule(
        rs,
        "outindex-nil",
        ["(= e (UNil))"],
        ["(out-index-list e)"],
        category=c,
        check="structural",
        doc="an empty index list uses no reduce range",
    )
    rule(
        rs,
        "outindex-cons",
        ["(= e (UCons i r))", "(out-index i)", "(out-index-list r)"],
        ["(out-index-list e)"],
        category=c,
        check="structural",
        doc="an index list uses output ranges alone when its head and tail do",
    )


def _kernels(rs: RuleSet) -> None:
    c = "fusion"
    index = f"(INDEX d {ul('b', '(Flat ix s)')})"
    store = f"(STORE {VOID} {ul(index, f'(At t ix {TRUE})')})"
    rule(
        rs,
        "kernel-of",
        ["(= kk (KernelOf t b))", "(= s (shape t))", "(= s (ICons n0 s0))", "(= b (BUFFER d nm sz bs))"],
        [
            "(let ix (OutIx t s 0))",
            "(let rs (OutRanges t s 0))",
            f"(union kk (SINK {VOID} {ul(f'(END {VOID} (UCons {store} rs))')}))",
        ],
        category=c,
        check="structural",
        doc="t's kernel: loop over its output ranges, storing every element of t into its buffer",
    )
    rule(
        rs,
        "kernel-of-scalar",
        ["(= kk (KernelOf t b))", "(= s (shape t))", "(= s (INil))", "(= b (BUFFER d nm sz bs))"],
        ["(let ix (UNil))", f"(union kk (SINK {VOID} {ul(store)}))"],
        category=c,
        check="structural",
        doc="a scalar t's kernel: a single STORE of t into its buffer, no loops",
    )
    rule(
        rs,
        "materialize",
        ["(= e (At t idx g))", "(mat-buf t b)", "(= b (BUFFER d nm sz bs))", "(= s (shape t))", "(= z (zero d))"],
        [f"(union e {load('d', '(AFTER d (UCons b (UCons (KernelOf t b) (UNil))))', '(Flat idx s)', 'g')})"],
        category=c,
        check="structural",
        doc="alternative to recomputing t inline: read it from its own kernel's buffer",
    )


def build() -> RuleSet:
    rs = RuleSet("rangeify")
    _distribute(rs)
    _index_helpers(rs)
    _ranges(rs)
    _movement(rs)
    _contexts(rs)
    _kernels(rs)
    return rs


RANGEIFY = build()
