"""The known mistakes of Chapter 9 (``09_flash_attention``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/flash_attention.py``) name every
mistake from here. Each group says the form of its cases and what ``right`` computes; a visible check passes its
own computation of it, written out by hand, and the judge passes the reference. Where a mistake is the right answer
computed on other inputs (fewer keys, another mask, unscaled queries, one block at a time), it is ``right`` given
those inputs; what no ``right`` can give is written with the definitions of Chapter 1 (scores, softmax, the
log-sum-exp), never with the block loop the exercises ask for.

Masks are boolean, ``True`` = may attend; ``causal`` is Chapter 2's mask lined up at the last key: query ``i`` may
attend key ``j`` when ``j <= i + (T_k - T_q)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from attention_course.testing import KnownMistake, Mistakes, OneOf

NAN = float("nan")


# ================================================================ shared: scores and blocks, by definition

def allowed(t_q: int, t_k: int, mask: Tensor | None, causal: bool) -> Tensor | None:
    """Which key each query may attend, ``(..., T_q, T_k)``: ``mask`` and, with ``causal``, ``j <= i + T_k - T_q``;
    None when every key is allowed."""
    keep = None if mask is None else mask.expand(*mask.shape[:-1], t_k)
    if causal:
        lower = torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)
        keep = lower if keep is None else keep & lower
    return keep


def scores(q: Tensor, k: Tensor, keep: Tensor | None, scale: bool = True) -> Tensor:
    """``q kᵀ / √d_k`` (without the division when not ``scale``), ``-inf`` where a key may not be attended."""
    s = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    return s if keep is None else s.masked_fill(~keep, -math.inf)


def _finite(m: Tensor) -> Tensor:
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def _block_of(t_k: int, block: int) -> Tensor:
    """(T_k,): the block each key falls in."""
    return torch.arange(t_k) // block


def _block_max(s: Tensor, block: int) -> Tensor:
    """(..., T_q, n_blocks): each block's largest score, -inf for a block whose keys are all masked."""
    t_k = s.shape[-1]
    n = -(-t_k // block)
    padded = torch.nn.functional.pad(s, (0, n * block - t_k), value=-math.inf)
    return padded.reshape(*s.shape[:-1], n, block).amax(dim=-1)


def _measured_from(s: Tensor, v: Tensor, reference: Tensor, block: int) -> tuple[Tensor, Tensor]:
    """Each key's exponential measured from its block's entry of ``reference`` (..., T_q, n_blocks):
    ``(Σ_j e^{s_j - r_b(j)} v_j, Σ_j e^{s_j - r_b(j)})``."""
    per_key = _finite(reference)[..., _block_of(s.shape[-1], block)]  # (..., T_q, T_k)
    p = torch.exp(s - per_key)
    return p @ v, p.sum(dim=-1, keepdim=True)


def _not_rescaled(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool, *, total: bool,
                  out: bool) -> Tensor:
    """A running state whose sum (``total``) and/or output (``out``) were never rescaled when the running maximum
    rose: each block's terms stay measured from the running maximum of its own time."""
    s = scores(q, k, allowed(q.shape[-2], k.shape[-2], mask, causal))
    running = torch.cummax(_block_max(s, block), dim=-1).values  # (..., T_q, n_blocks): the maximum so far
    final = running[..., -1:].expand_as(running)
    o, _ = _measured_from(s, v, running if out else final, block)
    _, ell = _measured_from(s, v, running if total else final, block)
    return o / torch.where(ell > 0, ell, torch.ones_like(ell))


def _first_block_empty(t_q: int, t_k: int, mask: Tensor | None, causal: bool, block: int) -> Tensor | None:
    """(..., T_q, 1): the queries whose first block of keys is all masked (None: none can be)."""
    keep = allowed(t_q, t_k, mask, causal)
    return None if keep is None else ~keep[..., :block].any(dim=-1, keepdim=True)


def _with_nan_rows(out: Tensor, rows: Tensor | None) -> Tensor:
    return out if rows is None else out.masked_fill(rows, NAN)


def _mask_and(mask: Tensor | None, other: Tensor) -> Tensor:
    return other if mask is None else mask & other


# ================================================================ merge_states
# Cases: (a, b), each a state (m (..., T_q, 1), l (..., T_q, 1), o (..., T_q, d_v)). right(a, b) is the merged state.

def _both_empty(a: tuple, b: tuple) -> Tensor:
    return torch.isneginf(a[0]) & torch.isneginf(b[0])


def _first_rescaled(a: tuple, b: tuple) -> tuple:
    m = torch.maximum(a[0], b[0])
    shrink = torch.exp(a[0] - _finite(m))
    return m, a[1] * shrink + b[1], a[2] * shrink + b[2]


def _inverted(a: tuple, b: tuple) -> tuple:
    m = torch.maximum(a[0], b[0])
    grow_a, grow_b = torch.exp(m - a[0]), torch.exp(m - b[0])
    return m, a[1] * grow_a + b[1] * grow_b, a[2] * grow_a + b[2] * grow_b


def _from_minimum(a: tuple, b: tuple) -> tuple:
    m = torch.minimum(a[0], b[0])
    grow_a, grow_b = torch.exp(a[0] - m), torch.exp(b[0] - m)
    return m, a[1] * grow_a + b[1] * grow_b, a[2] * grow_a + b[2] * grow_b


MERGE = Mistakes([  # the NaN of two empty states first: other mistakes can give NaN there too
    KnownMistake("NaN when both states are empty", "where both states are empty (m = -inf on both sides) it gives "
                 "NaN: exp(-inf - (-inf)) is NaN — shift by 0 where the new maximum is -inf",
                 lambda right, a, b: (lambda r, e: (r[0], r[1].masked_fill(e, NAN), r[2].masked_fill(e, NAN)))(
                     right(a, b), _both_empty(a, b)),
                 when=lambda a, b: bool(_both_empty(a, b).any())),
    KnownMistake("states added without rescaling", "the sums are added as they are: each is measured against its own "
                 "maximum, so before adding, multiply each side's ℓ and o by exp(its m - the new m)",
                 lambda right, a, b: (torch.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2])),
    KnownMistake("only one side rescaled", "only the first state is rescaled: the second is measured against its own "
                 "maximum too, which need not be the new one — multiply each side by exp(its m - max(m_a, m_b))",
                 lambda right, a, b: _first_rescaled(a, b)),
    KnownMistake("rescaling factor inverted", "the rescaling factor is upside down: a side whose maximum is below the "
                 "new one shrinks, by exp(m_side - m_new) <= 1", lambda right, a, b: _inverted(a, b)),
    KnownMistake("output normalised in the state", "o is divided by ℓ: a state keeps o unnormalised, the weighted "
                 "sum of values, so that it can be merged again; only the final output is o / ℓ",
                 lambda right, a, b: (lambda r: (r[0], r[1], r[2] / r[1]))(right(a, b))),
    KnownMistake("minimum instead of maximum", "the new reference is the smaller maximum: exp(m_side - m_min) is then "
                 ">= 1 and overflows for large scores — take m = max(m_a, m_b), so that every exponent is <= 0",
                 lambda right, a, b: _from_minimum(a, b)),
])

