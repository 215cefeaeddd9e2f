"""Probes of Chapter 6 (``06_transformer``), judged in :mod:`autograder.judges.transformer`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases
are built here from fixed seeds, with plain torch only: the reference is not
in the grading sandbox. Each probe runs the learner's code on them and
returns plain observations.

To compare values, a probe copies seeded weights into the learner's modules.
It finds them by the names the exercise asks for (``self_attn``,
``cross_attn``, ``ff``, ``norm1`` … in the layers; ``src_embed``,
``tgt_embed``, ``encoder_layers``, ``decoder_layers``, ``encoder_norm``,
``decoder_norm``, ``out`` in the model). An attention may be the notebook's
given ``Attention`` (an ``nn.MultiheadAttention``) or Chapter 4's module with
``w_q``, ``w_k``, ``w_v``, ``w_o``; a feed-forward network is found by the
shapes of its two ``nn.Linear`` layers, so an ``nn.Sequential`` works too.
Properties that need no weights (causality, padding invariance, dropout)
are checked on the learner's own initialisation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from autograder.checks.core import (
    Check,
    Observations,
    Raised,
    WeightsNotLoaded,
    attempt,
    attempt_as_is,
    attempt_facts,
    declare,
    feed_forward_weights,
    layer_norm_weights,
    linear_facts,
    load_layer_norm,
    observe_contract,
    odd_tensor,
    plain,
    probe_answers,
    register,
    seeded,
    tensor_facts,
)

# ================================================================ weights, and copying them in

LAYER_PARTS = {
    "encoder": ("self_attn", "ff", "norm1", "norm2"),
    "decoder": ("self_attn", "cross_attn", "ff", "norm1", "norm2", "norm3"),
}


def _attention_weights(d: int, seed: int) -> dict[str, Tensor]:
    weights = {f"w_{s}": seeded(d, d, seed=seed + i, scale=d**-0.5) for i, s in enumerate("qkvo")}
    weights.update({f"b_{s}": seeded(d, seed=seed + 4 + i, scale=0.1) for i, s in enumerate("qkvo")})
    return weights


def _layer_weights(kind: str, d: int, d_ff: int, seed: int) -> dict[str, dict[str, Tensor]]:
    weights = {"self_attn": _attention_weights(d, seed), "ff": feed_forward_weights(d, d_ff, seed + 10),
               "norm1": layer_norm_weights(d, seed + 20), "norm2": layer_norm_weights(d, seed + 22)}
    if kind == "decoder":
        weights.update(cross_attn=_attention_weights(d, seed + 30), norm3=layer_norm_weights(d, seed + 24))
    return weights


def load_attention(module: Any, w: dict[str, Tensor], where: str) -> None:
    """Copy ``w`` into an ``nn.MultiheadAttention`` inside ``module``, or into its ``w_q`` … ``w_o`` Linears."""
    mha = next((m for m in module.modules() if isinstance(m, nn.MultiheadAttention)), None) \
        if isinstance(module, nn.Module) else None
    with torch.no_grad():
        if mha is not None and mha.in_proj_weight is not None and mha.in_proj_bias is not None:
            mha.in_proj_weight.copy_(torch.cat([w["w_q"], w["w_k"], w["w_v"]]))
            mha.in_proj_bias.copy_(torch.cat([w["b_q"], w["b_k"], w["b_v"]]))
            mha.out_proj.weight.copy_(w["w_o"])
            mha.out_proj.bias.copy_(w["b_o"])
            return
        layers = [getattr(module, f"w_{s}", None) for s in "qkvo"]
        if all(isinstance(layer, nn.Linear) and layer.bias is not None for layer in layers):
            for layer, s in zip(layers, "qkvo", strict=True):
                layer.weight.copy_(w[f"w_{s}"])
                layer.bias.copy_(w[f"b_{s}"])
            return
    raise WeightsNotLoaded(f"`{where}` is a {type(module).__name__}: found neither an nn.MultiheadAttention with "
                           f"biases (the given Attention is one) nor Linear layers w_q, w_k, w_v, w_o with biases")


def load_feed_forward(module: Any, w: dict[str, Tensor], where: str) -> None:
    """Copy ``w`` into the two ``nn.Linear`` layers of ``module``, told apart by their shapes."""
    d_ff, d = w["w1"].shape
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)] if isinstance(module, nn.Module) else []
    first = [m for m in linears if (m.in_features, m.out_features) == (d, d_ff) and m.bias is not None]
    second = [m for m in linears if (m.in_features, m.out_features) == (d_ff, d) and m.bias is not None]
    if len(linears) != 2 or len(first) != 1 or len(second) != 1:
        found = ", ".join(f"{m.in_features} -> {m.out_features}" + ("" if m.bias is not None else " without bias")
                          for m in linears) or "none"
        raise WeightsNotLoaded(f"`{where}` should hold two nn.Linear layers with biases, {d} -> {d_ff} and "
                               f"{d_ff} -> {d}; found: {found}")
    with torch.no_grad():
        first[0].weight.copy_(w["w1"])
        first[0].bias.copy_(w["b1"])
        second[0].weight.copy_(w["w2"])
        second[0].bias.copy_(w["b2"])


def load_layer(layer: Any, weights: dict[str, dict[str, Tensor]], kind: str, where: str) -> None:
    """Copy a layer's weights into the parts the exercise names (``self_attn``, ``ff``, ``norm1`` …)."""
    for name, w in weights.items():
        part = getattr(layer, name, None)
        if part is None:
            raise WeightsNotLoaded(f"{where} has no attribute `{name}` — store the parts as "
                                   f"{', '.join(LAYER_PARTS[kind])}, the names the exercise asks for")
        if name.endswith("attn"):
            load_attention(part, w, f"{where}.{name}")
        elif name == "ff":
            load_feed_forward(part, w, f"{where}.ff")
        else:
            load_layer_norm(part, w, f"{where}.{name}")


