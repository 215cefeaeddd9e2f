"""Chapter 8's model and task: a small attention-only transformer that learns to copy a repeated span.

:class:`RepeatTask` makes sequences of random tokens in which a random span, of random length, occurs twice, at
random places. Nothing in a single sequence can be predicted except the second occurrence: once its first token
is seen, each next token is the one that followed the same token the first time. A model that learns this has
an **induction head** (Elhage et al. 2021, Olsson et al. 2022): a head that finds the earlier occurrence of the
current token and copies what came after it. Because the span's length and place vary, position alone cannot
tell where to look; content must.

:class:`AttentionOnly` is a transformer with attention layers and nothing else (no feed-forward networks, no
LayerNorm): token embedding, ``n_layers`` residual attention layers, and an output layer. Each head's output
``z (B, n_heads, T, d_head)`` passes through the module ``hook_heads`` of its layer, an ``nn.Identity``, before
the output projection mixes the heads, so that a forward hook can read or replace it; each layer keeps its last
attention weights when asked (:meth:`AttentionOnly.attention_maps`).

Positions are ``"relative"`` by default: a learned bias per head and per distance ``i - j`` is added to the
scores (as T5 does; ALiBi fixes it instead of learning it), so "attend to the token just before" is one number
per head. ``"learned"`` adds learned absolute position embeddings to the tokens instead (Chapters 5 to 7).

:func:`train_induction` trains a model on the task, scoring only the positions whose next token can be copied, and
:func:`formed_at` reads from its history the step where the copy loss fell below half the uniform guess. The
command line measures that step for the chapter's set-up and for one change of it at a time, over seeds:
``python -m attention_course.induction --seeds 0 1 2 3 4 --steps 400``.
:func:`gpt_attention` reads the attention weights of Chapter 7's :class:`~attention_course.language_model.TorchGPT`,
whose fused kernel does not return them.

Nothing here computes an attention score of a head or ablates one: those are the chapter's exercises.

>>> task = RepeatTask(vocab=16, length=24, shortest=4, longest=8)
>>> ids, copyable = task.batch(2, torch.Generator().manual_seed(0))
>>> ids.shape, copyable.shape
(torch.Size([2, 24]), torch.Size([2, 24]))
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.benchmark_attention import write_csv
from attention_course.language_model import _rotate  # how TorchGPT turns its queries and keys, for gpt_attention

__all__ = ["RepeatTask", "repeated_tokens", "AttentionOnlySizes", "AttentionLayer", "AttentionOnly",
           "InductionHistory", "train_induction", "formed_at", "head_outputs", "direct_logit_attribution",
           "k_composition", "hand_built_induction", "gpt_attention", "VARIANTS", "main"]


@dataclass(frozen=True)
class RepeatTask:
    """Sequences of ``length`` random tokens in which one span of ``shortest`` to ``longest`` tokens occurs twice.

    The span's length is drawn uniformly; its first occurrence starts anywhere it fits, its second anywhere after
    the first has ended. Position ``t`` is *copyable* when the token at ``t + 1`` belongs to the second occurrence
    and is not its first token: the positions a model can predict, and the only ones :func:`train_induction`
    scores (the other tokens are random, and their loss can only stay at ``ln vocab``).
    """

    vocab: int = 64  # number of token ids
    length: int = 64  # tokens per sequence, T
    shortest: int = 8  # the shortest span
    longest: int = 24  # the longest span; two of them must fit in `length`

    def __post_init__(self) -> None:
        if not 2 <= self.shortest <= self.longest or 2 * self.longest > self.length or self.vocab < 2:
            raise ValueError(f"need vocab >= 2 and 2 <= shortest <= longest <= length / 2; got vocab={self.vocab}, "
                             f"shortest={self.shortest}, longest={self.longest}, length={self.length}")

    def batch(self, size: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """``ids (size, T)`` and ``copyable (size, T)``: True where the next token is a copy the model can predict."""
        if size < 1:
            raise ValueError(f"a batch needs at least one sequence, got size={size}")
        t = self.length
        ids = torch.randint(0, self.vocab, (size, t), generator=generator)  # (B, T)
        span = torch.randint(self.shortest, self.longest + 1, (size, 1), generator=generator)  # (B, 1)
        first = (torch.rand(size, 1, generator=generator) * (t - 2 * span + 1)).long()  # (B, 1): fits twice after it
        second = first + span + (torch.rand(size, 1, generator=generator) * (t - first - 2 * span + 1)).long()
        where = torch.arange(t)  # (T,)
        inside = (where >= second) & (where < second + span)  # (B, T): the second occurrence
        source = torch.where(inside, where - second + first, where)  # (B, T): copy from the first occurrence
        copyable = (where >= second) & (where < second + span - 1)  # (B, T): the next token is in the copy
        return ids.gather(1, source), copyable


def repeated_tokens(batch: int, period: int, vocab: int, generator: torch.Generator | None = None) -> Tensor:
    """The standard test of an induction head: ``period`` random tokens, then the same tokens again,
    ``(batch, 2 * period)``. Position ``i >= period`` repeats position ``i - period``."""
    if batch < 1 or period < 1 or vocab < 2:
        raise ValueError(f"need batch >= 1, period >= 1 and vocab >= 2; got {batch}, {period}, {vocab}")
    first = torch.randint(0, vocab, (batch, period), generator=generator)  # (B, P)
    return torch.cat([first, first], dim=1)  # (B, 2P)


@dataclass
class AttentionOnlySizes:
    """The sizes of an :class:`AttentionOnly` model."""

    vocab: int  # number of token ids
    context: int = 64  # longest sequence (rows of the position table, or distances of the bias)
    d_model: int = 64  # width of the residual stream; n_heads must divide it
    n_heads: int = 4  # heads per attention layer
    n_layers: int = 2  # attention layers
    positions: str = "relative"  # "relative": a learned bias per head and distance; "learned": absolute embeddings
    dropout: float = 0.0  # dropout on the attention weights, in training mode only

    def __post_init__(self) -> None:
        sizes = {k: getattr(self, k) for k in ("vocab", "context", "d_model", "n_heads", "n_layers")}
        if min(sizes.values()) < 1 or self.d_model % self.n_heads:
            raise ValueError(f"every size must be at least 1 and n_heads must divide d_model; got {sizes}")
        if self.positions not in ("relative", "learned"):
            raise ValueError(f"positions must be 'relative' or 'learned', got {self.positions!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


class AttentionLayer(nn.Module):
    """Causal multi-head self-attention whose heads' outputs pass through ``hook_heads`` before ``w_o`` mixes them.

    ``x (B, T, d_model)`` → ``(B, T, d_model)``, what the layer adds to the residual stream. With ``relative``
    positions, ``distance_bias[h, i - j]`` is added to head ``h``'s score of query ``i`` for key ``j``. With
    ``keep_weights`` set, the last call's weights stay in ``weights`` ``(B, n_heads, T, T)``.
    """

    def __init__(self, sizes: AttentionOnlySizes) -> None:
        super().__init__()
        if not isinstance(sizes, AttentionOnlySizes):
            raise ValueError(f"AttentionLayer takes an AttentionOnlySizes, got {type(sizes).__name__}")
        self.n_heads, self.d_head = sizes.n_heads, sizes.d_head
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(sizes.d_model, sizes.d_model, bias=False)
                                                  for _ in range(4))
        relative = sizes.positions == "relative"
        self.distance_bias = nn.Parameter(torch.zeros(sizes.n_heads, sizes.context)) if relative else None
        self.drop = nn.Dropout(sizes.dropout)
        self.hook_heads = nn.Identity()  # z (B, n_heads, T, d_head) passes here: hook it to read or replace it
        self.keep_weights = False
        self.weights: Tensor | None = None

    def position_scores(self, t: int, device: torch.device | None = None) -> Tensor:
        """What every head adds to its scores for ``t`` positions, ``(n_heads or 1, T, T)``: ``distance_bias[h, i - j]``
        (0 without relative positions), and ``-inf`` for the keys after each query (the causal mask). One small
        tensor added to the scores, rather than a bias and a mask applied to every sequence's scores in turn."""
        where = torch.arange(t, device=device)
        distance = where[:, None] - where[None, :]  # (T, T): i - j, negative above the diagonal
        if self.distance_bias is None:
            bias = torch.zeros(1, t, t, device=device, dtype=self.w_q.weight.dtype)
        else:
            bias = self.distance_bias[:, distance.clamp(min=0)]  # (H, T, T)
        return bias.masked_fill(distance < 0, float("-inf"))  # causal: key j <= query i

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (w(x).view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, d) -> (B, H, T, d_head)
                   for w in (self.w_q, self.w_k, self.w_v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head) + self.position_scores(t, x.device)  # (B, H, T, T)
        weights = scores.softmax(dim=-1)
        if self.keep_weights:
            self.weights = weights.detach()
        z = self.hook_heads(self.drop(weights) @ v)  # (B, H, T, T) @ (B, H, T, d_head) -> (B, H, T, d_head)
        return self.w_o(z.transpose(1, 2).reshape(b, t, d))  # (B, H, T, d_head) -> (B, T, d_model)


