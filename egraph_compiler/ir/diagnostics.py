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


def _diag(code: str, kind: str, doc: str) -> type[CompilerError]:
    return type(kind, (CompilerError,), {"code": code, "kind": kind, "__doc__": doc})


BroadcastMismatch = _diag("E1001", "BroadcastMismatch", "Right-aligned shapes differ on an axis where neither is 1.")
ShapeMismatch = _diag("E1002", "ShapeMismatch", "Shapes that must agree do not (reshape size, matmul inner dims, ...).")
AxisError = _diag("E1003", "AxisOutOfRange", "An axis or dimension index is outside the tensor's rank.")
DTypeError = _diag("E1004", "DTypeMismatch", "A dtype is unknown or not allowed for this operation.")
InvalidSize = _diag("E1005", "InvalidSize", "A size is zero, negative or not an integer.")
InvalidArgument = _diag("E1006", "InvalidArgument", "An argument has the wrong type or an impossible value.")
UnknownOp = _diag("E1101", "UnknownOp", "An operation name is not known to the frontend.")
MissingDivGuard = _diag("E1203", "MissingDivGuard", "A division or modulo could not be proven safe.")
UnguardedAccess = _diag("E1204", "UnguardedAccess", "A load or store may index outside its buffer without a guard.")
AxisAlignmentMismatch = _diag("E1304", "AxisAlignmentMismatch", "A tensor's declared shape disagrees with its computed shape.")
MalformedJSON = _diag("E1401", "MalformedJSON", "A Frontend-IR document is not valid JSON or misses required fields.")
CyclicGraph = _diag("E1402", "CyclicGraph", "The graph has a cycle.")
UnknownTensor = _diag("E1403", "UnknownTensor", "A node refers to a tensor that is never defined.")
MissingInput = _diag("E1404", "MissingInput", "A program input was not supplied, or has the wrong shape or dtype.")
OutOfBounds = _diag("E1501", "OutOfBounds", "A kernel accessed memory outside a buffer at run time.")
OutOfMemory = _diag("E1502", "OutOfMemory", "A buffer of a program, or the compiler's own e-graph, could not be allocated.")
LimitReached = _diag("W2001", "LimitReached", "The optimizer stopped at a node, iteration or time limit.")
BackendUnavailable = _diag("E1601", "BackendUnavailable", "A backend's toolchain or device is not available here.")
BackendError = _diag("E1602", "BackendError", "A backend failed to compile or run a kernel.")
UnsupportedOp = _diag("E1603", "UnsupportedOp", "An operation cannot be lowered or run by this stage or backend.")


class EstimateWarning(UserWarning):
    """W2002: the chosen program's estimate is far above the graph's roofline (recomputation, or a cost-model
    error): the program runs, but expect it to be slow."""

    code = "W2002"


ALL_DIAGNOSTICS: tuple[type[CompilerError], ...] = tuple(
    v for v in list(globals().values()) if isinstance(v, type) and issubclass(v, CompilerError) and v is not CompilerError
)
