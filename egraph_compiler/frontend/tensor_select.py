"""Shaping, indexing, selection and scans of the Tensor API (tinygrad's names), composed from the primitive
Tensor ops; `self` is a Tensor.

Every shape here is known when the graph is built: sorting, top-k and the selections by a count are
comparison-count formulations (an n x n comparison along the axis, O(n^2) work), and the ops whose result
size depends on the data (masked_select, nonzero) need a fixed `size`.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from egraph_compiler.frontend.tensor_nn import _check_tensor, _windows
from egraph_compiler.ir.diagnostics import DTypeError, InvalidArgument, InvalidSize, ShapeMismatch, UnsupportedOp
from egraph_compiler.ir.dtypes import DType, dtypes, promote
from egraph_compiler.ir.ops import broadcast_shapes

if TYPE_CHECKING:
    from egraph_compiler.frontend.tensor import Tensor

Scalar = bool | int | float
SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")


# ---- advanced indexing -------------------------------------------------------------------------


def advanced_index(t: Tensor, picks: dict[int, Tensor]) -> Tensor:
    """t indexed along the axes in `picks` by integer tensors (the basic indices applied already), as tinygrad's
    getitem: the index tensors broadcast together to a shape B; element (..., b, ...) is t at index[b] along each
    picked axis (negative from the end; out of range reads 0), a one-hot selection summed over the picked axes.
    B's axes replace the picked ones where those are adjacent, else they go first."""
    pos = sorted(picks)
    for p in pos:
        if picks[p].dtype.is_float or picks[p].dtype.is_bool:
            raise DTypeError(
                at="getitem",
                why=f"a {picks[p].dtype.name} tensor index",
                suggestion="index with integer tensors (boolean masks: use masked_select or where)",
            )
    try:
        bshape = broadcast_shapes(*(picks[p].shape for p in pos))
    except ValueError:
        raise ShapeMismatch(
            at="getitem",
            why=f"index tensors of shapes {[picks[p].shape for p in pos]} do not broadcast together",
            suggestion="give the index tensors broadcastable shapes",
        ) from None
    rest = [a for a in range(t.ndim) if a not in picks]
    sizes = [t.shape[p] for p in pos]
    nb, k = len(bshape), len(pos)
    x = t.permute(*rest, *pos).reshape(*(t.shape[a] for a in rest), *(1,) * nb, *sizes)
    mask: Tensor | None = None
    for j, p in enumerate(pos):
        idx = picks[p] if picks[p].dtype.is_unsigned else picks[p].cast(dtypes.int64)  # no index wraps
        if not idx.dtype.is_unsigned:
            idx = (idx < 0).where(idx + t.shape[p], idx)
        hot = idx.reshape(*(1,) * (nb - idx.ndim), *idx.shape, 1)._one_hot(sizes[j])  # B's shape + (size,)
        hit = hot.reshape(*hot.shape[:-1], *(1,) * j, sizes[j], *(1,) * (k - j - 1))
        mask = hit if mask is None else mask & hit
    assert mask is not None
    mask = mask.reshape(*(1,) * len(rest), *mask.shape)
    picked = tuple(range(len(rest) + nb, len(rest) + nb + k))
    out = mask.where(x, 0).sum(axis=picked, dtype=t.dtype)  # as gather: one hit at most, bools included
    first = pos[0] if pos == list(range(pos[0], pos[0] + k)) else 0  # adjacent: B's axes go where they were
    return out.permute(*range(first), *range(len(rest), len(rest) + nb), *range(first, len(rest)))


# ---- argument checks ---------------------------------------------------------------------------


def _int(x: Any, what: str, lo: int | None = None) -> int:
    """`x` as a python int (no bools, no floats), at least `lo` if given."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise InvalidArgument(at=what, why=f"expected an integer, got {x!r}", suggestion="pass a python int")
    if lo is not None and x < lo:
        raise InvalidArgument(at=what, why=f"{x} is below {lo}", suggestion=f"pass an integer >= {lo}")
    return int(x)


def _ints(x: Any, what: str) -> tuple[int, ...]:
    """An int or a sequence of ints, as a tuple."""
    return tuple(_int(v, what) for v in x) if isinstance(x, (tuple, list)) else (_int(x, what),)


def _flag(x: Any, what: str) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise InvalidArgument(at=what, why=f"{x!r} is not a bool", suggestion="pass True or False")
    return bool(x)


def _shape_arg(shape: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """tinygrad's argfix: f((2, 3)) or f(2, 3)."""
    return tuple(shape) if not args and isinstance(shape, (tuple, list)) else (shape, *args)


def _dim(t: Tensor, dim: Any, what: str) -> int:
    """`dim` resolved against a tensor that must have at least one axis."""
    if t.ndim == 0:
        raise ShapeMismatch(at=what, why=f"{what} needs a tensor with at least one axis", suggestion="reshape it to (1,)")
    return t._resolve_axis(dim, what=what)


def _lowest(dt: DType) -> Scalar:
    return False if dt.is_bool else dt.min


def _highest(dt: DType) -> Scalar:
    return True if dt.is_bool else dt.max


