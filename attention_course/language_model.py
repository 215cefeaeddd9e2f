"""A small decoder-only language model built on PyTorch's own pieces, so Chapter 7 runs without your solutions.

``TorchGPT`` is a nanoGPT-style decoder: token and learned position embeddings, pre-norm blocks of causal
self-attention and a GELU feed-forward network, a final LayerNorm, and an output layer tied to the token
embedding. Its attention is one fused ``(d_model → (n_heads + 2·n_kv_heads)·d_head)`` projection and
``F.scaled_dot_product_attention``, whose ``enable_gqa=True`` lets groups of query heads share a key/value
head. Its key/value cache is laid out as production servers lay it out: one buffer per layer,
preallocated for the longest sequence and written in place as tokens arrive.

The chapter's exercises build the same model from the course's own pieces, with another interface
(``GPTConfig``, ``GPT``, an append-only ``KVCache``, ``sample_next``, ``generate``); nothing here is
one of them. Drawing the next token is left to the caller: :meth:`TorchGPT.generate` takes a ``pick``
function from the last logits to token ids.

>>> sizes = LMSizes(vocab=10, context=16, d_model=32, n_heads=4, n_kv_heads=2, n_layers=1)
>>> model = TorchGPT(sizes)
>>> model(torch.zeros(2, 5, dtype=torch.long)).shape
torch.Size([2, 5, 10])
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LMSizes", "TorchGPT", "LMCache", "LMHistory", "train_lm"]

#: ``pick(last_logits (B, V)) -> (B,)`` token ids: how :meth:`TorchGPT.generate` chooses each new token.
Pick = Callable[[Tensor], Tensor]


@dataclass
class LMSizes:
    """The sizes of a :class:`TorchGPT`."""

    vocab: int  # number of token ids
    context: int = 128  # longest sequence the model reads, cache included (rows of the position table)
    d_model: int = 128  # width of the residual stream; n_heads must divide it
    n_heads: int = 8  # query heads per attention block
    n_kv_heads: int | None = None  # key/value heads, dividing n_heads; None: n_heads (no sharing)
    n_layers: int = 4  # how many decoder blocks are stacked
    dropout: float = 0.0  # dropout probability, in training mode only

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

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


class LMCache:
    """Keys and values of every layer, preallocated for ``capacity`` positions and filled in place.

    ``keys`` and ``values`` are ``(n_layers, B, n_kv_heads, capacity, d_head)`` buffers made once; a forward
    pass over ``T`` new tokens writes rows ``length .. length + T - 1`` of each layer and then moves
    ``length`` on. Nothing is copied or re-allocated as the sequence grows (``torch.cat`` would copy the
    whole cache at every step). Make one with :meth:`TorchGPT.new_cache`.
    """

    def __init__(self, sizes: LMSizes, batch: int, capacity: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        if batch < 1 or not 1 <= capacity <= sizes.context:
            raise ValueError(f"a cache needs batch >= 1 and 1 <= capacity <= context={sizes.context}, "
                             f"got batch={batch}, capacity={capacity}")
        shape = (sizes.n_layers, batch, sizes.n_kv_heads, capacity, sizes.d_head)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0  # positions filled so far, in every layer

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    @property
    def nbytes(self) -> int:
        """Bytes of the two buffers (allocated for ``capacity`` positions, filled or not)."""
        return self.keys.nbytes + self.values.nbytes


class _CausalSelfAttention(nn.Module):
    """Causal self-attention on one fused projection and ``F.scaled_dot_product_attention`` (GQA-aware)."""

    def __init__(self, sizes: LMSizes) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = sizes.n_heads, sizes.n_kv_heads, sizes.d_head
        self.qkv = nn.Linear(sizes.d_model, (sizes.n_heads + 2 * sizes.n_kv_heads) * sizes.d_head)
        self.proj = nn.Linear(sizes.d_model, sizes.d_model)
        self.p_drop = sizes.dropout

    def forward(self, x: Tensor, cache: LMCache | None, layer: int) -> Tensor:
        batch, t, width = x.shape
        q, k, v = self.qkv(x).split([self.n_heads * self.d_head, self.n_kv_heads * self.d_head,
                                     self.n_kv_heads * self.d_head], dim=-1)
        q = q.view(batch, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, H·d) -> (B, H, T, d)
        k = k.view(batch, t, self.n_kv_heads, self.d_head).transpose(1, 2)  # -> (B, H_kv, T, d)
        v = v.view(batch, t, self.n_kv_heads, self.d_head).transpose(1, 2)  # -> (B, H_kv, T, d)
        past = 0
        if cache is not None:
            past = cache.length
            cache.keys[layer, :, :, past:past + t] = k  # written in place: rows past .. past + T - 1
            cache.values[layer, :, :, past:past + t] = v
            k, v = cache.keys[layer, :, :, :past + t], cache.values[layer, :, :, :past + t]  # views, no copy
        if past == 0:
            mask, causal = None, True  # the whole sequence: SDPA's own causal mask
        elif t == 1:
            mask, causal = None, False  # one new token sees every cached position and itself
        else:  # several new tokens after a cached prefix: new token i sees keys 0 .. past + i
            mask = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(diagonal=past)
            causal = False
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

    def forward(self, x: Tensor, cache: LMCache | None, layer: int) -> Tensor:
        x = x + self.drop(self.attn(self.ln_1(x), cache, layer))
        return x + self.mlp(self.ln_2(x))


class TorchGPT(nn.Module):
    """A decoder-only transformer on PyTorch's pieces: ``ids (B, T)`` → next-token ``logits (B, T, V)``.

    Args:
        sizes: an :class:`LMSizes`, kept as ``self.sizes``.

    Attributes:
        wte: token embedding ``(V, d_model)``, also the output layer's weight (tied, as in GPT-2);
        wpe: learned positions ``(context, d_model)``; blocks: the decoder blocks; ln_f: the final LayerNorm.
    """

    def __init__(self, sizes: LMSizes) -> None:
        super().__init__()
        if not isinstance(sizes, LMSizes):
            raise ValueError(f"TorchGPT takes an LMSizes, got {type(sizes).__name__}")
        self.sizes = sizes
        self.wte = nn.Embedding(sizes.vocab, sizes.d_model)
        self.wpe = nn.Embedding(sizes.context, sizes.d_model)
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

    def forward(self, ids: Tensor, cache: LMCache | None = None) -> Tensor:
        """``ids (B, T)`` → ``logits (B, T, V)``. With a ``cache`` the ids are the positions after the cached ones:
        their keys and values are written into it, and its ``length`` grows by ``T``.

        Raises:
            ValueError: if ``ids`` is not ``(B, T)`` integers or the positions run past the context or the cache.
        """
        if ids.dim() != 2 or ids.shape[1] < 1 or ids.is_floating_point():
            raise ValueError(f"ids must be integer token ids of shape (B, T), got {ids.dtype} {tuple(ids.shape)}")
        past, t = (0 if cache is None else cache.length), ids.shape[1]
        end = self.sizes.context if cache is None else cache.capacity
        if past + t > end:
            raise ValueError(f"{past} cached + {t} new positions run past the {'cache' if cache else 'context'} "
                             f"of {end}")
        if cache is not None and cache.keys.shape[1] != ids.shape[0]:
            raise ValueError(f"the cache holds {cache.keys.shape[1]} sequences, ids {ids.shape[0]}")
        x = self.drop(self.wte(ids) + self.wpe(torch.arange(past, past + t, device=ids.device)))  # (B, T, d_model)
        for index, block in enumerate(self.blocks):
            x = block(x, cache, index)  # block `index` reads and writes row `index` of the cache
        if cache is not None:
            cache.length += t
        return self.lm_head(self.ln_f(x))  # (B, T, d_model) -> (B, T, V)

    @torch.no_grad()
    def generate(self, prompt: Tensor, new_tokens: int, *, pick: Pick, use_cache: bool = True) -> Tensor:
        """``prompt (B, T0)`` followed by ``new_tokens`` ids, each chosen by ``pick`` from the last position's logits.

        With ``use_cache`` the prompt is read once into a fresh :class:`LMCache`, then one position per step;
        without, the whole sequence is read again at every step. The model runs in eval mode (restored after).

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
                reading = ids[:, -1:] if cache is not None and cache.length else ids  # cached: the newest id only
                chosen = pick(self(reading, cache)[:, -1])  # (B, V) -> (B,)
                ids = torch.cat([ids, chosen.view(-1, 1).to(ids.device)], dim=1)  # (B, t) -> (B, t + 1)
            return ids
        finally:
            self.train(was_training)


