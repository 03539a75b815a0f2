"""`optimize`: a tensor program in, a Program of kernels for one target out.

1. normalize the input (Tensor(s), UOp(s), Frontend-IR) to output roots;
2. encode the tensor graph and the facts rangeify needs (shapes, inverse
   permutations, reduce masks), one buffer per output and per
   materialization candidate;
3. saturate rangeify + symbolic (+ interval and linear analyses) together;
4. extract each output's kernel with the kernel cost model (DAG-aware: a
   kernel whose result is loaded in several places is paid once), decode;
5. split the extracted term into kernels at AFTER(buffer, kernel) and order
   them by dependency; check every memory access statically.
"""

from __future__ import annotations

import gc
import math
import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from os import PathLike
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

import numpy as np

from egraph_compiler import compile_cache
from egraph_compiler.backends import get_backend
from egraph_compiler.egraph.encode import egg_ilist, egg_str
from egraph_compiler.egraph.report import IterationStats, Report
from egraph_compiler.egraph.session import BASELINE_CEILING, CEILINGS, EGraphSession, Limits, Stage
from egraph_compiler.egraph.view import EGraphView, ENode
from egraph_compiler.ir.diagnostics import EstimateWarning, InvalidArgument, OutOfMemory, UnguardedAccess, UnsupportedOp
from egraph_compiler.ir.dims import symbolic_placeholders
from egraph_compiler.ir.dtypes import DType
from egraph_compiler.ir.ops import OP_TABLE, Category, Ops, reshape_groups
from egraph_compiler.ir.uop import UOp, check_placeholder_names, pretty, toposort
from egraph_compiler.kernel import disk_cache
from egraph_compiler.kernel.analysis import store_items
from egraph_compiler.kernel.cpu_target import CPUTarget
from egraph_compiler.kernel.memory_plan import ArenaPlan, sink_order
from egraph_compiler.kernel.program import Backend, BufferSpec, Kernel, Program, buffer_of
from egraph_compiler.kernel.slack import with_slack

if TYPE_CHECKING:
    from egraph_compiler.egraph.decode import Decoder
    from egraph_compiler.extract.extractor import Extraction
    from egraph_compiler.extract.fusion import FusionResult
    from egraph_compiler.extract.schedule import CostModel, KernelSchedule
    from egraph_compiler.shape_sets import SymbolicProgram

# The optimization pipeline (extraction, the fusion search, schedule ranking, late simplification, tuning, the
# pictures) is imported by the functions that run it: a program the compile caches hold needs none of it, and a
# new process with a warm disk cache reaches its first result without loading it.

# rangeify terminates and builds the safe baseline (every materialization's load and kernel): no limit cuts it
RANGEIFY_STAGE = Stage("rangeify", rulesets=("rangeify",), max_steps=500, growth_check=False, limited=False)
KERNEL_STAGE = Stage("kernel", rulesets=("symbolic",), analyses=("analysis", "linear"))


def graph_depth(roots: list[UOp]) -> int:
    """The longest path from an input to an output of the tensor graph (rangeify needs about one step a level)."""
    depth: dict[UOp, int] = {}
    for u in toposort(roots):
        depth[u] = 1 + max((depth[s] for s in u.src), default=0)
    return max((depth[r] for r in roots), default=0)


def stages_for(target: str, nolocals: bool, depth: int = 0, reduces: int = 0, lanes: int | None = None) -> tuple[Stage, ...]:
    """Rangeify, then the index math, then schedules with the target's OptOps rules (splitting only after the index
    math settled: splitting first multiplies the terms the symbolic rules work on). The schedule stage runs
    without the back-off scheduler up to 2.5x further: a split is never split again, so its growth is bounded,
    and on softmax or layernorm the scheduler's rule compilation would cost 50-70 ms. `lanes`: float32 lanes of
    the CPU the code is for (narrow vectors add rulesets: optops.target_kinds)."""
    from egraph_compiler.rules import optops

    opt = optops.rulesets_for(target, nolocals, lanes)
    schedule = Stage(
        "schedule",
        rulesets=("symbolic", *opt),
        analyses=("analysis", "linear"),
        after_limit_steps=optops.MAX_POSITION + 2,
        after_limit_rulesets=opt,
        plain_factor=2.5,
        reserve_s_per_node=OFFERS_S_PER_NODE,
        extra_nodes=min(SCHEDULE_NODES_CAP, SCHEDULE_NODES_PER_REDUCE * reduces),
    )
    # rangeify runs to completion: its step bound is a guard against a rule that never stops, so it grows with the
    # graph (a 48-layer chain needs 343 steps)
    rangeify = replace(RANGEIFY_STAGE, max_steps=max(RANGEIFY_STAGE.max_steps or 0, 4 * depth))
    return (rangeify, KERNEL_STAGE, schedule)


KERNEL_LIMITS = {"node_limit": 10_000, "iter_limit": 10, "time_limit": 10.0, "analysis_steps": 8}
# seconds per e-node to view, price and extract the e-graph (GPT-2 block: 41k nodes, ~1.1 s): a caller's time_limit
# stops the limited stages early enough to leave this much for extraction
EXTRACT_S_PER_NODE = 30e-6
# under a time limit, more seconds per e-node: the hurried ranking of every kernel and the decoding after extraction,
# and before the schedule stage its split offers (run even past the deadline: without them no loop nest is
# vectorized) with what they add to extraction and ranking (GPT-2 and ResNet blocks' default schedules: 0.85-1.3 s
# after a kernel stage of 5,400-5,900 nodes)
RANK_S_PER_NODE = 30e-6
OFFERS_S_PER_NODE = 120e-6
# under a time limit shorter than INLINE_FROM times DEFAULT_S_PER_UOP per UOp of the graph, the default schedule
# is built straight away (the fastest program to build: its rangeify grows linearly; GPT-2 block, 200 UOps:
# ~1.2 s with hurried rankings, a 48-layer dense chain, 628 UOps: ~2.7 s); above it, offering values inline
# may take what the default schedule would not need
DEFAULT_S_PER_UOP = 6e-3
INLINE_FROM = 3.0
# under a time limit shorter than FULL_S_PER_UOP per UOp of the graph, it is lowered without the e-graph
# (kernel/lowering.py: ~0.2 ms a UOp, and a few ms per reduction kernel to pick its register tile), and so is the
# default schedule wherever the search falls back to it; the full search, from its encoding to the ranked
# schedules, took 11-17 ms a UOp on a Zen 5 core (MLP, GPT-2 block, dense chains) and 35 for the ResNet block's
# convolutions, and the default schedule in the e-graph nearly as long. DIRECT_S_PER_UOP is what the saturation
# leaves for the direct lowering when it gives up offering values inline
FULL_S_PER_UOP = 20e-3
DIRECT_S_PER_UOP = 1e-3
SESSION_SETUP_S = 0.3  # a thread's first search makes its egglog session: the schema and rules parsed (~0.2-0.3 s)
# the slowest kernels of a directly lowered program whose register tiles are priced even past the deadline (a few
# ms each: a plain GEMM nest runs 10-100x slower than a tiled one)
TILED_ANYWAY = 4
# under the default node_limit the schedule stage may grow SCHEDULE_NODES_PER_REDUCE more nodes per reduction of the
# program, up to SCHEDULE_NODES_CAP: it offers every reduction kernel its splits at once, and a fixed budget shared
# by many kernels stopped after two steps (a 12-layer 64x128 dense chain got 8 schedules a layer and ran 2.2x slower)
SCHEDULE_NODES_PER_REDUCE = 2_500
SCHEDULE_NODES_CAP = 40_000
TENSOR_ONLY = (Ops.STACK, Ops.INDEX, Ops.TUPLE, Ops.GETTUPLE, Ops.PARAM)


def kernel_session(provenance: bool = False) -> EGraphSession:
    from egraph_compiler.rules import intervals, linear, optops, rangeify, symbolic

    return EGraphSession(
        [intervals.ANALYSIS, linear.LINEAR, symbolic.SYMBOLIC, rangeify.RANGEIFY, *optops.OPTOPS.values()],
        declarations=[intervals.DECLARATIONS, linear.DECLARATIONS, rangeify.DECLARATIONS, optops.DECLARATIONS],
        unextractable=set(linear.HELPERS) | set(rangeify.HELPERS),
        provenance=provenance,
    )


