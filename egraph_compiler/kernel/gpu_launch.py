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
from typing import Literal

from egraph_compiler.ir.diagnostics import UnsupportedOp
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.analysis import Evaluation, RangeDeps, axis_type, range_size, store_items
from egraph_compiler.kernel.program import Kernel, buffer_of
from egraph_compiler.kernel.tensor_cores import HALFS, TCMatch, TCStage, match_tc, tc_stage

# accumulators warp shuffles move (float, double, 32- and 64-bit integers; halves accumulate in float)
SHUFFLE_DTYPES = frozenset(
    {dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.index}
)
GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)
FLAT_BLOCK = 256
MAX_LANES = 64  # UPCAST END ranges expanded into at most this many lanes; beyond, unrolled loops
COOP_MIN_TRIPS = 128  # below this a block-uniform REDUCE is cheaper run whole by every thread than shared
# a REDUCE over many iterations whose kernel has few outputs (a full sum) is split over the grid: up to this many
# blocks, each thread still taking at least SPLIT_MIN_ITERS iterations
SPLIT_BLOCKS = 1024
SPLIT_MIN_ITERS = 32


def unsupported(
    at: str, why: str, suggestion: str = "check the kernel AST against egraph_compiler/kernel/program.py"
) -> UnsupportedOp:
    return UnsupportedOp(at=at, why=why, suggestion=suggestion)


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
ThreadMap = Literal["warps", "axes", "linear", "flat"]


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
                it.stage = tc_stage(it.block, it.tc, self.evaluation.deps) if it.tc is not None else None
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
            tc = (
                match_tc(item.loop, item.store, self.evaluation.deps)
                if not item.group
                else "GROUP_REDUCE ranges cannot share a tensor-core item"
            )
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
