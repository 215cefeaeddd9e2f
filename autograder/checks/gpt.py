"""Probes of Chapter 7 (``07_gpt``), judged in :mod:`autograder.judges.gpt`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases
are built here from fixed seeds, with plain torch and ``attention_course``
only: the reference is not in the grading sandbox. Each probe runs the
learner's code on them and returns plain observations.

Sampling is judged by what it draws: a row of logits repeated thousands of
times, drawn once with a seeded generator, gives the frequency of every token,
which the judge holds against the reference's draws. The attention, the block
and the model get seeded weights copied into the parts the exercise names
(``w_q`` … ``w_o``; ``norm1``, ``attn``, ``norm2``, ``ff``; ``tok_embed``,
``pos_embed``, ``blocks``, ``norm``, ``out``) and a cache of the probes' own,
:class:`ProbeCache`, so that an attention is graded apart from the learner's
``KVCache``. ``generate`` runs on :class:`Rigged`, a stand-in model whose next
token is a fixed function of the whole prefix and which records what it was fed.
The two training checks judge the model the notebook's visible code trained on
the copy task (:func:`copy_sequences`), measured on sequences of their own.

Whatever the learner's code returns, a probe records it and never raises: every
call of the learner's code, and everything done with what it returned, runs
inside :func:`~autograder.checks.core.attempt` (or ``attempt_as_is``), and a
result of the wrong form becomes a :class:`WrongOutput` record that the judge
turns into a message. ``gpt_contract.md`` beside this file lists every sentence
of the chapter's contract with the hidden case that checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from autograder.checks.core import (
    Check,
    Observations,
    WeightsNotLoaded,
    WrongOutput,
    attempt,
    attempt_as_is,
    declare,
    describe_value,
    feed_forward_weights,
    layer_norm_weights,
    linear_facts,
    load_layer_norm,
    odd_tensor,
    plain,
    probe_answers,
    register,
    seeded,
    tensor_facts,
)

# ================================================================ sample_next

#: the rows of logits that the sampling checks repeat: distinct values spread over a few units; the third ties
#: three logits with the second largest, so that top_k=2 keeps four tokens
LOGITS = (
    torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5, -2.5]),
    torch.tensor([0.3, -1.2, 2.2, 1.1, -0.4, 0.9, -2.0, 1.6, 0.0, -0.8]),
    torch.tensor([1.0, 0.25, -0.5, 0.25, -1.0, 0.25, -0.25]),
)
DRAWS = 6000  # rows per case: the frequencies are within about 0.01 of the probabilities


def frequencies(tokens: Any, vocab: int) -> Tensor:
    """How often each of ``vocab`` token ids was drawn, from a ``(DRAWS,)`` LongTensor of ids."""
    if not isinstance(tokens, Tensor) or tokens.shape != (DRAWS,) or tokens.dtype != torch.int64 \
            or tokens.device.type != "cpu":
        raise WrongOutput(f"for logits of shape ({DRAWS}, {vocab}) it returned {describe_value(tokens)}, not a "
                          f"LongTensor of shape ({DRAWS},): one token id per row")
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise WrongOutput(f"it returned token ids outside 0..{vocab - 1}")
    return torch.bincount(tokens, minlength=vocab).double() / DRAWS


def _draw(student: Any, row: Tensor, temperature: float, top_k: int | None, top_p: float | None, seed: int) -> Tensor:
    logits = row.expand(DRAWS, -1).clone()  # (DRAWS, V): one row, drawn DRAWS times
    tokens = student(logits, temperature=temperature, top_k=top_k, top_p=top_p,
                     generator=torch.Generator().manual_seed(seed))
    return frequencies(tokens, row.shape[0])


# (row, temperature, top_k, top_p, seed)
SAMPLE_TEMPERATURE = declare(Check("sample_next_temperature", [
    (LOGITS[0], 0.5, None, None, 801), (LOGITS[1], 2.0, None, None, 802), (LOGITS[0], 1.0, None, None, 803),
], call=_draw, key="freqs"))
SAMPLE_TOP_K = Check("sample_next_top_k", [
    (LOGITS[0], 1.0, 3, None, 811), (LOGITS[1], 0.7, 4, None, 812), (LOGITS[1], 1.0, 1, None, 813),
    (LOGITS[0], 1.0, 50, None, 814), (LOGITS[2], 1.0, 2, None, 815),  # ties with the k-th: four tokens kept
], call=_draw, key="freqs")
SAMPLE_TOP_P = Check("sample_next_top_p", [  # masses where the nucleus has 3, 4, 2, 5, 1 and every token
    (LOGITS[0], 1.0, None, 0.8, 821), (LOGITS[1], 1.0, None, 0.75, 822), (LOGITS[0], 0.5, None, 0.9, 823),
    (LOGITS[1], 1.5, 5, 0.7, 824), (LOGITS[1], 1.0, None, 0.05, 825), (LOGITS[0], 1.0, None, 1.0, 826),
], call=_draw, key="freqs")
#: as many rows as tokens, each with its largest logit elsewhere: with top_k=1 (or a nucleus of one token) every row
#: must give its own argmax, which a threshold of shape (B,) instead of (B, 1) compares with the wrong row's
SQUARE_ROWS = seeded(8, 8, seed=816, scale=0.3) + 3.0 * torch.eye(8)[torch.randperm(8, generator=torch.Generator(
    ).manual_seed(817))]


def _square(student: Any, **options: Any) -> Any:
    return attempt(lambda: student(SQUARE_ROWS.clone(), temperature=1.0, generator=torch.Generator().manual_seed(818),
                                   **options))


def _probe_filter(check: Check, **square: Any) -> Callable[[Any], Observations]:
    return lambda student: {**check.probe(student), "square": _square(student, **square)}


register(SAMPLE_TOP_K.id, _probe_filter(SAMPLE_TOP_K, top_k=1))
register(SAMPLE_TOP_P.id, _probe_filter(SAMPLE_TOP_P, top_p=0.05))
GREEDY_ROWS = seeded(5, 9, seed=831, scale=2.0)


def _probe_greedy(student: Any) -> Observations:
    def greedy(**filters: Any) -> Any:
        return student(GREEDY_ROWS.clone(), temperature=0.0, generator=torch.Generator().manual_seed(832), **filters)

    return {"greedy": attempt(greedy), "filtered": attempt(lambda: greedy(top_k=3, top_p=0.5))}


def _probe_generator(student: Any) -> Observations:
    logits = seeded(40, 6, seed=841, scale=0.5)  # 40 rows, close logits: two seeds draw differently

    def draw(seed: int) -> Any:
        return student(logits.clone(), temperature=1.0, generator=torch.Generator().manual_seed(seed))

    def run() -> dict[str, Any]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(842)
            before = torch.get_rng_state()
            first = draw(5)
            global_used = not torch.equal(before, torch.get_rng_state())
            again, other = draw(5), draw(6)
        return {"first": plain(first), "again": plain(again), "other": plain(other), "global_used": global_used}

    def by_default(seed: int) -> Any:  # no generator: PyTorch's global one, seeded here
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return student(logits.clone(), temperature=1.0)

    return {"draws": attempt_as_is(run),
            "default": attempt_as_is(lambda: tuple(plain(by_default(seed)) for seed in (1, 1, 2)))}


register("sample_next_greedy", _probe_greedy)
register("sample_next_generator", _probe_generator)

#: the contract's other sentences: a batch of one row, float64 logits, the logits left as they were, bad arguments
CONTRACT_LOGITS = seeded(5, 7, seed=851, dtype=torch.float64)
#: (what, logits, options) of calls that must raise ValueError
SAMPLE_ERRORS = (
    ("logits of shape (7,)", torch.zeros(7), {}),
    ("logits of shape (2, 3, 7)", torch.zeros(2, 3, 7), {}),
    ("temperature=-1.0", torch.zeros(2, 7), {"temperature": -1.0}),
    ("top_k=0", torch.zeros(2, 7), {"top_k": 0}),
    ("top_p=0.0", torch.zeros(2, 7), {"top_p": 0.0}),
    ("top_p=1.5", torch.zeros(2, 7), {"top_p": 1.5}),
)


def _probe_sample_contract(student: Any) -> Observations:
    def one_row() -> Any:  # temperature, top_k and top_p left at their defaults
        return student(LOGITS[0][None].clone(), generator=torch.Generator().manual_seed(852))

    def untouched() -> Any:
        logits = CONTRACT_LOGITS.clone()
        drawn = student(logits, temperature=0.5, top_k=4, top_p=0.9, generator=torch.Generator().manual_seed(853))
        return {"drawn": tensor_facts(drawn), "untouched": bool(torch.equal(logits, CONTRACT_LOGITS))}

    return {"one_row": attempt(one_row), "float64": attempt_as_is(untouched),
            "errors": [attempt(lambda x=x, o=o: student(x.clone(), **o)) for _, x, o in SAMPLE_ERRORS]}


register("sample_next_contract", _probe_sample_contract)


# ================================================================ KVCache

# every update of a cache's script: (layer, k, v), k and v (B, n_kv_heads, T, d_head)
def _kv(t: int, seed: int, b: int = 2, heads: int = 2, d: int = 3) -> tuple[Tensor, Tensor]:
    return seeded(b, heads, t, d, seed=seed), seeded(b, heads, t, d, seed=seed + 1)


KV_SCRIPTS = [
    (2, [(0, *_kv(3, 901)), (1, *_kv(3, 903)), (0, *_kv(1, 905)), (1, *_kv(1, 907)), (0, *_kv(2, 909)),
         (1, *_kv(2, 911))]),
    (1, [(0, *_kv(4, 913, b=1, heads=1, d=2)), (0, *_kv(1, 915, b=1, heads=1, d=2))]),
    (3, [(0, *_kv(2, 917)), (1, *_kv(2, 919))]),  # layer 2 is never updated: its entries stay None
]


def _run_cache(student: Any, n_layers: int, updates: list) -> tuple:
    """(what each update returned, the cache's keys, its values), each per update or per layer (``plain`` keeps
    the type name of anything that is not a tensor, a number or a sequence of them), and whether the keys and the
    values are one list."""
    cache = student(n_layers)
    returned = tuple(plain(cache.update(layer, k.clone(), v.clone())) for layer, k, v in updates)
    return returned, plain(cache.keys), plain(cache.values), cache.keys is cache.values


KV_UPDATE = declare(Check("KVCache_update", KV_SCRIPTS, call=_run_cache))

#: (n_layers, updates): the length after each update; the model fills every layer in turn
KV_LENGTH_SCRIPT = (3, [(layer, *_kv(t, 921 + 10 * i + layer)) for i, t in enumerate((4, 1, 2)) for layer in range(3)])


def _probe_length(student: Any) -> Observations:
    def run() -> list[Any]:
        n_layers, updates = KV_LENGTH_SCRIPT
        cache = student(n_layers)
        lengths = [plain(cache.length)]
        for layer, k, v in updates:
            cache.update(layer, k.clone(), v.clone())
            lengths.append(plain(cache.length))
        return lengths

    return {"lengths": attempt_as_is(run)}


register("KVCache_length", _probe_length)


# ================================================================ the probes' cache and weights

class ProbeCache:
    """The probes' own key/value cache, with the exercise's interface: ``update(layer, k, v)`` appends along the
    positions and returns everything cached; ``length``; ``keys`` and ``values`` per layer."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[Tensor | None] = [None] * n_layers
        self.values: list[Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=-2)
            v = torch.cat([self.values[layer], v], dim=-2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


def attention_weights(d: int, n_heads: int, n_kv: int, seed: int) -> dict[str, Tensor]:
    """Seeded weights and biases of w_q, w_k, w_v, w_o: w_k and w_v are n_kv_heads * d_head wide."""
    width = n_kv * (d // n_heads)
    shapes = {"q": d, "k": width, "v": width, "o": d}
    weights = {f"w_{s}": seeded(n, d, seed=seed + i, scale=d**-0.5) for i, (s, n) in enumerate(shapes.items())}
    weights.update({f"b_{s}": seeded(n, seed=seed + 4 + i, scale=0.1) for i, (s, n) in enumerate(shapes.items())})
    return weights


def load_attention(module: Any, w: dict[str, Tensor], where: str) -> None:
    for s in "qkvo":
        layer = getattr(module, f"w_{s}", None)
        want = tuple(w[f"w_{s}"].shape)
        if not isinstance(layer, nn.Linear) or tuple(layer.weight.shape) != want or layer.bias is None:
            found = linear_facts(layer) if layer is not None else "nothing"
            raise WeightsNotLoaded(f"`{where}.w_{s}` should be an nn.Linear({want[1]}, {want[0]}) with bias; "
                                   f"found {found}")
        with torch.no_grad():
            layer.weight.copy_(w[f"w_{s}"])
            layer.bias.copy_(w[f"b_{s}"])


def load_feed_forward(module: Any, w: dict[str, Tensor], where: str) -> None:
    """Copy ``w`` into the two ``nn.Linear`` layers of ``module``, told apart by their shapes."""
    d_ff, d = w["w1"].shape
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)] if isinstance(module, nn.Module) else []
    first = [m for m in linears if (m.in_features, m.out_features) == (d, d_ff) and m.bias is not None]
    second = [m for m in linears if (m.in_features, m.out_features) == (d_ff, d) and m.bias is not None]
    if len(linears) != 2 or len(first) != 1 or len(second) != 1:
        raise WeightsNotLoaded(f"`{where}` should be the given FeedForward({d}, {d_ff})")
    with torch.no_grad():
        first[0].weight.copy_(w["w1"])
        first[0].bias.copy_(w["b1"])
        second[0].weight.copy_(w["w2"])
        second[0].bias.copy_(w["b2"])


