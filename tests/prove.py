"""Soundness checks for rules, read from the rules' own egglog text.

Integer/boolean rules are proved with Z3: every pattern variable becomes a
symbol, every fact in the body an assumption, every action in the head a
proof goal (`union` -> equal values, `set lo/hi` -> a valid bound,
`set lin` -> the form equals the class, created constants -> in range).
A rule is proved once for each dtype its patterns can match: fixed-width
integers as bit-vectors (two's complement wraparound), `index` as unbounded
integers (index arithmetic is assumed not to overflow int64), bool as Z3
booleans. IDIV/MOD are floor division and remainder, as the spec defines.

Helper sorts of the linear forms have value semantics: Terms/Lin are sums of
index atoms, and the helpers that only exist under a condition (tsplit,
tdivexact, tdivsym, pdiv, lin) are specified by an equation that is assumed
where the rule matches them and is the goal where the rule defines them.

Float rules are checked by random evaluation against the op table's numpy
semantics. z3 is a test dependency; this module imports it lazily.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from egraph_compiler.egraph.dsl import Rule
from egraph_compiler.egraph.schema import ARG_FIELDS, EGG_TO_OP, constructor_fields, fixed_arity, schema_program
from egraph_compiler.ir.dtypes import DType, dtypes, to_dtype
from egraph_compiler.ir.floordiv import DivFacts, floor_divide
from egraph_compiler.ir.ops import OP_TABLE, Ops

# ---- s-expressions -------------------------------------------------------------------------------

_TOK = re.compile(r'\s*(?:(;[^\n]*)|(\()|(\))|("(?:[^"\\]|\\.)*")|([^\s()";]+))')


@dataclass(frozen=True)
class Str:
    v: str


SExpr = Any  # str symbol | int | float | Str | list[SExpr]


def parse_sexprs(text: str) -> list[SExpr]:
    stack: list[list[SExpr]] = [[]]
    pos = 0
    while pos < len(text):
        m = _TOK.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"cannot parse near {text[pos : pos + 30]!r}")
        pos = m.end()
        comment, lp, rp, s, atom = m.groups()
        if comment:
            continue
        if lp:
            stack.append([])
        elif rp:
            done = stack.pop()
            stack[-1].append(done)
        elif s is not None:
            stack[-1].append(Str(s[1:-1].encode().decode("unicode_escape")))
        elif atom is not None:
            stack[-1].append(_atom(atom))
    return stack[0]


def _atom(a: str) -> SExpr:
    if re.fullmatch(r"-?\d+", a):
        return int(a)
    if re.fullmatch(r"-?(\d+\.\d*|\d*\.\d+|\d+)(e[-+]?\d+)?|-?inf|NaN", a):
        return float(a)
    return a


# ---- signatures of constructors, functions and relations -----------------------------------------


@dataclass
class Signatures:
    constructors: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    functions: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    relations: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def read(self, text: str) -> None:
        for form in parse_sexprs(text):
            if not isinstance(form, list) or not form:
                continue
            head = form[0]
            if head == "constructor":
                self.constructors[form[1]] = (tuple(form[2]), form[3])
            elif head == "function":
                self.functions[form[1]] = (tuple(form[2]), form[3])
            elif head == "relation":
                self.relations[form[1]] = tuple(form[2])
            elif head == "datatype":
                for v in form[2:]:
                    self.constructors[v[0]] = (tuple(v[1:]), form[1])


def signatures(*declarations: str) -> Signatures:
    sig = Signatures()
    sig.read(schema_program())
    for d in declarations:
        sig.read(d)
    return sig


# ---- dtype inference -----------------------------------------------------------------------------

# Fixed-width rules are width-generic (they read dt-bits/dt-min/dt-max), so they are proved at 8 bits, signed and
# unsigned, where wraparound is cheap to decide; index is proved with unbounded integers.
INT_DOMAIN = (dtypes.index, dtypes.int8, dtypes.uint8)
ALL_DOMAIN = (*INT_DOMAIN, dtypes.bool, dtypes.float32)
DT_RELATIONS = {
    "dt-int": lambda d: d.is_int,
    "dt-bool": lambda d: d.is_bool,
    "dt-intlike": lambda d: d.is_int or d.is_bool,
    "dt-float": lambda d: d.is_float,
    "dt-signed": lambda d: d.kind == "i",
    "dt-unsigned": lambda d: d.kind == "u",
}


class _UF:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


_DT_RULE_KIND = {}


def _dt_kind(op: Ops) -> str:
    if op not in _DT_RULE_KIND:
        name = getattr(OP_TABLE[op].dtype_rule, "__name__", "")
        _DT_RULE_KIND[op] = {
            "_dt_cmp": "cmp",
            "_dt_where": "where",
            "_dt_given": "given",
            "_dt_bool": "bool",
            "_dt_index": "index",
            "_dt_void": "void",
        }.get(name, "same")
    return _DT_RULE_KIND[op]


def _dt_allowed(op: Ops) -> Any:
    name = getattr(OP_TABLE[op].dtype_rule, "__name__", "")
    return {
        "_dt_int": lambda d: d.is_int,
        "_dt_int_or_bool": lambda d: d.is_int or d.is_bool,
        "_dt_float_unary": lambda d: d.is_float,
        "_dt_float_binary": lambda d: d.is_float,
    }.get(name)


class Typing:
    """Dtype slots of a rule: one per dtype variable, dtype literal and U-valued term or variable."""

    def __init__(self, sig: Signatures) -> None:
        self.sig = sig
        self.uf = _UF()
        self.fixed: dict[str, DType] = {}
        self.filters: dict[str, list[Any]] = {}
        self.sorts: dict[str, str] = {}  # variable -> sort
        self.counter = itertools.count()

    def slot_of_var(self, v: str) -> str:
        return self.uf.find(f"v:{v}")

    def literal(self, name: str) -> str:
        s = f"lit:{name}"
        self.fixed[s] = to_dtype(name)
        return self.uf.find(s)

    def dtype_slot(self, x: SExpr) -> str:
        if isinstance(x, Str):
            return self.literal(x.v)
        return self.uf.find(f"v:{x}")

    def fresh(self) -> str:
        return f"t:{next(self.counter)}"

    def note_sort(self, v: str, sort: str) -> None:
        if v in self.sorts and self.sorts[v] != sort and {self.sorts[v], sort} != {"?", sort}:
            raise ValueError(f"variable {v} used as {self.sorts[v]} and {sort}")
        self.sorts[v] = sort

    def filt(self, slot: str, pred: Any) -> None:
        self.filters.setdefault(slot, []).append(pred)

    def term(self, t: SExpr, sort: str) -> str | None:
        """Walk a term of the given sort; returns its dtype slot for U-valued terms."""
        if isinstance(t, str):
            self.note_sort(t, sort)
            return self.slot_of_var(t) if sort == "U" else None
        if not isinstance(t, list):
            return None
        head = t[0]
        if head in EGG_TO_OP:
            return self._op(t)
        if head in self.sig.constructors:
            args, res = self.sig.constructors[head]
            slots = [self.term(a, s) for a, s in zip(t[1:], args)]
            if head not in ("I", "F", "UCons", "ICons", "RK"):
                # helpers of the linear forms work on index values only
                for s, sl in zip(args, slots):
                    if s == "U" and sl is not None:
                        self.uf.union(sl, self.literal("index"))
                if res == "U":
                    out = self.fresh()
                    self.uf.union(out, self.literal("index"))
                    return self.uf.find(out)
            return None
        if head in self.sig.functions:
            args, res = self.sig.functions[head]
            for a, s in zip(t[1:], args):
                sl = self.term(a, s)
                if head in ("lin", "lvl") and sl is not None:
                    self.uf.union(sl, self.literal("index"))
            return None
        if head == "ordering-max":  # sort-polymorphic; no value meaning
            slots = [self.term(a, sort) for a in t[1:]]
            return slots[0]
        for a in t[1:]:  # primitive
            self.term(a, "i64" if sort != "f64" else "f64")
        return None

    def _op(self, t: list[SExpr]) -> str:
        op = EGG_TO_OP[t[0]]
        sp = OP_TABLE[op]
        fields = constructor_fields(sp)
        node = self.dtype_slot(t[1])
        if isinstance(t[1], str):
            self.note_sort(t[1], "String")
        nargs = len(ARG_FIELDS[sp.arg])
        for a, s in zip(t[2 : 2 + nargs], fields[1 : 1 + nargs]):
            if s == "Val" and isinstance(a, list):
                if a[0] == "I":
                    self.filt(node, lambda d: not d.is_float)
                elif a[0] == "F":
                    self.filt(node, lambda d: d.is_float)
                self.term(a[1], "i64" if a[0] == "I" else "f64")
            else:
                self.term(a, s)
        srcs = [self.term(a, s) for a, s in zip(t[2 + nargs :], fields[1 + nargs :])]
        kind = _dt_kind(op)
        if (allowed := _dt_allowed(op)) is not None:
            self.filt(node, allowed)
        usrc = [s for s in srcs if s is not None]
        if sp.is_alu:
            if kind == "same":
                for s in usrc:
                    self.uf.union(s, node)
            elif kind == "cmp":
                self.uf.union(node, self.literal("bool"))
                if len(usrc) == 2:
                    self.uf.union(usrc[0], usrc[1])
            elif kind == "where":
                self.uf.union(usrc[0], self.literal("bool"))
                self.uf.union(usrc[1], node)
                self.uf.union(usrc[2], node)
        if kind == "index":
            self.uf.union(node, self.literal("index"))
        return self.uf.find(node)

    def fact(self, f: SExpr) -> None:
        if not isinstance(f, list):
            return
        head = f[0]
        if head in DT_RELATIONS:
            self.filt(self.dtype_slot(f[1]), DT_RELATIONS[head])
            if isinstance(f[1], str):
                self.note_sort(f[1], "String")
            return
        if head in ("=", "!=") and len(f) == 3:
            a, b = f[1], f[2]
            if head == "=" and isinstance(b, list) and b and b[0] == "dtype-of":
                self.note_sort(a, "String")
                xs = self.term(b[1], "U")
                assert xs is not None
                self.uf.union(self.dtype_slot(a), xs)
                return
            if isinstance(a, Str) or isinstance(b, Str):
                var, lit = (a, b) if isinstance(b, Str) else (b, a)
                if head == "=":
                    self.uf.union(self.dtype_slot(var), self.literal(lit.v))
                else:
                    self.filt(self.dtype_slot(var), lambda d, n=lit.v: d.name != n)
                self.note_sort(var, "String")
                return
            sa = self._sort_of(a)
            sb = self._sort_of(b)
            sort = sa if sa != "?" else sb
            x, y = self.term(a, sort), self.term(b, sort)
            if head == "=" and x is not None and y is not None:
                self.uf.union(x, y)
            return
        if head in self.sig.relations:
            for a, s in zip(f[1:], self.sig.relations[head]):
                sl = self.term(a, s)
                if head in ("has-term", "has-factor") and sl is not None:
                    self.uf.union(sl, self.literal("index"))
            return
        for a in f[1:]:
            self.term(a, "i64")

    def _sort_of(self, t: SExpr) -> str:
        if isinstance(t, str):
            return self.sorts.get(t, "?")
        if isinstance(t, int):
            return "i64"
        if isinstance(t, float):
            return "f64"
        if isinstance(t, list) and t:
            h = t[0]
            if h in EGG_TO_OP:
                return "U"
            if h in self.sig.constructors:
                return self.sig.constructors[h][1]
            if h in self.sig.functions:
                return self.sig.functions[h][1]
            return "i64"
        return "?"

    def assignments(self, domain: tuple[DType, ...]) -> Iterator[dict[str, DType]]:
        slots = sorted({self.uf.find(s) for s in list(self.uf.parent)})
        fixed: dict[str, DType] = {}
        for s, d in self.fixed.items():
            r = self.uf.find(s)
            if r in fixed and fixed[r] != d:
                return  # contradictory literals: the rule never matches
            fixed[r] = d
        filters: dict[str, list[Any]] = {}
        for s, fs in self.filters.items():
            filters.setdefault(self.uf.find(s), []).extend(fs)
        free = [s for s in slots if s not in fixed]
        choices = []
        for s in free:
            opts = [d for d in domain if all(f(d) for f in filters.get(s, []))]
            if not opts:
                return
            choices.append(opts)
        if any(not all(f(fixed[s]) for f in filters.get(s, [])) for s in fixed):
            return
        for combo in itertools.product(*choices):
            yield {**fixed, **dict(zip(free, combo))}


# ---- Z3 semantics --------------------------------------------------------------------------------


class Unsupported(Exception):  # noqa: N818 - a verdict, not an error
    pass


class Z3Model:
    def __init__(self, rule: Rule, typing: Typing, assign: dict[str, DType], sig: Signatures) -> None:
        import z3

        self.z3 = z3
        self.rule = rule
        self.typing = typing
        self.assign = assign
        self.sig = sig
        self.syms: dict[str, Any] = {}
        self.assumptions: list[Any] = []
        self.goals: list[Any] = []
        self.fresh_n = itertools.count()
        self.specs: dict[str, tuple[str, list[Any]]] = {}  # variable bound to a spec-defined helper
        self.memo_opaque: dict[str, Any] = {}
        self.bv = False  # integers as bit-vectors of their width (index: 64), for bitwise identities

    # domains
    def dtype_of_slot(self, slot: str) -> DType:
        return self.assign[self.typing.uf.find(slot)]

    def var_dtype(self, v: str) -> DType:
        return self.dtype_of_slot(self.typing.slot_of_var(v))

    def dtype_lit(self, x: SExpr) -> DType:
        return self.dtype_of_slot(self.typing.dtype_slot(x))

    def mk(self, name: str, d: DType) -> Any:
        """A value of dtype d: Z3 Bool for bool, else an integer inside the dtype's range (index: int64)."""
        z3 = self.z3
        if d.is_float:
            raise Unsupported("float value")
        if d.is_bool:
            return z3.Bool(name)
        if self.bv:
            return z3.BitVec(name, 64 if d is dtypes.index else d.bits)
        v = z3.Int(name)
        self.assumptions.append(self.in_range(v, d if d is not dtypes.index else dtypes.int64))
        return v

    def fresh_val(self, d: DType, tag: str = "f") -> Any:
        return self.mk(f"{tag}{next(self.fresh_n)}", d)

    def to_int(self, v: Any, d: DType) -> Any:
        if d.is_bool:
            return self.z3.If(v, self.z3.IntVal(1), self.z3.IntVal(0))
        return self.z3.BV2Int(v, is_signed=d.kind == "i") if self.bv else v

    def from_int(self, i: Any, d: DType) -> Any:
        """An integer result as a value of dtype d: bools test != 0, fixed widths wrap around, index does not."""
        if d.is_bool:
            return i != 0
        if self.bv:
            return self.z3.Int2BV(i, 64 if d is dtypes.index else d.bits)
        return i if d is dtypes.index else self.wrap(i, d)

    def wrap(self, i: Any, d: DType) -> Any:
        lo, m = int(d.min), 1 << d.bits
        return (i - lo) % m + lo

    def in_range(self, i: Any, d: DType) -> Any:
        if d.is_bool:
            return self.z3.And(i >= 0, i <= 1)
        return self.z3.And(i >= int(d.min), i <= int(min(d.max, (1 << 63) - 1)) if d is not dtypes.uint64 else i <= int(d.max))

    def sym(self, v: str, sort: str) -> Any:
        if v not in self.syms:
            z3 = self.z3
            if sort == "U":
                self.syms[v] = self.mk(f"u_{v}", self.var_dtype(v))
            elif sort in ("i64", "Terms", "Lin"):
                self.syms[v] = z3.Int(f"i_{v}")
            elif sort == "TSplit":
                self.syms[v] = (z3.Int(f"t_{v}"), z3.Int(f"q_{v}"))
            elif sort == "String":
                self.syms[v] = Str(self.var_dtype(v).name)
            else:
                raise Unsupported(f"variable of sort {sort}")
        return self.syms[v]

    # evaluation
    def ev(self, t: SExpr, sort: str) -> Any:
        z3 = self.z3
        if isinstance(t, bool):
            return t
        if isinstance(t, int):
            return z3.IntVal(t)
        if isinstance(t, float):
            raise Unsupported("float literal")
        if isinstance(t, Str):
            return t
        if isinstance(t, str):
            return self.sym(t, self.typing.sorts.get(t, sort))
        head, args = t[0], t[1:]
        if head in EGG_TO_OP:
            return self.ev_op(t)
        if head in self.sig.constructors:
            return self.ev_helper(head, args)
        if head in self.sig.functions:
            return self.ev_function(head, args)
        return self.ev_prim(head, args)

    def ev_prim(self, head: str, args: list[SExpr]) -> Any:
        z3 = self.z3
        xs = [self.ev(a, "i64") for a in args]
        if head == "+":
            return xs[0] + xs[1]
        if head == "-":
            return xs[0] - xs[1] if len(xs) == 2 else -xs[0]
        if head == "*":
            return xs[0] * xs[1]
        if head in ("/", "%"):
            a, b = xs
            q = z3.If(a * b >= 0, z3.Abs(a) / z3.Abs(b), -(z3.Abs(a) / z3.Abs(b)))  # truncating
            return q if head == "/" else a - b * q
        if head == "min":
            return z3.If(xs[0] <= xs[1], xs[0], xs[1])
        if head == "max":
            return z3.If(xs[0] >= xs[1], xs[0], xs[1])
        if head == "abs":
            return z3.Abs(xs[0])
        if head == "<<":
            return xs[0] * self.pow2(xs[1])
        if head == ">>":
            return self.floordiv(xs[0], self.pow2(xs[1]))
        if head in ("&", "|", "^"):
            a, b = (z3.Int2BV(x, 64) for x in xs)
            r = {"&": a & b, "|": a | b, "^": a ^ b}[head]
            return z3.BV2Int(r, is_signed=True)
        if head == "ordering-max":
            return self.fresh_val(dtypes.index, "ord")
        raise Unsupported(f"primitive {head}")

    def pow2(self, e: Any) -> Any:
        z3 = self.z3
        if z3.is_int_value(z3.simplify(e)):
            return z3.IntVal(1 << z3.simplify(e).as_long())
        p = z3.Int(f"pow{next(self.fresh_n)}")
        self.assumptions.append(z3.Or([z3.And(e == i, p == (1 << i)) for i in range(63)]))
        return p

    def floordiv(self, a: Any, b: Any) -> Any:
        z3 = self.z3
        return z3.If(b > 0, a / b, z3.If(b < 0, (-a) / (-b), z3.IntVal(0)))

    def ev_function(self, head: str, args: list[SExpr]) -> Any:
        z3 = self.z3
        if head in ("lo", "hi"):
            x = args[0]
            d = self.u_dtype(x)
            v = z3.Int(f"{head}{next(self.fresh_n)}")
            xi = self.to_int(self.ev(x, "U"), d)
            self.assumptions.append(v <= xi if head == "lo" else v >= xi)
            return v
        if head == "lin":
            v = z3.Int(f"lin{next(self.fresh_n)}")
            self.assumptions.append(v == self.ev(args[0], "U"))
            return v
        if head in ("dt-min", "dt-max", "dt-bits"):
            d = self.dtype_lit(args[0]) if isinstance(args[0], (str, Str)) else None
            if d is None:
                raise Unsupported("dtype function of a non-dtype")
            if head == "dt-bits":
                return z3.IntVal(d.bits if not d.is_bool else 1)
            return z3.IntVal(int(d.min) if head == "dt-min" else int(min(d.max, (1 << 63) - 1)))
        if head == "dtype-of":
            return Str(self.u_dtype(args[0]).name)
        return z3.Int(f"{head}{next(self.fresh_n)}")  # hints (lvl, tgcd, gcd): no value meaning

    def u_dtype(self, x: SExpr) -> DType:
        if isinstance(x, str):
            return self.var_dtype(x)
        if isinstance(x, list) and x[0] in EGG_TO_OP:
            return self.node_dtype(x)
        return dtypes.index

    def node_dtype(self, t: list[SExpr]) -> DType:
        return self.dtype_of_slot(self.typing._op(t))

    def ev_helper(self, head: str, args: list[SExpr]) -> Any:
        z3 = self.z3
        if head == "I":
            return self.ev(args[0], "i64")
        if head == "TNil":
            return z3.IntVal(0)
        if head == "TCons":
            return self.ev(args[1], "i64") * self.ev(args[0], "U") + self.ev(args[2], "Terms")
        if head == "L":
            return self.ev(args[0], "Terms") + self.ev(args[1], "i64")
        if head in ("ToU", "ToT"):
            return self.ev(args[0], "Lin" if head == "ToU" else "Terms")
        if head == "tmerge":
            return self.ev(args[0], "Terms") + self.ev(args[1], "Terms")
        if head == "tscale":
            return self.ev(args[0], "Terms") * self.ev(args[1], "i64")
        if head == "TS":  # value (q*Q + R, q): the split problem it answers
            q = self.ev(args[2], "i64")
            return (q * self.ev(args[0], "Terms") + self.ev(args[1], "Terms"), q)
        if head == "tsplit":
            return (self.ev(args[0], "Terms"), self.ev(args[1], "i64"))
        if head in SPEC_HELPERS:
            value = self.fresh_val(dtypes.index, head)
            self.assumptions.append(self.spec(head, args, value))
            return value
        raise Unsupported(f"helper {head}")

    def spec(self, head: str, args: list[SExpr], value: Any) -> Any:
        """The defining equation of a conditional helper applied to `args` with result `value`."""
        if head == "tdivexact":
            return self.ev(args[0], "Terms") == self.ev(args[1], "i64") * value
        if head == "tdivsym":
            return self.ev(args[0], "Terms") == self.ev(args[1], "U") * value
        if head == "pdiv":
            return self.ev(args[0], "U") == self.ev(args[1], "U") * value
        raise Unsupported(head)

    def ev_op(self, t: list[SExpr]) -> Any:
        z3 = self.z3
        op = EGG_TO_OP[t[0]]
        sp = OP_TABLE[op]
        d = self.node_dtype(t)
        nargs = len(ARG_FIELDS[sp.arg])
        fields = t[2 : 2 + nargs]
        srcs = t[2 + nargs :]
        if op is Ops.CONST:
            val = fields[0]
            if not (isinstance(val, list) and val[0] == "I"):
                raise Unsupported("non-integer constant")
            i = self.ev(val[1], "i64")
            self.assumptions.append(self.in_range(i, d))  # constants in the e-graph are canonical
            return self.from_int(i, d)
        if fixed_arity(sp) is None or not sp.is_alu:
            key = repr(t)
            if key not in self.memo_opaque:
                v = self.fresh_val(d, "op")
                self.memo_opaque[key] = v
                if op in (Ops.RANGE, Ops.SPECIAL) and isinstance(srcs[0], list):
                    n = self.to_int(self.ev(srcs[0], "U"), self.u_dtype(srcs[0]))
                    self.assumptions.append(z3.And(self.to_int(v, d) >= 0, self.to_int(v, d) < n))
                if op is Ops.DEFINE_VAR:
                    lo_, hi_ = self.ev(fields[1], "i64"), self.ev(fields[2], "i64")
                    self.assumptions.append(z3.And(self.to_int(v, d) >= lo_, self.to_int(v, d) <= hi_))
            return self.memo_opaque[key]
        xs = [self.ev(s, "U") for s in srcs]
        sd = [self.u_dtype(s) for s in srcs]
        return alu(self, op, d, sd, xs)

    # facts and actions
    def assume_fact(self, f: SExpr) -> None:
        z3 = self.z3
        head = f[0]
        if head == "has-factor":  # m has the factor f: m == f * q for some q
            m_, f_ = self.ev(f[1], "U"), self.ev(f[2], "U")
            self.assumptions.append(m_ == f_ * self.fresh_val(dtypes.index, "q"))
            return
        if head in DT_RELATIONS or head in self.sig.relations:
            return  # dtype relations are handled by typing; other relations carry no value meaning
        if head in ("=", "!=") and len(f) == 3:
            a, b = f[1], f[2]
            if isinstance(a, Str) or isinstance(b, Str) or (isinstance(b, list) and b and b[0] == "dtype-of"):
                return
            sort = self.typing._sort_of(a) if self.typing._sort_of(a) != "?" else self.typing._sort_of(b)
            if head == "!=" and sort not in ("i64",):
                return  # different e-classes may still hold equal values
            if isinstance(b, list) and b and b[0] in SPEC_HELPERS and isinstance(a, str):
                self.specs[a] = (b[0], b[1:])
            if isinstance(a, list) and a and a[0] in SPEC_HELPERS and isinstance(b, str):
                self.specs[b] = (a[0], a[1:])
            x, y = self.ev(a, sort), self.ev(b, sort)
            self.assumptions.append(_eq(z3, x, y) if head == "=" else x != y)
            return
        if head in ("<", "<=", ">", ">="):
            x, y = self.ev(f[1], "i64"), self.ev(f[2], "i64")
            self.assumptions.append({"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[head])
            return
        raise Unsupported(f"fact {head}")

    def goal_action(self, a: SExpr) -> None:
        z3 = self.z3
        head = a[0]
        if head == "union":
            x, y = a[1], a[2]
            for p, q in ((x, y), (y, x)):
                if isinstance(p, str) and p in self.specs:
                    h, args = self.specs[p]
                    self.goals.append(self.spec(h, args, self.ev(q, self._sort(q))))
                    self.check_consts(q)
                    return
            sort = self._sort(x) if self._sort(x) != "?" else self._sort(y)
            self.goals.append(_eq(z3, self.ev(x, sort), self.ev(y, sort)))
            self.check_consts(y)
            return
        if head == "set":
            target, v = a[1], a[2]
            fn = target[0]
            if fn in ("lo", "hi"):
                d = self.u_dtype(target[1])
                xi = self.to_int(self.ev(target[1], "U"), d)
                val = self.ev(v, "i64")
                self.goals.append(val <= xi if fn == "lo" else val >= xi)
            elif fn == "lin":
                self.goals.append(self.ev(target[1], "U") == self.ev(v, "Lin"))
                self.check_consts(v)
            return  # hints (lvl, tgcd, gcd, dtype-of) carry no value meaning
        # creating a term or inserting a relation fact asserts nothing

    def check_consts(self, t: SExpr) -> None:
        """Constants a rule creates must be canonical: inside their dtype's range."""
        if not isinstance(t, list) or not t:
            return
        if t[0] == "CONST" and isinstance(t[2], list) and t[2][0] == "I":
            d = self.node_dtype(t)
            self.goals.append(self.in_range(self.ev(t[2][1], "i64"), d))
        for x in t[1:]:
            self.check_consts(x)

    def _sort(self, t: SExpr) -> str:
        return self.typing._sort_of(t)


# Helpers whose value is defined only where an equation holds; every other constructor has a plain value, and a
# class's members must all have the same value (hash-consing shares nodes between classes, so a helper whose nodes
# could stand for different values would merge unrelated classes).
SPEC_HELPERS = ("tdivexact", "tdivsym", "pdiv")


def _eq(z3: Any, x: Any, y: Any) -> Any:
    if isinstance(x, tuple):
        return z3.And(x[0] == y[0], x[1] == y[1])
    if isinstance(x, Str) or isinstance(y, Str):
        return z3.BoolVal(x == y)
    return x == y


def alu(m: Z3Model, op: Ops, d: DType, sd: list[DType], xs: list[Any]) -> Any:
    """Z3 semantics of an ALU op on values of dtype d (sources of dtypes sd), as the reference defines it.
    Integers are Z3 integers; fixed widths wrap around after each op; bitwise ops go through bit-vectors."""
    z3 = m.z3
    if op is Ops.WHERE:
        return z3.If(xs[0], xs[1], xs[2])
    if op is Ops.CAST:
        if d.is_bool:
            return xs[0] if sd[0].is_bool else m.to_int(xs[0], sd[0]) != 0
        return m.from_int(m.to_int(xs[0], sd[0]), d)
    if op is Ops.TRUNC:
        return xs[0]
    if op in (Ops.CMPLT, Ops.CMPNE):
        a, b = xs
        if op is Ops.CMPNE:
            return a != b
        return z3.And(z3.Not(a), b) if sd[0].is_bool else a < b
    a, b = (xs + [None])[:2]
    if d.is_bool:
        table = {
            Ops.AND: lambda: z3.And(a, b),
            Ops.OR: lambda: z3.Or(a, b),
            Ops.XOR: lambda: z3.Xor(a, b),
            Ops.MAX: lambda: z3.Or(a, b),
            Ops.ADD: lambda: z3.Or(a, b),
            Ops.MUL: lambda: z3.And(a, b),
        }
        if op in table:
            return table[op]()
        raise Unsupported(f"{op} on bool")
    width = 64 if d is dtypes.index else d.bits
    if m.bv:
        return bv_alu(z3, op, d.kind == "i" or d is dtypes.index, width, a, b)
    if op is Ops.ADD:
        return m.from_int(a + b, d)
    if op is Ops.MUL:
        return m.from_int(a * b, d)
    if op is Ops.MAX:
        return z3.If(a >= b, a, b)
    if op is Ops.IDIV:
        return m.from_int(m.floordiv(a, b), d)
    if op is Ops.MOD:
        return z3.If(b == 0, z3.IntVal(0), a - b * m.floordiv(a, b))
    if op in (Ops.SHL, Ops.SHR):  # the reference clips shift amounts to [0, bits-1]
        amt = z3.If(b < 0, z3.IntVal(0), z3.If(b > width - 1, z3.IntVal(width - 1), b))
        return m.from_int(a * m.pow2(amt), d) if op is Ops.SHL else m.floordiv(a, m.pow2(amt))
    if op in (Ops.AND, Ops.OR, Ops.XOR):
        x, y = z3.Int2BV(a, width), z3.Int2BV(b, width)
        r = {Ops.AND: x & y, Ops.OR: x | y, Ops.XOR: x ^ y}[op]
        return z3.BV2Int(r, is_signed=d.kind == "i")
    raise Unsupported(f"{op} on {d.name}")


class _Z3BitVecs:
    """IDIV/MOD's integer operations on Z3 bit-vectors of one width (ir/floordiv.py's IntArith)."""

    def __init__(self, z3: Any, bits: int) -> None:
        self.z3, self.bits = z3, bits

    def const(self, v: int) -> Any:
        return self.z3.BitVecVal(v, self.bits)

    def eq(self, x: Any, v: int) -> Any:
        return x == self.const(v)

    def either(self, p: Any, q: Any) -> Any:
        return self.z3.Or(p, q)

    def select(self, c: Any, x: Any, y: Any) -> Any:
        return self.z3.If(c, x, y)

    def tdiv(self, a: Any, b: Any, unsigned: bool) -> Any:
        return self.z3.UDiv(a, b) if unsigned else a / b  # bvsdiv truncates

    def trem(self, a: Any, b: Any, unsigned: bool) -> Any:
        return self.z3.URem(a, b) if unsigned else self.z3.SRem(a, b)

    def needs_floor(self, r: Any, b: Any) -> Any:
        return self.z3.And(r != 0, (r ^ b) < 0)

    def dec_if(self, c: Any, q: Any) -> Any:
        return self.z3.If(c, q - 1, q)

    def add_if(self, c: Any, r: Any, b: Any) -> Any:
        return self.z3.If(c, r + b, r)

    def neg(self, x: Any) -> Any:
        return -x


def bv_alu(z3: Any, op: Ops, signed: bool, bits: int, a: Any, b: Any) -> Any:
    """Bit-vector semantics (wraparound is native): the fallback model for bitwise identities."""
    zero = z3.BitVecVal(0, bits)
    if op is Ops.ADD:
        return a + b
    if op is Ops.MUL:
        return a * b
    if op is Ops.MAX:
        return z3.If(a >= b if signed else z3.UGE(a, b), a, b)
    if op in (Ops.IDIV, Ops.MOD):  # the backends' own definition (ir/floordiv.py), in bit-vector terms
        facts = DivFacts(signed=signed, zero=True, minus_one=signed, mixed=signed)
        return floor_divide(_Z3BitVecs(z3, bits), a, b, facts, remainder=op is Ops.MOD)
    if op in (Ops.AND, Ops.OR, Ops.XOR):
        return {Ops.AND: a & b, Ops.OR: a | b, Ops.XOR: a ^ b}[op]
    if op in (Ops.SHL, Ops.SHR):
        hi_ = z3.BitVecVal(bits - 1, bits)
        amt = z3.If(b < 0, zero, z3.If(b > hi_, hi_, b)) if signed else z3.If(z3.UGT(b, hi_), hi_, b)
        if op is Ops.SHL:
            return a << amt
        return a >> amt if signed else z3.LShR(a, amt)
    raise Unsupported(f"{op} as bit-vectors")


# ---- driver --------------------------------------------------------------------------------------


@dataclass
class ProofResult:
    rule: str
    status: str  # "proved", "proved-bounded", "failed", "unknown", "skipped"
    detail: str = ""
    dtypes_checked: list[str] = field(default_factory=list)


BOX = range(-7, 8)
FREE_PARAMETER_FUNCTIONS = ("lo", "hi", "gcd", "tgcd")
MAX_INSTANCES = 120


def _py_prim(t: SExpr, env: dict[str, int]) -> int | None:
    """egglog's i64 primitives evaluated in python (truncating / and %); None if t needs more than env."""
    if isinstance(t, bool):
        return int(t)
    if isinstance(t, int):
        return t
    if isinstance(t, str):
        return env.get(t)
    if not isinstance(t, list) or not t:
        return None
    xs = [_py_prim(a, env) for a in t[1:]]
    if any(x is None for x in xs):
        return None
    h = t[0]
    try:
        if h in ("/", "%"):
            a, b = xs
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)
            return q if h == "/" else a - b * q
        ops = {
            "+": lambda a, b: a + b,
            "-": lambda a, b: a - b,
            "*": lambda a, b: a * b,
            "min": min,
            "max": max,
            "abs": abs,
            "<<": lambda a, b: a << b,
            ">>": lambda a, b: a >> b,
            "&": lambda a, b: a & b,
            "|": lambda a, b: a | b,
            "^": lambda a, b: a ^ b,
        }
        return ops[h](*xs) if h in ops else None
    except (ZeroDivisionError, ValueError):
        return None


def _py_premises_hold(body: list[SExpr], env: dict[str, int]) -> bool:
    """Premises over parameters only, checked in python; anything else is left to Z3."""
    for f in body:
        if isinstance(f, list) and f and f[0] in ("<", "<=", ">", ">=", "!=", "=") and len(f) == 3:
            a, b = _py_prim(f[1], env), _py_prim(f[2], env)
            if a is None or b is None:
                continue
            if not {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "!=": a != b, "=": a == b}[f[0]]:
                return False
    return True


def _leaf_symbols(t: SExpr) -> set[str]:
    if isinstance(t, str):
        return {t}
    if isinstance(t, list) and t:
        return set().union(*(_leaf_symbols(a) for a in t[1:]))
    return set()


def _premises_over(body: list[SExpr], names: list[str]) -> list[SExpr]:
    """The facts of `body` that `_py_premises_hold` can decide from values of `names` alone; it skips all others
    (a side that reads any other symbol evaluates to None), so checking only these gives the same verdict."""
    return [
        f
        for f in body
        if isinstance(f, list)
        and f
        and f[0] in ("<", "<=", ">", ">=", "!=", "=")
        and len(f) == 3
        and _leaf_symbols(f) <= set(names)
    ]


def _pattern_constants(body: list[SExpr]) -> list[str]:
    """i64 variables that stand for matched constants (CONST values, term coefficients), not computed ones."""
    found: set[str] = set()
    computed: set[str] = set()

    def walk(t: SExpr) -> None:
        if not isinstance(t, list) or not t:
            return
        if t[0] == "I" and isinstance(t[1], str):
            found.add(t[1])
        if t[0] == "TCons" and isinstance(t[2], str):
            found.add(t[2])
        for x in t[1:]:
            walk(x)

    for f in body:
        if isinstance(f, list) and f[0] == "has-term" and isinstance(f[3], str):
            found.add(f[3])
        if isinstance(f, list) and f[0] == "=" and isinstance(f[1], str) and isinstance(f[2], list):
            fn = f[2][0]
            if fn in FREE_PARAMETER_FUNCTIONS:
                found.add(f[1])  # bounds and hint values are free parameters of the rule as well
            elif fn not in EGG_TO_OP and fn not in ("L", "TCons", "TS", "I"):
                computed.add(f[1])
        walk(f)
    return sorted(found - computed)


# Z3 budgets are resource limits ("rlimit"), not wall-clock timeouts, so that a verdict depends as little as Z3
# allows on how busy the machine is: a nominal millisecond buys RLIMIT_PER_MS units, about what Z3 gets through in
# a millisecond of one core. A wall-clock timeout WALL_SLACK times the nominal one stays as a backstop. Each rule is
# proved in a fresh Z3 context (see _fresh_context), so its verdict does not depend on the rules proved before it.
# (Near the budget a rule can still come out proved-bounded in one run and proved in another: Z3's search also
# depends on where its objects lie in memory. A run turns a few of the ~40 rules near it one way or the other.)
RLIMIT_PER_MS = 4_000
WALL_SLACK = 10
BV_BUDGET_MS = 50  # the bit-vector retry: 200_000 rlimit units


def _fresh_context() -> None:
    """Start a new default Z3 context: Z3's search depends on the state of the context (term ids, caches), and a
    rule's proof should not depend on the proofs before it. z3 keeps its default context in z3.z3._main_ctx and
    creates one on first use; objects of the old context keep it alive as long as they live."""
    import z3.z3 as z3mod

    z3mod._main_ctx = None


def _status(res: Any) -> str:
    import z3

    return "unsat" if res == z3.unsat else "sat" if res == z3.sat else "unknown"


# Verdicts of the costly outright attempts made so far in this process, by obligation: rules that differ only in what
# has no value meaning (a hint, a mode argument) build the same Z3 terms in the same order and so pose the same
# question, and a budget spent once to find it undecided need not be spent again. An obligation is the text of its
# assertions, their term ids (the same terms built in a fresh context in the same order get the same ids) and the
# budget; a hit is a verdict Z3 reached on exactly this check in this run. Printing a formula costs about as much as
# a small check, so only checks that took MEMO_MIN_S or more are remembered, and a check's text is printed only when
# its term ids and hashes are those of a remembered one.
MEMO_MIN_S = 0.5
_VERDICTS: dict[tuple[int, tuple[tuple[int, int], ...]], dict[str, tuple[str, Any]]] = {}


def _digest(facts: list[Any]) -> str:
    return hashlib.sha256("\n".join(f.sexpr() for f in facts).encode()).hexdigest()


def _solve(assumptions: list[Any], goals: list[Any], timeout_ms: int, memo: bool = False) -> tuple[str, Any]:
    import z3

    s = z3.Solver()
    s.set("rlimit", timeout_ms * RLIMIT_PER_MS)
    s.set("timeout", timeout_ms * WALL_SLACK)
    s.add(*assumptions)
    facts = [*assumptions, z3.Not(z3.And(*goals))]
    s.add(facts[-1])
    ids = (timeout_ms, tuple((f.get_id(), f.hash()) for f in facts)) if memo else None
    text = ""
    if ids in _VERDICTS:
        text = _digest(facts)
        if text in _VERDICTS[ids]:
            return _VERDICTS[ids][text]
    start = time.perf_counter()
    status = _status(s.check())
    verdict = status, (s.model() if status == "sat" else None)
    if ids is not None and time.perf_counter() - start >= MEMO_MIN_S:
        text = text or _digest(facts)
        _VERDICTS.setdefault(ids, {})[text] = verdict
    return verdict


# Each instance is first put to a light solver with this budget; see _Instances.
INSTANCE_FAST_MS = 50


class _Instances:
    """A fast path for the instances of one rule at one dtype (its constants fixed to values of the box). A default
    Z3 solver spends a few milliseconds probing the formula and setting up its tactics, most of the time an instance
    takes; this one only simplifies (which folds the instance's constants into the rule's assumptions) and runs Z3's
    SMT core, which decides nearly every instance in a fraction of that. Only its definite answers are used: where it
    is undecided, a default solver decides the instance as before."""

    def __init__(self, assumptions: list[Any], goals: list[Any]) -> None:
        import z3

        self.tactic = z3.Then("simplify", "propagate-values", "solve-eqs", "smt")
        self.assumptions = assumptions
        self.negated_goals = z3.Not(z3.And(*goals))

    def decide(self, fix: list[Any]) -> tuple[str, str, Any]:
        """(can the rule match here, can its goals fail here, a counterexample): "unknown" where undecided."""
        s = self.tactic.solver()
        s.set("rlimit", INSTANCE_FAST_MS * RLIMIT_PER_MS)
        s.set("timeout", INSTANCE_FAST_MS * WALL_SLACK)
        s.add(*self.assumptions, *fix)
        feasible = _status(s.check())
        if feasible != "sat":
            return feasible, "unknown", None
        s.add(self.negated_goals)
        status = _status(s.check())
        return feasible, status, (s.model() if status == "sat" else None)


def _model(
    rule: Rule,
    typing: Typing,
    assign: dict[str, DType],
    sig: Signatures,
    body: list[SExpr],
    head: list[SExpr],
    bv: bool = False,
) -> Z3Model:
    m = Z3Model(rule, typing, assign, sig)
    m.bv = bv
    for f in body:
        m.assume_fact(f)
    for a in head:
        m.goal_action(a)
    return m


def _instances_in_box(body: list[SExpr], names_c: list[str]) -> list[tuple[int, ...]]:
    """The values of the constants `names_c` that the rule is proved for when it is not proved for all: those of the
    box that meet the premises over them alone, at most MAX_INSTANCES of them (drawn with a fixed seed)."""
    space: Any = itertools.product(BOX, repeat=len(names_c))
    if len(BOX) ** len(names_c) > 50_000:  # the same draws as 50_000 calls of rng.choice(BOX, n), at once
        rng = np.random.default_rng(0)
        space = (tuple(BOX[i] for i in row) for row in rng.integers(0, len(BOX), (50_000, len(names_c))).tolist())
    premises = _premises_over(body, names_c)
    combos = [c for c in space if _py_premises_hold(premises, dict(zip(names_c, c)))]
    if len(combos) > MAX_INSTANCES:
        rng = np.random.default_rng(1)
        combos = [combos[i] for i in sorted(rng.choice(len(combos), MAX_INSTANCES, replace=False))]
    return combos


def prove_rule(rule: Rule, sig: Signatures, timeout_ms: int = 1_000, domain: tuple[DType, ...] = ALL_DOMAIN) -> ProofResult:
    import z3

    _fresh_context()
    body = [parse_sexprs(f)[0] for f in rule.body]
    head = [parse_sexprs(a)[0] for a in rule.head]
    typing = Typing(sig)
    for f in body:
        typing.fact(f)
    for a in head:
        if a[0] == "union":
            srt = typing._sort_of(a[1]) if typing._sort_of(a[1]) != "?" else typing._sort_of(a[2])
            x, y = typing.term(a[1], srt), typing.term(a[2], srt)
            if x is not None and y is not None:
                typing.uf.union(x, y)
        elif a[0] == "set":
            typing.term(a[1], "i64")
            typing.term(a[2], sig.functions.get(a[1][0], ((), "i64"))[1])
        else:
            typing.term(a, "?")
    checked, bounded = [], []
    instance_sets: dict[tuple[str, ...], list[tuple[int, ...]]] = {}
    for assign in typing.assignments(domain):
        names = sorted({d.name for d in assign.values()})
        if any(to_dtype(n).is_float for n in names):
            continue  # float instances are checked numerically
        try:
            m = _model(rule, typing, assign, sig, body, head)
        except Unsupported as e:
            return ProofResult(rule.name, "unknown", f"unsupported: {e} (dtypes {names})", checked)
        if not m.goals:
            continue
        status, model = _solve(m.assumptions, m.goals, timeout_ms, memo=True)
        if status == "unknown" and not any(x in " ".join(rule.body + rule.head) for x in ("TCons", "lin ", "(L ")):
            try:  # bitwise identities: decide them on bit-vectors of the dtype's width. Z3 decides those it can
                # at once (each took < 1000 rlimit units so far); the others exhaust any budget, so this one is small
                mb = _model(rule, typing, assign, sig, body, head, bv=True)
                status_bv, model_bv = _solve(mb.assumptions, mb.goals, BV_BUDGET_MS, memo=True)
                if status_bv != "unknown":
                    status, model = status_bv, model_bv
            except (Unsupported, z3.Z3Exception):
                pass
        checked.append("/".join(names))
        why = ""
        if status == "unknown":  # nonlinear in the rule's constants: decide each instance in a box
            names_c = [v for v in _pattern_constants(body) if v in m.syms]
            consts = [m.syms[v] for v in names_c]
            if tuple(names_c) not in instance_sets:  # the same for every dtype of the rule
                instance_sets[tuple(names_c)] = _instances_in_box(body, names_c)
            combos = instance_sets[tuple(names_c)]
            live = 0
            instances = _Instances(m.assumptions, m.goals) if consts and combos else None
            for combo in combos if instances else []:
                fix = [c == v for c, v in zip(consts, combo)]
                feasible, status, model = instances.decide(fix)
                if feasible == "unknown":
                    feasible = _solve([*m.assumptions, *fix], [z3.BoolVal(False)], timeout_ms // 2)[0]
                if feasible == "unsat":
                    continue  # this instance never matches: proves nothing
                if status == "unknown":
                    status, model = _solve([*m.assumptions, *fix], m.goals, timeout_ms * 2)
                if status == "unknown":  # instances are easy; should one not be, try once more with a larger budget
                    status, model = _solve([*m.assumptions, *fix], m.goals, timeout_ms * 8)
                if status != "unsat":
                    why = f" on the instance {dict(zip(names_c, combo))}"
                    break
                live += 1
            else:
                status = "unsat" if live else "unknown"
                if not live:
                    why = f": none of {len(combos)} instances of {names_c} in [{BOX[0]}, {BOX[-1]}] can match"
            if status == "unsat":
                bounded.append(f"{'/'.join(names)}: {live} instances of {names_c} in [{BOX[0]}, {BOX[-1]}]")
        if status == "sat":
            return ProofResult(rule.name, "failed", f"counterexample for dtypes {names}: {model}", checked)
        if status == "unknown":
            return ProofResult(rule.name, "unknown", f"z3 gave unknown for dtypes {names}{why}", checked)
    if not checked:
        return ProofResult(rule.name, "skipped", "no integer/boolean instance has a value goal", checked)
    if bounded:
        return ProofResult(rule.name, "proved-bounded", "; ".join(bounded), checked)
    return ProofResult(rule.name, "proved", "", checked)


# ---- float rules: random evaluation --------------------------------------------------------------


def check_float_rule(rule: Rule, sig: Signatures, samples: int = 400, seed: int = 0) -> ProofResult:
    """Evaluate lhs and rhs of a float rule on `samples` random float32 inputs that meet its conditions (specials
    included); compare within rounding."""
    rng = np.random.default_rng(seed)
    body = [parse_sexprs(f)[0] for f in rule.body]
    head = [parse_sexprs(a)[0] for a in rule.head]
    lhs = next(f[2] for f in body if f[0] == "=" and f[1] == "__e")
    rhs = head[0][2]
    specials = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -4.0, 3.0, 1e30, -1e-30, np.inf, -np.inf, np.nan], np.float32)
    int_slots = set(re.findall(r"\(I ([a-z_][a-z0-9_]*)\)", " ".join(rule.body + rule.head)))
    compared = 0
    for _ in range(samples * 40):  # draws until `samples` of them meet the rule's conditions (a power of two is rare)
        if compared == samples:
            break
        env: dict[str, Any] = {}

        def val(name: str, env: dict[str, Any] = env) -> Any:
            if name not in env:
                if name in int_slots:
                    env[name] = int(rng.integers(-1000, 1000))
                else:
                    env[name] = np.float32(rng.choice(specials) if rng.random() < 0.3 else rng.standard_normal() * 10)
            return env[name]

        try:
            if not all(_fcond(f, val) for f in body if f[0] != "=" or f[1] != "__e"):
                continue
            a, b = _feval(lhs, val), _feval(rhs, val)
        except Unsupported:
            return ProofResult(rule.name, "skipped", "pattern outside the float evaluator", [])
        compared += 1
        if not (np.isclose(a, b, rtol=1e-6, atol=1e-30, equal_nan=True) or (np.isnan(a) and np.isnan(b))):
            return ProofResult(rule.name, "failed", f"lhs {a} != rhs {b} at {env}", ["float32"])
    return ProofResult(rule.name, "proved" if compared else "skipped", f"{compared} samples", ["float32"])