MERGE_NAN_GRADIENT = KnownMistake("NaN gradient on empty states", "the gradient holds NaN where a query's keys are "
                                  "all masked: torch.where or nan_to_num applied after exp(-inf - (-inf)) hides the "
                                  "NaN going forward, not coming back — shift by 0 before the exponential")


def joined(suspects: Mapping[str, Callable[[], object]]) -> dict[str, Callable[[], object]]:
    """Suspects of whole states, each state's (m, l, o) joined into one tensor (..., T_q, 2 + d_v), as a visible check
    compares them."""
    def join(produce: Callable[[], object]) -> object:
        given = produce()
        if isinstance(given, OneOf):
            return OneOf(torch.cat(list(state), dim=-1) for state in given if state is not None)
        return torch.cat(list(given), dim=-1)

    return {text: (lambda produce=produce: join(produce)) for text, produce in suspects.items()}


def _named_by_the_judge(*_: object) -> object:
    raise LookupError("this mistake needs the right answer: the hidden check names it")


def merge_suspects(a: tuple, b: tuple) -> dict[str, Callable[[], object]]:
    """For a visible check: the merges of ``a`` and ``b`` that the declared mistakes give without a right answer to
    start from, each state joined into one tensor. (The others need the right merge, which only the judge has; the
    visible checks name them by what they do.)"""
    return joined(MERGE.suspects(_named_by_the_judge, a, b))


# ================================================================ online_softmax_attention
# Cases: (q, k, v, mask, block_size, causal). right(q, k, v, mask, block_size, causal) is the output (..., T_q, d_v).

def _blocks_averaged(right: Callable[..., Tensor], q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int,
                     causal: bool) -> Tensor:
    keep = allowed(q.shape[-2], k.shape[-2], mask, causal)
    parts = [right(q, k[..., s:s + block, :], v[..., s:s + block, :], None if keep is None else keep[..., s:s + block],
                   block, False) for s in range(0, k.shape[-2], block)]
    return sum(parts) / len(parts)


def _never_raised(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool) -> Tensor:
    """Every exponential measured from the first block's maximum: exact in exact arithmetic, but a later block's
    larger scores overflow (computed in the inputs' dtype, as the learner's code would)."""
    s = scores(q, k, allowed(q.shape[-2], k.shape[-2], mask, causal))
    first = _finite(_block_max(s, block)[..., :1])
    p = torch.exp(s - first)
    return (p @ v) / p.sum(dim=-1, keepdim=True)


def _causal_in_tile(t_q: int, t_k: int, block: int) -> Tensor:
    """The causal rule applied to each key's index within its block of keys instead of its position."""
    within = (torch.arange(t_k) % block)[None, :]
    return within <= torch.arange(t_q)[:, None] + (t_k - t_q)