# ================================================================ GroupedQueryAttention

@dataclass(frozen=True)
class AttnCase:
    d: int
    n_heads: int
    n_kv: int
    x: Tensor
    seed: int
    chunks: tuple[int, ...] = ()  # with a cache: the lengths fed one after another (they add up to T)

    def what(self) -> str:
        return f"GroupedQueryAttention({self.d}, {self.n_heads}, {self.n_kv}) on x {tuple(self.x.shape)}"


def build_attention(student: Any, case: AttnCase) -> Any:
    module = student(case.d, case.n_heads, case.n_kv)
    load_attention(module, attention_weights(case.d, case.n_heads, case.n_kv, case.seed), "GroupedQueryAttention")
    return module.eval()


def _gqa_forward(student: Any, case: AttnCase) -> Any:
    with torch.no_grad():
        return build_attention(student, case)(case.x.clone())


GQA_FORWARD = declare(Check("GroupedQueryAttention_forward", [
    (AttnCase(16, 4, 2, seeded(2, 5, 16, seed=931), 932),),
    (AttnCase(24, 6, 3, seeded(1, 6, 24, seed=933), 934),),  # groups of two
    (AttnCase(16, 4, 1, seeded(2, 4, 16, seed=935), 936),),  # multi-query
    (AttnCase(12, 3, 3, seeded(2, 5, 12, seed=937), 938),),  # Chapter 4's multi-head attention
], call=_gqa_forward))


