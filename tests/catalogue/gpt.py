"""Chapter 7 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names
the exercise notebook gives (``math``, ``torch``, ``F``, ``nn``, ``Tensor`` and
the helpers of its setup cell — ``causal_mask``, ``split_heads``,
``merge_heads``, ``FeedForward`` — repeated here) and, where the
exercise builds on an earlier one, that earlier exercise, which the catalogue
tests supply from the reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from catalogue import Entry
from solutions.gpt import (
    GPTBlock,
    GroupedQueryAttention,
    KVCache,
    sample_next,
)


def causal_mask(t_q: int, t_k: int | None = None, device: torch.device | str | None = None) -> Tensor:
    t_k = t_q if t_k is None else t_k
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    b, t, width = x.shape
    return x.view(b, t, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


class FeedForward(nn.Sequential):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))


# ================================================================ sample_next


def _check(logits, temperature, top_k, top_p):
    """The argument checks every sample_next answer here makes (they differ elsewhere)."""
    if logits.dim() != 2 or temperature < 0 or (top_k is not None and top_k < 1) \
            or (top_p is not None and not 0 < top_p <= 1):
        raise ValueError(f"logits {tuple(logits.shape)}, temperature {temperature}, top_k {top_k}, top_p {top_p}")


def _top_k(logits, top_k):
    kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, -math.inf)


def _top_p(logits, top_p, crossing=True):
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    before = probs.cumsum(-1) - probs if crossing else probs.cumsum(-1)
    keep = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < top_p)
    return logits.masked_fill(~keep, -math.inf)


def sample_temperature_after_softmax(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    probs = logits.softmax(-1) / temperature  # "the temperature scales the probabilities"
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_top_k_minus_one(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.sort(dim=-1, descending=True).values[:, top_k - 1:top_k]
        logits = logits.masked_fill(logits <= kth, -math.inf)  # <= drops the k-th itself
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def sample_top_p_drops_crossing(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p, crossing=False)  # keeps cumsum < p: the token that crosses p is dropped
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def sample_global_rng(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return torch.multinomial(logits.softmax(-1), 1).squeeze(-1)  # the generator is never used


def sample_own_generator(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    generator = generator or torch.Generator()  # "a generator of its own when none is given": always seeded alike
    logits = logits / temperature
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def sample_divides_by_zero(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    logits = logits / temperature  # temperature 0: inf and nan
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def sample_top_k_exactly_k(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1)
    sorted_logits, order = torch.sort(logits / temperature, dim=-1, descending=True)
    if top_k is not None:
        sorted_logits[:, top_k:] = -math.inf  # the first k are the top k, ties with the k-th or not
    probs = sorted_logits.softmax(dim=-1)
    if top_p is not None:
        probs = probs * ((probs.cumsum(dim=-1) - probs) < top_p)
    choice = torch.multinomial(probs, 1, generator=generator)  # a position in the sorted order
    return order.gather(-1, choice).squeeze(-1)


def sample_in_sorted_order(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1)
    sorted_logits, order = torch.sort(logits / temperature, dim=-1, descending=True)
    if top_k is not None:
        kth = sorted_logits[:, min(top_k, logits.shape[-1]) - 1:][:, :1]  # (B, 1): ties with it stay
        sorted_logits = sorted_logits.masked_fill(sorted_logits < kth, -math.inf)
    probs = sorted_logits.softmax(dim=-1)
    if top_p is not None:
        probs = probs * ((probs.cumsum(dim=-1) - probs) < top_p)
    choice = torch.multinomial(probs, 1, generator=generator)  # a position in the sorted order
    return order.gather(-1, choice)[:, 0]


def sample_threshold_without_keepdim(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1]  # (B,), not (B, 1)
        logits = logits.masked_fill(logits < kth, -math.inf)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def sample_squeezed(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze()  # (B, 1) -> (B,), or () for B = 1


def sample_divides_in_place(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    logits /= temperature  # the caller's logits, divided
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def sample_unchecked(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:  # no argument is checked
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k:
        logits = _top_k(logits, top_k)
    if top_p:
        logits = _top_p(logits, top_p)
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


def sample_with_inverse_cdf(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    _check(logits, temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits / temperature
    if top_k is not None:
        scaled = _top_k(scaled, top_k)
    if top_p is not None:
        scaled = _top_p(scaled, top_p)
    cdf = scaled.softmax(-1).cumsum(-1)
    u = torch.rand(logits.shape[0], 1, generator=generator, dtype=cdf.dtype)
    return (cdf < u * cdf[:, -1:]).sum(dim=-1).clamp(max=logits.shape[-1] - 1)


# ================================================================ KVCache


class _Cache:
    def __init__(self, n_layers):
        self.keys = [None] * n_layers
        self.values = [None] * n_layers

    @property
    def length(self):
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]


class CacheOverwrites(_Cache):
    def update(self, layer, k, v):
        self.keys[layer], self.values[layer] = k, v  # only the newest positions are kept
        return k, v


class CacheNewFirst(_Cache):
    def update(self, layer, k, v):
        if self.keys[layer] is not None:
            k = torch.cat([k, self.keys[layer]], dim=-2)
            v = torch.cat([v, self.values[layer]], dim=-2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class CacheCountsCalls(_Cache):
    def __init__(self, n_layers):
        super().__init__(n_layers)
        self.calls = 0

    @property
    def length(self):
        return self.calls  # "one more token per update"

    def update(self, layer, k, v):
        self.calls += 1
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=-2)
            v = torch.cat([self.values[layer], v], dim=-2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class CacheValuesReplaced(_Cache):
    def update(self, layer, k, v):
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=-2)  # the values are kept as they come
        self.keys[layer], self.values[layer] = k, v
        return k, v


class CacheOneList(_Cache):
    def __init__(self, n_layers):
        self.keys = self.values = [None] * n_layers  # one list under two names

    def update(self, layer, k, v):
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=-2)
            v = torch.cat([self.values[layer], v], dim=-2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class CacheReturnsNew(_Cache):
    def update(self, layer, k, v):
        old_k, old_v = self.keys[layer], self.values[layer]
        self.keys[layer] = k if old_k is None else torch.cat([old_k, k], dim=-2)
        self.values[layer] = v if old_v is None else torch.cat([old_v, v], dim=-2)
        return k, v  # the new keys and values only


class CacheEmptyTensors:
    def __init__(self, n_layers):
        self.keys = [torch.zeros(0) for _ in range(n_layers)]  # empty tensors, so that torch.cat needs no `if`
        self.values = [torch.zeros(0) for _ in range(n_layers)]

    @property
    def length(self):
        return self.keys[0].shape[-2] if self.keys[0].dim() > 1 else 0

    def update(self, layer, k, v):
        if self.keys[layer].dim() > 1:
            k, v = torch.cat([self.keys[layer], k], dim=-2), torch.cat([self.values[layer], v], dim=-2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class CacheWithCounter:
    def __init__(self, n_layers: int) -> None:
        self.keys: list[Tensor | None] = []
        self.values: list[Tensor | None] = []
        for _ in range(n_layers):
            self.keys.append(None)
            self.values.append(None)
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if layer == 0:
            self._length += k.shape[-2]
        old_k, old_v = self.keys[layer], self.values[layer]
        self.keys[layer] = k if old_k is None else torch.cat([old_k, k], dim=-2)
        self.values[layer] = v if old_v is None else torch.cat([old_v, v], dim=-2)
        return self.keys[layer], self.values[layer]


# ================================================================ GroupedQueryAttention


class _GQA(nn.Module):
    """The learner's ``__init__``, shared by the entries whose mistake is in ``forward``; ``attend`` with dropout on
    the weights."""

    def __init__(self, d_model, n_heads, n_kv_heads=None, bias=True, dropout=0.0):
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        if d_model % n_heads or n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}, n_kv_heads={n_kv_heads} n_heads")
        d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, self.n_kv_heads * d_head, bias=bias)
        self.w_v = nn.Linear(d_model, self.n_kv_heads * d_head, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def qkv(self, x):
        return (split_heads(self.w_q(x), self.n_heads), split_heads(self.w_k(x), self.n_kv_heads),
                split_heads(self.w_v(x), self.n_kv_heads))

    def attend(self, q, k, v, mask=None):
        s = q @ k.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask, -math.inf)
        return self.dropout(s.softmax(dim=-1)) @ v


class GQARepeat(_GQA):
    def forward(self, x, cache=None, layer=0):
        q, k, v = self.qkv(x)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)  # tiles the heads: 0, 1, 0, 1
        return self.w_o(merge_heads(self.attend(q, k, v, causal_mask(q.shape[2], k.shape[2]))))


class GQANoCausalMask(_GQA):
    def forward(self, x, cache=None, layer=0):
        q, k, v = self.qkv(x)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return self.w_o(merge_heads(self.attend(q, k, v)))


class GQAMaskWithoutOffset(_GQA):
    def forward(self, x, cache=None, layer=0):
        q, k, v = self.qkv(x)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return self.w_o(merge_heads(self.attend(q, k, v, causal_mask(x.shape[1]))))  # (T, T), not (T, T_cache + T)


class GQACachesRepeatedHeads(_GQA):
    def forward(self, x, cache=None, layer=0):
        q, k, v = self.qkv(x)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # n_heads heads cached: nothing saved
        return self.w_o(merge_heads(self.attend(q, k, v, causal_mask(q.shape[2], k.shape[2]))))


class GQAWideKeys(_GQA):
    def __init__(self, d_model, n_heads, n_kv_heads=None, bias=True, dropout=0.0):
        super().__init__(d_model, n_heads, n_kv_heads, bias, dropout)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)  # as wide as the queries
        self.w_v = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, cache=None, layer=0):
        q = split_heads(self.w_q(x), self.n_heads)
        k, v = split_heads(self.w_k(x), self.n_kv_heads), split_heads(self.w_v(x), self.n_kv_heads)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return self.w_o(merge_heads(self.attend(q, k, v, causal_mask(q.shape[2], k.shape[2]))))


class GQAGroupedBroadcast(_GQA):
    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        q, k, v = self.qkv(x)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        b, _, t, d = q.shape
        q = q.view(b, self.n_kv_heads, self.n_heads // self.n_kv_heads, t, d)
        out = self.attend(q, k[:, :, None], v[:, :, None], causal_mask(t, k.shape[2]))  # broadcast over each group
        return self.w_o(merge_heads(out.reshape(b, self.n_heads, t, d)))


class GQATorchSDPA(_GQA):
    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        q, k, v = self.qkv(x)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        mask = causal_mask(q.shape[2], k.shape[2], device=x.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True,
                                             dropout_p=self.dropout.p if self.training else 0.0)
        return self.w_o(merge_heads(out))


class GQAOneKVHeadByDefault(_GQA):
    def __init__(self, d_model, n_heads, n_kv_heads=None, bias=True, dropout=0.0):
        super().__init__(d_model, n_heads, n_kv_heads or 1, bias, dropout)  # "no n_kv_heads: multi-query"

    def forward(self, x, cache=None, layer=0):
        return GQAGroupedBroadcast.forward(self, x, cache, layer)


class GQABiasIgnored(_GQA):
    def __init__(self, d_model, n_heads, n_kv_heads=None, bias=True, dropout=0.0):
        super().__init__(d_model, n_heads, n_kv_heads, True, dropout)  # bias=True whatever was asked

    def forward(self, x, cache=None, layer=0):
        return GQAGroupedBroadcast.forward(self, x, cache, layer)


class GQAUnchecked(_GQA):
    def __init__(self, d_model, n_heads, n_kv_heads=None, bias=True, dropout=0.0):
        nn.Module.__init__(self)  # no check that the sizes divide
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        d_head = d_model // n_heads
        self.w_q, self.w_o = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, self.n_kv_heads * d_head, bias=bias)
        self.w_v = nn.Linear(d_model, self.n_kv_heads * d_head, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cache=None, layer=0):
        return GQAGroupedBroadcast.forward(self, x, cache, layer)


class GQADropoutAlways(_GQA):
    def attend(self, q, k, v, mask=None):
        s = q @ k.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask, -math.inf)
        return F.dropout(s.softmax(dim=-1), self.dropout.p) @ v  # F.dropout trains unless told otherwise

    def forward(self, x, cache=None, layer=0):
        return GQAGroupedBroadcast.forward(self, x, cache, layer)


# ================================================================ GPTBlock


class _Block(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, d_ff, dropout=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads, dropout=dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.p = dropout


class BlockDropoutAlways(_Block):
    def forward(self, x, cache=None, layer=0):
        x = x + F.dropout(self.attn(self.norm1(x), cache, layer), self.p)  # F.dropout trains unless told otherwise
        return x + F.dropout(self.ff(self.norm2(x)), self.p)


class BlockPostNorm(_Block):
    def forward(self, x, cache=None, layer=0):
        x = self.norm1(x + self.attn(x, cache, layer))  # Chapter 6's post-norm
        return self.norm2(x + self.ff(x))


class BlockNoFFResidual(_Block):
    def forward(self, x, cache=None, layer=0):
        x = x + self.attn(self.norm1(x), cache, layer)
        return self.ff(self.norm2(x))


class BlockCacheNotPassed(_Block):
    def forward(self, x, cache=None, layer=0):
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class BlockLayerNotPassed(_Block):
    def forward(self, x, cache=None, layer=0):
        x = x + self.attn(self.norm1(x), cache)
        return x + self.ff(self.norm2(x))


class BlockWithSublayers(_Block):
    def forward(self, x: Tensor, cache: KVCache | None = None, layer: int = 0) -> Tensor:
        sublayers = [(self.norm1, lambda h: self.attn(h, cache, layer)), (self.norm2, self.ff)]
        for norm, sublayer in sublayers:
            x = x + sublayer(norm(x))
        return x


# ================================================================ GPT


class _GPT(nn.Module):
    """The learner's ``__init__``, shared by the entries whose mistake is in ``forward``."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_embed = nn.Embedding(config.vocab, config.d_model)
        self.pos_embed = nn.Embedding(config.max_len, config.d_model)
        nn.init.normal_(self.tok_embed.weight, std=0.02)
        nn.init.normal_(self.pos_embed.weight, std=0.02)
        self.blocks = nn.ModuleList(GPTBlock(config.d_model, config.n_heads, config.n_kv_heads, config.d_ff,
                                             config.dropout) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.out = nn.Linear(config.d_model, config.vocab, bias=False)
        self.out.weight = self.tok_embed.weight
        self.dropout = nn.Dropout(config.dropout)

    def start(self, tokens, cache):
        start = 0 if cache is None else cache.length
        if start + tokens.shape[1] > self.config.max_len:
            raise ValueError(f"{start} + {tokens.shape[1]} positions, max_len={self.config.max_len}")
        return start

    def run(self, x, cache):
        x = self.dropout(x)
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i)
        return self.out(self.norm(x))


