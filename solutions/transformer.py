"""Chapter 6 reference: the full encoder-decoder transformer.

The reading order is the dependency order: ``FeedForward`` → ``EncoderLayer``
→ ``DecoderLayer`` → ``TransformerConfig`` → ``Transformer`` →
``greedy_decode`` (and ``beam_search``, an extension), then the paper's
training recipe: ``label_smoothed_cross_entropy`` and ``noam_lr``.

Every attention here is Chapter 4's :class:`~solutions.multi_head.MultiHeadAttention`,
the masks are Chapter 2's (:mod:`solutions.masking`) and the positions are
Chapter 5's sinusoids (:mod:`solutions.positional`): nothing is re-implemented.
Shapes: ``B`` batch, ``T_src`` source length, ``T_tgt`` target length,
``d_model`` model width, ``d_ff`` width of the feed-forward layer, ``V`` a
vocabulary size. Masks are boolean and ``True`` means "may attend".

Each layer can run its attention on the readable path (``fused_attention=False``:
scores, softmax, weights, all visible) or on the fast path
(``fused_attention=True``: ``F.scaled_dot_product_attention``, which never
builds the weights); the tests check that both give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from solutions.masking import causal_mask, combine_masks, padding_mask
from solutions.multi_head import MultiHeadAttention
from solutions.positional import SinusoidalPositionalEncoding

__all__ = [
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "TransformerConfig",
    "Transformer",
    "greedy_decode",
    "beam_search",
    "label_smoothed_cross_entropy",
    "noam_lr",
    "decoder_passes",  # concept checks
    "scored_positions",
]


class FeedForward(nn.Module):
    r"""The position-wise feed-forward network: the same two-layer MLP applied at every position.

    .. math:: \mathrm{FFN}(x) = \max(0,\ x W_1 + b_1)\, W_2 + b_2

    Attention mixes information *between* positions; this layer transforms
    each position on its own, widening to ``d_ff`` (4 × ``d_model`` in the
    original transformer: 512 → 2048 → 512) and back.

    Args:
        d_model: width of the input and the output.
        d_ff: width of the hidden layer.
        dropout: probability of zeroing a hidden unit (after the ReLU), in training mode only.

    Attributes:
        linear1: ``nn.Linear(d_model, d_ff)``.
        linear2: ``nn.Linear(d_ff, d_model)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """``x (..., d_model)`` → ``(..., d_model)``: Linear → ReLU → Dropout → Linear."""
        hidden = torch.relu(self.linear1(x))  # (..., d_model) -> (..., d_ff)
        return self.linear2(self.dropout(hidden))  # (..., d_ff) -> (..., d_model)


