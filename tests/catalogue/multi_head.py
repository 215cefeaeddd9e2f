"""Chapter 4 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names
the exercise notebook gives (``math``, ``torch``, ``F``, ``nn``, ``Tensor`` and
the ``attention`` helper of its setup cell, repeated here) and, where the
exercise builds on an earlier one, those earlier exercises (``split_heads``,
``merge_heads``), which the catalogue tests supply from the reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, NO_VALUE_ERROR
from catalogue import Entry
from solutions.multi_head import merge_heads, split_heads

NEG_INF = float("-inf")


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The notebook's given helper: Chapter 1's attention built from PyTorch's built-ins."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return out, torch.softmax(scores, dim=-1).nan_to_num(0.0)


# ================================================================ split_heads


def _check_split(x, n_heads):
    if x.shape[-1] % n_heads != 0:
        raise ValueError(f"d_model={x.shape[-1]} is not divisible by n_heads={n_heads}")


def split_view_no_transpose(x, n_heads):
    _check_split(x, n_heads)
    b, t, d_model = x.shape
    return x.view(b, n_heads, t, d_model // n_heads)


def split_missing_transpose(x, n_heads):
    _check_split(x, n_heads)
    b, t, d_model = x.shape
    return x.view(b, t, n_heads, d_model // n_heads)


def split_interleaved(x, n_heads):
    _check_split(x, n_heads)
    b, t, d_model = x.shape
    return x.view(b, t, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def split_positions(x, n_heads):
    _check_split(x, n_heads)
    return torch.stack(x.chunk(n_heads, dim=1), dim=1)  # "cut the sequence into n_heads pieces"


def split_no_check(x, n_heads):
    b, t, d_model = x.shape
    return x.view(b, t, n_heads, d_model // n_heads).transpose(1, 2)


def split_permute(x: Tensor, n_heads: int) -> Tensor:
    b, t, d_model = x.shape
    if d_model % n_heads:
        raise ValueError(f"cannot split {d_model} features (x {tuple(x.shape)}) into {n_heads} heads")
    return x.reshape(b, t, n_heads, -1).permute(0, 2, 1, 3)  # rearrange "b t (h d) -> b h t d" without einops


def split_unflatten(x, n_heads):
    _check_split(x, n_heads)
    return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)


def split_loop(x, n_heads):
    _check_split(x, n_heads)
    d_head = x.shape[-1] // n_heads
    return torch.stack([x[:, :, h * d_head:(h + 1) * d_head] for h in range(n_heads)], dim=1)


def split_chunk(x, n_heads):
    _check_split(x, n_heads)
    return torch.stack(torch.chunk(x, n_heads, dim=-1), dim=1)


# ================================================================ merge_heads


def _check_merge(x):
    if x.dim() != 4:
        raise ValueError(f"expected (B, n_heads, T, d_head), got {tuple(x.shape)}")


def merge_no_transpose(x):
    _check_merge(x)
    b, n_heads, t, d_head = x.shape
    return x.reshape(b, t, n_heads * d_head)


def merge_view_not_contiguous(x):
    _check_merge(x)
    b, n_heads, t, d_head = x.shape
    return x.transpose(1, 2).view(b, t, n_heads * d_head)


def merge_interleaved(x):
    _check_merge(x)
    b, n_heads, t, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, n_heads * d_head)


def merge_summed(x):
    _check_merge(x)
    return x.sum(dim=1)  # "add the heads' outputs"


def merge_along_positions(x):
    _check_merge(x)
    return torch.cat(x.unbind(1), dim=1)


def merge_not_flattened(x):
    _check_merge(x)
    return x.transpose(1, 2)


def merge_no_check(x):
    b, n_heads, t, d_head = x.shape
    return x.transpose(1, 2).reshape(b, t, n_heads * d_head)


def merge_contiguous_view(x):
    _check_merge(x)
    b, n_heads, t, d_head = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(b, t, n_heads * d_head)


def merge_flatten(x: Tensor) -> Tensor:
    if x.ndim != 4:
        raise ValueError(f"merge_heads needs a 4-D (B, n_heads, T, d_head) tensor, not one of shape {list(x.shape)}")
    return x.transpose(1, 2).flatten(2)


def merge_cat(x):
    _check_merge(x)
    return torch.cat(x.unbind(dim=1), dim=-1)


# ================================================================ MultiHeadAttention


class _Heads(nn.Module):
    """The learner's ``__init__``, shared by the entries whose mistake is in ``forward``."""

    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def check(self, *tensors):
        for t in tensors:
            if t.shape[-1] != self.d_model:
                raise ValueError(f"input {tuple(t.shape)} must end in d_model={self.d_model}")

    def qkv(self, query, key, value):
        self.check(query, key, value)
        return (split_heads(self.w_q(query), self.n_heads), split_heads(self.w_k(key), self.n_heads),
                split_heads(self.w_v(value), self.n_heads))

    def finish(self, weights, v):
        weights = self.dropout(weights)
        return self.w_o(merge_heads(weights @ v)), weights