# ---- inputs ----------------------------------------------------------------------------------------


class TensorLike(Protocol):
    """A frontend's tensor: anything that names the UOp graph it stands for (the Tensor API's Tensor)."""

    @property
    def uop(self) -> UOp: ...


@runtime_checkable
class GraphLike(Protocol):
    """A frontend's whole program: named outputs and named placeholder inputs (a loaded Frontend-IR graph)."""

    inputs: Mapping[str, TensorLike]
    outputs: Mapping[str, TensorLike]


Outputs = UOp | TensorLike | Sequence[UOp | TensorLike] | GraphLike
Inputs = Sequence[UOp | TensorLike] | Mapping[str, UOp | TensorLike]


def _uop(x: object) -> UOp | None:
    """x's graph: x itself, or a TensorLike's `.uop`; None for anything else."""
    u = x if isinstance(x, UOp) else getattr(x, "uop", None)
    return u if isinstance(u, UOp) else None


def output_roots(graph: Outputs, inputs: Inputs | None = None) -> tuple[list[UOp], list[str], bool, list[UOp]]:
    """(roots, output names, single output?, declared placeholders) for every input form optimize accepts.

    The declared placeholders are the program's inputs, in signature order, whether or not an output still reads
    them once optimized: `inputs` when given (Tensors or placeholder UOps, or a name -> Tensor mapping), a
    GraphLike's inputs, else every placeholder of the graph in the order the graph first reaches them."""
    if isinstance(graph, GraphLike) and isinstance(graph.outputs, Mapping):
        names = list(graph.outputs)
        found = [_uop(t) for t in graph.outputs.values()]
        single = len(names) == 1
        if inputs is None:
            inputs = graph.inputs
    else:
        single = _uop(graph) is not None
        items = [graph] if single else list(graph) if isinstance(graph, (list, tuple)) else []
        found = [_uop(x) for x in items]
        names = [f"out{i}" for i in range(len(found))]
    roots = [u for u in found if u is not None]
    if not roots or len(roots) < len(found):
        hint = " (a Frontend-IR file: load it first, with load_frontend_ir)" if isinstance(graph, (str, PathLike)) else ""
        raise InvalidArgument(
            at="optimize",
            why=f"cannot optimize a {type(graph).__name__}{hint}",
            suggestion="pass a Tensor, a list of Tensors, a UOp graph or a FrontendGraph",
        )
    return roots, names, single, _declared(roots, inputs)


def _is_placeholder(u: object) -> TypeGuard[UOp]:
    """Is u a placeholder: a BUFFER with no data?"""
    return isinstance(u, UOp) and u.op is Ops.BUFFER and not u.src


def _declared(roots: list[UOp], inputs: Inputs | None) -> list[UOp]:
    """The placeholders `inputs` names (see output_roots), or the graph's own; two of one name are refused."""
    own = [u for u in toposort(roots) if u.op is Ops.BUFFER and not u.src]
    if inputs is None:
        check_placeholder_names(own)
        return own
    items = (
        list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs) if isinstance(inputs, (list, tuple)) else None
    )
    given = None if items is None else [_uop(x) or x for x in items]
    bad = next((u for u in given or [] if not _is_placeholder(u)), None)
    if given is None or bad is not None:
        what = type(inputs).__name__ if given is None else f"an input that is not a placeholder ({type(bad).__name__})"
        raise InvalidArgument(
            at="optimize(inputs=...)",
            why=f"got {what}",
            suggestion="pass the program's placeholders: a list of Tensor.empty(...) tensors or a name -> Tensor dict",
        )
    uops = [u for u in given if _is_placeholder(u)]  # every item by now: the filter only narrows the type
    check_placeholder_names([*own, *uops])
    missing = sorted({u.arg[0] for u in own} - {u.arg[0] for u in uops})
    if missing:
        raise InvalidArgument(
            at="optimize(inputs=...)",
            why=f"the graph reads the placeholder {missing[0]!r}, which `inputs` does not list",
            suggestion="list every placeholder the outputs read (or leave inputs out)",
        )
    return uops


def materialization_candidates(roots: list[UOp], lone_reduces: bool = True) -> list[UOp]:
    """The safe baseline's buffers (tinygrad's and inductor's realize points): every REDUCE, every CONTIGUOUS,
    every computed value with several consumers, and every computed value read through a broadcast (an EXPAND
    behind movement ops: otherwise it is recomputed for every element it is broadcast to, as a GELU before a
    matmul is for every output column). Outputs have buffers of their own. `lone_reduces` False: not a REDUCE
    its one consumer reads without a broadcast (each of its elements once: the consumer's kernel computes it)."""
    order = toposort(roots)
    users: dict[UOp, list[UOp]] = {}
    for u in order:
        for s in u.src:
            users.setdefault(s, []).append(u)

    def movement(u: UOp) -> bool:
        return OP_TABLE[u.op].category is Category.MOVEMENT

    broadcast: dict[UOp, bool] = {}  # a movement op whose chain of movement users reaches an EXPAND
    for u in reversed(order):
        if movement(u):
            broadcast[u] = u.op is Ops.EXPAND or any(broadcast.get(x, False) for x in users.get(u, []))
    out = []
    for u in order:
        if u.op in (Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BINARY) or u in roots or not u.shape:
            continue
        if movement(u):
            if u.op is Ops.PAD:
                out.append(u)
            continue
        mine = users.get(u, [])
        shared = len(mine) > 1 or any(broadcast.get(x, False) for x in mine)
        if shared or u.op is Ops.CONTIGUOUS or (u.op is Ops.REDUCE and lone_reduces):
            out.append(u)
    return out


def leaf_reduces(roots: list[UOp]) -> list[UOp]:
    """The REDUCEs whose operand's graph holds no other REDUCE (rangeify offers them inline everywhere)."""
    below: dict[UOp, bool] = {}  # does u's graph hold a REDUCE (u included)
    out = []
    for u in toposort(roots):
        inner = any(below[s] for s in u.src)
        below[u] = inner or u.op is Ops.REDUCE
        if u.op is Ops.REDUCE and not inner:
            out.append(u)
    return out


def barrier_every_candidate(roots: list[UOp]) -> list[UOp]:
    """The graph with every materialization candidate, and every output another value reads, behind a
    CONTIGUOUS barrier: each is computed once in its own kernel and loaded everywhere else, so rangeify grows
    linearly with the graph (the fallback when inline alternatives outgrow the e-graph)."""
    wrap = set(materialization_candidates(roots))
    read = {s for u in toposort(roots) for s in u.src}
    wrap |= {r for r in roots if r in read and r.shape}
    out: dict[UOp, UOp] = {}
    for u in toposort(roots):
        src = tuple(out[s] for s in u.src)
        v = u if src == u.src else UOp(u.op, u.dtype, src, u.arg)
        out[u] = UOp(Ops.CONTIGUOUS, v.dtype, (v,)) if u in wrap and u.op is not Ops.CONTIGUOUS else v
    return [out[r] for r in roots]


# ---- backends --------------------------------------------------------------------------------------


@runtime_checkable
class HostStorage(Protocol):
    """A backend that holds buffers as numpy arrays: the storage of each dtype (Backend's optional storage_np)."""

    def storage_np(self, d: DType) -> np.dtype: ...


def _cpu_of(backend: Backend, target: str) -> CPUTarget | None:
    """The CPU the llvm target generates code for and prices schedules on (the llvm backend's: the Backend protocol
    has none); None for the other targets. A cache hit asks too, so no runtime_checkable isinstance (~4 us)."""
    cpu = getattr(backend, "cpu", None) if target == "llvm" else None
    return cpu if isinstance(cpu, CPUTarget) else None


# ---- the pipeline ----------------------------------------------------------------------------------


