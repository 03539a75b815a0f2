"""Intermediate buffers placed in one arena by lifetime.

A program's kernels run in order; an intermediate buffer is live from the first kernel that touches it to the
last (both included: a kernel that reads one buffer while writing another keeps them apart). Buffers whose
lifetimes never meet may share bytes. `plan` places the biggest first, each at the lowest offset where it
overlaps no placed buffer of a meeting lifetime (greedy by size, as TFLite's and tinygrad's planners do), with
offsets aligned for vector loads. The program allocates the arena once and hands out views of it.
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


def lifetimes(kernels: Sequence[tuple[Iterable[str], Iterable[str]]], names: Iterable[str]) -> dict[str, tuple[int, int]]:
    """(first, last) kernel index touching each of `names`, from each kernel's (reads, writes)."""
    wanted = set(names)
    span: dict[str, tuple[int, int]] = {}
    for i, (reads, writes) in enumerate(kernels):
        for n in (*reads, *writes):
            if n in wanted:
                first, _ = span.get(n, (i, i))
                span[n] = (first, i)
    return span


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
