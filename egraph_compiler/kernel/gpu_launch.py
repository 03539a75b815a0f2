"""The launch plan of a kernel on an NVIDIA GPU: which ranges become threads, blocks and loops.

A kernel's stores become items (each with the ranges its threads, blocks and sequential loops take, by axis type);
consecutive independent items share a phase (one launch); a product of two half-precision loads over WARP ranges
becomes a tensor-core item (wmma fragments, operands staged through shared memory when they fit); a REDUCE that
all threads of a block compute alike is shared by the block, and a long one with few outputs is split over the
grid. `plan_launch(kernel)` makes these decisions once, as a `LaunchPlan` value; the CUDA renderer
(backends/cuda.py) emits C from it and the GPU estimator (extract/gpu_cost.py) prices it: both read the same plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.analysis import Evaluation, RangeDeps, index_of, range_size, store_items
from egraph_compiler.kernel.program import Kernel, buffer_of

HALFS = (dtypes.float16, dtypes.bfloat16)
# accumulators warp shuffles move (float, double, 32- and 64-bit integers; halves accumulate in float)
SHUFFLE_DTYPES = frozenset(
    {dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.index}
)
GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)
TC_MAX_TILES = 16  # accumulator fragments per warp (8 floats per thread each)
STATIC_SMEM = 48 << 10  # __shared__ arrays are static: 48 KiB per block
FLAT_BLOCK = 256
MAX_LANES = 64  # UPCAST END ranges expanded into at most this many lanes; beyond, unrolled loops
COOP_MIN_TRIPS = 128  # below this a block-uniform REDUCE is cheaper run whole by every thread than shared
# a REDUCE over many iterations whose kernel has few outputs (a full sum) is split over the grid: up to this many
# blocks, each thread still taking at least SPLIT_MIN_ITERS iterations
SPLIT_BLOCKS = 1024
SPLIT_MIN_ITERS = 32


def axis_type(r: UOp) -> AxisType:
    return r.arg[1]


def unsupported(
    at: str, why: str, suggestion: str = "check the kernel AST against egraph_compiler/kernel/program.py"
) -> UnsupportedOp:
    return UnsupportedOp(at=at, why=why, suggestion=suggestion)


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


@dataclass
class Item:
    store: UOp
    loop: list[UOp]
    grid: list[UOp] = field(default_factory=list)
    block: list[UOp] = field(default_factory=list)
    seq: list[UOp] = field(default_factory=list)
    group: list[UOp] = field(default_factory=list)
    tc: TCMatch | None = None
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    lanes: list[UOp] = field(default_factory=list)  # UPCAST END ranges expanded into lanes
    stage: TCStage | None = None  # a TC item's operand staging through shared memory (None: fragments from global)


# How a phase's threads take its ranges: "warps" (tensor cores: a warp per tile, threadIdx.y over the block
# ranges), "axes" (each block range its own threadIdx axis), "linear" (block ranges decomposed from threadIdx.x),
# "flat" (no block ranges: one linear `gid` over blocks of FLAT_BLOCK threads, decomposed into the grid ranges).
ThreadMap = str


@dataclass
class Phase:
    items: list[Item]
    grid: list[UOp]
    block: list[UOp]
    group: list[UOp]
    tc: bool
    threads: tuple[int, int, int] = (1, 1, 1)  # the block shape of its launch
    thread_map: ThreadMap = "flat"
    shared: SharedBlock | None = None  # how its blocks share work (None: they do not)
    split: GridSplit | None = None  # its REDUCE split over the grid (two launches)


@dataclass(frozen=True)
class SharedBlock:
    """A phase whose blocks run its code in lockstep (no tail return, no per-thread branch around it): `threads`
    per block, `varying` the ranges whose value differs between a block's threads, `ltid` the C expression of a
    thread's linear index in its block."""

    threads: int
    varying: frozenset[UOp]
    ltid: str
    parts: int = 1  # a grid-split REDUCE: this many blocks share it, `part` (a C expression) is this block's
    part: str = "0"


@dataclass(frozen=True)
class GridSplit:
    """A flat phase whose one REDUCE runs in two launches: `block.parts` blocks per output each combine their share
    of the iterations into a partial in a scratch buffer, then one block per output combines the partials and
    stores."""

    reduce: UOp
    outputs: int
    block: SharedBlock


