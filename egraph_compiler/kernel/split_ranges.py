"""Split ranges after extraction: define every range a kernel uses from the ranges its loop nests bind.

An OptOps split unions r with outer*f + inner (rules/optops.py), so an
extracted kernel may bind a range's parts while its body still mentions the
range, or bind the range while an index mentions a part. Both are well formed:
the unbound one is defined from the bound ones (r = outer*f + inner,
outer = r // f, inner = r % f), which is what invariant 4 of the design asks
of lowering. Range keys decode to ("out" | "red", e-class, axis) for ranges
from rangeify, ("split", parent key, factor, part) for split parts and
("pad", parent key, factor, part) for the parts of a padded split (Padto),
which define their parent but not the other way round: they also run over
the padding, where the parent does not exist. A range padded up to a single
tile (a row of 7 pixels in a tile of 8) is its inner part: the outer part
runs once, and the loop nest drops it as a loop over a size-one axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from egraph_compiler.ir.affine import fold_affine_divmod
from egraph_compiler.ir.ops import Ops
from egraph_compiler.ir.uop import UOp


def split_key(key: Any, kinds: tuple[str, ...] = ("split",)) -> tuple[Any, int, int] | None:
    """(parent key, factor, part) of a split part's key (or a padded split's, with "pad" in kinds), else None."""
    if isinstance(key, tuple) and len(key) == 4 and key[0] in kinds:
        return key[1], key[2], key[3]
    return None


def _ancestry(bound: dict[Any, UOp]) -> list[Any]:
    """The bound keys and the keys of the split parts they were split from (a part split again: TC blocks)."""
    out: dict[Any, None] = {}
    for k in bound:
        while k not in out:
            out[k] = None
            if (sk := split_key(k, ("split", "pad"))) is None:
                break
            k = sk[0]
    return list(out)


def _define(key: Any, bound: dict[Any, UOp], depth: int = 0) -> UOp | None:
    """An expression for range `key` over the `bound` ranges (by key), or None."""
    if key in bound:
        return bound[key]
    if depth > 8:
        return None
    for part_key in [
        k for k in _ancestry(bound) if (sk := split_key(k, ("split", "pad"))) is not None and sk[0] == key and sk[2] == 0
    ]:
        _, f, _ = split_key(part_key, ("split", "pad"))  # type: ignore[misc]
        inner = (part_key[0], key, f, 1)
        if (o := _define(part_key, bound, depth + 1)) is not None and (i := _define(inner, bound, depth + 1)) is not None:
            return o * f + i  # r = outer * f + inner
    if (sk := split_key(key)) is not None and (p := _define(sk[0], bound, depth + 1)) is not None:
        return p // sk[1] if sk[2] == 0 else p % sk[1]  # outer = r // f, inner = r % f
    for k, r in bound.items():  # a range padded up to one tile: its outer part ran once and was dropped as a
        if (sk := split_key(k, ("pad",))) is not None and sk[0] == key and sk[2] == 1:  # size-one loop (it is 0)
            return r
    return None


def _family(key: Any) -> Any:
    """The key a range was split from, at the top of its chain of splits (a range's own key if it is not a part)."""
    while (sk := split_key(key, ("split", "pad"))) is not None:
        key = sk[0]
    return key


@dataclass
class BindMemo:
    """What bind_split_ranges remembers across calls on kernels that have parts in common (the schedule
    candidates of one kernel): results by (node, the bound ranges that matter to it), and each node's range
    families (the top keys of the ranges under it)."""

    results: dict[tuple[UOp, frozenset[UOp]], UOp] = field(default_factory=dict)
    families: dict[UOp, frozenset[Any]] = field(default_factory=dict)
    range_family: dict[UOp, Any] = field(default_factory=dict)


def _families(ast: UOp, fams: dict[UOp, frozenset[Any]]) -> None:
    """Fill in the range families of every node under ast not known yet (sources first, iteratively)."""
    stack: list[tuple[UOp, bool]] = [(ast, False)]
    while stack:
        u, ready = stack.pop()
        if u in fams:
            continue
        if not ready:
            stack.append((u, True))
            stack.extend((s, False) for s in u.src if s not in fams)
            continue
        own = frozenset((_family(u.arg[0]),)) if u.op is Ops.RANGE else frozenset()
        fams[u] = own.union(*(fams[s] for s in u.src)) if u.src else own


def bind_split_ranges(ast: UOp, memo: BindMemo | None = None) -> UOp:
    """`ast` with every RANGE that is not bound where it is used, but is defined by the ranges bound around it,
    replaced by its definition. Scopes matter: two REDUCEs over the same canonical range may bind it
    differently (one split, one not), and nested REDUCEs may bind the two parts of one split. `memo`: shared by
    calls on kernels that have parts in common (the schedule candidates of one kernel). A node's result depends
    on the bound ranges of its own ranges' families alone (a range is defined from parts of its own split), so
    it is worked out once for those: a chain of nested REDUCEs that each bind other ranges would otherwise be
    rebuilt once per path through it."""
    memo = BindMemo() if memo is None else memo
    done, fams, of = memo.results, memo.families, memo.range_family
    _families(ast, fams)

    def key(u: UOp, env: frozenset[UOp]) -> tuple[UOp, frozenset[UOp]]:
        if not env:
            return u, env
        f = fams[u]
        for r in env:
            if r not in of:
                of[r] = _family(r.arg[0])
        if all(of[r] in f for r in env):
            return u, env
        return u, frozenset(r for r in env if of[r] in f)

    stack: list[tuple[UOp, frozenset[UOp], list[tuple[UOp, frozenset[UOp]]] | None]] = [(ast, frozenset(), None)]
    while stack:
        u, env, keys = stack.pop()
        if keys is None:
            if (u, env) in done:
                continue
            if u.op in (Ops.END, Ops.REDUCE):
                inner = env | {r for r in u.src[1:] if r.op is Ops.RANGE}
                keys = [key(u.src[0], inner), *(key(r, env) for r in u.src[1:])]
            elif u.op is Ops.AFTER:  # the kernel it waits on has scopes of its own
                keys = [key(u.src[0], env), *((s, frozenset()) for s in u.src[1:])]
            else:
                keys = [key(s, env) for s in u.src]
            stack.append((u, env, keys))
            stack.extend((s, e, None) for s, e in keys if (s, e) not in done)
            continue
        if u.op is Ops.RANGE and u not in env:
            d = _define(u.arg[0], {r.arg[0]: r for r in env})
            done[(u, env)] = u if d is None else d
            continue
        src = tuple(done[k] for k in keys)
        if u.op in (Ops.END, Ops.REDUCE):
            src = (src[0], *u.src[1:])
        new = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
        if new is not u and u.op in (Ops.IDIV, Ops.MOD) and not u.dtype.is_float:
            # a range written as its parts, `(16*a + u) // 32`: folded where the parts' bounds settle it (left as
            # it was, the parts' copies would each get an address of their own)
            new = fold_affine_divmod(new)
        done[(u, env)] = new
    return done[(ast, frozenset())]
