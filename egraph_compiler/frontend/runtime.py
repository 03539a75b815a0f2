"""Realizing tensors: `Tensor.numpy()` lands here.

A tensor is optimized and run on the default target (LLVM on the host CPU; `EGC_TARGET=reference` or
`set_default_target("reference")` chooses the numpy interpreter). Programs are kept per graph, so realizing
the same tensor twice optimizes once. Graphs the kernel pipeline cannot lower yet (tensor-only ops such as
STACK or GETTUPLE) are evaluated by the reference interpreter instead.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.ir.diagnostics import InvalidArgument, UnsupportedOp
from egraph_compiler.ir.interpret import evaluate
from egraph_compiler.kernel.program import Program
from egraph_compiler.optimize import optimize

if TYPE_CHECKING:
    from egraph_compiler.frontend.tensor import Tensor
    from egraph_compiler.ir.uop import UOp

TARGETS = ("llvm", "reference", "cuda")
_default_target = os.environ.get("EGC_TARGET", "llvm")
_programs: OrderedDict[tuple[UOp, str], Program | None] = OrderedDict()
CACHED_PROGRAMS = 64
_LOCK = threading.Lock()


def set_default_target(target: str) -> None:
    global _default_target
    if target not in TARGETS:
        raise InvalidArgument(
            at="set_default_target", why=f"unknown target {target!r}", suggestion=f"use one of {', '.join(TARGETS)}"
        )
    _default_target = target


def default_target() -> str:
    return _default_target


def _program(u: UOp, target: str) -> Program | None:
    key = (u, target)
    with _LOCK:  # the cache only: threads optimize side by side (each has its own e-graph session)
        if key in _programs:
            _programs.move_to_end(key)
            return _programs[key]
    try:
        found = optimize(u, target=target)
        prog = found if isinstance(found, Program) else None  # a symbolic size has placeholders: no data
    except UnsupportedOp:
        prog = None
    if prog is not None and prog.inputs:  # placeholders have no data: the interpreter says so
        prog = None
    with _LOCK:
        _programs[key] = prog
        if len(_programs) > CACHED_PROGRAMS:
            _programs.popitem(last=False)
    return prog


def realize(t: Tensor) -> np.ndarray:
    target = _default_target
    prog = None if target == "reference" else _program(t.uop, target)
    if prog is None:
        return evaluate(t.uop)
    return np.asarray(prog())
