"""Kernel programs: what `optimize` returns and every backend runs.

A Program is an ordered list of kernels over named flat buffers. Each kernel
AST follows one contract, shared by the reference interpreter and the
renderers:

    SINK(END(STORE(INDEX(BUFFER(name, (size,)), idx), value[, gate]), *ranges), ...)

RANGE nodes carry `src=(CONST bound,)` and `arg=(key, AxisType)`; values read
memory with `LOAD(INDEX(buf, idx)[, alt, gate])` and reduce with
`REDUCE(value, *ranges)`, `arg=(Ops.ADD|MAX|MUL, ())`. A BUFFER's dtype is its
element dtype; its size is in elements.

A Backend turns a kernel into something callable on a dict of buffers. The
Program owns the buffers: it checks the keyword inputs (the placeholder's
shape, and a dtype they convert to exactly: `ir.interpret.coerce_input`;
E1404 otherwise), allocates outputs and intermediates through the backend,
runs kernels in order and hands the outputs back as numpy arrays.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from functools import lru_cache
from typing import Any, NamedTuple, Protocol, cast

import numpy as np

from egraph_compiler.ir.diagnostics import InvalidArgument, MissingInput, OutOfMemory
from egraph_compiler.ir.dtypes import DType, bf16_from_bits, bf16_round, compute_np, dtypes
from egraph_compiler.ir.interpret import coerce_input
from egraph_compiler.ir.ops import OP_TABLE, Ops
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.analysis import trip_count, value_nodes
from egraph_compiler.kernel.memory_plan import ALIGN, ArenaPlan, Coslice, lifetimes, plan


@dataclass(frozen=True)
class BufferSpec:
    """One flat buffer of a program. kind: input | output | intermediate | const."""

    name: str
    dtype: DType
    size: int
    kind: str
    shape: tuple[int, ...] = ()
    data: np.ndarray | None = field(default=None, compare=False, hash=False)  # const buffers only


class Sources(str):
    """A program's kernel sources: the text of all of them (blank lines between), and by kernel name."""

    by_kernel: dict[str, str]

    def __new__(cls, by_kernel: dict[str, str]) -> Sources:
        text = super().__new__(cls, "\n\n".join(by_kernel.values()))
        text.by_kernel = dict(by_kernel)
        return text

    def __getitem__(self, key: Any) -> str:  # type: ignore[override]
        if isinstance(key, str):
            return self.by_kernel[key]
        return str.__getitem__(self, key)

    def keys(self) -> Any:
        return self.by_kernel.keys()

    def items(self) -> Any:
        return self.by_kernel.items()


def kernel_flops(ast: UOp) -> int:
    """The floating-point operations a kernel executes: every float ALU op and float REDUCE step, once per
    combination of the ranges it depends on (a GEMM's multiply and add: 2*M*N*K). A schedule that pads a range
    to a multiple executes, and so counts, the padding's operations too."""
    ranges: dict[UOp, frozenset[UOp]] = {}  # the ranges a value depends on (a REDUCE's own ones end at it)
    total = 0
    for u in ast.toposort():
        own = frozenset([u]) if u.op is Ops.RANGE else frozenset()
        inside = own.union(*(ranges[x] for x in u.src))
        if u.dtype.is_float and (u.op is Ops.REDUCE or OP_TABLE[u.op].is_alu):
            total += math.prod(int(r.src[0].arg) for r in inside)
        ranges[u] = inside - frozenset(u.src[1:]) if u.op is Ops.REDUCE else inside
    return total


@dataclass
class Kernel:
    name: str
    ast: UOp
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    cost: dict[str, float] = field(default_factory=dict)  # the estimate: seconds, compute_s, memory_s, overhead_s, ...
    schedule: str = ""  # the loop nest in words ("[16L 8u 4L 16u] red[256R]"), as optimize chose it

    @property
    def flops(self) -> int:
        """Floating-point operations per run (`kernel_flops`)."""
        return kernel_flops(self.ast)

    @staticmethod
    def from_ast(name: str, ast: UOp) -> Kernel:
        """The kernel of `ast`, its gates that are the constant True dropped (`without_true_gates`)."""
        ast = without_true_gates(ast)
        reads, writes = [], []
        for u in ast.toposort():
            if u.op is Ops.LOAD:
                reads.append(buffer_of(u.src[0]).arg[0])
            elif u.op is Ops.STORE:
                writes.append(buffer_of(u.src[0]).arg[0])
        return Kernel(name, ast, tuple(dict.fromkeys(reads)), tuple(dict.fromkeys(writes)))


def without_true_gates(ast: UOp) -> UOp:
    """`ast` with every LOAD(index, alt, True) as LOAD(index) and STORE(index, value, True) as STORE(index, value):
    the same values, but a backend sees that nothing guards the access (the rules may fold a padded view's gate to
    True; taken for a guard, it let a padded tile's rows load past their buffer: a segfault, where an ungated
    load takes its store's gate or a clamped address)."""
    true = [u for u in ast.toposort() if u.op in (Ops.LOAD, Ops.STORE) and len(u.src) == 3 and not has_gate(u)]
    if not true:
        return ast
    return ast.substitute({u: UOp(u.op, u.dtype, u.src[:1] if u.op is Ops.LOAD else u.src[:2], u.arg) for u in true})


