"""Chapter 5 reference: positional encodings.

Attention by itself ignores word order: permute the tokens and every output is
permuted the same way. A positional encoding gives each position a code.

The reading order is the dependency order: ``sinusoidal_encoding`` (the fixed
table of the original transformer) → ``SinusoidalPositionalEncoding`` (that
table kept as a buffer and *added* to the inputs) →
``LearnedPositionalEmbedding`` (a trainable table instead) → ``apply_rotary``
(RoPE: rotate queries and keys instead of adding anything).

Shapes: ``B`` batch, ``T`` length, ``d_model`` (or ``d`` for RoPE) the width;
``i`` numbers the pairs of columns ``(2i, 2i + 1)``, ``0 <= i < d / 2``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "sinusoidal_encoding", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding", "apply_rotary", "alibi_bias",
    "encoded_shape", "same_without_positions",  # concept checks
]


def _frequencies(d: int, base: float, dtype: torch.dtype, device: torch.device | str | None = None) -> Tensor:
    r"""``(d / 2,)``: the angular frequency of each pair, :math:`\omega_i = \mathrm{base}^{-2i/d}`."""
    two_i = torch.arange(0, d, 2, dtype=dtype, device=device)  # 0, 2, 4, ..., d - 2
    return torch.exp(-math.log(base) * two_i / d)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> Tensor:
    r"""The sinusoidal position table of "Attention Is All You Need".

    .. math:: PE_{p,\,2i} = \sin\!\big(p \,/\, \mathrm{base}^{2i/d_\text{model}}\big),\qquad
              PE_{p,\,2i+1} = \cos\!\big(p \,/\, \mathrm{base}^{2i/d_\text{model}}\big)

    Columns ``2i`` and ``2i + 1`` form a pair that turns at the angular speed
    ``base^(-2i/d_model)``: the first pair once per ~6 positions, the last one
    ``base`` times slower. Sine and cosine are *interleaved* (sin, cos, sin,
    cos, ...), so a shift by ``k`` positions rotates every pair by its own
    angle, the same at every position.

    Args:
        max_len: number of positions ``p = 0 .. max_len - 1``.
        d_model: width of the code; must be even (one sine and one cosine per pair).
        base: the wavelength scale (10000 in the original transformer).

    Returns:
        ``(max_len, d_model)`` tensor in the default dtype (float32), values in ``[-1, 1]``;
        row 0 is ``[0, 1, 0, 1, ...]``.

    Raises:
        ValueError: if ``d_model`` is odd, or a size is not positive.
    """
    if max_len <= 0 or d_model <= 0:
        raise ValueError(f"sinusoidal_encoding needs positive sizes, got max_len={max_len}, d_model={d_model}")
    if d_model % 2:
        raise ValueError(f"sinusoidal_encoding needs an even d_model (sin and cos in pairs), got d_model={d_model}")
    positions = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    angles = positions * _frequencies(d_model, base, torch.float64)  # (max_len, 1) * (d/2,) -> (max_len, d/2)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (max_len, d/2, 2): the pairs (sin, cos)
    return pe.flatten(-2).to(torch.get_default_dtype())  # (max_len, d/2, 2) -> (max_len, d_model), interleaved


def _length(x: Tensor, d_model: int, max_len: int) -> int:
    """``T`` of ``x (B, T, d_model)``; ValueError if ``x`` does not end in ``d_model`` or ``T > max_len``."""
    if x.dim() < 2 or x.shape[-1] != d_model:
        raise ValueError(f"x must be (B, T, d_model={d_model}), got {tuple(x.shape)}")
    t = x.shape[-2]
    if t > max_len:
        raise ValueError(f"the sequence is longer than the table: T={t} > max_len={max_len}")
    return t


class SinusoidalPositionalEncoding(nn.Module):
    r"""Adds the sinusoidal code of each position to the token vectors.

    .. math:: \mathrm{out}_{b,t} = x_{b,t} + PE_t

    The encoding is *added*, not concatenated: the width stays ``d_model``.
    The table is fixed, so it is a buffer (``register_buffer``), not a
    parameter: it moves with ``.to()`` / ``.cuda()``, is saved in the
    ``state_dict``, and the optimiser never sees it.

    Args:
        d_model: width of the token vectors (even).
        max_len: the longest sequence the table covers.
        base: the wavelength scale of :func:`sinusoidal_encoding`.

    Attributes:
        pe: the ``(max_len, d_model)`` buffer.
    """

    def __init__(self, d_model: int, max_len: int = 5000, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base))

    def forward(self, x: Tensor) -> Tensor:
        """``x (B, T, d_model)`` → ``x + PE[:T]``, same shape, in the dtype of ``x``.

        Raises:
            ValueError: if ``x`` does not end in ``d_model`` or ``T > max_len``.
        """
        t = _length(x, self.d_model, self.max_len)
        return x + self.pe[:t].to(x.dtype)  # (B, T, d_model) + (T, d_model) broadcasts over B


class LearnedPositionalEmbedding(nn.Module):
    r"""Adds a trainable vector per position (as BERT and GPT-2 do).

    .. math:: \mathrm{out}_{b,t} = x_{b,t} + E_t,\qquad E \in \mathbb{R}^{\text{max\_len} \times d_\text{model}}

    Row ``t`` of the table belongs to *position* ``t``, whatever token sits
    there. Unlike the sinusoids, the table knows nothing past ``max_len``.

    Args:
        max_len: number of positions the table holds.
        d_model: width of the token vectors.

    Attributes:
        table: ``nn.Embedding(max_len, d_model)``.
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len, self.d_model = max_len, d_model
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """``x (B, T, d_model)`` → ``x + table(0 .. T-1)``, same shape.

        Raises:
            ValueError: if ``x`` does not end in ``d_model`` or ``T > max_len``.
        """
        t = _length(x, self.d_model, self.max_len)
        positions = torch.arange(t, device=x.device)  # (T,): 0, 1, ..., T-1
        return x + self.table(positions)  # (B, T, d_model) + (T, d_model)