ONLINE = Mistakes([  # NaN rows before the running maximum: a maximum never raised gives NaN on them too
    KnownMistake("running sums not rescaled", "when a block raises the running maximum, the old sum and output are "
                 "not rescaled by exp(m_old - m_new): they stay measured against the old maximum — multiply both by it "
                 "before adding the block's terms",
                 lambda right, q, k, v, mask, block, causal: _not_rescaled(q, k, v, mask, block, causal, total=True,
                                                                           out=True)),
    KnownMistake("running sum not rescaled", "the running output is rescaled by exp(m_old - m_new) when the maximum "
                 "rises, but the running sum is not: rescale both",
                 lambda right, q, k, v, mask, block, causal: _not_rescaled(q, k, v, mask, block, causal, total=True,
                                                                           out=False)),
    KnownMistake("running output not rescaled", "the running sum is rescaled by exp(m_old - m_new) when the maximum "
                 "rises, but the running output is not: rescale both",
                 lambda right, q, k, v, mask, block, causal: _not_rescaled(q, k, v, mask, block, causal, total=False,
                                                                           out=True)),
    KnownMistake("no scaling", lambda q, k, v, mask, block, causal: f"the scores are not scaled — divide q kᵀ by "
                                                                     f"√d_k = {math.sqrt(q.shape[-1]):g}",
                 lambda right, q, k, v, mask, block, causal: right(q * math.sqrt(q.shape[-1]), k, v, mask, block,
                                                                   causal)),
    KnownMistake("blocks normalised separately", "each block is normalised on its own and the blocks' outputs "
                 "averaged: the blocks must share one softmax — carry m, the sum and the output from block to block "
                 "and divide once, at the end", _blocks_averaged),
    KnownMistake("NaN on fully masked rows", "a query whose keys are all masked — in one block, or in all of them — "
                 "gets NaN: its running maximum is -inf and exp(-inf - (-inf)) is NaN; shift by 0 where the maximum "
                 "is not finite, and divide by 1 where the sum is 0",
                 lambda right, q, k, v, mask, block, causal: _with_nan_rows(
                     right(q, k, v, mask, block, causal), _first_block_empty(q.shape[-2], k.shape[-2], mask, causal,
                                                                              block)),
                 when=lambda q, k, v, mask, block, causal: mask is not None or (causal and q.shape[-2] > k.shape[-2])),
    KnownMistake("running maximum never raised", "the running maximum is set by the first block and never raised, so "
                 "a later block with larger scores overflows exp — take m_new = max(m, the block's maximum) at every "
                 "block", lambda right, q, k, v, mask, block, causal: _never_raised(q, k, v, mask, block, causal)),
    KnownMistake("mask ignored", "the mask is ignored: masked keys still get weight",
                 lambda right, q, k, v, mask, block, causal: right(q, k, v, None, block, causal),
                 when=lambda q, k, v, mask, block, causal: mask is not None),
    KnownMistake("inverted mask", "the mask is inverted: True means 'may attend', so block where the mask is False",
                 lambda right, q, k, v, mask, block, causal: right(q, k, v, ~mask, block, causal),
                 when=lambda q, k, v, mask, block, causal: mask is not None),
    KnownMistake("causal mask ignored", "causal=True was given and every key was attended: query i may attend key j "
                 "only when j <= i + (T_k - T_q)",
                 lambda right, q, k, v, mask, block, causal: right(q, k, v, mask, block, False),
                 when=lambda q, k, v, mask, block, causal: causal),
    KnownMistake("causal mask without the offset", "the causal mask is j <= i, lined up at the first key: with T_k - "
                 "T_q keys before the queries (a cache, a chunk) query i may attend key j when j <= i + (T_k - T_q), "
                 "so that the last query sees the last key",
                 lambda right, q, k, v, mask, block, causal: right(
                     q, k, v, _mask_and(mask, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()), block,
                     False),
                 when=lambda q, k, v, mask, block, causal: causal and q.shape[-2] != k.shape[-2]),
    KnownMistake("causal mask built from the block's own indices", "the causal mask of each block compares the key's "
                 "index within the block with the query's: compare positions, the block's start plus the index",
                 lambda right, q, k, v, mask, block, causal: right(
                     q, k, v, _mask_and(mask, _causal_in_tile(q.shape[-2], k.shape[-2], block)), block, False),
                 when=lambda q, k, v, mask, block, causal: causal and k.shape[-2] > block),
    KnownMistake("causal mask reversed", "the causal mask keeps the keys after each query and drops those before: "
                 "query i may attend key j when j <= i + (T_k - T_q)",
                 lambda right, q, k, v, mask, block, causal: right(
                     q, k, v, _mask_and(mask, ~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(
                         k.shape[-2] - q.shape[-2] - 1)), block, False),
                 when=lambda q, k, v, mask, block, causal: causal),
])

ALL_SCORES = KnownMistake("all scores at once", "it built a tensor of {widest} scores per query: the (T_q, T_k) = "
                          "{shape} matrix, all at once. The point is that no more than one block of scores, (T_q, "
                          "block_size), ever exists: loop over the keys block by block")
BLOCK_DEFAULT = KnownMistake("block_size default changed", "it made blocks of {widest} scores per query with "
                             "block_size left out: block_size is 128 by default, as the signature says")
LEADING_DIMS = KnownMistake("leading dimensions not broadcast", "q, k and v may have any leading dimensions, which "
                            "broadcast: `q @ k.mT` and `weights @ v` handle them, torch.bmm and three-axis einsums do "
                            "not")
NAN_GRADIENT = KnownMistake("NaN gradient on masked rows", "the gradient holds NaN: torch.where or nan_to_num applied "
                            "after exp(-inf - (-inf)) hides the NaN going forward, not coming back — shift by 0 before "
                            "the exponential, divide by 1 where the sum is 0")


# ================================================================ online_softmax_attention(..., return_lse=True)
# Cases: as for ONLINE. right(q, k, v, mask, block_size, causal) is the pair (out, lse), lse (..., T_q); each mistake
# gives the pair with its own lse.