class EncoderLayer(nn.Module):
    r"""One encoder layer: self-attention, then the feed-forward network, each in a residual block.

    Post-norm (``norm_first=False``, the original paper):

    .. math:: h = \mathrm{LN}_1(x + \mathrm{MHA}(x, x, x)),\qquad \mathrm{out} = \mathrm{LN}_2(h + \mathrm{FFN}(h))

    Pre-norm (``norm_first=True``, GPT-2 and most models since):

    .. math:: h = x + \mathrm{MHA}(\mathrm{LN}_1(x), \cdot, \cdot),\qquad
              \mathrm{out} = h + \mathrm{FFN}(\mathrm{LN}_2(h))

    Dropout acts on the attention weights, inside the FFN and on each
    sublayer's output before it is added back. With the weights copied and
    dropout 0 this matches ``nn.TransformerEncoderLayer(batch_first=True)``
    (ReLU activation, LayerNorm eps 1e-5) for both values of ``norm_first``.

    Args:
        d_model: model width; ``n_heads`` must divide it.
        n_heads: number of attention heads.
        d_ff: width of the feed-forward hidden layer.
        dropout: dropout probability.
        norm_first: pre-norm if ``True``, post-norm if ``False``.
        fused_attention: run attention on ``F.scaled_dot_product_attention`` instead of the readable path.

    Attributes:
        self_attn: ``MultiHeadAttention(d_model, n_heads, dropout=dropout)``.
        ff: ``FeedForward(d_model, d_ff, dropout)``.
        norm1, norm2: ``nn.LayerNorm(d_model)`` of the attention and feed-forward blocks.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
                 fused_attention: bool = False) -> None:
        super().__init__()
        self.norm_first, self.fused_attention = norm_first, fused_attention
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """``x (B, T, d_model)`` → ``(B, T, d_model)``.

        Args:
            src_mask: optional boolean mask broadcastable to ``(B, T, T)``, ``True`` = may attend;
                usually the source padding mask ``(B, 1, T)``.
        """
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), src_mask)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._self_attention(x, src_mask))
        return self.norm2(x + self._feed_forward(x))

    def _self_attention(self, x: Tensor, mask: Tensor | None) -> Tensor:
        out, _ = self.self_attn(x, x, x, mask, need_weights=not self.fused_attention)  # (B, T, d_model)
        return self.dropout(out)

    def _feed_forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.ff(x))


class DecoderLayer(nn.Module):
    r"""One decoder layer: masked self-attention, cross-attention to the encoder output, feed-forward.

    Post-norm (``norm_first=False``):

    .. math:: h_1 = \mathrm{LN}_1(x + \mathrm{MHA}(x, x, x; M_\text{tgt})),\quad
              h_2 = \mathrm{LN}_2(h_1 + \mathrm{MHA}(h_1, m, m; M_\text{mem})),\quad
              \mathrm{out} = \mathrm{LN}_3(h_2 + \mathrm{FFN}(h_2))

    where ``m`` is ``memory``, the encoder output: in cross-attention the
    queries come from the decoder, the keys and values from the encoder.
    Pre-norm (``norm_first=True``) normalises each sublayer's input instead,
    ``h = x + f(LN(x))``. With the weights copied and dropout 0 this matches
    ``nn.TransformerDecoderLayer(batch_first=True)`` for both values of ``norm_first``.

    The layer does not build masks: the caller passes ``tgt_mask`` (the causal
    mask combined with the target padding mask) and ``memory_mask`` (the
    source padding mask), as :class:`Transformer` does.

    Args:
        d_model, n_heads, d_ff, dropout, norm_first, fused_attention: as in :class:`EncoderLayer`.

    Attributes:
        self_attn, cross_attn: ``MultiHeadAttention(d_model, n_heads, dropout=dropout)``.
        ff: ``FeedForward(d_model, d_ff, dropout)``.
        norm1, norm2, norm3: ``nn.LayerNorm(d_model)`` of the three blocks.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
                 fused_attention: bool = False) -> None:
        super().__init__()
        self.norm_first, self.fused_attention = norm_first, fused_attention
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None) -> Tensor:
        """``x (B, T_tgt, d_model)``, ``memory (B, T_src, d_model)`` → ``(B, T_tgt, d_model)``.

        Args:
            tgt_mask: optional boolean mask broadcastable to ``(B, T_tgt, T_tgt)``: causal and target padding.
            memory_mask: optional boolean mask broadcastable to ``(B, T_tgt, T_src)``: source padding.
        """
        if self.norm_first:
            x = x + self._attention(self.self_attn, self.norm1(x), None, tgt_mask)
            x = x + self._attention(self.cross_attn, self.norm2(x), memory, memory_mask)
            return x + self.dropout(self.ff(self.norm3(x)))
        x = self.norm1(x + self._attention(self.self_attn, x, None, tgt_mask))
        x = self.norm2(x + self._attention(self.cross_attn, x, memory, memory_mask))
        return self.norm3(x + self.dropout(self.ff(x)))

    def _attention(self, attn: MultiHeadAttention, x: Tensor, memory: Tensor | None, mask: Tensor | None) -> Tensor:
        """Queries from ``x``; keys and values from ``memory`` (cross-attention) or from ``x`` (``memory=None``)."""
        source = x if memory is None else memory
        out, _ = attn(x, source, source, mask, need_weights=not self.fused_attention)  # (B, T_tgt, d_model)
        return self.dropout(out)


