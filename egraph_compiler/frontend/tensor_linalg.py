"""Matrix algorithms of the Tensor API (tinygrad's names and conventions), composed from the primitive Tensor ops;
`self` is a Tensor. Every step is a fixed sequence of tensor ops (no data-dependent loop counts), so each
algorithm unrolls into one graph: QR by Householder reflections, the SVD by one-sided Jacobi rotations in a
round-robin order, Newton-Schulz by its polynomial steps. Leading axes are batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from egraph_compiler.frontend.tensor_select import _int
from egraph_compiler.ir.diagnostics import DTypeError, InvalidArgument, ShapeMismatch
from egraph_compiler.ir.dtypes import dtypes

if TYPE_CHECKING:
    from egraph_compiler.frontend.tensor import Tensor

JACOBI_SWEEPS = 4  # one-sided Jacobi: sweeps of every column pair (k rounds each); 4 converge in float32


def _matrix(t: Tensor, what: str) -> tuple[tuple[int, ...], int, int]:
    """(batch shape, rows, columns) of a float tensor with at least two axes."""
    if t.ndim < 2:
        raise ShapeMismatch(at=what, why=f"expected two or more dimensions, got shape {t.shape}", suggestion="pass a matrix")
    if not t.dtype.is_float:
        raise DTypeError(at=what, why=f"{what} of {t.dtype.name}", suggestion="cast to a float dtype first")
    return tuple(t.shape[:-2]), int(t.shape[-2]), int(t.shape[-1])


def _eye(cls: Any, n: int, batch: tuple[int, ...], dtype: Any) -> Tensor:
    return cls.eye(n, dtype=dtype).reshape((1,) * len(batch) + (n, n)).expand(*batch, n, n)


class TensorLinalg:
    """Norms and factorizations over the last two axes."""

    def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # type: ignore[misc]
        """self / max(||self||_p along dim, eps) (torch.nn.functional.normalize)."""
        if isinstance(p, bool) or not isinstance(p, (int, float)) or p <= 0:
            raise InvalidArgument(at="Tensor.normalize", why=f"p={p!r} is not a positive number", suggestion="pass p=2.0")
        a = self.abs()
        norm = a.max(axis=dim, keepdim=True) if p == float("inf") else (a**p).sum(axis=dim, keepdim=True) ** (1.0 / p)
        return self / norm.maximum(eps)

    def qr(self: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """(Q, R) with Q @ R == self: Q (..., m, m) orthogonal, R (..., m, n) upper triangular (numpy's
        mode='complete'). Householder reflections as LAPACK makes them: R's diagonal is -sign(x0) * ||x||, and a
        column with nothing below its diagonal is left as it is, so the signs agree with numpy.linalg.qr."""
        cls = type(self)
        batch, m, n = _matrix(self, "Tensor.qr")
        r, q = self, _eye(cls, m, batch, self.dtype)
        rows = cls.arange(m)
        for i in range(min(m, n)):
            col = (rows >= i).where(r[..., :, i], 0.0)  # column i from the diagonal down
            norm = col.square().sum(-1, keepdim=True).sqrt()
            x0 = r[..., i : i + 1, i]
            sgn = (x0 != 0).where(x0.sign(), 1.0)
            u0 = x0 + sgn * norm
            # nothing below the diagonal: no reflection (tau = 0), as LAPACK's dlarfg (a square matrix's last
            # column keeps its sign, as in numpy and torch; tinygrad reflects it)
            live = (rows > i).where(col, 0.0).abs().max(-1, keepdim=True) != 0
            v = ((rows == i).where(u0, col) / live.where(u0, 1.0)).unsqueeze(-1)  # v[i] = 1
            tau = live.where(sgn * u0 / live.where(norm, 1.0), 0.0).unsqueeze(-1)
            w = tau * v
            r = r - w @ (v.transpose(-2, -1) @ r)
            q = q - (q @ v) @ w.transpose(-2, -1)
        return q, r

    def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[misc]
        """(U, S, Vh) with U @ diag(S) @ Vh == self, S descending (tinygrad's algorithm: QR, then one-sided
        Jacobi rotations of R's columns in a round-robin order, JACOBI_SWEEPS sweeps). U's and Vh's signs are
        the algorithm's own (numpy's LAPACK may flip a pair of singular vectors). `full_matrices=False`: U has
        min(m, n) columns."""
        cls = type(self)
        batch, m, n = _matrix(self, "Tensor.svd")
        if not isinstance(full_matrices, bool):
            raise InvalidArgument(at="Tensor.svd", why=f"full_matrices={full_matrices!r}", suggestion="pass True or False")
        q, r = (self if m >= n else self.transpose(-2, -1)).qr()
        k, big = min(m, n), max(m, n)
        u, v = r[..., :k, :k].contiguous(), _eye(cls, k, batch, self.dtype).contiguous()
        if k > 1:
            u, v = _jacobi(cls, u, v, batch, k)
        s, order = u.square().sum(-2).sqrt().sort(dim=-1, descending=True)
        pick = order.unsqueeze(-2).expand(*batch, k, k)
        u = u.gather(-1, pick) / (s != 0).where(s, 1.0).unsqueeze(-2)
        v = v.gather(-1, pick)
        pad = ((0, 0),) * len(batch) + ((0, big - k), (0, big - k))
        u = q @ (u.pad(pad) + _eye(cls, big, batch, u.dtype) - _eye(cls, k, batch, u.dtype).pad(pad))
        if not full_matrices:
            u = u[..., :k]
        return (u, s, v.transpose(-2, -1)) if m >= n else (v, s, u.transpose(-2, -1))

    def newton_schulz(self: Tensor, steps: int, params: tuple[float, ...], eps: float = 1.0e-7) -> Tensor:  # type: ignore[misc]
        """`steps` Newton-Schulz iterations of the odd polynomial sum_i params[i] * (G G^T)^i G, from G = self /
        (||self||_F + eps) (Muon's orthogonalization); a tall matrix is iterated transposed."""
        _matrix(self, "Tensor.newton_schulz")
        steps = _int(steps, "Tensor.newton_schulz steps", 0)
        if not isinstance(params, (tuple, list)) or not params:
            raise InvalidArgument(
                at="Tensor.newton_schulz",
                why=f"params={params!r}",
                suggestion="pass the polynomial's coefficients, e.g. (2, -1.5, 0.5)",
            )
        if self.shape[-2] > self.shape[-1]:
            return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
        g = self / (self.square().sum(axis=(-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            gram = g @ g.transpose(-2, -1)
            term, total = g, None
            for i, c in enumerate(params):
                if i:
                    term = gram @ term
                total = term * c if total is None else total + term * c
            assert total is not None
            g = total
        return g


def _jacobi(cls: Any, u: Tensor, v: Tensor, batch: tuple[int, ...], k: int) -> tuple[Tensor, Tensor]:
    """One-sided Jacobi: each round rotates k // 2 disjoint column pairs of u (and the same of v) so that each
    pair becomes orthogonal; the round-robin order (Brent-Luk: one index fixed for even k, all shifting for odd k)
    meets every pair once a sweep."""
    h = k // 2
    order = list(range(h)) + list(range(k - 1, h - 1, -1))
    cols = cls.arange(k, dtype=dtypes.int32)
    eye = _eye(cls, k, batch, u.dtype)
    rounds = JACOBI_SWEEPS * k  # as tinygrad: a sweep is k - 1 rounds for even k, so even k gets a few more
    for _ in range(rounds):
        perm = cls(order, dtype=dtypes.int32)
        sel = (cols.unsqueeze(1) == perm.unsqueeze(0)).cast(u.dtype)[:, : 2 * h]  # (k, 2h): column pickers
        pair = u @ sel
        left, right = pair[..., :h], pair[..., h:]
        gamma = (left * right).sum(-2).reshape(*batch, 1, h)
        norms = pair.square().sum(-2).unsqueeze(-2)
        alpha, beta = norms[..., :h], norms[..., h:]
        rot = gamma != 0
        tau = (beta - alpha) / (2 * rot.where(gamma, 1.0))
        t = rot.where((tau != 0).where(tau.sign(), 1.0) / (tau.abs() + (1 + tau.square()).sqrt()), 0.0)
        c = 1 / (1 + t.square()).sqrt()
        s = c * t
        mi, mj = sel.transpose(-2, -1)[:h], sel.transpose(-2, -1)[h:]  # (h, k) each: the pairs' one-hot rows
        mi_a, mi_b, mj_a, mj_b = mi.unsqueeze(-1), mi.unsqueeze(-2), mj.unsqueeze(-1), mj.unsqueeze(-2)
        cc, ss = (c - 1).reshape(*batch, h, 1, 1), s.reshape(*batch, h, 1, 1)
        rotation = eye + (cc * (mi_a * mi_b + mj_a * mj_b) + ss * (mi_a * mj_b - mj_a * mi_b)).sum(-3)
        u, v = u @ rotation, v @ rotation
        order = [(p - 1) % k for p in order] if k % 2 else [order[0]] + [(p - 2) % (k - 1) + 1 for p in order[1:]]
    return u, v


__all__ = ["JACOBI_SWEEPS", "TensorLinalg"]
