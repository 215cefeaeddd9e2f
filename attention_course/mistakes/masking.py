"""The known mistakes of Chapter 2 (``02_causal_masking``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/masking.py``) name every mistake
from here. Each group says the form of its cases and what ``right`` computes; a visible check passes its own
computation of it, and the judge passes the reference. A mask that is the right one turned around, negated or given
other sizes is ``right`` given those; the rest is written with PyTorch's own functions from what the case holds.
"""

from __future__ import annotations

import operator
from functools import reduce

import torch
from torch import Tensor

# the projections are Chapter 1's, and so are their mistakes; `part` picks (out, weights) apart for the visible checks
from attention_course.mistakes.self_attention import BIAS_IGNORED, W_V_OF_D_K, part  # noqa: F401
from attention_course.testing import KnownMistake, Mistakes

NEG_INF = float("-inf")


def _tril(t_q: int, t_k: int, diagonal: int = 0) -> Tensor:
    return torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal)  # the lower triangle from `diagonal` down


def _sizes(t_q: int, t_k: int | None = None) -> tuple[int, int, int]:
    t_k = t_q if t_k is None else t_k
    return t_q, t_k, t_k - t_q


# ================================================================ causal_mask
# Cases: (t_q,) or (t_q, t_k). right(t_q, t_k=None) is the boolean (t_q, t_k) mask.

CAUSAL = Mistakes([
    KnownMistake("upper instead of lower triangle", "it is the upper triangle: query i may attend itself and the keys "
                 "*after* it — keep the lower triangle, `j <= i`",
                 lambda right, *case: torch.triu(torch.ones(*_sizes(*case)[:2], dtype=torch.bool),
                                                 diagonal=_sizes(*case)[2])),
    KnownMistake("inverted: True marks the future", "True marks the blocked future here, as in nn.Transformer's masks; "
                 "in this course (and in F.scaled_dot_product_attention) True means 'may attend'",
                 lambda right, *case: ~right(*case)),
    KnownMistake("diagonal excluded", "the diagonal is blocked: a token may attend itself, so key j = i must be True",
                 lambda right, *case: _tril(*_sizes(*case)[:2], _sizes(*case)[2] - 1)),
    KnownMistake("additive 0/-inf mask instead of boolean", "it is a 0/-inf float mask; causal_mask returns the "
                 "boolean mask (True = may attend) and `additive_mask` converts it",
                 lambda right, *case: torch.zeros(_sizes(*case)[:2]).masked_fill(~right(*case), NEG_INF)),
    KnownMistake("queries aligned with the first key",
                 lambda *case: (lambda t_q, t_k, offset: f"with t_q={t_q} queries and t_k={t_k} keys the queries are "
                                f"the *last* t_q positions, so query i may attend keys j <= i + (t_k - t_q) = i + "
                                f"{offset}; this mask lines query 0 up with key 0, as if there were no cache")(
                     *_sizes(*case)),
                 lambda right, *case: _tril(*_sizes(*case)[:2])),
    KnownMistake("a t_k × t_k mask",
                 lambda *case: (lambda t_q, t_k, offset: f"it has shape ({t_k}, {t_k}): the mask must have one row per "
                                f"query, (t_q, t_k) = ({t_q}, {t_k}) — keep the last t_q rows of the square mask, or "
                                f"use j <= i + (t_k - t_q)")(*_sizes(*case)),
                 lambda right, *case: _tril(_sizes(*case)[1], _sizes(*case)[1])),
    KnownMistake("t_k ignored",
                 lambda *case: (lambda t_q, t_k, offset: f"it has shape ({t_q}, {t_q}): t_k is ignored; the mask must "
                                f"be (t_q, t_k) = ({t_q}, {t_k})")(*_sizes(*case)),
                 lambda right, *case: _tril(case[0], case[0])),
    KnownMistake("offset with the wrong sign",
                 lambda *case: (lambda t_q, t_k, offset: f"the offset has the wrong sign: query i may attend keys j <= "
                                f"i + (t_k - t_q) = i + {offset}, not i - {offset}")(*_sizes(*case)),
                 lambda right, *case: _tril(*_sizes(*case)[:2], -_sizes(*case)[2])),
    KnownMistake("no masking", "nothing is masked: every query may attend every key",
                 lambda right, *case: torch.ones(*_sizes(*case)[:2], dtype=torch.bool)),
])

