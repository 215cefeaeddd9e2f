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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from attention_course.text import CharCorpus
from autograder.checks.core import (
    Check,
    Observations,
    WeightsNotLoaded,
    attempt,
    attempt_as_is,
    declare,
    feed_forward_weights,
    layer_norm_weights,
    linear_facts,
    load_layer_norm,
    plain,
    probe_answers,
    register,
    seeded,
    seeded_mask,
)


class WrongOutput(TypeError):
    """The learner's function returned something that is not what the exercise asks for (shape, dtype)."""


# ================================================================ sample_next

#: the rows of logits that the sampling checks repeat: distinct values, no ties, spread over a few units
LOGITS = (
    torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5, -2.5]),
    torch.tensor([0.3, -1.2, 2.2, 1.1, -0.4, 0.9, -2.0, 1.6, 0.0, -0.8]),
)
DRAWS = 6000  # rows per case: the frequencies are within about 0.01 of the probabilities


def frequencies(tokens: Any, vocab: int) -> Tensor:
    """How often each of ``vocab`` token ids was drawn, from a ``(DRAWS,)`` LongTensor of ids."""
    if not isinstance(tokens, Tensor) or tokens.shape != (DRAWS,) or tokens.dtype != torch.int64:
        found = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, Tensor) else type(tokens).__name__
        raise WrongOutput(f"for logits of shape ({DRAWS}, {vocab}) it returned {found}, not a LongTensor of shape "
                          f"({DRAWS},): one token id per row")
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
SAMPLE_TOP_K = declare(Check("sample_next_top_k", [
    (LOGITS[0], 1.0, 3, None, 811), (LOGITS[1], 0.7, 4, None, 812), (LOGITS[1], 1.0, 1, None, 813),
    (LOGITS[0], 1.0, 50, None, 814),
], call=_draw, key="freqs"))
SAMPLE_TOP_P = declare(Check("sample_next_top_p", [  # masses where the nucleus has 3, 4, 2 and 5 tokens
    (LOGITS[0], 1.0, None, 0.8, 821), (LOGITS[1], 1.0, None, 0.75, 822), (LOGITS[0], 0.5, None, 0.9, 823),
    (LOGITS[1], 1.5, 5, 0.7, 824),
], call=_draw, key="freqs"))
GREEDY_ROWS = seeded(5, 9, seed=831, scale=2.0)


def _probe_greedy(student: Any) -> Observations:
    def greedy() -> Any:
        return student(GREEDY_ROWS.clone(), temperature=0.0, generator=torch.Generator().manual_seed(832))

    return {"greedy": attempt(greedy)}


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

    return {"draws": attempt_as_is(run)}


register("sample_next_greedy", _probe_greedy)
register("sample_next_generator", _probe_generator)


# ================================================================ online_softmax_attention

def _online(student: Any, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int) -> Any:
    return student(q, k, v, mask, block_size=block)


def _late_peak(seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v whose largest scores (about 300) sit in the last keys, after blocks of small ones: a running
    maximum that is never raised, or sums never rescaled, overflow or go wrong there."""
    q = seeded(2, 3, 8, seed=seed, scale=4.0)
    k = seeded(2, 12, 8, seed=seed + 1, scale=0.2)
    k[:, 9:] = q[:, :1].expand(2, 3, 8) * 3.0  # the last three keys line up with the first query
    return q, k, seeded(2, 12, 5, seed=seed + 2)


ONLINE_VALUES = declare(Check("online_softmax_attention_values", [  # (q, k, v, mask, block_size)
    (seeded(2, 4, 6, seed=851), seeded(2, 10, 6, seed=852), seeded(2, 10, 5, seed=853), None, 4),  # 4 + 4 + 2
    (seeded(2, 2, 3, 8, seed=854), seeded(2, 2, 7, 8, seed=855), seeded(2, 2, 7, 8, seed=856), None, 1),
    (seeded(1, 5, 4, seed=857), seeded(1, 6, 4, seed=858), seeded(1, 6, 3, seed=859), None, 16),  # one block
    (*_late_peak(860), None, 3),
], call=_online))


def _dead_rows(*shape: int, seed: int) -> Tensor:
    """A seeded mask (..., T_q, T_k) whose query 1 sees nothing and query 0 sees only its last key."""
    mask = seeded_mask(*shape, seed=seed)
    mask[..., 1, :] = False
    mask[..., 0, :] = False
    mask[..., 0, -1] = True  # its first blocks are all masked: the running maximum is -inf there
    mask[..., 2:, 0] = True
    return mask


ONLINE_MASKED = declare(Check("online_softmax_attention_masked", [
    (seeded(2, 4, 6, seed=861), seeded(2, 9, 6, seed=862), seeded(2, 9, 3, seed=863), _dead_rows(2, 4, 9, seed=864),
     4),
    (seeded(3, 5, 4, seed=865), seeded(3, 5, 4, seed=866), seeded(3, 5, 4, seed=867),
     torch.ones(5, 5, dtype=torch.bool).tril(), 2),  # causal, broadcast over the batch
    (seeded(2, 3, 4, seed=868), seeded(2, 7, 4, seed=869), seeded(2, 7, 2, seed=870), _dead_rows(2, 3, 7, seed=871),
     3),
], call=_online))


class _ShapeRecorder(TorchFunctionMode):
    """Records the shape of every floating-point tensor that a torch function returns inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: set[tuple[int, ...]] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, Tensor) and t.is_floating_point():
                self.shapes.add(tuple(t.shape))
        return out


