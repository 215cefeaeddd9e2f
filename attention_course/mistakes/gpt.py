"""The known mistakes of Chapter 7 (``07_gpt``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/gpt.py``) name every mistake from
here. Each group says the form of its cases and what ``right`` computes, where it needs one: a visible check passes
its own computation of it, the judge the reference's. A sampling mistake is what the draws follow when the right
filters are given other arguments (another temperature, k, no nucleus, logits set to -inf); an attention's mistakes
are its heads put together the wrong way around ``right``, Chapter 1's attention; a block's and a model's are their
parts put together the wrong way: a visible check passes the learner's own parts, the judge the reference's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

# the projections' bias argument is Chapter 1's, and so is its mistake
from attention_course.mistakes.self_attention import BIAS_IGNORED  # noqa: F401
from attention_course.testing import KnownMistake, Mistakes

NEG_INF = float("-inf")


# ================================================================ sample_next: what the draws follow
# Cases: (row, temperature, top_k, top_p): one row of logits (V,), drawn many times. right(row, temperature, top_k,
# top_p) is the probabilities (V,) in float64 that every draw follows: softmax(logits / τ) after the top-k filter (k
# taken between 1 and V) and the nucleus; a logit of -inf is never drawn.

def _only(row: Tensor, keep: Tensor) -> Tensor:
    """``row`` in float64 with every logit that ``keep`` leaves out at -inf: those tokens are never drawn."""
    return row.double().masked_fill(~keep, NEG_INF)


def _k(row: Tensor, top_k: int) -> int:
    return max(1, min(top_k, row.shape[-1]))


def _exactly_k(row: Tensor, temperature: float, top_k: int) -> Tensor:
    """The row with only the k indices torch.topk returns kept: the logits that tie with the k-th beyond them drop."""
    top = (row.double() / temperature).topk(_k(row, top_k))
    return _only(row, torch.zeros(row.shape, dtype=torch.bool).scatter(-1, top.indices, True))


def _ties_with_kth(row: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> bool:
    if top_k is None:
        return False
    scaled = row.double() / temperature
    return int((scaled >= scaled.topk(_k(row, top_k)).values[-1]).sum()) > _k(row, top_k)


def _crosser_dropped(right: Callable[..., Tensor], row: Tensor, temperature: float, top_k: int | None,
                     top_p: float) -> Tensor:
    """The nucleus taken as the tokens whose running sum, themselves included, stays below top_p."""
    probs, order = right(row, temperature, top_k, None).sort(descending=True)
    below = torch.zeros(row.shape, dtype=torch.bool).scatter(-1, order, probs.cumsum(-1) < top_p)
    return right(_only(row, below), temperature, top_k, None)


def _nucleus_first(right: Callable[..., Tensor], row: Tensor, temperature: float, top_k: int | None,
                   top_p: float) -> Tensor:
    """The nucleus of the raw logits, then the temperature and top-k on what it keeps."""
    return right(_only(row, right(row, 1.0, None, top_p) > 0), temperature, top_k, None)


SAMPLING = Mistakes([
    KnownMistake("argmax instead of a draw", "every row gave the most likely token — draw with "
                 "torch.multinomial(probs, 1, generator=generator); only temperature=0 is the argmax",
                 lambda right, row, t, k, p: F.one_hot(row.argmax(), row.shape[0]).double()),
    KnownMistake("temperature applied after the softmax",
                 lambda row, t, k, p: f"the draws follow softmax(logits), untouched by the temperature {t:g}: divide "
                                      f"the logits by τ before the softmax (dividing the probabilities by τ changes "
                                      f"nothing once they are renormalised)",
                 lambda right, row, t, k, p: right(row, 1.0, k, p), when=lambda row, t, k, p: t != 1.0),
    KnownMistake("logits multiplied by the temperature",
                 lambda row, t, k, p: f"the logits are multiplied by the temperature {t:g}: divide them by it (τ below "
                                      f"1 sharpens, above 1 flattens)",
                 lambda right, row, t, k, p: right(row.double() * t, 1.0, k, p), when=lambda row, t, k, p: t != 1.0),
    KnownMistake("top-k keeps k-1",
                 lambda row, t, k, p: f"it keeps {k - 1} tokens, one fewer than top_k={k}: keep every logit >= the "
                                      f"k-th largest, `logits < kth` is what gets -inf",
                 lambda right, row, t, k, p: right(row, t, k - 1, p), when=lambda row, t, k, p: k is not None),
    KnownMistake("top-k keeps k+1", lambda row, t, k, p: f"it keeps {k + 1} tokens, one more than top_k={k}",
                 lambda right, row, t, k, p: right(row, t, k + 1, p), when=lambda row, t, k, p: k is not None),
    KnownMistake("top_k ignored", lambda row, t, k, p: f"every token can be drawn: top_k={k} was not applied",
                 lambda right, row, t, k, p: right(row, t, None, p), when=lambda row, t, k, p: k is not None),
    KnownMistake("top-k drops ties with the k-th",
                 lambda row, t, k, p: f"exactly top_k={k} tokens are kept, though others tie with the k-th largest "
                                      f"logit: keep every logit >= the k-th largest (`logits < kth` gets -inf), not "
                                      f"the k indices torch.topk returns",
                 lambda right, row, t, k, p: right(_exactly_k(row, t, k), t, k, p), when=_ties_with_kth),
    KnownMistake("top-p drops the token that crosses p",
                 lambda row, t, k, p: f"the token whose probability carries the running sum past top_p={p} is "
                                      f"dropped: the nucleus is the smallest set whose mass *reaches* top_p, so keep "
                                      f"a token while the mass before it is below top_p",
                 _crosser_dropped, when=lambda row, t, k, p: p is not None),
    KnownMistake("top_p ignored", lambda row, t, k, p: f"every token can be drawn: top_p={p} was not applied",
                 lambda right, row, t, k, p: right(row, t, k, None), when=lambda row, t, k, p: p is not None),
    KnownMistake("top-p applied first", "the nucleus was measured on the raw logits, before the temperature and "
                 "top-k: divide by τ, keep the top k, then take the nucleus of what is left", _nucleus_first,
                 when=lambda row, t, k, p: p is not None and (t != 1.0 or k is not None)),
])

#: Of a batch of rows, filtered with another row's threshold; these give no value to compare (``call``, ``got``,
#: ``want``: the call, the tokens it gave and each row's most likely token).
THRESHOLD_CRASH = KnownMistake("threshold of another row", "the k-th largest logit of shape (B,) is compared with the "
                               "columns, not the rows: keep its shape (B, 1), values[:, -1:] or keepdim=True")
ROW_THRESHOLD = KnownMistake("threshold of another row", "{call} gave {got}, expected each row's most likely token, "
                             "{want}: a row's filter must use that row's own threshold — keep the (B, 1) shape, "
                             "`values[:, -1:]` or keepdim=True; a (B,) threshold is compared with the columns, not the "
                             "rows")

#: Of temperature 0, the generator and the batch axis (``call``: the call; ``got``: what it returned).
ZERO_TEMPERATURE = KnownMistake("temperature 0 divides by zero", "temperature 0 is greedy decoding: return the argmax "
                                "of each row before dividing by the temperature")
GLOBAL_RNG = KnownMistake("global RNG instead of the generator", "{call} drew from PyTorch's global random state "
                          "instead of the generator it was given: pass generator=generator to torch.multinomial, so "
                          "that the same generator state gives the same tokens")
NOTHING_DRAWN = KnownMistake("argmax instead of a draw", "generators seeded 5 and 6 gave the same 40 tokens — is "
                             "anything drawn at all? Only temperature=0 is the argmax")
DEFAULT_NOT_GLOBAL = KnownMistake("generator=None not the global RNG", "the same global seed should give the same "
                                  "tokens and another seed others — generator=None means PyTorch's global random "
                                  "state: pass generator=generator on as it is")
BATCH_SQUEEZED = KnownMistake("batch axis squeezed away", "{call} returned {got}, not a LongTensor of shape (1,): one "
                              "token id per row, even for one row — `.squeeze()` takes the batch axis away too: take "
                              "the draws' column with `[:, 0]` or `.squeeze(-1)`")


# ================================================================ KVCache
# Cases: (n_layers, updates): updates lists the calls cache.update(layer, k, v), k and v (B, n_kv_heads, T, d_head).
# A mistake gives the record of the cache it makes: (what each update returned, as (k, v); cache.keys and
# cache.values, one entry per layer, None before the layer's first update; whether keys and values are one list).
# No ``right`` is needed.

def _append(old: Tensor, new: Tensor) -> Tensor:
    return torch.cat([old, new], dim=-2)


def _kept(old: Tensor, new: Tensor) -> Tensor:
    return new


def _record(n_layers: int, updates: Sequence[tuple[int, Tensor, Tensor]], keys_join: Callable = _append,
            values_join: Callable = _append, one_entry: bool = False, returns_new: bool = False) -> tuple:
    """The record of a cache that joins each layer's cached keys and values with the new ones as ``keys_join`` and
    ``values_join`` say (``_kept``: replaced), writes every layer into entry 0 (``one_entry``) or returns only the new
    keys and values (``returns_new``)."""
    keys: list[Any] = [None] * n_layers
    values: list[Any] = [None] * n_layers
    returned = []
    for layer, k, v in updates:
        slot = 0 if one_entry else layer
        new = (k, v)
        if keys[slot] is not None:
            k, v = keys_join(keys[slot], k), values_join(values[slot], v)
        keys[slot], values[slot] = k, v
        returned.append(new if returns_new else (k, v))
    if one_entry:
        keys, values = [keys[0]] * n_layers, [values[0]] * n_layers
    return tuple(returned), tuple(keys), tuple(values), False


def _axis(dim: int) -> Callable[[Tensor, Tensor], Tensor]:
    return lambda old, new: torch.cat([old, new], dim=dim)


_WRONG_AXIS = "appended along the wrong axis"

KV_UPDATES = Mistakes([
    KnownMistake("cache overwritten instead of appended", "each update replaces the layer's keys and values with the "
                 "new ones: append them, torch.cat([cached, new], dim=-2), so that the cache keeps every position",
                 lambda right, n, updates: _record(n, updates, _kept, _kept)),
    KnownMistake("new keys put before the cached ones", "the new keys and values go before the cached ones: positions "
                 "run in order, so append them after, torch.cat([cached, new], dim=-2)",
                 lambda right, n, updates: _record(n, updates, *[lambda old, new: torch.cat([new, old], dim=-2)] * 2)),
    KnownMistake(_WRONG_AXIS, "the new keys are appended along the last axis, d_head: positions are axis -2 of (B, "
                 "n_kv_heads, T, d_head)", lambda right, n, updates: _record(n, updates, _axis(-1), _axis(-1))),
    KnownMistake(_WRONG_AXIS, "the new keys are appended along axis 1, the heads: positions are axis -2 of (B, "
                 "n_kv_heads, T, d_head)", lambda right, n, updates: _record(n, updates, _axis(1), _axis(1))),
    KnownMistake("one entry for every layer", "every layer writes into the same entry: each layer has its own keys and "
                 "values — keep one entry per layer, keys[layer] and values[layer]",
                 lambda right, n, updates: _record(n, updates, one_entry=True)),
    KnownMistake("values not appended", "the keys are appended but the values are replaced by the new ones: append "
                 "both, torch.cat([cached, new], dim=-2) for the values too",
                 lambda right, n, updates: _record(n, updates, values_join=_kept)),
    KnownMistake("only the new keys returned", "update returns only the new keys and values: return everything the "
                 "layer now holds, cached and new, which is what the attention must attend",
                 lambda right, n, updates: _record(n, updates, returns_new=True)),
])


def _same(a: object, b: object) -> bool:
    """Equal tensors (shape and every value), sequences of equal items, or equal values."""
    tensors = isinstance(a, Tensor), isinstance(b, Tensor)
    if any(tensors):
        return all(tensors) and a.shape == b.shape and torch.equal(a, b)
    sequences = isinstance(a, (tuple, list)), isinstance(b, (tuple, list))
    if all(sequences):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


def last_returned(suspects: Mapping[str, Callable[[], object]], part: int, held: object,
                  layer: int = 0) -> dict[str, Callable[[], object]]:
    """For a visible check: the suspects of what the last update returned, its keys (``part`` 0) or its values (1),
    each kept only where the mistake leaves ``layer`` holding the keys the learner's cache holds, ``held`` (a cache
    that keeps only the new keys and one that returns only them return the same)."""
    def take(record: Any) -> object:
        return record[0][-1][part] if _same(record[1][layer], held) else None
    return {text: (lambda give=give: take(give())) for text, give in suspects.items()}


#: Of the cache's lists (``layer``: the layer never updated; ``found``: what its entries are).
ONE_LIST = KnownMistake("one list for keys and values", "cache.keys and cache.values are one and the same list, so "
                        "each layer's values overwrite its keys — make two lists, `self.keys = [None] * n_layers` and "
                        "`self.values = [None] * n_layers` (not `self.keys = self.values = ...`)")
ENTRIES_NOT_NONE = KnownMistake("entries not None before the first update", "layer {layer} was never updated, yet its "
                                "entries are {found}: an entry is None until its layer's first update")


# ================================================================ KVCache.length
# Cases: (n_layers, updates) as above, every layer updated in turn. A mistake gives the lengths read before the
# first update and after each one. No ``right`` is needed.

def _lengths(n_layers: int, updates: Sequence[tuple[int, Tensor, Tensor]],
             read: Callable[[list[int], int], int]) -> list[int]:
    """``read(positions per layer, updates so far)`` before the first update and after each one."""
    seen = [0] * n_layers
    found = [read(seen, 0)]
    for i, (layer, k, _) in enumerate(updates):
        seen[layer] += k.shape[-2]
        found.append(read(seen, i + 1))
    return found


LENGTHS = Mistakes([
    KnownMistake("length counts updates, not positions", "it counts the calls to update; T_cache is the number of "
                 "positions cached, the length of axis -2 of a layer's keys",
                 lambda right, n, updates: _lengths(n, updates, lambda seen, calls: calls)),
    KnownMistake("length summed over the layers", "it adds up the positions of every layer; every layer holds the same "
                 "positions, so T_cache is one layer's count, that of layer 0",
                 lambda right, n, updates: _lengths(n, updates, lambda seen, calls: sum(seen))),
    KnownMistake("length read from the last layer", "it reads the last layer, which the model fills last: while a step "
                 "runs, layer 0 already holds the new positions — read layer 0's keys",
                 lambda right, n, updates: _lengths(n, updates, lambda seen, calls: seen[-1])),
])


# ================================================================ GroupedQueryAttention
# Cases: (x, attn, n_heads, n_kv_heads) for the forward pass, (x, attn, n_heads, n_kv_heads, chunks) with a cache:
# attn holds the four projections w_q, w_k, w_v, w_o (the learner's module in a visible check, the reference's in the
# judge); chunks are the lengths fed one after another through one cache. right(q, k, v, mask) is Chapter 1's
# attention on the heads: softmax(q kᵀ / √d_head) v, mask True = may attend.

def _heads(t: Tensor, n: int) -> Tensor:
    """(B, T, n * d_head) -> (B, n, T, d_head)."""
    return t.unflatten(-1, (n, t.shape[-1] // n)).transpose(1, 2)


def _grouped(right: Callable[..., Tensor], x: Tensor, attn: Any, n_heads: int, n_kv: int,
             chunks: Sequence[int] = (), *, kv_head: Callable[[Tensor, int, int], Tensor] | None = None,
             causal: bool = True, scale: float = 1.0, project: bool = True, offset: bool = True,
             cached: bool = True) -> Tensor:
    """The attention with one thing done otherwise (the keyword that says which), fed ``chunks`` through a cache."""
    group = n_heads // n_kv
    outs, keys, values, start = [], None, None, 0
    for t in chunks or (x.shape[1],):
        piece = x[:, start:start + t]
        start += t
        q, k, v = _heads(attn.w_q(piece), n_heads) * scale, _heads(attn.w_k(piece), n_kv), _heads(attn.w_v(piece), n_kv)
        if cached and keys is not None:
            k, v = torch.cat([keys, k], dim=-2), torch.cat([values, v], dim=-2)
        keys, values = k, v
        index = (kv_head or (lambda h, group, n_kv: h // group))(torch.arange(n_heads), group, n_kv)
        t_k = k.shape[-2]
        mask = torch.ones(t, t_k, dtype=torch.bool).tril(t_k - t if offset else 0) if causal else None
        merged = right(q, k[:, index], v[:, index], mask).transpose(1, 2).flatten(2)  # (B, t, d_model)
        outs.append(attn.w_o(merged) if project else merged)
    return torch.cat(outs, dim=-2)  # (B, T, width): the chunks' positions side by side


def _d_model_message(x: Tensor, attn: Any, n_heads: int, *rest: Any) -> str:
    return (f"the scores are scaled by √d_model = √{x.shape[-1]} instead of √d_head = "
            f"√{x.shape[-1] // n_heads}")


GROUPED = Mistakes([
    KnownMistake("repeat instead of repeat_interleave", "query head h reads key/value head h % n_kv_heads: "
                 "`k.repeat(1, group, 1, 1)` tiles the heads (0, 1, 0, 1 …), but a group is *consecutive* query "
                 "heads, so head h reads head h // group — use `repeat_interleave(group, dim=1)`, or reshape the "
                 "queries into groups", lambda right, x, attn, n, n_kv, *rest: _grouped(
                     right, x, attn, n, n_kv, kv_head=lambda h, group, n_kv: h % n_kv)),
    KnownMistake("no causal mask", "no causal mask: every token attends the tokens after it — mask with causal_mask(T, "
                 "T_k)", lambda right, x, attn, n, n_kv, *rest: _grouped(right, x, attn, n, n_kv, causal=False)),
    KnownMistake("scaled by √d_model instead of √d_head", _d_model_message,
                 lambda right, x, attn, n, n_kv, *rest: _grouped(right, x, attn, n, n_kv,
                                                                  scale=math.sqrt(1 / n))),
    KnownMistake("w_o not applied", "the heads are merged but not projected: the output goes through w_o",
                 lambda right, x, attn, n, n_kv, *rest: _grouped(right, x, attn, n, n_kv, project=False)),
])

GROUPED_CACHED = Mistakes([
    KnownMistake("mask without the cache offset", "the mask has no offset: new query i attends only keys 0..i of the "
                 "whole sequence, not the cached keys before it — use causal_mask(T, T_cache + T), which lines the "
                 "last query up with the last key",
                 lambda right, x, attn, n, n_kv, chunks: _grouped(right, x, attn, n, n_kv, chunks, offset=False)),
    KnownMistake("cache not used", "each chunk attends only its own keys: append them to the cache, k, v = "
                 "cache.update(layer, k, v), and attend everything it returns",
                 lambda right, x, attn, n, n_kv, chunks: _grouped(right, x, attn, n, n_kv, chunks, cached=False)),
    *GROUPED,
])

#: Of a cache given to an attention, a block or a model (``raised``: what the call raised; ``entry``, ``layer``: where
#: the keys went and where they belong; ``found``, ``n_kv``, ``shape``: the keys cached and those expected).
NO_OFFSET_CRASH = KnownMistake("mask without the cache offset", "with a cache the scores are (T, T_cache + T), so the "
                               "mask must be causal_mask(T, T_cache + T), whose offset lines the new queries up with "
                               "the cached keys; causal_mask(T) is (T, T)")
LAYER_IGNORED = KnownMistake("layer argument ignored", "the keys went into the cache's entry {entry}, not entry "
                             "{layer}: pass `layer` on to cache.update(layer, k, v)")
REPEATED_HEADS_CACHED = KnownMistake("repeated heads cached", "the cache holds keys {found}, one per query head; it "
                                     "should hold the n_kv_heads = {n_kv} key/value heads, {shape} — cache k and v "
                                     "before expanding them to the query heads, or grouped-query attention saves no "
                                     "memory")

#: Of the projections' sizes (``call``, ``name``: the module and its layer; the sizes as named).
W_KV_OF_D_MODEL = KnownMistake("w_k and w_v of width d_model", "{call}.{name} maps {d} -> {d} features: it makes "
                               "n_kv_heads = {n_kv} heads of d_head = {d_head}, {width} features, the whole point of "
                               "sharing them — nn.Linear(d_model, n_kv_heads * d_head)")
KV_HEADS_DEFAULT = KnownMistake("n_kv_heads=None not taken as n_heads", "{call}.{name} maps {found} features, expected "
                                "{d} -> {d}: n_kv_heads=None means one key/value head per query head, n_kv_heads = "
                                "n_heads = {n_heads}")

#: Of the attention's dropout (``call``: the module with its dropout).
ATTENTION_DROPOUT_IN_EVAL = KnownMistake("dropout applied in eval mode", "{call} in eval mode gives another output "
                                         "than with dropout=0.0: dropout acts in training mode only — use an "
                                         "nn.Dropout module, or F.dropout(..., training=self.training)")
ATTENTION_DROPOUT_IGNORED = KnownMistake("dropout ignored", "{call} in training mode gives the output without "
                                         "dropout: apply self.dropout to the attention weights, before they multiply v")


# ================================================================ GPTBlock
# Cases: (x, attn, ff, norm1, norm2) for the forward pass, (x, attn, ff, norm1, norm2, chunks) with a cache: the
# block's parts (the learner's in a visible check, the reference's in the judge), attn called as attn(h). No
# ``right`` is needed.

def _sublayers(x: Tensor, attn: Any, ff: Any, norms: Sequence[Any], *, post_norm: bool = False,
               residual: tuple[bool, bool] = (True, True), from_normed: bool = False) -> Tensor:
    """The two sublayers one after the other, each with its LayerNorm, put together as a mistake would."""
    for f, norm, keep in zip((attn, ff), norms, residual, strict=True):
        if post_norm:
            x = norm(x + f(x)) if keep else norm(f(x))
        else:
            h = norm(x)
            x = ((h if from_normed else x) + f(h)) if keep else f(h)
    return x


BLOCK = Mistakes([
    KnownMistake("post-norm instead of pre-norm", "it normalises after adding the residual, LN(x + f(x)): that is "
                 "Chapter 6's post-norm; a GPT block is pre-norm, x + f(LN(x))",
                 lambda right, x, attn, ff, n1, n2, *rest: _sublayers(x, attn, ff, (n1, n2), post_norm=True)),
    KnownMistake("residual missing around the attention", "the attention's output is not added back to its input: "
                 "x + attn(norm1(x))",
                 lambda right, x, attn, ff, n1, n2, *rest: _sublayers(x, attn, ff, (n1, n2), residual=(False, True))),
    KnownMistake("residual missing around the feed-forward network", "the feed-forward output is not added back to "
                 "its input: h + ff(norm2(h))",
                 lambda right, x, attn, ff, n1, n2, *rest: _sublayers(x, attn, ff, (n1, n2), residual=(True, False))),
    KnownMistake("residual taken from the normalised x", "the residual adds the normalised input, LN(x) + f(LN(x)); "
                 "pre-norm adds the raw input, x + f(LN(x))",
                 lambda right, x, attn, ff, n1, n2, *rest: _sublayers(x, attn, ff, (n1, n2), from_normed=True)),
    KnownMistake("norm1 and norm2 swapped", "norm2 serves the attention and norm1 the feed-forward network: norm1 "
                 "comes first", lambda right, x, attn, ff, n1, n2, *rest: _sublayers(x, attn, ff, (n2, n1))),
])


def _alone(x: Tensor, attn: Any, ff: Any, norms: Sequence[Any], chunks: Sequence[int]) -> Tensor:
    """Each chunk of ``x`` through the two sublayers alone, attending only itself, side by side."""
    return torch.cat([_sublayers(piece, attn, ff, norms) for piece in x.split(list(chunks), dim=1)], dim=1)


BLOCK_CACHED = Mistakes([
    KnownMistake("cache not passed on", "each chunk attends only itself: pass the cache and the layer on to the "
                 "attention, self.attn(self.norm1(x), cache, layer)",
                 lambda right, x, attn, ff, n1, n2, chunks: _alone(x, attn, ff, (n1, n2), chunks)),
    *BLOCK,
])

#: Of dropout in a block or a model (``call``: the module, its dropout and its input).
DROPOUT_IN_EVAL = KnownMistake("dropout applied in eval mode", "{call} gives another output than without dropout: "
                               "dropout acts in training mode only — nn.Dropout modules, or F.dropout(..., "
                               "training=self.training)")
DROPOUT_NEVER_ACTS = KnownMistake("dropout ignored", "{call} gave the same output under two random seeds: the "
                                  "dropout it was given never acts — pass it on (nn.Dropout(dropout), and dropout= to "
                                  "the parts that take it)")


# ================================================================ GPT
# Cases: (model, tokens) for the forward pass, (model, tokens, chunks) with a cache: model holds the parts tok_embed,
# pos_embed, blocks, norm and out (the learner's model in a visible check, the reference's in the judge), each block
# called as block(x). No ``right`` is needed.

def _logits(model: Any, tokens: Tensor, positions: Tensor | None = None, *, scaled: bool = False,
            final_norm: bool = True, add_positions: bool = True) -> Tensor:
    """The model's parts run on ``tokens`` at ``positions`` (default 0 .. T - 1) with one thing done otherwise."""
    x = model.tok_embed(tokens)
    if scaled:
        x = x * math.sqrt(x.shape[-1])
    if add_positions:
        x = x + model.pos_embed(torch.arange(tokens.shape[1]) if positions is None else positions)
    for block in model.blocks:
        x = block(x)
    return model.out(model.norm(x) if final_norm else x)