#: Of a mask's dtype and device; these give no value to compare (``fields`` in braces).
_NOT_BOOL = ("it returned a {dtype} tensor — masks are boolean, True = may attend, as F.scaled_dot_product_attention "
             "expects; a comparison (`j <= i`, `tokens != pad_id`), `&` of booleans or dtype=torch.bool gives one")
FLOAT_MASK = KnownMistake("float mask instead of bool", _NOT_BOOL)
INTEGER_MASK = KnownMistake("integer mask instead of bool", _NOT_BOOL)
CAUSAL_DEVICE = KnownMistake("device ignored", "{found} — create the mask on `device` (pass device=device to "
                             "torch.ones / torch.arange)")


# ================================================================ padding_mask
# Cases: (tokens (B, T), pad_id). right(tokens, pad_id) is the boolean (B, 1, T) mask.

PADDING = Mistakes([
    KnownMistake("inverted: True at the pads", "it is True at the padding; padding_mask is True where a token may be "
                 "attended, i.e. where it is *not* pad_id", lambda right, tokens, pad_id: ~right(tokens, pad_id)),
    KnownMistake("no query axis",
                 lambda tokens, pad_id: f"it has shape (B, T) = {tuple(tokens.shape)}; add the query axis so it is "
                                        f"(B, 1, T) = {(tokens.shape[0], 1, tokens.shape[1])} and broadcasts over the "
                                        f"queries of the scores (B, T_q, T_k)",
                 lambda right, tokens, pad_id: right(tokens, pad_id)[:, 0]),
    KnownMistake("padding masks queries instead of keys",
                 lambda tokens, pad_id: f"it has shape (B, T, 1) = {(*tokens.shape, 1)}: that masks *queries* (rows "
                                        f"of the scores), not keys; the key axis is the last one, so unsqueeze(1) to "
                                        f"get (B, 1, T)",
                 lambda right, tokens, pad_id: right(tokens, pad_id).transpose(-2, -1)),
    KnownMistake("pad_id ignored", lambda tokens, pad_id: f"it compares with 0, not with pad_id = {pad_id}",
                 lambda right, tokens, pad_id: right(tokens, 0)),
    KnownMistake("expanded over the queries",
                 lambda tokens, pad_id: f"it is expanded to (B, T, T) = {(*tokens.shape, tokens.shape[1])}; return "
                                        f"(B, 1, T) and let broadcasting do the rest",
                 lambda right, tokens, pad_id: right(tokens, pad_id).expand(*tokens.shape, tokens.shape[1])),
    KnownMistake("additive 0/-inf mask instead of boolean", "it is a 0/-inf float mask; padding_mask returns the "
                 "boolean mask, True = may attend",
                 lambda right, tokens, pad_id: torch.zeros(tokens.shape[0], 1, tokens.shape[1]).masked_fill(
                     ~right(tokens, pad_id), NEG_INF)),
])

#: Of the mask's shape, by the shape it has; these give no value to compare.
_SHAPE = ("it has shape {shape}, expected (B, 1, T) = {expected}: the axis of size 1 stands for the queries, so the "
          "mask blocks the same keys for every query")
PADDING_NO_QUERY_AXIS = KnownMistake("no query axis", _SHAPE)
PADDING_ON_QUERIES = KnownMistake("padding masks queries instead of keys", _SHAPE)
PADDING_EXPANDED = KnownMistake("expanded over the queries", _SHAPE)
PADDING_DEVICE = KnownMistake("device ignored", "{found} — compare the tokens themselves; don't build a new tensor on "
                              "the CPU")


# ================================================================ combine_masks
# Cases: (*masks), boolean masks that broadcast together. right(*masks) is their AND.

_LAST = "it keeps only the last mask; combine each mask with the result so far, `out = out & m`"

COMBINE = Mistakes([
    KnownMistake("OR instead of AND", "it is the OR of the masks: a key is allowed when *any* mask allows it; it must "
                 "be allowed by every mask — use `&`", lambda right, *masks: reduce(operator.or_, masks)),
    KnownMistake("only the last mask kept", _LAST, lambda right, *masks: masks[-1].expand(
        torch.broadcast_shapes(*(m.shape for m in masks)))),
    KnownMistake("only the last mask kept", _LAST, lambda right, *masks: masks[-1]),
    KnownMistake("only the first mask kept", "it keeps only the first mask; combine each mask with the result so far, "
                 "`out = out & m`", lambda right, *masks: masks[0]),
    KnownMistake("inverted result", "it is inverted: the AND of the masks is True where a key may be attended",
                 lambda right, *masks: ~right(*masks)),
])