def _scalar_as(t: Tensor, value: Any, what: str) -> Tensor:
    """A python scalar as a 0-d tensor of t's dtype; a value that t's dtype would change is a diagnostic."""
    v = t._to_tensor(value, what)
    if v.ndim or promote(t.dtype, v.dtype) != t.dtype:
        raise DTypeError(
            at=what,
            why=f"{value!r} is not a {t.dtype.name} scalar",
            suggestion=f"pass a scalar that a {t.dtype.name} holds, or cast the tensor first",
        )
    return v.cast(t.dtype)


# ---- building blocks ---------------------------------------------------------------------------


def _along(like: Tensor, n: int, axis: int, ndim: int) -> Tensor:
    """0 .. n-1 (int32) along axis `axis` of a rank-`ndim` tensor, size 1 elsewhere (a Tensor like `like`)."""
    return type(like).arange(n).reshape(*[n if i == axis else 1 for i in range(ndim)])


def _upto(like: Tensor, n: int) -> Tensor:
    """(n, n) mask [i, j] = j <= i: the inputs that reach output i of a scan."""
    return _along(like, n, 0, 2) >= _along(like, n, 1, 2)


def _pick(mask: Tensor, values: Tensor, axis: int, keepdim: bool = False) -> Tensor:
    """The value where `mask` holds along `axis` (one hit expected), exact for every dtype (-0.0 and NaN too)."""
    return mask.where(values, _lowest(values.dtype)).max(axis, keepdim)


def _nan(x: Tensor) -> Tensor | None:
    return x != x if x.dtype.is_float else None


def _same(a: Tensor, b: Tensor) -> Tensor:
    """a == b, and NaN matches NaN."""
    na, nb = _nan(a), _nan(b)
    return (a == b) | (na & nb) if na is not None and nb is not None else a == b


def _scan(x: Tensor, axis: Any, what: str, fill: Scalar, reduce: Callable[[Tensor], Tensor]) -> Tensor:
    """An inclusive scan along `axis`: output i reduces inputs 0..i (a lower-triangular n x n window, O(n^2))."""
    if x.ndim == 0:
        x._resolve_axis(axis, what=what)
        return reduce(x.reshape(1, 1)).reshape(())
    a = x._resolve_axis(axis, what=what)
    xl = x.transpose(a, -1)
    out = reduce(_upto(x, xl.shape[-1]).where(xl.unsqueeze(-2), fill))
    return out.transpose(a, -1)


def _scan_index(x: Tensor, values: Tensor, axis: Any, what: str) -> Tensor:
    """For cummax/cummin: the first index j <= i with x[j] equal to the running value at i (int32)."""
    if x.ndim == 0:
        x._resolve_axis(axis, what=what)
        return _along(x, 1, 0, 1).reshape(())
    a = x._resolve_axis(axis, what=what)
    xl, vl = x.transpose(a, -1), values.transpose(a, -1)
    n = xl.shape[-1]
    hit = _upto(x, n) & _same(xl.unsqueeze(-2), vl.unsqueeze(-1))  # [..., i, j]
    return hit.where(_along(x, n, 1, 2), n).min(-1).transpose(a, -1)


def _ranks(x: Tensor, descending: bool) -> Tensor:
    """Stable sort position of each element along the last axis (int32): how many sort before it, ties by index;
    NaN sorts as the largest value (numpy's and torch's order)."""
    n = x.shape[-1]
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)  # a: element i (rows), b: element j (columns)
    lo, hi = (a, b) if descending else (b, a)
    before = lo < hi  # j sorts before i
    nan_lo, nan_hi = _nan(lo), _nan(hi)
    if nan_lo is not None and nan_hi is not None:
        before = before | (nan_hi & nan_lo.logical_not())
    earlier = _along(x, n, 1, 2) < _along(x, n, 0, 2)  # j < i
    return (before | (_same(a, b) & earlier)).sum(-1)


def _ordered(x: Tensor, dim: Any, descending: bool, k: int | None, what: str) -> tuple[Tensor, Tensor]:
    """The first k (all if None) values along `dim` in sorted order, with their int32 indices."""
    d = _dim(x, dim, what)
    desc = _flag(descending, what)
    xl = x.transpose(d, -1)
    n = xl.shape[-1]
    k = n if k is None else k
    if not 1 <= k <= n:
        raise InvalidArgument(at=what, why=f"k={k} is outside [1, {n}] (the size of dim {d})", suggestion=f"use 1 <= k <= {n}")
    if n == 1:
        return x, _along(x, 1, d, x.ndim).expand(x.shape)
    sel = _ranks(xl, desc).unsqueeze(-2) == _along(x, k, 0, 2)  # [..., r, i]: element i lands at slot r
    values = _pick(sel, xl.unsqueeze(-2), -1)
    indices = _pick(sel, _along(x, n, 1, 2), -1)
    return values.transpose(d, -1), indices.transpose(d, -1)


def _slots(mask: Tensor, size: int) -> Tensor:
    """(size, N) bool: [r, i] when flat mask element i is the r-th true one (for a fixed-size selection)."""
    rank = mask.cumsum(0) - 1
    return mask.unsqueeze(0) & (rank.unsqueeze(0) == type(mask).arange(size).reshape(size, 1))


def _no_dynamic_shape(what: str, instead: str) -> UnsupportedOp:
    return UnsupportedOp(
        at=what,
        why=f"{what} without size= returns as many elements as the data selects: a shape known only when it runs, "
        "and every shape of a compiled graph is fixed when the graph is built",
        suggestion=f"keep the shape with {instead}, or pass size=N for a fixed-length result padded with fill_value",
    )