def _lengths_mask(lengths: list[int], t: int) -> Tensor:
    """``(B, T)``: True on the first ``lengths[b]`` positions of row ``b``."""
    return torch.arange(t) < torch.tensor(lengths)[:, None]


def _causal_mask(t: int) -> Tensor:
    """``(T, T)``: True on and below the diagonal, where a query may attend a key (no later position)."""
    return torch.ones(t, t, dtype=torch.bool).tril()


# ================================================================ FeedForward

_FF_CASES = [  # (d_model, d_ff, x, seed): any leading axes
    (12, 20, seeded(2, 5, 12, seed=501), 502),
    (8, 32, seeded(3, 8, seed=503), 504),
    (6, 10, seeded(4, 6, seed=505, dtype=torch.float64), 506),
]


def _run_ff(student: Any, d: int, d_ff: int, x: Tensor, seed: int, dropout: float = 0.0, train: bool = False) -> Any:
    module = student(d, d_ff, dropout) if dropout else student(d, d_ff)
    load_feed_forward(module, feed_forward_weights(d, d_ff, seed), "FeedForward")
    module = module.to(x.dtype).train(train)
    return module(x.clone())


def _probe_ff_layers(student: Any) -> Observations:
    def facts(*args: Any) -> Any:
        module = student(*args)
        linears = [linear_facts(m) for m in module.modules() if isinstance(m, nn.Linear)]
        return {"is_module": isinstance(module, nn.Module), "linears": linears}

    return {"plain": attempt_as_is(lambda: facts(12, 20)), "dropout": attempt_as_is(lambda: facts(12, 20, 0.3))}


FF_FORWARD = Check("FeedForward_forward", _FF_CASES, call=_run_ff)


def _probe_ff_forward(student: Any) -> Observations:
    """The values of FF_FORWARD's cases, then the gradient with respect to x of its float64 case."""
    def grad_run() -> dict[str, Any]:
        d, d_ff, x, seed = _FF_CASES[2]
        module = student(d, d_ff)
        load_feed_forward(module, feed_forward_weights(d, d_ff, seed), "FeedForward")
        module = module.double()
        leaf = x.clone().requires_grad_(True)
        out = module(leaf)
        (out * seeded(*out.shape, seed=507, dtype=out.dtype)).sum().backward()
        return {"grad": plain(leaf.grad)}

    return {**FF_FORWARD.probe(student), "grad": attempt_as_is(grad_run)}


_FF_DROP = (12, 20, seeded(2, 5, 12, seed=511), 512)


def _probe_ff_dropout(student: Any) -> Observations:
    d, d_ff, x, seed = _FF_DROP
    return {
        "all_dropped": attempt(lambda: _run_ff(student, d, d_ff, x, seed, dropout=1.0, train=True)),
        "eval": [attempt(lambda: _run_ff(student, d, d_ff, x, seed, dropout=0.5)) for _ in range(2)],
        "no_dropout": attempt(lambda: _run_ff(student, d, d_ff, x, seed)),
        "train": attempt(lambda: _run_ff(student, d, d_ff, x, seed, dropout=0.5, train=True)),
    }


register("FeedForward_layers", _probe_ff_layers)
register(FF_FORWARD.id, _probe_ff_forward)
register("FeedForward_dropout", _probe_ff_dropout)


# ================================================================ the layers: shared


@dataclass(frozen=True)
class LayerCase:
    d: int
    n_heads: int
    d_ff: int
    x: Tensor
    seed: int
    memory: Tensor | None = None  # decoder cases only
    tgt_mask: Tensor | None = None  # the encoder's src_mask, or the decoder's tgt_mask
    memory_mask: Tensor | None = None

    @property
    def kind(self) -> str:
        return "encoder" if self.memory is None else "decoder"

    def what(self, norm_first: bool) -> str:
        name = "EncoderLayer" if self.memory is None else "DecoderLayer"
        call = f"{name}({self.d}, {self.n_heads}, {self.d_ff}, dropout=0.0, norm_first={norm_first}) on x " \
               f"{tuple(self.x.shape)}"
        if self.memory is not None:
            call += f", memory {tuple(self.memory.shape)}"
        for label, mask in (("src_mask" if self.memory is None else "tgt_mask", self.tgt_mask),
                            ("memory_mask", self.memory_mask)):
            if mask is not None:
                call += f", {label} {tuple(mask.shape)}"
        return call + (" in float64" if self.x.dtype == torch.float64 else "")


def _build_layer(cls: Any, case: LayerCase, norm_first: bool) -> Any:
    layer = cls(case.d, case.n_heads, case.d_ff, dropout=0.0, norm_first=norm_first)
    load_layer(layer, _layer_weights(case.kind, case.d, case.d_ff, case.seed), case.kind, cls.__name__)
    return layer.to(case.x.dtype)


def _call_layer(layer: Any, case: LayerCase) -> Any:
    x = case.x.clone()
    masks = {}
    if case.memory is None:
        if case.tgt_mask is not None:
            masks["src_mask"] = case.tgt_mask.clone()
        return layer(x, **masks)
    for name, mask in (("tgt_mask", case.tgt_mask), ("memory_mask", case.memory_mask)):
        if mask is not None:
            masks[name] = mask.clone()
    return layer(x, case.memory.clone(), **masks)


