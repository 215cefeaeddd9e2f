"""Chapter 9 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names the exercise notebook
gives (``math``, ``torch``, ``Tensor``, ``triton``, ``tl`` and the helpers of its setup cell) and, where
the exercise builds on an earlier one, that earlier exercise (``merge_states``,
``online_softmax_attention``, ``attention_backward``), which the catalogue tests supply from the
reference. The online softmax's entries share the small helpers a learner writes once (``_masks``,
``_finish``); each entry's own mistake is in its loop.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attention_course.flash import tl, triton
from catalogue import Entry
from solutions.flash_attention import attention_backward, merge_states, online_softmax_attention

HALF = (torch.float16, torch.bfloat16)


# ================================================================ merge_states


def _shapes_match(a, b):
    if [t.shape for t in a] != [t.shape for t in b]:
        raise ValueError(f"states of shapes {[tuple(t.shape) for t in a]} and {[tuple(t.shape) for t in b]}")


def merge_without_rescaling(a, b):
    _shapes_match(a, b)
    return torch.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]  # "the sums add up"


def merge_rescales_one_side(a, b):
    _shapes_match(a, b)
    m = torch.maximum(a[0], b[0])
    scale = torch.exp(a[0] - torch.nan_to_num(m, neginf=0.0))  # as in the loop, where b is measured from m already
    return m, a[1] * scale + b[1], a[2] * scale + b[2]


def merge_normalised(a, b):
    _shapes_match(a, b)
    m = torch.maximum(a[0], b[0])
    safe = torch.nan_to_num(m, neginf=0.0)
    l_a, l_b = a[1] * torch.exp(a[0] - safe), b[1] * torch.exp(b[0] - safe)
    total = l_a + l_b
    out = (a[2] * torch.exp(a[0] - safe) + b[2] * torch.exp(b[0] - safe)) / total  # "the output, as attention gives it"
    return m, total, out


def merge_nan_when_empty(a, b):
    _shapes_match(a, b)
    m = torch.maximum(a[0], b[0])
    scale_a, scale_b = torch.exp(a[0] - m), torch.exp(b[0] - m)  # -inf - (-inf) is NaN
    return m, a[1] * scale_a + b[1] * scale_b, a[2] * scale_a + b[2] * scale_b


def merge_from_the_minimum(a, b):
    _shapes_match(a, b)
    m = torch.minimum(a[0], b[0])  # "measure both from the same reference": the smaller one
    safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    scale_a, scale_b = torch.exp(a[0] - safe), torch.exp(b[0] - safe)
    return m, a[1] * scale_a + b[1] * scale_b, a[2] * scale_a + b[2] * scale_b


def merge_in_place(a, b):
    _shapes_match(a, b)
    m = torch.maximum(a[0], b[0])
    safe = torch.nan_to_num(m, neginf=0.0)
    scale_a, scale_b = torch.exp(a[0] - safe), torch.exp(b[0] - safe)
    l_a, o_a = a[1].mul_(scale_a), a[2].mul_(scale_a)  # rescales the first state where it lies
    return m, l_a + b[1] * scale_b, o_a + b[2] * scale_b


def merge_nan_hidden_after(a, b):
    _shapes_match(a, b)
    m = torch.maximum(a[0], b[0])
    scale_a = torch.exp(a[0] - m).nan_to_num(0.0)  # NaN where both are empty, replaced: but not in the backward pass
    scale_b = torch.exp(b[0] - m).nan_to_num(0.0)
    return m, a[1] * scale_a + b[1] * scale_b, a[2] * scale_a + b[2] * scale_b


def merge_unchecked(a, b):
    m = torch.maximum(a[0], b[0])  # states of other shapes broadcast, or fail in torch
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    scale_a, scale_b = torch.exp(a[0] - safe), torch.exp(b[0] - safe)
    return m, a[1] * scale_a + b[1] * scale_b, a[2] * scale_a + b[2] * scale_b


def merge_stacked(a: tuple[Tensor, Tensor, Tensor], b: tuple[Tensor, Tensor, Tensor]):
    if any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        raise ValueError(f"the states differ in shape: {[tuple(t.shape) for t in a]}, {[tuple(t.shape) for t in b]}")
    m_both, l_both, o_both = (torch.stack(pair) for pair in zip(a, b, strict=True))  # (2, ..., T_q, ·)
    m = m_both.amax(dim=0)
    scale = torch.exp(m_both - torch.where(m == -math.inf, 0.0, m))  # (2, ..., T_q, 1)
    return m, (l_both * scale).sum(dim=0), (o_both * scale).sum(dim=0)


def merge_by_cases(a, b):
    _shapes_match(a, b)
    a_first = a[0] >= b[0]  # (..., T_q, 1): which state holds the larger maximum
    big = [torch.where(a_first, x, y) for x, y in zip(a, b, strict=True)]
    small = [torch.where(a_first, y, x) for x, y in zip(a, b, strict=True)]
    shrink = torch.exp(small[0] - torch.where(torch.isinf(big[0]), 0.0, big[0]))
    return big[0], big[1] + small[1] * shrink, big[2] + small[2] * shrink


# ================================================================ online_softmax_attention


def _masks(q, k, mask, block_size, causal):
    """The argument checks, and one boolean mask of what each query may attend, mask and causal rule together."""
    if block_size < 1 or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"block_size {block_size}, q {tuple(q.shape)}, k {tuple(k.shape)}")
    t_q, t_k = q.shape[-2], k.shape[-2]
    keep = None if mask is None else mask.expand(*mask.shape[:-1], t_k)
    if causal:
        lower = torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)
        keep = lower if keep is None else keep & lower
    return keep


def _upcast(q, k, v):
    """float16 and bfloat16 computed in float32: the tensors to compute with, and the dtype to return."""
    dtype = q.dtype
    if dtype in HALF:
        q, k, v = q.float(), k.float(), v.float()
    return q, k, v, dtype


def _finish(m, total, out, dtype, return_lse):
    """out = o / l (0 where no key was seen), in the inputs' dtype; with return_lse also m + log l."""
    result = (out / torch.where(total > 0, total, 1.0)).to(dtype)
    if return_lse:
        return result, (m + torch.log(total)).squeeze(-1)
    return result