#: Cases: (*masks) with None among them. right(*masks) is the AND of the others.
NONE_BLOCKS = Mistakes([
    KnownMistake("None not ignored", "None was treated as a mask that blocks everything",
                 lambda right, *masks: torch.zeros_like(right(*masks))),
])
NOT_BROADCAST = KnownMistake("masks not broadcast", "{raised} — masks of different shapes must broadcast together: "
                             "`a & b` broadcasts, torch.stack and torch.cat do not")
NONE_RAISED = KnownMistake("None not ignored", "{raised} — skip the None entries before combining")
ALL_NONE_RAISED = KnownMistake("all None should give None", "{raised} — when every mask is None there is nothing to "
                               "combine: return None")
ALL_NONE_RETURNED = KnownMistake("all None should give None", "it returned {returned} — with no mask at all the result "
                                 "is None, meaning 'no masking', which attention(q, k, v, mask=None) understands")


# ================================================================ additive_mask
# Cases: (mask,) or (mask, dtype). The mistakes need no right answer: they are the mask filled otherwise.

def _zeros(mask: Tensor, dtype: torch.dtype) -> Tensor:
    return torch.zeros(mask.shape, dtype=dtype)


ADDITIVE = Mistakes([
    KnownMistake("large negative number instead of -inf", "blocked entries hold -1e9, not -inf: a large negative "
                 "number is not the same mask — a row with every key blocked gets equal weights instead of zeros",
                 lambda right, mask, dtype=torch.float32: _zeros(mask, dtype).masked_fill(~mask, -1e9)),
    KnownMistake("finfo.min instead of -inf", "blocked entries hold torch.finfo(dtype).min, not -inf",
                 lambda right, mask, dtype=torch.float32: _zeros(mask, dtype).masked_fill(~mask,
                                                                                           torch.finfo(dtype).min)),
    KnownMistake("bool mask cast to 1/0", "it is the mask as numbers, 1 where True and 0 where False; adding it to the "
                 "scores blocks nothing — the additive form is 0 where True and -inf where False",
                 lambda right, mask, dtype=torch.float32: mask.to(dtype)),
    KnownMistake("blocked keys get 1, not -inf", "it is 0 where True and 1 where False; blocked entries must be -inf, "
                 "so exp(-inf) = 0", lambda right, mask, dtype=torch.float32: (~mask).to(dtype)),
    KnownMistake("inverted: -inf where True", "it is inverted: -inf must go where the mask is False (blocked), 0 where "
                 "it is True", lambda right, mask, dtype=torch.float32: _zeros(mask, dtype).masked_fill(mask, NEG_INF)),
    KnownMistake("mask multiplied by -inf", "it holds NaN where the mask is True: 0 × -inf is NaN, so multiplying the "
                 "mask by -inf does not work — fill with masked_fill or torch.where",
                 lambda right, mask, dtype=torch.float32: (~mask).to(dtype) * NEG_INF),
    KnownMistake("positive infinity instead of -inf", "blocked entries hold +inf; they must be -inf so that exp "
                 "gives 0",
                 lambda right, mask, dtype=torch.float32: _zeros(mask, dtype).masked_fill(~mask, float("inf"))),
])

WRONG_DEFAULT_DTYPE = KnownMistake("wrong default dtype", "it returned {dtype}; its default dtype is torch.float32")
DTYPE_IGNORED = KnownMistake("dtype argument ignored", "it returned {dtype} — create the result in the requested "
                             "dtype, `torch.zeros(mask.shape, dtype=dtype, ...)`")
ADDITIVE_DEVICE = KnownMistake("device ignored", "{found} — create the result on mask.device")


# ================================================================ CausalSelfAttention
# Cases: (q, k, v, causal, pad): the projections of x by the case's weights, the (T, T) causal mask and the (B, 1, T)
# padding mask or None. right(q, k, v, mask) is attention's (out, weights), or its part the visible check compares.

def _and(mask: Tensor, pad: Tensor | None) -> Tensor:
    return mask if pad is None else mask & pad


def _padded(q: Tensor, k: Tensor, v: Tensor, causal: Tensor, pad: Tensor | None) -> bool:
    return pad is not None