#: T_q = 3 queries over T_k = 40 keys in blocks of 8: no floating tensor ending in (3, 40) may ever exist
BLOCK_CASE = (seeded(2, 3, 6, seed=881), seeded(2, 40, 6, seed=882), seeded(2, 40, 5, seed=883), 8)


def _probe_blocks(student: Any) -> Observations:
    q, k, v, block = BLOCK_CASE

    def run() -> dict[str, Any]:
        recorder = _ShapeRecorder()
        with recorder:
            out = student(q.clone(), k.clone(), v.clone(), None, block_size=block)
        widest = max((s[-1] for s in recorder.shapes if len(s) >= 2 and s[-2] == q.shape[-2]), default=0)
        return {"out": plain(out), "widest": widest}

    return {"run": attempt_as_is(run)}


register("online_softmax_attention_blocks", _probe_blocks)


# ================================================================ KVCache

# every update of a cache's script: (layer, k, v), k and v (B, n_kv_heads, T, d_head)
def _kv(t: int, seed: int, b: int = 2, heads: int = 2, d: int = 3) -> tuple[Tensor, Tensor]:
    return seeded(b, heads, t, d, seed=seed), seeded(b, heads, t, d, seed=seed + 1)


KV_SCRIPTS = [
    (2, [(0, *_kv(3, 901)), (1, *_kv(3, 903)), (0, *_kv(1, 905)), (1, *_kv(1, 907)), (0, *_kv(2, 909)),
         (1, *_kv(2, 911))]),
    (1, [(0, *_kv(4, 913, b=1, heads=1, d=2)), (0, *_kv(1, 915, b=1, heads=1, d=2))]),
]


def _run_cache(student: Any, n_layers: int, updates: list) -> tuple:
    """(what each update returned, the cache's keys, its values), each per update or per layer."""
    cache = student(n_layers)
    returned = tuple(plain(cache.update(layer, k.clone(), v.clone())) for layer, k, v in updates)
    return returned, plain(list(cache.keys)), plain(list(cache.values))


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


def in_chunks(module: Any, x: Tensor, chunks: tuple[int, ...], cache: ProbeCache, *layer: int) -> Tensor:
    """Feed ``x`` (or token ids) to ``module`` chunk by chunk through ``cache`` (as entry ``layer``, for one
    attention or block), without gradients: the outputs of every chunk, side by side."""
    outs, start = [], 0
    with torch.no_grad():
        for t in chunks:
            outs.append(module(x[:, start:start + t].clone(), cache, *layer))
            start += t
    return torch.cat(outs, dim=1)


def key_shapes(cache: ProbeCache) -> tuple:
    """The shape of the keys cached for each layer (None where nothing was cached)."""
    return tuple(None if k is None else tuple(k.shape) for k in cache.keys)


def _gqa_cached(student: Any, case: AttnCase) -> tuple:
    """(the outputs of every chunk, side by side; the shape of the keys cached for each layer)."""
    cache = ProbeCache(2)
    return in_chunks(build_attention(student, case), case.x, case.chunks, cache, 1), key_shapes(cache)


GQA_CACHE = declare(Check("GroupedQueryAttention_cache", [
    (AttnCase(16, 4, 2, seeded(2, 6, 16, seed=941), 942, chunks=(3, 2, 1)),),
    (AttnCase(24, 6, 3, seeded(1, 5, 24, seed=943), 944, chunks=(2, 1, 1, 1)),),
    (AttnCase(16, 4, 1, seeded(2, 5, 16, seed=945), 946, chunks=(1, 3, 1)),),
], call=_gqa_cached))


