"""Judges of Chapter 6 (``06_transformer``), against :mod:`solutions.transformer`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.transformer`. Each ``Suspect`` recomputes,
on the same inputs, what one plausible mistake would return, so that a failing
learner is told which mistake it looks like.

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
    ENC_MASK,
    ENC_POST,
    ENC_PRE,
    FF_FORWARD,
    LAYER_PARTS,
    LS_ERRORS,
    LS_PLAIN,
    LS_VALUES,
    MODEL_DECODE,
    MODEL_ENCODE,
    DecodeCase,
    LayerCase,
    ModelCase,
    Scripted,
    _build_layer,
    _call_layer,
    _ls_contract_call,
    _memory,
    load_feed_forward,
    load_model,
)
from autograder.judges.core import (
    Compare,
    Suspect,
    contract_check,
    describe,
    judge,
    judge_answers,
    judge_cases,
    judge_pads_ignored,
    judge_tensor,
    judge_value_error,
    register,
    unnamed,
)
from solutions import transformer as ref
from solutions.masking import causal_mask, combine_masks, padding_mask
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
        raise Mistake(f"{call} should be an nn.Module: subclass nn.Module and call super().__init__() first",
                      "not an nn.Module")
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
        if len(shapes) != 2:
            raise Mistake(f"{call} holds {len(shapes)} nn.Linear layers, expected two: d_model -> d_ff and "
                          f"d_ff -> d_model", "a single Linear" if len(shapes) == 1 else None)
        if sorted(shapes) != sorted([(20, 12), (12, 20)]):
            found = ", ".join(f"{w[1]} -> {w[0]}" for w in shapes)
            ignored = all(20 not in w for w in shapes)  # no layer is d_ff = 20 wide
            raise Mistake(f"{call} maps {found}; expected 12 -> 20 and 20 -> 12: widen to d_ff, then back to "
                          f"d_model", "d_ff ignored" if ignored else None)
        if not all(linear["bias"] for linear in got["linears"]):
            raise Mistake(f"{call}'s Linear layers should have biases, as in the paper's max(0, xW1 + b1)W2 + b2",
                          "no bias")


def _ff_parts(d: int, d_ff: int, seed: int, dtype: torch.dtype) -> tuple[Callable, Callable]:
    w = {name: t.to(dtype) for name, t in feed_forward_weights(d, d_ff, seed).items()}
    return (lambda x: F.linear(x, w["w1"], w["b1"])), (lambda h: F.linear(h, w["w2"], w["b2"]))


def _ff_suspects(d: int, d_ff: int, x: Tensor, seed: int) -> list[Suspect]:
    lin1, lin2 = _ff_parts(d, d_ff, seed, x.dtype)
    return [
        Suspect("no ReLU between the two Linear layers: without a nonlinearity the two layers collapse into one "
                "linear map", "ReLU missing", lambda: lin2(lin1(x))),
        Suspect("the ReLU comes after the second Linear, so every output is >= 0; it belongs between the two "
                "layers, on the d_ff hidden units", "ReLU after the second Linear", lambda: torch.relu(lin2(lin1(x)))),
        Suspect("a ReLU after the second Linear as well: the output must be able to go negative",
                "ReLU after the second Linear", lambda: torch.relu(lin2(torch.relu(lin1(x))))),
        Suspect("it uses GELU; the original transformer's FFN, like nn.TransformerEncoderLayer's default, uses ReLU",
                "GELU instead of ReLU", lambda: lin2(F.gelu(lin1(x)))),
        Suspect("the input is added to the output: the residual connection belongs to the layers around "
                "FeedForward, not inside it", "residual added inside FeedForward",
                lambda: x + lin2(torch.relu(lin1(x)))),
        Suspect("the ReLU is applied to the input, before the first Linear", "ReLU on the input",
                lambda: lin2(lin1(torch.relu(x)))),
    ]


def _ff_reference(d: int, d_ff: int, x: Tensor, seed: int) -> Tensor:
    lin1, lin2 = _ff_parts(d, d_ff, seed, x.dtype)
    return lin2(torch.relu(lin1(x)))


def _ff_what(d: int, d_ff: int, x: Tensor, seed: int) -> str:
    return f"FeedForward({d}, {d_ff}) on x {tuple(x.shape)}" + (" in float64" if x.dtype == torch.float64 else "")


_FF_VALUES = Compare(FF_FORWARD, _ff_reference, _ff_what, _ff_suspects, "Linear(d_model -> d_ff), ReLU, Dropout, "
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
    judge_tensor(_tensor_result(obs["all_dropped"], what, tuple(x.shape)), w["b2"].expand(2, 5, d), what, [
        Suspect("the output is all zeros: the dropout acts after the second Linear; it belongs on the hidden units, "
                "between the ReLU and the second Linear, so with p=1 only the second bias is left",
                "dropout after the second Linear", lambda: torch.zeros(2, 5, d)),
        Suspect("the dropout acts on the input, before the first Linear; it belongs on the hidden units, between "
                "the ReLU and the second Linear", "dropout on the input",
                lambda: lin2(torch.relu(lin1(torch.zeros_like(x))))),
        Suspect("nothing was dropped: pass `dropout` on to an nn.Dropout between the ReLU and the second Linear",
                "dropout missing", lambda: lin2(torch.relu(lin1(x)))),
        Suspect("the input is added to the output: the residual connection belongs to the layers around "
                "FeedForward, not inside it", "residual added inside FeedForward", lambda: x + w["b2"]),
        Suspect("the output went through a ReLU: it belongs between the two Linear layers, so the output can be "
                "negative", "ReLU after the second Linear", lambda: torch.relu(w["b2"]).expand(2, 5, d)),
    ], hint="with p=1 every hidden unit is dropped, so only the second Linear's bias is left")
    what = f"FeedForward({d}, {d_ff}, dropout=0.5) in eval mode"
    a, b = (_tensor_result(out, what, tuple(x.shape)) for out in obs["eval"])
    plain_out = _tensor_result(obs["no_dropout"], f"FeedForward({d}, {d_ff})", tuple(x.shape))
    if not torch.allclose(a, b) or not torch.allclose(a, plain_out, atol=1e-6):
        raise Mistake(f"{what} is random, or differs from the output without dropout: dropout must do nothing in "
                      f"eval mode — use nn.Dropout (it follows .train() / .eval()), or pass "
                      f"training=self.training to F.dropout", "dropout applied in eval mode")
    train = _tensor_result(obs["train"], f"FeedForward({d}, {d_ff}, dropout=0.5) in training mode", tuple(x.shape))
    if torch.allclose(train, a):
        raise Mistake(f"FeedForward({d}, {d_ff}, dropout=0.5) in training mode gives the eval-mode output: nothing "
                      f"was dropped", "dropout missing")


register("FeedForward_layers", _judge_ff_layers)
register(FF_FORWARD.id, _judge_ff_forward)
register("FeedForward_dropout", _judge_ff_dropout)


# ================================================================ the layers: shared


def _ref_layer(case: LayerCase) -> nn.Module:
    """The reference's layer, loaded with the case's weights: its attentions, feed-forward and LayerNorms."""
    cls = ref.EncoderLayer if case.memory is None else ref.DecoderLayer
    return _build_layer(cls, case, norm_first=False).eval()


def _blocks(x: Tensor, blocks: list[Callable[[Tensor], Tensor]], norms: list[Callable[[Tensor], Tensor]],
            norm_first: bool, residual: tuple[bool, ...] | None = None, after_norm: bool = False,
            from_normed: bool = False) -> Tensor:
    """Residual blocks, post-norm ``LN(x + f(x))`` or pre-norm ``x + f(LN(x))``, with optional mistakes."""
    residual = residual or (True,) * len(blocks)
    for f, norm, keep in zip(blocks, norms, residual, strict=True):
        if norm_first:
            h = norm(x)
            x = ((h if from_normed else x) + f(h)) if keep else f(h)
        elif after_norm:
            x = x + norm(f(x)) if keep else norm(f(x))
        else:
            x = norm(x + f(x)) if keep else norm(f(x))
    return x


def _placement_message(norm_first: bool) -> tuple[str, str]:
    """(message, name) of the mistake of placing the LayerNorms the other way round."""
    if norm_first:
        return ("it normalises after adding the residual, LN(x + f(x)): that is post-norm, but norm_first=True asks "
                "for pre-norm, x + f(LN(x))", "post-norm when norm_first=True")
    return ("it normalises each sublayer's input, x + f(LN(x)): that is pre-norm, but norm_first=False asks for "
            "the paper's post-norm, LN(x + f(x))", "pre-norm when norm_first=False")


def _residual_suspects(blocks: list[Callable], norms: list[Callable], x: Tensor, norm_first: bool,
                       names: list[str]) -> list[Suspect]:
    run = lambda **kw: lambda: _blocks(x, blocks, norms, norm_first, **kw)
    suspects = [Suspect(*_placement_message(norm_first), lambda: _blocks(x, blocks, norms, not norm_first))]
    for i, name in enumerate(names):
        keep = tuple(j != i for j in range(len(blocks)))
        suspects.append(Suspect(f"the {name} output is not added back to its input: each block is "
                                f"{'x + f(LN(x))' if norm_first else 'LN(x + f(x))'}",
                                f"residual missing around the {name}", run(residual=keep)))
    suspects.append(Suspect("no block adds its input back: every sublayer needs a residual connection",
                            "no residual connections", run(residual=(False,) * len(blocks))))
    if norm_first:
        suspects.append(Suspect("the residual adds the normalised input, LN(x) + f(LN(x)); pre-norm adds the raw "
                                "input, x + f(LN(x))", "residual taken from the normalised x", run(from_normed=True)))
    else:
        suspects.append(Suspect("it normalises the sublayer's output and then adds the input, x + LN(f(x)); "
                                "post-norm normalises the sum, LN(x + f(x))", "residual added after the LayerNorm",
                                run(after_norm=True)))
    return suspects


def _norm_suspects(blocks: list[Callable], norms: list[Callable], x: Tensor, norm_first: bool) -> list[Suspect]:
    n = len(norms)
    swapped = [norms[1], norms[0], *norms[2:]]
    suspects = [
        Suspect("the first block uses norm2 and the second norm1: each block has its own LayerNorm, norm1 for the "
                "first", "norm1 and norm2 swapped", lambda: _blocks(x, blocks, swapped, norm_first)),
        Suspect("norm1 serves every block: each block has its own LayerNorm, norm1, norm2" + (", norm3" if n == 3
                else ""), "norm1 used for every block", lambda: _blocks(x, blocks, [norms[0]] * n, norm_first)),
    ]
    suspects.append(Suspect("one LayerNorm object serves every block (the weights copied into it last are used "
                            "everywhere): each block needs its own nn.LayerNorm(d_model)",
                            "one LayerNorm for every block", lambda: _blocks(x, blocks, [norms[-1]] * n, norm_first)))
    if n == 3:
        suspects.append(Suspect("the LayerNorms are used in the wrong order: norm1 after self-attention, norm2 after "
                                "cross-attention, norm3 after the feed-forward network",
                                "LayerNorms in the wrong order",
                                lambda: _blocks(x, blocks, [norms[0], norms[2], norms[1]], norm_first)))
    return suspects


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
                raise Mistake(f"{call} has no attribute {', '.join(f'`{m}`' for m in missing)} — store the "
                              f"parts as {', '.join(LAYER_PARTS[kind])}: the tests copy weights into them by "
                              f"these names", "parts not named as asked")
            if got["shared_attn"]:
                raise Mistake(f"{call}.self_attn and .cross_attn are the same module: self-attention and "
                              f"cross-attention each need their own weights", "one attention module for both")
            if got["shared_norm"]:
                raise Mistake(f"{call} uses one LayerNorm object for several blocks: each block has its own "
                              f"nn.LayerNorm(d_model), with its own weights", "one LayerNorm for every block")
            bad = [i + 1 for i, shape in enumerate(got["norm_shapes"]) if shape != (16,)]
            if bad:
                raise Mistake(unnamed(f"{call}.norm{bad[0]} should be nn.LayerNorm(d_model) = nn.LayerNorm(16), "
                                       f"got {got['parts'][f'norm{bad[0]}']} of shape "
                                       f"{got['norm_shapes'][bad[0] - 1]}"))
            if isinstance(got["loads"], Raised):
                raise _crashed(got["loads"], call)

    return judge


def _judge_dropout(name: str, case: LayerCase) -> Callable[[Observations], None]:
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
            raise Mistake(f"{call} in eval mode is random, or differs from the same layer with dropout=0.0: dropout "
                          f"must do nothing in eval mode — use nn.Dropout modules (they follow .train() / .eval()), "
                          f"not F.dropout without training=self.training", "dropout applied in eval mode")
        a, b = (_tensor_result(o, f"{call} in training mode", shape) for o in obs["train"])
        if torch.allclose(a, b):
            raise Mistake(f"{call} gives the same output twice in training mode: nothing is dropped — pass dropout "
                          f"on to the attention and the feed-forward network, and apply nn.Dropout to each "
                          f"sublayer's output before the residual addition", "dropout ignored")

    return judge


# ================================================================ EncoderLayer

def _encoder_suspects(case: LayerCase, norm_first: bool) -> list[Suspect]:
    layer, x, mask = _ref_layer(case), case.x, case.tgt_mask
    sa = lambda m: lambda h: layer.self_attn(h, h, h, m)[0]
    norms = [layer.norm1, layer.norm2]
    blocks = [sa(mask), layer.ff]
    suspects = _residual_suspects(blocks, norms, x, norm_first, ["attention", "feed-forward"])
    suspects += _norm_suspects(blocks, norms, x, norm_first)
    if mask is not None:
        suspects += [
            Suspect("src_mask is not passed to the self-attention: real tokens still attend the padding",
                    "src_mask ignored", lambda: _blocks(x, [sa(None), layer.ff], norms, norm_first)),
            Suspect("src_mask is inverted: True means 'may attend', so pass it as it is", "src_mask inverted",
                    lambda: _blocks(x, [sa(~mask), layer.ff], norms, norm_first)),
        ]
    return suspects


def _encoder_hint(case: LayerCase, norm_first: bool) -> str:
    blocks = ("x = x + attn(LN1(x)); out = x + FF(LN2(x))" if norm_first
              else "x = LN1(x + attn(x)); out = LN2(x + FF(x))")
    return f"{blocks}, with dropout after each sublayer" + ("; src_mask goes to the self-attention"
                                                            if case.tgt_mask is not None else "")


register("EncoderLayer_parts", _judge_parts("encoder"))
for check in (ENC_POST, ENC_PRE, ENC_MASK):
    judge(Compare(check, _layer_reference, LayerCase.what, _encoder_suspects, _encoder_hint, guard=_layer_guard,
                  crashed=_crashed))
register("EncoderLayer_dropout", _judge_dropout("EncoderLayer", _ENC_DROP))


# ================================================================ DecoderLayer

def _decoder_suspects(case: LayerCase, norm_first: bool) -> list[Suspect]:
    layer, x, memory = _ref_layer(case), case.x, case.memory
    tgt_mask, memory_mask = case.tgt_mask, case.memory_mask
    sa = lambda m, name="self_attn": lambda h: getattr(layer, name)(h, h, h, m)[0]
    ca = lambda m, name="cross_attn": lambda h: getattr(layer, name)(h, memory, memory, m)[0]
    norms = [layer.norm1, layer.norm2, layer.norm3]
    run = lambda blocks, ns=norms: lambda: _blocks(x, blocks, ns, norm_first)
    blocks = [sa(tgt_mask), ca(memory_mask), layer.ff]
    suspects = _residual_suspects(blocks, norms, x, norm_first, ["self-attention", "cross-attention", "feed-forward"])
    from_decoder = ("the cross-attention takes its keys and values from the decoder states x, so memory is never "
                    "read; they come from `memory`, the encoder output: cross_attn(x, memory, memory, memory_mask)")
    for mask in (memory_mask, tgt_mask, None):  # keys and values from x, with whichever mask fits
        suspects.append(Suspect(from_decoder, "cross-attention ignores memory",
                                run([sa(tgt_mask), lambda h, m=mask: layer.cross_attn(h, h, h, m)[0], layer.ff])))
    keys_from_x = lambda h: layer.cross_attn(h, h, memory, memory_mask)[0]  # values from memory
    suspects.append(Suspect("the cross-attention takes its keys from the decoder states x and its values from "
                            "memory; keys and values both come from `memory`: cross_attn(x, memory, memory, "
                            "memory_mask)", "cross-attention keys from the decoder",
                            run([sa(tgt_mask), keys_from_x, layer.ff])))
    suspects += _norm_suspects(blocks, norms, x, norm_first)
    suspects += [
        Suspect("the self-attention and the cross-attention are one module, with one set of weights: each needs its "
                "own Attention", "one attention module for both",
                run([sa(tgt_mask, "cross_attn"), ca(memory_mask), layer.ff])),
        Suspect("the self-attention uses cross_attn's weights and the cross-attention self_attn's",
                "self_attn and cross_attn swapped",
                run([sa(tgt_mask, "cross_attn"), ca(memory_mask, "self_attn"), layer.ff])),
        Suspect("the cross-attention comes before the self-attention: the decoder first attends its own tokens "
                "(masked), then the encoder output", "cross-attention before self-attention",
                run([ca(memory_mask), sa(tgt_mask), layer.ff], [norms[1], norms[0], norms[2]])),
        Suspect("the cross-attention comes before the self-attention: the decoder first attends its own tokens "
                "(masked), then the encoder output", "cross-attention before self-attention",
                run([ca(memory_mask), sa(tgt_mask), layer.ff])),
    ]
    if tgt_mask is not None:
        suspects.append(Suspect("tgt_mask is not passed to the self-attention: each position also attends the "
                                "positions after it", "tgt_mask ignored", run([sa(None), ca(memory_mask), layer.ff])))
        suspects.append(Suspect("tgt_mask is inverted: True means 'may attend', so pass it as it is",
                                "tgt_mask inverted", run([sa(~tgt_mask), ca(memory_mask), layer.ff])))
    if memory_mask is not None:
        suspects.append(Suspect("memory_mask is not passed to the cross-attention: the decoder attends the "
                                "source's padding", "memory mask ignored", run([sa(tgt_mask), ca(None), layer.ff])))
        suspects.append(Suspect("memory_mask is inverted: True means 'may attend'", "memory mask inverted",
                                run([sa(tgt_mask), ca(~memory_mask), layer.ff])))
    if tgt_mask is not None and memory_mask is not None:
        suspects.append(Suspect("the masks are swapped: tgt_mask belongs to the self-attention, memory_mask to the "
                                "cross-attention", "tgt_mask and memory_mask swapped",
                                run([sa(memory_mask), ca(tgt_mask), layer.ff])))
    return suspects


def _decoder_hint(case: LayerCase, norm_first: bool) -> str:
    blocks = ("x = x + self_attn(LN1(x)); x = x + cross_attn(LN2(x), memory); out = x + FF(LN3(x))" if norm_first
              else "x = LN1(x + self_attn(x)); x = LN2(x + cross_attn(x, memory)); out = LN3(x + FF(x))")
    masks = "; tgt_mask goes to the self-attention, memory_mask to the cross-attention" \
        if case.tgt_mask is not None or case.memory_mask is not None else ""
    return f"{blocks}, queries from x and keys and values from memory in the cross-attention{masks}"


register("DecoderLayer_parts", _judge_parts("decoder"))
for check in (DEC_POST, DEC_PRE, DEC_MASKS):
    judge(Compare(check, _layer_reference, LayerCase.what, _decoder_suspects, _decoder_hint, guard=_layer_guard,
                  crashed=_crashed))
register("DecoderLayer_dropout", _judge_dropout("DecoderLayer", _DEC_DROP))


# ================================================================ TransformerConfig

def _judge_config_fields(obs: Observations) -> None:
    if not obs["is_dataclass"]:
        raise Mistake("TransformerConfig should be a class decorated with @dataclass, with one typed field per size",
                      "not a dataclass")
    missing = [name for name in CONFIG_FIELDS if name not in obs["fields"]]
    if missing:
        raise Mistake(f"TransformerConfig has no field {', '.join(missing)}", "fields missing")
    got = obs["keywords"]
    if isinstance(got, Raised):
        raise Mistake(f"TransformerConfig(src_vocab=11, tgt_vocab=13) {got.describe()}")
    want = dataclasses.asdict(ref.TransformerConfig(src_vocab=11, tgt_vocab=13))
    for name in CONFIG_FIELDS:
        if got[name] != want[name] or type(got[name]) is not type(want[name]):
            message = f"TransformerConfig(src_vocab=11, tgt_vocab=13).{name} is {got[name]!r}, expected {want[name]!r}"
            if name in ("src_vocab", "tgt_vocab"):  # given by the caller, not a default
                raise Mistake(message)
            raise Mistake(f"{message}: the defaults are the base model of the paper, as the exercise lists them",
                          f"{name} default")
    positional = obs["positional"]
    if isinstance(positional, Raised) or (positional["src_vocab"], positional["tgt_vocab"]) != (11, 13):
        raise Mistake("TransformerConfig(11, 13) should set src_vocab=11 and tgt_vocab=13: they are the first two "
                      "fields", "field order")
    if not isinstance(obs["no_vocab"], Raised) or obs["no_vocab"].type != "TypeError":
        raise Mistake("TransformerConfig() without vocabularies should fail with a TypeError: src_vocab and "
                      "tgt_vocab are required fields, without defaults", "vocabularies given defaults")


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


def _embed(m: ref.Transformer, tokens: Tensor, table: nn.Embedding, scale: str = "times", positions: bool = True
           ) -> Tensor:
    d = m.config.d_model
    x = table(tokens)
    pe = sinusoidal_encoding(m.config.max_len, d)[: tokens.shape[1]]
    factors = {"times": math.sqrt(d), "none": 1.0, "divide": 1 / math.sqrt(d)}
    if scale == "after":
        return (x + pe) * math.sqrt(d)
    x = x * factors[scale]
    return x + pe if positions else x


def _stack(layers: nn.ModuleList, x: Tensor, chained: bool, *args: Any) -> Tensor:
    if not chained:
        return layers[-1](x, *args)
    for layer in layers:
        x = layer(x, *args)
    return x


def _final_norm(m: ref.Transformer, x: Tensor, which: str, final: str) -> Tensor:
    if final == "missing":
        return x
    if final == "plain":  # an unloaded LayerNorm: weight 1, bias 0
        return F.layer_norm(x, (m.config.d_model,))
    return getattr(m, which)(x)


@torch.no_grad()
def _encode_variant(m: ref.Transformer, src: Tensor, scale: str = "times", positions: bool = True, mask: bool = True,
                    final: str = "as is", chained: bool = True, table: str = "src_embed") -> Tensor:
    x = _embed(m, src, getattr(m, table), scale, positions)
    src_mask = padding_mask(src, m.config.pad_id) if mask else None
    return _final_norm(m, _stack(m.encoder_layers, x, chained, src_mask), "encoder_norm", final)


@torch.no_grad()
def _decode_variant(m: ref.Transformer, tgt_in: Tensor, memory: Tensor, src: Tensor, scale: str = "times",
                    positions: bool = True, causal: str = "lower", tgt_pad: bool = True, memory_mask: bool = True,
                    final: str = "as is", chained: bool = True, table: str = "tgt_embed") -> Tensor:
    t, pad = tgt_in.shape[1], m.config.pad_id
    triangle = {"lower": causal_mask(t), "none": None, "upper": causal_mask(t).T}[causal]
    tgt_mask = combine_masks(triangle, padding_mask(tgt_in, pad) if tgt_pad else None)
    x = _embed(m, tgt_in, getattr(m, table), scale, positions)
    mem_mask = padding_mask(src, pad) if memory_mask else None
    x = _stack(m.decoder_layers, x, chained, memory, tgt_mask, mem_mask)
    return m.out(_final_norm(m, x, "decoder_norm", final))


def _shared_suspects(m: ref.Transformer, run: Callable[..., Tensor], stack: str) -> list[Suspect]:
    suspects = [
        Suspect("the token embeddings are not multiplied by √d_model before the positions are added",
                "embeddings not scaled by √d_model", lambda: run(scale="none")),
        Suspect("the token embeddings are divided by √d_model; the paper multiplies them by √d_model",
                "embeddings divided by √d_model", lambda: run(scale="divide")),
        Suspect("the positions are scaled by √d_model too: scale the embeddings first, then add the positional "
                "table", "positions scaled by √d_model too", lambda: run(scale="after")),
        Suspect("no positional encoding is added: without it attention cannot tell word order",
                "positional encoding missing", lambda: run(positions=False)),
        Suspect(f"every layer of {stack} reads the embeddings, so only the last one counts: feed each layer's "
                f"output to the next", "layers not chained", lambda: run(chained=False)),
    ]
    if m.config.norm_first:
        suspects.append(Suspect(f"with norm_first=True the pre-norm layers leave their output unnormalised: end "
                                f"{stack} with a final LayerNorm", "final LayerNorm missing",
                                lambda: run(final="missing")))
    else:
        suspects.append(Suspect(f"{stack} ends in a LayerNorm although norm_first=False: post-norm layers already "
                                f"end in one; the final LayerNorm belongs to pre-norm models only",
                                "final LayerNorm in a post-norm model", lambda: run(final="plain")))
    return suspects


@torch.no_grad()
def _encode_reference(case: ModelCase) -> Tensor:
    return _ref_model(case).encode(case.src)


def _encode_suspects(case: ModelCase) -> list[Suspect]:
    m = _ref_model(case)
    run = lambda **kw: _encode_variant(m, case.src, **kw)
    return _shared_suspects(m, run, "the encoder stack") + [
        Suspect("the source padding mask is not used: real source tokens attend the padding — pass "
                "padding_mask(src, pad_id) to every encoder layer", "source padding mask ignored in the encoder",
                lambda: run(mask=False)),
        Suspect("the source is embedded with tgt_embed; the source has its own table, src_embed",
                "target embeddings used for the source", lambda: run(table="tgt_embed")),
    ]


judge(Compare(
    MODEL_ENCODE, _encode_reference,
    lambda case: case.what(f"encode(src {tuple(case.src.shape)})"), _encode_suspects,
    lambda case: "memory = the encoder layers on src_embed(src) · √d_model + positions, with the source padding "
    "mask" + ("; a final LayerNorm" if case.config.norm_first else ""),
    guard=lambda out, what, case: _tensor_result(out, what, (*case.src.shape, case.config.d_model)),
    crashed=_crashed))


@torch.no_grad()
def _decode_reference(case: ModelCase) -> Tensor:
    return _ref_model(case).decode(case.tgt_in, _memory(case), case.src)


def _decode_suspects(case: ModelCase) -> list[Suspect]:
    m, memory = _ref_model(case), _memory(case)
    run = lambda **kw: _decode_variant(m, case.tgt_in, memory, case.src, **kw)
    return _shared_suspects(m, run, "the decoder stack") + [
        Suspect("the decoder's self-attention has no causal mask: each position sees the tokens after it, "
                "which teacher forcing puts right there — combine causal_mask(T) with the target padding mask",
                "no causal mask in the decoder", lambda: run(causal="none")),
        Suspect("the causal mask is the upper triangle: each position attends the positions after it",
                "upper instead of lower triangle", lambda: run(causal="upper")),
        Suspect("the cross-attention attends the source's padding: build memory_mask = padding_mask(src, "
                "pad_id) and pass it to every decoder layer", "memory mask ignored",
                lambda: run(memory_mask=False)),
        Suspect("the target padding mask is not combined with the causal mask: padded target positions are "
                "attended", "target padding mask ignored", lambda: run(tgt_pad=False)),
        Suspect("the target is embedded with src_embed; the target has its own table, tgt_embed",
                "source embeddings used for the target", lambda: run(table="src_embed")),
    ]


judge(Compare(
    MODEL_DECODE, _decode_reference,
    lambda case: case.what(f"decode(tgt_in {tuple(case.tgt_in.shape)}, memory, src {tuple(case.src.shape)})"),
    _decode_suspects,
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
            mistake = "embeddings initialised with std 1" if std > 0.5 else "embeddings initialised with the wrong std"
            raise Mistake(f"{call}.{name}'s weights have standard deviation {std:.3g}; initialise them with "
                          f"nn.init.normal_(weight, std=d_model ** -0.5) = {want:.3g}, so that after the × √d_model "
                          f"scaling the token vectors have entries of size ~1, like the positional codes", mistake)
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
        raise Mistake("Transformer(config).config should be the config it was given: store it as self.config "
                      "(greedy decoding reads model.config.pad_id)", "config not kept")
    for key, call, shape in (("memory", "encode(src)", (3, 7, 16)), ("decoded", "decode(tgt_in, memory, src)",
                                                                     (3, 5, 13)), ("logits", "forward", (3, 5, 13))):
        t = got[key]
        if not isinstance(t, Tensor) or tuple(t.shape) != shape:
            found = tuple(t.shape) if isinstance(t, Tensor) else repr(t)[:60]
            raise Mistake(f"{what}: {call} gave {found}, expected {shape}")
    if not torch.allclose(got["logits"], got["decoded"], atol=1e-5, rtol=1e-4):
        raise Mistake(f"{what}: forward(src, tgt_in) differs from decode(tgt_in, encode(src), src) — forward is "
                      f"exactly that", "forward not encode then decode")


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
            raise Mistake(f"{what}: changing only the target tokens at positions {start}.. changed the logits at "
                          f"positions 0..{start - 1}, so the decoder sees the future — in training it would copy the "
                          f"next token instead of predicting it. Combine causal_mask(T) with the target padding mask "
                          f"and pass it as tgt_mask to every decoder layer", "no causal mask in the decoder")
        if torch.allclose(before[:, start:], after[:, start:]):
            raise Mistake(f"{what}: the logits at positions {start}.. do not change when the target tokens there "
                          f"change — does decode read tgt_in?")


def _judge_padding(obs: Observations) -> None:
    for i, ((c, src, extra, _), got) in enumerate(zip(_PAD_CASES, obs["results"], strict=True)):
        what = f"Transformer(pad_id={c.pad_id}) on src {src.tolist()}"
        if isinstance(got, Raised):
            raise Mistake(f"{what} {got.describe()}")
        hard_coded = " — the padding is pad_id = model.config.pad_id, not 0" if i else ""
        real = src != c.pad_id
        memory, longer = got["memory"], got["memory_longer"]
        if not isinstance(memory, Tensor) or tuple(memory.shape) != (*src.shape, c.d_model):
            raise Mistake(f"{what}: encode gave {memory!r:.60}, expected memory of shape {(*src.shape, c.d_model)}")
        if not torch.allclose(longer[:, : src.shape[1]][real], memory[real], atol=1e-5, rtol=1e-4):
            raise Mistake(f"{what}: appending {extra} more pad tokens changed the encoder output at the real tokens, "
                          f"so the encoder's self-attention attends the padding — pass padding_mask(src, pad_id) to "
                          f"every encoder layer{hard_coded}",
                          "pad_id hard-coded as 0" if hard_coded else "source padding mask ignored in the encoder")
        if not torch.allclose(got["logits_longer"], got["logits"], atol=1e-5, rtol=1e-4):
            raise Mistake(f"{what}: appending {extra} more pad tokens to the source changed the logits, so the "
                          f"decoder's cross-attention attends the source's padding — pass padding_mask(src, pad_id) "
                          f"as memory_mask to every decoder layer{hard_coded}",
                          "pad_id hard-coded as 0" if hard_coded else "memory mask ignored")


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
    advice = "build every mask and table on the device of the tokens (device=src.device), or register the table as a " \
             "buffer, so that the model also runs on a GPU"
    if isinstance(got, Raised):  # named only when the error is about devices: then something stayed on the CPU
        raise Mistake(f"{what} {got.describe()} — {advice}",
                      "mask built on the CPU" if "device" in got.message.lower() else None)
    if not isinstance(got, dict) or got["device"] != "meta" or got["shape"] != (3, 5, 13):
        raise Mistake(f"{what} gave {got}, expected meta logits of shape (3, 5, 13) — {advice}")


def _judge_model_errors(obs: Observations) -> None:
    judge_value_error(obs["src"], "Transformer(max_len=6).encode(src of length 7)", ("7", "6"))
    judge_value_error(obs["tgt"], "Transformer(max_len=6)(src (3, 5), tgt_in of length 8)", ("8", "6"))


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
        why = " — the decoder must read the encoder's output (memory) without detaching it" if encoder else \
            " — is every part used in forward, and nothing detached?"
        raise Mistake(f"{what}: no gradient reaches {names}{why}", "parameters without gradient")


register("Transformer_parts", _judge_model_parts)
register("Transformer_shapes", _judge_shapes)
register("Transformer_causal", _judge_causal)
register("Transformer_padding", _judge_padding)
register("Transformer_dtype_device", _judge_dtype_device)
register("Transformer_errors", _judge_model_errors)
register("Transformer_gradients", _judge_gradients)


# ================================================================ greedy_decode

def _greedy_variant(model: Scripted, src: Tensor, start: int, end: int, max_len: int, position: int = -1,
                    stop: str = "all", pad: str = "config", limit: int = 0, keep_start: bool = True,
                    pad_end: bool = False) -> Tensor:
    """Greedy decoding with one named mistake, or none."""
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), start, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    limit = limit or max_len
    while ys.shape[1] < limit:
        if (stop == "all" and done.all()) or (stop == "any" and done.any()):
            break
        token = model.decode(ys, memory, src)[:, position].argmax(dim=-1)
        finished = done | (token == end) if pad_end else done
        if pad != "none":
            token = token.masked_fill(finished, model.config.pad_id if pad == "config" else 0)
        ys = torch.cat([ys, token[:, None]], dim=1)
        done = done | (token == end)
    return ys if keep_start else ys[:, 1:]


def _greedy_suspects(case: DecodeCase) -> list[Suspect]:
    src = torch.tensor(case.src, dtype=torch.long)
    run = lambda **kw: lambda: _greedy_variant(case.model(), src, case.start, case.end, case.max_len, **kw)
    never = "it keeps generating after every row has produced end_id: stop as soon as every row is finished"
    return [
        Suspect("each step takes the argmax of position 0, which predicts the first word again and again: the next "
                "token is predicted by the *last* position, logits[:, -1]",
                "greedy decoding from the first position", run(position=0)),
        Suspect(never, "never stopping at <end>", run(stop="never")),
        Suspect("the tokens a row generates after its end_id are kept: a finished row gets model.config.pad_id from "
                "then on", "not padding after <end>", run(pad="none")),
        Suspect(never, "never stopping at <end>", run(stop="never", pad="none")),
        Suspect(f"finished rows are padded with 0, but this model's pad_id is {case.pad}: read model.config.pad_id",
                "pad_id hard-coded as 0", run(pad="zero")),
        Suspect("it stops as soon as the first row produces end_id: stop when *every* row has finished",
                "stopped when the first row ended", run(stop="any")),
        Suspect(f"it returns up to max_len + 1 = {case.max_len + 1} columns: max_len counts the start token, so at "
                "most max_len - 1 tokens are generated",
                "start token not counted in max_len", run(limit=case.max_len + 1)),
        Suspect(f"it returns at most max_len - 1 = {case.max_len - 1} columns: max_len counts the start token, so a "
                "row may hold max_len tokens in all",
                "one token short of max_len", run(limit=max(case.max_len - 1, 1))),
        Suspect("the first column is not start_id: every row starts with start_id, and max_len counts it",
                "start_id missing", run(keep_start=False)),
        Suspect("end_id itself was replaced by padding: keep each row's first end_id and pad only *after* it",
                "end token replaced by padding", run(pad_end=True)),
    ]


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
            raise Mistake(f"{what} returned {result['dtype']} — token ids are a LongTensor (int64): build the "
                          f"start column with dtype=torch.long", "token ids not int64")
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
            raise Mistake(f"{case.what()} ran the model in training mode: call model.eval() first, or dropout "
                          f"makes the decoding random", "model left in training mode")


register("greedy_decode_tokens", _judge_greedy(_TOKEN_CASES, prefix=True))
register("greedy_decode_stops", _judge_greedy(_STOP_CASES, prefix=False))
register("greedy_decode_max_len", _judge_greedy(_MAX_LEN_CASES, prefix=False))
register("greedy_decode_eval_mode", _judge_eval_mode)


# ================================================================ label_smoothed_cross_entropy

def _ls_suspects(logits: Tensor, targets: Tensor, p: int, eps: float) -> list[Suspect]:
    v = logits.shape[-1]
    flat_logits, flat_targets = logits.reshape(-1, v), targets.reshape(-1)
    keep = targets != p
    log_p = torch.log_softmax(logits[keep], dim=-1)  # (N, V) over the non-pad positions
    nll = -log_p.gather(-1, targets[keep][:, None])[:, 0]  # (N,)
    uniform = -log_p.mean(dim=-1)  # (N,)
    smoothed = (1 - eps) * nll + eps * uniform  # (N,): the right loss of each position
    q = (1 - eps) * F.one_hot(targets[keep], v).to(log_p.dtype) + eps / v  # (N, V)
    padding = "the pad positions count — a position whose target is pad_id is left out entirely " \
              "(`ignore_index=pad_id`, or average only where targets != pad_id)"
    return [
        Suspect("the smoothing mass goes to the other V - 1 classes only, epsilon / (V - 1) each; here, as in "
                "F.cross_entropy(label_smoothing=epsilon), it is spread over all V classes, the target included: "
                "q = (1 - epsilon) onehot(y) + epsilon / V", "smoothing over the other classes only",
                lambda: ((1 - eps) * nll + eps * (-log_p.sum(-1) - nll) / (v - 1)).mean()),
        Suspect("the target keeps weight 1 and the smoothing is added on top; the target's -log p has weight "
                "1 - epsilon, so that q sums to 1", "target weight not lowered", lambda: (nll + eps * uniform).mean()),
        Suspect("the smoothing term sums -log p over the V classes; each class has weight epsilon / V, so it is "
                "their mean", "classes summed instead of averaged",
                lambda: ((1 - eps) * nll + eps * v * uniform).mean()),
        Suspect("epsilon is ignored: this is the plain cross-entropy of the one-hot targets", "epsilon ignored",
                lambda: nll.mean()),
        Suspect(padding, "loss averaged over the padding too",
                lambda: F.cross_entropy(flat_logits, flat_targets, label_smoothing=eps)),
        Suspect("the pads contribute 0 but still count in the denominator — divide by the number of non-pad "
                "targets, not by B·T", "loss averaged over the padding too", lambda: smoothed.sum() / targets.numel()),
        Suspect(f"it ignores the target 0 instead of pad_id={p}", "pad_id assumed to be 0",
                lambda: F.cross_entropy(flat_logits, flat_targets, ignore_index=0, label_smoothing=eps)),
        Suspect("the predicted probabilities are smoothed, -log((1 - epsilon) p_y + epsilon / V); label smoothing "
                "changes the *targets*: -sum_v q_v log p_v", "probabilities smoothed instead of the targets",
                lambda: -torch.log((1 - eps) * (-nll).exp() + eps / v).mean()),
        Suspect("it is the KL divergence from q, which is the cross-entropy minus the entropy of q; the loss asked for "
                "is the cross-entropy -sum_v q_v log p_v", "KL divergence instead of cross-entropy",
                lambda: F.kl_div(log_p, q, reduction="batchmean")),
        Suspect("it is the sum of the per-position losses — the loss is their mean over the non-pad positions",
                "summed instead of averaged", lambda: smoothed.sum()),
        Suspect("epsilon = 0 was replaced by 0.1 (`epsilon or 0.1`?): with epsilon = 0 there is no smoothing, and "
                "the loss is the plain cross-entropy", "epsilon 0 replaced by the default",
                lambda: F.cross_entropy(flat_logits, flat_targets, ignore_index=p, label_smoothing=0.1)),
    ]


def _ls_what(logits: Tensor, targets: Tensor, p: int, eps: float) -> str:
    return (f"label_smoothed_cross_entropy(logits {tuple(logits.shape)}, targets {targets.tolist()}, pad_id={p}, "
            f"epsilon={eps})")


def _ls_crashed(raised: Raised, what: str, *case: Any) -> Mistake:
    if "Expected target size" in raised.message or "batch_size" in raised.message:
        return Mistake(f"{what} {raised.describe()} — F.cross_entropy wants the classes on axis 1: pass "
                       f"`logits.reshape(-1, V)` with `targets.reshape(-1)`", "classes on the wrong axis")
    return Mistake(f"{what} {raised.describe()}")


_LS_HINT = ("the mean, over the positions whose target is not pad_id, of (1 - epsilon)(-log p_target) + "
            "epsilon · mean_v(-log p_v)")
judge(Compare(LS_VALUES, ref.label_smoothed_cross_entropy, _ls_what, _ls_suspects, hint=_LS_HINT,
              crashed=_ls_crashed))
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
        raise Mistake(f"{what}: the ValueError should name both shapes, so that the learner sees which tensor is "
                      f"wrong; its message was {shapes.message!r}", "ValueError without the shapes")
    judge_value_error(shapes, what, ("5", "4"))
    for raised, (*_, eps) in zip(epsilons, LS_ERRORS.cases[1:], strict=True):
        judge_value_error(raised, f"label_smoothed_cross_entropy(..., epsilon={eps}), outside [0, 1)", ())


register(LS_ERRORS.id, _judge_ls_errors)


# ================================================================ noam_lr

def _noam(step: int, d: int, w: int, decay: float = -0.5, rise: float = -1.5, scale: float = -0.5,
          pick: Callable[..., float] = min) -> float | None:
    """The paper's formula, with one of its parts changed as a mistake would; None where it cannot be computed."""
    try:
        return d**scale * pick(step**decay, step * w**rise)
    except (ZeroDivisionError, OverflowError):
        return None


