"""Chapter 8 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names the exercise notebook gives
(``math``, ``torch``, ``F``, ``nn``, ``Tensor``, ``AttentionOnly``, ``repeated_tokens``) and, where the exercise
builds on an earlier one (``repeat_loss`` on ``ablate_head``, ``patch_head`` on both), that earlier exercise, which
the catalogue tests supply from the reference.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from catalogue import Entry
from solutions.trained_attention import ablate_head, repeat_loss


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


# ================================================================ ov_circuit


def _circuit_checked(model, layer, head):
    if not 0 <= layer < len(model.layers) or not 0 <= head < model.layers[layer].n_heads:
        raise ValueError(f"layer {layer} or head {head} out of range")
    attention = model.layers[layer]
    return attention, slice(head * attention.d_head, (head + 1) * attention.d_head)


def ov_o_rows(model, layer, head):
    attention, rows = _circuit_checked(model, layer, head)
    w_v, w_o = attention.w_v.weight[rows].T, attention.w_o.weight[rows, :]  # (d_head, d_model), "already W_O^h"
    return model.embed.weight @ w_v @ w_o @ model.unembed.weight.T


def ov_v_columns(model, layer, head):
    attention, rows = _circuit_checked(model, layer, head)
    w_v, w_o = attention.w_v.weight[:, rows], attention.w_o.weight[:, rows].T  # (d_model, d_head): "already W_V^h"
    return model.embed.weight @ w_v @ w_o @ model.unembed.weight.T


def ov_whole_layer(model, layer, head):
    attention, _ = _circuit_checked(model, layer, head)
    return model.embed.weight @ attention.w_v.weight.T @ attention.w_o.weight.T @ model.unembed.weight.T


def ov_transposed(model, layer, head):
    attention, rows = _circuit_checked(model, layer, head)
    return model.unembed.weight @ attention.w_o.weight[:, rows] @ attention.w_v.weight[rows] @ model.embed.weight.T


def ov_counted_from_1(model, layer, head):
    attention, _ = _circuit_checked(model, layer, head)
    rows = slice((head - 1) * attention.d_head, head * attention.d_head) if head else slice(
        (attention.n_heads - 1) * attention.d_head, None)  # "head 1 is the first"
    return model.embed.weight @ attention.w_v.weight[rows].T @ attention.w_o.weight[:, rows].T @ model.unembed.weight.T


def ov_tied(model, layer, head):
    attention, rows = _circuit_checked(model, layer, head)
    w_e = model.embed.weight  # "the unembedding is the embedding, as in GPT-2"
    return w_e @ attention.w_v.weight[rows].T @ attention.w_o.weight[:, rows].T @ w_e.T


def ov_float32(model, layer, head):
    attention, rows = _circuit_checked(model, layer, head)
    parts = [model.embed.weight, attention.w_v.weight[rows].T, attention.w_o.weight[:, rows].T, model.unembed.weight.T]
    out = parts[0].float()
    for part in parts[1:]:
        out = out @ part.float()
    return out


def ov_unchecked(model, layer, head):
    attention = model.layers[layer]  # head -1 or 3 slices something anyway
    rows = slice(head * attention.d_head, (head + 1) * attention.d_head)
    return model.embed.weight @ attention.w_v.weight[rows].T @ attention.w_o.weight[:, rows].T @ model.unembed.weight.T


def ov_einsum(model, layer, head):
    attention, rows = _circuit_checked(model, layer, head)
    n, d = attention.n_heads, attention.d_head
    w_v = attention.w_v.weight.view(n, d, -1)[head]  # (d_head, d_model)
    w_o = attention.w_o.weight.view(-1, n, d)[:, head]  # (d_model, d_head)
    return torch.einsum("am,hm,nh,bn->ab", model.embed.weight, w_v, w_o, model.unembed.weight)


# ================================================================ copying_score


def _square_circuit(circuit):
    if not circuit.is_floating_point() or circuit.dim() != 2 or circuit.shape[0] != circuit.shape[1]:
        raise ValueError(f"circuit must be (V, V), got {tuple(circuit.shape)}")


def _positivity(circuit):
    lam = torch.linalg.eigvals(circuit)
    return (lam.real.sum() / lam.abs().sum()).to(circuit.dtype)


def _share(circuit):
    return (circuit.argmax(dim=-1) == torch.arange(circuit.shape[0])).to(circuit.dtype).mean()


def copying_columns(circuit):
    _square_circuit(circuit)
    return (circuit.argmax(dim=0) == torch.arange(circuit.shape[0])).to(circuit.dtype).mean(), _positivity(circuit)


def copying_positive_diagonal(circuit):
    _square_circuit(circuit)
    return (circuit.diagonal() > 0).to(circuit.dtype).mean(), _positivity(circuit)


def copying_counted(circuit):
    _square_circuit(circuit)
    return (circuit.argmax(dim=-1) == torch.arange(circuit.shape[0])).sum().to(circuit.dtype), _positivity(circuit)


def copying_real_sizes(circuit):
    _square_circuit(circuit)
    real = torch.linalg.eigvals(circuit).real
    return _share(circuit), (real.sum() / real.abs().sum()).to(circuit.dtype)


def copying_eigvalsh(circuit):
    _square_circuit(circuit)
    lam = torch.linalg.eigvalsh(circuit)  # "eigenvalues are real"
    return _share(circuit), lam.sum() / lam.abs().sum()


def copying_singular_values(circuit):
    _square_circuit(circuit)
    lam = torch.linalg.eigvals(circuit)
    return _share(circuit), (lam.real.sum() / torch.linalg.svdvals(circuit).sum()).to(circuit.dtype)


def copying_not_normalised(circuit):
    _square_circuit(circuit)
    return _share(circuit), torch.linalg.eigvals(circuit).real.sum().to(circuit.dtype)


def copying_float32(circuit):
    _square_circuit(circuit)
    hits = circuit.argmax(dim=-1) == torch.arange(circuit.shape[0])
    return hits.float().mean(), _positivity(circuit)


def copying_unchecked(circuit):
    return _share(circuit), _positivity(circuit)


def copying_by_max(circuit):
    _square_circuit(circuit)
    best = circuit.max(dim=1).values
    share = (circuit.diagonal() == best).to(circuit.dtype).mean()
    lam = torch.linalg.eigvals(circuit)
    return share, (lam.real.sum() / torch.sqrt(lam.real**2 + lam.imag**2).sum()).to(circuit.dtype)


# ================================================================ patch_head


@contextlib.contextmanager
def _eval(model):
    mode = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(mode)


def _recorded(model, tokens, site):
    seen = []
    handle = site.register_forward_hook(lambda m, i, z: seen.append(z))
    try:
        with _eval(model), torch.no_grad():
            model(tokens)
    finally:
        handle.remove()
    return seen[-1]


def _three_losses(model, clean, corrupted, period, site, head):
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} differ")
    z = _recorded(model, clean, site)
    good, bad = float(repeat_loss(model, clean, period)), float(repeat_loss(model, corrupted, period))
    if abs(bad - good) < 1e-6:
        raise ValueError("the same loss: nothing to restore")
    return good, bad, float(repeat_loss(model, corrupted, period, site, head, z[:, head]))


def patch_fraction_left(model, clean, corrupted, period, site, head):
    good, bad, patched = _three_losses(model, clean, corrupted, period, site, head)
    return torch.tensor((patched - good) / (bad - good))


def patch_sign_flipped(model, clean, corrupted, period, site, head):
    good, bad, patched = _three_losses(model, clean, corrupted, period, site, head)
    return torch.tensor((patched - bad) / (bad - good))


def patch_wrong_way_round(model, clean, corrupted, period, site, head):
    _three_losses(model, clean, corrupted, period, site, head)
    z = _recorded(model, corrupted, site)  # the corrupted output, into the clean run
    good, bad = float(repeat_loss(model, clean, period)), float(repeat_loss(model, corrupted, period))
    noised = float(repeat_loss(model, clean, period, site, head, z[:, head]))
    return torch.tensor((noised - good) / (bad - good))


def patch_in_nats(model, clean, corrupted, period, site, head):
    good, bad, patched = _three_losses(model, clean, corrupted, period, site, head)
    return torch.tensor(bad - patched)


def patch_over_corrupted(model, clean, corrupted, period, site, head):
    good, bad, patched = _three_losses(model, clean, corrupted, period, site, head)
    return torch.tensor((bad - patched) / bad)


def patch_zeroed(model, clean, corrupted, period, site, head):
    good, bad, _ = _three_losses(model, clean, corrupted, period, site, head)
    zeroed = float(repeat_loss(model, corrupted, period, site, head))  # "remove the head from the corrupted run"
    return torch.tensor((bad - zeroed) / (bad - good))


def patch_whole_layer(model, clean, corrupted, period, site, head):
    good, bad, _ = _three_losses(model, clean, corrupted, period, site, head)
    z = _recorded(model, clean, site)
    handle = site.register_forward_hook(lambda m, i, out: z)  # every head's clean output
    try:
        patched = float(repeat_loss(model, corrupted, period))
    finally:
        handle.remove()
    return torch.tensor((bad - patched) / (bad - good))


def patch_corrupted_recorded(model, clean, corrupted, period, site, head):
    good, bad, _ = _three_losses(model, clean, corrupted, period, site, head)
    z = _recorded(model, corrupted, site)  # recorded on the run it is patched into
    patched = float(repeat_loss(model, corrupted, period, site, head, z[:, head]))
    return torch.tensor((bad - patched) / (bad - good))


def patch_training_mode(model, clean, corrupted, period, site, head):
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} differ")
    seen = []
    handle = site.register_forward_hook(lambda m, i, z: seen.append(z))
    with torch.no_grad():
        model(clean)  # in whatever mode the model came
    handle.remove()
    good, bad = repeat_loss(model, clean, period), repeat_loss(model, corrupted, period)
    if abs(float(bad - good)) < 1e-6:
        raise ValueError("the same loss: nothing to restore")
    return (bad - repeat_loss(model, corrupted, period, site, head, seen[-1][:, head])) / (bad - good)


def patch_hook_kept(model, clean, corrupted, period, site, head):
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} differ")
    seen = []
    site.register_forward_hook(lambda m, i, z: seen.append(z))  # never removed: it only reads
    with _eval(model), torch.no_grad():
        model(clean)
    clean_z = seen[0]
    good, bad = repeat_loss(model, clean, period), repeat_loss(model, corrupted, period)
    if abs(float(bad - good)) < 1e-6:
        raise ValueError("the same loss: nothing to restore")
    return (bad - repeat_loss(model, corrupted, period, site, head, clean_z[:, head])) / (bad - good)


def patch_left_in_eval(model, clean, corrupted, period, site, head):
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} differ")
    model.eval()  # "the model must run in eval mode"
    seen = []
    handle = site.register_forward_hook(lambda m, i, z: seen.append(z))
    with torch.no_grad():
        model(clean)
    handle.remove()
    good, bad = repeat_loss(model, clean, period), repeat_loss(model, corrupted, period)
    if abs(float(bad - good)) < 1e-6:
        raise ValueError("the same loss: nothing to restore")
    return (bad - repeat_loss(model, corrupted, period, site, head, seen[0][:, head])) / (bad - good)


def patch_unchecked(model, clean, corrupted, period, site, head):
    z = _recorded(model, clean, site)
    good, bad = repeat_loss(model, clean, period), repeat_loss(model, corrupted, period)
    return (bad - repeat_loss(model, corrupted, period, site, head, z[:, head])) / (bad - good)


def patch_by_hooks(model, clean, corrupted, period, site, head):
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} differ")
    kept = {}

    def loss(tokens, hook):
        handle = site.register_forward_hook(hook)
        try:
            with _eval(model), torch.inference_mode():
                logits = model(tokens)
        finally:
            handle.remove()
        return F.cross_entropy(logits[:, period:-1].flatten(0, 1), tokens[:, period + 1:].flatten()).item()

    def keep(m, i, z):
        kept["z"] = z.clone()

    def swap(m, i, z):
        z = z.clone()
        z[:, head] = kept["z"][:, head]
        return z

    good = loss(clean, keep)
    bad = loss(corrupted, lambda m, i, z: None)
    if math.isclose(good, bad, abs_tol=1e-6):
        raise ValueError("clean and corrupted give the same loss")
    return (bad - loss(corrupted, swap)) / (bad - good)


# ================================================================ ablation_reading


def reading_backup(intact, without_one, without_all, uniform):
    middle = (intact + uniform) / 2
    if without_all < middle:
        return "not needed"
    return "each needed" if without_one >= middle else "backup"  # "the others took over"


def reading_one_alone(intact, without_one, without_all, uniform):
    return "each needed" if without_one >= (intact + uniform) / 2 else "not needed"


def reading_group_alone(intact, without_one, without_all, uniform):
    return "each needed" if without_all >= (intact + uniform) / 2 else "not needed"


def reading_against_uniform(intact, without_one, without_all, uniform):
    if without_all < uniform:
        return "not needed"
    return "each needed" if without_one >= uniform else "redundant"


def reading_by_fractions(intact, without_one, without_all, uniform):
    def share(loss):  # how far towards the uniform guess a removal takes the loss
        return (loss - intact) / (uniform - intact)

    if share(without_all) < 0.5:
        return "not needed"
    return "redundant" if share(without_one) < 0.5 else "each needed"


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
    Entry("ablate_head", "heads counted from 1", ablate_counted_from_1, "heads counted from 1", "ablate_head_zero",
          also=("patched with the corrupted output",)),  # patch_head, built on it, patches an empty head
    Entry("ablate_head", "mean ignored", ablate_ignores_mean, "mean ignored", "ablate_head_mean",
          also=("mean not passed on", "ablated instead of patched")),  # repeat_loss and patch_head zero the head
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
          "repeat_loss_values", also=("no ValueError for bad arguments",)),  # patch_head: dropout, no equal losses
    Entry("repeat_loss", "hook returns nothing", repeat_hook_returns_nothing, "ablation not applied",
          "repeat_loss_ablated", also=("patched with the corrupted output",)),  # patch_head patches nothing
    Entry("repeat_loss", "mean not passed on", repeat_mean_dropped, "mean not passed on", "repeat_loss_ablated",
          also=("ablated instead of patched",)),  # patch_head zeroes the head
    Entry("repeat_loss", "hook never removed", repeat_hook_kept, "hook left registered", "repeat_loss_hooks",
          also=("model run in training mode",)),  # patch_head's second call runs with the first one's hooks
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
    Entry("ov_circuit", "W_O's rows", ov_o_rows, "W_O sliced by rows", "ov_circuit_values"),
    Entry("ov_circuit", "W_V's columns", ov_v_columns, "W_V sliced by columns", "ov_circuit_values"),
    Entry("ov_circuit", "the whole layer", ov_whole_layer, "every head of the layer", "ov_circuit_values"),
    Entry("ov_circuit", "unembedding first", ov_transposed, "circuit transposed", "ov_circuit_values"),
    Entry("ov_circuit", "heads counted from 1", ov_counted_from_1, "heads counted from 1", "ov_circuit_values"),
    Entry("ov_circuit", "tied unembedding", ov_tied, "embedding used to unembed", "ov_circuit_values"),
    Entry("ov_circuit", "float32 always", ov_float32, "dtype not kept", "ov_circuit_contract"),
    Entry("ov_circuit", "no argument checks", ov_unchecked, "no ValueError for bad arguments", "ov_circuit_contract"),
    Entry("copying_score", "argmax over dim 0", copying_columns, "argmax over the columns", "copying_score_values"),
    Entry("copying_score", "positive diagonal", copying_positive_diagonal, "positive diagonal counted",
          "copying_score_values"),
    Entry("copying_score", "a count", copying_counted, "rows counted, not averaged", "copying_score_values"),
    Entry("copying_score", "abs of the real parts below", copying_real_sizes, "real parts' sizes in the denominator",
          "copying_score_values"),
    Entry("copying_score", "eigvalsh", copying_eigvalsh, "eigvalsh on a matrix that is not symmetric",
          "copying_score_values"),
    Entry("copying_score", "singular values", copying_singular_values, "singular values instead of eigenvalues",
          "copying_score_values"),
    Entry("copying_score", "Σ Re λ alone", copying_not_normalised, "positivity not normalised",
          "copying_score_values"),
    Entry("copying_score", "float32 share", copying_float32, "dtype not kept", "copying_score_contract"),
    Entry("copying_score", "no argument checks", copying_unchecked, "no ValueError for bad arguments",
          "copying_score_contract"),
    Entry("patch_head", "the fraction left", patch_fraction_left, "fraction left instead of restored",
          "patch_head_values"),
    Entry("patch_head", "patched minus corrupted", patch_sign_flipped, "sign flipped", "patch_head_values"),
    Entry("patch_head", "noising", patch_wrong_way_round, "patched the wrong way round", "patch_head_values"),
    Entry("patch_head", "in nats", patch_in_nats, "nats instead of a fraction", "patch_head_values"),
    Entry("patch_head", "over the corrupted loss", patch_over_corrupted, "divided by the corrupted loss",
          "patch_head_values"),
    Entry("patch_head", "head zeroed", patch_zeroed, "ablated instead of patched", "patch_head_values"),
    Entry("patch_head", "every head's clean output", patch_whole_layer, "the whole layer patched",
          "patch_head_values"),
    Entry("patch_head", "recorded on the corrupted run", patch_corrupted_recorded, "patched with the corrupted output",
          "patch_head_values"),
    Entry("patch_head", "clean run in training mode", patch_training_mode, "model run in training mode",
          "patch_head_values"),
    Entry("patch_head", "recording hook kept", patch_hook_kept, "hook left registered", "patch_head_contract"),
    Entry("patch_head", "left in eval mode", patch_left_in_eval, "model's mode not given back", "patch_head_contract"),
    Entry("patch_head", "no argument checks", patch_unchecked, "no ValueError for bad arguments",
          "patch_head_contract"),
    Entry("ablation_reading", "backup heads", reading_backup, "backup heads", "ablation_reading_answer"),
    Entry("ablation_reading", "one head's ablation alone", reading_one_alone, "one head's ablation read alone",
          "ablation_reading_answer"),
    Entry("ablation_reading", "all heads' ablation alone", reading_group_alone, "group ablation read alone",
          "ablation_reading_answer"),
    Entry("ablation_reading", "the uniform guess as the bar", reading_against_uniform,
          "cost measured against the uniform guess", "ablation_reading_answer"),
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
    Entry("ov_circuit", "einsum over the heads' views", ov_einsum),
    Entry("copying_score", "the diagonal against each row's max, moduli by hand", copying_by_max),
    Entry("patch_head", "hooks of its own, inference_mode", patch_by_hooks),
    Entry("ablation_reading", "shares of the way to the uniform guess", reading_by_fractions),
]