def _head_mask(mask):
    return None if mask is None else mask.unsqueeze(-3)


class MHANoOutputProjection(nn.Module):
    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads = d_model, n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        for t in (query, key, value):
            if t.shape[-1] != self.d_model:
                raise ValueError(f"input {tuple(t.shape)} must end in d_model={self.d_model}")
        q, k, v = (split_heads(w(t), self.n_heads) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        _, weights = attention(q, k, v, _head_mask(mask))
        weights = self.dropout(weights)
        return merge_heads(weights @ v), weights


class MHAScaledByDModel(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), NEG_INF)
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return self.finish(weights, v)


class MHAMaskLastAxis(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        if mask is not None:
            mask = mask.unsqueeze(-1)
        _, weights = attention(q, k, v, mask)
        return self.finish(weights, v)


class MHAMaskDim2(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        if mask is not None:
            mask = mask.unsqueeze(2)
        _, weights = attention(q, k, v, mask)
        return self.finish(weights, v)


class MHAMaskDim1(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        if mask is not None:
            mask = mask.unsqueeze(1)  # "(B, T_q, T_k) -> (B, 1, T_q, T_k)", but a (T_q, T_k) mask breaks
        _, weights = attention(q, k, v, mask)
        return self.finish(weights, v)


class MHAAveragedWeights(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        _, weights = attention(q, k, v, _head_mask(mask))
        out, weights = self.finish(weights, v)
        return out, weights.mean(dim=1)


class MHAMaskIgnored(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        _, weights = attention(q, k, v)
        return self.finish(weights, v)


class MHAValuesWithWk(_Heads):
    def forward(self, query, key, value, mask=None):
        self.check(query, key, value)
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_k(key), self.n_heads)
        v = split_heads(self.w_k(value), self.n_heads)
        _, weights = attention(q, k, v, _head_mask(mask))
        return self.finish(weights, v)


class MHADropoutInEval(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        _, weights = attention(q, k, v, _head_mask(mask))
        weights = F.dropout(weights, self.dropout.p)  # training=True by default
        return self.w_o(merge_heads(weights @ v)), weights


class MHADropoutOnOutput(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        heads, weights = attention(q, k, v, _head_mask(mask))
        return self.dropout(self.w_o(merge_heads(heads))), weights


class MHABiasIgnored(_Heads):
    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__(d_model, n_heads, True, dropout)  # "nn.Linear has a bias anyway"

    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        _, weights = attention(q, k, v, _head_mask(mask))
        return self.finish(weights, v)


class MHALinearWithoutBias(_Heads):
    def forward(self, query, key, value, mask=None):
        self.check(query, key, value)
        q = split_heads(F.linear(query, self.w_q.weight), self.n_heads)
        k = split_heads(F.linear(key, self.w_k.weight), self.n_heads)
        v = split_heads(F.linear(value, self.w_v.weight), self.n_heads)
        _, weights = attention(q, k, v, _head_mask(mask))
        weights = self.dropout(weights)
        return F.linear(merge_heads(weights @ v), self.w_o.weight), weights


class MHAQueryWidthOnly(_Heads):
    def forward(self, query, key, value, mask=None):
        self.check(query)  # key and value are never checked
        q, k, v = (split_heads(w(t), self.n_heads) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        _, weights = attention(q, k, v, _head_mask(mask))
        return self.finish(weights, v)


class MHANoDivisibilityCheck(nn.Module):
    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        for t in (query, key, value):
            if t.shape[-1] != self.d_model:
                raise ValueError(f"input {tuple(t.shape)} must end in d_model={self.d_model}")
        q, k, v = (split_heads(w(t), self.n_heads) for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        _, weights = attention(q, k, v, _head_mask(mask))
        weights = self.dropout(weights)
        return self.w_o(merge_heads(weights @ v)), weights


class MHAViewWithoutTranspose(_Heads):
    def forward(self, query, key, value, mask=None):
        self.check(query, key, value)
        b, t_q, _ = query.shape
        t_k = key.shape[1]
        q = self.w_q(query).view(b, self.n_heads, t_q, self.d_head)
        k = self.w_k(key).view(b, self.n_heads, t_k, self.d_head)
        v = self.w_v(value).view(b, self.n_heads, t_k, self.d_head)
        _, weights = attention(q, k, v, _head_mask(mask))
        return self.finish(weights, v)


class MHASingleHead(_Heads):
    def forward(self, query, key, value, mask=None):
        self.check(query, key, value)
        out, weights = attention(self.w_q(query), self.w_k(key), self.w_v(value), mask)
        return self.w_o(out), weights


class MHANaNOnEmptyRows(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), NEG_INF)
        return self.finish(torch.softmax(scores, dim=-1), v)


class MHADetached(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key.detach(), value.detach())  # "the keys are fixed"
        _, weights = attention(q, k, v, _head_mask(mask))
        return self.finish(weights, v)


class MHAFloat32(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        _, weights = attention(q.float(), k.float(), v.float(), _head_mask(mask))
        weights = self.dropout(weights)
        return self.w_o(merge_heads(weights @ v.float()).to(self.w_o.weight.dtype)).float(), weights



class MHAInvertedMask(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        if mask is not None:
            mask = ~mask.unsqueeze(-3)  # "True marks what to hide"
        _, weights = attention(q, k, v, mask)
        return self.finish(weights, v)


class MHAValuesFromKey(_Heads):
    def forward(self, query, key, value, mask=None):
        self.check(query, key, value)
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_k(key), self.n_heads)
        v = split_heads(self.w_v(key), self.n_heads)  # "keys and values come from the same memory"
        _, weights = attention(q, k, v, _head_mask(mask))
        return self.finish(weights, v)


class MHANoDropout(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        _, weights = attention(q, k, v, _head_mask(mask))
        return self.w_o(merge_heads(weights @ v)), weights  # self.dropout is built but never used


class MHAWeightsBeforeDropout(_Heads):
    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        _, weights = attention(q, k, v, _head_mask(mask))
        return self.w_o(merge_heads(self.dropout(weights) @ v)), weights


class MHAHelperOutput(_Heads):
    """Follows "use the given attention" for `out` and "return the weights after dropout" for the weights."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        heads, weights = attention(q, k, v, _head_mask(mask))  # heads: computed without dropout
        return self.w_o(merge_heads(heads)), self.dropout(weights)


class MHALoop(_Heads):
    """One head at a time, on its own slice of the projections."""

    def forward(self, query, key, value, mask=None):
        self.check(query, key, value)
        q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        outs, all_weights = [], []
        for h in range(self.n_heads):
            part = slice(h * self.d_head, (h + 1) * self.d_head)
            _, w = attention(q[..., part], k[..., part], v[..., part], mask)
            w = self.dropout(w)
            outs.append(w @ v[..., part])
            all_weights.append(w)
        return self.w_o(torch.cat(outs, dim=-1)), torch.stack(all_weights, dim=1)


class MHAChunk(_Heads):
    def forward(self, query, key, value, mask=None):
        self.check(query, key, value)
        q, k, v = (torch.stack(p.chunk(self.n_heads, dim=-1), dim=1)
                   for p in (self.w_q(query), self.w_k(key), self.w_v(value)))
        _, weights = attention(q, k, v, None if mask is None else mask[..., None, :, :])
        weights = self.dropout(weights)
        heads = weights @ v
        return self.w_o(torch.cat(heads.unbind(1), dim=-1)), weights


class MHAFastPath(_Heads):
    """F.scaled_dot_product_attention for `out`; the weights computed separately for the caller."""

    def forward(self, query, key, value, mask=None):
        q, k, v = self.qkv(query, key, value)
        mask = _head_mask(mask)
        if self.training and self.dropout.p > 0:  # the returned weights must be the ones that were dropped
            _, weights = attention(q, k, v, mask)
            return self.finish(weights, v)
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        scores = q @ k.mT / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return self.w_o(merge_heads(heads)), weights


class MHAEinsum(nn.Module):
    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"{n_heads} heads do not divide d_model={d_model}")
        self.h, self.d = n_heads, d_model // n_heads
        for name in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))
        self.drop = nn.Dropout(dropout)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None):
        for t in (query, key, value):
            if t.size(-1) != self.h * self.d:
                raise ValueError(f"expected inputs (B, T, {self.h * self.d}), got {list(t.shape)}")
        q = self.w_q(query).unflatten(-1, (self.h, self.d))  # (B, T_q, h, d)
        k = self.w_k(key).unflatten(-1, (self.h, self.d))
        v = self.w_v(value).unflatten(-1, (self.h, self.d))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.d)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), NEG_INF)
        weights = self.drop(torch.softmax(scores, dim=-1).nan_to_num(0.0))
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).flatten(-2)
        return self.w_o(out), weights


class MHAUnflatten(_Heads):
    def forward(self, query, key, value, mask=None):
        self.check(query, key, value)
        q, k, v = (w(t).unflatten(-1, (self.n_heads, self.d_head)).transpose(1, 2)
                   for w, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # a (T_q, T_k) mask broadcasts as it is
        _, weights = attention(q, k, v, mask)
        return self.finish(weights, v)


# ================================================================ concept checks


def head_shape_full_width(n_tokens, d_model, n_heads):
    return n_tokens, d_model


def head_shape_all_heads(n_tokens, d_model, n_heads):
    return n_heads, n_tokens, d_model // n_heads


def parameters_per_head(d_model, n_heads):
    return n_heads * 4 * (d_model * d_model + d_model)


def parameters_without_bias(d_model, n_heads):
    return 4 * d_model * d_model


def parameters_without_output(d_model, n_heads):
    return 3 * (d_model * d_model + d_model)


def parameters_one_head_wide(d_model, n_heads):
    d_head = d_model // n_heads
    return 4 * (d_model * d_head + d_head)


def head_shape_from_split(n_tokens, d_model, n_heads):
    x = torch.zeros(1, n_tokens, d_model)
    return split_heads(x, n_heads)[0, 0].shape


def parameters_counted(d_model, n_heads):
    return sum(p.numel() for p in nn.MultiheadAttention(d_model, n_heads).parameters())


WRONG = [
    Entry("split_heads", "view without transpose", split_view_no_transpose, "view without transpose",
          "split_heads_values"),
    # MultiHeadAttention, built on it, then views q, k and v as (B, n_heads, T, d_head) without a transpose
    Entry("split_heads", "missing transpose", split_missing_transpose, "missing transpose", "split_heads_shape",
          also=("view without transpose",)),
    Entry("split_heads", "features interleaved across heads", split_interleaved, "features interleaved across heads",
          "split_heads_values", also=("heads mixed",)),  # in MultiHeadAttention, built on it
    Entry("split_heads", "positions split instead of features", split_positions, "heads split on the wrong axis",
          "split_heads_shape"),
    Entry("split_heads", "no ValueError for d_model % n_heads", split_no_check, NO_VALUE_ERROR, "split_heads_errors"),
    Entry("merge_heads", "reshape without transposing back", merge_no_transpose, "merged without transposing back",
          "merge_heads_values"),
    Entry("merge_heads", "view of a transposed tensor", merge_view_not_contiguous, "view of a non-contiguous tensor",
          "merge_heads_values"),
    Entry("merge_heads", "features interleaved across heads", merge_interleaved, "features interleaved across heads",
          "merge_heads_values"),
    Entry("merge_heads", "heads summed", merge_summed, "heads summed instead of concatenated", "merge_heads_values"),
    Entry("merge_heads", "heads concatenated along the positions", merge_along_positions,
          "heads concatenated along the positions", "merge_heads_values"),
    Entry("merge_heads", "heads not flattened", merge_not_flattened, "heads not flattened", "merge_heads_values"),
    Entry("merge_heads", "no ValueError naming the shape", merge_no_check, NO_VALUE_ERROR, "merge_heads_errors"),
    Entry("MultiHeadAttention", "no output projection", MHANoOutputProjection, "no output projection w_o",
          "MultiHeadAttention_projections"),
    Entry("MultiHeadAttention", "scaled by √d_model", MHAScaledByDModel, "scaled by √d_model instead of √d_head",
          "MultiHeadAttention_forward"),
    Entry("MultiHeadAttention", "mask unsqueeze(-1)", MHAMaskLastAxis, "mask broadcast onto the wrong axis",
          "MultiHeadAttention_mask"),
    Entry("MultiHeadAttention", "mask unsqueeze(2)", MHAMaskDim2, "mask broadcast onto the wrong axis",
          "MultiHeadAttention_mask"),
    Entry("MultiHeadAttention", "mask unsqueeze(1) whatever its rank", MHAMaskDim1,
          "mask broadcast onto the wrong axis", "MultiHeadAttention_mask"),
    Entry("MultiHeadAttention", "weights averaged over heads", MHAAveragedWeights, "weights averaged over heads",
          "MultiHeadAttention_shapes"),
    Entry("MultiHeadAttention", "mask ignored", MHAMaskIgnored, "mask ignored", "MultiHeadAttention_mask"),
    Entry("MultiHeadAttention", "w_k used for the values", MHAValuesWithWk, "w_k used for the values",
          "MultiHeadAttention_forward"),
    Entry("MultiHeadAttention", "dropout in eval mode", MHADropoutInEval, "dropout applied in eval mode",
          "MultiHeadAttention_dropout"),
    Entry("MultiHeadAttention", "dropout on the output", MHADropoutOnOutput,
          "dropout on the output instead of the weights", "MultiHeadAttention_dropout"),
    Entry("MultiHeadAttention", "bias argument ignored", MHABiasIgnored, "bias argument ignored",
          "MultiHeadAttention_projections"),
    Entry("MultiHeadAttention", "biases left out of the projections", MHALinearWithoutBias,
          "projection biases left out", "MultiHeadAttention_forward"),
    Entry("MultiHeadAttention", "no ValueError for d_model % n_heads", MHANoDivisibilityCheck, NO_VALUE_ERROR,
          "MultiHeadAttention_errors"),
    Entry("MultiHeadAttention", "only the query's width checked", MHAQueryWidthOnly, NO_VALUE_ERROR,
          "MultiHeadAttention_errors"),
    Entry("MultiHeadAttention", "view without transpose", MHAViewWithoutTranspose, "view without transpose",
          "MultiHeadAttention_forward"),
    Entry("MultiHeadAttention", "a single head of width d_model", MHASingleHead, "heads not split",
          "MultiHeadAttention_shapes", also=("dropout ignored",)),
    Entry("MultiHeadAttention", "NaN on fully masked rows", MHANaNOnEmptyRows, "NaN on fully masked rows",
          "MultiHeadAttention_mask", also=("NaN gradient on fully masked rows",)),
    Entry("MultiHeadAttention", "key and value detached", MHADetached, GRAPH_CUT, "MultiHeadAttention_contract"),
    Entry("MultiHeadAttention", "float32 forced", MHAFloat32, DTYPE_CHANGED, "MultiHeadAttention_contract"),
    Entry("MultiHeadAttention", "mask inverted", MHAInvertedMask, "inverted mask", "MultiHeadAttention_mask"),
    Entry("MultiHeadAttention", "values projected from key", MHAValuesFromKey, "values taken from key instead of value",
          "MultiHeadAttention_forward"),
    Entry("MultiHeadAttention", "dropout never applied", MHANoDropout, "dropout ignored", "MultiHeadAttention_dropout"),
    Entry("MultiHeadAttention", "weights returned before dropout", MHAWeightsBeforeDropout,
          "weights returned before dropout", "MultiHeadAttention_dropout"),
    Entry("MultiHeadAttention", "the helper's out with dropped weights", MHAHelperOutput,
          "output not computed from the dropped weights", "MultiHeadAttention_dropout"),
    Entry("head_query_shape", "one head d_model wide", head_shape_full_width, "one head taken to be d_model wide",
          "head_query_shape_answer"),
    Entry("head_query_shape", "all the heads' shape", head_shape_all_heads, "all the heads taken for one",
          "head_query_shape_answer"),
    Entry("attention_parameters", "times the heads", parameters_per_head, "parameters multiplied by the heads",
          "attention_parameters_answer"),
    Entry("attention_parameters", "no biases", parameters_without_bias, "biases left out",
          "attention_parameters_answer"),
    Entry("attention_parameters", "three projections", parameters_without_output, "output projection left out",
          "attention_parameters_answer"),
    Entry("attention_parameters", "projections one head wide", parameters_one_head_wide, "projections one head wide",
          "attention_parameters_answer"),
]

CORRECT = [
    Entry("split_heads", "reshape and permute (einops-free rearrange)", split_permute),
    Entry("split_heads", "unflatten and transpose", split_unflatten),
    Entry("split_heads", "a loop over heads", split_loop),
    Entry("split_heads", "torch.chunk and stack", split_chunk),
    Entry("merge_heads", "permute, contiguous and view", merge_contiguous_view),
    Entry("merge_heads", "transpose and flatten", merge_flatten),
    Entry("merge_heads", "torch.cat of the heads", merge_cat),
    Entry("MultiHeadAttention", "a loop over heads with per-head slices", MHALoop),
    Entry("MultiHeadAttention", "torch.chunk and stack", MHAChunk),
    Entry("MultiHeadAttention", "F.scaled_dot_product_attention for out, weights computed separately", MHAFastPath),
    Entry("MultiHeadAttention", "einsum", MHAEinsum),
    Entry("MultiHeadAttention", "unflatten and transpose, head axis only for 3-D masks", MHAUnflatten),
    Entry("head_query_shape", "read off split_heads", head_shape_from_split),
    Entry("attention_parameters", "counted on nn.MultiheadAttention", parameters_counted),
]
