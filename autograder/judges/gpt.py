"""Judges of Chapter 7 (``07_gpt``), against :mod:`solutions.gpt`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.gpt`. Every named mistake is declared once,
in :mod:`attention_course.mistakes.gpt`, which the visible checks use too: the
judges pass the reference, or the reference's parts, as the case
(``declared(known.GROUP, reference, case=...)``) and raise the value-free ones
with ``mistake(known.NAME, what, **fields)``. The reference modules are loaded
with the same seeded weights the probes copy into the learner's (with the
probes' own loaders), and run on the probes' own cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attention_course.mistakes import gpt as known
from attention_course.testing import MODIFIED_IN_PLACE, NO_RETURN, KnownMistake
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
    Rigged,
    _run_cache,
    build_attention,
    build_block,
    load_model,
)
from autograder.judges.core import (
    Compare,
    declared,
    describe,
    judge,
    judge_answers,
    judge_cases,
    judge_tensor,
    judge_value_error,
    mistake,
    register,
    told,
    unnamed,
)
from solutions import gpt as ref

NEG_INF = float("-inf")


def _quietly(build: Callable[[], Any]) -> Any:
    """``build()``, leaving PyTorch's global random state as it was: a module's constructor draws its weights from
    it, and a judge that runs in the learner's kernel must not change what the notebook's next cells draw."""
    with torch.random.fork_rng(devices=[]):
        return build()


def _crash(known_mistake: KnownMistake, what: str, raised: Raised, named: bool = True) -> Mistake:
    """What ``what`` raised, then the declared mistake such a crash most likely is (named when ``named``)."""
    return Mistake(f"{what} {raised.describe()} — {known_mistake.text()}", known_mistake.name if named else None)


# ================================================================ sample_next

def _probabilities(row: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """The probabilities every draw of ``sample_next`` follows, exactly: softmax(logits / τ) after the top-k filter
    (k taken between 1 and V) and the nucleus. The declared mistakes are these given other arguments."""
    scaled = row.double() / temperature
    if top_k is not None:
        kth = scaled.topk(max(1, min(top_k, scaled.shape[-1]))).values[-1]
        scaled = scaled.masked_fill(scaled < kth, NEG_INF)
    if top_p is not None:
        probs, order = torch.softmax(scaled, -1).sort(descending=True)
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, probs.cumsum(-1) - probs < top_p)
        scaled = scaled.masked_fill(~keep, NEG_INF)
    return torch.softmax(scaled, -1)


_SAMPLING = declared(known.SAMPLING, _probabilities)


def _judge_frequencies(observed: Any, row: Tensor, temperature: float, top_k: int | None, top_p: float | None,
                       seed: int) -> None:
    """The frequencies drawn against the exact probabilities of the filtered softmax (the reference's draws pass
    too: tests/test_names.py judges the reference on every check)."""
    what = (f"sample_next on {DRAWS} copies of the logits {[round(x, 2) for x in row.tolist()]}, "
            f"temperature={temperature:g}, top_k={top_k}, top_p={top_p}")
    if isinstance(observed, Raised):
        if top_k is not None and f"size of tensor b ({DRAWS})" in observed.message:
            raise _crash(known.THRESHOLD_CRASH, what, observed)
        raise Mistake(told(observed, what))
    expected = _probabilities(row, temperature, top_k, top_p)
    if _same_draws(observed, expected):
        return
    for suspect in _SAMPLING(row, temperature, top_k, top_p):
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
    raise mistake(known.ROW_THRESHOLD, call=what, got=got.tolist(), want=expected.tolist())


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
            raise _crash(known.ZERO_TEMPERATURE, what, got, named=about_zero)
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
        raise mistake(known.GLOBAL_RNG, call=what)
    if not torch.equal(first, again):
        raise Mistake(f"{what}: two generators seeded alike gave different tokens — draw with the generator given")
    if torch.equal(first, other):
        raise mistake(known.NOTHING_DRAWN, what)
    what = "sample_next(logits of shape (40, 6), temperature=1.0) without a generator, after torch.manual_seed"
    got = obs["default"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if not all(isinstance(t, Tensor) and tuple(t.shape) == (40,) for t in got):
        raise Mistake(unnamed(f"{what} should return 40 token ids; got {describe(got[0])}"))
    if not torch.equal(got[0], got[1]) or torch.equal(got[0], got[2]):
        raise mistake(known.DEFAULT_NOT_GLOBAL, what)


register("sample_next_generator", _judge_generator)


def _judge_sample_contract(obs: Observations) -> None:
    what = "sample_next(logits of shape (1, 8), generator=...)"
    got = obs["one_row"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if not isinstance(got, Tensor) or tuple(got.shape) != (1,) or got.dtype != torch.int64:
        if isinstance(got, Tensor) and got.dim() == 0:
            raise mistake(known.BATCH_SQUEEZED, call=what, got=describe(got))
        raise Mistake(f"{what} returned {describe(got)}, not a LongTensor of shape (1,): one token id per row, even "
                      f"for one row")
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

def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and a.is_floating_point() \
            and torch.allclose(a.double(), b.double())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


_CACHE = declared(known.KV_UPDATES, None)


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
        expected = _run_cache(ref.KVCache, n_layers, updates)
        if _same(got, expected):
            return
        if shared is True:
            raise mistake(known.ONE_LIST, what)
        for suspect in _CACHE(n_layers, updates):
            try:
                found = suspect.produce()
            except Exception:  # a mistake that cannot run on these updates is not what happened
                continue
            if _same(got, found):
                raise Mistake(f"{what}: {suspect.message}", suspect.name)
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
            raise mistake(known.ENTRIES_NOT_NONE, what, layer=untouched[0],
                          found=_shapes((keys[untouched[0]], values[untouched[0]])))
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
    positions = [0]
    for layer, k, _ in updates:
        positions.append(positions[-1] + (k.shape[-2] if layer == 0 else 0))
    got = list(got)
    odd = next((n for n in got if not isinstance(n, (int, float)) and not (isinstance(n, Tensor) and n.dim() == 0)),
               None)
    if odd is not None:
        raise Mistake(unnamed(f"{what} should be an int, the number of positions cached; got {describe(odd)}"))
    if got == positions:
        return
    for suspect in declared(known.LENGTHS, None)(n_layers, updates):
        if got == suspect.produce():
            raise Mistake(f"{what} gave {got}: {suspect.message}", suspect.name)
    raise Mistake(f"{what} gave {got}, expected {positions}: 0 before the first update, then the positions held by "
                  f"layer 0")


register("KVCache_length", _judge_length)


# ================================================================ GroupedQueryAttention

def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Chapter 1's attention on the heads: softmax(q kᵀ / √d_head) v, a key where ``mask`` is False at -inf."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    return torch.softmax(scores, -1) @ v


def _gqa_case(case: AttnCase) -> tuple:
    """A case as the declarations take it: x, the reference's module (its four projections, with the case's
    weights), the heads and the chunks."""
    attn = _quietly(lambda: build_attention(ref.GroupedQueryAttention, case))
    return case.x, attn, case.n_heads, case.n_kv, case.chunks


def _gqa_reference(case: AttnCase) -> Tensor:
    with torch.no_grad():
        return build_attention(ref.GroupedQueryAttention, case)(case.x)


judge(Compare(GQA_FORWARD, _gqa_reference, lambda case: case.what(), declared(known.GROUPED, _attend, case=_gqa_case),
              hint="split the queries into n_heads heads and the keys and values into n_kv_heads; query head h "
                   "reads key/value head h // (n_heads // n_kv_heads); causal mask; then w_o"))


def _offset_crash(raised: Raised, what: str) -> Mistake:
    if "must match the size" in raised.message or "expanded size" in raised.message:
        return _crash(known.NO_OFFSET_CRASH, what, raised)
    return Mistake(told(raised, what))


def _judge_cached(got: Any, what: str, expected: Tensor, suspects: list, keys_expected: tuple, layer: int,
                  n_heads: int) -> None:
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
        raise mistake(known.LAYER_IGNORED, what, entry=keys.index(next(k for k in keys if k)), layer=layer)
    shape = keys_expected[layer]
    if keys[layer] is not None and keys[layer][1] == n_heads != shape[1]:
        raise mistake(known.REPEATED_HEADS_CACHED, what, found=keys[layer], n_kv=shape[1], shape=shape)
    raise Mistake(f"{what}: the cache holds keys of shapes {keys}, expected {keys_expected}: cache.update(layer, "
                  f"k, v) takes k and v of shape (B, n_kv_heads, T, d_head) and keeps them as they are")


_GQA_CACHED = declared(known.GROUPED_CACHED, _attend, case=_gqa_case)


def _judge_gqa_cache(obs: Observations) -> None:
    def one(got: Any, case: AttnCase) -> None:
        what = f"{case.what()} fed in chunks of {list(case.chunks)} with a cache, as layer 1"
        d_head = case.d // case.n_heads
        keys = (None, (case.x.shape[0], case.n_kv, case.x.shape[1], d_head))
        _judge_cached(got, what, _gqa_reference(case), _GQA_CACHED(case), keys, 1, case.n_heads)

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
                found = f"{facts['weight'][1]} -> {facts['weight'][0]}"
                if key == "default":
                    raise mistake(known.KV_HEADS_DEFAULT, call=what, name=name, found=found, d=d, n_heads=h)
                if name in ("w_k", "w_v") and tuple(facts["weight"]) == (d, d):
                    raise mistake(known.W_KV_OF_D_MODEL, call=what, name=name, d=d, n_kv=kv, d_head=d // h,
                                  width=width)
                raise Mistake(f"{what}.{name} maps {found} features, expected {d} -> {rows}")
            if facts["bias"] != bias:
                raise mistake(known.BIAS_IGNORED, call=what, name=name, have="have" if bias else "have no")
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
        raise mistake(known.ATTENTION_DROPOUT_IN_EVAL, call=call)
    if torch.allclose(obs["train"], none, atol=1e-5, rtol=1e-4):
        raise mistake(known.ATTENTION_DROPOUT_IGNORED, call=call)


register("GroupedQueryAttention_dropout", _judge_gqa_dropout)


register("GroupedQueryAttention_projections", _judge_gqa_projections)


# ================================================================ GPTBlock

def _block_parts(case: BlockCase) -> Any:
    return build_block(ref.GPTBlock, case)


def _block_case(case: BlockCase) -> tuple:
    """A case as the declarations take it: x, the reference block's parts (with the case's weights), the chunks."""
    block = _quietly(lambda: _block_parts(case))
    return case.x, block.attn, block.ff, block.norm1, block.norm2, case.chunks


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
                raise mistake(known.DROPOUT_IN_EVAL, call=compare.what(*case))
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
            raise mistake(known.DROPOUT_NEVER_ACTS, call=what)

    return judge_all


register(BLOCK_FORWARD.id, with_dropout(Compare(
    BLOCK_FORWARD, _block_reference, lambda case: case.what(), declared(known.BLOCK, None, case=_block_case),
    hint="x = x + attn(norm1(x)), then x = x + ff(norm2(x))"), lambda case: case.dropout, BLOCK_TRAINING))

_BLOCK_CACHED = declared(known.BLOCK_CACHED, None, case=_block_case)


def _judge_block_cache(obs: Observations) -> None:
    def one(got: Any, case: BlockCase) -> None:
        keys = (None, None, (case.x.shape[0], case.n_kv, case.x.shape[1], case.d // case.n_heads))
        _judge_cached(got, f"{case.what()} as layer 2", _block_reference(case), _BLOCK_CACHED(case), keys, 2,
                      case.n_heads)

    judge_cases((got, lambda got, case=case: one(got, *case))
                for case, got in zip(BLOCK_CACHE.cases, obs[BLOCK_CACHE.key], strict=True))


register("GPTBlock_cache", _judge_block_cache)


# ================================================================ GPT

def _model(case: ModelCase) -> Any:
    return load_model(ref.GPT(case.config), case.config, case.seed)


def _model_case(case: ModelCase) -> tuple:
    """A case as the declarations take it: the reference model (with the case's weights), the tokens, the chunks."""
    return _quietly(lambda: _model(case)), case.tokens, case.chunks


def _gpt_reference(case: ModelCase) -> Tensor:
    with torch.no_grad():
        return _model(case)(case.tokens)


register(MODEL_FORWARD.id, with_dropout(Compare(
    MODEL_FORWARD, _gpt_reference, lambda case: case.what(), declared(known.MODEL, None, case=_model_case),
    hint="logits = out(norm(blocks(tok_embed(tokens) + pos_embed(0..T-1))))"), lambda case: case.config.dropout,
    MODEL_TRAINING))

_MODEL_CACHED = declared(known.MODEL_CACHED, None, case=_model_case)


def _judge_gpt_cache(obs: Observations) -> None:
    def one(got: Any, case: ModelCase) -> None:
        what = case.what()
        if isinstance(got, Raised):
            raise _offset_crash(got, what)
        judge_tensor(got, _gpt_reference(case), what, _MODEL_CACHED(case),
                     hint="the logits of every chunk must be those the model gives these positions in one pass")

    judge_cases((got, lambda got, case=case: one(got, *case))
                for case, got in zip(MODEL_CACHE.cases, obs[MODEL_CACHE.key], strict=True))
    for case, raised in zip(MODEL_TOO_LONG, obs["too_long"], strict=True):
        cached = f"{case.chunks[0]} cached positions and {case.chunks[1]} more" if case.chunks else \
            f"{case.tokens.shape[1]} tokens"
        judge_value_error(raised, f"GPT(max_len={case.config.max_len}) on {cached}", (str(case.config.max_len),))


register("GPT_cache", _judge_gpt_cache)


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
            raise mistake(known.EMBEDDINGS_AT_STD_1, call=what, name=name, std=table["std"])
        if not 0.015 < table["std"] < 0.025:
            raise Mistake(f"{what}.{name} has weights of std {table['std']:.3f}; start them at std 0.02")
    if got["blocks_type"] in ("list", "tuple"):
        raise mistake(known.BLOCKS_IN_A_LIST, call=what, kind=got["blocks_type"])
    if got["blocks"] != 3:
        raise Mistake(unnamed(f"{what}.blocks should be an nn.ModuleList of n_layers = 3 GPTBlocks; got "
                               f"{got['blocks']}"))
    if not got["config"]:
        raise mistake(known.CONFIG_NOT_KEPT, call=what)
    if got["norm"] != "LayerNorm":
        raise mistake(known.NO_FINAL_NORM, call=what, found=got["norm"])
    out = got["out"]
    if out.get("type") != "Linear" or tuple(out["weight"]) != (300, 64):
        raise Mistake(unnamed(f"{what}.out should be an nn.Linear(64, 300, bias=False); got {out}"))
    if not got["tied"]:
        raise mistake(known.UNTIED, call=what)
    if out["bias"]:
        raise mistake(known.OUTPUT_BIAS, call=what)


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
        raise mistake(known.FIRST_LOSS_HIGH, call=what, loss=got, ln_v=_LN_V)


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
        raise mistake(known.SEES_THE_FUTURE, _TRAINED)
    loss = got["loss"]
    if math.isfinite(loss) and loss < TRAINS_BELOW:
        return
    raise Mistake(f"{_TRAINED}: on the chain's half its loss is {loss:.2f} nats per token, expected below "
                  f"{TRAINS_BELOW} (uniform 2.48, the tokens' frequencies alone 2.42, the chain itself 1.74; the "
                  f"reference reaches about 1.8). Does every part receive a gradient, and is dropout off in eval "
                  f"mode?")


register("GPT_trains", _judge_trains)

#: Why a part of the model is not trained, by what the probe found of it.
_WHY_PART = {"unregistered": known.PART_UNREGISTERED, "frozen": known.PART_FROZEN,
             "no gradient": known.PART_WITHOUT_GRADIENT}


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
            if state in _WHY_PART:
                raise mistake(_WHY_PART[state], head, part=part)
            if state == "missing":
                raise Mistake(f"{head}: GPT.{part} is not trained — the model has no such part: name the parts "
                              f"tok_embed, pos_embed, blocks and norm")
    if isinstance(initial, float) and initial > _LN_V + FIRST_LOSS_ABOVE_LN_V:
        raise mistake(known.NOT_COPYING_LARGE_EMBEDDINGS, head, initial=initial, ln_v=_LN_V)
    raise Mistake(f"{head}. The token to write is 9 positions back: only attention reads it. Are the positions added, "
                  f"and does each block's attention reach the earlier positions?")


register("GPT_copies", _judge_copies)


# ================================================================ generate

def _greedy(model: Any, prompt: Tensor, new: int) -> Tensor:
    return ref.generate(model, prompt, new, use_cache=False, temperature=0.0)


def _expected_tokens(case: GenerateCase) -> Tensor:
    return ref.generate(Rigged(), torch.tensor(case.prompt), case.new, use_cache=False, **dict(case.options))


#: generate's greedy cases as the declarations take them: the stand-in model, the prompt, max_new_tokens
_GENERATE = declared(known.GENERATE, _greedy, case=lambda case: (Rigged(), torch.tensor(case.prompt), case.new))


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
        raise mistake(known.TOKENS_NOT_INT64, call=what, dtype=out.dtype)
    return {"what": what, "out": out, "expected": expected}


def _judge_generate_tokens(obs: Observations) -> None:
    def one(got: Any, case: GenerateCase) -> None:
        found = _judge_tokens_of(got, case)
        what, out, expected = found["what"], found["out"], found["expected"]
        if any(c is not None for _, c in got["calls"]):
            raise mistake(known.CACHE_WITHOUT_USE_CACHE, call=what)
        if not torch.equal(out, expected):
            for suspect in _GENERATE(case):
                candidate = suspect.produce()
                if candidate.shape == out.shape and torch.equal(candidate, out):
                    raise Mistake(f"{what}: {suspect.message}", suspect.name)
            raise Mistake(f"{what} gave {out.tolist()}, expected {expected.tolist()}: at every step, the next token "
                          f"comes from the logits of the last position, and is appended")
        if case.new and any(got["modes"]):
            raise mistake(known.LEFT_IN_TRAINING, call=what)
        if case.new and any(got["grad"]):
            raise mistake(known.GRADIENTS_TRACKED, call=what)
        if case.new and got["training_after"] != case.training:
            raise mistake(known.TRAINING_NOT_RESTORED if case.training else known.FORCED_TO_TRAINING, call=what)

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
                raise mistake(known.USE_CACHE_IGNORED, head)
            if len(calls) > 1 and all(c == 0 for _, c in calls):
                raise mistake(known.NEW_CACHE_EVERY_STEP, head)
            if len(calls) > 1 and calls[0] == wanted[0] and all(t > 1 for t, _ in calls[1:]):
                raise mistake(known.WHOLE_SEQUENCE_CACHED, head)
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
        raise mistake(known.GENERATE_ARGMAX, what)
    if not torch.equal(draws["first"], draws["again"]):
        raise mistake(known.GENERATOR_NOT_PASSED, what)
    if not torch.equal(draws["top_k_1"], draws["greedy"]):
        raise mistake(known.OPTIONS_NOT_PASSED, f"{what} with top_k=1 did not give the greedy tokens")


register("generate_sampling", _judge_sampling)


# ================================================================ concept checks

register("kv_cache_elements_answer", lambda obs: judge_answers(
    obs, KV_CACHE_ELEMENTS_CASES, ref.kv_cache_elements, declared(known.KV_CACHE_ELEMENTS, None),
    lambda *a: f"kv_cache_elements{a}"))