def _fcond(f: SExpr, val: Any) -> bool:
    head = f[0]
    if head in DT_RELATIONS:
        return True
    if head in ("<", "<=", ">", ">=", "!=", "="):
        a, b = (_fprim(x, val) for x in f[1:])
        return bool({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "!=": a != b, "=": a == b}[head])
    raise Unsupported(head)


def _fprim(x: SExpr, val: Any) -> Any:
    if isinstance(x, (int, float)):
        return x
    if isinstance(x, str):
        return val(x)
    if isinstance(x, list):
        op, *args = x
        vs = [_fprim(a, val) for a in args]
        fns = {
            "+": lambda a, b: a + b,
            "-": lambda a, b: a - b,
            "*": lambda a, b: a * b,
            "/": lambda a, b: a / b,
            "max": max,
            "abs": abs,
            "to-f64": float,
            "to-i64": lambda a: int(a) if np.isfinite(a) else 0,  # egglog truncates; non-finite never matches
            "&": lambda a, b: int(a) & int(b),
        }
        if op in fns:
            with np.errstate(all="ignore"):
                return fns[op](*vs)
    raise Unsupported(repr(x))


def _feval(t: SExpr, val: Any) -> Any:
    if isinstance(t, str):
        return val(t)
    head = t[0]
    if head == "CONST":
        v = t[2]
        x = _fprim(v[1], val)
        return np.float32(x if v[0] == "F" else np.round(x))
    if head in EGG_TO_OP:
        op = EGG_TO_OP[head]
        sp = OP_TABLE[op]
        if not sp.is_alu or getattr(sp.dtype_rule, "__name__", "") in ("_dt_int", "_dt_int_or_bool"):
            raise Unsupported(head)  # not a float op: the rule has no float instance
        xs = [np.asarray(_feval(s, val), np.float32) for s in t[2 + len(ARG_FIELDS[sp.arg]) :]]
        dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else dtypes.float32
        return sp.ref(*xs, dt)
    raise Unsupported(head)


def check_rule(rule: Rule, sig: Signatures) -> list[ProofResult]:
    if rule.check == "structural":
        return [ProofResult(rule.name, "skipped", "structural helper: no value meaning")]
    out = []
    if rule.check in ("z3", "z3+float"):
        try:
            out.append(prove_rule(rule, sig))
        except (ValueError, KeyError, TypeError) as e:
            out.append(ProofResult(rule.name, "unknown", f"prover cannot read the rule: {e}"))
    if rule.check in ("float", "z3+float"):
        out.append(check_float_rule(rule, sig))
    return out


__all__ = ["ProofResult", "Signatures", "check_rule", "math", "prove_rule", "signatures"]
