"""The known mistakes of Chapter 3 (``03_cross_attention``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/cross_attention.py``) name every
mistake from here. Each group says the form of its cases and what ``right`` computes; a visible check passes its
own computation of it, and the judge passes the reference. A mistake that is the right answer given other inputs
(the decoder states as the memory, the mask negated) is ``right`` given those; the rest is written with PyTorch's
own functions from what the case holds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# the projections' layers are Chapter 1's, and so are their mistakes
from attention_course.mistakes.self_attention import BIAS_IGNORED, W_V_OF_D_K, part  # noqa: F401
from attention_course.testing import KnownMistake, Mistakes

# ================================================================ CrossAttention
# Cases: (w_q, w_k, w_v, x, memory, mask): the three projections as functions of a tensor (the module's nn.Linear
# layers, say), the decoder states x, the encoder output memory and the memory mask or None.
# right(q, k, v, mask=None) is scaled dot-product attention's (out, weights).


def _has_mask(w_q, w_k, w_v, x: Tensor, memory: Tensor, mask: Tensor | None = None) -> bool:  # noqa: ANN001
    return mask is not None


CROSS = Mistakes([
    KnownMistake("self-attention instead of cross-attention", "the keys and values are projections of x, so each "
                 "target position attends the target sentence — in cross-attention they are projections of `memory`, "
                 "the encoder output",
                 lambda right, w_q, w_k, w_v, x, memory, mask=None: right(w_q(x), w_k(x), w_v(x), mask)),
    KnownMistake("queries taken from the encoder", "the queries are projections of `memory` and the keys and values "
                 "of x — the decoder states x ask (queries), the encoder output answers (keys, values)",
                 lambda right, w_q, w_k, w_v, x, memory, mask=None: right(w_q(memory), w_k(x), w_v(x))),
    KnownMistake("queries taken from the encoder", "the queries come from `memory` too, so this is the encoder "
                 "attending to itself — the queries must be projections of the decoder states x",
                 lambda right, w_q, w_k, w_v, x, memory, mask=None: right(w_q(memory), w_k(memory), w_v(memory),
                                                                          mask)),
    KnownMistake("values not projected", "the values are `memory` itself — project them with w_v",
                 lambda right, w_q, w_k, w_v, x, memory, mask=None: right(w_q(x), w_k(memory), memory, mask)),
    KnownMistake("keys and values swapped", "the keys come from w_v and the values from w_k",
                 lambda right, w_q, w_k, w_v, x, memory, mask=None: right(w_q(x), w_v(memory), w_k(memory), mask)),
    KnownMistake("memory mask ignored", "the memory mask is not passed on to the attention: padded source positions "
                 "still get weight",
                 lambda right, w_q, w_k, w_v, x, memory, mask=None: right(w_q(x), w_k(memory), w_v(memory)),
                 when=_has_mask),
    KnownMistake("inverted memory mask", "the memory mask is inverted: True means 'may attend', so the real source "
                 "tokens were blocked and the padding kept",
                 lambda right, w_q, w_k, w_v, x, memory, mask=None: right(w_q(x), w_k(memory), w_v(memory), ~mask),
                 when=_has_mask),
])

#: Of the shapes of (out, weights); these give no value to compare (``fields`` in braces).
ROWS_PER_SOURCE_TOKEN = KnownMistake("queries taken from the encoder", "one row per *source* token — the queries must "
                                     "come from the decoder states x, so there is one output row per target "
                                     "position, whatever T_k")
TARGET_ATTENDS_TARGET = KnownMistake("self-attention instead of cross-attention", "each target position attends the "
                                     "T_q = {t_q} target positions — in cross-attention the keys and values come from "
                                     "`memory`, the encoder output, so the weights are T_q × T_k")
VALUES_OF_D_MODEL = KnownMistake("values not projected", "the values are `memory` itself — project them with w_v")
VALUES_OF_D_K = KnownMistake("w_v of width d_k instead of d_v", "the values have width d_k = {d_k} — w_v maps d_model "
                             "-> d_v, and d_v falls back to d_k only when it is not given")


# ================================================================ shift_right
# Cases: (tgt (B, T), start_id). right(tgt, start_id) is tgt shifted one place right behind start_id.

def _column(tgt: Tensor, value: int, rows: int | None = None) -> Tensor:
    """A column of ``value`` in the dtype of tgt, one row per sentence (or ``rows``)."""
    return torch.full((tgt.shape[0] if rows is None else rows, 1), value, dtype=tgt.dtype)


def _first_replaced(tgt: Tensor, start_id: int) -> Tensor:
    return torch.cat([_column(tgt, start_id), tgt[:, 1:]], dim=1)


SHIFT = Mistakes([
    KnownMistake("shifted left instead of right", "it drops the first token and puts start_id at the end — shifting "
                 "*right* puts start_id in front and lets the last token fall off",
                 lambda right, tgt, start_id: torch.cat([tgt[:, 1:], _column(tgt, start_id)], dim=1)),
    KnownMistake("length T+1 instead of T", "it keeps every token, so the result has T + 1 columns — drop the last "
                 "token so that the shape stays (B, T)",
                 lambda right, tgt, start_id: torch.cat([_column(tgt, start_id), tgt], dim=1)),
    KnownMistake("roll without overwriting the first column", "torch.roll moved the last token round to the front — "
                 "write start_id over column 0 after rolling", lambda right, tgt, start_id: tgt.roll(1, dims=1)),
    KnownMistake("start_id not prepended", "column 0 holds 0, not start_id",
                 lambda right, tgt, start_id: right(tgt, 0)),
    KnownMistake("start_id written over the first token", "it writes start_id over the first token instead of moving "
                 "every token one place to the right", lambda right, tgt, start_id: _first_replaced(tgt, start_id)),
    KnownMistake("shifted along the batch axis", "it shifts the rows of the batch, not the tokens of each row — "
                 "concatenate along dim=1",
                 lambda right, tgt, start_id: torch.cat([_column(tgt, start_id, 1).expand(1, tgt.shape[1]), tgt[:-1]],
                                                        dim=0)),
])


#: Of the device; it gives no value to compare (``found``: what came back, or what was raised).
TOKENS_DEVICE = KnownMistake("device not kept", "{found} — build the new column on the device of tgt: "
                             "`tgt.new_full(...)`, or pass device=tgt.device")


# ================================================================ teacher_forcing_pair
# Cases: (tgt (B, T), start_id, end_id, pad_id). right(tgt, start_id, end_id, pad_id) is (tgt_in, tgt_out).

def _behind(t: Tensor, start_id: int) -> Tensor:
    """``t`` one place to the right behind a column of start_id, its last column dropped."""
    return torch.cat([_column(t, start_id), t], dim=1)[:, : t.shape[1]]


def _one_more(tgt: Tensor, fill: int) -> Tensor:
    """``tgt`` with an extra last column of ``fill``."""
    return torch.cat([tgt, _column(tgt, fill)], dim=1)


def _end_at(tgt: Tensor, where: Tensor, end_id: int, fill: int) -> Tensor:
    """``tgt`` with an extra column of ``fill``, then ``end_id`` written in each row at ``where`` (B,)."""
    return _one_more(tgt, fill).scatter(1, where.clamp(0, tgt.shape[1])[:, None], end_id)


def _real(tgt: Tensor, pad_id: int) -> Tensor:
    """The number of real tokens of each row: those that are not pad_id."""
    return (tgt != pad_id).sum(dim=1)


TF_IN = Mistakes([
    KnownMistake("end token in tgt_in", "tgt_in holds `<end>`: it is tgt_out shifted right, but the decoder never "
                 "reads `<end>` — after the last real token tgt_in holds pad_id",
                 lambda right, tgt, s, e, p: _behind(right(tgt, s, e, p)[1], s)),
    KnownMistake("tgt_in of length T instead of T + 1", "tgt_in has only T columns: it is `<start>` followed by all T "
                 "tokens, (B, T + 1) like tgt_out", lambda right, tgt, s, e, p: _behind(tgt, s)),
    KnownMistake("start token missing from tgt_in", "tgt_in does not begin with `<start>` — the decoder's first input "
                 "is `<start>`", lambda right, tgt, s, e, p: _one_more(tgt, p)),
])

_AFTER_PADDING = ("`<end>` sits in the last column, after the padding — it belongs right after each row's last real "
                  "token, and the padding follows it")
_NO_END = ("tgt_out has no `<end>` — the decoder must learn to stop, so `<end>` goes right after each row's last real "
           "token")
_START_IN_OUT = ("tgt_out begins with `<start>` — tgt_out holds what the decoder must predict: the first word, ..., "
                 "the last word, then `<end>`; `<start>` is only ever an input")


def _pad_zero(tgt: Tensor, s: int, e: int, p: int) -> str:
    return (f"it treats 0 as the padding: here pad_id is {p}, so use `tgt != pad_id` to find the real tokens and fill "
            f"new columns with pad_id")


TF_OUT = Mistakes([
    KnownMistake("end token placed after the padding", _AFTER_PADDING, lambda right, tgt, s, e, p: _one_more(tgt, e)),
    KnownMistake("end token missing from tgt_out", _NO_END,
                 lambda right, tgt, s, e, p: _end_at(tgt, _real(tgt, p), p, p)),
    KnownMistake("end token missing from tgt_out", _NO_END,
                 lambda right, tgt, s, e, p: _end_at(tgt, _real(tgt, p), 0, 0)),
    KnownMistake("end token written over the last real token", "`<end>` replaced the last real token — it goes one "
                 "place *after* it", lambda right, tgt, s, e, p: _end_at(tgt, _real(tgt, p) - 1, e, p)),
    KnownMistake("start token in tgt_out", _START_IN_OUT,
                 lambda right, tgt, s, e, p: torch.cat([_column(tgt, s), tgt], dim=1)),
    KnownMistake("start token in tgt_out", _START_IN_OUT,
                 lambda right, tgt, s, e, p: _behind(right(tgt, s, e, p)[1], s)),
    KnownMistake("pad_id assumed to be 0", _pad_zero, lambda right, tgt, s, e, p: _end_at(tgt, _real(tgt, 0), e, p)),
    KnownMistake("pad_id assumed to be 0", _pad_zero, lambda right, tgt, s, e, p: _end_at(tgt, _real(tgt, 0), e, 0)),
    KnownMistake("pad_id assumed to be 0", _pad_zero, lambda right, tgt, s, e, p: _end_at(tgt, _real(tgt, p), e, 0)),
    KnownMistake("row without padding mishandled", "a row without padding got `<end>` at column 0: `argmax` of "
                 "`tgt == pad_id` is 0 when the row has no pad at all — such a row's `<end>` goes in the extra last "
                 "column", lambda right, tgt, s, e, p: _end_at(tgt, (tgt == p).int().argmax(dim=1), e, p)),
])

#: Of the pair's order, of the tokens of tgt_out and of an empty sentence; these give no value to compare.
TF_SWAPPED = KnownMistake("tgt_in and tgt_out swapped", "{call} returned (tgt_out, tgt_in) — return them in the order "
                          "(tgt_in, tgt_out)")
START_IN_TGT_OUT = KnownMistake("start token in tgt_out", "tgt_out contains `<start>` — it holds what the decoder must "
                                "predict, and `<start>` is only ever an input")
END_MISSING = KnownMistake("end token missing from tgt_out", "a row of tgt_out has no `<end>` — `<end>` goes right "
                           "after each row's last real token")
ALL_PAD_ROW = KnownMistake("all-pad row not handled", "{raised} — an all-pad row is an empty sentence: its tgt_in is "
                           "`<start>` then pad_id, its tgt_out `<end>` then pad_id")


# ================================================================ sequence_cross_entropy
# Cases: (logits (B, T, V), targets (B, T), pad_id). right(logits, targets, pad_id) is the mean loss over the positions
# whose target is not pad_id.

def _per_position(logits: Tensor, targets: Tensor, p: int) -> Tensor:
    """(B, T): each position's -log softmax(logits)[target], 0 where the target is pad_id."""
    real = targets != p
    return F.cross_entropy(logits.transpose(1, 2), targets.masked_fill(~real, 0), reduction="none") * real


