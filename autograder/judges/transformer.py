"""Judges of Chapter 6 (``06_transformer``), against :mod:`solutions.transformer`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.transformer`. Every named mistake is
declared once, in :mod:`attention_course.mistakes.transformer`, which the
visible checks use too: the judges pass the reference, or the reference's
parts, as the case (``declared(known.GROUP, reference, case=...)``) and raise
the value-free ones with ``mistake(known.NAME, **fields)``.

The reference modules are loaded with the same seeded weights the probes copy
into the learner's modules (with the loaders of the probes' module).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.mistakes import transformer as known
from attention_course.testing import DTYPE_CHANGED, NO_RETURN
from autograder.checks.core import Mistake, Observations, Raised, feed_forward_weights, seeded
from autograder.checks.transformer import (
    _CAUSAL_CASES,
    _DEC_DROP,
    _DECODER_PASSES_CASES,
    _ENC_DROP,
    _FF_CASES,
    _FF_DROP,
    _LS_CONTRACT,
    _MAX_LEN_CASES,
    _NOAM_CASES,
    _NOAM_ERRORS,
    _NOAM_SHAPES,
    _PAD_CASES,
    _PARTS_CONFIG,
    _SCORED_POSITIONS_CASES,
    _STOP_CASES,
    _TOKEN_CASES,
    CONFIG_FIELDS,
    DEC_MASKS,
    DEC_POST,
    DEC_PRE,
    DROPPED_NORM_FIRST,
    ENC_MASK,
    ENC_POST,
    ENC_PRE,
    FF_FORWARD,
    LAYER_PARTS,
    LS_DEFAULT,
    LS_ERRORS,
    LS_PLAIN,
    LS_VALUES,
    META_DECODE,
    MODEL_DECODE,
    MODEL_ENCODE,
    DecodeCase,
    LayerCase,
    ModelCase,
    _build_layer,
    _call_layer,
    _dropped_layer,
    _ls_contract_call,
    _memory,
    load_feed_forward,
    load_model,
)
from autograder.judges.core import (
    Compare,
    contract_check,
    declared,
    describe,
    judge,
    judge_answers,
    judge_cases,
    judge_meta_crash,
    judge_pads_ignored,
    judge_tensor,
    judge_value_error,
    mistake,
    register,
    unnamed,
)
from solutions import transformer as ref
from solutions.positional import sinusoidal_encoding

# ================================================================ shared

def _crashed(raised: Raised, what: str, *case: Any) -> Mistake:
    """What ``what`` raised; a probe that could not copy its weights in says so (``Compare.crashed`` too)."""
    if raised.type == "WeightsNotLoaded":
        return Mistake(unnamed(f"the test could not copy its weights into {what}: {raised.message}"))
    return Mistake(f"{what} {raised.describe()}")


def _tensor_result(result: Any, what: str, shape: tuple[int, ...]) -> Tensor:
    if isinstance(result, Raised):
        raise _crashed(result, what)
    if not isinstance(result, Tensor):
        extra = " — did you forget to `return` it?" if result is None else ""
        raise Mistake(f"{what} should return a tensor of shape {shape}, got {result!r:.80}{extra}")
    return result


def _a_module(got: Any, call: str) -> dict[str, Any]:
    """What a probe recorded of the module ``call`` builds, once it is known to be built and an nn.Module."""
    if isinstance(got, Raised):
        raise Mistake(f"{call} {got.describe()}")
    if not got["is_module"]:
        raise mistake(known.NOT_A_MODULE, call=call)
    return got


def _like_x(result: Any, what: str, x: Tensor) -> None:
    """A value check's guard: the result is a tensor, in float64 where x is."""
    got = _tensor_result(result, what, tuple(x.shape))
    if x.dtype == torch.float64 and got.dtype != torch.float64:
        raise Mistake(f"{what} returned {got.dtype} — keep the dtype of x", DTYPE_CHANGED)


# ================================================================ FeedForward

def _judge_ff_layers(obs: Observations) -> None:
    for key, call in (("plain", "FeedForward(12, 20)"), ("dropout", "FeedForward(12, 20, 0.3)")):
        got = _a_module(obs[key], call)
        shapes = [linear["weight"] for linear in got["linears"]]
        if len(shapes) != 2:  # named only when there is one: then the two were merged
            raise (mistake(known.SINGLE_LINEAR, call=call, n=1) if len(shapes) == 1
                   else Mistake(known.SINGLE_LINEAR.text(call=call, n=len(shapes))))
        if sorted(shapes) != sorted([(20, 12), (12, 20)]):
            found = ", ".join(f"{w[1]} -> {w[0]}" for w in shapes)
            if all(20 not in w for w in shapes):  # no layer is d_ff = 20 wide
                raise mistake(known.D_FF_IGNORED, call=call, found=found)
            raise Mistake(known.D_FF_IGNORED.text(call=call, found=found))
        if not all(linear["bias"] for linear in got["linears"]):
            raise mistake(known.NO_BIAS, call=call)


def _ff_parts(d: int, d_ff: int, seed: int, dtype: torch.dtype) -> tuple[Callable, Callable]:
    w = {name: t.to(dtype) for name, t in feed_forward_weights(d, d_ff, seed).items()}
    return (lambda x: F.linear(x, w["w1"], w["b1"])), (lambda h: F.linear(h, w["w2"], w["b2"]))