def optimize(
    graph: Outputs,
    target: str = "llvm",
    *,
    node_limit: int | None = None,
    iter_limit: int | None = None,
    time_limit: float | None = None,
    search_time: float | None = None,
    tune: bool = False,
    nolocals: bool = False,
    cpu: str | None = None,
    progress: Callable[[IterationStats | str], None] | None = None,
    alternatives: list[tuple[str, Program]] | None = None,
    cache: bool = True,
    inputs: Inputs | None = None,
    provenance: bool = False,
    memory_limit: int | None = None,
) -> Program | SymbolicProgram:
    """Optimize a tensor program for `target` ("llvm", "cuda" or "reference"); returns a runnable Program.

    node_limit, iter_limit: bounds on saturation past the safe baseline (rangeify, which no limit cuts);
    time_limit: seconds for the whole call (saturation, then the fusion search and the schedule ranking get what
    is left; rangeify and ranking the baseline's kernels run regardless); search_time: seconds of fusion trials.
    Hitting any of them returns the best program found so far (at worst the baseline, every candidate
    materialized) and says so in the report.
    tune: time the cost model's best schedules on this machine and keep the fastest (cached on disk).
    nolocals: the Nolocals OptOp: explore no schedule with workgroup dims (LOCAL, GROUP_REDUCE threads, TC).
    cpu: target "llvm" only: the x86 CPU to generate code for and price schedules on, as an LLVM CPU name
    ("haswell" for AVX2, "skylake-avx512", "znver4"); default $EGC_CPU, else the host. It must run here.
    progress: called with every saturation step's IterationStats, then with a line of text per later phase
    (extraction, each fusion trial, tuning, decoding).
    alternatives: a list to receive (schedule, Program) for every ranked schedule of every kernel (the
    other kernels at their chosen schedule), best first per kernel: for inspection and testing.
    cache: return the program an earlier call built for the same graph structure, options and machine: from
    memory (`compile_cache`, this process), else from disk (`disk_cache`, any process; its kernels' machine code
    too); False always optimizes afresh and stores nothing.
    inputs: the program's inputs in call order (Tensors or a name -> Tensor dict): a placeholder listed here is
    an input of the program even where no output reads it (the program checks and ignores its value). Default:
    a Frontend-IR graph's signature, else every placeholder of the graph.
    provenance: record which rule's firing built each e-node (about twice the e-graph's inserts, so off by
    default): the report then lists, per rule, the chosen program's e-nodes its firings produced
    (`report.extra["provenance"]`) with a picture of them. Such a call does not use the compile caches.
    memory_limit: bytes the intermediates' arena may take (a serving budget): after the search, buffers are fused
    where that frees arena bytes at the least estimated time per byte, until the arena fits; the report says
    what it cost, and a note says so when nothing left can free more."""
    _check_memory_limit(memory_limit)
    backend = get_backend(target, cpu)
    roots, names, single, declared = output_roots(graph, inputs)
    limits = {"node_limit": node_limit, "iter_limit": iter_limit, "time_limit": time_limit, "search_time": search_time}
    request = _Request(target, backend, tune, nolocals, progress, alternatives, provenance, memory_limit)
    if symbolic := symbolic_placeholders([*roots, *declared]):  # a program per bucket of sizes, built as asked for
        from egraph_compiler.shape_sets import SymbolicProgram

        return SymbolicProgram(
            roots, declared, symbolic, lambda r, d: _fixed(r, names, single, d, request, limits, cache), progress
        )
    return _fixed(roots, names, single, declared, request, limits, cache)


def _fixed(
    roots: list[UOp],
    names: list[str],
    single: bool,
    declared: list[UOp],
    request: _Request,
    limits: dict[str, float | None],
    cache: bool,
) -> Program:
    """optimize() for a graph of fixed sizes: from the compile caches where they hold it, else afresh."""
    target, backend, tune, nolocals = request.target, request.backend, request.tune, request.nolocals
    progress, memory_limit = request.progress, request.memory_limit
    cpu_target = _cpu_of(backend, target)
    machine = cpu_target.name if cpu_target is not None else target
    key = (
        tuple(roots),
        tuple(declared),
        tuple(names),
        single,
        target,
        machine,
        tuple(limits.values()),
        tune,
        nolocals,
        memory_limit,
    )
    try:
        hash(key)
    except TypeError:  # an unhashable limit: _optimize's validation says what is wrong with it
        cache = False
    use_cache = cache and request.alternatives is None and not request.provenance  # only a search fills these in
    if use_cache and (hit := compile_cache.get(key)) is not None:
        if progress is not None:
            progress("the compile cache holds this graph's program: no optimization needed")
            hit.progress = progress
        return hit
    stored = None
    if use_cache and disk_cache.enabled():
        limits_key = {**limits, "cores": os.cpu_count()}  # the cost model prices the cores it sees
        stored = disk_cache.key(
            disk_cache.graph_digest([*roots, *declared]), names, single, target, machine, limits_key, tune, nolocals
        )
        if memory_limit is not None:  # (the key of a call without one stays what it was)
            stored = disk_cache.key(stored, memory_limit)
        if (hit := _from_disk(stored, backend)) is not None:
            if progress is not None:
                progress(f"the disk cache ({disk_cache.directory()}) holds this graph's program: no optimization needed")
            hit.progress = progress
            compile_cache.put(key, hit)
            return hit
    collecting = gc.isenabled()
    gc.disable()  # optimize allocates many small objects and frees them at the end: collections would only scan
    try:
        prog = _optimize(roots, names, single, declared, request, limits)
    finally:
        if collecting:
            gc.enable()
    if use_cache:
        compile_cache.put(key, prog)
    if stored is not None:
        disk_cache.store("programs", stored, _to_disk(prog))
    return prog


def _to_disk(prog: Program) -> dict[str, Any]:
    """What a program is, without what running it made (compiled code, buffers): for the disk cache."""
    return {
        "kernels": prog.kernels,
        "buffers": prog.buffers,
        "inputs": prog.inputs,
        "outputs": prog.outputs,
        "single_output": prog.single_output,
        "target": prog.target,
        "report": prog.report,
    }


def _from_disk(name: str, backend: Backend) -> Program | None:
    entry = disk_cache.load("programs", name)
    if not isinstance(entry, dict):
        return None
    report = entry["report"]
    if report is not None:
        report.notes.append(f"loaded from the disk cache ({disk_cache.directory()}): not optimized again")
    return Program(
        entry["kernels"],
        entry["buffers"],
        entry["inputs"],
        entry["outputs"],
        backend,
        entry["target"],
        report,
        entry["single_output"],
    )


@dataclass(frozen=True)
class _Request:
    """What optimize() was asked for besides the graph and its limits: the target and its backend, the search's
    options, and where progress lines and alternatives go."""

    target: str
    backend: Backend
    tune: bool
    nolocals: bool
    progress: Callable[[IterationStats | str], None] | None
    alternatives: list[tuple[str, Program]] | None
    provenance: bool
    memory_limit: int | None


def _optimize(
    roots: list[UOp], names: list[str], single: bool, declared: list[UOp], req: _Request, limits: dict[str, float | None]
) -> Program:
    from egraph_compiler.ir.interpret import inline_functions

    # an output that is an input tensor still needs its own buffer (and kernel): a copy
    roots = [UOp(Ops.CONTIGUOUS, r.dtype, (r,)) if r.op is Ops.BUFFER else r for r in inline_functions(roots)]
    for u in toposort(roots):
        if u.op in TENSOR_ONLY:
            raise UnsupportedOp(
                at=u.op.name,
                why=f"{u.op.name} cannot be lowered to kernels yet",
                suggestion="express it with movement ops and reductions",
            )
    given = {k: v for k, v in limits.items() if v is not None}
    lim = Limits.make(**{**KERNEL_LIMITS, **given})
    # a time_limit the caller gives bounds the whole call: saturation, the fusion search and the final ranking
    deadline = time.perf_counter() + lim.time_limit if "time_limit" in given else None
    report = Report()
    try:
        program = _build(roots, names, req, lim, report, deadline, "node_limit" in given)
        if _arena_over(program, req):  # recomputing a reduction inside another may free the bytes the limit asks
            report = Report()
            program = _build(roots, names, req, lim, report, deadline, "node_limit" in given, nested=True)
    except MemoryError:
        nodes = report.iterations[-1].nodes if report.iterations else 0
        raise OutOfMemory(
            at="optimize",
            why=f"the compiler ran out of memory (the e-graph had {nodes:,} nodes)",
            suggestion="give values many later ops read a buffer of their own with .contiguous(), "
            "lower node_limit, or optimize the graph in parts",
        ) from None
    if deadline is not None and (over := time.perf_counter() - deadline) > max(0.1 * lim.time_limit, 0.2):
        report.notes.append(
            f"time_limit {lim.time_limit:g} s was exceeded by {over:.2f} s: the least this graph takes is to build its "
            "default schedule (rangeify, the schedule offers, extraction and a hurried ranking of every kernel)"
        )
    program.backend, program.target, program.single_output, program.report = req.backend, req.target, single, report
    program.progress = req.progress  # compiling, on the first call, says so too
    _declare_inputs(program, declared)
    report.extra["input_graph"] = "\n".join(pretty(r) for r in roots)
    backend, memory_limit = req.backend, req.memory_limit
    if isinstance(backend, HostStorage):  # a host backend's plan (an empty one where nothing is intermediate)
        arena = program.memory_plan() or ArenaPlan({}, 0, 0)
        rest = sum(s.size * backend.storage_np(s.dtype).itemsize for s in program.buffers.values() if s.kind != "intermediate")
        report.extra["memory"] = {
            "peak_bytes": rest + arena.size,
            "peak_bytes_unplanned": rest + arena.unplanned,
            "arena_bytes": arena.size,
            "intermediates": len(arena.offsets),
        }
        if memory_limit is not None:
            report.extra["memory"]["limit_bytes"] = memory_limit
            if arena.size > memory_limit:
                report.notes.append(
                    f"memory_limit {memory_limit:,} bytes not met: the program's intermediates take an arena of "
                    f"{arena.size:,} bytes (no fusion left frees any of it)"
                )
    return program


