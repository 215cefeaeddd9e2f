"""Chapter 9 reference: attention at the speed of the hardware, FlashAttention from scratch.

The reading order is the dependency order: ``merge_states`` (two partial softmax states combined into one) →
``online_softmax_attention`` (attention over the keys block by block, never the ``T_q × T_k`` matrix; with
``return_lse`` the log-sum-exp that the backward pass needs) → ``attention_backward`` (the gradients of attention
by hand, block by block, recomputing each block of scores from the log-sum-exp) → ``FlashAttention`` (an
autograd function made of the two: it saves ``q``, ``k``, ``v``, the output and the log-sum-exp, nothing of size
``T_q × T_k``) → ``attention_kernel`` (the forward pass as a Triton kernel, one program per block of queries) →
``flash_decode`` (one query's keys split into parts whose states are merged: Flash-Decoding).

Masks are boolean and ``True`` means "may attend"; ``causal=True`` adds Chapter 2's causal mask, lined up at the
last key (query ``i`` may attend key ``j`` when ``j <= i + (T_k - T_q)``), built block by block from the positions
rather than as a ``T_q × T_k`` tensor. A query that may attend no key gets an all-zero output, a log-sum-exp of
``-inf`` and zero gradients, never NaN. In the forward and the backward pass inputs in float16 or bfloat16 are
computed in float32, as FlashAttention accumulates, and the results returned in the inputs' dtype (the log-sum-exp
stays float32); the kernel keeps its running state in float32 too.

Shapes: ``q (..., T_q, d_k)``, ``k (..., T_k, d_k)``, ``v (..., T_k, d_v)``, whose leading dimensions broadcast;
``out (..., T_q, d_v)``; ``lse (..., T_q)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attention_course.flash import launch_attention, tl, triton
from solutions.self_attention import _check_mask, _check_pair

__all__ = [
    "merge_states",
    "online_softmax_attention",
    "attention_backward",
    "FlashAttention",
    "attention_kernel",
    "flash_decode",
    "flash_attention",  # FlashAttention.apply with keyword arguments
    "triton_attention",  # attention_kernel, launched
    "positions_processed",  # concept checks
    "saved_for_backward",
    "decode_flops_per_byte",
]

State = tuple[Tensor, Tensor, Tensor]
HALF = (torch.float16, torch.bfloat16)


def merge_states(a: State, b: State) -> State:
    r"""The softmax state of two sets of keys, from the state of each: how split keys are put back together.

    For one query and a set of keys ``J`` with scores ``s_j``, the state ``(m, ℓ, o)`` is

    .. math:: m = \max_{j \in J} s_j,\qquad \ell = \sum_{j \in J} e^{s_j - m},\qquad
              o = \sum_{j \in J} e^{s_j - m}\, v_j

    so that ``o / ℓ`` is the attention over ``J``. The state of ``J_a ∪ J_b`` rescales both sums to the larger
    maximum:

    .. math:: m = \max(m_a, m_b),\qquad \ell = \ell_a e^{m_a - m} + \ell_b e^{m_b - m},\qquad
              o = o_a e^{m_a - m} + o_b e^{m_b - m}

    Every exponent is ``<= 0``, so nothing overflows. The merge is associative and commutative: keys split into
    parts in any way, the parts' states merged in any grouping, give the state of all of them (up to rounding).
    That is what lets FlashAttention walk the keys block by block (:func:`online_softmax_attention`) and
    Flash-Decoding split one query's keys across processors (:func:`flash_decode`). The state of no key, or of
    keys that are all masked, is ``(-inf, 0, 0)``: merging with it changes nothing, and two of them merge to
    another, never NaN (where both maxima are ``-inf`` the sums are shifted by 0, not by ``-inf``).

    Args:
        a, b: states ``(m, ℓ, o)``: ``m`` and ``ℓ`` ``(..., T_q, 1)``, ``o`` ``(..., T_q, d_v)``, not normalised;
            the two states of the same shapes.

    Returns:
        ``(m, ℓ, o)`` of the same shapes: the state of both sets of keys. The inputs are not modified.

    Raises:
        ValueError: if a state is not three tensors of those shapes, or the two states' shapes differ.
    """
    for name, state in (("a", a), ("b", b)):
        if not (isinstance(state, (tuple, list)) and len(state) == 3 and all(isinstance(t, Tensor) for t in state)):
            raise ValueError(f"state {name} must be three tensors (m, l, o), got {type(state).__name__}")
        m, total, out = state
        if m.dim() < 1 or m.shape[-1] != 1 or total.shape != m.shape or out.shape[:-1] != m.shape[:-1]:
            raise ValueError(f"state {name} must hold m and l of shape (..., T_q, 1) and o (..., T_q, d_v); got m "
                             f"{tuple(m.shape)}, l {tuple(total.shape)}, o {tuple(out.shape)}")
    if [t.shape for t in a] != [t.shape for t in b]:
        raise ValueError(f"the two states must have the same shapes; got {[tuple(t.shape) for t in a]} and "
                         f"{[tuple(t.shape) for t in b]}")
    (m_a, total_a, out_a), (m_b, total_b, out_b) = a, b
    m = torch.maximum(m_a, m_b)  # (..., T_q, 1)
    shift = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # both states empty: shift by 0, not -inf
    scale_a, scale_b = torch.exp(m_a - shift), torch.exp(m_b - shift)  # (..., T_q, 1), <= 1; 0 for an empty state
    return m, total_a * scale_a + total_b * scale_b, out_a * scale_a + out_b * scale_b


# ---------------------------------------------------------------- shared by the forward and the backward pass

def _check_inputs(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block_size: int) -> torch.Size:
    """Check the arguments of attention; return the broadcast leading shape."""
    _check_pair(q, k)
    if v.dim() < 2 or v.shape[-2] != k.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys T_k (axis -2): k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer of at least 1, got {block_size!r}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} "
                         f"do not broadcast") from None
    if mask is not None:
        _check_mask(mask, torch.Size((*batch, q.shape[-2], k.shape[-2])))
    return batch


def _working_dtype(*tensors: Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(the dtype of the results, the dtype to compute in): float16 and bfloat16 are computed in float32."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype, (torch.float32 if dtype in HALF else dtype)


def _block_allowed(mask: Tensor | None, causal: bool, t_q: int, t_k: int, start: int, end: int,
                   device: torch.device) -> Tensor | None:
    """Which keys ``start:end`` each query may attend: the block of ``mask`` (broadcast to ``T_k`` keys) and, with
    ``causal``, key ``j <= i + (T_k - T_q)`` built from the positions; None when every key is allowed."""
    allowed = None if mask is None else mask.expand(*mask.shape[:-1], t_k)[..., start:end]  # (..., T_q | 1, blk)
    if causal:
        rows = torch.arange(t_q, device=device)[:, None] + (t_k - t_q)  # (T_q, 1): the last key each query sees
        keys = torch.arange(start, end, device=device)[None, :]  # (1, blk): the block's key positions
        lower = keys <= rows  # (T_q, blk)
        allowed = lower if allowed is None else allowed & lower
    return allowed


def _block_scores(q: Tensor, k_block: Tensor, allowed: Tensor | None) -> Tensor:
    """``q k_blockᵀ`` (``q`` already scaled by ``1/√d_k``), ``-inf`` where a key may not be attended."""
    scores = q @ k_block.transpose(-2, -1)  # (..., T_q, d_k) @ (..., d_k, blk) -> (..., T_q, blk)
    return scores if allowed is None else scores.masked_fill(~allowed, float("-inf"))


# ---------------------------------------------------------------- the forward pass

def online_softmax_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, block_size: int = 128,
                             causal: bool = False, return_lse: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    r"""Attention over the keys block by block, with a running softmax: FlashAttention's online softmax.

    Each query keeps the state ``(m, ℓ, o)`` of the keys seen so far (see :func:`merge_states`): the largest
    score ``m``, the sum of the exponentials ``ℓ = Σ e^{s_j - m}`` and their weighted sum of values
    ``o = Σ e^{s_j - m} v_j``. Each block of scores ``s_j = q k_j / sqrt(d_k)`` (``-inf`` where masked) makes a
    state of its own, which is merged into the running one:

    .. math:: (m, \ell, o) \leftarrow (m, \ell, o) \oplus \left(\max_j s_j,\ \sum_j e^{s_j - \max s},\
              \sum_j e^{s_j - \max s} v_j\right),\qquad \mathrm{out} = o / \ell,\qquad
              \mathrm{lse} = m + \log \ell

    After the last block the state is that of all the keys, so ``o / ℓ`` is exactly ``softmax(scores) @ v``
    (``o / ℓ`` does not depend on the reference ``m``), though only ``(..., T_q, block_size)`` scores ever existed
    at once, never the ``(..., T_q, T_k)`` matrix. ``lse = log Σ_j e^{s_j}`` is all the backward pass needs to
    rebuild any block of the weights, ``p_j = e^{s_j - lse}`` (:func:`attention_backward`). FlashAttention (Dao et
    al., 2022) runs this loop inside one GPU kernel (:func:`attention_kernel`), on blocks small enough for the
    chip's on-chip memory, and never writes the score matrix to the GPU's main memory.

    Args:
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``; the leading dimensions broadcast.
        mask: optional boolean tensor broadcastable to ``(..., T_q, T_k)``, ``True`` = may attend.
        block_size: keys per block, ``>= 1``; it need not divide ``T_k``.
        causal: also apply Chapter 2's causal mask (key ``j`` for query ``i`` when ``j <= i + (T_k - T_q)``),
            built for each block from the positions.
        return_lse: also return the log-sum-exp of each query's scores.

    Returns:
        ``out (..., T_q, d_v)`` in the inputs' dtype, equal to
        :func:`~solutions.self_attention.scaled_dot_product_attention`'s up to rounding; with ``return_lse``,
        ``(out, lse)``, ``lse (..., T_q)``, float32 for float16 and bfloat16 inputs and the inputs' dtype
        otherwise. A query that may attend no key gets zeros and ``lse = -inf``, never NaN.

    Raises:
        ValueError: on mismatched ``d_k``, keys and values of different length, leading dimensions that do not
            broadcast, a mask that is not boolean or does not broadcast to the scores, or ``block_size < 1``.
    """
    batch = _check_inputs(q, k, v, mask, block_size)
    dtype, work = _working_dtype(q, k, v)
    t_q, t_k = q.shape[-2], k.shape[-2]
    q = q.to(work) / math.sqrt(q.shape[-1])  # scale once, not once per block; float32 for half inputs
    state = (q.new_full((*batch, t_q, 1), float("-inf")), q.new_zeros((*batch, t_q, 1)),
             q.new_zeros((*batch, t_q, v.shape[-1])))  # the state of no key yet
    for start in range(0, t_k, block_size):
        end = min(start + block_size, t_k)
        allowed = _block_allowed(mask, causal, t_q, t_k, start, end, q.device)
        scores = _block_scores(q, k[..., start:end, :].to(work), allowed)  # (..., T_q, blk)
        scores = scores.expand(*batch, t_q, end - start)  # a view: the state of every query, broadcast
        m = scores.amax(dim=-1, keepdim=True)  # (..., T_q, 1); -inf where the block's keys are all masked
        p = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))  # (..., T_q, blk), 0 if masked
        block = (m, p.sum(dim=-1, keepdim=True), p @ v[..., start:end, :].to(work))  # (..., T_q, blk) @ (.., blk, d_v)
        state = merge_states(state, block)
    m, total, o = state
    out = (o / torch.where(total > 0, total, torch.ones_like(total))).to(dtype)  # fully masked rows: 0 / 1 = 0
    if not return_lse:
        return out
    lse = (m + torch.log(total)).squeeze(-1)  # (..., T_q); log 0 = -inf where no key was seen
    return out, lse


# ---------------------------------------------------------------- the backward pass

def attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor,
                       mask: Tensor | None = None, block_size: int = 128,
                       causal: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    r"""The gradients of attention with respect to ``q``, ``k`` and ``v``, by hand, block by block.

    With ``S = q kᵀ / √d_k`` (``-inf`` where masked), ``P = softmax(S)`` and ``O = P v``, the gradient ``dO`` of a
    loss with respect to ``O`` gives

    .. math:: dV = P^\top dO,\qquad dP = dO\, V^\top,\qquad dS = P \odot (dP - D),\quad
              D = \mathrm{rowsum}(dO \odot O),\qquad dQ = dS\, K / \sqrt{d_k},\qquad dK = dS^\top Q / \sqrt{d_k}

    ``D_i = Σ_j P_ij dP_ij = dO_i · Σ_j P_ij v_j = dO_i · O_i``: it comes from the output, so no row of ``P`` is
    ever needed whole. Each block of keys rebuilds its weights from the saved log-sum-exp, ``P = e^{S - lse}``,
    adds its share to ``dQ`` and gives its own rows of ``dK`` and ``dV``: no tensor of more than ``block_size``
    scores per query exists, as in the forward pass (:func:`online_softmax_attention`).

    The gradients are computed by these formulas, without autograd: the function works under
    ``torch.no_grad()``, and its results carry no graph.

    Args:
        q, k, v: as for :func:`online_softmax_attention`; their leading dimensions broadcast.
        out: ``(..., T_q, d_v)``, the forward pass's output; lse: ``(..., T_q)``, its log-sum-exp (``-inf`` for a
            query that attends no key); d_out: ``(..., T_q, d_v)``, the gradient of the loss with respect to out.
        mask, block_size, causal: as given to the forward pass.

    Returns:
        ``(dq, dk, dv)`` of the shapes of ``q``, ``k`` and ``v`` (summed over the leading dimensions along which an
        input was broadcast), in their dtypes; float16 and bfloat16 are computed in float32. A query that attends
        no key contributes nothing.

    Raises:
        ValueError: as :func:`online_softmax_attention`, and when ``out`` or ``d_out`` is not
            ``(..., T_q, d_v)`` or ``lse`` not ``(..., T_q)`` for the broadcast leading dimensions.
    """
    batch = _check_inputs(q, k, v, mask, block_size)
    t_q, t_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    for name, t, shape in (("out", out, (*batch, t_q, d_v)), ("d_out", d_out, (*batch, t_q, d_v)),
                           ("lse", lse, (*batch, t_q))):
        if not isinstance(t, Tensor) or tuple(t.shape) != shape:
            raise ValueError(f"{name} must have the shape {shape} for q {tuple(q.shape)}, k {tuple(k.shape)} and "
                             f"v {tuple(v.shape)}; got {tuple(getattr(t, 'shape', ()))}")
    _, work = _working_dtype(q, k, v, out, d_out)
    with torch.no_grad():
        scale = 1.0 / math.sqrt(q.shape[-1])
        qs = q.to(work) * scale  # (..., T_q, d_k): scaled once
        d_out_w = d_out.to(work)
        delta = (d_out_w * out.to(work)).sum(dim=-1, keepdim=True)  # (..., T_q, 1): D = rowsum(dO ⊙ O)
        lse_w = lse.to(work).unsqueeze(-1)  # (..., T_q, 1)
        shift = torch.where(torch.isfinite(lse_w), lse_w, torch.zeros_like(lse_w))  # no key seen: p = e^{-inf} = 0
        dq = torch.zeros((*batch, t_q, q.shape[-1]), dtype=work, device=q.device)
        dk_blocks, dv_blocks = [], []
        for start in range(0, t_k, block_size):
            end = min(start + block_size, t_k)
            k_blk, v_blk = k[..., start:end, :].to(work), v[..., start:end, :].to(work)  # (..., blk, d)
            allowed = _block_allowed(mask, causal, t_q, t_k, start, end, q.device)
            p = torch.exp(_block_scores(qs, k_blk, allowed) - shift)  # (..., T_q, blk): this block's weights
            dv_blocks.append(p.transpose(-2, -1) @ d_out_w)  # (..., blk, T_q) @ (..., T_q, d_v) -> (..., blk, d_v)
            dp = d_out_w @ v_blk.transpose(-2, -1)  # (..., T_q, d_v) @ (..., d_v, blk) -> (..., T_q, blk)
            ds = p * (dp - delta)  # (..., T_q, blk)
            dq = dq + ds @ k_blk * scale  # (..., T_q, blk) @ (..., blk, d_k) -> (..., T_q, d_k)
            dk_blocks.append(ds.transpose(-2, -1) @ qs)  # (..., blk, T_q) @ (..., T_q, d_k): qs holds the 1/√d_k
        dk = torch.cat(dk_blocks, dim=-2)  # (..., T_k, d_k)
        dv = torch.cat(dv_blocks, dim=-2)  # (..., T_k, d_v)
        return (dq.sum_to_size(q.shape).to(q.dtype), dk.sum_to_size(k.shape).to(k.dtype),
                dv.sum_to_size(v.shape).to(v.dtype))


class FlashAttention(torch.autograd.Function):
    """Attention whose forward pass is :func:`online_softmax_attention` and whose backward pass is
    :func:`attention_backward`: FlashAttention's memory, in PyTorch.

    ``FlashAttention.apply(q, k, v, mask=None, block_size=128, causal=False)`` returns ``out``. The forward pass
    saves for the backward only ``q``, ``k``, ``v``, ``out`` and the log-sum-exp (with the mask and the two
    settings), nothing of size ``T_q × T_k``: autograd through :func:`online_softmax_attention` would keep every
    block's weights, the whole matrix again. The backward pass recomputes each block from the log-sum-exp.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, block_size: int = 128,
                causal: bool = False) -> Tensor:
        out, lse = online_softmax_attention(q, k, v, mask, block_size, causal, return_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.block_size, ctx.causal = mask, block_size, causal
        return out

    @staticmethod
    def backward(ctx, d_out: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None, None]:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, out, lse, d_out, ctx.mask, ctx.block_size, ctx.causal)
        return dq, dk, dv, None, None, None  # no gradient for the mask, block_size and causal