class AttentionOnly(nn.Module):
    """An attention-only transformer: ``ids (B, T)`` → next-token ``logits (B, T, V)``.

    ``x = embed(ids) (+ pos_embed)``, then ``x = x + layer(x)`` for each of ``layers``, then ``unembed(x)``: no
    feed-forward network and no LayerNorm, so everything the model does is attention and the residual stream.
    """

    def __init__(self, sizes: AttentionOnlySizes) -> None:
        super().__init__()
        if not isinstance(sizes, AttentionOnlySizes):
            raise ValueError(f"AttentionOnly takes an AttentionOnlySizes, got {type(sizes).__name__}")
        self.sizes = sizes
        self.embed = nn.Embedding(sizes.vocab, sizes.d_model)
        self.pos_embed = nn.Embedding(sizes.context, sizes.d_model) if sizes.positions == "learned" else None
        self.layers = nn.ModuleList(AttentionLayer(sizes) for _ in range(sizes.n_layers))
        self.unembed = nn.Linear(sizes.d_model, sizes.vocab, bias=False)
        for p in self.parameters():  # embeddings, projections and distance biases: no LayerNorm rescales them
            if p.dim() == 2:
                nn.init.normal_(p, std=sizes.d_model**-0.5)

    def forward(self, ids: Tensor) -> Tensor:
        """Raises ValueError if ``ids`` is not ``(B, T)`` integers with ``T <= context``."""
        if ids.dim() != 2 or ids.is_floating_point() or not 1 <= ids.shape[1] <= self.sizes.context:
            raise ValueError(f"ids must be integer token ids (B, T) with 1 <= T <= context={self.sizes.context}, "
                             f"got {ids.dtype} {tuple(ids.shape)}")
        x = self.embed(ids)  # (B, T, d_model)
        if self.pos_embed is not None:
            x = x + self.pos_embed(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            x = x + layer(x)
        return self.unembed(x)  # (B, T, V)

    @torch.no_grad()
    def attention_maps(self, ids: Tensor) -> Tensor:
        """The attention weights of every layer for ``ids (B, T)``: ``(n_layers, B, n_heads, T, T)``, in eval mode
        (the model is given back in the mode it came in)."""
        mode = self.training
        self.eval()
        for layer in self.layers:
            layer.keep_weights = True
        try:
            self(ids)
            return torch.stack([layer.weights for layer in self.layers])
        finally:
            for layer in self.layers:
                layer.keep_weights, layer.weights = False, None
            self.train(mode)


@torch.no_grad()
def hand_built_induction(vocab: int = 8, context: int = 16, sharpness: float = 10.0) -> AttentionOnly:
    """An induction circuit written by hand, not trained: an :class:`AttentionOnly` model of 2 layers of 2 heads,
    ``d_model = 3 * vocab``, relative positions, whose residual stream keeps three one-hot codes side by side:
    the token (features ``0 .. V-1``), the previous token (``V .. 2V-1``) and the copied token (``2V .. 3V-1``).

    - Head 0.0 is a previous-token head: its distance bias is ``+sharpness`` at distance 1 and ``-sharpness``
      elsewhere, and it moves the token code of position ``j - 1`` into the previous-token code of ``j``.
    - Head 1.0 is an induction head: its query is the current token, its key the previous token that head 0.0
      wrote, so query ``i`` attends where the token before was ``tokens[i]``; it moves that position's token
      into the copied-token code, which alone the unembedding reads, ``sharpness`` times over.
    - Heads 0.1 and 1.1 are all zeros: they add nothing.

    On a sequence that repeats, it predicts the repeat almost perfectly; a head written this way is a yardstick
    for the chapter's measurements (its OV circuit copies exactly). One blur: position 0, which has no previous
    token, attends to itself, so it looks like the successor of its own token, and the first query of the repeat
    splits its attention between it and the true successor. ``vocab`` must be even (two heads share
    ``d_model``)."""
    if vocab < 2 or vocab % 2 or context < 2 or sharpness <= 0:
        raise ValueError(f"need an even vocab >= 2, context >= 2 and sharpness > 0; got vocab={vocab}, "
                         f"context={context}, sharpness={sharpness}")
    v = vocab
    model = AttentionOnly(AttentionOnlySizes(vocab=v, context=context, d_model=3 * v, n_heads=2, n_layers=2))
    for p in model.parameters():
        p.zero_()
    first, second = model.layers
    eye = torch.eye(v)
    model.embed.weight[:, :v] = eye  # the token's own code
    first.distance_bias[0] = -sharpness
    first.distance_bias[0, 1] = sharpness  # head 0.0 attends one position back
    first.w_v.weight[:v, :v] = eye  # head 0.0's value: the token code ...
    first.w_o.weight[v:2 * v, :v] = eye  # ... written as the previous-token code
    second.w_q.weight[:v, :v] = eye * sharpness * math.sqrt(second.d_head)  # head 1.0's query: the token ...
    second.w_k.weight[:v, v:2 * v] = eye  # ... its key: the previous token
    second.w_v.weight[:v, :v] = eye  # its value: the token at the key ...
    second.w_o.weight[2 * v:, :v] = eye  # ... written as the copied-token code
    model.unembed.weight[:, 2 * v:] = eye * sharpness  # the logits read the copied token alone
    return model.eval()


@dataclass
class InductionHistory:
    """What :func:`train_induction` saw: the training loss of every step, and every ``every`` steps the loss on a
    fixed batch of the task's copyable positions (in eval mode) and whatever ``measure(model)`` returned."""

    train_loss: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    copy_loss: list[float] = field(default_factory=list)
    measured: list[Any] = field(default_factory=list)
    seconds: float = 0.0


def train_induction(model: AttentionOnly, task: RepeatTask, *, steps: int, batch_size: int = 32, lr: float = 1e-2,
                    seed: int = 0, every: int = 25, measure: Callable[[AttentionOnly], Any] | None = None,
                    eval_size: int = 256, scored: str = "copyable", also_at: Collection[int] = ()) -> InductionHistory:
    """Train ``model`` on ``task`` with Adam at a constant ``lr``: each step a fresh batch, the cross-entropy of the
    copyable positions only (``scored="copyable"``) or of every position (``scored="all"``, the usual language-model
    loss). Every ``every`` steps, at every step of ``also_at`` (a closer look near a drop, say) and at step 0, before
    any training, the loss on the copyable positions of one fixed batch of ``eval_size`` sequences is recorded, with
    ``measure(model)`` when given (it runs without gradients, the model in eval mode). The batches are drawn from
    ``seed``; the model's initial weights are the caller's.

    Raises:
        ValueError: if ``steps < 0``, ``batch_size``, ``every`` or ``eval_size`` is below 1, or ``scored`` is neither
            "copyable" nor "all".
    """
    if steps < 0 or min(batch_size, every, eval_size) < 1 or scored not in ("copyable", "all"):
        raise ValueError(f"need steps >= 0, batch_size, every, eval_size >= 1 and scored 'copyable' or 'all'; got "
                         f"{steps}, {batch_size}, {every}, {eval_size}, {scored!r}")
    draws = torch.Generator().manual_seed(seed)
    eval_ids, eval_copyable = task.batch(eval_size, torch.Generator().manual_seed(seed + 10_000))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)  # on a CPU too: same numbers, less Python
    history, tic = InductionHistory(), time.perf_counter()

    def copy_loss(ids: Tensor, copyable: Tensor) -> Tensor:
        logits = model(ids)[:, :-1]  # (B, T - 1, V): position t predicts token t + 1
        return F.cross_entropy(logits[copyable[:, :-1]], ids[:, 1:][copyable[:, :-1]])

    def train_loss(ids: Tensor, copyable: Tensor) -> Tensor:
        if scored == "copyable":
            return copy_loss(ids, copyable)
        return F.cross_entropy(model(ids)[:, :-1].flatten(0, 1), ids[:, 1:].flatten())

    def record(step: int) -> None:
        model.eval()
        with torch.no_grad():
            history.copy_loss.append(copy_loss(eval_ids, eval_copyable).item())
            if measure is not None:
                history.measured.append(measure(model))
        history.eval_step.append(step)

    record(0)
    for step in range(1, steps + 1):
        model.train()
        loss = train_loss(*task.batch(batch_size, draws))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history.train_loss.append(loss.item())
        if step % every == 0 or step == steps or step in also_at:
            record(step)
    model.eval()
    history.seconds = time.perf_counter() - tic
    return history


