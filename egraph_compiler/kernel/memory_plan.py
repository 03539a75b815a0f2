"""Intermediate buffers placed in one arena by lifetime.

A program's kernels run in order; an intermediate buffer is live from the first kernel that touches it to the
last (both included: a kernel that reads one buffer while writing another keeps them apart). Buffers whose
lifetimes never meet may share bytes. `plan` places the biggest first, each at the lowest offset where it
overlaps no placed buffer of a meeting lifetime (greedy by size, as TFLite's and tinygrad's planners do), with
offsets aligned for vector loads. The program allocates the arena once and hands out views of it.

A backend may run two consecutive kernels chunk by chunk (`Coslice`): the pair is then one step of the plan
(the second's first chunk is written before the first's last is read), and a buffer only the pair touches
needs no bytes of its own at all: each thread's chunk of it lives in the backend's scratch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

ALIGN = 64  # bytes: a cache line, and the widest vector the backends load


@dataclass(frozen=True)
class ArenaPlan:
    offsets: dict[str, int]  # buffer -> byte offset in the arena
    size: int  # arena bytes
    unplanned: int  # bytes of the same buffers allocated one by one
    sizes: dict[str, int] = field(default_factory=dict)  # buffer -> its bytes in the arena (aligned)

    def share_bytes(self, a: str, b: str) -> bool:
        """Do buffers a and b overlap in the arena (lifetimes that never meet, so kernels that run one after the
        other may use the same bytes for both)? False where either is not in it."""
        if a == b or a not in self.offsets or b not in self.offsets:
            return False
        oa, ob = self.offsets[a], self.offsets[b]
        return oa < ob + self.sizes[b] and ob < oa + self.sizes[a]


@dataclass(frozen=True)
class Coslice:
    """Kernels i and i + 1 of a program run chunk by chunk, `chunk` steps of their shared parallel range at a time
    (the first over a chunk of a thread's slice, then the second over the same chunk): `buffer` is what the first
    writes and the second reads, `step_bytes` of it per step. `local`: no other kernel touches it and it is not
    an output, so it has no buffer of its own (each thread's chunk of it lives in the runner's scratch)."""

    chunk: int
    buffer: str
    step_bytes: int
    local: bool


def lifetimes(
    kernels: Sequence[tuple[Iterable[str], Iterable[str]]], names: Iterable[str], pairs: Iterable[int] = ()
) -> dict[str, tuple[int, int]]:
    """(first, last) kernel index touching each of `names`, from each kernel's (reads, writes); kernels i and
    i + 1 for each i of `pairs` (run chunk by chunk) count as touching what either touches."""
    steps = [{*reads, *writes} for reads, writes in kernels]
    for i in pairs:
        steps[i] = steps[i + 1] = steps[i] | steps[i + 1]
    wanted = set(names)
    span: dict[str, tuple[int, int]] = {}
    for i, touched in enumerate(steps):
        for n in touched:
            if n in wanted:
                first, _ = span.get(n, (i, i))
                span[n] = (first, i)
    return span


def sink_order(kernels: Sequence[tuple[Iterable[str], Iterable[str]]], intermediates: Iterable[str]) -> list[int]:
    """A run order of kernels given in a dependency order (indices into it): each leaf kernel (one that reads no
    intermediate: a weight's packing copy, a layer norm of an input) moves down towards the first kernel that
    reads what it writes, past kernels that neither read what it writes nor write what it reads or writes, and
    not past another leaf that feeds that same kernel (leaves feeding one kernel keep their order). Its output
    then lives no longer than needed, and a copy lands beside its consumer (which may then run it chunk by
    chunk)."""
    temps = set(intermediates)
    steps = [({*reads}, {*writes}) for reads, writes in kernels]
    leaf = [not reads & temps for reads, _ in steps]
    order = list(range(len(steps)))
    for k in reversed(range(len(steps))):
        reads, writes = steps[k]
        if not leaf[k]:
            continue
        at = order.index(k)
        first = next((j for j in order[at + 1 :] if steps[j][0] & writes), None)
        feeds = steps[first][0] if first is not None else set()
        to = at
        while to + 1 < len(order):
            nxt = order[to + 1]
            r, w = steps[nxt]
            if r & writes or w & (reads | writes) or (leaf[nxt] and w & feeds):
                break
            to += 1
        order.insert(to, order.pop(at))
    return order


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan(sizes: dict[str, int], spans: dict[str, tuple[int, int]]) -> ArenaPlan:
    """Offsets for buffers of `sizes` bytes live over `spans` (a buffer without a span is live throughout)."""
    whole = (min((s[0] for s in spans.values()), default=0), max((s[1] for s in spans.values()), default=0))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[str, int] = {}
    need_of: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        first, last = spans.get(name, whole)
        need = _aligned(max(1, sizes[name]))
        busy = sorted((o, e) for o, e, f, la in placed if f <= last and first <= la)
        best, best_gap, at = None, None, 0
        for o, e in busy:  # best fit: the smallest free gap that holds it, else the end
            if o - at >= need and (best_gap is None or o - at < best_gap):
                best, best_gap = at, o - at
            at = max(at, e)
        offset = best if best is not None else at
        offsets[name], need_of[name] = offset, need
        placed.append((offset, offset + need, first, last))
    size = max((e for _, e, _, _ in placed), default=0)
    return ArenaPlan(offsets, size, sum(_aligned(max(1, s)) for s in sizes.values()), need_of)
