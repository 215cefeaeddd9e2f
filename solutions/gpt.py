"""Chapter 7 reference: beyond the transformer paper, a GPT that writes.

The reading order is the dependency order: ``KVCache`` (the keys and values
kept between generation steps) → ``GroupedQueryAttention`` (causal
self-attention whose heads may share keys and values) → ``GPTBlock`` →
``GPTConfig`` → ``GPT`` (a decoder-only transformer) → ``sample_next``
(temperature, top-k, nucleus) → ``generate``. Attention without the ``T_q × T_k``
matrix (the online softmax, FlashAttention) is Chapter 9's, :mod:`solutions.flash_attention`.

Chapter 6's decoder without the encoder is a GPT: the same pre-norm blocks,
minus cross-attention. The masks are Chapter 2's (:func:`~solutions.masking.causal_mask`,
whose offset ``t_k - t_q`` lines the new queries up with the cached keys),
the head splitting is Chapter 4's and the feed-forward network Chapter 6's:
nothing is re-implemented.

Shapes: ``B`` batch, ``T`` new tokens, ``T_cache`` tokens already in the
cache, ``V`` vocabulary, ``d_model`` model width, ``n_heads`` query heads,
``n_kv_heads`` key/value heads, ``d_head = d_model // n_heads``,
``group = n_heads // n_kv_heads`` query heads per key/value head. Masks are
boolean and ``True`` means "may attend".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solutions.masking import causal_mask
from solutions.multi_head import merge_heads, split_heads
from solutions.self_attention import scaled_dot_product_attention
from solutions.transformer import FeedForward

__all__ = [
    "KVCache",
    "GroupedQueryAttention",
    "GPTBlock",
    "GPTConfig",
    "GPT",
    "sample_next",
    "generate",
    "kv_cache_elements",  # concept check
]


class KVCache:
    r"""The keys and values every layer has computed so far, kept between generation steps.

    Without a cache, generating token ``t + 1`` runs the model over all ``t``
    tokens again, although the keys and values of the first ``t - 1`` are the
    ones the previous step computed: a token's key depends only on the tokens
    up to it (the causal mask). With a cache the model runs over the new
    token only, and its query attends the cached keys plus its own:

    .. math:: K_{0..t} = [K_\text{cache};\ K_\text{new}],\qquad V_{0..t} = [V_\text{cache};\ V_\text{new}]

    Appending with ``torch.cat`` copies the cache at every step. Inference code
    for one model preallocates ``max_len`` rows per layer and writes into them
    (gpt-fast; Hugging Face's ``StaticCache``, which CUDA graphs need). Servers
    that hold many requests at once page the cache instead: fixed blocks of a
    few positions, allocated as a sequence grows and found through a table
    (vLLM's PagedAttention, Kwon et al. 2023), because a ``max_len`` buffer per
    request leaves most of the memory it reserves unused. Same numbers in all three.

    Args:
        n_layers: one pair (keys, values) per layer.

    Attributes:
        keys, values: per layer, ``None`` before the first step, then
            ``(B, n_kv_heads, T_cache, d_head)``.
    """

    def __init__(self, n_layers: int) -> None:
        if n_layers < 1:
            raise ValueError(f"KVCache needs at least one layer, got n_layers={n_layers}")
        self.keys: list[Tensor | None] = [None] * n_layers
        self.values: list[Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        """``T_cache``: the positions cached so far (those of layer 0; the model fills every layer in turn)."""
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new ``k`` and ``v`` ``(B, n_kv_heads, T, d_head)`` to ``layer``'s, keep and return them all:
        ``(B, n_kv_heads, T_cache + T, d_head)`` each. The tensors passed in are not modified.

        Raises:
            ValueError: if ``k`` and ``v`` differ in shape or do not match the cached ``(B, n_kv_heads, ·, d_head)``.
        """
        if k.dim() != 4 or k.shape != v.shape:
            raise ValueError(f"k and v must both be (B, n_kv_heads, T, d_head); got k {tuple(k.shape)}, "
                             f"v {tuple(v.shape)}")
        cached_k, cached_v = self.keys[layer], self.values[layer]
        if cached_k is not None:
            if cached_k.shape[:2] != k.shape[:2] or cached_k.shape[-1] != k.shape[-1]:
                raise ValueError(f"layer {layer}'s cache holds {tuple(cached_k.shape)}; the new keys "
                                 f"{tuple(k.shape)} must match it in B, n_kv_heads and d_head")
            k = torch.cat([cached_k, k], dim=-2)  # (B, n_kv, T_cache, d_head) + (B, n_kv, T, d_head) -> T_cache + T
            v = torch.cat([cached_v, v], dim=-2)  # the same for the values
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values of every layer: ``2 · n_layers · B · n_kv_heads · T_cache ·
        d_head · bytes per element``."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values) if t is not None)


class GroupedQueryAttention(nn.Module):
    r"""Causal self-attention in which each group of query heads shares one key/value head.

    .. math:: \mathrm{head}_h = \mathrm{softmax}\!\left(\frac{Q_h K_{g(h)}^\top}{\sqrt{d_\text{head}}} + M\right)
              V_{g(h)},\qquad g(h) = \left\lfloor h \,/\, \mathrm{group} \right\rfloor,\qquad
              \mathrm{out} = \mathrm{Concat}(\mathrm{head}_0, \dots, \mathrm{head}_{n_\text{heads} - 1}) W_o

    ``n_kv_heads == n_heads`` is Chapter 4's multi-head attention (one key/value
    head per query head); ``n_kv_heads == 1`` is multi-query attention (every
    query head reads the same keys and values). In between, grouped-query
    attention (Ainslie et al., 2023) keeps ``group`` times fewer keys and
    values in the :class:`KVCache`, and every decoding step reads ``group``
    times fewer bytes of it. The cache outweighs the weights only past a
    crossover: for a 7B model with multi-head attention in bf16 (13.5 GB of
    weights, 0.5 MiB of cache per position), once batch × context passes about
    26,000 positions; below it, reading the weights dominates each step.
    ``M`` is the causal mask with the cache's offset,
    ``causal_mask(T, T_cache + T)``: new token ``i`` sits at position
    ``T_cache + i`` and attends every key up to it.

    The readable path (``fused=False``) groups the query heads,
    ``(B, n_heads, T, d_head) -> (B, n_kv_heads, group, T, d_head)``, and lets
    each key/value head broadcast over its group: nothing is copied. The fast
    path (``fused=True``) is ``F.scaled_dot_product_attention(..., enable_gqa=True)``.

    Args:
        d_model: width of the inputs and of the output.
        n_heads: query heads; must divide ``d_model``.
        n_kv_heads: key/value heads; must divide ``n_heads``. ``None``: ``n_heads``.
        bias: whether the four projections have a bias.
        dropout: probability of zeroing an attention weight, in training mode only.
        fused: run on ``F.scaled_dot_product_attention`` instead of the readable path.

    Attributes:
        w_q, w_o: ``nn.Linear(d_model, d_model)``.
        w_k, w_v: ``nn.Linear(d_model, n_kv_heads * d_head)``: ``group`` times narrower than ``w_q``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, bias: bool = True,
                 dropout: float = 0.0, fused: bool = False) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if n_kv_heads < 1 or n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}: each key/value head "
                             f"serves a group of n_heads // n_kv_heads query heads")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout must be a probability in [0, 1], got {dropout}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head, self.group, self.fused = d_model // n_heads, n_heads // n_kv_heads, fused
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        """``x (B, T, d_model)`` → ``out (B, T, d_model)``; token ``i`` attends the cached positions and new tokens
        ``0..i``. With a ``cache``, this layer's new keys and values are appended to ``cache``'s entry ``layer``.

        Raises:
            ValueError: if ``x`` is not ``(B, T, d_model)``, or the cache holds other batch or head sizes.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, d_model={self.d_model}), got {tuple(x.shape)}")
        q = split_heads(self.w_q(x), self.n_heads)  # (B, T, d_model) -> (B, n_heads, T, d_head)
        k = split_heads(self.w_k(x), self.n_kv_heads)  # (B, T, n_kv * d_head) -> (B, n_kv, T, d_head)
        v = split_heads(self.w_v(x), self.n_kv_heads)  # (B, T, n_kv * d_head) -> (B, n_kv, T, d_head)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, n_kv, T_cache + T, d_head) each
        batch, _, t, d_head = q.shape
        mask = causal_mask(t, k.shape[-2], device=x.device)  # (T, T_cache + T): the offset lines up the last query
        if self.fused:
            p = self.dropout.p if self.training else 0.0
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, enable_gqa=True)
        else:
            q = q.reshape(batch, self.n_kv_heads, self.group, t, d_head)  # -> (B, n_kv, group, T, d_head)
            k, v = k.unsqueeze(2), v.unsqueeze(2)  # (B, n_kv, 1, T_k, d_head): one head for the whole group
            _, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, n_kv, group, T, T_k)
            heads = self.dropout(weights) @ v  # (..., T, T_k) @ (..., T_k, d_head) -> (B, n_kv, group, T, d_head)
            heads = heads.reshape(batch, self.n_heads, t, d_head)  # -> (B, n_heads, T, d_head): groups side by side
        return self.w_o(merge_heads(heads))  # (B, n_heads, T, d_head) -> (B, T, d_model) -> (B, T, d_model)


