"""The known mistakes of Chapter 6 (``06_transformer``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/transformer.py``) name every
mistake from here. Each group says the form of its cases and what ``right`` computes, where it needs one. Most
mistakes of the modules are the right parts put together the wrong way: their cases hold the parts themselves
(the two Linear maps of a FeedForward, a layer's attentions, feed-forward network and LayerNorms, a model), and a
visible check passes the learner's own parts, with the weights it compares against, where the judge passes the
reference's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.testing import KnownMistake, Mistakes

# ================================================================ FeedForward
# Cases: (x, first, second): first and second are the two Linear maps, d_model -> d_ff and d_ff -> d_model.

NOT_A_MODULE = KnownMistake("not an nn.Module", "{call} should be an nn.Module: subclass nn.Module and call "
                            "super().__init__() first")
SINGLE_LINEAR = KnownMistake("a single Linear", "{call} holds {n} nn.Linear layers, expected two: d_model -> d_ff and "
                             "d_ff -> d_model")
D_FF_IGNORED = KnownMistake("d_ff ignored", "{call} maps {found}; expected 12 -> 20 and 20 -> 12: widen to d_ff, then "
                            "back to d_model")
NO_BIAS = KnownMistake("no bias", "{call}'s Linear layers should have biases, as in the paper's "
                       "max(0, xW1 + b1)W2 + b2")

_RESIDUAL_INSIDE = ("the input is added to the output: the residual connection belongs to the layers around "
                    "FeedForward, not inside it")

FEED_FORWARD = Mistakes([
    KnownMistake("ReLU missing", "no ReLU between the two Linear layers: without a nonlinearity the two layers "
                 "collapse into one linear map", lambda right, x, first, second: second(first(x))),
    KnownMistake("ReLU after the second Linear", "the ReLU comes after the second Linear, so every output is >= 0; it "
                 "belongs between the two layers, on the d_ff hidden units",
                 lambda right, x, first, second: second(first(x)).relu()),
    KnownMistake("ReLU after the second Linear", "a ReLU after the second Linear as well: the output must be able to "
                 "go negative", lambda right, x, first, second: second(first(x).relu()).relu()),
    KnownMistake("GELU instead of ReLU", "it uses GELU; the original transformer's FFN, like "
                 "nn.TransformerEncoderLayer's default, uses ReLU",
                 lambda right, x, first, second: second(F.gelu(first(x)))),
    KnownMistake("residual added inside FeedForward", _RESIDUAL_INSIDE,
                 lambda right, x, first, second: second(first(x).relu()) + x),
    KnownMistake("ReLU on the input", "the ReLU is applied to the input, before the first Linear",
                 lambda right, x, first, second: second(first(x.relu()))),
])


def _bias_only(second: Callable[[Tensor], Tensor], first: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """What the second Linear gives on hidden units that are all zero: its bias, at every position of x."""
    return second(torch.zeros_like(first(x)))


#: Cases: (x, first, second), in training mode with dropout=1.0: every hidden unit is dropped.
FEED_FORWARD_DROPPED = Mistakes([
    KnownMistake("dropout after the second Linear", "the output is all zeros: the dropout acts after the second "
                 "Linear; it belongs on the hidden units, between the ReLU and the second Linear, so with p=1 only the "
                 "second bias is left", lambda right, x, first, second: torch.zeros_like(x)),
    KnownMistake("dropout on the input", "the dropout acts on the input, before the first Linear; it belongs on the "
                 "hidden units, between the ReLU and the second Linear",
                 lambda right, x, first, second: second(first(torch.zeros_like(x)).relu())),
    KnownMistake("dropout missing", "nothing was dropped: pass `dropout` on to an nn.Dropout between the ReLU and the "
                 "second Linear", lambda right, x, first, second: second(first(x).relu())),
    KnownMistake("residual added inside FeedForward", _RESIDUAL_INSIDE,
                 lambda right, x, first, second: x + _bias_only(second, first, x)),
    KnownMistake("ReLU after the second Linear", "the output went through a ReLU: it belongs between the two Linear "
                 "layers, so the output can be negative",
                 lambda right, x, first, second: _bias_only(second, first, x).relu()),
])

FF_DROPOUT_IN_EVAL = KnownMistake("dropout applied in eval mode", "{call} is random, or differs from the output "
                                  "without dropout: dropout must do nothing in eval mode — use nn.Dropout (it follows "
                                  ".train() / .eval()), or pass training=self.training to F.dropout")
FF_NOTHING_DROPPED = KnownMistake("dropout missing", "{call} in training mode gives the eval-mode output: nothing was "
                                  "dropped")


# ================================================================ EncoderLayer and DecoderLayer: their parts

PARTS_NOT_NAMED = KnownMistake("parts not named as asked", "{call} has no attribute {missing} — store the parts as "
                               "{parts}: the tests copy weights into them by these names")
ONE_ATTENTION = KnownMistake("one attention module for both", "{call}.self_attn and .cross_attn are the same module: "
                             "self-attention and cross-attention each need their own weights")
ONE_NORM_OBJECT = KnownMistake("one LayerNorm for every block", "{call} uses one LayerNorm object for several blocks: "
                               "each block has its own nn.LayerNorm(d_model), with its own weights")
LAYER_DROPOUT_IN_EVAL = KnownMistake("dropout applied in eval mode", "{call} in eval mode is random, or differs from "
                                     "the same layer with dropout=0.0: dropout must do nothing in eval mode — use "
                                     "nn.Dropout modules (they follow .train() / .eval()), not F.dropout without "
                                     "training=self.training")
DROPOUT_IGNORED = KnownMistake("dropout ignored", "{call} gives the same output twice in training mode: nothing is "
                               "dropped — pass dropout on to the attention and the feed-forward network, and apply "
                               "nn.Dropout to each sublayer's output before the residual addition")


# ================================================================ EncoderLayer and DecoderLayer: their values
# Encoder cases: (x, self_attn, ff, norms, src_mask, norm_first); decoder cases: (x, memory, self_attn, cross_attn,
# ff, norms, tgt_mask, memory_mask, norm_first). An attention is called as attn(query, key, value, mask) and gives
# (out, weights); norms is the list [norm1, norm2] or [norm1, norm2, norm3]. No ``right`` is needed.

def _residual_blocks(x: Tensor, blocks: Sequence[Callable[[Tensor], Tensor]],
                     norms: Sequence[Callable[[Tensor], Tensor]], norm_first: bool,
                     residual: tuple[bool, ...] | None = None, after_norm: bool = False,
                     from_normed: bool = False) -> Tensor:
    """The blocks one after the other, each with its LayerNorm, put together as a mistake would: the LayerNorm
    where ``norm_first`` says, a residual only where ``residual`` keeps one, added after the norm or from the
    normalised input."""
    keeps = residual or tuple(True for _ in blocks)
    for f, norm, keep in zip(blocks, norms, keeps, strict=True):
        if norm_first:
            normed = norm(x)
            x = f(normed) + ((normed if from_normed else x) if keep else 0)
        elif after_norm:
            x = norm(f(x)) + (x if keep else 0)
        else:
            x = norm(f(x) + (x if keep else 0))
    return x


class _Encoder:
    """An encoder case, taken apart: ``blocks(mask)`` are its two sublayers, with the mask given."""

    def __init__(self, x: Tensor, self_attn: Any, ff: Any, norms: Sequence[Any], mask: Tensor | None,
                 norm_first: bool) -> None:
        self.x, self.attn, self.ff, self.norms, self.mask, self.norm_first = x, self_attn, ff, list(norms), mask, \
            norm_first

    def blocks(self, mask: Tensor | None = None, same: bool = True) -> list[Callable[[Tensor], Tensor]]:
        mask = self.mask if same else mask
        return [lambda h: self.attn(h, h, h, mask)[0], self.ff]


class _Decoder:
    """A decoder case, taken apart: ``self_block`` and ``cross_block`` give its attentions as blocks."""

    def __init__(self, x: Tensor, memory: Tensor, self_attn: Any, cross_attn: Any, ff: Any, norms: Sequence[Any],
                 tgt_mask: Tensor | None, memory_mask: Tensor | None, norm_first: bool) -> None:
        self.x, self.memory, self.ff, self.norms, self.norm_first = x, memory, ff, list(norms), norm_first
        self.self_attn, self.cross_attn, self.tgt_mask, self.memory_mask = self_attn, cross_attn, tgt_mask, memory_mask

    def self_block(self, mask: Tensor | None, attn: Any = None) -> Callable[[Tensor], Tensor]:
        attn = attn or self.self_attn
        return lambda h: attn(h, h, h, mask)[0]

    def cross_block(self, mask: Tensor | None, attn: Any = None) -> Callable[[Tensor], Tensor]:
        attn = attn or self.cross_attn
        return lambda h: attn(h, self.memory, self.memory, mask)[0]

    def blocks(self) -> list[Callable[[Tensor], Tensor]]:
        return [self.self_block(self.tgt_mask), self.cross_block(self.memory_mask), self.ff]


def _wrong_layer(kind: type, blocks: Callable[[Any], list] | None = None, norms: Callable[[list], list] | None = None,
                 flip: bool = False, **how: Any) -> Callable[..., Tensor]:
    """The value of a layer (``kind``: _Encoder or _Decoder) that makes a mistake: other ``blocks`` or ``norms``
    (functions of the case taken apart), the other placement of the LayerNorms (``flip``), or ``how`` the residual
    blocks are put together (:func:`_residual_blocks`)."""
    def wrong(right: Any, *case: Any) -> Tensor:
        layer = kind(*case)
        return _residual_blocks(layer.x, blocks(layer) if blocks else layer.blocks(),
                                norms(layer.norms) if norms else layer.norms, layer.norm_first != flip, **how)

    return wrong


def _norm_first(*case: Any) -> bool:
    return bool(case[-1])


def _post_norm(*case: Any) -> bool:
    return not case[-1]


def _residuals(kind: type, names: Sequence[str]) -> list[KnownMistake]:
    """The mistakes of the residual blocks and the placement of their LayerNorms, for sublayers called ``names``."""
    found = [
        KnownMistake("post-norm when norm_first=True", "it normalises after adding the residual, LN(x + f(x)): that is "
                     "post-norm, but norm_first=True asks for pre-norm, x + f(LN(x))", _wrong_layer(kind, flip=True),
                     when=_norm_first),
        KnownMistake("pre-norm when norm_first=False", "it normalises each sublayer's input, x + f(LN(x)): that is "
                     "pre-norm, but norm_first=False asks for the paper's post-norm, LN(x + f(x))",
                     _wrong_layer(kind, flip=True), when=_post_norm),
    ]
    for i, name in enumerate(names):
        found.append(KnownMistake(
            f"residual missing around the {name}",
            lambda *case, name=name: f"the {name} output is not added back to its input: each block is "
                                     f"{'x + f(LN(x))' if case[-1] else 'LN(x + f(x))'}",
            _wrong_layer(kind, residual=tuple(j != i for j in range(len(names))))))
    return [
        *found,
        KnownMistake("no residual connections", "no block adds its input back: every sublayer needs a residual "
                     "connection", _wrong_layer(kind, residual=tuple(False for _ in names))),
        KnownMistake("residual taken from the normalised x", "the residual adds the normalised input, LN(x) + "
                     "f(LN(x)); pre-norm adds the raw input, x + f(LN(x))", _wrong_layer(kind, from_normed=True),
                     when=_norm_first),
        KnownMistake("residual added after the LayerNorm", "it normalises the sublayer's output and then adds the "
                     "input, x + LN(f(x)); post-norm normalises the sum, LN(x + f(x))",
                     _wrong_layer(kind, after_norm=True), when=_post_norm),
    ]


def _norms(kind: type, n: int) -> list[KnownMistake]:
    """The mistakes of which LayerNorm each of the ``n`` blocks uses."""
    found = [
        KnownMistake("norm1 and norm2 swapped", "the first block uses norm2 and the second norm1: each block has its "
                     "own LayerNorm, norm1 for the first",
                     _wrong_layer(kind, norms=lambda norms: [norms[1], norms[0], *norms[2:]])),
        KnownMistake("norm1 used for every block", "norm1 serves every block: each block has its own LayerNorm, norm1, "
                     "norm2" + (", norm3" if n == 3 else ""), _wrong_layer(kind, norms=lambda norms: norms[:1] * n)),
        KnownMistake("one LayerNorm for every block", "one LayerNorm object serves every block (the weights copied "
                     "into it last are used everywhere): each block needs its own nn.LayerNorm(d_model)",
                     _wrong_layer(kind, norms=lambda norms: norms[-1:] * n)),
    ]
    if n == 3:
        found.append(KnownMistake("LayerNorms in the wrong order", "the LayerNorms are used in the wrong order: norm1 "
                                  "after self-attention, norm2 after cross-attention, norm3 after the feed-forward "
                                  "network", _wrong_layer(kind, norms=lambda norms: [norms[0], norms[2], norms[1]])))
    return found


def _encoder_masked(x: Tensor, self_attn: Any, ff: Any, norms: Any, mask: Tensor | None, norm_first: bool) -> bool:
    return mask is not None


ENCODER_LAYER = Mistakes([
    *_residuals(_Encoder, ["attention", "feed-forward"]),
    *_norms(_Encoder, 2),
    KnownMistake("src_mask ignored", "src_mask is not passed to the self-attention: real tokens still attend the "
                 "padding", _wrong_layer(_Encoder, blocks=lambda e: e.blocks(None, same=False)), when=_encoder_masked),
    KnownMistake("src_mask inverted", "src_mask is inverted: True means 'may attend', so pass it as it is",
                 _wrong_layer(_Encoder, blocks=lambda e: e.blocks(e.mask.logical_not(), same=False)),
                 when=_encoder_masked),
])

_FROM_DECODER = ("the cross-attention takes its keys and values from the decoder states x, so memory is never read; "
                 "they come from `memory`, the encoder output: cross_attn(x, memory, memory, memory_mask)")
_CROSS_FIRST = ("the cross-attention comes before the self-attention: the decoder first attends its own tokens "
                "(masked), then the encoder output")


def _cross_on_x(mask: Callable[[_Decoder], Tensor | None]) -> Callable[[_Decoder], list]:
    """The blocks of a decoder whose cross-attention reads x for its keys and values, with ``mask(d)``."""
    return lambda d: [d.self_block(d.tgt_mask), lambda h: d.cross_attn(h, h, h, mask(d))[0], d.ff]


def _has(mask: str) -> Callable[..., bool]:
    names = {"tgt": -3, "memory": -2}
    return lambda *case: case[names[mask]] is not None


DECODER_LAYER = Mistakes([
    *_residuals(_Decoder, ["self-attention", "cross-attention", "feed-forward"]),
    *(KnownMistake("cross-attention ignores memory", _FROM_DECODER, _wrong_layer(_Decoder, blocks=_cross_on_x(mask)))
      for mask in (lambda d: d.memory_mask, lambda d: d.tgt_mask, lambda d: None)),  # whichever mask fits
    KnownMistake("cross-attention keys from the decoder", "the cross-attention takes its keys from the decoder states "
                 "x and its values from memory; keys and values both come from `memory`: cross_attn(x, memory, "
                 "memory, memory_mask)", _wrong_layer(_Decoder, blocks=lambda d: [
                     d.self_block(d.tgt_mask), lambda h: d.cross_attn(h, h, d.memory, d.memory_mask)[0], d.ff])),
    *_norms(_Decoder, 3),
    KnownMistake("one attention module for both", "the self-attention and the cross-attention are one module, with "
                 "one set of weights: each needs its own Attention", _wrong_layer(_Decoder, blocks=lambda d: [
                     d.self_block(d.tgt_mask, d.cross_attn), d.cross_block(d.memory_mask), d.ff])),
    KnownMistake("self_attn and cross_attn swapped", "the self-attention uses cross_attn's weights and the "
                 "cross-attention self_attn's", _wrong_layer(_Decoder, blocks=lambda d: [
                     d.self_block(d.tgt_mask, d.cross_attn), d.cross_block(d.memory_mask, d.self_attn), d.ff])),
    KnownMistake("cross-attention before self-attention", _CROSS_FIRST, _wrong_layer(
        _Decoder, blocks=lambda d: [d.cross_block(d.memory_mask), d.self_block(d.tgt_mask), d.ff],
        norms=lambda norms: [norms[1], norms[0], norms[2]])),
    KnownMistake("cross-attention before self-attention", _CROSS_FIRST, _wrong_layer(
        _Decoder, blocks=lambda d: [d.cross_block(d.memory_mask), d.self_block(d.tgt_mask), d.ff])),
    KnownMistake("tgt_mask ignored", "tgt_mask is not passed to the self-attention: each position also attends the "
                 "positions after it", _wrong_layer(_Decoder, blocks=lambda d: [
                     d.self_block(None), d.cross_block(d.memory_mask), d.ff]), when=_has("tgt")),
    KnownMistake("tgt_mask inverted", "tgt_mask is inverted: True means 'may attend', so pass it as it is",
                 _wrong_layer(_Decoder, blocks=lambda d: [
                     d.self_block(d.tgt_mask.logical_not()), d.cross_block(d.memory_mask), d.ff]), when=_has("tgt")),
    KnownMistake("memory mask ignored", "memory_mask is not passed to the cross-attention: the decoder attends the "
                 "source's padding", _wrong_layer(_Decoder, blocks=lambda d: [
                     d.self_block(d.tgt_mask), d.cross_block(None), d.ff]), when=_has("memory")),
    KnownMistake("memory mask inverted", "memory_mask is inverted: True means 'may attend'",
                 _wrong_layer(_Decoder, blocks=lambda d: [
                     d.self_block(d.tgt_mask), d.cross_block(d.memory_mask.logical_not()), d.ff]),
                 when=_has("memory")),
    KnownMistake("tgt_mask and memory_mask swapped", "the masks are swapped: tgt_mask belongs to the self-attention, "
                 "memory_mask to the cross-attention", _wrong_layer(_Decoder, blocks=lambda d: [
                     d.self_block(d.memory_mask), d.cross_block(d.tgt_mask), d.ff]),
                 when=lambda *case: _has("tgt")(*case) and _has("memory")(*case)),
])


# ================================================================ EncoderLayer and DecoderLayer: dropout on each output
# Cases as the layers' values above, the parts in training mode with dropout=1.0: a right layer drops every
# sublayer's output before adding it back, so post-norm gives its LayerNorms one after the other, LN2(LN1(x)), and
# pre-norm x itself. No ``right`` is needed.

def _block_form(norm_first: bool) -> str:
    return "x + Dropout(f(LN(x)))" if norm_first else "LN(x + Dropout(f(x)))"


def _one_not_dropped(kind: type, index: int) -> Callable[..., Tensor]:
    """The layer that adds sublayer ``index``'s output back without dropout: with p=1 the others add nothing."""
    return _wrong_layer(kind, blocks=lambda layer: [f if i == index else torch.zeros_like
                                                    for i, f in enumerate(layer.blocks())])