def _ff_case(d: int, d_ff: int, x: Tensor, seed: int) -> tuple[Tensor, Callable, Callable]:
    """A case of FeedForward_forward as its declarations take it: (x, the first Linear, the second)."""
    return (x, *_ff_parts(d, d_ff, seed, x.dtype))


def _ff_reference(d: int, d_ff: int, x: Tensor, seed: int) -> Tensor:
    lin1, lin2 = _ff_parts(d, d_ff, seed, x.dtype)
    return lin2(torch.relu(lin1(x)))


def _ff_what(d: int, d_ff: int, x: Tensor, seed: int) -> str:
    return f"FeedForward({d}, {d_ff}) on x {tuple(x.shape)}" + (" in float64" if x.dtype == torch.float64 else "")


_FF_VALUES = Compare(FF_FORWARD, _ff_reference, _ff_what, declared(known.FEED_FORWARD, None, case=_ff_case),
                     "Linear(d_model -> d_ff), ReLU, Dropout, "
                     "Linear(d_ff -> d_model), applied to the last axis",
                     guard=lambda out, what, d, d_ff, x, seed: _like_x(out, what, x), crashed=_crashed)


def _judge_ff_forward(obs: Observations) -> None:
    _FF_VALUES(obs)
    d, d_ff, x, seed = _FF_CASES[2]
    module = ref.FeedForward(d, d_ff)
    load_feed_forward(module, feed_forward_weights(d, d_ff, seed), "FeedForward")
    leaf = x.clone().requires_grad_(True)
    out = module.double()(leaf)
    (out * seeded(*out.shape, seed=507, dtype=out.dtype)).sum().backward()
    if isinstance(obs["grad"], Raised):
        raise Mistake(f"FeedForward in float64, forward and backward, {obs['grad'].describe()}")
    if obs["grad"]["grad"] is None:
        raise Mistake("no gradient reaches x through FeedForward — something detaches it")
    judge_tensor(obs["grad"]["grad"], leaf.grad, "the gradient of FeedForward with respect to x", atol=1e-8, rtol=1e-6)


def _judge_ff_dropout(obs: Observations) -> None:
    d, d_ff, x, seed = _FF_DROP
    lin1, lin2 = _ff_parts(d, d_ff, seed, x.dtype)
    w = feed_forward_weights(d, d_ff, seed)
    what = f"FeedForward({d}, {d_ff}, dropout=1.0) in training mode"
    judge_tensor(_tensor_result(obs["all_dropped"], what, tuple(x.shape)), w["b2"].expand(2, 5, d), what,
                 declared(known.FEED_FORWARD_DROPPED, None)(x, lin1, lin2),
                 hint="with p=1 every hidden unit is dropped, so only the second Linear's bias is left")
    what = f"FeedForward({d}, {d_ff}, dropout=0.5) in eval mode"
    a, b = (_tensor_result(out, what, tuple(x.shape)) for out in obs["eval"])
    plain_out = _tensor_result(obs["no_dropout"], f"FeedForward({d}, {d_ff})", tuple(x.shape))
    if not torch.allclose(a, b) or not torch.allclose(a, plain_out, atol=1e-6):
        raise mistake(known.FF_DROPOUT_IN_EVAL, call=what)
    train = _tensor_result(obs["train"], f"FeedForward({d}, {d_ff}, dropout=0.5) in training mode", tuple(x.shape))
    if torch.allclose(train, a):
        raise mistake(known.FF_NOTHING_DROPPED, call=f"FeedForward({d}, {d_ff}, dropout=0.5)")


register("FeedForward_layers", _judge_ff_layers)
register(FF_FORWARD.id, _judge_ff_forward)
register("FeedForward_dropout", _judge_ff_dropout)


# ================================================================ the layers: shared


def _ref_class(case: LayerCase) -> type:
    return ref.EncoderLayer if case.memory is None else ref.DecoderLayer


def _ref_layer(case: LayerCase) -> nn.Module:
    """The reference's layer, loaded with the case's weights: its attentions, feed-forward and LayerNorms."""
    return _build_layer(_ref_class(case), case, norm_first=False).eval()


def _encoder_case(case: LayerCase, norm_first: bool) -> tuple:
    """A case of the encoder's value checks as its declarations take it: x, the reference's parts, the mask."""
    layer = _ref_layer(case)
    return case.x, layer.self_attn, layer.ff, [layer.norm1, layer.norm2], case.tgt_mask, norm_first


def _decoder_case(case: LayerCase, norm_first: bool) -> tuple:
    """A case of the decoder's value checks as its declarations take it: x, memory, the reference's parts, the
    masks."""
    layer = _ref_layer(case)
    return (case.x, case.memory, layer.self_attn, layer.cross_attn, layer.ff, [layer.norm1, layer.norm2, layer.norm3],
            case.tgt_mask, case.memory_mask, norm_first)


def _layer_reference(case: LayerCase, norm_first: bool) -> Tensor:
    layer = _ref_layer(case)
    layer.norm_first = norm_first
    return _call_layer(layer, case).detach()


def _layer_guard(out: Any, what: str, case: LayerCase, norm_first: bool) -> None:
    _like_x(out, what, case.x)