@dataclass
class TransformerConfig:
    """The sizes of a :class:`Transformer`; the defaults are the base model of "Attention Is All You Need"."""

    src_vocab: int  # number of source token ids
    tgt_vocab: int  # number of target token ids (the size of the output layer)
    d_model: int = 512  # width of every token vector; even (sinusoids) and divisible by n_heads
    n_heads: int = 8  # attention heads per attention block; d_head = d_model // n_heads
    n_layers: int = 6  # encoder layers, and as many decoder layers
    d_ff: int = 2048  # hidden width of each feed-forward network
    dropout: float = 0.1  # dropout probability, active in training mode only
    max_len: int = 512  # longest source or target sequence (rows of the position table)
    pad_id: int = 0  # the padding token id, in the source and the target vocabularies
    norm_first: bool = False  # False: post-norm, as in the paper; True: pre-norm, as in GPT-2
    fused_attention: bool = False  # True: attention on F.scaled_dot_product_attention (same numbers, faster)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.d_model % 2:
            raise ValueError(f"d_model={self.d_model} must be even: the sinusoids come in (sin, cos) pairs")
        if not 0.0 <= self.dropout <= 1.0:
            raise ValueError(f"dropout={self.dropout} must be a probability in [0, 1]")
        sizes = {name: getattr(self, name) for name in ("src_vocab", "tgt_vocab", "n_layers", "d_ff", "max_len")}
        if min(sizes.values()) < 1:
            raise ValueError(f"the sizes must be positive, got {sizes}")


class Transformer(nn.Module):
    r"""The encoder-decoder transformer of "Attention Is All You Need".

    .. math:: \mathrm{embed}(y) = \mathrm{Dropout}\big(E[y] \sqrt{d_\text{model}} + PE\big),\qquad
              m = \mathrm{Encoder}(\mathrm{embed}(\mathrm{src})),\qquad
              \mathrm{logits} = \mathrm{Decoder}(\mathrm{embed}(\mathrm{tgt\_in}), m)\, W_\text{out} + b_\text{out}

    The embedding tables are initialised with standard deviation
    ``d_model ** -0.5`` and multiplied by ``sqrt(d_model)``, so that token
    vectors have entries of size about 1, like the positional codes (which
    lie in ``[-1, 1]``) that are *added* to them: neither drowns the other.
    (With PyTorch's default ``N(0, 1)`` initialisation the tokens would be
    ``sqrt(d_model)`` times larger than the positions, and a small model
    learns word order far more slowly.) The encoder's self-attention and the
    decoder's cross-attention ignore source padding; the decoder's
    self-attention is causal and ignores target padding. With
    ``norm_first`` (pre-norm) a final LayerNorm closes each stack.

    Args:
        config: the sizes, kept as ``self.config``.

    Attributes:
        src_embed, tgt_embed: ``nn.Embedding(src_vocab | tgt_vocab, d_model)``.
        positions: the sinusoidal table of ``max_len`` rows, a buffer.
        encoder_layers, decoder_layers: ``nn.ModuleList`` of ``n_layers`` layers each.
        encoder_norm, decoder_norm: final ``nn.LayerNorm(d_model)`` (``nn.Identity`` for post-norm).
        out: ``nn.Linear(d_model, tgt_vocab)``, the logits.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab, c.d_model)
        self.tgt_embed = nn.Embedding(c.tgt_vocab, c.d_model)
        for table in (self.src_embed, self.tgt_embed):  # times sqrt(d_model) in embed(): entries of size ~1
            nn.init.normal_(table.weight, std=c.d_model**-0.5)
        self.positions = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        self.dropout = nn.Dropout(c.dropout)
        fused = getattr(c, "fused_attention", False)  # a config with only the contract's fields gets the readable path
        sizes = (c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first, fused)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*sizes) for _ in range(c.n_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*sizes) for _ in range(c.n_layers))
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.out = nn.Linear(c.d_model, c.tgt_vocab)

    def embed(self, tokens: Tensor, table: nn.Embedding) -> Tensor:
        """``tokens (B, T)`` → ``(B, T, d_model)``: scaled embeddings plus positions, then dropout.

        Raises:
            ValueError: if ``tokens`` is not ``(B, T)`` or ``T > max_len``.
        """
        if tokens.dim() != 2:
            raise ValueError(f"token ids must have shape (B, T), got shape {tuple(tokens.shape)}")
        if tokens.shape[1] > self.config.max_len:
            raise ValueError(f"sequence of length T={tokens.shape[1]} (tokens {tuple(tokens.shape)}) is longer "
                             f"than max_len={self.config.max_len}")
        x = table(tokens) * math.sqrt(self.config.d_model)  # (B, T) -> (B, T, d_model)
        return self.dropout(self.positions(x))

    def encode(self, src: Tensor) -> Tensor:
        """``src (B, T_src)`` token ids → ``memory (B, T_src, d_model)``; padding is never attended."""
        src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, T_src)
        x = self.embed(src, self.src_embed)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        """``tgt_in (B, T_tgt)``, ``memory (B, T_src, d_model)`` and its ``src (B, T_src)`` → logits ``(B, T_tgt, V)``.

        Position ``t`` of the logits depends on ``tgt_in[:, :t+1]`` only (the causal mask), and on
        the source positions that are not padding (``src`` gives that mask).
        """
        t = tgt_in.shape[-1]
        # (T, T) causal & (B, 1, T) target padding -> (B, T, T)
        tgt_mask = combine_masks(causal_mask(t, device=tgt_in.device), padding_mask(tgt_in, self.config.pad_id))
        memory_mask = padding_mask(src, self.config.pad_id)  # (B, 1, T_src)
        x = self.embed(tgt_in, self.tgt_embed)
        for layer in self.decoder_layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.out(self.decoder_norm(x))  # (B, T_tgt, d_model) -> (B, T_tgt, V)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: ``src (B, T_src)``, ``tgt_in (B, T_tgt)`` → logits ``(B, T_tgt, tgt_vocab)``."""
        if src.dim() != 2 or tgt_in.dim() != 2 or src.shape[0] != tgt_in.shape[0]:
            raise ValueError(f"src (B, T_src) and tgt_in (B, T_tgt) must share B; got src {tuple(src.shape)}, "
                             f"tgt_in {tuple(tgt_in.shape)}")
        return self.decode(tgt_in, self.encode(src), src)