def _sum_dropped(kind: type) -> Callable[..., Tensor]:
    """The layer that drops the residual sum, input included: with p=1 each block's sum is all zeros."""
    def wrong(right: Any, *case: Any) -> Tensor:
        layer = kind(*case)
        x = layer.x
        for norm in layer.norms:
            x = torch.zeros_like(x) if layer.norm_first else norm(torch.zeros_like(x))
        return x

    return wrong


def _dropout_sites(kind: type, names: Sequence[str]) -> list[KnownMistake]:
    """The mistakes of where the dropout of a layer's residual blocks goes, for sublayers called ``names``."""
    found = [KnownMistake(
        f"no dropout on the {name} output",
        lambda *case, name=name: f"the {name} output is added back without dropout: with dropout=1.0 in training "
                                 f"mode it still reaches the residual. Apply dropout to each sublayer's output "
                                 f"before adding it back: {_block_form(bool(case[-1]))}",
        _one_not_dropped(kind, i)) for i, name in enumerate(names)]
    return [*found, KnownMistake(
        "dropout on the residual sum", lambda *case: f"the dropout acts on the sum, the input included, so with "
                                                     f"dropout=1.0 the input is lost too; it belongs on the "
                                                     f"sublayer's output alone: {_block_form(bool(case[-1]))}",
        _sum_dropped(kind))]