class GPTBlock(nn.Module):
    r"""One pre-norm decoder block: causal self-attention, then the feed-forward network.

    .. math:: h = x + \mathrm{Dropout}(\mathrm{Attn}(\mathrm{LN}_1(x))),\qquad
              \mathrm{out} = h + \mathrm{Dropout}(\mathrm{FFN}(\mathrm{LN}_2(h)))

    Chapter 6's pre-norm decoder layer without cross-attention: there is no
    encoder to attend. (GPT-2's feed-forward network uses GELU; Chapter 6's
    ReLU one is kept here, which changes nothing in what follows.)

    Args:
        d_model, n_heads, n_kv_heads, dropout, fused: as in :class:`GroupedQueryAttention`.
        d_ff: width of the feed-forward hidden layer.

    Attributes:
        attn: ``GroupedQueryAttention``; ff: ``FeedForward(d_model, d_ff, dropout)``;
        norm1, norm2: ``nn.LayerNorm(d_model)``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, dropout: float = 0.0,
                 fused: bool = False) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads, dropout=dropout, fused=fused)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        """``x (B, T, d_model)`` → ``(B, T, d_model)``; ``cache`` and ``layer`` go to the attention."""
        x = x + self.dropout(self.attn(self.norm1(x), cache, layer))
        return x + self.dropout(self.ff(self.norm2(x)))


@dataclass
class GPTConfig:
    """The sizes of a :class:`GPT`; the defaults make a small character-level model."""

    vocab: int  # number of token ids (rows of the embedding, columns of the logits)
    d_model: int = 128  # width of every token vector; divisible by n_heads
    n_heads: int = 4  # query heads per attention block; d_head = d_model // n_heads
    n_kv_heads: int | None = None  # key/value heads, dividing n_heads; None means n_heads (no sharing)
    n_layers: int = 4  # decoder blocks
    d_ff: int = 512  # hidden width of each feed-forward network
    max_len: int = 256  # longest sequence, cache included (rows of the position table)
    dropout: float = 0.0  # dropout probability, active in training mode only
    fused_attention: bool = False  # True: attention on F.scaled_dot_product_attention (same numbers, faster)

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        sizes = {name: getattr(self, name) for name in ("vocab", "n_heads", "n_kv_heads", "n_layers", "d_ff",
                                                         "max_len")}
        if min(sizes.values()) < 1:
            raise ValueError(f"the sizes must be positive, got {sizes}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if not 0.0 <= self.dropout <= 1.0:
            raise ValueError(f"dropout={self.dropout} must be a probability in [0, 1]")


class GPT(nn.Module):
    r"""A decoder-only transformer that predicts the next token at every position.

    .. math:: x_0 = \mathrm{Dropout}(E[\mathrm{tokens}] + P[T_\text{cache} .. T_\text{cache} + T - 1]),\qquad
              x_\ell = \mathrm{Block}_\ell(x_{\ell - 1}),\qquad
              \mathrm{logits} = \mathrm{LN}(x_L)\, E^\top

    The output layer's weight *is* the token embedding ``E`` (weight tying, as
    in GPT-2): one ``(V, d_model)`` Parameter both reads tokens in and scores
    them out, so a token's logit is the dot product of the final vector with
    that token's embedding. The position table ``P`` is learned (GPT-2's
    ``wpe``); it is indexed from ``T_cache``, the number of tokens already
    cached, which is why it is a plain ``nn.Embedding`` and not Chapter 5's
    :class:`~solutions.positional.LearnedPositionalEmbedding` (whose positions
    always start at 0). Both tables start at standard deviation 0.02, as in
    GPT-2, so the first logits are near 0 and the first loss near ``ln V``.

    Args:
        config: the sizes, kept as ``self.config``.

    Attributes:
        tok_embed: ``nn.Embedding(vocab, d_model)``; pos_embed: ``nn.Embedding(max_len, d_model)``.
        blocks: ``nn.ModuleList`` of ``n_layers`` :class:`GPTBlock`.
        norm: the final ``nn.LayerNorm(d_model)``.
        out: ``nn.Linear(d_model, vocab, bias=False)`` whose ``weight`` is ``tok_embed.weight``.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tok_embed = nn.Embedding(c.vocab, c.d_model)
        self.pos_embed = nn.Embedding(c.max_len, c.d_model)
        for table in (self.tok_embed, self.pos_embed):
            nn.init.normal_(table.weight, std=0.02)
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(GPTBlock(c.d_model, c.n_heads, c.n_kv_heads, c.d_ff, c.dropout,
                                             c.fused_attention) for _ in range(c.n_layers))
        self.norm = nn.LayerNorm(c.d_model)
        self.out = nn.Linear(c.d_model, c.vocab, bias=False)
        self.out.weight = self.tok_embed.weight  # tied: the same Parameter, trained once, counted once

    def forward(self, tokens: Tensor, cache: KVCache | None = None) -> Tensor:
        """``tokens (B, T)`` → ``logits (B, T, V)``: row ``t`` scores the token that follows position ``t``.

        Without a cache the tokens are positions ``0..T-1``. With a :class:`KVCache` they are the
        positions that follow the cached ones, ``T_cache..T_cache + T - 1``: every layer appends its new
        keys and values to ``cache`` (the cache object is updated in place, the ``tokens`` are not), and
        the logits are those the model would give these positions if it ran over the whole sequence.

        Raises:
            ValueError: if ``tokens`` is not ``(B, T)`` with ``T >= 1``, or ``T_cache + T > max_len``.
        """
        if tokens.dim() != 2 or tokens.shape[1] < 1:
            raise ValueError(f"tokens must have shape (B, T) with T >= 1, got shape {tuple(tokens.shape)}")
        start = 0 if cache is None else cache.length
        t = tokens.shape[1]
        if start + t > self.config.max_len:
            raise ValueError(f"T_cache + T = {start} + {t} (tokens {tuple(tokens.shape)}) is longer than "
                             f"max_len={self.config.max_len}")
        positions = torch.arange(start, start + t, device=tokens.device)  # (T,): T_cache, ..., T_cache + T - 1
        x = self.dropout(self.tok_embed(tokens) + self.pos_embed(positions))  # (B, T, d_model) + (T, d_model)
        for layer, block in enumerate(self.blocks):
            x = block(x, cache, layer)
        return self.out(self.norm(x))  # (B, T, d_model) -> (B, T, V)


