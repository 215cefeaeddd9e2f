"""Chapter 2 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names
the exercise notebook provides (``math``, ``torch``, ``F``, ``nn``, ``Tensor``,
the given ``attention``) and, where the exercise builds on an earlier one, that
earlier exercise (``causal_mask``, ``padding_mask``, ``combine_masks``), which
the catalogue tests supply from the reference.
"""

from __future__ import annotations

import functools
import operator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.testing import DTYPE_CHANGED, MODIFIED_IN_PLACE, NO_VALUE_ERROR
from catalogue import Entry
from solutions.masking import causal_mask, combine_masks
from solutions.self_attention import scaled_dot_product_attention as attention

NEG_INF = float("-inf")


# ================================================================ causal_mask: wrong


def _lengths(t_q, t_k):
    t_k = t_q if t_k is None else t_k
    if t_q > t_k:
        raise ValueError(f"need t_q <= t_k, got t_q={t_q}, t_k={t_k}")
    return t_k


def causal_upper(t_q, t_k=None, device=None):
    t_k = _lengths(t_q, t_k)
    return torch.triu(torch.ones(t_q, t_k, dtype=torch.bool, device=device), diagonal=t_k - t_q)


def causal_blocked_future(t_q, t_k=None, device=None):  # nn.Transformer's convention: True = blocked
    t_k = _lengths(t_q, t_k)
    return torch.triu(torch.ones(t_q, t_k, dtype=torch.bool, device=device), diagonal=t_k - t_q + 1)


def causal_no_diagonal(t_q, t_k=None, device=None):
    t_k = _lengths(t_q, t_k)
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool, device=device), diagonal=t_k - t_q - 1)


def causal_first_key_aligned(t_q, t_k=None, device=None):
    t_k = _lengths(t_q, t_k)
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool, device=device))


def causal_square_t_k(t_q, t_k=None, device=None):
    t_k = _lengths(t_q, t_k)
    return torch.tril(torch.ones(t_k, t_k, dtype=torch.bool, device=device))


def causal_ignores_t_k(t_q, t_k=None, device=None):
    _lengths(t_q, t_k)
    return torch.tril(torch.ones(t_q, t_q, dtype=torch.bool, device=device))


def causal_offset_sign(t_q, t_k=None, device=None):
    t_k = _lengths(t_q, t_k)
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool, device=device), diagonal=t_q - t_k)


def causal_float(t_q, t_k=None, device=None):
    t_k = _lengths(t_q, t_k)
    return torch.tril(torch.ones(t_q, t_k, device=device), diagonal=t_k - t_q)


def causal_int(t_q, t_k=None, device=None):
    t_k = _lengths(t_q, t_k)
    i = torch.arange(t_q, device=device)[:, None]
    j = torch.arange(t_k, device=device)[None, :]
    return (j <= i + t_k - t_q).long()


def causal_additive(t_q, t_k=None, device=None):  # seed 000's 0/-inf matrix
    t_k = _lengths(t_q, t_k)
    future = torch.triu(torch.ones(t_q, t_k, dtype=torch.bool, device=device), diagonal=t_k - t_q + 1)
    return torch.zeros(t_q, t_k, device=device).masked_fill(future, NEG_INF)


def causal_cpu_only(t_q, t_k=None, device=None):
    t_k = _lengths(t_q, t_k)
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool), diagonal=t_k - t_q)


def causal_no_check(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool, device=device), diagonal=t_k - t_q)


# ================================================================ causal_mask: correct


def causal_arange(t_q: int, t_k: int | None = None, device=None) -> Tensor:
    t_k = t_q if t_k is None else t_k
    if t_q > t_k:
        raise ValueError(f"t_q ({t_q}) cannot exceed t_k ({t_k})")
    i = torch.arange(t_q, device=device).view(-1, 1)
    j = torch.arange(t_k, device=device).view(1, -1)
    return j - i <= t_k - t_q


def causal_triu_not(t_q, t_k=None, device=None):
    t_k = t_k or t_q
    if t_q > t_k:
        raise ValueError(f"more queries than keys: t_q={t_q} > t_k={t_k}")
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).triu(t_k - t_q + 1).logical_not()