ENCODER_DROPPED = Mistakes(_dropout_sites(_Encoder, ["attention", "feed-forward"]))
DECODER_DROPPED = Mistakes(_dropout_sites(_Decoder, ["self-attention", "cross-attention", "feed-forward"]))


# ================================================================ TransformerConfig

NOT_A_DATACLASS = KnownMistake("not a dataclass", "TransformerConfig should be a class decorated with @dataclass, "
                               "with one typed field per size")
FIELDS_MISSING = KnownMistake("fields missing", "TransformerConfig has no field {missing}")
#: One per field with a default, named after it: the value a config built with only the vocabularies holds.
CONFIG_DEFAULTS = Mistakes(
    KnownMistake(f"{field} default", f"{{call}}.{field} is {{got}}, expected {{want}}: the defaults are the base "
                 f"model of the paper, as the exercise lists them")
    for field in ("d_model", "n_heads", "n_layers", "d_ff", "dropout", "max_len", "pad_id", "norm_first"))
FIELD_ORDER = KnownMistake("field order", "TransformerConfig(11, 13) should set src_vocab=11 and tgt_vocab=13: they "
                           "are the first two fields")
VOCABULARIES_WITH_DEFAULTS = KnownMistake("vocabularies given defaults", "TransformerConfig() without vocabularies "
                                          "should fail with a TypeError: src_vocab and tgt_vocab are required fields, "
                                          "without defaults")


