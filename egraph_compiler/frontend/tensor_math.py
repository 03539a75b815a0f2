"""Elementwise math, activations and dtype helpers of the Tensor API (tinygrad's names), composed from the
primitive Tensor ops; `self` is a Tensor.

The transcendental primitives are EXP2, LOG2, SIN, SQRT and RECIP. What is built on them here keeps float32
accuracy where the textbook formula would not: near 0 (series instead of a difference of nearly equal values:
sinh, asinh, atanh, expm1/log1p inside elu and softplus, erf), for large arguments (log(2x) for asinh/acosh,
halved exponents for sinh/cosh, softplus as relu(x) + log1p(exp(-|x|))), and at the signed zeros and infinities.
float16/bfloat16 are computed in float32 and rounded back; float64 is computed in float64 with the same
float32-grade approximations (about 1e-7 relative).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from egraph_compiler.ir.diagnostics import AxisError, DTypeError, InvalidArgument
from egraph_compiler.ir.dtypes import DType, as_const, dtypes, promote, to_dtype
from egraph_compiler.ir.ops import Ops

if TYPE_CHECKING:
    from egraph_compiler.frontend.tensor import Tensor

LOG2E = 1 / math.log(2)
LN2 = math.log(2)
LN2_HI = 0.693359375  # ln 2 to 9 bits: k * LN2_HI is exact for |k| < 2^15
LN2_LO = LN2 - LN2_HI
SQRT_PI_2 = 2 / math.sqrt(math.pi)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_GAMMA = 1.0507009873554804934193349852946
BIG = 4096.0  # above this, sqrt(x*x +- 1) == x in float32: asinh and acosh are log(2x), without squaring

# erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)): the factor of x^(2n+1), n = 0..11 (|x| < 1: < 1e-9 left)
_ERF_TAYLOR = [SQRT_PI_2 * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(12)]
# erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2): Numerical Recipes' Chebyshev fit, relative error < 1.2e-7 for z >= 0
_ERFC_FIT = [-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587]
_ERFC_FIT += [-0.82215223, 0.17087277]
# minimax fits (Moshier's Cephes) of (atan(x) - x) / x^3 on |x| <= tan(pi/8) and (asin(x) - x) / x^3 on |x| <= 1/2
_ATAN_FIT = [-3.33329491539e-1, 1.99777106478e-1, -1.38776856032e-1, 8.05374449538e-2]
_ASIN_FIT = [1.6666752422e-1, 7.4953002686e-2, 4.5470025998e-2, 2.4181311049e-2, 4.2163199048e-2]
# (sinh(x) - x) / x^3 = sum x^(2k) / (2k+3)!, k = 0..4 (|x| < 1: < 2e-10 relative left)
_SINH_TAYLOR = [1 / math.factorial(2 * k + 3) for k in range(5)]
# (expm1(x) - x) / x^2 = sum x^k / (k+2)!, k = 0..8 (|x| < 1/2: < 1e-10 relative left)
_EXPM1_TAYLOR = [1 / math.factorial(k + 2) for k in range(9)]
# (atanh(s) - s) / s^3 = sum s^(2k) / (2k+3), k = 0..7: log1p's series in s = u/(2+u) (|s| < 0.15) and atanh's (|x| < 0.3)
_ATANH_TAYLOR = [1 / (2 * k + 3) for k in range(8)]


def _poly(x: Tensor, coeffs: list[float]) -> Tensor:
    """coeffs[0] + x*(coeffs[1] + x*(...)), by Horner's rule."""
    acc = x * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        acc = acc * x + c
    return acc


def _odd(x: Tensor, coeffs: list[float]) -> Tensor:
    """x + x^3 * P(x^2): an odd series, exact at +-0 (the sign of zero kept)."""
    x2 = x * x
    return x + x * x2 * _poly(x2, coeffs)


def _work(t: Tensor) -> tuple[Tensor, DType]:
    """(t in the float dtype to compute with, the dtype of the result): ints and bools become the default float,
    float16/bfloat16 are widened to float32 (they round back at the end), float32/float64 stay."""
    out = t.dtype if t.dtype.is_float else dtypes.default_float
    return t.cast(dtypes.float32 if out.itemsize < 4 else out), out


