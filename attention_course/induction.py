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

:func:`train_induction` trains a model on the task, scoring only the positions whose next token can be copied.
:func:`gpt_attention` reads the attention weights of Chapter 7's :class:`~attention_course.language_model.TorchGPT`,
whose fused kernel does not return them.

Nothing here computes an attention score of a head or ablates one: those are the chapter's exercises.

>>> task = RepeatTask(vocab=16, length=24, shortest=4, longest=8)
>>> ids, copyable = task.batch(2, torch.Generator().manual_seed(0))
>>> ids.shape, copyable.shape
(torch.Size([2, 24]), torch.Size([2, 24]))
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RepeatTask", "repeated_tokens", "AttentionOnlySizes", "AttentionLayer", "AttentionOnly",
           "InductionHistory", "train_induction", "gpt_attention"]


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

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (w(x).view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, T, d) -> (B, H, T, d_head)
                   for w in (self.w_q, self.w_k, self.w_v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, H, T, T)
        where = torch.arange(t, device=x.device)
        distance = where[:, None] - where[None, :]  # (T, T): i - j, negative above the diagonal
        if self.distance_bias is not None:
            scores = scores + self.distance_bias[:, distance.clamp(min=0)]  # (H, T, T), broadcast over B
        scores = scores.masked_fill(distance < 0, float("-inf"))  # causal: key j <= query i
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
        for name, p in self.named_parameters():
            if p.dim() == 2 and name != "distance_bias":
                nn.init.normal_(p, std=sizes.d_model**-0.5)  # unit-size token vectors; no LayerNorm rescales them

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
                    eval_size: int = 256) -> InductionHistory:
    """Train ``model`` on ``task`` with Adam at a constant ``lr``: each step a fresh batch, the cross-entropy of the
    copyable positions only. Every ``every`` steps (and at step 0, before any training) the loss on one fixed batch
    of ``eval_size`` sequences is recorded, with ``measure(model)`` when given (it runs without gradients, the model
    in eval mode). The batches are drawn from ``seed``; the model's initial weights are the caller's.

    Raises:
        ValueError: if ``steps < 0`` or ``batch_size``, ``every`` or ``eval_size`` is below 1.
    """
    if steps < 0 or min(batch_size, every, eval_size) < 1:
        raise ValueError(f"need steps >= 0 and batch_size, every, eval_size >= 1; got {steps}, {batch_size}, "
                         f"{every}, {eval_size}")
    draws = torch.Generator().manual_seed(seed)
    eval_ids, eval_copyable = task.batch(eval_size, torch.Generator().manual_seed(seed + 10_000))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history, tic = InductionHistory(), time.perf_counter()

    def copy_loss(ids: Tensor, copyable: Tensor) -> Tensor:
        logits = model(ids)[:, :-1]  # (B, T - 1, V): position t predicts token t + 1
        return F.cross_entropy(logits[copyable[:, :-1]], ids[:, 1:][copyable[:, :-1]])

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
        loss = copy_loss(*task.batch(batch_size, draws))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history.train_loss.append(loss.item())
        if step % every == 0 or step == steps:
            record(step)
    model.eval()
    history.seconds = time.perf_counter() - tic
    return history


@torch.no_grad()
def gpt_attention(model: nn.Module, ids: Tensor) -> Tensor:
    """The attention weights of a :class:`~attention_course.language_model.TorchGPT` for ``ids (B, T)``:
    ``(n_layers, B, n_heads, T, T)``, recomputed from each block's fused query/key projection (its kernel,
    ``F.scaled_dot_product_attention``, never forms them). The model runs in eval mode and is given back in the
    mode it came in.

    Raises:
        ValueError: if ``model`` is not a TorchGPT-like model (``sizes``, ``blocks``, ``blocks[i].attn.qkv``).
    """
    if not hasattr(model, "blocks") or not hasattr(model, "sizes"):
        raise ValueError(f"gpt_attention reads a TorchGPT, got {type(model).__name__}")
    sizes, seen = model.sizes, []
    hooks = [block.attn.register_forward_hook(lambda module, args, out: seen.append(args[0]))
             for block in model.blocks]  # args[0]: the block's input to attention, LN_1(x), (B, T, d_model)
    mode = model.training
    model.eval()
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
        model.train(mode)
    maps = []
    for block, x in zip(model.blocks, seen, strict=True):
        b, t, _ = x.shape
        q, k, _ = block.attn.qkv(x).split([sizes.n_heads * sizes.d_head, sizes.n_kv_heads * sizes.d_head,
                                           sizes.n_kv_heads * sizes.d_head], dim=-1)
        q = q.view(b, t, sizes.n_heads, sizes.d_head).transpose(1, 2)  # (B, H, T, d_head)
        k = k.view(b, t, sizes.n_kv_heads, sizes.d_head).transpose(1, 2)  # (B, H_kv, T, d_head)
        k = k.repeat_interleave(sizes.n_heads // sizes.n_kv_heads, dim=1)  # each query head's key head
        scores = q @ k.transpose(-2, -1) / math.sqrt(sizes.d_head)  # (B, H, T, T)
        maps.append(scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
                    .softmax(dim=-1))
    return torch.stack(maps)
