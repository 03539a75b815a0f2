"""The LLVM backend: kernel ASTs rendered to LLVM IR, optimized for the host CPU, run through MCJIT.

Kernel ABI. Every kernel becomes one LLVM module with one function per SINK
item (a loop nest ending in a STORE), each of the form

    void @k<i>(ptr noalias %b0, ..., ptr noalias %b<n-1>, i64 %start, i64 %end)

`%b<j>` is the j-th buffer of the kernel in order of first appearance in
`kernel.ast.toposort()` (through AFTER); `LLVMCompiled.buffer_order` lists
the names. `[start, end)` is the slice of the item's parallel range (its
outermost THREAD range, else its outermost loop range when the nest is big
and safe to split); items without one ignore the pair. A program runs as
one native driver (`_Runner`) that splits each parallel range into one slice
per core and hands the slices to the native thread pool of
backends/cpu_pool.py (about a microsecond a hand-off). Items run one after
another, so each item sees every store of the items before it, as in the
reference interpreter. Two consecutive kernels whose parallel ranges line
up block by block (`coslice_chunk`: a GEMM and the copy that packs its
weight panels) run as one task, chunk by chunk in each slice, so the
consumer reads what the producer just wrote from L2; every value read is
still written before it, as apart.

Group reductions. A REDUCE over exactly one GROUP_REDUCE range g (bound T)
in an item without loops (a scalar output) and outside every other REDUCE's
body is computed in parallel. Its j-th such REDUCE (in toposort order) gets
a partials function

    void @k<i>_g<j>(ptr noalias %b0, ..., i64 %start, i64 %end, ptr noalias %p)

that evaluates the REDUCE's body (nested REDUCEs, unrolled accumulators and
all) for g in [start, end) and stores each value, in the REDUCE's
accumulator type (float32 for half/bfloat16, i8 for bool), to %p[g]. The
item's function then takes the scratch buffer as one more argument,

    void @k<i>(ptr noalias %b0, ..., i64 %start, i64 %end, ptr noalias %p)

and reads the REDUCE as the T partials at %p + offset_j combined with its op
in order of g, exactly what a sequential REDUCE over g computes, so results
do not depend on the thread count. The driver gives the partials a scratch
buffer of its own per concurrent call (`LLVMCompiled.groups` and `.scratch`
give the functions, the bounds, the offsets and its size), runs each
partials function in min(threads, T) slices, and then the item. A GROUP_REDUCE range anywhere else is an
ordinary sequential loop.

Values in registers: bool is i1 (i8 in memory), float16 is `half` (LLVM
promotes each op to float32 and rounds back, as numpy does), bfloat16 is a
float32 that always holds a bfloat16-representable value (loaded by a
16-bit shift, rounded to nearest even after every op, stored by dropping the
low half), index is i64. REDUCE accumulates half and bfloat16 in float32 and
rounds once at the end (as the reference does). IDIV/MOD are floor division
and its remainder as egraph_compiler/ir/floordiv.py defines them (x // 0 == 0);
truncating `udiv`/`urem` appear bare only where interval bounds (UOp.vmin/vmax)
prove both operands non-negative and the divisor non-zero.

Loops: LOOP/GLOBAL/THREAD/REDUCE-typed ranges become canonical counted loops
(i64 induction variable from 0, step 1) that LLVM's loop vectorizer accepts;
UPCAST/UNROLL ranges are expanded into straight-line copies (tinygrad's
"expander": every value carries one SSA name per combination of the unrolled
ranges it depends on), which the SLP vectorizer packs into vector ops. A
REDUCE inside unrolled code keeps one accumulator per copy in one loop, or
one vector of them along one range (program.accumulator_axis). Outside
REDUCE bodies, float32 values along the store's contiguous unrolled range
(the item's lane) are emitted as vectors over it: vector loads and stores,
the accumulators' vectors, vector arithmetic, compares, WHERE, EXP2 (`Val`
with a lane; a scalar consumer extracts its lane where it needs it). A GEMM
tile's GELU epilogue of 256 copies took LLVM's SLP vectorizer 5.5 s; as 16
vectors it compiles in 0.14 s, to the same speed.
Unrolled END ranges are moved innermost. REDUCEs that do not depend on a loop
are emitted before it (never recomputed per iteration).

Memory safety: a load whose index is not proven in bounds by interval
analysis runs only under its gate (a branch the vectorizer turns into a
masked load), under the WHERE conditions that guard its use, or otherwise
with its index clamped into the buffer; a store not proven in bounds is
skipped when out of bounds; gated stores branch on their gate.

Floating point keeps the program's order of operations (no reassociation),
but a product feeding a sum may be contracted to one fused multiply-add that
rounds once (LLVM's `contract` flag), as clang (`-ffp-contract=on`), nvcc and
every BLAS do: results match the reference up to summation order and that
single rounding, and a GEMM runs at twice the rate of separate multiplies and
adds. `fast_math=True` also allows reassociating ADD/MUL reductions. On an
AVX-512 host, functions ask for 512-bit vectors (`prefer-vector-width`; LLVM
defaults to 256 bits there), which the CPU estimate assumes.

Caching: modules are keyed by a hash of the IR text (which holds no buffer or
range names, so structurally equal kernels share code) plus the options; the
process-wide cache makes a second compile of the same kernel do no LLVM work
(`CACHE_STATS` counts both). It keeps the MAX_CACHED_MODULES most recently
used modules; a program holds its own, so eviction never frees running code.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import math
import os
import struct
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from egraph_compiler.backends import compile_workers, cpu_pool, llvm_pipeline
from egraph_compiler.ir.diagnostics import BackendError, InvalidArgument, UnsupportedOp
from egraph_compiler.ir.dtypes import DType, bf16_round, dtypes
from egraph_compiler.ir.floordiv import DivFacts, floor_divide
from egraph_compiler.ir.ops import OP_TABLE, AxisType, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel import disk_cache
from egraph_compiler.kernel.analysis import Cond, RangeDeps, guards, index_of, range_size, store_items, value_order
from egraph_compiler.kernel.cpu_target import CPUTarget, cpu_target, host_cpu
from egraph_compiler.kernel.memory_plan import ALIGN, Coslice
from egraph_compiler.kernel.program import (
    LANE_CONDITION_OPS,
    LANE_STEPS,
    HostBuffers,
    Kernel,
    Program,
    accumulator_axis,
    buffer_of,
    in_bounds,
    lane_condition,
    lane_step,
    linear_terms,
    stride,
    transpose_axis,
)

UNROLLED = frozenset({AxisType.UPCAST, AxisType.UNROLL})
MASKED_LOAD_DTYPES = frozenset(
    {dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64}
)  # held in registers as stored (no bool/half/bf16 conversion)
AUTO_PARALLEL_MIN_WORK = 1 << 16  # below this many iterations splitting the loop across cores does not pay

# ---- types and literals --------------------------------------------------------------------------


def reg_ty(d: DType) -> str:
    """LLVM type of a value of dtype d in registers."""
    if d.is_bool:
        return "i1"
    if d.is_int:
        return f"i{d.bits}"
    if d is dtypes.float16:
        return "half"
    if d is dtypes.float64:
        return "double"
    if d in (dtypes.float32, dtypes.bfloat16):
        return "float"
    raise UnsupportedOp(
        at=f"dtype {d.name}", why=f"{d.name} has no LLVM register type", suggestion="use a numeric or bool dtype"
    )


def mem_ty(d: DType) -> str:
    """LLVM type of one element of a buffer of dtype d."""
    if d.is_bool:
        return "i8"
    if d is dtypes.bfloat16:
        return "i16"
    return reg_ty(d)


def acc_ty(d: DType) -> str:
    """Accumulator type of a REDUCE: half and bfloat16 accumulate in float32."""
    return "float" if d in (dtypes.float16, dtypes.bfloat16) else reg_ty(d)


def _fhex(value: float, ty: str) -> str:
    if ty == "half":
        return f"0xH{int(np.array(value, np.float16).view(np.uint16)):04X}"
    if ty == "float":  # the literal must be exactly representable in float
        value = float(np.float32(value))
    return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"


def literal(value: Any, d: DType) -> str:
    """An LLVM constant of dtype d in its register type."""
    if d.is_bool:
        return "true" if value else "false"
    if d.is_int:
        v = int(value) & ((1 << d.bits) - 1)
        return str(v - (1 << d.bits) if v >= 1 << (d.bits - 1) else v)  # LLVM ints are signless
    with np.errstate(over="ignore"):
        f = float(value)
        if d is dtypes.bfloat16:
            f = float(bf16_round(np.array([f], np.float32))[0])
        return _fhex(f, reg_ty(d))


def _int_lit(v: int, bits: int) -> str:
    return literal(v, _INT_OF_BITS[bits])


_INT_OF_BITS = {8: dtypes.int8, 16: dtypes.int16, 32: dtypes.int32, 64: dtypes.int64}


def _np_storage(d: DType) -> np.dtype:
    return np.dtype(np.uint16) if d is dtypes.bfloat16 else np.dtype(d.np)


# ---- analysis of a kernel AST ----------------------------------------------------------------------


def _is_unrolled(r: UOp) -> bool:
    return r.arg[1] in UNROLLED


def _buf_size(index: UOp) -> int:
    return math.prod(buffer_of(index).arg[1])


def _clamp_blocks(idx: UOp | None, size: int) -> tuple[list[tuple[UOp, int]], int] | None:
    """An index not proven inside its buffer, split for a clamp the reduce loops do not change: its terms over
    REDUCE ranges, looped or unrolled (positive coefficients), cover [0, span), and its other terms and the buffer's size are
    multiples of span (a row of a padded GEMM tile: row * K + k). Then `umin(idx - t, size - span) + t` reads
    what `umin(idx, size - 1)` does wherever idx is inside the buffer (a base inside is at most size - span),
    and stays inside where it is not. None where the index has no such split."""
    terms = linear_terms(idx) if idx is not None else None
    if not terms:
        return None
    inner = [(r, c) for r, c in terms.items() if r is not None and r.arg[1] in (AxisType.REDUCE, AxisType.UNROLL) and c > 0]
    span = sum(c * (range_size(r) - 1) for r, c in inner) + 1
    outer = [c for r, c in terms.items() if r is None or (r, c) not in inner]
    if not inner or span > size or size % span or any(c % span for c in outer):
        return None
    return sorted(inner, key=lambda rc: str(rc[0].arg)), span


@dataclass
class _Item:
    """One SINK entry: the loops around one STORE."""

    store: UOp
    loops: list[UOp]  # counted loops, outermost first
    unrolled: list[UOp]  # straight-line ranges, innermost
    parallel: UOp | None  # the loop split across threads, if any


def _items(ast: UOp, deps: RangeDeps, threads: int, auto_parallel: bool) -> list[_Item]:
    out = []
    for entry in store_items(ast, deps):
        loops = [r for r in entry.ranges if not _is_unrolled(r)]
        unrolled = [r for r in entry.ranges if _is_unrolled(r)]
        out.append(_Item(entry.store, loops, unrolled, _pick_parallel(entry.store, loops, threads, auto_parallel)))
    return out


def _peeled_loop(item: _Item, deps: RangeDeps) -> UOp | None:
    """The loop whose last iteration the backend emits apart: the innermost of the item's loops inside the one
    split across threads (emit_tile opens them whole) that its store's gate depends on together with an unrolled
    range, a padded tile's outer part, when it runs more than once."""
    st = item.store
    if len(st.src) < 3:
        return None
    gate = deps[st.src[2]]
    if not any(r in gate for r in item.unrolled):
        return None
    inside = item.loops[item.loops.index(item.parallel) + 1 :] if item.parallel is not None else item.loops
    return next((r for r in reversed(inside) if r in gate and range_size(r) > 1), None)


def _group_reduces(item: _Item, deps: RangeDeps) -> list[UOp]:
    """REDUCEs of the item computed as parallel partials: those over exactly one non-empty GROUP_REDUCE range,
    in an item without loops, not inside any REDUCE's body (their value is one scalar for the whole item).

    A GROUP_REDUCE range anywhere else is an ordinary sequential loop.
    """
    if item.loops or item.unrolled:
        return []
    nodes = value_order(item.store)
    inside: set[UOp] = set()
    stack = [u.src[0] for u in nodes if u.op is Ops.REDUCE]
    while stack:
        u = stack.pop()
        if u not in inside:
            inside.add(u)
            stack.extend(u.src[:1] if u.op is Ops.AFTER else u.src)
    return [
        u
        for u in nodes
        if u.op is Ops.REDUCE
        and len(u.src) == 2
        and u not in inside
        and not deps[u]
        and u.src[1].op is Ops.RANGE
        and u.src[1].arg[1] is AxisType.GROUP_REDUCE
        and range_size(u.src[1]) > 0
    ]


def _part_ty(d: DType) -> str:
    """LLVM type of one partial result of a group REDUCE in the scratch buffer (its accumulator type)."""
    return "i8" if d.is_bool else acc_ty(d)


def _part_size(d: DType) -> int:
    return {"i8": 1, "i16": 2, "i32": 4, "i64": 8, "float": 4, "double": 8}[_part_ty(d)]


@dataclass
class _Group:
    """One group REDUCE of an item: its partials function and its slot in the item's scratch buffer."""

    reduce: UOp
    fn: str  # name of the partials function
    bound: int  # T, the trip count of its GROUP_REDUCE range
    offset: int  # byte offset of its T partials in the scratch buffer


def _pick_parallel(st: UOp, loops: list[UOp], threads: int, auto: bool) -> UOp | None:
    if threads < 2 or not loops:
        return None
    thread = [r for r in loops if r.arg[1] is AxisType.THREAD and range_size(r) >= 2]
    if thread:
        return thread[0]
    outer = loops[0]
    if not auto or range_size(outer) < 2:
        return None
    nodes = st.toposort()
    work = math.prod(range_size(r) for r in nodes if r.op is Ops.RANGE)
    if work < AUTO_PARALLEL_MIN_WORK:
        return None
    # slices must not write what another slice touches: the store moves with the range, and a
    # buffer that is stored is only read back at the very same index
    idx = index_of(st.src[0])
    if idx is None or outer not in idx.toposort():
        return None
    target = buffer_of(st.src[0]).arg[0]
    for u in nodes:
        if u.op is Ops.LOAD and buffer_of(u.src[0]).arg[0] == target and index_of(u.src[0]) is not idx:
            return None
    return outer