def in_bounds(index: UOp) -> bool:
    """Whether every element an INDEX(buffer[, idx]) addresses lies inside its buffer: the CPU backend then loads
    or stores its copies as vectors, unclamped and unmasked (and the estimate prices them so)."""
    size = math.prod(buffer_of(index).arg[1])
    if len(index.src) < 2:
        return size > 0
    return index.src[1].vmin >= 0 and index.src[1].vmax < size


def has_gate(u: UOp) -> bool:
    """Is u a LOAD or STORE under a gate (not the constant True, which guards nothing)?"""
    gate = u.src[2] if u.op in (Ops.LOAD, Ops.STORE) and len(u.src) == 3 else None
    return gate is not None and not (gate.op is Ops.CONST and gate.arg is True)


def buffer_of(index: UOp) -> UOp:
    """The BUFFER under an INDEX (looking through AFTER)."""
    b = index.src[0]
    while b.op is Ops.AFTER:
        b = b.src[0]
    return b


CompiledKernel = Callable[[dict[str, Any]], None]


class Backend(Protocol):
    """What a target provides (every Program runs on one). Host backends hold buffers as numpy arrays. Optional:
    `runner(program, compiled)` (run every kernel in one call), `storage_np(dtype)` (the numpy storage of a
    dtype), `holds(value)` / `put_device` / `get_device` (arrays already on the device), `synchronize()`,
    `compile_all(kernels, program)` (every kernel at once, for a backend that compiles them side by side),
    `coslices(program)` (the consecutive kernels its runner runs chunk by chunk: memory_plan.Coslice)."""

    name: str

    def compile(self, kernel: Kernel, program: Program) -> CompiledKernel: ...

    def render(self, kernel: Kernel, program: Program) -> str: ...

    def alloc(self, spec: BufferSpec) -> Any: ...

    def put(self, spec: BufferSpec, host: np.ndarray) -> Any: ...

    def get(self, spec: BufferSpec, buf: Any) -> np.ndarray: ...


class HostStorageBackend(Backend, Protocol):
    """A Backend with the optional `storage_np`: the numpy storage of a dtype (host backends)."""

    def storage_np(self, d: DType) -> np.dtype: ...


class DeviceBackend(Backend, Protocol):
    """A Backend with the optional device methods: it `holds` arrays already on its device, and places and
    returns them there."""

    def holds(self, value: Any) -> bool: ...

    def put_device(self, name: str, spec: BufferSpec, value: Any) -> Any: ...

    def get_device(self, spec: BufferSpec, buf: Any) -> Any: ...


class HostBuffers:
    """Buffer handling for backends that run on host numpy arrays.

    `storage` decides how a dtype is held: the reference interpreter keeps
    compute dtypes (bfloat16 as rounded float32), native code keeps the raw
    storage (bfloat16 as uint16 bits, bool as one byte).
    """

    native_storage: bool = True

    def storage_np(self, d: DType) -> np.dtype:
        if not self.native_storage:
            return compute_np(d)
        return np.dtype(np.uint16) if d is dtypes.bfloat16 else np.dtype(d.np)

    def alloc(self, spec: BufferSpec) -> np.ndarray:
        return np.zeros(spec.size, self.storage_np(spec.dtype))

    def put(self, spec: BufferSpec, host: np.ndarray) -> np.ndarray:
        flat = np.ascontiguousarray(host).reshape(-1)
        if spec.dtype is dtypes.bfloat16:
            r = bf16_round(flat.astype(np.float32))
            return (r.view(np.uint32) >> 16).astype(np.uint16) if self.native_storage else r
        return flat.astype(self.storage_np(spec.dtype), copy=False)  # kernels never write inputs: no copy

    def get(self, spec: BufferSpec, buf: np.ndarray) -> np.ndarray:
        if type(buf) is np.ndarray and buf.dtype is spec.dtype.np and spec.dtype is not dtypes.bfloat16:
            # stored as computed: a view of the right shape
            return buf.reshape(spec.shape)
        arr = np.asarray(buf)
        if spec.dtype is dtypes.bfloat16:
            arr = bf16_from_bits(arr) if arr.dtype == np.uint16 else arr.astype(np.float32)
        else:
            arr = arr.astype(spec.dtype.np, copy=False)
        return arr.reshape(spec.shape)  # buffers are fresh per call: no copy


OutMemo = tuple[list[Any], dict[str, Any], dict[str, np.ndarray]]  # weak refs to out= and inputs; out='s flat views


def _same_call(memo: OutMemo, arrays: list[Any], inputs: dict[str, Any]) -> bool:
    """Are these the out= arrays and inputs of the call that `memo` remembers (still writeable)?"""
    refs, ins, _ = memo
    return (
        len(refs) == len(arrays)
        and all(r() is a for r, a in zip(refs, arrays))
        and ins.keys() == inputs.keys()
        and all(ins[k]() is v for k, v in inputs.items())
        and all(a.flags.writeable for a in arrays)
    )


