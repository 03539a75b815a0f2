"""Diagnostics: every bad input becomes one of these (seed 001 §14).

Each carries `code`, `kind`, `at` (which op or value), `why` and `suggestion`,
prints as one readable block, and exports as a dict for reports and the CLI.
"""

from __future__ import annotations

from typing import Any, ClassVar


class CompilerError(Exception):
    """Base class of all diagnostics raised by egraph_compiler."""

    code: ClassVar[str] = "E1000"
    kind: ClassVar[str] = "CompilerError"

    def __init__(self, *, at: str, why: str, suggestion: str, **details: Any) -> None:
        self.at = at
        self.why = why
        self.suggestion = suggestion
        self.details = details
        super().__init__(self.format())

    def format(self) -> str:
        lines = [f"{self.code} {self.kind}: {self.why}", f"  at: {self.at}"]
        lines += [f"  {k}: {v}" for k, v in self.details.items()]
        lines.append(f"  suggestion: {self.suggestion}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "kind": self.kind,
            "at": self.at,
            "why": self.why,
            "suggestion": self.suggestion,
            **{k: _jsonable(v) for k, v in self.details.items()},
        }


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


class BroadcastMismatch(CompilerError):
    """Right-aligned shapes differ on an axis where neither is 1."""

    code = "E1001"
    kind = "BroadcastMismatch"


class ShapeMismatch(CompilerError):
    """Shapes that must agree do not (reshape size, matmul inner dims, ...)."""

    code = "E1002"
    kind = "ShapeMismatch"


class AxisError(CompilerError):
    """An axis or dimension index is outside the tensor's rank."""

    code = "E1003"
    kind = "AxisOutOfRange"


class DTypeError(CompilerError):
    """A dtype is unknown or not allowed for this operation."""

    code = "E1004"
    kind = "DTypeMismatch"


class InvalidSize(CompilerError):
    """A size is zero, negative or not an integer."""

    code = "E1005"
    kind = "InvalidSize"


class InvalidArgument(CompilerError):
    """An argument has the wrong type or an impossible value."""

    code = "E1006"
    kind = "InvalidArgument"


class SymbolicDimError(CompilerError):
    """A symbolic dimension is outside its bounds, or the graph mixes the rows it indexes."""

    code = "E1007"
    kind = "SymbolicDimError"


class UnknownOp(CompilerError):
    """An operation name is not known to the frontend."""

    code = "E1101"
    kind = "UnknownOp"


class MissingDivGuard(CompilerError):
    """A division or modulo could not be proven safe."""

    code = "E1203"
    kind = "MissingDivGuard"


class UnguardedAccess(CompilerError):
    """A load or store may index outside its buffer without a guard."""

    code = "E1204"
    kind = "UnguardedAccess"


class AxisAlignmentMismatch(CompilerError):
    """A tensor's declared shape disagrees with its computed shape."""

    code = "E1304"
    kind = "AxisAlignmentMismatch"


class MalformedJSON(CompilerError):
    """A Frontend-IR document is not valid JSON or misses required fields."""

    code = "E1401"
    kind = "MalformedJSON"


class CyclicGraph(CompilerError):
    """The graph has a cycle."""

    code = "E1402"
    kind = "CyclicGraph"


class UnknownTensor(CompilerError):
    """A node refers to a tensor that is never defined."""

    code = "E1403"
    kind = "UnknownTensor"


class MissingInput(CompilerError):
    """A program input was not supplied, or has the wrong shape or dtype."""

    code = "E1404"
    kind = "MissingInput"


class OutOfBounds(CompilerError):
    """A kernel accessed memory outside a buffer at run time."""

    code = "E1501"
    kind = "OutOfBounds"


class OutOfMemory(CompilerError):
    """A buffer of a program, or the compiler's own e-graph, could not be allocated."""

    code = "E1502"
    kind = "OutOfMemory"


class LimitReached(CompilerError):
    """The optimizer stopped at a node, iteration or time limit."""

    code = "W2001"
    kind = "LimitReached"


class BackendUnavailable(CompilerError):
    """A backend's toolchain or device is not available here."""

    code = "E1601"
    kind = "BackendUnavailable"


class BackendError(CompilerError):
    """A backend failed to compile or run a kernel."""

    code = "E1602"
    kind = "BackendError"


class UnsupportedOp(CompilerError):
    """An operation cannot be lowered or run by this stage or backend."""

    code = "E1603"
    kind = "UnsupportedOp"


class EstimateWarning(UserWarning):
    """W2002: the chosen program's estimate is far above the graph's roofline (recomputation, or a cost-model
    error): the program runs, but expect it to be slow."""

    code = "W2002"


ALL_DIAGNOSTICS: tuple[type[CompilerError], ...] = tuple(
    v for v in list(globals().values()) if isinstance(v, type) and issubclass(v, CompilerError) and v is not CompilerError
)
