"""The numpy reference backend: runs kernel ASTs, the contract every renderer implements, on numpy arrays.

A kernel's RANGEs become broadcast axes, so a whole loop nest is evaluated at once; REDUCE reduces its range
axes; loads and stores are bounds-checked wherever they are active (gates and WHERE branches narrow the active
set), raising OutOfBounds. Values follow the tensor-level interpreter (egraph_compiler/ir/interpret.py) node by
node.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from egraph_compiler.ir.diagnostics import MissingInput, OutOfBounds
from egraph_compiler.ir.dtypes import DType, bf16_round, compute_np, dtypes
from egraph_compiler.ir.interpret import Env, eval_node, fix_dtype
from egraph_compiler.ir.ops import OP_TABLE, Ops
from egraph_compiler.ir.uop import UOp, pretty
from egraph_compiler.kernel.analysis import store_items
from egraph_compiler.kernel.program import HostBuffers

# ---- kernel level ------------------------------------------------------------------------------


def range_axes(ast: UOp) -> tuple[dict[UOp, int], int]:
    """A broadcast axis for every RANGE of a kernel, and how many axes: ranges that can be live at once (the
    loop ranges, and each REDUCE's ranges with every range around it) get different axes, and the ranges of
    sibling reductions share one (numpy arrays have at most 32 axes; a kernel of many small reductions has more
    ranges than that)."""
    around: dict[UOp, set[UOp]] = {}  # the ranges enclosing each node: loops of its END, reductions it is under
    loops: set[UOp] = set()
    for u in reversed(ast.toposort()):  # parents before children
        ctx = around.get(u, set())
        for i, s in enumerate(u.src):
            inner = ctx
            if u.op is Ops.END and i == 0:
                loops.update(u.src[1:])
                inner = ctx | set(u.src[1:])
            elif u.op is Ops.REDUCE and i == 0:
                inner = ctx | set(u.src[1:])
            around.setdefault(s, set()).update(inner)
    apart: dict[UOp, set[UOp]] = {}  # pairs that need different axes
    groups = [loops] + [set(u.src[1:]) | around.get(u, set()) for u in around if u.op is Ops.REDUCE]
    for g in groups:
        for r in g:
            apart.setdefault(r, set()).update(g - {r})
    axis: dict[UOp, int] = {}
    for r in kernel_ranges(ast):
        taken = {axis[o] for o in apart.get(r, ()) if o in axis}
        axis[r] = next(i for i in range(len(taken) + 1) if i not in taken)
    return axis, max(axis.values(), default=-1) + 1


class _KernelEval:
    """Evaluates one kernel AST with every RANGE as a broadcast axis (`range_axes`)."""

    def __init__(self, axes: tuple[dict[UOp, int], int], buffers: Env, fixed: dict[UOp, np.ndarray]) -> None:
        self.axis, self.nd = axes
        self.buffers = buffers
        self.fixed = fixed
        self.memo: dict[tuple[UOp, int], np.ndarray] = {}
        self.masks: list[Any] = []  # keeps every mask alive, so its id() stays unique
        self.branches: dict[tuple[UOp, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def range_value(self, r: UOp) -> np.ndarray:
        if r in self.fixed:
            return self.fixed[r]
        shape = [1] * self.nd
        shape[self.axis[r]] = int(r.src[0].arg)
        return np.arange(shape[self.axis[r]], dtype=np.int64).reshape(shape)

    def ev(self, u: UOp, mask: np.ndarray | None) -> np.ndarray:
        """Iterative post-order evaluation under an activity mask (None = everywhere active)."""
        key = (u, id(mask))
        if key in self.memo:
            return self.memo[key]
        self.masks.append(mask)
        stack: list[tuple[UOp, np.ndarray | None, bool]] = [(u, mask, False)]
        while stack:
            node, m, ready = stack.pop()
            k = (node, id(m))
            if k in self.memo:
                continue
            if node.op is Ops.WHERE and not ready:
                # condition first, then each branch under its own narrowed mask
                ck = (node.src[0], id(m))
                if ck not in self.memo:
                    stack += [(node, m, False), (node.src[0], m, False)]
                    continue
                if k not in self.branches:  # narrow once per (node, mask): revisits must see the same masks
                    c = self.memo[ck].astype(bool)
                    self.branches[k] = (c, _and(m, c), _and(m, ~c))
                c, ma, mb = self.branches[k]
                pend = [(s, mm) for s, mm in ((node.src[1], ma), (node.src[2], mb)) if (s, id(mm)) not in self.memo]
                if pend:
                    stack.append((node, m, False))
                    stack += [(s, mm, False) for s, mm in pend]
                    continue
                self.memo[k] = fix_dtype(
                    np.where(c, self.memo[(node.src[1], id(ma))], self.memo[(node.src[2], id(mb))]), node.dtype
                )
                continue
            srcs = self._operands(node)
            waiting = [s for s in srcs if (s, id(m)) not in self.memo]
            if waiting:
                stack.append((node, m, False))
                stack += [(s, m, False) for s in waiting]
                continue
            self.memo[k] = self.compute(node, [self.memo[(s, id(m))] for s in srcs], m)
        return self.memo[key]

    @staticmethod
    def _operands(node: UOp) -> tuple[UOp, ...]:
        # loads and reduces evaluate their own sources (under narrowed masks / with range axes)
        if node.op in (Ops.RANGE, Ops.CONST, Ops.DEFINE_VAR, Ops.BUFFER, Ops.PARAM, Ops.REDUCE, Ops.LOAD):
            return ()
        return node.src

    def compute(self, u: UOp, vals: list[np.ndarray], mask: np.ndarray | None) -> np.ndarray:
        if u.op is Ops.RANGE:
            return self.range_value(u)
        if u.op is Ops.CONST:
            return fix_dtype(np.array(u.arg), u.dtype)
        if u.op is Ops.REDUCE:
            return self.reduce(u, mask)
        if u.op is Ops.LOAD:
            return self.load(u, mask)
        if u.op is Ops.DEFINE_VAR:
            raise MissingInput(
                at=f"variable {u.arg[0]}",
                why="kernels here take no symbolic variables",
                suggestion="bind variables before lowering",
            )
        return eval_node(u, vals, {}, {})

    def reduce(self, u: UOp, mask: np.ndarray | None) -> np.ndarray:
        op = u.arg[0]
        rngs = u.src[1:]
        body = self.ev(u.src[0], mask)
        full = list(np.broadcast_shapes(body.shape, *(self.range_value(r).shape for r in rngs)))
        axes = tuple(self.axis[r] for r in rngs if r not in self.fixed)
        body = np.broadcast_to(body, full)
        ref = OP_TABLE[Ops.REDUCE].ref
        assert ref is not None  # REDUCE has numpy semantics in the op table
        return fix_dtype(ref(body, (op, axes)), u.dtype)

    def _address(self, ptr: UOp, mask: np.ndarray | None, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        buf = ptr.src[0]
        if buf.op is Ops.AFTER:
            buf = buf.src[0]
        name = buf.arg[0]
        data = self.buffers[name]
        idx = self.ev(ptr.src[1], mask).astype(np.int64) if len(ptr.src) > 1 else np.zeros((), np.int64)
        active = np.ones(idx.shape, bool) if mask is None else np.broadcast_to(mask, np.broadcast_shapes(mask.shape, idx.shape))
        idx = np.broadcast_to(idx, active.shape)
        bad = active & ((idx < 0) | (idx >= data.size))
        if bad.any():
            first = int(idx[bad].flat[0])
            raise OutOfBounds(
                at=f"{what} of buffer {name!r}",
                why=f"index {first} is outside [0, {data.size})",
                suggestion="this is a compiler bug: the kernel's index is not guarded",
                buffer=name,
            )
        return data.reshape(-1), np.where(active, idx, 0), active

    def load(self, u: UOp, mask: np.ndarray | None) -> np.ndarray:
        gate = self.ev(u.src[2], mask).astype(bool) if len(u.src) > 2 else None
        alt = self.ev(u.src[1], mask) if len(u.src) > 1 else None
        inner = _and(mask, gate) if gate is not None else mask
        self.masks.append(inner)
        flat, idx, _ = self._address(u.src[0], inner, "load")
        out = flat[idx]
        if gate is not None:
            out = np.where(gate, out, alt if alt is not None else 0)
        return fix_dtype(out, u.dtype)

    def store(self, st: UOp, loop_shape: tuple[int, ...]) -> None:
        gate = self.ev(st.src[2], None).astype(bool) if len(st.src) > 2 else None
        flat, idx, active = self._address(st.src[0], gate, "store")
        val = self.ev(st.src[1], gate)
        shape = np.broadcast_shapes(loop_shape, idx.shape, val.shape, active.shape)
        idx, val, active = (np.broadcast_to(a, shape) for a in (idx, val, active))
        target = st.src[0].src[0]
        dt = (target.src[0] if target.op is Ops.AFTER else target).dtype
        flat[idx[active]] = _to_storage(val[active], dt)


def _and(a: np.ndarray | None, b: np.ndarray) -> np.ndarray:
    return b if a is None else (a & b)


def _to_storage(x: np.ndarray, d: DType) -> np.ndarray:
    if d is dtypes.bfloat16:
        return bf16_round(x.astype(np.float32))
    return x.astype(compute_np(d), copy=False)


def kernel_ranges(ast: UOp) -> list[UOp]:
    return [u for u in ast.toposort() if u.op is Ops.RANGE]


def run_kernel(ast: UOp, buffers: Env, max_elements: int = 1 << 22) -> None:
    """Execute one kernel (a SINK of END/STORE trees) on named flat buffers, in place.

    Loop nests larger than `max_elements` are evaluated in slices of their
    outermost range so memory stays bounded.
    """
    items = store_items(ast)
    ranges = kernel_ranges(ast)
    axes = range_axes(ast)
    axis, nd = axes
    for entry in items:
        loop, store = list(entry.ranges), entry.store
        sizes = [1] * nd  # the largest array the evaluation makes: per axis, its longest range
        for r in ranges:
            sizes[axis[r]] = max(sizes[axis[r]], int(r.src[0].arg))
        total = math.prod(sizes)
        outer = loop[0] if loop else None
        loop_shape = [1] * nd
        for r in loop:
            loop_shape[axis[r]] = int(r.src[0].arg)
        if outer is None or total <= max_elements:
            _KernelEval(axes, buffers, {}).store(store, tuple(loop_shape))
            continue
        n = int(outer.src[0].arg)
        step = max(1, n * max_elements // total)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            shape = [1] * nd
            shape[axis[outer]] = hi - lo
            ev = _KernelEval(axes, buffers, {outer: np.arange(lo, hi, dtype=np.int64).reshape(shape)})
            ev.store(store, tuple(hi - lo if i == axis[outer] else size for i, size in enumerate(loop_shape)))


class ReferenceBackend:
    """The interpreter as a target: kernels run through `run_kernel` on compute-dtype arrays."""

    name = "reference"

    def __init__(self) -> None:
        self._buffers = HostBuffers()
        self._buffers.native_storage = False

    def compile(self, kernel: Any, program: Any) -> Any:
        return lambda bufs: run_kernel(kernel.ast, bufs)

    def render(self, kernel: Any, program: Any) -> str:
        return f"// {kernel.name}\n{pretty(kernel.ast, max_lines=400)}"

    def storage_np(self, d: Any) -> np.dtype:
        return self._buffers.storage_np(d)

    def alloc(self, spec: Any) -> np.ndarray:
        return self._buffers.alloc(spec)

    def put(self, spec: Any, host: np.ndarray) -> np.ndarray:
        return self._buffers.put(spec, host)

    def get(self, spec: Any, buf: np.ndarray) -> np.ndarray:
        return self._buffers.get(spec, buf)