MODULE = Mistakes([
    KnownMistake("no causal mask", "the causal mask is not applied: position i also attends the positions after it — "
                 "combine causal_mask(T) with pad_mask", lambda right, q, k, v, causal, pad: right(q, k, v, pad)),
    KnownMistake("upper instead of lower triangle", "the causal mask is the upper triangle: position i attends the "
                 "positions *after* it", lambda right, q, k, v, causal, pad: right(q, k, v, _and(causal.T, pad))),
    KnownMistake("inverted mask", "the mask is inverted: True means 'may attend', so pass the mask itself, not its "
                 "negation", lambda right, q, k, v, causal, pad: right(q, k, v, ~_and(causal, pad))),
    KnownMistake("diagonal excluded", "the diagonal is masked: a position must attend itself",
                 lambda right, q, k, v, causal, pad: right(q, k, v, _and(causal.tril(-1), pad))),
    KnownMistake("pad_mask ignored", "pad_mask is not used: real tokens still attend the padding — combine it with the "
                 "causal mask", lambda right, q, k, v, causal, pad: right(q, k, v, causal), when=_padded),
    KnownMistake("padding masks queries instead of keys", "pad_mask was turned into (B, T, 1), so it blocks padded "
                 "*queries* (rows) instead of padded keys (columns); keep it (B, 1, T)",
                 lambda right, q, k, v, causal, pad: right(q, k, v, causal & pad.transpose(-2, -1)), when=_padded),
    KnownMistake("OR instead of AND", "the masks are combined with OR: a key must be allowed by the causal mask *and* "
                 "the padding mask", lambda right, q, k, v, causal, pad: right(q, k, v, causal | pad), when=_padded),
    KnownMistake("pad_mask inverted", "pad_mask is negated: padding_mask is True at real tokens, so use it as it is",
                 lambda right, q, k, v, causal, pad: right(q, k, v, causal & ~pad), when=_padded),
])

MODULE_NAN = KnownMistake("NaN on fully masked rows", "a pad at the start of a row may attend no key, and the softmax "
                          "of a row of -inf is 0/0 — such a row must give zeros; the given `attention` does that")
MODULE_NAN_GRADIENT = KnownMistake("NaN gradient on fully masked rows", "a pad at the start of a row attends no key; "
                                   "the softmax of its row of -inf is NaN, and adding -inf (rather than masked_fill) "
                                   "lets that NaN flow back into q and k even when nan_to_num hides it in the forward "
                                   "pass — fill the blocked scores with masked_fill, or use the given `attention`")
FUTURE_LEAKS = KnownMistake("future leaks", "build the mask with causal_mask(T) and pass it to attention")
PADDING_LEAKS = KnownMistake("padding leaks into real tokens", "combine pad_mask (B, 1, T) with the causal mask")


# ================================================================ concept checks
# Cases: (n_tokens, d_model) for masked_attention_shapes, (tokens, pad_id, query) for visible_keys.

MASKED_SHAPES = Mistakes([
    KnownMistake("weights taken to be T × d_model",
                 lambda n, d: f"the weights compare every token with every token, so they are {n} × {n}; only the "
                              f"output, weights @ V, is {n} × {d}", lambda right, n, d: ((n, d), (n, d))),
    KnownMistake("output taken to be T × T", "the output is the weights times V, one d_model-wide vector per token",
                 lambda right, n, d: ((n, n), (n, n))),
    KnownMistake("weights and output swapped", "the weights come first, then the output",
                 lambda right, n, d: right(n, d)[::-1]),
    KnownMistake("masked entries taken as removed",
                 lambda n, d: f"the mask sets the blocked weights to zero, it does not remove them: the weights stay "
                              f"{n} × {n}", lambda right, n, d: ((n * (n + 1) // 2,), (n, d))),
])


def _real(tokens: list[int], pad_id: int) -> list[int]:
    return [key for key, token in enumerate(tokens) if token != pad_id]


VISIBLE_KEYS = Mistakes([
    KnownMistake("look-ahead mask left out", "a query may not attend a later key: the look-ahead mask keeps keys "
                 "0..query", lambda right, tokens, pad_id, query: tuple(_real(tokens, pad_id))),
    KnownMistake("diagonal masked", "a token may attend itself: the causal mask keeps the diagonal",
                 lambda right, tokens, pad_id, query: tuple(key for key in _real(tokens, pad_id) if key < query)),
    KnownMistake("padding mask left out", "a padded key is hidden from every query by the padding mask",
                 lambda right, tokens, pad_id, query: tuple(range(query + 1))),
    KnownMistake("padding applied to the queries", "the padding mask hides padded keys, not queries: a padded query "
                 "still attends the real tokens before it, and the loss ignores its output",
                 lambda right, tokens, pad_id, query: () if tokens[query] == pad_id else tuple(
                     key for key in _real(tokens, pad_id) if key <= query)),
])