def in_chunks(module: Any, x: Tensor, chunks: tuple[int, ...], cache: ProbeCache, width: int, *layer: int) -> Tensor:
    """Feed ``x`` (or token ids) to ``module`` chunk by chunk through ``cache`` (as entry ``layer``, for one
    attention or block), without gradients: the outputs of every chunk, side by side. A chunk of ``t`` positions
    must give a tensor ``(B, t, width)`` with numbers to keep; anything else is a :class:`WrongOutput`."""
    outs, start = [], 0
    with torch.no_grad():
        for t in chunks:
            out = module(x[:, start:start + t].clone(), cache, *layer)
            want = (x.shape[0], t, width)
            if not (isinstance(out, Tensor) and tuple(out.shape) == want and odd_tensor(out) is None):
                raise WrongOutput(f"the chunk of positions {start}..{start + t - 1} gave {describe_value(out)}, "
                                  f"expected a tensor of shape {want}")
            outs.append(out)
            start += t
    return torch.cat(outs, dim=1)


def key_shapes(cache: ProbeCache) -> tuple:
    """The shape of the keys cached for each layer (None where nothing was cached)."""
    return tuple(None if k is None else tuple(k.shape) for k in cache.keys)


def _gqa_cached(student: Any, case: AttnCase) -> tuple:
    """(the outputs of every chunk, side by side; the shape of the keys cached for each layer)."""
    cache = ProbeCache(2)
    return in_chunks(build_attention(student, case), case.x, case.chunks, cache, case.d, 1), key_shapes(cache)


