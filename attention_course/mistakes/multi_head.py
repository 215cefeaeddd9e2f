"""The known mistakes of Chapter 4 (``04_multi_head``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/multi_head.py``) name every mistake
from here. Each group says the form of its cases and what ``right`` computes; a visible check passes its own
computation of it, and the judge passes the reference. The heads' mistakes need no right answer: they are the tensor
cut or joined another way. The module's mistakes are multi-head attention put together with one thing done wrong,
around ``right``, the scaled dot-product attention of each head.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

# the projections' layers are Chapter 1's, and so is the mistake of their bias
from attention_course.mistakes.self_attention import BIAS_IGNORED, part  # noqa: F401
from attention_course.testing import KnownMistake, Mistakes, OneOf


def picked(suspects: Mapping[str, Callable[[], object]], piece: Callable[[object], object]) -> dict:
    """The suspects of a piece of a result: ``piece(value)`` of what each gives (one head, the blocked entries...)."""
    def take(value: object) -> object:
        if isinstance(value, OneOf):
            return OneOf(None if v is None else piece(v) for v in value)
        return piece(value)
    return {text: (lambda give=give: take(give())) for text, give in suspects.items()}


# ================================================================ split_heads
# Cases: (x (B, T, d_model), n_heads). The mistakes need no right answer.

def _cut(x: Tensor, *sizes: int) -> Tensor:
    """``x`` read as ``(B, *sizes)``, in its memory order."""
    return x.reshape(x.shape[0], *sizes)


SPLIT = Mistakes([
    KnownMistake("view without transpose", "the heads are a plain view of x as (B, n_heads, T, d_head), which cuts the "
                 "memory of the sequence into n_heads pieces instead of cutting each token's features — view as (B, T, "
                 "n_heads, d_head), then transpose(1, 2)",
                 lambda right, x, n: _cut(x, n, x.shape[1], x.shape[2] // n)),
    KnownMistake("missing transpose", "it stops at (B, T, n_heads, d_head): move the head axis in front of T with "
                 "transpose(1, 2)", lambda right, x, n: x.unflatten(-1, (n, x.shape[2] // n))),
    KnownMistake("features interleaved across heads", "head h got the features h, h + n_heads, h + 2·n_heads, ... — it "
                 "must get the block h·d_head .. (h+1)·d_head - 1: view as (B, T, n_heads, d_head), not (B, T, d_head, "
                 "n_heads)", lambda right, x, n: x.unflatten(-1, (x.shape[2] // n, n)).permute(0, 3, 1, 2)),
    KnownMistake("heads split on the wrong axis", "it cuts the positions T into n_heads groups — every head sees every "
                 "position, with its own d_head = d_model / n_heads features: split the last axis",
                 lambda right, x, n: _cut(x, n, x.shape[1] // n, x.shape[2]), when=lambda x, n: x.shape[1] % n == 0),
])


# ================================================================ merge_heads
# Cases: (heads (B, n_heads, T, d_head),). The mistakes need no right answer.

_ONE_HEAD_WIDE = ("each head's output is T × d_head and only their concatenation is T × d_model")

MERGE = Mistakes([
    KnownMistake("merged without transposing back", "it reshapes (B, n_heads, T, d_head) straight to (B, T, "
                 "n_heads·d_head), which mixes positions and heads — transpose(1, 2) back to (B, T, n_heads, d_head) "
                 "first", lambda right, h: _cut(h, h.shape[2], h.shape[1] * h.shape[3])),
    KnownMistake("features interleaved across heads", "the features come out interleaved (feature j of every head, "
                 "then feature j + 1, ...) — head h must fill the block h·d_head .. (h+1)·d_head - 1: go through "
                 "(B, T, n_heads, d_head), not (B, T, d_head, n_heads)",
                 lambda right, h: h.permute(0, 2, 3, 1).flatten(2)),
    KnownMistake("heads concatenated along the positions", "the heads are stacked along the positions, giving "
                 "n_heads·T rows — concatenate them along the features, the last axis",
                 lambda right, h: h.flatten(1, 2)),
    KnownMistake("heads not flattened", "it stops at (B, T, n_heads, d_head): flatten the last two axes into "
                 "n_heads·d_head features", lambda right, h: h.permute(0, 2, 1, 3)),
    KnownMistake("heads summed instead of concatenated", "the heads are added up, leaving d_head features per position "
                 "— " + _ONE_HEAD_WIDE, lambda right, h: h.sum(dim=1)),
    KnownMistake("heads averaged instead of concatenated", "the heads are averaged, leaving d_head features per "
                 "position — " + _ONE_HEAD_WIDE, lambda right, h: h.mean(dim=1)),
])

#: A crash of `.view` on the transposed heads; it gives no value to compare (``raised``: what the call raised).
VIEW_NOT_CONTIGUOUS = KnownMistake("view of a non-contiguous tensor", "{raised} — `.view` needs a contiguous tensor, "
                                   "and a transposed one is not: call `.contiguous()` before `.view(...)`, or use "
                                   "`.reshape(...)`")


# ================================================================ MultiHeadAttention
# Cases: (p, query, key, value, n_heads, mask): p maps each of w_q, w_k, w_v, w_o to its (weight, bias or None).
# right(q, k, v, mask=None) is scaled dot-product attention's (out, weights), run on the heads at once.

def _project(t: Tensor, p: dict, name: str, bias: bool) -> Tensor:
    weight, b = p[name]
    moved = torch.matmul(t, weight.to(t.dtype).mT)
    return moved if b is None or not bias else moved + b.to(t.dtype)


def _apart(t: Tensor, n: int) -> Tensor:
    """(B, T, d_model) -> (B, n, T, d_model / n): block h of the features is head h."""
    return t.unflatten(-1, (n, t.shape[-1] // n)).permute(0, 2, 1, 3)


def _together(h: Tensor) -> Tensor:
    """(B, n, T, d) -> (B, T, n·d): the inverse of :func:`_apart`."""
    return h.permute(0, 2, 1, 3).flatten(2)


def _on_heads(mask: Tensor) -> Tensor:
    return mask[..., None, :, :]  # one mask for every head


def _wrong(right: Callable, p: dict, query: Tensor, key: Tensor, value: Tensor, n: int, mask: Tensor | None, *,
           place: Callable = _on_heads, apart: Callable = _apart, together: Callable = _together,
           q_scale: float = 1.0, values: str = "w_v", from_key: bool = False, bias: bool = True, w_o: bool = True,
           average: bool = False) -> tuple[Tensor, Tensor]:
    """The heads attended with one thing done otherwise than it should be (the keyword that says which)."""
    q = apart(_project(query, p, "w_q", bias), n) * q_scale
    k = apart(_project(key, p, "w_k", bias), n)
    v = apart(_project(key if from_key else value, p, values, bias), n)
    heads, weights = right(q, k, v, None if mask is None else place(mask))
    joined = together(heads)
    return (_project(joined, p, "w_o", bias) if w_o else joined), (weights.mean(dim=1) if average else weights)


def _one_head(right: Callable, p: dict, query: Tensor, key: Tensor, value: Tensor, n: int,
              mask: Tensor | None) -> tuple[Tensor, Tensor]:
    out, weights = _wrong(right, p, query, key, value, 1, mask)
    return out, weights[:, 0]


def _scrambled_apart(t: Tensor, n: int) -> Tensor:
    return _cut(t, n, t.shape[1], t.shape[2] // n)


def _scrambled_together(h: Tensor) -> Tensor:
    return _cut(h, h.shape[2], h.shape[1] * h.shape[3])


def _masked(p: dict, query: Tensor, key: Tensor, value: Tensor, n: int, mask: Tensor | None) -> bool:
    return mask is not None


def _scaled_by_d_model(p: dict, query: Tensor, key: Tensor, value: Tensor, n: int, mask: Tensor | None) -> str:
    d_model = query.shape[-1]
    return (f"the scores are divided by √d_model = √{d_model} — each head compares vectors of d_head = "
            f"{d_model // n} features, so divide by √d_head")


def _last_axis(p: dict, query: Tensor, key: Tensor, value: Tensor, n: int, mask: Tensor | None) -> str:
    last = "unsqueeze(-1), the same as unsqueeze(2) for a 2-D mask" if mask.dim() == 2 else "unsqueeze(-1)"
    return (f"the mask was given its new axis at the end ({last}), so its axes no longer line up with the scores (B, "
            f"n_heads, T_q, T_k) — add the head axis in front of T_q: mask.unsqueeze(-3) turns (B, T_q, T_k) into (B, "
            f"1, T_q, T_k) and leaves a (T_q, T_k) mask as it is")


MULTI_HEAD = Mistakes([
    KnownMistake("no output projection w_o", "the concatenated heads are returned without the output projection — out "
                 "= w_o(merge_heads(heads))", lambda right, *case: _wrong(right, *case, w_o=False)),
    KnownMistake("scaled by √d_model instead of √d_head", _scaled_by_d_model,
                 lambda right, *case: _wrong(right, *case, q_scale=math.sqrt(1 / case[4]))),
    KnownMistake("w_k used for the values", "the values are made with w_k — v = w_v(value)",
                 lambda right, *case: _wrong(right, *case, values="w_k")),
    KnownMistake("values taken from key instead of value", "the values are projected from `key` — v = w_v(value)",
                 lambda right, *case: _wrong(right, *case, from_key=True)),
    KnownMistake("projection biases left out", "the projections' biases are left out — call the nn.Linear layers "
                 "themselves, or pass their bias", lambda right, *case: _wrong(right, *case, bias=False)),
    KnownMistake("weights averaged over heads", "the weights are averaged over the heads — return one attention matrix "
                 "per head, (B, n_heads, T_q, T_k)", lambda right, *case: _wrong(right, *case, average=True)),
    KnownMistake("view without transpose", "q, k and v are viewed as (B, n_heads, T, d_head) without a transpose, "
                 "which scrambles positions and heads — split with split_heads",
                 lambda right, *case: _wrong(right, *case, apart=_scrambled_apart)),
    KnownMistake("merged without transposing back", "the heads are merged by a reshape without transposing back, which "
                 "mixes positions and heads — merge with merge_heads",
                 lambda right, *case: _wrong(right, *case, together=_scrambled_together)),
    KnownMistake("heads not split", "it attends with a single head of width d_model — split q, k and v into n_heads "
                 "heads of d_head features", lambda right, *case: _one_head(right, *case)),
    KnownMistake("mask ignored", "the mask is not passed on to the attention: masked keys still get weight",
                 lambda right, *case: _wrong(right, *case, place=lambda m: None), when=_masked),
    KnownMistake("inverted mask", "the mask is inverted: True means 'may attend'",
                 lambda right, *case: _wrong(right, *case, place=lambda m: ~_on_heads(m)), when=_masked),
    KnownMistake("mask broadcast onto the wrong axis", _last_axis,
                 lambda right, *case: _wrong(right, *case, place=lambda m: m[..., None]), when=_masked),
    KnownMistake("mask broadcast onto the wrong axis", "the mask was given its new axis at dim 2 (unsqueeze(2)), so "
                 "the queries' axis lines up with the heads — add the head axis in front of T_q: mask.unsqueeze(-3)",
                 lambda right, *case: _wrong(right, *case, place=lambda m: m.unsqueeze(2)), when=_masked),
    KnownMistake("mask broadcast onto the wrong axis", "a (T_q, T_k) mask was given its new axis at dim 1, between T_q "
                 "and T_k, so its rows line up with the heads — a 2-D mask broadcasts as it is; mask.unsqueeze(-3) "
                 "adds the head axis in front of T_q whatever the mask's rank",
                 lambda right, *case: _wrong(right, *case, place=lambda m: m.unsqueeze(1)),
                 when=lambda *case: case[5] is not None and case[5].dim() == 2),
])

#: Of the module's layers, a crash on a mask, NaN and which heads a change reaches; these give no value to compare.
NO_W_O = KnownMistake("no output projection w_o", "{call} has no `w_o` — the concatenated heads are projected back "
                      "with w_o = nn.Linear(d_model, d_model)")
MASK_CRASHED = KnownMistake("mask broadcast onto the wrong axis", "{raised} — a (T_q, T_k) mask must work as it is: "
                            "add the head axis in front of T_q with mask.unsqueeze(-3), which suits (T_q, T_k), (B, 1, "
                            "T_k) and (B, T_q, T_k) masks alike")
NAN_ROWS = KnownMistake("NaN on fully masked rows", "a query whose keys are all masked must get all-zero weights "
                        "(softmax of a row of -inf is 0/0) — the given `attention` does that")
NAN_GRADIENT = KnownMistake("NaN gradient on fully masked rows", "a query whose keys are all masked must give zeros in "
                            "the backward pass too — fill the blocked scores with masked_fill before the softmax and "
                            "make the fully masked rows safe, or use the given `attention`")
W_Q_NOT_USED = KnownMistake("w_q not used", "changing the rows {rows} of w_q (head {head}'s queries) changed no head's "
                            "weights — are the queries made with w_q?")
HEADS_MIXED = KnownMistake("heads mixed", "head h must use only the features h·d_head .. (h+1)·d_head - 1 of q, k and "
                           "v: view as (B, T, n_heads, d_head), then transpose(1, 2)")

#: Of dropout, told from the module's outputs with and without it (``call``: the module and its mode).
EVAL_DROPOUT = KnownMistake("dropout applied in eval mode", "{call} in eval mode {found} — dropout acts only in "
                            "training mode: use an nn.Dropout module, or F.dropout(..., training=self.training)")
OUTPUT_WITHOUT_DROPOUT = KnownMistake("dropout ignored", "the output is the output without dropout — apply "
                                      "nn.Dropout(dropout) to the attention weights in forward")
NOTHING_DROPPED = KnownMistake("dropout ignored", "no attention weight was dropped — apply nn.Dropout(dropout) to the "
                               "weights in forward")
DROPOUT_ON_OUTPUT = KnownMistake("dropout on the output instead of the weights", "the weights are all kept but "
                                 "{zeroed:.0%} of the output is zero — dropout belongs on the attention weights, "
                                 "before they multiply v")
WEIGHTS_BEFORE_DROPOUT = KnownMistake("weights returned before dropout", "the returned weights show no dropout, but "
                                      "the output is not the output without dropout — return the weights after "
                                      "dropout, the ones that multiplied v, as nn.MultiheadAttention does")
DROPOUT_PROBABILITY = KnownMistake("dropout probability wrong", "{dropped:.0%} of the weights were dropped, expected "
                                   "about {p:.0%} — pass `dropout` as the probability of dropping")
OUTPUT_NOT_FROM_DROPPED = KnownMistake("output not computed from the dropped weights", "multiply v by the weights "
                                       "after dropout")

#: Of the device, on the meta device (``raised``: what the call raised; ``found``: the devices it returned).
DEVICE_RAISED = KnownMistake("device not kept", "{raised} — build every tensor on the device of the inputs")
DEVICE_CHANGED = KnownMistake("device not kept", "{call} returned (out, weights) on {found} — keep the device of the "
                              "inputs")


# ================================================================ concept checks
# Cases: (n_tokens, d_model, n_heads) for head_query_shape, (d_model, n_heads) for attention_parameters. The mistakes
# need no right answer.

HEAD_QUERY_SHAPE = Mistakes([
    KnownMistake("one head taken to be d_model wide",
                 lambda n, d_model, n_heads: f"each head works in d_model / n_heads dimensions; only the concatenation "
                                             f"of the {n_heads} heads is {d_model} wide",
                 lambda right, n, d_model, n_heads: (n, d_model)),
    KnownMistake("all the heads taken for one", "that is the shape of all the heads together, after split_heads; one "
                 "head's queries have no head axis",
                 lambda right, n, d_model, n_heads: (n_heads, n, d_model // n_heads)),
])

ATTENTION_PARAMETERS = Mistakes([
    KnownMistake("parameters multiplied by the heads", "the heads share out the d_model-wide projections between them: "
                 "more heads, the same four projections, the same parameters",
                 lambda right, d, n_heads: n_heads * 4 * (d * d + d)),
    KnownMistake("biases left out", "each of the four projections has a bias of d_model numbers too",
                 lambda right, d, n_heads: 4 * d * d),
    KnownMistake("output projection left out", "there are four projections: w_q, w_k, w_v and the output projection "
                 "w_o", lambda right, d, n_heads: 3 * (d * d + d)),
    KnownMistake("projections one head wide", "each projection maps d_model to d_model, for all the heads at once, not "
                 "to one head's width", lambda right, d, n_heads: 4 * (d * (d // n_heads) + d // n_heads)),
])