# ---- einsum and rearrange parsing --------------------------------------------------------------


def _einsum_inputs(formula: str, xs: Sequence[Tensor]) -> tuple[list[str], str]:
    """Each operand's subscripts and the output's, with any '...' spelled out as spare letters."""
    f = formula.replace(" ", "")
    if f.count("->") > 1:
        raise InvalidArgument(at="einsum", why=f"{formula!r} has more than one '->'", suggestion="write 'ij,jk->ik'")
    lhs, rhs = f.split("->") if "->" in f else (f, None)
    inputs = lhs.split(",")
    if len(inputs) != len(xs):
        raise InvalidArgument(
            at="einsum",
            why=f"{formula!r} names {len(inputs)} operands, {len(xs)} were given",
            suggestion="give one comma-separated subscript per operand",
        )
    for s in [*inputs, *([rhs] if rhs is not None else [])]:
        if s.count("...") > 1 or not all(c in string.ascii_letters for c in s.replace("...", "")):
            raise InvalidArgument(
                at="einsum", why=f"bad subscripts {s!r} in {formula!r}", suggestion="use letters a-z, A-Z and at most one '...'"
            )
    ell_n = [x.ndim - len(s) + 3 if "..." in s else 0 for s, x in zip(inputs, xs)]
    ell = "".join(c for c in string.ascii_letters if c not in f)[: max(ell_n, default=0)]
    inputs = [s.replace("...", ell[len(ell) - n :] if n > 0 else "") for s, n in zip(inputs, ell_n)]
    if rhs is None:
        letters = "".join(inputs)
        rhs = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
    else:
        rhs = rhs.replace("...", ell)
    for s, x in zip(inputs, xs):
        if len(s) != x.ndim:
            raise ShapeMismatch(
                at="einsum",
                why=f"subscripts {s!r} name {len(s)} axes, the operand has shape {x.shape}",
                suggestion="give one letter per axis (or '...' for the leading ones)",
            )
    if len(set(rhs)) != len(rhs) or any(c not in "".join(inputs) for c in rhs):
        raise InvalidArgument(
            at="einsum", why=f"output {rhs!r} repeats a letter or names one no input has", suggestion="list input letters once"
        )
    return inputs, rhs