GQA_CACHE = declare(Check("GroupedQueryAttention_cache", [
    (AttnCase(16, 4, 2, seeded(2, 6, 16, seed=941), 942, chunks=(3, 2, 1)),),
    (AttnCase(24, 6, 3, seeded(1, 5, 24, seed=943), 944, chunks=(2, 1, 1, 1)),),
    (AttnCase(16, 4, 1, seeded(2, 5, 16, seed=945), 946, chunks=(1, 3, 1)),),
], call=_gqa_cached))


#: (key, args, kwargs) of the modules whose projections are checked: n_kv_heads left out means n_heads
GQA_PROJECTIONS = (("gqa", (32, 8, 2), {}), ("mqa", (24, 4, 1), {}), ("default", (24, 4), {}),
                   ("no_bias", (16, 4, 2), {"bias": False}))
GQA_ERRORS = (("GroupedQueryAttention(32, 8, 3)", (32, 8, 3)), ("GroupedQueryAttention(30, 8, 2)", (30, 8, 2)))


def _probe_gqa_projections(student: Any) -> Observations:
    def facts(*args: int, **kwargs: Any) -> dict[str, Any]:
        module = student(*args, **kwargs)
        return {name: linear_facts(getattr(module, name, None)) for name in ("w_q", "w_k", "w_v", "w_o")}

    obs: Observations = {key: attempt_as_is(lambda a=a, k=k: facts(*a, **k)) for key, a, k in GQA_PROJECTIONS}
    obs["errors"] = [attempt(lambda a=a: student(*a)) for _, a in GQA_ERRORS]
    return obs


register("GroupedQueryAttention_projections", _probe_gqa_projections)

#: (case, dropout probability): the same weights without dropout, with it in eval mode, and in training mode
GQA_DROPOUT = (AttnCase(16, 4, 2, seeded(2, 6, 16, seed=947), 948), 0.5)


def _probe_gqa_dropout(student: Any) -> Observations:
    case, p_drop = GQA_DROPOUT

    def run(dropout: float, training: bool) -> Any:
        module = student(case.d, case.n_heads, case.n_kv, dropout=dropout)
        load_attention(module, attention_weights(case.d, case.n_heads, case.n_kv, case.seed), "GroupedQueryAttention")
        module.train(training)
        with torch.random.fork_rng(devices=[]), torch.no_grad():  # leave the learner's random state as it was
            torch.manual_seed(0)
            return module(case.x.clone())

    return {"none": attempt(lambda: run(0.0, False)), "eval": attempt(lambda: run(p_drop, False)),
            "train": attempt(lambda: run(p_drop, True))}


register("GroupedQueryAttention_dropout", _probe_gqa_dropout)


# ================================================================ GPTBlock

@dataclass(frozen=True)
class BlockCase:
    d: int
    n_heads: int
    n_kv: int
    d_ff: int
    x: Tensor
    seed: int
    chunks: tuple[int, ...] = ()
    dropout: float = 0.0  # in eval mode: it must change nothing

    def what(self) -> str:
        return (f"GPTBlock({self.d}, {self.n_heads}, {self.n_kv}, {self.d_ff}"
                + (f", dropout={self.dropout}) in eval mode" if self.dropout else ")") + f" on x {tuple(self.x.shape)}"
                + (f" fed in chunks of {list(self.chunks)} with a cache" if self.chunks else ""))


def block_weights(d: int, n_heads: int, n_kv: int, d_ff: int, seed: int) -> dict[str, dict[str, Tensor]]:
    return {"norm1": layer_norm_weights(d, seed), "attn": attention_weights(d, n_heads, n_kv, seed + 10),
            "norm2": layer_norm_weights(d, seed + 20), "ff": feed_forward_weights(d, d_ff, seed + 30)}


def load_block(block: Any, w: dict[str, dict[str, Tensor]], where: str) -> None:
    for name in ("norm1", "attn", "norm2", "ff"):
        part = getattr(block, name, None)
        if part is None:
            raise WeightsNotLoaded(f"{where} has no attribute `{name}`: name the parts norm1, attn, norm2, ff")
        {"attn": load_attention, "ff": load_feed_forward}.get(name, load_layer_norm)(part, w[name], f"{where}.{name}")


def build_block(student: Any, case: BlockCase) -> Any:
    block = student(case.d, case.n_heads, case.n_kv, case.d_ff, *([case.dropout] if case.dropout else []))
    load_block(block, block_weights(case.d, case.n_heads, case.n_kv, case.d_ff, case.seed), "GPTBlock")
    return block.eval()


def _block_forward(student: Any, case: BlockCase) -> Any:
    with torch.no_grad():
        return build_block(student, case)(case.x.clone())


def _block_cached(student: Any, case: BlockCase) -> tuple:
    cache = ProbeCache(3)
    return in_chunks(build_block(student, case), case.x, case.chunks, cache, case.d, 2), key_shapes(cache)


def twice_in_training(module: Any, x: Tensor) -> tuple[Any, Any]:
    """``module(x)`` in training mode, once under each of two random seeds (the learner's random state left as it
    was): with dropout they differ."""
    module.train()
    runs = []
    for seed in (0, 1):
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            runs.append(plain(module(x.clone())))
    return tuple(runs)