def _run_layer(cls: Any, case: LayerCase, norm_first: bool) -> Any:
    return _call_layer(_build_layer(cls, case, norm_first).eval(), case)


#: The placements of the dropout checks' all-dropped runs: post-norm, then pre-norm.
DROPPED_NORM_FIRST = (False, True)


def _probe_parts(kind: str) -> Callable[[Any], Observations]:
    def facts(student: Any, norm_first: bool) -> dict[str, Any]:
        layer = student(16, 4, 24, dropout=0.1, norm_first=norm_first)
        found = {}
        for name in LAYER_PARTS[kind]:
            part = getattr(layer, name, None)
            found[name] = None if part is None else type(part).__name__
        norms = [getattr(layer, name, None) for name in LAYER_PARTS[kind] if name.startswith("norm")]
        return {
            "is_module": isinstance(layer, nn.Module),
            "parts": found,
            "norm_shapes": [tuple(n.normalized_shape) if isinstance(n, nn.LayerNorm) else None for n in norms],
            "shared_norm": len({id(n) for n in norms if n is not None}) < len([n for n in norms if n is not None]),
            "shared_attn": kind == "decoder" and getattr(layer, "self_attn", 0) is getattr(layer, "cross_attn", 1),
            "loads": attempt(lambda: load_layer(layer, _layer_weights(kind, 16, 24, 640), kind, type(layer).__name__)),
        }

    return lambda student: {"post": attempt_as_is(lambda: facts(student, False)),
                            "pre": attempt_as_is(lambda: facts(student, True))}


def _dropped_layer(cls: Any, case: LayerCase, norm_first: bool) -> Any:
    """``cls`` with dropout=1.0 and the case's weights, in training mode: every sublayer's output is dropped before
    it is added back, so post-norm gives the LayerNorms one after the other and pre-norm x itself."""
    layer = cls(case.d, case.n_heads, case.d_ff, dropout=1.0, norm_first=norm_first)
    load_layer(layer, _layer_weights(case.kind, case.d, case.d_ff, case.seed), case.kind, type(layer).__name__)
    return layer.train()


def _probe_dropout(case: LayerCase) -> Callable[[Any], Observations]:
    def run(student: Any, dropout: float, train: bool) -> Any:
        layer = student(case.d, case.n_heads, case.d_ff, dropout=dropout, norm_first=False)
        load_layer(layer, _layer_weights(case.kind, case.d, case.d_ff, case.seed), case.kind, type(layer).__name__)
        layer.train(train)
        return plain(_call_layer(layer, case)), plain(_call_layer(layer, case))  # the same layer, called twice

    def probe(student: Any) -> Observations:
        eval_pair = attempt_as_is(lambda: run(student, 0.5, False))
        return {"eval": eval_pair if isinstance(eval_pair, Raised) else list(eval_pair),
                "no_dropout": attempt(lambda: run(student, 0.0, False)[0]),
                "train": attempt_as_is(lambda: run(student, 0.5, True)),
                "all_dropped": [attempt(lambda nf=nf: _call_layer(_dropped_layer(student, case, nf), case))
                                for nf in DROPPED_NORM_FIRST]}

    return probe


# ================================================================ EncoderLayer

def _random_mask(b: int, t_q: int, t_k: int, seed: int) -> Tensor:
    """``(B, T_q, T_k)``, True with probability 0.6, and every query keeps key 0 (no empty row)."""
    mask = torch.rand(b, t_q, t_k, generator=torch.Generator().manual_seed(seed)) < 0.6
    mask[..., 0] = True
    return mask


_ENC_VALUE_CASES = [
    LayerCase(16, 4, 24, seeded(2, 5, 16, seed=601), 602),
    LayerCase(12, 3, 20, seeded(3, 4, 12, seed=611), 612),
    LayerCase(8, 2, 16, seeded(1, 6, 8, seed=621, dtype=torch.float64), 622),
]
ENC_MASK = declare(Check("EncoderLayer_src_mask", [  # (case, norm_first)
    (LayerCase(16, 4, 24, seeded(3, 6, 16, seed=631), 632, tgt_mask=_lengths_mask([6, 4, 2], 6)[:, None, :]), False),
    (LayerCase(16, 4, 24, seeded(3, 6, 16, seed=633), 634, tgt_mask=_lengths_mask([3, 6, 1], 6)[:, None, :]), True),
    (LayerCase(8, 2, 16, seeded(2, 5, 8, seed=635), 636, tgt_mask=_random_mask(2, 5, 5, seed=637)), False),
], call=_run_layer))
ENC_POST = declare(Check("EncoderLayer_post_norm", [(case, False) for case in _ENC_VALUE_CASES], call=_run_layer))
ENC_PRE = declare(Check("EncoderLayer_pre_norm", [(case, True) for case in _ENC_VALUE_CASES], call=_run_layer))
_ENC_DROP = LayerCase(16, 4, 24, seeded(2, 5, 16, seed=641), 642)

register("EncoderLayer_parts", _probe_parts("encoder"))
register("EncoderLayer_dropout", _probe_dropout(_ENC_DROP))


# ================================================================ DecoderLayer

def _decoder_masks(tgt_lengths: list[int], src_lengths: list[int], t: int, s: int) -> tuple[Tensor, Tensor]:
    tgt = _causal_mask(t) & _lengths_mask(tgt_lengths, t)[:, None, :]  # (B, T, T)
    return tgt, _lengths_mask(src_lengths, s)[:, None, :]  # (B, 1, S)