def _probe_gqa_projections(student: Any) -> Observations:
    def facts(*args: int) -> dict[str, Any]:
        module = student(*args)
        return {name: linear_facts(getattr(module, name, None)) for name in ("w_q", "w_k", "w_v", "w_o")}

    return {"gqa": attempt_as_is(lambda: facts(32, 8, 2)), "mqa": attempt_as_is(lambda: facts(24, 4, 1))}


register("GroupedQueryAttention_projections", _probe_gqa_projections)


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

    def what(self) -> str:
        return (f"GPTBlock({self.d}, {self.n_heads}, {self.n_kv}, {self.d_ff}) on x {tuple(self.x.shape)}"
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
    block = student(case.d, case.n_heads, case.n_kv, case.d_ff)
    load_block(block, block_weights(case.d, case.n_heads, case.n_kv, case.d_ff, case.seed), "GPTBlock")
    return block.eval()


def _block_forward(student: Any, case: BlockCase) -> Any:
    with torch.no_grad():
        return build_block(student, case)(case.x.clone())


def _block_cached(student: Any, case: BlockCase) -> tuple:
    cache = ProbeCache(3)
    return in_chunks(build_block(student, case), case.x, case.chunks, cache, 2), key_shapes(cache)


BLOCK_FORWARD = declare(Check("GPTBlock_forward", [
    (BlockCase(16, 4, 2, 24, seeded(2, 5, 16, seed=951), 952),),
    (BlockCase(12, 3, 1, 20, seeded(1, 6, 12, seed=953), 954),),
], call=_block_forward))
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
                f"n_layers={c.n_layers}) on tokens {tuple(self.tokens.shape)}"
                + (f" fed in chunks of {list(self.chunks)} with a cache" if self.chunks else ""))


def _tokens(vocab: int, b: int, t: int, seed: int) -> Tensor:
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


_SMALL = Config(vocab=13)
_MQA = Config(vocab=9, d_model=12, n_heads=3, n_kv_heads=1, n_layers=1, d_ff=20, max_len=10)


def _model_forward(student: Any, case: ModelCase) -> Any:
    with torch.no_grad():
        return load_model(student(case.config), case.config, case.seed)(case.tokens.clone())


MODEL_FORWARD = declare(Check("GPT_forward", [
    (ModelCase(_SMALL, _tokens(13, 2, 7, 971), 972),),
    (ModelCase(_MQA, _tokens(9, 3, 10, 973), 974),),  # T = max_len
], call=_model_forward))


def _model_cached(student: Any, case: ModelCase) -> Any:
    model = load_model(student(case.config), case.config, case.seed)
    return in_chunks(model, case.tokens, case.chunks, ProbeCache(case.config.n_layers))


MODEL_CACHE = declare(Check("GPT_cache", [
    (ModelCase(_SMALL, _tokens(13, 2, 7, 981), 982, chunks=(4, 1, 2)),),
    (ModelCase(_MQA, _tokens(9, 1, 10, 983), 984, chunks=(1, 1, 5, 3)),),  # the last position is max_len - 1
], call=_model_cached))

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
        found["norm"] = type(getattr(model, "norm", None)).__name__
        return found

    return {"facts": attempt_as_is(facts)}


register("GPT_parts", _probe_model_parts)

# ---------------------------------------------------------------- training on Python's help pages

#: the model, the run and the measure of the training check (the judge's docstring gives the measurements)
TRAIN = {"d_model": 48, "n_heads": 4, "n_kv_heads": 2, "n_layers": 1, "d_ff": 192, "max_len": 32,
         "steps": 120, "batch": 32, "lr": 1e-2, "held_out_batch": 64}