BLOCK_FORWARD = Check("GPTBlock_forward", [
    (BlockCase(16, 4, 2, 24, seeded(2, 5, 16, seed=951), 952),),
    (BlockCase(12, 3, 1, 20, seeded(1, 6, 12, seed=953), 954),),
    (BlockCase(16, 4, 2, 24, seeded(2, 5, 16, seed=955), 956, dropout=0.3),),
], call=_block_forward)
#: a block with dropout=0.5 in training mode, run under two seeds
BLOCK_TRAINING = BlockCase(16, 4, 2, 24, seeded(2, 5, 16, seed=957), 958, dropout=0.5)
register(BLOCK_FORWARD.id, lambda student: {
    **BLOCK_FORWARD.probe(student),
    "training": attempt_as_is(lambda: twice_in_training(build_block(student, BLOCK_TRAINING), BLOCK_TRAINING.x))})
BLOCK_CACHE = declare(Check("GPTBlock_cache", [
    (BlockCase(16, 4, 2, 24, seeded(2, 6, 16, seed=961), 962, chunks=(3, 2, 1)),),
    (BlockCase(12, 3, 3, 20, seeded(1, 4, 12, seed=963), 964, chunks=(1, 1, 2)),),
], call=_block_cached))


# ================================================================ GPT

@dataclass
class Config:
    """The probes' own config: the learner's GPT is graded whatever their own configuration class does."""

    vocab: int
    d_model: int = 16
    n_heads: int = 4
    n_kv_heads: int | None = 2
    n_layers: int = 2
    d_ff: int = 24
    max_len: int = 16
    dropout: float = 0.0
    fused_attention: bool = False


def model_weights(c: Config, seed: int) -> dict[str, Any]:
    d = c.d_model
    return {"tok_embed": seeded(c.vocab, d, seed=seed, scale=0.5), "pos_embed": seeded(c.max_len, d, seed=seed + 1,
                                                                                       scale=0.5),
            "blocks": [block_weights(d, c.n_heads, c.n_kv_heads, c.d_ff, seed + 100 * (i + 1))
                       for i in range(c.n_layers)],
            "norm": layer_norm_weights(d, seed + 2)}


def load_model(model: Any, c: Config, seed: int) -> Any:
    """Copy seeded weights into a GPT's parts, by the names the exercise asks for. An output layer that is not
    tied gets the token embedding's weights (and a zero bias), so that the values are graded apart from tying;
    a model without a final ``norm`` is run as it is."""
    w = model_weights(c, seed)
    with torch.no_grad():
        for name in ("tok_embed", "pos_embed"):
            table = getattr(model, name, None)
            if not isinstance(table, nn.Embedding) or table.weight.shape != w[name].shape:
                rows = "vocab" if name == "tok_embed" else "max_len"
                raise WeightsNotLoaded(f"GPT.{name} should be an nn.Embedding({rows}={w[name].shape[0]}, "
                                       f"d_model={c.d_model}), got {table!r:.60}")
            table.weight.copy_(w[name])
        out = getattr(model, "out", None)
        if isinstance(out, nn.Linear) and out.weight is not model.tok_embed.weight \
                and out.weight.shape == w["tok_embed"].shape:
            out.weight.copy_(w["tok_embed"])
            if out.bias is not None:
                out.bias.zero_()
    blocks = list(getattr(model, "blocks", None) or [])
    if len(blocks) != c.n_layers:
        raise WeightsNotLoaded(f"GPT.blocks should be an nn.ModuleList of n_layers={c.n_layers} blocks, found "
                               f"{len(blocks)}")
    for i, (block, bw) in enumerate(zip(blocks, w["blocks"], strict=True)):
        load_block(block, bw, f"GPT.blocks[{i}]")
    if isinstance(getattr(model, "norm", None), nn.LayerNorm):
        load_layer_norm(model.norm, w["norm"], "GPT.norm")
    return model.eval()


@dataclass(frozen=True)
class ModelCase:
    config: Config
    tokens: Tensor
    seed: int
    chunks: tuple[int, ...] = ()

    def what(self) -> str:
        c = self.config
        return (f"GPT(vocab={c.vocab}, d_model={c.d_model}, n_heads={c.n_heads}, n_kv_heads={c.n_kv_heads}, "
                f"n_layers={c.n_layers}" + (f", dropout={c.dropout}) in eval mode" if c.dropout else ")")
                + f" on tokens {tuple(self.tokens.shape)}"
                + (f" fed in chunks of {list(self.chunks)} with a cache" if self.chunks else ""))


def _tokens(vocab: int, b: int, t: int, seed: int) -> Tensor:
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


_SMALL = Config(vocab=13)
_MQA = Config(vocab=9, d_model=12, n_heads=3, n_kv_heads=1, n_layers=1, d_ff=20, max_len=10)
_DROPOUT = Config(vocab=13, dropout=0.3)


def _model_forward(student: Any, case: ModelCase) -> Any:
    with torch.no_grad():
        return load_model(student(case.config), case.config, case.seed)(case.tokens.clone())


MODEL_FORWARD = Check("GPT_forward", [
    (ModelCase(_SMALL, _tokens(13, 2, 7, 971), 972),),
    (ModelCase(_MQA, _tokens(9, 3, 10, 973), 974),),  # T = max_len
    (ModelCase(_SMALL, _tokens(13, 1, 1, 975), 976),),  # one sequence of one token
    (ModelCase(_DROPOUT, _tokens(13, 2, 6, 977), 978),),  # dropout in the config, the model in eval mode
], call=_model_forward)
#: a GPT with dropout=0.5 in training mode, run under two seeds
MODEL_TRAINING = ModelCase(Config(vocab=13, dropout=0.5), _tokens(13, 2, 6, 979), 980)