class GPTPositionsRestart(_GPT):
    def forward(self, tokens, cache=None):
        self.start(tokens, cache)
        x = self.tok_embed(tokens) + self.pos_embed(torch.arange(tokens.shape[1]))  # 0.. even after a cache
        return self.run(x, cache)


class GPTScaledEmbeddings(_GPT):
    def forward(self, tokens, cache=None):
        start = self.start(tokens, cache)
        x = self.tok_embed(tokens) * math.sqrt(self.config.d_model)  # Chapter 6's habit
        return self.run(x + self.pos_embed(torch.arange(start, start + tokens.shape[1])), cache)


class GPTUntied(_GPT):
    def __init__(self, config):
        super().__init__(config)
        self.out = nn.Linear(config.d_model, config.vocab, bias=False)  # a weight of its own

    def forward(self, tokens, cache=None):
        start = self.start(tokens, cache)
        return self.run(self.tok_embed(tokens) + self.pos_embed(torch.arange(start, start + tokens.shape[1])), cache)


class GPTNoFinalNorm(_GPT):
    def __init__(self, config):
        super().__init__(config)
        del self.norm

    def forward(self, tokens, cache=None):
        start = self.start(tokens, cache)
        x = self.tok_embed(tokens) + self.pos_embed(torch.arange(start, start + tokens.shape[1]))
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i)
        return self.out(x)