def _scaled_message(model: Any, tokens: Tensor, *rest: Any) -> str:
    return (f"the token embeddings are multiplied by √d_model = {math.sqrt(model.tok_embed.weight.shape[-1]):g}, as "
            f"Chapter 6's Transformer did; a GPT adds E[tokens] and the positions as they are")


MODEL = Mistakes([
    KnownMistake("missing final LayerNorm", "the last block's output goes to the output layer without the final "
                 "LayerNorm: pre-norm blocks leave their output unnormalised, so the model ends with self.norm",
                 lambda right, model, tokens, *rest: _logits(model, tokens, final_norm=False)),
    KnownMistake("positions not added", "no position is added: x = tok_embed(tokens) + pos_embed(positions)",
                 lambda right, model, tokens, *rest: _logits(model, tokens, add_positions=False)),
    KnownMistake("embeddings scaled by √d_model", _scaled_message,
                 lambda right, model, tokens, *rest: _logits(model, tokens, scaled=True)),
])


def _each_chunk(model: Any, tokens: Tensor, chunks: Sequence[int]) -> Tensor:
    """Each chunk through the model alone, at its own positions: no chunk attends the ones before it."""
    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    return torch.cat([_logits(model, tokens[:, s:s + t], torch.arange(s, s + t)) for s, t in zip(starts, chunks,
                                                                                                  strict=True)], dim=1)


