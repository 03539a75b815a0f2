"""A roofline estimate of one kernel's run time on the host CPU, from its loop nest.

Schedules (which ranges are split, upcast, unrolled) change how often each
operation runs and whether it runs on vectors, which a per-e-node cost cannot
see: the cost of a load depends on the loops around it. So a candidate kernel
is decoded to UOps and estimated here as a whole (seed 001 §11):

    time = max(compute, memory) + OVERLAP_MISS x min(compute, memory) + launch
    compute = compute cycles (with loop overhead) / (clock x cores used), memory = cache and memory traffic / bandwidth

Compute: each operation runs once per iteration of the loops enclosing the
deepest loop it depends on (LLVM hoists the rest), times one copy per
combination of the UPCAST/UNROLL ranges it depends on. Copies pack into SIMD
vectors when the operation is arithmetic or a contiguous load, along the
store's contiguous range, or inside a REDUCE along the range its accumulators
run (program.accumulator_axis, the backend's rule: a convolution's output
channels, with its pixels broadcast one load each); the innermost
plain loop is vectorized by LLVM when it is contiguous and not a strict-FP
reduction. A float sum of products is one fused multiply-add per copy (the
backend contracts them). A REDUCE keeps one accumulator per copy: more vector
accumulators than registers spill, and an iteration takes at least the add
latency of its accumulator chain. Copies along a REDUCE's own unrolled ranges
add into one scalar accumulator one after another, so they are scalar code;
partial sums along an upcast range accumulate in one vector, nested or not.
Loads issue on their own ports beside the arithmetic, so the busier of the
two sets the pace; index arithmetic is folded into addressing (a division by
a constant is a shift or a multiply). A 512-bit operation costs two 256-bit
ones on a core that runs it as two halves (Zen 4). The outermost loop runs on
every core, in slices of whole iterations, when it is big enough (the
backend's auto-parallel rule), a THREAD range always.

Traffic: every load's cache misses are counted per level (L1 and L2 of one
core, and half the L3 the cores share) by reuse distance over the loop nest;
L2 misses that hit the L3 move at its bandwidth, the rest at memory's; a kernel
whose buffers all fit its share of the L3 finds them there (RESIDENT_L3).
Going outwards from the loop the load runs in, a loop the load depends on touches new lines every iteration
(a share of them where it steps by less than a line, unless one iteration's footprint overflows the cache: a
window sliding by one pixel re-reads every line of the window), and a loop it does not depend on re-touches
the same lines, which hit when
one iteration's whole footprint (the lines every load of the nest touches
inside it) fits the cache; once a whole loop's footprint fits, each line is
missed once. So a GEMM whose B panel stays in L2 while the rows of A go by
is priced by its panel, and the same GEMM with the loops the other way
round re-reads all of B for every row block. Unrolled copies of a load that
fall into one L1 set more often than the cache has ways (rows a power-of-two
multiple of 4 KiB apart) miss on every iteration. In the L2, a load whose lines
crowd into few of its sets (images and channels a power of two apart) needs
its fullest set's count of lines in every set to fit: `_Lines.crowded`.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import cache, lru_cache

import numpy as np

from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.analysis import RangeDeps, trip_count, value_nodes
from egraph_compiler.kernel.cpu_target import CPUTarget, host_cpu
from egraph_compiler.kernel.program import (
    LANE_STEPS,
    accumulator_axis,
    buffer_of,
    has_gate,
    in_bounds,
    lane_condition,
    linear_terms,
    stride,
    transpose_axis,
    vector_accumulators,
)

UNROLLED = (AxisType.UPCAST, AxisType.UNROLL)
# cycles per scalar operation (throughput on a modern x86 core); anything else costs DEFAULT_OP
OP_CYCLES = {
    Ops.ADD: 0.5,
    Ops.MUL: 0.5,
    Ops.MAX: 0.5,
    Ops.CMPLT: 0.5,
    Ops.CMPNE: 0.5,
    Ops.WHERE: 0.5,
    Ops.AND: 0.5,
    Ops.OR: 0.5,
    Ops.XOR: 0.5,
    Ops.CAST: 1.0,
    Ops.IDIV: 20.0,
    Ops.MOD: 20.0,
    Ops.RECIP: 4.0,
    Ops.FDIV: 4.0,
    Ops.SQRT: 6.0,
    Ops.EXP2: 18.0,
    Ops.LOG2: 10.0,
    Ops.SIN: 20.0,
    Ops.COS: 20.0,
    Ops.LOAD: 0.5,
    Ops.STORE: 1.0,
}
FREE = (
    Ops.CONST,
    Ops.RANGE,
    Ops.DEFINE_VAR,
    Ops.BUFFER,
    Ops.INDEX,
    Ops.AFTER,
    Ops.END,
    Ops.SINK,
    Ops.REDUCE,
    Ops.VECTORIZE,
    Ops.GEP,
)
DEFAULT_OP = 1.0
# IDIV/MOD of an index by a constant: a shift or mask for a power of two, a multiply-high and shifts (with the
# floor's sign fix-up) for another. Priced at IDIV's 20 cycles, a GPT-2 block's attention projection (reading the
# heads' output, (head, t, d), as rows of 768: k // 64 and k % 64 in the reduction) was estimated at 3.8 ms and
# ran in 0.7 ms
POW2_DIVMOD_CYCLES = 0.5
CONST_DIVMOD_CYCLES = 6.0
# math calls stay one scalar call per element: neither the loop nor the SLP vectorizer widens them here. EXP2 is
# not one: the backend renders it inline (about 28 vector instructions), and it vectorizes like arithmetic
SCALAR_MATH = (Ops.LOG2, Ops.SIN, Ops.COS)
# ops rendered as a long sequence of vector instructions (EXP2): the sequence's issue bounds them, so two vectors
# in flight (LOOP_VECTOR_INTERLEAVE) take twice as long as one. Elementwise exp over 256x1536 ran 18 cycles a
# 16-lane vector on Zen 5 and 20 a 8-lane one (AVX2 code), 2.2x and 2.4x the estimate that halved it
SEQUENCES = frozenset({Ops.EXP2})
INSERT_CYCLES = 0.5  # a scalar inserted into a lane of a vector (a shuffle; two issue a cycle)
GATE_CYCLES = 2.0  # the branch (or select) around a gated load
TILE_MASK_CYCLES = 0.5  # ... or the mask of a masked vector load of a guarded tile (a compare or two, a mask AND)
# a load of one element (a broadcast operand, a gathered lane) issues slower than a vector load: 0.6 cycles, two
# loads in 1.2 cycles against two FMAs a cycle. Measured on Zen 4, 3x3 convolution 64 -> 64 channels at 56x56: one
# broadcast weight per 8-lane FMA (17 loads and 16 FMAs a step) ran 15% slower than one broadcast pixel per 16-lane
# FMA (9 loads, 16 FMAs of twice the width), where 0.5 cycles a load priced the first 4% faster. On Emerald
# Rapids, GEMM 128x768 @ 768x2304: a 16x16 tile (16 broadcasts and one vector a k step, 16 FMAs) ran 1.27x slower
# than 8x32 (8 and 2, 16 FMAs), 10.1 cycles a step against 8 at 0.6; at 0.55 the 16x16 tile tied and won on code
# (GPT-2 block T=128: 21.1 -> 18.1 ms with its two 16x16 GEMMs 8x32). 0.85 on Emerald Rapids: a 3x3 convolution
# tile of 16 channels x 14 pixels (14 broadcasts and one vector a step, 14 FMAs) ran 1.40-1.47x slower than 32 x 7
# (7 and 2, 14 FMAs), which 0.6 priced 1-2% faster (in-process A/B: ResNet downsampling block 13.9 -> 10.1 ms,
# block 2x128x28 4.7 -> 3.5); the 16x16 GEMM and attention tiles that still tied at 0.6 go 8 x 32 or 32 x 8 too
# (GPT-2 blocks T=64 and T=256 1.08x and 1.11x, MLP 64x512 1.12x, the dense chains 1.04-1.23x), no program slower
SCALAR_LOAD_EXTRA = 0.35
# the share of the lesser of compute and memory time that does not hide behind the other. Measured: a ResNet
# downsampling block's fused kernel with channel tiles outside the batch loop, level with batch outside by compute
# alone, ran 7.3 ms against 5.4, re-reading its inputs for every tile; at 0.15 the block runs 10.5 -> 7.8 ms and
# GPT-2 blocks within noise (T=64 4.1-4.4 -> 3.6-3.7, T=128 13.5-13.9 -> 13.4-14.2, T=192 18.3 -> 19.1-19.4 ms:
# one more 768-byte row statistic kept in a buffer); 0.3 made the T=128 block 8% slower
OVERLAP_MISS = 0.15
CODE_SIZE = {Ops.EXP2: 30}  # scalar instructions one copy of an op renders to (else 1)
LINE = 64  # bytes in a cache line
# the share of a cache a loop nest's footprint may fill before it counts as not fitting (associativity and the
# data the model does not see: stores, the stack, other buffers' partial lines)
CACHE_FILL = {1: 0.5, 2: 0.75, 3: 0.5}  # L3: shared by the cores
ADD_LATENCY = 4.0  # cycles before a dependent add can start
# a REDUCE's step takes the LATENCY_NORM-norm of its body's work and its chains' latency, not the larger of them:
# where they are level the chains wait now and then (AVX2 code on Zen 5: a 4-row GEMM tile, 8 accumulator chains
# of 4 cycles against 16 FMAs at 2 a cycle, ran 1.14-1.19x slower than the 6-row tile, priced 3-4% apart and
# chosen for its smaller code; 8 adds 9% where they are level and nothing where the work is twice the latency
# (4 made native tiles flip on ties)
LATENCY_NORM = 8.0
# a core's line traffic takes the CACHE_LEVEL_NORM-norm of the times its levels need (L1 fills from L2, L2 fills
# from L3, L3 misses from memory), not the longest: where two are level both slow it (a 3x3 convolution of 64
# channels at 224x224, 8 output channels a tile: blocks of channels outside the rows re-stream the 12 MiB image
# from L3 once a block, its L2 traffic level with its L1 fills, and ran 1.02-1.13x slower than the rows outside,
# which the larger of the two had priced alike)
CACHE_LEVEL_NORM = 4.0


def _norm(xs: tuple[float, ...], p: float) -> float:
    """The p-norm of non-negative xs, computed from the largest (no overflow): near the largest where the others
    are well below it, up to 2^(1/p) times it where two are level."""
    hi = max(xs)
    return hi * sum((x / hi) ** p for x in xs) ** (1 / p) if hi > 0 else 0.0


# the share of the vector registers a tile's accumulators may hold. Half kept AVX2's 6x16 GEMM tile (12 of 16
# registers, 2 for B and one broadcast) out, which ran 10-34% faster than 4x16 on Zen 4 (768^3 143 -> 158
# GFLOP/s, 512^3 98 -> 132, 128x768 @ 768x768 133 -> 156; interleaved in one process); all but the operands' let
# AVX-512 tiles of 14x32 (28 of 32) in, which ran ResNet blocks 1.27-1.34x slower there
ACC_REGS_SHARE = 0.75
SPILL_CYCLES = 4.0  # reload + spill of one accumulator vector per iteration
LOOP_VECTOR_INTERLEAVE = 2  # LLVM interleaves a vectorized loop: two vectors in flight per iteration
LOOP_CYCLES = 1.0  # increment, compare, branch
AUTO_PARALLEL_MIN_WORK = 1 << 16
PAGE = 4096  # bytes
PAGE_STEP_CYCLES = 8.0  # a stall beside the ports when a load steps a page per loop iteration (an unpacked
#                            GEMM B column: 512x1024 @ 1024x4096 ran ~6-8 cycles a k step slower than packed)
# steps from a quarter page up stall too, from none at a quarter to the whole stall at half a page (Zen 4, GEMM
# B columns against packed panels: rows of 1 KiB ran alike, 1.5 KiB 1.15x, 2 KiB 1.6x, 3 KiB 1.2x, 4000 B 1.4x)
STALL_FROM = PAGE // 4
# the stall is the host's: on Emerald Rapids (a VM's 2 cores) unpacked GEMMs ran 25-30 cycles a k step slower than
# packed (64x512 @ 512x2048, 8 KiB rows: 2.63 against 1.15 ms; 64x2048 @ 2048x512: 2.54 against 0.71), and at 8
# cycles the estimate never packed below 128 rows (the MLP of 64 rows 5.9 -> 3.9 ms, of 100 rows 13.2 -> 7.8, GPT-2
# blocks of 64 and 100 tokens 11.1 -> 6.8 and 14.6 -> 11.2 with 26; other models alike). Sapphire Rapids shares its
# core and mesh (not measured); other hosts keep the Zen 4 figure. EGC_PAGE_STEP_CYCLES overrides
HOST_PAGE_STEP_CYCLES = {"emeraldrapids": 26.0, "sapphirerapids": 26.0}
# the clock of all cores issuing 512-bit FMAs, where the host's differs from CPUMachine.ghz: Emerald Rapids (a VM's
# 2 cores) ran MKL's sgemm 1024 at 154 GFLOP/s on one thread (2.4 GHz x 64 flops a cycle) and 252 on two (1.97
# GHz each), and at 3 GHz the estimate of every compute-bound kernel was 0.6-0.7x its measured time (GEMMs of
# the GPT-2 block and the MLP: 1.4-1.6 ms estimated for 2.3 measured, 13.7 for 21.4). Zen 5 (EPYC, a VM's 2 cores,
# full-width AVX-512) ran a chain of dependent adds at 4.0 GHz on both cores at once and GEMM 1024 at 473 GFLOP/s
# (123% of the 3 GHz peak): at 3 GHz compute-bound kernels were estimated at 1.35-1.65x their time. Zen 3 (EPYC, a
# VM's 2 cores, AVX2) ran a chain of dependent adds at 2.6 GHz on both cores at once; at 2.6 the main kernels of
# every bench/kernels.py shape kept their schedules (two weight packs changed order) and their estimates moved
# from 0.4-0.8x their measured times to 0.45-0.9x. EGC_GHZ overrides
HOST_GHZ = {"emeraldrapids": 2.0, "sapphirerapids": 2.0, "znver3": 2.6, "znver5": 4.0}
# streaming bandwidth where the host's differs from CPUMachine's (GB/s per core, all cores, L3 per core; EGC_MEM_GBPS,
# EGC_MEM_GBPS_ALL, EGC_L3_GBPS override). Zen 5 (a VM's 2 cores) read 32 GB/s from memory on one core and 53 on
# two, copied 41 on one (read and write counted) and read L3-resident data at 60 or more; priced at those figures
# the fusion search materialized more and the GPT-2 blocks ran 1-12% slower (the extra kernels are underpriced
# elsewhere), at these (about 0.6x) they ran 0.85-1.0x their time at the defaults, the other models unchanged
HOST_MEM_GBPS = {"znver5": 20.0}
HOST_MEM_GBPS_ALL = {"znver5": 35.0}
HOST_L3_GBPS = {"znver5": 55.0}
# a line from memory for a load stepping half a page or more each iteration costs this many streamed lines (AVX2
# code on Zen 4, 128x3072 @ 3072x768 with B's column tiles inside the row tiles, B from memory for every row tile:
# 28-40 ms, 3-4x the streaming estimate; its column tiles outside, B read once: 11-12 ms)
STRIDED_MISS = 3.0
# a kernel whose buffers fit its share of the L3 finds them there (repeated calls, or the kernel before it just wrote
# them), and streams them at the L3's bandwidth. Zen 5 (a VM's 2 cores): a chain of 9 elementwise kernels over 4 MiB
# buffers ran 41 us a kernel (8 MiB moved: 100 GB/s a core) where the memory figures priced 250, and a kernel ran
# 0.26 us beyond its work on one core, 1 us across both, where launch_us was 5; with both, the estimates of the
# suite and the variants went from 0.8-3.8x their measured times to 0.57-1.35x (the dense chains of 1-2 layers,
# whose 3 us call overhead is not a kernel's, 0.3-0.4x), no model slower (0.97-1.01x, in-process A/B), GEMMs of 5
# and 8 rows 1.6-1.9x faster
RESIDENT_L3 = True
MAX_UNROLLED = 512  # product of a kernel's UPCAST/UNROLL bounds


def _interleave(op: Ops) -> int:
    """Vectors a vectorized loop keeps in flight for `op` (see SEQUENCES)."""
    return 1 if op in SEQUENCES else LOOP_VECTOR_INTERLEAVE


@dataclass(frozen=True)
class CPUMachine:
    """What the estimate needs of the CPU: read from llvmlite's host description, bandwidth from a config."""

    cores: int = 2
    simd_bytes: int = 32  # AVX2: 32, AVX-512: 64
    vector_regs: int = 16
    ghz: float = 3.0  # all cores' clock under vector FMAs (HOST_GHZ, EGC_GHZ)
    mem_gbps: float = 12.0  # DRAM streaming bandwidth of one core (overridable: EGC_MEM_GBPS)
    mem_gbps_all: float = 20.0  # ... of all cores together (EGC_MEM_GBPS_ALL)
    l1_bytes: int = 32 << 10  # data cache of one core, per level (sysfs)
    l1_ways: int = 8  # ... and the L1's associativity (sysfs)
    l2_bytes: int = 1 << 20
    l2_ways: int = 8  # (sysfs)
    l3_bytes: int = 0  # last-level cache (sysfs; 0: none, L2 misses go to memory)
    l3_gbps: float = 40.0  # L3 -> L2 streaming bandwidth of one core (EGC_L3_GBPS)
    l2_bytes_per_cycle: float = 32.0  # sustained L2 -> L1 fill rate of one core
    launch_us: float = 1.0  # call overhead and thread-pool hand-off per kernel (see RESIDENT_L3)
    cpu: str = "generic"  # the CPU code is generated for (CPUTarget.describe)
    fma_per_cycle: int = 2  # full-width FMA vectors a core issues a cycle (1 on Zen 4's AVX-512)
    page_step_cycles: float = PAGE_STEP_CYCLES  # the host's stall of a load stepping a page an iteration

    @staticmethod
    def host() -> CPUMachine:
        return CPUMachine.for_cpu(host_cpu())

    @staticmethod
    @cache
    def for_cpu(cpu: CPUTarget) -> CPUMachine:
        """The machine model of code generated for `cpu` and run on this host: the CPU's vector width and
        registers, the host's cores and caches (sysfs), bandwidth from a config."""
        caches, ways = _sysfs_caches(), _sysfs_caches("ways_of_associativity")
        return CPUMachine(
            cores=os.cpu_count() or 1,
            ghz=_setting("EGC_GHZ", CPUMachine.ghz, HOST_GHZ),
            simd_bytes=cpu.simd_bytes,
            vector_regs=cpu.vector_regs,
            mem_gbps=_setting("EGC_MEM_GBPS", CPUMachine.mem_gbps, HOST_MEM_GBPS),
            mem_gbps_all=_setting("EGC_MEM_GBPS_ALL", CPUMachine.mem_gbps_all, HOST_MEM_GBPS_ALL),
            l1_bytes=caches.get(1, CPUMachine.l1_bytes),
            l1_ways=ways.get(1, CPUMachine.l1_ways),
            l2_bytes=caches.get(2, CPUMachine.l2_bytes),
            l2_ways=ways.get(2, CPUMachine.l2_ways),
            l3_bytes=caches.get(3, CPUMachine.l3_bytes),
            l3_gbps=_setting("EGC_L3_GBPS", CPUMachine.l3_gbps, HOST_L3_GBPS),
            cpu=cpu.describe(),
            fma_per_cycle=cpu.fma_vectors_per_cycle,
            page_step_cycles=_setting("EGC_PAGE_STEP_CYCLES", PAGE_STEP_CYCLES, HOST_PAGE_STEP_CYCLES),
        )

    def describe(self) -> str:
        return (
            f"{self.cpu}: {self.cores} cores, {self.simd_bytes * 8}-bit vectors x {self.vector_regs}, "
            f"{self.fma_per_cycle} FMA/cycle, a page step stalls {self.page_step_cycles:g} cycles, "
            f"L1 {self.l1_bytes >> 10} KiB {self.l1_ways}-way, L2 {self.l2_bytes >> 10} KiB, "
            f"L3 {self.l3_bytes >> 20} MiB at {self.l3_gbps:g} GB/s per core, {self.ghz:g} GHz, "
            f"memory {self.mem_gbps:g} GB/s per core, {self.mem_gbps_all:g} GB/s all"
        )

    def resident(self, nbytes: int) -> bool:
        """Do a kernel's buffers of `nbytes` in all stay in the L3 (its share of it) from one call to the next, or
        from the kernel that wrote them? Then its compulsory traffic moves at the L3's bandwidth, not memory's."""
        return RESIDENT_L3 and nbytes <= self.l3_bytes * CACHE_FILL[3]

    def stream_bps(self, nbytes: int, cores: int) -> float:
        """Bytes a second that `cores` cores stream a kernel's `nbytes` of buffers at, from the L3 or memory."""
        if self.resident(nbytes):
            return self.l3_gbps * cores * 1e9
        return (self.mem_gbps_all if cores > 1 else self.mem_gbps) * 1e9

    def lanes(self, itemsize: int) -> int:
        return max(1, self.simd_bytes // max(1, itemsize))

    def roofline(self, flops: float, nbytes: float) -> float:
        """The least time a program with this much float32 work and compulsory traffic takes here: every core
        issuing two FMA vectors a cycle, or all cores streaming memory, plus one launch."""
        return max(flops / self.peak_flops(), nbytes / (self.mem_gbps_all * 1e9)) + self.launch_us * 1e-6

    def peak_flops(self, itemsize: int = 4) -> float:
        """FLOP/s with every core issuing its FMA vectors (two flops a lane each) every cycle."""
        return self.cores * self.ghz * 1e9 * self.lanes(itemsize) * 2 * self.fma_per_cycle


def _setting(env: str, default: float, by_host: dict[str, float] | None = None) -> float:
    """A machine figure: $env where set, else this host's entry in `by_host` (by LLVM CPU name), else `default`."""
    given = os.environ.get(env)
    if given is not None:
        return float(given)
    return (by_host or {}).get(host_cpu().name, default)


def _sysfs_caches(field: str = "size") -> dict[int, int]:
    """A data (or unified) cache's size (or another sysfs field, such as "ways_of_associativity") per level of
    cpu0; {} where there is none (not Linux)."""
    out: dict[int, int] = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(base)
    except OSError:
        return out
    for e in entries:
        try:
            with open(f"{base}/{e}/level") as f:
                level = int(f.read())
            with open(f"{base}/{e}/type") as f:
                kind = f.read().strip()
            with open(f"{base}/{e}/{field}") as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not text:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
        try:
            out[level] = int(text.rstrip("KMGkmg")) * mult
        except ValueError:
            continue
    return out


@dataclass
class KernelEstimate:
    seconds: float = 0.0
    compute_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0
    cycles: float = 0.0
    bytes: int = 0
    l1_misses: float = 0.0  # cache lines one core fills into L1, and into L2 (the cache model above)
    l2_misses: float = 0.0
    parallel: int = 1
    spills: bool = False
    code: float = 0.0  # scalar instructions the backend emits before vectorizing (compile time grows with it)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _width(n: int, lanes: int) -> float:
    """Copies one vector instruction covers, on average, for n contiguous copies: whole vectors of `lanes`, and
    fewer copies in power-of-two pieces (LLVM splits 7 lanes into 4 + 2 + 1: 7/3 a piece)."""
    return lanes if n >= lanes else n / bin(n).count("1")


def _unrolled(r: UOp) -> bool:
    return r.arg[1] in UNROLLED


class _Walk:
    """Counts cycles of one loop nest item; `loops` are the enclosing non-unrolled ranges, outermost first."""

    def __init__(self, m: CPUMachine) -> None:
        self.m = m
        self.cycles = 0.0
        self.load_cycles = 0.0  # cycles of the load ports, which issue beside the arithmetic
        self.conflicts = 0.0  # L1 misses of unrolled copies that overfill one cache set
        self.stalls = 0.0  # cycles the loop waits and neither the loads nor the arithmetic issue
        self.loop_cycles = 0.0
        self.spills = False
        self.group_parallel = 1
        self.scalar_depth = 0  # inside a nested REDUCE with unrolled accumulators: copies are not packed
        self.ranges = RangeDeps()
        self.loads: list[tuple[UOp, tuple[UOp, ...], int]] = []  # (LOAD, its loops, how many it runs inside)
        self.code = 0.0
        self.contiguous: frozenset[UOp] = frozenset()  # the item's unrolled ranges its store steps by 1 along
        self.strided: frozenset[UOp] = frozenset()  # ... and those it steps along by more (or non-linearly)
        self.acc_axis: UOp | None = None  # inside a REDUCE with vector accumulators: the range they run along
        self.vec: UOp | None = None  # inside a REDUCE that keeps its accumulators along another range than those
        self.reduced: set[tuple[object, ...]] = set()  # the REDUCEs charged, each where it is placed
        # the own unrolled ranges of the REDUCEs around, whose copies the backend adds one after another into one
        # scalar accumulator: copies along them are scalar code (a softmax's exponentials in a sum of 4 copies an
        # iteration: priced as one vector, run as scalar chains 3.5x slower than 16 partial sums)
        self.serial: frozenset[UOp] = frozenset()
        # inside a REDUCE that runs no loop (straight_windows), whose padded window's masked loads zero-fill: the
        # WHERE around each is free. Priced so only there: everywhere, it moved padding copies and fusions of AVX2
        # convolutions to programs up to 1.7x slower (the estimate's errors elsewhere, not this fact's)
        self.window = False

    def deps(self, u: UOp) -> frozenset[UOp]:
        """Ranges u depends on (a REDUCE's own ranges are bound inside it)."""
        return self.ranges[u]

    def item(self, value: UOp, loops: list[UOp], unrolled: list[UOp]) -> None:
        idx = value.src[0] if value.op is Ops.STORE else None
        lin = idx.src[1] if idx is not None and idx.op is Ops.INDEX and len(idx.src) > 1 else None
        self.contiguous = frozenset(r for r in unrolled if lin is not None and stride(lin, r) == 1)
        self.strided = frozenset(r for r in unrolled if lin is not None and stride(lin, r) not in (0, 1))
        trips = [1]
        for i, r in enumerate(loops):
            trips.append(trips[-1] * trip_count(r))
            # the innermost loop is vectorized by LLVM when it can be: one iteration per vectors in flight
            per_iteration = 1 if i < len(loops) - 1 or unrolled else self.m.lanes(4) * LOOP_VECTOR_INTERLEAVE
            self.loop_cycles += trips[-1] * LOOP_CYCLES / per_iteration
        self.visit(value, loops, trips, frozenset(unrolled), vector_loop=True)

    def visit(
        self,
        root: UOp,
        loops: list[UOp],
        trips: list[int],
        unrolled: frozenset[UOp],
        vector_loop: bool,
        in_reduce: bool = False,
    ) -> None:
        """Charge every node under root not below a REDUCE (those are visited with the REDUCE's loops).
        `in_reduce`: root is a REDUCE's body, so a REDUCE found here is nested in another one."""
        for u in value_nodes(root):
            if u.op is Ops.REDUCE:
                self.reduce(u, loops, trips, unrolled, nested=in_reduce)
            elif u.op is not Ops.AFTER:
                self.charge(u, loops, trips, unrolled, vector_loop, scalar=self.scalar_depth > 0)

    def place(self, u: UOp, loops: list[UOp], unrolled: frozenset[UOp]) -> int:
        """How many of the enclosing loops u runs inside: up to the deepest it depends on, or all of them
        when it depends on an unrolled range (the backend expands those innermost)."""
        d = self.deps(u)
        if d & unrolled:
            return len(loops)
        return max((i + 1 for i, r in enumerate(loops) if r in d), default=0)

    def copies(self, u: UOp) -> int:
        return math.prod(trip_count(r) for r in self.deps(u) if _unrolled(r))

    def packed(self, u: UOp, lanes: int) -> float:
        """Copies of u one vector holds: the backend packs copies along the item's contiguous unrolled axis
        (a tile of 32 rows x 8 columns is 32 vectors of 8 lanes, not 16 of 16); copies only along axes the
        store steps over by more pack poorly (counted one a vector); copies of ranges the store does not see
        (partial sums) pack fully."""
        d = self.deps(u)
        if d & self.serial:
            return 1
        if self.vec is not None:  # one vector of copies along the accumulators' range; the others one each
            return _width(trip_count(self.vec), lanes) if self.vec in d else 1
        along = [r for r in d if r in self.contiguous]
        if along:
            return _width(math.prod(trip_count(r) for r in along), lanes)
        return 1 if d & self.strided else lanes

    def charge(
        self, u: UOp, loops: list[UOp], trips: list[int], unrolled: frozenset[UOp], vector_loop: bool, scalar: bool = False
    ) -> None:
        """Charge u's cycles: once per iteration of the loops it runs inside, once per unrolled copy, the copies
        packed into vectors where the backend or LLVM packs them. `scalar`: inside a REDUCE whose copies are
        scalar chains (see reduce)."""
        if u.op in FREE:
            return
        depth = self.place(u, loops, unrolled)
        trip = trips[depth]
        copies = self.copies(u)
        self.code += copies * CODE_SIZE.get(u.op, 1)
        if u.dtype.is_int and u.op is not Ops.LOAD:
            self.index_math(u, loops, trips, copies)
            return
        itemsize = max(1, (u.src[1].dtype if u.op is Ops.STORE and len(u.src) > 1 else u.dtype).itemsize)
        lanes = self.m.lanes(itemsize)
        if u.op in (Ops.LOAD, Ops.STORE):
            vectorizes, width, per, copies = self.access(u, loops, depth, trip, itemsize, lanes)
        elif self.window and zero_fill(u):  # a straight window's masked loads give 0 past their gate already
            return
        else:  # arithmetic packs the copies the item's store packs
            vectorizes, width, per = u.op not in SCALAR_MATH, self.packed(u, lanes), OP_CYCLES.get(u.op, DEFAULT_OP)
            if u.op in GATE_OPS and copies > 1:  # a gate's compares of copies that compare the same values: once
                unr = [r for r in self.deps(u) if _unrolled(r)]
                copies = self.distinct(u, unr, [r for r in unr if r is self.vec or r in self.contiguous])
        auto = vector_loop and depth == len(loops) and depth > 0 and copies == 1
        if copies > 1 and vectorizes and not scalar:
            cost = math.ceil(copies / width - 1e-9) * per * self.wide(min(width, copies) * itemsize)
        elif auto and vectorizes:
            cost = per / (lanes * _interleave(u.op)) * self.wide(lanes * itemsize)
        else:
            cost = copies * (per + (SCALAR_LOAD_EXTRA if u.op is Ops.LOAD else 0.0))
        if u.op is Ops.LOAD:
            self.load_cycles += trip * cost
        else:
            self.cycles += trip * cost

    def index_math(self, u: UOp, loops: list[UOp], trips: list[int], copies: int) -> None:
        """Integer index math: folded into the addressing and strength-reduced to pointer steps, which the loop
        overhead counts (charging each add and multiply made a conv's 3 nested reduce loops look 2x slower than
        run), except divisions and modulos, which LLVM hoists out of every loop they do not depend on, whatever
        unrolled copy they are for. By a constant they are cheaper: one shift or mask for a power of two (the
        backend's), a multiply and shifts for any other (LLVM's)."""
        if u.op in (Ops.IDIV, Ops.MOD):
            c = u.src[1].arg if u.src[1].op is Ops.CONST and isinstance(u.src[1].arg, int) else 0
            per = OP_CYCLES[u.op] if c <= 0 else POW2_DIVMOD_CYCLES if c & (c - 1) == 0 else CONST_DIVMOD_CYCLES
            self.cycles += trips[self.place(u, loops, frozenset())] * copies * per

    def access(
        self, u: UOp, loops: list[UOp], depth: int, trip: int, itemsize: int, lanes: int
    ) -> tuple[bool, float, float, int]:
        """A LOAD's or STORE's (vectorizes?, copies one vector covers, cycles per copy, copies): one vector per
        contiguous run of its unrolled copies (the others are more loads), none when a gate branches around every
        copy; a load's copies that read the same elements under the same gate count once (distinct_copies). A
        load is also noted for the cache model, with its unrolled copies' L1 set conflicts and page-step stalls."""
        idx = u.src[0]
        lin = idx.src[1] if idx.op is Ops.INDEX and len(idx.src) > 1 else None
        unr = [r for r in self.deps(u) if _unrolled(r)]
        gated = u.op is Ops.LOAD and has_gate(u)
        # a copy along a range whose copies chain one after another (a scalar accumulator's own unrolled range) is
        # its own scalar: loads along it do not make vectors
        along = [r for r in unr if r not in self.serial] if self.vec is None else [self.vec] if self.vec in unr else []
        gathered: UOp | None = None  # the accumulators' range, where its copies are inserted into their lanes one by one
        if u.op is Ops.LOAD and self.acc_axis is not None and self.acc_axis not in unr:
            # an operand the accumulators' vectors broadcast (a GEMM's A beside B's row): one scalar load per copy,
            # also along a reduction unrolled over its contiguous elements (8 rows x 16 columns, k unrolled by 4:
            # priced as 8 vector loads a step, run as 32 broadcasts; 4.5 ms against 3.7 for 8 x 32 not unrolled)
            along = []
        elif u.op is Ops.LOAD and self.acc_axis is not None and lin is not None and stride(lin, self.acc_axis) != 1:
            # a load the accumulators' vectors take lane by lane: only along their range can it make vectors (its
            # copies along the REDUCE's own unrolled range are added one after another), as a square of copies
            # contiguous along another range transposed in registers. Lanes a few elements apart (stepped_load:
            # vectors of their span and shuffles, or LLVM's own) stay priced as scalar loads of the distinct
            # elements: priced as the vectors and shuffles they are, AVX2 stride-2 convolutions went unpacked and
            # ran 1.44x slower. Lanes further apart are a scalar load and an insert each (32 rows' maxima over 256
            # columns, k unrolled by 4 along them: priced as 8 vector loads a step, ran as 128 loads and inserts,
            # at the loop's 7 us)
            along = []
            vector = not gated and u.dtype.is_float and u.dtype.itemsize == 4 and in_bounds(idx)
            # the ranges in a fixed order (not the set's): the same choice in every process
            order = sorted(unr, key=lambda r: repr(r.arg))
            if vector and (across := transpose_axis(lin, self.acc_axis, order)) is not None:
                along = [across]
            elif not (vector and abs(stride(lin, self.acc_axis) or 0) in LANE_STEPS):
                gathered = self.acc_axis
        # a gated load of consecutive elements in the innermost loop, one copy an iteration: LLVM if-converts the
        # branch into a masked vector load (a padding copy: 4-5x faster than priced as a branch per element)
        masked = gated and not unr and lin is not None and 0 < depth == len(loops) and stride(lin, loops[-1]) == 1
        # ... or of consecutive elements along the vectors' range whose gate the backend computes as a vector of
        # lanes (a padded window's tile row): one masked vector load per run, the gate's lanes a compare or two
        lane = self.tile_lane(unr) if gated and lin is not None else None
        tile = False
        if (
            lane is not None
            and lin is not None
            and stride(lin, lane) == 1
            and lane_condition(u.src[2], lane)
            and lane not in self.deps(u.src[1])
        ):
            masked, along, tile = True, [lane], True
        runs = [_width(trip_count(r), lanes) for r in along if lin is not None and stride(lin, r) == 1]
        vectorizes = lin is not None and (not gated or masked) and (not unr or bool(runs))
        per = OP_CYCLES.get(u.op, DEFAULT_OP)
        if gated:  # a branch around every copy (neither vectorized nor cheap), or the mask of every vector
            per += TILE_MASK_CYCLES if tile else GATE_CYCLES
        copies = math.prod(trip_count(r) for r in unr)
        if u.op is Ops.LOAD:
            self.loads.append((u, tuple(loops), depth))
            if lin is not None:
                self.load_penalties(lin, unr, loops, depth, trip, itemsize)
                copies = self.distinct(u, unr, [r for r in along if vectorizes and stride(lin, r) == 1])
                if gathered is not None:
                    self.cycles += trip * INSERT_CYCLES * self.distinct(u, unr, [gathered])
        return vectorizes, max(runs, default=lanes), per, copies

    def distinct(self, u: UOp, unr: list[UOp], lanes: list[UOp]) -> int:
        """u's copies over its unrolled ranges `unr` that differ (distinct_copies), those along `lanes` each a lane
        of one vector."""
        rest = tuple(sorted((r for r in unr if r not in lanes), key=lambda r: repr(r.arg)))
        return math.prod(trip_count(r) for r in lanes) * distinct_copies(u, rest)

    def tile_lane(self, unr: list[UOp]) -> UOp | None:
        """The unrolled range among `unr` the backend computes a copy's values as vectors along: the accumulators'
        inside a REDUCE with vector accumulators, else the longest the item's store steps by 1 along (sorted, so
        the same in every process)."""
        if self.acc_axis is not None:
            return self.acc_axis if self.acc_axis in unr else None
        along = sorted(self.contiguous & set(unr), key=lambda r: (trip_count(r), repr(r.arg)))
        return along[-1] if along else None

    def load_penalties(self, lin: UOp, unr: list[UOp], loops: list[UOp], depth: int, trip: int, itemsize: int) -> None:
        """The misses of a load's unrolled copies that overfill one L1 set, and the stall of a load half a page or
        more ahead every iteration of its innermost loop (a GEMM's unpacked B column: the prefetchers stop at
        the page and the loop waits on the new line; packed operands, egraph_compiler/kernel/packing.py, step
        a panel row instead), part of it from a quarter page (STALL_FROM)."""
        if unr:
            self.conflicts += trip * set_conflicts(lin, tuple(unr), itemsize, self.m)
        if depth == len(loops) > 0:
            weight = min(1.0, max(0.0, _step_bytes(typical_stride(lin, loops[-1]), itemsize) / STALL_FROM - 1))
            if weight:
                # each unrolled copy as far from the others lands on lines of its own, and stalls on its own: a
                # GEMM's B column with the reduction unrolled by 4 steps four rows of B an iteration (100x2560 @
                # 2560x640, 16 columns a tile: 4.7 ms unrolled by 4 against 3.5 not, priced 2.4 and 3.9 per iteration)
                far = math.prod(trip_count(r) for r in unr if _step_bytes(stride(lin, r), itemsize) >= STALL_FROM)
                self.stalls += trip * self.m.page_step_cycles * weight * far

    def operand_vectors(self, vec: UOp | None, u: UOp) -> int:
        """Vector registers one step of a REDUCE's body loads beside its accumulators: one per vector along the
        accumulators' axis (the other operand is a broadcast)."""
        if vec is None:
            return 1
        return math.ceil(trip_count(vec) / self.m.lanes(max(1, u.dtype.itemsize)) - 1e-9)

    def spilled(self, vectors: int, vec: UOp | None, u: UOp) -> float:
        """Accumulator vectors of a REDUCE that do not stay in registers: those beyond the registers its step's
        operands leave, or beyond ACC_REGS_SHARE. A tile one copy deep across its vectors (a matrix-vector
        product's row) uses each operand vector once, straight from memory: one register for it and the
        broadcast. Only the excess is charged (AVX2, 8 rows x 2 vectors, 16 accumulators of 16 registers: 8 x
        768 @ 768 x 3072 ran 0.26-0.31 ms against 0.42 for 4 x 2 vectors, which charging all 16 had picked;
        16 rows 0.56-0.59 against 0.78-0.84)."""
        regs, ops = self.m.vector_regs, self.operand_vectors(vec, u)
        if vectors <= ops:
            return max(0, vectors + 2 - regs)
        return max(0, vectors + ops + 1 - regs, vectors - ACC_REGS_SHARE * regs)

    def wide(self, nbytes: float) -> float:
        """The cost of a vector of nbytes against a 256-bit one: twice where the core runs 512-bit operations as
        two halves (Zen 4: a GEMM tile of 16 zmm accumulators measured no faster than 16 ymm ones)."""
        return 2 / self.m.fma_per_cycle if nbytes > 32 else 1.0

    def reduce(self, u: UOp, loops: list[UOp], trips: list[int], unrolled: frozenset[UOp], nested: bool = False) -> None:
        """A REDUCE nested in another REDUCE's body whose accumulators are copies of unrolled ranges runs as
        scalar code, one chain per copy (measured: a fused pair of dense layers, 16x32, ran 12x slower than
        when its copies were priced as vectors): its accumulators and body are not packed."""
        depth = self.place(u, loops, unrolled)
        # the backend computes a REDUCE once where it is placed (hoisted out of the loops it does not depend on),
        # however many bodies read it: charged once there (walking it again for every body that reads it made a
        # fused chain of dependent reductions, a QR's steps, cost exponential time to estimate, and exponential time)
        here = (u, tuple(loops[:depth]), unrolled & self.deps(u), nested, self.scalar_depth, self.vec, self.serial)
        if here in self.reduced:
            return
        self.reduced.add(here)
        own = [r for r in u.src[1:] if r.op is Ops.RANGE]
        inner_loops = loops[:depth] + [r for r in own if not _unrolled(r)]
        inner_trips = trips[: depth + 1]
        for r in inner_loops[depth:]:
            inner_trips.append(inner_trips[-1] * trip_count(r))
            self.loop_cycles += inner_trips[-1] * LOOP_CYCLES
        acc = self.copies(u)  # one accumulator per copy of the unrolled ranges around it; its own add up in order
        outer_vec, outer_acc, outer_serial, vec = self.vec, self.acc_axis, self.serial, None
        if vector_accumulators(u):  # the backend's accumulators: along this range, or one scalar per copy
            outer = sorted((r for r in self.deps(u) if _unrolled(r)), key=lambda r: r in self.contiguous)
            vec = accumulator_axis(u, outer, self.contiguous, self.m.lanes(u.dtype.itemsize))
        # nested, with vector accumulators, it is vector code like any other (a softmax's sum of exponentials in
        # 16 partial sums: 157 -> 45 us for 8 x 64 rows of 64, which scalar chains priced 2.3x slower)
        scalar = nested and acc > 1 and vec is None
        float_acc = not scalar and vector_accumulators(u)
        if float_acc:
            if vec is not None and vec not in self.contiguous:
                self.vec = vec
            self.acc_axis = vec
        if not scalar and vec is None:  # its own unrolled copies add into one scalar, one after another
            self.serial = self.serial | {r for r in own if _unrolled(r)}
        elif vec is not None:  # copies of a REDUCE around it (partial sums), accumulated here as one vector
            self.serial = self.serial - {vec}
        vectors = (
            acc
            if scalar or (float_acc and vec is None)
            else math.ceil(acc / self.packed(u, self.m.lanes(max(1, u.dtype.itemsize))) - 1e-9)
        )
        chain = math.prod(trip_count(r) for r in own if _unrolled(r))
        before, before_loads, before_stalls = self.cycles + self.loop_cycles, self.load_cycles, self.stalls
        # a strict-FP reduction loop is not vectorized by LLVM: its body runs one element per iteration
        self.scalar_depth += scalar
        body_before, outer_window = self.cycles, self.window
        self.window = _straight(own)
        self.visit(
            u.src[0], inner_loops, inner_trips, unrolled | {r for r in own if _unrolled(r)}, vector_loop=False, in_reduce=True
        )
        self.scalar_depth -= scalar
        self.vec, self.acc_axis, self.serial, self.window = outer_vec, outer_acc, outer_serial, outer_window
        # the accumulating adds: one per accumulator vector and own unrolled copy (none for a float sum of products:
        # the backend contracts each product and its add into one FMA, already charged as the product); each
        # accumulator's adds form a dependency chain, so an iteration takes at least the add latency per own
        # unrolled copy: few accumulators wait on it, enough of them hide it behind the body's work
        fma = u.dtype.is_float and u.arg[0] is Ops.ADD and u.src[0].op is Ops.MUL
        adds = inner_trips[-1] * (0.0 if fma else vectors * chain * 0.5)
        latency = inner_trips[-1] * chain * ADD_LATENCY
        # scalar chains of a nested REDUCE wait on it whatever the body: LLVM shuffles their copies in and out of
        # vectors around each add (the fused pair of dense layers above)
        body = self.cycles - body_before + adds
        if scalar:
            self.cycles += adds + latency
        else:  # the body's work hides the chains' latency, not perfectly where the two are close
            self.cycles += adds + _norm((body, latency), LATENCY_NORM) - body
        # the accumulators share the registers with a step's operands (the vectors along their axis, a GEMM tile's
        # row of B, and a broadcast) and keep at most ACC_REGS_SHARE of them; those beyond spill and reload
        excess = self.spilled(vectors, vec, u)
        if excess > 0:
            self.spills = True
            self.cycles += inner_trips[-1] * excess * SPILL_CYCLES
        group = math.prod(trip_count(r) for r in own if r.arg[1] is AxisType.GROUP_REDUCE)
        if group > 1:  # slices on separate cores: the work inside runs that much faster, plus a hand-off
            par = min(self.m.cores, group)
            self.group_parallel = max(self.group_parallel, par)
            self.cycles -= (self.cycles + self.loop_cycles - before) * (1 - 1 / par)
            self.load_cycles -= (self.load_cycles - before_loads) * (1 - 1 / par)
            self.stalls -= (self.stalls - before_stalls) * (1 - 1 / par)
            self.cycles += self.m.launch_us * 1e-6 * self.m.ghz * 1e9


class _Lines:
    """Cache lines one run of some ranges touches through a load, memoized for one loop nest item (both cache
    levels ask the same questions): the load's contiguous span (the ranges whose strides abut or overlap the span
    of the smaller ones, from stride 1) in whole lines, times the other ranges' bounds; at most the whole buffer."""

    def __init__(self, w: _Walk, bound: dict[UOp, int], loads: list[tuple[UOp, tuple[UOp, ...], int]]) -> None:
        self.w, self.bound, self.loads = w, bound, loads
        self.memo: dict[tuple[UOp, frozenset[UOp]], float] = {}
        self.strides: dict[UOp, dict[UOp, int | None]] = {}
        self.unrolled: dict[UOp, frozenset[UOp]] = {}  # a load's unrolled ranges
        self.within: dict[tuple[UOp, tuple[UOp, ...], int], float] = {}
        self.foot: dict[tuple[tuple[UOp, ...], int], float] = {}

    def size(self, r: UOp) -> int:
        return self.bound.get(r, trip_count(r))

    def stride_of(self, load: UOp) -> dict[UOp, int | None]:
        """|stride| of every range the load depends on in its index (0: only elsewhere; None: not linearly)."""
        if load not in self.strides:
            idx = load.src[0]
            lin = idx.src[1] if idx.op is Ops.INDEX and len(idx.src) > 1 else None
            self.strides[load] = {
                r: None if lin is None or (st := typical_stride(lin, r)) is None else abs(st) for r in self.w.deps(load)
            }
        return self.strides[load]

    def inside(self, load: UOp, loops: tuple[UOp, ...], level: int) -> float:
        """Lines one run of the loops from `level` in (and every unrolled copy) touches through the load."""
        key = (load, loops, level)
        if key not in self.within:
            if load not in self.unrolled:
                self.unrolled[load] = frozenset(r for r in self.w.deps(load) if _unrolled(r))
            self.within[key] = self(load, frozenset(loops[level:]) | self.unrolled[load])
        return self.within[key]

    def footprint(self, prefix: tuple[UOp, ...], sets: int = 0) -> float:
        """Bytes every load inside the loops `prefix` touches in one run of what is inside them; with `sets`, the
        bytes a cache of that many sets needs to hold them all (a load whose lines crowd into few sets needs its
        fullest set's count in every set: see crowded)."""
        key = (prefix, sets)
        if key not in self.foot:
            n = len(prefix)
            self.foot[key] = LINE * sum(
                max(self.inside(y, ly, n), self.crowded(y, ly, n, sets) if sets else 0.0)
                for y, ly, dy in self.loads
                if ly[:n] == prefix and dy >= n
            )
        return self.foot[key]

    def crowded(self, load: UOp, loops: tuple[UOp, ...], level: int, sets: int) -> float:
        """Lines a cache of `sets` sets must hold per set, times its sets, for one run of the loops from `level`
        in (and the unrolled copies) through the load: its fullest set's lines times the sets. Copies a multiple of
        sets * LINE bytes apart share a set (4 images of 256 channels of 16x16 floats: 256 KiB apart, in one set of
        a 512 KiB 8-way L2, as is every 64th channel). 0 where its lines spread over the sets about evenly (no set
        holds twice its share), or are too many to list, or not linear."""
        self.inside(load, loops, level)  # fills self.unrolled[load]
        inside = frozenset(loops[level:]) | self.unrolled[load]
        rs = [r for r in self.w.deps(load) if r in inside]
        strides = self.stride_of(load)
        if any(strides.get(r) is None for r in rs) or math.prod(self.size(r) for r in rs) > CROWDED_LIST:
            return 0.0
        isz = max(1, load.dtype.itemsize)
        steps = tuple(sorted(((strides[r] or 0) * isz, self.size(r)) for r in rs if strides[r] and self.size(r) > 1))
        return _crowded(steps, sets)

    def fits(self, prefix: tuple[UOp, ...], capacity: float, sets: int = 0) -> bool:
        """Does one run of what is inside the loops `prefix` fit a cache of `capacity` bytes (and `sets` sets)?"""
        return self.footprint(prefix) <= capacity and (not sets or self.footprint(prefix, sets) <= capacity)

    def __call__(self, load: UOp, inside: frozenset[UOp]) -> float:
        key = (load, inside)
        if key in self.memo:
            return self.memo[key]
        isz = max(1, load.dtype.itemsize)
        rs = [r for r in self.w.deps(load) if r in inside]
        strides = {r: st for r, st in self.stride_of(load).items() if r in inside and st}
        # the contiguous span: ranges by stride, each one whose copies abut or overlap the span so far widens it
        # (a conv window's w and kw both step by 1: together they span w + kw - 1 elements, not w * kw); sorted,
        # so the answer never depends on which of two equal strides comes first
        span, spanned = 1, set()
        for r, st in sorted(strides.items(), key=lambda kv: (kv[1], -self.size(kv[0]))):
            if st > span:
                break
            span += (self.size(r) - 1) * st
            spanned.add(r)
        lines: float
        if span > 1:
            lines = math.prod(self.size(r) for r in rs if r not in spanned) * math.ceil(span * isz / LINE)
        else:
            step = min(strides.values(), default=LINE)
            lines = math.prod(self.size(r) for r in rs) * min(1.0, step * isz / LINE) if rs else 1.0
        b = buffer_of(load.src[0])
        whole = b.arg[1][0] * isz / LINE + 1 if b is not None and b.op is Ops.BUFFER else math.inf
        self.memo[key] = out = max(1.0, min(lines, whole))
        return out


CROWDED_LIST = 1 << 16  # the most lines of one load whose sets the estimate lists (_Lines.crowded)


@lru_cache(maxsize=1 << 12)
def _crowded(steps: tuple[tuple[int, int], ...], sets: int) -> float:
    """_Lines.crowded for the elements a load reads at the offsets sum(i * step) (bytes) over (step, count) pairs:
    the fullest set's lines times the sets, where that set holds more than twice its even share (else 0). Many
    candidate schedules read alike: the answer is kept by pattern."""
    if sum((count - 1) * step for step, count in steps) < sets * LINE:
        return 0.0  # the lines span less than the sets: one each
    offsets = np.zeros(1, dtype=np.int64)
    for step, count in steps:
        offsets = (offsets[:, None] + np.arange(count, dtype=np.int64)[None, :] * step).ravel()
    last = int(offsets.max()) // LINE
    if last < 1 << 22:  # a bitmap of the lines (no sort)
        seen = np.zeros(last + 1, dtype=bool)
        seen[offsets // LINE] = True
        lines = np.flatnonzero(seen)
    else:
        lines = np.unique(offsets // LINE)
    fullest = int(np.bincount(lines % sets).max())
    return float(fullest * sets) if fullest > 2 * -(-len(lines) // sets) else 0.0


TYPICAL_SAMPLE = 256  # iterations of a range evaluated to find a non-linear index's usual step
TYPICAL_SHARE = 0.875  # the share of those steps that must agree for it to count as the load's stride


@lru_cache(maxsize=1 << 14)
def typical_stride(idx: UOp, r: UOp) -> int | None:
    """The step an index takes along r on most iterations, where it is not linear in r: a GEMM's operand read as
    rows of 768 from a (head, t, d) layout, k // 64 * 8192 + k % 64, steps by 1 and jumps once in 64 iterations
    (taken for a page step on every one, it was priced 5x slower than it ran). Evaluated over the first
    TYPICAL_SAMPLE values of r, the other ranges at 0; None where no step has TYPICAL_SHARE of them (or the index
    holds an op this evaluation does not know)."""
    if (st := stride(idx, r)) is not None:
        return st
    n = min(trip_count(r), TYPICAL_SAMPLE)
    if n < 3:
        return None
    at = np.arange(n, dtype=np.int64)
    vals: dict[UOp, np.ndarray | int] = {}
    for u in idx.toposort():
        if u.op is Ops.RANGE:
            vals[u] = at if u is r else 0
        elif u.op is Ops.CONST and isinstance(u.arg, int) and not isinstance(u.arg, bool):
            vals[u] = u.arg
        elif u.op in (Ops.ADD, Ops.MUL) or (u.op in (Ops.IDIV, Ops.MOD) and u.src[1].op is Ops.CONST and u.src[1].arg):
            a, b = (vals[x] for x in u.src)
            vals[u] = a + b if u.op is Ops.ADD else a * b if u.op is Ops.MUL else a // b if u.op is Ops.IDIV else a % b
        else:
            return None
    steps = np.diff(np.broadcast_to(vals[idx], (n,)))
    values, counts = np.unique(steps, return_counts=True)
    best = int(np.argmax(counts))
    return int(values[best]) if counts[best] >= TYPICAL_SHARE * len(steps) else None


def _step_bytes(stride: int | None, itemsize: int) -> int:
    """Bytes a load moves ahead each iteration of a loop it steps along by `stride` elements (a page where the step
    is not linear)."""
    return PAGE if stride is None else abs(stride) * itemsize


def _misses(capacity: float, lines: _Lines, strided: float = 1.0, sets: int = 0, pages: bool = False) -> float:
    """Lines the loads of one loop nest item (`lines.loads`) miss in a cache of `capacity` bytes (the reuse-distance
    model in the module docstring), one core's share when `lines.bound` narrows the parallel loop. `strided`: what
    a missing line costs, in lines, where its load steps half a page or more every innermost iteration (the
    prefetchers do not follow it: each line waits on memory's latency). `pages` (lines from memory): the lines one
    step reads from each page it lands on share that page's cost instead (a TLB walk and a DRAM row opened a step:
    a matrix-vector product of 4096 x 4096 read 512 bytes a row a step and ran 1.4-1.6x slower than reading 1-2
    KiB, which the lines in flight had priced alike; Zen 5)."""
    total = 0.0
    for x, lx, d in lines.loads:
        deps = lines.w.deps(x)
        weight = 1.0
        if strided != 1.0 and d == len(lx) > 0:
            step = _step_bytes(lines.stride_of(x).get(lx[-1], 0), max(1, x.dtype.itemsize))
            # the lines one iteration reads side by side wait on memory together (a matrix-vector tile of 128
            # columns: 8 lines a step, priced 3x as one each it was estimated at 3.7x its time)
            n_side = max(1.0, lines.inside(x, lx, d))
            if step < PAGE // 2:
                weight = 1.0
            elif pages:  # each page the step lands on costs (strided - 1) lines beside the lines read from it
                item = max(1, x.dtype.itemsize)
                far = [r for r in deps if _unrolled(r) and _step_bytes(lines.stride_of(x).get(r, 0), item) >= PAGE // 2]
                weight = 1.0 + (strided - 1.0) * math.prod(trip_count(r) for r in far) / n_side
            else:
                weight = max(1.0, strided / n_side)
        misses = lines.inside(x, lx, d)
        for level in range(d - 1, -1, -1):
            r = lx[level]
            if lines.fits(lx[:level], capacity, sets):
                misses = lines.inside(x, lx, level)
            elif r in deps:
                st = lines.stride_of(x).get(r)
                share = 1.0 if st is None else min(1.0, st * max(1, x.dtype.itemsize) / LINE)
                if not lines.fits(lx[: level + 1], capacity, sets):
                    share = 1.0  # an iteration's lines are gone before the next one steps onto them
                misses = max(misses, misses * lines.size(r) * share)
            elif not lines.fits(lx[: level + 1], capacity, sets):
                misses *= lines.size(r)
        total += misses * weight
    return total


MAX_DISTINCT = 4096  # copies beyond this are not compared (MAX_UNROLLED keeps kernels far below it)


@lru_cache(maxsize=1 << 14)
def distinct_copies(u: UOp, unrolled: tuple[UOp, ...]) -> int:
    """How many of a LOAD's (or a gate's) copies over `unrolled` differ: two copies whose index and gate sides
    (the operands of its comparisons) are the same linear function of the ranges read the same element under the
    same gate, and LLVM loads it once. A depthwise 3x3 window with its rows (kh) unrolled inside a tile of 4
    output rows reads input row r + kh: 6 rows, not 12. Anything not linear in the ranges (a MOD, a loaded value
    in the gate) counts every copy."""
    n = math.prod(trip_count(r) for r in unrolled)
    if len(unrolled) < 2 or n > MAX_DISTINCT:
        return n
    idx = u.src[0] if u.op is Ops.LOAD else None
    probes = [idx.src[1]] if idx is not None and idx.op is Ops.INDEX and len(idx.src) > 1 else []
    if u.op is not Ops.LOAD or has_gate(u):
        sides = _gate_sides(u.src[2] if u.op is Ops.LOAD else u)
        if sides is None:
            return n
        probes += sides
    if not probes:
        return n
    rows = []
    for p in probes:
        terms = linear_terms(p)
        if terms is None:
            return n
        rows.append([terms.get(r, 0) for r in unrolled])
    grid = np.stack(np.meshgrid(*(np.arange(trip_count(r)) for r in unrolled), indexing="ij"), -1).reshape(-1, len(unrolled))
    return len(np.unique(grid @ np.array(rows, dtype=np.int64).T, axis=0))


GATE_OPS = (Ops.AND, Ops.OR, Ops.CMPLT, Ops.CMPNE)


def _whole(r: UOp, own: list[UOp]) -> bool:
    """Is r the inner part of a range split 1 x n (rules/optops.py `r-whole`: a window row unrolled whole)?"""
    key = r.arg[0]
    if not (isinstance(key, tuple) and len(key) == 4 and key[0] == "pad" and key[3] == 1):
        return False
    return any(o.arg[0] == (*key[:3], 0) and trip_count(o) == 1 for o in own)


def _straight(own: list[UOp]) -> bool:
    """Do a REDUCE's ranges run no loop: an UNROLL range among them, every one unrolled or of one iteration?"""
    return any(r.arg[1] is AxisType.UNROLL for r in own) and all(_unrolled(r) or trip_count(r) == 1 for r in own)


def straight_windows(nodes: list[UOp]) -> tuple[frozenset[UOp], bool]:
    """(the unrolled ranges of the REDUCEs among `nodes` that run no loop, whether some REDUCE runs a loop around
    a window unrolled whole). A REDUCE of an UNROLL range with every range unrolled or of one iteration (not
    partial sums combined over an UPCAST range, which keep their limit) is straight code: a
    depthwise 3x3 window unrolled whole, 9 copies at most, its tile keeping its registers, so its ranges do not
    count toward MAX_UNROLLED (7 rows x 32 columns with the window straight: 2016 copies, 1.9x faster than 8
    channels x 32 columns with the window a loop). A window unrolled inside a loop (a dense convolution's kh
    inside its input channels) measured no faster natively and up to 1.16x slower in AVX2 code than the
    reduction unrolled by 4, which the estimate ranked below it: it is priced out (infinite)."""
    straight: set[UOp] = set()
    looped = False
    for u in nodes:
        if u.op is Ops.REDUCE:
            own = [r for r in u.src[1:] if r.op is Ops.RANGE]
            if _straight(own):
                straight.update(r for r in own if _unrolled(r))
            elif any(_unrolled(r) and _whole(r, own) for r in own):
                looped = True
    return frozenset(straight), looped


def zero_fill(u: UOp) -> bool:
    """Is u `WHERE(g, LOAD(.., g), 0)`: the value of a load under gate g, 0 where g is false, which the load
    itself gives (a masked vector load zero-fills)?"""
    return (
        u.op is Ops.WHERE
        and u.src[1].op is Ops.LOAD
        and len(u.src[1].src) == 3
        and u.src[1].src[2] is u.src[0]
        and u.src[2].op is Ops.CONST
        and u.src[2].arg == 0
    )


def _gate_sides(gate: UOp) -> list[UOp] | None:
    """The integer operands of the comparisons a boolean gate combines (None: it has other leaves)."""
    if gate.op in (Ops.AND, Ops.OR) or (gate.op in (Ops.CMPNE, Ops.XOR) and gate.src[0].dtype.is_bool):  # NOT too
        parts = [_gate_sides(s) for s in gate.src]
        return None if any(p is None for p in parts) else [x for p in parts if p is not None for x in p]
    if gate.op in (Ops.CMPLT, Ops.CMPNE) and gate.src[0].dtype.is_int:
        return list(gate.src)
    if gate.op is Ops.CONST:
        return []
    return None


@lru_cache(maxsize=1 << 14)
def set_conflicts(lin: UOp, unrolled: tuple[UOp, ...], itemsize: int, m: CPUMachine) -> int:
    """Lines a load's unrolled copies touch in L1 sets that hold more of them than the cache has ways: these miss
    on every iteration. Copies a power-of-two multiple of 4 KiB apart share one set (a 16-row GEMM tile over
    rows of 1024 floats thrashes a 8-way L1 and measured half the speed of an 8-row one)."""
    strides = [st for r in unrolled if (st := stride(lin, r)) is not None]
    if len(strides) < len(unrolled):  # a copy not linearly apart: not counted
        return 0
    offsets = {0}
    for r, st in zip(unrolled, strides):
        offsets = {o + i * st * itemsize for o in offsets for i in range(trip_count(r))}
    sets = max(1, m.l1_bytes // (LINE * max(1, m.l1_ways)))
    per_set = Counter(line % sets for line in {o // LINE for o in offsets})
    return sum(n for n in per_set.values() if n > m.l1_ways)


def work_floor(kernel: UOp, m: CPUMachine | None = None) -> float:
    """A lower bound of `estimate(kernel)` for any schedule of it, without walking its loop nest: every float
    operation runs at least once per combination of the ranges it depends on and, inside a REDUCE whose ranges
    it depends on, of the ranges that REDUCE runs over (a GEMM fused into each element of its consumer runs
    once per element), at the cheapest rate the estimate ever charges (a vectorized loop on every core). A
    REDUCE nested in another one's body costs at least the lesser of its two forms in the estimate: one
    accumulator chain waiting ADD_LATENCY on each of its own iterations (copies of the unrolled ranges around it
    may be one vector chain), or (with several) scalar chains whose body operations run one element at a time.
    The kernel's buffers also stream at least once, from the L3 where they all fit it (CPUMachine.stream_bps).
    Fusion trials whose floor is above what they would replace need no ranking."""
    m = m or CPUMachine.host()
    w = _Walk(m)
    reduced: set[tuple[UOp, frozenset[UOp]]] = set()

    def visit(root: UOp, enclosing: list[tuple[frozenset[UOp], set[UOp]]]) -> tuple[float, float]:
        """(cycles vectorized, cycles as scalar code) of the operations under root, REDUCE bodies included."""
        vec = scal = 0.0
        for u in value_nodes(root):
            runs = set(w.deps(u))
            for own, domain in enclosing:  # innermost first: its domain holds the ranges of the ones around it
                if runs & own:
                    runs |= domain
            if u.op is Ops.REDUCE:
                if (u, frozenset(runs)) in reduced:  # computed once where it runs (see _Walk.reduce)
                    continue
                reduced.add((u, frozenset(runs)))
                own_ranges = frozenset(r for r in u.src[1:] if r.op is Ops.RANGE)
                body_vec, body_scal = visit(u.src[0], [(frozenset(u.src[1:]), runs), *enclosing])
                if enclosing:  # nested (see _Walk.reduce): one chain's latency a step, or scalar chains
                    # (copies of unrolled ranges around it may share one vector chain: not steps of their own)
                    steps = math.prod(trip_count(r) for r in {r for r in w.deps(u) if not _unrolled(r)} | own_ranges)
                    body_vec = max(body_vec, min(steps * ADD_LATENCY, body_scal))
                vec, scal = vec + body_vec, scal + body_scal
            elif u.dtype.is_float and u.op not in FREE and u.op not in (Ops.LOAD, Ops.STORE):
                per = OP_CYCLES.get(u.op, DEFAULT_OP) * math.prod(trip_count(r) for r in runs)
                vec += per / (m.lanes(u.dtype.itemsize) * _interleave(u.op))
                scal += per
        return vec, scal

    cycles, _ = visit(kernel, [])
    nodes = kernel.toposort()
    group = any(u.op is Ops.RANGE and u.arg[1] is AxisType.GROUP_REDUCE for u in nodes)
    compute = cycles / (m.ghz * 1e9 * m.cores * (m.cores if group else 1))
    nbytes = sum(u.arg[1][0] * u.dtype.itemsize for u in nodes if u.op is Ops.BUFFER)
    return max(compute, nbytes / max(m.stream_bps(nbytes, 1), m.stream_bps(nbytes, m.cores))) + m.launch_us * 1e-6


def estimate(kernel: UOp, m: CPUMachine | None = None) -> KernelEstimate:
    """Estimate a kernel AST (SINK of END-wrapped STOREs over bound ranges)."""
    m = m or CPUMachine.host()
    w = _Walk(m)
    est = KernelEstimate()
    cache_s = 0.0  # per core: the slices run side by side
    nodes = kernel.toposort()
    nbytes = sum(u.arg[1][0] * u.dtype.itemsize for u in nodes if u.op is Ops.BUFFER)
    resident = m.resident(nbytes)
    w.ranges[kernel]  # every node's ranges, over the kernel's toposort (no walk of its own per item)
    items = kernel.src if kernel.op is Ops.SINK else (kernel,)
    kernel_ranges = [u for u in nodes if u.op is Ops.RANGE]
    for item in items:
        ranges: list[UOp] = []
        st = item
        while st.op is Ops.END:
            ranges += [r for r in st.src[1:] if r.op is Ops.RANGE]
            st = st.src[0]
        loops = [r for r in ranges if not _unrolled(r)]
        before, before_loads, before_conflicts = w.cycles + w.loop_cycles, w.load_cycles, w.conflicts
        before_stalls = w.stalls
        first = len(w.loads)
        w.item(st, loops, [r for r in ranges if _unrolled(r)])
        # the backend's auto-parallel rule counts every range under the store, the reduce ranges too: the kernel's
        # ranges, where the store is its one item and depends on every range its ENDs bind
        alone = len(items) == 1 and w.ranges[st].issuperset(ranges)
        under = kernel_ranges if alone else [r for r in st.toposort() if r.op is Ops.RANGE]
        work = math.prod(trip_count(r) for r in under)
        thread = [r for r in loops if r.arg[1] is AxisType.THREAD]  # a THREAD split is parallel at any size
        split = thread[0] if thread else loops[0] if loops and work >= AUTO_PARALLEL_MIN_WORK else None
        par = min(m.cores, trip_count(split)) if split is not None else 1
        est.parallel = max(est.parallel, par)
        # the load ports and the arithmetic issue side by side: the busier of them sets the pace
        busy = max(w.cycles + w.loop_cycles - before, w.load_cycles - before_loads) + w.stalls - before_stalls
        # the slices are whole iterations: 3 over 2 cores take 2 iterations' time, not 1.5
        uneven = -(-trip_count(split) // par) * par / trip_count(split) if split is not None else 1.0
        est.compute_s += busy * uneven / (m.ghz * 1e9 * par)
        share = {split: -(-trip_count(split) // par)} if split is not None else {}  # one core's slice
        lines = _Lines(w, share, w.loads[first:])
        l1 = _misses(m.l1_bytes * CACHE_FILL[1], lines) + (w.conflicts - before_conflicts) / par
        l2 = _misses(m.l2_bytes * CACHE_FILL[2], lines, STRIDED_MISS, m.l2_bytes // (LINE * max(1, m.l2_ways)))
        # L2 misses that miss the L3 too (none where the kernel's buffers all stay in it)
        l3 = 0.0 if resident else _misses(m.l3_bytes * CACHE_FILL[3], lines, STRIDED_MISS, pages=True) if m.l3_bytes else l2
        est.l1_misses += l1
        est.l2_misses += l2
        l2_fill = l1 * LINE / (m.l2_bytes_per_cycle * m.ghz * 1e9)
        levels = (l2_fill, max(0.0, l2 - l3) * LINE / (m.l3_gbps * 1e9), l3 * LINE / (m.mem_gbps * 1e9))
        cache_s += _norm(levels, CACHE_LEVEL_NORM)
    est.cycles, est.bytes = max(w.cycles + w.loop_cycles, w.load_cycles) + w.stalls, nbytes
    est.spills, est.code = w.spills, w.code
    est.parallel = max(est.parallel, w.group_parallel)
    est.memory_s = max(nbytes / m.stream_bps(nbytes, est.parallel), cache_s)
    est.overhead_s = m.launch_us * 1e-6
    # the cores keep computing while lines arrive, but not all the time: part of the lesser side shows
    est.seconds = max(est.compute_s, est.memory_s) + OVERLAP_MISS * min(est.compute_s, est.memory_s) + est.overhead_s
    straight, looped = straight_windows(nodes)
    unrolled = math.prod(trip_count(r) for r in kernel_ranges if _unrolled(r) and r not in straight)
    if unrolled > MAX_UNROLLED:  # straight-line code this long compiles slowly and thrashes registers and caches
        est.seconds = math.inf
        est.notes.append(f"{unrolled} unrolled copies: more than {MAX_UNROLLED}")
    if looped:
        est.seconds = math.inf
        est.notes.append("a window unrolled whole inside a reduction loop")
    if w.spills:
        est.notes.append("more accumulators than vector registers: spills")
    return est