class Placement(NamedTuple):
    """What every call of a program needs to know of its buffers, computed once."""

    rows: list[tuple[str, str, BufferSpec, np.dtype | None]]  # name, kind, spec, numpy dtype used as it is
    input_names: Any  # a keys view, to compare with the call's
    kept: tuple[str, ...]  # what a finished call leaves for the next: intermediates and outputs
    native: dict[str, np.dtype | None]  # name -> that numpy dtype (an out= array must have it)
    intermediates: tuple[str, ...]
    outputs: tuple[tuple[str, BufferSpec], ...]
    repeated_output: bool  # one buffer returned twice: the later copies are independent arrays


def positional_inputs(names: list[str], args: tuple[Any, ...], inputs: dict[str, Any]) -> dict[str, Any]:
    """Inputs given by position, in the program's input order (`names`), merged with those given by name."""
    if len(args) > len(names):
        raise InvalidArgument(
            at="program call",
            why=f"{len(args)} positional inputs given, but the program takes {len(names)}: {names}",
            suggestion="pass inputs by name (prog(x=...)) or in the order of prog.inputs",
        )
    twice = [n for n in names[: len(args)] if n in inputs]
    if twice:
        raise InvalidArgument(
            at="program call",
            why=f"input {twice[0]!r} is given both by position and by name",
            suggestion="give each input once",
        )
    return {**dict(zip(names, args)), **inputs}