class LaunchPlanner:
    """Makes a kernel's launch decisions (see `plan_launch`): its items (one STORE each, with the ranges its
    threads, blocks and loops take), the phases they launch in, each phase's thread mapping and block shape,
    tensor-core matches and operand staging, block-shared and grid-split reductions."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.ast = kernel.ast
        self.notes: list[str] = []  # decisions worth a comment in the source (why no tensor cores)
        self.evaluation = Evaluation()

    def plan(self) -> LaunchPlan:
        phases = self.phases(self.items())
        for ph in phases:
            ph.thread_map, ph.threads = self.thread_map(ph)
            ph.split = self.grid_split(ph)
            ph.shared = self.shared_block(ph, ph.threads) if ph.split is None else None
            for it in ph.items:
                it.lanes = self.lanes(it)
                it.stage = self.tc_stage(it, it.tc) if it.tc is not None else None
        return LaunchPlan(self.kernel, phases, self.notes, self.evaluation)

    def deps(self, u: UOp) -> frozenset[UOp]:
        """Ranges u's value depends on (a REDUCE binds its own ranges)."""
        return self.evaluation.deps[u]

    def thread_map(self, ph: Phase) -> tuple[ThreadMap, tuple[int, int, int]]:
        """How the phase's threads take its ranges (see ThreadMap), and its block shape. Limits are the
        renderer's to check: it says which range asks for too many threads."""
        block_rs = ph.block + ph.group
        if ph.tc:
            return "warps", (32, math.prod(range_size(r) for r in block_rs), 1)
        if block_rs:
            sizes = [range_size(r) for r in reversed(block_rs)]
            if not ph.group and len(sizes) <= 3 and all(s <= lim for s, lim in zip(sizes, BLOCK_LIMITS)):
                x, y, z = (*sizes, 1, 1)[:3]
                return "axes", (x, y, z)
            return "linear", (max(math.prod(sizes), 1), 1, 1)
        total = max(math.prod(range_size(r) for r in it.grid) for it in ph.items)
        return "flat", (min(FLAT_BLOCK, max(total, 1)), 1, 1)

    def shared_block(self, ph: Phase, block: tuple[int, int, int] | None = None) -> SharedBlock | None:
        """How the phase's blocks share work (see SharedBlock), or None when they cannot: a tensor-core phase, a
        block that is not whole warps, a flat phase with a tail or several item grids (each behind its own `if`).
        `block`: the launch's block shape, for the thread index (the renderer's own when omitted)."""
        if ph.tc:
            return None
        if ph.block or ph.group:
            threads, varying = math.prod(range_size(r) for r in ph.block + ph.group), frozenset(ph.block + ph.group)
        else:
            grid = ph.items[0].grid
            total = math.prod(range_size(r) for r in grid)
            threads = min(FLAT_BLOCK, total)
            if any(it.grid != grid for it in ph.items) or total % max(threads, 1) or total // FLAT_BLOCK > GRID_LIMITS[0]:
                return None
            varying, inner = frozenset(), 1  # a flat block spans the innermost ranges up to a multiple of its size
            for r in reversed(grid):
                if inner % max(threads, 1) == 0:
                    break
                varying, inner = varying | {r}, inner * range_size(r)
        if threads < 32 or threads % 32:
            return None
        bx, by, _ = block or (threads, 1, 1)
        ltid = "threadIdx.x" if bx == threads else f"(threadIdx.x + {bx}u * (threadIdx.y + {by}u * threadIdx.z))"
        return SharedBlock(threads, varying, ltid)

    def grid_split(self, ph: Phase) -> GridSplit | None:
        """The phase's REDUCE split over the grid (see GridSplit), or None: only a flat phase of one ungated item
        without sequential END ranges whose value holds one REDUCE, evaluated unconditionally, that the blocks can
        share (`cooperative`) and that is long enough to give every output at least 4 blocks."""
        if ph.tc or ph.block or ph.group or len(ph.items) != 1:
            return None
        it = ph.items[0]
        if it.seq or len(it.store.src) > 2:
            return None
        reds = [u for u in it.store.toposort() if u.op is Ops.REDUCE]
        if len(reds) != 1:
            return None
        u, outputs = reds[0], math.prod(range_size(r) for r in it.grid)
        trips = math.prod(range_size(r) for r in u.src[1:] if r.op is Ops.RANGE)
        parts = min(SPLIT_BLOCKS // max(outputs, 1), trips // (FLAT_BLOCK * SPLIT_MIN_ITERS))
        if parts < 4:
            return None
        block = SharedBlock(FLAT_BLOCK, frozenset(), "threadIdx.x", parts, f"(blockIdx.x % {parts}u)")
        if not cooperative(u, block, self.evaluation.deps) or u not in self.evaluation.uncond_order([it.store.src[1]]):
            return None
        return GridSplit(u, outputs, block)

    def lanes(self, item: Item) -> list[UOp]:
        """The item's UPCAST END ranges that are expanded into lanes (none when they would be too many)."""
        up = [r for r in item.seq if axis_type(r) is AxisType.UPCAST]
        return up if 1 < math.prod(range_size(r) for r in up) <= MAX_LANES else []

    def match_tc(self, item: Item) -> TCMatch | str:
        """The item's wmma plan, or why it has none: its ranges, its k-16 REDUCE, the two half-precision operand
        loads of the product it sums, and each operand's layout (each step says what it needs when it fails)."""
        ranges = _tc_ranges(item)
        if isinstance(ranges, str):
            return ranges
        warps, rest, ups = ranges
        reduction = _tc_reduce(item)
        if isinstance(reduction, str):
            return reduction
        red, k = reduction
        loads = _tc_loads(red)
        if isinstance(loads, str):
            return loads
        idx = [index_of(x.src[0]) for x in loads]
        if idx[0] is None or idx[1] is None:
            return "loads need an index"
        wa = [w for w in warps if w in self.deps(idx[0])]
        wb = [w for w in warps if w in self.deps(idx[1])]
        if len(wa) != 1 or len(wb) != 1 or wa == wb:
            return "each operand must depend on a different WARP range"
        m, n = wa[0], wb[0]
        inside = set(rest) | set(red.src[1:])
        sides = []
        for x, ix, w, is_a in ((loads[0], idx[0], m, True), (loads[1], idx[1], n, False)):
            if not self.deps(ix) <= inside | {w}:
                return "operand indices use ranges outside the tile"
            side = _tc_operand(x, ix, w, k, is_a)
            if isinstance(side, str):
                return side
            sides.append(side)
        if any((r in self.deps(idx[0])) == (r in self.deps(idx[1])) for r in ups):
            return "each UPCAST range must select tiles of exactly one operand"
        elem = "half" if loads[0].dtype is dtypes.float16 else "__nv_bfloat16"
        return TCMatch(red, m, n, k, sides[0], sides[1], elem, ups)

    def tc_stage(self, item: Item, tc: TCMatch) -> TCStage | None:
        """How the item's k loop stages operand tiles in shared memory, or None (a reduce over several sequential
        ranges, or tiles too big for 48 KiB: fragments are then loaded from global memory)."""
        seq = [r for r in tc.reduce.src[1:] if r.op is Ops.RANGE and r is not tc.k]
        if len(seq) > 1:
            return None
        loop = seq[0] if seq else None
        ops = []
        for buf, ix, layout, _ in (tc.a, tc.b):
            tiles = tuple(r for r in (*item.block, *tc.ups) if r in self.deps(ix))
            ops.append(TCOperand(buf, ix, layout, tiles, 16 * math.prod(range_size(r) for r in tiles) + 8))
        step = 16 * (ops[0].pitch + ops[1].pitch) * 2  # bytes of one k step of both operands (2-byte elements)
        budget = STATIC_SMEM - 1024 * math.prod(range_size(r) for r in item.block)  # less the epilogue's tiles
        trips = range_size(loop) if loop is not None else 1
        for ks in (4, 2, 1):
            if trips % ks == 0 and 2 * ks * step <= budget:
                return TCStage(loop, ks, ops[0], ops[1], 2 * ks * step)
        return None

    def items(self) -> list[Item]:
        out = []
        for entry in store_items(self.ast, self.evaluation.deps):
            item = Item(entry.store, list(entry.ranges))
            item.reads.update(buffer_of(u.src[0]).arg[0] for u in entry.store.toposort() if u.op is Ops.LOAD)
            item.writes.add(buffer_of(entry.store.src[0]).arg[0])
            self.classify(item)
            out.append(item)
        return out

    def classify(self, item: Item) -> None:
        for u in item.store.toposort():
            if u.op is Ops.REDUCE:
                item.group += [
                    r for r in u.src[1:] if r.op is Ops.RANGE and axis_type(r) is AxisType.GROUP_REDUCE and r not in item.group
                ]
        warp_as_local = True
        if any(axis_type(r) is AxisType.WARP for r in item.loop):
            tc = self.match_tc(item) if not item.group else "GROUP_REDUCE ranges cannot share a tensor-core item"
            if isinstance(tc, TCMatch):
                item.tc, warp_as_local = tc, False
            else:
                self.notes.append(f"TC not used for the store to {buffer_of(item.store.src[0]).arg[0]!r}: {tc}")
        has_global = any(axis_type(r) is AxisType.GLOBAL for r in item.loop)
        for r in item.loop:
            a = axis_type(r)
            if a is AxisType.GLOBAL or (not has_global and a in (AxisType.LOOP, AxisType.THREAD)):
                item.grid.append(r)
            elif a in (AxisType.LOCAL, AxisType.GROUP_REDUCE) or (a is AxisType.WARP and warp_as_local):
                item.block.append(r)
            elif a is not AxisType.WARP:
                item.seq.append(r)

    def phases(self, items: list[Item]) -> list[Phase]:
        """Consecutive independent items share a launch: same parallel ranges, or flat ones of any ranges."""
        out: list[Phase] = []
        for it in items:
            ph = out[-1] if out else None
            flat = it.tc is None and not it.block and not it.group
            if (
                ph is not None
                and not ph.tc
                and it.tc is None
                and ph.block == it.block
                and ph.group == it.group
                and (ph.grid == it.grid or (flat and not ph.block and not ph.group))
                and not any(o.writes & it.reads or it.writes & (o.reads | o.writes) for o in ph.items)
            ):
                ph.items.append(it)
            else:
                out.append(Phase([it], it.grid, it.block, it.group, it.tc is not None))
        return out


@dataclass
class LaunchPlan:
    """One kernel's launch decisions, made once (`plan_launch`): its phases (each a launch: items, thread mapping,
    block shape, shared or grid-split reductions, tensor-core staging), notes on decisions worth a comment (why
    no tensor cores), and the kernel's `Evaluation` (range dependencies, values evaluated unconditionally)."""

    kernel: Kernel
    phases: list[Phase]
    notes: list[str]
    evaluation: Evaluation

    def deps(self, u: UOp) -> frozenset[UOp]:
        """Ranges u's value depends on (a REDUCE binds its own ranges)."""
        return self.evaluation.deps[u]

    def cooperative(self, u: UOp, shared: SharedBlock | None) -> bool:
        return cooperative(u, shared, self.evaluation.deps)


def plan_launch(kernel: Kernel) -> LaunchPlan:
    """The kernel's launch plan. Raises UnsupportedOp where the kernel breaks the contract."""
    return LaunchPlanner(kernel).plan()


def cooperative(u: UOp, shared: SharedBlock | None, deps: RangeDeps) -> bool:
    """Is REDUCE u run by all threads of a block together: its value is the same for all of them (it depends
    on no range that varies in the block), it loops at least COOP_MIN_TRIPS times, its accumulator can be
    shuffled between lanes, and no group reduction (with barriers of its own) sits in its body."""
    if shared is None or u.arg[0] not in (Ops.ADD, Ops.MUL, Ops.MAX) or deps[u] & shared.varying:
        return False
    rngs = [r for r in u.src[1:] if r.op is Ops.RANGE]
    if not rngs or any(axis_type(r) in (AxisType.GROUP_REDUCE, AxisType.GLOBAL, AxisType.LOCAL, AxisType.WARP) for r in rngs):
        return False
    acc = dtypes.float32 if u.dtype in HALFS else u.dtype
    if math.prod(range_size(r) for r in rngs) < COOP_MIN_TRIPS or acc not in SHUFFLE_DTYPES:
        return False
    return not any(
        n.op is Ops.REDUCE and any(r.op is Ops.RANGE and axis_type(r) is AxisType.GROUP_REDUCE for r in n.src[1:])
        for n in u.src[0].toposort()
    )


# ---- tensor-core matching: each step returns what it found, or why the item has no wmma plan ----------------


def _tc_ranges(item: Item) -> tuple[list[UOp], list[UOp], tuple[UOp, ...]] | str:
    """(the two WARP ranges, the other END ranges, the UPCAST ones among them: one tile each)."""
    warps = [r for r in item.loop if axis_type(r) is AxisType.WARP]
    if len(warps) != 2 or any(range_size(w) != 16 for w in warps):
        return "needs exactly two WARP ranges of size 16"
    rest = [r for r in item.loop if r not in warps]
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


def _tc_reduce(item: Item) -> tuple[UOp, UOp] | str:
    """(the float32 ADD REDUCE over one UNROLL range of 16, that range: the k of a 16x16x16 step)."""
    k16 = [u for u in item.store.toposort() if u.op is Ops.REDUCE and any(_is_k16(r) for r in u.src[1:])]
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