def causal_last_rows(t_q, t_k=None, device=None):
    if t_k is None:
        t_k = t_q
    if t_q > t_k:
        raise ValueError(f"causal_mask({t_q}, {t_k}): t_q must not exceed t_k")
    square = torch.tril(torch.ones(t_k, t_k, dtype=torch.bool, device=device))
    return square[t_k - t_q:]


def causal_loops(t_q, t_k=None, device=None):
    t_k = t_q if t_k is None else t_k
    if t_q > t_k:
        raise ValueError(f"t_q={t_q} > t_k={t_k}")
    mask = torch.zeros(t_q, t_k, dtype=torch.bool)
    for i in range(t_q):
        for j in range(t_k):
            mask[i, j] = j <= i + (t_k - t_q)
    return mask.to(device) if device is not None else mask


# ================================================================ padding_mask


def _check_tokens(tokens):
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be (B, T), got {tuple(tokens.shape)}")


def padding_inverted(tokens, pad_id):
    _check_tokens(tokens)
    return (tokens == pad_id).unsqueeze(1)


def padding_b_t(tokens, pad_id):
    _check_tokens(tokens)
    return tokens != pad_id


def padding_b_t_1(tokens, pad_id):
    _check_tokens(tokens)
    return (tokens != pad_id).unsqueeze(-1)


def padding_zero(tokens, pad_id):
    _check_tokens(tokens)
    return (tokens != 0).unsqueeze(1)


def padding_float(tokens, pad_id):
    _check_tokens(tokens)
    return (tokens != pad_id).float().unsqueeze(1)


def padding_expanded(tokens, pad_id):
    _check_tokens(tokens)
    batch, t = tokens.shape
    return (tokens != pad_id).unsqueeze(1).expand(batch, t, t)


def padding_no_check(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(-2)


def padding_ne_unsqueeze(tokens: Tensor, pad_id: int) -> Tensor:
    if tokens.ndim != 2:
        raise ValueError(f"expected tokens of shape (B, T), got {list(tokens.shape)}")
    return tokens.ne(pad_id).unsqueeze(1)


def padding_not_equal_view(tokens, pad_id):
    if len(tokens.shape) != 2:
        raise ValueError(f"tokens should be 2-D (B, T); got shape {tuple(tokens.shape)}")
    batch, t = tokens.shape
    return ~(tokens == pad_id).view(batch, 1, t)


def padding_where(tokens, pad_id):
    if tokens.dim() != 2:
        raise ValueError(f"padding_mask wants (B, T) tokens, not {tokens.shape}")
    return torch.where(tokens == pad_id, False, True)[:, None, :]


# ================================================================ combine_masks


def _check_bool(masks):
    for m in masks:
        if m is not None and m.dtype != torch.bool:
            raise ValueError(f"masks must be bool, got {m.dtype}")


def combine_or(*masks):
    _check_bool(masks)
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    return functools.reduce(operator.or_, masks)


def combine_plus(*masks):  # for booleans + is OR, not AND
    _check_bool(masks)
    result = None
    for m in masks:
        if m is not None:
            result = m if result is None else result + m
    return result


def combine_last_only(*masks):
    _check_bool(masks)
    result = None
    for m in masks:
        if m is not None:
            result = m
    return result


def combine_none_not_skipped(*masks):
    _check_bool(masks)
    if all(m is None for m in masks):
        return None
    return functools.reduce(operator.and_, masks)


def combine_all_none_true(*masks):
    _check_bool(masks)
    return functools.reduce(torch.logical_and, [m for m in masks if m is not None], torch.tensor(True))


def combine_stack(*masks):
    _check_bool(masks)
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    return torch.stack(masks).all(dim=0)


def combine_in_place(*masks):
    _check_bool(masks)
    result = None
    for m in masks:
        if m is None:
            continue
        if result is None:
            result = m
        else:
            result &= m
    return result


def combine_float(*masks):
    _check_bool(masks)
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    result = masks[0].float()
    for m in masks[1:]:
        result = result * m.float()
    return result


def combine_no_check(*masks):
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    return functools.reduce(operator.and_, masks)


def combine_reduce_and(*masks):
    masks = [m for m in masks if m is not None]
    for m in masks:
        if m.dtype is not torch.bool:
            raise ValueError(f"combine_masks needs bool masks, got {m.dtype}")
    return functools.reduce(operator.and_, masks) if masks else None


def combine_logical_and(*masks):
    result = None
    for m in masks:
        if m is None:
            continue
        if m.dtype != torch.bool:
            raise ValueError(f"expected a bool mask (True = may attend), got {m.dtype}")
        result = m if result is None else torch.logical_and(result, m)
    return result


def combine_multiply(*masks):
    given = [m for m in masks if m is not None]
    if any(m.dtype != torch.bool for m in given):
        raise ValueError("all masks must be bool tensors")
    if not given:
        return None
    out = given[0]
    for m in given[1:]:
        out = out * m  # bool * bool is bool AND
    return out


def combine_broadcast_all(*masks):
    given = [m for m in masks if m is not None]
    if not given:
        return None
    if not all(m.dtype == torch.bool for m in given):
        raise ValueError(f"masks must be bool, got {[m.dtype for m in given]}")
    return torch.stack(torch.broadcast_tensors(*given)).all(dim=0)


# ================================================================ additive_mask


def _check_additive(mask, dtype):
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool, got {mask.dtype}")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be floating point, got {dtype}")