MODEL_CACHED = Mistakes([
    KnownMistake("positions restart at 0 with a cache", "the positions restart at 0 for every chunk: with a cache, the "
                 "new tokens sit at positions T_cache .. T_cache + T - 1, cache.length onwards",
                 lambda right, model, tokens, chunks: _logits(model, tokens, torch.cat([torch.arange(t)
                                                                                         for t in chunks]))),
    KnownMistake("cache not passed on", "the cache is not passed on to the blocks, so each chunk attends only itself: "
                 "block(x, cache, layer) for every layer",
                 lambda right, model, tokens, chunks: _each_chunk(model, tokens, chunks)),
    *MODEL,
])

#: Of the model's parts (``call``: the model; ``name``: the table; ``std``: its weights' standard deviation; ``kind``:
#: what blocks is; ``found``: what norm is).
EMBEDDINGS_AT_STD_1 = KnownMistake("embeddings left at std 1", "{call}.{name} has weights of std {std:.2f}, "
                                   "nn.Embedding's default: start them at std 0.02, nn.init.normal_(weight, std=0.02), "
                                   "as GPT-2 does, so that the first logits are near 0")
BLOCKS_IN_A_LIST = KnownMistake("blocks not registered", "{call}.blocks is a Python {kind}: its blocks' parameters are "
                                "not registered, so model.parameters() leaves them out and no optimiser trains them — "
                                "nn.ModuleList([...])")