def _model_training(student: Any) -> tuple[Any, Any]:
    case = MODEL_TRAINING
    return twice_in_training(load_model(student(case.config), case.config, case.seed), case.tokens)


register(MODEL_FORWARD.id, lambda student: {**MODEL_FORWARD.probe(student),
                                            "training": attempt_as_is(lambda: _model_training(student))})


def _model_cached(student: Any, case: ModelCase) -> Any:
    model = load_model(student(case.config), case.config, case.seed)
    return in_chunks(model, case.tokens, case.chunks, ProbeCache(case.config.n_layers), case.config.vocab)


MODEL_CACHE = Check("GPT_cache", [
    (ModelCase(_SMALL, _tokens(13, 2, 7, 981), 982, chunks=(4, 1, 2)),),
    (ModelCase(_MQA, _tokens(9, 1, 10, 983), 984, chunks=(1, 1, 5, 3)),),  # the last position is max_len - 1
], call=_model_cached)
#: sequences longer than max_len = 16: 17 tokens at once, and 10 cached then 7 more; each must raise ValueError
MODEL_TOO_LONG = (ModelCase(_SMALL, _tokens(13, 1, 17, 985), 986), ModelCase(_SMALL, _tokens(13, 1, 17, 987), 988,
                                                                           chunks=(10, 7)))


def _too_long(student: Any, case: ModelCase) -> Any:
    """What the last call raised (a ValueError is asked for), or the shape of what it returned."""
    model = load_model(student(case.config), case.config, case.seed)
    cache, tokens = None, case.tokens
    with torch.no_grad():
        if case.chunks:  # fill a cache first, then the last chunk goes past max_len
            cache = ProbeCache(case.config.n_layers)
            model(tokens[:, :case.chunks[0]].clone(), cache)
            tokens = tokens[:, case.chunks[0]:]
        return tensor_facts(model(tokens.clone(), cache))


def _probe_model_cache(student: Any) -> Observations:
    return {**MODEL_CACHE.probe(student),
            "too_long": [attempt_as_is(lambda case=case: _too_long(student, case)) for case in MODEL_TOO_LONG]}


register(MODEL_CACHE.id, _probe_model_cache)

_PARTS_CONFIG = Config(vocab=300, d_model=64, n_heads=4, n_kv_heads=2, n_layers=3, d_ff=32, max_len=200)


def _probe_model_parts(student: Any) -> Observations:
    def facts() -> dict[str, Any]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = student(_PARTS_CONFIG)
        found: dict[str, Any] = {"is_module": isinstance(model, nn.Module)}
        for name in ("tok_embed", "pos_embed"):
            table = getattr(model, name, None)
            found[name] = ({"shape": tuple(table.weight.shape), "std": float(table.weight.std())}
                           if isinstance(table, nn.Embedding) else repr(table)[:60])
        out = getattr(model, "out", None)
        found["out"] = linear_facts(out)
        found["tied"] = isinstance(out, nn.Linear) and out.weight is getattr(getattr(model, "tok_embed", None),
                                                                              "weight", None)
        blocks = getattr(model, "blocks", None)
        found["blocks"] = len(blocks) if isinstance(blocks, nn.ModuleList) else repr(blocks)[:60]
        found["blocks_type"] = type(blocks).__name__
        found["norm"] = type(getattr(model, "norm", None)).__name__
        found["config"] = getattr(model, "config", None) is _PARTS_CONFIG
        return found

    return {"facts": attempt_as_is(facts)}


register("GPT_parts", _probe_model_parts)

# ---------------------------------------------------------------- the training checks: a task that needs attention

#: The task the notebook's visible code trains on (its CopyTask; tests/test_reference_gpt.py holds the two equal):
#: COPY_LENGTH tokens of a fixed random Markov chain over COPY_VOCAB tokens, the separator (token COPY_VOCAB), then
#: the same tokens again. The model's vocabulary is COPY_VOCAB + 1 tokens.
COPY_VOCAB, COPY_LENGTH = 12, 8
COPY_TRANSITIONS = torch.softmax(1.5 * torch.randn(COPY_VOCAB, COPY_VOCAB, generator=torch.Generator().manual_seed(0),
                                                   dtype=torch.float64), dim=-1)  # (V, V): row i is P(next | i)


def copy_sequences(n: int, generator: torch.Generator) -> Tensor:
    """``n`` sequences ``(n, 2 * COPY_LENGTH + 1)`` of the copy task, drawn by inverse CDF from ``generator``: the
    first token uniform, each next one from the chain's row of the last."""
    u = torch.rand(n, COPY_LENGTH, generator=generator, dtype=torch.float64)
    tokens = [(u[:, 0] * COPY_VOCAB).long()]
    cdf = COPY_TRANSITIONS.cumsum(dim=-1)
    for t in range(1, COPY_LENGTH):
        tokens.append((cdf[tokens[-1]] < u[:, t, None]).sum(dim=-1).clamp(max=COPY_VOCAB - 1))
    x = torch.stack(tokens, dim=1)  # (n, COPY_LENGTH)
    return torch.cat([x, torch.full((n, 1), COPY_VOCAB), x], dim=1)


