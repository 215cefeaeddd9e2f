"""Chapter 4 reference: multi-head attention.

The reading order is the dependency order: ``split_heads`` → ``merge_heads``
→ ``MultiHeadAttention``, which projects, splits, attends in every head at
once, merges and projects back.

Shapes: ``B`` batch, ``T_q`` queries, ``T_k`` keys, ``d_model`` model width,
``n_heads`` heads of width ``d_head = d_model // n_heads``. GPT-2 small has
``d_model = 768`` and 12 heads of 64: for a 9-token sentence each head returns
a ``9 × 64`` matrix, and only their concatenation is ``9 × 768``. Masks are
boolean and ``True`` means "may attend", as in
``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solutions.self_attention import scaled_dot_product_attention

__all__ = ["split_heads", "merge_heads", "MultiHeadAttention", "head_query_shape", "attention_parameters"]


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    r"""Cut the feature axis into ``n_heads`` heads of ``d_head = d_model / n_heads`` features.

    .. math:: \mathrm{heads}[b, h, t, :] = x[b, t,\ h \cdot d_\text{head} : (h + 1) \cdot d_\text{head}]

    Head ``h`` gets the ``h``-th block of ``d_head`` consecutive features of
    every position; the positions themselves are not split. The result is a
    view of ``x`` where possible (no copy).

    Args:
        x: ``(B, T, d_model)``.
        n_heads: number of heads; must divide ``d_model``.

    Returns:
        ``(B, n_heads, T, d_head)``.

    Raises:
        ValueError: if ``x`` is not 3-D or ``d_model`` is not a multiple of ``n_heads``.
    """
    if x.dim() != 3:
        raise ValueError(f"split_heads takes x of shape (B, T, d_model), got shape {tuple(x.shape)}")
    batch, t, d_model = x.shape
    if n_heads < 1 or d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} (x {tuple(x.shape)}) is not divisible by n_heads={n_heads}")
    # (B, T, d_model) -> (B, T, n_heads, d_head) -> (B, n_heads, T, d_head)
    return x.reshape(batch, t, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    r"""Concatenate the heads back along the feature axis: the inverse of :func:`split_heads`.

    .. math:: \mathrm{out}[b, t,\ h \cdot d_\text{head} : (h + 1) \cdot d_\text{head}] = x[b, h, t, :]

    so that ``merge_heads(split_heads(x, n_heads))`` is ``x``.

    Args:
        x: ``(B, n_heads, T, d_head)``.

    Returns:
        ``(B, T, n_heads * d_head)``.

    Raises:
        ValueError: if ``x`` is not 4-D.
    """
    if x.dim() != 4:
        raise ValueError(f"merge_heads takes x of shape (B, n_heads, T, d_head), got shape {tuple(x.shape)}")
    batch, n_heads, t, d_head = x.shape
    # (B, n_heads, T, d_head) -> (B, T, n_heads, d_head) -> (B, T, n_heads * d_head)
    return x.transpose(1, 2).reshape(batch, t, n_heads * d_head)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention: ``n_heads`` scaled dot-product attentions side by side.

    .. math:: \mathrm{head}_h = \mathrm{softmax}\!\left(\frac{Q_h K_h^\top}{\sqrt{d_\text{head}}} + M\right) V_h,
              \qquad \mathrm{out} = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_{n}) W_o

    where ``Q = query W_q``, ``K = key W_k``, ``V = value W_v`` and ``Q_h`` is
    the ``h``-th block of ``d_head`` features of ``Q`` (:func:`split_heads`).
    Each head attends with its own slice of the projections, so a head can
    look at the sentence differently from the others at no extra cost: the
    ``n_heads`` heads of width ``d_head`` together do the work of one head of
    width ``d_model``. ``M`` is 0 where the mask is ``True`` and ``-inf`` where
    it is ``False``; the same mask applies to every head.

    Args:
        d_model: width of the inputs and of the output.
        n_heads: number of heads; must divide ``d_model``.
        bias: whether the four projections have a bias.
        dropout: probability of zeroing an attention weight, in training mode only.

    Attributes:
        w_q, w_k, w_v, w_o: ``nn.Linear(d_model, d_model, bias=bias)``; in ``w_q``,
            ``w_k`` and ``w_v`` the output rows ``h * d_head .. (h + 1) * d_head - 1``
            belong to head ``h``.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be a probability in [0, 1], got {dropout}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, need_weights: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        """``query (B, T_q, d_model)``, ``key`` and ``value (B, T_k, d_model)`` → ``(out, weights)``.

        Args:
            mask: optional boolean tensor that broadcasts to ``(B, T_q, T_k)``, ``True`` = may
                attend: a ``(T_q, T_k)`` causal mask, a ``(B, 1, T_k)`` padding mask or a
                ``(B, T_q, T_k)`` combination, as Chapter 2 builds them. The head axis is
                added here, so every head gets the same mask.
            need_weights: ``True`` (default) runs the readable path and returns the weights;
                ``False`` runs the fast path, ``F.scaled_dot_product_attention``, which gives
                the same ``out`` without building the weights, and returns ``None`` for them.

        Returns:
            ``out (B, T_q, d_model)`` and ``weights (B, n_heads, T_q, T_k)``: each head's
            weights after dropout, the ones that multiplied the values (as
            ``nn.MultiheadAttention`` returns them with ``average_attn_weights=False``).
            A query whose keys are all masked gets all-zero weights, so its output is
            ``w_o``'s bias.

        Raises:
            ValueError: if an input is not ``(B, T, d_model)``, the batch sizes differ, ``key``
                and ``value`` differ in length, or the mask is not boolean or does not
                broadcast to ``(B, T_q, T_k)``.
        """
        self._check(query, key, value, mask)
        q = split_heads(self.w_q(query), self.n_heads)  # (B, T_q, d_model) -> (B, n_heads, T_q, d_head)
        k = split_heads(self.w_k(key), self.n_heads)  # (B, T_k, d_model) -> (B, n_heads, T_k, d_head)
        v = split_heads(self.w_v(value), self.n_heads)  # (B, T_k, d_model) -> (B, n_heads, T_k, d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)  # (..., T_q, T_k) -> (..., 1, T_q, T_k): one mask for every head
        if not need_weights:
            p = self.dropout.p if self.training else 0.0
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            return self.w_o(merge_heads(heads)), None
        _, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, n_heads, T_q, T_k)
        weights = self.dropout(weights)  # identity in eval mode
        heads = weights @ v  # (B, n_heads, T_q, T_k) @ (B, n_heads, T_k, d_head) -> (B, n_heads, T_q, d_head)
        out = self.w_o(merge_heads(heads))  # (B, n_heads, T_q, d_head) -> (B, T_q, d_model) -> (B, T_q, d_model)
        return out, weights

    def _check(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3 or t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must be (B, T, d_model={self.d_model}); got {name} {tuple(t.shape)}")
        if not query.shape[0] == key.shape[0] == value.shape[0] or key.shape[1] != value.shape[1]:
            raise ValueError(
                f"query (B, T_q, d_model), key and value (B, T_k, d_model) must agree in B and T_k; got query "
                f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        if mask is None:
            return
        scores = (query.shape[0], query.shape[1], key.shape[1])  # (B, T_q, T_k)
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be boolean (True = may attend), got {mask.dtype}")
        try:
            fits = torch.broadcast_shapes(mask.shape, scores) == scores
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to (B, T_q, T_k) = {scores}")


# ---------------------------------------------------------------- concept checks


def head_query_shape(n_tokens: int, d_model: int, n_heads: int) -> tuple[int, int]:
    """The shape of one head's queries (and of its output) for one sentence: ``(T, d_model / n_heads)``.
    Only the concatenation of all the heads is ``d_model`` wide."""
    return n_tokens, d_model // n_heads


def attention_parameters(d_model: int, n_heads: int) -> int:
    """The parameters of ``MultiHeadAttention(d_model, n_heads)`` with biases: four ``d_model × d_model``
    projections and their biases, whatever the number of heads (the heads split the width, they add nothing)."""
    return 4 * (d_model * d_model + d_model)