CONFIG_NOT_KEPT = KnownMistake("config not kept", "{call}.config is not the config it was given: keep it, self.config "
                               "= config (generate reads model.config.n_layers and max_len)")
NO_FINAL_NORM = KnownMistake("missing final LayerNorm", "{call}.norm is {found}: the pre-norm blocks leave their "
                             "output unnormalised, so the model ends with a final nn.LayerNorm(d_model) before the "
                             "output layer")
UNTIED = KnownMistake("untied output layer", "{call}.out has a weight of its own: tie it to the token embedding, "
                      "self.out.weight = self.tok_embed.weight, one (vocab, d_model) Parameter that reads tokens in "
                      "and scores them out")
OUTPUT_BIAS = KnownMistake("output layer with a bias", "{call}.out has a bias: a token's logit is the dot product of "
                           "the final vector with its embedding, nn.Linear(d_model, vocab, bias=False)")

#: Of training (``loss``, ``ln_v``: the untrained model's loss and ln V; ``part``: the part training cannot reach;
#: ``initial``: the untrained model's loss).
SEES_THE_FUTURE = KnownMistake("no causal mask", "changing the second half of a sequence changed the logits of its "
                               "first half, so every position sees the tokens after it — in training it copies the "
                               "next token instead of predicting it. Mask with causal_mask(T, T_cache + T)")