def _judge_parts(kind: str) -> Callable[[Observations], None]:
    name = "EncoderLayer" if kind == "encoder" else "DecoderLayer"

    def judge(obs: Observations) -> None:
        for key, norm_first in (("post", False), ("pre", True)):
            call = f"{name}(16, 4, 24, dropout=0.1, norm_first={norm_first})"
            got = _a_module(obs[key], call)
            missing = [part for part, kind_name in got["parts"].items() if kind_name is None]
            if missing:
                raise mistake(known.PARTS_NOT_NAMED, call=call, missing=", ".join(f"`{m}`" for m in missing),
                              parts=", ".join(LAYER_PARTS[kind]))
            if got["shared_attn"]:
                raise mistake(known.ONE_ATTENTION, call=call)
            if got["shared_norm"]:
                raise mistake(known.ONE_NORM_OBJECT, call=call)
            bad = [i + 1 for i, shape in enumerate(got["norm_shapes"]) if shape != (16,)]
            if bad:
                raise Mistake(unnamed(f"{call}.norm{bad[0]} should be nn.LayerNorm(d_model) = nn.LayerNorm(16), "
                                       f"got {got['parts'][f'norm{bad[0]}']} of shape "
                                       f"{got['norm_shapes'][bad[0] - 1]}"))
            if isinstance(got["loads"], Raised):
                raise _crashed(got["loads"], call)

    return judge


def _dropped_case(case: LayerCase, norm_first: bool) -> tuple:
    """An all-dropped case as the declarations take it: the reference's parts with dropout=1.0, in training mode."""
    layer = _dropped_layer(_ref_class(case), case, norm_first)
    norms = [layer.norm1, layer.norm2] + ([layer.norm3] if case.memory is not None else [])
    if case.memory is None:
        return case.x, layer.self_attn, layer.ff, norms, case.tgt_mask, norm_first
    return (case.x, case.memory, layer.self_attn, layer.cross_attn, layer.ff, norms, case.tgt_mask, case.memory_mask,
            norm_first)


def _judge_dropout(name: str, case: LayerCase, sites: Callable[..., list]) -> Callable[[Observations], None]:
    def judge(obs: Observations) -> None:
        shape = tuple(case.x.shape)
        call = f"{name}({case.d}, {case.n_heads}, {case.d_ff}, dropout=0.5)"
        if isinstance(obs["eval"], Raised):
            raise _crashed(obs["eval"], f"{call} in eval mode")
        if isinstance(obs["train"], Raised):
            raise _crashed(obs["train"], f"{call} in training mode")
        first, second = (_tensor_result(o, f"{call} in eval mode", shape) for o in obs["eval"])
        plain_out = _tensor_result(obs["no_dropout"], f"{name}(..., dropout=0.0)", shape)
        if not torch.allclose(first, second) or not torch.allclose(first, plain_out, atol=1e-6):
            raise mistake(known.LAYER_DROPOUT_IN_EVAL, call=call)
        a, b = (_tensor_result(o, f"{call} in training mode", shape) for o in obs["train"])
        if torch.allclose(a, b):
            raise mistake(known.DROPOUT_IGNORED, call=call)
        for got, norm_first in zip(obs["all_dropped"], DROPPED_NORM_FIRST, strict=True):
            what = (f"{name}({case.d}, {case.n_heads}, {case.d_ff}, dropout=1.0, norm_first={norm_first}) in "
                    f"training mode")
            if isinstance(got, Raised):
                raise _crashed(got, what)
            expected = _call_layer(_dropped_layer(_ref_class(case), case, norm_first), case).detach()
            left = "x itself" if norm_first else "the LayerNorms applied to x one after the other"
            judge_tensor(got, expected, what, sites(case, norm_first),
                         hint=f"dropout=1.0 drops each sublayer's output before it is added back, which leaves {left}")

    return judge


# ================================================================ EncoderLayer

def _encoder_hint(case: LayerCase, norm_first: bool) -> str:
    blocks = ("x = x + attn(LN1(x)); out = x + FF(LN2(x))" if norm_first
              else "x = LN1(x + attn(x)); out = LN2(x + FF(x))")
    return f"{blocks}, with dropout after each sublayer" + ("; src_mask goes to the self-attention"
                                                            if case.tgt_mask is not None else "")


register("EncoderLayer_parts", _judge_parts("encoder"))
for check in (ENC_POST, ENC_PRE, ENC_MASK):
    judge(Compare(check, _layer_reference, LayerCase.what, declared(known.ENCODER_LAYER, None, case=_encoder_case),
                  _encoder_hint, guard=_layer_guard, crashed=_crashed))
register("EncoderLayer_dropout", _judge_dropout("EncoderLayer", _ENC_DROP,
                                                declared(known.ENCODER_DROPPED, None, case=_dropped_case)))


# ================================================================ DecoderLayer

def _decoder_hint(case: LayerCase, norm_first: bool) -> str:
    blocks = ("x = x + self_attn(LN1(x)); x = x + cross_attn(LN2(x), memory); out = x + FF(LN3(x))" if norm_first
              else "x = LN1(x + self_attn(x)); x = LN2(x + cross_attn(x, memory)); out = LN3(x + FF(x))")
    masks = "; tgt_mask goes to the self-attention, memory_mask to the cross-attention" \
        if case.tgt_mask is not None or case.memory_mask is not None else ""
    return f"{blocks}, queries from x and keys and values from memory in the cross-attention{masks}"


