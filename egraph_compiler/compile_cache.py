"""The in-memory compile cache: `optimize()` of a graph it has already optimized, with the same options and for
the same machine, returns the program it built then.

Graphs are compared by structure: UOps are interned (one node per op, dtype, sources and argument), so a graph
rebuilt from scratch consists of the very nodes of the first build while an entry holds them alive, and a key
of its roots is exact. Entries are kept least-recently-used, up to `MAX_PROGRAMS`; a program serves any number
of callers (its per-call state is taken per call, see `Program.__call__`). `clear()` empties the cache,
`disabled()` turns it off for a block (tests that change the compiler's settings between calls).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from egraph_compiler.kernel.program import Program

MAX_PROGRAMS = 64
_programs: OrderedDict[Hashable, Program] = OrderedDict()
_lock = threading.Lock()
_off = 0  # nesting depth of `disabled()`


def get(key: Hashable) -> Program | None:
    if _off:
        return None
    with _lock:
        prog = _programs.get(key)
        if prog is not None:
            _programs.move_to_end(key)
        return prog


def put(key: Hashable, prog: Program) -> None:
    if _off or MAX_PROGRAMS <= 0:
        return
    with _lock:
        _programs[key] = prog
        while len(_programs) > MAX_PROGRAMS:
            _programs.popitem(last=False)


def clear() -> None:
    with _lock:
        _programs.clear()


@contextmanager
def disabled() -> Iterator[None]:
    """No lookups and no new entries inside the block (process-wide)."""
    global _off
    with _lock:
        _off += 1
    try:
        yield
    finally:
        with _lock:
            _off -= 1