# ================================================================ Transformer: its parts and its properties

_EMBED_STD = ("{call}.{name}'s weights have standard deviation {std:.3g}; initialise them with "
              "nn.init.normal_(weight, std=d_model ** -0.5) = {want:.3g}, so that after the × √d_model scaling the "
              "token vectors have entries of size ~1, like the positional codes")
EMBEDDINGS_STD_1 = KnownMistake("embeddings initialised with std 1", _EMBED_STD)
EMBEDDINGS_WRONG_STD = KnownMistake("embeddings initialised with the wrong std", _EMBED_STD)
EMBEDDING_DROPOUT_MISSING = KnownMistake("embedding dropout missing", "in training mode with dropout=1.0 it is not all "
                                         "zeros: the embeddings go through dropout, Dropout(E[y] · √d_model + PE), "
                                         "before the first layer")
EMBEDDING_DROPOUT_IN_EVAL = KnownMistake("dropout applied in eval mode", "in eval mode it is all zeros: dropout must "
                                         "do nothing there — use nn.Dropout, which follows .train() and .eval()")
T_EQUALS_MAX_LEN = KnownMistake("T == max_len refused", "a sequence of exactly max_len = {max_len} tokens fits the "
                                "positional table, rows 0..{last}: refuse only T > max_len")