register("DecoderLayer_parts", _judge_parts("decoder"))
for check in (DEC_POST, DEC_PRE, DEC_MASKS):
    judge(Compare(check, _layer_reference, LayerCase.what, declared(known.DECODER_LAYER, None, case=_decoder_case),
                  _decoder_hint, guard=_layer_guard, crashed=_crashed))
register("DecoderLayer_dropout", _judge_dropout("DecoderLayer", _DEC_DROP,
                                                declared(known.DECODER_DROPPED, None, case=_dropped_case)))


# ================================================================ TransformerConfig

def _judge_config_fields(obs: Observations) -> None:
    if not obs["is_dataclass"]:
        raise mistake(known.NOT_A_DATACLASS)
    missing = [name for name in CONFIG_FIELDS if name not in obs["fields"]]
    if missing:
        raise mistake(known.FIELDS_MISSING, missing=", ".join(missing))
    got = obs["keywords"]
    if isinstance(got, Raised):
        raise Mistake(f"TransformerConfig(src_vocab=11, tgt_vocab=13) {got.describe()}")
    want = dataclasses.asdict(ref.TransformerConfig(src_vocab=11, tgt_vocab=13))
    for name in CONFIG_FIELDS:
        if got[name] != want[name] or type(got[name]) is not type(want[name]):
            call = "TransformerConfig(src_vocab=11, tgt_vocab=13)"
            if name in ("src_vocab", "tgt_vocab"):  # given by the caller, not a default
                raise Mistake(f"{call}.{name} is {got[name]!r}, expected {want[name]!r}")
            raise mistake(known.CONFIG_DEFAULTS.named(f"{name} default"), call=call, got=repr(got[name]),
                          want=repr(want[name]))
    positional = obs["positional"]
    if isinstance(positional, Raised) or (positional["src_vocab"], positional["tgt_vocab"]) != (11, 13):
        raise mistake(known.FIELD_ORDER)
    if not isinstance(obs["no_vocab"], Raised) or obs["no_vocab"].type != "TypeError":
        raise mistake(known.VOCABULARIES_WITH_DEFAULTS)


def _judge_config_errors(obs: Observations) -> None:
    judge_value_error(obs["heads"], "TransformerConfig(10, 10, d_model=30, n_heads=4), where n_heads does not divide "
                      "d_model,", ("30", "4"))
    judge_value_error(obs["odd"], "TransformerConfig(10, 10, d_model=9, n_heads=3), whose odd d_model cannot hold "
                      "(sin, cos) pairs,", ("9",))
    if isinstance(obs["fine"], Raised):
        raise Mistake(f"TransformerConfig(10, 10, d_model=12, n_heads=3) is valid but {obs['fine'].describe()}")


register("TransformerConfig_fields", _judge_config_fields)
register("TransformerConfig_errors", _judge_config_errors)


# ================================================================ Transformer

def _ref_model(case: ModelCase) -> ref.Transformer:
    fields = {f.name: getattr(case.config, f.name) for f in dataclasses.fields(case.config)}
    return load_model(ref.Transformer(ref.TransformerConfig(**fields)), case.config, case.seed).eval()


@torch.no_grad()
def _encode_reference(case: ModelCase) -> Tensor:
    return _ref_model(case).encode(case.src)


def _encode_case(case: ModelCase) -> tuple:
    """A case of Transformer_encode as its declarations take it: (the reference model, src, its positional table)."""
    m = _ref_model(case)
    return m, case.src, sinusoidal_encoding(m.config.max_len, m.config.d_model)


judge(Compare(
    MODEL_ENCODE, _encode_reference,
    lambda case: case.what(f"encode(src {tuple(case.src.shape)})"), declared(known.ENCODE, None, case=_encode_case),
    lambda case: "memory = the encoder layers on src_embed(src) · √d_model + positions, with the source padding "
    "mask" + ("; a final LayerNorm" if case.config.norm_first else ""),
    guard=lambda out, what, case: _tensor_result(out, what, (*case.src.shape, case.config.d_model)),
    crashed=_crashed))


@torch.no_grad()
def _decode_reference(case: ModelCase) -> Tensor:
    return _ref_model(case).decode(case.tgt_in, _memory(case), case.src)


def _decode_case(case: ModelCase) -> tuple:
    """A case of Transformer_decode as its declarations take it: (the reference model, tgt_in, memory, src, the
    positional table)."""
    m = _ref_model(case)
    return m, case.tgt_in, _memory(case), case.src, sinusoidal_encoding(m.config.max_len, m.config.d_model)


judge(Compare(
    MODEL_DECODE, _decode_reference,
    lambda case: case.what(f"decode(tgt_in {tuple(case.tgt_in.shape)}, memory, src {tuple(case.src.shape)})"),
    declared(known.DECODE, None, case=_decode_case),
    hint="logits = out(decoder layers on tgt_embed(tgt_in) · √d_model + positions), with the causal & target "
    "padding mask and the source padding mask as memory_mask",
    guard=lambda out, what, case: _tensor_result(out, what, (*case.tgt_in.shape, case.config.tgt_vocab)),
    crashed=_crashed))


