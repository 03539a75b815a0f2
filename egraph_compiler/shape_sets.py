"""A program over symbolic sizes: one compiled program per bucket of the variables' ShapeSets.

`optimize` returns a SymbolicProgram where a placeholder has a symbolic size (egraph_compiler/ir/dims.py). It
checks the graph (the variables index independent rows) and compiles the program of the largest bucket, which
serves every size in the bounds. A call reads each variable's size from its inputs, refuses a size outside the
bounds with a diagnostic naming the dimension, and runs the program of the smallest bucket at or above it
(compiled on first use, or by `prepare`): the inputs padded with zero rows, the outputs' first rows returned.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_compiler.ir.diagnostics import InvalidArgument, SymbolicDimError
from egraph_compiler.ir.dims import Rows, Variable, resize, row_axes
from egraph_compiler.ir.uop import UOp
from egraph_compiler.kernel.program import Program, positional_inputs

Build = Callable[[list[UOp], list[UOp]], Program]  # (outputs, declared placeholders) at fixed sizes -> program


def _variables(placeholders: dict[UOp, dict[int, Variable]]) -> dict[str, Variable]:
    """The graph's variables by name; one name declared with two bounds is refused."""
    out: dict[str, Variable] = {}
    for u, axes in placeholders.items():
        for v in axes.values():
            if out.setdefault(v.name, v) != v:
                raise SymbolicDimError(
                    at=f"placeholder {u.arg[0]!r}",
                    why=f"dimension {v.name!r} is declared as [{v.lo}, {v.hi}] here and as "
                    f"[{out[v.name].lo}, {out[v.name].hi}] elsewhere",
                    suggestion="declare one Variable and use it for every placeholder",
                    dimension=v.name,
                )
    return out