CONFIG_NOT_KEPT = KnownMistake("config not kept", "Transformer(config).config should be the config it was given: "
                               "store it as self.config (greedy decoding reads model.config.pad_id)")
FORWARD_NOT_ENCODE_DECODE = KnownMistake("forward not encode then decode", "forward(src, tgt_in) differs from "
                                         "decode(tgt_in, encode(src), src) — forward is exactly that")
SEES_THE_FUTURE = KnownMistake("no causal mask in the decoder", "changing only the target tokens at positions "
                               "{start}.. changed the logits at positions 0..{last}, so the decoder sees the future — "
                               "in training it would copy the next token instead of predicting it. Combine "
                               "causal_mask(T) with the target padding mask and pass it as tgt_mask to every decoder "
                               "layer")
_ENCODER_PADS = ("appending {extra} more pad tokens changed the encoder output at the real tokens, so the encoder's "
                 "self-attention attends the padding — pass padding_mask(src, pad_id) to every encoder layer")
_MEMORY_PADS = ("appending {extra} more pad tokens to the source changed the logits, so the decoder's cross-attention "
                "attends the source's padding — pass padding_mask(src, pad_id) as memory_mask to every decoder layer")
_NOT_ZERO = " — the padding is pad_id = model.config.pad_id, not 0"
ENCODER_ATTENDS_PADS = KnownMistake("source padding mask ignored in the encoder", _ENCODER_PADS)
MEMORY_PADS_ATTENDED = KnownMistake("memory mask ignored", _MEMORY_PADS)
ENCODER_PAD_ID_0 = KnownMistake("pad_id hard-coded as 0", _ENCODER_PADS + _NOT_ZERO)
MEMORY_PAD_ID_0 = KnownMistake("pad_id hard-coded as 0", _MEMORY_PADS + _NOT_ZERO)
MASK_ON_CPU = KnownMistake("mask built on the CPU", "{call} {found} — build every mask and table on the device of the "
                           "tokens (device=src.device), or register the table as a buffer, so that the model also runs "
                           "on a GPU")
_NO_GRADIENT = "{call}: no gradient reaches {names}"
MEMORY_DETACHED = KnownMistake("parameters without gradient", _NO_GRADIENT + " — the decoder must read the encoder's "
                               "output (memory) without detaching it")
PARAMETERS_WITHOUT_GRADIENT = KnownMistake("parameters without gradient", _NO_GRADIENT + " — is every part used in "
                                           "forward, and nothing detached?")


# ================================================================ Transformer: encode and decode
# Cases: (model, src, pe) for encode and (model, tgt_in, memory, src, pe) for decode: model is a Transformer whose
# parts (src_embed, tgt_embed, encoder_layers, decoder_layers, encoder_norm, decoder_norm, out, config) are right,
# pe the positional table of config.max_len rows. No ``right`` is needed.

def _embedded(model: Any, tokens: Tensor, table: nn.Embedding, pe: Tensor, scale: str = "times",
              positions: bool = True) -> Tensor:
    d = model.config.d_model
    rows = pe[: tokens.shape[1]]
    if scale == "after":
        return (table(tokens) + rows) * math.sqrt(d)
    vectors = table(tokens) * {"times": math.sqrt(d), "none": 1.0, "divide": 1 / math.sqrt(d)}[scale]
    return vectors + rows if positions else vectors


def _through(layers: Sequence[Any], x: Tensor, chained: bool, *args: Any) -> Tensor:
    if not chained:
        return layers[-1](x, *args)
    for layer in layers:
        x = layer(x, *args)
    return x


def _closed(model: Any, x: Tensor, norm: str, final: str) -> Tensor:
    if final == "missing":
        return x
    if final == "plain":  # a LayerNorm of weight 1 and bias 0
        return F.layer_norm(x, (model.config.d_model,))
    return getattr(model, norm)(x)


def _keep(tokens: Tensor, pad_id: int) -> Tensor:
    """(B, 1, T): True where the token is not padding."""
    return (tokens != pad_id).unsqueeze(-2)


def _encoded(model: Any, src: Tensor, pe: Tensor, scale: str = "times", positions: bool = True, mask: bool = True,
             final: str = "as is", chained: bool = True, table: str = "src_embed") -> Tensor:
    """What encode gives with one mistake."""
    with torch.no_grad():
        x = _embedded(model, src, getattr(model, table), pe, scale, positions)
        x = _through(model.encoder_layers, x, chained, _keep(src, model.config.pad_id) if mask else None)
        return _closed(model, x, "encoder_norm", final)


def _decoded(model: Any, tgt_in: Tensor, memory: Tensor, src: Tensor, pe: Tensor, scale: str = "times",
             positions: bool = True, causal: str = "lower", tgt_pad: bool = True, memory_mask: bool = True,
             final: str = "as is", chained: bool = True, table: str = "tgt_embed") -> Tensor:
    """What decode gives with one mistake."""
    with torch.no_grad():
        t, pad = tgt_in.shape[1], model.config.pad_id
        lower = torch.tril(torch.ones(t, t, dtype=torch.bool))
        triangle = {"lower": lower, "upper": lower.T, "none": torch.ones(t, t, dtype=torch.bool)}[causal]
        tgt_mask = triangle & _keep(tgt_in, pad) if tgt_pad else triangle
        x = _embedded(model, tgt_in, getattr(model, table), pe, scale, positions)
        x = _through(model.decoder_layers, x, chained, memory, tgt_mask, _keep(src, pad) if memory_mask else None)
        return model.out(_closed(model, x, "decoder_norm", final))


def _norm_first_of(model: Any) -> bool | None:
    """The model's config.norm_first, or None for a model that keeps no config."""
    found = getattr(getattr(model, "config", None), "norm_first", None)
    return None if found is None else bool(found)