FIRST_LOSS_HIGH = KnownMistake("embeddings left at std 1", "{call} has a loss of {loss:.2f}, far above ln V = "
                               "{ln_v:.2f}: its logits are not near 0 — initialise tok_embed and pos_embed with std "
                               "0.02, nn.init.normal_(weight, std=0.02)")
NOT_COPYING_LARGE_EMBEDDINGS = KnownMistake("embeddings left at std 1", "untrained, its loss is {initial:.2f}, far "
                                            "above ln V = {ln_v:.2f} — initialise tok_embed and pos_embed with std "
                                            "0.02")
PART_UNREGISTERED = KnownMistake("blocks not registered", "GPT.{part} is not trained — its parameters are not among "
                                 "model.parameters(), so the optimiser never sees them — keep modules in "
                                 "nn.ModuleList, not a Python list")
PART_FROZEN = KnownMistake("parameters not trained", "GPT.{part} is not trained — its parameters have "
                           "requires_grad=False, so they never train — nn.Embedding.from_pretrained freezes its table "
                           "unless freeze=False; make the table with nn.Embedding(...)")
PART_WITHOUT_GRADIENT = KnownMistake("parameters not trained", "GPT.{part} is not trained — no gradient of the loss "
                                     "reaches it — something detaches it: `.detach()`, `.data`, `torch.no_grad()`, "
                                     "or a new tensor built from it")