_DEC_VALUE_CASES = [
    LayerCase(16, 4, 24, seeded(2, 5, 16, seed=651), 652, memory=seeded(2, 7, 16, seed=653)),
    LayerCase(12, 3, 20, seeded(3, 4, 12, seed=654), 655, memory=seeded(3, 4, 12, seed=656)),  # T_tgt == T_src
    LayerCase(8, 2, 16, seeded(1, 3, 8, seed=657, dtype=torch.float64), 658,
              memory=seeded(1, 6, 8, seed=659, dtype=torch.float64)),
]
DEC_POST = declare(Check("DecoderLayer_post_norm", [(case, False) for case in _DEC_VALUE_CASES], call=_run_layer))
DEC_PRE = declare(Check("DecoderLayer_pre_norm", [(case, True) for case in _DEC_VALUE_CASES], call=_run_layer))
_M1 = _decoder_masks([5, 3, 2], [7, 4, 2], 5, 7)
_M3 = (_causal_mask(5), _lengths_mask([5, 3], 5)[:, None, :])
DEC_MASKS = declare(Check("DecoderLayer_masks", [  # (case, norm_first)
    (LayerCase(16, 4, 24, seeded(3, 5, 16, seed=661), 662, memory=seeded(3, 7, 16, seed=663), tgt_mask=_M1[0],
               memory_mask=_M1[1]), False),
    (LayerCase(16, 4, 24, seeded(3, 5, 16, seed=664), 665, memory=seeded(3, 7, 16, seed=666), tgt_mask=_M1[0],
               memory_mask=_M1[1]), True),
    (LayerCase(8, 2, 16, seeded(2, 5, 8, seed=667), 668, memory=seeded(2, 5, 8, seed=669), tgt_mask=_M3[0],
               memory_mask=_M3[1]), False),  # T_tgt == T_src: swapped masks and keys from the decoder still run
], call=_run_layer))
_DEC_DROP = LayerCase(16, 4, 24, seeded(2, 5, 16, seed=671), 672, memory=seeded(2, 6, 16, seed=673))

register("DecoderLayer_parts", _probe_parts("decoder"))
register("DecoderLayer_dropout", _probe_dropout(_DEC_DROP))


# ================================================================ TransformerConfig

CONFIG_FIELDS = ("src_vocab", "tgt_vocab", "d_model", "n_heads", "n_layers", "d_ff", "dropout", "max_len", "pad_id",
                 "norm_first")


def _probe_config_fields(student: Any) -> Observations:
    def values(config: Any) -> dict[str, Any]:
        return {name: plain(getattr(config, name, "<missing>")) for name in CONFIG_FIELDS}

    fields = None
    if dataclasses.is_dataclass(student):
        fields = [f.name for f in dataclasses.fields(student)]
    return {
        "is_dataclass": dataclasses.is_dataclass(student) and isinstance(student, type),
        "fields": fields,
        "keywords": attempt_as_is(lambda: values(student(src_vocab=11, tgt_vocab=13))),
        "positional": attempt_as_is(lambda: values(student(11, 13))),
        "no_vocab": attempt(lambda: student()),
    }


def _probe_config_errors(student: Any) -> Observations:
    return {"heads": attempt(lambda: student(10, 10, d_model=30, n_heads=4)),
            "odd": attempt(lambda: student(10, 10, d_model=9, n_heads=3)),
            "fine": attempt(lambda: (student(10, 10, d_model=12, n_heads=3), None)[1])}


register("TransformerConfig_fields", _probe_config_fields)
register("TransformerConfig_errors", _probe_config_errors)


# ================================================================ Transformer


@dataclass
class Config:
    """The probes' own config: the learner's Transformer is graded whatever their TransformerConfig does."""

    src_vocab: int
    tgt_vocab: int
    d_model: int = 16
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 24
    dropout: float = 0.0
    max_len: int = 20
    pad_id: int = 0
    norm_first: bool = False
    fused_attention: bool = False


def _model_weights(c: Config, seed: int) -> dict[str, Any]:
    d = c.d_model
    return {
        "src_embed": seeded(c.src_vocab, d, seed=seed, scale=d**-0.5),
        "tgt_embed": seeded(c.tgt_vocab, d, seed=seed + 1, scale=d**-0.5),
        "out": {"weight": seeded(c.tgt_vocab, d, seed=seed + 2, scale=d**-0.5),
                "bias": seeded(c.tgt_vocab, seed=seed + 3, scale=0.1)},
        "encoder_layers": [_layer_weights("encoder", d, c.d_ff, seed + 100 * (i + 1)) for i in range(c.n_layers)],
        "decoder_layers": [_layer_weights("decoder", d, c.d_ff, seed + 100 * (i + 1) + 50) for i in range(c.n_layers)],
        "encoder_norm": layer_norm_weights(d, seed + 4),
        "decoder_norm": layer_norm_weights(d, seed + 6),
    }