def flash_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, block_size: int = 128,
                    causal: bool = False) -> Tensor:
    """``FlashAttention.apply`` with keyword arguments (``apply`` takes them in order only)."""
    return FlashAttention.apply(q, k, v, mask, block_size, causal)


# ---------------------------------------------------------------- the forward pass as a Triton kernel

@triton.jit
def attention_kernel(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr) -> None:
    """One program: ``BLOCK_M`` queries of one head, against every block of ``BLOCK_N`` keys, with the online
    softmax in float32; writes their outputs to ``Out`` and their log-sum-exps to ``Lse``.

    ``Q`` and ``Out`` point to ``(B * H, T_q, D)``, ``K`` and ``V`` to ``(B * H, T_k, D)``, contiguous; ``Lse`` to
    ``(B * H, T_q)`` float32. Launched by :func:`attention_course.flash.launch_attention`, grid
    ``(cdiv(T_q, BLOCK_M), B * H)``. Rows and keys past the end (the last, partial tiles) are masked: loaded as 0,
    scored ``-inf``, never stored.
    """
    block, head = tl.program_id(0), tl.program_id(1)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,): this program's queries
    dims = tl.arange(0, D)  # (D,)
    q = tl.load(Q + (head * T_q + rows)[:, None] * D + dims[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # the state of no key: (-inf, 0, 0), in float32
    total = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, T_k, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        in_range = keys[:, None] < T_k  # the last tile may run past T_k
        k = tl.load(K + (head * T_k + keys)[:, None] * D + dims[None, :], mask=in_range, other=0.0)  # (BLOCK_N, D)
        v = tl.load(V + (head * T_k + keys)[:, None] * D + dims[None, :], mask=in_range, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale  # (BLOCK_M, D) @ (D, BLOCK_N) -> (BLOCK_M, BLOCK_N), float32
        allowed = keys[None, :] < T_k
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None] + (T_k - T_q))
        scores = tl.where(allowed, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))  # (BLOCK_M,)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: shift by 0, not -inf
        p = tl.exp(scores - shift[:, None])  # (BLOCK_M, BLOCK_N), 0 where not allowed
        rescale = tl.exp(m - shift)  # (BLOCK_M,): the running sums measured from the new maximum
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)  # (BLOCK_M, BLOCK_N) @ (BLOCK_N, D), float32
        m = m_new
    out = acc / tl.where(total > 0, total, 1.0)[:, None]  # a query that sees no key: 0 / 1 = 0
    tl.store(Out + (head * T_q + rows)[:, None] * D + dims[None, :], out.to(Out.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(Lse + head * T_q + rows, m + tl.log(total), mask=rows < T_q)  # log 0 = -inf where no key was seen


def triton_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, block_m: int = 32,
                     block_n: int = 32) -> tuple[Tensor, Tensor]:
    """:func:`attention_kernel` launched over ``q (B, H, T_q, D)``, ``k``, ``v (B, H, T_k, D)``: ``(out, lse)``
    (see :func:`attention_course.flash.launch_attention`)."""
    return launch_attention(attention_kernel, q, k, v, causal, block_m, block_n)


# ---------------------------------------------------------------- Flash-Decoding

def flash_decode(q: Tensor, k: Tensor, v: Tensor, n_splits: int, mask: Tensor | None = None) -> Tensor:
    r"""Attention of a few queries over a long cache, its keys split into ``n_splits`` parts: Flash-Decoding.

    A decoding step has one query per sequence and head, too few to keep a GPU busy block by block. Flash-Decoding
    (Dao et al., 2023) splits the keys instead: each part's state ``(m, ℓ, o)`` is computed on its own (in
    parallel, on a GPU), and the states are merged with :func:`merge_states`. The parts are consecutive, of
    ``ceil(T_k / n_splits)`` keys each (the last may be shorter, and a part past the end has no key, state
    ``(-inf, 0, 0)``).

    Args:
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``; the leading dimensions broadcast.
        n_splits: how many parts, ``>= 1``.
        mask: optional boolean tensor broadcastable to ``(..., T_q, T_k)``, ``True`` = may attend.

    Returns:
        ``out (..., T_q, d_v)``, equal to attention over all the keys; zeros for a query that may attend none.

    Raises:
        ValueError: as :func:`online_softmax_attention`, or ``n_splits < 1``.
    """
    if isinstance(n_splits, bool) or not isinstance(n_splits, int) or n_splits < 1:
        raise ValueError(f"n_splits must be an integer of at least 1, got {n_splits!r}")
    batch = _check_inputs(q, k, v, mask, 1)
    t_q, t_k = q.shape[-2], k.shape[-2]
    size = -(-t_k // n_splits)  # ceil(T_k / n_splits) keys per part
    q = q / math.sqrt(q.shape[-1])
    states = []
    for part in range(n_splits):  # independent of each other: each could run on its own processor
        start, end = min(part * size, t_k), min((part + 1) * size, t_k)
        scores = _block_scores(q, k[..., start:end, :], _block_allowed(mask, False, t_q, t_k, start, end, q.device))
        scores = scores.expand(*batch, t_q, end - start)  # (..., T_q, part)
        m = scores.amax(dim=-1, keepdim=True) if end > start else q.new_full((*batch, t_q, 1), float("-inf"))
        p = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))  # (..., T_q, part)
        states.append((m, p.sum(dim=-1, keepdim=True), p @ v[..., start:end, :]))  # the part's state
    while len(states) > 1:  # merged pairwise, as a tree: the order does not matter
        states = [merge_states(*states[i:i + 2]) if i + 1 < len(states) else states[i]
                  for i in range(0, len(states), 2)]
    _, total, out = states[0]
    return out / torch.where(total > 0, total, torch.ones_like(total))