# ---- co-sliced kernels -------------------------------------------------------------------------------

COSLICE_BYTES = 128 * 1024  # a chunk of a producer's output, read back from L2 beside the consumer's other operands


def _block(idx: UOp | None, r: UOp) -> int | None:
    """S where idx = S * r + rest, linear in its ranges, with 0 <= rest < S: each step of r addresses its own block
    of S elements."""
    terms = None if idx is None else linear_terms(idx)
    if terms is None or (s := terms.get(r, 0)) <= 0:
        return None
    lo = hi = terms.get(None, 0)
    for k, c in terms.items():
        if k is not None and k is not r:
            lo, hi = lo + min(0, c * (range_size(k) - 1)), hi + max(0, c * (range_size(k) - 1))
    return s if lo >= 0 and hi < s else None


def coslice_chunk(producer: UOp, consumer: UOp, threads: int, auto_parallel: bool) -> tuple[str, int, int] | None:
    """(buffer, steps per chunk, bytes per step) where two consecutive kernels can run chunk by chunk (each
    thread: the producer over a chunk of its slice, then the consumer over the same chunk), so that what the
    producer wrote is read back from the cache, not memory (a GEMM's packed weight panels: packing.py). It can
    where each is one item split over a range of the same trip count, the producer writes one block per step of
    it, the consumer reads that buffer only inside the block of its own step, and neither touches what the
    other writes otherwise: every value the consumer reads is then written before, in either order. `buffer` is
    the one the producer writes, chunks hold COSLICE_BYTES of it (at least a step). None where they cannot."""
    deps = RangeDeps()
    p_items, c_items = _items(producer, deps, threads, auto_parallel), _items(consumer, deps, threads, auto_parallel)
    if len(p_items) != 1 or len(c_items) != 1:
        return None
    (pi,), (ci,) = p_items, c_items
    if pi.parallel is None or ci.parallel is None or range_size(pi.parallel) != range_size(ci.parallel):
        return None
    out = buffer_of(pi.store.src[0])
    block = _block(index_of(pi.store.src[0]), pi.parallel)
    if block is None:
        return None
    c_nodes, p_nodes = consumer.toposort(), producer.toposort()
    c_writes = {buffer_of(u.src[0]).arg[0] for u in c_nodes if u.op is Ops.STORE}
    p_reads = {buffer_of(u.src[0]).arg[0] for u in p_nodes if u.op is Ops.LOAD}
    if c_writes & (p_reads | {out.arg[0]}):
        return None
    reads = [u for u in c_nodes if u.op is Ops.LOAD and buffer_of(u.src[0]).arg[0] == out.arg[0]]
    if not reads or any(_block(index_of(u.src[0]), ci.parallel) != block for u in reads):
        return None
    step = block * max(1, _np_storage(out.dtype).itemsize)
    return out.arg[0], max(1, COSLICE_BYTES // step), step


# ---- values and scopes -------------------------------------------------------------------------------

VECTOR_LANES = (2, 4, 8, 16, 32, 64, 128, 256, 512)  # lane counts an item's float32 values outside REDUCE bodies are vectors of
_VECTOR_INTRINSICS = {Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}  # one LLVM intrinsic on a vector
_VECTOR_INSTRUCTIONS = {Ops.ADD: "fadd", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}  # one LLVM instruction on a vector
_VECTOR_OPS = frozenset({*_VECTOR_INTRINSICS, *_VECTOR_INSTRUCTIONS, Ops.MAX, Ops.EXP2, Ops.RECIP})


def _vectorizable(u: UOp) -> bool:
    """Does the LLVM backend compute u as float32 vectors (vector instructions of the same float semantics as
    its scalar ones; libm's functions stay scalar calls)? Float32 arithmetic, EXP2, SQRT, TRUNC, float compares
    and WHERE between float32 values."""
    f32 = dtypes.float32
    if u.op in (Ops.CMPLT, Ops.CMPNE):
        return all(s.dtype is f32 for s in u.src)
    if u.op is Ops.WHERE:
        return u.src[0].dtype.is_bool and u.dtype is f32 and all(s.dtype is f32 for s in u.src[1:])
    return u.dtype is f32 and u.op in _VECTOR_OPS and all(s.dtype is f32 for s in u.src)


@dataclass(frozen=True)
class Val:
    """A node's value: one SSA name or constant per combination of the unrolled ranges it depends on; with a
    `lane` (the last of `axes`), one vector of type `vty` over it per combination of the others (a float32
    epilogue computed as vectors: _Fn.lane)."""

    axes: tuple[UOp, ...]
    names: tuple[str, ...]
    lane: UOp | None = None
    vty: str = ""


@dataclass
class _Scope:
    kind: str  # "loop": values inside are not visible after it; "unroll": straight-line
    memo: dict[UOp, Val]
    lanes: dict[tuple[str, int], str] = field(default_factory=dict)  # (vector, lane) -> its extracted scalar


class _Fn:
    """Builds the text of one kernel function."""

    def __init__(self, kb: _Module, name: str) -> None:
        self.kb = kb
        self.name = name
        self.n = 0
        self.blocks: list[tuple[str, list[str]]] = []
        self.allocas: list[str] = []
        self.scopes: list[_Scope] = [_Scope("loop", {})]
        self.range_scope: dict[UOp, int] = {}
        self.unroll_pos: dict[UOp, int] = {}
        self.groups: dict[UOp, _Group] = {}  # group REDUCEs read back from the partials at %p
        self.contiguous: frozenset[UOp] = frozenset()  # unrolled ranges the item's store index has stride 1 in
        self.lane: UOp | None = None  # the contiguous range float32 values outside REDUCE bodies are vectors over
        self.body_lanes: list[UOp | None] = []  # per REDUCE body being emitted, the range its values are vectors over
        self.start_block("entry")

    # -- text ---------------------------------------------------------------------------------------
    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def ins(self, text: str) -> str:
        t = self.tmp()
        self.cur.append(f"  {t} = {text}")
        return t

    def put(self, text: str) -> None:
        self.cur.append(f"  {text}")

    def label(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def start_block(self, label: str) -> None:
        self.cur_label = label
        self.cur: list[str] = []
        self.blocks.append((label, self.cur))

    def text(self, params: str) -> str:
        lines = [f"define void @{self.name}({params}) #0 {{"]
        for i, (label, body) in enumerate(self.blocks):
            lines.append(f"{label}:")
            if i == 0:
                lines += self.allocas
            lines += body
        lines.append("}")
        return "\n".join(lines)

    # -- scopes -------------------------------------------------------------------------------------
    def lookup(self, u: UOp) -> Val | None:
        for s in reversed(self.scopes):
            v = s.memo.get(u)
            if v is not None:
                return v
        return None

    def bound(self, r: UOp) -> str:
        """The induction variable of a range whose loop is open."""
        v = self.lookup(r)
        assert v is not None, f"range {r.arg[0]!r} is used outside its loop"
        return v.names[0]

    def remember(self, u: UOp, v: Val) -> None:
        # the outermost scope where the value is valid: not outside the innermost loop (SSA dominance),
        # not outside the scope binding any range it depends on
        at = max(i for i, s in enumerate(self.scopes) if s.kind == "loop")
        for r in self.kb.deps[u]:
            at = max(at, self.range_scope.get(r, 0))
        self.scopes[at].memo[u] = v

    def push(self, kind: str, ranges: Iterable[tuple[UOp, Val]] = ()) -> None:
        self.scopes.append(_Scope(kind, {}))
        for r, v in ranges:
            self.range_scope[r] = len(self.scopes) - 1
            self.scopes[-1].memo[r] = v
            if kind == "unroll":
                self.unroll_pos[r] = len(self.unroll_pos)

    def pop(self) -> None:
        top = len(self.scopes) - 1
        for r in [r for r, i in self.range_scope.items() if i == top]:
            del self.range_scope[r]
            self.unroll_pos.pop(r, None)
        self.scopes.pop()

    def bound_ranges(self) -> set[UOp]:
        return set(self.range_scope)

    # -- unrolled combinations ------------------------------------------------------------------------
    def axis_order(self, a: UOp) -> tuple[bool, int]:
        """Copies are laid out in nesting order, but with an unrolled axis along which the item's store is
        contiguous fastest: neighbours in emission order are what LLVM's SLP vectorizer packs into one vector
        (accumulator phis, epilogue loads), so a GEMM tile whose column axis is nested outside its row axis
        still gets full vectors of columns."""
        return a in self.contiguous, self.unroll_pos[a]

    def axes_of(self, vals: Iterable[Val], extra: Iterable[UOp] = ()) -> tuple[UOp, ...]:
        """The axes of a value over `vals` (and `extra`) in layout order (axis_order), the range values are vectors
        over here last wherever it is nested: inside a REDUCE whose accumulators are vectors along a range the store
        does not step by 1 along (a convolution's output channels beside a row of pixels), an operand's copies
        along both that range and the REDUCE's own unrolled one are then vector loads along it, not scalar loads
        packed lane by lane (AVX2 code, 1x1 convolution 64 -> 128 channels of 56x56 at stride 2, its reduction
        unrolled by 4: 0.097 -> 0.064 ms)."""
        ax = {a for v in vals for a in v.axes} | set(extra)
        lane = self.active_lane
        return tuple(sorted(ax, key=lambda a: (a is lane, *self.axis_order(a))))

    @staticmethod
    def combos(axes: tuple[UOp, ...]) -> Iterable[dict[UOp, int]]:
        for ks in itertools.product(*(range(range_size(a)) for a in axes)):
            yield dict(zip(axes, ks))

    def pick(self, v: Val, at: dict[UOp, int]) -> str:
        """The copy of v at `at` (a lane of a vector value is extracted once per scope)."""
        if v.lane is None:
            return v.names[self._index(v.axes, at)]
        key = (self.vector_at(v, at), at[v.lane])
        for s in reversed(self.scopes):
            if key in s.lanes:
                return s.lanes[key]
        x = self.ins(f"extractelement {v.vty} {key[0]}, i64 {key[1]}")
        self.scopes[-1].lanes[key] = x
        return x

    @staticmethod
    def _index(axes: tuple[UOp, ...], at: dict[UOp, int]) -> int:
        i = 0
        for a in axes:
            i = i * range_size(a) + at[a]
        return i

    def vector_at(self, v: Val, at: dict[UOp, int]) -> str:
        """A vector value's vector at `at` (its lane's entry ignored)."""
        return v.names[self._index(v.axes[:-1], at)]

    def each(self, axes: tuple[UOp, ...], fn: Callable[[dict[UOp, int]], str]) -> Val:
        return Val(axes, tuple(fn(at) for at in self.combos(axes)))

    # -- vectors over the item's lane --------------------------------------------------------------------
    def vector_lane(self, axes: tuple[UOp, ...]) -> UOp | None:
        """The lane a value over `axes` is computed as vectors of, if it runs along it: the item's lane (a GEMM's
        epilogue), or inside a REDUCE body the range its accumulators are vectors over (a padded window's masked
        row loads, multiplied and added as they are), none where its accumulators are scalars."""
        lane = self.active_lane
        return lane if lane is not None and axes and axes[-1] is lane else None

    @property
    def active_lane(self) -> UOp | None:
        """The range float32 values are vectors over here (see vector_lane)."""
        return self.body_lanes[-1] if self.body_lanes else self.lane

    def each_vector(self, axes: tuple[UOp, ...], fn: Callable[[dict[UOp, int]], tuple[str, str]]) -> Val:
        """A vector value over `axes` (the lane last): fn gives the vector and its type per combination of the rest."""
        out = [fn(at | {axes[-1]: 0}) for at in self.combos(axes[:-1])]
        return Val(axes, tuple(x for x, _ in out), axes[-1], out[0][1] if out else "")

    def lanes_of(self, v: Val, src: UOp, at: dict[UOp, int]) -> str:
        """Operand v as a vector over the lane at `at`: its own vector, a splat of a value the same in every lane,
        or its copies gathered."""
        lane = self.active_lane
        assert lane is not None
        n, ty = range_size(lane), reg_ty(src.dtype)
        if v.lane is lane:
            return self.vector_at(v, at)
        if lane not in v.axes:
            x = self.pick(v, at)
            return f"splat ({ty} {x})" if src.op is Ops.CONST else self.splat(ty, n, x)
        if src.dtype.is_bool and lane_condition(src, lane):  # a padded window's mask: compares of vectors
            return self.lane_vector(src, lane, at, {})
        y = "poison"
        for j in range(n):
            y = self.ins(f"insertelement <{n} x {ty}> {y}, {ty} {self.pick(v, at | {lane: j})}, i64 {j}")
        return y

    # -- loops --------------------------------------------------------------------------------------
    def loop(self, r: UOp, lo: str, hi: str) -> Callable[[], None]:
        """Open a counted loop over r in [lo, hi) (i64 induction from lo, step 1); returns its closer."""
        pre = self.cur_label
        head, body, done = self.label("loop"), self.label("body"), self.label("exit")
        self.put(f"br label %{head}")
        self.start_block(head)
        head_lines = self.cur
        i = self.tmp()
        head_lines.append("")  # the phi, written once the latch is known
        c = self.ins(f"icmp slt i64 {i}, {hi}")
        self.put(f"br i1 {c}, label %{body}, label %{done}")
        self.start_block(body)
        self.push("loop", [(r, Val((), (i,)))])

        def close() -> None:
            self.pop()
            nxt = self.ins(f"add nuw nsw i64 {i}, 1")
            self.put(f"br label %{head}")
            head_lines[0] = f"  {i} = phi i64 [ {lo}, %{pre} ], [ {nxt}, %{self.cur_label} ]"
            self.start_block(done)

        return close

    def hoist(self, root: UOp) -> None:
        """Emit now every REDUCE under root whose ranges are all bound, so loops opened next do not redo it."""
        bound = self.bound_ranges()
        seen: set[UOp] = set()
        stack = [root]
        todo: list[UOp] = []
        while stack:
            u = stack.pop()
            if u in seen or self.lookup(u) is not None:
                continue
            seen.add(u)
            if u.op is Ops.REDUCE and self.kb.deps[u] <= bound:
                todo.append(u)
                continue
            stack.extend(u.src[:1] if u.op is Ops.AFTER else u.src)  # not into the items an AFTER waits on
        for u in sorted(todo, key=lambda x: self.kb.topo_pos[x]):
            self.emit(u)

    # -- emission -----------------------------------------------------------------------------------
    def emit(self, root: UOp) -> Val:
        v = self.lookup(root)
        if v is not None:
            return v
        stack: list[tuple[UOp, bool]] = [(root, False)]
        while stack:
            u, ready = stack.pop()
            if self.lookup(u) is not None:
                continue
            if not ready:
                stack.append((u, True))
                # operands that run a loop go last on the stack, so they are emitted first: what does not need
                # the loop is computed after it, not held in registers across it (LLVM sinks none of it)
                todo = [s for s in self.operands(u) if self.lookup(s) is None]
                stack.extend((s, False) for s in todo if s not in self.kb.loopy)
                stack.extend((s, False) for s in todo if s in self.kb.loopy)
                continue
            self.remember(u, self.emit_node(u))
        out = self.lookup(root)
        assert out is not None
        return out

    @staticmethod
    def operands(u: UOp) -> tuple[UOp, ...]:
        if u.op in (Ops.REDUCE, Ops.RANGE, Ops.CONST):
            return ()
        if u.op is Ops.LOAD:
            idx = index_of(u.src[0])
            return ((idx,) if idx is not None else ()) + u.src[1:]
        return u.src

    def emit_node(self, u: UOp) -> Val:
        if u.op is Ops.CONST:
            return Val((), (literal(u.arg, u.dtype),))
        if u.op is Ops.RANGE:
            raise UnsupportedOp(
                at=f"RANGE {u.arg!r}",
                why="a range is used outside the loops that bind it",
                suggestion="list the range in an END or REDUCE around its use",
            )
        if u.op is Ops.REDUCE:
            return self.emit_combine(u) if u in self.groups else self.emit_reduce(u)
        if u.op is Ops.LOAD:
            return self.emit_load(u)
        if u.op is Ops.AFTER or OP_TABLE[u.op].category.name == "MARKER":
            return self.emit(u.src[0])
        if u.op is Ops.BITCAST or OP_TABLE[u.op].is_alu:
            vals = [self.emit(s) for s in u.src]
            axes = self.axes_of(vals)
            if self.vector_lane(axes) is not None and _vectorizable(u):
                srcs = list(zip(vals, u.src))
                alu = self.kb.alu
                return self.each_vector(axes, lambda at: alu.vector(self, u, [self.lanes_of(v, x, at) for v, x in srcs]))
            return self.each(axes, lambda at: self.kb.alu.node(self, u, [self.pick(v, at) for v in vals]))
        raise UnsupportedOp(
            at=u.op.name,
            why=f"{u.op.name} cannot appear in a kernel for the LLVM backend",
            suggestion="lower the graph to SINK/END/STORE/LOAD/REDUCE/ALU kernels first",
        )

    # -- memory -------------------------------------------------------------------------------------
    def address(self, index: UOp, idx: str) -> tuple[str, str, int]:
        b = buffer_of(index)
        ty = mem_ty(b.dtype)
        p = self.ins(f"getelementptr inbounds {ty}, ptr {self.kb.arg_of(b.arg[0])}, i64 {idx}")
        return p, ty, max(1, _np_storage(b.dtype).itemsize)

    def to_i64(self, x: str, d: DType) -> str:
        if d.bits == 64 or d is dtypes.index:
            return x
        op = "zext" if d.is_unsigned or d.is_bool else "sext"
        return self.ins(f"{op} {reg_ty(d)} {x} to i64")

    def from_mem(self, x: str, d: DType) -> str:
        if d.is_bool:
            return self.ins(f"icmp ne i8 {x}, 0")
        if d is dtypes.bfloat16:
            w = self.ins(f"zext i16 {x} to i32")
            s = self.ins(f"shl i32 {w}, 16")
            return self.ins(f"bitcast i32 {s} to float")
        return x

    def to_mem(self, x: str, d: DType) -> str:
        if d.is_bool:
            return self.ins(f"zext i1 {x} to i8")
        if d is dtypes.bfloat16:  # registers hold rounded values: the low half is zero
            b = self.ins(f"bitcast float {x} to i32")
            s = self.ins(f"lshr i32 {b}, 16")
            return self.ins(f"trunc i32 {s} to i16")
        return x

    def usable_guards(self, u: UOp) -> list[Cond]:
        bound = self.bound_ranges()
        return sorted(
            (c for c in self.kb.conds.get(u, frozenset()) if self.kb.deps[c[0]] <= bound and not self.kb.reaches(c[0], u)),
            key=lambda c: (self.kb.topo_pos[c[0]], c[1]),
        )

    def truth(self, x: str, d: DType) -> str:
        """A value used as a condition, as i1."""
        if d.is_bool:
            return x
        if d.is_float:
            return self.ins(f"fcmp une {reg_ty(d)} {x}, {literal(0.0, d)}")
        return self.ins(f"icmp ne {reg_ty(d)} {x}, 0")

    def emit_load(self, u: UOp) -> Val:
        index = u.src[0]
        idx_u = index_of(index)
        size = _buf_size(index)
        safe = in_bounds(index)
        idx = self.emit(idx_u) if idx_u is not None else Val((), ("0",))
        alt = self.emit(u.src[1]) if len(u.src) == 3 else None
        gate = self.emit(u.src[2]) if len(u.src) == 3 else None
        gate_dt = u.src[2].dtype if len(u.src) == 3 else dtypes.bool
        guards: list[tuple[Val, UOp, bool]] = []
        if not safe and gate is None:
            guards = [(self.emit(c), c, pol) for c, pol in self.usable_guards(u)]
        axes = self.axes_of([idx] + ([alt, gate] if gate is not None and alt is not None else []) + [g for g, _, _ in guards])
        zero = literal(0, u.dtype)
        lane = self.vector_lane(axes)
        if (
            lane is not None
            and safe
            and gate is None
            and not guards
            and u.dtype is dtypes.float32
            and idx_u is not None
            and stride(idx_u, lane) == 1
        ):  # consecutive elements: one vector load
            vty = f"<{range_size(lane)} x float>"

            def vload(at: dict[UOp, int]) -> tuple[str, str]:
                p, _, _ = self.address(index, self.to_i64(self.pick(idx, at), idx_u.dtype))
                return self.ins(f"load {vty}, ptr {p}, align 4"), vty

            return self.each_vector(axes, vload)
        across = self.transposable(u, idx_u, axes, lane) if safe and gate is None else None
        if across is not None:
            assert lane is not None and idx_u is not None
            return self.transposed_load(index, idx, idx_u, axes, lane, across)
        step = stride(idx_u, lane) if lane is not None and idx_u is not None else None
        if safe and gate is None and not guards and u.dtype is dtypes.float32 and step in LANE_STEPS:
            assert lane is not None and idx_u is not None and step is not None
            return self.stepped_load(index, idx, idx_u, axes, lane, step)

        def guard(at: dict[UOp, int]) -> tuple[str | None, str]:
            """The copy's condition (None: unguarded) and the value it has when false."""
            if gate is not None and alt is not None:
                return self.truth(self.pick(gate, at), gate_dt), self.pick(alt, at)
            if guards:
                return self.all_of([(self.pick(v, at), c.dtype, pol) for v, c, pol in guards]), zero
            return None, zero

        # unguarded copies at consecutive addresses not proven inside the buffer (a padded tile's last columns):
        # one vector load with the lanes outside the buffer masked off, not a clamped address per copy (which
        # no vectorizer packs). Not along an unrolled reduction: its copies are accumulated one by one, never side
        # by side in a vector, so each would be extracted again (and a GEMM's broadcast operand splat: two shuffles
        # an FMA), where a clamped scalar load (the clamp hoisted out of the loop) folds into the FMA's broadcast.
        # A 100x640 @ 640x2560 GEMM's 8x16 tiles with k unrolled by 4: 164 -> 60 instructions per 32 FMAs, 69 -> 29
        # cycles in llvm-mca's Skylake-AVX512 model (49 -> 29 Ice Lake); Zen 4 ran both alike (1.7-1.8 ms)
        lane = next((a for a in reversed(axes) if idx_u is not None and range_size(a) >= 2 and stride(idx_u, a) == 1), None)
        if lane is not None and u.dtype in MASKED_LOAD_DTYPES:
            if gate is None and not guards:
                if not safe and lane.arg[1] is not AxisType.UNROLL:
                    return self.masked_load(u, idx, lane, axes, size)
            else:
                # guarded copies (a padded window): the guards evaluated over the lanes as vectors, if they are
                # integer comparisons; else the branch per copy below
                conds = [(u.src[2], True)] if gate is not None else [(c, pol) for _, c, pol in guards]
                alt_u = u.src[1] if gate is not None else None
                if all(lane_condition(c, lane) for c, _ in conds) and (alt_u is None or lane not in self.kb.deps[alt_u]):
                    return self.masked_load(u, idx, lane, axes, size, conds, alt_u)

        blocks = None if safe else _clamp_blocks(idx_u, size)

        def one(at: dict[UOp, int]) -> str:
            i = self.to_i64(self.pick(idx, at), idx_u.dtype if idx_u is not None else dtypes.index)
            g, a = guard(at)
            if safe or g is None:
                if not safe:  # nothing guards it: keep the address inside the buffer
                    i = self.clamp(i, size, blocks, at)
                p, ty, al = self.address(index, i)
                v = self.from_mem(self.ins(f"load {ty}, ptr {p}, align {al}"), u.dtype)
                return v if g is None else self.ins(f"select i1 {g}, {reg_ty(u.dtype)} {v}, {reg_ty(u.dtype)} {a}")
            p, ty, al = self.address(index, i)
            pre, ld, done = self.cur_label, self.label("ld"), self.label("ldx")
            self.put(f"br i1 {g}, label %{ld}, label %{done}")
            self.start_block(ld)
            v = self.from_mem(self.ins(f"load {ty}, ptr {p}, align {al}"), u.dtype)
            ld_end = self.cur_label
            self.put(f"br label %{done}")
            self.start_block(done)
            return self.ins(f"phi {reg_ty(u.dtype)} [ {v}, %{ld_end} ], [ {a}, %{pre} ]")

        return self.each(axes, one)

    def stepped_load(self, index: UOp, idx: Val, idx_u: UOp, axes: tuple[UOp, ...], lane: UOp, step: int) -> Val:
        """Copies `step` elements apart along the lane (a stride-2 convolution's row of pixels): one load of the
        span from the first to the last, then a shuffle that keeps every step-th element, not a scalar load and
        an insert per copy."""
        n = range_size(lane)
        span = f"<{(n - 1) * step + 1} x float>"
        keep = ", ".join(f"i32 {j * step}" for j in range(n))

        def sload(at: dict[UOp, int]) -> tuple[str, str]:
            p, _, _ = self.address(index, self.to_i64(self.pick(idx, at), idx_u.dtype))
            wide = self.ins(f"load {span}, ptr {p}, align 4")
            return self.ins(f"shufflevector {span} {wide}, {span} poison, <{n} x i32> <{keep}>"), f"<{n} x float>"

        return self.each_vector(axes, sload)

    def transposable(self, u: UOp, idx_u: UOp | None, axes: tuple[UOp, ...], lane: UOp | None) -> UOp | None:
        """The unrolled axis along which a float32 load reads consecutive elements when it does not along the
        item's lane (a tile copied to a transposed layout: a packed weight panel), if its copies come in whole
        squares of the lane's size: they are then loaded as vectors along it and transposed in registers."""
        if lane is None or idx_u is None or u.dtype is not dtypes.float32:
            return None
        return transpose_axis(idx_u, lane, axes)

    def transposed_load(self, index: UOp, idx: Val, idx_u: UOp, axes: tuple[UOp, ...], lane: UOp, across: UOp) -> Val:
        """The copies of a load contiguous along `across`, as vectors along the lane: per square of n x n copies
        (n the lane's size), n vector loads along `across`, then a transpose in log2(n) rounds of n two-vector
        shuffles (each swaps the off-diagonal blocks of a size between two rows)."""
        n = range_size(lane)
        vty = f"<{n} x float>"
        squares: dict[tuple[int, ...], list[str]] = {}

        def vector(at: dict[UOp, int]) -> tuple[str, str]:
            key = tuple(at[a] // n if a is across else at[a] for a in axes if a is not lane)
            if key not in squares:
                corner = at | {across: at[across] - at[across] % n}
                rows = []
                for j in range(n):
                    p, _, _ = self.address(index, self.to_i64(self.pick(idx, corner | {lane: j}), idx_u.dtype))
                    rows.append(self.ins(f"load {vty}, ptr {p}, align 4"))
                h = n // 2
                while h:
                    for i in (i for i in range(n) if not i & h):
                        a, b = rows[i], rows[i + h]
                        lo = ", ".join(f"i32 {c if not c & h else n + c - h}" for c in range(n))
                        hi = ", ".join(f"i32 {c + h if not c & h else n + c}" for c in range(n))
                        rows[i] = self.ins(f"shufflevector {vty} {a}, {vty} {b}, <{n} x i32> <{lo}>")
                        rows[i + h] = self.ins(f"shufflevector {vty} {a}, {vty} {b}, <{n} x i32> <{hi}>")
                    h //= 2
                squares[key] = rows
            return squares[key][at[across] % n], vty

        return self.each_vector(axes, vector)

    def clamp(self, i: str, size: int, blocks: tuple[list[tuple[UOp, int]], int] | None, at: dict[UOp, int]) -> str:
        """Index `i` (of the copy at `at`) kept inside a buffer of `size` elements. With `blocks` (its terms over
        reduce ranges, looped or unrolled, and the span they cover, see _clamp_blocks) the clamp is taken of what
        the reduction does not change, so that LLVM hoists it out of the loops: a padded GEMM tile's rows clamped
        once a row, not once per element of the reduction."""
        self.kb.declare("declare i64 @llvm.umin.i64(i64, i64)")
        if blocks is None:
            return self.ins(f"call i64 @llvm.umin.i64(i64 {i}, i64 {max(size - 1, 0)})")
        terms, span = blocks
        inner = ""
        for r, c in terms:
            part = self.ins(f"mul nsw i64 {self.to_i64(self.pick(self.emit(r), at), r.dtype)}, {c}")
            inner = self.ins(f"add nsw i64 {inner}, {part}") if inner else part
        base = self.ins(f"call i64 @llvm.umin.i64(i64 {self.ins(f'sub i64 {i}, {inner}')}, i64 {size - span})")
        return self.ins(f"add nsw i64 {base}, {inner}")

    def masked_load(
        self,
        u: UOp,
        idx: Val,
        lane: UOp,
        axes: tuple[UOp, ...],
        size: int,
        conds: list[tuple[UOp, bool]] | None = None,
        alt: UOp | None = None,
    ) -> Val:
        """A load whose copies along `lane` read consecutive elements: per combination of the other axes, one
        `llvm.masked.load` of the lanes, those at or past `size` masked off (they read nothing and give 0), or,
        with `conds`, those whose conditions (each with its polarity) do not all hold (they give `alt`, or 0);
        the vector as it is where the values over `axes` are vectors along `lane`, else one value per copy."""
        index = u.src[0]
        idx_u = index_of(index)
        assert idx_u is not None
        n = range_size(lane)
        ty = mem_ty(u.dtype)
        vty, mty = f"<{n} x {ty}>", f"<{n} x i1>"
        al = max(1, _np_storage(u.dtype).itemsize)
        fn = f"@llvm.masked.load.v{n}{ {'float': 'f32', 'double': 'f64'}.get(ty, ty) }.p0"
        self.kb.declare(f"declare {vty} {fn}(ptr, i32, {mty}, {vty})")
        rest = tuple(a for a in axes if a is not lane)
        whole_vector = self.vector_lane(axes) is lane and u.dtype is dtypes.float32  # else one value per copy
        out: dict[tuple[int, ...], str] = {}
        for at in self.combos(rest):
            i0 = self.to_i64(self.pick(idx, at | {lane: 0}), idx_u.dtype)
            # no `inbounds`: the first lane's address may lie outside the buffer when its lane is masked off
            p = self.ins(f"getelementptr {ty}, ptr {self.kb.arg_of(buffer_of(index).arg[0])}, i64 {i0}")

            def load(mask: str, pass_v: str = "zeroinitializer", p: str = p) -> str:
                return self.ins(f"call {vty} {fn}(ptr {p}, i32 {al}, {mty} {mask}, {vty} {pass_v})")

            if not conds and idx_u.vmin >= 0:
                v = self.tail_masked_load(p, i0, n, vty, al, size, load)
            elif not conds:
                v = load(self.bounds_mask(i0, n, size, nonnegative=False))
            else:
                # the guards alone decide, as they do for a guarded scalar load (its address is only valid where they
                # hold); those the same in every lane are one scalar condition selecting the mask or no lanes
                memo: dict[UOp, str] = {}
                mask, whole = "", []
                for c, pol in conds:
                    if lane not in self.kb.deps[c]:
                        whole.append((self.pick(self.emit(c), at | {lane: 0}), c.dtype, pol))
                        continue
                    m = self.lane_vector(c, lane, at, memo)
                    if not pol:
                        m = self.ins(f"xor {mty} {m}, splat (i1 true)")
                    mask = self.ins(f"and {mty} {mask}, {m}") if mask else m
                mask = mask or "splat (i1 true)"
                if whole:
                    mask = self.ins(f"select i1 {self.all_of(whole)}, {mty} {mask}, {mty} zeroinitializer")
                pass_v = "zeroinitializer" if alt is None else self.splat(ty, n, self.pick(self.emit(alt), at | {lane: 0}))
                v = load(mask, pass_v)
            if whole_vector:
                out[tuple(at[a] for a in rest)] = v
                continue
            for j in range(n):
                out[tuple(at[a] if a is not lane else j for a in axes)] = self.ins(f"extractelement {vty} {v}, i64 {j}")
        if whole_vector:
            return Val(axes, tuple(out[tuple(at[a] for a in rest)] for at in self.combos(rest)), lane, vty)
        return Val(axes, tuple(out[tuple(at[a] for a in axes)] for at in self.combos(axes)))

    def tail_masked_load(self, p: str, i0: str, n: int, vty: str, al: int, size: int, masked: Callable[[str], str]) -> str:
        """The n-lane vector (vty) at p, element i0 (non-negative) of a buffer of `size`: a plain vector load where it
        lies wholly inside the buffer, which is every step but the buffer's last, else `masked` of the lanes that do.
        Computing the lane mask at every step (broadcast, compare, masked load) took two more vector registers in the
        loop: a padded 6x16 GEMM tile in AVX2 code, 12 accumulators in 16 registers, spilled one and ran at 40% of
        the peak (250^3, 0.31 ms)."""
        self.kb.declare("declare i1 @llvm.expect.i1(i1, i1)")
        inside = self.ins(f"call i1 @llvm.expect.i1(i1 {self.ins(f'icmp sle i64 {i0}, {size - n}')}, i1 true)")
        whole, tail, done = self.label("vld"), self.label("vtail"), self.label("vldx")
        self.put(f"br i1 {inside}, label %{whole}, label %{tail}")
        self.start_block(whole)
        v_whole = self.ins(f"load {vty}, ptr {p}, align {al}")
        self.put(f"br label %{done}")
        self.start_block(tail)
        v_tail = masked(self.bounds_mask(i0, n, size, True))
        tail_end = self.cur_label
        self.put(f"br label %{done}")
        self.start_block(done)
        return self.ins(f"phi {vty} [ {v_whole}, %{whole} ], [ {v_tail}, %{tail_end} ]")

    def bounds_mask(self, i0: str, n: int, size: int, nonnegative: bool) -> str:
        """The lanes j < n whose element i0 + j lies inside a buffer of `size`, as <n x i1>. Where i0 is known
        non-negative: j < clamp(size - i0, 0, n), one 32-bit vector compare against a splat (per step of a padded
        GEMM tile's B row this was 4 64-bit compares, packs and shuffles in AVX2 code: 28 more instructions a
        k step, GEMM 250 at 4.6x its estimate); else also j >= clamp(-i0, 0, n), a second such compare."""
        below = self.lanes_below(self.ins(f"sub i64 {size}, {i0}"), n)
        if nonnegative:
            return below
        return self.ins(f"and <{n} x i1> {below}, {self.lanes_below(self.ins(f'sub i64 0, {i0}'), n, negate=True)}")

    def lanes_below(self, bound: str, n: int, negate: bool = False) -> str:
        """The lanes j < n with j < bound (an i64 scalar), as <n x i1>: bound clamped to [0, n] and compared with the
        lane numbers in 32 bits, one vector compare (64-bit lanes took 4 compares, packs and shuffles per AVX2
        vector); `negate`: those with j >= bound."""
        for f in ("smin", "smax"):
            self.kb.declare(f"declare i64 @llvm.{f}.i64(i64, i64)")
        rem = self.ins(f"call i64 @llvm.smax.i64(i64 {self.ins(f'call i64 @llvm.smin.i64(i64 {bound}, i64 {n})')}, i64 0)")
        steps = f"<{', '.join(f'i32 {j}' for j in range(n))}>"
        cmp = "sge" if negate else "slt"
        return self.ins(f"icmp {cmp} <{n} x i32> {steps}, {self.splat('i32', n, self.ins(f'trunc i64 {rem} to i32'))}")

    def splat(self, ty: str, n: int, x: str) -> str:
        """A vector of n copies of the scalar x of type ty."""
        one = self.ins(f"insertelement <{n} x {ty}> poison, {ty} {x}, i64 0")
        return self.ins(f"shufflevector <{n} x {ty}> {one}, <{n} x {ty}> poison, <{n} x i32> zeroinitializer")

    def lane_vector(self, u: UOp, lane: UOp, at: dict[UOp, int], memo: dict[UOp, str]) -> str:
        """u's values over the lanes of `lane` (the other unrolled ranges at `at`) as one vector, for the integer and
        boolean arithmetic and comparisons program.lane_condition accepts."""
        if u in memo:
            return memo[u]
        n = range_size(lane)
        if lane not in self.kb.deps[u]:  # the same for every lane: its scalar, splat
            out = self.splat(reg_ty(u.dtype), n, self.pick(self.emit(u), at | {lane: 0}))
        elif u is lane:
            out = f"<{', '.join(f'{reg_ty(u.dtype)} {j}' for j in range(n))}>"
        elif step := lane_step(u, lane):  # a + s*j < b with s = +-1 (a padded window's column): one scalar bound
            at0 = at | {lane: 0}
            lhs, rhs = (self.to_i64(self.pick(self.emit(x), at0), x.dtype) for x in u.src)
            d = self.ins(f"sub i64 {rhs}, {lhs}")  # (lhs - rhs)(j) = -d + step * j < 0
            if step == 1:
                out = self.lanes_below(d, n)
            else:  # -d - j < 0: j > -d, j >= 1 - d
                out = self.lanes_below(self.ins(f"sub i64 1, {d}"), n, negate=True)
        else:
            assert u.op in LANE_CONDITION_OPS, u.op
            a, b = (self.lane_vector(x, lane, at, memo) for x in u.src)
            ty = f"<{n} x {reg_ty(u.src[0].dtype)}>"
            if u.op is Ops.CMPLT:
                out = self.ins(f"icmp {'ult' if u.src[0].dtype.is_unsigned else 'slt'} {ty} {a}, {b}")
            elif u.op is Ops.CMPNE:
                out = self.ins(f"icmp ne {ty} {a}, {b}")
            else:
                out = self.ins(f"{ {Ops.ADD: 'add', Ops.MUL: 'mul', Ops.AND: 'and', Ops.OR: 'or'}[u.op] } {ty} {a}, {b}")
        memo[u] = out
        return out

    def all_of(self, conds: list[tuple[str, DType, bool]]) -> str:
        acc = None
        for x, d, pol in conds:
            t = self.truth(x, d)
            if not pol:
                t = self.ins(f"xor i1 {t}, true")
            acc = t if acc is None else self.ins(f"and i1 {acc}, {t}")
        assert acc is not None
        return acc

    def emit_store(self, st: UOp, unrolled: list[UOp]) -> None:
        index, value = st.src[0], st.src[1]
        b = buffer_of(index)
        idx_u = index_of(index)
        size = _buf_size(index)
        safe = in_bounds(index)
        val = self.emit(value)  # first: the index of the store is computed after any loop inside the value
        idx = self.emit(idx_u) if idx_u is not None else Val((), ("0",))
        gate = self.emit(st.src[2]) if len(st.src) == 3 else None
        axes = self.axes_of([idx, val] + ([gate] if gate is not None else []), unrolled)
        lane = val.lane
        if (
            lane is not None
            and axes[-1] is lane
            and gate is None
            and safe
            and idx_u is not None
            and stride(idx_u, lane) == 1
            and b.dtype is value.dtype is dtypes.float32
        ):
            for at in self.combos(axes[:-1]):  # consecutive elements: one vector store
                p, _, _ = self.address(index, self.to_i64(self.pick(idx, at | {lane: 0}), idx_u.dtype))
                self.put(f"store {val.vty} {self.vector_at(val, at)}, ptr {p}, align 4")
            return
        if (
            lane is not None
            and axes[-1] is lane
            and idx_u is not None
            and stride(idx_u, lane) == 1
            and b.dtype is value.dtype is dtypes.float32
            and (gate is None or lane_condition(st.src[2], lane))
        ):
            self.masked_store(st, idx, val, axes, size)
            return
        for at in self.combos(axes):
            i = self.to_i64(self.pick(idx, at), idx_u.dtype if idx_u is not None else dtypes.index)
            x = self.pick(val, at)
            if value.dtype != b.dtype:
                x = self.kb.alu.cast(self, x, value.dtype, b.dtype)
            g = self.truth(self.pick(gate, at), st.src[2].dtype) if gate is not None else None
            if g is None and not safe:  # an index not proven in bounds never writes outside the buffer
                g = self.ins(f"icmp ult i64 {i}, {size}")
            m = self.to_mem(x, b.dtype)
            if g is None:
                p, ty, al = self.address(index, i)
                self.put(f"store {ty} {m}, ptr {p}, align {al}")
                continue
            do, done = self.label("st"), self.label("stx")
            self.put(f"br i1 {g}, label %{do}, label %{done}")
            self.start_block(do)
            p, ty, al = self.address(index, i)
            self.put(f"store {ty} {m}, ptr {p}, align {al}")
            self.put(f"br label %{done}")
            self.start_block(done)

    def masked_store(self, st: UOp, idx: Val, val: Val, axes: tuple[UOp, ...], size: int) -> None:
        """A float32 vector store along the lane (the last of `axes`) of consecutive elements with some lanes off:
        those whose gate does not hold (a padded tile's columns past the row), and those outside the buffer.
        One `llvm.masked.store` per combination of the other axes, not a branch and a scalar store per lane."""
        index, lane = st.src[0], axes[-1]
        idx_u = index_of(index)
        assert idx_u is not None and val.lane is lane
        n, vty, mty = range_size(lane), val.vty, f"<{range_size(lane)} x i1>"
        self.kb.declare(f"declare void @llvm.masked.store.v{n}f32.p0({vty}, ptr, i32, {mty})")
        for at in self.combos(axes[:-1]):
            i0 = self.to_i64(self.pick(idx, at | {lane: 0}), idx_u.dtype)
            mask = "" if in_bounds(index) else self.bounds_mask(i0, n, size, idx_u.vmin >= 0)
            if len(st.src) == 3:
                m = self.lane_vector(st.src[2], lane, at, {})
                mask = self.ins(f"and {mty} {mask}, {m}") if mask else m
            p = self.ins(f"getelementptr float, ptr {self.kb.arg_of(buffer_of(index).arg[0])}, i64 {i0}")
            self.put(f"call void @llvm.masked.store.v{n}f32.p0({vty} {self.vector_at(val, at)}, ptr {p}, i32 4, {mty} {mask})")

    # -- reduce -------------------------------------------------------------------------------------
    def emit_reduce(self, u: UOp) -> Val:
        op, body, rngs = u.arg[0], u.src[0], list(u.src[1:])
        if any(range_size(r) == 0 for r in rngs):  # the reference reduces an empty range to 0
            return Val((), (literal(0, u.dtype),))
        outer = tuple(sorted((r for r in self.kb.deps[u] if r in self.unroll_pos), key=self.axis_order))
        at_ty = acc_ty(u.dtype)
        # copies along one axis (program.accumulator_axis: the store's contiguous one, or a convolution's output
        # channels) accumulate in one vector: the same adds per lane in the same order, but LLVM's SLP vectorizer
        # no longer has to discover (and sometimes mis-packs) the tile
        vec = accumulator_axis(u, list(outer), self.contiguous, self.kb.simd_bytes // u.dtype.itemsize)
        lanes = range_size(vec) if vec is not None else 1
        rest = tuple(a for a in outer if a is not vec)
        ty = f"<{lanes} x {at_ty}>" if vec is not None else at_ty
        ident = self.kb.alu.identity(op, u.dtype)
        init = f"<{', '.join([f'{at_ty} {ident}'] * lanes)}>" if vec is not None else ident
        accs = []
        for _ in self.combos(rest):
            a = self.tmp()
            self.allocas.append(f"  {a} = alloca {ty}")
            self.put(f"store {ty} {init}, ptr {a}")
            accs.append(a)
        closers = []
        for r in (r for r in rngs if not _is_unrolled(r)):
            self.hoist(body)
            closers.append(self.loop(r, "0", str(range_size(r))))
        unr = [r for r in rngs if _is_unrolled(r)]
        self.push("unroll", [(r, Val((r,), tuple(str(k) for k in range(range_size(r))))) for r in unr])
        vector_body = vec is not None and u.dtype is dtypes.float32 and at_ty == "float"
        self.body_lanes.append(vec if vector_body else None)
        val = self.emit(body)
        for a, at in zip(accs, self.combos(rest)):
            x = self.ins(f"load {ty}, ptr {a}")
            for k in self.combos(tuple(unr)):
                if vec is None:
                    y = self.kb.alu.to_acc(self, self.pick(val, at | k), u.dtype)
                elif val.lane is vec:
                    y = self.vector_at(val, at | k)
                else:
                    y = "poison"
                    for j in range(lanes):
                        lane = self.pick(val, at | k | {vec: j})
                        y = self.ins(f"insertelement {ty} {y}, {at_ty} {lane}, i64 {j}")
                x = self.kb.alu.accumulate(self, op, u.dtype, x, y, ty)
            self.put(f"store {ty} {x}, ptr {a}")
        self.body_lanes.pop()
        self.pop()
        for close in reversed(closers):
            close()
        if vec is not None and self.vector_lane(rest + (vec,)) is vec and u.dtype is dtypes.float32:
            return Val(rest + (vec,), tuple(self.ins(f"load {ty}, ptr {a}") for a in accs), vec, ty)
        names = []
        for a in accs:
            x = self.ins(f"load {ty}, ptr {a}")
            if vec is None:
                names.append(self.kb.alu.from_acc(self, x, u.dtype))
            else:
                names += [self.ins(f"extractelement {ty} {x}, i64 {j}") for j in range(lanes)]
        return Val(rest + ((vec,) if vec is not None else ()), tuple(names))

    # -- group reduce -------------------------------------------------------------------------------
    def part_ptr(self, base: str, d: DType, g: str) -> str:
        return self.ins(f"getelementptr inbounds {_part_ty(d)}, ptr {base}, i64 {g}")

    def emit_partials(self, u: UOp) -> None:
        """The body of a group REDUCE for g in [%start, %end), each value stored (as its accumulator) to %p[g]."""
        body, g = u.src[0], u.src[1]
        self.hoist(body)
        close = self.loop(g, "%start", "%end")
        self.body_lanes.append(None)
        v = self.emit(body)
        self.body_lanes.pop()
        assert not v.axes, "a group REDUCE's body depends on no unrolled range"
        x = self.kb.alu.to_acc(self, v.names[0], u.dtype)
        if u.dtype.is_bool:
            x = self.ins(f"zext i1 {x} to i8")
        self.put(f"store {_part_ty(u.dtype)} {x}, ptr {self.part_ptr('%p', u.dtype, self.bound(g))}")
        close()
        self.put("ret void")

    def emit_combine(self, u: UOp) -> Val:
        """A group REDUCE's value: its T partials combined with its op in order of g (as a sequential REDUCE)."""
        grp, op, d = self.groups[u], u.arg[0], u.dtype
        at_ty = acc_ty(d)
        base = self.ins(f"getelementptr inbounds i8, ptr %p, i64 {grp.offset}") if grp.offset else "%p"
        a = self.tmp()
        self.allocas.append(f"  {a} = alloca {at_ty}")
        self.put(f"store {at_ty} {self.kb.alu.identity(op, d)}, ptr {a}")
        g = u.src[1]
        close = self.loop(g, "0", str(grp.bound))
        x = self.ins(f"load {_part_ty(d)}, ptr {self.part_ptr(base, d, self.bound(g))}")
        if d.is_bool:
            x = self.ins(f"icmp ne i8 {x}, 0")
        acc = self.kb.alu.accumulate(self, op, d, self.ins(f"load {at_ty}, ptr {a}"), x)
        self.put(f"store {at_ty} {acc}, ptr {a}")
        close()
        return Val((), (self.kb.alu.from_acc(self, self.ins(f"load {at_ty}, ptr {a}"), d),))

    # -- items --------------------------------------------------------------------------------------
    def emit_item(self, item: _Item) -> None:
        peel = _peeled_loop(item, self.kb.deps)
        outer = item.loops[: item.loops.index(peel) + 1] if peel is not None else item.loops
        inner = item.loops[len(outer) :]
        closers = []
        for r in outer:
            self.hoist(item.store)
            lo, hi = ("%start", "%end") if r is item.parallel else ("0", str(range_size(r) - (1 if r is peel else 0)))
            closers.append(self.loop(r, lo, hi))
        self.emit_tile(item, inner)
        if peel is not None:
            closers.pop()()
            # the peeled loop's last iteration as straight code: its copies' gates are constants there, and LLVM
            # drops the copies that are never stored with their work
            self.push("loop", [(peel, Val((), (str(range_size(peel) - 1),)))])
            self.emit_tile(item, inner)
            self.pop()
        for close in reversed(closers):
            close()
        self.put("ret void")

    def emit_tile(self, item: _Item, loops: list[UOp]) -> None:
        """`loops` (the item's innermost, opened here) around the item's unrolled store."""
        closers = []
        for r in loops:
            self.hoist(item.store)
            closers.append(self.loop(r, "0", str(range_size(r))))
        self.push("unroll", [(r, Val((r,), tuple(str(k) for k in range(range_size(r))))) for r in item.unrolled])
        idx = index_of(item.store.src[0])
        self.contiguous = frozenset(r for r in item.unrolled if idx is not None and stride(idx, r) == 1)
        lanes = [r for r in self.contiguous if range_size(r) in VECTOR_LANES]
        self.lane = max(lanes, key=lambda r: self.unroll_pos[r]) if lanes else None
        self.emit_store(item.store, item.unrolled)
        self.pop()
        for close in reversed(closers):
            close()


# ---- ALU ---------------------------------------------------------------------------------------------


class _LLVMInts:
    """IDIV/MOD's integer operations as LLVM instructions of one function (ir/floordiv.py)."""

    def __init__(self, f: _Fn, ty: str) -> None:
        self.f, self.ty = f, ty

    def const(self, v: int) -> str:
        return str(v)

    def eq(self, x: str, v: int) -> str:
        return self.f.ins(f"icmp eq {self.ty} {x}, {v}")

    def either(self, p: str, q: str) -> str:
        return self.f.ins(f"or i1 {p}, {q}")

    def select(self, c: str, x: str, y: str) -> str:
        return self.f.ins(f"select i1 {c}, {self.ty} {x}, {self.ty} {y}")

    def tdiv(self, a: str, b: str, unsigned: bool) -> str:
        return self.f.ins(f"{'udiv' if unsigned else 'sdiv'} {self.ty} {a}, {b}")

    def trem(self, a: str, b: str, unsigned: bool) -> str:
        return self.f.ins(f"{'urem' if unsigned else 'srem'} {self.ty} {a}, {b}")

    def needs_floor(self, r: str, b: str) -> str:
        nonzero = self.f.ins(f"icmp ne {self.ty} {r}, 0")
        opposite = self.f.ins(f"icmp slt {self.ty} {self.f.ins(f'xor {self.ty} {r}, {b}')}, 0")
        return self.f.ins(f"and i1 {nonzero}, {opposite}")

    def dec_if(self, c: str, q: str) -> str:
        return self.f.ins(f"sub {self.ty} {q}, {self.f.ins(f'zext i1 {c} to {self.ty}')}")

    def add_if(self, c: str, r: str, b: str) -> str:
        return self.f.ins(f"add {self.ty} {r}, {self.select(c, b, '0')}")

    def neg(self, x: str) -> str:
        return self.f.ins(f"sub {self.ty} 0, {x}")


class _Alu:
    """Scalar instruction selection for every ALU op of the op table."""

    def __init__(self, kb: _Module) -> None:
        self.kb = kb

    # dtype helpers
    def intrinsic(self, name: str, ty: str, n: int = 1) -> str:
        scalar = {"float": "f32", "double": "f64", "half": "f16"}
        if ty.startswith("<"):  # <16 x float> -> v16f32
            lanes, _, elem = ty.strip("<>").split(" ")
            suffix = f"v{lanes}{scalar.get(elem, elem)}"
        else:
            suffix = scalar.get(ty, ty)
        self.kb.declare(f"declare {ty} @llvm.{name}.{suffix}({', '.join([ty] * n)})")
        return f"@llvm.{name}.{suffix}"

    def call(self, f: _Fn, name: str, ty: str, *args: str) -> str:
        fn = self.intrinsic(name, ty, len(args))
        return f.ins(f"call {ty} {fn}({', '.join(f'{ty} {a}' for a in args)})")

    @staticmethod
    def np_max(f: _Fn, ty: str, a: str, b: str) -> str:
        """numpy's maximum of two floats: a NaN operand propagates, and otherwise `a > b ? a : b` (a tie, -0.0 and
        0.0, gives b, as numpy does). The compare and select is one x86 max instruction; llvm.maximum, which orders
        -0.0 below 0.0, expands to several more, and a max-reduction's chain waited on all of them."""
        bt = ty.replace("float", "i1").replace("double", "i1")  # i1, or <n x i1> for a vector
        gt = f.ins(f"fcmp ogt {ty} {a}, {b}")
        m = f.ins(f"select {bt} {gt}, {ty} {a}, {ty} {b}")
        nan = f.ins(f"fcmp uno {ty} {a}, {a}")
        return f.ins(f"select {bt} {nan}, {ty} {a}, {ty} {m}")

    def bf16_round(self, f: _Fn, x: str) -> str:
        self.kb.need_bf16 = True
        return f.ins(f"call float @bf16_round(float {x})")

    def fix(self, f: _Fn, x: str, d: DType) -> str:
        """Bring a float32 result of a bfloat16 op onto the bfloat16 grid."""
        return self.bf16_round(f, x) if d is dtypes.bfloat16 else x

    @staticmethod
    def fl() -> str:
        return "contract "

    def to_acc(self, f: _Fn, x: str, d: DType) -> str:
        return f.ins(f"fpext half {x} to float") if d is dtypes.float16 else x

    def from_acc(self, f: _Fn, x: str, d: DType) -> str:
        if d is dtypes.float16:
            return f.ins(f"fptrunc float {x} to half")
        return self.fix(f, x, d)

    def identity(self, op: Ops, d: DType) -> str:
        if d.is_bool:
            return "true" if op is Ops.MUL else "false"
        one = literal(1, d) if not d.is_float else _fhex(1.0, acc_ty(d))
        zero = literal(0, d) if not d.is_float else _fhex(0.0, acc_ty(d))
        if op is Ops.ADD:
            return zero
        if op is Ops.MUL:
            return one
        if op is Ops.MAX:
            return _fhex(-math.inf, acc_ty(d)) if d.is_float else literal(d.min, d)
        raise UnsupportedOp(at=f"REDUCE {op}", why="reduce ops are ADD, MUL and MAX", suggestion="use one of those")

    def accumulate(self, f: _Fn, op: Ops, d: DType, acc: str, x: str, ty: str | None = None) -> str:
        """acc op x, in the accumulator type (or `ty`, a vector of it: ADD, MUL or a float MAX)."""
        ty = ty or acc_ty(d)
        if d.is_float:
            fm = "reassoc nsz contract " if self.kb.fast_math else "contract "
            if op is Ops.ADD:
                return f.ins(f"fadd {fm}{ty} {acc}, {x}")
            if op is Ops.MUL:
                return f.ins(f"fmul {fm}{ty} {acc}, {x}")
            return self.np_max(f, ty, acc, x)
        if d.is_bool:
            return f.ins(f"{'and' if op is Ops.MUL else 'or'} i1 {acc}, {x}")
        if op is Ops.ADD:
            return f.ins(f"add {ty} {acc}, {x}")
        if op is Ops.MUL:
            return f.ins(f"mul {ty} {acc}, {x}")
        return self.call(f, "umax" if d.is_unsigned else "smax", ty, acc, x)

    # the ops
    def node(self, f: _Fn, u: UOp, a: list[str]) -> str:
        op, d = u.op, u.dtype
        if op is Ops.CAST:
            return self.cast(f, a[0], u.src[0].dtype, d)
        if op is Ops.BITCAST:
            return self.bitcast(f, a[0], u.src[0].dtype, d)
        if op is Ops.WHERE:
            c = f.truth(a[0], u.src[0].dtype)
            return f.ins(f"select i1 {c}, {reg_ty(d)} {a[1]}, {reg_ty(d)} {a[2]}")
        if op in (Ops.CMPLT, Ops.CMPNE):
            return self.compare(f, op, u.src[0].dtype, a[0], a[1])
        if len(a) == 1:
            return self.unary(f, op, d, a[0])
        if op in (Ops.IDIV, Ops.MOD):
            return self.divmod(f, u, a[0], a[1])
        if op in (Ops.SHL, Ops.SHR):
            return self.shift(f, u, a[0], a[1])
        return self.binary(f, op, d, a[0], a[1], u)

    def vector(self, f: _Fn, u: UOp, a: list[str]) -> tuple[str, str]:
        """u (see _vectorizable) on vectors of n float32 lanes: the result and its type."""
        lane = f.active_lane
        assert lane is not None
        n = range_size(lane)
        vt, bt = f"<{n} x float>", f"<{n} x i1>"
        op = u.op
        if op in (Ops.CMPLT, Ops.CMPNE):
            return f.ins(f"fcmp {'olt' if op is Ops.CMPLT else 'une'} {vt} {a[0]}, {a[1]}"), bt
        if op is Ops.WHERE:
            return f.ins(f"select {bt} {a[0]}, {vt} {a[1]}, {vt} {a[2]}"), vt
        if op is Ops.MAX:
            return self.np_max(f, vt, a[0], a[1]), vt
        if op is Ops.EXP2:
            return self.exp2_f32(f, a[0], n), vt
        if op is Ops.RECIP:
            return f.ins(f"fdiv {vt} splat (float {_fhex(1.0, 'float')}), {a[0]}"), vt
        if op in _VECTOR_INTRINSICS:
            return self.call(f, _VECTOR_INTRINSICS[op], vt, a[0]), vt
        return f.ins(f"{_VECTOR_INSTRUCTIONS[op]} {self.fl()}{vt} {a[0]}, {a[1]}"), vt

    def unary(self, f: _Fn, op: Ops, d: DType, x: str) -> str:
        ty = reg_ty(d)
        if op is Ops.TRUNC and not d.is_float:
            return x
        if op is Ops.RECIP:
            return self.fix(f, f.ins(f"fdiv {ty} {_fhex(1.0, ty)}, {x}"), d)
        name = {Ops.TRUNC: "trunc", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos", Ops.SQRT: "sqrt"}.get(
            op
        )
        if name is None:
            raise UnsupportedOp(at=op.name, why=f"no LLVM lowering for unary {op.name}", suggestion="decompose it first")
        if op is Ops.EXP2 and ty == "float":  # inline, so that loops around it vectorize
            return self.fix(f, self.exp2_f32(f, x), d)
        if d is dtypes.float16:  # libm has no half functions: compute in float32, round once
            w = f.ins(f"fpext half {x} to float")
            if op is Ops.EXP2:
                return f.ins(f"fptrunc float {self.exp2_f32(f, w)} to half")
            return f.ins(f"fptrunc float {self.call(f, name, 'float', w)} to half")
        return self.fix(f, self.call(f, name, ty, x), d)

    def exp2_f32(self, f: _Fn, x: str, n: int = 1) -> str:
        """2**x in float32 from plain arithmetic (range reduction and a polynomial): libm's exp2f is one scalar
        call per element, which no vectorizer widens. Round x to q, a degree-8 Taylor polynomial of e**(r ln 2)
        on the remainder r in [-0.5, 0.5], and two exact power-of-two scalings (subnormals and the 2**128 edge);
        overflow to inf, underflow to 0, NaN through. About one float32 ulp from the true value. `n` > 1: the same
        on vectors of n lanes."""
        ft, it, bt = ("float", "i32", "i1") if n == 1 else (f"<{n} x float>", f"<{n} x i32>", f"<{n} x i1>")

        def c(v: float) -> str:
            return _fhex(v, "float") if n == 1 else f"splat (float {_fhex(v, 'float')})"

        def ci(v: int) -> str:
            return str(v) if n == 1 else f"splat (i32 {v})"

        def clamp_i(v: str, lo: int, hi: int) -> str:
            v = self.call(f, "smax", it, v, ci(lo))
            return self.call(f, "smin", it, v, ci(hi))

        def pow2(q: str) -> str:
            e = f.ins(f"shl {it} {f.ins(f'add {it} {clamp_i(q, -126, 127)}, {ci(127)}')}, {ci(23)}")
            return f.ins(f"bitcast {it} {e} to {ft}")

        xc = self.call(f, "minnum", ft, self.call(f, "maxnum", ft, x, c(-151.0)), c(129.0))
        neg = f.ins(f"fcmp olt {ft} {xc}, {c(0.0)}")
        half_away = f.ins(f"select {bt} {neg}, {ft} {c(-0.5)}, {ft} {c(0.5)}")
        q = f.ins(f"fptosi {ft} {f.ins(f'fadd {ft} {xc}, {half_away}')} to {it}")
        r = f.ins(f"fsub {ft} {xc}, {f.ins(f'sitofp {it} {q} to {ft}')}")
        t = f.ins(f"fmul {ft} {r}, {c(math.log(2))}")
        p = c(1.0 / math.factorial(8))
        for i in range(7, -1, -1):
            p = f.ins(f"fadd contract {ft} {f.ins(f'fmul contract {ft} {p}, {t}')}, {c(1.0 / math.factorial(i))}")
        half = f.ins(f"ashr {it} {q}, {ci(1)}")
        y = f.ins(f"fmul {ft} {f.ins(f'fmul {ft} {p}, {pow2(half)}')}, {pow2(f.ins(f'sub {it} {q}, {half}'))}")
        big = f.ins(f"fcmp oge {ft} {x}, {c(128.0)}")
        tiny = f.ins(f"fcmp olt {ft} {x}, {c(-150.0)}")
        y = f.ins(f"select {bt} {tiny}, {ft} {c(0.0)}, {ft} {y}")
        y = f.ins(f"select {bt} {big}, {ft} {c(math.inf)}, {ft} {y}")
        nan = f.ins(f"fcmp uno {ft} {x}, {x}")
        return f.ins(f"select {bt} {nan}, {ft} {x}, {ft} {y}")

    def binary(self, f: _Fn, op: Ops, d: DType, a: str, b: str, u: UOp) -> str:
        ty = reg_ty(d)
        if d.is_bool:  # numpy: + is or, * is and, max is or
            ins = {Ops.ADD: "or", Ops.MUL: "and", Ops.MAX: "or", Ops.XOR: "xor", Ops.OR: "or", Ops.AND: "and"}[op]
            return f.ins(f"{ins} i1 {a}, {b}")
        if d.is_float:
            if op is Ops.MAX:
                if d is dtypes.float16:
                    wa, wb = f.ins(f"fpext half {a} to float"), f.ins(f"fpext half {b} to float")
                    return f.ins(f"fptrunc float {self.np_max(f, 'float', wa, wb)} to half")
                return self.np_max(f, ty, a, b)
            fins = {Ops.ADD: "fadd", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}.get(op)
            if fins is None:
                raise UnsupportedOp(at=op.name, why=f"{op.name} on {d.name}", suggestion="use integer operands")
            return self.fix(f, f.ins(f"{fins} {self.fl()}{ty} {a}, {b}"), d)
        if op is Ops.MAX:
            return self.call(f, "umax" if d.is_unsigned else "smax", ty, a, b)
        ins = {Ops.ADD: "add", Ops.MUL: "mul", Ops.XOR: "xor", Ops.OR: "or", Ops.AND: "and"}[op]
        if op in (Ops.ADD, Ops.MUL):
            ins += self.no_wrap(op, d, u)
        return f.ins(f"{ins} {ty} {a}, {b}")

    @staticmethod
    def no_wrap(op: Ops, d: DType, u: UOp) -> str:
        """nsw/nuw where the operand intervals prove the result fits (helps SCEV see affine indices)."""
        (a0, a1), (b0, b1) = ((s.vmin, s.vmax) for s in u.src)
        if any(math.isinf(x) for x in (a0, a1, b0, b1)):
            return ""
        vals = [a0 + b0, a1 + b1] if op is Ops.ADD else [x * y for x in (a0, a1) for y in (b0, b1)]
        if d.min <= min(vals) and max(vals) <= d.max:
            return " nuw" if d.is_unsigned else " nsw"
        return ""

    def compare(self, f: _Fn, op: Ops, d: DType, a: str, b: str) -> str:
        ty = reg_ty(d)
        if d.is_float:
            return f.ins(f"fcmp {'olt' if op is Ops.CMPLT else 'une'} {ty} {a}, {b}")
        if op is Ops.CMPNE:
            return f.ins(f"icmp ne {ty} {a}, {b}")
        return f.ins(f"icmp {'ult' if d.is_unsigned or d.is_bool else 'slt'} {ty} {a}, {b}")

    def shift(self, f: _Fn, u: UOp, a: str, b: str) -> str:
        d = u.dtype
        ty, bits = reg_ty(d), d.bits
        s = u.src[1]
        if s.op is Ops.CONST:  # the reference clips the amount into [0, bits)
            b = str(min(max(int(s.arg), 0), bits - 1))
        elif not (s.vmin >= 0 and s.vmax <= bits - 1):
            if not d.is_unsigned:
                b = self.call(f, "smax", ty, b, "0")
            b = self.call(f, "umin", ty, b, str(bits - 1))
        ins = "shl" if u.op is Ops.SHL else ("lshr" if d.is_unsigned else "ashr")
        return f.ins(f"{ins} {ty} {a}, {b}")

    def divmod(self, f: _Fn, u: UOp, a: str, b: str) -> str:
        """IDIV/MOD as ir/floordiv.py defines them, with the guards the operands' bounds leave."""
        d, is_div = u.dtype, u.op is Ops.IDIV
        c = int(u.src[1].arg) if u.src[1].op is Ops.CONST else None
        if c is not None and c > 0 and c & (c - 1) == 0:  # shifts and masks are floor ops for either sign
            return f.ins(
                f"{('lshr' if d.is_unsigned else 'ashr') if is_div else 'and'} {reg_ty(d)} {a}, "
                f"{c.bit_length() - 1 if is_div else _int_lit(c - 1, d.bits)}"
            )
        return floor_divide(_LLVMInts(f, reg_ty(d)), a, b, DivFacts.of(*u.src), remainder=not is_div)

    def cast(self, f: _Fn, x: str, s: DType, d: DType) -> str:
        if s == d:
            return x
        st, dt = reg_ty(s), reg_ty(d)
        if d.is_bool:
            return f.truth(x, s)
        if s.is_bool:
            if d.is_float:
                return f.ins(f"select i1 {x}, {dt} {literal(1.0, d)}, {dt} {literal(0.0, d)}")
            return f.ins(f"zext i1 {x} to {dt}")
        if s.is_int and d.is_int:
            if s.bits == d.bits:
                return x
            if s.bits > d.bits:
                return f.ins(f"trunc {st} {x} to {dt}")
            return f.ins(f"{'zext' if s.is_unsigned else 'sext'} {st} {x} to {dt}")
        if s.is_int:  # int -> float
            wide = "double" if d is dtypes.float64 else "float"
            v = f.ins(f"{'uitofp' if s.is_unsigned else 'sitofp'} {st} {x} to {wide}")
            if d is dtypes.float16:
                return f.ins(f"fptrunc float {v} to half")
            return self.fix(f, v, d)
        if d.is_int:  # float -> int: trunc; NaN/inf -> 0, out of int64 range -> INT64_MIN, then wrap
            if s is dtypes.float16:
                x, st = f.ins(f"fpext half {x} to float"), "float"
            ax = self.call(f, "fabs", st, x)
            ok = f.ins(f"fcmp olt {st} {ax}, {_fhex(2.0**63, st)}")
            fin = f.ins(f"fcmp olt {st} {ax}, {_fhex(math.inf, st)}")
            v = f.ins(f"fptosi {st} {f.ins(f'select i1 {ok}, {st} {x}, {st} {_fhex(0.0, st)}')} to i64")
            v = f.ins(f"select i1 {ok}, i64 {v}, i64 {f.ins(f'select i1 {fin}, i64 {-(1 << 63)}, i64 0')}")
            return v if d.bits == 64 else f.ins(f"trunc i64 {v} to {dt}")
        # float -> float
        if s is dtypes.float16:
            x, st = f.ins(f"fpext half {x} to float"), "float"
        if d is dtypes.float16:
            if st == "double":
                x = f.ins(f"fptrunc double {x} to float")
            return f.ins(f"fptrunc float {x} to half")
        if st == dt:
            return self.fix(f, x, d)
        if st == "float":
            return f.ins(f"fpext float {x} to double")
        return self.fix(f, f.ins(f"fptrunc double {x} to float"), d)

    def bitcast(self, f: _Fn, x: str, s: DType, d: DType) -> str:
        bits = f"i{s.itemsize * 8}"
        if s is dtypes.bfloat16:
            w = f.ins(f"lshr i32 {f.ins(f'bitcast float {x} to i32')}, 16")
            raw = f.ins(f"trunc i32 {w} to i16")
        elif s.is_bool:
            raw = f.ins(f"zext i1 {x} to i8")
        elif s.is_float:
            raw = f.ins(f"bitcast {reg_ty(s)} {x} to {bits}")
        else:
            raw = x
        if d is dtypes.bfloat16:
            return f.ins(f"bitcast i32 {f.ins(f'shl i32 {f.ins(f"zext i16 {raw} to i32")}, 16')} to float")
        if d.is_bool:
            return f.ins(f"icmp ne i8 {raw}, 0")
        if d.is_float:
            return f.ins(f"bitcast {bits} {raw} to {reg_ty(d)}")
        return raw


# ---- module ------------------------------------------------------------------------------------------

_BF16_ROUND = """define internal float @bf16_round(float %x) alwaysinline {
  %b = bitcast float %x to i32
  %h = lshr i32 %b, 16
  %o = and i32 %h, 1
  %s = add i32 %b, 32767
  %t = add i32 %s, %o
  %r = and i32 %t, -65536
  %q = or i32 %b, 4194304
  %qn = and i32 %q, -65536
  %n = fcmp uno float %x, 0.0
  %v = select i1 %n, i32 %qn, i32 %r
  %y = bitcast i32 %v to float
  ret float %y
}"""


class _Module:
    """Renders one kernel: analysis shared by its item functions, declarations, the module text."""

    def __init__(self, kernel: Kernel, threads: int, fast_math: bool, auto_parallel: bool, cpu: CPUTarget) -> None:
        ast = kernel.ast
        self.order = ast.toposort()
        self.topo_pos = {u: i for i, u in enumerate(self.order)}
        self.deps = RangeDeps()
        self.conds = guards(self.order)
        self.loopy: set[UOp] = set()  # nodes with a REDUCE under them (their emission runs a loop)
        for u in self.order:
            if u.op is Ops.REDUCE or any(s in self.loopy for s in u.src):
                self.loopy.add(u)
        self.fast_math = fast_math
        self.simd_bytes = cpu.simd_bytes
        self.need_bf16 = False
        self.decls: dict[str, None] = {}
        self.alu = _Alu(self)
        self._reach: dict[tuple[UOp, UOp], bool] = {}
        self.buffers: list[UOp] = []
        for u in self.order:
            if u.op is Ops.INDEX:
                b = buffer_of(u)
                if b.op is not Ops.BUFFER:
                    raise UnsupportedOp(
                        at=b.op.name,
                        why="kernels address named BUFFERs",
                        suggestion="give every INDEX a BUFFER (optionally behind AFTER)",
                    )
                if all(x.arg[0] != b.arg[0] for x in self.buffers):
                    self.buffers.append(b)
        self.arg_names = {b.arg[0]: f"%b{i}" for i, b in enumerate(self.buffers)}
        for u in self.order:
            if u.op is Ops.DEFINE_VAR:
                raise UnsupportedOp(
                    at=f"variable {u.arg[0]}",
                    why="LLVM kernels take no symbolic variables",
                    suggestion="bind variables before lowering",
                )
            if u.op is Ops.RANGE:
                range_size(u)
        self.items = _items(ast, self.deps, threads, auto_parallel)
        params = ", ".join([f"ptr noalias {self.arg_names[b.arg[0]]}" for b in self.buffers] + ["i64 %start", "i64 %end"])
        self.groups: list[list[_Group]] = []  # per item
        self.scratch: list[int] = []  # per item: bytes of partials
        self.signatures: list[tuple[str, int]] = []  # every function: name, number of trailing pointer arguments
        fns = []
        for i, item in enumerate(self.items):
            groups, off = [], 0
            for j, u in enumerate(_group_reduces(item, self.deps)):
                groups.append(_Group(u, f"k{i}_g{j}", range_size(u.src[1]), off))
                off += -(-range_size(u.src[1]) * _part_size(u.dtype) // 64) * 64  # each group on its own cache lines
            self.groups.append(groups)
            self.scratch.append(off)
            for grp in groups:
                fn = _Fn(self, grp.fn)
                fn.emit_partials(grp.reduce)
                fns.append(fn.text(params + ", ptr noalias %p"))
                self.signatures.append((grp.fn, 1))
            fn = _Fn(self, f"k{i}")
            fn.groups = {grp.reduce: grp for grp in groups}
            fn.emit_item(item)
            fns.append(fn.text(params + (", ptr noalias %p" if groups else "")))
            self.signatures.append((f"k{i}", 1 if groups else 0))
        tm = _target_machine(cpu)
        head = [f'target datalayout = "{tm.target_data}"', f'target triple = "{tm.triple}"', ""]
        tail = list(self.decls) + ([_BF16_ROUND] if self.need_bf16 else [])
        wide = ' "prefer-vector-width"="512"' if cpu.isa == "avx512" else ""
        feats = f' "target-features"="{_features(cpu)}"'
        attrs = f'attributes #0 = {{ nounwind "target-cpu"="{cpu.name}"{feats}{wide} }}'
        self.ir = "\n".join(head + fns + [""] + tail + ["", attrs]) + "\n"

    def arg_of(self, name: str) -> str:
        return self.arg_names[name]

    def declare(self, line: str) -> None:
        self.decls[line] = None

    def reaches(self, src: UOp, target: UOp) -> bool:
        """Does target occur under src? (a guard computed from the load itself cannot guard it)."""
        key = (src, target)
        if key not in self._reach:
            self._reach[key] = target in set(src.toposort())
        return self._reach[key]


# ---- LLVM toolchain ------------------------------------------------------------------------------------

_LOCK = threading.RLock()
_TM: dict[CPUTarget, Any] = {}
# summary_hits: kernels assembled from their module summary on disk, without rendering them to IR
CACHE_STATS = {"compiles": 0, "hits": 0, "disk_hits": 0, "worker_compiles": 0, "summary_hits": 0}
SPEED_LEVEL = llvm_pipeline.SPEED_LEVEL  # part of the disk cache's key: other passes, other machine code


def _new_target_machine(cpu: CPUTarget) -> Any:
    return llvm_pipeline.new_target_machine(cpu.name, cpu.features)


def _features(cpu: CPUTarget) -> str:
    return llvm_pipeline.features(cpu.features)


def _target_machine(cpu: CPUTarget) -> Any:
    """The shared target machine of a CPU, for data layout and the optimizer (never handed to an engine)."""
    with _LOCK:
        if cpu not in _TM:
            _TM[cpu] = _new_target_machine(cpu)
        return _TM[cpu]


def optimize_ir(ir: str, cpu: CPUTarget | None = None) -> Any:
    """Parse, verify and optimize IR text for a CPU (default: the host); returns the llvmlite module."""
    tm = _target_machine(cpu or host_cpu())
    try:
        mod = llvm.parse_assembly(ir)
        mod.verify()
    except RuntimeError as e:
        raise BackendError(
            at="LLVM IR",
            why=f"the rendered IR does not verify: {e}",
            suggestion="this is a renderer bug; LLVMBackend.render shows the IR",
        ) from e
    llvm_pipeline.optimize_module(mod, tm)
    return mod


@dataclass
class _Native:
    """A JIT-compiled module: the engine keeps the code alive."""

    engine: Any
    funcs: dict[str, Any]  # function name -> ctypes callable
    optimized_ir: str


def _cache_key(ir: str, cpu: CPUTarget) -> str:
    return hashlib.sha256(f"{cpu.name}|{cpu.features}|{ir}".encode()).hexdigest()


def _jit(
    ir: str,
    signatures: list[tuple[str, int]],
    n_bufs: int,
    cpu: CPUTarget,
    protos: dict[str, Any] | None = None,
    persist: bool = False,
    built: tuple[bytes, str] | None = None,
) -> _Native:
    """Compile IR (cached by its text and the CPU): functions named in `signatures` take n_bufs pointers, start,
    end and that many more pointers; `protos` gives other functions their ctypes prototype. `persist`: the
    machine code is also kept in, and read from, the disk cache (kernels; never code with addresses in it).
    `built`: the IR's object code and optimized IR, compiled already by a compile worker."""
    key = _cache_key(ir, cpu)
    with _LOCK:
        found = _found(key, signatures, n_bufs, cpu, protos, disk=persist and built is None)
        if found is not None:
            return found
        stored_key = _object_key(key) if persist and disk_cache.enabled() else None
        if built is not None:  # machine code a compile worker made: no optimization, no codegen here
            obj, optimized = built
            engine = _engine_of(obj, cpu)
            CACHE_STATS["worker_compiles"] += 1
            if stored_key is not None:
                disk_cache.store("objects", stored_key, {"object": obj, "ir": optimized})
        else:
            mod = optimize_ir(ir, cpu)
            engine = llvm.create_mcjit_compiler(mod, _new_target_machine(cpu))  # the engine owns (and frees) its TM
            made: list[bytes] = []
            if stored_key is not None:
                engine.set_object_cache(lambda _m, buf: made.append(bytes(buf)), lambda _m: None)
            engine.finalize_object()
            optimized = str(mod)
            if made and stored_key is not None:
                disk_cache.store("objects", stored_key, {"object": made[0], "ir": optimized})
        CACHE_STATS["compiles"] += 1
        return _cached_native(key, engine, signatures, n_bufs, optimized, protos)


def _object_key(key: str) -> str:
    """The disk cache's name for the machine code of the IR whose module-cache key is `key`."""
    return disk_cache.key("llvm-object", key, SPEED_LEVEL)


def _engine_of(obj: bytes, cpu: CPUTarget) -> Any:
    """An MCJIT engine running machine code made elsewhere (no optimization, no codegen)."""
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine(cpu))
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine


def _cached_native(
    key: str, engine: Any, signatures: list[tuple[str, int]], n_bufs: int, optimized: str, protos: dict[str, Any] | None
) -> _Native:
    """The engine's functions as ctypes callables, put into the module cache under `key` (called holding _LOCK)."""
    funcs = {}
    for name, extra in signatures:
        proto = ctypes.CFUNCTYPE(
            None, *([ctypes.c_void_p] * n_bufs), ctypes.c_int64, ctypes.c_int64, *([ctypes.c_void_p] * extra)
        )
        funcs[name] = proto(engine.get_function_address(name))
    for name, proto in (protos or {}).items():
        funcs[name] = proto(engine.get_function_address(name))
    native = _Native(engine, funcs, optimized)
    _CACHE[key] = native
    while len(_CACHE) > MAX_CACHED_MODULES:  # an evicted engine lives on while a program still holds it
        _CACHE.popitem(last=False)
    return native


def _found(
    key: str,
    signatures: list[tuple[str, int]],
    n_bufs: int,
    cpu: CPUTarget,
    protos: dict[str, Any] | None = None,
    disk: bool = True,
) -> _Native | None:
    """The module whose IR has module-cache key `key`, from the module cache or (`disk`) the disk cache; None if
    neither holds its machine code (called holding _LOCK)."""
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        CACHE_STATS["hits"] += 1
        return hit
    stored = disk_cache.load("objects", _object_key(key)) if disk and disk_cache.enabled() else None
    if not isinstance(stored, dict):
        return None
    CACHE_STATS["disk_hits"] += 1
    return _cached_native(key, _engine_of(stored["object"], cpu), signatures, n_bufs, stored["ir"], protos)


def _jit_stored(key: str, signatures: list[tuple[str, int]], n_bufs: int, cpu: CPUTarget) -> _Native | None:
    """The module whose IR has module-cache key `key`, when its machine code is at hand (the IR is not, to
    compile)."""
    with _LOCK:
        return _found(key, signatures, n_bufs, cpu)


def _compiled_already(ir: str, cpu: CPUTarget, persist: bool) -> bool:
    """Is the IR's machine code in the module cache, or (persist) in the disk cache?"""
    key = _cache_key(ir, cpu)
    with _LOCK:
        if key in _CACHE:
            return True
    if not (persist and disk_cache.enabled()):
        return False
    return isinstance(disk_cache.load("objects", _object_key(key)), dict)


_CACHE: OrderedDict[str, _Native] = OrderedDict()  # least recently used first
MAX_CACHED_MODULES = 64  # about 1 MB each (engine and code)


def cached_modules() -> int:
    """How many compiled modules the cache holds now."""
    return len(_CACHE)


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()


# ---- the backend ---------------------------------------------------------------------------------------


@dataclass
class LLVMCompiled:
    """The callable for one kernel: `run(bufs)` with bufs a dict of numpy arrays in native storage."""

    name: str
    buffer_order: list[str]
    checks: list[tuple[str, np.dtype, int]]
    native: _Native
    parallel: list[int | None]  # per item: trip count of its parallel range, or None
    threads: int
    groups: list[list[tuple[str, int, int]]] = field(default_factory=list)  # per item: (function, T, offset)
    scratch: list[int] = field(default_factory=list)  # per item: bytes of partials
    cpu: CPUTarget | None = None
    _alone: _Runner | None = field(default=None, repr=False)

    def __call__(self, bufs: dict[str, Any]) -> None:
        """Run this kernel alone on `bufs` (each buffer checked); a program runs its kernels through one driver
        (`LLVMBackend.runner`)."""
        for name, dt, size in self.checks:
            a = bufs[name]
            if not isinstance(a, np.ndarray) or a.dtype != dt or a.size < size or not a.flags.c_contiguous:
                raise InvalidArgument(
                    at=f"buffer {name!r} of kernel {self.name}",
                    why=f"expected a contiguous {dt} array of {size} elements",
                    suggestion="allocate buffers with the backend's alloc/put",
                )
        if self._alone is None:
            with _LOCK:
                if self._alone is None:
                    self._alone = _Runner([self], [n for n, _, _ in self.checks], self.cpu or host_cpu())
        self._alone(bufs)


class _Runner:
    """Runs a program's compiled kernels in order as one call of a native driver. The driver calls each item
    directly, or, for a parallel range or a group reduction's partials, hands `task(table, part)` functions to
    the native pool (backends/cpu_pool.py): a parallel step costs about a microsecond, not a Python thread
    hand-off (about 50 us) or a ctypes call per kernel (about 2.5 us).

    The driver takes a table of buffer addresses (the program's buffers in order) and, last, the address of a
    scratch buffer for group partials (items run one after another, so they share it); concurrent calls each
    take their own table and scratch."""

    def __init__(
        self, compiled: list[LLVMCompiled], names: list[str], cpu: CPUTarget, cosliced: dict[int, Coslice] | None = None
    ) -> None:
        self.names = names
        self.cosliced = cosliced or {}
        # items run one after another, so they share the scratch: group partials, and each part's chunk of a
        # local buffer (at part * its chunk's bytes, aligned)
        local = [
            min(compiled[i].threads, compiled[i].parallel[0] or 1) * _chunk_bytes(c)
            for i, c in self.cosliced.items()
            if c.local
        ]
        self.scratch = max([*(b for c in compiled for b in c.scratch), *local], default=0)
        self.keep: list[Any] = [compiled]  # the kernels' engines, whose code the driver calls
        self.drive = self._driver(compiled, {n: i for i, n in enumerate(names)}, cpu, self.cosliced)
        self.seen: list[tuple[weakref.ref[np.ndarray], int] | None] = [None] * len(self.names)
        self.tables: list[tuple[Any, np.ndarray | None, int]] = []  # address table, scratch, the table's address

    def _driver(self, compiled: list[LLVMCompiled], slot: dict[str, int], cpu: CPUTarget, cosliced: dict[int, Coslice]) -> Any:
        """`cosliced`: kernel i -> how kernels i and i + 1 run chunk by chunk (LLVMBackend.coslices)."""
        pool = cpu_pool.parallel_address()
        scratch_slot = len(self.names)
        tasks: list[str] = []

        def loads(c: LLVMCompiled, lines: list[str], have: dict[str, str]) -> list[str]:
            args = []
            for name, _, _ in c.checks:
                if name not in have:
                    have[name] = f"%p{len(have)}"
                    lines += [
                        f"  %a{len(have)} = getelementptr i64, ptr %a, i64 {slot[name]}",
                        f"  {have[name]} = load ptr, ptr %a{len(have)}",
                    ]
                args.append(f"ptr {have[name]}")
            return args

        def call(fn: int, args: list[str], lo: str, hi: str, scratch: str | None = None) -> str:
            extra = f", ptr {scratch}" if scratch else ""
            return f"  call void inttoptr (i64 {fn} to ptr)({', '.join(args)}, i64 {lo}, i64 {hi}{extra})"

        def bounds(n: int, parts: int) -> list[str]:
            """[%lo, %hi): the slice of [0, n) that part %part of `parts` runs."""
            return [
                f"  %x = mul i64 %part, {n}",
                f"  %lo = udiv i64 %x, {parts}",
                "  %part1 = add i64 %part, 1",
                f"  %y = mul i64 %part1, {n}",
                f"  %hi = udiv i64 %y, {parts}",
            ]

        def sliced(c: LLVMCompiled, fn: int, n: int, off: int | None, body: list[str], have: dict[str, str]) -> None:
            """fn over [0, n): directly when one slice does, else as a pool task of min(threads, n) parts."""
            parts = min(c.threads, n)
            if parts <= 1:
                sp = None
                if off is not None:
                    body.append(f"  %s{len(body)} = getelementptr i8, ptr %scratch, i64 {off}")
                    sp = f"%s{len(body) - 1}"
                body.append(call(fn, loads(c, body, have), "0", str(n), sp))
                return
            t: list[str] = [f"define internal void @t{len(tasks)}(ptr %a, i64 %part) {{", "entry:"]
            args = loads(c, t, {})
            t += bounds(n, parts)
            sp = None
            if off is not None:
                t += [
                    f"  %sa = getelementptr i64, ptr %a, i64 {scratch_slot}",
                    "  %sb = load ptr, ptr %sa",
                    f"  %sp = getelementptr i8, ptr %sb, i64 {off}",
                ]
                sp = "%sp"
            t += [call(fn, args, "%lo", "%hi", sp), "  ret void", "}"]
            body.append(f"  call void inttoptr (i64 {pool} to ptr)(ptr @t{len(tasks)}, ptr %a, i64 {parts})")
            tasks.append("\n".join(t))

        def chunked(pair: list[LLVMCompiled], n: int, co: Coslice, body: list[str]) -> None:
            """Two single-item kernels over [0, n), chunk by chunk in each slice: the first, then the second. A
            local buffer is each part's chunk of the scratch, handed to both kernels shifted back by the chunk's
            first step (they address it by step: the chunk's steps land in the part's bytes)."""
            fns = [c.native.engine.get_function_address("k0") for c in pair]
            parts = max(1, min(pair[0].threads, n))
            t = [f"define internal void @t{len(tasks)}(ptr %a, i64 %part) {{", "entry:"]
            mine: dict[str, str] = {}
            args = [loads(c, t, mine) for c in pair]
            t += bounds(n, parts)
            shift = []
            if co.local:
                local = f"ptr {mine[co.buffer]}"
                args = [["ptr %lp" if a == local else a for a in arg] for arg in args]
                t += [
                    f"  %sa = getelementptr i64, ptr %a, i64 {scratch_slot}",
                    "  %sb = load ptr, ptr %sa",
                    f"  %own = mul i64 %part, {_chunk_bytes(co)}",
                    "  %cb = getelementptr i8, ptr %sb, i64 %own",
                ]
                shift = [f"  %back = mul i64 %c, -{co.step_bytes}", "  %lp = getelementptr i8, ptr %cb, i64 %back"]
            t += [
                "  br label %head",
                "head:",
                "  %c = phi i64 [ %lo, %entry ], [ %e, %body ]",
                "  %more = icmp slt i64 %c, %hi",
                "  br i1 %more, label %body, label %done",
                "body:",
                f"  %e0 = add i64 %c, {co.chunk}",
                "  %short = icmp slt i64 %e0, %hi",
                "  %e = select i1 %short, i64 %e0, i64 %hi",
                *shift,
                *(call(fn, a, "%c", "%e") for fn, a in zip(fns, args)),
                "  br label %head",
                "done:",
                "  ret void",
                "}",
            ]
            if parts == 1:
                body.append(f"  call void @t{len(tasks)}(ptr %a, i64 0)")
            else:
                body.append(f"  call void inttoptr (i64 {pool} to ptr)(ptr @t{len(tasks)}, ptr %a, i64 {parts})")
            tasks.append("\n".join(t))

        body = [f"  %sslot = getelementptr i64, ptr %a, i64 {scratch_slot}", "  %scratch = load ptr, ptr %sslot"]
        have: dict[str, str] = {}
        for k, c in enumerate(compiled):
            if k - 1 in cosliced:
                continue  # run with the kernel before it
            if k in cosliced:
                n = c.parallel[0]
                assert n is not None and c.parallel == compiled[k + 1].parallel == [n]  # what coslice_chunk saw
                chunked(compiled[k : k + 2], n, cosliced[k], body)
                continue
            for i, n in enumerate(c.parallel):
                fn = c.native.engine.get_function_address(f"k{i}")
                groups = c.groups[i] if c.groups else []
                if not groups:
                    if n is None:
                        body.append(call(fn, loads(c, body, have), "0", "0"))
                    else:
                        sliced(c, fn, n, None, body, have)
                    continue
                for name, t, off in groups:  # all partials first, then the item combines them in order
                    sliced(c, c.native.engine.get_function_address(name), t, off, body, have)
                body.append(call(fn, loads(c, body, have), "0", "0", "%scratch"))
        ir = "\n".join([*tasks, "define void @drive(ptr noalias %a) {", "entry:", *body, "  ret void", "}", ""])
        native = _jit(ir, [], 0, cpu, {"drive": ctypes.CFUNCTYPE(None, ctypes.c_void_p)})
        self.keep.append(native)
        return native.funcs["drive"]

    def __call__(self, bufs: dict[str, np.ndarray]) -> None:
        # the array of the last call in each place (weakly: the program reuses an output the caller dropped, which
        # it tells by its reference count) and its address: a caller passing the same inputs again (a serving
        # loop, the program's own reused buffers) skips taking them. Not keyed by id(): id() raises an audit
        # event, and with an audit hook installed (filelock installs one: torch.compile brings it) two per buffer
        # doubled the call time of 48 small kernels (72 -> 150 us)
        seen, addrs = self.seen, []
        for i, n in enumerate(self.names):
            a = bufs[n]
            hit = seen[i]
            if hit is None or hit[0]() is not a:
                hit = seen[i] = (weakref.ref(a), _address(a))
            addrs.append(hit[1])
        try:
            table, scratch, where = self.tables.pop()  # concurrent calls each take their own
        except IndexError:
            table = (ctypes.c_int64 * (len(addrs) + 1))()
            scratch = np.empty(self.scratch + ALIGN, np.uint8) if self.scratch else None
            table[len(addrs)] = scratch.ctypes.data + (-scratch.ctypes.data) % ALIGN if scratch is not None else 0
            where = ctypes.addressof(table)
        table[: len(addrs)] = addrs
        self.drive(where)
        self.tables.append((table, scratch, where))


def _chunk_bytes(co: Coslice) -> int:
    """Bytes of one part's chunk of a local buffer in the scratch (whole cache lines)."""
    return -(-co.chunk * co.step_bytes // ALIGN) * ALIGN


def _address(a: np.ndarray) -> int:
    """The address of a contiguous array's data: through a ctypes view (twice as fast as `a.ctypes.data`, which a
    program with many small kernels pays per buffer and call), or `a.ctypes.data` for a read-only array."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return int(a.ctypes.data)


class LLVMBackend(HostBuffers):
    """Host CPU backend: LLVM IR through llvmlite, optimized for the host CPU, MCJIT, ctypes calls.

    threads: slices per parallel range (default os.cpu_count()); fast_math: allow
    reassociating reductions; auto_parallel: split the outermost loop of big,
    safely splittable nests even without a THREAD range; cpu: the CPU to
    generate code for (an LLVM x86 CPU name such as "haswell"; default $EGC_CPU,
    else the host), which must be runnable here.
    """

    name = "llvm"
    native_storage = True

    def __init__(
        self, threads: int | None = None, fast_math: bool = False, auto_parallel: bool = True, cpu: str | None = None
    ) -> None:
        self.threads = threads if threads is not None else (os.cpu_count() or 1)
        self.fast_math = fast_math
        self.auto_parallel = auto_parallel
        self.cpu = cpu_target(cpu)

    def coslices(self, program: Program) -> dict[int, Coslice]:
        """The consecutive kernels the runner runs chunk by chunk (coslice_chunk: a packed weight and its GEMM),
        first come first paired. The memory plan makes each pair one step (chunk by chunk, the second's first
        chunk is written before the first's last is read), and the buffer between them is local (no bytes of
        its own, each thread's chunk in the scratch: read back from L2, never written to memory) where nothing
        else touches it."""
        kernels = program.kernels
        touched = Counter(n for k in kernels for n in {*k.reads, *k.writes})
        pairs: dict[int, Coslice] = {}
        for i in range(len(kernels) - 1):
            first, second = kernels[i], kernels[i + 1]
            if i - 1 in pairs or not set(first.writes) & set(second.reads):
                continue
            found = coslice_chunk(first.ast, second.ast, self.threads, self.auto_parallel)
            if found is not None:
                name, chunk, step = found
                local = program.buffers[name].kind == "intermediate" and touched[name] == 2
                pairs[i] = Coslice(chunk, name, step, local)
        return pairs

    def runner(self, program: Program, compiled: list[LLVMCompiled]) -> Callable[[dict[str, np.ndarray]], None]:
        """One callable that runs the program's compiled kernels in order on its placed buffers, the pairs of
        `program.coslices()` chunk by chunk."""
        return _Runner(compiled, list(program.buffers), self.cpu, program.coslices())

    def _module(self, kernel: Kernel) -> _Module:
        return _Module(kernel, self.threads, self.fast_math, self.auto_parallel, self.cpu)

    def render(self, kernel: Kernel, program: Program | None = None) -> str:
        """The kernel's LLVM IR before optimization, with a header naming the arguments."""
        m = self._module(kernel)
        args = ", ".join(f"%b{i}={b.arg[0]}" for i, b in enumerate(m.buffers))
        head = [f"; kernel {kernel.name}: args ({args}, %start, %end)"]
        for i, it in enumerate(m.items):
            if it.parallel is not None:
                head.append(f"; @k{i}: [%start, %end) slices range {it.parallel.arg[0]!r} (bound {range_size(it.parallel)})")
            for grp in m.groups[i]:
                head.append(
                    f"; @{grp.fn}(..., %p): [%start, %end) slices group range {grp.reduce.src[1].arg[0]!r} "
                    f"(bound {grp.bound}); @k{i} reads its partials at %p + {grp.offset}"
                )
        return "\n".join(head) + "\n" + m.ir

    def optimized_ir(self, kernel: Kernel, program: Program | None = None) -> str:
        """The optimized IR (to see what was vectorized)."""
        m = self._module(kernel)
        return _jit(m.ir, m.signatures, len(m.buffers), self.cpu).optimized_ir

    def assembly(self, kernel: Kernel, program: Program | None = None) -> str:
        """The machine code for this backend's CPU, as assembly text (to see which vector registers it uses)."""
        m = self._module(kernel)
        return _target_machine(self.cpu).emit_assembly(optimize_ir(m.ir, self.cpu))

    def compile(self, kernel: Kernel, program: Program | None = None) -> LLVMCompiled:
        return self._compiled(kernel, self._module(kernel), program, self._summary_key(kernel))

    def compile_all(self, kernels: list[Kernel], program: Program | None = None) -> list[LLVMCompiled]:
        """Every kernel of a program compiled, the largest modules by compile workers (backends/compile_workers.py)
        while this process compiles the others: the same machine code as `compile`, kernel by kernel. A kernel
        whose module summary and machine code the disk cache holds is not rendered to IR at all."""
        keys = [self._summary_key(k) for k in kernels]
        done: dict[int, LLVMCompiled] = {}
        for i, k in enumerate(kernels):
            if (c := self._from_summary(k, keys[i], program)) is not None:
                done[i] = c
        rest = [i for i in range(len(kernels)) if i not in done]
        mods = {i: self._module(kernels[i]) for i in rest}
        first: dict[str, int] = {}  # one module per IR text: a model's repeated layers compile once
        for i, m in mods.items():
            first.setdefault(m.ir, i)
        todo = {i: ir for ir, i in first.items() if not _compiled_already(ir, self.cpu, persist=True)}
        batch = compile_workers.Batch(todo, self.cpu.name, self.cpu.features)
        done.update({i: self._compiled(kernels[i], mods[i], program, keys[i]) for i in batch.mine()})
        for i in rest:
            done[i] = done.get(i) or self._compiled(kernels[i], mods[i], program, keys[i], batch.result(i))
        return [done[i] for i in range(len(kernels))]

    def _summary_key(self, kernel: Kernel) -> str | None:
        """The disk cache's name for what rendering `kernel` told (everything _Module depends on is in it); None
        when the disk cache is off."""
        if not disk_cache.enabled():
            return None
        options = (self.threads, self.fast_math, self.auto_parallel, self.cpu.name, self.cpu.features, SPEED_LEVEL)
        return disk_cache.key("llvm-kernel", kernel.name, disk_cache.graph_digest([kernel.ast]), *options)

    def _from_summary(self, kernel: Kernel, key: str | None, program: Program | None) -> LLVMCompiled | None:
        """The kernel from its module summary (disk cache entry `key`) and the machine code its IR got."""
        if key is None:
            return None
        summary = disk_cache.load("objects", key)
        if not isinstance(summary, dict):
            return None
        native = _jit_stored(summary["ir_key"], summary["signatures"], len(summary["checks"]), self.cpu)
        if native is None:
            return None
        CACHE_STATS["summary_hits"] += 1
        return self._assembled(kernel, native, summary, program)

    def _compiled(
        self,
        kernel: Kernel,
        m: _Module,
        program: Program | None,
        summary_key: str | None,
        built: tuple[bytes, str] | None = None,
    ) -> LLVMCompiled:
        """The kernel compiled from its module `m`; its module summary goes to the disk cache as `summary_key`."""
        native = _jit(m.ir, m.signatures, len(m.buffers), self.cpu, persist=True, built=built)
        summary = {
            "ir_key": _cache_key(m.ir, self.cpu),
            "signatures": m.signatures,
            "checks": [(b.arg[0], _np_storage(b.dtype), math.prod(b.arg[1])) for b in m.buffers],
            "parallel": [range_size(it.parallel) if it.parallel is not None else None for it in m.items],
            "groups": [[(grp.fn, grp.bound, grp.offset) for grp in gs] for gs in m.groups],
            "scratch": m.scratch,
        }
        if summary_key is not None:
            disk_cache.store("objects", summary_key, summary)
        return self._assembled(kernel, native, summary, program)

    def _assembled(self, kernel: Kernel, native: _Native, summary: dict[str, Any], program: Program | None) -> LLVMCompiled:
        checks = summary["checks"]
        if program is not None:  # the program's spec is the authority on a buffer's dtype
            checks = [(n, self.storage_np(program.buffers[n].dtype) if n in program.buffers else dt, s) for n, dt, s in checks]
        return LLVMCompiled(
            kernel.name,
            [n for n, _, _ in summary["checks"]],
            checks,
            native,
            summary["parallel"],
            self.threads,
            summary["groups"],
            summary["scratch"],
            self.cpu,
        )