@torch.no_grad()
def gpt_attention(model: nn.Module, ids: Tensor) -> Tensor:
    """The attention weights of a :class:`~attention_course.language_model.TorchGPT` for ``ids (B, T)``:
    ``(n_layers, B, n_heads, T, T)``, recomputed from each block's fused query/key projection, with its rotary
    positions when it has them (its kernel, ``F.scaled_dot_product_attention``, never forms the weights). The
    model runs in eval mode and is given back in the mode it came in.

    Raises:
        ValueError: if ``model`` is not a TorchGPT-like model (``sizes``, ``blocks``, ``blocks[i].attn.qkv``).
    """
    if not hasattr(model, "blocks") or not hasattr(model, "sizes"):
        raise ValueError(f"gpt_attention reads a TorchGPT, got {type(model).__name__}")
    sizes, seen = model.sizes, []
    hooks = [block.attn.register_forward_pre_hook(lambda module, args: seen.append(args)) for block in model.blocks]
    mode = model.training
    model.eval()
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(mode)
    maps = []
    for block, (x, _, _, mask, rotary) in zip(model.blocks, seen, strict=True):  # x: LN_1 of the block's input
        b, t, _ = x.shape
        q, k, _ = block.attn.qkv(x).split([sizes.n_heads * sizes.d_head, sizes.n_kv_heads * sizes.d_head,
                                           sizes.n_kv_heads * sizes.d_head], dim=-1)
        q = q.view(b, t, sizes.n_heads, sizes.d_head).transpose(1, 2)  # (B, H, T, d_head)
        k = k.view(b, t, sizes.n_kv_heads, sizes.d_head).transpose(1, 2)  # (B, H_kv, T, d_head)
        if rotary is not None:  # the block turns its queries and keys by their positions
            q, k = _rotate(q, *rotary), _rotate(k, *rotary)
        k = k.repeat_interleave(sizes.n_heads // sizes.n_kv_heads, dim=1)  # each query head's key head
        scores = q @ k.transpose(-2, -1) / math.sqrt(sizes.d_head)  # (B, H, T, T)
        allowed = torch.ones(t, t, dtype=torch.bool, device=x.device).tril() if mask is None else mask
        maps.append(scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1))
    return torch.stack(maps)