# ---------------------------------------------------------------- concept checks


def positions_processed(prompt_len: int, new_tokens: int, use_cache: bool) -> int:
    """The positions Chapter 7's ``generate`` runs the model over to add ``new_tokens`` tokens to a prompt of
    ``prompt_len``: with a cache the prompt once, then each new token but the last (it is only drawn, never fed);
    without, the whole sequence at every step, ``prompt_len``, then one more, and so on."""
    if new_tokens == 0:
        return 0
    if use_cache:
        return prompt_len + new_tokens - 1
    return new_tokens * prompt_len + new_tokens * (new_tokens - 1) // 2


def saved_for_backward(batch: int, heads: int, length: int, d_head: int) -> int:
    """The numbers :class:`FlashAttention`'s forward pass keeps for the backward pass, for self-attention over
    ``length`` positions: ``q``, ``k``, ``v`` and ``out`` (``batch × heads × length × d_head`` each) and one
    log-sum-exp per query; never the ``length × length`` weights."""
    return 4 * batch * heads * length * d_head + batch * heads * length


def decode_flops_per_byte(n_heads: int, n_kv_heads: int, bytes_per_number: int) -> float:
    """The arithmetic intensity of attention in one decoding step over a cache of ``T`` positions: ``q · k_j`` and
    ``p_j v_j`` for every query head are ``4 · n_heads · T · d_head`` FLOPs (a multiply and an add each), over
    the ``2 · n_kv_heads · T · d_head`` cached numbers read once, keys and values; ``T`` and ``d_head`` cancel."""
    return 4 * n_heads / (2 * n_kv_heads * bytes_per_number)