def _noam_suspects(step: int, d: int, w: int) -> list[Suspect]:
    return [
        Suspect("the warm-up term uses warmup^-0.5; the paper's is step · warmup^-1.5, so that the two terms meet at "
                "step = warmup", "warm-up exponent -0.5", lambda: _noam(step, d, w, rise=-0.5)),
        Suspect("the factor d_model^-0.5 in front is missing", "d_model factor missing",
                lambda: _noam(step, d, w, scale=0.0)),
        Suspect("it multiplies by d_model^+0.5; the factor is d_model^-0.5, 1 / sqrt(d_model)",
                "d_model exponent sign", lambda: _noam(step, d, w, scale=0.5)),
        Suspect("it takes the max of the two terms; the min gives the linear rise, then the decay",
                "max instead of min", lambda: _noam(step, d, w, pick=max)),
        Suspect("it computes the rate of step + 1: steps count from 1, as in the paper, so the first update uses "
                "noam_lr(1, ...) as it is", "step off by one", lambda: _noam(step + 1, d, w)),
        Suspect("it computes the rate of step - 1: steps count from 1, as in the paper, so the first update uses "
                "noam_lr(1, ...) as it is", "step off by one", lambda: _noam(step - 1, d, w)),
    ]


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
        for i, suspect in enumerate(_noam_suspects(1, d, w)):  # the same mistake at every step: whole curves
            curve = [_noam_suspects(step, d, w)[i].produce() for step in steps]
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