def _model_mistakes(run: Callable[..., Tensor], stack: str) -> list[KnownMistake]:
    """The mistakes encode and decode share; ``run(case, **mistake)`` gives what they give."""
    def on(**how: Any) -> Callable[..., Tensor]:
        return lambda right, *case: run(*case, **how)

    return [
        KnownMistake("embeddings not scaled by √d_model", "the token embeddings are not multiplied by √d_model before "
                     "the positions are added", on(scale="none")),
        KnownMistake("embeddings divided by √d_model", "the token embeddings are divided by √d_model; the paper "
                     "multiplies them by √d_model", on(scale="divide")),
        KnownMistake("positions scaled by √d_model too", "the positions are scaled by √d_model too: scale the "
                     "embeddings first, then add the positional table", on(scale="after")),
        KnownMistake("positional encoding missing", "no positional encoding is added: without it attention cannot "
                     "tell word order", on(positions=False)),
        KnownMistake("layers not chained", f"every layer of {stack} reads the embeddings, so only the last one "
                     f"counts: feed each layer's output to the next", on(chained=False)),
        KnownMistake("final LayerNorm missing", f"with norm_first=True the pre-norm layers leave their output "
                     f"unnormalised: end {stack} with a final LayerNorm", on(final="missing"),
                     when=lambda model, *rest: _norm_first_of(model) is True),
        KnownMistake("final LayerNorm in a post-norm model", f"{stack} ends in a LayerNorm although norm_first=False: "
                     f"post-norm layers already end in one; the final LayerNorm belongs to pre-norm models only",
                     on(final="plain"), when=lambda model, *rest: _norm_first_of(model) is False),
    ]


ENCODE = Mistakes([
    *_model_mistakes(_encoded, "the encoder stack"),
    KnownMistake("source padding mask ignored in the encoder", "the source padding mask is not used: real source "
                 "tokens attend the padding — pass padding_mask(src, pad_id) to every encoder layer",
                 lambda right, model, src, pe: _encoded(model, src, pe, mask=False)),
    KnownMistake("target embeddings used for the source", "the source is embedded with tgt_embed; the source has its "
                 "own table, src_embed", lambda right, model, src, pe: _encoded(model, src, pe, table="tgt_embed")),
])

DECODE = Mistakes([
    *_model_mistakes(_decoded, "the decoder stack"),
    KnownMistake("no causal mask in the decoder", "the decoder's self-attention has no causal mask: each position "
                 "sees the tokens after it, which teacher forcing puts right there — combine causal_mask(T) with the "
                 "target padding mask", lambda right, *case: _decoded(*case, causal="none")),
    KnownMistake("upper instead of lower triangle", "the causal mask is the upper triangle: each position attends the "
                 "positions after it", lambda right, *case: _decoded(*case, causal="upper")),
    KnownMistake("memory mask ignored", "the cross-attention attends the source's padding: build memory_mask = "
                 "padding_mask(src, pad_id) and pass it to every decoder layer",
                 lambda right, *case: _decoded(*case, memory_mask=False)),
    KnownMistake("target padding mask ignored", "the target padding mask is not combined with the causal mask: padded "
                 "target positions are attended", lambda right, *case: _decoded(*case, tgt_pad=False)),
    KnownMistake("source embeddings used for the target", "the target is embedded with src_embed; the target has its "
                 "own table, tgt_embed", lambda right, *case: _decoded(*case, table="src_embed")),
])


# ================================================================ greedy_decode
# Cases: (model, src, start_id, end_id, max_len). right(model, src, start_id, end_id, max_len) is the right decoding.

class _FirstPosition(nn.Module):
    """``model`` whose logits at every position are those of position 0."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model, self.config = model, model.config

    def encode(self, src: Tensor) -> Tensor:
        return self.model.encode(src)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        logits = self.model.decode(tgt_in, memory, src)
        return logits[:, :1].expand_as(logits)


def _after_end(tokens: Tensor, end: int) -> Tensor:
    """True at the columns after each row's first end (the end itself excluded)."""
    seen = (tokens == end).cumsum(dim=1) > 0
    return torch.cat([torch.zeros_like(seen[:, :1]), seen[:, :-1]], dim=1)


def _first_ends(tokens: Tensor, end: int) -> list[int | None]:
    """The column of each row's first end after the start column, or None."""
    return [row.index(end, 1) if end in row[1:] else None for row in tokens.tolist()]


def _unpadded(right: Callable[..., Tensor], model: Any, src: Tensor, start: int, end: int, max_len: int) -> Tensor:
    """Every row's own tokens, none padded, until they all have ended (or max_len)."""
    raw = right(model, src, start, -1, max_len)  # an end id no argmax gives: nothing stops, nothing is padded
    ends = _first_ends(raw, end)
    return raw if None in ends else raw[:, : max(ends) + 1]


def _stopped_at_first(right: Callable[..., Tensor], model: Any, src: Tensor, start: int, end: int,
                      max_len: int) -> Tensor:
    out = right(model, src, start, end, max_len)
    ends = [i for i in _first_ends(out, end) if i is not None]
    return out[:, : min(ends) + 1] if ends else out


def _run_on(right: Callable[..., Tensor], model: Any, src: Tensor, start: int, end: int, max_len: int) -> Tensor:
    """The right decoding, then padded to max_len columns, as if it never stopped."""
    out = right(model, src, start, end, max_len)
    return F.pad(out, (0, max_len - out.shape[1]), value=model.config.pad_id)


def _end_as_padding(right: Callable[..., Tensor], model: Any, src: Tensor, start: int, end: int,
                    max_len: int) -> Tensor:
    """Every end replaced by padding as it comes: no row is ever finished, so decoding runs to max_len."""
    raw = right(model, src, start, -1, max_len)
    return raw.masked_fill(raw == end, model.config.pad_id)


