"""Judges of Chapter 7 (``07_gpt``), against :mod:`solutions.gpt`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.gpt`. Each ``Suspect`` recomputes, on the
same inputs, what one plausible mistake would return, so that a failing
learner is told which mistake it looks like. The reference modules are loaded
with the same seeded weights the probes copy into the learner's (with the
probes' own loaders), and run on the probes' own cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attention_course.testing import (
    MODIFIED_IN_PLACE,
    NO_RETURN,
)
from autograder.checks.core import Mistake, Observations, Raised
from autograder.checks.gpt import (
    BLOCK_CACHE,
    BLOCK_FORWARD,
    BLOCK_TRAINING,
    COPIES_EVAL,
    COPY_LENGTH,
    COPY_VOCAB,
    DRAWS,
    GENERATE_CACHE_CASES,
    GENERATE_TOKENS_CASES,
    GQA_CACHE,
    GQA_DROPOUT,
    GQA_ERRORS,
    GQA_FORWARD,
    GQA_PROJECTIONS,
    GREEDY_ROWS,
    KV_CACHE_ELEMENTS_CASES,
    KV_LENGTH_SCRIPT,
    KV_UPDATE,
    MODEL_CACHE,
    MODEL_FORWARD,
    MODEL_TOO_LONG,
    MODEL_TRAINING,
    SAMPLE_ERRORS,
    SAMPLE_TEMPERATURE,
    SAMPLE_TOP_K,
    SAMPLE_TOP_P,
    SQUARE_ROWS,
    TOO_LONG,
    AttnCase,
    BlockCase,
    GenerateCase,
    ModelCase,
    ProbeCache,
    Rigged,
    attention_weights,
    build_attention,
    build_block,
    load_model,
)
from autograder.judges.core import (
    Compare,
    Suspect,
    describe,
    judge,
    judge_answers,
    judge_cases,
    judge_tensor,
    judge_value_error,
    register,
    told,
    unnamed,
)
from solutions import gpt as ref

NEG_INF = float("-inf")
NO_CAUSAL_MASK = "no causal mask"
NO_OFFSET = "mask without the cache offset"
DROPOUT_IN_EVAL = "dropout applied in eval mode"
ARGMAX = "argmax instead of a draw"


# ================================================================ sample_next

def _filtered(row: Tensor, temperature: float, top_k: int | None, top_p: float | None, *, after_softmax: bool = False,
              times: bool = False, k_shift: int = 0, crossing: bool = True, p_first: bool = False,
              ignore_k: bool = False, ignore_p: bool = False, exactly_k: bool = False) -> Tensor:
    """The probabilities ``sample_next`` draws from, exactly, with one named mistake or none."""
    logits = row.double()
    scaled = logits if after_softmax else (logits * temperature if times else logits / temperature)

    def nucleus(values: Tensor) -> Tensor:
        probs, order = torch.softmax(values, -1).sort(descending=True)
        before = probs.cumsum(-1) - probs
        keep_sorted = before < top_p if crossing else probs.cumsum(-1) < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        return values.masked_fill(~keep, NEG_INF)

    raw_nucleus = torch.isfinite(nucleus(logits)) if top_p is not None else None
    if top_k is not None and not ignore_k:
        k = max(1, min(top_k + k_shift, scaled.shape[-1]))
        top = scaled.topk(k)
        if exactly_k:  # the indices topk returns, ties with the k-th beyond them dropped
            scaled = torch.full_like(scaled, NEG_INF).scatter(-1, top.indices, top.values)
        else:
            scaled = scaled.masked_fill(scaled < top.values[-1], NEG_INF)
    if top_p is not None and not ignore_p:
        scaled = scaled.masked_fill(~raw_nucleus, NEG_INF) if p_first else nucleus(scaled)
    return torch.softmax(scaled, -1)


def _sampling_suspects(row: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> list[Suspect]:
    f = lambda **kw: lambda: _filtered(row, temperature, top_k, top_p, **kw)  # noqa: E731
    suspects = []
    if temperature != 1.0:
        suspects += [
            Suspect(f"the draws follow softmax(logits), untouched by the temperature {temperature:g}: divide the "
                    f"logits by τ before the softmax (dividing the probabilities by τ changes nothing once they are "
                    f"renormalised)", "temperature applied after the softmax", f(after_softmax=True)),
            Suspect(f"the logits are multiplied by the temperature {temperature:g}: divide them by it (τ below 1 "
                    f"sharpens, above 1 flattens)", "logits multiplied by the temperature", f(times=True)),
        ]
    if top_k is not None:
        suspects += [
            Suspect(f"it keeps {top_k - 1} tokens, one fewer than top_k={top_k}: keep every logit >= the k-th "
                    f"largest, `logits < kth` is what gets -inf", "top-k keeps k-1", f(k_shift=-1)),
            Suspect(f"it keeps {top_k + 1} tokens, one more than top_k={top_k}", "top-k keeps k+1", f(k_shift=1)),
            Suspect(f"every token can be drawn: top_k={top_k} was not applied", "top_k ignored", f(ignore_k=True)),
        ]
        if int((row.double() / temperature >= row.double().div(temperature).topk(top_k).values[-1]).sum()) > top_k:
            suspects.append(Suspect(f"exactly top_k={top_k} tokens are kept, though others tie with the k-th "
                                    f"largest logit: keep every logit >= the k-th largest (`logits < kth` gets -inf), "
                                    f"not the k indices torch.topk returns", "top-k drops ties with the k-th",
                                    f(exactly_k=True)))
    if top_p is not None:
        suspects += [
            Suspect(f"the token whose probability carries the running sum past top_p={top_p} is dropped: the "
                    f"nucleus is the smallest set whose mass *reaches* top_p, so keep a token while the mass "
                    f"before it is below top_p", "top-p drops the token that crosses p", f(crossing=False)),
            Suspect(f"every token can be drawn: top_p={top_p} was not applied", "top_p ignored", f(ignore_p=True)),
        ]
        if temperature != 1.0 or top_k is not None:
            suspects.append(Suspect("the nucleus was measured on the raw logits, before the temperature and top-k: "
                                    "divide by τ, keep the top k, then take the nucleus of what is left",
                                    "top-p applied first", f(p_first=True)))
    return suspects


def _judge_frequencies(observed: Any, row: Tensor, temperature: float, top_k: int | None, top_p: float | None,
                       seed: int) -> None:
    """The frequencies drawn against the exact probabilities of the filtered softmax (the reference's draws pass
    too: tests/test_names.py judges the reference on every check)."""
    what = (f"sample_next on {DRAWS} copies of the logits {[round(x, 2) for x in row.tolist()]}, "
            f"temperature={temperature:g}, top_k={top_k}, top_p={top_p}")
    if isinstance(observed, Raised):
        if top_k is not None and f"size of tensor b ({DRAWS})" in observed.message:
            raise Mistake(f"{what} {observed.describe()} — the k-th largest logit of shape (B,) is compared with the "
                          f"columns, not the rows: keep its shape (B, 1), values[:, -1:] or keepdim=True",
                          "threshold of another row")
        raise Mistake(told(observed, what))
    expected = _filtered(row, temperature, top_k, top_p)
    if _same_draws(observed, expected):
        return
    if torch.equal(observed, torch.nn.functional.one_hot(row.argmax(), row.shape[0]).double()):
        raise Mistake(f"{what}: every row gave the most likely token — draw with torch.multinomial(probs, 1, "
                      f"generator=generator); only temperature=0 is the argmax", ARGMAX)
    for suspect in _sampling_suspects(row, temperature, top_k, top_p):
        if _same_draws(observed, suspect.produce()):
            raise Mistake(f"{what}: {suspect.message}", suspect.name)
    drawn = (observed > 0).nonzero().flatten().tolist()
    allowed = (expected > 0).nonzero().flatten().tolist()
    raise Mistake(f"{what}: it drew the tokens {drawn} with frequencies {[round(x, 3) for x in observed.tolist()]}; "
                  f"expected only {allowed}, with probabilities {[round(x, 3) for x in expected.tolist()]} — "
                  f"temperature first, "
                  f"then top-k, then the nucleus, then one draw from the softmax of what is left")


def _same_draws(observed: Tensor, probs: Tensor) -> bool:
    """Draws from ``probs``: no token of probability 0 drawn, every frequency within 0.04 of its probability (the
    checks draw 6000 times: a frequency's standard error is below 0.0065)."""
    return bool(observed[probs == 0].sum() == 0 and (observed - probs).abs().max() <= 0.04)


def _judge_square(got: Any, option: str) -> None:
    """Every row of SQUARE_ROWS (8 rows of 8 logits) with ``option`` (top_k=1 or top_p=0.05) must give its argmax."""
    what = f"sample_next(logits of shape (8, 8), each row's largest logit elsewhere, {option})"
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    expected = SQUARE_ROWS.argmax(dim=-1)
    if not isinstance(got, Tensor) or tuple(got.shape) != (8,):
        raise Mistake(unnamed(f"{what} should return 8 token ids, one per row; got {describe(got)}"))
    if torch.equal(got.long(), expected):
        return
    raise Mistake(f"{what} gave {got.tolist()}, expected each row's most likely token, {expected.tolist()}: a row's "
                  f"filter must use that row's own threshold — keep the (B, 1) shape, `values[:, -1:]` or "
                  f"keepdim=True; a (B,) threshold is compared with the columns, not the rows",
                  "threshold of another row")


def _judge_draws(check: Any, square: str | None = None) -> Callable[[Observations], None]:
    def judge_all(obs: Observations) -> None:
        pairs = [(got, lambda got, case=case: _judge_frequencies(got, *case))
                 for case, got in zip(check.cases, obs[check.key], strict=True)]
        if square is not None:
            pairs.append((obs["square"], lambda got: _judge_square(got, square)))
        judge_cases(pairs)

    return judge_all


register("sample_next_temperature", _judge_draws(SAMPLE_TEMPERATURE))
register("sample_next_top_k", _judge_draws(SAMPLE_TOP_K, "top_k=1"))
register("sample_next_top_p", _judge_draws(SAMPLE_TOP_P, "top_p=0.05"))


def _judge_greedy(obs: Observations) -> None:
    for key, options in (("greedy", ""), ("filtered", ", top_k=3, top_p=0.5")):
        what = f"sample_next(logits of shape (5, 9), temperature=0{options})"
        got = obs[key]
        if isinstance(got, Raised):
            about_zero = got.type == "ZeroDivisionError" or any(
                word in got.message for word in ("inf", "nan", "division", "zero"))
            raise Mistake(f"{what} {got.describe()} — temperature 0 is greedy decoding: return the argmax of each "
                          f"row before dividing by the temperature",
                          "temperature 0 divides by zero" if about_zero else None)
        expected = GREEDY_ROWS.argmax(dim=-1)
        if not isinstance(got, Tensor) or tuple(got.shape) != (5,):
            raise Mistake(unnamed(f"{what} should return 5 token ids, one per row; got {describe(got)}"))
        if not torch.equal(got.long(), expected):
            raise Mistake(f"{what} gave {got.tolist()}, expected the argmax of each row, {expected.tolist()} — "
                          f"temperature 0 is greedy decoding, no draw, whatever the filters")


register("sample_next_greedy", _judge_greedy)


def _judge_generator(obs: Observations) -> None:
    what = "sample_next(logits of shape (40, 6), temperature=1.0, generator=...)"
    got = obs["draws"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    first, again, other = got["first"], got["again"], got["other"]
    if not all(isinstance(t, Tensor) and tuple(t.shape) == (40,) for t in (first, again, other)):
        raise Mistake(unnamed(f"{what} should return 40 token ids, one per row; got {describe(first)}"))
    if got["global_used"]:
        raise Mistake(f"{what} drew from PyTorch's global random state instead of the generator it was given: pass "
                      f"generator=generator to torch.multinomial, so that the same generator state gives the same "
                      f"tokens", "global RNG instead of the generator")
    if not torch.equal(first, again):
        raise Mistake(f"{what}: two generators seeded alike gave different tokens — draw with the generator given")
    if torch.equal(first, other):
        raise Mistake(f"{what}: generators seeded 5 and 6 gave the same 40 tokens — is anything drawn at all? Only "
                      f"temperature=0 is the argmax", ARGMAX)
    what = "sample_next(logits of shape (40, 6), temperature=1.0) without a generator, after torch.manual_seed"
    got = obs["default"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if not all(isinstance(t, Tensor) and tuple(t.shape) == (40,) for t in got):
        raise Mistake(unnamed(f"{what} should return 40 token ids; got {describe(got[0])}"))
    if not torch.equal(got[0], got[1]) or torch.equal(got[0], got[2]):
        raise Mistake(f"{what}: the same global seed should give the same tokens and another seed others — "
                      f"generator=None means PyTorch's global random state: pass generator=generator on as it is",
                      "generator=None not the global RNG")


register("sample_next_generator", _judge_generator)


def _judge_sample_contract(obs: Observations) -> None:
    what = "sample_next(logits of shape (1, 8), generator=...)"
    got = obs["one_row"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if not isinstance(got, Tensor) or tuple(got.shape) != (1,) or got.dtype != torch.int64:
        squeezed = isinstance(got, Tensor) and got.dim() == 0
        raise Mistake(f"{what} returned {describe(got)}, not a LongTensor of shape (1,): one token id per row, "
                      f"even for one row" + (" — `.squeeze()` takes the batch axis away too: take the draws' column "
                                             "with `[:, 0]` or `.squeeze(-1)`" if squeezed else ""),
                      "batch axis squeezed away" if squeezed else None)
    what = "sample_next(float64 logits of shape (5, 7), temperature=0.5, top_k=4, top_p=0.9)"
    got = obs["float64"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if not got["untouched"]:
        raise Mistake(f"{what} changed the logits it was given: the caller's tensor (in generate, the model's "
                      f"output) must stay as it was — `logits = logits / temperature`, `masked_fill` or `torch.where`, "
                      f"not `/=`, `masked_fill_` or `logits[...] = -inf`", MODIFIED_IN_PLACE)
    drawn = got["drawn"]
    if not (isinstance(drawn, dict) and drawn.get("dtype") == "torch.int64" and tuple(drawn.get("shape", ())) == (5,)):
        raise Mistake(unnamed(f"{what} should return a LongTensor of shape (5,); got {drawn}"))
    for (call, _, _), raised in zip(SAMPLE_ERRORS, obs["errors"], strict=True):
        judge_value_error(raised, f"sample_next with {call}", ())


register("sample_next_contract", _judge_sample_contract)


# ================================================================ KVCache

def _cache_variant(n_layers: int, updates: list, kind: str = "") -> tuple:
    """What a cache with one named mistake (or none) returns and holds after ``updates``: (returned, keys, values,
    False: keys and values are two lists)."""
    keys: list[Any] = [None] * n_layers
    values: list[Any] = [None] * n_layers
    returned = []
    for layer, k, v in updates:
        new = (k, v)
        slot = 0 if kind == "shared" else layer
        old_k, old_v = keys[slot], values[slot]
        if old_k is not None and kind != "overwrite":
            dim = {"last axis": -1, "heads axis": 1}.get(kind, -2)
            k = torch.cat((k, old_k) if kind == "new first" else (old_k, k), dim=dim)
            if kind != "values replaced":
                v = torch.cat((v, old_v) if kind == "new first" else (old_v, v), dim=dim)
        keys[slot], values[slot] = k, v
        returned.append(new if kind == "new returned" else (k, v))
    if kind == "shared":
        keys, values = [keys[0]] * n_layers, [values[0]] * n_layers
    return tuple(returned), tuple(keys), tuple(values), False


_CACHE_SUSPECTS = (
    ("overwrite", "each update replaces the layer's keys and values with the new ones: append them, "
                  "torch.cat([cached, new], dim=-2), so that the cache keeps every position",
     "cache overwritten instead of appended"),
    ("new first", "the new keys and values go before the cached ones: positions run in order, so append them "
                  "after, torch.cat([cached, new], dim=-2)", "new keys put before the cached ones"),
    ("last axis", "the new keys are appended along the last axis, d_head: positions are axis -2 of (B, n_kv_heads, "
                  "T, d_head)", "appended along the wrong axis"),
    ("heads axis", "the new keys are appended along axis 1, the heads: positions are axis -2 of (B, n_kv_heads, "
                   "T, d_head)", "appended along the wrong axis"),
    ("shared", "every layer writes into the same entry: each layer has its own keys and values — keep one entry "
               "per layer, keys[layer] and values[layer]", "one entry for every layer"),
    ("values replaced", "the keys are appended but the values are replaced by the new ones: append both, "
                        "torch.cat([cached, new], dim=-2) for the values too", "values not appended"),
    ("new returned", "update returns only the new keys and values: return everything the layer now holds, cached "
                     "and new, which is what the attention must attend", "only the new keys returned"),
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and a.is_floating_point() \
            and torch.allclose(a.double(), b.double())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _judge_cache_update(obs: Observations) -> None:
    def one(got: Any, n_layers: int, updates: list) -> None:
        what = f"KVCache({n_layers}) after {len(updates)} updates"
        if isinstance(got, Raised):
            raise Mistake(told(got, what))
        if not (isinstance(got, tuple) and len(got) == 4):  # the probe's own record: (returned, keys, values, shared)
            raise Mistake(unnamed(f"{what}: the cache could not be read; got {describe(got)}"))
        returned, keys, values, shared = got
        if any(r is None for r in returned):
            raise Mistake(f"{what}: update returned None — return the layer's keys and values, everything "
                          f"cached so far, as a pair (k, v)", NO_RETURN)
        expected = _cache_variant(n_layers, updates)
        if _same(got, expected):
            return
        if shared is True:
            raise Mistake(f"{what}: cache.keys and cache.values are one and the same list, so each layer's values "
                          f"overwrite its keys — make two lists, `self.keys = [None] * n_layers` and "
                          f"`self.values = [None] * n_layers` (not `self.keys = self.values = ...`)",
                          "one list for keys and values")
        for kind, message, name in _CACHE_SUSPECTS:
            try:
                suspect = _cache_variant(n_layers, updates, kind)
            except Exception:  # a mistake that cannot run on these updates is not what happened
                continue
            if _same(got, suspect):
                raise Mistake(f"{what}: {message}", name)
        for i, (r, e) in enumerate(zip(returned, expected[0], strict=True)):
            if not _same(r, e):
                layer, k, _ = updates[i]
                raise Mistake(f"{what}: update {i + 1} (layer {layer}, new keys {tuple(k.shape)}) returned "
                              f"{_shapes(r)}, expected {_shapes(e)}: every key and value of that layer so far, "
                              f"old then new along the positions")
        if not isinstance(keys, tuple) or len(keys) != n_layers:
            raise Mistake(unnamed(f"{what}: cache.keys should be a list of n_layers = {n_layers} entries; got "
                                   f"{_shapes(keys)}"))
        untouched = [layer for layer in range(n_layers) if all(u[0] != layer for u in updates)]
        if any(keys[layer] is not None or values[layer] is not None for layer in untouched):
            raise Mistake(f"{what}: layer {untouched[0]} was never updated, yet its entries are "
                          f"{_shapes((keys[untouched[0]], values[untouched[0]]))}: an entry is None until its "
                          f"layer's first update", "entries not None before the first update")
        raise Mistake(f"{what}: cache.keys and cache.values should hold, per layer, what the last update of that "
                      f"layer returned; got keys {_shapes(keys)}, values {_shapes(values)}")

    judge_cases((got, lambda got, case=case: one(got, *case))
                for case, got in zip(KV_UPDATE.cases, obs[KV_UPDATE.key], strict=True))


def _shapes(x: Any) -> Any:
    if isinstance(x, Tensor):
        return tuple(x.shape)
    if isinstance(x, (tuple, list)):
        return tuple(_shapes(y) for y in x)
    return x


register("KVCache_update", _judge_cache_update)


def _judge_length(obs: Observations) -> None:
    n_layers, updates = KV_LENGTH_SCRIPT
    got = obs["lengths"]
    what = f"KVCache({n_layers}).length, before and after each of {len(updates)} updates (every layer in turn)"
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    positions, counts, summed, last = [0], [0], [0], [0]
    seen = [0] * n_layers
    for i, (layer, k, _) in enumerate(updates):
        seen[layer] += k.shape[-2]
        positions.append(seen[0])
        counts.append(i + 1)
        summed.append(sum(seen))
        last.append(seen[-1])
    got = list(got)
    odd = next((n for n in got if not isinstance(n, (int, float)) and not (isinstance(n, Tensor) and n.dim() == 0)),
               None)
    if odd is not None:
        raise Mistake(unnamed(f"{what} should be an int, the number of positions cached; got {describe(odd)}"))
    if got == positions:
        return
    for wrong, message, name in (
            (counts, "it counts the calls to update; T_cache is the number of positions cached, the length of "
                     "axis -2 of a layer's keys", "length counts updates, not positions"),
            (summed, "it adds up the positions of every layer; every layer holds the same positions, so T_cache is "
                     "one layer's count, that of layer 0", "length summed over the layers"),
            (last, "it reads the last layer, which the model fills last: while a step runs, layer 0 already holds the "
                   "new positions — read layer 0's keys", "length read from the last layer")):
        if got == wrong:
            raise Mistake(f"{what} gave {got}: {message}", name)
    raise Mistake(f"{what} gave {got}, expected {positions}: 0 before the first update, then the positions held by "
                  f"layer 0")


register("KVCache_length", _judge_length)


# ================================================================ GroupedQueryAttention

def _gqa_manual(case: AttnCase, x: Tensor, *, interleaved: bool = False, causal: bool = True,
                scale_by: int | None = None, project_out: bool = True, chunks: tuple[int, ...] = (),
                offset: bool = True, cached: bool = True) -> Tensor:
    """Grouped-query attention written out with the seeded weights, with one named mistake or none. ``chunks``
    feeds ``x`` piece by piece with a cache (``offset``: the mask lines the queries up with the cached keys;
    ``cached``: earlier chunks' keys are kept at all)."""
    w = attention_weights(case.d, case.n_heads, case.n_kv, case.seed)
    d_head, group = case.d // case.n_heads, case.n_heads // case.n_kv

    def heads(t: Tensor, n: int) -> Tensor:
        return t.reshape(t.shape[0], t.shape[1], n, d_head).transpose(1, 2)

    outs, keys, values = [], None, None
    for start, t in _pieces(chunks or (x.shape[1],)):
        piece = x[:, start:start + t]
        q = heads(piece @ w["w_q"].T + w["b_q"], case.n_heads)
        k = heads(piece @ w["w_k"].T + w["b_k"], case.n_kv)
        v = heads(piece @ w["w_v"].T + w["b_v"], case.n_kv)
        if cached and keys is not None:
            k, v = torch.cat([keys, k], dim=-2), torch.cat([values, v], dim=-2)
        keys, values = k, v
        index = torch.arange(case.n_heads) % case.n_kv if interleaved else torch.arange(case.n_heads) // group
        k, v = k[:, index], v[:, index]  # (B, n_heads, T_k, d_head)
        t_k = k.shape[-2]
        mask = torch.ones(t, t_k, dtype=torch.bool).tril(t_k - t if offset else 0) if causal else None
        scores = q @ k.transpose(-2, -1) / math.sqrt(scale_by or d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        merged = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(piece.shape[0], t, case.d)
        outs.append(merged @ w["w_o"].T + w["b_o"] if project_out else merged)
    return torch.cat(outs, dim=1)


def _pieces(chunks: tuple[int, ...]) -> list[tuple[int, int]]:
    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    return list(zip(starts, chunks, strict=True))


def _gqa_suspects(case: AttnCase) -> list[Suspect]:
    run = lambda **kw: lambda: _gqa_manual(case, case.x, **kw)  # noqa: E731
    return [
        Suspect("query head h reads key/value head h % n_kv_heads: `k.repeat(1, group, 1, 1)` tiles the heads "
                "(0, 1, 0, 1 …), but a group is *consecutive* query heads, so head h reads head h // group — use "
                "`repeat_interleave(group, dim=1)`, or reshape the queries into groups", "repeat instead of "
                "repeat_interleave", run(interleaved=True)),
        Suspect("no causal mask: every token attends the tokens after it — mask with causal_mask(T, T_k)",
                NO_CAUSAL_MASK, run(causal=False)),
        Suspect(f"the scores are scaled by √d_model = √{case.d} instead of √d_head = √{case.d // case.n_heads}",
                "scaled by √d_model instead of √d_head", run(scale_by=case.d)),
        Suspect("the heads are merged but not projected: the output goes through w_o", "w_o not applied",
                run(project_out=False)),
    ]


def _gqa_reference(case: AttnCase) -> Tensor:
    with torch.no_grad():
        return build_attention(ref.GroupedQueryAttention, case)(case.x)


judge(Compare(GQA_FORWARD, _gqa_reference, lambda case: case.what(), _gqa_suspects,
              hint="split the queries into n_heads heads and the keys and values into n_kv_heads; query head h "
                   "reads key/value head h // (n_heads // n_kv_heads); causal mask; then w_o"))


def _offset_crash(raised: Raised, what: str) -> Mistake:
    if "must match the size" in raised.message or "expanded size" in raised.message:
        return Mistake(f"{what} {raised.describe()} — with a cache the scores are (T, T_cache + T), so the mask must "
                       f"be causal_mask(T, T_cache + T), whose offset lines the new queries up with the cached keys; "
                       f"causal_mask(T) is (T, T)", NO_OFFSET)
    return Mistake(told(raised, what))


def _judge_cached(got: Any, what: str, expected: Tensor, suspects: list[Suspect], keys_expected: tuple,
                  layer: int, n_heads: int) -> None:
    if isinstance(got, Raised):
        raise _offset_crash(got, what)
    out, keys = got
    judge_tensor(out, expected, what, suspects,
                 hint="each chunk's queries attend every cached key and the chunk's own keys up to themselves; the "
                      "outputs must be those of the whole sequence at once")
    keys = tuple(None if k is None else tuple(k) for k in keys)
    if keys == keys_expected:
        return
    if keys[layer] is None and any(k is not None for k in keys):
        raise Mistake(f"{what}: the keys went into the cache's entry {keys.index(next(k for k in keys if k))}, not "
                      f"entry {layer}: pass `layer` on to cache.update(layer, k, v)", "layer argument ignored")
    shape = keys_expected[layer]
    if keys[layer] is not None and keys[layer][1] == n_heads != shape[1]:
        raise Mistake(f"{what}: the cache holds keys {keys[layer]}, one per query head; it should hold the "
                      f"n_kv_heads = {shape[1]} key/value heads, {shape} — cache k and v before expanding them to "
                      f"the query heads, or grouped-query attention saves no memory", "repeated heads cached")
    raise Mistake(f"{what}: the cache holds keys of shapes {keys}, expected {keys_expected}: cache.update(layer, "
                  f"k, v) takes k and v of shape (B, n_kv_heads, T, d_head) and keeps them as they are")


def _judge_gqa_cache(obs: Observations) -> None:
    def one(got: Any, case: AttnCase) -> None:
        what = f"{case.what()} fed in chunks of {list(case.chunks)} with a cache, as layer 1"
        suspects = [
            Suspect("the mask has no offset: new query i attends only keys 0..i of the whole sequence, not the cached "
                    "keys before it — use causal_mask(T, T_cache + T), which lines the last query up with the last "
                    "key", NO_OFFSET, lambda: _gqa_manual(case, case.x, chunks=case.chunks, offset=False)),
            Suspect("each chunk attends only its own keys: append them to the cache, k, v = cache.update(layer, k, "
                    "v), and attend everything it returns", "cache not used",
                    lambda: _gqa_manual(case, case.x, chunks=case.chunks, cached=False)),
            *_gqa_suspects(case),
        ]
        d_head = case.d // case.n_heads
        keys = (None, (case.x.shape[0], case.n_kv, case.x.shape[1], d_head))
        _judge_cached(got, what, _gqa_reference(case), suspects, keys, 1, case.n_heads)

    judge_cases((got, lambda got, case=case: one(got, *case))
                for case, got in zip(GQA_CACHE.cases, obs[GQA_CACHE.key], strict=True))


register("GroupedQueryAttention_cache", _judge_gqa_cache)


def _judge_gqa_projections(obs: Observations) -> None:
    for key, args, kwargs in GQA_PROJECTIONS:
        d, h, kv = (*args, args[1])[:3]  # n_kv_heads left out: n_heads
        bias = kwargs.get("bias", True)
        what = f"GroupedQueryAttention({', '.join(map(str, args))}" + ("" if bias else ", bias=False") + ")"
        got = obs[key]
        if isinstance(got, Raised):
            raise Mistake(told(got, what))
        width = kv * d // h
        for name, rows in (("w_q", d), ("w_k", width), ("w_v", width), ("w_o", d)):
            facts = got[name]
            if facts.get("type") != "Linear":
                raise Mistake(f"{what}.{name} should be an nn.Linear, got {facts.get('type')}")
            if tuple(facts["weight"]) != (rows, d):
                if key == "default":
                    raise Mistake(f"{what}.{name} maps {facts['weight'][1]} -> {facts['weight'][0]} features, "
                                  f"expected {d} -> {rows}: n_kv_heads=None means one key/value head per query "
                                  f"head, n_kv_heads = n_heads = {h}", "n_kv_heads=None not taken as n_heads")
                if name in ("w_k", "w_v") and tuple(facts["weight"]) == (d, d):
                    raise Mistake(f"{what}.{name} maps {d} -> {d} features: it makes n_kv_heads = {kv} heads of "
                                  f"d_head = {d // h}, {width} features, the whole point of sharing them — "
                                  f"nn.Linear(d_model, n_kv_heads * d_head)", "w_k and w_v of width d_model")
                raise Mistake(f"{what}.{name} maps {facts['weight'][1]} -> {facts['weight'][0]} features, expected "
                              f"{d} -> {rows}")
            if facts["bias"] != bias:
                raise Mistake(f"{what}.{name} should {'have' if bias else 'have no'} bias — pass bias=bias to "
                              f"nn.Linear", "bias argument ignored")
    for (call, _), raised in zip(GQA_ERRORS, obs["errors"], strict=True):
        judge_value_error(raised, call, ())


def _judge_gqa_dropout(obs: Observations) -> None:
    """Judged against the learner's own output without dropout: the value checks judge that output."""
    case, p_drop = GQA_DROPOUT
    call = f"GroupedQueryAttention({case.d}, {case.n_heads}, {case.n_kv}, dropout={p_drop}) on x {tuple(case.x.shape)}"
    none = obs["none"]
    if isinstance(none, Raised):
        raise Mistake(told(none, call.replace(f"dropout={p_drop}", "dropout=0.0")))
    if not isinstance(none, Tensor) or tuple(none.shape) != tuple(case.x.shape):
        raise Mistake(unnamed(f"{call} should return (B, T, d_model) = {tuple(case.x.shape)}; got "
                               f"{describe(none)}"))
    for key, mode in (("eval", "eval"), ("train", "training")):
        if isinstance(obs[key], Raised):
            raise Mistake(told(obs[key], f"{call} in {mode} mode"))
        if not isinstance(obs[key], Tensor) or obs[key].shape != none.shape:
            raise Mistake(unnamed(f"{call} in {mode} mode should return {tuple(none.shape)}; got "
                                   f"{describe(obs[key])}"))
    if not torch.allclose(obs["eval"], none, atol=1e-5, rtol=1e-4):
        raise Mistake(f"{call} in eval mode gives another output than with dropout=0.0: dropout acts in training "
                      f"mode only — use an nn.Dropout module, or F.dropout(..., training=self.training)",
                      DROPOUT_IN_EVAL)
    if torch.allclose(obs["train"], none, atol=1e-5, rtol=1e-4):
        raise Mistake(f"{call} in training mode gives the output without dropout: apply self.dropout to the "
                      f"attention weights, before they multiply v", "dropout ignored")


register("GroupedQueryAttention_dropout", _judge_gqa_dropout)


register("GroupedQueryAttention_projections", _judge_gqa_projections)


# ================================================================ GPTBlock

def _block_parts(case: BlockCase) -> Any:
    return build_block(ref.GPTBlock, case)


def _block_variant(case: BlockCase, x: Tensor, *, post_norm: bool = False, residual: tuple[bool, bool] = (True, True),
                   from_normed: bool = False, swapped: bool = False) -> Tensor:
    block = _block_parts(case)
    norms = (block.norm2, block.norm1) if swapped else (block.norm1, block.norm2)
    with torch.no_grad():
        for f, norm, keep in zip((block.attn, block.ff), norms, residual, strict=True):
            if post_norm:
                x = norm(x + f(x)) if keep else norm(f(x))
            else:
                h = norm(x)
                x = ((h if from_normed else x) + f(h)) if keep else f(h)
    return x


def _block_suspects(case: BlockCase, x: Tensor) -> list[Suspect]:
    run = lambda **kw: lambda: _block_variant(case, x, **kw)  # noqa: E731
    return [
        Suspect("it normalises after adding the residual, LN(x + f(x)): that is Chapter 6's post-norm; a GPT block "
                "is pre-norm, x + f(LN(x))", "post-norm instead of pre-norm", run(post_norm=True)),
        Suspect("the attention's output is not added back to its input: x + attn(norm1(x))",
                "residual missing around the attention", run(residual=(False, True))),
        Suspect("the feed-forward output is not added back to its input: h + ff(norm2(h))",
                "residual missing around the feed-forward network", run(residual=(True, False))),
        Suspect("the residual adds the normalised input, LN(x) + f(LN(x)); pre-norm adds the raw input, "
                "x + f(LN(x))", "residual taken from the normalised x", run(from_normed=True)),
        Suspect("norm2 serves the attention and norm1 the feed-forward network: norm1 comes first",
                "norm1 and norm2 swapped", run(swapped=True)),
    ]


def _block_reference(case: BlockCase) -> Tensor:
    with torch.no_grad():
        return _block_parts(case)(case.x)


def with_dropout(compare: Compare, dropout: Callable[..., float], training: Any) -> Callable[[Observations], None]:
    """The judge of ``compare``, where a case whose module has ``dropout(*case) > 0`` and runs in eval mode must give
    the reference's output: one that differs is named "dropout applied in eval mode" (the cases without dropout
    come first, and name any other mistake). Then the module of case ``training``, with dropout, run in training
    mode under two seeds (the observation "training"), must give two outputs: dropout acts."""

    def one(out: Any, *case: Any) -> None:
        if dropout(*case) and isinstance(out, Tensor):
            expected = compare.reference(*case)
            if out.shape == expected.shape and not torch.allclose(out.double(), expected.double(), atol=compare.atol,
                                                                  rtol=compare.rtol, equal_nan=True):
                raise Mistake(f"{compare.what(*case)} gives another output than without dropout: dropout acts in "
                              f"training mode only — nn.Dropout modules, or F.dropout(..., training=self.training)",
                              DROPOUT_IN_EVAL)
        compare.judge_one(out, *case)

    def judge_all(obs: Observations) -> None:
        judge_cases((out, lambda out, case=case: one(out, *case))
                    for case, out in zip(compare.check.cases, obs[compare.check.key], strict=True))
        what = training.what().replace("in eval mode", "in training mode")
        got = obs["training"]
        if isinstance(got, Raised):
            raise Mistake(told(got, what))
        if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(t, Tensor) for t in got)):
            raise Mistake(unnamed(f"{what} should return a tensor; got {describe(got)}"))
        if got[0].shape == got[1].shape and torch.equal(got[0], got[1]):
            raise Mistake(f"{what} gave the same output under two random seeds: the dropout it was given never acts "
                          f"— pass it on (nn.Dropout(dropout), and dropout= to the parts that take it)",
                          "dropout ignored")

    return judge_all


register(BLOCK_FORWARD.id, with_dropout(Compare(
    BLOCK_FORWARD, _block_reference, lambda case: case.what(), lambda case: _block_suspects(case, case.x),
    hint="x = x + attn(norm1(x)), then x = x + ff(norm2(x))"), lambda case: case.dropout, BLOCK_TRAINING))


def _judge_block_cache(obs: Observations) -> None:
    def one(got: Any, case: BlockCase) -> None:
        block = _block_parts(case)

        def chunks_alone() -> Tensor:
            with torch.no_grad():
                return torch.cat([block(case.x[:, s:s + t]) for s, t in _pieces(case.chunks)], dim=1)

        suspects = [Suspect("each chunk attends only itself: pass the cache and the layer on to the attention, "
                            "self.attn(self.norm1(x), cache, layer)", "cache not passed on", chunks_alone),
                    *_block_suspects(case, case.x)]
        keys = (None, None, (case.x.shape[0], case.n_kv, case.x.shape[1], case.d // case.n_heads))
        _judge_cached(got, f"{case.what()} as layer 2", _block_reference(case), suspects, keys, 2, case.n_heads)

    judge_cases((got, lambda got, case=case: one(got, *case))
                for case, got in zip(BLOCK_CACHE.cases, obs[BLOCK_CACHE.key], strict=True))


register("GPTBlock_cache", _judge_block_cache)


# ================================================================ GPT

def _model(case: ModelCase) -> Any:
    return load_model(ref.GPT(case.config), case.config, case.seed)


def _gpt_variant(case: ModelCase, *, final_norm: bool = True, positions: bool = True, scaled: bool = False,
                 restart: bool = False, pass_cache: bool = True) -> Tensor:
    """The logits of the reference model, run with one named mistake (fed in ``case.chunks`` with a cache when
    there are any)."""
    model = _model(case)
    cache = ProbeCache(case.config.n_layers)
    outs = []
    with torch.no_grad():
        for start, t in _pieces(case.chunks or (case.tokens.shape[1],)):
            tokens = case.tokens[:, start:start + t]
            first = 0 if restart or not case.chunks else start
            x = model.tok_embed(tokens) * (math.sqrt(case.config.d_model) if scaled else 1.0)
            if positions:
                x = x + model.pos_embed(torch.arange(first, first + t))
            for layer, block in enumerate(model.blocks):
                x = block(x, cache if pass_cache and case.chunks else None, layer)
            outs.append(model.out(model.norm(x) if final_norm else x))
    return torch.cat(outs, dim=1)


def _gpt_suspects(case: ModelCase) -> list[Suspect]:
    run = lambda **kw: lambda: _gpt_variant(case, **kw)  # noqa: E731
    return [
        Suspect("the last block's output goes to the output layer without the final LayerNorm: pre-norm blocks "
                "leave their output unnormalised, so the model ends with self.norm", "missing final LayerNorm",
                run(final_norm=False)),
        Suspect("no position is added: x = tok_embed(tokens) + pos_embed(positions)", "positions not added",
                run(positions=False)),
        Suspect(f"the token embeddings are multiplied by √d_model = {math.sqrt(case.config.d_model):g}, as Chapter "
                f"6's Transformer did; a GPT adds E[tokens] and the positions as they are",
                "embeddings scaled by √d_model", run(scaled=True)),
    ]


def _gpt_reference(case: ModelCase) -> Tensor:
    with torch.no_grad():
        return _model(case)(case.tokens)


register(MODEL_FORWARD.id, with_dropout(Compare(
    MODEL_FORWARD, _gpt_reference, lambda case: case.what(), _gpt_suspects,
    hint="logits = out(norm(blocks(tok_embed(tokens) + pos_embed(0..T-1))))"), lambda case: case.config.dropout,
    MODEL_TRAINING))


def _gpt_cache_suspects(case: ModelCase) -> list[Suspect]:
    run = lambda **kw: lambda: _gpt_variant(case, **kw)  # noqa: E731
    return [
        Suspect("the positions restart at 0 for every chunk: with a cache, the new tokens sit at positions "
                "T_cache .. T_cache + T - 1, cache.length onwards", "positions restart at 0 with a cache",
                run(restart=True)),
        Suspect("the cache is not passed on to the blocks, so each chunk attends only itself: block(x, cache, "
                "layer) for every layer", "cache not passed on", run(pass_cache=False)),
        *_gpt_suspects(case),
    ]


def _judge_gpt_cache(obs: Observations) -> None:
    def one(got: Any, case: ModelCase) -> None:
        what = case.what()
        if isinstance(got, Raised):
            raise _offset_crash(got, what)
        judge_tensor(got, _gpt_reference(case), what, _gpt_cache_suspects(case),
                     hint="the logits of every chunk must be those the model gives these positions in one pass")

    judge_cases((got, lambda got, case=case: one(got, *case))
                for case, got in zip(MODEL_CACHE.cases, obs[MODEL_CACHE.key], strict=True))
    for case, raised in zip(MODEL_TOO_LONG, obs["too_long"], strict=True):
        cached = f"{case.chunks[0]} cached positions and {case.chunks[1]} more" if case.chunks else \
            f"{case.tokens.shape[1]} tokens"
        judge_value_error(raised, f"GPT(max_len={case.config.max_len}) on {cached}", (str(case.config.max_len),))


register("GPT_cache", _judge_gpt_cache)

EMBEDDINGS_STD_1 = "embeddings left at std 1"
BLOCKS_NOT_REGISTERED = "blocks not registered"


def _judge_gpt_parts(obs: Observations) -> None:
    got = obs["facts"]
    what = "GPT(vocab=300, d_model=64, n_heads=4, n_kv_heads=2, n_layers=3, max_len=200)"
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if not got["is_module"]:
        raise Mistake(f"{what} should be an nn.Module: subclass nn.Module and call super().__init__() first")
    for name, rows in (("tok_embed", 300), ("pos_embed", 200)):
        table = got[name]
        if not isinstance(table, dict) or tuple(table["shape"]) != (rows, 64):
            raise Mistake(unnamed(f"{what}.{name} should be an nn.Embedding({rows}, 64); got {table}"))
        if table["std"] > 0.5:
            raise Mistake(f"{what}.{name} has weights of std {table['std']:.2f}, nn.Embedding's default: start them "
                          f"at std 0.02, nn.init.normal_(weight, std=0.02), as GPT-2 does, so that the first logits "
                          f"are near 0", EMBEDDINGS_STD_1)
        if not 0.015 < table["std"] < 0.025:
            raise Mistake(f"{what}.{name} has weights of std {table['std']:.3f}; start them at std 0.02")
    if got["blocks_type"] in ("list", "tuple"):
        raise Mistake(f"{what}.blocks is a Python {got['blocks_type']}: its blocks' parameters are not registered, so "
                      f"model.parameters() leaves them out and no optimiser trains them — nn.ModuleList([...])",
                      BLOCKS_NOT_REGISTERED)
    if got["blocks"] != 3:
        raise Mistake(unnamed(f"{what}.blocks should be an nn.ModuleList of n_layers = 3 GPTBlocks; got "
                               f"{got['blocks']}"))
    if not got["config"]:
        raise Mistake(f"{what}.config is not the config it was given: keep it, self.config = config (generate reads "
                      f"model.config.n_layers and max_len)", "config not kept")
    if got["norm"] != "LayerNorm":
        raise Mistake(f"{what}.norm is {got['norm']}: the pre-norm blocks leave their output unnormalised, so the "
                      f"model ends with a final nn.LayerNorm(d_model) before the output layer",
                      "missing final LayerNorm")
    out = got["out"]
    if out.get("type") != "Linear" or tuple(out["weight"]) != (300, 64):
        raise Mistake(unnamed(f"{what}.out should be an nn.Linear(64, 300, bias=False); got {out}"))
    if not got["tied"]:
        raise Mistake(f"{what}.out has a weight of its own: tie it to the token embedding, self.out.weight = "
                      f"self.tok_embed.weight, one (vocab, d_model) Parameter that reads tokens in and scores them "
                      f"out", "untied output layer")
    if out["bias"]:
        raise Mistake(f"{what}.out has a bias: a token's logit is the dot product of the final vector with its "
                      f"embedding, nn.Linear(d_model, vocab, bias=False)", "output layer with a bias")


register("GPT_parts", _judge_gpt_parts)

#: What the training checks ask of the model the notebook trains on the copy task, and what they measured (the
#: judges' docstrings give the measurements): the first loss near ln V, the loss on the chain's half below TRAINS_BELOW,
#: and at least COPIES_AT_LEAST of the copy's tokens right.
FIRST_LOSS_ABOVE_LN_V, TRAINS_BELOW, COPIES_AT_LEAST = 0.5, 2.1, 0.9
_LN_V = math.log(COPY_VOCAB + 1)
_TRAINED = "a GPT trained on the copy task (8 tokens of a Markov chain, a separator, the same 8 again)"


def _judge_initial(got: Any) -> None:
    what = "an untrained GPT of the same class and config (seed 0)"
    if isinstance(got, Raised):
        raise Mistake(told(got, f"{what}, made as type(model)(model.config),"))
    if not math.isfinite(got) or got > _LN_V + FIRST_LOSS_ABOVE_LN_V:
        raise Mistake(f"{what} has a loss of {got:.2f}, far above ln V = {_LN_V:.2f}: its logits are not near 0 — "
                      f"initialise tok_embed and pos_embed with std 0.02, nn.init.normal_(weight, std=0.02)",
                      EMBEDDINGS_STD_1)


def _judge_trains(obs: Observations) -> None:
    """The first loss of an untrained model must be near ln V = ln 13 = 2.56 (the embeddings at std 0.02), and the
    loss of the trained model on the positions whose next token the Markov chain draws must fall below 2.1 nats.
    Baselines on these positions (exact, from the chain): uniform over the 12 tokens 2.48, the tokens' frequencies
    alone 2.42, the chain itself 1.74 (no model can do better). Measured over seeds 0-7: the reference 1.79-1.86;
    with every block's attention replaced by zeros 1.75-1.77, for a model without attention learns the chain
    too: this check says that training works, not that attention does (GPT_copies does). Held by
    tests/test_reference_gpt.py::test_the_training_checks_need_attention_and_pass_the_reference."""
    _judge_initial(obs["initial"])
    got = obs["trained"]
    if isinstance(got, Raised):
        raise Mistake(told(got, _TRAINED))
    if got["sees_future"]:
        raise Mistake(f"{_TRAINED}: changing the second half of a sequence changed the logits of its first half, so "
                      f"every position sees the tokens after it — in training it copies the next token instead of "
                      f"predicting it. Mask with causal_mask(T, T_cache + T)", NO_CAUSAL_MASK)
    loss = got["loss"]
    if math.isfinite(loss) and loss < TRAINS_BELOW:
        return
    raise Mistake(f"{_TRAINED}: on the chain's half its loss is {loss:.2f} nats per token, expected below "
                  f"{TRAINS_BELOW} (uniform 2.48, the tokens' frequencies alone 2.42, the chain itself 1.74; the "
                  f"reference reaches about 1.8). Does every part receive a gradient, and is dropout off in eval "
                  f"mode?")


register("GPT_trains", _judge_trains)

_WHY_PART = {
    "unregistered": ("its parameters are not among model.parameters(), so the optimiser never sees them — keep "
                     "modules in nn.ModuleList, not a Python list", BLOCKS_NOT_REGISTERED),
    "frozen": ("its parameters have requires_grad=False, so they never train — nn.Embedding.from_pretrained freezes "
               "its table unless freeze=False; make the table with nn.Embedding(...)", "parameters not trained"),
    "no gradient": ("no gradient of the loss reaches it — something detaches it: `.detach()`, `.data`, "
                    "`torch.no_grad()`, or a new tensor built from it", "parameters not trained"),
    "missing": ("the model has no such part: name the parts tok_embed, pos_embed, blocks and norm", None),
}


def _judge_copies(obs: Observations) -> None:
    """Given the 8 tokens and the separator, the trained model writes the 8 tokens again, greedily: at least 90% of
    them right. The token to write sits 9 positions back, so only attention can read it: measured over seeds 0-7,
    the reference copies 99.8-100% of them, and the same model with every block's attention replaced by zeros
    8-11% (chance is 1/12: it can only guess what usually follows the last token it wrote). A failing model is told
    which part training could not reach (unregistered, frozen, cut from the gradient) or that its embeddings start
    too large. Held by tests/test_reference_gpt.py::test_the_training_checks_need_attention_and_pass_the_reference."""
    got, parts, initial = obs["copies"], obs["parts"], obs["initial"]
    what = f"{_TRAINED}, given the 8 tokens and the separator"
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if not isinstance(got, Tensor) or tuple(got.shape) != (len(COPIES_EVAL), COPY_LENGTH):
        raise Mistake(unnamed(f"{what}: the copies could not be read; got {describe(got)}"))
    copied = float((got == COPIES_EVAL[:, :COPY_LENGTH]).double().mean())
    if copied >= COPIES_AT_LEAST:
        return
    head = (f"{what} wrote {copied:.0%} of the tokens right, expected at least {COPIES_AT_LEAST:.0%} (the reference "
            f"100%; a model without attention about 10%, the tokens that usually follow)")
    if isinstance(parts, dict):
        for part, state in parts.items():
            if state != "trained" and state in _WHY_PART:
                message, name = _WHY_PART[state]
                raise Mistake(f"{head}: GPT.{part} is not trained — {message}", name)
    if isinstance(initial, float) and initial > _LN_V + FIRST_LOSS_ABOVE_LN_V:
        raise Mistake(f"{head}: untrained, its loss is {initial:.2f}, far above ln V = {_LN_V:.2f} — "
                      f"initialise tok_embed and pos_embed with std 0.02", EMBEDDINGS_STD_1)
    raise Mistake(f"{head}. The token to write is 9 positions back: only attention reads it. Are the positions added, "
                  f"and does each block's attention reach the earlier positions?")


register("GPT_copies", _judge_copies)


# ================================================================ generate

def _generate_variant(model: Rigged, prompt: Tensor, new: int, use_cache: bool, *, keep_prompt: bool = True,
                      extra: int = 0, position: int = -1) -> Tensor:
    """Greedy generation with one named mistake, or none."""
    tokens = prompt
    for _ in range(new + extra):
        logits = model(tokens)
        tokens = torch.cat([tokens, logits[:, position].argmax(-1, keepdim=True)], dim=1)
    return tokens if keep_prompt else tokens[:, prompt.shape[1]:]


def _generate_suspects(case: GenerateCase) -> list[Suspect]:
    def run(**kw: Any) -> Callable[[], Tensor]:
        return lambda: _generate_variant(Rigged(), torch.tensor(case.prompt), case.new, case.use_cache, **kw)

    return [
        Suspect("it returns only the new tokens: return the prompt followed by them, (B, T0 + max_new_tokens)",
                "prompt dropped", run(keep_prompt=False)),
        Suspect("it adds one token more than max_new_tokens", "one token too many", run(extra=1)),
        Suspect("it adds one token fewer than max_new_tokens", "one token too few", run(extra=-1)),
        Suspect("each step reads the logits of the first position: the next token is predicted by the last one, "
                "logits[:, -1]", "logits of the first position", run(position=0)),
    ]


def _expected_tokens(case: GenerateCase) -> Tensor:
    return ref.generate(Rigged(), torch.tensor(case.prompt), case.new, use_cache=False, **dict(case.options))


def _judge_tokens_of(got: Any, case: GenerateCase) -> dict[str, Any]:
    what = case.what()
    if isinstance(got, Raised):
        raise _offset_crash(got, what) if case.use_cache is not False else Mistake(told(got, what))
    out = got["out"]
    expected = _expected_tokens(case)
    if not isinstance(out, Tensor) or out.dim() != 2:
        raise Mistake(unnamed(f"{what} should return a (B, T0 + max_new_tokens) tensor of token ids; got "
                               f"{describe(out)}"))
    if out.shape == expected.shape and out.dtype != torch.int64:
        raise Mistake(f"{what} returned {out.dtype} — token ids are a LongTensor (int64)", "token ids not int64")
    return {"what": what, "out": out, "expected": expected}


def _judge_generate_tokens(obs: Observations) -> None:
    def one(got: Any, case: GenerateCase) -> None:
        found = _judge_tokens_of(got, case)
        what, out, expected = found["what"], found["out"], found["expected"]
        if any(c is not None for _, c in got["calls"]):
            raise Mistake(f"{what} gave the model a cache: without use_cache every step feeds the whole sequence and "
                          f"no cache — make a KVCache only when use_cache is True", "cache used without use_cache")
        if not torch.equal(out, expected):
            for suspect in _generate_suspects(case):
                candidate = suspect.produce()
                if candidate.shape == out.shape and torch.equal(candidate, out):
                    raise Mistake(f"{what}: {suspect.message}", suspect.name)
            raise Mistake(f"{what} gave {out.tolist()}, expected {expected.tolist()}: at every step, the next token "
                          f"comes from the logits of the last position, and is appended")
        if case.new and any(got["modes"]):
            raise Mistake(f"{what} ran the model in training mode: call model.eval() first (dropout would make the "
                          f"tokens random), and give back the mode it had", "model left in training mode")
        if case.new and any(got["grad"]):
            raise Mistake(f"{what} ran the model with gradients tracked: every step would keep its graph in memory "
                          f"— generate under torch.no_grad() (the stub's decorator) or torch.inference_mode()",
                          "gradients tracked while generating")
        if case.new and got["training_after"] != case.training:
            if case.training:
                raise Mistake(f"{what} left the model in eval mode, though it came in training mode: put it back, "
                              f"model.train(was_training), so that training can go on after a sample",
                              "training mode not restored")
            raise Mistake(f"{what} left the model in training mode, though it came in eval mode: give it back in the "
                          f"mode it came in, model.train(was_training), not model.train()", "mode forced to training")

    judge_cases((got, lambda got, case=case: one(got, case))
                for case, got in zip(GENERATE_TOKENS_CASES, obs["runs"], strict=True))
    max_len = Rigged().config.max_len
    judge_value_error(obs["too_long"], f"{TOO_LONG.what()} on a model of max_len={max_len}", (str(max_len),))


register("generate_tokens", _judge_generate_tokens)


def _judge_generate_cache(obs: Observations) -> None:
    def one(got: Any, case: GenerateCase) -> None:
        found = _judge_tokens_of(got, case)
        what, out, expected = found["what"], found["out"], found["expected"]
        t0, calls = len(case.prompt[0]), [tuple(c) for c in got["calls"]]
        if not calls:
            raise Mistake(f"{what} never called the model; it returned {describe(out)}")
        wanted = [(t0, 0)] + [(1, t0 + i) for i in range(case.new - 1)]
        if calls != wanted:
            fed = ", ".join(f"{t} tokens" + ("" if c is None else f" on a cache of {c}") for t, c in calls[:5])
            head = f"{what} fed the model {fed}{' …' if len(calls) > 5 else ''}; expected the prompt once, then " \
                   f"each new token alone"
            if calls and all(c is None for _, c in calls):
                raise Mistake(f"{head}: it never gave the model a cache — with use_cache, make one KVCache("
                              f"model.config.n_layers) and pass it at every step", "use_cache ignored")
            if len(calls) > 1 and all(c == 0 for _, c in calls):
                raise Mistake(f"{head}: a new, empty cache at every step forgets what the last step cached — make "
                              f"the cache once, before the loop", "new cache at every step")
            if len(calls) > 1 and calls[0] == wanted[0] and all(t > 1 for t, _ in calls[1:]):
                raise Mistake(f"{head}: once the cache holds the prompt, feed only the newest token, "
                              f"tokens[:, -1:] — feeding the whole sequence again caches it twice",
                              "whole sequence fed with a cache")
            raise Mistake(f"{head}: {wanted}")
        if not torch.equal(out, expected):
            raise Mistake(f"{what} gave {out.tolist()}, expected {expected.tolist()}, the tokens of generating "
                          f"without a cache — with a cache the model must see the same tokens")

    judge_cases((got, lambda got, case=case: one(got, case))
                for case, got in zip(GENERATE_CACHE_CASES, obs["runs"], strict=True))


register("generate_cache", _judge_generate_cache)


def _judge_sampling(obs: Observations) -> None:
    what = "generate(model, prompt (4, 2), max_new_tokens=8, temperature=1.0, generator=...)"
    draws = {key: obs[key] for key in ("first", "again", "other", "top_k_1", "greedy")}
    for key, got in draws.items():
        if isinstance(got, Raised):
            raise Mistake(told(got, what + ("" if key != "top_k_1" else " with top_k=1")))
        if not isinstance(got, Tensor) or tuple(got.shape) != (4, 10):
            raise Mistake(unnamed(f"{what} should return (4, 10) token ids; got {got!r:.80}"))
    if torch.equal(draws["first"], draws["greedy"]) and torch.equal(draws["other"], draws["greedy"]):
        raise Mistake(f"{what}: two generators gave the greedy tokens — asked to sample, it took the argmax: draw "
                      f"each token with sample_next(logits[:, -1], temperature, top_k, top_p, generator)", ARGMAX)
    if not torch.equal(draws["first"], draws["again"]):
        raise Mistake(f"{what}: two generators seeded alike gave different tokens — pass the generator on to "
                      f"sample_next", "generator not passed on")
    if not torch.equal(draws["top_k_1"], draws["greedy"]):
        raise Mistake(f"{what} with top_k=1 did not give the greedy tokens: pass temperature, top_k and top_p on "
                      f"to sample_next", "sampling options not passed on")


register("generate_sampling", _judge_sampling)


# ================================================================ concept checks

def _kv_elements_suspects(n_layers: int, batch: int, n_heads: int, n_kv: int, length: int, d_head: int) -> list:
    one = n_layers * batch * n_kv * length * d_head
    return [
        Suspect("the cache keeps the values as well as the keys: twice as many numbers", "only the keys counted",
                lambda: one),
        Suspect(f"only the n_kv_heads = {n_kv} key/value heads are cached; the n_heads = {n_heads} query heads share "
                f"them — that is what grouped-query attention saves", "n_heads instead of n_kv_heads",
                lambda: 2 * one // n_kv * n_heads),
        Suspect(f"every one of the {n_layers} layers keeps its own keys and values", "one layer counted",
                lambda: 2 * one // n_layers),
        Suspect("queries are never cached: each is used once, by the step that makes it", "queries cached too",
                lambda: 2 * one + one // n_kv * n_heads),
    ]


register("kv_cache_elements_answer", lambda obs: judge_answers(
    obs, KV_CACHE_ELEMENTS_CASES, ref.kv_cache_elements, _kv_elements_suspects,
    lambda *a: f"kv_cache_elements{a}"))