def _check_memory_limit(limit: object) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidArgument(
            at="memory_limit",
            why=f"{limit!r} is not a count of bytes",
            suggestion="give a non-negative integer (bytes of intermediates), or None for no limit",
        )


def _declare_inputs(program: Program, declared: list[UOp]) -> None:
    """Every declared placeholder is an input of the program, in the declared order: one no kernel reads (the
    graph never used it, or the optimizer found the outputs do not depend on it) is still checked when given."""
    for u in declared:
        name, shape = u.arg
        if name not in program.buffers:
            program.buffers[name] = BufferSpec(name, u.dtype, max(1, math.prod(shape)), "input", tuple(shape))
    assert set(program.inputs) <= {u.arg[0] for u in declared}  # output_roots checked that
    program.inputs = list(dict.fromkeys(u.arg[0] for u in declared))


def _group_term(nd: list[int], od: list[int]) -> str:
    if nd == [1] and not od:
        return "(GNewUnit)"
    if od == [1] and not nd:
        return "(GOldUnit)"
    if len(nd) == 1 and nd == od:
        return "(GKeep)"
    return f"(GMix {egg_ilist(nd)} {egg_ilist(od)})"


def input_spec(u: UOp) -> BufferSpec:
    """The buffer of a placeholder or constant tensor (a BUFFER UOp): kernels address it flat, by its name."""
    name, shape = u.arg
    data = u.src[0].arg.data.reshape(shape) if u.src else None
    return BufferSpec(name, u.dtype, max(1, math.prod(shape)), "const" if u.src else "input", tuple(shape), data)


def value_spec(u: UOp, name: str, kind: str) -> BufferSpec:
    """A buffer of its own for computed value u (an output or an intermediate)."""
    return BufferSpec(name, u.dtype, max(1, math.prod(u.shape)), kind, tuple(u.shape))


class Facts:
    """The egglog commands that tell rangeify about the input graph."""

    def __init__(self, sess: EGraphSession, roots: list[UOp]) -> None:
        self.sess = sess
        self.cmds: list[str] = []
        self.buffers: dict[str, BufferSpec] = {}
        for u in toposort(roots):
            n = sess.name_of(u)
            shp = egg_ilist(u.shape)
            self.cmds += [f"(set (shape {n}) {shp})", f"(is-shape {shp})"]
            if u.op is Ops.BUFFER:
                self.input_buffer(u)
            if u.op is Ops.PERMUTE:
                inv = sorted(range(len(u.arg)), key=lambda i: u.arg[i])
                self.cmds.append(f"(set (invperm {n}) {egg_ilist(inv)})")
            if u.op is Ops.RESHAPE:
                groups = reshape_groups(u.src[0].shape, u.shape)
                text = "".join(f"(GCons {_group_term(nd, od)} " for nd, od in groups)
                self.cmds.append(f"(set (reshape-plan {n}) {text}(GNil){')' * len(groups)})")
                self.cmds += [f"(is-shape {egg_ilist(x)})" for g in groups for x in g if len(g[0]) + len(g[1]) > 2]
            if u.op is Ops.REDUCE:
                self.cmds.append(f"(set (rmask {n}) {egg_ilist(int(i in u.arg[1]) for i in range(len(u.src[0].shape)))})")

    def input_buffer(self, u: UOp) -> None:
        """A placeholder or constant tensor: kernels address it as a flat buffer of the same name."""
        name = u.arg[0]
        self.buffers[name] = input_spec(u)
        srcs = f"(UCons {self.sess.name_of(u.src[0])} (UNil))" if u.src else "(UNil)"
        self.cmds.append(
            f"(in-buf {self.sess.name_of(u)} (BUFFER {egg_str(u.dtype.name)} {egg_str(name)} "
            f"{egg_ilist([self.buffers[name].size])} {srcs}))"
        )

    def buffer_for(self, u: UOp, name: str, kind: str) -> str:
        """Give u a buffer of its own (`mat-buf`: a relation, so tensors proven equal never alias two buffers);
        returns the buffer's term."""
        self.buffers[name] = spec = value_spec(u, name, kind)
        term = f"(BUFFER {egg_str(u.dtype.name)} {egg_str(name)} {egg_ilist([spec.size])} (UNil))"
        self.cmds.append(f"(mat-buf {self.sess.name_of(u)} {term})")
        return term


@dataclass
class _Encoded:
    """The graph as the e-graph holds it: the facts and buffers rangeify reads, each output's buffer name (in root
    order) and kernel let, and the intermediates' buffers: those the fusion search may fuse (`candidates`:
    name -> (what it holds, bytes)) and the CONTIGUOUS ones it never fuses (`barriers`)."""

    facts: Facts
    out_names: list[str]
    kernel_lets: dict[UOp, str]
    candidates: dict[str, tuple[str, int]]
    barriers: set[str]


def _encode(
    sess: EGraphSession,
    roots: list[UOp],
    names: list[str],
    packs: list[UOp],
    target: str,
    nolocals: bool,
    nested: bool,
    lanes: int | None = None,
) -> _Encoded:
    """Add the graph to the e-graph with the facts rangeify needs: a buffer per output, per materialization
    candidate and per packed operand, and a let naming each output's kernel. `nested`: REDUCEs are offered inline
    inside other reductions too, every one (else those of no other REDUCE: rules/rangeify.py `inline-anywhere`).
    `lanes`: float32 lanes of the CPU the code is for (its register tiles: optops.target_kinds)."""
    from egraph_compiler.rules import optops

    sess.add(roots)
    facts = Facts(sess, roots)
    out_names, out_terms = _output_buffers(facts, roots, names)
    candidates, barriers = _intermediate_buffers(facts, materialization_candidates(roots) + packs)
    kernel_lets: dict[UOp, str] = {}
    for r in roots:
        let = f"$kernel_{sess.name_of(r)[1:]}"
        if let not in kernel_lets.values():
            facts.cmds.append(f"(let {let} (KernelOf {sess.name_of(r)} {out_terms[r]}))")
        kernel_lets[r] = let
    anywhere = [u for u in toposort(roots) if u.op is Ops.REDUCE] if nested else leaf_reduces(roots)
    facts.cmds += [f"(inline-anywhere {sess.name_of(u)})" for u in anywhere]
    sess.run_commands("\n".join(facts.cmds + optops.split_facts(target, nolocals, lanes)))
    return _Encoded(facts, out_names, kernel_lets, candidates, barriers)


def _output_buffers(facts: Facts, roots: list[UOp], names: list[str]) -> tuple[list[str], dict[UOp, str]]:
    """Each output's buffer name, in root order, and each root's buffer term: the same tensor returned twice
    has one buffer."""
    out_names: list[str] = []
    first: dict[UOp, str] = {}
    out_terms: dict[UOp, str] = {}
    for r, nm in zip(roots, names):
        if r not in first:
            first[r] = _unique(nm, facts.buffers)
            out_terms[r] = facts.buffer_for(r, first[r], "output")
        out_names.append(first[r])
    return out_names, out_terms


