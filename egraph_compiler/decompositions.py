"""EXP2, LOG2, SIN and SQRT built from primitive ops (the spec's decompositions).

The op table names these functions (`OpSpec.decomposition`). Backends with
native instructions keep the ops; a target without them lowers each op to
the expression below. Arithmetic runs in float32 (float16/bfloat16 are
widened first), with range reduction and polynomials accurate to about one
float32 ulp for ordinary arguments; |x| > 1e5 loses accuracy in `sin`
(Cody-Waite reduction, no Payne-Hanek).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from egraph_compiler.dtypes import dtypes
from egraph_compiler.uop import UOp

F32 = dtypes.float32
I32 = dtypes.int32


def _f32(x: UOp) -> UOp:
    return x.cast(F32)


def _c(v: float) -> UOp:
    return UOp.const(v, F32)


def _horner(x: UOp, coeffs: list[float]) -> UOp:
    """coeffs[0] + x*(coeffs[1] + x*(...)), highest degree last."""
    acc = _c(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc


def _round_to_int(x: UOp) -> UOp:
    """Round half away from zero to int32 (x must be in int32 range)."""
    return (x + (x < 0.0).where(_c(-0.5), _c(0.5))).cast(I32)


def _pow2i(q: UOp) -> UOp:
    """2**q for int32 q in [-126, 127], built from the exponent bits."""
    return ((q + 127) << 23).bitcast(F32)


def _nan(x: UOp) -> UOp:
    return x.ne(x)


def exp2(x: UOp) -> UOp:
    out_dt = x.dtype
    x = _f32(x)
    xc = x.maximum(-151.0).minimum(129.0)
    q = _round_to_int(xc)
    r = xc - q.cast(F32)  # r in [-0.5, 0.5]
    p = _horner(r * math.log(2), [1.0 / math.factorial(i) for i in range(9)])
    half = q // 2  # two scalings keep subnormals and 2**128 edge exact
    y = p * _pow2i(half.maximum(-126).minimum(127)) * _pow2i((q - half).maximum(-126).minimum(127))
    y = (x >= 128.0).where(_c(math.inf), (x < -150.0).where(_c(0.0), y))
    return _nan(x).where(x, y).cast(out_dt)


def log2(x: UOp) -> UOp:
    out_dt = x.dtype
    x = _f32(x)
    tiny = x < 1.1754943508222875e-38  # subnormal: scale up by 2**64 first
    xs = tiny.where(x * float(2**64), x)
    bits = xs.bitcast(I32)
    e = ((bits >> 23) & 0xFF) - 127 - tiny.where(UOp.const(64, I32), UOp.const(0, I32))
    m = ((bits & 0x7FFFFF) | 0x3F800000).bitcast(F32)  # mantissa in [1, 2)
    big = m > math.sqrt(2)
    m = big.where(m * 0.5, m)
    e = e + big.cast(I32)
    s = (m - 1.0) / (m + 1.0)  # ln(m) = 2 atanh(s), |s| < 0.1716
    s2 = s * s
    ln_m = s * _horner(s2, [2.0, 2 / 3, 2 / 5, 2 / 7, 2 / 9, 2 / 11])
    y = e.cast(F32) + ln_m * (1 / math.log(2))
    y = x.eq(0.0).where(_c(-math.inf), y)
    y = (x < 0.0).where(_c(math.nan), y)
    y = x.eq(math.inf).where(_c(math.inf), y)
    return _nan(x).where(x, y).cast(out_dt)


_PIO2 = [1.5703125, 4.837512969970703125e-4, 7.54978995489188216e-8]  # pi/2 split for exact k*c products


def sin(x: UOp) -> UOp:
    out_dt = x.dtype
    x = _f32(x)
    finite = (x - x).eq(0.0)  # false for inf and nan
    xf = finite.where(x, _c(0.0))
    k = _round_to_int((xf * (2 / math.pi)).maximum(-(2.0**30)).minimum(2.0**30))  # keep the int32 conversion defined
    kf = k.cast(F32)
    r = ((xf - kf * _PIO2[0]) - kf * _PIO2[1]) - kf * _PIO2[2]  # r in about [-pi/4, pi/4]
    r = r.maximum(-0.8).minimum(0.8)  # only huge |x| (inexact reduction) reach the clamp: keeps |sin| <= 1
    r2 = r * r
    s = r * _horner(r2, [1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880, -1 / 39916800])
    c = _horner(r2, [1.0, -1 / 2, 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800])
    quadrant = k & 3
    y = (quadrant & 1).eq(0).where(s, c)
    y = (quadrant & 2).eq(0).where(y, -y)
    return finite.where(y, _c(math.nan)).cast(out_dt)


def sqrt(x: UOp) -> UOp:
    """The spec's Exp2(0.5 * Log2(x)), refined by one Newton step."""
    out_dt = x.dtype
    x = _f32(x)
    y = exp2(log2(x) * 0.5)
    refined = (y + x / y) * 0.5
    ok = (x > 0.0) & (x < math.inf)
    return ok.where(refined, y).cast(out_dt)


DECOMPOSITIONS: dict[str, Callable[[UOp], UOp]] = {"exp2": exp2, "log2": log2, "sin": sin, "sqrt": sqrt}


def decompose(u: UOp) -> UOp:
    """Rewrite every decomposable op in a graph into primitives (bottom-up)."""
    from egraph_compiler.ops import OP_TABLE

    memo: dict[UOp, UOp] = {}
    for n in u.toposort():
        src = tuple(memo[s] for s in n.src)
        name = OP_TABLE[n.op].decomposition
        if name is not None:
            memo[n] = DECOMPOSITIONS[name](src[0])
        else:
            memo[n] = n if src == n.src else UOp(n.op, n.dtype, src, n.arg)
    return memo[u]
