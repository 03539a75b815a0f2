"""A roofline estimate of one kernel's run time on an NVIDIA GPU, for ranking schedules of target "cuda".

The thread mapping is the CUDA renderer's own launch plan (`LaunchPlan`, kernel/gpu_launch.py): it puts each STORE
item's ranges on the grid (GLOBAL; LOOP/THREAD when there is no GLOBAL), the block (LOCAL, GROUP_REDUCE, WARP
outside a tensor-core region), upcast copies (UPCAST END ranges, expanded into copies of the store), sequential
loops (UNROLL/the rest, and REDUCE ranges other than GROUP_REDUCE) and tensor-core regions (one warp per 16x16
tile), and group items into launches. So the estimate prices what would be launched, and a kernel the renderer
rejects is infinitely slow. Per launch of G blocks of B threads (flat items: 256-thread blocks over the flattened
grid):

    time = max(compute, cache, dram, latency) + launch

* compute: each operation runs once per iteration of the sequential loops around its deepest dependency (the
  renderer hoists the rest) and once per upcast copy it depends on (a load that does not depend on an UPCAST
  range is shared by the copies; consecutive aligned copies are one vector access), in lane-cycles (a float op 1,
  the add of an FFMA free, int div/mod 8, SFU math 8, loads/stores 4, conversions 2); a warp pays 32 lanes however
  few are busy, and the SMs' lanes run fp32_tflops / 2 of them per second. The G blocks spread over the SMs in
  ceil(G / sms) rounds. TC regions: 16x16x16 MMAs at the fp16 tensor-core peak (one per tile per k step), fragment
  reads through L1/shared memory and operand bytes from L2 (staged: the block tile once). A block-shared REDUCE (the
  renderer's `cooperative`) runs 1/threads of its iterations per thread, plus a shuffle butterfly and, with
  several warps, two barriers; a REDUCE hoisted out of another's body is counted once.
* cache: a warp-level access moves the 32-byte sectors its lanes touch (lane -> range values -> `stride` of the
  index in each thread range, or in a block-shared REDUCE's own ranges inside it: 4 for coalesced float32, 1
  for a broadcast, up to 32 when strided or gathered) through L1 at 128 B per clock per SM.
* dram: each buffer touched once per launch (compulsory), times the sector waste of an uncoalesced access when
  the buffer does not fit in L2 and the thread does not read the rest of the sector in its next iteration; over
  the HBM bandwidth, or less when too few warps are resident to keep it busy (Little's law: warps x MLP
  requests in flight per DRAM latency).
* latency: the dependent chain of one thread (ADD_LATENCY per accumulation of a sequential reduce, a barrier per
  level of a GROUP_REDUCE tree, MMA_CYCLES per k step), or its instruction count (a warp issues one per clock),
  once per wave of resident blocks: one thread summing 16M elements is slow however idle the GPU is.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import NamedTuple

from egraph_compiler.extract.loop_cost import KernelEstimate, stride
from egraph_compiler.ir.diagnostics import CompilerError
from egraph_compiler.ir.dtypes import dtypes
from egraph_compiler.ir.ops import AxisType, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.analysis import trip_count, value_nodes
from egraph_compiler.kernel.gpu_launch import GRID_LIMITS, Item, LaunchPlan, Phase, SharedBlock, plan_launch
from egraph_compiler.kernel.program import Kernel, buffer_of
from egraph_compiler.kernel.tensor_cores import STATIC_SMEM, affine

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
    Ops.BITCAST,
)
# lane-cycles per thread-level operation; one lane-cycle = a float add/mul on one of the SM's fp32 lanes
LANE_CYCLES = {
    Ops.IDIV: 8.0,
    Ops.MOD: 8.0,
    Ops.CAST: 2.0,
    Ops.LOAD: 4.0,
    Ops.STORE: 4.0,  # LSU: 32 lanes/SM
    Ops.RECIP: 8.0,
    Ops.SQRT: 8.0,
    Ops.EXP2: 8.0,
    Ops.LOG2: 8.0,
    Ops.SIN: 8.0,
}  # SFU: 16 lanes/SM
ADD_LATENCY = 4.0  # cycles before a dependent FADD/FFMA can issue
TREE_STEP = 40.0  # one level of a shared-memory tree: load, op, store, __syncthreads
SHUFFLE_STEP = 30.0  # one __shfl_xor_sync level of a warp butterfly and its op
MMA_CYCLES = 32.0  # one m16n16k16 load_matrix_sync pair + mma_sync, issued back to back by one warp
DRAM_LATENCY = 600.0  # cycles for a load that misses L2, under load
MLP = 4  # loads in flight per warp (nvcc unrolls a reduce loop by 4)
L1_BYTES_PER_CLOCK = 128
L2_BYTES_PER_CLOCK = 32  # per SM: L2 -> SM bandwidth (H100: ~7 TB/s over 132 SMs at 1.75 GHz)
MAX_BLOCKS_PER_SM = 32
HBM_EFFICIENCY = 0.9  # a streaming copy reaches ~90% of the HBM peak
SECTOR = 32
SUSTAINED_CLOCK = 0.9  # of the boost clock a device reports


@dataclass(frozen=True)
class GPUMachine:
    """What the estimate needs of the GPU. Defaults: an H100 SXM5 (NVIDIA's data sheet; clocks as sustained under
    load, 1.75 GHz, where the sheet's 67 TFLOPS fp32 assumes the 1.98 GHz boost). fp16_tc_tflops is the sheet's
    dense fp16 peak (989, fp32 accumulation; 1979 is with sparsity): WMMA fed from global memory reaches a
    fraction of it, which the cache term, not this number, accounts for."""

    sms: int = 132
    warp_size: int = 32
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    shared_mem_per_block: int = 227 << 10  # opt-in maximum; static arrays are limited to 48 KiB
    fp32_tflops: float = 60.0  # 132 SMs x 128 lanes x 2 (FMA) x 1.75 GHz
    fp16_tc_tflops: float = 989.0
    hbm_gbps: float = 3350.0
    l2_bytes: int = 50 << 20
    launch_us: float = 4.0
    clock_ghz: float = 1.75

    @staticmethod
    @cache
    def device() -> GPUMachine:
        """The live device 0 through CuPy when there is one, else the defaults; EGC_GPU_<FIELD> overrides a field
        (EGC_GPU_HBM_GBPS=2000). Read once per process."""
        m = GPUMachine()
        try:
            import cupy  # type: ignore[import-not-found]

            rt = cupy.cuda.runtime
            if rt.getDeviceCount() > 0:
                p = dict(rt.getDeviceProperties(0))
                for key, attr in (("clockRate", 13), ("memoryClockRate", 36), ("memoryBusWidth", 37)):
                    if not p.get(key):  # CUDA 13 dropped these from cudaDeviceProp; the attributes remain
                        p[key] = rt.deviceGetAttribute(attr, 0)
                m = from_properties(p, m)
        except Exception:  # no CuPy, no driver or no device: an H100 is as good a guess as any
            pass
        env = {f.name: os.environ[f"EGC_GPU_{f.name.upper()}"] for f in fields(m) if f"EGC_GPU_{f.name.upper()}" in os.environ}
        return replace(m, **{k: type(getattr(m, k))(float(v)) for k, v in env.items()})


def from_properties(p: dict[str, object], m: GPUMachine = GPUMachine()) -> GPUMachine:
    """A GPUMachine from cudaDeviceProp fields (CuPy's getDeviceProperties); what is missing comes from m."""

    def get(key: str, default: float) -> float:
        v = p.get(key)
        return float(v) if isinstance(v, (int, float)) and v > 0 else float(default)

    cc = (int(get("major", 9)), int(get("minor", 0)))
    # clockRate (kHz) is the top boost clock; under sustained load the SMs run ~10% below it
    ghz = get("clockRate", 0) / 1e6 * SUSTAINED_CLOCK or m.clock_ghz
    sms = int(get("multiProcessorCount", m.sms))
    lanes = 64 if cc in ((7, 0), (7, 2), (7, 5), (8, 0)) else 128  # fp32 lanes per SM
    # dense fp16 tensor-core FMAs per SM per clock: Volta/Turing, A100, Hopper, Blackwell; consumer parts 512
    tc = 512 if cc[0] < 8 else 1024 if cc == (8, 0) else 2048 if cc[0] == 9 else 4096 if cc[0] == 10 else 512
    hbm = get("memoryClockRate", 0) * 1e3 * 2 * get("memoryBusWidth", 0) / 8 / 1e9 or m.hbm_gbps  # kHz, DDR, bits
    known = "clockRate" in p and "major" in p
    return GPUMachine(
        sms=sms,
        warp_size=int(get("warpSize", m.warp_size)),
        max_threads_per_sm=int(get("maxThreadsPerMultiProcessor", m.max_threads_per_sm)),
        max_threads_per_block=int(get("maxThreadsPerBlock", m.max_threads_per_block)),
        shared_mem_per_block=int(get("sharedMemPerBlockOptin", get("sharedMemPerBlock", m.shared_mem_per_block))),
        fp32_tflops=sms * lanes * 2 * ghz / 1e3 if known else m.fp32_tflops * sms / m.sms,
        fp16_tc_tflops=sms * tc * 2 * ghz / 1e3 if known else m.fp16_tc_tflops * sms / m.sms,
        hbm_gbps=hbm,
        l2_bytes=int(get("l2CacheSize", m.l2_bytes)),
        launch_us=m.launch_us,
        clock_ghz=ghz,
    )


def _lane_cycles(u: UOp) -> float:
    if u.op is Ops.ADD and u.dtype.is_float and any(s.op is Ops.MUL for s in u.src):
        return 0.0  # fused with the MUL into one FFMA
    c = LANE_CYCLES.get(u.op, 1.0)
    if u.dtype is dtypes.float64:
        c *= 2.0
    if u.dtype in (dtypes.float16, dtypes.bfloat16) and u.op not in (Ops.LOAD, Ops.CAST):
        c += 2 * LANE_CYCLES[Ops.CAST]  # computed in float and rounded after every op
    return c


class _Thread:
    """The work of one thread of an item: lane-cycles, instructions, dependent chain and memory accesses."""

    def __init__(self, r: LaunchPlan, shared: SharedBlock | None = None) -> None:
        self.r = r
        self.shared = shared  # how the block shares block-uniform REDUCEs (None: it does not)
        self.lane = self.instr = self.chain = 0.0
        self.smem = 0
        self.tc_steps = 0.0  # a TC item: k steps of 16, MMAs per k step,
        self.tc_mmas = 0  # fragment bytes a warp reads per k step (L1 or shared memory)
        self.tc_frag_bytes = 0.0  # and bytes it brings from L2 per k step (its share of a staged block tile)
        self.tc_l2_bytes = 0.0
        # (LOAD/STORE, runs per thread, innermost loop, vector access: (lane range, elements) or None,
        #  the ranges a warp's lanes step through when not the item's thread ranges: a block-shared REDUCE's)
        self.accesses: list[tuple[UOp, float, UOp | None, tuple[UOp, int] | None, list[UOp] | None]] = []
        self.lanes: list[UOp] = []  # UPCAST END ranges the renderer expands into lanes
        self.spread: list[UOp] | None = None  # inside a block-shared REDUCE: its ranges, spread over the threads
        self.reduced: set[UOp] = set()  # REDUCEs counted (one nested in another's body is hoisted: once)

    def copies(self, u: UOp) -> int:
        """How many lane copies of u the renderer emits (one per value of the lanes it depends on)."""
        d = self.r.deps(u)
        return math.prod(trip_count(x) for x in self.lanes if x in d)

    def vector(self, u: UOp) -> tuple[UOp, int] | None:
        """(lane range, width) when the lane copies of a load/store become vector accesses: unit stride in its
        innermost lane, aligned (as backends.cuda.vector_runs decides on the expanded copies)."""
        idx = u.src[0].src[1] if len(u.src[0].src) > 1 else None
        size = buffer_of(u.src[0]).dtype.itemsize
        d = self.r.deps(u)
        lane = next((x for x in reversed(self.lanes) if x in d), None)
        aff = affine(idx) if idx is not None and lane is not None and size in (2, 4, 8) else None
        if aff is None or lane is None or aff.get(lane) != 1:
            return None
        for w in (16 // size, 8 // size, 4 // size):
            if w >= 2 and trip_count(lane) % w == 0 and all(c % w == 0 for r, c in aff.items() if r is not lane):
                return lane, w
        return None

    def place(self, u: UOp, loops: list[UOp]) -> int:
        d = self.r.deps(u)
        return max((i + 1 for i, x in enumerate(loops) if x in d), default=0)

    def visit(self, root: UOp, loops: list[UOp], trips: list[float], skip: frozenset[UOp] = frozenset()) -> None:
        for u in value_nodes(root, skip):
            if u.op is Ops.REDUCE:
                if u not in self.reduced:
                    self.reduced.add(u)
                    self.reduce(u, loops, trips)
            elif u.op not in FREE:
                depth = self.place(u, loops)
                runs = trips[depth] * self.copies(u)
                vec = self.vector(u) if u.op in (Ops.LOAD, Ops.STORE) and self.lanes else None
                if vec is not None:
                    runs /= vec[1]
                self.lane += runs * _lane_cycles(u)
                self.instr += runs
                if u.op in (Ops.LOAD, Ops.STORE):
                    inner = loops[depth - 1] if depth else None
                    spread = self.spread if self.spread is not None and inner in self.spread else None
                    self.accesses.append((u, runs, None if spread else inner, vec, spread))

    def reduce(self, u: UOp, loops: list[UOp], trips: list[float]) -> None:
        depth = self.place(u, loops)
        own = [x for x in u.src[1:] if x.op is Ops.RANGE]  # a constant there is a range of one: no loop
        group = [x for x in own if x.arg[1] is AxisType.GROUP_REDUCE]
        inner, t = loops[:depth] + [x for x in own if x not in group], trips[: depth + 1]
        # a block-uniform REDUCE is shared by the block's threads (backends.cuda block_combine): each takes every
        # threads-th iteration, then a shuffle butterfly and the warps' partials through shared memory
        # (not inside another shared loop, where the trip count differs between threads)
        outer = self.spread
        inside = outer is not None and bool(self.r.deps(u) & set(outer))
        shared = self.shared if not inside and self.r.cooperative(u, self.shared) else None
        share = shared.threads * shared.parts if shared is not None else 1
        for x in inner[depth:]:
            t.append(t[-1] * trip_count(x) / (share if x is inner[-1] else 1))
        if shared is not None:
            self.spread = inner[depth:]
        self.visit(u.src[0], inner, t)
        self.spread = outer
        fused = u.arg[0] is Ops.ADD and u.dtype.is_float and u.src[0].op is Ops.MUL
        copies = self.copies(u)
        self.lane += t[-1] * copies * (0.0 if fused else 1.0)
        self.instr += t[-1] * copies
        self.chain += t[-1] * ADD_LATENCY  # each add waits for the previous one; lane copies interleave
        if shared is not None:
            warps = shared.threads // 32
            self.chain += trips[depth] * (5 * SHUFFLE_STEP + (2 * TREE_STEP if warps > 1 else 0.0))
            self.lane += trips[depth] * copies * (5 * 2 + (warps + 2) * LANE_CYCLES[Ops.LOAD] / 32)
            self.instr += trips[depth] * copies * (10 + warps)
        if group:  # store, barrier, log2(n) levels of the tree, read back, barrier
            levels = 2 + sum(math.ceil(math.log2(trip_count(g))) for g in group if trip_count(g) > 1)
            self.chain += trips[depth] * levels * TREE_STEP
            self.lane += trips[depth] * levels * 2 * LANE_CYCLES[Ops.LOAD]
            self.instr += trips[depth] * levels * 4


def _sectors(access: UOp, lanes: list[UOp], n_lanes: int, vec: tuple[UOp, int] | None = None) -> tuple[int, int]:
    """(32-byte sectors, distinct elements) one warp-level access touches: lane t's range values are t decomposed
    over `lanes` (innermost last), its offset their sum weighted by the index's stride in each; a vector access
    (range, width) also touches the next width - 1 elements."""
    idx = access.src[0].src[1] if len(access.src[0].src) > 1 else None
    size = buffer_of(access.src[0]).dtype.itemsize
    coef: dict[UOp, int | None] = {}
    offsets = []
    for t in range(n_lanes):
        off = 0
        for r in reversed(lanes):
            b = max(1, trip_count(r))
            t, v = divmod(t, b)
            if v and idx is not None:
                if r not in coef:
                    coef[r] = stride(idx, r)
                s = coef[r]
                if s is None:  # not affine in a thread index: a gather, one sector per lane
                    return n_lanes, n_lanes
                off += s * v
        offsets += [off + e for e in range(vec[1] if vec else 1)]
    return len({o * size // SECTOR for o in offsets}), len(set(offsets))


@dataclass
class _Launch:
    compute_s: float = 0.0
    cache_s: float = 0.0
    l2_s: float = 0.0
    latency_s: float = 0.0
    req_bytes: float = 0.0
    reqs: float = 0.0


def estimate_gpu(kernel: UOp, m: GPUMachine | None = None) -> KernelEstimate:
    """Estimate a kernel AST (SINK of END-wrapped STOREs) as the CUDA backend would launch it on m (default: the
    live device, else an H100). Summed over launches: compute_s (the compute terms), memory_s (max of the cache and
    dram terms), bytes (DRAM traffic); seconds also counts the latency term where it bounds a launch. `parallel` is
    the number of threads of the widest launch, `cycles` the estimate in GPU clocks without launch overhead; notes
    say what bounds each launch, or why the kernel is invalid (then seconds is inf)."""
    m = m or GPUMachine.device()
    est = KernelEstimate()
    if kernel.op is not Ops.SINK:
        kernel = UOp(Ops.SINK, dtypes.void, (kernel,))
    try:
        r = plan_launch(Kernel.from_ast("k", kernel))
    except CompilerError as e:
        return _invalid(est, f"the CUDA renderer rejects it: {e}")
    hz = m.clock_ghz * 1e9
    for k, ph in enumerate(r.phases):
        shape = _launch_shape(ph)
        if ph.split is not None:  # the partials launch; the combining one is a launch and a few dependent steps
            est.overhead_s += m.launch_us * 1e-6 + (DRAM_LATENCY + 5 * SHUFFLE_STEP + 2 * TREE_STEP) / hz
            est.notes.append(f"phase {k}: its REDUCE split over {ph.split.block.parts} blocks per output")
        if shape.threads > m.max_threads_per_block:
            return _invalid(est, f"phase {k}: {shape.threads} threads per block (max {m.max_threads_per_block})")
        if not shape.fits:
            return _invalid(est, f"phase {k}: {shape.blocks} blocks overflow the CUDA grid")
        if shape.blocks * shape.threads == 0:
            continue
        works = [_item(r, it, ph, ph.split.block if ph.split is not None else ph.shared) for it in ph.items]
        smem = sum(w.smem for w in works)
        if smem > min(STATIC_SMEM, m.shared_mem_per_block):
            return _invalid(est, f"phase {k}: {smem} bytes of static shared memory")
        _add_launch(est, k, ph, shape, works, smem, m)
    est.cycles = est.seconds * hz
    est.overhead_s += len(r.phases) * m.launch_us * 1e-6
    est.seconds += est.overhead_s
    return est


class _Shape(NamedTuple):
    threads: int  # per block
    blocks: int
    fits: bool  # the blocks fit the CUDA grid
    flat: bool  # one linear thread index over the grid ranges (no block ranges, no grid split)


def _launch_shape(ph: Phase) -> _Shape:
    """A phase's launch as the plan makes it: threads per block and blocks (symbolic sizes counted as 1)."""
    if ph.split is not None:
        return _Shape(ph.split.block.threads, ph.split.outputs * ph.split.block.parts, True, False)
    if not (ph.tc or ph.block or ph.group):
        total = max(math.prod(trip_count(x) for x in it.grid) for it in ph.items)
        threads = ph.threads[0]  # the plan's flat block
        blocks = -(-total // threads)
        return _Shape(threads, blocks, blocks <= GRID_LIMITS[0] * GRID_LIMITS[1], True)
    threads = math.prod(ph.threads)  # the plan's block shape
    blocks = math.prod(trip_count(x) for x in ph.grid)
    return _Shape(threads, blocks, blocks <= math.prod(GRID_LIMITS), False)


def _add_launch(est: KernelEstimate, k: int, ph: Phase, shape: _Shape, works: list[_Thread], smem: int, m: GPUMachine) -> None:
    """One launch's terms: compute, cache (L1 sectors, L2 tiles), DRAM (bandwidth limited by the requests in
    flight) and latency (each thread's dependent chain, once per wave); the largest bounds it."""
    hz = m.clock_ghz * 1e9
    lanes_per_clock = m.fp32_tflops * 1e12 / 2 / (m.sms * hz)
    threads, blocks = shape.threads, shape.blocks
    warps = -(-threads // 32)
    per_sm = max(1, min(m.max_threads_per_sm // (warps * 32), MAX_BLOCKS_PER_SM, m.shared_mem_per_block // max(smem, 1)))
    ln = _Launch()
    dram: dict[UOp, float] = {}  # buffer -> bytes it moves
    for it, w in zip(ph.items, works):
        nb = -(-math.prod(trip_count(x) for x in it.grid) // threads) if shape.flat else blocks
        rounds, waves = -(-nb // m.sms), -(-nb // (m.sms * per_sm))
        sector_bytes = _accesses(it, w, ph, shape, ln, dram, m)
        if it.tc is not None:  # fragments through L1/shared memory, block tiles (or fragments) from L2
            sector_bytes += w.tc_steps * (w.tc_frag_bytes + w.tc_l2_bytes)
            ln.l2_s += rounds * warps * w.tc_steps * w.tc_l2_bytes / (L2_BYTES_PER_CLOCK * hz)
            ln.compute_s += rounds * warps * w.tc_steps * w.tc_mmas * 2 * 16**3 / (m.fp16_tc_tflops * 1e12 / m.sms)
            for b in (it.tc.a[0], it.tc.b[0]):
                dram[b] = max(dram.get(b, 0.0), b.arg[1][0] * b.dtype.itemsize)
        ln.compute_s += rounds * warps * 32 * w.lane / (lanes_per_clock * hz)
        ln.cache_s += rounds * warps * sector_bytes / (L1_BYTES_PER_CLOCK * hz)
        ln.latency_s += waves * max(w.chain, w.instr) / hz
    req = ln.req_bytes / ln.reqs if ln.reqs else 128.0
    in_flight = min(blocks, m.sms * per_sm) * warps * MLP * (512.0 if ph.tc else req)
    bandwidth = min(m.hbm_gbps * 1e9 * HBM_EFFICIENCY, in_flight / (DRAM_LATENCY / hz))
    dram_s = sum(dram.values()) / bandwidth
    terms = {"compute": ln.compute_s, "cache": max(ln.cache_s, ln.l2_s), "dram": dram_s, "latency": ln.latency_s}
    bound = max(terms, key=lambda t: terms[t])
    est.compute_s += ln.compute_s
    est.memory_s += max(ln.cache_s, ln.l2_s, dram_s)
    est.seconds += terms[bound]
    est.bytes += int(sum(dram.values()))
    est.parallel = max(est.parallel, blocks * threads)
    est.notes.append(f"phase {k}: {blocks} x {threads} threads{' (TC)' if ph.tc else ''}, {bound} bound")


def _accesses(it: Item, w: _Thread, ph: Phase, shape: _Shape, ln: _Launch, dram: dict[UOp, float], m: GPUMachine) -> float:
    """The item's loads and stores: their L1 sector bytes (returned), requests (into `ln`) and the DRAM bytes
    each buffer moves (into `dram`: a sector's unread rest is lost when it leaves L2 first)."""
    threads = shape.threads
    lanes = it.grid if shape.flat else [it.tc.m, it.tc.n] if it.tc else ph.block + ph.group
    n_lanes = min(32, threads, math.prod(trip_count(x) for x in lanes) if shape.flat else threads)
    sector_bytes = 0.0
    for u, runs, inner, vec, spread in w.accesses:
        sectors, distinct = (
            _sectors(u, spread, min(32, math.prod(trip_count(x) for x in spread)), vec)
            if spread
            else _sectors(u, lanes, n_lanes, vec)
        )
        sector_bytes += runs * sectors * SECTOR
        ln.req_bytes += runs * sectors * SECTOR
        ln.reqs += runs
        b = buffer_of(u.src[0])
        size = b.dtype.itemsize
        nbytes = b.arg[1][0] * size
        s = stride(u.src[0].src[1], inner) if inner is not None and len(u.src[0].src) > 1 else None
        # the rest of a sector is lost when it leaves L2 before anyone reads it: not when the thread's next
        # iterations read it, nor for one sector per warp (neighbouring warps and blocks read the rest)
        reuse = sectors == 1 or (s is not None and abs(s) * size < SECTOR)
        waste = sectors * SECTOR / (distinct * size) if nbytes > m.l2_bytes and not reuse else 1.0
        dram[b] = max(dram.get(b, 0.0), nbytes * max(1.0, waste))
    return sector_bytes


def _item(r: LaunchPlan, it: Item, ph: Phase, shared: SharedBlock | None) -> _Thread:
    """One thread's work in item `it`: its sequential END ranges are loops, in order."""
    w = _Thread(r, shared)
    w.lanes = it.lanes if it.tc is None else []
    loops = [x for x in it.seq if x not in w.lanes]
    trips = [1.0]
    for x in loops:
        trips.append(trips[-1] * trip_count(x))
    if it.tc is None:
        w.visit(it.store, loops, trips)
        w.smem = (
            math.prod(trip_count(x) for x in ph.block + ph.group)
            * sum(  # one tree array per group reduce
                8 if u.dtype.itemsize == 8 else 4
                for u in it.store.toposort()
                if u.op is Ops.REDUCE and any(x in ph.group for x in u.src[1:])
            )
        )
        return w
    tc = it.tc
    warps = math.prod(trip_count(x) for x in ph.block)
    tile = 256 * tc.a[0].dtype.itemsize
    frags = [math.prod(trip_count(x) for x in tc.ups if x in r.deps(side[1])) for side in (tc.a, tc.b)]
    w.tc_steps = math.prod(trip_count(x) for x in tc.reduce.src[1:] if x.op is Ops.RANGE and x is not tc.k)
    w.tc_mmas = math.prod(trip_count(x) for x in tc.ups)
    w.tc_frag_bytes = sum(frags) * tile
    stage = it.stage
    if stage is None:  # every warp loads its own fragments from global memory
        w.tc_l2_bytes = w.tc_frag_bytes
        w.chain += w.tc_steps * (MMA_CYCLES + 4 * w.tc_mmas)
    else:  # the block's tiles are copied once (16 bytes per thread and copy), waited for once a stage
        copies = stage.ks * sum(16 * math.prod(trip_count(x) for x in op.tiles) * 2 for op in (stage.a, stage.b))
        w.tc_l2_bytes = copies * 16 / stage.ks / warps
        w.instr += w.tc_steps * copies / stage.ks / (32 * warps) * 8
        w.chain += w.tc_steps * 4 * w.tc_mmas + w.tc_steps / stage.ks * 2 * TREE_STEP
        w.smem = stage.smem
    w.instr += w.tc_steps * (4 * sum(frags) + 2 * w.tc_mmas)
    w.smem += 1024 * warps
    # the epilogue: each of the warp's 32 threads stores 8 of each tile's 256 elements, the accumulator from smem
    w.visit(it.store, [], [8.0 * w.tc_mmas], skip=frozenset([tc.reduce]))
    w.lane += 8 * w.tc_mmas * LANE_CYCLES[Ops.LOAD]
    return w


def _invalid(est: KernelEstimate, why: str) -> KernelEstimate:
    est.seconds = math.inf
    est.notes.append(why)
    return est
