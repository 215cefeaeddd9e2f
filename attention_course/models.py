"""An encoder–decoder built from **PyTorch's own layers**, so that Chapter 6 runs without your exercise solutions.

:class:`TorchTransformer` has the interface of the ``Transformer`` you write
in the Chapter 6 exercises (``model.config``, ``encode``, ``decode``,
``forward``), but its layers are ``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer`` and ``nn.MultiheadAttention``. Swap in your
``Transformer`` from the exercises: the trainer in
:mod:`attention_course.training` and the decoders below work with either.

Mind one difference of convention. This course's masks say ``True`` = *may
attend* (as ``F.scaled_dot_product_attention`` does); PyTorch's layers take
boolean masks that say ``True`` = *may not attend* (``src_key_padding_mask``
is ``True`` at padding, ``tgt_mask`` is ``True`` above the diagonal). The
conversion happens in :meth:`TorchTransformer.encode` and
:meth:`TorchTransformer.decode`, and nowhere else.

Also here: :func:`beam_search`, which generates an output one token at a
time from any model with that interface, keeping several candidate outputs
at every step. Greedy decoding, a beam of one, is not here: it is the
``greedy_decode`` you write in the Chapter 6 exercises, and ``beam_search``
refuses ``beam_size < 2``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class ModelConfig:
    """Sizes of an encoder–decoder; the same fields as the Chapter 6 exercise's config."""

    src_vocab: int  # number of source tokens (ids 0 .. src_vocab - 1)
    tgt_vocab: int  # number of target tokens; the output layer scores each of them
    d_model: int = 512  # the width of the vectors that flow through both stacks
    n_heads: int = 8  # attention heads per attention layer; d_model % n_heads == 0
    n_layers: int = 6  # depth of the encoder; the decoder has the same depth
    d_ff: int = 2048  # width of the hidden layer of each feed-forward block
    dropout: float = 0.1  # dropout on attention weights, residual branches and embeddings
    max_len: int = 512  # longest source or target sequence (rows of the position tables)
    pad_id: int = 0  # id of <pad> on both sides
    norm_first: bool = False  # False: post-norm, as in the 2017 paper; True: pre-norm, as in GPT-2