def sample_next(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                generator: torch.Generator | None = None) -> Tensor:
    r"""Draw one token per row from the next-token logits.

    .. math:: p = \mathrm{softmax}(\mathrm{filter}(\mathrm{logits} / \tau))

    In order: divide by the temperature ``τ`` (below 1 sharpens, above 1
    flattens); keep the ``top_k`` largest logits (ties with the ``k``-th are
    kept too); keep the nucleus, the smallest set of most likely tokens whose
    probability reaches ``top_p`` (the most likely token always stays); every
    other logit becomes ``-inf``. Then one draw per row with
    ``torch.multinomial``, so the same ``generator`` state gives the same
    tokens. ``temperature=0`` is greedy decoding: the argmax, no draw.

    Args:
        logits: ``(B, V)`` floating point.
        temperature: ``τ >= 0``.
        top_k: keep the ``top_k`` most likely tokens (``>= 1``; more than ``V`` keeps all); ``None``: all.
        top_p: nucleus mass, ``0 < top_p <= 1``; ``None``: no nucleus filtering.
        generator: the random source of the draw; ``None`` uses PyTorch's global one.

    Returns:
        ``(B,)`` LongTensor of token ids, on the device of ``logits``.

    Raises:
        ValueError: if ``logits`` is not ``(B, V)`` floating point, or an argument is out of range.
    """
    if logits.dim() != 2 or logits.shape[-1] < 1 or not logits.is_floating_point():
        raise ValueError(f"logits must be floating point of shape (B, V), got {logits.dtype} {tuple(logits.shape)}")
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1 (or None for no top-k filtering), got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (or None for no nucleus filtering), got {top_p}")
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B, V) -> (B,): the most likely token survives every filter
    scaled = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # (B, V)
    if top_k is not None:
        kth = scaled.topk(min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]  # (B, 1): the k-th largest
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p is not None:
        probs, order = torch.softmax(scaled, dim=-1).sort(dim=-1, descending=True)  # (B, V) each, largest first
        before = probs.cumsum(dim=-1) - probs  # (B, V): the mass of the more likely tokens
        keep_sorted = before < top_p  # a token is needed while the mass before it falls short of top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocabulary order
        scaled = scaled.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)  # (B, V): the filtered distribution
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B, 1) -> (B,)