class GPTNoLengthCheck(_GPT):
    def forward(self, tokens, cache=None):
        start = 0 if cache is None else cache.length  # past max_len, nn.Embedding raises IndexError
        return self.run(self.tok_embed(tokens) + self.pos_embed(torch.arange(start, start + tokens.shape[1])), cache)


class GPTDropoutAlways(_GPT):
    def forward(self, tokens, cache=None):
        start = self.start(tokens, cache)
        x = self.tok_embed(tokens) + self.pos_embed(torch.arange(start, start + tokens.shape[1]))
        return self.run(F.dropout(x, self.config.dropout), cache)  # F.dropout trains unless told otherwise


class GPTBlocksInAList(_GPT):
    def __init__(self, config):
        super().__init__(config)
        del self.blocks
        self.blocks = [GPTBlock(config.d_model, config.n_heads, config.n_kv_heads, config.d_ff, config.dropout)
                       for _ in range(config.n_layers)]  # a Python list: model.parameters() never sees them

    def forward(self, tokens, cache=None):
        start = self.start(tokens, cache)
        return self.run(self.tok_embed(tokens) + self.pos_embed(torch.arange(start, start + tokens.shape[1])), cache)


class GPTFrozenPositions(_GPT):
    def __init__(self, config):
        super().__init__(config)
        self.pos_embed = nn.Embedding.from_pretrained(torch.randn(config.max_len, config.d_model) * 0.02)  # frozen

    def forward(self, tokens, cache=None):
        start = self.start(tokens, cache)
        return self.run(self.tok_embed(tokens) + self.pos_embed(torch.arange(start, start + tokens.shape[1])), cache)


