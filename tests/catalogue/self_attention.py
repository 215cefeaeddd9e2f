"""Chapter 1 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names
the exercise notebook imports (``math``, ``torch``, ``F``, ``nn``, ``Tensor``)
and, where the exercise builds on an earlier one, that earlier exercise
(``softmax``, ``attention_scores``, ``scaled_dot_product_attention``), which
the catalogue tests supply from the reference.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.testing import (
    DTYPE_CHANGED,
    GRAPH_CUT,
    LIBRARY_CALL,
    MODIFIED_IN_PLACE,
    NO_VALUE_ERROR,
)
from catalogue import Entry
from solutions.self_attention import attention_scores, scaled_dot_product_attention, softmax

NEG_INF = float("-inf")

# ================================================================ softmax: wrong


def softmax_axis_zero(x, dim=-1):
    e = torch.exp(x - x.amax(dim=0, keepdim=True))
    return e / e.sum(dim=0, keepdim=True)


def softmax_dim_zero_by_default(x, dim=0):  # "the first axis" read as the default; right when dim is given
    finite_max = x.amax(dim=dim, keepdim=True).nan_to_num(0.0, posinf=0.0, neginf=0.0)
    e = torch.exp(x - finite_max)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def softmax_ignores_dim(x, dim=-1):
    m = x.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=-1, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def softmax_overflows(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_nan_on_masked_rows(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    s = e.sum(dim=dim, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e))


def softmax_no_keepdim(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=dim)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def softmax_library(x, dim=-1):
    return torch.softmax(x, dim=dim).nan_to_num(0.0)


def softmax_float32(x, dim=-1):
    x = x.float()
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def softmax_in_place(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    x -= m
    e = x.exp_()
    s = e.sum(dim=dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def softmax_through_numpy(x, dim=-1):
    a = x.detach().numpy()
    m = np.max(a, axis=dim, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(a - m)
    s = e.sum(axis=dim, keepdims=True)
    return torch.from_numpy(e / np.where(s > 0, s, 1.0))


# ================================================================ softmax: correct


def softmax_logsumexp(x, dim=-1):
    lse = torch.logsumexp(x, dim=dim, keepdim=True)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    return torch.exp(x - safe)


def softmax_float64_inside(x, dim=-1):
    y = x.to(torch.float64)
    m = y.max(dim=dim, keepdim=True).values.nan_to_num(0.0, neginf=0.0)
    e = (y - m).exp()
    s = e.sum(dim=dim, keepdim=True)
    return (e / s.clamp_min(torch.finfo(torch.float64).tiny)).to(x.dtype)


def softmax_finfo_min_then_zero(x, dim=-1):
    dead = torch.isneginf(x).all(dim=dim, keepdim=True)
    y = x.clamp_min(torch.finfo(x.dtype).min)
    e = torch.exp(y - y.amax(dim=dim, keepdim=True))
    w = e / e.sum(dim=dim, keepdim=True)
    return w.masked_fill(dead, 0.0).masked_fill(torch.isneginf(x), 0.0)


def softmax_moved_axis(x, dim=-1):
    y = x.movedim(dim, -1)
    m = y.amax(-1, keepdim=True)
    e = torch.exp(y - torch.where(m == NEG_INF, torch.zeros_like(m), m))
    s = e.sum(-1, keepdim=True)
    return (e / (s + (s == 0))).movedim(-1, dim)


# ================================================================ attention_scores


def scores_unscaled(q, k):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"d_k differs: q {tuple(q.shape)}, k {tuple(k.shape)}")
    return q @ k.transpose(-2, -1)


def scores_divided_by_d_k(q, k):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"d_k differs: q {tuple(q.shape)}, k {tuple(k.shape)}")
    return q @ k.transpose(-2, -1) / q.shape[-1]


def scores_transposed(q, k):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"d_k differs: q {tuple(q.shape)}, k {tuple(k.shape)}")
    return k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])


def scores_dot_t(q, k):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"d_k differs: q {tuple(q.shape)}, k {tuple(k.shape)}")
    return q @ k.permute(*reversed(range(k.dim()))) / math.sqrt(q.shape[-1])  # what k.T does


def scores_scaled_by_t_k(q, k):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"d_k differs: q {tuple(q.shape)}, k {tuple(k.shape)}")
    return q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2])


def scores_no_shape_check(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def scores_detached(q, k):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"d_k differs: q {tuple(q.shape)}, k {tuple(k.shape)}")
    return (q @ k.transpose(-2, -1)).detach() / math.sqrt(q.shape[-1])


def scores_einsum(q, k):
    if q.size(-1) != k.size(-1):
        raise ValueError(f"q has shape {tuple(q.shape)} but k has shape {tuple(k.shape)}: d_k must agree")
    return torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.size(-1))


def scores_scale_q_first(q, k):
    d_q, d_k = q.shape[-1], k.shape[-1]
    if d_q != d_k:
        raise ValueError(f"q {list(q.shape)} and k {list(k.shape)} have different d_k ({d_q} vs {d_k})")
    return (q * d_q**-0.5) @ k.mT


# ================================================================ scaled_dot_product_attention


def _check(q, k, mask):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"d_k differs: q {tuple(q.shape)}, k {tuple(k.shape)}")
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool (True = may attend), got {mask.dtype}")


def sdpa_wrong_axis(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores, dim=-2)
    return weights @ v, weights


def sdpa_unscaled(q, k, v, mask=None):
    _check(q, k, mask)
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores)
    return weights @ v, weights


def sdpa_divided_by_d_k(q, k, v, mask=None):
    _check(q, k, mask)
    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores)
    return weights @ v, weights


def sdpa_mask_after_softmax(q, k, v, mask=None):
    _check(q, k, mask)
    weights = softmax(attention_scores(q, k))
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def sdpa_mask_zero_fill(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    weights = softmax(scores)
    return weights @ v, weights


def sdpa_mask_inverted(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask, NEG_INF)
    weights = softmax(scores)
    return weights @ v, weights


def sdpa_minus_1e9(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_nan_rows(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_softmax_nan_to_num(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_keys_as_values(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores)
    return weights @ k, weights


def sdpa_weights_detached(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores).detach()
    return weights @ v, weights


def sdpa_float32(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores)
    return (weights @ v).float(), weights.float()


def sdpa_scales_q_in_place(q, k, v, mask=None):
    _check(q, k, mask)
    q /= math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores)
    return weights @ v, weights


def sdpa_library(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0), softmax(scores)


def sdpa_no_mask_check(q, k, v, mask=None):
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores)
    return weights @ v, weights


def sdpa_swapped_outputs(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = softmax(scores)
    return weights, weights @ v


def sdpa_mask_added(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores + mask
    weights = softmax(scores)
    return weights @ v, weights


def sdpa_einsum(q, k, v, mask=None):
    _check(q, k, mask)
    scores = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, NEG_INF))
    weights = softmax(scores)
    return torch.einsum("...ij,...jd->...id", weights, v), weights


def sdpa_finfo_min_then_zero(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights


def sdpa_additive_mask(q, k, v, mask=None):
    _check(q, k, mask)
    scores = attention_scores(q, k)
    if mask is not None:
        scores = scores + torch.zeros_like(scores).masked_fill(~mask, NEG_INF)
    weights = softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_float64_inside(q, k, v, mask=None):
    _check(q, k, mask)
    q64, k64, v64 = q.double(), k.double(), v.double()
    scores = q64 @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), NEG_INF)
    weights = softmax(scores)
    return (weights @ v64).to(v.dtype), weights.to(q.dtype)


# ================================================================ SelfAttention


class SelfAttentionVWidthDK(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_k, bias=bias)

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)


class SelfAttentionAlwaysBias(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_v or d_k)

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)


class SelfAttentionRawValues(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.w_q(x), self.w_k(x), x, mask)


class SelfAttentionQueryAsKey(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask=None):
        q = self.w_q(x)
        return scaled_dot_product_attention(q, q, self.w_v(x), mask)


class SelfAttentionDropsMask(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.w_q(x), self.w_k(x), self.w_v(x))


class SelfAttentionMaskRequired(nn.Module):  # forward(x, mask): right with a mask, a TypeError without one
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask):
        return scaled_dot_product_attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)


class SelfAttentionScaledByDModel(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.d_model = d_model
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask=None):
        scores = self.w_q(x) @ self.w_k(x).transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        weights = softmax(scores)
        return weights @ self.w_v(x), weights


class SelfAttentionFrozenQuery(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask=None):
        with torch.no_grad():
            q = self.w_q(x)
        return scaled_dot_product_attention(q, self.w_k(x), self.w_v(x), mask)


class SelfAttentionFunctional(nn.Module):
    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False) -> None:
        super().__init__()
        out = {"w_q": d_k, "w_k": d_k, "w_v": d_k if d_v is None else d_v}
        for name, width in out.items():
            setattr(self, name, nn.Linear(d_model, width, bias=bias))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        q, k, v = (F.linear(x, layer.weight, layer.bias) for layer in (self.w_q, self.w_k, self.w_v))
        return scaled_dot_product_attention(q, k, v, mask=mask)


class SelfAttentionInline(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_k if d_v is None else d_v, bias=bias)

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = torch.einsum("btd,bsd->bts", q, k) * q.shape[-1] ** -0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, NEG_INF)
        weights = softmax(scores)
        return weights @ v, weights


# ================================================================ concept checks


def score_position_transposed(query, key):
    return key, query


def score_position_from_one(query, key):
    return query + 1, key + 1


def score_count_linear(n_tokens):
    return n_tokens


def score_count_causal_half(n_tokens):
    return n_tokens * (n_tokens + 1) // 2


def score_count_without_own(n_tokens):
    return n_tokens * (n_tokens - 1)


def score_position_list(query, key):
    return [query, key]


def score_count_power(n_tokens):
    return n_tokens**2


def score_count_from_a_matrix(n_tokens):
    return torch.ones(n_tokens, n_tokens).numel()


WRONG = [
    Entry("softmax", "softmax over the wrong axis", softmax_axis_zero, "softmax over the wrong axis",
          "softmax_sums_to_one", also=("NaN on fully masked rows",)),
    Entry("softmax", "softmax that ignores `dim`", softmax_ignores_dim, "softmax over the wrong axis",
          "softmax_sums_to_one"),
    Entry("softmax", "overflowing softmax (no max subtracted)", softmax_overflows, "overflowing softmax",
          "softmax_stable", also=("NaN on fully masked rows",)),
    Entry("softmax", "NaN on fully masked rows", softmax_nan_on_masked_rows, "NaN on fully masked rows",
          "softmax_masked_entries"),
    Entry("softmax", "global instead of per-slice max", softmax_global_max, "global instead of per-slice max",
          "softmax_stable"),
    Entry("softmax", "dim defaulting to 0", softmax_dim_zero_by_default, "softmax over the wrong axis",
          "softmax_sums_to_one"),
    Entry("softmax", "sum without keepdim", softmax_no_keepdim, "forgot keepdim", "softmax_sums_to_one"),
    Entry("softmax", "calling the library softmax", softmax_library, LIBRARY_CALL, "softmax_no_library"),
    Entry("softmax", "dtype changed to float32", softmax_float32, DTYPE_CHANGED, "softmax_contract"),
    Entry("softmax", "input modified in place", softmax_in_place, MODIFIED_IN_PLACE, "softmax_contract"),
    Entry("softmax", "gradients cut by a NumPy round trip", softmax_through_numpy, GRAPH_CUT, "softmax_contract"),
    Entry("attention_scores", "no scaling", scores_unscaled, "no scaling", "attention_scores_values"),
    Entry("attention_scores", "dividing by d_k", scores_divided_by_d_k, "dividing by d_k", "attention_scores_values"),
    Entry("attention_scores", "k qᵀ instead of q kᵀ", scores_transposed, "transposed scores",
          "attention_scores_values"),
    Entry("attention_scores", "k.T on batched keys", scores_dot_t, "k.T on batched keys", "attention_scores_values"),
    Entry("attention_scores", "scaled by √T_k", scores_scaled_by_t_k, "scaled by the number of keys",
          "attention_scores_values"),
    Entry("attention_scores", "no ValueError on mismatched d_k", scores_no_shape_check, NO_VALUE_ERROR,
          "attention_scores_checks_shapes"),
    Entry("attention_scores", "gradients cut", scores_detached, GRAPH_CUT, "attention_scores_contract"),
    Entry("scaled_dot_product_attention", "softmax over the wrong axis", sdpa_wrong_axis,
          "softmax over the wrong axis", "scaled_dot_product_attention_matches_torch"),
    Entry("scaled_dot_product_attention", "no scaling", sdpa_unscaled, "no scaling",
          "scaled_dot_product_attention_matches_torch"),
    Entry("scaled_dot_product_attention", "dividing by d_k", sdpa_divided_by_d_k, "dividing by d_k",
          "scaled_dot_product_attention_matches_torch"),
    Entry("scaled_dot_product_attention", "mask applied after the softmax", sdpa_mask_after_softmax,
          "mask applied after the softmax", "scaled_dot_product_attention_mask"),
    Entry("scaled_dot_product_attention", "mask filled with 0", sdpa_mask_zero_fill,
          "mask filled with 0 instead of -inf", "scaled_dot_product_attention_mask"),
    Entry("scaled_dot_product_attention", "inverted mask", sdpa_mask_inverted, "inverted mask",
          "scaled_dot_product_attention_mask"),
    Entry("scaled_dot_product_attention", "-1e9 instead of -inf", sdpa_minus_1e9,
          "large negative number instead of -inf", "scaled_dot_product_attention_fully_masked"),
    Entry("scaled_dot_product_attention", "NaN on fully masked rows", sdpa_nan_rows, "NaN on fully masked rows",
          "scaled_dot_product_attention_fully_masked"),
    Entry("scaled_dot_product_attention", "keys used as values", sdpa_keys_as_values, "keys used as values",
          "scaled_dot_product_attention_matches_torch"),
    Entry("scaled_dot_product_attention", "gradients cut", sdpa_weights_detached, GRAPH_CUT,
          "scaled_dot_product_attention_gradients"),
    Entry("scaled_dot_product_attention", "dtype changed to float32", sdpa_float32, DTYPE_CHANGED,
          "scaled_dot_product_attention_gradients"),
    Entry("scaled_dot_product_attention", "q scaled in place", sdpa_scales_q_in_place, MODIFIED_IN_PLACE,
          "scaled_dot_product_attention_gradients"),
    Entry("scaled_dot_product_attention", "calling F.scaled_dot_product_attention", sdpa_library, LIBRARY_CALL,
          "scaled_dot_product_attention_gradients"),
    Entry("scaled_dot_product_attention", "no ValueError for a float mask", sdpa_no_mask_check, NO_VALUE_ERROR,
          "scaled_dot_product_attention_errors"),
    Entry("scaled_dot_product_attention", "(weights, out) returned", sdpa_swapped_outputs,
          "out and weights swapped", "scaled_dot_product_attention_shapes"),
    Entry("scaled_dot_product_attention", "boolean mask added to the scores", sdpa_mask_added,
          "mask added as numbers", "scaled_dot_product_attention_mask"),
    Entry("SelfAttention", "w_v of width d_k whatever d_v", SelfAttentionVWidthDK, "w_v of width d_k instead of d_v",
          "SelfAttention_projections"),
    Entry("SelfAttention", "projections always with bias", SelfAttentionAlwaysBias, "bias argument ignored",
          "SelfAttention_projections"),
    Entry("SelfAttention", "x used as the values", SelfAttentionRawValues, "values not projected",
          "SelfAttention_forward"),
    Entry("SelfAttention", "keys computed with w_q", SelfAttentionQueryAsKey, "keys computed with w_q",
          "SelfAttention_forward"),
    Entry("SelfAttention", "mask not passed on", SelfAttentionDropsMask, "mask ignored", "SelfAttention_forward"),
    Entry("SelfAttention", "mask without a default", SelfAttentionMaskRequired, "mask without a default",
          "SelfAttention_forward"),
    Entry("SelfAttention", "scaled by √d_model", SelfAttentionScaledByDModel, "scaled by √d_model instead of √d_k",
          "SelfAttention_forward"),
    Entry("SelfAttention", "w_q frozen by torch.no_grad", SelfAttentionFrozenQuery, GRAPH_CUT,
          "SelfAttention_gradients"),
    Entry("score_position", "K Qᵀ: key first", score_position_transposed, "K·Qᵀ for Q·Kᵀ", "score_position_answer"),
    Entry("score_position", "positions counted from 1", score_position_from_one, "positions counted from 1",
          "score_position_answer"),
    Entry("score_count", "linear in the length", score_count_linear, "cost taken as linear in the length",
          "score_count_answer"),
    Entry("score_count", "only the causal half", score_count_causal_half, "only the causal half counted",
          "score_count_answer"),
    Entry("score_count", "own score left out", score_count_without_own, "own score left out", "score_count_answer"),
]

CORRECT = [
    Entry("softmax", "log-sum-exp", softmax_logsumexp),
    Entry("softmax", "float64 inside", softmax_float64_inside),
    Entry("softmax", "finfo.min then zeroing", softmax_finfo_min_then_zero),
    Entry("softmax", "axis moved last", softmax_moved_axis),
    Entry("attention_scores", "einsum", scores_einsum),
    Entry("attention_scores", "scale q first, k.mT", scores_scale_q_first),
    Entry("scaled_dot_product_attention", "einsum and torch.where", sdpa_einsum),
    Entry("scaled_dot_product_attention", "finfo.min then zeroing", sdpa_finfo_min_then_zero),
    Entry("scaled_dot_product_attention", "additive 0/-inf mask", sdpa_additive_mask),
    Entry("scaled_dot_product_attention", "float64 inside", sdpa_float64_inside),
    Entry("scaled_dot_product_attention", "torch.softmax then nan_to_num", sdpa_softmax_nan_to_num),
    Entry("SelfAttention", "F.linear and setattr", SelfAttentionFunctional),
    Entry("SelfAttention", "attention written inline with einsum", SelfAttentionInline),
    Entry("score_position", "a list", score_position_list),
    Entry("score_count", "n ** 2", score_count_power),
    Entry("score_count", "counted from a tensor (a torch int)", score_count_from_a_matrix),
]