def _probe_learns(student: Any) -> Observations:
    def run() -> dict[str, Any]:
        corpus = CharCorpus.python_help()
        t, s = TRAIN["max_len"], TRAIN
        config = Config(vocab=len(corpus), d_model=s["d_model"], n_heads=s["n_heads"], n_kv_heads=s["n_kv_heads"],
                        n_layers=s["n_layers"], d_ff=s["d_ff"], max_len=t)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a model this small trains fastest on one thread
        begin = time.perf_counter()
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model = student(config).train()
                optimiser = torch.optim.AdamW(model.parameters(), lr=s["lr"])
                batches = torch.Generator().manual_seed(1)
                losses = []
                for _ in range(s["steps"]):
                    inputs, targets = corpus.batch(corpus.train, s["batch"], t, batches)
                    loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
                    optimiser.zero_grad()
                    loss.backward()
                    optimiser.step()
                    losses.append(float(loss))
                model.eval()
                inputs, targets = corpus.batch(corpus.held_out, s["held_out_batch"], t,
                                               torch.Generator().manual_seed(2))
                changed = inputs.clone()
                changed[:, t // 2:] = (changed[:, t // 2:] + 1) % len(corpus)  # the second half only
                with torch.no_grad():
                    logits = model(inputs)
                    held_out = float(F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
                    sees_future = not torch.allclose(model(changed)[:, : t // 2], logits[:, : t // 2], atol=1e-5)
        finally:
            torch.set_num_threads(threads)
        return {"first": losses[0], "last": losses[-1], "held_out": held_out, "sees_future": sees_future,
                "seconds": round(time.perf_counter() - begin, 1)}

    return {"run": attempt_as_is(run)}


register("GPT_learns", _probe_learns)


# ================================================================ generate


class Rigged(nn.Module):
    """A stand-in for a trained GPT, to test ``generate``: the next token after a prefix is a fixed function of
    the whole prefix (its sum and its length), so feeding the wrong tokens, or the wrong positions, changes what
    comes out. It keeps the token ids in the cache it is given, through ``cache.update(layer, k, v)``, as a GPT
    keeps keys, and records what each call was fed: ``(T, T_cache)``, ``T_cache`` None without a cache."""

    def __init__(self, vocab: int = 11, n_layers: int = 2, max_len: int = 40, sharpness: float = 4.0) -> None:
        super().__init__()
        self.config = Config(vocab=vocab, n_layers=n_layers, max_len=max_len)
        self.sharpness = sharpness
        self.calls: list[tuple[int, int | None]] = []
        self.modes: list[bool] = []
        self.anchor = nn.Parameter(torch.zeros(()))  # so that .parameters() is not empty

    def forward(self, tokens: Tensor, cache: Any = None) -> Tensor:
        self.modes.append(self.training)
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
    use_cache: bool
    options: tuple[tuple[str, Any], ...] = (("temperature", 0.0),)

    def what(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in self.options if k != "generator")
        return (f"generate(model, prompt {list(map(list, self.prompt))}, max_new_tokens={self.new}, "
                f"use_cache={self.use_cache}{extra})")


def run_generate(generate: Callable[..., Any], case: GenerateCase, seed: int = 0) -> tuple[Any, Rigged]:
    model = Rigged().train()
    options = dict(case.options)
    if "temperature" in options and options["temperature"] > 0:
        options["generator"] = torch.Generator().manual_seed(seed)
    out = generate(model, torch.tensor(case.prompt), case.new, use_cache=case.use_cache, **options)
    return out, model


def _probe_generate(cases: list[GenerateCase]) -> Callable[[Any], Observations]:
    def one(student: Any, case: GenerateCase) -> dict[str, Any]:
        out, model = run_generate(student, case)
        return {"out": plain(out), "calls": tuple(model.calls), "modes": tuple(model.modes),
                "training_after": model.training}

    return lambda student: {"runs": [attempt_as_is(lambda case=case: one(student, case)) for case in cases]}


GENERATE_TOKENS_CASES = [
    GenerateCase(((3, 4), (5, 5)), 6, False),
    GenerateCase(((7, 1, 2, 9),), 4, False),
    GenerateCase(((2,), (8,), (4,)), 1, False),
    GenerateCase(((6, 6, 6),), 0, False),
]
GENERATE_CACHE_CASES = [
    GenerateCase(((3, 4), (5, 5)), 6, True),
    GenerateCase(((7, 1, 2, 9),), 4, True),
    GenerateCase(((2,), (8,), (4,)), 3, True),
]
register("generate_tokens", _probe_generate(GENERATE_TOKENS_CASES))
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
POSITIONS_PROCESSED_CASES = [(5, 4, True), (5, 4, False), (100, 50, True), (100, 50, False), (3, 1, False)]

register("kv_cache_elements_answer", probe_answers(KV_CACHE_ELEMENTS_CASES))
register("positions_processed_answer", probe_answers(POSITIONS_PROCESSED_CASES))