_NEVER = "it keeps generating after every row has produced end_id: stop as soon as every row is finished"

GREEDY = Mistakes([
    KnownMistake("greedy decoding from the first position", "each step takes the argmax of position 0, which predicts "
                 "the first word again and again: the next token is predicted by the *last* position, logits[:, -1]",
                 lambda right, model, *rest: right(_FirstPosition(model), *rest)),
    KnownMistake("never stopping at <end>", _NEVER, _run_on),
    KnownMistake("not padding after <end>", "the tokens a row generates after its end_id are kept: a finished row gets "
                 "model.config.pad_id from then on", _unpadded),
    KnownMistake("never stopping at <end>", _NEVER,
                 lambda right, model, src, start, end, max_len: right(model, src, start, -1, max_len)),
    KnownMistake("pad_id hard-coded as 0",
                 lambda model, *rest: f"finished rows are padded with 0, but this model's pad_id is "
                                      f"{model.config.pad_id}: read model.config.pad_id",
                 lambda right, model, src, start, end, max_len: (lambda out: out.masked_fill(_after_end(out, end), 0))(
                     right(model, src, start, end, max_len))),
    KnownMistake("stopped when the first row ended", "it stops as soon as the first row produces end_id: stop when "
                 "*every* row has finished", _stopped_at_first),
    KnownMistake("start token not counted in max_len",
                 lambda model, src, start, end, max_len: f"it returns up to max_len + 1 = {max_len + 1} columns: "
                                                         f"max_len counts the start token, so at most max_len - 1 "
                                                         f"tokens are generated",
                 lambda right, model, src, start, end, max_len: right(model, src, start, end, max_len + 1)),
    KnownMistake("one token short of max_len",
                 lambda model, src, start, end, max_len: f"it returns at most max_len - 1 = {max_len - 1} columns: "
                                                         f"max_len counts the start token, so a row may hold max_len "
                                                         f"tokens in all",
                 lambda right, model, src, start, end, max_len: right(model, src, start, end, max(max_len - 1, 1))),
    KnownMistake("start_id missing", "the first column is not start_id: every row starts with start_id, and max_len "
                 "counts it", lambda right, *case: right(*case)[:, 1:]),
    KnownMistake("end token replaced by padding", "end_id itself was replaced by padding: keep each row's first end_id "
                 "and pad only *after* it", _end_as_padding),
])

TOKENS_NOT_INT64 = KnownMistake("token ids not int64", "{call} returned {dtype} — token ids are a LongTensor (int64): "
                                "build the start column with dtype=torch.long")
DECODED_OFF_DEVICE = KnownMistake("device not kept", "{call} {found}: build the start column, and every tensor the "
                                  "loop keeps, on the device of src — torch.full(..., device=src.device)")
LEFT_IN_TRAINING = KnownMistake("model left in training mode", "{call} ran the model in training mode: call "
                                "model.eval() first, or dropout makes the decoding random")


# ================================================================ label_smoothed_cross_entropy
# Cases: (logits, targets, pad_id, epsilon). No ``right`` is needed.

def _kept(logits: Tensor, targets: Tensor, pad_id: int) -> tuple[Tensor, Tensor]:
    """(log-probabilities (N, V) of the non-pad positions, -log p of their targets (N,))."""
    keep = targets != pad_id
    log_p = logits[keep].log_softmax(dim=-1)
    return log_p, -log_p.gather(-1, targets[keep].unsqueeze(-1)).squeeze(-1)


def _smoothed(logits: Tensor, targets: Tensor, pad_id: int, epsilon: float) -> Tensor:
    """(N,): the loss of each non-pad position."""
    log_p, nll = _kept(logits, targets, pad_id)
    return (1 - epsilon) * nll + epsilon * log_p.mean(dim=-1).neg()


def _flat(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    return logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)


_OVER_PADS = ("the pad positions count — a position whose target is pad_id is left out entirely "
              "(`ignore_index=pad_id`, or average only where targets != pad_id)")


def _smoothing_over_others(logits: Tensor, targets: Tensor, pad_id: int, epsilon: float) -> Tensor:
    log_p, nll = _kept(logits, targets, pad_id)
    return ((1 - epsilon) * nll + epsilon * (-log_p.sum(-1) - nll) / (logits.shape[-1] - 1)).mean()


def _kl(logits: Tensor, targets: Tensor, pad_id: int, epsilon: float) -> Tensor:
    log_p, _ = _kept(logits, targets, pad_id)
    v = logits.shape[-1]
    q = (1 - epsilon) * F.one_hot(targets[targets != pad_id], v).to(log_p.dtype) + epsilon / v  # (N, V)
    return F.kl_div(log_p, q, reduction="batchmean")


