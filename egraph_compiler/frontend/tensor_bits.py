"""Bit-level algorithms of the Tensor API (tinygrad's names and results), composed from integer Tensor ops;
`self` is a Tensor: the Threefry-2x32 counter-based generator and the random bits drawn from it, sampling from a
multinomial distribution, and the Keccak (SHA-3 / SHAKE) sponge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.frontend.tensor_select import _int
from egraph_compiler.ir.diagnostics import DTypeError, InvalidArgument, ShapeMismatch
from egraph_compiler.ir.dtypes import dtypes

if TYPE_CHECKING:
    from egraph_compiler.frontend.tensor import Tensor

# Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
THREEFRY_PARITY = 0x1BD11BDA

# Keccak-f[1600] (FIPS 202): lanes by index x + 5y
KECCAK_ROUNDS = (
    0x0000000000000001, 0x0000000000008082, 0x800000000000808A, 0x8000000080008000, 0x000000000000808B,
    0x0000000080000001, 0x8000000080008081, 0x8000000000008009, 0x000000000000008A, 0x0000000000000088,
    0x0000000080008009, 0x000000008000000A, 0x000000008000808B, 0x800000000000008B, 0x8000000000008089,
    0x8000000000008003, 0x8000000000008002, 0x8000000000000080, 0x000000000000800A, 0x800000008000000A,
    0x8000000080008081, 0x8000000000008080, 0x0000000080000001, 0x8000000080008008,
)  # fmt: skip
KECCAK_ROTATIONS = (  # rho's offset of lane x + 5y
    0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39, 41, 45, 15, 21, 8, 18, 2, 61, 56, 14,
)  # fmt: skip
KECCAK_CONFIGS = {"sha3_224": (144, 0x06), "sha3_256": (136, 0x06), "shake_128": (168, 0x1F)}  # (rate bytes, domain)


def _rotl32(x: Tensor, r: int) -> Tensor:
    return (x << r) | (x >> (32 - r))


def _threefry2x32(x0: Tensor, x1: Tensor, k0: Tensor, k1: Tensor) -> tuple[Tensor, Tensor]:
    """The 20-round Threefry-2x32 block of counter (x0, x1) under key (k0, k1), all uint32."""
    ks = (k0, k1, k0 ^ k1 ^ THREEFRY_PARITY)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in THREEFRY_ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = _rotl32(x1, r) ^ x0
        x0, x1 = x0 + ks[(i + 1) % 3], x1 + ks[(i + 2) % 3] + (i + 1)
    return x0, x1


def _uint64(t: Tensor, what: str) -> None:
    if t.dtype is not dtypes.uint64:
        raise DTypeError(at=what, why=f"expected uint64, got {t.dtype.name}", suggestion="cast it: t.cast('uint64')")


def _threefry_bits(key: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """uint32 (lows of every block, then highs) of the blocks at counters (lo, hi) under the key's two words."""
    u64, u32 = dtypes.uint64, dtypes.uint32
    x = ((hi.cast(u64) << 32) | lo.cast(u64)).threefry((key[1:2].cast(u64) << 32) | key[0:1].cast(u64))
    return x.cast(u32).cat((x >> 32).cast(u32))