def _check_decoding(src: Tensor, max_len: int) -> None:
    if src.dim() != 2:
        raise ValueError(f"src must have shape (B, T_src), got shape {tuple(src.shape)}")
    if max_len < 1:
        raise ValueError(f"max_len={max_len} must be at least 1 (it counts the start token)")


@torch.no_grad()
def greedy_decode(model: Transformer, src: Tensor, start_id: int, end_id: int, max_len: int) -> Tensor:
    """Generate with the most likely token at every step, one token at a time.

    The source is encoded once; at each step the decoder reads everything
    generated so far and only the **last** position's logits choose the next
    token. A row that has produced ``end_id`` is finished: it gets
    ``model.config.pad_id`` from then on, and decoding stops as soon as every
    row is finished, or when the rows reach ``max_len`` tokens.

    Args:
        model: a :class:`Transformer` (anything with ``encode``, ``decode`` and ``config.pad_id``).
        src: ``(B, T_src)`` source token ids.
        start_id, end_id: the ids of ``<start>`` and ``<end>``.
        max_len: the most tokens a row may hold, ``<start>`` included.

    Returns:
        ``(B, L)`` LongTensor on the device of ``src``, ``L <= max_len``; column 0 is ``start_id``.
        The model is run in eval mode, without gradients, and left in the mode it had.

    Raises:
        ValueError: if ``src`` is not 2-D or ``max_len < 1``.
    """
    _check_decoding(src, max_len)
    was_training = model.training
    model.eval()
    try:
        memory = model.encode(src)  # (B, T_src, d_model), computed once
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)  # (B, 1)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)  # (B,)
        while ys.shape[1] < max_len and not bool(done.all()):
            next_token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1)  # (B, t, V) -> (B, V) -> (B,)
            next_token = next_token.masked_fill(done, model.config.pad_id)  # finished rows get padding
            ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)  # (B, t) -> (B, t + 1)
            done = done | (next_token == end_id)
        return ys
    finally:
        model.train(was_training)