class GPTConfigNotKept(_GPT):
    def __init__(self, config):
        super().__init__(config)
        del self.config
        self.max_len = config.max_len  # only what forward reads

    def forward(self, tokens, cache=None):
        start = 0 if cache is None else cache.length
        if start + tokens.shape[1] > self.max_len:
            raise ValueError(f"{start} + {tokens.shape[1]} positions, max_len={self.max_len}")
        return self.run(self.tok_embed(tokens) + self.pos_embed(torch.arange(start, start + tokens.shape[1])), cache)


class GPTDefaultInit(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_embed = nn.Embedding(config.vocab, config.d_model)  # std 1, nn.Embedding's default
        self.pos_embed = nn.Embedding(config.max_len, config.d_model)
        self.blocks = nn.ModuleList(GPTBlock(config.d_model, config.n_heads, config.n_kv_heads, config.d_ff,
                                             config.dropout) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.out = nn.Linear(config.d_model, config.vocab, bias=False)
        self.out.weight = self.tok_embed.weight

    def forward(self, tokens, cache=None):
        start = 0 if cache is None else cache.length
        if start + tokens.shape[1] > self.config.max_len:
            raise ValueError(f"{start} + {tokens.shape[1]} positions, max_len={self.config.max_len}")
        x = self.tok_embed(tokens) + self.pos_embed(torch.arange(start, start + tokens.shape[1]))
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i)
        return self.out(self.norm(x))


class GPTTiedTheOtherWay(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.out = nn.Linear(config.d_model, config.vocab, bias=False)
        self.tok_embed = nn.Embedding(config.vocab, config.d_model)
        self.tok_embed.weight = self.out.weight  # the same Parameter, tied from the other side
        self.pos_embed = nn.Embedding(config.max_len, config.d_model)
        for weight in (self.out.weight, self.pos_embed.weight):
            nn.init.normal_(weight, mean=0.0, std=0.02)
        self.blocks = nn.ModuleList([GPTBlock(config.d_model, config.n_heads, config.n_kv_heads, config.d_ff,
                                              config.dropout) for _ in range(config.n_layers)])
        self.norm = nn.LayerNorm(config.d_model)
        self.register_buffer("positions", torch.arange(config.max_len), persistent=False)

    def forward(self, tokens: Tensor, cache: KVCache | None = None) -> Tensor:
        start = cache.length if cache else 0
        if start + tokens.shape[1] > self.config.max_len:
            raise ValueError(f"{start} + {tokens.shape[1]} positions > max_len {self.config.max_len}")
        x = self.tok_embed(tokens) + self.pos_embed(self.positions[start:start + tokens.shape[1]])
        for layer in range(len(self.blocks)):
            x = self.blocks[layer](x, cache, layer)
        return self.out(self.norm(x))


# ================================================================ generate


def _check_length(model, prompt, max_new_tokens):
    """The check every generate answer here makes (they differ elsewhere)."""
    if prompt.shape[1] + max_new_tokens > model.config.max_len:
        raise ValueError(f"{prompt.shape[1]} + {max_new_tokens} > max_len={model.config.max_len}")


def generate_without_prompt(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None,
                            top_p=None, generator=None):
    _check_length(model, prompt, max_new_tokens)
    was = model.training
    model.eval()
    with torch.no_grad():
        cache = KVCache(model.config.n_layers) if use_cache else None
        tokens, new = prompt, []
        for i in range(max_new_tokens):
            logits = model(tokens if i == 0 or cache is None else tokens[:, -1:], cache)
            token = sample_next(logits[:, -1], temperature, top_k, top_p, generator)
            tokens = torch.cat([tokens, token[:, None]], dim=1)
            new.append(token)
    model.train(was)
    return torch.stack(new, dim=1) if new else prompt[:, :0]  # only the new tokens


def generate_whole_sequence_with_cache(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None,
                                       top_p=None, generator=None):
    _check_length(model, prompt, max_new_tokens)
    was = model.training
    model.eval()
    with torch.no_grad():
        cache = KVCache(model.config.n_layers) if use_cache else None
        tokens = prompt
        for _ in range(max_new_tokens):
            logits = model(tokens, cache)  # the whole sequence, cached again at every step
            token = sample_next(logits[:, -1], temperature, top_k, top_p, generator)
            tokens = torch.cat([tokens, token[:, None]], dim=1)
    model.train(was)
    return tokens


def generate_ignores_use_cache(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None,
                               top_p=None, generator=None):
    _check_length(model, prompt, max_new_tokens)
    was = model.training
    model.eval()
    with torch.no_grad():
        tokens = prompt
        for _ in range(max_new_tokens):
            token = sample_next(model(tokens)[:, -1], temperature, top_k, top_p, generator)
            tokens = torch.cat([tokens, token[:, None]], dim=1)
    model.train(was)
    return tokens


def generate_argmax(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None, top_p=None,
                    generator=None):
    _check_length(model, prompt, max_new_tokens)
    was = model.training
    model.eval()
    with torch.no_grad():
        cache = KVCache(model.config.n_layers) if use_cache else None
        tokens = prompt
        for i in range(max_new_tokens):
            logits = model(tokens if i == 0 or cache is None else tokens[:, -1:], cache)
            token = logits[:, -1].argmax(dim=-1)  # the most likely token, whatever the temperature
            tokens = torch.cat([tokens, token[:, None]], dim=1)
    model.train(was)
    return tokens


def generate_drops_generator(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None,
                             top_p=None, generator=None):
    _check_length(model, prompt, max_new_tokens)
    was = model.training
    model.eval()
    with torch.no_grad():
        cache = KVCache(model.config.n_layers) if use_cache else None
        tokens = prompt
        for i in range(max_new_tokens):
            logits = model(tokens if i == 0 or cache is None else tokens[:, -1:], cache)
            token = sample_next(logits[:, -1], temperature, top_k, top_p)  # the generator stays behind
            tokens = torch.cat([tokens, token[:, None]], dim=1)
    model.train(was)
    return tokens


def generate_leaves_eval_mode(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None,
                              top_p=None, generator=None):
    _check_length(model, prompt, max_new_tokens)
    model.eval()
    with torch.no_grad():
        cache = KVCache(model.config.n_layers) if use_cache else None
        tokens = prompt
        for i in range(max_new_tokens):
            logits = model(tokens if i == 0 or cache is None else tokens[:, -1:], cache)
            token = sample_next(logits[:, -1], temperature, top_k, top_p, generator)
            tokens = torch.cat([tokens, token[:, None]], dim=1)
    return tokens


def generate_tracking_gradients(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None,
                                top_p=None, generator=None):
    _check_length(model, prompt, max_new_tokens)
    was = model.training
    model.eval()  # no torch.no_grad(): every step keeps its graph
    cache = KVCache(model.config.n_layers) if use_cache else None
    tokens = prompt
    for i in range(max_new_tokens):
        logits = model(tokens if i == 0 or cache is None else tokens[:, -1:], cache)
        token = sample_next(logits[:, -1].detach(), temperature, top_k, top_p, generator)
        tokens = torch.cat([tokens, token[:, None]], dim=1)
    model.train(was)
    return tokens


@torch.no_grad()
def generate_back_to_training(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None,
                              top_p=None, generator=None):
    _check_length(model, prompt, max_new_tokens)
    model.eval()
    cache = KVCache(model.config.n_layers) if use_cache else None
    tokens = prompt
    for i in range(max_new_tokens):
        logits = model(tokens if i == 0 or cache is None else tokens[:, -1:], cache)
        tokens = torch.cat([tokens, sample_next(logits[:, -1], temperature, top_k, top_p, generator)[:, None]], dim=1)
    model.train()  # "back to training", whatever mode it came in
    return tokens


@torch.no_grad()
def generate_always_a_cache(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None, top_p=None,
                            generator=None):
    _check_length(model, prompt, max_new_tokens)
    was = model.training
    model.eval()
    cache = KVCache(model.config.n_layers)  # made whether or not use_cache asks for one
    tokens = prompt
    for i in range(max_new_tokens):
        logits = model(tokens[:, -1:] if use_cache and i else tokens, cache)
        tokens = torch.cat([tokens, sample_next(logits[:, -1], temperature, top_k, top_p, generator)[:, None]], dim=1)
    model.train(was)
    return tokens


@torch.no_grad()
def generate_unchecked(model, prompt, max_new_tokens, use_cache=True, temperature=1.0, top_k=None, top_p=None,
                       generator=None):
    was = model.training  # no check of max_len: the model finds out, or not
    model.eval()
    cache = KVCache(model.config.n_layers) if use_cache else None
    tokens = prompt
    for i in range(max_new_tokens):
        logits = model(tokens if i == 0 or cache is None else tokens[:, -1:], cache)
        tokens = torch.cat([tokens, sample_next(logits[:, -1], temperature, top_k, top_p, generator)[:, None]], dim=1)
    model.train(was)
    return tokens


@torch.no_grad()
def generate_without_cache_by_default(model, prompt, max_new_tokens, use_cache=False, temperature=1.0, top_k=None,
                                      top_p=None, generator=None):  # the default changed to False
    _check_length(model, prompt, max_new_tokens)
    was = model.training
    model.eval()
    cache = KVCache(model.config.n_layers) if use_cache else None
    tokens = prompt
    for i in range(max_new_tokens):
        logits = model(tokens if i == 0 or cache is None else tokens[:, -1:], cache)
        tokens = torch.cat([tokens, sample_next(logits[:, -1], temperature, top_k, top_p, generator)[:, None]], dim=1)
    model.train(was)
    return tokens


def generate_prefill_then_loop(model: nn.Module, prompt: Tensor, max_new_tokens: int, use_cache: bool = True,
                               temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                               generator: torch.Generator | None = None) -> Tensor:
    if prompt.shape[1] + max_new_tokens > model.config.max_len:
        raise ValueError(f"{prompt.shape[1]} + {max_new_tokens} > max_len={model.config.max_len}")
    training = model.training
    model.train(False)
    out = [prompt]
    try:
        with torch.inference_mode():
            cache = KVCache(model.config.n_layers) if use_cache else None
            fed = prompt
            while len(out) - 1 < max_new_tokens:
                logits = model(fed, cache)[:, -1, :]
                out.append(sample_next(logits, temperature, top_k, top_p, generator).unsqueeze(-1))
                fed = out[-1] if use_cache else torch.cat(out, dim=1)
    finally:
        model.train(training)
    return torch.cat(out, dim=1).clone()


# ================================================================ concept checks


def kv_elements_keys_only(n_layers, batch, n_heads, n_kv_heads, length, d_head):
    return n_layers * batch * n_kv_heads * length * d_head


def kv_elements_all_heads(n_layers, batch, n_heads, n_kv_heads, length, d_head):
    return 2 * n_layers * batch * n_heads * length * d_head


def kv_elements_per_layer(n_layers: int, batch: int, n_heads: int, n_kv_heads: int, length: int,
                                   d_head: int) -> int:
    per_layer = {"keys": batch * n_kv_heads * length * d_head, "values": batch * n_kv_heads * length * d_head}
    return sum(per_layer.values()) * n_layers


WRONG = [
    Entry("sample_next", "temperature after the softmax", sample_temperature_after_softmax,
          "temperature applied after the softmax", "sample_next_temperature"),
    Entry("sample_next", "top-k keeps k-1", sample_top_k_minus_one, "top-k keeps k-1", "sample_next_top_k"),
    Entry("sample_next", "top-p drops the crossing token", sample_top_p_drops_crossing,
          "top-p drops the token that crosses p", "sample_next_top_p"),
    Entry("sample_next", "global RNG", sample_global_rng, "global RNG instead of the generator",
          "sample_next_generator", also=("generator not passed on",)),
    Entry("sample_next", "temperature 0 divides by zero", sample_divides_by_zero, "temperature 0 divides by zero",
          "sample_next_greedy"),
    Entry("sample_next", "a generator of its own by default", sample_own_generator, "generator=None not the global RNG",
          "sample_next_generator"),
    Entry("sample_next", "exactly k kept, ties dropped", sample_top_k_exactly_k, "top-k drops ties with the k-th",
          "sample_next_top_k"),
    Entry("sample_next", "k-th largest of shape (B,)", sample_threshold_without_keepdim, "threshold of another row",
          "sample_next_top_k"),
    Entry("sample_next", ".squeeze() on the draws", sample_squeezed, "batch axis squeezed away",
          "sample_next_contract"),
    Entry("sample_next", "logits /= temperature", sample_divides_in_place, "input modified in place",
          "sample_next_contract"),
    Entry("sample_next", "no argument checked", sample_unchecked, "no ValueError for bad arguments",
          "sample_next_contract"),
    Entry("KVCache", "overwrites", CacheOverwrites, "cache overwritten instead of appended", "KVCache_update",
          also=("cache not used", "cache not passed on")),
    Entry("KVCache", "new first", CacheNewFirst, "new keys put before the cached ones", "KVCache_update"),
    Entry("KVCache", "length counts updates", CacheCountsCalls, "length counts updates, not positions",
          "KVCache_length"),
    Entry("KVCache", "values replaced, not appended", CacheValuesReplaced, "values not appended", "KVCache_update"),
    Entry("KVCache", "self.keys = self.values = [...]", CacheOneList, "one list for keys and values", "KVCache_update"),
    Entry("KVCache", "only the new keys returned", CacheReturnsNew, "only the new keys returned", "KVCache_update",
          also=("cache not passed on",)),  # GPTBlock_cache's visible check runs on the learner's cache
    Entry("KVCache", "empty tensors before the first update", CacheEmptyTensors,
          "entries not None before the first update", "KVCache_update"),
    Entry("GroupedQueryAttention", "repeat instead of repeat_interleave", GQARepeat,
          "repeat instead of repeat_interleave", "GroupedQueryAttention_forward"),
    Entry("GroupedQueryAttention", "no causal mask", GQANoCausalMask, "no causal mask",
          "GroupedQueryAttention_forward"),
    Entry("GroupedQueryAttention", "causal_mask(T) with a cache", GQAMaskWithoutOffset,
          "mask without the cache offset", "GroupedQueryAttention_cache"),
    Entry("GroupedQueryAttention", "repeated heads cached", GQACachesRepeatedHeads, "repeated heads cached",
          "GroupedQueryAttention_cache"),
    Entry("GroupedQueryAttention", "w_k and w_v as wide as w_q", GQAWideKeys, "w_k and w_v of width d_model",
          "GroupedQueryAttention_projections"),
    Entry("GroupedQueryAttention", "n_kv_heads or 1", GQAOneKVHeadByDefault, "n_kv_heads=None not taken as n_heads",
          "GroupedQueryAttention_projections"),
    Entry("GroupedQueryAttention", "bias always on", GQABiasIgnored, "bias argument ignored",
          "GroupedQueryAttention_projections"),
    Entry("GroupedQueryAttention", "sizes not checked", GQAUnchecked, "no ValueError for bad arguments",
          "GroupedQueryAttention_projections"),
    Entry("GroupedQueryAttention", "F.dropout on the weights", GQADropoutAlways, "dropout applied in eval mode",
          "GroupedQueryAttention_dropout"),
    Entry("GPTBlock", "post-norm", BlockPostNorm, "post-norm instead of pre-norm", "GPTBlock_forward"),
    Entry("GPTBlock", "no residual around the feed-forward network", BlockNoFFResidual,
          "residual missing around the feed-forward network", "GPTBlock_forward"),
    Entry("GPTBlock", "cache not passed to the attention", BlockCacheNotPassed, "cache not passed on",
          "GPTBlock_cache"),
    Entry("GPTBlock", "layer not passed to the attention", BlockLayerNotPassed, "layer argument ignored",
          "GPTBlock_cache"),
    Entry("GPTBlock", "F.dropout on the residual branches", BlockDropoutAlways, "dropout applied in eval mode",
          "GPTBlock_forward"),
    Entry("GPT", "positions restart with a cache", GPTPositionsRestart, "positions restart at 0 with a cache",
          "GPT_cache"),
    Entry("GPT", "embeddings scaled by sqrt(d_model)", GPTScaledEmbeddings, "embeddings scaled by √d_model",
          "GPT_forward"),
    Entry("GPT", "untied output layer", GPTUntied, "untied output layer", "GPT_parts"),
    Entry("GPT", "no final LayerNorm", GPTNoFinalNorm, "missing final LayerNorm", "GPT_forward"),
    Entry("GPT", "embeddings at nn.Embedding's default", GPTDefaultInit, "embeddings left at std 1", "GPT_trains"),
    Entry("GPT", "nn.Embedding's IndexError past max_len", GPTNoLengthCheck, "no ValueError for bad arguments",
          "GPT_cache"),
    Entry("GPT", "F.dropout on the embeddings", GPTDropoutAlways, "dropout applied in eval mode", "GPT_forward"),
    Entry("GPT", "blocks in a Python list", GPTBlocksInAList, "blocks not registered", "GPT_parts",
          also=("dropout applied in eval mode",)),  # model.eval() never reaches blocks it does not know
    Entry("GPT", "positions from nn.Embedding.from_pretrained", GPTFrozenPositions, "parameters not trained",
          "GPT_copies"),
    Entry("GPT", "config not kept", GPTConfigNotKept, "config not kept", "GPT_parts"),
    Entry("generate", "prompt dropped", generate_without_prompt, "prompt dropped", "generate_tokens"),
    Entry("generate", "whole sequence with a cache", generate_whole_sequence_with_cache,
          "whole sequence fed with a cache", "generate_cache"),
    Entry("generate", "use_cache ignored", generate_ignores_use_cache, "use_cache ignored", "generate_cache"),
    Entry("generate", "argmax when asked to sample", generate_argmax, "argmax instead of a draw",
          "generate_sampling"),
    Entry("generate", "generator not passed on", generate_drops_generator, "generator not passed on",
          "generate_sampling"),
    Entry("generate", "left in eval mode", generate_leaves_eval_mode, "training mode not restored",
          "generate_tokens"),
    Entry("generate", "no torch.no_grad()", generate_tracking_gradients, "gradients tracked while generating",
          "generate_tokens"),
    Entry("generate", "model.train() at the end", generate_back_to_training, "mode forced to training",
          "generate_tokens"),
    Entry("generate", "a cache even without use_cache", generate_always_a_cache, "cache used without use_cache",
          "generate_tokens"),
    Entry("generate", "max_len not checked", generate_unchecked, "no ValueError for bad arguments", "generate_tokens"),
    Entry("generate", "use_cache=False by default", generate_without_cache_by_default, "use_cache ignored",
          "generate_cache"),
    Entry("kv_cache_elements", "only the keys", kv_elements_keys_only, "only the keys counted",
          "kv_cache_elements_answer"),
    Entry("kv_cache_elements", "every query head's keys", kv_elements_all_heads, "n_heads instead of n_kv_heads",
          "kv_cache_elements_answer"),
]

CORRECT = [
    Entry("sample_next", "draws in sorted order", sample_in_sorted_order),
    Entry("sample_next", "inverse CDF with torch.rand", sample_with_inverse_cdf),
    Entry("KVCache", "a length counter", CacheWithCounter),
    Entry("GroupedQueryAttention", "query groups broadcast over one key/value head", GQAGroupedBroadcast),
    Entry("GroupedQueryAttention", "F.scaled_dot_product_attention with enable_gqa", GQATorchSDPA),
    Entry("GPTBlock", "a loop over (norm, sublayer)", BlockWithSublayers),
    Entry("GPT", "tied from the output side, positions as a buffer", GPTTiedTheOtherWay),
    Entry("generate", "prefill, then a loop, inference_mode", generate_prefill_then_loop),
    Entry("kv_cache_elements", "keys and values per layer", kv_elements_per_layer),
]
