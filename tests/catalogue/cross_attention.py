"""Chapter 3 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names
the exercise notebook gives (``math``, ``torch``, ``F``, ``nn``, ``Tensor`` and
the ``attention`` helper of its setup cell, repeated here) and, where the
exercise builds on an earlier one, that earlier exercise (``shift_right``),
which the catalogue tests supply from the reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, MODIFIED_IN_PLACE, NO_VALUE_ERROR
from catalogue import Entry
from solutions.cross_attention import shift_right

NEG_INF = float("-inf")


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The notebook's given helper: Chapter 1's attention built from PyTorch's built-ins."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return out, torch.softmax(scores, dim=-1).nan_to_num(0.0)


# ================================================================ CrossAttention


class _Projections(nn.Module):
    """The learner's ``__init__``, shared by the CrossAttention entries whose mistake is in ``forward``."""

    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.d_model = d_model
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_k if d_v is None else d_v, bias=bias)

    def check(self, x, memory):
        if x.shape[-1] != self.d_model or memory.shape[-1] != self.d_model:
            raise ValueError(f"x {tuple(x.shape)} and memory {tuple(memory.shape)} must end in {self.d_model}")
        if x.shape[0] != memory.shape[0]:
            raise ValueError(f"batch sizes differ: x {tuple(x.shape)}, memory {tuple(memory.shape)}")