class _Attention(nn.MultiheadAttention):
    """``nn.MultiheadAttention`` (batch first) that can keep its weights, or take the manual path.

    PyTorch computes attention with the fused ``F.scaled_dot_product_attention``
    when the layer does not ask for the weights, and step by step (``QKᵀ``,
    softmax, ``@ V``) when it does. ``keep_weights`` stores the per-head weights
    of the last call in ``self.weights``; ``fused = False`` asks for the weights
    on every call, which forces the step-by-step path.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__(d_model, n_heads, dropout=dropout, batch_first=True)
        self.keep_weights, self.fused = False, True
        self.weights: Tensor | None = None  # (B, n_heads, T_q, T_k) after a call with keep_weights

    def forward(self, query: Tensor, key: Tensor, value: Tensor, **kwargs) -> tuple[Tensor, Tensor | None]:
        if self.keep_weights or not self.fused:
            kwargs.update(need_weights=True, average_attn_weights=False)
        out, weights = super().forward(query, key, value, **kwargs)
        if self.keep_weights:
            self.weights = weights.detach()
        return out, weights


class TorchTransformer(nn.Module):
    """The encoder–decoder of Vaswani et al. (2017) from PyTorch's own layers.

    PyTorch's own layers, so that this chapter runs without your exercise
    solutions; swap in your ``Transformer`` from the exercises.

    Token embeddings plus learned position embeddings feed ``n_layers``
    ``nn.TransformerEncoderLayer`` (self-attention over the source, with its
    padding masked) and ``n_layers`` ``nn.TransformerDecoderLayer`` (causal
    self-attention, cross-attention into ``memory``, feed-forward); a linear
    layer scores every target token. With ``norm_first`` (pre-norm) a final
    ``LayerNorm`` closes each stack.

    Args:
        config: a :class:`ModelConfig`, or any object with the same fields
            (your ``TransformerConfig`` from the exercises).
        fused: ``False`` makes every attention layer compute its weights step
            by step instead of calling the fused kernel (same numbers, slower).
    """

    def __init__(self, config: ModelConfig, fused: bool = True) -> None:
        super().__init__()
        c = self.config = config
        if c.d_model % c.n_heads:
            raise ValueError(f"d_model={c.d_model} is not a multiple of n_heads={c.n_heads}")
        self.src_tokens = nn.Embedding(c.src_vocab, c.d_model)
        self.tgt_tokens = nn.Embedding(c.tgt_vocab, c.d_model)
        self.src_pos = nn.Embedding(c.max_len, c.d_model)  # learned positions (Chapter 5), added to the tokens
        self.tgt_pos = nn.Embedding(c.max_len, c.d_model)
        self.drop = nn.Dropout(c.dropout)
        layer_args = dict(d_model=c.d_model, nhead=c.n_heads, dim_feedforward=c.d_ff, dropout=c.dropout,
                          batch_first=True, norm_first=c.norm_first)
        enc_layer = nn.TransformerEncoderLayer(**layer_args)
        enc_layer.self_attn = _Attention(c.d_model, c.n_heads, c.dropout)
        dec_layer = nn.TransformerDecoderLayer(**layer_args)
        dec_layer.self_attn = _Attention(c.d_model, c.n_heads, c.dropout)
        dec_layer.multihead_attn = _Attention(c.d_model, c.n_heads, c.dropout)  # the cross-attention
        final = (lambda: nn.LayerNorm(c.d_model)) if c.norm_first else (lambda: None)
        self.encoder = nn.TransformerEncoder(enc_layer, c.n_layers, norm=final(), enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec_layer, c.n_layers, norm=final())
        self.to_vocab = nn.Linear(c.d_model, c.tgt_vocab)
        for p in [*self.encoder.parameters(), *self.decoder.parameters()]:
            if p.dim() > 1:  # the stacks are deep copies of one layer: give every layer its own start
                nn.init.xavier_uniform_(p)
        self.fused = fused

    @property
    def fused(self) -> bool:
        """Whether attention runs in PyTorch's fused kernel (``True``) or step by step."""
        return all(m.fused for m in self._attention_layers())

    @fused.setter
    def fused(self, value: bool) -> None:
        for m in self._attention_layers():
            m.fused = value

    def _attention_layers(self) -> list[_Attention]:
        return [m for m in self.modules() if isinstance(m, _Attention)]

    def _embed(self, ids: Tensor, tokens: nn.Embedding, positions: nn.Embedding, what: str) -> Tensor:
        if ids.dim() != 2:
            raise ValueError(f"{what} must be a (B, T) tensor of token ids; got shape {tuple(ids.shape)}")
        if ids.shape[1] > self.config.max_len:
            raise ValueError(f"{what} {tuple(ids.shape)} is longer than max_len={self.config.max_len}")
        where = torch.arange(ids.shape[1], device=ids.device)  # (T,)
        return self.drop(tokens(ids) + positions(where))  # (B, T) -> (B, T, d_model)

    def encode(self, src: Tensor) -> Tensor:
        """``src (B, S)`` ids → ``memory (B, S, d_model)``: the source read by the encoder stack."""
        x = self._embed(src, self.src_tokens, self.src_pos, "src")  # (B, S, d_model)
        is_pad = src == self.config.pad_id  # (B, S), PyTorch's convention: True = padding, may not be attended
        return self.encoder(x, src_key_padding_mask=is_pad)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        """``tgt_in (B, T)`` ids, ``memory (B, S, d_model)``, ``src (B, S)`` → ``logits (B, T, tgt_vocab)``.

        ``src`` only supplies the padding mask of ``memory``.
        """
        y = self._embed(tgt_in, self.tgt_tokens, self.tgt_pos, "tgt_in")  # (B, T, d_model)
        t = tgt_in.shape[1]
        future = torch.ones(t, t, dtype=torch.bool, device=tgt_in.device).triu(1)  # (T, T): True = may NOT attend
        y = self.decoder(y, memory, tgt_mask=future, tgt_is_causal=True,
                         memory_key_padding_mask=src == self.config.pad_id)  # (B, T, d_model)
        return self.to_vocab(y)  # (B, T, d_model) -> (B, T, tgt_vocab)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """``src (B, S)``, ``tgt_in (B, T)`` → ``logits (B, T, tgt_vocab)``: one pass, every position at once."""
        return self.decode(tgt_in, self.encode(src), src)

    @torch.no_grad()
    def cross_attention(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Cross-attention weights of every decoder layer: ``(n_layers, B, n_heads, T, S)``.

        Row ``t`` of a head's ``(T, S)`` matrix says how much target position
        ``t`` (reading ``tgt_in[:, t]``, about to predict the next token) took
        from each source position; padded source positions get 0.
        """
        layers = [layer.multihead_attn for layer in self.decoder.layers]
        for m in layers:
            m.keep_weights = True
        try:
            with in_eval_mode(self):  # no dropout on the weights we read
                self(src, tgt_in)
            return torch.stack([m.weights for m in layers])
        finally:
            for m in layers:
                m.keep_weights, m.weights = False, None


@contextlib.contextmanager
def in_eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block ``model`` is in eval mode (no dropout); afterwards it is back in the mode it had."""
    mode = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(mode)


def _log_probs_of_next(model: nn.Module, prefix: Tensor, memory: Tensor, src: Tensor) -> Tensor:
    """``(N, V)`` log-probabilities of the token after each row of ``prefix (N, t)``."""
    logits = model.decode(prefix, memory, src)  # (N, t, V): only the last position is new
    return F.log_softmax(logits[:, -1].float(), dim=-1)


@torch.no_grad()
def beam_search(model: nn.Module, src: Tensor, start_id: int, end_id: int, max_len: int, beam_size: int = 4,
                length_alpha: float = 0.0) -> Tensor:
    """Keep the ``beam_size`` most likely prefixes at every step: ``src (B, S)`` → ``(B, L)`` ids.

    A prefix's score is the sum of the log-probabilities of its tokens. A
    finished prefix (one that wrote ``end_id``) keeps its score and is padded
    from then on. At the end each sentence returns its best prefix by
    ``score / length ** length_alpha`` (``length_alpha = 0``: the raw sum,
    which favours short outputs; 0.6 to 1 is usual in translation). Each row
    starts with ``start_id`` and holds ``model.config.pad_id`` after its
    ``end_id``; ``L <= max_len`` counts ``start_id``. ``memory`` is computed
    once. The model runs in eval mode (no dropout) and is left in the mode it
    had.

    Raises:
        ValueError: if ``beam_size < 2``. A beam of 1 is greedy decoding, the
            ``greedy_decode`` that Chapter 6's exercise asks you to write.
    """
    if beam_size < 2:
        raise ValueError(f"beam_size={beam_size}: beam_search needs a beam of at least 2. A beam of 1 is greedy "
                         "decoding, which Chapter 6's exercise asks you to write yourself (greedy_decode)")
    b, k = src.shape[0], beam_size
    with in_eval_mode(model):
        pad = model.config.pad_id
        memory = model.encode(src).repeat_interleave(k, dim=0)  # (B, S, d) -> (B * k, S, d): k copies per sentence
        src_k = src.repeat_interleave(k, dim=0)  # (B * k, S)
        seqs = torch.full((b * k, 1), start_id, dtype=torch.long, device=src.device)  # (B * k, 1)
        score = torch.full((b, k), float("-inf"), device=src.device)  # (B, k)
        score[:, 0] = 0.0  # at the start all k beams are the same prefix: keep one
        ended = torch.zeros(b * k, dtype=torch.bool, device=src.device)  # (B * k,): beams that wrote <end>
        while seqs.shape[1] < max_len and not bool(ended.all()):
            logp = _log_probs_of_next(model, seqs, memory, src_k)  # (B * k, V)
            v = logp.shape[-1]
            logp[:, pad] = float("-inf")  # a running prefix never writes <pad> ...
            logp[ended] = float("-inf")
            logp[ended, pad] = 0.0  # ... and a finished one writes nothing else, for free
            total = (score.reshape(-1, 1) + logp).reshape(b, k * v)  # (B, k * V): every prefix + every next token
            score, pick = total.topk(k, dim=-1)  # (B, k) best continuations per sentence
            parent = (pick // v + torch.arange(b, device=src.device)[:, None] * k).reshape(-1)  # (B * k,) rows
            token = (pick % v).reshape(-1, 1)  # (B * k, 1)
            seqs = torch.cat([seqs[parent], token], dim=1)  # (B * k, t) -> (B * k, t + 1)
            ended = ended[parent] | (token[:, 0] == end_id)
        lengths = (seqs != pad).sum(dim=1).reshape(b, k).float()  # (B, k), <start> and <end> included
        best = (score / lengths**length_alpha).argmax(dim=-1)  # (B,)
        return seqs.reshape(b, k, -1)[torch.arange(b, device=src.device), best]  # (B, L)