def _bits(d: DType) -> DType:
    return {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[d.itemsize]


def _with_sign_of(mag: Tensor, sign: Tensor) -> Tensor:
    """IEEE copysign of two float tensors of one dtype and shape: the sign bit of `sign`, every other bit of `mag`
    (so -0.0 and a negative NaN count as negative, and a NaN magnitude stays NaN)."""
    ib, top = _bits(mag.dtype), 1 << (8 * mag.dtype.itemsize - 1)
    return ((mag.bitcast(ib) & (top - 1)) | (sign.bitcast(ib) & -top)).bitcast(mag.dtype)


def _log1p(u: Tensor) -> Tensor:
    """log(1 + u) to a few ulp also for tiny u: 2 atanh(s), s = u / (2 + u), by its series where |u| <= 0.3."""
    s = u / (u + 2.0)
    return (u.abs() <= 0.3).where(2.0 * _odd(s, _ATANH_TAYLOR), (u + 1.0).log())


def _expm1(x: Tensor) -> Tensor:
    """exp(x) - 1 to a few ulp also for tiny x: its Taylor series where |x| < 1/2."""
    return (x.abs() < 0.5).where(x * (x * _poly(x, _EXPM1_TAYLOR) + 1.0), x.exp() - 1.0)  # -0.0 stays -0.0


def _exp(x: Tensor, shift: float = 0.0) -> Tensor:
    """exp(x) * 2^shift to about 1 ulp over the whole range. Tensor.exp is exp2(x log2 e), and rounding that
    product costs |x| * 1e-7 relative (6e-6 near x = 89); here x = k ln2 + r (Cody-Waite: ln2 in two parts,
    k ln2_hi exact), and 2^k is applied in two halves, so that neither overflows nor underflows early."""
    x = x.clip(-1000.0, 1000.0)  # beyond, every float's exp is 0 or inf already; no inf - inf in r
    k = (x * LOG2E + 0.5).floor()
    r = (x - k * LN2_HI) - k * LN2_LO
    k = k + shift
    k1 = (k * 0.5).floor()
    return (k1.exp2() * (r * LOG2E).exp2()) * (k - k1).exp2()


def _log_2x(a: Tensor) -> Tensor:
    """log(2a) for large a, without forming 2a (which overflows for a > 1.7e38)."""
    return (a.log2() + 1.0) * LN2


def _number(v: Any, what: str, nonzero: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (nonzero and v == 0):
        raise InvalidArgument(
            at=what,
            why=f"{v!r} is not a finite{' nonzero' if nonzero else ''} python number",
            suggestion=f"pass a finite{' nonzero' if nonzero else ''} int or float",
        )
    return float(v)


def _fits_float(v: int | float, d: DType) -> bool:
    """Whether v is inf/NaN or stays finite in float dtype d (rather than rounding to inf)."""
    try:
        return not math.isfinite(float(v)) or math.isfinite(as_const(v, d))
    except OverflowError:  # a python int beyond every float
        return False


def _flag(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        raise InvalidArgument(at=what, why=f"{v!r} is not a bool", suggestion="pass True or False")
    return v


def _promoted_pair(t: Tensor, other: Any, what: str, numbers: bool = False) -> tuple[Tensor, Tensor, DType]:
    """t and other in their promoted dtype, broadcast together (`numbers`: bools refused)."""
    o = t._to_tensor(other, what)
    dt = promote(t.dtype, o.dtype)
    if numbers and dt.is_bool:
        raise DTypeError(at=what, why=f"{what} of bools", suggestion="cast to a number dtype first")
    a, b = type(t)._broadcast(t.cast(dt), o.cast(dt), at=what)
    return a, b, dt


class TensorMath:
    """Elementwise math, activations and dtype helpers."""

    # ---- inverse trigonometric -----------------------------------------------------------------

    def atan(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Reduced to |x| <= tan(pi/8) (x > tan(3pi/8): pi/2 - atan(1/x); else pi/4 + atan((x-1)/(x+1))), then a
        minimax polynomial: about 2 ulp; atan(+-inf) = +-pi/2."""
        cls = type(self)
        x, out = _work(self)
        a = x.abs()
        far, mid = a > math.tan(3 * math.pi / 8), a > math.tan(math.pi / 8)
        r = far.where(-a.reciprocal(), mid.where((a - 1.0) / (a + 1.0), a))
        base = far.where(cls(math.pi / 2, x.dtype), mid.where(cls(math.pi / 4, x.dtype), 0.0))
        return _with_sign_of(base + _odd(r, _ATAN_FIT), x).cast(out)

    def _asin_core(self: Tensor) -> Tensor:  # type: ignore[misc]
        """asin on [-1/2, 1/2] (a minimax polynomial, within 1 ulp)."""
        return _odd(self, _ASIN_FIT)

    def asin(self: Tensor) -> Tensor:  # type: ignore[misc]
        """|x| <= 1/2: a polynomial; above, pi/2 - 2 asin(sqrt((1-|x|)/2)), so that no digits cancel at 0 or 1."""
        x, out = _work(self)
        a = x.abs()
        big = a > 0.5
        p = big.where(((1.0 - a) * 0.5).sqrt(), a)._asin_core()
        r = big.where(math.pi / 2 - 2.0 * p, p)
        return (a > 1.0).where(math.nan, _with_sign_of(r, x)).cast(out)

    def acos(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x > 1/2: 2 asin(sqrt((1-x)/2)) (accurate as x -> 1); x < -1/2: pi - the same of -x; else pi/2 - asin(x)."""
        x, out = _work(self)
        a = x.abs()
        big = a > 0.5
        p = big.where(((1.0 - a) * 0.5).sqrt(), x)._asin_core()
        r = big.where((x < 0).where(math.pi - 2.0 * p, 2.0 * p), math.pi / 2 - p)
        return (a > 1.0).where(math.nan, r).cast(out)

    # ---- hyperbolic ----------------------------------------------------------------------------

    def sinh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """|x| < 1: Taylor series (exp(x) - exp(-x) loses every digit near 0); above, e^|x|/2 - e^-|x|/2, the
        halving inside the exponent (no overflow before sinh's own)."""
        x, out = _work(self)
        a = x.abs()
        big = _with_sign_of(_exp(a, -1.0) - _exp(-a, -1.0), x)
        return (a < 1.0).where(_odd(x, _SINH_TAYLOR), big).cast(out)

    def cosh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """e^|x|/2 + e^-|x|/2, the halving inside the exponent (no overflow before cosh's own)."""
        x, out = _work(self)
        a = x.abs()
        return (_exp(a, -1.0) + _exp(-a, -1.0)).cast(out)

    def asinh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) (accurate near 0), log(2|x|) above 4096 (no x^2 overflow)."""
        x, out = _work(self)
        a = x.abs()
        a2 = a * a
        small = _log1p(a + a2 / (1.0 + (a2 + 1.0).sqrt()))
        r = (a > BIG).where(_log_2x(a), small)
        return (a < 2.0**-12).where(x, _with_sign_of(r, x)).cast(out)  # below 2^-12, asinh(x) == x in float32

    def acosh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x < 2: log1p(t + sqrt(2t + t^2)), t = x - 1 (accurate as x -> 1); then log(x + sqrt(x^2 - 1)); log(2x)
        above 4096; NaN below 1."""
        x, out = _work(self)
        t = x - 1.0
        near = _log1p(t + (t * (t + 2.0)).sqrt())
        mid = (x + (x * x - 1.0).sqrt()).log()
        r = (x > BIG).where(_log_2x(x), (x < 2.0).where(near, mid))
        return (x < 1.0).where(math.nan, r).cast(out)

    def atanh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """|x| < 0.3: its series; above, log((1+|x|) / (1-|x|)) / 2 (1-|x| is exact there): +-inf at +-1, NaN
        beyond."""
        x, out = _work(self)
        a = x.abs()
        r = _with_sign_of(((1.0 + a) / (1.0 - a)).log() * 0.5, x)
        r = (a > 1.0).where(math.nan, r)
        return (a < 0.3).where(_odd(x, _ATANH_TAYLOR), r).cast(out)

    # ---- exponential family --------------------------------------------------------------------

    def erf(self: Tensor) -> Tensor:  # type: ignore[misc]
        """|x| < 1: Taylor series (relative accuracy near 0); above, 1 - erfc by a fit of relative error < 1.2e-7:
        within 1e-7 absolute everywhere, +-1 at +-inf."""
        x, out = _work(self)
        a = x.abs()
        t = (a * 0.5 + 1.0).reciprocal()
        erfc = t * (_poly(t, _ERFC_FIT) - a * a).exp()
        r = _with_sign_of(1.0 - erfc, x)
        return (a < 1.0).where(x * _poly(x * x, _ERF_TAYLOR), r).cast(out)

    def log10(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.log2() * math.log10(2)

    def logaddexp(self: Tensor, other: Any) -> Tensor:  # type: ignore[misc]
        """log(exp(self) + exp(other)) as max + log1p(exp(-|self - other|)): no overflow; equal infinities give
        themselves."""

        a, b, _ = _promoted_pair(self, other, "logaddexp")
        (a, out), (b, _) = _work(a), _work(b)
        m = a.maximum(b)
        r = m + _log1p(_exp(-(a - b).abs()))
        return (a == b).where(a + LN2, r).cast(out)

    # ---- rounding, signs, remainders -----------------------------------------------------------

    def round(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Round half to even (as numpy and tinygrad); ints and bools are returned as they are."""
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        f = (self - t).abs()  # exact
        odd = (t * 0.5).trunc() != t * 0.5
        up = (f > 0.5) | ((f == 0.5) & odd)
        return up.where(t + self.sign(), t)

    def copysign(self: Tensor, other: Any) -> Tensor:  # type: ignore[misc]
        """The magnitude of self with the sign of other (floats: its sign bit, so -0.0 counts as negative); the
        promoted dtype of the two, as tinygrad (ints stay ints)."""

        a, b, dt = _promoted_pair(self, other, "copysign", numbers=True)
        if dt.is_float:
            return _with_sign_of(a, b)
        return (b < 0).where(-a.abs(), a.abs())

    def fmod(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        """C's remainder: the sign of self, |result| < |x| (`%` takes the sign of x). Floats of 32 bits or fewer are
        exact while |self / x| < 2^29 (computed in float64); fmod(x, 0) is NaN for floats and 0 for ints (as numpy)."""

        a, b, dt = _promoted_pair(self, x, "fmod", numbers=True)
        if dt.is_int:
            r = a % b  # the sign of b: step back by one b where the signs differ
            return ((r != 0) & ((r < 0) != (a < 0))).where(r - b, r)
        w = a.cast(dtypes.float64) if dt.itemsize <= 4 else a
        d = b.cast(w.dtype).abs()
        n = w.abs()
        r = n - (n / d).trunc() * d  # q*d is exact for q < 2^29 and d of 24 bits; the quotient may be 1 off
        r = (r < 0).where(r + d, r)
        r = (r >= d).where(r - d, r)
        r = _with_sign_of(r, w)
        return ((d == math.inf) & (n < math.inf)).where(w, r).cast(dt)

    def lerp(self: Tensor, end: Any, weight: Any) -> Tensor:  # type: ignore[misc]
        """self + (end - self) * weight, computed from the nearer end (exact at weight 0 and 1); integers interpolate
        in float (the result is float)."""
        e = self._to_tensor(end, "lerp")
        w = self._to_tensor(weight, "lerp")
        dt = promote(promote(self.dtype, e.dtype), w.dtype)
        dt = dt if dt.is_float else dtypes.default_float
        a, b, wt = self.cast(dt), e.cast(dt), w.cast(dt)
        d = b - a
        return (wt.abs() < 0.5).where(a + d * wt, b - d * (1.0 - wt))

    # ---- classification and comparison ---------------------------------------------------------

    def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:  # type: ignore[misc]
        pos, neg = _flag(detect_positive, "isinf detect_positive"), _flag(detect_negative, "isinf detect_negative")
        if not self.dtype.is_float or not (pos or neg):
            return type(self).full(self.shape, False, dtypes.bool)
        if pos and neg:
            return self.abs() == math.inf
        return self == (math.inf if pos else -math.inf)

    def isnan(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self != self if self.dtype.is_float else type(self).full(self.shape, False, dtypes.bool)

    def isfinite(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.abs() < math.inf if self.dtype.is_float else type(self).full(self.shape, True, dtypes.bool)

    def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:  # type: ignore[misc]
        """|self - other| <= atol + rtol * |other| (numpy's rule, not symmetric); equal infinities are close, NaNs
        only with equal_nan. Integers compare in the default float."""
        rt, at, en = _number(rtol, "isclose rtol"), _number(atol, "isclose atol"), _flag(equal_nan, "isclose equal_nan")
        o = self._to_tensor(other, "isclose")
        dt = promote(self.dtype, o.dtype)
        dt = dt if dt.is_float else dtypes.default_float
        a, b = type(self)._broadcast(self.cast(dt), o.cast(dt), at="isclose")
        close = a.isfinite() & b.isfinite() & ((a - b).abs() <= at + rt * b.abs())
        close = close | ((a.isinf() | b.isinf()) & (a == b))
        return close | (a.isnan() & b.isnan()) if en else close

    def allclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:  # type: ignore[misc]
        """Whether every element is close (isclose): computes the tensors and returns a python bool."""
        far = self.isclose(other, rtol=rtol, atol=atol, equal_nan=equal_nan).logical_not()
        return not bool(far.max().item())

    def eq(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        return self == x

    def ne(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        return self != x

    # ---- bitwise -------------------------------------------------------------------------------

    def bitwise_and(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
        return self._bitop(Ops.AND, x, reverse)

    def bitwise_or(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
        return self._bitop(Ops.OR, x, reverse)

    def bitwise_xor(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
        return self._bitop(Ops.XOR, x, reverse)

    def bitwise_not(self: Tensor) -> Tensor:  # type: ignore[misc]
        """~self: every bit flipped for ints, logical not for bools."""
        return ~self

    # ---- activations ---------------------------------------------------------------------------

    def elu(self: Tensor, alpha: float = 1.0) -> Tensor:  # type: ignore[misc]
        """x for x > 0, alpha * (exp(x) - 1) otherwise (by expm1: accurate near 0)."""
        al = _number(alpha, "elu alpha")
        x, out = _work(self)
        return (x > 0).where(x, al * _expm1(x)).cast(out)

    def celu(self: Tensor, alpha: float = 1.0) -> Tensor:  # type: ignore[misc]
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
        al = _number(alpha, "celu alpha", nonzero=True)
        x, out = _work(self)
        return (x.maximum(0.0) + (al * _expm1(x * (1 / al))).minimum(0.0)).cast(out)

    def selu(self: Tensor, alpha: float = SELU_ALPHA, gamma: float = SELU_GAMMA) -> Tensor:  # type: ignore[misc]
        """gamma * elu(x, alpha), with SELU's exact constants as defaults (tinygrad's are rounded to 6 digits)."""
        al, ga = _number(alpha, "selu alpha"), _number(gamma, "selu gamma")
        x, out = _work(self)
        return (ga * (x > 0).where(x, al * _expm1(x))).cast(out)

    def softplus(self: Tensor, beta: float = 1.0) -> Tensor:  # type: ignore[misc]
        """log(1 + exp(beta x)) / beta as (relu(beta x) + log1p(exp(-|beta x|))) / beta: no overflow for any x."""
        be = _number(beta, "softplus beta", nonzero=True)
        x, out = _work(self)
        bx = x * be
        return ((bx > 0).where(x, 0.0) + _log1p(_exp(-bx.abs())) * (1 / be)).cast(out)  # relu(bx)/beta, no overflow

    def logsigmoid(self: Tensor) -> Tensor:  # type: ignore[misc]
        """log(sigmoid(x)) = -softplus(-x), without overflow."""
        x, out = _work(self)
        return (-(-x).softplus()).cast(out)

    def softsign(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x / (1 + |x|); +-1 at +-inf."""
        x, out = _work(self)
        a = x.abs()
        return (a == math.inf).where(x.sign(), x / (a + 1.0)).cast(out)

    def mish(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x * tanh(softplus(x))."""
        x, out = _work(self)
        return (x * x.softplus().tanh()).cast(out)

    def swish(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x * sigmoid(x) (silu)."""
        return self.silu()

    def quick_gelu(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x * sigmoid(1.702 x)."""
        x = self._float()
        return x * (x * 1.702).sigmoid()

    def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:  # type: ignore[misc]
        """clip(alpha * x + beta, 0, 1) (torch's defaults, as tinygrad)."""
        al, be = _number(alpha, "hardsigmoid alpha"), _number(beta, "hardsigmoid beta")
        return (self._float() * al + be).clip(0.0, 1.0)

    def hardswish(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x * relu6(x + 3) / 6."""
        x = self._float()
        return x * (x + 3.0).clip(0.0, 6.0) * (1 / 6)

    def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:  # type: ignore[misc]
        lo, hi = _number(min_val, "hardtanh min_val"), _number(max_val, "hardtanh max_val")
        if lo > hi:
            raise InvalidArgument(at="hardtanh", why=f"min_val {lo} > max_val {hi}", suggestion="pass min_val <= max_val")
        return self.clip(min_val, max_val)

    def relu6(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.clip(0, 6)

    def softmin(self: Tensor, axis: int = -1, dtype: DType | str | None = None) -> Tensor:  # type: ignore[misc]
        """softmax(-x) along `axis`; `dtype`, a float dtype, is the one the exponentials are computed in."""
        dt = to_dtype(dtype) if dtype is not None else None
        if dt is not None and not dt.is_float:
            raise DTypeError(at="softmin", why=f"softmin in {dt.name}", suggestion="pass a float dtype (or None)")
        x = -self._float()
        m = x - x.max(axis, keepdim=True)
        if dt is not None:
            m = m.cast(dt)
        e = m.exp()
        return e / e.sum(axis, keepdim=True)

    # ---- dtype helpers -------------------------------------------------------------------------

    def double(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.cast(dtypes.float64)

    def long(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.cast(dtypes.int64)

    def short(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.cast(dtypes.int16)

    def bfloat16(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.cast(dtypes.bfloat16)

    def is_floating_point(self: Tensor) -> bool:  # type: ignore[misc]
        return self.dtype.is_float

    def element_size(self: Tensor) -> int:  # type: ignore[misc]
        """Bytes per element."""
        return self.dtype.itemsize

    def nbytes(self: Tensor) -> int:  # type: ignore[misc]
        """Bytes of all the elements."""
        return self.numel() * self.dtype.itemsize

    def size(self: Tensor, dim: int | None = None) -> int | tuple[int, ...]:  # type: ignore[misc]
        """The shape, or the length of axis `dim`."""
        if dim is None:
            return self.shape
        if self.ndim == 0:
            raise AxisError(at="size", why="a 0-d tensor has no axes", suggestion="call size() without dim")
        return self.shape[self._resolve_axis(dim, what="size")]

    def clone(self: Tensor) -> Tensor:  # type: ignore[misc]
        """A new Tensor of the same value (tensors are immutable values: nothing is copied until computed)."""
        return type(self)(self.uop)

    def const_like(self: Tensor, b: bool | int | float, dtype: DType | str | None = None) -> Tensor:  # type: ignore[misc]
        """A tensor of self's shape filled with b, of self's dtype (or `dtype`); a value the dtype cannot hold is
        a diagnostic, not a wrapped or truncated constant."""
        dt = to_dtype(dtype) if dtype is not None else self.dtype
        if not isinstance(b, (bool, int, float)):
            raise InvalidArgument(at="const_like", why=f"{b!r} is not a scalar", suggestion="pass a bool, int or float")
        if dt.is_bool and b not in (0, 1):
            raise DTypeError(at="const_like", why=f"{b!r} is not a bool", suggestion="pass True, False, 0 or 1")
        if dt.is_int and not ((isinstance(b, int) or b.is_integer()) and dt.min <= b <= dt.max):
            raise DTypeError(
                at="const_like",
                why=f"{b!r} is not an integer that fits {dt.name}",
                suggestion="pass a value in the dtype's range, or another dtype",
            )
        if dt.is_float and not isinstance(b, bool) and not _fits_float(b, dt):
            raise DTypeError(
                at="const_like", why=f"{b!r} overflows {dt.name}", suggestion="pass a value in the dtype's range, or inf"
            )
        return type(self).full(self.shape, b, dt)
