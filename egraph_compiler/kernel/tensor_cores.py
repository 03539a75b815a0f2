"""Tensor-core matching for the CUDA launch plan: which items are a 16x16x16 wmma product, with what operand
layouts, and how their k loop stages operand tiles through shared memory.

An item matches when it stores the float32 ADD REDUCE, over one UNROLL range of 16 (k), of the product of two
ungated half-precision loads, each indexed by its own WARP range of 16 (m or n) with a unit stride along that range
or k; UPCAST END ranges give a warp several tiles, each selecting tiles of one operand. Each step of the match says
what it needs when it fails: the plan writes that into the source as a comment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.analysis import RangeDeps, axis_type, index_of, range_size
from egraph_compiler.kernel.program import buffer_of

HALFS = (dtypes.float16, dtypes.bfloat16)
TC_MAX_TILES = 16  # accumulator fragments per warp (8 floats per thread each)
STATIC_SMEM = 48 << 10  # __shared__ arrays are static: 48 KiB per block


def affine(u: UOp) -> dict[UOp | None, int] | None:
    """u as {range: coefficient, None: constant} if it is an affine index expression, else None."""
    memo: dict[UOp, dict[UOp | None, int] | None] = {}
    for n in u.toposort():
        if n.op is Ops.CONST and (n.dtype.is_int or n.dtype is dtypes.index):
            memo[n] = {None: int(n.arg)}
        elif n.op is Ops.RANGE:
            memo[n] = {n: 1}
        elif n.op is Ops.CAST and n.src[0].dtype.is_int:
            memo[n] = memo[n.src[0]]
        elif n.op is Ops.ADD and None not in (memo[n.src[0]], memo[n.src[1]]):
            out = dict(memo[n.src[0]] or {})
            for k, v in (memo[n.src[1]] or {}).items():
                out[k] = out.get(k, 0) + v
            memo[n] = out
        elif n.op is Ops.MUL and None not in (memo[n.src[0]], memo[n.src[1]]):
            x, y = memo[n.src[0]] or {}, memo[n.src[1]] or {}
            if set(y) <= {None}:
                x, y = y, x
            memo[n] = {k: v * x.get(None, 0) for k, v in y.items()} if set(x) <= {None} else None
        else:
            memo[n] = None
    return memo[u]


@dataclass
class TCMatch:
    reduce: UOp
    m: UOp
    n: UOp
    k: UOp
    a: tuple[UOp, UOp, str, int]  # (buffer, index, layout, ldm)
    b: tuple[UOp, UOp, str, int]
    elem: str
    ups: tuple[UOp, ...] = ()  # UPCAST ranges: tiles per warp, one accumulator fragment each


@dataclass(frozen=True)
class TCOperand:
    """One operand's block tile in shared memory: `tiles` (the LOCAL/UPCAST ranges its index uses) 16x16 tiles side
    by side, rows of `pitch` elements (padded: ldmatrix rows fall in distinct banks), for each of `ks` k steps."""

    buf: UOp
    index: UOp
    layout: str
    tiles: tuple[UOp, ...]
    pitch: int


@dataclass(frozen=True)
class TCStage:
    """How a TC item's k loop stages its operands: `ks` k steps of 16 per stage, two stages in flight (cp.async)."""

    loop: UOp | None  # the reduce's one sequential range (None: a single k step)
    ks: int
    a: TCOperand
    b: TCOperand
    smem: int  # bytes of the two stages' buffers


def match_tc(loop: list[UOp], store: UOp, deps: RangeDeps) -> TCMatch | str:
    """The wmma plan of an item (its END ranges `loop`, its STORE), or why it has none: its ranges, its k-16
    REDUCE, the two half-precision operand loads of the product it sums, and each operand's layout (each step says
    what it needs when it fails)."""
    ranges = _tc_ranges(loop)
    if isinstance(ranges, str):
        return ranges
    warps, rest, ups = ranges
    reduction = _tc_reduce(store)
    if isinstance(reduction, str):
        return reduction
    red, k = reduction
    loads = _tc_loads(red)
    if isinstance(loads, str):
        return loads
    idx = [index_of(x.src[0]) for x in loads]
    if idx[0] is None or idx[1] is None:
        return "loads need an index"
    wa = [w for w in warps if w in deps[idx[0]]]
    wb = [w for w in warps if w in deps[idx[1]]]
    if len(wa) != 1 or len(wb) != 1 or wa == wb:
        return "each operand must depend on a different WARP range"
    m, n = wa[0], wb[0]
    inside = set(rest) | set(red.src[1:])
    sides = []
    for x, ix, w, is_a in ((loads[0], idx[0], m, True), (loads[1], idx[1], n, False)):
        if not deps[ix] <= inside | {w}:
            return "operand indices use ranges outside the tile"
        side = _tc_operand(x, ix, w, k, is_a)
        if isinstance(side, str):
            return side
        sides.append(side)
    if any((r in deps[idx[0]]) == (r in deps[idx[1]]) for r in ups):
        return "each UPCAST range must select tiles of exactly one operand"
    elem = "half" if loads[0].dtype is dtypes.float16 else "__nv_bfloat16"
    return TCMatch(red, m, n, k, sides[0], sides[1], elem, ups)