def _intermediate_buffers(facts: Facts, values: list[UOp]) -> tuple[dict[str, tuple[str, int]], set[str]]:
    """A buffer per value (tmp0, tmp1, ...); returns those the fusion search may fuse (name -> (what it holds,
    bytes)) and the names of the CONTIGUOUS ones (barriers: never fused)."""
    candidates: dict[str, tuple[str, int]] = {}
    barriers: set[str] = set()
    for i, c in enumerate(values):
        facts.buffer_for(c, f"tmp{i}", "intermediate")
        if c.op is Ops.CONTIGUOUS:
            barriers.add(f"tmp{i}")
        else:
            candidates[f"tmp{i}"] = (_label(c), max(1, math.prod(c.shape)) * c.dtype.itemsize)
    return candidates, barriers


def _why_default_schedule(reason: str, nodes: int, deadline: float | None, every_barrier: bool) -> str | None:
    """Why the graph must be built again as the default schedule (every candidate behind a barrier: an e-graph
    that grows linearly), after saturation stopped for `reason` at `nodes` nodes: the baseline passed a ceiling
    offering values inline, or extracting its e-graph would not fit in the time limit. None: extract it."""
    if every_barrier:  # it is the default schedule already
        return None
    if deadline is not None and time.perf_counter() + EXTRACT_S_PER_NODE * nodes > deadline:
        reason = "extract_time"  # the default schedule's smaller e-graph extracts in time
    elif reason not in CEILINGS:
        return None
    inline = "offering values inline in every index context that reads them"
    return {
        "node_ceiling": f"the e-graph passed {BASELINE_CEILING:,} nodes {inline}",
        "extract_time": f"extracting the e-graph {inline} ({nodes:,} nodes) would not fit in the time limit",
    }.get(reason, f"the time limit was reached before rangeify finished {inline}")


def _note_default_schedule(why: str, report: Report, progress: Callable[[IterationStats | str], None] | None) -> None:
    """Say (in the report and to `progress`) why the graph is built again as the default schedule."""
    note = (
        f"{why}: every materialization candidate got its own buffer (the default schedule), and only values "
        "with one reader at the same index were fused"
    )
    report.notes.append(note)
    report.degraded.append(note)
    if progress is not None:
        progress(f"{why}: building the default schedule instead")


def _let_classes(view: EGraphView, lets: dict[UOp, str]) -> dict[UOp, int]:
    """The e-class each let names (the view may list a global let without its `$`)."""
    return {r: view.lets[let[1:]] if let[1:] in view.lets else view.lets[let] for r, let in lets.items()}


def _check_complete(root_classes: dict[UOp, int], ex: Extraction, report: Report) -> None:
    """Refuse a program an output of which has no extracted kernel (the e-graph passed its ceiling first, or a
    limit stopped rangeify)."""
    missing = [r for r, c in root_classes.items() if c not in ex.best]
    if missing and report.stop_reason == "node_ceiling":
        raise UnsupportedOp(
            at=missing[0].op.name,
            why=f"the e-graph passed {BASELINE_CEILING:,} nodes before every "
            "kernel had a form (each value is offered inline in every index context that reads it)",
            suggestion="give the values many later ops read a buffer of their own with .contiguous() "
            "(a barrier: nothing is inlined across it), or optimize the graph in parts",
        )
    if missing:
        raise UnsupportedOp(
            at=missing[0].op.name,
            why=f"rangeify did not reach a complete kernel for this output (stop reason: {report.stop_reason})",
            suggestion="raise iter_limit/node_limit/time_limit, or report the graph as a bug",
        )


def _arena_over(program: Program, req: _Request) -> bool:
    """Do the program's intermediates take more than the caller's memory_limit (host backends)?"""
    if req.memory_limit is None or not isinstance(req.backend, HostStorage):
        return False
    arena = program.memory_plan()  # _build made it with req.backend
    return arena is not None and arena.size > req.memory_limit


def _build(
    roots: list[UOp],
    names: list[str],
    req: _Request,
    lim: Limits,
    report: Report,
    deadline: float | None = None,
    fixed_nodes: bool = False,
    every_barrier: bool = False,
    nested: bool = False,
) -> Program:
    """The program for the graph: encode, saturate, extract, the fusion search and schedule ranking (and tuning),
    decode. `every_barrier`: the graph is the default schedule already (see _why_default_schedule); `nested`:
    REDUCEs are offered inline inside other reductions too (a memory limit the first program did not meet)."""
    from egraph_compiler.egraph.decode import Decoder
    from egraph_compiler.egraph.view import reachable
    from egraph_compiler.extract.extractor import extract
    from egraph_compiler.extract.fusion import choose_fusion, self_loads
    from egraph_compiler.extract.kernel_cost import KernelCost, forced_loads
    from egraph_compiler.extract.schedule import cost_model_for, kernel_entry, schedule_report
    from egraph_compiler.kernel.packing import pack_operands
    from egraph_compiler.late_simplify import LateSimplifier
    from egraph_compiler.simplify import has_session, shared_session
    from egraph_compiler.tuning import tune_schedules

    target, backend, tune, nolocals, progress = req.target, req.backend, req.tune, req.nolocals, req.progress
    alternatives, provenance, memory_limit = req.alternatives, req.provenance, req.memory_limit

    t0 = time.perf_counter()
    uops = len(toposort(roots))
    direct = deadline is not None and _directly_lowerable(roots, report)
    setup = 0.0 if has_session("kernel+provenance" if provenance else "kernel") else SESSION_SETUP_S
    if direct and deadline is not None and (every_barrier or deadline - t0 < FULL_S_PER_UOP * uops + setup):
        return _lower_directly(roots, names, req, report, uops, deadline)
    if deadline is not None and not every_barrier and deadline - t0 < INLINE_FROM * DEFAULT_S_PER_UOP * uops:
        short = f"the time limit is short for offering values inline in a graph of {uops} UOps"
        _note_default_schedule(short, report, progress)
        return _build(barrier_every_candidate(roots), names, req, lim, report, deadline, fixed_nodes, True, nested)
    packs: list[UOp] = []
    given = roots
    if target == "llvm":  # packed copies of GEMM and conv operands: buffers the fusion search may keep
        roots, packs = pack_operands(roots)
    sess = (
        shared_session("kernel+provenance", lambda: kernel_session(provenance=True))
        if provenance
        else shared_session("kernel", kernel_session)
    )
    reduces = 0 if fixed_nodes else sum(1 for u in toposort(roots) if u.op is Ops.REDUCE)  # a given node_limit holds
    cpu = _cpu_of(backend, target)
    lanes = cpu.simd_bytes // 4 if cpu else None
    stages = stages_for(target, nolocals, graph_depth(roots), reduces, lanes)
    with sess.scope(stages, lim):
        enc = _encode(sess, roots, names, packs, target, nolocals, nested, lanes)
        report.add_phase("encode", time.perf_counter() - t0)
        # inline alternatives past the ceiling: every candidate gets a buffer (tinygrad's default schedule), and
        # the graph is built again with nothing to inline across them, which grows linearly
        # with a time limit, offering values inline may go on until the default schedule's predicted build time
        # is left (DEFAULT_S_PER_UOP a UOp): the default schedule built again (below) needs that
        per_uop = DIRECT_S_PER_UOP if direct else DEFAULT_S_PER_UOP
        cut: float | bool = False if every_barrier else True if deadline is None else deadline - per_uop * uops
        reserve = EXTRACT_S_PER_NODE + RANK_S_PER_NODE
        reason = sess.saturate(stages, lim, report, progress, deadline=deadline, cut_baseline=cut, reserve_per_node=reserve)
        why = _why_default_schedule(reason, sess.size(), deadline, every_barrier)
        if why is None:
            t1 = time.perf_counter()
            view = sess.view()
            picture = sess.picture_view(view)  # what the report draws
            reg = sess.reg
            root_classes = _let_classes(view, enc.kernel_lets)
    if why is not None:
        _note_default_schedule(why, report, progress)
        again = barrier_every_candidate(given)
        return _build(again, names, req, lim, report, deadline, fixed_nodes, True, nested)
    if progress is not None:
        progress(f"extracting: {view.num_classes} e-classes, {view.num_nodes} e-nodes")
    within = reachable(view, root_classes.values(), sess.unextractable)  # what programs can be made of
    never = self_loads(view)  # a kernel's stored value as a load of its own buffer
    model = KernelCost(
        view,
        sess.unextractable,
        loads_from=frozenset(enc.barriers),
        undecided=tuple(enc.candidates),
        within=within,
        never=never,
    )
    ex = extract(view, model, within=within)  # everything inline but CONTIGUOUS: the fusion search adds the loads
    # buffers read where the e-graph offers no inline alternative (a REDUCE inside another reduction's loop) are
    # barriers too: the search never tries to fuse them away
    forced = forced_loads(view, ex.chosen, list(root_classes.values()), enc.barriers)
    barriers, candidates = enc.barriers | forced, {b: c for b, c in enc.candidates.items() if b not in forced}
    report.add_phase("extract", time.perf_counter() - t1)
    t2 = time.perf_counter()
    _check_complete(root_classes, ex, report)
    # a limit may have left index math the rules simplify when it is alone: finish it per expression
    late: Callable[[UOp], UOp] = LateSimplifier(sess, deadline) if report.limit_hit else (lambda a: a)
    cost_model = cost_model_for(target, _cpu_of(backend, target), getattr(backend, "renders", None))
    report.extra["machine"] = cost_model.machine
    if progress is not None:
        progress(f"fusion search: {len(candidates)} buffers the baseline materializes, {lim.search_time:g} s of trials")

    def assemble(choice: dict[int, ENode]) -> Program:
        dec = Decoder(view, lambda c: choice.get(c) or ex.node(c), reg, rkey=_range_key)
        asts = [late(dec.decode(root_classes[r])) for r in roots]
        return _split_kernels(asts, enc.out_names, enc.facts.buffers, roots, backend, target)

    def scheduled(res: FusionResult) -> dict[int, ENode]:
        return {**res.choice, **{c: n for ks in res.schedules.values() for c, n in ks.best.choice.items()}}

    fused = choose_fusion(
        view,
        ex,
        list(root_classes.values()),
        lambda c, choose, memo: late(Decoder(view, choose, reg, rkey=_range_key, own_kernel=True, memo=memo).decode(c)),
        cost_model,
        candidates,
        barriers,
        lim.search_time,
        progress,
        deadline,
        pairs=target == "cuda",
        memory_limit=memory_limit,
        fits=lambda res: not _arena_over(assemble(scheduled(res)), req),
    )
    schedules = fused.schedules
    report.notes += fused.notes
    report.degraded += fused.degraded
    chosen = scheduled(fused)
    report.add_phase("schedule", time.perf_counter() - t2)
    if tune and backend.name != "reference":
        t3 = time.perf_counter()
        machine = f"{target}:{cpu.name}" if cpu is not None else target  # timings are per CPU
        chosen = tune_schedules(schedules, chosen, machine, assemble, report, progress)
        report.add_phase("tune", time.perf_counter() - t3)
    t2 = time.perf_counter()
    if progress is not None:
        progress(f"decoding: {len(schedules)} kernels")
    report.extra["schedules"] = [schedule_report(ks, chosen) for ks in schedules.values()]
    if alternatives is not None:
        alternatives += [(c.describe(), assemble({**chosen, **c.choice})) for ks in schedules.values() for c in ks.ranked]
    program = assemble(chosen)
    report.add_phase("decode", time.perf_counter() - t2)
    past = deadline is not None and time.perf_counter() > deadline  # no pictures per kernel then
    chosen_s = _report_program(
        report, view, ex, sess.unextractable, list(root_classes.values()), fused, chosen, program, provenance, picture, past
    )
    check_roofline(roots, chosen_s, cost_model, report)
    report.egraph_nodes, report.egraph_classes = view.num_nodes, view.num_classes
    report.extra["kernels"] = [kernel_entry(k, report.extra["schedules"]) for k in program.kernels]
    for k, entry in zip(program.kernels, report.extra["kernels"]):  # prog.kernels[i] says it too
        k.schedule, k.cost = entry.get("schedule", ""), dict(entry.get("cost", {}))
    check_accesses(program)
    return program