@dataclass
class Program:
    """Kernels in dependency order, their buffers, and how to run them on one target."""

    kernels: list[Kernel]
    buffers: dict[str, BufferSpec]
    inputs: list[str]  # placeholder names, in signature order
    outputs: list[str]  # output buffer names, in root order
    backend: Backend
    target: str
    report: Any = None
    single_output: bool = True
    progress: Callable[[str], None] | None = field(default=None, repr=False)  # told when compiling starts and ends
    _compiled: list[CompiledKernel] | None = field(default=None, repr=False)
    _consts: dict[str, Any] = field(default_factory=dict, repr=False)
    _runner: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False)
    _temps: list[dict[str, Any]] = field(default_factory=list, repr=False)  # finished calls' buffers to reuse
    _out_memo: OutMemo | None = field(default=None, repr=False)
    _plan: Placement | None = field(default=None, repr=False)
    _arena: ArenaPlan | None = field(default=None, repr=False)
    _coslices: dict[int, Coslice] | None = field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle keeps: the program, not what running it made (the private fields: compiled code, buffers,
        placement, at their defaults again, so the unpickled copy compiles on its first call) nor the progress
        callback."""
        fresh = {
            f.name: f.default if f.default_factory is MISSING else f.default_factory()
            for f in fields(self)
            if f.name.startswith("_") or f.name == "progress"
        }
        return {**self.__dict__, **fresh}

    @property
    def source(self) -> Sources:
        """Every kernel rendered for this target: the text of all of them, one after another, which is also a
        mapping from kernel name to that kernel's source (`prog.source["k0"]`, `prog.source.items()`)."""
        return Sources({k.name: self.backend.render(k, self) for k in self.kernels})

    def compile(self) -> list[CompiledKernel]:
        """Every kernel compiled for the backend (once: the first call does it), said to `progress`."""
        if self._compiled is None:
            t0 = time.perf_counter()
            if self.progress is not None:
                self.progress(f"compiling: {len(self.kernels)} kernels for {self.backend.name}")
            every = getattr(self.backend, "compile_all", None)  # a backend that compiles kernels side by side
            self._compiled = every(self.kernels, self) if every else [self.backend.compile(k, self) for k in self.kernels]
            if self.progress is not None:
                self.progress(f"compiled {len(self.kernels)} kernels in {time.perf_counter() - t0:.2f} s")
        return self._compiled

    def __call__(self, *args: Any, out: Any = None, **inputs: Any) -> Any:
        """Run the program on `inputs` (by placeholder name, or positionally in `self.inputs` order); returns its
        output (a tuple for several).

        out: arrays to write the outputs into (one array, or a tuple of one per output): C-contiguous numpy
        arrays of the output's shape and dtype, not overlapping an input. The call then allocates no output
        and returns `out`. (A program whose input is named "out" takes that input by this keyword.)
        On target "cuda", CuPy inputs are read where they are (no host copy), and then the outputs come back as
        CuPy arrays on the GPU."""
        if args:
            inputs = positional_inputs(self.inputs, args, inputs)
        if "out" in self.inputs and out is not None:
            inputs, out = {**inputs, "out": out}, None
        given = self._outputs_into(out, inputs) if out is not None else {}
        compiled = self.compile()
        temps = self._reusable_temps()
        if given:
            temps = {**(temps or {}), **given}
        bufs = self._place(inputs, temps)
        if self._runner is None and hasattr(self.backend, "runner"):  # native backends run the kernels in one go
            self._runner = self.backend.runner(self, compiled)
        if self._runner is not None:
            self._runner(bufs)
        else:
            for run in compiled:
                run(bufs)
        plan = self._plan
        assert plan is not None
        if given:
            self._temps.append({n: bufs[n] for n in plan.intermediates})
            if len(given) < len(self.outputs):  # the same tensor returned twice: the later arrays get a copy
                arrays = list(out)
                for i, n in enumerate(self.outputs):
                    if not np.may_share_memory(arrays[i], bufs[n]):
                        arrays[i][...] = bufs[n].reshape(arrays[i].shape)
            return out
        outs = self._results(plan, bufs, inputs)
        return outs[0] if self.single_output else tuple(outs)

    def _reusable_temps(self) -> dict[str, Any] | None:
        """A finished call's intermediates and outputs, to reuse (kernels write every element of what they store):
        no allocation, no page faults on fresh memory, no new addresses to take. Concurrent calls each take their
        own set, and an output the caller still holds (or a view of it) is left to the caller."""
        try:
            temps = self._temps.pop()
        except IndexError:
            return None
        for n in self.outputs:
            if n in temps and sys.getrefcount(temps[n]) > 2:  # the set's reference and getrefcount's argument
                del temps[n]
        return temps

    def _results(self, plan: Placement, bufs: dict[str, Any], inputs: dict[str, Any]) -> list[Any]:
        """The outputs as the caller's arrays (host arrays, or device arrays when the inputs were on the GPU); the
        buffers this call may hand to the next are set aside."""
        holds = getattr(self.backend, "holds", None)
        if holds is not None and any(holds(v) for v in inputs.values()):
            # inputs on the GPU: the outputs stay there too, as the caller's own arrays (never reused)
            self._temps.append({n: bufs[n] for n in plan.intermediates})
            device = cast(DeviceBackend, self.backend)  # it has `holds`, so the other device methods too
            outs = [device.get_device(spec, bufs[n]) for n, spec in plan.outputs]
        else:
            self._temps.append({n: bufs[n] for n in plan.kept})
            get = self.backend.get
            outs = [get(spec, bufs[n]) for n, spec in plan.outputs]
        return [o.copy() for o in outs] if plan.repeated_output else outs

    def _outputs_into(self, out: Any, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        """The caller's output arrays as the kernels' output buffers (flat views), each checked: one per output,
        the output's shape, its dtype as the kernels store it, C-contiguous, writeable, apart from every input."""
        arrays = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(arrays) != len(self.outputs) or (self.single_output and isinstance(out, (tuple, list))):
            want = "one array" if self.single_output else f"a tuple of {len(self.outputs)} arrays"
            raise InvalidArgument(at="out=", why=f"the program has {len(self.outputs)} output(s)", suggestion=f"pass {want}")
        if self._plan is None:
            self._plan = self._placement()
        memo = self._out_memo
        if memo is not None and _same_call(memo, arrays, inputs):  # a serving loop: checked then, views kept
            return memo[2]
        native = self._plan.native
        given: dict[str, np.ndarray] = {}
        for i, (name, a) in enumerate(zip(self.outputs, arrays)):
            where = f"out[{i}]" if not self.single_output else "out"
            self._check_out(where, name, a, native.get(name))
            clash = next((k for k, v in inputs.items() if type(v) is np.ndarray and np.may_share_memory(a, v)), None)
            if clash is not None:
                raise InvalidArgument(
                    at=where,
                    why=f"it overlaps input {clash!r}: kernels read inputs while they write outputs",
                    suggestion="write into a separate array",
                )
            other = next((n for n, g in given.items() if n != name and np.may_share_memory(a, g)), None)
            if other is not None:
                raise InvalidArgument(
                    at=where,
                    why=f"it overlaps the array given for output {self.outputs.index(other)}: two outputs would share memory",
                    suggestion="pass a separate array for each output",
                )
            given.setdefault(name, a.reshape(-1))
        try:
            self._out_memo = ([weakref.ref(a) for a in arrays], {k: weakref.ref(v) for k, v in inputs.items()}, given)
        except TypeError:  # an input that takes no weak reference (a list): checked every call
            self._out_memo = None
        return given

    def _check_out(self, where: str, name: str, a: Any, native: np.dtype | None) -> None:
        """One caller's output array: a C-contiguous, writeable numpy array of the output's shape and its dtype as
        the kernels store it (`native`; None: this target keeps the buffer off the host)."""
        spec = self.buffers[name]
        if native is None:
            raise InvalidArgument(
                at=where,
                why=f"{spec.dtype.name} outputs are stored as {self.backend.storage_np(spec.dtype)} by this target"
                if hasattr(self.backend, "storage_np")
                else f"the {self.target} target keeps its buffers off the host",
                suggestion="call without out= and copy the result",
            )
        if type(a) is np.ndarray and a.dtype == native and a.shape == spec.shape:
            flags = a.flags
            if flags.c_contiguous and flags.writeable:
                return
        what = type(a).__name__
        if isinstance(a, np.ndarray):
            what = f"a {a.dtype} array of shape {a.shape}" + "".join(
                f", {flag}"
                for flag, bad in (("not C-contiguous", not a.flags.c_contiguous), ("read-only", not a.flags.writeable))
                if bad
            )
        raise InvalidArgument(
            at=where,
            why=f"got {what}; the output is a C-contiguous, writeable {native} array of shape {spec.shape}",
            suggestion=f"allocate it with np.empty({spec.shape}, dtype=np.{native})",
        )

    def place_buffers(self, **inputs: Any) -> dict[str, Any]:
        """Every buffer of the program on its backend, whole (to run kernels one by one): inputs checked and
        placed, constants placed, the rest allocated."""
        return self._place(inputs, None, whole=True)

    def _place(self, inputs: dict[str, Any], temps: dict[str, Any] | None, whole: bool = False) -> dict[str, Any]:
        """The buffers of a call (`whole`: every one of its full size, even those a call keeps chunk by chunk)."""
        if self._plan is None:
            self._plan = self._placement()
        if inputs.keys() != self._plan.input_names:
            missing = [n for n in self.inputs if n not in inputs]
            if missing:
                spec = self.buffers[missing[0]]
                raise MissingInput(
                    at=f"input {missing[0]!r}",
                    why=f"the program needs inputs {self.inputs}",
                    suggestion=f"call the program with {missing[0]}=<array of shape {spec.shape}>",
                )
            extra = sorted(set(inputs) - set(self.inputs))
            raise MissingInput(
                at=f"input {extra[0]!r}",
                why=f"the program has no input named {extra[0]!r}",
                suggestion=f"its inputs are {self.inputs}",
            )
        try:
            return self._placed(inputs, temps, whole)
        except MemoryError:
            size = sum(spec.size * spec.dtype.itemsize for _, kind, spec, _ in self._plan.rows if kind != "input")
            raise OutOfMemory(
                at="program buffers",
                why=f"the program's buffers ({size} bytes besides its inputs) could not be allocated",
                suggestion="use smaller shapes, or free memory",
            ) from None

    def coslices(self) -> dict[int, Coslice]:
        """Kernel i -> how the backend's runner runs kernels i and i + 1 chunk by chunk (none where it runs every
        kernel whole); decided once."""
        if self._coslices is None:
            find = getattr(self.backend, "coslices", None)
            self._coslices = find(self) if find is not None else {}
        return self._coslices

    def chunk_local(self) -> frozenset[str]:
        """Intermediates that a program call keeps only chunk by chunk, in the runner's scratch (Coslice.local):
        they have no bytes in the arena, and a call gets an empty array for each."""
        return frozenset(c.buffer for c in self.coslices().values() if c.local)

    def memory_plan(self) -> ArenaPlan | None:
        """Where the intermediates live in one arena (host targets; None elsewhere, or with none). A pair of
        kernels run chunk by chunk is one step of the plan, and what only it touches has no bytes here."""
        storage = getattr(self.backend, "storage_np", None)
        if self._arena is None and storage is not None:  # planned once (program calls ask again)
            local = self.chunk_local()
            temps = {n: spec for n, spec in self.buffers.items() if spec.kind == "intermediate" and n not in local}
            if temps:
                sizes = {n: spec.size * storage(spec.dtype).itemsize for n, spec in temps.items()}
                steps = [(k.reads, k.writes) for k in self.kernels]
                self._arena = plan(sizes, lifetimes(steps, temps, self.coslices()))
        return self._arena

    def _arena_views(self) -> dict[str, np.ndarray]:
        """A fresh arena (zeroed, as separate buffers were) and every intermediate's view of it."""
        arena = self.memory_plan()
        assert arena is not None
        raw = np.zeros(arena.size + ALIGN, np.uint8)
        base = raw[(-raw.ctypes.data) % ALIGN :][: arena.size]
        host = cast(HostStorageBackend, self.backend)  # an arena is planned only where there is `storage_np`
        views = {}
        for name, off in arena.offsets.items():
            spec = self.buffers[name]
            dt = host.storage_np(spec.dtype)
            views[name] = base[off : off + spec.size * dt.itemsize].view(dt)
        return views

    def _placed(self, inputs: dict[str, Any], temps: dict[str, Any] | None, whole: bool) -> dict[str, Any]:
        bufs: dict[str, Any] = {}
        arena: dict[str, np.ndarray] | None = None
        local = frozenset() if whole else self.chunk_local()
        holds = getattr(self.backend, "holds", None)
        assert self._plan is not None  # _place plans first
        for name, kind, spec, native in self._plan.rows:
            if kind == "input":
                v = inputs[name]
                if (
                    native is not None
                    and type(v) is np.ndarray
                    and (v.dtype is native or v.dtype == native)
                    and v.shape == spec.shape
                    and v.flags.c_contiguous
                ):
                    bufs[name] = v  # already what the kernels read (contiguous, in storage dtype): as it is
                elif holds is not None and holds(v):  # already on the backend's device (a CuPy array)
                    device = cast(DeviceBackend, self.backend)  # it has `holds`, so the other device methods too
                    bufs[name] = device.put_device(name, spec, v)
                else:
                    bufs[name] = self.backend.put(spec, coerce_input(name, v, spec.shape, spec.dtype))
            elif kind == "const":  # kernels never write constants: placed once per program
                if name not in self._consts:
                    assert spec.data is not None  # a const buffer holds its data
                    self._consts[name] = self.backend.put(spec, spec.data)
                bufs[name] = self._consts[name]
            elif temps is not None and name in temps and kind in ("intermediate", "output"):
                bufs[name] = temps[name]
            elif kind == "intermediate" and name in local:  # the runner keeps it chunk by chunk in its scratch
                bufs[name] = np.empty(0, cast(HostStorageBackend, self.backend).storage_np(spec.dtype))
            elif kind == "intermediate" and (ap := self.memory_plan()) is not None and name in ap.offsets:
                if arena is None:
                    arena = self._arena_views()
                bufs[name] = arena[name]
            else:
                bufs[name] = self.backend.alloc(spec)
        return bufs

    def _placement(self) -> Placement:
        """Per buffer: name, kind, spec and the numpy dtype an input already in place has (None: always
        convert); the input names, as a keys view to compare with the call's; what a call leaves for the next;
        per buffer, that numpy dtype again (an `out=` array must have it)."""
        storage = getattr(self.backend, "storage_np", None)
        rows = []
        for name, spec in self.buffers.items():
            native = None
            if storage is not None and spec.dtype is not dtypes.bfloat16 and storage(spec.dtype) == spec.dtype.np:
                native = np.dtype(spec.dtype.np)
            rows.append((name, spec.kind, spec, native))
        intermediates = tuple(n for n, spec in self.buffers.items() if spec.kind == "intermediate")
        return Placement(
            rows,
            dict.fromkeys(self.inputs).keys(),
            (*intermediates, *dict.fromkeys(self.outputs)),
            {name: nat for name, _, _, nat in rows},
            intermediates,
            tuple((n, self.buffers[n]) for n in self.outputs),
            len(set(self.outputs)) < len(self.outputs),
        )

    def profile(self, repeat: int = 5, **inputs: Any) -> dict[str, float]:
        """Each kernel run alone on `inputs` (after one warm-up run of the whole program): kernel name -> median
        seconds over `repeat` runs. For comparing with the estimate (`describe(measured=...)`)."""
        compiled = self.compile()
        bufs = self._place(inputs, None, whole=True)
        sync = getattr(self.backend, "synchronize", lambda: None)  # a GPU runs kernels asynchronously
        for run in compiled:
            run(bufs)
        sync()
        times: dict[str, float] = {}
        for kernel, run in zip(self.kernels, compiled):
            samples = []
            for _ in range(max(1, repeat)):
                t0 = time.perf_counter()
                run(bufs)
                sync()
                samples.append(time.perf_counter() - t0)
            times[kernel.name] = statistics.median(samples)
        return times

    def describe(self, measured: dict[str, float] | None = None) -> str:
        """Every kernel in units a person reads: its loop nest (sizes with AxisType letters: L loop, u upcast,
        R reduce, r unroll, ...), the buffers it reads and writes with their bytes, the estimate in us split
        into compute, memory and overhead, and beside it the measured time where `measured` (`profile()`)
        has one."""

        def size(name: str) -> str:
            spec = self.buffers.get(name)
            return f"{name} ({_bytes(spec.size * spec.dtype.itemsize)})" if spec else name

        entries = {e["name"]: e for e in (self.report.extra.get("kernels", []) if self.report is not None else [])}
        lines = [self.summary().splitlines()[0]]
        total_est = total_meas = 0.0
        for k in self.kernels:
            e = entries.get(k.name, {})
            lines.append(f"  {k.name}  {e.get('schedule', '(no schedule recorded)')}")
            lines.append(f"      reads  {', '.join(size(n) for n in k.reads) or '-'}")
            lines.append(f"      writes {', '.join(size(n) for n in k.writes) or '-'}")
            cost = e.get("cost") or {}
            if "seconds" in cost:
                total_est += cost["seconds"]
                parts = " + ".join(
                    f"{label} {cost[key] * 1e6:.1f}"
                    for key, label in (("compute_s", "compute"), ("memory_s", "memory"), ("overhead_s", "overhead"))
                    if key in cost
                )
                est = f"      estimate {cost['seconds'] * 1e6:.1f} us ({parts})"
                if measured and k.name in measured:
                    total_meas += measured[k.name]
                    est += (
                        f"; measured {measured[k.name] * 1e6:.1f} us ({measured[k.name] / cost['seconds']:.2f}x the estimate)"
                    )
                lines.append(est)
            flops = k.flops
            if flops:
                rate = f", {flops / measured[k.name] / 1e9:.1f} GFLOP/s measured" if measured and k.name in measured else ""
                lines.append(f"      work   {_count(flops)}FLOP{rate}")
        if total_est:
            tail = f"; measured {total_meas * 1e6:.1f} us" if measured else ""
            lines.append(f"  total estimate {total_est * 1e6:.1f} us{tail}")
        return "\n".join(lines + self._arena_lines())

    def summary(self) -> str:
        lines = [f"Program for {self.target}: {len(self.kernels)} kernel(s), inputs {self.inputs}, outputs {self.outputs}"]
        for k in self.kernels:
            lines.append(f"  {k.name}: reads {list(k.reads)} writes {list(k.writes)}")
        return "\n".join(lines + self._arena_lines())

    def _arena_lines(self) -> list[str]:
        arena, local = self.memory_plan(), sorted(self.chunk_local())
        lines = []
        if arena is not None:
            lines.append(
                f"  intermediates: {len(arena.offsets)} buffer(s) in one arena of {_bytes(arena.size)} "
                f"({_bytes(arena.unplanned)} allocated one by one)"
            )
        if local:
            lines.append(f"  kept chunk by chunk in the runner's scratch, no buffer of their own: {', '.join(local)}")
        return lines


def _count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} "


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@lru_cache(maxsize=1 << 16)
def ranges_in(u: UOp) -> frozenset[UOp]:
    """The RANGEs u mentions."""
    return frozenset(x for x in u.toposort() if x.op is Ops.RANGE)