def _einsum_sizes(inputs: list[str], xs: Sequence[Tensor], ell: set[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for s, x in zip(inputs, xs):
        for c, n in zip(s, x.shape):
            old = sizes.setdefault(c, n)
            if old != n and not (c in ell and 1 in (old, n)):
                raise ShapeMismatch(
                    at="einsum",
                    why=f"index {c!r} has size {old} in one place and {n} in another",
                    suggestion="axes with the same letter must have the same size",
                )
            sizes[c] = max(old, n)
    return sizes


# one side of a rearrange pattern: axis names, and parenthesized groups of them
_Side = list[str | list[str]]


def _rearrange_side(side: str, formula: str) -> _Side:
    """One side of a rearrange pattern: axis names, '...', and parenthesized groups (a '1' is an empty group)."""
    out: _Side = []
    group: list[str] | None = None
    for tok in side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(" and group is None:
            group = []
        elif tok == ")" and group is not None:
            out.append(group)
            group = None
        elif tok == "1":
            if group is None:
                out.append([])
        elif tok == "..." or (tok.isidentifier() and "_" not in (tok[0], tok[-1])):
            (out if group is None else group).append(tok)
        else:
            raise InvalidArgument(
                at="rearrange",
                why=f"{tok!r} in {formula!r} is not an axis name, '...', '1' or a single level of parentheses",
                suggestion="write patterns such as 'b (h w) c -> b h w c'",
            )
    if group is not None:
        raise InvalidArgument(at="rearrange", why=f"unclosed '(' in {formula!r}", suggestion="close every group")
    return out


def _flat(side: _Side) -> list[str]:
    return [n for e in side for n in (e if isinstance(e, list) else [e])]


def _rearrange_pattern(formula: Any, sizes: dict[str, Any]) -> tuple[_Side, _Side, dict[str, int]]:
    """The two sides of a rearrange pattern and its keyword sizes, checked: every axis named once on each side."""
    if not isinstance(formula, str) or formula.count("->") != 1:
        raise InvalidArgument(at="rearrange", why=f"{formula!r} needs exactly one '->'", suggestion="write 'a b -> b a'")
    lhs, rhs = (_rearrange_side(s, formula) for s in formula.split("->"))
    names = _flat(lhs)
    given = {n: _int(v, "rearrange size", 1) for n, v in sizes.items()}
    if len(set(names)) != len(names) or sorted(names) != sorted(_flat(rhs)) or any(n not in names for n in given):
        raise InvalidArgument(
            at="rearrange",
            why=f"{formula!r} must name every axis once on each side (sizes given: {sorted(given)})",
            suggestion="use the same names on both sides, each once, and sizes only for names in the pattern",
        )
    if any(isinstance(e, list) and "..." in e for e in lhs):
        raise InvalidArgument(at="rearrange", why=f"'...' inside a group on the left of {formula!r}", suggestion="move it out")
    return lhs, rhs, given


def _spell_out_ellipsis(lhs: _Side, rhs: _Side, ndim: int) -> tuple[_Side, _Side]:
    """Both sides with '...' replaced by a name for each axis it stands for in a rank-`ndim` input ('...0', ...)."""
    ell = [f"...{i}" for i in range(ndim - len(lhs) + 1)]
    lhs, rhs = ([x for e in side for x in (ell if e == "..." else [e])] for side in (lhs, rhs))
    rhs = [[x for n in e for x in (ell if n == "..." else [n])] if isinstance(e, list) else e for e in rhs]
    return lhs, rhs


def _group_sizes(group: list[str], size: int, given: dict[str, int], formula: str) -> dict[str, int]:
    """The sizes of the axes a group of the input side splits an axis of `size` into."""
    unknown = [n for n in group if n not in given]
    known = math.prod(given[n] for n in group if n in given)
    if len(unknown) > 1 or (unknown and size % known) or (not unknown and known != size):
        raise ShapeMismatch(
            at="rearrange",
            why=f"cannot split an axis of size {size} into ({' '.join(group)}) with sizes {given} in {formula!r}",
            suggestion="give the sizes of all but one axis of each group as keywords, dividing the axis",
        )
    return {n: given.get(n, size // known) for n in group}


class TensorSelect:
    """Shaping, indexing, selection and scans."""

    # mypy refuses `self: Tensor` in a mixin that Tensor subclasses (the self type must be a supertype of the
    # class): hence the `type: ignore[misc]` on each method

    # ---- shaping -------------------------------------------------------------------------------

    def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:  # type: ignore[misc]
        """Pieces along `dim`: of `sizes` each (the last one shorter) for an int, of these sizes for a list."""
        d = _dim(self, dim, "split")
        n = self.shape[d]
        if isinstance(sizes, (tuple, list)):
            parts = [_int(s, "split", 1) for s in sizes]
            if sum(parts) != n:
                raise ShapeMismatch(
                    at="split",
                    why=f"sizes {tuple(parts)} add up to {sum(parts)}, dim {d} has {n}",
                    suggestion=f"give sizes that add up to {n}, or one int for equal pieces",
                )
        else:
            step = _int(sizes, "split", 1)
            parts = [min(step, n - i) for i in range(0, n, step)]
        starts = [sum(parts[:i]) for i in range(len(parts))]
        return tuple(
            self.shrink(tuple((b, b + s) if i == d else None for i in range(self.ndim))) for b, s in zip(starts, parts)
        )

    def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:  # type: ignore[misc]
        """At most `chunks` pieces of ceil(n / chunks) along `dim` (fewer when they run out, as tinygrad)."""
        c = _int(chunks, "chunk", 1)
        return list(self.split(-(-self.shape[_dim(self, dim, "chunk")] // c), dim))

    def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:  # type: ignore[misc]
        """Axis `dim` split into `sizes` (one may be -1)."""
        d = _dim(self, dim, "unflatten")
        new = list(_ints(sizes, "unflatten"))
        known = math.prod(s for s in new if s != -1)
        if new.count(-1) > 1 or any(s == 0 or s < -1 for s in new) or self.shape[d] % known:
            raise ShapeMismatch(
                at="unflatten",
                why=f"sizes {tuple(new)} cannot split dim {d} of size {self.shape[d]}",
                suggestion="give positive sizes (at most one -1) whose product is the axis size",
            )
        new = [self.shape[d] // known if s == -1 else s for s in new]
        if math.prod(new) != self.shape[d]:
            raise ShapeMismatch(
                at="unflatten",
                why=f"sizes {tuple(new)} hold {math.prod(new)} elements, dim {d} has {self.shape[d]}",
                suggestion="make the sizes multiply to the axis size",
            )
        return self.reshape(self.shape[:d] + tuple(new) + self.shape[d + 1 :])

    def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:  # type: ignore[misc]
        """Circular shift by `shifts` along `dims` (of the flattened tensor if dims is None)."""
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        sh, ds = _ints(shifts, "roll"), tuple(_dim(self, d, "roll") for d in _ints(dims, "roll"))
        if len(sh) != len(ds):
            raise InvalidArgument(at="roll", why=f"{len(sh)} shifts for {len(ds)} dims", suggestion="give one shift per dim")
        total = [0] * self.ndim
        for s, d in zip(sh, ds):
            total[d] = (total[d] + s) % self.shape[d]
        if not any(total):
            return self
        doubled = self.repeat(*[2 if t else 1 for t in total])
        return doubled.shrink(tuple((n - t, 2 * n - t) if t else None for n, t in zip(self.shape, total)))

    def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:  # type: ignore[misc]
        """Each element `repeats` times in a row along `dim` (of the flattened tensor if dim is None)."""
        r = _int(repeats, "repeat_interleave", 1)
        x, d = (self.flatten(), 0) if dim is None else (self, _dim(self, dim, "repeat_interleave"))
        s = x.shape
        return x.unsqueeze(d + 1).expand(*s[: d + 1], r, *s[d + 1 :]).reshape(*s[:d], s[d] * r, *s[d + 1 :])

    def diag(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The (n, n) matrix with this 1-d tensor on its diagonal and zeros elsewhere."""
        if self.ndim != 1:
            raise ShapeMismatch(
                at="diag",
                why=f"diag takes a 1-d tensor, got shape {self.shape}",
                suggestion="use diagonal() to read the diagonal of a matrix",
            )
        n = self.shape[0]
        rows = self.unsqueeze(-1).pad(((0, 0), (0, n))).flatten()  # x[i] followed by n zeros, for each i
        return rows.shrink(((0, n * n),)).reshape(n, n)

    def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # type: ignore[misc]
        """The diagonal of axes dim1 and dim2 (above it for offset > 0, below for < 0), as a new last axis."""
        if self.ndim < 2:
            raise ShapeMismatch(at="diagonal", why=f"needs 2 or more axes, got {self.shape}", suggestion="use diag()")
        a, b = self._resolve_axis(dim1, what="diagonal"), self._resolve_axis(dim2, what="diagonal")
        off = _int(offset, "diagonal")
        if a == b:
            raise InvalidArgument(at="diagonal", why=f"dim1 and dim2 are both axis {a}", suggestion="pick two different axes")
        x = self.permute(*[i for i in range(self.ndim) if i not in (a, b)], a, b)
        r0, c0 = max(-off, 0), max(off, 0)
        d = min(x.shape[-2] - r0, x.shape[-1] - c0)
        if d <= 0:
            raise InvalidSize(
                at="diagonal",
                why=f"offset {off} leaves no diagonal in a {x.shape[-2]}x{x.shape[-1]} matrix",
                suggestion="use an offset inside the matrix (empty tensors are not supported)",
            )
        x = x.shrink((*[None] * (x.ndim - 2), (r0, r0 + d), (c0, c0 + d)))
        return x.flatten(-2)[..., :: d + 1]

    def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:  # type: ignore[misc]
        """Coordinate grids of 1-d (or 0-d) tensors; 'xy' swaps the first two output axes, as numpy."""
        ts = (self, *(_check_tensor(t, "meshgrid", "every argument") for t in args))
        if indexing not in ("ij", "xy"):
            raise InvalidArgument(at="meshgrid", why=f"indexing={indexing!r}", suggestion="use indexing='ij' or 'xy'")
        if any(t.ndim > 1 for t in ts):
            raise ShapeMismatch(at="meshgrid", why="meshgrid takes 0-d or 1-d tensors", suggestion="flatten them first")
        if len(ts) == 1:
            return ts
        sizes = [t.numel() for t in ts]
        where = list(range(len(ts)))
        if indexing == "xy":
            where[0], where[1] = 1, 0
        shape = [sizes[where.index(k)] for k in range(len(ts))]
        return tuple(t.reshape([n if k == w else 1 for k in range(len(ts))]).expand(shape) for t, n, w in zip(ts, sizes, where))

    def _to_shape(self: Tensor, shape: Any, args: tuple[Any, ...], what: str) -> list[int]:  # type: ignore[misc]
        new = _shape_arg(shape, args)
        if len(new) != self.ndim:
            raise ShapeMismatch(
                at=what,
                why=f"{len(new)} sizes for a tensor of shape {self.shape}",
                suggestion="give one size (or None) per axis",
            )
        return [s if n is None else _int(n, what, 1) for s, n in zip(self.shape, new)]

    def shrink_to(self: Tensor, shape: Any, *args: Any) -> Tensor:  # type: ignore[misc]
        """The leading `shape` part of each axis (None keeps an axis)."""
        new = self._to_shape(shape, args, "shrink_to")
        if any(n > s for n, s in zip(new, self.shape)):
            raise ShapeMismatch(
                at="shrink_to", why=f"{tuple(new)} is larger than {self.shape}", suggestion="use pad_to to grow a tensor"
            )
        return self.shrink(tuple((0, n) for n in new))

    def pad_to(self: Tensor, shape: Any, *args: Any, value: Scalar = 0) -> Tensor:  # type: ignore[misc]
        """Padded at the end of each axis to `shape` (None keeps an axis) with `value`."""
        new = self._to_shape(shape, args, "pad_to")
        if any(n < s for n, s in zip(new, self.shape)):
            raise ShapeMismatch(
                at="pad_to", why=f"{tuple(new)} is smaller than {self.shape}", suggestion="use shrink_to to cut a tensor"
            )
        return self if tuple(new) == self.shape else self.pad(tuple((0, n - s) for n, s in zip(new, self.shape)), value=value)

    def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:  # type: ignore[misc]
        """Windows of `size` every `step` along `dim`: dim becomes (n - size) // step + 1, a new last axis `size`."""
        d = _dim(self, dim, "unfold")
        k, s = _int(size, "unfold size", 1), _int(step, "unfold step", 1)
        if k > self.shape[d]:
            raise ShapeMismatch(
                at="unfold", why=f"window {k} is longer than dim {d} ({self.shape[d]})", suggestion="use a smaller size"
            )
        w = _windows(self, d, k, s, 1)  # (..., windows, k, ...)
        return w.permute(*[i for i in range(w.ndim) if i != d + 1], d + 1)

    def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:  # type: ignore[misc]
        """einops-style 'b (h w) c -> b h w c': named axes, one level of parentheses, '...', '1', sizes as keywords."""
        lhs, rhs, given = _rearrange_pattern(formula, sizes)
        if "..." in _flat(lhs):
            lhs, rhs = _spell_out_ellipsis(lhs, rhs, self.ndim)
        if len(lhs) != self.ndim:
            raise ShapeMismatch(
                at="rearrange", why=f"{formula!r} has {len(lhs)} input axes, the tensor {self.shape}", suggestion="one per axis"
            )
        dims: dict[str, int] = {}
        for e, s in zip(lhs, self.shape):
            dims.update(_group_sizes(e if isinstance(e, list) else [e], s, given, formula))
        names = _flat(lhs)
        x = self.reshape([dims[n] for n in names]).permute([names.index(n) for n in _flat(rhs)]) if names else self
        return x.reshape([math.prod(dims[n] for n in e) if isinstance(e, list) else dims[e] for e in rhs])

    # ---- indexing and selection ----------------------------------------------------------------

    def one_hot(self: Tensor, num_classes: int) -> Tensor:  # type: ignore[misc]
        """int32 0/1 along a new last axis; an index outside [0, num_classes) gives a row of zeros (as tinygrad)."""
        if not self.dtype.is_int:
            raise DTypeError(at="one_hot", why=f"one_hot of {self.dtype.name}", suggestion="use an integer tensor")
        c = _int(num_classes, "one_hot", 1)
        return (self.unsqueeze(-1) == type(self).arange(c)).where(1, 0)

    def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:  # type: ignore[misc]
        """`value` where the bool `mask` (broadcast to self's shape) holds, self elsewhere."""
        m = _check_tensor(mask, "masked_fill", "mask")
        if not m.dtype.is_bool:
            raise DTypeError(at="masked_fill", why=f"mask is {m.dtype.name}", suggestion="pass a bool mask (e.g. x != 0)")
        other = value.shape if hasattr(value, "shape") else ()
        if broadcast_shapes(self.shape, m.shape, tuple(other), at="masked_fill") != self.shape:
            raise ShapeMismatch(
                at="masked_fill",
                why=f"mask {m.shape} or value {tuple(other)} would grow {self.shape}",
                suggestion="the mask and value must broadcast to the tensor's shape",
            )
        return m.where(value, self)

    def any(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """Whether any element is non-zero (bool); NaN counts as true, as numpy."""
        return (self if self.dtype.is_bool else self != 0).max(axis, keepdim)

    def all(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        return (self == 0 if not self.dtype.is_bool else self.logical_not()).max(axis, keepdim).logical_not()

    def _arg_extreme(self: Tensor, axis: Any, keepdim: bool, largest: bool, what: str) -> Tensor:  # type: ignore[misc]
        """The int32 position of the first maximum (minimum), or of the first NaN if there is one (numpy's rule)."""
        keep = _flag(keepdim, what)
        if axis is None or self.ndim == 0:
            if axis is not None:
                self._resolve_axis(axis, what=what)
            out = self.reshape(-1)._arg_extreme(0, False, largest, what)
            return out.reshape((1,) * self.ndim) if keep else out
        a = self._resolve_axis(axis, what=what)
        best = self.max(a, keepdim=True) if largest else self.min(a, keepdim=True)
        hit = _same(self, best)
        n = self.shape[a]
        return hit.where(_along(self, n, a, self.ndim), n).min(a, keepdim=keep)

    def argmax(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """int32 index of the first maximum along `axis` (of the flattened tensor if None)."""
        return self._arg_extreme(axis, keepdim, True, "argmax")

    def argmin(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """int32 index of the first minimum along `axis` (of the flattened tensor if None)."""
        return self._arg_extreme(axis, keepdim, False, "argmin")

    def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """(values, int32 indices), stable (equal values keep their order), NaN last (first if descending).
        A rank formulation: O(n^2) work along `dim`."""
        return _ordered(self, dim, descending, None, "sort")

    def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:  # type: ignore[misc]
        """The int32 indices of sort(dim, descending); O(n^2) along `dim`."""
        return _ordered(self, dim, descending, None, "argsort")[1]

    def topk(  # type: ignore[misc]
        self: Tensor,
        k: int,
        dim: int = -1,
        largest: bool = True,
        sorted_: bool = True,
    ) -> tuple[Tensor, Tensor]:
        """(values, int32 indices) of the k largest (smallest) along `dim`, in order, ties by index; O(n^2) along
        `dim`. sorted_=False returns them sorted too (any order is allowed)."""
        _flag(sorted_, "topk")
        return _ordered(self, dim, _flag(largest, "topk"), _int(k, "topk"), "topk")

    def _scatter_parts(self: Tensor, dim: Any, index: Tensor, src: Tensor, what: str) -> tuple[int, Tensor, Tensor]:  # type: ignore[misc]
        """Axis d, the mask index.shape + (n,) of where each source lands, and src (cut to index) along it."""
        idx, s = _check_tensor(index, what, "index"), _check_tensor(src, what, "src")
        if not idx.dtype.is_int:
            raise DTypeError(at=what, why=f"index is {idx.dtype.name}", suggestion="cast the index to int32")
        if s.dtype != self.dtype:
            raise DTypeError(
                at=what, why=f"src is {s.dtype.name}, self is {self.dtype.name}", suggestion="cast src to self's dtype"
            )
        d = _dim(self, dim, what)
        if (
            not idx.ndim == s.ndim == self.ndim
            or any(i > n for i, n in zip(idx.shape, s.shape))
            or any(i > n for k, (i, n) in enumerate(zip(idx.shape, self.shape)) if k != d)
        ):
            raise ShapeMismatch(
                at=what,
                why=f"index {idx.shape}, src {s.shape} and self {self.shape} do not fit",
                suggestion="same rank; index no larger than src, and than self off `dim`",
            )
        lands = idx.unsqueeze(-1) == type(self).arange(self.shape[d])
        return d, lands, s.shrink(tuple((0, i) for i in idx.shape)).unsqueeze(-1)

    def _placed(self: Tensor, t: Tensor, d: int, fill: Scalar) -> Tensor:  # type: ignore[misc]
        """A scatter result, index-shaped with axis d reduced (kept) and targets on the last axis, in self's shape."""
        out = t.transpose(d, -1).squeeze(-1)
        return out.pad(
            tuple((0, 0) if k == d else (0, n - m) for k, (n, m) in enumerate(zip(self.shape, out.shape))), value=fill
        )

    def scatter(self: Tensor, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:  # type: ignore[misc]
        """out = self; out[..., index[..., i, ...], ...] = src[..., i, ...] along `dim` (the last source wins where an
        index repeats; indices outside the axis write nothing). reduce='add'/'multiply' takes a scalar src."""
        if reduce not in (None, "add", "multiply"):
            raise InvalidArgument(at="scatter", why=f"reduce={reduce!r}", suggestion="use None, 'add' or 'multiply'")
        if not isinstance(src, type(self)):
            idx = _check_tensor(index, "scatter", "index")
            src = _scalar_as(self, src, "scatter").reshape((1,) * idx.ndim).expand(idx.shape)
        elif reduce is not None:
            raise InvalidArgument(
                at="scatter", why=f"reduce={reduce!r} with a tensor src", suggestion="use scatter_reduce for tensor sources"
            )
        if reduce is not None:
            return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
        d, lands, s = self._scatter_parts(dim, index, src, "scatter")
        pos = _along(lands, lands.shape[d], d, lands.ndim)
        last = lands.where(pos, -1).max(d, keepdim=True)
        value = _pick(lands & (pos == last), s, d, keepdim=True)
        return self._placed(last >= 0, d, False).where(self._placed(value, d, 0), self)

    def scatter_reduce(  # type: ignore[misc]
        self: Tensor,
        dim: int,
        index: Tensor,
        src: Tensor,
        reduce: str,
        include_self: bool = True,
    ) -> Tensor:
        """Reduce ('sum', 'prod', 'mean', 'amax', 'amin') the sources landing on each target along `dim`, with self's
        value too if include_self; targets nothing lands on keep self. 'mean' returns floats (as tinygrad)."""
        if reduce not in SCATTER_REDUCES:
            raise InvalidArgument(at="scatter_reduce", why=f"reduce={reduce!r}", suggestion=f"use one of {SCATTER_REDUCES}")
        inc = _flag(include_self, "scatter_reduce")
        d, lands, s = self._scatter_parts(dim, index, src, "scatter_reduce")
        if self.dtype.is_bool and reduce in ("sum", "prod", "mean"):
            raise DTypeError(at="scatter_reduce", why=f"{reduce} of bools", suggestion="cast to an integer dtype first")
        hit = self._placed(lands.max(d, keepdim=True), d, False)
        if reduce == "mean":
            x = self._float()
            total = self._placed(lands.where(s.cast(x.dtype), 0).sum(d, keepdim=True, dtype=x.dtype), d, 0)
            count = self._placed(lands.sum(d, keepdim=True), d, 0).cast(x.dtype)
            return (total + x) / (count + 1) if inc else hit.where(total / count.maximum(1), x)
        fill, combine = {
            "sum": (0, lambda a, b: a + b),
            "prod": (1, lambda a, b: a * b),
            "amax": (_lowest(self.dtype), lambda a, b: a.maximum(b)),
            "amin": (_highest(self.dtype), lambda a, b: a.minimum(b)),
        }[reduce]
        w = lands.where(s, fill)
        agg = {
            "sum": lambda: w.sum(d, keepdim=True, dtype=self.dtype),
            "prod": lambda: w.prod(d, keepdim=True).cast(self.dtype),
            "amax": lambda: w.max(d, keepdim=True),
            "amin": lambda: w.min(d, keepdim=True),
        }[reduce]()
        placed = self._placed(agg, d, fill)
        return hit.where(combine(self, placed).cast(self.dtype) if inc else placed, self)

    def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: Scalar = 0) -> Tensor:  # type: ignore[misc]
        """The elements where `mask` holds, in order, as a 1-d tensor of `size` (padded with fill_value, cut if more).
        size is required: the count depends on the data. O(size * numel)."""
        m = _check_tensor(mask, "masked_select", "mask")
        if not m.dtype.is_bool:
            raise DTypeError(at="masked_select", why=f"mask is {m.dtype.name}", suggestion="pass a bool mask (e.g. x != 0)")
        if size is None:
            raise _no_dynamic_shape("masked_select", "masked_fill(mask.logical_not(), 0) or mask.where(x, 0)")
        n = _int(size, "masked_select size", 1)
        fill = _scalar_as(self, fill_value, "masked_select fill_value")
        m = m.expand(self.shape) if m.shape != self.shape else m
        slots = _slots(m.reshape(-1), n)
        return slots.max(-1).where(_pick(slots, self.reshape(1, -1), -1), fill)

    def nonzero(self: Tensor, size: int | None = None, fill_value: int = 0) -> Tensor:  # type: ignore[misc]
        """int32 (size, ndim) coordinates of the non-zero elements in row-major order, padded with fill_value (cut if
        more). size is required: the count depends on the data. O(size * numel)."""
        if size is None:
            raise _no_dynamic_shape("nonzero", "x != 0 (a mask) with where / masked_fill")
        n = _int(size, "nonzero size", 1)
        if self.ndim == 0:
            raise ShapeMismatch(at="nonzero", why="a 0-d tensor has no coordinates", suggestion="reshape it to (1,)")
        coords = [_along(self, s, i, self.ndim).expand(self.shape).reshape(-1) for i, s in enumerate(self.shape)]
        coords_t = coords[0].stack(*coords[1:], dim=-1)  # (numel, ndim)
        slots = _slots((self if self.dtype.is_bool else self != 0).reshape(-1), n)  # (size, numel)
        fill = _scalar_as(type(self).arange(1), fill_value, "nonzero fill_value")
        return slots.max(-1, keepdim=True).where(_pick(slots.unsqueeze(-1), coords_t.unsqueeze(0), 1), fill)

    # ---- scans and statistics ------------------------------------------------------------------

    def cumprod(self: Tensor, axis: int) -> Tensor:  # type: ignore[misc]
        """Running product along `axis`, in self's dtype (ints wrap as they multiply); O(n^2) along the axis."""
        return _scan(self, axis, "cumprod", True if self.dtype.is_bool else 1, lambda w: w.prod(-1).cast(self.dtype))

    def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """(running max, int32 index of its first occurrence) along `axis` (tinygrad's tie rule; NaN propagates)."""
        values = _scan(self, axis, "cummax", _lowest(self.dtype), lambda w: w.max(-1))
        return values, _scan_index(self, values, axis, "cummax")

    def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """(running min, int32 index of its first occurrence) along `axis` (tinygrad's tie rule; NaN propagates)."""
        values = _scan(self, axis, "cummin", _highest(self.dtype), lambda w: w.min(-1))
        return values, _scan_index(self, values, axis, "cummin")

    def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
        """log(cumsum(exp(x))) along `axis`, shifted by the running max (so no overflow); O(n^2) along the axis."""
        x = self._float()
        if x.ndim == 0:
            x._resolve_axis(axis, what="logcumsumexp")
            return x
        a = x._resolve_axis(axis, what="logcumsumexp")
        xl = x.transpose(a, -1)
        m = _scan(xl, -1, "logcumsumexp", -math.inf, lambda w: w.max(-1))
        m = (m.abs() == math.inf).where(0.0, m)  # an infinite running max shifts by 0 (inf - inf would be NaN)
        terms = _upto(x, xl.shape[-1]).where(xl.unsqueeze(-2) - m.unsqueeze(-1), -math.inf).exp().sum(-1)
        return (terms.log() + m).transpose(a, -1)

    def var_mean(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        return self.var(axis, keepdim, _int(correction, "var_mean")), self.mean(axis, keepdim)

    def std_mean(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        return self.std(axis, keepdim, _int(correction, "std_mean")), self.mean(axis, keepdim)

    # ---- einsum --------------------------------------------------------------------------------

    @staticmethod
    def einsum(formula: str, *operands: Any, dtype: DType | str | None = None) -> Tensor:
        """Einstein summation ('ij,jk->ik', 'ii->i', 'bij,bjk->bik', '...ij,...jk'; implicit output: the letters
        used once, sorted): repeated letters of one operand take its diagonal, then the operands are aligned,
        multiplied and summed over the letters the output lacks."""
        if not isinstance(formula, str):
            raise InvalidArgument(at="einsum", why=f"formula {formula!r} is not a string", suggestion="pass 'ij,jk->ik'")
        ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
        xs = [_check_tensor(x, "einsum", "every operand") for x in ops]
        if not xs:
            raise InvalidArgument(at="einsum", why="no operands", suggestion="pass the tensors after the formula")
        inputs, out = _einsum_inputs(formula, xs)
        for i, (s, x) in enumerate(zip(inputs, xs)):
            for c in sorted(set(s)):
                while s.count(c) > 1:
                    j, k = s.index(c), s.index(c, s.index(c) + 1)
                    if x.shape[j] != x.shape[k]:
                        raise ShapeMismatch(
                            at="einsum",
                            why=f"repeated index {c!r} over sizes {x.shape[j]} and {x.shape[k]}",
                            suggestion="use equal sizes",
                        )
                    x, s = x.diagonal(0, j, k), s[:j] + s[j + 1 : k] + s[k + 1 :] + c
            inputs[i], xs[i] = s, x
        ell = {c for c in "".join(inputs) if c not in formula}
        alpha = sorted(_einsum_sizes(inputs, xs, ell))
        aligned = [
            (x.permute(*[s.index(c) for c in sorted(s)]) if s else x).reshape(
                [x.shape[s.index(c)] if c in s else 1 for c in alpha]
            )
            for s, x in zip(inputs, xs)
        ]
        prod = aligned[0]
        for x in aligned[1:]:
            prod = prod * x
        summed = [i for i, c in enumerate(alpha) if c not in out]
        res = prod.sum(summed, dtype=dtype) if summed else (prod.cast(dtype) if dtype is not None else prod)
        kept = [c for c in alpha if c in out]
        return res.permute(*[kept.index(c) for c in out]) if len(out) > 1 else res