# ================================================================ generate
# Cases: (model, prompt, max_new_tokens), greedy (temperature 0). right(model, prompt, max_new_tokens) is the tokens
# generate gives: the prompt, then each next token read from the logits of the last position.

def _greedy_at(model: Any, prompt: Tensor, new: int, position: int) -> Tensor:
    """Greedy decoding that reads the next token from the logits at ``position``."""
    tokens = prompt
    for _ in range(new):
        tokens = torch.cat([tokens, model(tokens)[:, position].argmax(-1, keepdim=True)], dim=1)
    return tokens


GENERATE = Mistakes([
    KnownMistake("prompt dropped", "it returns only the new tokens: return the prompt followed by them, (B, T0 + "
                 "max_new_tokens)", lambda right, model, prompt, new: right(model, prompt, new)[:, prompt.shape[1]:]),
    KnownMistake("one token too many", "it adds one token more than max_new_tokens",
                 lambda right, model, prompt, new: right(model, prompt, new + 1)),
    KnownMistake("one token too few", "it adds one token fewer than max_new_tokens",
                 lambda right, model, prompt, new: right(model, prompt, new - 1),
                 when=lambda model, prompt, new: new > 0),
    KnownMistake("logits of the first position", "each step reads the logits of the first position: the next token is "
                 "predicted by the last one, logits[:, -1]",
                 lambda right, model, prompt, new: _greedy_at(model, prompt, new, 0)),
])

