"""Chapter 2 reference: causal and padding masks, and causal self-attention.

The reading order is the dependency order: ``causal_mask`` → ``padding_mask``
→ ``combine_masks`` → ``additive_mask`` → ``CausalSelfAttention``.

Masks are boolean and ``True`` means "may attend", as in
``torch.nn.functional.scaled_dot_product_attention``; they broadcast against
the scores ``(..., T_q, T_k)``. ``additive_mask`` converts one to the other
common form, a float tensor of ``0`` and ``-inf`` added to the scores.
"""

from __future__ import annotations

from functools import reduce

import torch
from torch import Tensor, nn

from solutions.self_attention import scaled_dot_product_attention

__all__ = [
    "causal_mask", "padding_mask", "combine_masks", "additive_mask", "CausalSelfAttention",
    "masked_attention_shapes", "visible_keys",  # concept checks
]


def causal_mask(t_q: int, t_k: int | None = None, device: torch.device | str | None = None) -> Tensor:
    r"""Boolean look-ahead mask: query ``i`` may attend key ``j`` iff ``j <= i + (t_k - t_q)``.

    .. math:: \mathrm{mask}_{ij} = [\, j \le i + (T_k - T_q) \,]

    With ``t_k == t_q`` this is the lower triangle, diagonal included: token
    ``i`` sees itself and the tokens before it. With ``t_q < t_k`` the queries
    are the *last* ``t_q`` positions of a sequence of ``t_k`` keys, as when a
    decoder keeps a cache of earlier keys and feeds only the new tokens: the
    last query lines up with the last key.

    Args:
        t_q: number of queries.
        t_k: number of keys; defaults to ``t_q``.
        device: where to build the mask.

    Returns:
        ``(t_q, t_k)`` boolean tensor, ``True`` = may attend.

    Raises:
        ValueError: if a length is negative or ``t_q > t_k`` (a query would
            have no position among the keys).
    """
    t_k = t_q if t_k is None else t_k
    if t_q < 0 or t_k < 0:
        raise ValueError(f"causal_mask needs non-negative lengths, got t_q={t_q}, t_k={t_k}")
    if t_q > t_k:
        raise ValueError(
            f"causal_mask needs t_q <= t_k (the queries are the last t_q of the t_k positions), "
            f"got t_q={t_q}, t_k={t_k}"
        )
    i = torch.arange(t_q, device=device).unsqueeze(1)  # (t_q, 1): query positions
    j = torch.arange(t_k, device=device).unsqueeze(0)  # (1, t_k): key positions
    return j <= i + (t_k - t_q)  # (t_q, 1) against (1, t_k) -> (t_q, t_k)


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Boolean key mask that hides padding: ``True`` where ``tokens`` is not ``pad_id``.

    Args:
        tokens: ``(B, T)`` token ids.
        pad_id: the id of the padding token.

    Returns:
        ``(B, 1, T)`` boolean tensor on the device of ``tokens``. The middle
        axis of size 1 broadcasts over the queries: every query of a sequence
        is barred from the same padded keys.

    Raises:
        ValueError: if ``tokens`` is not two-dimensional.
    """
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape (B, T), got shape {tuple(tokens.shape)}")
    return (tokens != pad_id).unsqueeze(1)  # (B, T) -> (B, 1, T)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    r"""Logical AND of boolean masks, broadcast together; ``None`` entries are ignored.

    .. math:: \mathrm{mask} = m_1 \land m_2 \land \dots

    A key may be attended only if *every* mask allows it, e.g. a causal
    ``(T, T)`` mask and a padding ``(B, 1, T)`` mask give ``(B, T, T)``.

    Args:
        masks: boolean tensors that broadcast together, or ``None``.

    Returns:
        The combined boolean mask of the broadcast shape, or ``None`` if every
        entry is ``None`` (no masking at all).

    Raises:
        ValueError: if a mask is not boolean or the shapes do not broadcast.
    """
    given = [m for m in masks if m is not None]
    for m in given:
        if not isinstance(m, Tensor) or m.dtype != torch.bool:
            kind = m.dtype if isinstance(m, Tensor) else type(m).__name__
            raise ValueError(f"combine_masks takes boolean masks (True = may attend), got {kind}")
    if not given:
        return None
    try:
        torch.broadcast_shapes(*(m.shape for m in given))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in given)
        raise ValueError(f"combine_masks: the mask shapes {shapes} do not broadcast together") from None
    return reduce(torch.logical_and, given)  # broadcast shape of all the masks


def additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The float form of a boolean mask: ``0.0`` where ``True``, ``-inf`` where ``False``.

    .. math:: M_{ij} = \begin{cases} 0 & \mathrm{mask}_{ij} \\ -\infty & \text{otherwise} \end{cases}
              \qquad \mathrm{softmax}(\mathrm{scores} + M)

    Adding ``M`` to the scores has the same effect as filling the blocked
    scores with ``-inf``; this is the form ``F.scaled_dot_product_attention``
    accepts for a float ``attn_mask``.

    Args:
        mask: boolean mask of any shape, ``True`` = may attend.
        dtype: floating-point dtype of the result.

    Returns:
        Tensor of the shape and device of ``mask``, in ``dtype``.

    Raises:
        ValueError: if ``mask`` is not boolean or ``dtype`` is not floating
            point (it could not hold ``-inf``).
    """
    if mask.dtype != torch.bool:
        raise ValueError(f"additive_mask takes a boolean mask (True = may attend), got {mask.dtype}")
    if not dtype.is_floating_point:
        raise ValueError(f"additive_mask needs a floating-point dtype to hold -inf, got {dtype}")
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