def online_no_rescale(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    q = q / math.sqrt(q.shape[-1])
    m, total, out = None, 0.0, 0.0
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        m = scores.amax(-1, keepdim=True) if m is None else torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        total = total + p.sum(-1, keepdim=True)  # the old sums are still measured against the old maximum
        out = out + p @ v[..., s:s + block_size, :]
    return _finish(m, total, out, dtype, return_lse)


def online_rescales_the_output_only(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    q = q / math.sqrt(q.shape[-1])
    m, total, out = None, 0.0, 0.0
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        new = scores.amax(-1, keepdim=True) if m is None else torch.maximum(m, scores.amax(-1, keepdim=True))
        safe = torch.nan_to_num(new, neginf=0.0)
        p = torch.exp(scores - safe)
        if m is not None:
            out = out * torch.exp(m - safe)  # the output is rescaled; the sum, "just a count", is not
        total, out, m = total + p.sum(-1, keepdim=True), out + p @ v[..., s:s + block_size, :], new
    return _finish(m, total, out, dtype, return_lse)


def online_unscaled(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    m, total, out = None, 0.0, 0.0
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT  # no 1/sqrt(d_k)
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        new = scores.amax(-1, keepdim=True) if m is None else torch.maximum(m, scores.amax(-1, keepdim=True))
        safe = torch.nan_to_num(new, neginf=0.0)
        p = torch.exp(scores - safe)
        if m is not None:
            total, out = total * torch.exp(m - safe), out * torch.exp(m - safe)
        total, out, m = total + p.sum(-1, keepdim=True), out + p @ v[..., s:s + block_size, :], new
    return _finish(m, total, out, dtype, return_lse)


def online_maximum_of_the_first_block(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    q = q / math.sqrt(q.shape[-1])
    m, total, out = None, 0.0, 0.0
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        if m is None:
            m = scores.amax(-1, keepdim=True)  # "the first block sets the scale"
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        total, out = total + p.sum(-1, keepdim=True), out + p @ v[..., s:s + block_size, :]
    return _finish(m, total, out, dtype, return_lse)


def online_nan_on_dead_rows(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    q = q / math.sqrt(q.shape[-1])
    m, total, out = None, 0.0, 0.0
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        new = scores.amax(-1, keepdim=True) if m is None else torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - new)  # -inf - (-inf) = nan when a row has seen no key yet
        if m is not None:
            total, out = total * torch.exp(m - new), out * torch.exp(m - new)
        total, out, m = total + p.sum(-1, keepdim=True), out + p @ v[..., s:s + block_size, :], new
    result = (out / total).to(dtype)
    return (result, (m + torch.log(total)).squeeze(-1)) if return_lse else result


def online_all_scores(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    scores = q @ k.mT / math.sqrt(q.shape[-1])  # the whole (T_q, T_k) matrix, then "blocks" of it
    if keep is not None:
        scores = scores.masked_fill(~keep, -math.inf)
    m = scores.amax(-1, keepdim=True)
    p = torch.exp(scores - m.nan_to_num(neginf=0.0))
    return _finish(m, p.sum(-1, keepdim=True), p @ v, dtype, return_lse)


def online_blocks_averaged(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    outs, sums = [], 0.0
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT / math.sqrt(q.shape[-1])
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        outs.append(scores.softmax(-1).nan_to_num(0.0) @ v[..., s:s + block_size, :])
        sums = sums + scores.exp().sum(-1)
    out = (sum(outs) / len(outs)).to(dtype)
    return (out, torch.log(sums)) if return_lse else out


def online_scales_q_in_place(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    q /= math.sqrt(q.shape[-1])  # scales the caller's q (float32 and float64 are not copied by _upcast)
    state = None
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        block = (m, p.sum(-1, keepdim=True), p @ v[..., s:s + block_size, :])
        state = block if state is None else merge_states(state, block)
    return _finish(*state, dtype, return_lse)


def online_nan_hidden_after(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    q = q / math.sqrt(q.shape[-1])
    state = None
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        block = (m, p.sum(-1, keepdim=True), p @ v[..., s:s + block_size, :])
        state = block if state is None else merge_states(state, block)
    out = torch.nan_to_num(state[2] / state[1], nan=0.0).to(dtype)  # 0 / 0 where a query sees nothing: NaN, replaced
    return (out, (state[0] + torch.log(state[1])).squeeze(-1)) if return_lse else out


def online_with_bmm(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    q = q / math.sqrt(q.shape[-1])
    state = None
    for s in range(0, k.shape[-2], block_size):
        scores = torch.bmm(q, k[:, s:s + block_size].transpose(1, 2))  # (B, T_q, d) @ (B, d, blk): three axes only
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        block = (m, p.sum(-1, keepdim=True), torch.bmm(p, v[:, s:s + block_size]))
        state = block if state is None else merge_states(state, block)
    return _finish(*state, dtype, return_lse)


def _merged_blocks(q, k, v, keep, block_size):
    """The usual loop: each block's state merged into the running one (the helper a learner factors out)."""
    state = None
    for s in range(0, k.shape[-2], block_size):
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        block = (m, p.sum(-1, keepdim=True), p @ v[..., s:s + block_size, :])
        state = block if state is None else merge_states(state, block)
    return state


def online_blocks_of_64(q, k, v, mask=None, block_size=64, causal=False, return_lse=False):  # "64 fits better"
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    return _finish(*_merged_blocks(q / math.sqrt(q.shape[-1]), k, v, keep, block_size), dtype, return_lse)


def online_causal_without_offset(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, False)
    if causal:  # "query i sees keys 0..i"
        lower = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        keep = lower if keep is None else keep & lower
    q, k, v, dtype = _upcast(q, k, v)
    return _finish(*_merged_blocks(q / math.sqrt(q.shape[-1]), k, v, keep, block_size), dtype, return_lse)


def online_causal_in_block(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, False)
    q, k, v, dtype = _upcast(q, k, v)
    q = q / math.sqrt(q.shape[-1])
    t_q, t_k = q.shape[-2], k.shape[-2]
    state = None
    for s in range(0, t_k, block_size):
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        if causal:  # the key's index within the block, not its position
            j = torch.arange(scores.shape[-1])
            scores = scores.masked_fill(j[None, :] > torch.arange(t_q)[:, None] + (t_k - t_q), -math.inf)
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        block = (m, p.sum(-1, keepdim=True), p @ v[..., s:s + block_size, :])
        state = block if state is None else merge_states(state, block)
    return _finish(*state, dtype, return_lse)


def online_causal_ignored(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, False)  # causal taken as "the caller passes a causal mask"
    q, k, v, dtype = _upcast(q, k, v)
    return _finish(*_merged_blocks(q / math.sqrt(q.shape[-1]), k, v, keep, block_size), dtype, return_lse)


def online_lse_before_the_last_block(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    q = q / math.sqrt(q.shape[-1])
    state, lse = None, None
    for s in range(0, k.shape[-2], block_size):
        if state is not None:
            lse = (state[0] + torch.log(state[1])).squeeze(-1)  # taken at the top of each step
        scores = q @ k[..., s:s + block_size, :].mT
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        m = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        block = (m, p.sum(-1, keepdim=True), p @ v[..., s:s + block_size, :])
        state = block if state is None else merge_states(state, block)
    if lse is None:
        lse = (state[0] + torch.log(state[1])).squeeze(-1)
    out = _finish(*state, dtype, False)
    return (out, lse) if return_lse else out


def online_lse_is_the_maximum(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    m, total, o = _merged_blocks(q / math.sqrt(q.shape[-1]), k, v, keep, block_size)
    out = _finish(m, total, o, dtype, False)
    return (out, m.squeeze(-1)) if return_lse else out  # "the log-sum-exp is dominated by the largest score"


def online_lse_keeps_its_axis(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    m, total, o = _merged_blocks(q / math.sqrt(q.shape[-1]), k, v, keep, block_size)
    out = _finish(m, total, o, dtype, False)
    return (out, m + torch.log(total)) if return_lse else out  # (..., T_q, 1), as m and l are


def online_lse_without_maximum(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q, k, v, dtype = _upcast(q, k, v)
    m, total, o = _merged_blocks(q / math.sqrt(q.shape[-1]), k, v, keep, block_size)
    out = _finish(m, total, o, dtype, False)
    return (out, torch.log(total).squeeze(-1)) if return_lse else out  # "log of the sum of the exponentials"


def online_in_the_inputs_dtype(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)  # float16 stays float16 throughout
    return _finish(*_merged_blocks(q / math.sqrt(q.shape[-1]), k, v, keep, block_size), q.dtype, return_lse)


def online_lse_in_the_inputs_dtype(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    keep = _masks(q, k, mask, block_size, causal)
    q32, k32, v32, dtype = _upcast(q, k, v)
    out, lse = _finish(*_merged_blocks(q32 / math.sqrt(q.shape[-1]), k32, v32, keep, block_size), dtype, True)
    return (out, lse.to(dtype)) if return_lse else out  # "everything comes back in the inputs' dtype"


def online_with_split(q, k, v, mask=None, block_size=128, causal=False, return_lse=False):
    if block_size < 1 or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"block_size={block_size}; d_k of q {tuple(q.shape)} and k {tuple(k.shape)}")
    dtype = q.dtype
    q, k, v = (t.float() if t.dtype in HALF else t for t in (q, k, v))
    t_q, t_k = q.shape[-2], k.shape[-2]
    masks = [None] * math.ceil(t_k / block_size)
    if mask is not None:
        masks = mask.expand(*mask.shape[:-1], t_k).split(block_size, dim=-1)
    q = q * q.shape[-1] ** -0.5
    m = torch.full((*q.shape[:-1], 1), -math.inf, dtype=q.dtype)
    total = torch.zeros_like(m)
    out = 0.0
    for i, (k_block, v_block, m_block) in enumerate(zip(k.split(block_size, -2), v.split(block_size, -2), masks,
                                                        strict=True)):
        scores = torch.einsum("...qd,...kd->...qk", q, k_block)
        if m_block is not None:
            scores = torch.where(m_block, scores, -math.inf)
        if causal:
            position = i * block_size + torch.arange(k_block.shape[-2])
            scores = torch.where(position <= torch.arange(t_q)[:, None] + t_k - t_q, scores, -math.inf)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        shift = torch.where(m_new == -math.inf, 0.0, m_new)
        p = (scores - shift).exp()
        alpha = (m - shift).exp()
        total = alpha * total + p.sum(-1, keepdim=True)
        out = alpha * out + p @ v_block
        m = m_new
    result = (out / total.clamp(min=torch.finfo(total.dtype).tiny) * (total > 0)).to(dtype)
    return (result, (m + total.log()).squeeze(-1)) if return_lse else result


# ================================================================ attention_backward


def _backward_checks(q, k, v, out, lse, d_out, block_size):
    if block_size < 1 or d_out.shape != out.shape or lse.shape != out.shape[:-1] \
            or out.shape[-2:] != (q.shape[-2], v.shape[-1]):
        raise ValueError(f"out {tuple(out.shape)}, lse {tuple(lse.shape)}, d_out {tuple(d_out.shape)}, "
                         f"block_size {block_size}")


def _keep(q, k, mask, causal):
    """One boolean mask of what each query may attend (None: everything), mask and causal rule together."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    keep = None if mask is None else mask.expand(*mask.shape[:-1], t_k)
    if causal:
        lower = torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)
        keep = lower if keep is None else keep & lower
    return keep


def _in_float32(*tensors):
    return tuple(t.float() if t.dtype in HALF else t for t in tensors)


def _backward_loop(q, k, v, out, lse, d_out, keep, block_size, *, delta_from="out", scale_dk=True, scale_dq=True,
                   subtract=True, shift_by="lse", transpose_p=True):
    """The block loop with one of the mistakes below switched on (each entry passes its own)."""
    dtypes = (q.dtype, k.dtype, v.dtype)
    q, k, v, out, lse, d_out = _in_float32(q, k, v, out, lse, d_out)
    scale = 1 / math.sqrt(q.shape[-1])
    delta = (d_out * out).sum(-1, keepdim=True)
    shift = torch.nan_to_num(lse, neginf=0.0).unsqueeze(-1)
    dq, dks, dvs = 0.0, [], []
    for s in range(0, k.shape[-2], block_size):
        k_b, v_b = k[..., s:s + block_size, :], v[..., s:s + block_size, :]
        scores = q @ k_b.mT * scale
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        if shift_by == "block":  # "as in the forward pass"
            shift = torch.nan_to_num(scores.amax(-1, keepdim=True), neginf=0.0)
        p = torch.exp(scores - shift)
        dp = d_out @ v_b.mT
        if delta_from == "block":
            delta = (p * dp).sum(-1, keepdim=True)  # "D = rowsum(dP * P)", over the block at hand
        ds = p * (dp - delta) if subtract else p * dp
        dvs.append(p.mT @ d_out if transpose_p else p @ d_out)
        dq = dq + ds @ k_b * (scale if scale_dq else 1.0)
        dks.append(ds.mT @ q * (scale if scale_dk else 1.0))
    grads = dq, torch.cat(dks, -2), torch.cat(dvs, -2)
    return tuple(g.sum_to_size(x.shape).to(dtype) for g, x, dtype in zip(grads, (q, k, v), dtypes, strict=True))


def backward_delta_from_the_block(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size, delta_from="block")


def backward_without_delta(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size, subtract=False)


def backward_dk_unscaled(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size, scale_dk=False)


def backward_dq_unscaled(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size, scale_dq=False)


def backward_dk_scaled_twice(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    dq, dk, dv = _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size)
    return dq, dk / math.sqrt(q.shape[-1]), dv  # "q kᵀ is scaled, so its gradient is scaled again"


def backward_from_the_block_maximum(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size, shift_by="block")


def backward_dv_without_transpose(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size, transpose_p=False)


def backward_causal_without_offset(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    keep = _keep(q, k, mask, False)
    if causal:  # "query i sees keys 0..i"
        lower = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        keep = lower if keep is None else keep & lower
    return _backward_loop(q, k, v, out, lse, d_out, keep, block_size)


def backward_causal_in_block(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    keep = _keep(q, k, mask, False)
    if causal:  # the key's index within its block, not its position
        t_q, t_k = q.shape[-2], k.shape[-2]
        within = torch.arange(t_k) % block_size
        lower = within[None, :] <= torch.arange(t_q)[:, None] + (t_k - t_q)
        keep = lower if keep is None else keep & lower
    return _backward_loop(q, k, v, out, lse, d_out, keep, block_size)


def backward_mask_left_out(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, None, block_size)  # "lse already knows the mask"


def backward_whole_blocks_only(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    keep = _keep(q, k, mask, causal)
    whole = k.shape[-2] // block_size * block_size  # range(0, T_k - block_size + 1, block_size)
    dq, dk, dv = _backward_loop(q, k[..., :whole, :], v[..., :whole, :], out, lse, d_out,
                                None if keep is None else keep[..., :whole], block_size)
    rest = k.shape[-2] - whole
    pad = torch.zeros(*dk.shape[:-2], rest, dk.shape[-1], dtype=dk.dtype)
    return dq, torch.cat([dk, pad], -2), torch.cat([dv, torch.zeros(*dv.shape[:-2], rest, dv.shape[-1],
                                                                     dtype=dv.dtype)], -2)


def backward_nan_for_unseen_queries(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    keep = _keep(q, k, mask, causal)
    dtypes = (q.dtype, k.dtype, v.dtype)
    q, k, v, out, lse, d_out = _in_float32(q, k, v, out, lse, d_out)
    scale = 1 / math.sqrt(q.shape[-1])
    delta = (d_out * out).sum(-1, keepdim=True)
    dq, dks, dvs = 0.0, [], []
    for s in range(0, k.shape[-2], block_size):
        k_b, v_b = k[..., s:s + block_size, :], v[..., s:s + block_size, :]
        scores = q @ k_b.mT * scale
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        p = torch.exp(scores - lse.unsqueeze(-1))  # lse = -inf where a query sees nothing: exp(-inf + inf)
        ds = p * (d_out @ v_b.mT - delta)
        dvs.append(p.mT @ d_out)
        dq = dq + ds @ k_b * scale
        dks.append(ds.mT @ q * scale)
    grads = dq.sum_to_size(q.shape), torch.cat(dks, -2).sum_to_size(k.shape), torch.cat(dvs, -2).sum_to_size(v.shape)
    return tuple(g.to(dtype) for g, dtype in zip(grads, dtypes, strict=True))


def backward_not_summed(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    keep = _keep(q, k, mask, causal)
    dtypes = (q.dtype, k.dtype, v.dtype)
    q, k, v, out, lse, d_out = _in_float32(q, k, v, out, lse, d_out)
    scale = 1 / math.sqrt(q.shape[-1])
    delta = (d_out * out).sum(-1, keepdim=True)
    shift = torch.nan_to_num(lse, neginf=0.0).unsqueeze(-1)
    dq, dks, dvs = 0.0, [], []
    for s in range(0, k.shape[-2], block_size):
        k_b, v_b = k[..., s:s + block_size, :], v[..., s:s + block_size, :]
        scores = q @ k_b.mT * scale
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        p = torch.exp(scores - shift)
        ds = p * (d_out @ v_b.mT - delta)
        dvs.append(p.mT @ d_out)
        dq = dq + ds @ k_b * scale
        dks.append(ds.mT @ q * scale)
    grads = dq, torch.cat(dks, -2), torch.cat(dvs, -2)  # the shapes of the scores' leading axes
    return tuple(g.to(dtype) for g, dtype in zip(grads, dtypes, strict=True))


def backward_all_scores(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    keep = _keep(q, k, mask, causal)
    dtypes = (q.dtype, k.dtype, v.dtype)
    q, k, v, out, lse, d_out = _in_float32(q, k, v, out, lse, d_out)
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.mT * scale  # the whole matrix, in one go: "simpler, and the same numbers"
    if keep is not None:
        scores = scores.masked_fill(~keep, -math.inf)
    p = torch.exp(scores - torch.nan_to_num(lse, neginf=0.0).unsqueeze(-1))
    ds = p * (d_out @ v.mT - (d_out * out).sum(-1, keepdim=True))
    grads = ((ds @ k * scale).sum_to_size(q.shape), (ds.mT @ q * scale).sum_to_size(k.shape),
             (p.mT @ d_out).sum_to_size(v.shape))
    return tuple(g.to(dtype) for g, dtype in zip(grads, dtypes, strict=True))


def backward_blocks_of_64(q, k, v, out, lse, d_out, mask=None, block_size=64, causal=False):  # "64 fits better"
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size)


def backward_in_the_inputs_dtype(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    keep = _keep(q, k, mask, causal)  # float16 stays float16 throughout
    scale = 1 / math.sqrt(q.shape[-1])
    delta = (d_out * out).sum(-1, keepdim=True)
    shift = torch.nan_to_num(lse, neginf=0.0).unsqueeze(-1).to(q.dtype)
    dq, dks, dvs = 0.0, [], []
    for s in range(0, k.shape[-2], block_size):
        k_b, v_b = k[..., s:s + block_size, :], v[..., s:s + block_size, :]
        scores = q @ k_b.mT * scale
        if keep is not None:
            scores = scores.masked_fill(~keep[..., s:s + block_size], -math.inf)
        p = torch.exp(scores - shift)
        ds = p * (d_out @ v_b.mT - delta)
        dvs.append(p.mT @ d_out)
        dq = dq + ds @ k_b * scale
        dks.append(ds.mT @ q * scale)
    return dq.sum_to_size(q.shape), torch.cat(dks, -2).sum_to_size(k.shape), torch.cat(dvs, -2).sum_to_size(v.shape)


def backward_by_autograd(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]  # "autograd knows the formulas"
    again = online_softmax_attention(*leaves, mask, block_size, causal=causal)
    return torch.autograd.grad(again, leaves, d_out)


def backward_in_place(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    keep = _keep(q, k, mask, causal)
    scale = 1 / math.sqrt(q.shape[-1])
    q.mul_(scale)  # "scale q once, for every block": the caller's q
    dq, dk, dv = _backward_loop(q, k, v, out, lse, d_out, keep, block_size, scale_dq=False)
    return dq * scale, dk * (1 / scale), dv  # q was already scaled: undo the loop's own factors


def backward_unchecked(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    if block_size < 1:
        raise ValueError(f"block_size {block_size}")  # the shapes of out, lse and d_out are trusted
    return _backward_loop(q, k, v, out, lse.reshape(out.shape[:-1]), d_out, _keep(q, k, mask, causal), block_size)


def backward_in_float32(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    grads = _backward_loop(q.float(), k.float(), v.float(), out.float(), lse.float(), d_out.float(),
                           _keep(q, k, mask, causal), block_size)
    return grads  # "float32 is precise enough": also for float64 inputs


def backward_by_query_and_key_blocks(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor,
                                     mask: Tensor | None = None, block_size: int = 128, causal: bool = False):
    """FlashAttention-2's order: an outer loop over blocks of keys, an inner one over blocks of queries."""
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    dtypes, shapes = (q.dtype, k.dtype, v.dtype), (q.shape, k.shape, v.shape)
    q, k, v, out, lse, d_out = _in_float32(q, k, v, out, lse, d_out)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q, k, v = q.expand(*batch, *q.shape[-2:]), k.expand(*batch, *k.shape[-2:]), v.expand(*batch, *v.shape[-2:])
    t_q, t_k = q.shape[-2], k.shape[-2]
    keep = None if mask is None else mask.expand(*batch, t_q, t_k)
    scale = q.shape[-1] ** -0.5
    delta = (d_out * out).sum(-1)  # (..., T_q)
    dq = torch.zeros_like(q)
    dks, dvs = [], []
    for j in range(0, t_k, block_size):
        k_b, v_b = k[..., j:j + block_size, :], v[..., j:j + block_size, :]
        dk_b, dv_b = torch.zeros_like(k_b), torch.zeros_like(v_b)
        for i in range(0, t_q, block_size):
            s = torch.einsum("...id,...jd->...ij", q[..., i:i + block_size, :], k_b) * scale
            if keep is not None:
                s = torch.where(keep[..., i:i + block_size, j:j + block_size], s, -math.inf)
            if causal:
                rows = torch.arange(i, min(i + block_size, t_q))[:, None]
                cols = torch.arange(j, j + k_b.shape[-2])[None, :]
                s = torch.where(cols <= rows + t_k - t_q, s, -math.inf)
            lse_i = lse[..., i:i + block_size]
            p = torch.exp(s - torch.where(torch.isinf(lse_i), torch.zeros_like(lse_i), lse_i)[..., None])
            do_i = d_out[..., i:i + block_size, :]
            dv_b = dv_b + p.transpose(-1, -2) @ do_i
            ds = p * (do_i @ v_b.transpose(-1, -2) - delta[..., i:i + block_size, None])
            dq[..., i:i + block_size, :] += ds @ k_b * scale
            dk_b = dk_b + ds.transpose(-1, -2) @ q[..., i:i + block_size, :] * scale
        dks.append(dk_b)
        dvs.append(dv_b)
    grads = (dq, torch.cat(dks, -2), torch.cat(dvs, -2))
    return tuple(g.sum_to_size(shape).to(dt) for g, shape, dt in zip(grads, shapes, dtypes, strict=True))


def backward_with_einsum(q, k, v, out, lse, d_out, mask=None, block_size=128, causal=False):
    _backward_checks(q, k, v, out, lse, d_out, block_size)
    return _backward_loop(q, k, v, out, lse, d_out, _keep(q, k, mask, causal), block_size)


# ================================================================ FlashAttention


class FlashReturnsThreeGradients(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None, block_size=128, causal=False):
        out, lse = online_softmax_attention(q, k, v, mask, block_size, causal=causal, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.block_size, ctx.causal = mask, block_size, causal
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        return attention_backward(q, k, v, out, lse, d_out, ctx.mask, ctx.block_size, ctx.causal)  # only q, k, v


class FlashSavesTheWeights(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None, block_size=128, causal=False):
        out, lse = online_softmax_attention(q, k, v, mask, block_size, causal=causal, return_lse=True)
        weights = torch.exp(q @ k.mT / math.sqrt(q.shape[-1]) - lse.unsqueeze(-1))  # "the backward will need them"
        ctx.save_for_backward(q, k, v, out, lse, weights)
        ctx.mask, ctx.block_size, ctx.causal = mask, block_size, causal
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse, _ = ctx.saved_tensors
        return (*attention_backward(q, k, v, out, lse, d_out, ctx.mask, ctx.block_size, ctx.causal), None, None, None)


class FlashSavesTheState(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None, block_size=128, causal=False):
        out, lse = online_softmax_attention(q, k, v, mask, block_size, causal=causal, return_lse=True)
        m = (q @ k.mT / math.sqrt(q.shape[-1])).amax(-1)  # the state's m and l, "as the forward had them"
        ctx.save_for_backward(q, k, v, out, m, torch.exp(lse - m))
        ctx.mask, ctx.block_size, ctx.causal = mask, block_size, causal
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, m, total = ctx.saved_tensors
        lse = m + torch.log(total)
        return (*attention_backward(q, k, v, out, lse, d_out, ctx.mask, ctx.block_size, ctx.causal), None, None, None)


class FlashForgetsCausal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None, block_size=128, causal=False):
        out, lse = online_softmax_attention(q, k, v, mask, block_size, causal=causal, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.block_size = mask, block_size
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        return (*attention_backward(q, k, v, out, lse, d_out, ctx.mask, ctx.block_size), None, None, None)


class FlashForgetsTheMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None, block_size=128, causal=False):
        out, lse = online_softmax_attention(q, k, v, mask, block_size, causal=causal, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.block_size, ctx.causal = block_size, causal  # "the mask is not differentiable"
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        return (*attention_backward(q, k, v, out, lse, d_out, None, ctx.block_size, ctx.causal), None, None, None)


class FlashGradientsSwapped(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None, block_size=128, causal=False):
        out, lse = online_softmax_attention(q, k, v, mask, block_size, causal=causal, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.block_size, ctx.causal = mask, block_size, causal
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, out, lse, d_out, ctx.mask, ctx.block_size, ctx.causal)
        return dk, dq, dv, None, None, None


class FlashByKeywords(torch.autograd.Function):
    """Correct: the same function, its calls by keyword and the saved tensors unpacked by name."""

    @staticmethod
    def forward(ctx, q, k, v, mask=None, block_size=128, causal=False):
        out, lse = online_softmax_attention(q, k, v, mask=mask, block_size=block_size, causal=causal,
                                            return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings = {"mask": mask, "block_size": block_size, "causal": causal}
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = attention_backward(q, k, v, out, lse, d_out, **ctx.settings)
        return (*grads, *([None] * 3))


# ================================================================ attention_kernel


@triton.jit
def kernel_key_tail_unmasked(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale  # the keys past T_k were loaded as 0: "masked already"
        if CAUSAL:
            scores = tl.where(keys[None, :] <= rows[:, None] + T_k - T_q, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_keys_untransposed(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, k) * scale  # q kᵀ, "the dot product of each query with each key"
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_causal_without_offset(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])  # "query i sees keys 0..i"
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_causal_in_tiles(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:  # the tiles' own indices
            keep = keep & (tl.arange(0, BLOCK_N)[None, :] <= tl.arange(0, BLOCK_M)[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_no_rescale(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(m == float("-inf"), 0.0, m)
        p = tl.exp(scores - safe[:, None])
        total = total + tl.sum(p, 1)  # the earlier tiles stay measured from their own maximum
        acc = acc + tl.dot(p.to(v.dtype), v)
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_unscaled(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k))  # scale left unused
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_not_normalised(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], acc.to(Out.dtype.element_ty),  # acc, as it is
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_nan_for_unseen_queries(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        p = tl.exp(scores - new_m[:, None])  # -inf - (-inf) for a query that has seen no key yet
        rescale = tl.exp(m - new_m)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / total[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_lse_without_maximum(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, tl.log(total), mask=rows < T_q)  # "the log of the sum"


@triton.jit
def kernel_lse_is_the_maximum(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m, mask=rows < T_q)  # the running maximum


@triton.jit
def kernel_float16_accumulator(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros_like(q)  # "an accumulator shaped like the queries": of their dtype too
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = (acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)).to(acc.dtype)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


@triton.jit
def kernel_with_exp2(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Correct: base-2 exponentials, as Triton's tutorial and FlashAttention-2 do (exp2 is one instruction): the
    scores in units of log 2, converted back for the log-sum-exp."""
    log2e = 1.4426950408889634
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * (scale * log2e)
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp2(scores - safe[:, None])
        rescale = tl.exp2(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, (m + tl.log2(total)) / log2e, mask=rows < T_q)


@triton.jit
def kernel_keys_loaded_transposed(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Correct: the keys' tile loaded as (D, BLOCK_N) by its pointers, so that tl.dot needs no transpose."""
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + cols[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        k_t = tl.load(K + (head * T_k + keys)[None, :] * D + cols[:, None], mask=keys[None, :] < T_k, other=0.0)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + cols[None, :], mask=keys[:, None] < T_k, other=0.0)
        scores = tl.dot(q, k_t) * scale
        keep = keys[None, :] < T_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None] + T_k - T_q)
        scores = tl.where(keep, scores, float("-inf"))
        new_m = tl.maximum(m, tl.max(scores, 1))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        p = tl.exp(scores - safe[:, None])
        rescale = tl.exp(m - safe)
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        m = new_m
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(Out + (head * T_q + rows)[:, None] * D + cols[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)


# ================================================================ flash_decode


def _part_state(q, k, v, mask):
    """The state (m, l, o) of one part of the keys, from its scores alone."""
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    m = scores.amax(-1, keepdim=True) if k.shape[-2] else torch.full((*scores.shape[:-1], 1), -math.inf)
    p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
    return m, p.sum(-1, keepdim=True), p @ v


def _decode_parts(k, n_splits, mask):
    if n_splits < 1:
        raise ValueError(f"n_splits must be at least 1, got {n_splits}")
    size = -(-k.shape[-2] // n_splits)
    mask = None if mask is None else mask.expand(*mask.shape[:-1], k.shape[-2])
    return size, mask


def decode_parts_averaged(q, k, v, n_splits, mask=None):
    size, mask = _decode_parts(k, n_splits, mask)
    outs = []
    for s in range(0, k.shape[-2], size):  # each part's attention, then their mean
        m, total, o = _part_state(q, k[..., s:s + size, :], v[..., s:s + size, :],
                                  None if mask is None else mask[..., s:s + size])
        outs.append(o / torch.where(total > 0, total, 1.0))
    return sum(outs) / len(outs)


def decode_parts_added(q, k, v, n_splits, mask=None):
    size, mask = _decode_parts(k, n_splits, mask)
    total, out = 0.0, 0.0
    for s in range(0, k.shape[-2], size):
        _, part_total, part_out = _part_state(q, k[..., s:s + size, :], v[..., s:s + size, :],
                                              None if mask is None else mask[..., s:s + size])
        total, out = total + part_total, out + part_out  # "the sums add up"
    return out / torch.where(total > 0, total, 1.0)


def decode_remainder_dropped(q, k, v, n_splits, mask=None):
    if n_splits < 1:
        raise ValueError(f"n_splits must be at least 1, got {n_splits}")
    size = k.shape[-2] // n_splits  # "equal parts"
    mask = None if mask is None else mask.expand(*mask.shape[:-1], k.shape[-2])
    state = None
    for i in range(n_splits):
        s = i * size
        part = _part_state(q, k[..., s:s + size, :], v[..., s:s + size, :],
                           None if mask is None else mask[..., s:s + size])
        state = part if state is None else merge_states(state, part)
    return state[2] / torch.where(state[1] > 0, state[1], 1.0)


def decode_first_part_only(q, k, v, n_splits, mask=None):
    size, mask = _decode_parts(k, n_splits, mask)
    states = [_part_state(q, k[..., s:s + size, :], v[..., s:s + size, :],
                          None if mask is None else mask[..., s:s + size]) for s in range(0, k.shape[-2], size)]
    merged = states[0]
    for state in states[1:]:
        merged = merge_states(state, state)  # "merged with the next one": the running state is lost
    merged = states[0] if len(states) == 1 else merge_states(states[0], (merged[0], merged[1] * 0, merged[2] * 0))
    return merged[2] / torch.where(merged[1] > 0, merged[1], 1.0)


def decode_whole_row(q, k, v, n_splits, mask=None):
    _decode_parts(k, n_splits, mask)
    scores = q @ k.mT / math.sqrt(q.shape[-1])  # "the parts are only a GPU matter"
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return torch.softmax(scores, -1).nan_to_num(0.0) @ v


def decode_empty_parts(q, k, v, n_splits, mask=None):
    size, mask = _decode_parts(k, n_splits, mask)
    state = None
    for i in range(n_splits):
        s = i * size
        k_part = k[..., s:s + size, :]
        scores = q @ k_part.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask[..., s:s + size], -math.inf)
        m = scores.max(-1, keepdim=True).values  # fails on a part without keys
        p = torch.exp(scores - torch.nan_to_num(m, neginf=0.0))
        part = (m, p.sum(-1, keepdim=True), p @ v[..., s:s + size, :])
        state = part if state is None else merge_states(state, part)
    return state[2] / torch.where(state[1] > 0, state[1], 1.0)


def decode_long_last_part(q, k, v, n_splits, mask=None):
    if n_splits < 1:
        raise ValueError(f"n_splits must be at least 1, got {n_splits}")
    size = max(k.shape[-2] // n_splits, 1)  # the remainder goes to the last part
    mask = None if mask is None else mask.expand(*mask.shape[:-1], k.shape[-2])
    bounds = [min(i * size, k.shape[-2]) for i in range(n_splits)] + [k.shape[-2]]
    state = None
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        part = _part_state(q, k[..., s:e, :], v[..., s:e, :], None if mask is None else mask[..., s:e])
        state = part if state is None else merge_states(state, part)
    return state[2] / torch.where(state[1] > 0, state[1], 1.0)


def decode_by_tree(q: Tensor, k: Tensor, v: Tensor, n_splits: int, mask: Tensor | None = None) -> Tensor:
    """Correct: the parts' states merged pairwise, as a GPU reduces them."""
    size, mask = _decode_parts(k, n_splits, mask)
    states = [_part_state(q, k[..., i * size:(i + 1) * size, :], v[..., i * size:(i + 1) * size, :],
                          None if mask is None else mask[..., i * size:(i + 1) * size]) for i in range(n_splits)]
    while len(states) > 1:
        states = [merge_states(*states[i:i + 2]) if i + 1 < len(states) else states[i]
                  for i in range(0, len(states), 2)]
    return states[0][2] / torch.where(states[0][1] > 0, states[0][1], 1.0)


def decode_by_online_softmax(q, k, v, n_splits, mask=None):
    """Correct: each part by online_softmax_attention with its log-sum-exp, as the state (lse, 1, out)."""
    size, mask = _decode_parts(k, n_splits, mask)
    state = None
    for i in range(n_splits):
        s = min(i * size, k.shape[-2])
        if s == k.shape[-2]:
            continue  # a part without keys changes nothing
        out, lse = online_softmax_attention(q, k[..., s:s + size, :], v[..., s:s + size, :],
                                            None if mask is None else mask[..., s:s + size], block_size=size,
                                            return_lse=True)
        part = (lse.unsqueeze(-1), torch.ones_like(lse).unsqueeze(-1), out)
        state = part if state is None else merge_states(state, part)
    return state[2] / torch.where(state[1] > 0, state[1], 1.0)


# ================================================================ concept checks


def positions_linear_without_cache(prompt_len, new_tokens, use_cache):
    return prompt_len + new_tokens - 1 if new_tokens else 0  # "the model remembers anyway"


def positions_last_token_fed(prompt_len, new_tokens, use_cache):
    if use_cache:
        return prompt_len + new_tokens
    return sum(prompt_len + i for i in range(new_tokens))


def positions_by_formula(prompt_len: int, new_tokens: int, use_cache: bool) -> int:
    if use_cache:
        return max(prompt_len + new_tokens - 1, 0) if new_tokens else 0
    return new_tokens * (2 * prompt_len + new_tokens - 1) // 2


def saved_with_the_weights(batch, heads, length, d_head):
    return batch * heads * (4 * length * d_head + length + length * length)  # "the backward needs the weights"


def saved_state_instead_of_lse(batch, heads, length, d_head):
    return batch * heads * (4 * length * d_head + 2 * length)  # m and l, "the state of the forward pass"


def saved_without_lse(batch, heads, length, d_head):
    return 4 * batch * heads * length * d_head  # "q, k, v and out"


def saved_without_the_inputs(batch, heads, length, d_head):
    return batch * heads * (length * d_head + length)  # "the inputs are the caller's, not the layer's"


def saved_as_tensors(batch: int, heads: int, length: int, d_head: int) -> int:
    shapes = [(batch, heads, length, d_head)] * 4 + [(batch, heads, length)]  # q, k, v, out, lse
    return sum(math.prod(shape) for shape in shapes)


def intensity_keys_only(n_heads, n_kv_heads, bytes_per_number):
    return 4 * n_heads / (n_kv_heads * bytes_per_number)  # "the keys are what is read"


def intensity_without_sharing(n_heads, n_kv_heads, bytes_per_number):
    return 4 * n_heads / (2 * n_heads * bytes_per_number)  # a key and a value "per head"


def intensity_multiply_adds(n_heads, n_kv_heads, bytes_per_number):
    return 2 * n_heads / (2 * n_kv_heads * bytes_per_number)  # "one FLOP per product"


def intensity_per_number(n_heads, n_kv_heads, bytes_per_number):
    return 4 * n_heads / (2 * n_kv_heads)  # "FLOPs per number read"


def intensity_as_a_ratio(n_heads: int, n_kv_heads: int, bytes_per_number: int) -> float:
    group = n_heads / n_kv_heads  # query heads per cached head: each reads the cache once for all of them
    return 2 * group / bytes_per_number


WRONG = [
    Entry("merge_states", "sums added without rescaling", merge_without_rescaling, "states added without rescaling",
          "merge_states_values", also=("parts added without rescaling",)),  # flash_decode merges with it
    Entry("merge_states", "only the first state rescaled", merge_rescales_one_side, "only one side rescaled",
          "merge_states_values"),
    Entry("merge_states", "o divided by l", merge_normalised, "output normalised in the state", "merge_states_values"),
    Entry("merge_states", "NaN when both are empty", merge_nan_when_empty, "NaN when both states are empty",
          "merge_states_empty", also=("NaN gradient on empty states", "NaN on fully masked rows",
                                      "NaN for queries that see no key")),
    Entry("merge_states", "measured from the minimum", merge_from_the_minimum, "minimum instead of maximum",
          "merge_states_values"),
    Entry("merge_states", "the first state rescaled in place", merge_in_place, "input modified in place",
          "merge_states_contract"),
    Entry("merge_states", "NaN replaced after the exponential", merge_nan_hidden_after, "NaN gradient on empty states",
          "merge_states_contract"),
    Entry("merge_states", "shapes not checked", merge_unchecked, "no ValueError for bad arguments",
          "merge_states_contract"),
    Entry("online_softmax_attention", "no rescaling", online_no_rescale, "running sums not rescaled",
          "online_softmax_attention_values"),
    Entry("online_softmax_attention", "the output rescaled, the sum not", online_rescales_the_output_only,
          "running sum not rescaled", "online_softmax_attention_values"),
    Entry("online_softmax_attention", "no 1/sqrt(d_k)", online_unscaled, "no scaling",
          "online_softmax_attention_values", also=("log-sum-exp of unscaled scores",)),
    Entry("online_softmax_attention", "the first block's maximum kept", online_maximum_of_the_first_block,
          "running maximum never raised", "online_softmax_attention_values"),
    Entry("online_softmax_attention", "NaN on fully masked rows", online_nan_on_dead_rows, "NaN on fully masked rows",
          "online_softmax_attention_masked", also=("NaN for queries that see no key",)),  # FlashAttention's gradients
    Entry("online_softmax_attention", "the whole score matrix", online_all_scores, "all scores at once",
          "online_softmax_attention_blocks"),
    Entry("online_softmax_attention", "blocks averaged", online_blocks_averaged, "blocks normalised separately",
          "online_softmax_attention_values"),
    Entry("online_softmax_attention", "q /= sqrt(d_k)", online_scales_q_in_place, "input modified in place",
          "online_softmax_attention_contract"),
    Entry("online_softmax_attention", "NaN of 0 / 0 replaced after the division", online_nan_hidden_after,
          "NaN gradient on masked rows", "online_softmax_attention_contract"),
    Entry("online_softmax_attention", "torch.bmm", online_with_bmm, "leading dimensions not broadcast",
          "online_softmax_attention_values"),
    Entry("online_softmax_attention", "blocks of 64 by default", online_blocks_of_64, "block_size default changed",
          "online_softmax_attention_blocks"),
    Entry("online_softmax_attention", "causal without the offset", online_causal_without_offset,
          "causal mask without the offset", "online_softmax_attention_causal"),
    Entry("online_softmax_attention", "causal mask from the index within the block", online_causal_in_block,
          "causal mask built from the block's own indices", "online_softmax_attention_causal"),
    Entry("online_softmax_attention", "causal ignored", online_causal_ignored, "causal mask ignored",
          "online_softmax_attention_causal"),
    Entry("online_softmax_attention", "lse taken before the last block", online_lse_before_the_last_block,
          "log-sum-exp of all but the last block", "online_softmax_attention_lse"),
    Entry("online_softmax_attention", "the maximum returned as lse", online_lse_is_the_maximum,
          "running maximum returned as the log-sum-exp", "online_softmax_attention_lse"),
    Entry("online_softmax_attention", "lse with a trailing axis of 1", online_lse_keeps_its_axis,
          "log-sum-exp with a trailing axis", "online_softmax_attention_lse"),
    Entry("online_softmax_attention", "log of the sum, without m", online_lse_without_maximum,
          "log ℓ without the maximum", "online_softmax_attention_lse"),
    Entry("online_softmax_attention", "float16 computed in float16", online_in_the_inputs_dtype,
          "float32 accumulation lost", "online_softmax_attention_lse", also=("log-sum-exp not float32",)),
    Entry("online_softmax_attention", "lse returned in float16", online_lse_in_the_inputs_dtype,
          "log-sum-exp not float32", "online_softmax_attention_lse"),
    Entry("attention_backward", "D from the block", backward_delta_from_the_block, "D from the block's weights",
          "attention_backward_values"),
    Entry("attention_backward", "no D", backward_without_delta, "D left out", "attention_backward_values"),
    Entry("attention_backward", "dK without 1/sqrt(d_k)", backward_dk_unscaled, "no 1/√d_k in dK",
          "attention_backward_values"),
    Entry("attention_backward", "dQ without 1/sqrt(d_k)", backward_dq_unscaled, "no 1/√d_k in dQ",
          "attention_backward_values"),
    Entry("attention_backward", "dK scaled twice", backward_dk_scaled_twice, "dK divided by √d_k twice",
          "attention_backward_values"),
    Entry("attention_backward", "weights from the block's maximum", backward_from_the_block_maximum,
          "weights rebuilt from the block's maximum", "attention_backward_values"),
    Entry("attention_backward", "dV = P dO", backward_dv_without_transpose, "dV from P instead of its transpose",
          "attention_backward_values"),
    Entry("attention_backward", "the last partial block dropped", backward_whole_blocks_only,
          "last partial block dropped", "attention_backward_values"),
    Entry("attention_backward", "not summed over broadcast axes", backward_not_summed,
          "gradient not summed over broadcast axes", "attention_backward_values"),
    Entry("attention_backward", "causal without the offset", backward_causal_without_offset,
          "causal mask without the offset", "attention_backward_masked"),
    Entry("attention_backward", "causal mask from the index within the block", backward_causal_in_block,
          "causal mask built from the block's own indices", "attention_backward_masked"),
    Entry("attention_backward", "mask left out", backward_mask_left_out, "mask left out of the backward",
          "attention_backward_masked", also=("mask not passed to the backward",)),
    Entry("attention_backward", "exp(S - lse) with lse = -inf", backward_nan_for_unseen_queries,
          "NaN for queries that see no key", "attention_backward_masked"),
    Entry("attention_backward", "the whole matrix", backward_all_scores, "all scores at once",
          "attention_backward_blocks"),
    Entry("attention_backward", "blocks of 64 by default", backward_blocks_of_64, "block_size default changed",
          "attention_backward_blocks"),
    Entry("attention_backward", "float16 computed in float16", backward_in_the_inputs_dtype,
          "float32 accumulation lost", "attention_backward_half"),
    Entry("attention_backward", "autograd through the forward pass", backward_by_autograd,
          "autograd used instead of the formulas", "attention_backward_contract",
          also=("float32 accumulation lost",)),  # autograd's D comes from its own float32 output, not the given one
    Entry("attention_backward", "lse fixed in place", backward_in_place, "input modified in place",
          "attention_backward_contract"),
    Entry("attention_backward", "shapes not checked", backward_unchecked, "no ValueError for bad arguments",
          "attention_backward_contract"),
    Entry("attention_backward", "everything in float32", backward_in_float32, "dtype not kept",
          "attention_backward_contract"),
    Entry("FlashAttention", "three gradients for six inputs", FlashReturnsThreeGradients, "not one gradient per input",
          "FlashAttention_gradcheck"),
    Entry("FlashAttention", "the weights saved", FlashSavesTheWeights, "attention weights saved",
          "FlashAttention_saved"),
    Entry("FlashAttention", "m and l saved", FlashSavesTheState, "log-sum-exp not saved", "FlashAttention_saved"),
    Entry("FlashAttention", "causal not kept for the backward", FlashForgetsCausal,
          "causal not passed to the backward", "FlashAttention_gradcheck", also=("gradcheck failed",)),
    Entry("FlashAttention", "the mask not kept for the backward", FlashForgetsTheMask,
          "mask not passed to the backward", "FlashAttention_gradcheck", also=("gradcheck failed",)),
    Entry("FlashAttention", "dk and dq swapped", FlashGradientsSwapped, "gradients in the wrong order",
          "FlashAttention_gradcheck", also=("gradcheck failed",)),
    Entry("attention_kernel", "keys past T_k scored 0", kernel_key_tail_unmasked, "key tail not masked",
          "attention_kernel_tail"),
    Entry("attention_kernel", "tl.dot(q, k)", kernel_keys_untransposed, "tl.dot on untransposed keys",
          "attention_kernel_values"),
    Entry("attention_kernel", "causal without the offset", kernel_causal_without_offset,
          "causal mask without the offset", "attention_kernel_causal"),
    Entry("attention_kernel", "causal mask from the tiles' indices", kernel_causal_in_tiles,
          "causal mask from the tiles' own indices", "attention_kernel_causal"),
    Entry("attention_kernel", "no rescaling", kernel_no_rescale, "running sums not rescaled",
          "attention_kernel_values"),
    Entry("attention_kernel", "scale unused", kernel_unscaled, "no scaling", "attention_kernel_values"),
    Entry("attention_kernel", "acc stored without dividing", kernel_not_normalised, "output not normalised",
          "attention_kernel_values"),
    Entry("attention_kernel", "exp(-inf - (-inf))", kernel_nan_for_unseen_queries, "NaN for queries that see no key",
          "attention_kernel_lse"),
    Entry("attention_kernel", "Lse = log l", kernel_lse_without_maximum, "log ℓ stored without the maximum",
          "attention_kernel_lse"),
    Entry("attention_kernel", "Lse = m", kernel_lse_is_the_maximum, "running maximum stored as the log-sum-exp",
          "attention_kernel_lse"),
    Entry("attention_kernel", "acc = tl.zeros_like(q)", kernel_float16_accumulator, "float32 accumulation lost",
          "attention_kernel_half"),
    Entry("flash_decode", "parts averaged", decode_parts_averaged, "parts averaged", "flash_decode_values"),
    Entry("flash_decode", "parts added", decode_parts_added, "parts added without rescaling", "flash_decode_values"),
    Entry("flash_decode", "T_k // n_splits per part", decode_remainder_dropped,
          "keys after the last whole part dropped", "flash_decode_values"),
    Entry("flash_decode", "the running state lost", decode_first_part_only, "only the first part attended",
          "flash_decode_values"),
    Entry("flash_decode", "the whole row at once", decode_whole_row, "all scores at once", "flash_decode_splits"),
    Entry("flash_decode", "max of a part without keys", decode_empty_parts, "parts without keys not handled",
          "flash_decode_splits"),
    Entry("flash_decode", "the remainder in the last part", decode_long_last_part, "parts longer than they should be",
          "flash_decode_splits"),
    Entry("positions_processed", "linear without a cache", positions_linear_without_cache,
          "no cache taken to be linear", "positions_processed_answer"),
    Entry("positions_processed", "the last token fed too", positions_last_token_fed, "last token fed too",
          "positions_processed_answer"),
    Entry("saved_for_backward", "the weights too", saved_with_the_weights, "the weights saved too",
          "saved_for_backward_answer"),
    Entry("saved_for_backward", "m and l", saved_state_instead_of_lse, "m and ℓ saved instead of the log-sum-exp",
          "saved_for_backward_answer"),
    Entry("saved_for_backward", "no log-sum-exp", saved_without_lse, "log-sum-exp not counted",
          "saved_for_backward_answer"),
    Entry("saved_for_backward", "only out and lse", saved_without_the_inputs, "the inputs not counted",
          "saved_for_backward_answer"),
    Entry("decode_flops_per_byte", "only the keys", intensity_keys_only, "only the keys counted",
          "decode_flops_per_byte_answer"),
    Entry("decode_flops_per_byte", "a key and a value per query head", intensity_without_sharing,
          "key/value heads taken to be the query heads", "decode_flops_per_byte_answer"),
    Entry("decode_flops_per_byte", "one FLOP per multiply-add", intensity_multiply_adds,
          "a multiply-add counted as one FLOP", "decode_flops_per_byte_answer"),
    Entry("decode_flops_per_byte", "per number", intensity_per_number, "numbers counted instead of bytes",
          "decode_flops_per_byte_answer"),
]

CORRECT = [
    Entry("merge_states", "the larger and the smaller state, by torch.where", merge_by_cases),
    Entry("merge_states", "both states stacked", merge_stacked),
    Entry("online_softmax_attention", "split, einsum and torch.where", online_with_split),
    Entry("attention_backward", "blocks of keys and of queries", backward_by_query_and_key_blocks),
    Entry("attention_backward", "the same loop, by a helper", backward_with_einsum),
    Entry("FlashAttention", "by keyword", FlashByKeywords),
    Entry("attention_kernel", "exp2 and log2", kernel_with_exp2),
    Entry("attention_kernel", "keys loaded transposed", kernel_keys_loaded_transposed),
    Entry("flash_decode", "merged as a tree", decode_by_tree),
    Entry("flash_decode", "online_softmax_attention per part", decode_by_online_softmax),
    Entry("positions_processed", "closed form", positions_by_formula),
    Entry("saved_for_backward", "from the shapes", saved_as_tensors),
    Entry("decode_flops_per_byte", "by the group size", intensity_as_a_ratio),
]