def _judge_model_parts(obs: Observations) -> None:
    c = _PARTS_CONFIG
    call = f"Transformer(config with src_vocab={c.src_vocab}, tgt_vocab={c.tgt_vocab}, d_model={c.d_model}, " \
           f"n_layers={c.n_layers}, norm_first=True)"
    got = _a_module(obs["facts"], call)
    for name, vocab in (("src_embed", c.src_vocab), ("tgt_embed", c.tgt_vocab)):
        table = got[name]
        if not isinstance(table, dict) or table["shape"] != (vocab, c.d_model):
            raise Mistake(unnamed(f"{call}.{name} should be an nn.Embedding({vocab}, {c.d_model}), got {table}"))
        std, want = table["std"], c.d_model**-0.5
        if not 0.8 * want < std < 1.25 * want:
            raise mistake(known.EMBEDDINGS_STD_1 if std > 0.5 else known.EMBEDDINGS_WRONG_STD, call=call, name=name,
                          std=std, want=want)
    if got["out"] != {"type": "Linear", "weight": (c.tgt_vocab, c.d_model), "bias": True}:
        raise Mistake(unnamed(f"{call}.out should be an nn.Linear({c.d_model}, {c.tgt_vocab}) with bias, giving "
                               f"one logit per target word; got {got['out']}"))
    for stack in ("encoder_layers", "decoder_layers"):
        if got[stack] != c.n_layers:
            raise Mistake(f"{call}.{stack} should be an nn.ModuleList of n_layers={c.n_layers} layers, got "
                          f"{got[stack]!r}: a plain list hides the layers' weights from .parameters()")
    for name in ("encoder_norm", "decoder_norm"):
        if got[name] != "LayerNorm":
            raise Mistake(f"{call}.{name} should be an nn.LayerNorm(d_model) when norm_first=True, got {got[name]!r}")


def _judge_shapes(obs: Observations) -> None:
    got = obs["facts"]
    what = "Transformer(d_model=16, src_vocab=11, tgt_vocab=13) on src (3, 7) and tgt_in (3, 5)"
    if isinstance(got, Raised):
        raise Mistake(f"{what}: encode, decode and forward {got.describe()}")
    if not got["config_kept"]:
        raise mistake(known.CONFIG_NOT_KEPT)
    for key, call, shape in (("memory", "encode(src)", (3, 7, 16)), ("decoded", "decode(tgt_in, memory, src)",
                                                                     (3, 5, 13)), ("logits", "forward", (3, 5, 13))):
        t = got[key]
        if not isinstance(t, Tensor) or tuple(t.shape) != shape:
            found = tuple(t.shape) if isinstance(t, Tensor) else repr(t)[:60]
            raise Mistake(f"{what}: {call} gave {found}, expected {shape}")
    if not torch.allclose(got["logits"], got["decoded"], atol=1e-5, rtol=1e-4):
        raise mistake(known.FORWARD_NOT_ENCODE_DECODE, what)
    what = "Transformer(dropout=1.0).embed(src (3, 7), src_embed)"
    dropped, kept = obs["dropped"], obs["kept"]
    if dropped is None and kept is None:
        return  # no embed method: the stub's, which the notebook gives, was replaced
    for out, mode in ((dropped, "training"), (kept, "eval")):
        if isinstance(out, Raised):
            raise Mistake(f"{what} in {mode} mode {out.describe()}")
        if not isinstance(out, Tensor) or tuple(out.shape) != (3, 7, 16):
            raise Mistake(f"{what} in {mode} mode should give a tensor of shape (3, 7, 16), got {describe(out)}")
    if dropped.count_nonzero():
        raise mistake(known.EMBEDDING_DROPOUT_MISSING, what)
    if not kept.count_nonzero():
        raise mistake(known.EMBEDDING_DROPOUT_IN_EVAL, what)


def _judge_causal(obs: Observations) -> None:
    for (c, _, tgt_in, start), pair in zip(_CAUSAL_CASES, obs["pairs"], strict=True):
        what = f"Transformer(norm_first={c.norm_first})(src, tgt_in {tuple(tgt_in.shape)})"
        if isinstance(pair, Raised):
            raise Mistake(f"{what} {pair.describe()}")
        before, after = pair
        shape = (*tgt_in.shape, c.tgt_vocab)
        if not isinstance(before, Tensor) or tuple(before.shape) != shape:
            raise Mistake(f"{what} should return logits of shape {shape}, got {before!r:.60}")
        if not torch.allclose(before[:, :start], after[:, :start], atol=1e-5, rtol=1e-4):
            raise mistake(known.SEES_THE_FUTURE, what, start=start, last=start - 1)
        if torch.allclose(before[:, start:], after[:, start:]):
            raise Mistake(f"{what}: the logits at positions {start}.. do not change when the target tokens there "
                          f"change — does decode read tgt_in?")


