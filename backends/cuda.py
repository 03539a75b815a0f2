"""CUDA backend: kernel ASTs rendered to CUDA C, compiled by NVRTC (CuPy) or nvcc, run on CuPy arrays.

Rendering needs neither a GPU nor CuPy; `compile` does (CuPy is imported lazily). The launch plan (items,
phases, tensor-core matches, shared and split reductions) is egraph_compiler/kernel/gpu_launch.py's, which the
GPU estimate prices too; this module emits C from it.

How a kernel maps onto CUDA (the AST contract is in egraph_compiler/kernel/program.py)
------------------------------------------------------------------------------
* Every SINK item is a STORE under END(..., *ranges). Consecutive items with the same
  parallel ranges that do not touch each other's outputs form one *phase*. A kernel with
  several phases takes a trailing `int phase` argument and is launched once per phase.
* END ranges: GLOBAL -> blockIdx, LOCAL/WARP -> threadIdx, LOOP/THREAD -> for loops,
  UPCAST -> copies (below), UNROLL -> `#pragma unroll` loops. An item without GLOBAL ranges
  maps its LOOP/THREAD ranges onto the grid instead ("auto-parallel"), so unscheduled
  kernels run in parallel too.
* UPCAST END ranges (up to 64 combinations) are expanded: the store is emitted once per
  combination of their values, with the ranges substituted by constants, so the copies share
  every value that does not depend on them (hash-consing does the sharing). The copies'
  REDUCEs over the same ranges run in one loop with one accumulator each (a register tile:
  a 4x4 GEMM tile loads a column of A and a row of B once per k). Loads of consecutive
  elements, and the stores, become vector accesses (float2/float4, int4, double2; 2-byte
  types in 4/8/16-byte containers: half2 pairs up to 8 halves) where `vector_runs` proves the
  first element aligned for every value of the other ranges; buffers are then required to
  start on 16 bytes (fresh CuPy allocations do; a launch checks). Gated stores are expanded
  too, each copy under its own gate, without fusing or vectors.
* Grid: without block ranges (LOCAL/WARP/GROUP_REDUCE) the grid ranges are flattened over
  256-thread blocks with a tail predicate `if (gid >= n) return;`. With block ranges, grid
  ranges map one to one onto blockIdx.x/y/z (x innermost) when they fit (x < 2^31,
  y, z <= 65535), else consecutive ranges are merged into one hardware dim, else all are
  flattened over a 3D grid with a (block-uniform) tail predicate; indices are recovered
  with unsigned / and % by constants. Blocks hold at most 1024 threads.
* REDUCE ranges: REDUCE/LOOP/THREAD -> for loops around a register accumulator,
  UNROLL/UPCAST -> unrolled loops, GROUP_REDUCE -> one thread per index (innermost block
  dims) combined by a shared-memory tree reduction with __syncthreads; only group index 0
  stores. Loop-invariant values (including whole REDUCEs, e.g. the max inside a softmax
  sum) are hoisted out of loops.
* Block-shared REDUCEs: a REDUCE whose value is the same for every thread of the block (it
  depends on none of the ranges that vary inside the block: LOCAL/GROUP_REDUCE ones, or the
  innermost ranges a flat block spans) is split over the block's threads, which take its
  flattened iterations in turn, then combined by a __shfl_xor_sync butterfly and the warps'
  partials in shared memory; every thread gets the result. Only where the block runs the code
  in lockstep (SharedBlock: whole warps, no tail return; not under a data-dependent `if` or
  inside another shared loop) and for COOP_MIN_TRIPS iterations or more.
* Grid-split REDUCEs: a flat phase of one ungated item whose value holds one long REDUCE (a
  full sum: at least 4 blocks of 256 threads x 32 iterations per output, up to 1024 blocks)
  runs in two launches: every block takes its share of the iterations (the same strided loop
  and block combine as a block-shared REDUCE) and writes a partial to a scratch buffer
  (KernelPlan.scratch, allocated by the backend), then one block per output combines the
  partials and its first thread stores the value.
* Values: loads under WHERE branches or behind gates are emitted under `if`/`?:`, so
  guarded addresses are never touched. Integer IDIV/MOD are floor division/remainder
  as egraph_compiler/ir/floordiv.py defines them (x // 0 == x % 0 == 0), with only the
  guards that the operands' bounds (UOp.vmin/vmax) leave: C's bare / and % where both are
  proven non-negative and the divisor non-zero. Signed ADD/MUL/SHL wrap (computed unsigned),
  shift counts are clamped like the reference, float MAX propagates NaN. float16/bfloat16
  are stored as half/__nv_bfloat16, computed in float and rounded after every op; bool is
  one byte in memory; index arithmetic is `int` where UOp bounds prove it fits, else
  `long long`.

TC regions (tensor cores)
-------------------------
A kernel marks a tensor-core region with range tags only, so it stays a plain scalar AST
that the reference interpreter runs unchanged. A STORE item is rendered with
nvcuda::wmma (m16n16k16, float accumulation; float16 on sm_70+, bfloat16 on sm_80+) when
* its END ranges hold exactly two WARP ranges of size 16 (the tile's rows m and columns n);
  its other END ranges are GLOBAL/LOCAL/UPCAST (or LOOP/THREAD when there is no GLOBAL range),
  each UPCAST range selecting tiles of one operand (at most 16 tiles per warp);
* its value holds exactly one REDUCE(ADD) of dtype float32 with one UNROLL range of size 16
  (the tile's k); its body is MUL(CAST(LOAD a), CAST(LOAD b)), ungated loads of two
  float16 (or two bfloat16) buffers; its other ranges are sequential (REDUCE/LOOP/UNROLL);
* a's index is affine in (m, k) and b's in (k, n), with a unit stride on one of the two
  (row or column major), a leading dimension that is a multiple of 8 and a 32-byte aligned
  tile origin (every other coefficient and the constant are multiples of 16).
LOCAL ranges count warps of a block; a warp computes one tile per combination of the UPCAST
ranges, each with its accumulator fragment, and loads each operand fragment once per k step
for all the tiles that use it (register blocking). When the reduce has one sequential range
besides k, the block's operand tiles are staged in shared memory: every k step of a stage
(ks = 4, 2 or 1 steps, what fits in 48 KiB with two stages) the threads copy the block's A
rows and B columns with 16-byte cp.async (rows padded by 8 elements so ldmatrix reads hit
distinct banks), the next stage's copies run while the warps multiply the current one
(commit / wait_group 1 / __syncthreads), and the fragments load from shared memory. Else
(several sequential ranges) fragments load from global memory. Each accumulator goes through
a per-warp shared-memory tile to the store, which runs per tile element with m, n (and the
UPCAST ranges) bound, with any epilogue, gate or cast.
When a WARP-tagged item does not match, its WARP ranges are rendered as LOCAL ranges and
the kernel source says why. (Ops.WMMA, a codegen op, is not used in kernel ASTs.)

Not covered: cross-thread read-after-write within one phase (an in-place kernel reading
another thread's element), stores of several threads to one address (last writer wins in
the reference, any writer here), out-of-range float->int casts and INT_MIN // -1 (C
semantics), DEFINE_VAR in kernels.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from egraph_compiler.backends.cuda_toolchain import compile_cubin, cuda_include_dirs, find_nvcc, import_cupy
from egraph_compiler.ir.diagnostics import BackendError, CompilerError, UnsupportedOp
from egraph_compiler.ir.dtypes import DType, as_const, bf16_round, dtypes
from egraph_compiler.ir.floordiv import DivFacts, floor_divide
from egraph_compiler.ir.interpret import coerce_input
from egraph_compiler.ir.ops import OP_TABLE, AxisType, Ops
from egraph_compiler.ir.uop import UOp, range_name
from egraph_compiler.kernel.analysis import axis_type, index_of, range_size
from egraph_compiler.kernel.gpu_launch import (
    GRID_LIMITS,
    GridSplit,
    Item,
    LaunchPlan,
    Phase,
    SharedBlock,
    plan_launch,
    unsupported,
)
from egraph_compiler.kernel.program import BufferSpec, HostBuffers, Kernel, buffer_of
from egraph_compiler.kernel.tensor_cores import HALFS, TCMatch, TCOperand, TCStage, affine

# ---- C types -----------------------------------------------------------------------------------

_COMPUTE: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int8: "signed char",
    dtypes.int16: "short",
    dtypes.int32: "int",
    dtypes.int64: "long long",
    dtypes.uint8: "unsigned char",
    dtypes.uint16: "unsigned short",
    dtypes.uint32: "unsigned int",
    dtypes.uint64: "unsigned long long",
    dtypes.float16: "float",
    dtypes.bfloat16: "float",
    dtypes.float32: "float",
    dtypes.float64: "double",
    dtypes.index: "long long",
}
_STORAGE: dict[DType, str] = {
    **_COMPUTE,
    dtypes.bool: "unsigned char",
    dtypes.float16: "half",
    dtypes.bfloat16: "__nv_bfloat16",
}
_RAW: dict[int, str] = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_MAX_THREADS = 1024
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_AXES = "xyz"

_PRELUDE_CORE = """#ifndef EGC_CUDA_CORE
#define EGC_CUDA_CORE
// NaN-propagating float max
__device__ __forceinline__ float _egc_fmax(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ double _egc_fmax(double a, double b) { return (a != a || a > b) ? a : b; }
#endif"""
_PRELUDE_FP16 = """#ifndef EGC_CUDA_FP16
#define EGC_CUDA_FP16
#include <cuda_fp16.h>
__device__ __forceinline__ float _egc_rh(float x) { return __half2float(__float2half_rn(x)); }
#endif"""
_PRELUDE_BF16 = """#ifndef EGC_CUDA_BF16
#define EGC_CUDA_BF16
#include <cuda_bf16.h>
__device__ __forceinline__ float _egc_rb(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
#endif"""
_PRELUDE_ASYNC = """#ifndef EGC_CUDA_ASYNC
#define EGC_CUDA_ASYNC
// 16-byte global -> shared copies: asynchronous (cp.async, bypassing registers) on sm_80+, plain before
__device__ __forceinline__ void _egc_cp16(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" ::
               "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src));
#else
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
__device__ __forceinline__ void _egc_cp_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void _egc_cp_wait() {  // all but the newest N groups have landed
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\\n" :: "n"(N));
#endif
}
#endif"""
_PRELUDE_WMMA = """#ifndef EGC_CUDA_WMMA
#define EGC_CUDA_WMMA
#include <mma.h>
#endif"""


def _acc_dtype(d: DType) -> DType:
    """What a REDUCE of d accumulates in: 16-bit floats in float32."""
    return dtypes.float32 if d in HALFS else d


def c_storage_type(d: DType) -> str:
    """The C type of a buffer element of dtype d."""
    if d not in _STORAGE:
        raise UnsupportedOp(at=f"dtype {d.name}", why=f"{d.name} has no CUDA storage type", suggestion="use a numeric dtype")
    return _STORAGE[d]


_RESERVED = frozenset(
    {  # C++ words and CUDA builtins a kernel must not be named
        "alignas",
        "alignof",
        "and",
        "asm",
        "auto",
        "bool",
        "break",
        "case",
        "catch",
        "char",
        "class",
        "const",
        "constexpr",
        "continue",
        "default",
        "delete",
        "do",
        "double",
        "else",
        "enum",
        "explicit",
        "extern",
        "false",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "main",
        "max",
        "min",
        "namespace",
        "new",
        "not",
        "operator",
        "or",
        "private",
        "protected",
        "public",
        "register",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "switch",
        "template",
        "this",
        "throw",
        "true",
        "try",
        "typedef",
        "typename",
        "union",
        "unsigned",
        "using",
        "virtual",
        "void",
        "volatile",
        "while",
        "xor",
    }
)


def _ident(s: str, prefix: str) -> str:
    out = re.sub(r"[^0-9A-Za-z_]", "_", s)
    bad = not out or out[0].isdigit() or out in _RESERVED or out.startswith(("__", "_egc"))
    return f"{prefix}{out}" if bad else out


# ---- constants and conversions -----------------------------------------------------------------


def _c_const(v: Any, d: DType, ctype: str) -> str:
    if d.is_bool:
        return "true" if v else "false"
    if d.is_float:  # rounded to d first: a folded constant (1/3 as float16) may carry more precision
        f, dbl = float(as_const(v, d)), d is dtypes.float64
        if math.isnan(f):
            return "__longlong_as_double(0x7ff8000000000000LL)" if dbl else "__int_as_float(0x7fc00000)"
        if math.isinf(f):
            if dbl:
                return f"__longlong_as_double({'(long long)0xfff0000000000000ULL' if f < 0 else '0x7ff0000000000000LL'})"
            return f"__int_as_float({'(int)0xff800000u' if f < 0 else '0x7f800000'})"
        s = repr(f)
        if "e" not in s and "." not in s:
            s += ".0"
        s = s if dbl else s + "f"
        return f"({s})" if s.startswith("-") else s
    n = int(v)
    if ctype == "int":
        s = "(-2147483647 - 1)" if n == _INT_MIN else str(n)
    elif ctype == "long long":
        s = "(-9223372036854775807LL - 1)" if n == -(2**63) else f"{n}LL"
    elif ctype == "unsigned int":
        s = f"{n}u"
    elif ctype == "unsigned long long":
        s = f"{n}ull"
    else:
        s = f"(({ctype}){n})"
    return f"({s})" if s.startswith("-") else s


def _from_storage(e: str, d: DType) -> str:
    if d is dtypes.float16:
        return f"__half2float({e})"
    if d is dtypes.bfloat16:
        return f"__bfloat162float({e})"
    if d.is_bool:
        return f"({e} != 0)"
    return e


def _to_storage(e: str, d: DType) -> str:
    if d is dtypes.float16:
        return f"__float2half_rn({e})"
    if d is dtypes.bfloat16:
        return f"__float2bfloat16_rn({e})"
    if d.is_bool:
        return f"(unsigned char)({e})"
    return e


def _round(e: str, d: DType) -> str:
    """Round a float-computed value to d's precision (float16/bfloat16 only)."""
    if d is dtypes.float16:
        return f"_egc_rh({e})"
    if d is dtypes.bfloat16:
        return f"_egc_rb({e})"
    return e


def _cast(e: str, src: DType, dst: DType, ctype: str) -> str:
    if dst == src:
        return e
    if dst.is_bool:
        return f"({e} != 0)"
    if src.is_float and dst.is_int:  # truncate through 64 bits, as the reference does
        return f"(long long)({e})" if ctype == "long long" else f"({ctype})(long long)({e})"
    if dst is dtypes.float16:
        return f"__half2float(__double2half({e}))" if src is dtypes.float64 else f"_egc_rh((float)({e}))"
    if dst is dtypes.bfloat16:
        return f"_egc_rb((float)({e}))"
    return f"({ctype})({e})"


def _to_bits(e: str, d: DType) -> str:
    if d is dtypes.float32:
        return f"__float_as_uint({e})"
    if d is dtypes.float64:
        return f"(unsigned long long)__double_as_longlong({e})"
    if d is dtypes.float16:
        return f"__half_as_ushort(__float2half_rn({e}))"
    if d is dtypes.bfloat16:
        return f"__bfloat16_as_ushort(__float2bfloat16_rn({e}))"
    return f"({_RAW[d.itemsize]})({e})"


def _from_bits(e: str, d: DType, ctype: str) -> str:
    if d is dtypes.float32:
        return f"__uint_as_float({e})"
    if d is dtypes.float64:
        return f"__longlong_as_double((long long)({e}))"
    if d is dtypes.float16:
        return f"__half2float(__ushort_as_half({e}))"
    if d is dtypes.bfloat16:
        return f"__bfloat162float(__ushort_as_bfloat16({e}))"
    if d.is_bool:
        return f"({e} != 0)"
    return f"({ctype})({e})"


def _arith(op: Ops, d: DType, a: str, b: str, ctype: str) -> str:
    """a op b in d's semantics for the ops REDUCE can combine with (ADD, MUL, MAX)."""
    if d.is_bool:
        return f"({a} || {b})" if op in (Ops.ADD, Ops.MAX) else f"({a} && {b})"
    if op is Ops.MAX:
        return f"_egc_fmax({a}, {b})" if d.is_float else f"({a} > {b} ? {a} : {b})"
    sym = "+" if op is Ops.ADD else "*"
    if d.is_int and d is not dtypes.index and not (d.is_unsigned and d.bits >= 32):
        u = _RAW[max(d.itemsize, 4)]  # wrap around: compute unsigned
        return f"({ctype})(({u}){a} {sym} ({u}){b})"
    return f"({a} {sym} {b})"


# ---- plans -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    phase: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


@dataclass(frozen=True)
class KernelPlan:
    """A rendered kernel: C function name, source, parameters (buffer name, dtype) and launches in order."""

    name: str
    source: str
    params: tuple[tuple[str, DType], ...]
    launches: tuple[Launch, ...]
    phased: bool
    notes: tuple[str, ...] = ()
    aligned: frozenset[str] = frozenset()  # buffers read or written as vectors: 16-byte aligned base needed
    scratch: tuple[tuple[str, DType, int], ...] = ()  # (param, dtype, elements) the backend allocates itself


class _Scope:
    """Values computed so far, visible to nested C blocks."""

    def __init__(self, parent: _Scope | None = None) -> None:
        self.vals: dict[UOp, str] = {}
        self.parent = parent

    def holds(self, u: UOp) -> bool:
        return self.lookup(u) is not None

    def lookup(self, u: UOp) -> str | None:
        s: _Scope | None = self
        while s is not None:
            if u in s.vals:
                return s.vals[u]
            s = s.parent
        return None


# ---- upcast lanes and vector accesses ----------------------------------------------------------

_VECTOR_BYTES = (16, 8, 4)
# element types with a CUDA vector type (float4, int2, ...); 2-byte types travel in raw containers
_VECTOR_NAMES: dict[DType, str] = {
    dtypes.float32: "float",
    dtypes.int32: "int",
    dtypes.uint32: "uint",
    dtypes.float64: "double",
    dtypes.int64: "longlong",
    dtypes.uint64: "ulonglong",
}
_RAW_CONTAINERS = {4: "unsigned int", 8: "uint2", 16: "uint4"}
_VECTOR_DTYPES = frozenset(_VECTOR_NAMES) | {dtypes.float16, dtypes.bfloat16, dtypes.int16, dtypes.uint16}

# ---- block-shared reductions -----------------------------------------------------------------


def vector_type(d: DType, width: int) -> str:
    """The C type that moves `width` elements of d in one access: float4, double2, uint4 (8 halves), ..."""
    return f"{_VECTOR_NAMES[d]}{width}" if d in _VECTOR_NAMES else _RAW_CONTAINERS[width * d.itemsize]


def _lane(container: str, d: DType, k: int) -> str:
    """Element k of a vector container, in storage type."""
    if d in _VECTOR_NAMES:
        return f"{container}.{'xyzw'[k]}"
    return f"reinterpret_cast<const {_STORAGE[d]}*>(&{container})[{k}]"


def vector_runs(accesses: Sequence[tuple[UOp, UOp | None]]) -> list[list[int]]:
    """Partition accesses (BUFFER, index) into runs of one vector access each, in order of first member.

    A run is W >= 2 accesses to consecutive elements of one buffer whose first index is a multiple of W whatever
    the ranges' values (affine, every coefficient and the constant multiples of W), W elements filling 4, 8 or 16
    bytes: with a buffer allocated on a 16-byte boundary the vector access is aligned. Everything else is a run
    of one."""
    runs: list[list[int]] = []
    groups: dict[tuple[UOp, frozenset[tuple[UOp | None, int]]], dict[int, int]] = {}
    for k, (buf, idx) in enumerate(accesses):
        aff = affine(idx) if idx is not None else {None: 0}
        if aff is None or buf.dtype not in _VECTOR_DTYPES:
            runs.append([k])
            continue
        offsets = groups.setdefault((buf, frozenset((r, c) for r, c in aff.items() if r is not None and c)), {})
        if aff.get(None, 0) in offsets:  # the same element twice: keep both, in order
            runs.append([k])
        else:
            offsets[aff.get(None, 0)] = k
    for (buf, terms), offsets in groups.items():
        taken: set[int] = set()
        for o in sorted(offsets):
            if o in taken:
                continue
            width = 1
            for nbytes in _VECTOR_BYTES:
                w = nbytes // buf.dtype.itemsize
                if (
                    w >= 2
                    and o % w == 0
                    and all(c % w == 0 for _, c in terms)
                    and all(o + i in offsets and o + i not in taken for i in range(w))
                ):
                    width = w
                    break
            taken.update(range(o, o + width))
            runs.append([offsets[o + i] for i in range(width)])
    return sorted(runs, key=min)


# ---- the renderer ------------------------------------------------------------------------------


def _reduce_ranges(u: UOp) -> list[UOp]:
    """A REDUCE's ranges, checked: an op CUDA reduces with and ranges it may reduce over (a range of one proven
    0 binds nothing and is left out)."""
    if u.arg[0] not in (Ops.ADD, Ops.MUL, Ops.MAX):
        raise unsupported("REDUCE", f"reduce op {u.arg[0]} is not ADD, MUL or MAX")
    rngs = [r for r in u.src[1:] if r.op is not Ops.CONST]
    for r in rngs:
        if r.op is not Ops.RANGE:
            raise unsupported("REDUCE", "REDUCE sources after the value must be RANGEs")
        if axis_type(r) in (AxisType.GLOBAL, AxisType.LOCAL, AxisType.WARP):
            raise unsupported(
                f"RANGE {r.arg[0]!r}",
                f"a {axis_type(r).name} range cannot be reduced over",
                "reduce over REDUCE, UNROLL or GROUP_REDUCE ranges",
            )
    return rngs


class _CInts:
    """IDIV/MOD's integer operations in C (ir/floordiv.py): each step a `const` local before the node's line."""

    def __init__(self, r: _Renderer, t: str) -> None:
        self.r, self.t = r, t
        self.raw = "unsigned long long" if "long" in t else "unsigned int"  # 0 - INT_MIN wraps in unsigned
        self.last: tuple[str, str] | None = None  # the last local bound, and its expression

    def bind(self, expr: str, t: str | None = None) -> str:
        v = self.r.fresh("d")
        self.r.line(f"const {t or self.t} {v} = {expr};")
        self.last = (v, expr)
        return v

    def value(self, v: str) -> str:
        """The node's value: the last step's expression itself, not a copy of its local."""
        if self.last is None or self.last[0] != v:
            return v
        self.r.lines.pop()
        return self.last[1]

    def const(self, v: int) -> str:
        return f"({self.t}){v}"

    def eq(self, x: str, v: int) -> str:
        return self.bind(f"{x} == {self.const(v)}", "bool")

    def either(self, p: str, q: str) -> str:
        return self.bind(f"{p} || {q}", "bool")

    def select(self, c: str, x: str, y: str) -> str:
        return self.bind(f"{c} ? {x} : {y}")

    def tdiv(self, a: str, b: str, unsigned: bool) -> str:
        return self.bind(f"({a}/{b})")

    def trem(self, a: str, b: str, unsigned: bool) -> str:
        return self.bind(f"({a}%{b})")

    def needs_floor(self, r: str, b: str) -> str:
        return self.bind(f"{r} != 0 && ({r} ^ {b}) < 0", "bool")

    def dec_if(self, c: str, q: str) -> str:
        return self.bind(f"{q} - ({self.t}){c}")

    def add_if(self, c: str, r: str, b: str) -> str:
        return self.bind(f"{c} ? ({self.t})({r} + {b}) : {r}")

    def neg(self, x: str) -> str:
        return self.bind(f"({self.t})(({self.raw})0 - ({self.raw}){x})")


class _Renderer:
    """C emission of a kernel's launch plan (kernel/gpu_launch.py: phases, thread mappings, tensor cores, shared
    and grid-split reductions): every decision is the plan's, the renderer only writes it out."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.launch = plan
        self.kernel = plan.kernel
        self.notes = plan.notes
        self.evaluation = plan.evaluation
        self.lines: list[str] = []
        self.depth = 0
        self.count = 0
        self.cond = 0  # nesting of data-dependent `if`s (no barriers allowed inside)
        self.diverge = 0  # nesting of loops whose trip count differs between threads (block-shared REDUCE bodies)
        self.shared: SharedBlock | None = None
        self.uses: set[str] = set()
        self.rnames: dict[UOp, str] = {}
        self.params: dict[str, tuple[str, DType]] = {}  # buffer name -> (C name, dtype)
        self.block_total = 1
        self.tid: str | None = None
        self.gid_suffix = "u"
        self.strides: dict[UOp, int] = {}
        self.aligned: set[str] = set()

    # ---- analysis -------------------------------------------------------------------------------

    def ctype(self, u: UOp) -> str:
        if u.dtype is dtypes.index:
            if u.op is Ops.RANGE:
                return "int" if range_size(u) <= 2**31 else "long long"
            return "int" if u.vmin >= _INT_MIN and u.vmax <= _INT_MAX else "long long"
        if u.dtype not in _COMPUTE:
            raise unsupported(u.op.name, f"dtype {u.dtype.name} has no CUDA type")
        return _COMPUTE[u.dtype]

    # ---- output ---------------------------------------------------------------------------------

    def line(self, s: str) -> None:
        self.lines.append("  " * self.depth + s)

    def open(self, head: str) -> None:
        self.line(f"{head} {{" if head else "{")
        self.depth += 1

    def close(self) -> None:
        self.depth -= 1
        self.line("}")

    def fresh(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def rname(self, r: UOp) -> str:
        if r not in self.rnames:
            base = _ident(range_name(r), "r")
            name, k = base, 1
            while name in self.rnames.values():
                k += 1
                name = f"{base}_{k}"
            self.rnames[r] = name
        return self.rnames[r]

    def param(self, buf: UOp) -> str:
        name, dt = buf.arg[0], buf.dtype
        if name not in self.params:
            self.params[name] = (_ident(f"buf_{name}", "buf_"), dt)
        elif self.params[name][1] != dt:
            raise unsupported(f"buffer {name!r}", f"used as {self.params[name][1].name} and as {dt.name}")
        self.track(dt)
        return self.params[name][0]

    def track(self, d: DType) -> None:
        if d is dtypes.float16:
            self.uses.add("fp16")
        elif d is dtypes.bfloat16:
            self.uses.add("bf16")

    # ---- values ---------------------------------------------------------------------------------

    def val(self, u: UOp, scope: _Scope) -> str:
        hit = scope.lookup(u)
        if hit is not None:
            return hit
        if u.op is Ops.CONST:
            self.track(u.dtype)
            return _c_const(u.arg, u.dtype, self.ctype(u))
        for n in self.evaluation.uncond_order([u], scope.holds):
            self.emit_node(n, scope)
        out = scope.lookup(u)
        assert out is not None
        return out

    def hoist(self, roots: Iterable[UOp], scope: _Scope, inner: set[UOp]) -> None:
        """Emit in `scope` what `roots` evaluate unconditionally and does not depend on `inner` ranges."""
        for n in self.evaluation.uncond_order(roots, scope.holds):
            if n.op is Ops.RANGE or self.launch.deps(n) & inner:
                continue
            if all(scope.lookup(r) is not None for r in self.launch.deps(n)) and scope.lookup(n) is None:
                self.emit_node(n, scope)

    def pre_group(self, root: UOp, scope: _Scope) -> None:
        """Emit group reductions (they hold barriers) before any data-dependent branch, also those nested in another
        REDUCE's body that do not depend on its ranges (hoisted out of its loop)."""
        found = [
            u
            for u in root.toposort()
            if u.op is Ops.REDUCE and any(r.op is Ops.RANGE and axis_type(r) is AxisType.GROUP_REDUCE for r in u.src[1:])
        ]
        for u in found:
            if all(scope.lookup(r) is not None for r in self.launch.deps(u)):
                self.val(u, scope)

    def emit_node(self, n: UOp, scope: _Scope) -> None:
        if n.op is Ops.RANGE:
            raise unsupported(
                f"RANGE {n.arg[0]!r}",
                "the range is used where no END or REDUCE binds it",
                "close every range the stored value uses with END or REDUCE",
            )
        if n.op is Ops.LOAD:
            return self.emit_load(n, scope)
        if n.op is Ops.REDUCE:
            return self.emit_reduce(n, scope)
        if n.op is Ops.WHERE and (self.evaluation.unsafe(n.src[1]) or self.evaluation.unsafe(n.src[2])):
            return self.emit_guarded_where(n, scope)
        if n.op is Ops.DEFINE_VAR:
            raise unsupported(
                f"variable {n.arg[0]!r}", "CUDA kernels here take no symbolic variables", "bind variables before lowering"
            )
        spec = OP_TABLE[n.op]
        if not (spec.is_alu or n.op is Ops.BITCAST):
            raise unsupported(n.op.name, f"{n.op.name} cannot appear in a kernel value")
        args = [self.val(s, scope) for s in n.src]
        v, t = self.fresh(), self.ctype(n)
        self.track(n.dtype)
        scope.vals[n] = v
        self.line(f"const {t} {v} = {self.alu(n, args)};")

    def emit_load(self, n: UOp, scope: _Scope) -> None:
        ptr = n.src[0]
        buf = buffer_of(ptr)
        p, idx = self.param(buf), index_of(ptr)
        v, t = self.fresh(), self.ctype(n)
        scope.vals[n] = v
        if len(n.src) <= 2:
            self.line(f"const {t} {v} = {_from_storage(f'{p}[{self.val(idx, scope) if idx is not None else 0}]', buf.dtype)};")
            return
        g, alt = self.val(n.src[2], scope), self.val(n.src[1], scope)
        if idx is None or not self.evaluation.unsafe(idx):
            i = self.val(idx, scope) if idx is not None else "0"
            self.line(f"const {t} {v} = {g} ? {_from_storage(f'{p}[{i}]', buf.dtype)} : {alt};")
            return
        self.line(f"{t} {v} = {alt};")
        self.open(f"if ({g})")
        self.cond += 1
        inner = _Scope(scope)
        self.line(f"{v} = {_from_storage(f'{p}[{self.val(idx, inner)}]', buf.dtype)};")
        self.cond -= 1
        self.close()

    def emit_guarded_where(self, n: UOp, scope: _Scope) -> None:
        c = self.val(n.src[0], scope)
        v, t = self.fresh(), self.ctype(n)
        self.line(f"{t} {v};")
        for head, branch in ((f"if ({c})", n.src[1]), ("else", n.src[2])):
            self.open(head)
            self.cond += 1
            self.line(f"{v} = {self.val(branch, _Scope(scope))};")
            self.cond -= 1
            self.close()
        scope.vals[n] = v

    def alu(self, n: UOp, a: list[str]) -> str:
        op, d = n.op, n.dtype
        t = self.ctype(n)
        if op is Ops.CAST:
            return _cast(a[0], n.src[0].dtype, d, t)
        if op is Ops.BITCAST:
            return _from_bits(_to_bits(a[0], n.src[0].dtype), d, t)
        if op is Ops.WHERE:
            return f"({a[0]} ? {a[1]} : {a[2]})"
        # index arithmetic: computed in `int` only where operands and result provably fit
        if d is dtypes.index:
            wide = t == "long long" or any(self.ctype(s) == "long long" for s in n.src if s.dtype is dtypes.index)
            t = "long long" if wide else "int"
            a = [
                f"(long long){x}" if wide and s.dtype is dtypes.index and self.ctype(s) == "int" else x
                for x, s in zip(a, n.src)
            ]
        if op in (Ops.ADD, Ops.MUL, Ops.MAX):
            return _round(_arith(op, d, a[0], a[1], t), d) if op is not Ops.MAX else _arith(op, d, a[0], a[1], t)
        if op in (Ops.IDIV, Ops.MOD):
            ints = _CInts(self, t)
            return ints.value(floor_divide(ints, a[0], a[1], DivFacts.of(*n.src), remainder=op is Ops.MOD))
        if op in (Ops.SHL, Ops.SHR):
            s, top, sh = n.src[1], d.bits - 1, a[1]
            if s.vmax > top:  # shift counts are clamped to [0, bits-1], as in the reference
                sh = f"({sh} > {top} ? {top} : {sh})"
            if s.vmin < 0:
                sh = f"({a[1]} < 0 ? 0 : {sh})"
            if op is Ops.SHR:
                return f"({t})({a[0]} >> {sh})"
            return f"({t})(({_RAW[max(d.itemsize, 4)]}){a[0]} << {sh})"
        if op is Ops.TRUNC and not d.is_float:
            return a[0]
        tmpl = OP_TABLE[op].c
        if tmpl is None:
            raise unsupported(op.name, f"{op.name} has no C spelling in the op table")
        if op in (Ops.TRUNC, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT) and t == "float":
            tmpl = re.sub(r"^(\w+)\(", r"\1f(", tmpl)  # float versions: exp2f, sinf, ...
        expr = tmpl.format(*a)
        return _round(expr, d) if op in (Ops.RECIP, Ops.FDIV, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT) else expr

    # ---- reduce ---------------------------------------------------------------------------------

    def emit_reduce(self, u: UOp, scope: _Scope) -> None:
        self.emit_reduces([u], scope)

    def emit_reduces(self, us: list[UOp], scope: _Scope, finish: bool = True) -> list[str]:
        """REDUCEs of one op and dtype over the same ranges (an upcast's lanes) in one loop nest, one accumulator
        each: the lanes' loads that do not depend on the lane are shared, and the accumulations interleave.
        Returns the accumulators; `finish=False` leaves them unrounded and the REDUCEs' values undefined."""
        u = us[0]
        op, d, t = u.arg[0], u.dtype, self.ctype(u)
        rngs = _reduce_ranges(u)
        if any(range_size(r) == 0 for r in rngs):  # empty reduction: 0, as the reference
            for x in us:
                scope.vals[x] = _c_const(0, d, t)
            return [scope.vals[x] for x in us]
        acc_d = _acc_dtype(d)
        group = [r for r in rngs if axis_type(r) is AxisType.GROUP_REDUCE]
        seq = [r for r in rngs if r not in group]
        if group and self.cond:
            raise unsupported(
                "REDUCE",
                "a GROUP_REDUCE reduction sits under a data-dependent condition",
                "move the group reduction out of WHERE branches and gated stores",
            )
        init = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: acc_d.min}[op]
        accs = [self.fresh("acc") for _ in us]
        for acc in accs:
            self.line(f"{t} {acc} = {_c_const(init, acc_d, t)};")
        bodies = [x.src[0] for x in us]
        self.hoist(bodies, scope, set(seq))
        shared = self.shared if not (self.cond or self.diverge) else None
        coop = shared if shared is not None and all(self.launch.cooperative(x, shared) for x in us) else None
        inner = self.open_reduce_loops(seq, scope, coop)
        for body in bodies:
            self.pre_group(body, inner)
        if len(us) > 1:
            self.vector_loads(bodies, inner)
        for acc, body in zip(accs, bodies):
            self.line(f"{acc} = {_arith(op, acc_d, acc, self.val(body, inner), t)};")
        if coop is not None:
            self.diverge -= 1
            self.close()
            accs = self.block_combine(op, acc_d, t, accs, coop)
        else:
            for _ in seq:
                self.close()
        if finish:
            self.finish_reduces(us, accs, group, scope)
        return accs

    def open_reduce_loops(self, seq: list[UOp], scope: _Scope, coop: SharedBlock | None) -> _Scope:
        """Open a reduction's loops over its sequential ranges; returns the scope of its body. `coop`: the block's
        threads take the flattened iterations in turn (consecutive ones: coalesced), one loop."""
        if coop is None:
            for r in seq:
                self.open_loop(r)
                scope = _Scope(scope)
                scope.vals[r] = self.rname(r)
            return scope
        total, j = math.prod(range_size(r) for r in seq), self.fresh("j")
        step = coop.threads * coop.parts
        start = coop.ltid if coop.parts == 1 else f"{coop.part} * {coop.threads}u + {coop.ltid}"
        jt = "int" if total + step <= _INT_MAX else "long long"
        self.open(f"for ({jt} {j} = {start}; {j} < {total}; {j} += {step})")
        inner = _Scope(scope)
        self.decompose(j, seq, "", inner)
        self.diverge += 1
        return inner

    def finish_reduces(self, us: list[UOp], accs: list[str], group: list[UOp], scope: _Scope) -> None:
        """The REDUCEs' values from their accumulators: combined over the group's threads, rounded to 16 bits."""
        op, d, t = us[0].arg[0], us[0].dtype, self.ctype(us[0])
        acc_d = dtypes.float32 if d in HALFS else d
        for x, acc in zip(us, accs):
            if group:
                acc = self.group_tree(op, acc_d, t, acc, group)
            if d in HALFS:
                res = self.fresh()
                self.line(f"const float {res} = {_round(acc, d)};")
                acc = res
            scope.vals[x] = acc

    def open_loop(self, r: UOp) -> None:
        name, t = self.rname(r), self.ctype(r)
        if axis_type(r) in (AxisType.UPCAST, AxisType.UNROLL):
            self.line("#pragma unroll")
        self.open(f"for ({t} {name} = 0; {name} < {_c_const(range_size(r), dtypes.index, t)}; ++{name})")

    def block_combine(self, op: Ops, d: DType, t: str, accs: list[str], shared: SharedBlock) -> list[str]:
        """Combine each accumulator over the block, every thread getting the result: a butterfly of shuffles in
        each warp, then the warps' partials through shared memory."""
        self.line("#pragma unroll")
        self.open("for (int o = 16; o > 0; o >>= 1)")
        for acc in accs:  # bound first: the op may name its operands twice (an integer max is a ?: )
            other = self.fresh("lane")
            self.line(f"const {t} {other} = __shfl_xor_sync(0xffffffffu, {acc}, o);")
            self.line(f"{acc} = {_arith(op, d, acc, other, t)};")
        self.close()
        warps = shared.threads // 32
        if warps == 1:
            return accs
        sm, lt = self.fresh("smem"), shared.ltid
        self.line(f"__shared__ {t} {sm}[{len(accs)}][{warps}];")
        self.open(f"if (({lt} & 31u) == 0u)")
        for k, acc in enumerate(accs):
            self.line(f"{sm}[{k}][{lt} >> 5] = {acc};")
        self.close()
        self.line("__syncthreads();")
        out = []
        for k in range(len(accs)):
            res = self.fresh("red")
            self.line(f"{t} {res} = {sm}[{k}][0];")
            self.line(f"for (int w = 1; w < {warps}; ++w) {res} = {_arith(op, d, res, f'{sm}[{k}][w]', t)};")
            out.append(res)
        self.line("__syncthreads();")  # the array is written again when this code runs in a loop
        return out

    def group_tree(self, op: Ops, d: DType, t: str, acc: str, group: list[UOp]) -> str:
        if self.tid is None:
            raise unsupported("GROUP_REDUCE", "group reduction outside a phase with group ranges")
        sm, tid = self.fresh("smem"), self.tid
        self.line(f"__shared__ {t} {sm}[{self.block_total}];")
        self.line(f"{sm}[{tid}] = {acc};")
        self.line("__syncthreads();")
        for g in group:
            n, stride, name = range_size(g), self.strides[g], self.rname(g)
            s = 1 << max(0, (n - 1).bit_length() - 1)
            if n > 1:
                self.open(f"for (int s = {s}; s > 0; s >>= 1)")
                self.line(
                    f"if ({name} < s && {name} + s < {n}) "
                    f"{sm}[{tid}] = {_arith(op, d, f'{sm}[{tid}]', f'{sm}[{tid} + s * {stride}]', t)};"
                )
                self.line("__syncthreads();")
                self.close()
        res = self.fresh()
        base = " - ".join([tid] + [f"{self.rname(g)} * {self.strides[g]}" for g in group])
        self.line(f"const {t} {res} = {sm}[{base}];")
        self.line("__syncthreads();")
        return res

    # ---- stores ---------------------------------------------------------------------------------

    def stored(self, st: UOp, scope: _Scope) -> tuple[str, str]:
        """(index, value in the buffer's storage type) of a STORE."""
        buf, idx, value = buffer_of(st.src[0]), index_of(st.src[0]), st.src[1]
        i = self.val(idx, scope) if idx is not None else "0"
        v = self.val(value, scope)
        if value.dtype != buf.dtype:
            v = _cast(v, value.dtype, buf.dtype, _COMPUTE[buf.dtype])
        return i, _to_storage(v, buf.dtype)

    def emit_store(self, st: UOp, scope: _Scope, pred: str | None) -> None:
        p = self.param(buffer_of(st.src[0]))
        if len(st.src) > 2:
            g = self.val(st.src[2], scope)
            self.open(f"if ({g}{f' && {pred}' if pred else ''})")
            self.cond += 1
            i, v = self.stored(st, _Scope(scope))
            self.line(f"{p}[{i}] = {v};")
            self.cond -= 1
            self.close()
        else:
            i, v = self.stored(st, scope)
            self.line(f"if ({pred}) {p}[{i}] = {v};" if pred else f"{p}[{i}] = {v};")

    def emit_item(self, item: Item, scope: _Scope, pred: str | None) -> None:
        if any(range_size(r) == 0 for r in item.loop):  # an empty loop nest stores nothing
            return
        if item.tc is not None:
            return self.emit_tc(item, item.tc, scope)
        st = item.store
        lanes = item.lanes
        loops = [r for r in item.seq if r not in lanes]
        roots = [st.src[2]] if len(st.src) > 2 else [s for s in (index_of(st.src[0]), st.src[1]) if s is not None]
        cur = scope
        for j, r in enumerate(loops):
            self.hoist(roots, cur, set(loops[j:]) | set(lanes))
            self.open_loop(r)
            cur = _Scope(cur)
            cur.vals[r] = self.rname(r)
        self.pre_group(st, cur)
        if lanes:
            self.emit_lanes(st, lanes, cur, pred)
        else:
            self.emit_store(st, cur, pred)
        for _ in loops:
            self.close()

    def emit_lanes(self, st: UOp, lanes: list[UOp], scope: _Scope, pred: str | None) -> None:
        """An upcast store, expanded: one copy per combination of lane values (tinygrad's expander). Copies share
        what does not depend on the lanes, their REDUCEs run in one loop, and consecutive aligned loads and stores
        become vector accesses (float4, half2 pairs, ...)."""
        combos = itertools.product(*(range(range_size(r)) for r in lanes))
        stores = [st.substitute({r: UOp.const(v, r.dtype) for r, v in zip(lanes, c)}) for c in combos]
        if len(st.src) > 2:  # gated: each copy under its own gate (group reductions, with barriers, before)
            for s in stores:
                self.pre_group(s, scope)
            for s in stores:
                self.emit_store(s, scope, pred)
            return
        values = [s.src[1] for s in stores]
        reduces: dict[tuple[Any, ...], list[UOp]] = {}
        for n in self.evaluation.uncond_order(values, scope.holds):
            if n.op is Ops.REDUCE and all(scope.lookup(r) is not None for r in self.launch.deps(n)):
                reduces.setdefault((n.arg, n.dtype, n.src[1:]), []).append(n)
        for us in reduces.values():
            if len(us) > 1:
                self.emit_reduces(us, scope)
        for s in stores:
            self.pre_group(s, scope)
        self.vector_loads([x for s in stores for x in (s.src[1], index_of(s.src[0])) if x is not None], scope)
        buf = buffer_of(st.src[0])
        p, written = self.param(buf), [self.stored(s, scope) for s in stores]
        guard = f"if ({pred}) " if pred else ""
        for run in vector_runs([(buf, index_of(s.src[0])) for s in stores]):
            i = written[run[0]][0]
            if len(run) == 1:
                self.line(f"{guard}{p}[{i}] = {written[run[0]][1]};")
                continue
            vt, vals = vector_type(buf.dtype, len(run)), ", ".join(written[k][1] for k in run)
            self.aligned.add(buf.arg[0])
            if buf.dtype in _VECTOR_NAMES:
                self.line(f"{guard}*reinterpret_cast<{vt}*>({p} + {i}) = make_{vt}({vals});")
            else:
                tmp = self.fresh("pack")
                self.line(f"__align__(16) {_STORAGE[buf.dtype]} {tmp}[{len(run)}] = {{{vals}}};")
                self.line(f"{guard}*reinterpret_cast<{vt}*>({p} + {i}) = *reinterpret_cast<const {vt}*>({tmp});")

    def vector_loads(self, roots: list[UOp], scope: _Scope) -> None:
        """Emit the loads `roots` evaluate unconditionally in `scope` as vector loads where they form runs."""
        loads = [
            n
            for n in self.evaluation.uncond_order(roots, scope.holds)
            if n.op is Ops.LOAD
            and len(n.src) <= 2
            and all(scope.lookup(r) is not None for r in self.launch.deps(n))
            and not self.evaluation.unsafe(n.src[0])
        ]
        for run in vector_runs([(buffer_of(n.src[0]), index_of(n.src[0])) for n in loads]):
            if len(run) == 1:
                continue
            first = loads[run[0]]
            buf, idx = buffer_of(first.src[0]), index_of(first.src[0])
            p, vt, vec = self.param(buf), vector_type(buf.dtype, len(run)), self.fresh("vec")
            self.aligned.add(buf.arg[0])
            i = self.val(idx, scope) if idx is not None else "0"
            self.line(f"const {vt} {vec} = *reinterpret_cast<const {vt}*>({p} + {i});")
            for k, j in enumerate(run):
                v = self.fresh()
                self.line(f"const {self.ctype(loads[j])} {v} = {_from_storage(_lane(vec, buf.dtype, k), buf.dtype)};")
                scope.vals[loads[j]] = v

    # ---- tensor cores ---------------------------------------------------------------------------

    def emit_grid_split(
        self, it: Item, split: GridSplit, part: int, partials: UOp, scope: _Scope
    ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """Launch `part` of a grid-split phase: 0, each block's partial of the REDUCE (its threads take every
        parts * threads-th iteration, combined over the block); 1, one block per output combines the partials,
        then its first thread stores the value. Returns (grid, block)."""
        u, sb = split.reduce, split.block
        op, acc_d, t = u.arg[0], _acc_dtype(u.dtype), self.ctype(u)
        self.block_total = sb.threads
        blocks = split.outputs * sb.parts if part == 0 else split.outputs
        if it.grid:
            self.decompose(f"(blockIdx.x / {sb.parts}u)" if part == 0 else "blockIdx.x", it.grid, "u", scope)
        if part == 0:
            self.shared = sb
            (acc,) = self.emit_reduces([u], scope, finish=False)
            self.shared = None
            self.open("if (threadIdx.x == 0u)")
            self.line(f"{self.param(partials)}[blockIdx.x] = {acc};")
            self.close()
            return (blocks, 1, 1), (sb.threads, 1, 1)
        acc, j = self.fresh("acc"), self.fresh("j")
        self.line(f"{t} {acc} = {_c_const({Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: acc_d.min}[op], acc_d, t)};")
        self.open(f"for (int {j} = threadIdx.x; {j} < {sb.parts}; {j} += {sb.threads})")
        self.line(f"{acc} = {_arith(op, acc_d, acc, f'{self.param(partials)}[blockIdx.x * {sb.parts}u + {j}]', t)};")
        self.close()
        self.finish_reduces([u], self.block_combine(op, acc_d, t, [acc], replace(sb, parts=1)), [], scope)
        self.shared = None
        self.cond += 1
        self.open("if (threadIdx.x == 0u)")
        self.emit_store(it.store, scope, None)
        self.close()
        self.cond -= 1
        return (blocks, 1, 1), (sb.threads, 1, 1)

    def tc_step(
        self,
        tc: TCMatch,
        combos: list[tuple[int, ...]],
        accs: list[str],
        source: Callable[[int, dict[UOp, int]], tuple[str, int]],
    ) -> None:
        """One k step of 16: each operand tile the warp's accumulators need is loaded once (`source`: pointer and
        leading dimension of operand 0/1 at the given UPCAST values), then every accumulator takes its MMA."""
        frags: dict[tuple[int, tuple[int, ...]], str] = {}
        for side, ((_, ix, layout, _), use) in enumerate(((tc.a, "matrix_a"), (tc.b, "matrix_b"))):
            mine = [j for j, r in enumerate(tc.ups) if r in self.launch.deps(ix)]
            for c in combos:
                key = (side, tuple(c[j] for j in mine))
                if key in frags:
                    continue
                f = frags[key] = self.fresh("frag")
                ptr, ldm = source(side, {tc.ups[j]: c[j] for j in mine})
                self.line(f"nvcuda::wmma::fragment<nvcuda::wmma::{use}, 16, 16, 16, {tc.elem}, nvcuda::wmma::{layout}> {f};")
                self.line(f"nvcuda::wmma::load_matrix_sync({f}, {ptr}, {ldm});")
        for c, acc in zip(combos, accs):
            ka = tuple(c[j] for j, r in enumerate(tc.ups) if r in self.launch.deps(tc.a[1]))
            kb = tuple(c[j] for j, r in enumerate(tc.ups) if r in self.launch.deps(tc.b[1]))
            self.line(f"nvcuda::wmma::mma_sync({acc}, {frags[(0, ka)]}, {frags[(1, kb)]}, {acc});")

    def tc_direct(self, tc: TCMatch, combos: list[tuple[int, ...]], accs: list[str], scope: _Scope) -> None:
        """The k loop loading fragments straight from global memory (through L1)."""
        zero = UOp.const(0, dtypes.index)
        seq = [r for r in tc.reduce.src[1:] if r is not tc.k]
        inner = scope
        for r in seq:
            self.open_loop(r)
            inner = _Scope(inner)
            inner.vals[r] = self.rname(r)
        sides = ((tc.a, tc.m), (tc.b, tc.n))

        def source(side: int, ups: dict[UOp, int]) -> tuple[str, int]:
            (buf, ix, _, ldm), w = sides[side]
            at = {w: zero, tc.k: zero, **{r: UOp.const(v, dtypes.index) for r, v in ups.items()}}
            return f"{self.param(buf)} + {self.val(ix.substitute(at), inner)}", ldm

        self.tc_step(tc, combos, accs, source)
        for _ in seq:
            self.close()

    def tc_staged(
        self, item: Item, tc: TCMatch, st: TCStage, combos: list[tuple[int, ...]], accs: list[str], scope: _Scope
    ) -> None:
        """The k loop over stages of `st.ks` k steps: the block's threads copy the next stage's operand tiles to
        shared memory (cp.async, 16 bytes each) while the warps multiply the current one."""
        self.uses.add("async")
        threads = 32 * math.prod(range_size(r) for r in item.block)
        trips = (range_size(st.loop) if st.loop is not None else 1) // st.ks
        ltid = self.fresh("ltid")
        self.line(f"const int {ltid} = threadIdx.x + 32 * threadIdx.y;")
        smem, bases, sizes = [], [], []
        for op, w in ((st.a, tc.m), (st.b, tc.n)):
            size = st.ks * 16 * op.pitch
            name = self.fresh("stage")
            self.line(f"__shared__ __align__(128) {tc.elem} {name}[{2 * size}];")
            aff = affine(op.index) or {}
            inside = {w, tc.k, *op.tiles, st.loop}  # the rest (grid ranges) is the same for the whole block
            ll = "ll" if op.buf.arg[1][0] >= 2**31 else ""
            bases.append(
                " + ".join(
                    [f"{self.val(r, scope)} * {cf}{ll}" for r, cf in aff.items() if r is not None and r not in inside and cf]
                    + [f"{aff.get(None, 0)}{ll}"]
                )
            )
            smem.append(name)
            sizes.append(size)
            self.aligned.add(op.buf.arg[0])

        def tile_strides(op: TCOperand) -> dict[UOp, int]:
            out, stride = {}, 16
            for r in reversed(op.tiles):
                out[r] = stride
                stride *= range_size(r)
            return out

        def load(t: str, stage: str) -> None:
            for k, (op, w) in enumerate(((st.a, tc.m), (st.b, tc.n))):
                aff = affine(op.index) or {}
                unit, strided = (w, tc.k) if aff.get(w) == 1 else (tc.k, w)
                dims = [(16, aff.get(strided, 0), op.pitch)]  # (count, global stride, shared stride)
                dims += [(range_size(r), aff.get(r, 0), ss) for r, ss in tile_strides(op).items()]
                if st.ks > 1 and st.loop is not None:
                    dims.append((st.ks, aff.get(st.loop, 0), 16 * op.pitch))
                dims.sort(key=lambda d: -d[1])
                dims.append((2, 8, 8))  # two 16-byte vectors of 8 elements along the unit-stride side
                assert aff.get(unit) == 1
                total = math.prod(d[0] for d in dims)
                wide = op.buf.arg[1][0] >= 2**31
                it = self.fresh("c")
                self.open(f"for (int {it} = {ltid}; {it} < {total}; {it} += {threads})")
                g, sh, stride = [], [], 1
                for cnt, gs, ss in reversed(dims):
                    v = f"({it} / {stride})" if stride > 1 else it
                    v = f"({v} % {cnt})" if stride * cnt < total else v
                    g.append(f"{v} * {gs}{'ll' if wide else ''}")
                    sh.append(f"{v} * {ss}")
                    stride *= cnt
                step = aff.get(st.loop, 0) * st.ks if st.loop is not None else 0
                gexpr = " + ".join([f"({bases[k]})", *([f"{t} * {step}{'ll' if wide else ''}"] if step else []), *g])
                self.line(f"_egc_cp16(&{smem[k]}[{stage} * {sizes[k]} + {' + '.join(sh)}], {self.param(op.buf)} + {gexpr});")
                self.close()

        load("0", "0")
        self.line("_egc_cp_commit();")
        t = self.fresh("t")
        self.open(f"for (int {t} = 0; {t} < {trips}; ++{t})")
        if trips > 1:
            self.open(f"if ({t} + 1 < {trips})")
            load(f"({t} + 1)", f"(({t} + 1) & 1)")
            self.close()
        self.line("_egc_cp_commit();")
        self.line("_egc_cp_wait<1>();")
        self.line("__syncthreads();")
        j = self.fresh("j")
        self.line("#pragma unroll")
        self.open(f"for (int {j} = 0; {j} < {st.ks}; ++{j})")
        ops, strides = (st.a, st.b), (tile_strides(st.a), tile_strides(st.b))

        def source(side: int, ups: dict[UOp, int]) -> tuple[str, int]:
            op = ops[side]
            off = [f"{j} * {16 * op.pitch}", f"({t} & 1) * {sizes[side]}"]
            for r, ss in strides[side].items():
                off.append(f"{ups[r] * ss}" if r in ups else f"{self.rname(r)} * {ss}")
            return f"{smem[side]} + {' + '.join(off)}", op.pitch

        self.tc_step(tc, combos, accs, source)
        self.close()
        self.line("__syncthreads();")
        self.close()

    def emit_tc(self, item: Item, tc: TCMatch, scope: _Scope) -> None:
        """A tensor-core item: each warp's tiles (one per UPCAST combination) accumulate in fragments over the k
        loop, then go through a per-warp shared-memory tile to the store, one element per thread at a time."""
        self.uses.add("wmma")
        combos = list(itertools.product(*(range(range_size(r)) for r in tc.ups)))
        accs = [self.fresh("cfrag") for _ in combos]
        for cf in accs:
            self.line(f"nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> {cf};")
            self.line(f"nvcuda::wmma::fill_fragment({cf}, 0.0f);")
        st = item.stage
        if st is None:
            self.tc_direct(tc, combos, accs, scope)
        else:
            self.tc_staged(item, tc, st, combos, accs, scope)
        tile, tp, e = self.fresh("tile"), self.fresh("tp"), self.fresh("e")
        self.line(f"__shared__ float {tile}[{self.block_total // 32 * 256}];")
        self.line(f"float* {tp} = {tile} + threadIdx.y * 256;")
        for c, cf in zip(combos, accs):
            if c != combos[0]:
                self.line("__syncwarp();")  # the warp's lanes have read the previous tile
            self.line(f"nvcuda::wmma::store_matrix_sync({tp}, {cf}, 16, nvcuda::wmma::mem_row_major);")
            self.line("__syncwarp();")
            self.line("#pragma unroll")
            self.open(f"for (int {e} = threadIdx.x; {e} < 256; {e} += 32)")
            el = _Scope(scope)
            el.vals.update({r: str(v) for r, v in zip(tc.ups, c)})
            for r, expr in ((tc.m, f"{e} >> 4"), (tc.n, f"{e} & 15")):
                el.vals[r] = self.rname(r)
                self.line(f"const int {self.rname(r)} = {expr};")
            el.vals[tc.reduce] = f"{tp}[{e}]"
            self.emit_store(item.store, el, None)
            self.close()

    # ---- items, phases, launches ----------------------------------------------------------------

    def bind(self, ph: Phase, scope: _Scope) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """Emit the plan's thread -> range mapping of a phase (flat ones: only `gid`); returns (grid, block)."""
        block_rs = ph.block + ph.group
        self.tid, self.strides = None, {}
        block, total = ph.threads, math.prod(ph.threads)
        if ph.thread_map == "flat":
            return self.bind_flat_threads(
                max(math.prod(range_size(r) for r in it.grid) for it in ph.items), any(it.grid for it in ph.items), total
            )
        if total > _MAX_THREADS:
            raise unsupported(
                "LOCAL",
                f"{total // 32} warps of tensor-core tiles exceed 1024 threads per block"
                if ph.tc
                else f"LOCAL/GROUP_REDUCE ranges ask for {total} threads per block (max 1024)",
                "split the local ranges further or make part of them UPCAST/LOOP",
            )
        if ph.thread_map == "warps":
            self.decompose("threadIdx.y", block_rs, "u", scope)
        elif ph.thread_map == "axes":
            for ax, r in zip(_AXES, reversed(block_rs)):
                self.line(f"const int {self.rname(r)} = threadIdx.{ax};")
                scope.vals[r] = self.rname(r)
        else:  # linear
            self.decompose("threadIdx.x", block_rs, "u", scope)
            stride = 1
            for r in reversed(block_rs):
                self.strides[r] = stride
                stride *= range_size(r)
            if ph.group:
                self.tid = "tid"
                self.line("const int tid = threadIdx.x;")
        self.block_total = total
        return self.bind_grid_blocks(ph.grid, scope), block

    def decompose(self, lin: str, rs: list[UOp], suf: str, scope: _Scope) -> None:
        stride = 1
        for j in reversed(range(len(rs))):
            r, n = rs[j], range_size(rs[j])
            e = lin if stride == 1 else f"{lin} / {stride}{suf}"
            if j > 0:
                e = f"({e}) % {n}{suf}"
            name, t = self.rname(r), self.ctype(r)
            self.line(f"const {t} {name} = ({t})({e});")
            scope.vals[r] = name
            stride *= n

    def bind_flat_threads(self, total: int, need_gid: bool, bd: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """`gid` over `total` threads in blocks of `bd` (tail predicate where needed)."""
        nb = -(-total // bd)
        self.block_total = bd
        self.gid_suffix = "u"
        if total <= 1:
            if need_gid and total == 1:
                self.line("const unsigned int gid = 0u;")
            return (nb, 1, 1), (bd, 1, 1)
        if nb <= GRID_LIMITS[0]:
            gridd = (nb, 1, 1)
            wide = nb * bd > 2**32 - 1
            self.line(
                f"const unsigned {'long long' if wide else 'int'} gid = "
                f"{'(unsigned long long)' if wide else ''}blockIdx.x * {bd}u + threadIdx.x;"
            )
        else:
            gx = GRID_LIMITS[0]
            gy = -(-nb // gx)
            if gy > GRID_LIMITS[1]:
                raise unsupported("GLOBAL", f"{total} threads exceed the CUDA grid")
            gridd, wide = (gx, gy, 1), True
            self.line(
                f"const unsigned long long gid = ((unsigned long long)blockIdx.y * gridDim.x + blockIdx.x) * "
                f"{bd}ull + threadIdx.x;"
            )
        self.gid_suffix = "ull" if wide else "u"
        if nb * bd != total or gridd[1] > 1:
            self.line(f"if (gid >= {total}{self.gid_suffix}) return;")
        return gridd, (bd, 1, 1)

    def bind_grid_blocks(self, grid: list[UOp], scope: _Scope) -> tuple[int, int, int]:
        sizes = [range_size(r) for r in reversed(grid)]  # innermost first
        if len(sizes) <= 3 and all(s <= lim for s, lim in zip(sizes, GRID_LIMITS)):
            for ax, r in zip(_AXES, reversed(grid)):
                self.line(f"const int {self.rname(r)} = blockIdx.{ax};")
                scope.vals[r] = self.rname(r)
            return tuple(sizes + [1] * (3 - len(sizes)))  # type: ignore[return-value]
        groups: list[list[UOp]] = [[]]
        prod = 1
        for r in reversed(grid):  # greedy: merge consecutive ranges into x, then y, then z
            n = range_size(r)
            if prod * n > GRID_LIMITS[len(groups) - 1]:
                groups.append([])
                prod = 1
                if len(groups) > 3 or n > GRID_LIMITS[len(groups) - 1]:
                    break
            groups[-1].insert(0, r)
            prod *= n
        else:
            dims = []
            for ax, g in zip(_AXES, groups):
                self.decompose(f"blockIdx.{ax}", g, "u", scope)
                dims.append(math.prod(range_size(r) for r in g))
            return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]
        total = math.prod(sizes)  # flatten over a 3D grid with a block-uniform tail predicate
        gx = min(total, GRID_LIMITS[0])
        rest = -(-total // gx)
        gy = min(rest, GRID_LIMITS[1])
        gz = -(-rest // gy)
        if gz > GRID_LIMITS[2]:
            raise unsupported("GLOBAL", f"{total} blocks exceed the CUDA grid")
        self.line(
            "const unsigned long long bid = blockIdx.x + (unsigned long long)gridDim.x * "
            "(blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);"
        )
        self.line(f"if (bid >= {total}ull) return;")
        self.decompose("bid", grid, "ull", scope)
        return (gx, gy, gz)

    # ---- whole kernel ---------------------------------------------------------------------------

    def emit_phase(self, ph: Phase, scope: _Scope) -> None:
        """The items of a bound phase: each under the group-reduce predicate, or, for a flat phase, each run of
        items over the same ranges decomposing gid in its own block."""
        if ph.tc or ph.block or ph.group:
            pred = " && ".join(f"{self.rname(g)} == 0" for g in ph.group) or None
            for it in ph.items:
                self.emit_item(it, scope, pred)
            return
        total = max(math.prod(range_size(r) for r in it.grid) for it in ph.items)
        runs: list[list[Item]] = []
        for it in ph.items:
            if math.prod(range_size(r) for r in it.grid) == 0:
                continue
            if runs and runs[-1][0].grid == it.grid:
                runs[-1].append(it)
            else:
                runs.append([it])
        for run in runs:
            n = math.prod(range_size(r) for r in run[0].grid)
            inner = scope if len(runs) == 1 else _Scope(scope)
            if len(runs) > 1:
                self.open(f"if (gid < {n}{self.gid_suffix})" if n < total else "")
            if run[0].grid:
                self.decompose("gid", run[0].grid, self.gid_suffix, inner)
            for it in run:
                self.emit_item(it, inner, None)
            if len(runs) > 1:
                self.close()

    def render(self) -> KernelPlan:
        name = _ident(self.kernel.name, "k_")
        launches: list[Launch] = []
        body_lines: list[str] = []
        max_threads = 1
        steps = [(ph, ph.split, part) for ph in self.launch.phases for part in ((0, 1) if ph.split is not None else (0,))]
        multi = len(steps) > 1
        self.depth = 1
        scratch: list[tuple[str, DType, int]] = []
        partials: UOp | None = None
        for k, (ph, split, part) in enumerate(steps):
            self.lines = []
            if multi:
                self.open(f"if (phase == {k})")
            scope = _Scope()
            if split is not None:
                if part == 0:  # the partials: a scratch buffer the backend allocates
                    partials = UOp(
                        Ops.BUFFER,
                        _acc_dtype(split.reduce.dtype),
                        arg=(f"__egc_partials{len(scratch)}", (split.outputs * split.block.parts,)),
                    )
                    scratch.append((partials.arg[0], partials.dtype, partials.arg[1][0]))
                assert partials is not None
                grid, block = self.emit_grid_split(ph.items[0], split, part, partials, scope)
            else:
                grid, block = self.bind(ph, scope)
                self.shared = ph.shared
                self.emit_phase(ph, scope)
            if multi:
                self.close()
            body_lines += self.lines
            max_threads = max(max_threads, math.prod(block))
            if math.prod(grid) * math.prod(block) > 0:
                launches.append(Launch(k, grid, block))
        # buffers in first-use order, then ones only named in reads/writes
        params = [f"{_STORAGE[dt]}* __restrict__ {c}" for c, dt in self.params.values()]
        if multi:
            params.append("const int phase")
        head = [
            f"// kernel {self.kernel.name}: "
            + "; ".join(f"phase {lc.phase} grid {lc.grid} block {lc.block}" for lc in launches)
        ]
        head += [f"// {n}" for n in self.notes]
        head.append(_PRELUDE_CORE)
        preludes = (("fp16", _PRELUDE_FP16), ("bf16", _PRELUDE_BF16), ("wmma", _PRELUDE_WMMA), ("async", _PRELUDE_ASYNC))
        head += [p for key, p in preludes if key in self.uses]
        src = "\n".join(
            head
            + [f'extern "C" __global__ void __launch_bounds__({max_threads}) {name}(' + ", ".join(params) + ") {"]
            + body_lines
            + ["}"]
        )
        return KernelPlan(
            name,
            src,
            tuple((b, dt) for b, (_, dt) in self.params.items()),
            tuple(launches),
            multi,
            tuple(self.notes),
            frozenset(self.aligned),
            tuple(scratch),
        )


def plan_kernel(kernel: Kernel) -> KernelPlan:
    """Render one kernel to CUDA C with its launch configuration (no GPU needed)."""
    return _Renderer(plan_launch(kernel)).render()


@lru_cache(maxsize=4096)
def renders(kernel: UOp) -> bool:
    """Does the renderer emit this kernel AST? Rules the GPU estimate does not model are checked only in
    emission (a group reduction left under a data-dependent branch): the schedule ranking asks this of its best
    few candidates."""
    try:
        plan_kernel(Kernel.from_ast("k", kernel if kernel.op is Ops.SINK else UOp(Ops.SINK, dtypes.void, (kernel,))))
    except CompilerError:
        return False
    return True


# ---- the backend -------------------------------------------------------------------------------


class CUDABackend:
    """Kernels as CUDA C; buffers as CuPy arrays (bfloat16 as uint16 bits, bool as one byte).

    `compiler`: "auto" (NVRTC through CuPy, then nvcc -cubin if that fails), "nvrtc" or "nvcc";
    the EGC_CUDA_COMPILER environment variable overrides the default.
    """

    name = "cuda"

    def __init__(self, compiler: str | None = None) -> None:
        self.compiler = compiler or os.environ.get("EGC_CUDA_COMPILER", "auto")
        self._plans: dict[tuple[str, UOp], KernelPlan] = {}
        self._modules: dict[str, Any] = {}
        self._host = HostBuffers()

    def plan(self, kernel: Kernel) -> KernelPlan:
        key = (kernel.name, kernel.ast)
        if key not in self._plans:
            self._plans[key] = plan_kernel(kernel)
        return self._plans[key]

    def render(self, kernel: Kernel, program: Any = None) -> str:
        return self.plan(kernel).source

    @staticmethod
    def renders(kernel: UOp) -> bool:
        return renders(kernel)

    def compile(self, kernel: Kernel, program: Any = None) -> Callable[[dict[str, Any]], None]:
        cp = import_cupy()
        plan = self.plan(kernel)
        fn = self._function(cp, plan)
        names = [b for b, _ in plan.params]
        scratch: dict[str, Any] = {}  # the kernel's own buffers (grid-split partials), made on the first run

        def run(bufs: dict[str, Any]) -> None:
            if plan.scratch and not scratch:
                scratch.update((n, cp.empty(size, dtype=dt.np)) for n, dt, size in plan.scratch)
            bufs = {**bufs, **scratch}
            missing = [n for n in names if n not in bufs]
            if missing:
                raise BackendError(
                    at=f"kernel {kernel.name}",
                    why=f"no buffer {missing[0]!r} was given",
                    suggestion="allocate every buffer the kernel reads or writes",
                )
            args = [bufs[n] for n in names]
            for n, a in zip(names, args):
                if n in plan.aligned and getattr(getattr(a, "data", None), "ptr", 0) % 16:
                    raise BackendError(
                        at=f"kernel {kernel.name}, buffer {n!r}",
                        why="the kernel reads or writes it with 16-byte vector accesses, but the "
                        "array does not start on a 16-byte boundary (a view at an offset?)",
                        suggestion="pass a fresh contiguous array (cupy.ascontiguousarray(x.copy()))",
                    )
            for lc in plan.launches:
                fn(lc.grid, lc.block, (*args, np.int32(lc.phase)) if plan.phased else tuple(args))

        return run

    def _function(self, cp: Any, plan: KernelPlan) -> Any:
        if plan.source not in self._modules:
            self._modules[plan.source] = self._module(cp, plan)
        return self._modules[plan.source].get_function(plan.name)

    def _module(self, cp: Any, plan: KernelPlan) -> Any:
        errors: list[str] = []
        if self.compiler in ("auto", "nvrtc"):
            for opts in ((), tuple(f"-I{d}" for d in cuda_include_dirs())):  # CuPy's own headers first
                try:
                    mod = cp.RawModule(code=plan.source, options=tuple(opts))
                    mod.get_function(plan.name)  # compiles now, so errors surface here
                    return mod
                except Exception as e:  # cupy.cuda.compiler.CompileException and driver errors
                    errors.append(f"nvrtc {' '.join(opts) or '(no options)'}: {e}")
        if self.compiler in ("auto", "nvcc") and find_nvcc() is not None:
            major, minor = cp.cuda.Device().compute_capability[:-1], cp.cuda.Device().compute_capability[-1]
            try:
                cubin = compile_cubin(plan.source, f"sm_{major}{minor}")
                with tempfile.TemporaryDirectory(prefix="egc_cubin_") as d:
                    path = os.path.join(d, "k.cubin")
                    with open(path, "wb") as f:
                        f.write(cubin)
                    mod = cp.RawModule(path=path)
                    mod.get_function(plan.name)
                    return mod
            except Exception as e:
                errors.append(f"nvcc: {e}")
        raise BackendError(
            at=f"kernel {plan.name}",
            why="CUDA compilation failed:\n" + "\n".join(errors)[-6000:],
            suggestion="check that CUDA headers are reachable (set CUDA_PATH) or install nvcc; "
            "EGC_CUDA_COMPILER=nvrtc|nvcc picks one compiler",
        )

    def alloc(self, spec: BufferSpec) -> Any:
        cp = import_cupy()
        return cp.zeros(spec.size, self._host.storage_np(spec.dtype))

    def put(self, spec: BufferSpec, host: Any) -> Any:
        cp = import_cupy()
        if isinstance(host, cp.ndarray):
            return self._stored(cp, spec, host)
        return cp.asarray(self._host.put(spec, np.asarray(host)))

    def get(self, spec: BufferSpec, buf: Any) -> np.ndarray:
        cp = import_cupy()
        return self._host.get(spec, cp.asnumpy(buf))

    def synchronize(self) -> None:
        """Wait for the kernels launched so far (timing: launches return before the kernel ends)."""
        import_cupy().cuda.Device().synchronize()

    # arrays already on the GPU: a program called with CuPy inputs reads them in place and returns CuPy outputs

    @staticmethod
    def holds(value: Any) -> bool:
        """Whether `value` is an array on the GPU (a CuPy array)."""
        cp = sys.modules.get("cupy")
        return cp is not None and isinstance(value, cp.ndarray)

    def put_device(self, name: str, spec: BufferSpec, value: Any) -> Any:
        """A CuPy input checked (shape, exact dtype conversion) and converted on the GPU; one already in the
        storage dtype and contiguous is used as it is (kernels never write inputs)."""
        cp = import_cupy()
        return self._stored(cp, spec, coerce_input(name, value, spec.shape, spec.dtype, cp))

    def _stored(self, cp: Any, spec: BufferSpec, arr: Any) -> Any:
        """A CuPy array as the kernels store spec's dtype (flat; bfloat16 as its upper 16 bits, rounded)."""
        if spec.dtype is dtypes.bfloat16:
            bits = cp.ascontiguousarray(bf16_round(arr, cp)).view(cp.uint32)
            return (bits >> 16).astype(cp.uint16).reshape(-1)
        return cp.ascontiguousarray(arr).reshape(-1).astype(self._host.storage_np(spec.dtype), copy=False)

    def get_device(self, spec: BufferSpec, buf: Any) -> Any:
        """An output as a CuPy array of its shape and dtype (bfloat16 as float32, as on the host), without a copy
        where the storage is the dtype itself."""
        cp = import_cupy()
        if spec.dtype is dtypes.bfloat16:
            return (buf.astype(cp.uint32) << 16).view(cp.float32).reshape(spec.shape)
        return buf.astype(spec.dtype.np, copy=False).reshape(spec.shape)