SMOOTHING = Mistakes([
    KnownMistake("smoothing over the other classes only", "the smoothing mass goes to the other V - 1 classes only, "
                 "epsilon / (V - 1) each; here, as in F.cross_entropy(label_smoothing=epsilon), it is spread over all "
                 "V classes, the target included: q = (1 - epsilon) onehot(y) + epsilon / V",
                 lambda right, *case: _smoothing_over_others(*case)),
    KnownMistake("target weight not lowered", "the target keeps weight 1 and the smoothing is added on top; the "
                 "target's -log p has weight 1 - epsilon, so that q sums to 1",
                 lambda right, z, y, p, eps: (_kept(z, y, p)[1] - eps * _kept(z, y, p)[0].mean(-1)).mean()),
    KnownMistake("classes summed instead of averaged", "the smoothing term sums -log p over the V classes; each class "
                 "has weight epsilon / V, so it is their mean",
                 lambda right, z, y, p, eps: ((1 - eps) * _kept(z, y, p)[1]
                                              + eps * z.shape[-1] * _kept(z, y, p)[0].mean(-1).neg()).mean()),
    KnownMistake("epsilon ignored", "epsilon is ignored: this is the plain cross-entropy of the one-hot targets",
                 lambda right, z, y, p, eps: _kept(z, y, p)[1].mean()),
    KnownMistake("loss averaged over the padding too", _OVER_PADS,
                 lambda right, z, y, p, eps: F.cross_entropy(*_flat(z, y), label_smoothing=eps)),
    KnownMistake("loss averaged over the padding too", "the pads contribute 0 but still count in the denominator — "
                 "divide by the number of non-pad targets, not by B·T",
                 lambda right, z, y, p, eps: _smoothed(z, y, p, eps).sum() / y.numel()),
    KnownMistake("pad_id assumed to be 0", lambda z, y, p, eps: f"it ignores the target 0 instead of pad_id={p}",
                 lambda right, z, y, p, eps: F.cross_entropy(*_flat(z, y), ignore_index=0, label_smoothing=eps)),
    KnownMistake("probabilities smoothed instead of the targets", "the predicted probabilities are smoothed, "
                 "-log((1 - epsilon) p_y + epsilon / V); label smoothing changes the *targets*: -sum_v q_v log p_v",
                 lambda right, z, y, p, eps: -torch.log((1 - eps) * _kept(z, y, p)[1].neg().exp()
                                                        + eps / z.shape[-1]).mean()),
    KnownMistake("KL divergence instead of cross-entropy", "it is the KL divergence from q, which is the cross-entropy "
                 "minus the entropy of q; the loss asked for is the cross-entropy -sum_v q_v log p_v",
                 lambda right, *case: _kl(*case)),
    KnownMistake("summed instead of averaged", "it is the sum of the per-position losses — the loss is their mean "
                 "over the non-pad positions", lambda right, *case: _smoothed(*case).sum()),
    KnownMistake("epsilon 0 replaced by the default", "epsilon = 0 was replaced by 0.1 (`epsilon or 0.1`?): with "
                 "epsilon = 0 there is no smoothing, and the loss is the plain cross-entropy",
                 lambda right, z, y, p, eps: F.cross_entropy(*_flat(z, y), ignore_index=p, label_smoothing=0.1)),
])

#: Cases: (logits, targets, pad_id), called without epsilon, whose default is the paper's 0.1.
EPSILON_DEFAULT = KnownMistake("epsilon default not 0.1", "called without epsilon it does not smooth with the "
                               "paper's 0.1: keep the signature's default, epsilon=0.1",
                               lambda right, z, y, p: F.cross_entropy(*_flat(z, y), ignore_index=p))
SMOOTHING_DEFAULT = Mistakes([EPSILON_DEFAULT])

CLASSES_ON_WRONG_AXIS = KnownMistake("classes on the wrong axis", "{call} {raised} — F.cross_entropy wants the classes "
                                     "on axis 1: pass `logits.reshape(-1, V)` with `targets.reshape(-1)`")
SHAPES_NOT_NAMED = KnownMistake("ValueError without the shapes", "{call}: the ValueError should name both shapes, so "
                                "that the learner sees which tensor is wrong; its message was {message}")


# ================================================================ noam_lr
# Cases: (step, d_model, warmup), step a number or a tensor of steps. right(step, d_model, warmup) is the rate.

NOAM = Mistakes([
    KnownMistake("warm-up exponent -0.5", "the warm-up term uses warmup^-0.5; the paper's is step · warmup^-1.5, so "
                 "that the two terms meet at step = warmup",
                 lambda right, step, d, w: right(step, d, w ** (1 / 3))),  # (w^(1/3))^-1.5 = w^-0.5
    KnownMistake("d_model factor missing", "the factor d_model^-0.5 in front is missing",
                 lambda right, step, d, w: right(step, 1, w)),
    KnownMistake("d_model exponent sign", "it multiplies by d_model^+0.5; the factor is d_model^-0.5, "
                 "1 / sqrt(d_model)",
                 lambda right, step, d, w: right(step, d, w) * d),
    KnownMistake("max instead of min", "it takes the max of the two terms; the min gives the linear rise, then the "
                 "decay", lambda right, step, d, w: (step ** -0.5 + step * w ** -1.5) / d ** 0.5 - right(step, d, w)),
    KnownMistake("step off by one", "it computes the rate of step + 1: steps count from 1, as in the paper, so the "
                 "first update uses noam_lr(1, ...) as it is", lambda right, step, d, w: right(step + 1, d, w)),
    KnownMistake("step off by one", "it computes the rate of step - 1: steps count from 1, as in the paper, so the "
                 "first update uses noam_lr(1, ...) as it is", lambda right, step, d, w: right(step - 1, d, w),
                 when=lambda step, d, w: bool(torch.all(torch.as_tensor(step) > 1))),
])


# ================================================================ concept checks
# Cases: (n_tokens,) for decoder_passes and for scored_positions.

DECODER_PASSES = Mistakes([
    KnownMistake("teacher forcing taken to run token by token", "with teacher forcing the whole shifted target goes "
                 "in at once, and the causal mask keeps each position from the later ones: one pass scores every "
                 "position", lambda right, n: (n, n)),
    KnownMistake("generation taken as one pass", "generation cannot know token t + 1 before it has chosen token t: "
                 "without a cache it runs the decoder once per new token", lambda right, n: (1, 1)),
    KnownMistake("training and generation swapped", "training takes one pass, generation one per token",
                 lambda right, n: (n, 1)),
])

SCORED_POSITIONS = Mistakes([
    KnownMistake("loss on the last token only", "in training every position is predicted and scored; only generation "
                 "reads the last position alone", lambda right, n: ((n - 1,), n - 1)),
    KnownMistake("first position read when generating", "the next token comes from the last position, the only one "
                 "that has seen the whole prefix", lambda right, n: (tuple(range(n)), 0)),
])