#: Of what generate gives the model and leaves of it (``call``: the call; ``dtype``: what it returned).
TOKENS_NOT_INT64 = KnownMistake("token ids not int64", "{call} returned {dtype} — token ids are a LongTensor (int64)")
CACHE_WITHOUT_USE_CACHE = KnownMistake("cache used without use_cache", "{call} gave the model a cache: without "
                                       "use_cache every step feeds the whole sequence and no cache — make a KVCache "
                                       "only when use_cache is True")
LEFT_IN_TRAINING = KnownMistake("model left in training mode", "{call} ran the model in training mode: call "
                                "model.eval() first (dropout would make the tokens random), and give back the mode it "
                                "had")
GRADIENTS_TRACKED = KnownMistake("gradients tracked while generating", "{call} ran the model with gradients tracked: "
                                 "every step would keep its graph in memory — generate under torch.no_grad() (the "
                                 "stub's decorator) or torch.inference_mode()")
TRAINING_NOT_RESTORED = KnownMistake("training mode not restored", "{call} left the model in eval mode, though it "
                                     "came in training mode: note the mode it came in and give it back, so that "
                                     "training can go on after a sample")
FORCED_TO_TRAINING = KnownMistake("mode forced to training", "{call} left the model in training mode, though it came "
                                  "in eval mode: give it back in the mode it came in, whichever it was, not always "
                                  "in training mode")