class TensorBits:
    """Counter-based random bits, multinomial sampling and Keccak hashing."""

    def threefry(self: Tensor, seed: Tensor) -> Tensor:  # type: ignore[misc]
        """Threefry-2x32-20 of each uint64 counter (low word first) under the uint64 key `seed` (broadcast), as
        tinygrad's THREEFRY: (high output word << 32) | low output word."""
        seed = self._to_tensor(seed, "Tensor.threefry")
        _uint64(self, "Tensor.threefry")
        _uint64(seed, "Tensor.threefry seed")
        x, key = type(self)._broadcast(self, seed, at="Tensor.threefry")
        u32 = dtypes.uint32
        y0, y1 = _threefry2x32(x.cast(u32), (x >> 32).cast(u32), key.cast(u32), (key >> 32).cast(u32))
        return (y1.cast(dtypes.uint64) << 32) | y0.cast(dtypes.uint64)

    @classmethod
    def random_bits(cls, key: Tensor, counter: Tensor, num: int) -> Tensor:
        """`num` uint32 random words from a uint32 key (2 words) and counter (2 words: low, high), as tinygrad's:
        the counter picks a key of its own, under which blocks 0 .. ceil(num/2)-1 give the words."""
        for t, what in ((key, "key"), (counter, "counter")):
            if not isinstance(t, cls) or t.dtype is not dtypes.uint32 or t.shape != (2,):
                got = f"{t.dtype.name}{list(t.shape)}" if isinstance(t, cls) else type(t).__name__
                raise InvalidArgument(
                    at=f"Tensor.random_bits {what}",
                    why=f"expected a uint32 tensor of 2 words, got {got}",
                    suggestion="pass Tensor([lo, hi], dtype='uint32')",
                )
        num = _int(num, "Tensor.random_bits num", 1)  # tensors here are never empty
        if num > 0xFFFFFFFF:
            raise InvalidArgument(
                at="Tensor.random_bits", why=f"{num} words in one draw", suggestion="draw at most 2**32 - 1 words at a time"
            )
        own = _threefry_bits(key, counter[0:1], counter[1:2])
        half = -(-num // 2)
        lo = type(key).arange(half, dtype=dtypes.uint32)
        return _threefry_bits(own, lo, lo + half)[:num]

    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:  # type: ignore[misc]
        """int32 indices drawn with probability proportional to the (non-negative) weights along the last axis of a
        1-d or 2-d tensor: with replacement by inverting the cumulative weights at uniform draws, without it by
        Efraimidis-Spirakis keys (the largest log(u) / w). Draws come from Tensor.rand (Tensor.manual_seed)."""
        cls = type(self)
        if self.ndim not in (1, 2):
            raise ShapeMismatch(
                at="Tensor.multinomial", why=f"weights of shape {self.shape}", suggestion="pass 1-d or 2-d weights"
            )
        n = _int(num_samples, "Tensor.multinomial num_samples", 1)
        if not isinstance(replacement, bool):
            raise InvalidArgument(at="Tensor.multinomial", why=f"replacement={replacement!r}", suggestion="pass True or False")
        w = (self.unsqueeze(0) if self.ndim == 1 else self).float()
        rows, cats = w.shape
        if not replacement and n > cats:
            raise InvalidArgument(
                at="Tensor.multinomial",
                why=f"{n} samples without replacement from {cats} categories",
                suggestion="ask for at most as many samples as categories, or pass replacement=True",
            )
        if replacement or n == 1:
            total = w.cumsum(1)
            cdf = total / total[:, -1:]
            u = cls.rand(n, rows, 1)
            picked = (u >= cdf.unsqueeze(0)).sum(2).transpose(0, 1)
        else:
            picked = (cls.rand(rows, cats).log2() / w).topk(n, dim=1)[1]
        picked = picked.cast(dtypes.int32)
        return picked.reshape(n) if self.ndim == 1 else picked

    def keccak(self: Tensor, cfg: str | tuple[int, int] = "sha3_256") -> Tensor:  # type: ignore[misc]
        """The Keccak sponge over the bytes of the last axis (each row a message): "sha3_224", "sha3_256" (as
        hashlib's), "shake_128" (16 bytes out, as tinygrad's), or (rate bytes, domain byte). uint8 digests of
        (200 - rate) // 2 bytes, with the leading axes kept."""
        cls = type(self)
        rate, domain = _keccak_config(cfg)
        if self.ndim == 0:
            raise ShapeMismatch(at="Tensor.keccak", why="a scalar has no bytes axis", suggestion="reshape it to (1,)")
        data = self if self.dtype is dtypes.uint8 else self.bitcast(dtypes.uint8)
        *lead, n = data.shape
        rows = int(np.prod(lead)) if lead else 1
        blocks = n // rate + 1  # pad10*1 always adds at least one byte
        pad = np.zeros(blocks * rate - n, np.uint8)
        pad[0] ^= domain
        pad[-1] ^= 0x80
        msg = data.reshape(rows, n).cat(cls(pad).reshape(1, -1).expand(rows, len(pad)), dim=1)
        lanes = msg.reshape(rows, blocks, rate).pad(((0, 0), (0, 0), (0, 200 - rate))).bitcast(dtypes.uint64)
        state = cls.zeros(rows, 25, dtype=dtypes.uint64)
        for b in range(blocks):
            state = _keccak_f(cls, state ^ lanes[:, b])
        out = state.bitcast(dtypes.uint8)[:, : (200 - rate) // 2]
        return out.reshape(*lead, (200 - rate) // 2)


def _keccak_config(cfg: str | tuple[int, int]) -> tuple[int, int]:
    if isinstance(cfg, str) and cfg in KECCAK_CONFIGS:
        return KECCAK_CONFIGS[cfg]
    if (
        isinstance(cfg, tuple)
        and len(cfg) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in cfg)
        and 0 < cfg[0] < 200
        and cfg[0] % 8 == 0
        and 0 < cfg[1] < 0x80
    ):
        return cfg
    raise InvalidArgument(
        at="Tensor.keccak",
        why=f"unknown configuration {cfg!r}",
        suggestion=f"pass one of {sorted(KECCAK_CONFIGS)} or (rate bytes, a multiple of 8 below 200, domain byte)",
    )


def _keccak_f(cls: type[Tensor], state: Tensor) -> Tensor:
    """The 24 rounds of Keccak-f[1600] on (rows, 25) uint64 lanes."""
    rows = state.shape[0]
    # rho then pi as one permutation: lane x + 5y moves to y + 5((2x + 3y) % 5), rotated by its rho offset
    src = [0] * 25
    for x in range(5):
        for y in range(5):
            src[y + 5 * ((2 * x + 3 * y) % 5)] = x + 5 * y
    rot = [KECCAK_ROTATIONS[i] for i in src]
    up = cls(np.array([(1 << r) if r else 0 for r in rot], np.uint64))  # x << r as a product (wraps)
    down = cls(np.array([(1 << (64 - r)) if r else 1 for r in rot], np.uint64))  # x >> (64 - r) as a quotient
    perm = cls(np.array(src, np.int32)).reshape(1, 25).expand(rows, 25)
    for rc in KECCAK_ROUNDS:
        a = state.reshape(rows, 5, 5)  # [y][x]
        c = a[:, 0] ^ a[:, 1] ^ a[:, 2] ^ a[:, 3] ^ a[:, 4]  # theta's column parities
        left, right = c.roll(1, 1), c.roll(-1, 1)
        d = left ^ ((right << 1) | (right >> 63))
        state = (a ^ d.unsqueeze(1)).reshape(rows, 25)
        b = state.gather(1, perm)
        b = ((b * up) | (b // down)).reshape(rows, 5, 5)
        state = (b ^ (~b.roll(-1, 2) & b.roll(-2, 2))).reshape(rows, 25)
        state = state ^ cls(np.array([rc] + [0] * 24, np.uint64))
    return state


__all__ = ["TensorBits"]
