"""Chapter 1 reference: scaled dot-product self-attention.

The reading order is the dependency order: ``softmax`` → ``attention_scores``
→ ``scaled_dot_product_attention`` → ``SelfAttention``.

Shapes: ``B`` batch, ``T_q`` queries, ``T_k`` keys, ``d_k`` query/key width,
``d_v`` value width; any number of leading batch axes (``...``) is allowed.
Masks are boolean and ``True`` means "may attend", as in
``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "softmax", "attention_scores", "scaled_dot_product_attention", "SelfAttention",
    "score_position", "score_count",  # concept checks
]


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    r"""Numerically stable softmax along ``dim``.

    .. math:: \mathrm{softmax}(x)_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},
              \quad m = \max_j x_j

    Subtracting the maximum leaves the result unchanged and keeps ``exp`` from
    overflowing (``exp(1000)`` is ``inf`` in float32). Entries equal to
    ``-inf`` get weight 0, and a slice that is entirely ``-inf`` (a query
    whose keys are all masked) gives zeros rather than ``0 / 0 = NaN``.

    Args:
        x: any shape, floating point.
        dim: the axis the weights sum to 1 over.

    Returns:
        Tensor of the shape, dtype and device of ``x``.
    """
    m = x.amax(dim=dim, keepdim=True)
    # An all -inf slice has max -inf; shifting by 0 instead keeps exp() at 0, not NaN.
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    total = e.sum(dim=dim, keepdim=True)
    # Where the total is 0 every e is 0 too: divide by 1 to return zeros.
    return e / torch.where(total > 0, total, torch.ones_like(total))


def _check_pair(q: Tensor, k: Tensor) -> None:
    if q.dim() < 2 or k.dim() < 2:
        raise ValueError(
            f"q and k need at least 2 dimensions (..., T, d_k); got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share d_k (their last axis): q {tuple(q.shape)} has d_k={q.shape[-1]}, "
            f"k {tuple(k.shape)} has d_k={k.shape[-1]}"
        )


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    r"""Scaled dot products of every query with every key.

    .. math:: \mathrm{scores} = \frac{Q K^\top}{\sqrt{d_k}}

    Args:
        q: ``(..., T_q, d_k)`` queries.
        k: ``(..., T_k, d_k)`` keys.

    Returns:
        ``(..., T_q, T_k)``: row ``i`` scores query ``i`` against every key.

    Raises:
        ValueError: if ``q`` and ``k`` differ in ``d_k``.
    """
    _check_pair(q, k)
    d_k = q.shape[-1]
    # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    return q @ k.transpose(-2, -1) / math.sqrt(d_k)


def _check_mask(mask: Tensor, scores_shape: torch.Size) -> None:
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be a boolean tensor where True means 'may attend' and False blocks the key; "
            f"got dtype {mask.dtype}. An additive 0/-inf mask converts with `mask == 0`."
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores (..., T_q, T_k) = "
            f"{tuple(scores_shape)}"
        )


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    r"""Scaled dot-product attention, the manual path.

    .. math:: \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}
              + M\right) V

    where ``M`` is 0 where ``mask`` is ``True`` and ``-inf`` where it is ``False``.

    Args:
        q: ``(..., T_q, d_k)``.
        k: ``(..., T_k, d_k)``.
        v: ``(..., T_k, d_v)``.
        mask: optional boolean tensor broadcastable to ``(..., T_q, T_k)``;
            ``True`` means "may attend". A query whose keys are all masked gets
            all-zero weights and an all-zero output.

    Returns:
        ``(out, weights)``: ``out (..., T_q, d_v)`` and ``weights (..., T_q, T_k)``,
        each row of ``weights`` summing to 1 over the keys (or 0 if fully masked).
        Matches ``F.scaled_dot_product_attention(q, k, v, attn_mask=mask)``.

    Raises:
        ValueError: on mismatched ``d_k``, keys and values of different length,
            a mask that is not boolean or does not broadcast to the scores.
    """
    _check_pair(q, k)
    if v.dim() < 2 or v.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys T_k (axis -2): k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    scores = attention_scores(q, k)  # (..., T_q, T_k)
    if mask is not None:
        _check_mask(mask, scores.shape)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., T_q, T_k), rows sum to 1 over keys
    out = weights @ v  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out, weights


class SelfAttention(nn.Module):
    r"""Single-head self-attention: queries, keys and values all come from ``x``.

    .. math:: Q = X W_q,\quad K = X W_k,\quad V = X W_v,\quad
              \mathrm{out} = \mathrm{softmax}(QK^\top / \sqrt{d_k}) V

    Args:
        d_model: width of each input token vector.
        d_k: width of queries and keys.
        d_v: width of values and of the output; defaults to ``d_k``.
        bias: whether the three projections have a bias.

    Attributes:
        w_q, w_k: ``nn.Linear(d_model, d_k)``.
        w_v: ``nn.Linear(d_model, d_v)``.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False) -> None:
        super().__init__()
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_k if d_v is None else d_v
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, self.d_v, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``x (B, T, d_model)``, optional boolean ``mask`` broadcastable to
        ``(B, T, T)`` → ``(out (B, T, d_v), weights (B, T, T))``."""
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x {tuple(x.shape)} must end in d_model={self.d_model}")
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)  # (B, T, d_k), (B, T, d_k), (B, T, d_v)
        return scaled_dot_product_attention(q, k, v, mask)


# ---------------------------------------------------------------- concept checks


def score_position(query: int, key: int) -> tuple[int, int]:
    """Where, in ``scores = Q Kᵀ / √d_k``, token ``query`` meets token ``key``: row ``query``, column ``key``.

    Row i of Q Kᵀ holds query i's dot products with every key, so K Qᵀ is the transpose, not the same matrix.
    """
    return query, key


def score_count(n_tokens: int) -> int:
    """The scores one self-attention head computes for ``n_tokens`` tokens: every query with every key, n²."""
    return n_tokens * n_tokens