@lru_cache(maxsize=1 << 16)  # the estimate, the backend and the cache model ask about each index again and again
def stride(idx: UOp, r: UOp) -> int | None:
    """Coefficient of range r in an index, over one run of r (0 if absent, None if r enters non-linearly). A
    MOD or IDIV by a constant whose run of r never crosses a multiple of it (a packed panel's `j % 32` with j
    split 16 x 16) steps by r's coefficient inside it, and its quotient not at all."""
    if r not in ranges_in(idx):
        return 0
    if idx is r:
        return 1
    if idx.op is Ops.ADD:
        a, b = (stride(s, r) for s in idx.src)
        return None if a is None or b is None else a + b
    if idx.op is Ops.MUL:
        x, c = idx.src if idx.src[1].op is Ops.CONST else idx.src[::-1]
        if c.op is Ops.CONST and (s := stride(x, r)) is not None:
            return s * int(c.arg)
    if idx.op in (Ops.MOD, Ops.IDIV) and idx.src[1].op is Ops.CONST and r.src[0].op is Ops.CONST:
        terms = linear_terms(idx.src[0])
        n, span = int(idx.src[1].arg), terms.get(r, 0) * int(r.src[0].arg) if terms is not None else 0
        if (
            terms is not None
            and span > 0
            and n > 0
            and n % span == 0
            and all(  # never negative, either
                v >= 0 and v % span == 0 for k, v in terms.items() if k is not r
            )
        ):
            return terms[r] if idx.op is Ops.MOD else 0
    return None