def apply_rotary(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    r"""Rotary position embedding (RoPE): rotate each pair of columns by an angle that grows with the position.

    .. math:: \begin{pmatrix} x'_{2i} \\ x'_{2i+1} \end{pmatrix} =
              \begin{pmatrix} \cos\theta & -\sin\theta \\ \sin\theta & \cos\theta \end{pmatrix}
              \begin{pmatrix} x_{2i} \\ x_{2i+1} \end{pmatrix},\qquad
              \theta = p \cdot \mathrm{base}^{-2i/d}

    Applied to queries and keys (not values), it makes every score depend on
    the *offset* of the two positions only:
    ``<rope(q, m), rope(k, n)> = <q, rope(k, n - m)>``.

    Args:
        x: ``(..., T, d)`` with an even ``d``; the pairs are ``(x[..., 2i], x[..., 2i+1])``
            (interleaved, as in the RoFormer paper).
        positions: the position of each row, ``(T,)`` or broadcastable to ``x.shape[:-1]``;
            defaults to ``0 .. T-1``. Integer or floating point.
        base: the wavelength scale.

    Returns:
        Tensor of the shape, dtype and device of ``x``; vector norms are unchanged.

    Raises:
        ValueError: if ``d`` is odd, ``x`` has fewer than 2 dimensions, or ``positions``
            does not broadcast to ``x.shape[:-1]``.
    """
    if x.dim() < 2:
        raise ValueError(f"apply_rotary needs x of shape (..., T, d), got {tuple(x.shape)}")
    t, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"apply_rotary needs an even width to form pairs, got d={d} in x {tuple(x.shape)}")
    compute = torch.promote_types(x.dtype, torch.float32)  # half precision computes its angles in float32
    if positions is None:
        positions = torch.arange(t, device=x.device)
    positions = torch.as_tensor(positions, device=x.device).to(compute)
    try:
        fits = torch.broadcast_shapes(positions.shape, x.shape[:-1]) == x.shape[:-1]
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"positions {tuple(positions.shape)} do not broadcast to x.shape[:-1] = {tuple(x.shape[:-1])}")
    angles = positions.unsqueeze(-1) * _frequencies(d, base, compute, x.device)  # (..., T, 1) * (d/2,) -> (..., T, d/2)
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., 0::2].to(compute), x[..., 1::2].to(compute)  # (..., T, d/2) each: the pairs (a, b)
    rotated = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)  # (..., T, d/2, 2)
    return rotated.flatten(-2).to(x.dtype)  # (..., T, d/2, 2) -> (..., T, d), interleaved back


def _alibi_slopes(n_heads: int) -> list[float]:
    """The heads' slopes, steepest first, as in the code of Press et al. (2022)."""
    if n_heads & (n_heads - 1) == 0:  # a power of two: a geometric sequence from 2^(-8/n) down to 2^(-8)
        return [2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_heads)]
    below = 2 ** math.floor(math.log2(n_heads))  # the largest power of two under n_heads
    return _alibi_slopes(below) + _alibi_slopes(2 * below)[0::2][: n_heads - below]


def alibi_bias(n_heads: int, T: int) -> Tensor:
    r"""The attention bias of ALiBi (Press et al., 2022): ``(n_heads, T, T)``, added to the scores.

    .. math:: \mathrm{bias}_{h,i,j} = m_h \,(j - i)

    Query ``i`` and key ``j`` get nothing on the diagonal and ``-m_h`` per step back. With ``n = n_heads`` a power
    of two, head ``h`` has the slope :math:`m_h = 2^{-8(h+1)/n}`, ``h = 0 .. n-1`` (n = 8: 1/2, 1/4, ..., 1/256).
    Otherwise, with ``n'`` the largest power of two below ``n``: the ``n'`` slopes of ``n'`` heads, then the slopes
    at the even indices 0, 2, 4, ... of ``2n'`` heads, until there are ``n``. Above the diagonal (``j > i``) the
    bias is positive; the causal mask, a separate boolean mask, removes those scores.

    Args:
        n_heads: the number of heads, at least 1.
        T: the length of the sequence, at least 1.

    Returns:
        A ``(n_heads, T, T)`` tensor in the default dtype (float32).

    Raises:
        ValueError: if ``n_heads`` or ``T`` is below 1; the message names it.
    """
    if n_heads < 1 or T < 1:
        raise ValueError(f"alibi_bias needs n_heads >= 1 and T >= 1, got n_heads={n_heads}, T={T}")
    slopes = torch.tensor(_alibi_slopes(n_heads), dtype=torch.float64)  # (n_heads,)
    positions = torch.arange(T, dtype=torch.float64)  # (T,)
    distance = positions[None, :] - positions[:, None]  # (T, T): key j minus query i
    return (slopes[:, None, None] * distance).to(torch.get_default_dtype())  # (n_heads, T, T)


# ---------------------------------------------------------------- concept checks


def encoded_shape(batch: int, n_tokens: int, d_model: int) -> tuple[int, int, int]:
    """The shape after ``SinusoidalPositionalEncoding(d_model)``: the table is *added*, so the width stays."""
    return batch, n_tokens, d_model


def same_without_positions(sentence_a: list[str], sentence_b: list[str]) -> bool:
    """Whether self-attention with no positional information (and no mask) gives every word the same output
    in both sentences: exactly when they hold the same words, each as many times, in any order."""
    return sorted(sentence_a) == sorted(sentence_b)