def _directly_lowerable(roots: list[UOp], report: Report) -> bool:
    """Can kernel/lowering.py lower the graph (else a report note says why not)?"""
    from egraph_compiler.kernel.lowering import unsupported

    if (why_not := unsupported(roots)) is None:
        return True
    report.notes.append(f"the graph is not lowered without the e-graph under the time limit: it has {why_not}")
    return False


def _lower_directly(
    roots: list[UOp], names: list[str], req: _Request, report: Report, uops: int, deadline: float | None
) -> Program:
    """The default schedule lowered without the e-graph (kernel/lowering.py), each reduction kernel with the
    register tile the cost model prices best (the slowest first, while the time limit lasts), priced for the
    report."""
    from egraph_compiler.extract.schedule import cost_model_for, describe_schedule

    t0 = time.perf_counter()
    note = (
        f"the time limit is short for the search over a graph of {uops} UOps (~{FULL_S_PER_UOP * uops:.2g} s): the "
        "graph was lowered without the e-graph, every materialization candidate in a buffer of its own (a reduction "
        "its one consumer reads without a broadcast computed in that consumer's kernel), each kernel's loops in the "
        "plain order but for a register tile per reduction (no fusion or schedule search)"
    )
    report.notes.append(note)
    report.degraded.append(note)
    report.stop_reason = "time_limit"  # what stopped the search: here, before it began
    if req.progress is not None:
        req.progress("the time limit is short: lowering the graph directly, without the e-graph")
    cpu = _cpu_of(req.backend, req.target)
    cost_model = cost_model_for(req.target, cpu, getattr(req.backend, "renders", None))
    report.extra["machine"] = cost_model.machine
    simd = cpu.simd_bytes if cpu is not None else None if req.target == "cuda" else 32  # a thread per output on a GPU
    seconds: dict[UOp, float] = {}  # each kernel AST's estimate

    def tiled(asts: list[UOp]) -> list[UOp]:
        out, est = _tile_reductions(asts, cost_model, simd, deadline)
        seconds.update(est)
        return out

    program = _direct_program(roots, names, req, tiled)
    for k in program.kernels:  # (an AST that with_slack or Kernel.from_ast rewrote is priced again)
        k.schedule = describe_schedule(k.ast)
        k.cost = {"seconds": seconds[k.ast] if k.ast in seconds else cost_model.estimate(k.ast).seconds}
    report.extra["kernels"] = [
        {"name": k.name, "reads": list(k.reads), "writes": list(k.writes), "schedule": k.schedule, "cost": k.cost}
        for k in program.kernels
    ]
    report.cost_after, report.cost_unit = sum(k.cost["seconds"] for k in program.kernels), "s"
    check_roofline(roots, report.cost_after, cost_model, report)
    check_accesses(program)
    report.add_phase("lower", time.perf_counter() - t0)
    return program


def _direct_program(roots: list[UOp], names: list[str], req: _Request, schedule: Callable[[list[UOp]], list[UOp]]) -> Program:
    """The program kernel/lowering.py makes of the graph: every materialization candidate but a lone REDUCE, and
    every output another value reads, in a buffer of its own, each kernel's loops in the plain order until
    `schedule` rewrites the kernel ASTs (before the program is assembled: its run order and memory plan read
    their loop nests)."""
    from egraph_compiler.kernel.lowering import lower_graph
    from egraph_compiler.kernel.packing import pack_operands

    packs: list[UOp] = []
    if req.target == "llvm":  # GEMM panels and convolution weights by blocks of channels (kernel/packing.py)
        roots, packs = pack_operands(roots)
    specs: dict[str, BufferSpec] = {}
    values: dict[UOp, str] = {}  # value -> its buffer's name
    for u in toposort(roots):
        if u.op is Ops.BUFFER:
            specs[u.arg[0]] = input_spec(u)
            values[u] = u.arg[0]
    out_names: list[str] = []
    for r, nm in zip(roots, names):
        if r not in values:
            values[r] = _unique(nm, specs)
            specs[values[r]] = value_spec(r, values[r], "output")
        out_names.append(values[r])
    read = {s for u in toposort(roots) for s in u.src}
    kept = materialization_candidates(roots, lone_reduces=False) + packs + [r for r in roots if r in read and r.shape]
    for i, u in enumerate(dict.fromkeys(u for u in kept if u not in values)):
        values[u] = f"tmp{i}"
        specs[values[u]] = value_spec(u, values[u], "intermediate")
    flat = {u: UOp(Ops.BUFFER, specs[n].dtype, (), (n, (specs[n].size,))) for u, n in values.items()}
    asts = schedule(lower_graph(list(dict.fromkeys(roots)), flat))
    addressed = dict.fromkeys(u.arg[0] for a in asts for u in a.toposort() if u.op is Ops.BUFFER)
    return _program_of(asts, {n: specs[n] for n in addressed}, specs, out_names, roots, req.backend, req.target)