def _flat(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    return logits.flatten(0, 1), targets.flatten()


_OVER_PADDING = ("the pad positions are scored as if `<pad>` were a word to predict — leave them out "
                 "(`ignore_index=pad_id`, or average only where targets != pad_id)")
_LAST_ONLY = ("only the last position is scored — with teacher forcing the decoder predicts every target position in "
              "one pass, and every non-pad position counts; looking at the last position only is what generation "
              "does, not training")

CE = Mistakes([
    KnownMistake("loss averaged over the padding too", _OVER_PADDING,
                 lambda right, logits, targets, p: F.cross_entropy(*_flat(logits, targets))),
    KnownMistake("loss averaged over the padding too", "the pads contribute 0 but still count in the denominator — "
                 "divide by the number of non-pad targets, not by B·T",
                 lambda right, logits, targets, p: _per_position(logits, targets, p).sum() / targets.numel()),
    KnownMistake("loss taken at the last position only", _LAST_ONLY,
                 lambda right, logits, targets, p: F.cross_entropy(logits[:, -1], targets[:, -1], ignore_index=p)),
    KnownMistake("loss taken at the last position only", _LAST_ONLY,
                 lambda right, logits, targets, p: F.cross_entropy(logits[:, -1], targets[:, -1])),
    KnownMistake("summed instead of averaged", "it is the sum of the per-position losses — the loss is their mean over "
                 "the non-pad positions", lambda right, logits, targets, p: _per_position(logits, targets, p).sum()),
    KnownMistake("mean of per-sentence means", "each sentence is averaged first and the sentences then averaged, so a "
                 "short sentence's tokens weigh more — average over all non-pad positions of the batch at once",
                 lambda right, logits, targets, p: (_per_position(logits, targets, p).sum(1)
                                                    / (targets != p).sum(1)).mean()),
    KnownMistake("summed over positions, averaged over sentences", "it sums over the positions of each sentence and "
                 "averages over the sentences — average over all non-pad positions",
                 lambda right, logits, targets, p: _per_position(logits, targets, p).sum(1).mean()),
    KnownMistake("pad_id assumed to be 0", lambda logits, targets, p: f"it ignores the target 0 instead of pad_id={p}",
                 lambda right, logits, targets, p: F.cross_entropy(*_flat(logits, targets), ignore_index=0)),
    KnownMistake("log_softmax missing", "the logits went into nll_loss without log_softmax; nll_loss expects "
                 "log-probabilities",
                 lambda right, logits, targets, p: F.nll_loss(*_flat(logits, targets), ignore_index=p)),
    KnownMistake("probabilities instead of log-probabilities", "it averages minus the *probabilities* of the targets "
                 "— cross-entropy uses their log-probabilities, `log_softmax`",
                 lambda right, logits, targets, p: -torch.softmax(logits, -1).gather(
                     -1, targets.masked_fill(targets == p, 0)[..., None])[..., 0][targets != p].mean()),
    KnownMistake("no reduction to a scalar", "it returns one loss per position — the loss is their mean, a single "
                 "0-dim tensor", lambda right, logits, targets, p: _per_position(logits, targets, p)),
])


def _classes_on_axis_1(*case: object, raised: str = "") -> str:
    said = f"{raised} — " if raised else "F.cross_entropy took axis 1, the positions, for the classes — "
    return said + ("F.cross_entropy wants the classes on axis 1: pass `logits.reshape(-1, V)` with "
                   "`targets.reshape(-1)`, or `logits.transpose(1, 2)` with `targets`")


#: Cases as CE's; the mistake crashes unless T == V, and then its value is wrong. Raised with ``raised=`` (what the
#: call raised) when it crashes.
CLASSES_AXIS = Mistakes([
    KnownMistake("classes on the wrong axis", _classes_on_axis_1,
                 lambda right, logits, targets, p: F.cross_entropy(logits, targets, ignore_index=p)),
])
#: Of the device of the loss; it gives no value to compare (``found``: what came back, or what was raised).
LOSS_DEVICE = KnownMistake("device not kept", "{found} — build every tensor the loss uses (a mask, class weights, a "
                           "count) from logits or targets, or on their device: device=logits.device")
VAGUE_VALUE_ERROR = KnownMistake("ValueError without the shapes", "the ValueError should name both shapes, so that "
                                 "the learner sees which tensor is wrong; its message was {message!r}")


# ================================================================ concept checks
# Cases: (lengths,) for loss_positions, (t_tgt, t_src) for cross_weights_shape. The mistakes need no right answer.

LOSS_POSITIONS = Mistakes([
    KnownMistake("loss on the last token only", "with teacher forcing the decoder predicts every position at once and "
                 "the loss scores every one, each real token and each <end>; only generation looks at the last "
                 "position alone", lambda right, lengths: len(lengths)),
    KnownMistake("the end token not scored", "each sentence's <end> is a prediction too, the one that teaches the "
                 "model to stop", lambda right, lengths: sum(lengths)),
    KnownMistake("padding scored", "padded positions are not scored: the loss ignores pad_id",
                 lambda right, lengths: len(lengths) * (max(lengths) + 1)),
])

CROSS_WEIGHTS_SHAPE = Mistakes([
    KnownMistake("queries taken from the encoder", "the queries come from the decoder, so the rows belong to the "
                 "target's tokens and the columns to the source's", lambda right, t_tgt, t_src: (t_src, t_tgt)),
    KnownMistake("keys taken from the decoder", "the keys come from the encoder's output, one column per source token",
                 lambda right, t_tgt, t_src: (t_tgt, t_tgt)),
])