def lane_step(u: UOp, lane: UOp) -> int:
    """For u = `a < b` over signed integers whose sides step along `lane` by amounts differing by 1 (a padded
    window's column against its edge): that difference, +1 or -1 (the compare is then `j < bound` or `j > bound`
    for the lane's number j and one scalar bound); else 0."""
    if u.op is not Ops.CMPLT or not u.src[0].dtype.is_int or u.src[0].dtype.is_unsigned:
        return 0
    sa, sb = stride(u.src[0], lane), stride(u.src[1], lane)
    return sa - sb if sa is not None and sb is not None and abs(sa - sb) == 1 else 0


MAX_TRANSPOSE_LANES = 16  # wider squares take more shuffles than they save


def transpose_axis(idx: UOp, lane: UOp, axes: Iterable[UOp]) -> UOp | None:
    """The first unrolled range among `axes` along which a float32 load at index `idx` reads consecutive elements
    where it does not along `lane` (a tile copied to a transposed layout: a packed weight panel), if its copies come
    in whole squares of the lane's size: the CPU backend loads them as vectors along it and transposes them in
    registers (and the estimate prices them so)."""
    n = trip_count(lane)
    if stride(idx, lane) == 1 or n > MAX_TRANSPOSE_LANES:
        return None
    return next((a for a in axes if a is not lane and trip_count(a) % n == 0 and stride(idx, a) == 1), None)