@torch.no_grad()
def generate(model: GPT, prompt: Tensor, max_new_tokens: int, use_cache: bool = True, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None) -> Tensor:
    """Extend ``prompt`` by ``max_new_tokens`` tokens, each drawn by :func:`sample_next` from the last logits.

    With ``use_cache`` the model reads the prompt once, filling a :class:`KVCache`, then one token
    per step: ``T0 + max_new_tokens - 1`` positions in all. Without, it rereads the whole sequence
    at every step: about ``max_new_tokens · (T0 + max_new_tokens / 2)`` positions. Both give the
    same logits up to rounding, and the same tokens from the same ``generator`` state.

    Args:
        model: a :class:`GPT`; run in eval mode, without gradients, and left in the mode it had.
        prompt: ``(B, T0)`` token ids, ``T0 >= 1``.
        max_new_tokens: how many tokens to add, ``>= 0``.
        use_cache: keep the keys and values between steps.
        temperature, top_k, top_p, generator: as in :func:`sample_next`.

    Returns:
        ``(B, T0 + max_new_tokens)`` LongTensor: the prompt, then the new tokens.

    Raises:
        ValueError: if ``prompt`` is not ``(B, T0)``, ``max_new_tokens < 0``, or ``T0 + max_new_tokens``
            exceeds the model's ``max_len``.
    """
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must have shape (B, T0) with T0 >= 1, got shape {tuple(prompt.shape)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if prompt.shape[1] + max_new_tokens > model.config.max_len:
        raise ValueError(f"prompt {tuple(prompt.shape)} plus max_new_tokens={max_new_tokens} is longer than "
                         f"max_len={model.config.max_len}")
    was_training = model.training
    model.eval()
    try:
        tokens = prompt
        cache = KVCache(model.config.n_layers) if use_cache else None
        for _ in range(max_new_tokens):
            if cache is None:
                logits = model(tokens)  # the whole sequence, every step: (B, t, V)
            elif cache.length == 0:
                logits = model(tokens, cache)  # the prompt, once: (B, T0, V)
            else:
                logits = model(tokens[:, -1:], cache)  # only the newest token: (B, 1, V)
            next_token = sample_next(logits[:, -1], temperature, top_k, top_p, generator)  # (B, V) -> (B,)
            tokens = torch.cat([tokens, next_token.unsqueeze(1)], dim=1)  # (B, t) -> (B, t + 1)
        return tokens
    finally:
        model.train(was_training)


# ---------------------------------------------------------------- concept checks


def kv_cache_elements(n_layers: int, batch: int, n_heads: int, n_kv_heads: int, length: int, d_head: int) -> int:
    """The numbers a :class:`KVCache` holds after ``length`` positions: keys *and* values, in every layer, for the
    ``n_kv_heads`` key/value heads only (``n_heads`` query heads share them; queries are never cached)."""
    return 2 * n_layers * batch * n_kv_heads * length * d_head