@dataclass
class LMHistory:
    """What :func:`train_lm` saw: the training loss of every step and, every ``eval_every`` steps, the loss on fixed
    batches of the training text and of the held-out text (in eval mode, on the same weights)."""

    train_loss: list[float] = field(default_factory=list)
    held_out_step: list[int] = field(default_factory=list)
    train_eval_loss: list[float] = field(default_factory=list)
    held_out_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train_lm(model: TorchGPT, corpus, *, steps: int, batch_size: int = 32, length: int | None = None,
             lr: float = 3e-3, eval_every: int = 50, eval_batches: int = 4, seed: int = 0) -> LMHistory:
    """Train ``model`` on next-token prediction over ``corpus.train`` (a :class:`~attention_course.text.CharCorpus`),
    with AdamW, a linear warm-up over the first 5 % of the steps and a cosine decay, gradient clipping at 1,
    on the model's device. Every ``eval_every`` steps (and after the last) the mean loss on ``eval_batches`` fixed
    batches of ``corpus.train`` and of ``corpus.held_out`` is recorded, so the two are measured alike.

    Raises:
        ValueError: if ``steps``, ``batch_size``, ``eval_every`` or ``eval_batches`` is below 1.
    """
    if min(steps, batch_size, eval_every, eval_batches) < 1:
        raise ValueError(f"steps, batch_size, eval_every and eval_batches must be at least 1, got "
                         f"{steps}, {batch_size}, {eval_every}, {eval_batches}")
    length = length or model.sizes.context
    device = model.wte.weight.device
    draws = torch.Generator().manual_seed(seed)
    parts = {"train": corpus.train, "held": corpus.held_out}
    fixed = {name: [corpus.batch(part, batch_size, length, torch.Generator().manual_seed(seed + 1 + i))
                    for i in range(eval_batches)] for name, part in parts.items()}
    decay = [p for p in model.parameters() if p.dim() >= 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}],
                                  lr=lr, betas=(0.9, 0.95))
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