class CausalSelfAttention(nn.Module):
    r"""Single-head self-attention in which no token attends a later one.

    .. math:: \mathrm{out} = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + M\right) V,
              \qquad M_{ij} = 0 \text{ if } j \le i \text{ and key } j \text{ is no padding, else } -\infty

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

    def forward(self, x: Tensor, pad_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``x (B, T, d_model)``, optional ``pad_mask (B, 1, T)`` from :func:`padding_mask`
        → ``(out (B, T, d_v), weights (B, T, T))``; position ``i`` attends keys ``0..i`` that are not padding."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (B, T, d_model={self.d_model}), got {tuple(x.shape)}")
        batch, t = x.shape[0], x.shape[1]
        if pad_mask is not None and tuple(pad_mask.shape) != (batch, 1, t):
            raise ValueError(
                f"pad_mask must have shape (B, 1, T) = {(batch, 1, t)} for x {tuple(x.shape)}, "
                f"got {tuple(pad_mask.shape)}"
            )
        mask = combine_masks(causal_mask(t, device=x.device), pad_mask)  # (T, T) & (B, 1, T) -> (B, T, T)
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)  # (B, T, d_k), (B, T, d_k), (B, T, d_v)
        return scaled_dot_product_attention(q, k, v, mask)


# ---------------------------------------------------------------- concept checks


def masked_attention_shapes(n_tokens: int, d_model: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(weights_shape, output_shape)`` of causal self-attention over one sentence of ``n_tokens`` tokens
    whose queries, keys and values are ``d_model`` wide: the weights compare tokens with tokens, ``(T, T)``
    (the mask zeroes entries, it removes none); the output, weights @ V, is ``(T, d_model)``."""
    return (n_tokens, n_tokens), (n_tokens, d_model)


def visible_keys(tokens: list[int], pad_id: int, query: int) -> tuple[int, ...]:
    """The key positions query ``query`` may attend under the look-ahead and padding masks together: keys
    ``0..query`` that are not padding. The padding mask hides padded keys; a padded query still attends."""
    return tuple(key for key in range(query + 1) if tokens[key] != pad_id)