def _tile_reductions(
    asts: list[UOp], cost_model: CostModel, simd_bytes: int | None, deadline: float | None
) -> tuple[list[UOp], dict[UOp, float]]:
    """The kernel ASTs with each reduction (the slowest first, past the deadline only the TILED_ANYWAY slowest) in
    the register tile (kernel/lowering.py `register_tiles`) the cost model prices below its plain nest, if any
    (none without `simd_bytes`), and each resulting AST's estimate in seconds. Kernels of one structure (the
    layers of a model) are priced once."""
    from egraph_compiler.kernel.lowering import anonymous, register_tiles

    out = list(asts)
    seconds = {a: cost_model.estimate(a).seconds for a in asts}
    if simd_bytes is None:
        return out, seconds
    picked: dict[UOp, tuple[int, float]] = {}  # a kernel's structure -> (its tile's place in register_tiles, estimate)
    for n, i in enumerate(sorted(range(len(asts)), key=lambda i: -seconds[asts[i]])):
        if n >= TILED_ANYWAY and deadline is not None and time.perf_counter() > deadline:
            break
        ast = asts[i]
        if not any(u.op is Ops.REDUCE for u in ast.toposort()):
            continue
        key = anonymous(ast)
        (item, *_) = store_items(ast)
        tiles = register_tiles(ast, simd_bytes // max(1, item.store.src[0].dtype.itemsize))
        if key not in picked:
            best, est = -1, seconds[ast]
            for j, tile in enumerate(tiles):
                if (e := cost_model.estimate(tile).seconds) < est:
                    best, est = j, e
            picked[key] = best, est
        best, est = picked[key]
        if best >= 0:
            out[i] = tiles[best]
            seconds[out[i]] = est
    return out, seconds


def _report_program(
    report: Report,
    view: EGraphView,
    ex: Extraction,
    hide: set[str],
    roots: list[int],
    fused: FusionResult,
    chosen: dict[int, ENode],
    program: Program,
    provenance: bool = False,
    picture: EGraphView | None = None,
    late: bool = False,
) -> float:
    """The e-graph pictures (the whole program's and each kernel's, the program's e-nodes marked; drawn from
    `picture`, the same e-graph as egglog serialized it, where given), the fusion search's result with the chosen
    program's estimate (returned: the sum of its kernels' chosen schedules), and (`provenance`) the program's
    e-nodes by the rule that built them, with a picture per rule. `late` (past the caller's time limit): the
    whole program's picture alone."""
    from egraph_compiler.report.dot import attach_snapshot

    t0 = time.perf_counter()

    def picked(c: int) -> ENode | None:  # the program's e-node in class c: the search's choice, else the extraction's
        return chosen.get(c) or ex.chosen(c)

    drawn = picture or view
    attach_snapshot(report, drawn, roots=roots, hide=hide, chosen=picked)
    report.extra["egraph_snapshot"]["source"] = "egglog serialize" if drawn is not view else "frozen tables"
    kernels = [] if late else _program_kernels(view, ex, fused.schedules, chosen, program)
    report.extra["egraph_kernels"] = [
        {"kernel": name, "writes": writes, **_picture(drawn, [sink], hide, picked, within, f"kernel {name}")}
        for name, writes, sink, within in kernels
    ]
    if late:
        report.notes.append("the time limit was reached: the report has no picture of each kernel's e-classes")
    if provenance:
        _report_provenance(report, view, roots, hide, picked, kernels)
    report.add_phase("snapshot", time.perf_counter() - t0)
    chosen_s = sum(schedule_entry["estimate"]["seconds"] for schedule_entry in report.extra["schedules"])
    report.extra["fusion"] = {**fused.to_dict(), "chosen_s": chosen_s}
    # in seconds: the safe baseline's estimate (every candidate in its own buffer), and the chosen program's
    report.cost_before, report.cost_after, report.cost_unit = report.extra["fusion"].get("baseline_s"), chosen_s, "s"
    return chosen_s


RULE_PICTURES = 8  # the rules that built most of the program's e-nodes get a picture of them each


def _report_provenance(
    report: Report,
    view: EGraphView,
    roots: list[int],
    hide: set[str],
    picked: Callable[[int], ENode | None],
    kernels: list[tuple[str, list[str], int, set[int]]],
) -> None:
    """report.extra["provenance"]: per rule (the caller's graph as "input"), the program's op e-nodes its firings
    built, their ops and kernels; report.extra["egraph_rules"]: a picture of each top rule's e-nodes."""
    from egraph_compiler.egraph.provenance import by_producer, program_nodes
    from egraph_compiler.egraph.schema import EGG_TO_OP
    from egraph_compiler.extract.schedule import term_children

    nodes = {c: n for c, n in program_nodes(roots, picked, lambda n: term_children(view, n)).items() if n.fn in EGG_TO_OP}
    groups = by_producer(view, nodes)
    rows = []
    for rule, classes in groups.items():
        ops = Counter(nodes[c].fn for c in classes)
        rows.append(
            {
                "rule": rule,
                "nodes": len(classes),
                "ops": dict(ops.most_common()),
                "kernels": [name for name, _, _, within in kernels if within.intersection(classes)],
                "category": report.rule_category.get(rule, ""),
                "description": report.rule_doc.get(rule, ""),
            }
        )
    report.extra["provenance"] = {"nodes": len(nodes), "rules": rows}
    top = [(r, cs) for r, cs in groups.items() if r in report.rule_category][:RULE_PICTURES]
    report.extra["egraph_rules"] = [
        {"rule": r, "nodes": len(cs), **_picture(view, sorted(cs), hide, picked, set(cs), f"rule {r}")} for r, cs in top
    ]


def _program_kernels(
    view: EGraphView, ex: Extraction, schedules: dict[int, KernelSchedule], chosen: dict[int, ENode], program: Program
) -> list[tuple[str, list[str], int, set[int]]]:
    """Each kernel of the program: (name, buffers it writes, its SINK class, its e-classes (not those of the
    kernels it loads from)), named by the program kernel that writes the same buffers, in program order."""
    from egraph_compiler.extract.schedule import chosen_candidate, kernel_classes

    order = {k.name: i for i, k in enumerate(program.kernels)}
    out = []
    for ks in schedules.values():
        kernel = chosen_candidate(ks, chosen).kernel
        writes = sorted({buffer_of(u.src[0]).arg[0] for u in kernel.toposort() if u.op is Ops.STORE})
        name = next((k.name for k in program.kernels if sorted(k.writes) == writes), "?")
        out.append((name, writes, ks.sink_class, kernel_classes(view, ex, ks.sink_class, chosen)))
    return sorted(out, key=lambda k: order.get(k[0], len(order)))


def _picture(
    view: EGraphView,
    roots: list[int],
    hide: set[str],
    picked: Callable[[int], ENode | None],
    within: set[int],
    title: str,
) -> dict[str, Any]:
    """A picture of the classes `within` (from `roots`), the program's e-nodes marked: its DOT text and sizes."""
    from egraph_compiler.report.dot import snapshot

    snap = snapshot(view, roots, hide=hide, chosen=picked, within=within, title=title)
    return {"dot": snap.dot, **snap.info()}


def _label(u: UOp) -> str:
    """What a materialization candidate holds, for the report: its op and shape."""
    what = f"REDUCE {u.arg[0].name}" if u.op is Ops.REDUCE else "PACK" if u.op is Ops.PERMUTE else u.op.name
    return f"{what} {'x'.join(map(str, u.shape))} {u.dtype.name}"


def graph_work(roots: list[UOp]) -> tuple[float, float]:
    """(flops, compulsory bytes) of a tensor graph: one operation per element of every ALU op and per element
    reduced, and every input and output moved once."""
    flops = nbytes = 0.0
    for u in toposort(roots):
        if u.op is Ops.REDUCE:
            flops += math.prod(u.src[0].shape)
        elif OP_TABLE[u.op].is_alu:
            flops += math.prod(u.shape)
        elif u.op is Ops.BUFFER:
            nbytes += math.prod(u.arg[1]) * u.dtype.itemsize
    nbytes += sum(math.prod(r.shape) * r.dtype.itemsize for r in set(roots))
    return flops, nbytes


ROOFLINE_WARN = 50.0  # an estimate this many times the graph's roofline is reported as suspect


def check_roofline(roots: list[UOp], chosen_s: float, model: CostModel, report: Report) -> None:
    """Warn (Python warning and a report note) when the chosen program's estimate is far above what the graph's
    work and traffic need on the target: a sign of recomputation or of a cost-model error."""
    if model.roofline is None:
        return
    flops, nbytes = graph_work(roots)
    bound = model.roofline(flops, nbytes)
    report.extra["roofline"] = {"flops": flops, "bytes": nbytes, "seconds": bound, "estimate_s": chosen_s}
    if chosen_s > ROOFLINE_WARN * bound:
        msg = (
            f"the chosen program's estimate ({chosen_s * 1e3:.3g} ms) is {chosen_s / bound:.0f}x the graph's "
            f"roofline ({bound * 1e3:.3g} ms for {flops:.3g} flops and {nbytes:.3g} bytes): expect a slow program"
        )
        report.notes.append(msg)
        warnings.warn(msg, EstimateWarning, stacklevel=4)


def _unique(name: str, taken: dict[str, Any]) -> str:
    out, i = name, 0
    while out in taken:
        i += 1
        out = f"{name}_{i}"
    return out


def _range_key(n: ENode, dec: Decoder) -> Any:
    """Canonical range keys decode to ("out" | "red", e-class of the term they come from, axis), and split
    parts to ("split" | "pad", parent key, factor, part)."""
    if n.fn in ("RKSplit", "RKPad"):
        return ("split" if n.fn == "RKSplit" else "pad", dec.range_key(n.args[0].id), int(n.args[1]), int(n.args[2]))
    return ("out" if n.fn == "RKOut" else "red", n.args[0].id, int(n.args[1]))


def _split_kernels(
    asts: list[UOp], out_names: list[str], specs: dict[str, BufferSpec], roots: list[UOp], backend: Backend, target: str
) -> Program:
    """The program of kernels in dependency order: AFTER(buffer, kernel) inside a kernel means 'run that kernel
    first'."""
    from egraph_compiler.kernel.split_ranges import bind_split_ranges

    done: dict[UOp, UOp] = {}
    buffers: dict[str, BufferSpec] = {}

    def flat_buffer(b: UOp) -> UOp:
        name = b.arg[0]
        buffers[name] = specs[name]
        return UOp(Ops.BUFFER, b.dtype, (), (name, (specs[name].size,)))

    def lower(ast: UOp) -> UOp:
        memo: dict[UOp, UOp] = {}
        for x in toposort([ast], lambda u: u.src[:1] if u.op is Ops.AFTER else u.src):  # not into other kernels
            if x.op is Ops.BUFFER:
                memo[x] = flat_buffer(x)
            elif x.op is Ops.AFTER:
                sub = x.src[1]
                if sub not in done:
                    done[sub] = lower(sub)
                memo[x] = memo[x.src[0]]
            elif x.op in (Ops.END, Ops.REDUCE):  # a size-1 range may be extracted as its value, 0: no loop
                body, *rngs = (memo[s] for s in x.src)
                rngs = [r for r in rngs if r.op is Ops.RANGE]
                memo[x] = UOp(x.op, x.dtype, (body, *rngs), x.arg) if rngs else body
            else:
                src = tuple(memo[s] for s in x.src)
                memo[x] = x if src == x.src else UOp(x.op, x.dtype, src, x.arg)
        out = bind_split_ranges(memo[ast])
        if out not in seen:
            seen.add(out)
            order.append(out)
        return out

    order: list[UOp] = []
    seen: set[UOp] = set()
    for a in asts:
        if a not in done:
            done[a] = lower(a)
    return _program_of(order, buffers, specs, out_names, roots, backend, target)


def _program_of(
    asts: list[UOp],
    buffers: dict[str, BufferSpec],
    specs: dict[str, BufferSpec],
    out_names: list[str],
    roots: list[UOp],
    backend: Backend,
    target: str,
) -> Program:
    """The program of flat kernel ASTs in dependency order over `buffers` (those they address; `specs` has the
    outputs too), intermediates grown by the slack padded tiles read, leaf kernels sunk to their consumers."""
    asts_out, buffers = with_slack(asts, buffers)
    kernels = [Kernel.from_ast(f"k{i}", ast) for i, ast in enumerate(asts_out)]
    temps = [n for n, s in buffers.items() if s.kind == "intermediate"]
    late = sink_order([(k.reads, k.writes) for k in kernels], temps)
    inputs = [n for n, s in buffers.items() if s.kind == "input"]
    for n in out_names:
        buffers.setdefault(n, specs[n])

    def program(order: list[int]) -> Program:
        ks = [replace(kernels[j], name=f"k{i}") for i, j in enumerate(order)]
        return Program(ks, buffers, sorted(inputs, key=_input_order(roots)), list(out_names), backend, target)

    best = program(late)
    for order in _leaves_ahead(late, kernels, set(temps)):  # a leaf between a producer and its consumer
        other = program(order)
        if (b := best.memory_plan()) is not None and (o := other.memory_plan()) is not None and o.size < b.size:
            best = other
    return best


def _leaves_ahead(order: list[int], kernels: list[Kernel], temps: set[str]) -> Iterator[list[int]]:
    """Run orders with one leaf kernel (a weight's packing copy) that sink_order put between a kernel and its
    consumer moved before that kernel instead: the two may then run chunk by chunk (a padded copy of an activation
    and the convolution reading it), which the caller's memory plan weighs against the leaf's longer lifetime."""
    for at in range(1, len(order) - 1):
        before, leaf, after = kernels[order[at - 1]], kernels[order[at]], kernels[order[at + 1]]
        feeds = set(before.writes) & set(after.reads) & temps
        ahead = not set(leaf.reads) & (temps | set(before.writes))  # nothing it reads is written before it
        if feeds and set(leaf.writes) & set(after.reads) and ahead:
            yield [*order[: at - 1], order[at], order[at - 1], *order[at + 1 :]]


def _input_order(roots: list[UOp]) -> Callable[[str], int]:
    """A sort key for input names: where the graph first has the placeholder."""
    first: dict[str, int] = {}
    for i, u in enumerate(toposort(roots)):
        if u.op is Ops.BUFFER and not u.src:
            first.setdefault(u.arg[0], i)
    return lambda name: first.get(name, 1 << 30)


def check_accesses(program: Program) -> None:
    """Static memory safety: every index's interval lies inside its buffer, unless the access runs only under a
    gate: its own, its store's (a padded loop nest, see rules/optops.py), or a WHERE branch's (backends evaluate
    a branch's loads only where it is taken)."""
    from egraph_compiler.ir.affine import affine_bounds

    for k in program.kernels:
        seen: set[tuple[UOp, bool]] = set()
        stack = [(k.ast, False)]
        while stack:
            u, guarded = stack.pop()
            if (u, guarded) in seen:
                continue
            seen.add((u, guarded))
            gated = u.op in (Ops.LOAD, Ops.STORE) and len(u.src) == 3
            for i, s in enumerate(u.src):
                stack.append((s, guarded or gated or (u.op is Ops.WHERE and i > 0)))
            idx = u.src[0] if u.op in (Ops.LOAD, Ops.STORE) else None
            if idx is None or guarded or gated or len(idx.src) < 2:
                continue
            b = buffer_of(idx)
            lo, hi = idx.src[1].vmin, idx.src[1].vmax
            if lo < 0 or hi >= b.arg[1][0]:  # intervals add up loosely: like terms combined, the bounds are exact
                lo, hi = affine_bounds(idx.src[1])
            if lo < 0 or hi >= b.arg[1][0]:
                raise UnguardedAccess(
                    at=f"{u.op.name.lower()} of {b.arg[0]!r} in kernel {k.name}",
                    why=f"index range [{lo}, {hi}] is not inside [0, {b.arg[1][0]})",
                    suggestion="this is a compiler bug; please report the input graph",
                )


__all__ = ["check_roofline", "graph_work", "materialization_candidates", "optimize", "output_roots"]
