"""A small decoder-only language model built on PyTorch's own pieces, so Chapter 7 runs without your solutions.

``TorchGPT`` is a nanoGPT-style decoder: a token embedding, positions (a learned table as GPT-2, or rotary
embeddings as Llama), pre-norm blocks of causal self-attention and a GELU feed-forward network, a final
LayerNorm, and an output layer tied to the token embedding. Its attention is one fused
``(d_model → (n_heads + 2·n_kv_heads)·d_head)`` projection and ``F.scaled_dot_product_attention``, whose
``enable_gqa=True`` lets groups of query heads share a key/value head.

Its key/value cache, :class:`LMCache`, is one buffer per layer, preallocated for the longest sequence and
written in place as tokens arrive: the layout of single-model inference code such as gpt-fast or Hugging Face's
``StaticCache``, which a compiled model or a CUDA graph needs (fixed shapes, no allocation per step). Servers
that hold the caches of many requests at once (vLLM, SGLang, TGI) page them instead: blocks of a few tokens,
allocated as a sequence grows and found through a block table (Kwon et al., 2023, *PagedAttention*), because
reserving the longest sequence for every request wastes most of the memory.

Prompts of different lengths go in one batch left-padded, with ``real`` marking the tokens that are not
padding: the cache remembers which positions are real, every query sees only real keys, and each sequence's
positions count its own real tokens, so a padded row gives the tokens it would give alone.

The chapter's exercises build the same kind of model from the course's own pieces, with another interface
(``GPTConfig``, ``GPT``, an append-only ``KVCache``, ``sample_next``, ``generate``); nothing here is one of
them. Drawing the next token is left to the caller: :meth:`TorchGPT.generate` takes a ``pick`` function from
the last logits to token ids.

>>> sizes = LMSizes(vocab=10, context=16, d_model=32, n_heads=4, n_kv_heads=2, n_layers=1)
>>> model = TorchGPT(sizes)
>>> model(torch.zeros(2, 5, dtype=torch.long)).shape
torch.Size([2, 5, 10])
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LMSizes", "TorchGPT", "LMCache", "LMHistory", "train_lm", "fixed_windows", "pool_kv_heads"]

#: ``pick(last_logits (B, V)) -> (B,)`` token ids: how :meth:`TorchGPT.generate` chooses each new token.
Pick = Callable[[Tensor], Tensor]

POSITIONS = ("learned", "rope")


@dataclass
class LMSizes:
    """The sizes of a :class:`TorchGPT`."""

    vocab: int  # number of token ids
    context: int = 128  # longest sequence the model reads, cache included (rows of the position tables)
    d_model: int = 128  # width of the residual stream; n_heads must divide it
    n_heads: int = 8  # query heads per attention block
    n_kv_heads: int | None = None  # key/value heads, dividing n_heads; None: n_heads (no sharing)
    n_layers: int = 4  # how many decoder blocks are stacked
    dropout: float = 0.0  # dropout probability, in training mode only
    positions: str = "learned"  # "learned": a table added to the embeddings (GPT-2); "rope": rotary (Llama)
    rope_base: float = 10000.0  # RoPE's base: pair i turns by position · base^(-2i / d_head)

    def __post_init__(self) -> None:
        kv = self.n_heads if self.n_kv_heads is None else self.n_kv_heads  # None: no sharing
        self.n_kv_heads = kv
        sizes = {k: getattr(self, k) for k in ("vocab", "context", "d_model", "n_heads", "n_kv_heads", "n_layers")}
        if any(value < 1 for value in sizes.values()):
            raise ValueError(f"every size must be at least 1, got {sizes}")
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_kv_heads={self.n_kv_heads} is not a divisor of n_heads={self.n_heads}: each "
                             "key/value head serves the same number of query heads")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        if self.positions == "rope" and self.d_head % 2:
            raise ValueError(f"rotary positions turn pairs of numbers: d_head = {self.d_head} must be even")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


class LMCache:
    """Keys and values of every layer, preallocated for ``capacity`` positions and filled in place.

    ``keys`` and ``values`` are ``(n_layers, B, n_kv_heads, capacity, d_head)`` buffers made once; a forward
    pass over ``T`` new tokens writes rows ``length .. length + T - 1`` of each layer and then moves
    ``length`` on. Nothing is copied or re-allocated as the sequence grows (``torch.cat`` would copy the
    whole cache at every step). With rotary positions the keys are stored already rotated. ``real (B, capacity)``
    records which positions hold a token rather than left padding, ``seen (B,)`` how many real tokens each
    sequence has read (the position of its next token). Make one with :meth:`TorchGPT.new_cache`.
    """

    def __init__(self, sizes: LMSizes, batch: int, capacity: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        if batch < 1 or not 1 <= capacity <= sizes.context:
            raise ValueError(f"a cache needs batch >= 1 and 1 <= capacity <= context={sizes.context}, "
                             f"got batch={batch}, capacity={capacity}")
        shape = (sizes.n_layers, batch, sizes.n_kv_heads, capacity, sizes.d_head)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.real = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.seen = torch.zeros(batch, dtype=torch.long, device=device)
        self.padded = False  # whether a position holds padding (then attention needs a mask)
        self.length = 0  # positions filled so far, in every layer

    @property
    def batch(self) -> int:
        return self.keys.shape[1]

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    def reorder(self, rows: Tensor) -> None:
        """Keep sequence ``rows[i]`` as sequence ``i`` (``rows (B',)``, repeats allowed): how beam search follows
        the prefixes it keeps."""
        self.keys, self.values = self.keys[:, rows], self.values[:, rows]
        self.real, self.seen = self.real[rows], self.seen[rows]


def _rotary_tables(sizes: LMSizes) -> tuple[Tensor, Tensor]:
    """``cos, sin (context, d_head)`` for rotating the pairs ``(x[i], x[i + d/2])`` by ``p · base^(-2i/d)``."""
    half = sizes.d_head // 2
    freq = sizes.rope_base ** (-torch.arange(half, dtype=torch.float64) * 2 / sizes.d_head)  # (d/2,)
    angle = torch.arange(sizes.context, dtype=torch.float64)[:, None] * freq  # (context, d/2)
    angle = torch.cat([angle, angle], dim=-1)  # (context, d): pair i's angle at i and at i + d/2
    return angle.cos().float(), angle.sin().float()


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``x (B, H, T, d)`` turned by ``cos, sin (B, 1, T, d)``: the rotate-half layout of GPT-NeoX and Llama's
    Hugging Face port, which pairs ``x[i]`` with ``x[i + d/2]`` (Chapter 5 pairs neighbours ``2i, 2i + 1``:
    the same rotations, on a permutation of the dimensions)."""
    first, second = x.chunk(2, dim=-1)  # (B, H, T, d/2) each
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class _CausalSelfAttention(nn.Module):
    """Causal self-attention on one fused projection and ``F.scaled_dot_product_attention`` (GQA-aware)."""

    def __init__(self, sizes: LMSizes) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = sizes.n_heads, sizes.n_kv_heads, sizes.d_head
        self.qkv = nn.Linear(sizes.d_model, (sizes.n_heads + 2 * sizes.n_kv_heads) * sizes.d_head)
        self.proj = nn.Linear(sizes.d_model, sizes.d_model)
        self.p_drop = sizes.dropout

    def forward(self, x: Tensor, cache: LMCache | None, layer: int, mask: Tensor | None,
                rotary: tuple[Tensor, Tensor] | None) -> Tensor:
        """``mask``: ``None`` for plain causal attention, else ``(B, 1, T, T_cache + T)`` booleans;
        ``rotary``: ``(cos, sin)`` at the new tokens' positions, ``(B, 1, T, d_head)`` each."""
        batch, t, width = x.shape
        q, k, v = self.qkv(x).split([self.n_heads * self.d_head, self.n_kv_heads * self.d_head,
                                     self.n_kv_heads * self.d_head], dim=-1)
        q = q.view(batch, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, H·d) -> (B, H, T, d)
        k = k.view(batch, t, self.n_kv_heads, self.d_head).transpose(1, 2)  # -> (B, H_kv, T, d)
        v = v.view(batch, t, self.n_kv_heads, self.d_head).transpose(1, 2)  # -> (B, H_kv, T, d)
        if rotary is not None:  # turn queries and keys by their positions, before the keys are cached
            q, k = _rotate(q, *rotary), _rotate(k, *rotary)
        past = 0
        if cache is not None:
            past = cache.length
            cache.keys[layer, :, :, past:past + t] = k  # written in place: rows past .. past + T - 1
            cache.values[layer, :, :, past:past + t] = v
            k, v = cache.keys[layer, :, :, :past + t], cache.values[layer, :, :, :past + t]  # views, no copy
        causal = mask is None and past == 0  # the whole sequence, no padding: SDPA's own causal mask
        if mask is None and past and t > 1:  # several new tokens after a cached prefix: token i sees 0 .. past + i
            mask = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(diagonal=past)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True,
                                             dropout_p=self.p_drop if self.training else 0.0)  # (B, H, T, d)
        return self.proj(out.transpose(1, 2).reshape(batch, t, width))  # (B, H, T, d) -> (B, T, d_model)


class _Block(nn.Module):
    """Pre-norm: ``x + attn(LN(x))``, then ``x + mlp(LN(x))``."""

    def __init__(self, sizes: LMSizes) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(sizes.d_model), nn.LayerNorm(sizes.d_model)
        self.attn = _CausalSelfAttention(sizes)
        self.mlp = nn.Sequential(nn.Linear(sizes.d_model, 4 * sizes.d_model), nn.GELU(),
                                 nn.Linear(4 * sizes.d_model, sizes.d_model), nn.Dropout(sizes.dropout))
        self.drop = nn.Dropout(sizes.dropout)

    def forward(self, x: Tensor, cache: LMCache | None, layer: int, mask: Tensor | None,
                rotary: tuple[Tensor, Tensor] | None) -> Tensor:
        x = x + self.drop(self.attn(self.ln_1(x), cache, layer, mask, rotary))
        return x + self.mlp(self.ln_2(x))


class TorchGPT(nn.Module):
    """A decoder-only transformer on PyTorch's pieces: ``ids (B, T)`` → next-token ``logits (B, T, V)``.

    Args:
        sizes: an :class:`LMSizes`, kept as ``self.sizes``.

    Attributes:
        wte: token embedding ``(V, d_model)``, also the output layer's weight (tied, as in GPT-2);
        wpe: learned positions ``(context, d_model)``, or ``None`` with rotary positions (whose ``cos`` and ``sin``
        tables are buffers); blocks: the decoder blocks; ln_f: the final LayerNorm.
    """

    def __init__(self, sizes: LMSizes) -> None:
        super().__init__()
        if not isinstance(sizes, LMSizes):
            raise ValueError(f"TorchGPT takes an LMSizes, got {type(sizes).__name__}")
        self.sizes = sizes
        self.wte = nn.Embedding(sizes.vocab, sizes.d_model)
        self.wpe = nn.Embedding(sizes.context, sizes.d_model) if sizes.positions == "learned" else None
        if sizes.positions == "rope":
            cos, sin = _rotary_tables(sizes)
            self.register_buffer("cos", cos, persistent=False)  # (context, d_head)
            self.register_buffer("sin", sin, persistent=False)
        self.drop = nn.Dropout(sizes.dropout)
        self.blocks = nn.ModuleList(_Block(sizes) for _ in range(sizes.n_layers))
        self.ln_f = nn.LayerNorm(sizes.d_model)
        self.lm_head = nn.Linear(sizes.d_model, sizes.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one Parameter reads tokens in and scores them out
        for name, p in self.named_parameters():  # GPT-2's start: N(0, 0.02), the residual outputs smaller
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * sizes.n_layers) if name.endswith(("proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def new_cache(self, batch: int, capacity: int | None = None) -> LMCache:
        """An empty :class:`LMCache` for ``batch`` sequences of up to ``capacity`` positions (default: ``context``),
        on the model's device, in its dtype."""
        p = self.wte.weight
        return LMCache(self.sizes, batch, capacity or self.sizes.context, p.device, p.dtype)

    def forward(self, ids: Tensor, cache: LMCache | None = None, real: Tensor | None = None) -> Tensor:
        """``ids (B, T)`` → ``logits (B, T, V)``. With a ``cache`` the ids are the positions after the cached ones:
        their keys and values are written into it, and its ``length`` grows by ``T``.

        ``real (B, T)`` (booleans, default all ``True``) marks the ids that are tokens rather than left padding:
        no query sees a padding key, and positions count real tokens only, from the cache's count on. A padding
        query sees itself alone (never a row with nothing to see); its logits mean nothing.

        Raises:
            ValueError: if ``ids`` is not ``(B, T)`` integers, ``real`` is not ``(B, T)`` booleans, or the positions
                run past the context or the cache.
        """
        if ids.dim() != 2 or ids.shape[1] < 1 or ids.is_floating_point():
            raise ValueError(f"ids must be integer token ids of shape (B, T), got {ids.dtype} {tuple(ids.shape)}")
        if real is not None and (real.shape != ids.shape or real.dtype != torch.bool):
            raise ValueError(f"real must be booleans of the shape of ids {tuple(ids.shape)}, got {real.dtype} "
                             f"{tuple(real.shape)}")
        (batch, t), past = ids.shape, (0 if cache is None else cache.length)
        end = self.sizes.context if cache is None else cache.capacity
        if past + t > end:
            raise ValueError(f"{past} cached + {t} new positions run past the {'cache' if cache else 'context'} "
                             f"of {end}")
        if cache is not None and cache.batch != batch:
            raise ValueError(f"the cache holds {cache.batch} sequences, ids {batch}")
        padded = (real is not None and not bool(real.all())) or (cache is not None and cache.padded)
        real = torch.ones_like(ids, dtype=torch.bool) if real is None else real
        seen = torch.zeros(batch, dtype=torch.long, device=ids.device) if cache is None else cache.seen
        positions = (seen[:, None] + real.cumsum(dim=1) - 1).clamp(min=0)  # (B, T): counting real tokens only
        mask = None
        if padded:  # causal, real keys only, and every query sees itself (a padding query sees nothing else)
            keys_real = real if cache is None else torch.cat([cache.real[:, :past], real], dim=1)  # (B, T_k)
            query, key = torch.arange(past, past + t, device=ids.device), torch.arange(past + t, device=ids.device)
            causal = key[None, :] <= query[:, None]  # (T, T_k): query i at position past + i sees keys 0 .. past + i
            mask = ((causal & keys_real[:, None, :]) | (key[None, :] == query[:, None]))[:, None]  # (B, 1, T, T_k)
        x = self.wte(ids)  # (B, T, d_model)
        rotary = None
        if self.wpe is not None:
            x = x + self.wpe(positions)  # (B, T, d_model)
        else:
            rotary = (self.cos[positions][:, None], self.sin[positions][:, None])  # (B, 1, T, d_head) each
        x = self.drop(x)
        for index, block in enumerate(self.blocks):
            x = block(x, cache, index, mask, rotary)  # block `index` reads and writes row `index` of the cache
        if cache is not None:
            cache.real[:, past:past + t] = real
            cache.seen = seen + real.sum(dim=1)
            cache.padded = padded
            cache.length += t
        return self.lm_head(self.ln_f(x))  # (B, T, d_model) -> (B, T, V)

    @torch.no_grad()
    def generate(self, prompt: Tensor, new_tokens: int, *, pick: Pick, use_cache: bool = True,
                 real: Tensor | None = None) -> Tensor:
        """``prompt (B, T0)`` followed by ``new_tokens`` ids, each chosen by ``pick`` from the last position's logits.

        With ``use_cache`` the prompt is read once into a fresh :class:`LMCache`, then one position per step;
        without, the whole sequence is read again at every step. ``real (B, T0)`` marks the prompt's tokens when
        prompts of different lengths are left-padded to ``T0`` (see :meth:`forward`). The model runs in eval
        mode (restored after).

        Raises:
            ValueError: if ``new_tokens < 0`` or ``T0 + new_tokens`` is longer than the context.
        """
        if new_tokens < 0 or prompt.dim() != 2 or prompt.shape[1] + new_tokens > self.sizes.context:
            raise ValueError(f"prompt {tuple(prompt.shape)} plus new_tokens={new_tokens} must fit the context of "
                             f"{self.sizes.context} (and new_tokens >= 0)")
        was_training = self.training
        self.eval()
        try:
            ids = prompt
            cache = self.new_cache(prompt.shape[0], prompt.shape[1] + new_tokens) if use_cache and new_tokens else None
            for _ in range(new_tokens):
                if cache is not None and cache.length:  # cached: the newest id only, a real token
                    logits = self(ids[:, -1:], cache)
                else:  # the prompt into the cache, or the whole sequence without one
                    logits = self(ids, cache, None if real is None else F.pad(real, (0, ids.shape[1] - real.shape[1]),
                                                                               value=True))
                chosen = pick(logits[:, -1]).view(-1, 1).to(ids.device)  # (B, V) -> (B, 1)
                ids = torch.cat([ids, chosen], dim=1)  # (B, t) -> (B, t + 1)
            return ids
        finally:
            self.train(was_training)

    @torch.no_grad()
    def beam_search(self, prompt: Tensor, new_tokens: int, beams: int = 4) -> Tensor:
        """The ``new_tokens`` continuation of ``prompt (1, T0)`` that beam search finds most likely: at every step
        the ``beams`` prefixes of highest total log-probability are kept, each with its own rows of the cache.
        Returns ``(1, T0 + new_tokens)``.

        Raises:
            ValueError: if ``prompt`` is not one sequence, the text would not fit the context, or ``beams < 2``
                (a beam of one is greedy decoding: ``generate`` with ``pick`` the argmax).
        """
        if prompt.dim() != 2 or prompt.shape[0] != 1 or prompt.shape[1] + new_tokens > self.sizes.context:
            raise ValueError(f"beam_search extends one prompt (1, T0) within the context of {self.sizes.context}, got "
                             f"{tuple(prompt.shape)} plus new_tokens={new_tokens}")
        if beams < 2:
            raise ValueError(f"beams={beams}: a beam of one is greedy decoding; ask for at least 2")
        was_training = self.training
        self.eval()
        try:
            cache = self.new_cache(1, prompt.shape[1] + new_tokens)
            logits, seqs = self(prompt, cache)[:, -1], prompt  # (1, V), (1, T0)
            score = torch.zeros(1, device=prompt.device)  # (k,): log-probability of each kept prefix
            for step in range(new_tokens):
                if step:
                    logits = self(seqs[:, -1:], cache)[:, -1]  # (k, V)
                total = (score[:, None] + logits.log_softmax(dim=-1)).flatten()  # (k · V): every prefix + every token
                score, flat = total.topk(min(beams, total.numel()))  # (k,) best continuations
                parent, token = flat // logits.shape[-1], flat % logits.shape[-1]
                seqs = torch.cat([seqs[parent], token[:, None]], dim=1)  # (k, t) -> (k, t + 1)
                cache.reorder(parent)
            return seqs[:1]  # topk sorts: row 0 is the most likely
        finally:
            self.train(was_training)


def pool_kv_heads(model: TorchGPT, n_kv_heads: int) -> TorchGPT:
    """A copy of ``model`` with ``n_kv_heads`` key/value heads, each the mean of the group of heads it replaces
    (Ainslie et al., 2023: a multi-head checkpoint turned into grouped-query attention, to be trained a little
    more). Query heads ``g·G .. g·G + G - 1`` (``G = n_heads / n_kv_heads``) share key/value head ``g``, as
    ``F.scaled_dot_product_attention(enable_gqa=True)`` pairs them.

    Raises:
        ValueError: if ``n_kv_heads`` does not divide the model's current key/value heads.
    """
    sizes = model.sizes
    if n_kv_heads < 1 or sizes.n_kv_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide the model's {sizes.n_kv_heads} key/value heads")
    pooled = TorchGPT(replace(sizes, n_kv_heads=n_kv_heads)).to(model.wte.weight.device)
    state = copy.deepcopy(model.state_dict())
    q_rows, d, group = sizes.n_heads * sizes.d_head, sizes.d_head, sizes.n_kv_heads // n_kv_heads
    for index in range(sizes.n_layers):
        for name in (f"blocks.{index}.attn.qkv.weight", f"blocks.{index}.attn.qkv.bias"):
            tensor = state[name]  # (rows, d_model) or (rows,): queries, then keys, then values
            q, k, v = tensor.split([q_rows, sizes.n_kv_heads * d, sizes.n_kv_heads * d])
            k, v = (x.reshape(n_kv_heads, group, d, *x.shape[1:]).mean(dim=1).reshape(n_kv_heads * d, *x.shape[1:])
                    for x in (k, v))  # (H_kv · d, ...) -> (n_kv, G, d, ...) -> mean over the group
            state[name] = torch.cat([q, k, v])
    pooled.load_state_dict(state)
    return pooled.train(model.training)


@dataclass
class LMHistory:
    """What :func:`train_lm` saw: the training loss of every step and, every ``eval_every`` steps, the loss on fixed
    batches of the training text and of the held-out text (in eval mode, on the same weights)."""

    train_loss: list[float] = field(default_factory=list)
    held_out_step: list[int] = field(default_factory=list)
    train_eval_loss: list[float] = field(default_factory=list)
    held_out_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def fixed_windows(corpus, part: Tensor, *, batch_size: int, length: int, batches: int,
                  seed: int = 0) -> list[tuple[Tensor, Tensor]]:
    """The ``batches`` fixed ``(inputs, targets)`` batches of ``part`` on which :func:`train_lm` measures its losses
    (batch ``i`` drawn with seed ``seed + 1 + i``): the same windows for every model and every baseline."""
    return [corpus.batch(part, batch_size, length, torch.Generator().manual_seed(seed + 1 + i)) for i in range(batches)]


def train_lm(model: TorchGPT, corpus, *, steps: int, batch_size: int = 32, length: int | None = None,
             lr: float = 3e-3, eval_every: int = 50, eval_batches: int = 4, seed: int = 0) -> LMHistory:
    """Train ``model`` on next-token prediction over ``corpus.train`` (a :class:`~attention_course.text.CharCorpus`),
    with AdamW, a linear warm-up over the first 5 % of the steps and a cosine decay, gradient clipping at 1,
    on the model's device. Every ``eval_every`` steps (and after the last) the mean loss on ``eval_batches`` fixed
    batches of ``corpus.train`` and of ``corpus.held_out`` (:func:`fixed_windows`) is recorded, so the two are
    measured alike.

    Raises:
        ValueError: if ``steps``, ``batch_size``, ``eval_every`` or ``eval_batches`` is below 1.
    """
    if min(steps, batch_size, eval_every, eval_batches) < 1:
        raise ValueError(f"steps, batch_size, eval_every and eval_batches must be at least 1, got "
                         f"{steps}, {batch_size}, {eval_every}, {eval_batches}")
    length = length or model.sizes.context
    device = model.wte.weight.device
    draws = torch.Generator().manual_seed(seed)
    fixed = {name: fixed_windows(corpus, part, batch_size=batch_size, length=length, batches=eval_batches, seed=seed)
             for name, part in (("train", corpus.train), ("held", corpus.held_out))}
    decay = [p for p in model.parameters() if p.dim() >= 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=lr, betas=(0.9, 0.95), foreach=True)  # on a CPU too: same numbers, less Python
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) / warmup, 0.55 + 0.45 * math.cos(
        math.pi * min(s, steps) / steps)))
    history, tic = LMHistory(), time.perf_counter()

    def loss_on(x: Tensor, y: Tensor) -> Tensor:
        logits = model(x.to(device))  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten())

    for step in range(1, steps + 1):
        model.train()
        loss = loss_on(*corpus.batch(corpus.train, batch_size, length, draws))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        history.train_loss.append(loss.item())
        if step % eval_every == 0 or step == steps:
            model.eval()
            with torch.no_grad():
                history.train_eval_loss.append(sum(loss_on(x, y).item() for x, y in fixed["train"]) / eval_batches)
                history.held_out_loss.append(sum(loss_on(x, y).item() for x, y in fixed["held"]) / eval_batches)
            history.held_out_step.append(step)
    model.eval()
    history.seconds = time.perf_counter() - tic
    return history