@torch.no_grad()
def head_outputs(model: AttentionOnly, ids: Tensor) -> list[Tensor]:
    """What the heads of every layer output for ``ids (B, T)``, before the output projection mixes them: one
    ``z (B, n_heads, T, d_head)`` per layer, read at each layer's ``hook_heads`` in eval mode (the model is given
    back in the mode it came in)."""
    seen: list[Tensor] = []
    handles = [layer.hook_heads.register_forward_hook(lambda module, inputs, z: seen.append(z.detach()))
               for layer in model.layers]
    mode = model.training
    model.eval()
    try:
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
        model.train(mode)
    return seen


def _head_slices(layer: AttentionLayer, head: int) -> tuple[Tensor, ...]:
    """Head ``head``'s ``W_Q, W_K, W_V (d_model, d_head)`` and ``W_O (d_head, d_model)``, for row vectors: the head's
    query is ``x W_Q``, and what it adds to the residual stream is ``z W_O``."""
    rows = slice(head * layer.d_head, (head + 1) * layer.d_head)
    return (layer.w_q.weight[rows].T, layer.w_k.weight[rows].T, layer.w_v.weight[rows].T,
            layer.w_o.weight[:, rows].T)


@torch.no_grad()
def direct_logit_attribution(model: AttentionOnly, ids: Tensor) -> Tensor:
    """Every part of the residual stream's direct contribution to the logits for ``ids (B, T)``:
    ``(1 + n_layers * n_heads, B, T, V)``, first the embeddings (token, and position when the model has them), then
    each head, layer by layer, ``z_h W_O^h W_U``. The model has no LayerNorm and no bias, so the logits are a sum:
    the parts add up to ``model(ids)`` exactly (up to rounding). Read in eval mode."""
    z = head_outputs(model, ids)
    x = model.embed(ids)  # (B, T, d_model)
    if model.pos_embed is not None:
        x = x + model.pos_embed(torch.arange(ids.shape[1], device=ids.device))
    parts = [model.unembed(x)]
    for layer, outputs in zip(model.layers, z, strict=True):
        for head in range(layer.n_heads):
            w_o = _head_slices(layer, head)[3]  # (d_head, d_model)
            parts.append(model.unembed(outputs[:, head] @ w_o))  # (B, T, d_head) -> (B, T, V)
    return torch.stack(parts)