def additive_minus_1e9(mask, dtype=torch.float32):
    _check_additive(mask, dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, -1e9)


def additive_one_zero(mask, dtype=torch.float32):
    _check_additive(mask, dtype)
    return mask.to(dtype)


def additive_inverted(mask, dtype=torch.float32):
    _check_additive(mask, dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, NEG_INF)


def additive_times_inf(mask, dtype=torch.float32):
    _check_additive(mask, dtype)
    return (~mask).to(dtype) * NEG_INF


def additive_finfo_min(mask, dtype=torch.float32):
    _check_additive(mask, dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def additive_ignores_dtype(mask, dtype=torch.float32):
    _check_additive(mask, dtype)
    return torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, NEG_INF)


def additive_cpu_only(mask, dtype=torch.float32):
    _check_additive(mask, dtype)
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, NEG_INF)


def additive_no_check(mask, dtype=torch.float32):
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, NEG_INF)


def additive_zero_one(mask, dtype=torch.float32):
    _check_additive(mask, dtype)
    return (~mask).to(dtype)


def additive_masked_fill(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    if mask.dtype != torch.bool:
        raise ValueError(f"additive_mask takes a bool mask, got {mask.dtype}")
    if not torch.is_floating_point(torch.empty((), dtype=dtype)):
        raise ValueError(f"cannot hold -inf in {dtype}")
    return torch.zeros_like(mask, dtype=dtype).masked_fill(mask.logical_not(), float("-inf"))


def additive_log(mask, dtype=torch.float32):
    if mask.dtype != torch.bool:
        raise ValueError(f"mask should be bool, not {mask.dtype}")
    if not dtype.is_floating_point:
        raise ValueError(f"{dtype} is not a floating-point dtype")
    return torch.log(mask.to(dtype))  # log 1 = 0, log 0 = -inf


def additive_full_like(mask, dtype=torch.float32):
    if mask.dtype != torch.bool:
        raise ValueError(f"bool mask expected, got {mask.dtype}")
    if dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError(f"unsupported dtype {dtype}")
    minus_inf = torch.full_like(mask, NEG_INF, dtype=dtype)
    return torch.where(mask, 0.0, minus_inf)


# ================================================================ CausalSelfAttention


class _Projections(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_k if d_v is None else d_v, bias=bias)

    def qkv(self, x):
        return self.w_q(x), self.w_k(x), self.w_v(x)


class CausalNoMask(_Projections):
    def forward(self, x, pad_mask=None):
        return attention(*self.qkv(x), pad_mask)


class CausalIgnoresPad(_Projections):
    def forward(self, x, pad_mask=None):
        return attention(*self.qkv(x), causal_mask(x.shape[1], device=x.device))


class CausalPadOnQueries(_Projections):
    def forward(self, x, pad_mask=None):
        if pad_mask is not None:
            pad_mask = pad_mask.transpose(1, 2)  # (B, T, 1)
        return attention(*self.qkv(x), combine_masks(causal_mask(x.shape[1], device=x.device), pad_mask))


class CausalUpper(_Projections):
    def forward(self, x, pad_mask=None):
        t = x.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device))
        return attention(*self.qkv(x), combine_masks(causal, pad_mask))