def load_model(model: Any, c: Config, seed: int) -> Any:
    """Copy seeded weights into a Transformer's parts, by the names the exercise asks for."""
    w = _model_weights(c, seed)
    with torch.no_grad():
        for name in ("src_embed", "tgt_embed"):
            table = getattr(model, name, None)
            if not isinstance(table, nn.Embedding) or table.weight.shape != w[name].shape:
                vocab = "src_vocab" if name == "src_embed" else "tgt_vocab"
                raise WeightsNotLoaded(f"Transformer.{name} should be an nn.Embedding({vocab}={w[name].shape[0]}, "
                                       f"d_model={c.d_model}), got {table!r:.60}")
            table.weight.copy_(w[name])
        out = getattr(model, "out", None)
        if not isinstance(out, nn.Linear) or out.weight.shape != w["out"]["weight"].shape or out.bias is None:
            raise WeightsNotLoaded(f"Transformer.out should be an nn.Linear(d_model={c.d_model}, "
                                   f"tgt_vocab={c.tgt_vocab}) with bias, got {out!r:.60}")
        out.weight.copy_(w["out"]["weight"])
        out.bias.copy_(w["out"]["bias"])
    for stack, kind in (("encoder_layers", "encoder"), ("decoder_layers", "decoder")):
        layers = list(getattr(model, stack, None) or [])
        if len(layers) != c.n_layers:
            raise WeightsNotLoaded(f"Transformer.{stack} should be an nn.ModuleList of n_layers={c.n_layers} "
                                   f"layers, found {len(layers)}")
        for i, (layer, lw) in enumerate(zip(layers, w[stack], strict=True)):
            load_layer(layer, lw, kind, f"Transformer.{stack}[{i}]")
    if c.norm_first:
        for name in ("encoder_norm", "decoder_norm"):
            load_layer_norm(getattr(model, name, None), w[name], f"Transformer.{name} (norm_first=True)")
    return model


@dataclass(frozen=True)
class ModelCase:
    config: Config
    src: Tensor
    tgt_in: Tensor
    seed: int

    def what(self, call: str) -> str:
        c = self.config
        return (f"Transformer(d_model={c.d_model}, n_heads={c.n_heads}, n_layers={c.n_layers}, "
                f"norm_first={c.norm_first}, pad_id={c.pad_id}).{call}")


def _tokens(rows: list[list[int]]) -> Tensor:
    return torch.tensor(rows, dtype=torch.long)


_SRC = _tokens([[5, 6, 7, 8, 9, 10, 3], [4, 4, 9, 0, 0, 0, 0], [3, 7, 0, 0, 0, 0, 0]])
_TGT_IN = _tokens([[1, 5, 6, 7, 8], [1, 9, 12, 0, 0], [1, 3, 0, 0, 0]])
_POST = Config(src_vocab=11, tgt_vocab=13)
_PRE = Config(src_vocab=11, tgt_vocab=13, n_layers=1, norm_first=True, d_model=12, n_heads=3, d_ff=20)
_MODEL_CASES = [
    ModelCase(_POST, _SRC, _TGT_IN, 701),
    ModelCase(_PRE, _SRC[:2, :5], _tokens([[1, 4, 4, 9, 2, 0], [1, 10, 0, 0, 0, 0]]), 711),
]


def _memory(case: ModelCase) -> Tensor:
    return seeded(case.src.shape[0], case.src.shape[1], case.config.d_model, seed=case.seed + 9)


def _loaded(student: Any, case: ModelCase) -> Any:
    return load_model(student(case.config), case.config, case.seed).eval()


MODEL_ENCODE = declare(Check("Transformer_encode", [(case,) for case in _MODEL_CASES],
                             call=lambda student, case: _loaded(student, case).encode(case.src.clone())))
MODEL_DECODE = declare(Check("Transformer_decode", [(case,) for case in _MODEL_CASES], call=lambda student, case:
                             _loaded(student, case).decode(case.tgt_in.clone(), _memory(case), case.src.clone())))