#: Of the calls with a cache.
USE_CACHE_IGNORED = KnownMistake("use_cache ignored", "it never gave the model a cache — with use_cache, make one "
                                 "KVCache(model.config.n_layers) and pass it at every step")
NEW_CACHE_EVERY_STEP = KnownMistake("new cache at every step", "a new, empty cache at every step forgets what the "
                                    "last step cached — make the cache once, before the loop")
WHOLE_SEQUENCE_CACHED = KnownMistake("whole sequence fed with a cache", "once the cache holds the prompt, feed only "
                                     "the newest token, tokens[:, -1:] — feeding the whole sequence again caches it "
                                     "twice")

#: Of sampling through generate.
GENERATE_ARGMAX = KnownMistake("argmax instead of a draw", "two generators gave the greedy tokens — asked to sample, "
                               "it took the argmax: draw each token with sample_next(logits[:, -1], temperature, "
                               "top_k, top_p, generator)")
GENERATOR_NOT_PASSED = KnownMistake("generator not passed on", "two generators seeded alike gave different tokens — "
                                    "pass the generator on to sample_next")
OPTIONS_NOT_PASSED = KnownMistake("sampling options not passed on", "pass temperature, top_k and top_p on to "
                                  "sample_next")


# ================================================================ concept checks
# Cases: (n_layers, batch, n_heads, n_kv_heads, length, d_head) for kv_cache_elements. The mistakes need no right
# answer.

def _one(n_layers: int, batch: int, n_heads: int, n_kv: int, length: int, d_head: int) -> int:
    """The numbers one of keys or values takes, over every layer."""
    return n_layers * batch * n_kv * length * d_head


KV_CACHE_ELEMENTS = Mistakes([
    KnownMistake("only the keys counted", "the cache keeps the values as well as the keys: twice as many numbers",
                 lambda right, *case: _one(*case)),
    KnownMistake("n_heads instead of n_kv_heads",
                 lambda n_layers, batch, n_heads, n_kv, length, d_head: f"only the n_kv_heads = {n_kv} key/value heads "
                 f"are cached; the n_heads = {n_heads} query heads share them — that is what grouped-query attention "
                 f"saves", lambda right, *case: 2 * _one(*case) // case[3] * case[2]),
    KnownMistake("one layer counted",
                 lambda n_layers, *rest: f"every one of the {n_layers} layers keeps its own keys and values",
                 lambda right, *case: 2 * _one(*case) // case[0]),
    KnownMistake("queries cached too", "queries are never cached: each is used once, by the step that makes it",
                 lambda right, *case: 2 * _one(*case) + _one(*case) // case[3] * case[2]),
])