class SymbolicProgram:
    """Runs like a Program (`prog(**inputs)`), for any sizes of its variables within their bounds. Other
    attributes (report, kernels, source, describe, ...) are the largest bucket's program's."""

    def __init__(
        self,
        roots: list[UOp],
        declared: list[UOp],
        placeholders: dict[UOp, dict[int, Variable]],
        build: Build,
        progress: Callable[[Any], None] | None = None,
    ) -> None:
        self.variables = _variables(placeholders)
        self._rows = row_axes([*roots, *declared], placeholders)
        self._roots, self._declared, self._build = roots, declared, build
        self._inputs = {u.arg[0]: axes for u, axes in placeholders.items()}  # placeholder name -> its symbolic axes
        self._out_rows = [self._rows.get(r, {}) for r in roots]
        self._programs: dict[tuple[int, ...], Program] = {}
        self._lock = threading.Lock()
        self._progress = progress
        self.main = self.program({n: v.buckets[-1] for n, v in self.variables.items()})
        report = self.main.report
        if report is not None:
            dims = ", ".join(f"{v.name} in [{v.lo}, {v.hi}] (buckets {list(v.buckets)})" for v in self.variables.values())
            note = (
                f"symbolic dimensions {dims}: this report is the largest bucket's program; a call pads its inputs to "
                "the smallest bucket at or above its sizes"
            )
            if note not in report.notes:  # the program may come from the compile cache, its report too
                report.notes.append(note)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "main":
            raise AttributeError(name)
        return getattr(self.main, name)

    @property
    def buckets(self) -> list[dict[str, int]]:
        """Every combination of the variables' buckets (the programs this one may compile)."""
        names = list(self.variables)
        return [dict(zip(names, c)) for c in itertools.product(*(self.variables[n].buckets for n in names))]

    def program(self, sizes: dict[str, int]) -> Program:
        """The program of one bucket of sizes (compiled now if it was not yet)."""
        key = tuple(sizes[n] for n in self.variables)
        with self._lock:  # two threads asking for one bucket compile it once
            if key not in self._programs:
                if self._progress is not None:
                    self._progress(f"symbolic dimensions: compiling the program for {sizes}")
                roots = resize([*self._roots, *self._declared], self._rows, sizes)
                self._programs[key] = self._build(roots[: len(self._roots)], roots[len(self._roots) :])
            return self._programs[key]

    def prepare(self, **sizes: list[int] | int) -> None:
        """Compile the programs calls of these sizes will run (default: every bucket), so no call compiles."""
        unknown = sorted(set(sizes) - set(self.variables))
        if unknown:
            raise InvalidArgument(
                at="prepare", why=f"no dimension {unknown[0]!r}", suggestion=f"name one of {sorted(self.variables)}"
            )
        lists: dict[str, list[int]] = {}
        for n, v in self.variables.items():
            given = sizes.get(n, list(v.buckets))
            wanted = [given] if isinstance(given, int) else list(given)
            for s in wanted:
                v.check(s, "prepare")
            lists[n] = sorted({v.bucket(s) for s in wanted})
        for combo in itertools.product(*lists.values()):
            self.program(dict(zip(lists, combo)))

    def sizes_of(self, inputs: dict[str, Any]) -> dict[str, int]:
        """Each variable's size in these inputs, checked against its bounds and across the inputs."""
        found: dict[str, tuple[int, str]] = {}
        for name, axes in self._inputs.items():
            if name not in inputs:
                continue  # the program's own check names it
            shape = getattr(inputs[name], "shape", None)
            if shape is None:
                shape = np.shape(inputs[name])
            for a, v in axes.items():
                if a >= len(shape):
                    raise SymbolicDimError(
                        at=f"input {name!r}",
                        why=f"has {len(shape)} dimension(s); dimension {v.name!r} is its axis {a}",
                        suggestion=f"pass an array with {v.name!r} along axis {a}",
                        dimension=v.name,
                    )
                size = int(shape[a])
                v.check(size, f"input {name!r} axis {a}")
                seen = found.setdefault(v.name, (size, name))
                if seen[0] != size:
                    raise SymbolicDimError(
                        at=f"input {name!r} axis {a}",
                        why=f"dimension {v.name!r} is {size} here but {seen[0]} in input {seen[1]!r}",
                        suggestion=f"give every input the same size along {v.name!r}",
                        dimension=v.name,
                    )
        return {n: s for n, (s, _) in found.items()}

    def __call__(self, *args: Any, out: Any = None, **inputs: Any) -> Any:
        """Run on `inputs` (see Program.__call__); `out`: arrays of the outputs' sizes at this call's sizes."""
        if args:
            inputs = positional_inputs(self.main.inputs, args, inputs)
        sizes = self.sizes_of(inputs)
        bucket = {n: v.bucket(sizes.get(n, v.buckets[-1])) for n, v in self.variables.items()}
        prog = self.program(bucket)
        if all(sizes.get(n, b) == b for n, b in bucket.items()):
            return prog(out=out, **inputs)
        padded = dict(inputs)
        for name, axes in self._inputs.items():
            if name in inputs:
                padded[name] = _pad(inputs[name], {a: bucket[v.name] for a, v in axes.items()})
        result = prog(**padded)
        outs = [result] if prog.single_output else list(result)
        cut = [_rows(o, r, sizes) for o, r in zip(outs, self._out_rows)]
        if out is None:
            return cut[0] if prog.single_output else tuple(cut)
        arrays = [out] if prog.single_output and not isinstance(out, (tuple, list)) else list(out)
        if len(arrays) != len(cut) or any(getattr(a, "shape", None) != c.shape for a, c in zip(arrays, cut)):
            raise InvalidArgument(
                at="out=",
                why=f"expected arrays of shapes {[c.shape for c in cut]} at these sizes",
                suggestion="pass one array per output, of the output's shape at the call's sizes",
            )
        for a, c in zip(arrays, cut):
            np.copyto(a, c)
        return out

    def __repr__(self) -> str:
        dims = ", ".join(f"{v.name}=[{v.lo},{v.hi}]" for v in self.variables.values())
        return f"SymbolicProgram({dims}, {len(self._programs)} bucket program(s))"


def _pad(x: Any, sizes: dict[int, int]) -> Any:
    """x with zero rows appended along the axes in `sizes` up to those sizes (x itself where nothing is missing);
    a GPU array (CuPy's) is padded on the GPU."""
    xp: Any = np
    if hasattr(x, "__cuda_array_interface__"):
        import cupy

        xp = cupy
    arr = xp.asarray(x)
    shape = tuple(sizes.get(a, d) for a, d in enumerate(arr.shape))
    if shape == arr.shape:
        return x
    out = xp.zeros(shape, dtype=arr.dtype)
    out[tuple(slice(0, d) for d in arr.shape)] = arr
    return out


def _rows(x: Any, rows: Rows, sizes: dict[str, int]) -> Any:
    """The output's first rows: `size * block` along each row axis."""
    if not rows:
        return x
    return x[tuple(slice(0, sizes[rows[a][0]] * rows[a][1]) if a in rows else slice(None) for a in range(x.ndim))]


__all__ = ["SymbolicProgram"]