@torch.no_grad()
def k_composition(model: AttentionOnly, reader: int = 1, writer: int = 0) -> Tensor:
    r"""Elhage et al.'s K-composition score of every head of layer ``reader`` with every head of the earlier layer
    ``writer``: ``(n_heads, n_heads)``, entry ``[r, w]``

    .. math:: \frac{\lVert W_{QK}^{r}\, (W_{OV}^{w})^\top \rVert_F}{\lVert W_{QK}^{r} \rVert_F\,
              \lVert W_{OV}^{w} \rVert_F}, \qquad W_{QK} = W_Q W_K^\top,\; W_{OV} = W_V W_O ,

    written for row vectors: head ``w`` adds ``x W_{OV}^w`` to a key's residual stream, and head ``r`` scores it
    ``x_i W_{QK}^r x_j^\top``, so ``W_{QK}^r (W_{OV}^w)^\top`` is how much of the second reads what the first wrote.
    Between 0 and 1; random matrices of width ``d`` give about ``1 / \sqrt{d}``."""
    if not 0 <= writer < reader < len(model.layers):
        raise ValueError(f"need 0 <= writer < reader < n_layers = {len(model.layers)}, got writer={writer}, "
                         f"reader={reader}")
    heads = range(model.sizes.n_heads)
    qk = [(lambda w: w[0] @ w[1].T)(_head_slices(model.layers[reader], h)) for h in heads]  # (d, d) each
    ov = [(lambda w: w[2] @ w[3])(_head_slices(model.layers[writer], h)) for h in heads]
    return torch.tensor([[(a @ b.T).norm() / (a.norm() * b.norm()) for b in ov] for a in qk])