class CausalOr(_Projections):
    def forward(self, x, pad_mask=None):
        mask = causal_mask(x.shape[1], device=x.device)
        if pad_mask is not None:
            mask = mask | pad_mask
        return attention(*self.qkv(x), mask)


class CausalPadReplaces(_Projections):
    def forward(self, x, pad_mask=None):
        mask = pad_mask if pad_mask is not None else causal_mask(x.shape[1], device=x.device)
        return attention(*self.qkv(x), mask)


class CausalPadInverted(_Projections):
    def forward(self, x, pad_mask=None):
        pad = None if pad_mask is None else ~pad_mask
        return attention(*self.qkv(x), combine_masks(causal_mask(x.shape[1], device=x.device), pad))


class CausalInvertedMask(_Projections):
    def forward(self, x, pad_mask=None):  # True = blocked, as in nn.Transformer
        mask = combine_masks(causal_mask(x.shape[1], device=x.device), pad_mask)
        return attention(*self.qkv(x), ~mask)


class CausalNoDiagonal(_Projections):
    def forward(self, x, pad_mask=None):
        t = x.shape[1]
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=-1)
        return attention(*self.qkv(x), combine_masks(causal, pad_mask))


class CausalBiasAlways(nn.Module):
    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_v or d_k)

    def forward(self, x, pad_mask=None):
        mask = combine_masks(causal_mask(x.shape[1], device=x.device), pad_mask)
        return attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)


class CausalFloat32(_Projections):
    def forward(self, x, pad_mask=None):
        mask = combine_masks(causal_mask(x.shape[1], device=x.device), pad_mask)
        out, weights = attention(*self.qkv(x), mask)
        return out.float(), weights.float()


class CausalSoftmaxNaN(_Projections):
    def forward(self, x, pad_mask=None):
        q, k, v = self.qkv(x)
        mask = combine_masks(causal_mask(x.shape[1], device=x.device), pad_mask)
        scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, NEG_INF)
        weights = torch.softmax(scores, dim=-1)
        return weights @ v, weights


class CausalAnd(_Projections):
    def forward(self, x, pad_mask=None):
        mask = causal_mask(x.size(1), device=x.device)
        if pad_mask is not None:
            mask = mask & pad_mask  # (T, T) & (B, 1, T) -> (B, T, T)
        return attention(*self.qkv(x), mask)