class CrossAttentionSelf(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        return attention(self.w_q(x), self.w_k(x), self.w_v(x), memory_mask)


class CrossAttentionQueriesFromMemory(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        return attention(self.w_q(memory), self.w_k(x), self.w_v(x))


class CrossAttentionEncoderOnly(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        return attention(self.w_q(memory), self.w_k(memory), self.w_v(memory), memory_mask)


class CrossAttentionDropsMask(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        return attention(self.w_q(x), self.w_k(memory), self.w_v(memory))


class CrossAttentionInvertedMask(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        if memory_mask is not None:
            memory_mask = ~memory_mask  # "True marks the padding"
        return attention(self.w_q(x), self.w_k(memory), self.w_v(memory), memory_mask)


class CrossAttentionRawValues(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        return attention(self.w_q(x), self.w_k(memory), memory, memory_mask)


class CrossAttentionSwappedKV(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        return attention(self.w_q(x), self.w_v(memory), self.w_k(memory), memory_mask)


class CrossAttentionFrozenEncoder(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        memory = memory.detach()  # "the encoder output is fixed"
        return attention(self.w_q(x), self.w_k(memory), self.w_v(memory), memory_mask)


class CrossAttentionDetachedQueryWeight(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        q = F.linear(x, self.w_q.weight.detach(), self.w_q.bias)  # "w_q is only a change of basis"
        return attention(q, self.w_k(memory), self.w_v(memory), memory_mask)


class CrossAttentionNoBatchCheck(_Projections):
    def forward(self, x, memory, memory_mask=None):
        if x.shape[-1] != self.d_model or memory.shape[-1] != self.d_model:
            raise ValueError(f"x {tuple(x.shape)} and memory {tuple(memory.shape)} must end in {self.d_model}")
        return attention(self.w_q(x), self.w_k(memory), self.w_v(memory), memory_mask)


class CrossAttentionMemoryWidthOnly(_Projections):
    def forward(self, x, memory, memory_mask=None):
        if memory.shape[-1] != self.d_model:  # x's width is never checked
            raise ValueError(f"memory {tuple(memory.shape)} must end in d_model={self.d_model}")
        if x.shape[0] != memory.shape[0]:
            raise ValueError(f"batch sizes differ: x {tuple(x.shape)}, memory {tuple(memory.shape)}")
        return attention(self.w_q(x), self.w_k(memory), self.w_v(memory), memory_mask)


class CrossAttentionVWidthDK(_Projections):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__(d_model, d_k, d_k, bias)

    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        return attention(self.w_q(x), self.w_k(memory), self.w_v(memory), memory_mask)


class CrossAttentionAlwaysBias(_Projections):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__(d_model, d_k, d_v, bias=True)  # "a linear layer has a bias"

    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        return attention(self.w_q(x), self.w_k(memory), self.w_v(memory), memory_mask)


class CrossAttentionFunctional(nn.Module):
    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False) -> None:
        super().__init__()
        self.d_model = d_model
        for name, width in {"w_q": d_k, "w_k": d_k, "w_v": d_k if d_v is None else d_v}.items():
            setattr(self, name, nn.Linear(d_model, width, bias=bias))

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if x.size(0) != memory.size(0):
            raise ValueError(f"x has shape {list(x.shape)} but memory has shape {list(memory.shape)}: batch differs")
        for t in (x, memory):
            if t.size(-1) != self.d_model:
                raise ValueError(f"expected d_model={self.d_model}, got a tensor of shape {list(t.shape)}")
        q = F.linear(x, self.w_q.weight, self.w_q.bias)
        k, v = (F.linear(memory, layer.weight, layer.bias) for layer in (self.w_k, self.w_v))
        return attention(q, k, v, mask=memory_mask)


class CrossAttentionInline(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        q, k, v = self.w_q(x), self.w_k(memory), self.w_v(memory)
        scores = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1])
        if memory_mask is not None:
            scores = scores.masked_fill(~memory_mask, NEG_INF)
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return torch.einsum("bqk,bkd->bqd", weights, v), weights


class CrossAttentionAdditiveMask(_Projections):
    def forward(self, x, memory, memory_mask=None):
        self.check(x, memory)
        q, k, v = self.w_q(x), self.w_k(memory), self.w_v(memory)
        bias = None
        if memory_mask is not None:
            bias = torch.zeros_like(memory_mask, dtype=q.dtype).masked_fill(~memory_mask, NEG_INF)
        scores = q @ k.mT / math.sqrt(k.shape[-1]) + (0.0 if bias is None else bias)
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a source that is all padding: zeros
        return weights @ v, weights


# ================================================================ shift_right


def _check_2d(tgt):
    if tgt.dim() != 2:
        raise ValueError(f"tgt must be (B, T), got {tuple(tgt.shape)}")


def shift_left(tgt, start_id):
    _check_2d(tgt)
    start = tgt.new_full((tgt.shape[0], 1), start_id)
    return torch.cat([tgt[:, 1:], start], dim=1)


def shift_keeps_last(tgt, start_id):
    _check_2d(tgt)
    start = tgt.new_full((tgt.shape[0], 1), start_id)
    return torch.cat([start, tgt], dim=1)


def shift_roll(tgt, start_id):
    _check_2d(tgt)
    return torch.roll(tgt, shifts=1, dims=1)


def shift_zero_start(tgt, start_id):
    _check_2d(tgt)
    return torch.cat([torch.zeros_like(tgt[:, :1]), tgt[:, :-1]], dim=1)


def shift_overwrites_first(tgt, start_id):
    _check_2d(tgt)
    out = tgt.clone()
    out[:, 0] = start_id
    return out


def shift_batch_axis(tgt, start_id):
    _check_2d(tgt)
    start = tgt.new_full((1, tgt.shape[1]), start_id)
    return torch.cat([start, tgt[:-1]])


def shift_in_place(tgt, start_id):
    _check_2d(tgt)
    tgt[:, 1:] = tgt[:, :-1].clone()
    tgt[:, 0] = start_id
    return tgt


def shift_start_on_the_cpu(tgt, start_id):
    _check_2d(tgt)
    start = torch.full((tgt.shape[0], 1), start_id, dtype=tgt.dtype)  # on the CPU, whatever tgt's device
    return torch.cat([start, tgt[:, :-1]], dim=1)


def shift_int64_start(tgt, start_id):
    _check_2d(tgt)
    start = torch.full((tgt.shape[0], 1), start_id)
    return torch.cat([start, tgt[:, :-1]], dim=1)


def shift_no_check(tgt, start_id):
    start = tgt.new_full((tgt.shape[0], 1), start_id)
    return torch.cat([start, tgt[:, :-1]], dim=1)


def shift_roll_then_overwrite(tgt, start_id):
    _check_2d(tgt)
    out = tgt.roll(1, dims=-1)
    out[:, 0] = start_id
    return out


def shift_pad(tgt, start_id):
    if tgt.ndim != 2:
        raise ValueError(f"expected a (B, T) batch of token ids, got a tensor of shape {list(tgt.shape)}")
    return F.pad(tgt[:, :-1], (1, 0), value=start_id)


def shift_full_like(tgt, start_id):
    _check_2d(tgt)
    out = torch.full_like(tgt, start_id)
    out[:, 1:] = tgt[:, :-1]
    return out


# ================================================================ teacher_forcing_pair


def _padded(tgt, pad_id):
    return torch.cat([tgt, tgt.new_full((tgt.shape[0], 1), pad_id)], dim=1)


def tf_end_after_padding(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    tgt_in = torch.cat([tgt.new_full((tgt.shape[0], 1), start_id), tgt], dim=1)
    tgt_out = torch.cat([tgt, tgt.new_full((tgt.shape[0], 1), end_id)], dim=1)
    return tgt_in, tgt_out


def tf_no_end(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    return shift_right(_padded(tgt, pad_id), start_id), _padded(tgt, pad_id)


def tf_shifts_both(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = _padded(tgt, pad_id)
    with_end = padded.scatter(1, (tgt != pad_id).sum(1, keepdim=True), end_id)
    return shift_right(padded, start_id), shift_right(with_end, start_id)


def tf_swapped(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = _padded(tgt, pad_id)
    tgt_out = padded.scatter(1, (tgt != pad_id).sum(1, keepdim=True), end_id)
    return tgt_out, shift_right(padded, start_id)


def tf_end_over_last_token(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = _padded(tgt, pad_id)
    last = (tgt != pad_id).sum(1, keepdim=True) - 1  # "the last real token"
    return shift_right(padded, start_id), padded.scatter(1, last, end_id)


def tf_argmax_first_pad(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = _padded(tgt, pad_id)
    first_pad = (tgt == pad_id).int().argmax(dim=1, keepdim=True)
    return shift_right(padded, start_id), padded.scatter(1, first_pad, end_id)


def tf_loop_crashes_on_empty_rows(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = _padded(tgt, pad_id)
    tgt_out = padded.clone()
    for b in range(tgt.shape[0]):
        last = (tgt[b] != pad_id).nonzero().max()
        tgt_out[b, last + 1] = end_id
    return shift_right(padded, start_id), tgt_out


def tf_pad_zero(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = torch.cat([tgt, torch.zeros_like(tgt[:, :1])], dim=1)
    lengths = (tgt != 0).sum(dim=1, keepdim=True)
    tgt_in = torch.cat([tgt.new_full((tgt.shape[0], 1), start_id), tgt], dim=1)
    return tgt_in, padded.scatter(1, lengths, end_id)


def tf_end_in_input(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = _padded(tgt, pad_id)
    tgt_out = padded.scatter(1, (tgt != pad_id).sum(1, keepdim=True), end_id)
    return shift_right(tgt_out, start_id), tgt_out


def tf_int64_columns(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    b = tgt.shape[0]
    tgt_in = torch.cat([torch.full((b, 1), start_id), tgt], dim=1)
    padded = torch.cat([tgt, torch.full((b, 1), pad_id)], dim=1)
    return tgt_in, padded.scatter(1, (tgt != pad_id).sum(1, keepdim=True), end_id)


def tf_pad_column_on_the_cpu(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    pad_column = torch.full((tgt.shape[0], 1), pad_id, dtype=tgt.dtype)  # the dtype thought of, the device not
    padded = torch.cat([tgt, pad_column], dim=1)
    return shift_right(padded, start_id), padded.scatter(1, (tgt != pad_id).sum(1, keepdim=True), end_id)


def tf_no_check(tgt, start_id, end_id, pad_id):
    padded = _padded(tgt, pad_id)
    return shift_right(padded, start_id), padded.scatter(1, (tgt != pad_id).sum(1, keepdim=True), end_id)


def tf_argmax_on_padded(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = _padded(tgt, pad_id)
    first_pad = (padded == pad_id).int().argmax(dim=1, keepdim=True)  # the extra column is a pad for a full row
    return shift_right(padded, start_id), padded.scatter(1, first_pad, end_id)


def tf_loop(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    b, t = tgt.shape
    tgt_in = torch.full((b, t + 1), pad_id, dtype=tgt.dtype, device=tgt.device)
    tgt_out = tgt_in.clone()
    for row in range(b):
        n = int((tgt[row] != pad_id).sum())
        tgt_in[row, 0] = start_id
        tgt_in[row, 1:n + 1] = tgt[row, :n]
        tgt_out[row, :n] = tgt[row, :n]
        tgt_out[row, n] = end_id
    return tgt_in, tgt_out


def tf_where(tgt: Tensor, start_id: int, end_id: int, pad_id: int) -> tuple[Tensor, Tensor]:
    if tgt.dim() != 2:
        raise ValueError(f"tgt should be 2-D (B, T); its shape is {tuple(tgt.shape)}")
    lengths = (tgt != pad_id).sum(dim=1, keepdim=True)  # (B, 1)
    positions = torch.arange(tgt.shape[1] + 1, device=tgt.device)  # (T + 1,)
    tokens = F.pad(tgt, (0, 1), value=pad_id)
    pad = torch.full_like(tokens, pad_id)
    tgt_out = torch.where(positions < lengths, tokens, torch.where(positions == lengths, end_id, pad))
    tgt_in = F.pad(tgt, (1, 0), value=start_id)
    return tgt_in, tgt_out


def tf_from_output(tgt, start_id, end_id, pad_id):
    _check_2d(tgt)
    padded = _padded(tgt, pad_id)
    tgt_out = padded.scatter(1, (tgt != pad_id).sum(1, keepdim=True), end_id)
    shifted = shift_right(tgt_out, start_id)
    return shifted.masked_fill(shifted == end_id, pad_id), tgt_out


# ================================================================ sequence_cross_entropy


def _check_ce(logits, targets):
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} do not match")


def ce_over_padding(logits, targets, pad_id):
    _check_ce(logits, targets)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def ce_zeroed_pads_over_all(logits, targets, pad_id):
    _check_ce(logits, targets)
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (nll * (targets != pad_id)).mean()


def ce_last_position(logits, targets, pad_id):
    _check_ce(logits, targets)
    return F.cross_entropy(logits[:, -1, :], targets[:, -1], ignore_index=pad_id)


def ce_summed(logits, targets, pad_id):
    _check_ce(logits, targets)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=pad_id,
                           reduction="sum")


def ce_per_sentence(logits, targets, pad_id):
    _check_ce(logits, targets)
    keep = targets != pad_id
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none") * keep
    return (nll.sum(dim=1) / keep.sum(dim=1)).mean()


def ce_pad_zero(logits, targets, pad_id):
    _check_ce(logits, targets)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=0)


def ce_no_log_softmax(logits, targets, pad_id):
    _check_ce(logits, targets)
    return F.nll_loss(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=pad_id)


def ce_classes_last(logits, targets, pad_id):
    _check_ce(logits, targets)
    return F.cross_entropy(logits, targets, ignore_index=pad_id)


def ce_rebuilt_tensor(logits, targets, pad_id):
    _check_ce(logits, targets)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=pad_id)
    return torch.tensor(loss.item(), dtype=logits.dtype)


def ce_targets_in_place(logits, targets, pad_id):
    _check_ce(logits, targets)
    targets[targets == pad_id] = -100
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def ce_pad_weight_on_the_cpu(logits, targets, pad_id):
    _check_ce(logits, targets)
    weight = torch.ones(logits.shape[-1], dtype=logits.dtype)  # "the pad class weighs nothing"; its device forgotten
    weight[pad_id] = 0.0
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), weight=weight)


def ce_no_check(logits, targets, pad_id):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=pad_id)


def ce_float32(logits, targets, pad_id):
    _check_ce(logits, targets)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=pad_id)


def ce_transposed(logits, targets, pad_id):
    _check_ce(logits, targets)
    return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=pad_id)


def ce_manual_mask(logits, targets, pad_id):
    _check_ce(logits, targets)
    keep = targets != pad_id
    log_probs = torch.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, targets.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def ce_selected_rows(logits: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    if targets.shape != logits.shape[:-1] or logits.ndim != 3:
        raise ValueError(f"targets {list(targets.shape)} must match logits {list(logits.shape)} without V")
    keep = targets != pad_id
    return F.cross_entropy(logits[keep], targets[keep])


def ce_logsumexp(logits, targets, pad_id):
    _check_ce(logits, targets)
    keep = (targets != pad_id).to(logits.dtype)
    picked = logits.gather(-1, torch.where(targets == pad_id, 0, targets)[..., None])[..., 0]
    nll = torch.logsumexp(logits, dim=-1) - picked
    return (nll * keep).sum() / keep.sum()


# ================================================================ concept checks


def loss_last_token_only(lengths):
    return len(lengths)


def loss_without_end(lengths):
    return sum(lengths)


def loss_with_padding(lengths):
    return len(lengths) * (max(lengths) + 1)


def cross_shape_transposed(t_tgt, t_src):
    return t_src, t_tgt


def cross_shape_decoder_keys(t_tgt, t_src):
    return t_tgt, t_tgt


def loss_from_the_targets(lengths):
    tgt = torch.zeros(len(lengths), max(lengths) + 1, dtype=torch.long)
    for row, length in enumerate(lengths):
        tgt[row, : length + 1] = 1
    return int((tgt != 0).sum())


def cross_shape_from_tensors(t_tgt, t_src):
    return (torch.zeros(t_tgt, 4) @ torch.zeros(t_src, 4).T).shape


WRONG = [
    Entry("CrossAttention", "keys and values taken from the decoder", CrossAttentionSelf,
          "self-attention instead of cross-attention", "CrossAttention_forward"),
    Entry("CrossAttention", "queries from the encoder, keys and values from the decoder",
          CrossAttentionQueriesFromMemory, "queries taken from the encoder", "CrossAttention_forward"),
    Entry("CrossAttention", "queries, keys and values all from the encoder", CrossAttentionEncoderOnly,
          "queries taken from the encoder", "CrossAttention_forward"),
    Entry("CrossAttention", "memory_mask ignored", CrossAttentionDropsMask, "memory mask ignored",
          "CrossAttention_memory_mask"),
    Entry("CrossAttention", "memory_mask inverted", CrossAttentionInvertedMask, "inverted memory mask",
          "CrossAttention_memory_mask"),
    Entry("CrossAttention", "memory used as the values", CrossAttentionRawValues, "values not projected",
          "CrossAttention_forward"),
    Entry("CrossAttention", "w_k and w_v swapped", CrossAttentionSwappedKV, "keys and values swapped",
          "CrossAttention_forward"),
    Entry("CrossAttention", "memory detached", CrossAttentionFrozenEncoder, GRAPH_CUT, "CrossAttention_gradients"),
    Entry("CrossAttention", "w_q's weight detached", CrossAttentionDetachedQueryWeight, GRAPH_CUT,
          "CrossAttention_gradients"),
    Entry("CrossAttention", "no ValueError for mismatched batch sizes", CrossAttentionNoBatchCheck, NO_VALUE_ERROR,
          "CrossAttention_errors"),
    Entry("CrossAttention", "only memory's width checked", CrossAttentionMemoryWidthOnly, NO_VALUE_ERROR,
          "CrossAttention_errors"),
    Entry("CrossAttention", "w_v of width d_k whatever d_v", CrossAttentionVWidthDK, "w_v of width d_k instead of d_v",
          "CrossAttention_projections"),
    Entry("CrossAttention", "projections always with bias", CrossAttentionAlwaysBias, "bias argument ignored",
          "CrossAttention_projections"),
    Entry("shift_right", "shifted left", shift_left, "shifted left instead of right", "shift_right_values"),
    Entry("shift_right", "length T+1 kept", shift_keeps_last, "length T+1 instead of T", "shift_right_values"),
    Entry("shift_right", "torch.roll without overwriting", shift_roll, "roll without overwriting the first column",
          "shift_right_values"),
    Entry("shift_right", "zeros instead of start_id", shift_zero_start, "start_id not prepended", "shift_right_values"),
    Entry("shift_right", "start_id written over the first token", shift_overwrites_first,
          "start_id written over the first token", "shift_right_values"),
    Entry("shift_right", "shifted along the batch axis", shift_batch_axis, "shifted along the batch axis",
          "shift_right_values"),
    # teacher_forcing_pair builds tgt_in by shifting a tensor it then reads tgt_out from: in a notebook, this
    # shift_right leaves <start> in it.
    Entry("shift_right", "input modified in place", shift_in_place, MODIFIED_IN_PLACE, "shift_right_contract",
          also=("start token in tgt_out",)),
    Entry("shift_right", "int64 start column", shift_int64_start, DTYPE_CHANGED, "shift_right_contract"),
    Entry("shift_right", "start column built on the CPU", shift_start_on_the_cpu, "device not kept",
          "shift_right_contract"),
    Entry("shift_right", "no ValueError for a 1-D tgt", shift_no_check, NO_VALUE_ERROR, "shift_right_errors"),
    Entry("teacher_forcing_pair", "<end> after the padding", tf_end_after_padding, "end token placed after the padding",
          "teacher_forcing_pair_padding"),
    Entry("teacher_forcing_pair", "<end> missing", tf_no_end, "end token missing from tgt_out",
          "teacher_forcing_pair_example"),
    Entry("teacher_forcing_pair", "<start> in tgt_out", tf_shifts_both, "start token in tgt_out",
          "teacher_forcing_pair_example"),
    Entry("teacher_forcing_pair", "tgt_in and tgt_out swapped", tf_swapped, "tgt_in and tgt_out swapped",
          "teacher_forcing_pair_example"),
    Entry("teacher_forcing_pair", "<end> over the last real token", tf_end_over_last_token,
          "end token written over the last real token", "teacher_forcing_pair_example"),
    Entry("teacher_forcing_pair", "argmax of the first pad on a full row", tf_argmax_first_pad,
          "row without padding mishandled", "teacher_forcing_pair_example"),
    Entry("teacher_forcing_pair", "crash on an all-pad row", tf_loop_crashes_on_empty_rows, "all-pad row not handled",
          "teacher_forcing_pair_padding"),
    Entry("teacher_forcing_pair", "pad_id assumed to be 0", tf_pad_zero, "pad_id assumed to be 0",
          "teacher_forcing_pair_padding"),
    Entry("teacher_forcing_pair", "<end> in tgt_in", tf_end_in_input, "end token in tgt_in",
          "teacher_forcing_pair_padding"),
    Entry("teacher_forcing_pair", "int64 columns", tf_int64_columns, DTYPE_CHANGED, "teacher_forcing_pair_contract"),
    Entry("teacher_forcing_pair", "pad column built on the CPU", tf_pad_column_on_the_cpu, "device not kept",
          "teacher_forcing_pair_contract"),
    Entry("teacher_forcing_pair", "no ValueError for a 1-D tgt", tf_no_check, NO_VALUE_ERROR,
          "teacher_forcing_pair_errors"),
    Entry("sequence_cross_entropy", "averaged over the padding", ce_over_padding, "loss averaged over the padding too",
          "sequence_cross_entropy_ignores_pads"),
    Entry("sequence_cross_entropy", "pads zeroed but counted", ce_zeroed_pads_over_all,
          "loss averaged over the padding too", "sequence_cross_entropy_values"),
    Entry("sequence_cross_entropy", "last position only", ce_last_position, "loss taken at the last position only",
          "sequence_cross_entropy_values"),
    Entry("sequence_cross_entropy", "summed", ce_summed, "summed instead of averaged", "sequence_cross_entropy_values"),
    Entry("sequence_cross_entropy", "mean of per-sentence means", ce_per_sentence, "mean of per-sentence means",
          "sequence_cross_entropy_values"),
    Entry("sequence_cross_entropy", "ignore_index=0", ce_pad_zero, "pad_id assumed to be 0",
          "sequence_cross_entropy_ignores_pads"),
    Entry("sequence_cross_entropy", "nll_loss on raw logits", ce_no_log_softmax, "log_softmax missing",
          "sequence_cross_entropy_values"),
    Entry("sequence_cross_entropy", "classes on the last axis", ce_classes_last, "classes on the wrong axis",
          "sequence_cross_entropy_values"),
    Entry("sequence_cross_entropy", "loss rebuilt with torch.tensor", ce_rebuilt_tensor, GRAPH_CUT,
          "sequence_cross_entropy_gradients"),
    Entry("sequence_cross_entropy", "targets modified in place", ce_targets_in_place, MODIFIED_IN_PLACE,
          "sequence_cross_entropy_gradients"),
    Entry("sequence_cross_entropy", "no ValueError naming the shapes", ce_no_check, "ValueError without the shapes",
          "sequence_cross_entropy_errors"),
    Entry("sequence_cross_entropy", "dtype changed to float32", ce_float32, DTYPE_CHANGED,
          "sequence_cross_entropy_gradients"),
    Entry("sequence_cross_entropy", "class weights on the CPU", ce_pad_weight_on_the_cpu, "device not kept",
          "sequence_cross_entropy_gradients"),
    Entry("loss_positions", "last token only", loss_last_token_only, "loss on the last token only",
          "loss_positions_answer"),
    Entry("loss_positions", "<end> not counted", loss_without_end, "the end token not scored", "loss_positions_answer"),
    Entry("loss_positions", "padding counted", loss_with_padding, "padding scored", "loss_positions_answer"),
    Entry("cross_weights_shape", "source rows, target columns", cross_shape_transposed,
          "queries taken from the encoder", "cross_weights_shape_answer"),
    Entry("cross_weights_shape", "target × target", cross_shape_decoder_keys, "keys taken from the decoder",
          "cross_weights_shape_answer"),
]

CORRECT = [
    Entry("CrossAttention", "F.linear and setattr", CrossAttentionFunctional),
    Entry("CrossAttention", "attention written inline with einsum", CrossAttentionInline),
    Entry("CrossAttention", "additive 0/-inf mask", CrossAttentionAdditiveMask),
    Entry("shift_right", "roll then overwrite column 0", shift_roll_then_overwrite),
    Entry("shift_right", "F.pad", shift_pad),
    Entry("shift_right", "full_like then slice assignment", shift_full_like),
    Entry("teacher_forcing_pair", "argmax of the first pad in the padded rows", tf_argmax_on_padded),
    Entry("teacher_forcing_pair", "a loop over rows", tf_loop),
    Entry("teacher_forcing_pair", "torch.where over positions", tf_where),
    Entry("teacher_forcing_pair", "tgt_in from tgt_out", tf_from_output),
    Entry("sequence_cross_entropy", "F.cross_entropy with classes on axis 1", ce_transposed),
    Entry("sequence_cross_entropy", "log_softmax, gather and a mask", ce_manual_mask),
    Entry("sequence_cross_entropy", "F.cross_entropy on the selected rows", ce_selected_rows),
    Entry("sequence_cross_entropy", "logsumexp minus the target's logit", ce_logsumexp),
    Entry("loss_positions", "counted on a padded target", loss_from_the_targets),
    Entry("cross_weights_shape", "torch.Size of a real product", cross_shape_from_tensors),
]