def _largest(q: Tensor, k: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
    return scores(q, k, allowed(q.shape[-2], k.shape[-2], mask, causal)).amax(dim=-1)


def _with_lse(right: Callable[..., tuple], case: tuple, lse: Callable[[Tensor], Tensor]) -> tuple:
    """The right output, with ``lse(right lse)`` in place of the log-sum-exp."""
    out, right_lse = right(*case)
    return out, lse(right_lse)


def _before_last_block(right: Callable[..., tuple], q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                       block: int, causal: bool) -> tuple:
    cut = _last_start(k, block)
    keep = allowed(q.shape[-2], k.shape[-2], mask, causal)
    early = right(q, k[..., :cut, :], v[..., :cut, :], None if keep is None else keep[..., :cut], block, False)[1]
    return right(q, k, v, mask, block, causal)[0], early


LSE = Mistakes([
    KnownMistake("log-sum-exp of all but the last block", "it is the log-sum-exp of the keys before the last block: "
                 "take lse = m + log ℓ after merging the last block, from the final state", _before_last_block,
                 when=lambda q, k, v, mask, block, causal: k.shape[-2] > block),
    KnownMistake("running maximum returned as the log-sum-exp", "it returned m, the largest score: the log-sum-exp "
                 "is m + log ℓ",
                 lambda right, *case: _with_lse(right, case, lambda lse: _largest(case[0], case[1], case[3],
                                                                                  case[5]))),
    KnownMistake("log ℓ without the maximum", "it returned log ℓ: ℓ is measured from the maximum m, so the "
                 "log-sum-exp of the scores is m + log ℓ",
                 lambda right, *case: _with_lse(right, case, lambda lse: lse - _largest(case[0], case[1], case[3],
                                                                                        case[5]))),
    KnownMistake("log-sum-exp of unscaled scores", "it is the log-sum-exp of q kᵀ: the scores are q kᵀ / √d_k, the "
                 "same as the output's",
                 lambda right, q, k, v, mask, block, causal: (right(q, k, v, mask, block, causal)[0], right(
                     q * math.sqrt(q.shape[-1]), k, v, mask, block, causal)[1])),
    KnownMistake("log-sum-exp with a trailing axis", "the log-sum-exp has the shape (..., T_q, 1) of the state's m and "
                 "ℓ: return it as (..., T_q), one number per query, `.squeeze(-1)`",
                 lambda right, *case: _with_lse(right, case, lambda lse: lse.unsqueeze(-1))),
])


def _last_start(k: Tensor, block: int) -> int:
    return (k.shape[-2] - 1) // block * block


HALF_PRECISION = KnownMistake("float32 accumulation lost", "on {dtype} inputs it is off by up to {error:.3g} (float32 "
                              "accumulation is off by at most {allowed:.3g}): compute the scores, the running state "
                              "and the sums in float32, as FlashAttention does, and return the output in the inputs' "
                              "dtype")
LSE_DTYPE = KnownMistake("log-sum-exp not float32", "on {dtype} inputs the log-sum-exp is {found}: keep it in float32, "
                         "which the backward pass needs to rebuild the weights")


# ================================================================ attention_backward
# Cases: (q, k, v, out, lse, d_out, mask, block_size, causal), out and lse those of the forward pass with the same mask.
# right(q, k, v, out, lse, d_out, mask, block_size, causal) is (dq, dk, dv).

def _weights(q: Tensor, k: Tensor, lse: Tensor, keep: Tensor | None) -> Tensor:
    """P = e^{S - lse}, (..., T_q, T_k), 0 where masked and for a query that sees no key."""
    return torch.exp(scores(q, k, keep) - _finite(lse).unsqueeze(-1))


def _plus_ds(right: Callable[..., tuple], q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor,
             mask: Tensor | None, block: int, causal: bool, extra: Callable[[Tensor], Tensor]) -> tuple:
    """The right gradients with ``extra(P)`` added to dS: dQ and dK change by it (times K or Q, over √d_k)."""
    dq, dk, dv = right(q, k, v, out, lse, d_out, mask, block, causal)
    p = _weights(q, k, lse, allowed(q.shape[-2], k.shape[-2], mask, causal))
    more = extra(p)  # (..., T_q, T_k)
    scale = math.sqrt(q.shape[-1])
    return (dq + (more @ k / scale).sum_to_size(dq.shape), dk + (more.transpose(-2, -1) @ q / scale).sum_to_size(
        dk.shape), dv)


def _delta_per_block(p: Tensor, d_out: Tensor, v: Tensor, out: Tensor, block: int) -> Tensor:
    """(..., T_q, T_k): D - D_b, D = rowsum(dO ⊙ O) against each block's own rowsum(dP ⊙ P)."""
    dp = d_out @ v.transpose(-2, -1)  # (..., T_q, T_k)
    blocks = _block_of(p.shape[-1], block)
    n = int(blocks.max()) + 1
    per_block = torch.zeros(*torch.broadcast_shapes(p.shape, dp.shape)[:-1], n, dtype=p.dtype).index_add(
        -1, blocks, p * dp)  # (..., T_q, n_blocks)
    return (d_out * out).sum(dim=-1, keepdim=True) - per_block[..., blocks]


def _tail_dropped(right: Callable[..., tuple], q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                  d_out: Tensor, mask: Tensor | None, block: int, causal: bool) -> tuple:
    cut = k.shape[-2] // block * block
    keep = allowed(q.shape[-2], k.shape[-2], mask, causal)
    dq, dk, dv = right(q, k[..., :cut, :], v[..., :cut, :], out, lse, d_out,
                       None if keep is None else keep[..., :cut], block, False)
    pad = [0, 0, 0, k.shape[-2] - cut]
    return dq, torch.nn.functional.pad(dk, pad), torch.nn.functional.pad(dv, pad)


def _nan_where(rows: Tensor, like: Tensor, shape: torch.Size) -> Tensor:
    """0, or NaN where ``rows`` (broadcasting against ``like``) is True, summed to ``shape``: NaN reaches every entry
    of a gradient that sums over a row of NaN."""
    return torch.where(rows, NAN, 0.0).to(like.dtype).expand_as(like).sum_to_size(shape)


def _unguarded(right: Callable[..., tuple], q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor,
               mask: Tensor | None, block: int, causal: bool) -> tuple:
    """exp(S - lse) with lse = -inf: NaN in the rows of dQ of the queries that see no key, and in all of dK and dV
    of their batch (every key sums over those rows)."""
    dq, dk, dv = right(q, k, v, out, lse, d_out, mask, block, causal)
    rows = torch.isneginf(lse).unsqueeze(-1)  # (..., T_q, 1)
    batch = rows.any(dim=-2, keepdim=True)  # (..., 1, 1)
    leading = out.shape[:-2]
    return (dq + _nan_where(rows, torch.empty(*leading, q.shape[-2], q.shape[-1]), dq.shape),
            dk + _nan_where(batch, torch.empty(*leading, k.shape[-2], k.shape[-1]), dk.shape),
            dv + _nan_where(batch, torch.empty(*leading, v.shape[-2], v.shape[-1]), dv.shape))


def _broadcast(q: Tensor, x: Tensor) -> Tensor:
    return x.expand(*torch.broadcast_shapes(q.shape[:-2], x.shape[:-2]), *x.shape[-2:])


BACKWARD = Mistakes([
    KnownMistake("D from the block's weights", "D = rowsum(dP ⊙ P) was taken over one block of keys: D sums over the "
                 "whole row, and it equals rowsum(dO ⊙ O) — take it from the output, once, before the loop",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: _plus_ds(
                     right, q, k, v, out, lse, d_out, mask, block, causal,
                     lambda p: p * _delta_per_block(p, d_out, v, out, block)),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: k.shape[-2] > block),
    KnownMistake("D left out", "dS = P ⊙ dP: the softmax's gradient is dS = P ⊙ (dP − D), D = rowsum(dO ⊙ O), "
                 "because every weight of a row moves when one score moves",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: _plus_ds(
                     right, q, k, v, out, lse, d_out, mask, block, causal,
                     lambda p: p * (d_out * out).sum(dim=-1, keepdim=True))),
    KnownMistake("no 1/√d_k in dK", lambda q, *case: f"dK is √d_k = {math.sqrt(q.shape[-1]):g} times too large: S = "
                                                     f"q kᵀ / √d_k, so dK = dSᵀ Q / √d_k",
                 lambda right, q, *case: (lambda g: (g[0], g[1] * math.sqrt(q.shape[-1]), g[2]))(right(q, *case))),
    KnownMistake("no 1/√d_k in dQ", lambda q, *case: f"dQ is √d_k = {math.sqrt(q.shape[-1]):g} times too large: S = "
                                                     f"q kᵀ / √d_k, so dQ = dS K / √d_k",
                 lambda right, q, *case: (lambda g: (g[0] * math.sqrt(q.shape[-1]), g[1], g[2]))(right(q, *case))),
    KnownMistake("dK divided by √d_k twice",
                 lambda q, *case: f"dK is divided by √d_k = {math.sqrt(q.shape[-1]):g} twice: once in the scaled "
                                  f"queries and once more",
                 lambda right, q, *case: (lambda g: (g[0], g[1] / math.sqrt(q.shape[-1]), g[2]))(right(q, *case))),
    KnownMistake("weights rebuilt from the block's maximum", "each block's weights were rebuilt as exp(S − the "
                 "block's largest score): that is the forward pass's unnormalised p; the backward needs the "
                 "normalised weights, P = exp(S − lse), from the saved log-sum-exp",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: _per_block_shift(
                     right, q, k, v, out, d_out, allowed(q.shape[-2], k.shape[-2], mask, causal), block)),
    KnownMistake("causal mask without the offset", "in the backward the causal mask is j <= i, lined up at the first "
                 "key: it must be the forward pass's, j <= i + (T_k - T_q)",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: right(
                     q, k, v, out, lse, d_out, _mask_and(mask, torch.ones(q.shape[-2], k.shape[-2],
                                                                          dtype=torch.bool).tril()), block, False),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: causal and q.shape[-2] != k.shape[-2]),
    KnownMistake("causal mask built from the block's own indices", "the causal mask of each block compares the key's "
                 "index within the block with the query's: compare positions, the block's start plus the index",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: right(
                     q, k, v, out, lse, d_out, _mask_and(mask, _causal_in_tile(q.shape[-2], k.shape[-2], block)),
                     block, False),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: causal and k.shape[-2] > block),
    KnownMistake("mask left out of the backward", "the backward attends keys the forward pass masked: apply the same "
                 "mask (and causal rule) to every block of scores",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: right(q, k, v, out, lse, d_out, None,
                                                                                    block, False),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: mask is not None or causal),
    KnownMistake("last partial block dropped", "the keys after the last whole block get no gradient and give none: "
                 "T_k need not be a multiple of block_size — the last block is shorter",
                 lambda right, *case: _tail_dropped(right, *case),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: k.shape[-2] % block != 0),
    KnownMistake("NaN for queries that see no key", "a query that may attend no key has lse = -inf, and exp(S - lse) "
                 "= exp(-inf + inf) is NaN: shift by 0 where lse is -inf, so its weights are 0",
                 lambda right, *case: _unguarded(right, *case),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: bool(torch.isneginf(lse).any())),
    KnownMistake("gradient not summed over broadcast axes", "the gradient has the broadcast shape of the scores' "
                 "leading axes: an input broadcast along an axis gets the sum over it, `.sum_to_size(x.shape)`",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: right(
                     _broadcast(out, q), _broadcast(out, k), _broadcast(out, v), out, lse, d_out, mask, block, causal),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: not (
                     q.shape[:-2] == k.shape[:-2] == v.shape[:-2] == out.shape[:-2])),
    KnownMistake("dV from P instead of its transpose", "dV = P dO: the values' gradient is dV = Pᵀ dO, each key "
                 "collecting from the queries that read it",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: (lambda g: (g[0], g[1], (
                     _weights(q, k, lse, allowed(q.shape[-2], k.shape[-2], mask, causal)) @ d_out).sum_to_size(
                     v.shape)))(right(q, k, v, out, lse, d_out, mask, block, causal)),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: q.shape[-2] == k.shape[-2]),
])


def _per_block_shift(right: Callable[..., tuple], q: Tensor, k: Tensor, v: Tensor, out: Tensor, d_out: Tensor,
                     keep: Tensor | None, block: int) -> tuple:
    """Each block's gradients with its weights measured from the block's own largest score (the right formulas, each
    block given its maximum as the log-sum-exp)."""
    dq, dks, dvs = 0, [], []
    for s in range(0, k.shape[-2], block):
        part = None if keep is None else keep[..., s:s + block]
        k_b, v_b = k[..., s:s + block, :], v[..., s:s + block, :]
        m = scores(q, k_b, part).amax(dim=-1)  # (..., T_q): the block's largest score
        m = m.expand(*out.shape[:-1])
        g = right(q, k_b, v_b, out, m, d_out, part, block, False)
        dq, dks, dvs = dq + g[0], dks + [g[1]], dvs + [g[2]]
    return dq, torch.cat(dks, dim=-2), torch.cat(dvs, dim=-2)


AUTOGRAD_USED = KnownMistake("autograd used instead of the formulas", "under torch.no_grad() it {how}: the gradients "
                             "are computed by the formulas dV = Pᵀ dO, dP = dO Vᵀ, dS = P ⊙ (dP − D), "
                             "dQ = dS K / √d_k, dK = dSᵀ Q / √d_k, not by autograd")
#: Per case of attention_backward_contract's refused calls, in order: (the call, the words its ValueError must say).
BACKWARD_REFUSED = [("lse of shape (2, 3, 1)", ("lse",)), ("d_out of shape (2, 3, 2)", ("d_out",)),
                    ("block_size=0", ("block_size",))]


# ================================================================ FlashAttention (the autograd function)
# Its gradients are named from BACKWARD's cases, out and lse computed by the forward pass. More of its own:

WEIGHTS_SAVED = KnownMistake("attention weights saved", "it keeps a {shape} tensor for the backward pass: the "
                             "weights, (T_q, T_k) per head — FlashAttention saves q, k, v, out and the log-sum-exp "
                             "and recomputes each block of weights in the backward pass")
SAVED_TOO_MUCH = KnownMistake("more saved than q, k, v, out and the log-sum-exp", "it keeps {found} numbers for the "
                              "backward pass ({what}): q, k, v, out and one log-sum-exp per query are {allowed}")
LSE_NOT_SAVED = KnownMistake("log-sum-exp not saved", "none of the tensors it saves is the log-sum-exp of the scores: "
                             "save lse (from online_softmax_attention(..., return_lse=True)) with q, k, v and out")
GRADIENT_PER_INPUT = KnownMistake("not one gradient per input", "backward must return one gradient per input of "
                                  "forward, in order: (dq, dk, dv, None, None, None), None for the mask, block_size "
                                  "and causal")
GRADCHECK_FAILED = KnownMistake("gradcheck failed", "torch.autograd.gradcheck found its backward pass disagreeing with "
                                "finite differences of its own forward pass")
FLASH_GRADIENTS = Mistakes([
    KnownMistake("causal not passed to the backward", "the backward pass ignores causal: keep it on ctx in forward "
                 "and pass it to attention_backward (if you do, your attention_backward leaves it out)",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: right(q, k, v, out, lse, d_out, mask,
                                                                                    block, False),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: causal),
    KnownMistake("mask not passed to the backward", "the backward pass ignores the mask: keep it on ctx in forward and "
                 "pass it to attention_backward (if you do, your attention_backward leaves it out)",
                 lambda right, q, k, v, out, lse, d_out, mask, block, causal: right(q, k, v, out, lse, d_out, None,
                                                                                    block, causal),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: mask is not None),
    KnownMistake("gradients in the wrong order", "backward returns the gradients in another order than forward takes "
                 "its inputs: (dq, dk, dv, ...)",
                 lambda right, *case: (lambda g: (g[1], g[0], g[2]))(right(*case)),
                 when=lambda q, k, v, out, lse, d_out, mask, block, causal: q.shape == k.shape),
])


# ================================================================ attention_kernel (Triton)
# Cases: (q, k, v, causal, block_m, block_n), q (B, H, T_q, D), k and v (B, H, T_k, D).
# right(q, k, v, mask, causal) is (out, lse): out (B, H, T_q, D), lse (B, H, T_q).

def _padded(x: Tensor, block: int) -> Tensor:
    """x with zero rows up to a multiple of ``block`` positions, as the launcher hands the kernel its last tile."""
    return torch.nn.functional.pad(x, (0, 0, 0, -x.shape[-2] % block))


def _attend(s: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """(softmax(s) v, logsumexp(s)) of scores ``s`` (-inf where masked): 0 and -inf for a query without a key."""
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - _finite(lse).unsqueeze(-1)) @ v, lse


def _untransposed(q: Tensor, k: Tensor, v: Tensor, causal: bool, block_n: int) -> tuple[Tensor, Tensor]:
    """tl.dot(q, k) on a (BLOCK_N, D) tile of keys: each block's scores are q @ K_b, which needs BLOCK_N == D."""
    t_k = k.shape[-2]
    tiles = _padded(k, block_n).unflatten(-2, (-1, block_n))  # (..., n_blocks, BLOCK_N, D)
    s = (q.unsqueeze(-3) @ tiles).transpose(-3, -2).flatten(-2)[..., :t_k] / math.sqrt(q.shape[-1])
    keep = allowed(q.shape[-2], t_k, None, causal)
    return _attend(s if keep is None else s.masked_fill(~keep, -math.inf), v)


def _in_tiles(t_q: int, t_k: int, block_m: int, block_n: int) -> Tensor:
    """The causal rule on each query's and key's index within its tile instead of their positions."""
    return (torch.arange(t_k) % block_n)[None, :] <= (torch.arange(t_q) % block_m)[:, None] + (t_k - t_q)


def _unnormalised(right: Callable[..., tuple], q: Tensor, k: Tensor, v: Tensor, causal: bool) -> tuple:
    out, lse = right(q, k, v, None, causal)
    largest = _largest(q, k, None, causal).unsqueeze(-1)
    return out * torch.exp(lse.unsqueeze(-1) - largest).nan_to_num(0.0), lse


KERNEL = Mistakes([
    KnownMistake("key tail not masked", "the keys past T_k in the last tile (loaded as 0) got the score 0 and a "
                 "share of the softmax: set their scores to -inf (`tl.where(keys < T_k, scores, -inf)`)",
                 lambda right, q, k, v, causal, bm, bn: right(q, _padded(k, bn), _padded(v, bn), None, causal),
                 when=lambda q, k, v, causal, bm, bn: not causal and k.shape[-2] % bn != 0),
    KnownMistake("tl.dot on untransposed keys", "tl.dot(q, k) multiplies the (BLOCK_M, D) queries by the (BLOCK_N, D) "
                 "keys as if they were (D, BLOCK_N): the scores are q kᵀ, tl.dot(q, tl.trans(k))",
                 lambda right, q, k, v, causal, bm, bn: _untransposed(q, k, v, causal, bn),
                 when=lambda q, k, v, causal, bm, bn: bn == q.shape[-1]),
    KnownMistake("causal mask without the offset", "the causal mask is j <= i, lined up at the first key: query i "
                 "may attend key j when j <= i + (T_k - T_q)",
                 lambda right, q, k, v, causal, bm, bn: right(
                     q, k, v, torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(), False),
                 when=lambda q, k, v, causal, bm, bn: causal and q.shape[-2] != k.shape[-2]),
    KnownMistake("causal mask from the tiles' own indices", "the causal mask compares tl.arange(0, BLOCK_N) with "
                 "tl.arange(0, BLOCK_M), indices within the tiles: compare positions, start + tl.arange(0, BLOCK_N) "
                 "and the program's block * BLOCK_M + tl.arange(0, BLOCK_M)",
                 lambda right, q, k, v, causal, bm, bn: right(q, k, v, _in_tiles(q.shape[-2], k.shape[-2], bm, bn),
                                                              False),
                 when=lambda q, k, v, causal, bm, bn: causal and max(q.shape[-2], k.shape[-2]) > min(bm, bn)),
    KnownMistake("running sums not rescaled", "when a tile raises the running maximum, the old sum and accumulator "
                 "are not rescaled by exp(m_old - m_new): multiply both by it before adding the tile's terms",
                 lambda right, q, k, v, causal, bm, bn: (_not_rescaled(q, k, v, None, bn, causal, total=True,
                                                                       out=True), right(q, k, v, None, causal)[1])),
    KnownMistake("no scaling", lambda q, k, v, causal, bm, bn: f"the scores are not scaled — multiply q kᵀ by scale "
                                                               f"= 1/√D = {1 / math.sqrt(q.shape[-1]):.4g}",
                 lambda right, q, k, v, causal, bm, bn: right(q * math.sqrt(q.shape[-1]), k, v, None, causal)),
    KnownMistake("output not normalised", "the accumulator was stored as it is: divide it by the running sum ℓ at "
                 "the end, out = acc / ℓ",
                 lambda right, q, k, v, causal, bm, bn: _unnormalised(right, q, k, v, causal)),
    KnownMistake("NaN for queries that see no key", "a query that may attend no key gets NaN: its running maximum is "
                 "-inf and exp(-inf - (-inf)) is NaN; shift by 0 where the maximum is -inf and divide by 1 where ℓ "
                 "is 0",
                 lambda right, q, k, v, causal, bm, bn: (lambda r, rows: (r[0].masked_fill(rows, NAN), r[1].masked_fill(
                     rows.squeeze(-1), NAN)))(right(q, k, v, None, causal), _first_block_empty(
                         q.shape[-2], k.shape[-2], None, causal, bn)),
                 when=lambda q, k, v, causal, bm, bn: causal and q.shape[-2] > k.shape[-2]),
])
NOT_A_KERNEL = KnownMistake("not a Triton kernel", "{what}: decorate it with @triton.jit, so that a grid of programs "
                            "runs it, kernel[grid](...)")
KERNEL_LSE = Mistakes([
    KnownMistake("log ℓ stored without the maximum", "it stored log ℓ: ℓ is measured from the running maximum m, so "
                 "the log-sum-exp is m + log ℓ",
                 lambda right, q, k, v, causal, bm, bn: (lambda r: (r[0], r[1] - _largest(q, k, None, causal)))(
                     right(q, k, v, None, causal))),
    KnownMistake("running maximum stored as the log-sum-exp", "it stored m, the largest score: the log-sum-exp is "
                 "m + log ℓ",
                 lambda right, q, k, v, causal, bm, bn: (right(q, k, v, None, causal)[0],
                                                         _largest(q, k, None, causal))),
])


# ================================================================ flash_decode
# Cases: (q, k, v, n_splits, mask). right(q, k, v, n_splits, mask) is the output (..., T_q, d_v).

def _parts(t_k: int, n: int) -> list[tuple[int, int]]:
    size = -(-t_k // n)
    return [(min(i * size, t_k), min((i + 1) * size, t_k)) for i in range(n)]


def _parts_averaged(right: Callable[..., Tensor], q: Tensor, k: Tensor, v: Tensor, n: int,
                    mask: Tensor | None) -> Tensor:
    keep = allowed(q.shape[-2], k.shape[-2], mask, False)
    outs = [right(q, k[..., a:b, :], v[..., a:b, :], 1, None if keep is None else keep[..., a:b])
            for a, b in _parts(k.shape[-2], n) if b > a]
    return sum(outs) / len(outs)


def _parts_added(q: Tensor, k: Tensor, v: Tensor, n: int, mask: Tensor | None) -> Tensor:
    """Each part's sums measured from its own maximum, added without rescaling."""
    s = scores(q, k, allowed(q.shape[-2], k.shape[-2], mask, False))
    size = -(-k.shape[-2] // n)
    o, ell = _measured_from(s, v, _block_max(s, size), size)
    return o / torch.where(ell > 0, ell, torch.ones_like(ell))


DECODE = Mistakes([
    KnownMistake("parts averaged", "each part's attention was normalised on its own and the parts averaged: merge "
                 "their states, (m, ℓ, o), with merge_states, and divide once at the end",
                 lambda right, q, k, v, n, mask: _parts_averaged(right, q, k, v, n, mask),
                 when=lambda q, k, v, n, mask: n > 1),
    KnownMistake("parts added without rescaling", "each part's ℓ and o are measured from its own maximum and were "
                 "added as they are: merge them with merge_states, which rescales both to the larger maximum",
                 lambda right, q, k, v, n, mask: _parts_added(q, k, v, n, mask), when=lambda q, k, v, n, mask: n > 1),
    KnownMistake("keys after the last whole part dropped", "the parts hold T_k // n_splits keys each, and the "
                 "T_k % n_splits keys left over are never attended: make the parts ceil(T_k / n_splits) long (the "
                 "last one shorter)",
                 lambda right, q, k, v, n, mask: right(q, k[..., : k.shape[-2] // n * n, :],
                                                       v[..., : k.shape[-2] // n * n, :], 1,
                                                       None if mask is None else
                                                       mask.expand(*mask.shape[:-1], k.shape[-2])[
                                                           ..., : k.shape[-2] // n * n]),
                 when=lambda q, k, v, n, mask: k.shape[-2] % n != 0 and k.shape[-2] >= n),
    KnownMistake("only the first part attended", "only the first part's state was kept: merge every part's state",
                 lambda right, q, k, v, n, mask: right(q, k[..., : _parts(k.shape[-2], n)[0][1], :],
                                                       v[..., : _parts(k.shape[-2], n)[0][1], :], 1,
                                                       None if mask is None else
                                                       mask.expand(*mask.shape[:-1], k.shape[-2])[
                                                           ..., : _parts(k.shape[-2], n)[0][1]]),
                 when=lambda q, k, v, n, mask: n > 1),
])

EMPTY_PARTS = KnownMistake("parts without keys not handled", "with n_splits = {n} > T_k = {t_k} some parts have no "
                           "key: their state is (-inf, 0, 0), which merges into anything and changes nothing")
PARTS_TOO_LONG = KnownMistake("parts longer than they should be", "it built {widest} scores per query at once "
                              "with n_splits = {n} over T_k = {t_k} keys: each part holds ceil(T_k / n_splits) = "
                              "{size} keys, and is computed on its own")


# ================================================================ concept checks
# positions_processed: cases (prompt_len, new_tokens, use_cache). saved_for_backward: (batch, heads, length, d_head).
# decode_flops_per_byte: (n_heads, n_kv_heads, bytes_per_number). right is not used: these are numbers.

def _full(prompt_len: int, new: int) -> int:
    return new * prompt_len + new * (new - 1) // 2


POSITIONS_PROCESSED = Mistakes([
    KnownMistake("last token fed too", "the last token is drawn from the last step's logits and never fed to the "
                 "model", lambda right, p, n, cached: p + n, when=lambda p, n, cached: cached and n > 0),
    KnownMistake("prompt not counted", "the prompt is read once, at the first step, to fill the cache",
                 lambda right, p, n, cached: n, when=lambda p, n, cached: cached),
    KnownMistake("prompt re-read at every step", "with a cache the prompt is read once; after it each step feeds one "
                 "token", lambda right, p, n, cached: n * p + n - 1, when=lambda p, n, cached: cached and n > 1),
    KnownMistake("cache taken to save nothing", "a cache keeps the keys and values, so nothing is computed twice",
                 lambda right, p, n, cached: _full(p, n), when=lambda p, n, cached: cached),
    KnownMistake("no cache taken to be linear", "without a cache nothing is kept between steps: each step runs the "
                 "model over the whole sequence again, prompt included",
                 lambda right, p, n, cached: p + n - 1, when=lambda p, n, cached: not cached),
    KnownMistake("final sequence counted at every step", "the step that adds the last token runs over the sequence "
                 "before it, not after", lambda right, p, n, cached: n * (p + n), when=lambda p, n, cached: not cached),
])

SAVED_FOR_BACKWARD = Mistakes([
    KnownMistake("the weights saved too", "the backward pass needs no saved weights: it rebuilds each block of them "
                 "from the scores and the log-sum-exp, so nothing of size T × T is kept",
                 lambda right, b, h, t, d: 4 * b * h * t * d + b * h * t + b * h * t * t),
    KnownMistake("m and ℓ saved instead of the log-sum-exp", "m and ℓ together are one number per query, lse = m + "
                 "log ℓ: P = exp(S − lse) needs nothing else",
                 lambda right, b, h, t, d: 4 * b * h * t * d + 2 * b * h * t),
    KnownMistake("log-sum-exp not counted", "the backward pass rebuilds P = exp(S − lse): without the log-sum-exp it "
                 "would have to recompute the whole row's softmax first", lambda right, b, h, t, d: 4 * b * h * t * d),
    KnownMistake("the inputs not counted", "the backward pass recomputes the scores q kᵀ and needs v for dP = dO Vᵀ: "
                 "q, k and v are saved as well as out", lambda right, b, h, t, d: b * h * t * d + b * h * t),
])

DECODE_INTENSITY = Mistakes([
    KnownMistake("only the keys counted", "a decoding step reads the cached values as well as the keys: twice the "
                 "bytes", lambda right, h, kv, nbytes: 4 * h / (kv * nbytes)),
    KnownMistake("key/value heads taken to be the query heads", "only the n_kv_heads key/value heads are cached and "
                 "read; each serves a group of query heads, which is where grouped-query attention gets its FLOPs per "
                 "byte", lambda right, h, kv, nbytes: 4 * h / (2 * h * nbytes), when=lambda h, kv, nbytes: h != kv),
    KnownMistake("a multiply-add counted as one FLOP", "a multiply-add is two FLOPs: q · k_j over d_head numbers is "
                 "2 d_head", lambda right, h, kv, nbytes: 2 * h / (2 * kv * nbytes)),
    KnownMistake("numbers counted instead of bytes", "the question is FLOPs per *byte*: each cached number is "
                 "bytes_per_number bytes", lambda right, h, kv, nbytes: 4 * h / (2 * kv),
                 when=lambda h, kv, nbytes: nbytes != 1),
])