def _lengths(ys: Tensor, end_id: int) -> Tensor:
    """``(N,)`` generated tokens of each row of ``ys (N, L)``: up to and including the first ``end_id``."""
    is_end = ys[:, 1:] == end_id  # (N, L - 1)
    if is_end.shape[1] == 0:
        return torch.zeros(ys.shape[0], dtype=torch.long, device=ys.device)
    first_end = is_end.int().argmax(dim=1) + 1
    return torch.where(is_end.any(dim=1), first_end, torch.full_like(first_end, ys.shape[1] - 1))


@torch.no_grad()
def beam_search(model: Transformer, src: Tensor, start_id: int, end_id: int, max_len: int, beam_size: int = 4,
                length_penalty: float = 0.6) -> Tensor:
    r"""Keep the ``beam_size`` most likely sequences at every step; return the best one of each row.

    A hypothesis is scored by its summed log-probability; at the end each row
    returns the hypothesis with the best score divided by the length penalty
    of Wu et al. (2016), :math:`\mathrm{lp}(n) = ((5 + n) / 6)^{\alpha}`, with
    :math:`\alpha` = ``length_penalty`` (0 compares raw sums, which favour short
    outputs). Finished hypotheses carry their score unchanged and are padded
    with ``model.config.pad_id``. With ``beam_size=1`` this is :func:`greedy_decode`.

    Args:
        model, src, start_id, end_id, max_len: as in :func:`greedy_decode`.
        beam_size: hypotheses kept per row.
        length_penalty: the exponent :math:`\alpha`.

    Returns:
        ``(B, L)`` LongTensor, in the format of :func:`greedy_decode`.
    """
    _check_decoding(src, max_len)
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be at least 1")
    was_training = model.training
    model.eval()
    try:
        b, k, pad = src.shape[0], beam_size, model.config.pad_id
        src_k = src.repeat_interleave(k, dim=0)  # (B, T_src) -> (B * K, T_src): K copies of each row
        memory = model.encode(src_k)  # (B * K, T_src, d_model)
        ys = torch.full((b * k, 1), start_id, dtype=torch.long, device=src.device)  # (B * K, 1)
        scores = torch.full((b, k), float("-inf"), device=src.device)
        scores[:, 0] = 0.0  # one live hypothesis per row at first, so the K beams do not start as copies
        done = torch.zeros(b * k, dtype=torch.bool, device=src.device)
        while ys.shape[1] < max_len and not bool(done.all()):
            log_p = model.decode(ys, memory, src_k)[:, -1].float().log_softmax(dim=-1)  # (B * K, V)
            frozen = torch.full_like(log_p, float("-inf")).index_fill(1, torch.tensor([pad], device=src.device), 0.0)
            log_p = torch.where(done.unsqueeze(1), frozen, log_p)  # a finished hypothesis can only add padding
            total = (scores.reshape(b * k, 1) + log_p).reshape(b, -1)  # (B, K * V)
            scores, index = total.topk(k, dim=1)  # (B, K) each
            vocab = log_p.shape[1]
            rows = (torch.arange(b, device=src.device).unsqueeze(1) * k + index // vocab).reshape(-1)  # (B * K,)
            token = (index % vocab).reshape(-1, 1)  # (B * K, 1)
            ys = torch.cat([ys[rows], token], dim=1)  # (B * K, t) -> (B * K, t + 1)
            done = done[rows] | (token[:, 0] == end_id)
        penalty = ((5.0 + _lengths(ys, end_id).to(scores.dtype)) / 6.0) ** length_penalty  # (B * K,)
        best = (scores / penalty.reshape(b, k)).argmax(dim=1)  # (B,)
        return ys.reshape(b, k, -1)[torch.arange(b, device=src.device), best]  # (B, K, L) -> (B, L)
    finally:
        model.train(was_training)


# ---------------------------------------------------------------- the training recipe


def label_smoothed_cross_entropy(logits: Tensor, targets: Tensor, pad_id: int, epsilon: float = 0.1) -> Tensor:
    r"""Cross-entropy against label-smoothed targets, averaged over every non-pad target position.

    The target distribution of a position whose target is ``y`` is no longer one-hot but
    :math:`q = (1 - \varepsilon)\,\mathrm{onehot}(y) + \varepsilon / V`: the mass :math:`\varepsilon` is spread
    evenly over **all** ``V`` classes, ``y`` included, as in ``F.cross_entropy(..., label_smoothing=epsilon)``.
    With :math:`\log p = \mathrm{log\_softmax}(z)`,

    .. math:: \ell = -\sum_v q_v \log p_v = (1 - \varepsilon)\,(-\log p_y)
              + \varepsilon\,\frac{1}{V} \sum_v (-\log p_v),

    and the loss is the mean of :math:`\ell` over the positions whose target is not ``pad_id``. Equals
    ``F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=pad_id,
    label_smoothing=epsilon)``; with ``epsilon = 0`` it is Chapter 3's ``sequence_cross_entropy``.

    Args:
        logits: ``(B, T, V)`` unnormalised scores over the vocabulary.
        targets: ``(B, T)`` token ids (``tgt_out``).
        pad_id: the id whose positions are left out.
        epsilon: the smoothing, ``0 <= epsilon < 1`` (the paper uses 0.1).

    Returns:
        A scalar (0-dim) tensor of the dtype of ``logits``.

    Raises:
        ValueError: if ``logits`` is not 3-D, ``targets`` is not ``logits.shape[:2]``, or ``epsilon`` is outside
            ``[0, 1)``.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, T, V) and targets (B, T); got logits {tuple(logits.shape)}, "
            f"targets {tuple(targets.shape)}"
        )
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon}")
    keep = targets != pad_id  # (B, T): the positions that count
    log_probs = torch.log_softmax(logits[keep], dim=-1)  # (B, T, V) -> (N, V), N non-pad positions
    nll = -log_probs.gather(-1, targets[keep].unsqueeze(-1)).squeeze(-1)  # (N,): -log p of each target
    uniform = -log_probs.mean(dim=-1)  # (N,): cross-entropy against the uniform distribution over the V classes
    return ((1.0 - epsilon) * nll + epsilon * uniform).mean()


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    r"""The learning rate of *Attention Is All You Need* at optimiser step ``step``:

    .. math:: \mathrm{lrate} = d_\text{model}^{-0.5} \cdot
              \min\left(\text{step}^{-0.5},\ \text{step} \cdot \text{warmup}^{-1.5}\right)

    It rises linearly for the first ``warmup`` steps, peaks at ``step = warmup`` at
    :math:`(d_\text{model} \cdot \text{warmup})^{-0.5}`, then decays as :math:`\text{step}^{-0.5}`. Steps count
    from 1, as in the paper: the first update uses ``noam_lr(1, ...)``. (In a
    ``torch.optim.lr_scheduler.LambdaLR``, whose counter starts at 0, call it with ``s + 1``.)

    Args:
        step: the optimiser step, 1 for the first.
        d_model: the model width.
        warmup: the number of warm-up steps (the paper uses 4,000).

    Returns:
        The learning rate, a float.

    Raises:
        ValueError: if ``step``, ``d_model`` or ``warmup`` is below 1 (at step 0, ``step ** -0.5`` divides by zero).
    """
    for name, value in (("step", step), ("d_model", d_model), ("warmup", warmup)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1 (steps count from 1), got {name}={value}")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


# ---------------------------------------------------------------- concept checks


def decoder_passes(n_tokens: int) -> tuple[int, int]:
    """``(training, generating)``: the decoder's forward passes for a target of ``n_tokens`` tokens. Teacher
    forcing scores every position in one pass; greedy decoding without a cache runs once per new token."""
    return 1, n_tokens


def scored_positions(n_tokens: int) -> tuple[tuple[int, ...], int]:
    """``(positions the training loss scores, the position whose prediction picks the next token)`` for a
    decoder input of ``n_tokens`` tokens: training scores every position; generation reads only the last."""
    return tuple(range(n_tokens)), n_tokens - 1