def _judge_padding(obs: Observations) -> None:
    for i, ((c, src, extra, _), got) in enumerate(zip(_PAD_CASES, obs["results"], strict=True)):
        what = f"Transformer(pad_id={c.pad_id}) on src {src.tolist()}"
        if isinstance(got, Raised):
            raise Mistake(f"{what} {got.describe()}")
        hard_coded = i > 0  # a case whose pad_id is not 0
        real = src != c.pad_id
        memory, longer = got["memory"], got["memory_longer"]
        if not isinstance(memory, Tensor) or tuple(memory.shape) != (*src.shape, c.d_model):
            raise Mistake(f"{what}: encode gave {memory!r:.60}, expected memory of shape {(*src.shape, c.d_model)}")
        if not torch.allclose(longer[:, : src.shape[1]][real], memory[real], atol=1e-5, rtol=1e-4):
            raise mistake(known.ENCODER_PAD_ID_0 if hard_coded else known.ENCODER_ATTENDS_PADS, what, extra=extra)
        if not torch.allclose(got["logits_longer"], got["logits"], atol=1e-5, rtol=1e-4):
            raise mistake(known.MEMORY_PAD_ID_0 if hard_coded else known.MEMORY_PADS_ATTENDED, what, extra=extra)


def _judge_dtype_device(obs: Observations) -> None:
    got = obs["float64"]
    what = "Transformer(...).double() on src (3, 7), tgt_in (3, 5)"
    if isinstance(got, Raised):  # named only when the error is about dtypes: then something stayed in float32
        about_dtype = any(word in got.message.lower() for word in ("dtype", "scalar type", "double", "float"))
        raise Mistake(f"{what} {got.describe()} — keep the positional table in the model's dtype: register it "
                      f"as a buffer: .double() and .to(device) move buffers too",
                      DTYPE_CHANGED if about_dtype else None)
    if not isinstance(got, dict):
        raise Mistake(f"{what} should return logits of shape (3, 5, 13), got {describe(got)}")
    if got["dtype"] != "torch.float64":
        raise Mistake(f"{what} returned {got['dtype']} logits — keep the model's dtype; a positional table "
                      f"registered as a buffer follows .double()", DTYPE_CHANGED)
    got = obs["meta"]
    what = "Transformer(...).to('meta') on src and tgt_in on the meta device"
    if isinstance(got, Raised):  # named only when the error is about devices: then something stayed on the CPU
        if "device" in got.message.lower():
            raise mistake(known.MASK_ON_CPU, call=what, found=got.describe())
        raise Mistake(known.MASK_ON_CPU.text(call=what, found=got.describe()))
    if not isinstance(got, dict) or got["device"] != "meta" or got["shape"] != (3, 5, 13):
        raise Mistake(known.MASK_ON_CPU.text(call=what, found=f"gave {got}, expected meta logits of shape (3, 5, 13)"))


def _judge_model_errors(obs: Observations) -> None:
    judge_value_error(obs["src"], "Transformer(max_len=6).encode(src of length 7)", ("7", "6"))
    judge_value_error(obs["tgt"], "Transformer(max_len=6)(src (3, 5), tgt_in of length 8)", ("8", "6"))
    fits, what = obs["fits"], "Transformer(max_len=7).encode(src of length 7)"
    if isinstance(fits, Raised) and fits.type == "ValueError":
        raise mistake(known.T_EQUALS_MAX_LEN, f"{what} {fits.describe()}", max_len=7, last=6)
    if isinstance(fits, Raised):
        raise Mistake(f"{what} {fits.describe()}")
    if not isinstance(fits, Tensor) or tuple(fits.shape) != (3, 7, 16):
        raise Mistake(f"{what} should give memory of shape (3, 7, 16), got {describe(fits)}")


def _judge_gradients(obs: Observations) -> None:
    got = obs["result"]
    what = "one training step of Transformer(norm_first=True, n_layers=2) on a copy batch"
    if isinstance(got, Raised):
        raise Mistake(f"{what}: the forward pass or the backward pass {got.describe()}")
    if got["missing"] is None:  # the probe found nothing to train on
        logits = got["logits"]
        found = (f"{logits['dtype']} logits of shape {logits['shape']} on {logits['device']}"
                 if isinstance(logits, dict) else describe(logits))
        raise Mistake(f"{what}: the model returned {found}, expected float logits of shape (B, T_tgt, tgt_vocab) = "
                      f"(2, 5, 10)")
    if got["missing"]:
        names = ", ".join(got["missing"][:4]) + (" …" if len(got["missing"]) > 4 else "")
        encoder = any(n.startswith(("src_embed", "encoder_layers")) for n in got["missing"])
        raise mistake(known.MEMORY_DETACHED if encoder else known.PARAMETERS_WITHOUT_GRADIENT, call=what, names=names)


register("Transformer_parts", _judge_model_parts)
register("Transformer_shapes", _judge_shapes)
register("Transformer_causal", _judge_causal)
register("Transformer_padding", _judge_padding)
register("Transformer_dtype_device", _judge_dtype_device)
register("Transformer_errors", _judge_model_errors)
register("Transformer_gradients", _judge_gradients)


# ================================================================ greedy_decode

def _greedy_case(case: DecodeCase) -> tuple:
    """A case of greedy decoding as its declarations take it: (its model, src, start_id, end_id, max_len)."""
    return case.model(), torch.tensor(case.src, dtype=torch.long), case.start, case.end, case.max_len


_greedy_suspects = declared(known.GREEDY, ref.greedy_decode, case=_greedy_case)


def _upto_end(row: list[int], end: int) -> list[int]:
    return row[: row.index(end) + 1] if end in row else row