LANE_STEPS = (2, 3, 4)  # strides along a vector's lane the CPU backend reads as one load of their span and a shuffle
LANE_CONDITION_OPS = (Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.CMPLT, Ops.CMPNE)


def lane_condition(u: UOp, lane: UOp) -> bool:
    """Can the CPU backend compute boolean or integer u over the copies of an unrolled `lane` as one vector (the
    mask of a guarded load of consecutive elements, a padded window's row)? Values the same in every lane, the
    lane's own number, `a + s*j < b` with the two sides' steps along it differing by 1 (one compare against a
    scalar bound), and integer or boolean arithmetic and comparisons of such values."""
    if lane not in ranges_in(u) or u is lane or lane_step(u, lane):
        return True
    return (
        u.op in LANE_CONDITION_OPS
        and (u.src[0].dtype.is_int or u.src[0].dtype.is_bool)
        and all(lane_condition(s, lane) for s in u.src)
    )


MAX_ACC_LANES = 512  # the widest vector of accumulators a REDUCE keeps along one unrolled axis (a matrix-vector
# product's 512 columns: 32 AVX-512 registers; wider, it kept one scalar per copy for LLVM to pack again)


def _loads_contiguous(body: UOp, r: UOp) -> bool:
    """Every load in body whose index depends on r steps by 1 along it (a load that does not is broadcast)."""
    for u in value_nodes(body):
        if u.op is Ops.LOAD:
            idx = u.src[0]
            lin = idx.src[1] if idx.op is Ops.INDEX and len(idx.src) > 1 else None
            if lin is None or stride(lin, r) not in (0, 1):
                return False
    return True


