"""The known mistakes of Chapter 1 (``01_self_attention``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/self_attention.py``) name every
mistake from here. Each group says the form of its cases and what ``right`` computes; a visible check passes its
own computation of it, and the judge passes the reference. A mistake that is the right answer given other inputs
(another axis, unscaled queries, the keys as values) is ``right`` given those inputs; the rest is written with
PyTorch's own functions from what the case holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from attention_course.testing import KnownMistake, Mistakes, OneOf

NEG_INF = float("-inf")


def part(suspects: Mapping[str, Callable[[], object]], index: int) -> dict[str, Callable[[], object]]:
    """The suspects of one item of a result in parts, e.g. the weights (``index`` 1) of ``(out, weights)``."""
    def pick(value: object) -> object:
        if isinstance(value, OneOf):
            return OneOf(None if v is None else v[index] for v in value)
        return value[index]
    return {text: (lambda give=give: pick(give())) for text, give in suspects.items()}


# ================================================================ softmax
# Cases: (x, dim). right(x, dim) is the softmax of x along dim.

def _exp_over_sum(x: Tensor, dim: int, keepdim: bool = True) -> Tensor:
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=keepdim)


def _other_axis(x: Tensor, dim: int, n: int) -> int | None:
    """The ``n``-th axis of ``x`` that is not ``dim``, or None."""
    others = [d for d in range(x.dim()) if d != dim % x.dim()]
    return others[n] if n < len(others) else None


def _wrong_axis(n: int) -> KnownMistake:
    return KnownMistake(
        "softmax over the wrong axis",
        lambda x, dim: f"it sums to 1 along dim {_other_axis(x, dim, n)}, not along dim={dim} — take the max and the "
                       f"sum along the `dim` argument",
        lambda right, x, dim: right(x, _other_axis(x, dim, n)),
        when=lambda x, dim: _other_axis(x, dim, n) is not None)


_KEEPDIM = "the sum lost its axis, so it broadcasts against the wrong one — use `.sum(dim=dim, keepdim=True)`"

_WHOLE_OR_HALF = [
    KnownMistake("normalised over everything", "it divides by the sum over the whole tensor; sum only along `dim`",
                 lambda right, x, dim: torch.exp(x) / torch.exp(x).sum()),
    KnownMistake("missing the division", "it is not normalised: divide exp(x) by its sum along `dim`",
                 lambda right, x, dim: torch.exp(x)),
    KnownMistake("missing the exponential", "it forgot the exponential: softmax is exp(x) / sum(exp(x)), not "
                 "x / sum(x)", lambda right, x, dim: x / x.sum(dim=dim, keepdim=True)),
]

SOFTMAX = Mistakes([
    *(_wrong_axis(n) for n in range(2)),  # the cases have at most three axes: two others
    KnownMistake("forgot keepdim", _KEEPDIM, lambda right, x, dim: _exp_over_sum(x, dim, keepdim=False)),
    KnownMistake("forgot keepdim", _KEEPDIM, lambda right, x, dim: _exp_over_sum(
        x - x.amax(dim=dim, keepdim=True), dim, keepdim=False)),
    *_WHOLE_OR_HALF,
])

SOFTMAX_STABLE = Mistakes([
    KnownMistake("overflowing softmax", "exp overflows for large inputs (exp(89) is already inf in float32), giving "
                 "inf/inf = NaN — subtract the maximum along `dim` before exponentiating; the result is mathematically "
                 "unchanged", lambda right, x, dim: _exp_over_sum(x, dim)),
    KnownMistake("global instead of per-slice max", "it subtracts the maximum of the whole tensor, so slices far below "
                 "it underflow to 0/0 = NaN — subtract each slice's own maximum, `x.amax(dim=dim, keepdim=True)`",
                 lambda right, x, dim: _exp_over_sum(x - x.max(), dim)),
    KnownMistake("global instead of per-slice max", "it subtracts the maximum of the whole tensor, so slices far below "
                 "it underflow to all zeros — subtract each slice's own maximum, `x.amax(dim=dim, keepdim=True)`",
                 lambda right, x, dim: _exp_over_sum(x - x.max(), dim).nan_to_num(0.0)),
    _wrong_axis(0),  # its cases have two axes, on which a sum that lost its axis cannot even broadcast
    *_WHOLE_OR_HALF,
])

SOFTMAX_MASKED = Mistakes([
    KnownMistake("NaN on fully masked rows", "a slice that is entirely -inf (a query whose keys are all masked) gives "
                 "NaN: its maximum is -inf and -inf - (-inf) is NaN — use 0 where the maximum is not finite, and "
                 "divide by 1 where the sum is 0, so the slice comes out all zeros",
                 lambda right, x, dim: _exp_over_sum(x - x.amax(dim=dim, keepdim=True), dim)),
    KnownMistake("large negative number instead of -inf", "a slice that is entirely -inf gives equal weights instead "
                 "of zeros — if you replace -inf by a large negative number, zero those slices afterwards",
                 lambda right, x, dim: right(x.masked_fill(torch.isinf(x), torch.finfo(x.dtype).min), dim)),
    *(_wrong_axis(n) for n in range(2)),  # a sum that lost its axis cannot broadcast on its cases
    *_WHOLE_OR_HALF,
])


# ================================================================ attention_scores
# Cases: (q, k). right(q, k) is q kᵀ / √d_k.

def _dots(q: Tensor, k: Tensor) -> Tensor:
    return q @ k.transpose(-2, -1)


SCORES = Mistakes([
    KnownMistake("no scaling", lambda q, k: f"it is not scaled — divide q kᵀ by √d_k = {math.sqrt(q.shape[-1]):g}",
                 lambda right, q, k: _dots(q, k)),
    KnownMistake("dividing by d_k", lambda q, k: f"it divides by d_k = {q.shape[-1]} instead of √d_k = "
                                                 f"{math.sqrt(q.shape[-1]):g}",
                 lambda right, q, k: _dots(q, k) / q.shape[-1]),
    KnownMistake("multiplied by √d_k", "it multiplies by √d_k instead of dividing by it",
                 lambda right, q, k: _dots(q, k) * math.sqrt(q.shape[-1])),
    KnownMistake("scaled by the number of keys",
                 lambda q, k: f"it divides by √T_k = √{k.shape[-2]}, the number of keys, instead of √d_k — d_k is "
                              f"the last axis of q and k",
                 lambda right, q, k: _dots(q, k) / math.sqrt(k.shape[-2])),
    KnownMistake("k.T on batched keys", "`k.T` reverses every axis of a batched tensor — transpose only the last two "
                 "axes with `k.transpose(-2, -1)` or `k.mT`",
                 lambda right, q, k: q @ k.permute(*reversed(range(k.dim()))) / math.sqrt(q.shape[-1]),
                 when=lambda q, k: k.dim() > 2),
    KnownMistake("transposed scores", "the scores are transposed: row i must belong to query i — compute q @ kᵀ, not "
                 "k @ qᵀ", lambda right, q, k: right(k, q)),
])


# ================================================================ scaled_dot_product_attention
# Cases: (q, k, v) or (q, k, v, mask). right(q, k, v, mask=None) is (out, weights).

def _attend(weights: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    return torch.matmul(weights, v), weights


def _blocked(q: Tensor, k: Tensor, mask: Tensor | None, fill: float) -> Tensor:
    """The scaled scores with the blocked ones set to ``fill``."""
    scores = _dots(q, k) / math.sqrt(q.shape[-1])
    return scores if mask is None else scores.masked_fill(~mask, fill)


def _over_queries(right: Callable[..., tuple], q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple:
    """The weights normalised over the queries (dim=-2): the right weights of keys attending to queries, turned."""
    weights = right(k, q, q, None if mask is None else mask.transpose(-2, -1))[1].transpose(-2, -1)
    return _attend(weights, v)


def _masked(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> bool:
    return mask is not None


SDPA = Mistakes([
    KnownMistake("softmax over the wrong axis", "the softmax runs over the query axis (dim=-2); each query's weights "
                 "must sum to 1 over the keys, dim=-1",
                 lambda right, q, k, v, mask=None: _over_queries(right, q, k, v, mask)),
    KnownMistake("no scaling", lambda q, k, v, mask=None: f"the scores are not scaled — divide q kᵀ by √d_k = "
                                                          f"{math.sqrt(q.shape[-1]):g}",
                 lambda right, q, k, v, mask=None: right(q * math.sqrt(q.shape[-1]), k, v, mask)),
    KnownMistake("dividing by d_k", lambda q, k, v, mask=None: f"the scores are divided by d_k = {q.shape[-1]} "
                                                               f"instead of √d_k",
                 lambda right, q, k, v, mask=None: right(q / math.sqrt(q.shape[-1]), k, v, mask)),
    # these two get the weights right: they can only name a wrong output
    KnownMistake("keys used as values", "the output is weights @ k — the keys were used as values; multiply the "
                 "weights by v", lambda right, q, k, v, mask=None: right(q, k, k, mask)),
    KnownMistake("queries used as values", "the output is weights @ q — the queries were used as values; multiply the "
                 "weights by v", lambda right, q, k, v, mask=None: right(q, k, q, mask)),
    KnownMistake("mask applied after the softmax", "the mask is applied after the softmax: masked keys get 0 but the "
                 "rows no longer sum to 1 — fill masked scores with -inf before the softmax",
                 lambda right, q, k, v, mask=None: _attend(right(q, k, v)[1] * mask, v), when=_masked),
    KnownMistake("mask filled with 0 instead of -inf", "masked scores are filled with 0, and exp(0) = 1 still gives "
                 "those keys weight — fill them with -inf",
                 lambda right, q, k, v, mask=None: _attend(torch.softmax(_blocked(q, k, mask, 0.0), dim=-1), v),
                 when=_masked),
    KnownMistake("inverted mask", "the mask is inverted: True means 'may attend' (as in "
                 "F.scaled_dot_product_attention), so block where the mask is False",
                 lambda right, q, k, v, mask=None: right(q, k, v, ~mask), when=_masked),
    KnownMistake("mask added as numbers", "the boolean mask was added to the scores (True counts as 1) instead of "
                 "blocking keys — use `scores.masked_fill(~mask, float('-inf'))`",
                 lambda right, q, k, v, mask=None: _attend(torch.softmax(_blocked(q, k, None, 0.0) + mask, dim=-1), v),
                 when=_masked),
    KnownMistake("mask ignored", "the mask is ignored: masked keys still get weight",
                 lambda right, q, k, v, mask=None: right(q, k, v), when=_masked),
])

#: Of the form of (out, weights) and of the fully masked queries; these give no value to compare.
SWAPPED = KnownMistake("out and weights swapped", "it returned the weights first — return out, then weights")
DEAD_ROWS_NAN = KnownMistake("NaN on fully masked rows", "a query whose keys are all masked gets NaN, since the "
                             "softmax of a row of -inf is 0/0 — such a row must give all-zero weights and an all-zero "
                             "output")
DEAD_ROWS_EQUAL = KnownMistake("large negative number instead of -inf", "a query whose keys are all masked gets equal "
                               "weights 1/T_k — that is what filling with a large negative number such as -1e9 does; "
                               "fill with -inf and make such rows all zeros")


# ================================================================ SelfAttention
# Cases: (q, k, v, x, mask), q, k, v the projections of x by the case's weights. right(q, k, v, mask) is
# scaled_dot_product_attention's (out, weights), or its output alone where the visible check compares only that.

FORWARD = Mistakes([
    KnownMistake("values not projected", "the values are the input x itself — project them with w_v",
                 lambda right, q, k, v, x, mask: right(q, k, x, mask)),
    KnownMistake("keys computed with w_q", "the keys are computed with w_q — keys come from w_k",
                 lambda right, q, k, v, x, mask: right(q, q, v, mask)),
    KnownMistake("mask ignored", "the mask is not passed on to the attention — forward(x, mask) must use it",
                 lambda right, q, k, v, x, mask: right(q, k, v, None)),
    KnownMistake("scaled by √d_model instead of √d_k", "the scores are scaled by √d_model instead of √d_k, the width "
                 "of q and k",
                 lambda right, q, k, v, x, mask: right(q * math.sqrt(q.shape[-1] / x.shape[-1]), k, v, mask)),
])

#: Of forward's signature, and of the projections' layers; these give no value to compare (``fields`` in braces).
MASK_WITHOUT_DEFAULT = KnownMistake("mask without a default", "forward(x) alone raises TypeError: the mask is "
                                    "optional — `def forward(self, x, mask=None)`, and None means no masking")
BIAS_IGNORED = KnownMistake("bias argument ignored", "{call}.{name} should {have} bias — pass bias=bias to nn.Linear")
W_V_OF_D_K = KnownMistake("w_v of width d_k instead of d_v", "{call}.w_v maps {d_model} -> {d_k} features, expected "
                          "{d_model} -> {d_v} — w_v maps d_model -> d_v; d_v falls back to d_k only when it is not "
                          "given")


# ================================================================ concept checks
# Cases: (query, key) for score_position, (n,) for score_count.

SCORE_POSITION = Mistakes([
    KnownMistake("K·Qᵀ for Q·Kᵀ", "row i of Q Kᵀ holds query i's dot products, so the row is the query's and the "
                 "column the key's; K Qᵀ is the transpose, not the same matrix",
                 lambda right, query, key: right(key, query)),
    KnownMistake("positions counted from 1", "positions count from 0, as Python's indices do",
                 lambda right, query, key: right(query + 1, key + 1)),
])

SCORE_COUNT = Mistakes([
    KnownMistake("cost taken as linear in the length", "every query is compared with every key, so doubling the length "
                 "quadruples the work and the memory: a context is not free, let alone infinite",
                 lambda right, n: n),
    KnownMistake("only the causal half counted", "without a mask every query meets every key; the causal mask of "
                 "Chapter 2 blocks the upper half, but even then all n × n scores are computed",
                 lambda right, n: n * (n + 1) // 2),
    KnownMistake("own score left out", "a token's query meets its own key too", lambda right, n: n * (n - 1)),
])