#: the sequences each training check measures the trained model on (the notebook's own are drawn from other seeds)
TRAINS_EVAL = copy_sequences(256, torch.Generator().manual_seed(991))
COPIES_EVAL = copy_sequences(256, torch.Generator().manual_seed(992))
#: the parts that training must reach, by the names the exercise gives them
TRAINED_PARTS = ("tok_embed", "pos_embed", "blocks", "norm")


def _as_model(student: Any) -> nn.Module:
    if not isinstance(student, nn.Module):
        raise WrongOutput(f"the trained model should be the GPT the cell trained, an nn.Module; got "
                          f"{describe_value(student)}")
    return student


def _model_logits(model: nn.Module, tokens: Tensor) -> Tensor:
    """The model's logits on ``tokens (N, T)``: a float tensor ``(N, T, COPY_VOCAB + 1)`` on the CPU, or WrongOutput."""
    logits = model(tokens.clone())
    want = (*tokens.shape, COPY_VOCAB + 1)
    if not isinstance(logits, Tensor) or tuple(logits.shape) != want or not logits.is_floating_point() \
            or logits.device.type != "cpu":
        raise WrongOutput(f"on tokens of shape {tuple(tokens.shape)} the model returned {describe_value(logits)}, "
                          f"not logits of shape {want}")
    return logits


def _loss(logits: Tensor, targets: Tensor) -> float:
    return float(F.cross_entropy(logits.flatten(0, 1).double(), targets.flatten()))


def initial_loss(student: Any) -> float:
    """The loss on TRAINS_EVAL of a new, untrained model of the trained model's class and config (seed 0)."""
    model = _as_model(student)
    config = model.config
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        fresh = type(model)(config)
    with torch.no_grad():
        return _loss(_model_logits(_as_model(fresh).eval(), TRAINS_EVAL[:, :-1]), TRAINS_EVAL[:, 1:])


def _probe_trains(student: Any) -> Observations:
    def measure() -> dict[str, Any]:
        model = _as_model(student).eval()
        inputs, targets = TRAINS_EVAL[:, :-1], TRAINS_EVAL[:, 1:]
        changed = inputs.clone()
        changed[:, COPY_LENGTH:] = (changed[:, COPY_LENGTH:] + 1) % COPY_VOCAB  # the separator and the copy
        with torch.no_grad():
            logits, later = _model_logits(model, inputs), _model_logits(model, changed)
        chain = slice(0, COPY_LENGTH - 1)  # the positions whose next token the chain draws
        return {"loss": _loss(logits[:, chain], targets[:, chain]),
                "sees_future": not torch.allclose(later[:, :COPY_LENGTH], logits[:, :COPY_LENGTH], atol=1e-5)}

    return {"trained": attempt_as_is(measure), "initial": attempt_as_is(lambda: initial_loss(student))}


register("GPT_trains", _probe_trains)