def formed_at(history: InductionHistory, vocab: int) -> int | None:
    """The first recorded step at which the copy loss is below half the uniform guess, ``ln(vocab) / 2``: where the
    circuit has formed. None if it never was."""
    return next((step for step, loss in zip(history.eval_step, history.copy_loss, strict=True)
                 if loss < math.log(vocab) / 2), None)


@dataclass(frozen=True)
class Variant:
    """One set-up of the induction task: the model's sizes, the task and how it trains."""

    sizes: AttentionOnlySizes
    task: RepeatTask
    lr: float = 1e-2
    scored: str = "copyable"


_TASK = RepeatTask(vocab=64, length=48, shortest=6, longest=18)
_SIZES = AttentionOnlySizes(vocab=64, context=48, d_model=64, n_heads=4, n_layers=2)

#: The chapter's set-up, and one change of it at a time: what each knob does to when (and whether) the circuit forms.
VARIANTS: dict[str, Variant] = {
    "chapter": Variant(_SIZES, _TASK),
    "learned positions": Variant(replace(_SIZES, positions="learned"), _TASK),
    "every position scored": Variant(_SIZES, _TASK, scored="all"),
    "lr 3e-3": Variant(_SIZES, _TASK, lr=3e-3),
    "fixed offset, learned positions": Variant(replace(_SIZES, positions="learned"),
                                               replace(_TASK, shortest=24, longest=24)),
}