def _build(student: Any, c: Config, seed: int = 0) -> Any:
    """The learner's own initialisation, reproducible, without touching the kernel's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return student(c).eval()


_PARTS_CONFIG = Config(src_vocab=300, tgt_vocab=400, d_model=64, n_heads=4, n_layers=2, d_ff=32, norm_first=True)


def _probe_model_parts(student: Any) -> Observations:
    def facts() -> dict[str, Any]:
        model = _build(student, _PARTS_CONFIG)
        found: dict[str, Any] = {"is_module": isinstance(model, nn.Module)}
        for name in ("src_embed", "tgt_embed"):
            table = getattr(model, name, None)
            found[name] = ({"shape": tuple(table.weight.shape), "std": float(table.weight.std())}
                           if isinstance(table, nn.Embedding) else repr(table)[:60])
        found["out"] = linear_facts(getattr(model, "out", None))
        for stack in ("encoder_layers", "decoder_layers"):
            layers = getattr(model, stack, None)
            found[stack] = len(layers) if isinstance(layers, nn.ModuleList) else repr(layers)[:60]
        for name in ("encoder_norm", "decoder_norm"):
            found[name] = type(getattr(model, name, None)).__name__
        return found

    return {"facts": attempt_as_is(facts)}


def _probe_shapes(student: Any) -> Observations:
    def facts() -> dict[str, Any]:
        config = Config(src_vocab=11, tgt_vocab=13)
        model = _build(student, config)
        with torch.no_grad():
            memory = model.encode(_SRC.clone())
            decoded = model.decode(_TGT_IN.clone(), memory, _SRC.clone())
            logits = model(_SRC.clone(), _TGT_IN.clone())
        return {"config_kept": getattr(model, "config", None) is config, "memory": plain(memory),
                "decoded": plain(decoded), "logits": plain(logits)}

    def embedded(train: bool) -> Any:  # dropout=1.0: embed(src, src_embed), the stub's method, is all dropout
        model = _build(student, Config(src_vocab=11, tgt_vocab=13, n_layers=1, dropout=1.0)).train(train)
        if not callable(getattr(model, "embed", None)):
            return None  # an answer without the stub's embed: its dropout cannot be seen apart from the layers'
        with torch.no_grad():
            return plain(model.embed(_SRC.clone(), model.src_embed))

    return {"facts": attempt_as_is(facts), "dropped": attempt(lambda: embedded(True)),
            "kept": attempt(lambda: embedded(False))}


_CAUSAL_CASES = [  # (config, src, tgt_in, first changed position)
    (_POST, _SRC, _TGT_IN, 2),
    (_PRE, _SRC[:2, :5], _tokens([[1, 4, 4, 9, 2, 5], [1, 10, 3, 7, 0, 0]]), 1),
]


def _probe_causal(student: Any) -> Observations:
    def run(c: Config, src: Tensor, tgt_in: Tensor, start: int) -> Any:
        model = _build(student, c)
        changed = tgt_in.clone()
        changed[:, start:] = torch.randint(3, c.tgt_vocab, changed[:, start:].shape,
                                           generator=torch.Generator().manual_seed(start))
        with torch.no_grad():
            return plain(model(src.clone(), tgt_in.clone())), plain(model(src.clone(), changed))

    return {"pairs": [attempt(lambda case=case: run(*case)) for case in _CAUSAL_CASES]}


_PAD_CASES = [  # (config, src, extra pad columns, tgt_in)
    (_POST, _SRC, 3, _TGT_IN),
    (Config(src_vocab=11, tgt_vocab=13, pad_id=5, n_layers=1), _tokens([[0, 3, 4, 5, 5], [7, 0, 5, 5, 5]]), 2,
     _tokens([[1, 0, 2], [1, 3, 5]])),  # pad_id 5: 0 is a real token here
]


def _probe_padding(student: Any) -> Observations:
    def run(c: Config, src: Tensor, extra: int, tgt_in: Tensor) -> Any:
        model = _build(student, c)
        longer = torch.cat([src, torch.full((src.shape[0], extra), c.pad_id)], dim=1)
        with torch.no_grad():
            return {"memory": plain(model.encode(src.clone())), "memory_longer": plain(model.encode(longer)),
                    "logits": plain(model(src.clone(), tgt_in.clone())), "logits_longer": plain(model(longer, tgt_in))}

    return {"results": [attempt_as_is(lambda case=case: run(*case)) for case in _PAD_CASES]}


def _probe_dtype_device(student: Any) -> Observations:
    def run(device: str, dtype: torch.dtype) -> Any:
        model = _build(student, Config(src_vocab=11, tgt_vocab=13)).to(device=device, dtype=dtype)
        with torch.no_grad():
            return tensor_facts(model(_SRC.to(device), _TGT_IN.to(device)))

    return {"float64": attempt_as_is(lambda: run("cpu", torch.float64)),
            "meta": attempt_as_is(lambda: run("meta", torch.float32))}


def _probe_model_errors(student: Any) -> Observations:
    def model() -> Any:
        return _build(student, Config(src_vocab=11, tgt_vocab=13, max_len=6))

    long_tgt = torch.ones(3, 8, dtype=torch.long)
    return {"src": attempt(lambda: model().encode(_SRC.clone())),
            "tgt": attempt(lambda: model()(_SRC[:, :5].clone(), long_tgt)),
            "fits": attempt(lambda: plain(_build(student, Config(src_vocab=11, tgt_vocab=13, max_len=7)).encode(
                _SRC.clone())))}  # a source of exactly max_len = 7 tokens


_COPY_CONFIG = Config(src_vocab=10, tgt_vocab=10, d_model=16, n_heads=2, n_layers=2, d_ff=24, norm_first=True)


def _probe_gradients(student: Any) -> Observations:
    def run() -> dict[str, Any]:
        model = _build(student, _COPY_CONFIG).train()
        src, tgt_in = _tokens([[3, 4, 5, 0], [6, 7, 8, 9]]), _tokens([[1, 3, 4, 5, 0], [1, 6, 7, 8, 9]])
        tgt_out = _tokens([[3, 4, 5, 2, 0], [6, 7, 8, 9, 2]])
        logits = model(src, tgt_in)
        if not (isinstance(logits, Tensor) and logits.shape == (*tgt_out.shape, _COPY_CONFIG.tgt_vocab)
                and logits.is_floating_point() and odd_tensor(logits) is None):
            return {"logits": tensor_facts(logits), "missing": None}  # nothing to train on
        F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0).backward()
        missing = []
        for top in ("src_embed", "tgt_embed", "out", "encoder_layers", "decoder_layers"):
            part = getattr(model, top, None)
            if isinstance(part, nn.Module):
                missing += [f"{top}.{name}" for name, p in part.named_parameters()
                            if p.grad is None or not bool(p.grad.abs().sum() > 0)]
        return {"logits": tensor_facts(logits), "missing": missing}

    return {"result": attempt_as_is(run)}


register("Transformer_parts", _probe_model_parts)
register("Transformer_shapes", _probe_shapes)
register("Transformer_causal", _probe_causal)
register("Transformer_padding", _probe_padding)
register("Transformer_dtype_device", _probe_dtype_device)
register("Transformer_errors", _probe_model_errors)
register("Transformer_gradients", _probe_gradients)


# ================================================================ greedy_decode


class Scripted(nn.Module):
    """A stand-in model whose output is rigged: row ``b`` predicts ``script[t]`` at decoding position ``t``.

    The script of a row is found from its source tokens, so a decoder that
    handles rows one at a time works as well as one that decodes the batch.
    It records whether it was in training mode at every call.
    """

    def __init__(self, scripts: dict[tuple[int, ...], list[int]], vocab: int, pad_id: int) -> None:
        super().__init__()
        self.scripts, self.vocab = scripts, vocab
        self.config = Config(src_vocab=vocab, tgt_vocab=vocab, pad_id=pad_id)
        self.modes: list[bool] = []
        self.anchor = nn.Parameter(torch.zeros(()))  # so that .parameters() is not empty

    def encode(self, src: Tensor) -> Tensor:
        self.modes.append(self.training)
        return src.float().unsqueeze(-1)  # (B, T_src, 1)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        self.modes.append(self.training)
        rows = []
        for b, key in enumerate(src.tolist()):
            script = self.scripts[tuple(key)]
            picks = torch.tensor([script[min(t, len(script) - 1)] for t in range(tgt_in.shape[1])])
            noise = seeded(tgt_in.shape[1], self.vocab, seed=b, scale=0.1)
            rows.append(F.one_hot(picks, self.vocab).float() * 4.0 + noise)
        return torch.stack(rows).to(src.device)  # (B, T_tgt, V)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src), src)


@dataclass(frozen=True)
class DecodeCase:
    src: list[list[int]]
    scripts: list[list[int]]
    start: int
    end: int
    pad: int
    max_len: int
    vocab: int = 12

    def model(self) -> Scripted:
        scripts = {tuple(row): script for row, script in zip(self.src, self.scripts, strict=True)}
        return Scripted(scripts, self.vocab, self.pad)

    def what(self) -> str:
        rows = f"{len(self.src)} row" + ("s" if len(self.src) > 1 else "")
        return (f"greedy_decode(model, src of {rows}, start_id={self.start}, end_id={self.end}, "
                f"max_len={self.max_len}) with model.config.pad_id={self.pad}")


_TOKEN_CASES = [
    DecodeCase([[3, 4], [5, 6], [7, 8]], [[5, 2, 6, 7, 3, 4, 5, 6, 7, 8], [3, 4, 8, 2, 9, 5, 6, 7, 8, 9],
                                          [7, 6, 5, 4, 2, 8, 9, 3, 4, 5]], 1, 2, 0, 8),
    DecodeCase([[3], [4]], [[4, 5, 11, 6, 7, 8, 3, 4], [11, 3, 4, 5, 6, 7, 8, 3]], 10, 11, 9, 7),
    DecodeCase([[6, 6, 6]], [[3, 4, 5, 2, 6, 7, 8, 9, 3, 4]], 1, 2, 0, 10),
]
_STOP_CASES = [
    DecodeCase([[3, 4], [5, 6], [7, 8]], [[6, 5, 2, 3, 4, 5, 6, 8, 10], [3, 2, 4, 5, 6, 3, 4, 5, 10],
                                          [8, 4, 6, 3, 2, 5, 6, 3, 4]], 1, 2, 7, 9),
    DecodeCase([[3], [4]], [[2, 5, 6, 7, 8, 3], [2, 8, 7, 6, 5, 4]], 1, 2, 0, 6),
    DecodeCase([[9, 9], [8, 8]], [[3, 4, 10, 5, 6, 7, 8], [10, 4, 5, 6, 7, 8, 3]], 11, 10, 1, 7),
]
_MAX_LEN_CASES = [
    DecodeCase([[3, 3]], [[3, 4, 5, 6, 7, 8, 9, 10, 11, 3, 4, 5]], 1, 2, 0, 5),
    DecodeCase([[3], [4]], [[4, 5, 6, 7, 8, 9, 10, 11, 4], [5, 2, 3, 4, 5, 6, 7, 8, 9]], 1, 2, 0, 4),
    DecodeCase([[5]], [[3, 2, 4, 5]], 1, 2, 0, 1),
]


def _probe_greedy(cases: list[DecodeCase]) -> Callable[[Any], Observations]:
    def run(student: Any, case: DecodeCase) -> Any:
        model = case.model().train()
        out = student(model, torch.tensor(case.src, dtype=torch.long), case.start, case.end, case.max_len)
        return {"out": plain(out), "dtype": str(out.dtype) if isinstance(out, Tensor) else None,
                "modes": list(model.modes)}

    return lambda student: {"results": [attempt_as_is(lambda case=case: run(student, case)) for case in cases]}


#: The device case: _TOKEN_CASES[0] with its model and src on the meta device, which holds no data, and max_len=1, so
#: that no step runs (a step reads the tokens): the start column alone, which must be on the device of src.
META_DECODE = dataclasses.replace(_TOKEN_CASES[0], max_len=1)


def _probe_greedy_tokens(student: Any) -> Observations:
    def on_meta() -> Any:
        case = META_DECODE
        model = case.model().to("meta")
        return student(model, torch.tensor(case.src, dtype=torch.long, device="meta"), case.start, case.end,
                       case.max_len)

    return {**_probe_greedy(_TOKEN_CASES)(student), "meta": attempt_facts(on_meta)}


register("greedy_decode_tokens", _probe_greedy_tokens)
register("greedy_decode_stops", _probe_greedy(_STOP_CASES))
register("greedy_decode_max_len", _probe_greedy(_MAX_LEN_CASES))
register("greedy_decode_eval_mode", _probe_greedy(_TOKEN_CASES[:1]))


# ================================================================ label_smoothed_cross_entropy

def _ls_case(b: int, t: int, v: int, lengths: list[int], p: int, eps: float,
             seed: int) -> tuple[Tensor, Tensor, int, float]:
    """(logits (b, t, v), targets (b, t) right-padded with ``p`` after each row's length, pad_id, epsilon)."""
    logits = seeded(b, t, v, seed=seed, scale=2.0)
    targets = torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed + 1))
    targets = targets.masked_fill(targets == p, (p + 1) % v)  # no real target equals pad_id
    padding = torch.arange(t) >= torch.tensor(lengths)[:, None]
    return logits, targets.masked_fill(padding, p), p, eps


