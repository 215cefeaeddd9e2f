"""Chapter 8 reference: what trained attention does, measured.

The reading order is the order of the chapter: how spread out a head's
attention is (:func:`attention_entropy`), how much of it goes to the token
just before the query (:func:`previous_token_score`), how much goes to the
token that followed the query's earlier occurrence on a repeated sequence
(:func:`induction_score`), then causal evidence rather than pictures: a head's
output replaced by zeros or by its mean (:func:`ablate_head`) and the loss on
the repeated part of a sequence with that head ablated (:func:`repeat_loss`). Then the two halves of a
circuit that ablation cannot tell apart: what a head *copies*, read off its weights (:func:`ov_circuit`,
:func:`copying_score`), and how much of a behaviour a head's output *restores* when it is patched from a clean
run into a corrupted one (:func:`patch_head`).

A head's attention map is its weights for one sequence, ``(T_q, T_k)``: row
``i`` is query ``i``, spread over the keys it may attend, and sums to 1 (a
row whose keys are all masked is all zeros). The scores below take maps with
any leading axes, ``(..., T_q, T_k)`` (a model's ``(B, n_heads, T, T)``, or
``(n_layers, B, n_heads, T, T)``), and give one number per map, ``(...)``.

A head's output, before the output projection mixes the heads, is
``(B, n_heads, T, d_head)``: the ``z`` that :func:`ablate_head` edits. Masks
are boolean and ``True`` means "may attend".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "attention_entropy",
    "previous_token_score",
    "induction_score",
    "ablate_head",
    "repeat_loss",
    "ov_circuit",
    "copying_score",
    "patch_head",
    "heatmap_facts",  # concept checks
    "largest_term",
    "ablation_reading",
]


def _check_maps(weights: Tensor, square: bool) -> None:
    if not isinstance(weights, Tensor) or not weights.is_floating_point() or weights.dim() < 2:
        shape = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
        raise ValueError(f"weights must be floating-point attention maps (..., T_q, T_k), got {shape}")
    if square and weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"self-attention maps are square (..., T, T); got weights {tuple(weights.shape)}, "
                         f"T_q={weights.shape[-2]} queries and T_k={weights.shape[-1]} keys")


def attention_entropy(weights: Tensor) -> Tensor:
    r"""How spread out each map is: the entropy of every query's row, in nats, averaged over the queries.

    .. math:: H = \frac{1}{T_q} \sum_{i=0}^{T_q - 1} \Big( -\sum_{j} w_{ij} \ln w_{ij} \Big),
              \qquad 0 \ln 0 = 0

    A row that puts all its weight on one key has entropy 0; a row spread evenly
    over ``n`` keys has ``ln n``. Keys a mask hid carry weight 0 and add nothing
    (``0 ln 0 = 0``, the limit, not NaN); a row of zeros (a query whose keys were
    all masked) has entropy 0.

    Args:
        weights: ``(..., T_q, T_k)``, each row a distribution over the keys (or all zeros).

    Returns:
        ``(...)``: one entropy per map, in the dtype of ``weights``.

    Raises:
        ValueError: if ``weights`` is not floating point with at least 2 axes.
    """
    _check_maps(weights, square=False)
    per_row = -torch.special.xlogy(weights, weights).sum(dim=-1)  # (..., T_q, T_k) -> (..., T_q): 0 ln 0 = 0
    return per_row.mean(dim=-1)  # (..., T_q) -> (...)


def previous_token_score(weights: Tensor) -> Tensor:
    r"""How much of each map's attention goes to the token just before the query.

    .. math:: s = \frac{1}{T - 1} \sum_{i=1}^{T - 1} w_{i,\, i-1}

    Query 0 has no previous token and is left out. 1 is a perfect
    previous-token head; a head that attends evenly over the causal past scores
    about :math:`\frac{1}{T-1}\sum_{i=1}^{T-1} \frac{1}{i+1}`.

    Args:
        weights: ``(..., T, T)`` self-attention maps, ``T >= 2``.

    Returns:
        ``(...)``: one score per map, in ``[0, 1]``.

    Raises:
        ValueError: if the maps are not square ``(..., T, T)`` floating point, or ``T < 2``.
    """
    _check_maps(weights, square=True)
    if weights.shape[-1] < 2:
        raise ValueError(f"a previous-token score needs T >= 2 positions, got weights {tuple(weights.shape)}")
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # w[i, i-1] for i = 1..T-1


def induction_score(weights: Tensor, period: int) -> Tensor:
    r"""How much of each map's attention goes where an induction head looks, on a sequence that repeats.

    The sequence repeats itself every ``period`` positions: ``tokens[i] ==
    tokens[i - period]`` for ``i >= period``. At such a query the current token
    occurred before at ``i - period``, and the token that followed it, at
    ``i - period + 1``, is the one that comes next. An induction head attends
    there:

    .. math:: s = \frac{1}{T - P} \sum_{i=P}^{T - 1} w_{i,\, i - P + 1}

    The queries before ``period`` have seen no earlier occurrence and are left
    out.

    Args:
        weights: ``(..., T, T)`` self-attention maps of the repeated sequence.
        period: ``P``, with ``1 <= P < T``.

    Returns:
        ``(...)``: one score per map, in ``[0, 1]``.

    Raises:
        ValueError: if the maps are not square ``(..., T, T)`` floating point, or ``period`` is not in ``[1, T)``.
    """
    _check_maps(weights, square=True)
    t = weights.shape[-1]
    if not 1 <= period < t:
        raise ValueError(f"period must be in [1, T) = [1, {t}) for weights {tuple(weights.shape)}, got {period}")
    # the diagonal w[i, i - (P - 1)] starts at query P - 1, whose earlier occurrence does not exist: skip it
    return torch.diagonal(weights, offset=-(period - 1), dim1=-2, dim2=-1)[..., 1:].mean(dim=-1)


def ablate_head(z: Tensor, head: int, mean: Tensor | None = None) -> Tensor:
    r"""The heads' outputs with head ``head``'s replaced: by zeros (zero ablation) or by ``mean`` (mean ablation).

    ``z`` is what the heads of one attention layer output before the output
    projection mixes them, ``(B, n_heads, T, d_head)``. Replacing one head's
    slice and running the rest of the model unchanged asks what the model does
    without that head. Zero ablation sets the slice to 0; mean ablation sets it
    to ``mean``, the head's average output over a reference batch, which removes
    what the head says about *this* sequence but keeps what it says about every
    sequence. Use it as a forward hook, whose return value replaces the module's
    output: ``site.register_forward_hook(lambda module, inputs, z: ablate_head(z, 3))``.

    Args:
        z: ``(B, n_heads, T, d_head)``.
        head: which head, ``0 <= head < n_heads``.
        mean: ``None`` for zero ablation, or what replaces the head's slice: a tensor that broadcasts to
            ``(B, T, d_head)``, e.g. ``(T, d_head)`` or ``(d_head,)``.

    Returns:
        A new tensor like ``z`` (``z`` is not modified): the other heads' slices unchanged, gradients flowing to them.

    Raises:
        ValueError: if ``z`` is not 4-D, ``head`` is outside ``[0, n_heads)``, or ``mean`` does not broadcast.
    """
    if z.dim() != 4:
        raise ValueError(f"z must be the heads' outputs (B, n_heads, T, d_head), got {tuple(z.shape)}")
    n_heads = z.shape[1]
    if not 0 <= head < n_heads:
        raise ValueError(f"head must be in [0, n_heads) = [0, {n_heads}) for z {tuple(z.shape)}, got {head}")
    slice_shape = (z.shape[0], z.shape[2], z.shape[3])  # (B, T, d_head)
    if mean is None:
        replacement = z.new_zeros(slice_shape)
    else:
        try:
            replacement = mean.to(z.dtype).expand(slice_shape)  # (T, d_head) or (d_head,) -> (B, T, d_head)
        except RuntimeError:
            raise ValueError(f"mean {tuple(mean.shape)} does not broadcast to one head's output (B, T, d_head) = "
                             f"{slice_shape}") from None
    is_head = torch.arange(n_heads, device=z.device) == head  # (n_heads,)
    return torch.where(is_head[:, None, None], replacement[:, None], z)  # (B, 1, T, d) vs (B, n_heads, T, d)


def repeat_loss(model: nn.Module, tokens: Tensor, period: int, site: nn.Module | None = None,
                head: int | None = None, mean: Tensor | None = None) -> Tensor:
    r"""The model's cross-entropy on the repeated part of ``tokens``, with one head ablated or none.

    ``tokens (B, T)`` repeat every ``period`` positions. Position ``t - 1``
    predicts token ``t``; the targets that copying can predict are
    ``t = P + 1, ..., T - 1`` (token ``P`` starts the repeat, and nothing before
    it says that it will), so the loss is the mean over those targets and the
    batch:

    .. math:: L = -\frac{1}{B\,(T - P - 1)} \sum_b \sum_{t=P+1}^{T-1}
              \ln p(\text{tokens}_{b,t} \mid \text{tokens}_{b,<t})

    With ``site`` and ``head``, head ``head`` of the output of the module
    ``site``, ``(B, n_heads, T, d_head)``, is ablated with :func:`ablate_head`
    (by zeros, or by ``mean``) through a forward hook that lives for this call
    only: it is removed before returning, also when the model raises. The model
    runs in eval mode, without gradients, and is given back in the mode it came
    in.

    Args:
        model: maps ``tokens (B, T)`` to ``logits (B, T, V)``.
        tokens: ``(B, T)`` token ids, ``T >= period + 2``.
        period: ``P >= 1``.
        site, head: where to ablate, both or neither.
        mean: passed on to :func:`ablate_head` (``None``: zeros).

    Returns:
        A 0-d tensor, the mean cross-entropy in nats.

    Raises:
        ValueError: if ``tokens`` is not ``(B, T)`` with ``T >= period + 2``, ``period < 1``, or only one of
            ``site`` and ``head`` is given.
    """
    if tokens.dim() != 2 or period < 1 or tokens.shape[1] < period + 2:
        raise ValueError(f"tokens must be (B, T) with T >= period + 2 and period >= 1, so that a repeated token can "
                         f"be predicted; got tokens {tuple(tokens.shape)}, period={period}")
    if (site is None) != (head is None):
        raise ValueError(f"give both site and head to ablate a head, or neither; got site={site!r:.60}, head={head}")
    hook = None if site is None else site.register_forward_hook(lambda module, inputs, z: ablate_head(z, head, mean))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(tokens)  # (B, T, V)
    finally:
        model.train(was_training)
        if hook is not None:
            hook.remove()
    predicted = logits[:, period:-1]  # positions P .. T-2 predict tokens P+1 .. T-1: (B, T - P - 1, V)
    return F.cross_entropy(predicted.flatten(0, 1), tokens[:, period + 1:].flatten())


def _check_head(model: nn.Module, layer: int, head: int) -> None:
    n_layers = len(model.layers)
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in [0, n_layers) = [0, {n_layers}), got {layer}")
    n_heads = model.layers[layer].n_heads
    if not 0 <= head < n_heads:
        raise ValueError(f"head must be in [0, n_heads) = [0, {n_heads}), got {head}")


def ov_circuit(model: nn.Module, layer: int, head: int) -> Tensor:
    r"""What head ``head`` of layer ``layer`` adds to the logits when it attends to a token: its OV circuit,
    ``(V, V)``.

    .. math:: C^h = W_E\, W_V^h\, W_O^h\, W_U^\top

    Row ``a`` holds what the head adds to every token's logit when it attends to a token ``a`` alone, along the
    direct path (the embedding of ``a``, the head's values, its share of the output projection, the
    unembedding). For an :class:`~attention_course.induction.AttentionOnly` model, whose linear maps act on
    row vectors (``v = x W^\top`` for an ``nn.Linear`` of weight ``W``):

    - ``W_E = model.embed.weight``, ``(V, d_model)``;
    - ``W_V^h``, ``(d_model, d_head)``: rows ``h d_head .. (h + 1) d_head - 1`` of
      ``model.layers[layer].w_v.weight``, transposed (head ``h``'s values are those outputs of ``w_v``);
    - ``W_O^h``, ``(d_head, d_model)``: the same range of the *columns* of ``model.layers[layer].w_o.weight``,
      transposed (``w_o`` reads head ``h``'s output from those inputs);
    - ``W_U = model.unembed.weight``, ``(V, d_model)``: the model has an unembedding of its own, not the
      embedding reused.

    Args:
        model: an ``AttentionOnly`` model (``embed``, ``layers[i].w_v``, ``layers[i].w_o``, ``layers[i].n_heads``,
            ``layers[i].d_head``, ``unembed``); it is not modified.
        layer, head: ``0 <= layer < n_layers``, ``0 <= head < n_heads``.

    Returns:
        ``(V, V)``, in the dtype of the weights.

    Raises:
        ValueError: if ``layer`` or ``head`` is out of range.
    """
    _check_head(model, layer, head)
    attention = model.layers[layer]
    rows = slice(head * attention.d_head, (head + 1) * attention.d_head)
    w_v = attention.w_v.weight[rows].T  # (d_head, d_model) -> (d_model, d_head)
    w_o = attention.w_o.weight[:, rows].T  # (d_model, d_head) -> (d_head, d_model)
    return model.embed.weight @ w_v @ w_o @ model.unembed.weight.T  # (V, d) (d, d_h) (d_h, d) (d, V) -> (V, V)


def copying_score(circuit: Tensor) -> tuple[Tensor, Tensor]:
    r"""Whether an OV circuit *copies*: ``(share, positivity)``.

    ``share`` is the fraction of the rows whose largest entry is on the diagonal: attending to token ``a``
    raises the logit of ``a`` more than any other. ``positivity`` is Olsson et al.'s eigenvalue score

    .. math:: \frac{\sum_k \mathrm{Re}\,\lambda_k}{\sum_k \lvert \lambda_k \rvert}

    over the eigenvalues :math:`\lambda_k` of the circuit: +1 when every eigenvalue is positive (the circuit
    maps every direction to itself, scaled up: it copies), -1 when every one is negative (it suppresses what it
    attends to), about 0 for a random matrix.

    Args:
        circuit: ``(V, V)``, floating point, e.g. from :func:`ov_circuit`.

    Returns:
        Two 0-d tensors in the dtype of ``circuit``: ``share`` in ``[0, 1]`` and ``positivity`` in ``[-1, 1]``.

    Raises:
        ValueError: if ``circuit`` is not a square 2-D floating-point matrix.
    """
    if not isinstance(circuit, Tensor) or not circuit.is_floating_point() or circuit.dim() != 2 \
            or circuit.shape[0] != circuit.shape[1]:
        shape = tuple(circuit.shape) if isinstance(circuit, Tensor) else type(circuit).__name__
        raise ValueError(f"circuit must be a square floating-point matrix (V, V), got {shape}")
    tokens = torch.arange(circuit.shape[0], device=circuit.device)
    share = (circuit.argmax(dim=-1) == tokens).to(circuit.dtype).mean()  # each row's largest entry: its own token?
    eigenvalues = torch.linalg.eigvals(circuit)  # (V,), complex
    positivity = (eigenvalues.real.sum() / eigenvalues.abs().sum()).to(circuit.dtype)
    return share, positivity


def patch_head(model: nn.Module, clean: Tensor, corrupted: Tensor, period: int, site: nn.Module,
               head: int) -> Tensor:
    r"""The fraction of the copy loss that head ``head``'s output, patched from a clean run into a corrupted one,
    restores.

    ``clean (B, T)`` repeats every ``period`` positions; ``corrupted`` is the same sequences with the first
    occurrence replaced, so that nothing can be copied. Run the model on ``clean`` and keep what ``site`` outputs,
    ``z (B, n_heads, T, d_head)``; then run it on ``corrupted`` with head ``head``'s slice of ``site``'s output
    replaced by the clean one, ``ablate_head(z, head, clean_z[:, head])``, and compare the three losses of
    :func:`repeat_loss`:

    .. math:: r = \frac{L_\text{corrupted} - L_\text{patched}}{L_\text{corrupted} - L_\text{clean}}

    1: the head's clean output alone brings the model back to its clean loss; 0: it changes nothing; negative:
    it makes the corrupted run worse. Every run is in eval mode, without gradients; every hook lives for one run
    only, and the model is given back in the mode it came in.

    Args:
        model: maps ``tokens (B, T)`` to ``logits (B, T, V)``.
        clean, corrupted: ``(B, T)`` token ids of the same shape, ``T >= period + 2``.
        period: ``P >= 1``.
        site: a module of ``model`` whose output is the heads' ``z``, such as ``model.layers[1].hook_heads``.
        head: ``0 <= head < n_heads``.

    Returns:
        A 0-d tensor: the restored fraction.

    Raises:
        ValueError: if ``clean`` and ``corrupted`` differ in shape, or give the same loss (nothing to restore),
            and as :func:`repeat_loss` does for bad tokens or period.
    """
    if not isinstance(clean, Tensor) or not isinstance(corrupted, Tensor) or clean.shape != corrupted.shape:
        shapes = [tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__ for t in (clean, corrupted)]
        raise ValueError(f"clean and corrupted must be token ids of the same shape (B, T), got {shapes[0]} and "
                         f"{shapes[1]}")
    kept: list[Tensor] = []
    handle = site.register_forward_hook(lambda module, inputs, z: kept.append(z.detach()))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(clean)
    finally:
        handle.remove()
        model.train(was_training)
    clean_z = kept[-1]  # (B, n_heads, T, d_head)
    loss_clean, loss_corrupted = repeat_loss(model, clean, period), repeat_loss(model, corrupted, period)
    if abs(float(loss_corrupted - loss_clean)) < 1e-6:
        raise ValueError(f"the clean and corrupted tokens give the same loss, {float(loss_clean):.4g}: there is "
                         f"nothing for a head to restore")
    patched = repeat_loss(model, corrupted, period, site, head, clean_z[:, head])  # (B, T, d_head) replaces it
    return (loss_corrupted - patched) / (loss_corrupted - loss_clean)


# ================================================================ concept checks

def heatmap_facts(n_tokens: int, d_model: int, n_layers: int, n_heads: int,
                  query: int) -> tuple[tuple[int, int], int, int]:
    """What a causal language model's attention heatmaps show for one sentence of ``n_tokens`` tokens:
    ``(map_shape, n_maps, nonzero)``: the shape of one head's map (a row per query, a column per key, whatever
    ``d_model``), how many such maps the model has (one per head of every layer), and how many entries of row
    ``query`` the causal mask lets be nonzero (the keys ``0 .. query``)."""
    return (n_tokens, n_tokens), n_layers * n_heads, query + 1


def largest_term(weights: list[float], value_norms: list[float]) -> int:
    """The key whose term ``w_j · v_j W_O`` is the largest in what the head adds for one query, given that
    query's weights and the length ``‖v_j W_O‖`` of every key's value after the output projection. The largest
    weight is not the largest term: a key with a large weight and a near-zero value (an attention sink) moves
    nothing."""
    terms = [w * n for w, n in zip(weights, value_norms, strict=True)]
    return max(range(len(terms)), key=terms.__getitem__)


def ablation_reading(intact: float, without_one: float, without_all: float, uniform: float) -> str:
    """What the losses of a zero ablation say about a group of heads *of one layer*: the model's loss intact, with
    one of the heads removed (the worst such head), with all of them removed, and the uniform guess's.

    A removal *costs* when it takes the loss past the midpoint between the intact loss and the uniform guess.
    The answer is ``"not needed"`` when removing all of them costs nothing, ``"each needed"`` when removing one
    already costs, and ``"redundant"`` when only removing all of them costs: the heads do one job side by side,
    each adding part of it. Never ``"backup"``: heads of one layer all read the same residual stream at the same
    time, so none can see that another was removed and take over (backup heads are heads of a *later* layer that
    change what they do when an earlier one is removed)."""
    middle = (intact + uniform) / 2
    if without_all < middle:
        return "not needed"
    return "each needed" if without_one >= middle else "redundant"