def _decoder_passes_suspects(n: int) -> list[Suspect]:
    return [
        Suspect("with teacher forcing the whole shifted target goes in at once, and the causal mask keeps each "
                "position from the later ones: one pass scores every position",
                "teacher forcing taken to run token by token", lambda: (n, n)),
        Suspect("generation cannot know token t + 1 before it has chosen token t: without a cache it runs the decoder "
                "once per new token",
                "generation taken as one pass", lambda: (1, 1)),
        Suspect("training takes one pass, generation one per token", "training and generation swapped", lambda: (n, 1)),
    ]


def _scored_positions_suspects(n: int) -> list[Suspect]:
    return [
        Suspect("in training every position is predicted and scored; only generation reads the last position alone",
                "loss on the last token only", lambda: ((n - 1,), n - 1)),
        Suspect("the next token comes from the last position, the only one that has seen the whole prefix",
                "first position read when generating", lambda: (tuple(range(n)), 0)),
    ]


register("decoder_passes_answer", lambda obs: judge_answers(
    obs, _DECODER_PASSES_CASES, ref.decoder_passes, _decoder_passes_suspects, lambda n: f"decoder_passes({n})"))
register("scored_positions_answer", lambda obs: judge_answers(
    obs, _SCORED_POSITIONS_CASES, ref.scored_positions, _scored_positions_suspects,
    lambda n: f"scored_positions({n})"))