def _judge_greedy(cases: list[DecodeCase], prefix: bool) -> Callable[[Observations], None]:
    def one(result: Any, case: DecodeCase) -> None:
        what = case.what()
        if isinstance(result, Raised):
            raise Mistake(f"{what} {result.describe()}")
        out = result["out"]
        if not isinstance(out, Tensor) or out.dim() != 2:
            raise Mistake(f"{what} should return a (B, L) tensor of token ids, got {out!r:.80}")
        if result["dtype"] != "torch.int64":
            raise mistake(known.TOKENS_NOT_INT64, call=what, dtype=result["dtype"])
        expected = ref.greedy_decode(case.model(), torch.tensor(case.src), case.start, case.end, case.max_len)
        view = (lambda t: [_upto_end(r, case.end) for r in t.tolist()]) if prefix else (lambda t: t.tolist())
        if view(out) == view(expected):
            return
        for suspect in _greedy_suspects(case):
            with torch.no_grad():
                candidate = suspect.produce()
            if view(candidate) == view(expected):
                continue  # this mistake makes no difference here
            if view(candidate) == view(out):
                raise Mistake(f"{what}: {suspect.message}", suspect.name)
        rows = f"got {out.tolist()}, expected {expected.tolist()}"
        raise Mistake(f"{what}: {rows} — the model's argmax at the last position is the next token; column 0 is "
                      f"start_id" + ("" if prefix else "; stop when every row has produced end_id and pad after it"))

    def judge(obs: Observations) -> None:
        judge_cases((r, lambda r, case=case: one(r, case))
                    for case, r in zip(cases, obs["results"], strict=True))

    return judge


def _judge_eval_mode(obs: Observations) -> None:
    for case, result in zip(_TOKEN_CASES[:1], obs["results"], strict=True):
        if isinstance(result, Raised):
            raise Mistake(f"{case.what()} {result.describe()}")
        if not result["modes"]:
            raise Mistake(f"{case.what()} never called model.encode, model.decode or model(...); it returned "
                          f"{describe(result['out'])}")
        if any(result["modes"]):
            raise mistake(known.LEFT_IN_TRAINING, call=case.what())


def _judge_on_meta(found: Any) -> None:
    """The start column of META_DECODE, built for a src on the meta device: it must stay there (a crash there is
    judged by ``judge_meta_crash``)."""
    case = META_DECODE
    call = case.what() + ", the model and src on the meta device"
    if isinstance(found, Raised):
        judge_meta_crash(found, call, known.DECODED_OFF_DEVICE, call=call, found=found.describe())
        return
    if not isinstance(found, dict):
        raise Mistake(f"{call} should return a (B, L) tensor of token ids, got {describe(found)}")
    if found.get("device") != "meta":
        raise mistake(known.DECODED_OFF_DEVICE, call=call, found=f"returned tokens on {found.get('device')}")


def _judge_greedy_tokens(obs: Observations) -> None:
    _judge_greedy(_TOKEN_CASES, prefix=True)(obs)
    _judge_on_meta(obs["meta"])


register("greedy_decode_tokens", _judge_greedy_tokens)
register("greedy_decode_stops", _judge_greedy(_STOP_CASES, prefix=False))
register("greedy_decode_max_len", _judge_greedy(_MAX_LEN_CASES, prefix=False))
register("greedy_decode_eval_mode", _judge_eval_mode)


# ================================================================ label_smoothed_cross_entropy

_ls_suspects = declared(known.SMOOTHING, None)


def _ls_what(logits: Tensor, targets: Tensor, p: int, eps: float) -> str:
    return (f"label_smoothed_cross_entropy(logits {tuple(logits.shape)}, targets {targets.tolist()}, pad_id={p}, "
            f"epsilon={eps})")


def _ls_crashed(raised: Raised, what: str, *case: Any) -> Mistake:
    if "Expected target size" in raised.message or "batch_size" in raised.message:
        return mistake(known.CLASSES_ON_WRONG_AXIS, call=what, raised=raised.describe())
    return Mistake(f"{what} {raised.describe()}")


_LS_HINT = ("the mean, over the positions whose target is not pad_id, of (1 - epsilon)(-log p_target) + "
            "epsilon · mean_v(-log p_v)")


def _judge_ls_default(obs: Observations) -> None:
    logits, targets, p = LS_DEFAULT
    what = f"label_smoothed_cross_entropy(logits {tuple(logits.shape)}, targets, pad_id={p}) without epsilon"
    got = obs["default"]
    if isinstance(got, Raised):
        raise _ls_crashed(got, what)
    judge_tensor(got, ref.label_smoothed_cross_entropy(logits, targets, p), what,
                 declared(known.SMOOTHING_DEFAULT, None)(logits, targets, p), hint="epsilon defaults to 0.1",
                 mistake=known.EPSILON_DEFAULT.name)


judge(Compare(LS_VALUES, ref.label_smoothed_cross_entropy, _ls_what, _ls_suspects, hint=_LS_HINT,
              crashed=_ls_crashed, also=_judge_ls_default))
judge(Compare(LS_PLAIN, ref.label_smoothed_cross_entropy, _ls_what, _ls_suspects,
              hint="with epsilon = 0 the targets are one-hot and the loss is the plain cross-entropy",
              crashed=_ls_crashed))


def _judge_ls_pads(obs: Observations) -> None:
    for (logits, targets, p, eps), losses in zip(LS_VALUES.cases[1:], obs["results"], strict=True):
        judge_pads_ignored(_ls_what(logits, targets, p, eps), losses, p,
                           functools.partial(_ls_suspects, logits, targets, p, eps), _ls_crashed,
                           ", neither its target term nor its smoothing term")