LS_VALUES = Check("label_smoothed_cross_entropy_values", [  # (logits, targets, pad_id, epsilon)
    _ls_case(2, 5, 7, [5, 5], 0, 0.1, seed=811),  # no padding at all
    _ls_case(3, 6, 11, [6, 4, 2], 0, 0.3, seed=813),
    _ls_case(2, 5, 9, [5, 2], 3, 0.25, seed=815),  # pad_id 3; 0 is a real target
])
#: (logits, targets, pad_id) of LS_VALUES' padded case, called without epsilon: the default must be 0.1.
LS_DEFAULT = LS_VALUES.cases[1][:3]


def _probe_ls_values(student: Any) -> Observations:
    logits, targets, pad_id = LS_DEFAULT
    return {**LS_VALUES.probe(student), "default": attempt(lambda: student(logits.clone(), targets.clone(), pad_id))}


register(LS_VALUES.id, _probe_ls_values)

LS_PLAIN = declare(Check("label_smoothed_cross_entropy_no_smoothing", [
    _ls_case(3, 6, 11, [6, 4, 2], 0, 0.0, seed=821),
    _ls_case(2, 5, 9, [5, 2], 3, 0.0, seed=823),
]))


def _ls_changed_at(logits: Tensor, where: Tensor, seed: int, scale: float) -> Tensor:
    return torch.where(where[..., None], seeded(*logits.shape, seed=seed, scale=scale), logits)