def training_facts(student: Any) -> dict[str, str]:
    """For each part of TRAINED_PARTS, whether training can reach it: "missing", "unregistered" (its parameters are
    not among model.parameters(), so no optimiser sees them), "frozen" (requires_grad False), "no gradient" (a
    loss's gradient reaches none of its parameters) or "trained"."""
    model = _as_model(student)
    registered = {id(p) for p in model.parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    with torch.enable_grad():
        logits = _model_logits(model, COPIES_EVAL[:32, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), COPIES_EVAL[:32, 1:].flatten())
        grads = torch.autograd.grad(loss, trainable, allow_unused=True) if loss.requires_grad and trainable else []
    reached = {id(p) for p, g in zip(trainable, grads, strict=True) if g is not None and bool(g.abs().sum() > 0)}
    facts = {}
    for part in TRAINED_PARTS:
        found = getattr(model, part, None)
        modules = list(found) if isinstance(found, (list, tuple, nn.ModuleList)) else [found]
        params = [p for m in modules if isinstance(m, nn.Module) for p in m.parameters()]
        facts[part] = ("missing" if not params else "unregistered" if any(id(p) not in registered for p in params)
                       else "frozen" if any(not p.requires_grad for p in params)
                       else "no gradient" if not any(id(p) in reached for p in params) else "trained")
    return facts


def _probe_copies(student: Any) -> Observations:
    def write() -> Tensor:
        model = _as_model(student).eval()
        tokens = COPIES_EVAL[:, :COPY_LENGTH + 1]  # the chain's tokens and the separator
        with torch.no_grad():
            for _ in range(COPY_LENGTH):
                next_token = _model_logits(model, tokens)[:, -1].argmax(dim=-1, keepdim=True)  # (N, 1): greedy
                tokens = torch.cat([tokens, next_token], dim=1)
        return tokens[:, COPY_LENGTH + 1:]  # (N, COPY_LENGTH): what it wrote

    return {"copies": attempt(write), "parts": attempt_as_is(lambda: training_facts(student)),
            "initial": attempt_as_is(lambda: initial_loss(student))}


register("GPT_copies", _probe_copies)


# ================================================================ generate


class Rigged(nn.Module):
    """A stand-in for a trained GPT, to test ``generate``: the next token after a prefix is a fixed function of
    the whole prefix (its sum and its length), so feeding the wrong tokens, or the wrong positions, changes what
    comes out. It keeps the token ids in the cache it is given, through ``cache.update(layer, k, v)``, as a GPT
    keeps keys, and records what each call was fed: ``(T, T_cache)``, ``T_cache`` None without a cache; whether it
    was in training mode; whether gradients were tracked."""

    def __init__(self, vocab: int = 11, n_layers: int = 2, max_len: int = 40, sharpness: float = 4.0) -> None:
        super().__init__()
        self.config = Config(vocab=vocab, n_layers=n_layers, max_len=max_len)
        self.sharpness = sharpness
        self.calls: list[tuple[int, int | None]] = []
        self.modes: list[bool] = []
        self.grad: list[bool] = []
        self.anchor = nn.Parameter(torch.zeros(()))  # so that .parameters() is not empty

    def forward(self, tokens: Tensor, cache: Any = None) -> Tensor:
        self.modes.append(self.training)
        self.grad.append(torch.is_grad_enabled())
        start = None if cache is None else int(cache.length)
        self.calls.append((tokens.shape[1], start))
        context = tokens
        if cache is not None:
            ids = tokens.to(torch.float64)[:, None, :, None]  # (B, 1, T, 1): the ids, kept as keys are
            for layer in range(self.config.n_layers):
                everything, _ = cache.update(layer, ids, ids)
                if layer == 0:
                    context = everything[:, 0, :, 0].round().long()  # (B, T_cache + T)
        first = context.shape[1] - tokens.shape[1]
        rows = []
        for p in range(first, context.shape[1]):
            target = (context[:, : p + 1].sum(dim=1) * 3 + p) % self.config.vocab  # (B,)
            noise = seeded(self.config.vocab, seed=1000 + p, scale=0.5)
            rows.append(F.one_hot(target, self.config.vocab).double() * self.sharpness + noise.double())
        return torch.stack(rows, dim=1).float()  # (B, T, V)


@dataclass(frozen=True)
class GenerateCase:
    prompt: tuple[tuple[int, ...], ...]
    new: int
    use_cache: bool | None  # None: not passed, so the default (True) applies
    options: tuple[tuple[str, Any], ...] = (("temperature", 0.0),)
    training: bool = True  # the mode the model comes in

    def what(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in self.options if k != "generator")
        cache = "" if self.use_cache is None else f", use_cache={self.use_cache}"
        mode = "" if self.training else " on a model in eval mode"
        return f"generate(model, prompt {list(map(list, self.prompt))}, max_new_tokens={self.new}{cache}{extra}){mode}"


def run_generate(generate: Callable[..., Any], case: GenerateCase, seed: int = 0) -> tuple[Any, Rigged]:
    model = Rigged().train(case.training)
    options = dict(case.options)
    if "temperature" in options and options["temperature"] > 0:
        options["generator"] = torch.Generator().manual_seed(seed)
    if case.use_cache is not None:
        options["use_cache"] = case.use_cache
    out = generate(model, torch.tensor(case.prompt), case.new, **options)
    return out, model


def _probe_generate(cases: list[GenerateCase], too_long: bool = False) -> Callable[[Any], Observations]:
    def one(student: Any, case: GenerateCase) -> dict[str, Any]:
        out, model = run_generate(student, case)
        return {"out": plain(out), "calls": tuple(model.calls), "modes": tuple(model.modes),
                "training_after": model.training, "grad": tuple(model.grad)}

    def probe(student: Any) -> Observations:
        obs = {"runs": [attempt_as_is(lambda case=case: one(student, case)) for case in cases]}
        if too_long:
            obs["too_long"] = attempt(lambda: run_generate(student, TOO_LONG)[0])
        return obs

    return probe


GENERATE_TOKENS_CASES = [
    GenerateCase(((3, 4), (5, 5)), 6, False),
    GenerateCase(((7, 1, 2, 9),), 4, False),
    GenerateCase(((2,), (8,), (4,)), 1, False),
    GenerateCase(((6, 6, 6),), 0, False),
    GenerateCase(((1, 5),), 3, False, training=False),  # a model in eval mode stays in eval mode
]
GENERATE_CACHE_CASES = [
    GenerateCase(((3, 4), (5, 5)), 6, True),
    GenerateCase(((7, 1, 2, 9),), 4, True),
    GenerateCase(((2,), (8,), (4,)), 3, True),
    GenerateCase(((4, 2, 6),), 3, None),  # use_cache left at its default, True
]
#: a prompt of 3 and 38 new tokens: longer than the stand-in's max_len of 40, so ValueError
TOO_LONG = GenerateCase(((1, 2, 3),), 38, False)
register("generate_tokens", _probe_generate(GENERATE_TOKENS_CASES, too_long=True))
register("generate_cache", _probe_generate(GENERATE_CACHE_CASES))

SAMPLING_CASE = GenerateCase(((3, 4), (5, 5), (1, 2), (9, 9)), 8, True, (("temperature", 1.0),))


def _probe_sampling(student: Any) -> Observations:
    def draw(seed: int, **options: Any) -> Any:
        case = GenerateCase(SAMPLING_CASE.prompt, SAMPLING_CASE.new, True, tuple({**dict(SAMPLING_CASE.options),
                                                                                    **options}.items()))
        return plain(run_generate(student, case, seed)[0])

    return {"first": attempt(lambda: draw(5)), "again": attempt(lambda: draw(5)), "other": attempt(lambda: draw(6)),
            "top_k_1": attempt(lambda: draw(7, top_k=1)), "greedy": attempt(lambda: draw(0, temperature=0.0))}


register("generate_sampling", _probe_sampling)


# ================================================================ concept checks

KV_CACHE_ELEMENTS_CASES = [(12, 1, 12, 12, 1024, 64), (32, 4, 32, 8, 4096, 128), (2, 3, 6, 1, 10, 5)]

register("kv_cache_elements_answer", probe_answers(KV_CACHE_ELEMENTS_CASES))