register("label_smoothed_cross_entropy_ignores_pads", _judge_ls_pads)
register("label_smoothed_cross_entropy_gradients",
         contract_check(_ls_contract_call(ref.label_smoothed_cross_entropy), _LS_CONTRACT, 843,
                        "label_smoothed_cross_entropy"))


def _judge_ls_errors(obs: Observations) -> None:
    shapes, *epsilons = obs[LS_ERRORS.key]
    what = "label_smoothed_cross_entropy(logits (2, 5, 7), targets (2, 4)), whose targets do not match logits.shape[:2]"
    if isinstance(shapes, Raised) and shapes.type == "ValueError" and not ("5" in shapes.message
                                                                           and "4" in shapes.message):
        raise mistake(known.SHAPES_NOT_NAMED, call=what, message=repr(shapes.message))
    judge_value_error(shapes, what, ("5", "4"))
    for raised, (*_, eps) in zip(epsilons, LS_ERRORS.cases[1:], strict=True):
        judge_value_error(raised, f"label_smoothed_cross_entropy(..., epsilon={eps}), outside [0, 1)", ())


register(LS_ERRORS.id, _judge_ls_errors)


# ================================================================ noam_lr

def _noam_rates(steps: Tensor, d: int, w: int) -> Tensor:
    """The reference's rate at each of ``steps``, as a float64 tensor: the right answer of a whole curve."""
    return torch.tensor([ref.noam_lr(int(step), d, w) for step in steps.tolist()], dtype=torch.float64)


_noam_suspects = declared(known.NOAM, ref.noam_lr)


def _noam_number(got: Any, asked: str) -> float:
    """The learner's answer as a float, or a Mistake that says what came back instead."""
    if isinstance(got, Raised):
        raise Mistake(f"{asked} {got.describe()}")
    if got is None:
        raise Mistake(f"{asked} is None — did you forget to `return` the learning rate?", NO_RETURN)
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise Mistake(f"{asked} should be a number (a float), got {describe(got)}")
    return float(got)


def _noam_close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-5, abs_tol=0.0)


def _judge_noam_values(obs: Observations) -> None:
    for (step, d, w), got in zip(_NOAM_CASES, obs["answers"], strict=True):
        asked = f"noam_lr(step={step}, d_model={d}, warmup={w})"
        value, expected = _noam_number(got, asked), ref.noam_lr(step, d, w)
        if _noam_close(value, expected):
            continue
        for suspect in _noam_suspects(step, d, w):
            if _noam_close(value, suspect.produce()):
                raise Mistake(f"{asked} is {value:.6g}: {suspect.message}", suspect.name)
        raise Mistake(f"{asked} is {value:.6g}, expected {expected:.6g} — d_model^-0.5 · min(step^-0.5, "
                      f"step · warmup^-1.5)")


def _judge_noam_warmup(obs: Observations) -> None:
    answers = iter(obs["answers"])
    for d, w in _NOAM_SHAPES:
        steps = range(1, 3 * w + 1)
        asked = f"noam_lr(step, d_model={d}, warmup={w}) for steps 1 to {3 * w}"
        got = [_noam_number(next(answers), f"noam_lr(step={s}, d_model={d}, warmup={w})") for s in steps]
        expected = [ref.noam_lr(s, d, w) for s in steps]
        if all(_noam_close(a, e) for a, e in zip(got, expected, strict=True)):
            continue
        for suspect in declared(known.NOAM, _noam_rates)(torch.arange(1, 3 * w + 1, dtype=torch.float64), d, w):
            curve = suspect.produce().tolist()  # the same mistake at every step: whole curves
            if all(_noam_close(a, c) for a, c in zip(got, curve, strict=True)):
                raise Mistake(f"{asked}: {suspect.message}", suspect.name)
        top = max(range(len(got)), key=got.__getitem__)
        raise Mistake(f"{asked} peaks at step {top + 1} with {got[top]:.6g}; the schedule rises linearly to its peak "
                      f"at step = warmup = {w}, (d_model · warmup)^-0.5 = {ref.noam_lr(w, d, w):.6g}, then falls "
                      f"as step^-0.5")


register("noam_lr_values", _judge_noam_values)
register("noam_lr_warmup", _judge_noam_warmup)


def _judge_noam_errors(obs: Observations) -> None:
    for raised, (step, d, w), name in zip(obs["raised"], _NOAM_ERRORS, ("step", "warmup", "d_model"), strict=True):
        judge_value_error(raised, f"noam_lr(step={step}, d_model={d}, warmup={w}), with {name} below 1", (name,))


register("noam_lr_errors", _judge_noam_errors)


# ================================================================ concept checks

register("decoder_passes_answer", lambda obs: judge_answers(
    obs, _DECODER_PASSES_CASES, ref.decoder_passes, declared(known.DECODER_PASSES, ref.decoder_passes),
    lambda n: f"decoder_passes({n})"))
register("scored_positions_answer", lambda obs: judge_answers(
    obs, _SCORED_POSITIONS_CASES, ref.scored_positions, declared(known.SCORED_POSITIONS, ref.scored_positions),
    lambda n: f"scored_positions({n})"))