def _probe_ls_pads(student: Any) -> Observations:
    """The loss of each padded case, with the logits changed at the pads, then at the real positions."""
    results = []
    for i, (z, y, p, eps) in enumerate(LS_VALUES.cases[1:]):
        runs = (z, _ls_changed_at(z, y == p, seed=830 + i, scale=30.0), _ls_changed_at(z, y != p, seed=835 + i,
                                                                                          scale=3.0))
        results.append(tuple(attempt(lambda z=z, y=y, p=p, eps=eps: student(z.clone(), y.clone(), p, eps))
                             for z in runs))
    return {"results": results}


_LS_CONTRACT = {"logits": seeded(3, 4, 6, seed=841, dtype=torch.float64),
                "targets": torch.tensor([[1, 2, 3, 4], [5, 1, 0, 0], [2, 0, 0, 0]])}


def _ls_contract_call(function: Any) -> Callable[..., Any]:
    """``function(logits, targets, 0, 0.1)``, made 1-D so that the contract machinery can seed a cotangent."""
    def call(logits: Tensor, targets: Tensor) -> Any:
        loss = function(logits, targets, 0, 0.1)
        return loss.reshape(1) if isinstance(loss, Tensor) and loss.numel() == 1 else loss

    return call


LS_ERRORS = declare(Check("label_smoothed_cross_entropy_errors", [  # (logits, targets, pad_id, epsilon)
    (seeded(2, 5, 7, seed=851), torch.zeros(2, 4, dtype=torch.long), 0, 0.1),  # targets (2, 4) for logits (2, 5, 7)
    (seeded(2, 5, 7, seed=852), torch.ones(2, 5, dtype=torch.long), 0, 1.0),  # epsilon 1: no target left
    (seeded(2, 5, 7, seed=853), torch.ones(2, 5, dtype=torch.long), 0, -0.1),
], key="raised"))

register("label_smoothed_cross_entropy_ignores_pads", _probe_ls_pads)
register("label_smoothed_cross_entropy_gradients",
         lambda student: observe_contract(_ls_contract_call(student), _LS_CONTRACT, seed=843))


# ================================================================ noam_lr

#: (step, d_model, warmup): during the warm-up, at its end, after it; the paper's sizes among them.
_NOAM_CASES = [(1, 512, 4000), (100, 512, 4000), (4000, 512, 4000), (10_000, 512, 4000), (100_000, 512, 4000),
               (3, 64, 10), (10, 64, 10), (11, 64, 10), (250, 64, 10), (7, 128, 7)]
#: (d_model, warmup) of the schedules whose shape is checked, over steps 1 .. 3 * warmup.
_NOAM_SHAPES = [(64, 10), (256, 25)]
#: Arguments below 1: step 0 (which would divide by zero), then a warm-up of 0 and a d_model of 0.
_NOAM_ERRORS = [(0, 512, 4000), (5, 512, 0), (5, 0, 4000)]

register("noam_lr_values", probe_answers(_NOAM_CASES))
register("noam_lr_warmup", probe_answers([(step, d, w) for d, w in _NOAM_SHAPES for step in range(1, 3 * w + 1)]))
register("noam_lr_errors", lambda student: {"raised": [attempt(lambda args=args: student(*args))
                                                       for args in _NOAM_ERRORS]})


# ================================================================ concept checks

_DECODER_PASSES_CASES = [(3,), (40,), (7,)]
_SCORED_POSITIONS_CASES = [(3,), (8,), (20,)]

register("decoder_passes_answer", probe_answers(_DECODER_PASSES_CASES))
register("scored_positions_answer", probe_answers(_SCORED_POSITIONS_CASES))