@dataclass
class Run:
    """One training run of :func:`main`: its variant and seed, the step where the copy loss fell below half the
    uniform guess (None: never), the copy loss at the end, on its own task and on the chapter's, and its time."""

    variant: str
    seed: int
    steps: int
    formed_at: int | None
    final_loss: float
    chapter_task_loss: float
    seconds: float


def main(argv: Sequence[str] | None = None, default_out: str = "benchmark-results") -> int:
    """The command line: train every variant of :data:`VARIANTS` chosen, for every seed; print a table; write
    ``induction.csv`` (one row per run) to ``--out``.

    ``python -m attention_course.induction --seeds 0 1 2 3 4 --steps 400``
    """
    parser = argparse.ArgumentParser(description="When does an induction head form? Train the chapter's "
                                                 "attention-only model and its variants over seeds.")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: the chapter's)")
    parser.add_argument("--out", default=default_out, help="folder for induction.csv")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU, {torch.get_num_threads()} thread(s); {args.steps} steps of 32 "
          f"sequences; 'formed' is the first step (every 25) where the copy loss < ln(vocab) / 2", flush=True)
    print(f"{'variant':<32} {'seed':>4} {'formed':>7} {'final loss':>11} {'on the chapter task':>20} {'s':>6}")
    runs = []
    for name in args.variants:
        variant = VARIANTS[name]
        for seed in args.seeds:
            torch.manual_seed(seed)
            model = AttentionOnly(variant.sizes)
            history = train_induction(model, variant.task, steps=args.steps, lr=variant.lr, seed=seed,
                                      scored=variant.scored)
            ids, copyable = _TASK.batch(256, torch.Generator().manual_seed(10_000))
            with torch.no_grad():
                logits = model(ids)[:, :-1]
                on_chapter = F.cross_entropy(logits[copyable[:, :-1]], ids[:, 1:][copyable[:, :-1]]).item()
            run = Run(name, seed, args.steps, formed_at(history, variant.task.vocab), history.copy_loss[-1],
                      on_chapter, history.seconds)
            runs.append(run)
            formed = "-" if run.formed_at is None else str(run.formed_at)
            print(f"{name:<32} {seed:>4} {formed:>7} {run.final_loss:>11.3f} {run.chapter_task_loss:>20.3f} "
                  f"{run.seconds:>6.1f}", flush=True)
    print(f"wrote {write_csv(runs, Path(args.out) / 'induction.csv')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