def tc_stage(block: list[UOp], tc: TCMatch, deps: RangeDeps) -> TCStage | None:
    """How a TC item (its block ranges `block`) stages operand tiles in shared memory, or None (a reduce over several sequential
    ranges, or tiles too big for 48 KiB: fragments are then loaded from global memory)."""
    seq = [r for r in tc.reduce.src[1:] if r.op is Ops.RANGE and r is not tc.k]
    if len(seq) > 1:
        return None
    loop = seq[0] if seq else None
    ops = []
    for buf, ix, layout, _ in (tc.a, tc.b):
        tiles = tuple(r for r in (*block, *tc.ups) if r in deps[ix])
        ops.append(TCOperand(buf, ix, layout, tiles, 16 * math.prod(range_size(r) for r in tiles) + 8))
    step = 16 * (ops[0].pitch + ops[1].pitch) * 2  # bytes of one k step of both operands (2-byte elements)
    budget = STATIC_SMEM - 1024 * math.prod(range_size(r) for r in block)  # less the epilogue's tiles
    trips = range_size(loop) if loop is not None else 1
    for ks in (4, 2, 1):
        if trips % ks == 0 and 2 * ks * step <= budget:
            return TCStage(loop, ks, ops[0], ops[1], 2 * ks * step)
    return None


def _tc_ranges(loop: list[UOp]) -> tuple[list[UOp], list[UOp], tuple[UOp, ...]] | str:
    """(the two WARP ranges, the other END ranges, the UPCAST ones among them: one tile each)."""
    warps = [r for r in loop if axis_type(r) is AxisType.WARP]
    if len(warps) != 2 or any(range_size(w) != 16 for w in warps):
        return "needs exactly two WARP ranges of size 16"
    rest = [r for r in loop if r not in warps]
    allowed = {AxisType.GLOBAL, AxisType.LOCAL, AxisType.UPCAST}
    if not any(axis_type(r) is AxisType.GLOBAL for r in rest):
        allowed |= {AxisType.LOOP, AxisType.THREAD}
    if any(axis_type(r) not in allowed for r in rest):
        return "other END ranges must be GLOBAL/LOCAL/UPCAST (or LOOP without GLOBAL)"
    ups = tuple(r for r in rest if axis_type(r) is AxisType.UPCAST)
    if math.prod(range_size(r) for r in ups) > TC_MAX_TILES:
        return f"at most {TC_MAX_TILES} tiles (UPCAST combinations) per warp"
    return warps, rest, ups


def _is_k16(r: UOp) -> bool:
    return r.op is Ops.RANGE and axis_type(r) is AxisType.UNROLL and range_size(r) == 16


def _tc_reduce(store: UOp) -> tuple[UOp, UOp] | str:
    """(the float32 ADD REDUCE over one UNROLL range of 16, that range: the k of a 16x16x16 step)."""
    k16 = [u for u in store.toposort() if u.op is Ops.REDUCE and any(_is_k16(r) for r in u.src[1:])]
    if len(k16) != 1:
        return "needs exactly one REDUCE with an UNROLL range of size 16"
    red = k16[0]
    if red.arg[0] is not Ops.ADD or red.dtype is not dtypes.float32:
        return "the REDUCE must be ADD in float32"
    ks = [r for r in red.src[1:] if _is_k16(r)]
    if len(ks) != 1 or any(axis_type(r) is AxisType.GROUP_REDUCE for r in red.src[1:]):
        return "the REDUCE needs one UNROLL-16 range and no GROUP_REDUCE range"
    return red, ks[0]


def _tc_loads(red: UOp) -> list[UOp] | str:
    """The two ungated half-precision loads whose product (cast to float32) the REDUCE sums."""
    body = red.src[0]
    if body.op is not Ops.MUL:
        return "the REDUCE body must be a product"
    loads: list[UOp] = []
    for s in body.src:
        x = s.src[0] if s.op is Ops.CAST else s
        if x.op is not Ops.LOAD or len(x.src) > 2 or x.dtype not in HALFS or s.dtype is not dtypes.float32:
            return "the product must be of two ungated float16/bfloat16 loads cast to float32"
        loads.append(x)
    if loads[0].dtype != loads[1].dtype:
        return "both operands must have the same dtype"
    return loads


def _tc_operand(load: UOp, ix: UOp, w: UOp, k: UOp, is_a: bool) -> tuple[UOp, UOp, str, int] | str:
    """(buffer, index, layout, leading dimension) of operand A (element (m, k)) or B (element (k, n)), whose
    WARP range is w: unit stride along w or k, a leading dimension that is a multiple of 8, tiles 32-byte aligned."""
    aff = affine(ix)
    if aff is None:
        return "operand indices must be affine"
    cw, ck = aff.get(w, 0), aff.get(k, 0)
    if is_a:  # A: element (m, k); row_major: m*ldm + k
        layout, ldm = ("row_major", cw) if ck == 1 else ("col_major", ck) if cw == 1 else ("", 0)
    else:  # B: element (k, n); row_major: k*ldm + n
        layout, ldm = ("row_major", ck) if cw == 1 else ("col_major", cw) if ck == 1 else ("", 0)
    if not layout or ldm <= 0 or ldm % 8:
        return "operands need a unit stride and a leading dimension that is a multiple of 8"
    if any(c % 16 for key, c in aff.items() if key not in (w, k)):
        return "tile origins must be 32-byte aligned (other coefficients multiples of 16)"
    return buffer_of(load.src[0]), ix, layout, ldm