def vector_accumulators(reduce: UOp) -> bool:
    """Whether the CPU backend may keep a REDUCE's accumulators in vectors: a float32/float64 sum, product or max
    (each lane does the same operations in the same order as a scalar chain would). A max pool's copies left to
    LLVM's SLP vectorizer as scalar chains ran 1.6-32x slower where it did not pack them (3x3, 64 channels of
    56x56 at batch 8, 8 channels x 32 columns a tile: 13.6 ms against 0.43)."""
    return reduce.dtype in (dtypes.float32, dtypes.float64) and reduce.arg[0] in (Ops.ADD, Ops.MUL, Ops.MAX)


def accumulator_axis(reduce: UOp, outer: list[UOp], store_contiguous: frozenset[UOp], lanes: int) -> UOp | None:
    """The unrolled range along which the CPU backend keeps a REDUCE's accumulators in one vector (None: one
    scalar accumulator per copy). `outer`: the unrolled ranges around the REDUCE that it depends on, in the
    backend's emission order. The default is the last of them when the store steps by 1 along it (a GEMM tile's
    columns) and it makes whole vectors or a power of two of lanes (LLVM splits 7 lanes into 4 + 2 + 1). When
    that range does not fill whole vectors of `lanes`, or its loads step by more than 1, a range that does both
    takes over: a convolution whose output channels read a packed weight (packing.py) keeps them in one
    vector and broadcasts each input pixel, whatever the row's width or the stride."""

    def usable(r: UOp) -> bool:
        b = r.src[0]
        return b.op is Ops.CONST and 2 <= int(b.arg) <= MAX_ACC_LANES

    def full(r: UOp) -> bool:
        return int(r.src[0].arg) % lanes == 0 and _loads_contiguous(reduce.src[0], r)

    if not vector_accumulators(reduce):
        return None
    last = outer[-1] if outer else None
    default = (
        last
        if last is not None
        and last in store_contiguous
        and usable(last)
        and (int(last.src[0].arg) % lanes == 0 or int(last.src[0].arg) & (int(last.src[0].arg) - 1) == 0)
        else None
    )
    if default is not None and full(default):
        return default
    better = [r for r in outer if usable(r) and full(r)]
    if not better:
        return default
    first = {x: i for i, x in enumerate(reduce.src[0].toposort())}  # ties go the same way in every process
    return max(better, key=lambda r: (r in store_contiguous, int(r.src[0].arg), first.get(r, -1)))


def linear_terms(e: UOp) -> dict[UOp | None, int] | None:
    """e as coefficients of its ranges (None: the constant term), if it is a linear combination of them."""
    if e.op is Ops.RANGE:
        return {e: 1}
    if e.op is Ops.CONST and isinstance(e.arg, int):
        return {None: e.arg}
    if e.op is Ops.ADD:
        a, b = linear_terms(e.src[0]), linear_terms(e.src[1])
        if a is None or b is None:
            return None
        return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}
    if e.op is Ops.MUL:
        x, c = e.src if e.src[1].op is Ops.CONST else e.src[::-1]
        if c.op is Ops.CONST and isinstance(c.arg, int) and (t := linear_terms(x)) is not None:
            return {k: v * c.arg for k, v in t.items()}
    return None


def canonical_kernel(kernel: UOp) -> tuple[tuple[Any, ...], ...]:
    """The kernel's structure as a key: one row per node in topological order (op, dtype, arg, positions of its
    sources), buffers and ranges named by first appearance. Kernels that differ only in which buffers they touch
    and how their ranges were named (a model's repeated layers) get one key, for memoizing what depends on
    structure and sizes alone, such as estimates. Rows, not a renamed UOp: nothing is interned."""
    pos: dict[UOp, int] = {}
    names: dict[object, int] = {}
    rows: list[tuple[Any, ...]] = []
    for u in kernel.toposort():
        key = u.arg_key
        if u.op in (Ops.BUFFER, Ops.RANGE):  # arg_key maps a tuple element by element
            key = (names.setdefault((u.op, u.arg[0]), len(names)), *key[1:])
        rows.append((u.op, u.dtype, key, tuple(pos[s] for s in u.src)))
        pos[u] = len(rows) - 1
    return tuple(rows)
