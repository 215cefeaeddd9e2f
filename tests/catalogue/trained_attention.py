"""Chapter 8 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names the exercise notebook gives
(``math``, ``torch``, ``F``, ``nn``, ``Tensor``, ``AttentionOnly``, ``repeated_tokens``) and, where the exercise
builds on an earlier one (``repeat_loss`` on ``ablate_head``), that earlier exercise, which the catalogue tests
supply from the reference.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from catalogue import Entry
from solutions.trained_attention import ablate_head


def _maps_checked(weights: Tensor) -> None:
    if not weights.is_floating_point() or weights.dim() < 2:
        raise ValueError(f"weights must be floating point (..., T_q, T_k), got {tuple(weights.shape)}")


def _square_checked(weights: Tensor) -> None:
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 2:
        raise ValueError(f"weights must be (..., T, T) with T >= 2, got {tuple(weights.shape)}")


def _plogp(weights: Tensor) -> Tensor:
    """w ln w, 0 where w is 0."""
    return weights * torch.where(weights > 0, weights, torch.ones_like(weights)).log()


# ================================================================ attention_entropy


def entropy_bits(weights):
    _maps_checked(weights)
    safe = torch.where(weights > 0, weights, torch.ones_like(weights))
    return -(weights * torch.log2(safe)).sum(dim=-1).mean(dim=-1)


def entropy_queries_summed(weights):
    _maps_checked(weights)
    return -_plogp(weights).sum(dim=-1).sum(dim=-1)


def entropy_no_minus(weights):
    _maps_checked(weights)
    return _plogp(weights).sum(dim=-1).mean(dim=-1)


def entropy_over_columns(weights):
    _maps_checked(weights)
    return -_plogp(weights).sum(dim=-2).mean(dim=-1)  # each key's column taken as the distribution


def entropy_keys_averaged(weights):
    _maps_checked(weights)
    return -_plogp(weights).mean(dim=-1).mean(dim=-1)


def entropy_normalised(weights):
    _maps_checked(weights)
    return -_plogp(weights).sum(dim=-1).mean(dim=-1) / math.log(weights.shape[-1])


def entropy_per_query(weights):
    _maps_checked(weights)
    return -_plogp(weights).sum(dim=-1)


def entropy_plain_log(weights):
    _maps_checked(weights)
    return -(weights * weights.log()).sum(dim=-1).mean(dim=-1)  # 0 * -inf is NaN


def entropy_skips_zero_rows(weights):
    _maps_checked(weights)
    rows = -_plogp(weights).sum(dim=-1)
    seen = (weights.sum(dim=-1) > 0).to(weights.dtype)  # "a row of zeros is not a distribution: skip it"
    return (rows * seen).sum(dim=-1) / seen.sum(dim=-1)


def entropy_float32(weights):
    _maps_checked(weights)
    return -_plogp(weights.float()).sum(dim=-1).mean(dim=-1)


def entropy_unchecked(weights):
    return -_plogp(weights).sum(dim=-1).mean(dim=-1)


def entropy_as_numbers(weights):
    _maps_checked(weights)
    return torch.tensor((-_plogp(weights).sum(dim=-1).mean(dim=-1)).tolist(), dtype=weights.dtype)


def entropy_xlogy(weights):
    _maps_checked(weights)
    return -torch.special.xlogy(weights, weights).sum(dim=-1).mean(dim=-1)


def entropy_nan_to_num(weights):
    _maps_checked(weights)
    return -(weights * weights.log()).nan_to_num(0.0).sum(dim=-1).mean(dim=-1)


# ================================================================ previous_token_score


def previous_query_0_counted(weights):
    _square_checked(weights)
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).sum(dim=-1) / weights.shape[-1]


def previous_main_diagonal(weights):
    _square_checked(weights)
    return torch.diagonal(weights, dim1=-2, dim2=-1).mean(dim=-1)


def previous_next_token(weights):
    _square_checked(weights)
    return torch.diagonal(weights, offset=1, dim1=-2, dim2=-1).mean(dim=-1)


def previous_summed(weights):
    _square_checked(weights)
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).sum(dim=-1)


def previous_unchecked(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)


def previous_float32(weights):
    _square_checked(weights)
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).float().mean(dim=-1)


def previous_by_loop(weights):
    _square_checked(weights)
    t = weights.shape[-1]
    return sum(weights[..., i, i - 1] for i in range(1, t)) / (t - 1)


# ================================================================ induction_score


def _induction_checked(weights: Tensor, period: int) -> None:
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2] or not 1 <= period < weights.shape[-1]:
        raise ValueError(f"need (..., T, T) maps and 1 <= period < T; got {tuple(weights.shape)}, period={period}")


def induction_earlier_occurrence(weights, period):
    _induction_checked(weights, period)
    return torch.diagonal(weights, offset=-period, dim1=-2, dim2=-1).mean(dim=-1)  # a duplicate-token head


def induction_from_query_p_minus_1(weights, period):
    _induction_checked(weights, period)
    return torch.diagonal(weights, offset=1 - period, dim1=-2, dim2=-1).mean(dim=-1)


def induction_over_every_query(weights, period):
    _induction_checked(weights, period)
    return torch.diagonal(weights, offset=1 - period, dim1=-2, dim2=-1)[..., 1:].sum(dim=-1) / weights.shape[-1]


def induction_summed(weights, period):
    _induction_checked(weights, period)
    return torch.diagonal(weights, offset=1 - period, dim1=-2, dim2=-1)[..., 1:].sum(dim=-1)


def induction_unchecked(weights, period):
    return torch.diagonal(weights, offset=1 - period, dim1=-2, dim2=-1)[..., 1:].mean(dim=-1)


def induction_by_loop(weights, period):
    _induction_checked(weights, period)
    t = weights.shape[-1]
    return torch.stack([weights[..., i, i - period + 1] for i in range(period, t)], dim=-1).mean(dim=-1)


# ================================================================ ablate_head


def _head_checked(z: Tensor, head: int, mean: Tensor | None) -> None:
    if z.dim() != 4 or not 0 <= head < z.shape[1]:
        raise ValueError(f"need z (B, n_heads, T, d_head) and 0 <= head < n_heads; got {tuple(z.shape)}, {head}")
    if mean is not None:
        try:
            torch.broadcast_shapes(mean.shape, (z.shape[0], z.shape[2], z.shape[3]))
        except RuntimeError:
            raise ValueError(f"mean {tuple(mean.shape)} does not broadcast to one head of z {tuple(z.shape)}") from None


def ablate_time_axis(z, head, mean=None):
    _head_checked(z, head, mean)
    out = z.clone()
    out[:, :, head] = 0.0 if mean is None else mean  # "the head is the third axis"
    return out


def ablate_all_but_the_head(z, head, mean=None):
    _head_checked(z, head, mean)
    keep = torch.zeros(z.shape[1], dtype=torch.bool)
    keep[head] = True
    out = z.clone()
    out[:, ~keep] = 0.0 if mean is None else mean.to(z.dtype)
    return out


def ablate_counted_from_1(z, head, mean=None):
    _head_checked(z, head, mean)
    out = z.clone()
    out[:, head - 1] = 0.0 if mean is None else mean.to(z.dtype)
    return out


def ablate_ignores_mean(z, head, mean=None):
    _head_checked(z, head, mean)
    out = z.clone()
    out[:, head] = 0.0
    return out


def ablate_adds_mean(z, head, mean=None):
    _head_checked(z, head, mean)
    out = z.clone()
    out[:, head] = 0.0 if mean is None else z[:, head] + mean.to(z.dtype)
    return out


def ablate_mean_of_z(z, head, mean=None):
    _head_checked(z, head, mean)
    out = z.clone()
    out[:, head] = 0.0 if mean is None else z[:, head].mean(dim=0)
    return out


def ablate_in_place(z, head, mean=None):
    _head_checked(z, head, mean)
    z[:, head] = 0.0 if mean is None else mean.to(z.dtype)
    return z


def ablate_detached(z, head, mean=None):
    _head_checked(z, head, mean)
    out = z.detach().clone()
    out[:, head] = 0.0 if mean is None else mean.to(z.dtype)
    return out


def ablate_unchecked_head(z, head, mean=None):
    out = z.clone()
    out[:, head] = 0.0 if mean is None else mean.to(z.dtype)  # head -1 quietly ablates the last head
    return out


def ablate_float32(z, head, mean=None):
    _head_checked(z, head, mean)
    out = torch.zeros(z.shape)
    out[:] = z
    out[:, head] = 0.0 if mean is None else mean.float()
    return out


def ablate_with_where(z, head, mean=None):
    _head_checked(z, head, mean)
    replacement = torch.zeros_like(z[:, head]) if mean is None else mean.to(z.dtype).expand_as(z[:, head])
    chosen = (torch.arange(z.shape[1]) == head).view(1, -1, 1, 1)
    return torch.where(chosen, replacement.unsqueeze(1), z)


def ablate_by_concatenation(z, head, mean=None):
    _head_checked(z, head, mean)
    new = torch.zeros_like(z[:, head]) if mean is None else torch.zeros_like(z[:, head]) + mean.to(z.dtype)
    return torch.cat([z[:, :head], new.unsqueeze(1), z[:, head + 1:]], dim=1)  # (B, T, d) -> (B, 1, T, d)


# ================================================================ repeat_loss


def _loss_checked(tokens: Tensor, period: int, site, head) -> None:
    if (site is None) != (head is None):
        raise ValueError("give both site and head, or neither")
    if tokens.dim() != 2 or tokens.shape[1] < period + 2:
        raise ValueError(f"tokens (B, T) need T >= period + 2, got {tuple(tokens.shape)}, period={period}")


def _logits(model, tokens, site, head, mean):
    handle = None if site is None else site.register_forward_hook(lambda m, i, z: ablate_head(z, head, mean))
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        model.train(mode)
        if handle is not None:
            handle.remove()


def repeat_first_token_scored(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    logits = _logits(model, tokens, site, head, mean)
    return F.cross_entropy(logits[:, period - 1:-1].flatten(0, 1), tokens[:, period:].flatten())


def repeat_not_shifted(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    logits = _logits(model, tokens, site, head, mean)
    return F.cross_entropy(logits[:, period + 1:].flatten(0, 1), tokens[:, period + 1:].flatten())


def repeat_whole_sequence(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    logits = _logits(model, tokens, site, head, mean)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def repeat_in_training_mode(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    handle = None if site is None else site.register_forward_hook(lambda m, i, z: ablate_head(z, head, mean))
    try:
        with torch.no_grad():
            logits = model(tokens)  # dropout stays on
    finally:
        if handle is not None:
            handle.remove()
    return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten())


def repeat_hook_returns_nothing(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)

    def hook(module, inputs, z):
        z = ablate_head(z, head, mean)  # rebinds the name; the hook returns None, so nothing is replaced

    handle = None if site is None else site.register_forward_hook(hook)
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(tokens)
    finally:
        model.train(mode)
        if handle is not None:
            handle.remove()
    return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten())


def repeat_mean_dropped(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    logits = _logits(model, tokens, site, head, None)
    return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten())


def repeat_hook_kept(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    if site is not None:
        site.register_forward_hook(lambda m, i, z: ablate_head(z, head, mean))  # never removed
    mode = model.training
    model.eval()
    with torch.no_grad():
        logits = model(tokens)
    model.train(mode)
    return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten())


def repeat_hook_removed_on_success(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    handle = None if site is None else site.register_forward_hook(lambda m, i, z: ablate_head(z, head, mean))
    mode = model.training
    model.eval()
    with torch.no_grad():
        logits = model(tokens)  # if this raises, the hook stays
    model.train(mode)
    if handle is not None:
        handle.remove()
    return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten())


def repeat_left_in_eval(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    handle = None if site is None else site.register_forward_hook(lambda m, i, z: ablate_head(z, head, mean))
    model.eval()
    try:
        with torch.no_grad():
            logits = model(tokens)
    finally:
        if handle is not None:
            handle.remove()
    return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten())


def repeat_always_back_to_training(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    handle = None if site is None else site.register_forward_hook(lambda m, i, z: ablate_head(z, head, mean))
    model.eval()
    try:
        with torch.no_grad():
            logits = model(tokens)
    finally:
        model.train()
        if handle is not None:
            handle.remove()
    return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten())


def repeat_unchecked(model, tokens, period, site=None, head=None, mean=None):
    logits = _logits(model, tokens, site, head, mean)  # a site without a head reaches ablate_head(z, None)
    return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten())


@contextlib.contextmanager
def _hooked(site, hook):
    handle = site.register_forward_hook(hook) if site is not None else None
    try:
        yield
    finally:
        if handle is not None:
            handle.remove()


def repeat_with_gather(model, tokens, period, site=None, head=None, mean=None):
    _loss_checked(tokens, period, site, head)
    mode = model.training
    try:
        with _hooked(site, lambda m, i, z: ablate_head(z, head, mean)), torch.inference_mode():
            log_p = model.eval()(tokens).log_softmax(dim=-1)  # (B, T, V)
    finally:
        model.train(mode)
    picked = log_p[:, period:-1].gather(-1, tokens[:, period + 1:, None])  # (B, T - P - 1, 1)
    return -picked.mean()


# ================================================================ concept checks


def heatmap_d_model_wide(n_tokens, d_model, n_layers, n_heads, query):
    return (n_tokens, d_model), n_layers * n_heads, query + 1


def heatmap_head_output(n_tokens, d_model, n_layers, n_heads, query):
    return (n_tokens, d_model // n_heads), n_layers * n_heads, query + 1


def heatmap_one_layer(n_tokens, d_model, n_layers, n_heads, query):
    return (n_tokens, n_tokens), n_heads, query + 1


def heatmap_no_mask(n_tokens, d_model, n_layers, n_heads, query):
    return (n_tokens, n_tokens), n_layers * n_heads, n_tokens


def heatmap_by_counting(n_tokens, d_model, n_layers, n_heads, query):
    keys_seen = len(range(0, query + 1))
    return (n_tokens, n_tokens), sum(n_heads for _ in range(n_layers)), keys_seen


def largest_weight(weights, value_norms):
    return max(range(len(weights)), key=lambda j: weights[j])  # "the brightest cell is what the head used"


def longest_value(weights, value_norms):
    return max(range(len(value_norms)), key=lambda j: value_norms[j])


def largest_term_with_torch(weights, value_norms):
    return int((torch.tensor(weights) * torch.tensor(value_norms)).argmax())


WRONG = [
    Entry("attention_entropy", "log base 2", entropy_bits, "bits instead of nats", "attention_entropy_values"),
    Entry("attention_entropy", "summed over the queries", entropy_queries_summed, "queries summed, not averaged",
          "attention_entropy_values"),
    Entry("attention_entropy", "no minus sign", entropy_no_minus, "minus sign missing", "attention_entropy_values"),
    Entry("attention_entropy", "entropy of the columns", entropy_over_columns, "entropy over the wrong axis",
          "attention_entropy_values"),
    Entry("attention_entropy", "averaged over the keys", entropy_keys_averaged, "keys averaged, not summed",
          "attention_entropy_values"),
    Entry("attention_entropy", "divided by ln T_k", entropy_normalised, "normalised entropy",
          "attention_entropy_values"),
    Entry("attention_entropy", "one entropy per query", entropy_per_query, "queries not averaged",
          "attention_entropy_values"),
    Entry("attention_entropy", "w * w.log()", entropy_plain_log, "NaN from 0 ln 0", "attention_entropy_zeros"),
    Entry("attention_entropy", "rows of zeros skipped", entropy_skips_zero_rows, "zero rows left out",
          "attention_entropy_zeros"),
    Entry("attention_entropy", "float32 always", entropy_float32, "dtype not kept", "attention_entropy_contract"),
    Entry("attention_entropy", "no argument checks", entropy_unchecked, "no ValueError for bad arguments",
          "attention_entropy_contract"),
    Entry("attention_entropy", "rebuilt from numbers", entropy_as_numbers, "gradients cut",
          "attention_entropy_contract"),
    Entry("previous_token_score", "query 0 counted", previous_query_0_counted, "query 0 counted",
          "previous_token_score_values"),
    Entry("previous_token_score", "the main diagonal", previous_main_diagonal,
          "the token itself instead of the previous one", "previous_token_score_values"),
    Entry("previous_token_score", "the diagonal above", previous_next_token, "next token instead of previous",
          "previous_token_score_values"),
    Entry("previous_token_score", "summed", previous_summed, "sum instead of mean", "previous_token_score_values"),
    Entry("previous_token_score", "no argument checks", previous_unchecked, "no ValueError for bad arguments",
          "previous_token_score_errors"),
    Entry("previous_token_score", "float32 always", previous_float32, "dtype not kept", "previous_token_score_values"),
    Entry("induction_score", "the earlier occurrence", induction_earlier_occurrence, "the earlier occurrence itself",
          "induction_score_values"),
    Entry("induction_score", "from query P - 1", induction_from_query_p_minus_1, "query P-1 counted",
          "induction_score_values"),
    Entry("induction_score", "divided by T", induction_over_every_query, "averaged over every query",
          "induction_score_values"),
    Entry("induction_score", "summed", induction_summed, "sum instead of mean", "induction_score_values"),
    Entry("induction_score", "no argument checks", induction_unchecked, "no ValueError for bad arguments",
          "induction_score_errors"),
    Entry("ablate_head", "the time axis", ablate_time_axis, "head taken from the wrong axis", "ablate_head_zero"),
    Entry("ablate_head", "every other head", ablate_all_but_the_head, "every other head ablated",
          "ablate_head_zero"),
    Entry("ablate_head", "heads counted from 1", ablate_counted_from_1, "heads counted from 1", "ablate_head_zero"),
    Entry("ablate_head", "mean ignored", ablate_ignores_mean, "mean ignored", "ablate_head_mean",
          also=("mean not passed on",)),  # repeat_loss, built on it, zeroes the head too
    Entry("ablate_head", "mean added", ablate_adds_mean, "mean added instead of replacing", "ablate_head_mean"),
    Entry("ablate_head", "mean taken from z", ablate_mean_of_z, "mean taken from z", "ablate_head_mean"),
    Entry("ablate_head", "z changed in place", ablate_in_place, "input modified in place", "ablate_head_contract"),
    Entry("ablate_head", "detached copy", ablate_detached, "gradients cut", "ablate_head_contract"),
    Entry("ablate_head", "no argument checks", ablate_unchecked_head, "no ValueError for bad arguments",
          "ablate_head_contract"),
    Entry("ablate_head", "float32 always", ablate_float32, "dtype not kept", "ablate_head_contract"),
    Entry("repeat_loss", "first repeated token scored", repeat_first_token_scored, "first repeated token scored",
          "repeat_loss_values"),
    Entry("repeat_loss", "logits not shifted", repeat_not_shifted, "logits not shifted", "repeat_loss_values"),
    Entry("repeat_loss", "whole sequence", repeat_whole_sequence, "loss over the whole sequence",
          "repeat_loss_values"),
    Entry("repeat_loss", "training mode", repeat_in_training_mode, "model run in training mode",
          "repeat_loss_values"),
    Entry("repeat_loss", "hook returns nothing", repeat_hook_returns_nothing, "ablation not applied",
          "repeat_loss_ablated"),
    Entry("repeat_loss", "mean not passed on", repeat_mean_dropped, "mean not passed on", "repeat_loss_ablated"),
    Entry("repeat_loss", "hook never removed", repeat_hook_kept, "hook left registered", "repeat_loss_hooks"),
    Entry("repeat_loss", "hook removed on success only", repeat_hook_removed_on_success, "hook left registered",
          "repeat_loss_hooks"),
    Entry("repeat_loss", "left in eval mode", repeat_left_in_eval, "model's mode not given back",
          "repeat_loss_hooks"),
    Entry("repeat_loss", "always back to training mode", repeat_always_back_to_training,
          "model's mode not given back", "repeat_loss_hooks"),
    Entry("repeat_loss", "no argument checks", repeat_unchecked, "no ValueError for bad arguments",
          "repeat_loss_hooks"),
    Entry("heatmap_facts", "T × d_model", heatmap_d_model_wide, "map taken to be T × d_model",
          "heatmap_facts_answer"),
    Entry("heatmap_facts", "a head's output", heatmap_head_output, "a head's output taken for its map",
          "heatmap_facts_answer"),
    Entry("heatmap_facts", "one layer", heatmap_one_layer, "one layer's heads only", "heatmap_facts_answer"),
    Entry("heatmap_facts", "no causal mask", heatmap_no_mask, "causal mask forgotten", "heatmap_facts_answer"),
    Entry("largest_term", "the largest weight", largest_weight, "largest weight taken as the largest term",
          "largest_term_answer"),
    Entry("largest_term", "the longest value", longest_value, "weights ignored", "largest_term_answer"),
]

CORRECT = [
    Entry("attention_entropy", "torch.special.xlogy", entropy_xlogy),
    Entry("attention_entropy", "nan_to_num after w ln w", entropy_nan_to_num),
    Entry("previous_token_score", "a loop over the queries", previous_by_loop),
    Entry("induction_score", "a loop over the queries", induction_by_loop),
    Entry("ablate_head", "torch.where over the head axis", ablate_with_where),
    Entry("ablate_head", "the other heads concatenated around a new slice", ablate_by_concatenation),
    Entry("repeat_loss", "log_softmax and gather, a context manager, inference_mode", repeat_with_gather),
    Entry("heatmap_facts", "by counting", heatmap_by_counting),
    Entry("largest_term", "with torch", largest_term_with_torch),
]