class CausalAdditiveNaNGradient(nn.Module):
    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False) -> None:
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v if d_v is not None else d_k, bias=bias)

    def forward(self, x: Tensor, pad_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        t = x.shape[-2]
        allowed = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        if pad_mask is not None:
            allowed = allowed & pad_mask
        bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(~allowed, NEG_INF)
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = torch.einsum("btd,bsd->bts", q, k) / q.shape[-1] ** 0.5 + bias
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return weights @ v, weights


class CausalManualMaskedFill(nn.Module):
    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False) -> None:
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v if d_v is not None else d_k, bias=bias)

    def forward(self, x: Tensor, pad_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        t = x.shape[-2]
        allowed = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        if pad_mask is not None:
            allowed = allowed & pad_mask
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = torch.einsum("btd,bsd->bts", q, k) / q.shape[-1] ** 0.5
        weights = torch.softmax(scores.masked_fill(~allowed, NEG_INF), dim=-1).nan_to_num(0.0)
        return weights @ v, weights


class CausalTorchSDPA(_Projections):
    def forward(self, x, pad_mask=None):
        q, k, v = self.qkv(x)
        mask = combine_masks(causal_mask(x.shape[1], device=x.device), pad_mask)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        _, weights = attention(q, k, v, mask)
        return out, weights


# ================================================================ concept checks


def shapes_weights_t_by_d(n_tokens, d_model):
    return (n_tokens, d_model), (n_tokens, d_model)


def shapes_output_t_by_t(n_tokens, d_model):
    return (n_tokens, n_tokens), (n_tokens, n_tokens)


def shapes_swapped(n_tokens, d_model):
    return (n_tokens, d_model), (n_tokens, n_tokens)


def shapes_masked_removed(n_tokens, d_model):
    return (n_tokens * (n_tokens + 1) // 2,), (n_tokens, d_model)


def keys_no_look_ahead(tokens, pad_id, query):
    return tuple(key for key, token in enumerate(tokens) if token != pad_id)


def keys_diagonal_masked(tokens, pad_id, query):
    return tuple(key for key in range(query) if tokens[key] != pad_id)


def keys_no_padding(tokens, pad_id, query):
    return tuple(range(query + 1))


def keys_padding_on_queries(tokens, pad_id, query):
    if tokens[query] == pad_id:
        return ()
    return tuple(key for key in range(query + 1) if tokens[key] != pad_id)


def shapes_from_tensors(n_tokens, d_model):
    q = k = v = torch.zeros(n_tokens, d_model)
    weights = (q @ k.T).masked_fill(~torch.ones(n_tokens, n_tokens, dtype=torch.bool).tril(), float("-inf"))
    weights = weights.softmax(dim=-1)
    return weights.shape, (weights @ v).shape


def keys_from_the_masks(tokens, pad_id, query):
    t = torch.tensor([tokens])
    mask = torch.ones(len(tokens), len(tokens), dtype=torch.bool).tril() & (t != pad_id).unsqueeze(1)
    return mask[0, query].nonzero().flatten().tolist()


WRONG = [
    # causal_mask
    Entry("causal_mask", "upper instead of lower triangle", causal_upper, "upper instead of lower triangle",
          "causal_mask_square"),
    Entry("causal_mask", "True marks the future (nn.Transformer's convention)", causal_blocked_future,
          "inverted: True marks the future", "causal_mask_square", also=("inverted mask",)),
    Entry("causal_mask", "diagonal excluded", causal_no_diagonal, "diagonal excluded", "causal_mask_square"),
    Entry("causal_mask", "cache offset ignored: aligned to the first key", causal_first_key_aligned,
          "queries aligned with the first key", "causal_mask_offset"),
    Entry("causal_mask", "cache offset ignored: a t_k × t_k mask", causal_square_t_k, "a t_k × t_k mask",
          "causal_mask_offset"),
    Entry("causal_mask", "t_k ignored: a t_q × t_q mask", causal_ignores_t_k, "t_k ignored", "causal_mask_offset"),
    Entry("causal_mask", "offset with the wrong sign", causal_offset_sign, "offset with the wrong sign",
          "causal_mask_offset"),
    Entry("causal_mask", "float mask instead of bool", causal_float, "float mask instead of bool",
          "causal_mask_dtype_device"),
    Entry("causal_mask", "int mask instead of bool", causal_int, "integer mask instead of bool",
          "causal_mask_dtype_device"),
    Entry("causal_mask", "additive 0/-inf mask instead of boolean", causal_additive,
          "additive 0/-inf mask instead of boolean", "causal_mask_square", also=("float mask instead of bool",)),
    Entry("causal_mask", "device ignored", causal_cpu_only, "device ignored", "causal_mask_dtype_device"),
    Entry("causal_mask", "no ValueError for t_q > t_k", causal_no_check, NO_VALUE_ERROR, "causal_mask_errors"),
    # padding_mask
    Entry("padding_mask", "inverted: True at the pads", padding_inverted, "inverted: True at the pads",
          "padding_mask_values"),
    Entry("padding_mask", "shape (B, T) instead of (B, 1, T)", padding_b_t, "no query axis", "padding_mask_shape"),
    Entry("padding_mask", "shape (B, T, 1) instead of (B, 1, T)", padding_b_t_1,
          "padding masks queries instead of keys", "padding_mask_shape"),
    Entry("padding_mask", "compared with 0 instead of pad_id", padding_zero, "pad_id ignored", "padding_mask_values"),
    Entry("padding_mask", "float mask instead of bool", padding_float, "float mask instead of bool",
          "padding_mask_shape"),
    Entry("padding_mask", "expanded to (B, T, T)", padding_expanded, "expanded over the queries",
          "padding_mask_shape"),
    Entry("padding_mask", "no ValueError for tokens that are not (B, T)", padding_no_check, NO_VALUE_ERROR,
          "padding_mask_errors"),
    # combine_masks
    Entry("combine_masks", "OR instead of AND", combine_or, "OR instead of AND", "combine_masks_and"),
    Entry("combine_masks", "bool + bool, which is OR", combine_plus, "OR instead of AND", "combine_masks_and"),
    Entry("combine_masks", "only the last mask kept", combine_last_only, "only the last mask kept",
          "combine_masks_and", also=("no causal mask",)),
    Entry("combine_masks", "None not ignored", combine_none_not_skipped, "None not ignored", "combine_masks_none"),
    Entry("combine_masks", "all None gives tensor(True)", combine_all_none_true, "all None should give None",
          "combine_masks_none"),
    Entry("combine_masks", "torch.stack does not broadcast", combine_stack, "masks not broadcast",
          "combine_masks_and"),
    Entry("combine_masks", "first mask modified in place", combine_in_place, MODIFIED_IN_PLACE,
          "combine_masks_and"),
    Entry("combine_masks", "float result instead of bool", combine_float, "float mask instead of bool",
          "combine_masks_and"),
    Entry("combine_masks", "no ValueError for a non-boolean mask", combine_no_check, NO_VALUE_ERROR,
          "combine_masks_errors"),
    # additive_mask
    Entry("additive_mask", "-1e9 instead of -inf", additive_minus_1e9, "large negative number instead of -inf",
          "additive_mask_values"),
    Entry("additive_mask", "1/0 instead of 0/-inf", additive_one_zero, "bool mask cast to 1/0",
          "additive_mask_values"),
    Entry("additive_mask", "0/1 instead of 0/-inf", additive_zero_one, "blocked keys get 1, not -inf",
          "additive_mask_values"),
    Entry("additive_mask", "inverted: -inf where True", additive_inverted, "inverted: -inf where True",
          "additive_mask_values"),
    Entry("additive_mask", "mask times -inf (0 × -inf is NaN)", additive_times_inf, "mask multiplied by -inf",
          "additive_mask_values"),
    Entry("additive_mask", "finfo.min instead of -inf", additive_finfo_min, "finfo.min instead of -inf",
          "additive_mask_values"),
    Entry("additive_mask", "dtype argument ignored", additive_ignores_dtype, "dtype argument ignored",
          "additive_mask_dtype_device"),
    Entry("additive_mask", "device ignored", additive_cpu_only, "device ignored", "additive_mask_dtype_device"),
    Entry("additive_mask", "no ValueErrors", additive_no_check, NO_VALUE_ERROR, "additive_mask_errors"),
    # CausalSelfAttention
    Entry("CausalSelfAttention", "no causal mask", CausalNoMask, "no causal mask",
          "CausalSelfAttention_no_future_leak"),
    Entry("CausalSelfAttention", "pad_mask ignored", CausalIgnoresPad, "pad_mask ignored",
          "CausalSelfAttention_padding_invariance"),
    Entry("CausalSelfAttention", "pad mask applied to queries instead of keys", CausalPadOnQueries,
          "padding masks queries instead of keys", "CausalSelfAttention_padding_invariance"),
    Entry("CausalSelfAttention", "upper instead of lower triangle", CausalUpper, "upper instead of lower triangle",
          "CausalSelfAttention_no_future_leak"),
    Entry("CausalSelfAttention", "OR instead of AND", CausalOr, "OR instead of AND", "CausalSelfAttention_forward"),
    Entry("CausalSelfAttention", "causal mask dropped when pad_mask is given", CausalPadReplaces,
          "no causal mask", "CausalSelfAttention_no_future_leak"),
    Entry("CausalSelfAttention", "pad_mask inverted", CausalPadInverted, "pad_mask inverted",
          "CausalSelfAttention_padding_invariance"),
    Entry("CausalSelfAttention", "True = blocked (inverted mask)", CausalInvertedMask, "inverted mask",
          "CausalSelfAttention_forward"),
    Entry("CausalSelfAttention", "diagonal excluded", CausalNoDiagonal, "diagonal excluded",
          "CausalSelfAttention_forward"),
    Entry("CausalSelfAttention", "projections always with bias", CausalBiasAlways, "bias argument ignored",
          "CausalSelfAttention_projections"),
    Entry("CausalSelfAttention", "dtype changed to float32", CausalFloat32, DTYPE_CHANGED,
          "CausalSelfAttention_forward"),
    Entry("CausalSelfAttention", "torch.softmax gives NaN on fully masked rows", CausalSoftmaxNaN,
          "NaN on fully masked rows", "CausalSelfAttention_padding_invariance"),
    Entry("CausalSelfAttention", "additive -inf mask: NaN gradient on fully masked rows", CausalAdditiveNaNGradient,
          "NaN gradient on fully masked rows", "CausalSelfAttention_forward"),
    Entry("masked_attention_shapes", "weights T × d_model", shapes_weights_t_by_d, "weights taken to be T × d_model",
          "masked_attention_shapes_answer"),
    Entry("masked_attention_shapes", "output T × T", shapes_output_t_by_t, "output taken to be T × T",
          "masked_attention_shapes_answer"),
    Entry("masked_attention_shapes", "output first", shapes_swapped, "weights and output swapped",
          "masked_attention_shapes_answer"),
    Entry("masked_attention_shapes", "masked entries removed", shapes_masked_removed,
          "masked entries taken as removed", "masked_attention_shapes_answer"),
    Entry("visible_keys", "later keys kept", keys_no_look_ahead, "look-ahead mask left out", "visible_keys_answer"),
    Entry("visible_keys", "the diagonal masked", keys_diagonal_masked, "diagonal masked", "visible_keys_answer"),
    Entry("visible_keys", "padding not masked", keys_no_padding, "padding mask left out", "visible_keys_answer"),
    Entry("visible_keys", "padded queries see nothing", keys_padding_on_queries, "padding applied to the queries",
          "visible_keys_answer"),
]

CORRECT = [
    Entry("causal_mask", "comparison of aranges", causal_arange),
    Entry("causal_mask", "ones().triu().logical_not()", causal_triu_not),
    Entry("causal_mask", "last t_q rows of the square mask", causal_last_rows),
    Entry("causal_mask", "nested loops, then .to(device)", causal_loops),
    Entry("padding_mask", "ne and unsqueeze", padding_ne_unsqueeze),
    Entry("padding_mask", "~(tokens == pad_id).view", padding_not_equal_view),
    Entry("padding_mask", "torch.where", padding_where),
    Entry("combine_masks", "functools.reduce with &", combine_reduce_and),
    Entry("combine_masks", "torch.logical_and in a loop", combine_logical_and),
    Entry("combine_masks", "bool * bool", combine_multiply),
    Entry("combine_masks", "broadcast_tensors, stack, all", combine_broadcast_all),
    Entry("additive_mask", "zeros_like and masked_fill", additive_masked_fill),
    Entry("additive_mask", "log of the mask", additive_log),
    Entry("additive_mask", "full_like and torch.where", additive_full_like),
    Entry("CausalSelfAttention", "causal_mask & pad_mask", CausalAnd),
    Entry("CausalSelfAttention", "einsum, masked_fill, softmax and nan_to_num", CausalManualMaskedFill),
    Entry("CausalSelfAttention", "F.scaled_dot_product_attention for out", CausalTorchSDPA),
    Entry("masked_attention_shapes", "read off real tensors", shapes_from_tensors),
    Entry("visible_keys", "read off the combined mask (a list)", keys_from_the_masks),
]
