"""Counting baselines for Chapter 7's losses: what a table of character counts scores on the same windows.

An n-gram model predicts a character from the ``n - 1`` before it, by counting, in the training text, how often
each character followed that context:

.. math:: p(c \\mid \\text{ctx}) = \\frac{\\#(\\text{ctx}, c) + \\alpha}{\\#(\\text{ctx}) + \\alpha V}

(add-α smoothing: a pair never seen keeps a little probability). A unigram (``n = 1``) knows only how common each
character is, a bigram which character follows which, a trigram two characters back. A language model that
cannot beat them has learned no more than counts; the gap is what its attention and its layers bought.

:func:`repeated_ngrams` and :func:`distinct_ngrams` measure generated text the same way: how much of a text repeats
itself, and how much several texts differ.

>>> import torch
>>> text = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
>>> windows = [(text[None, :4], text[None, 1:5])]
>>> round(ngram_loss(text, windows, order=2, vocab=2, alpha=0.01), 4)  # 0 is always followed by 1, 1 by 0
0.0029
"""

from __future__ import annotations

import torch
from torch import Tensor

#: The most cells an n-gram table may have (``vocab ** order``): a trigram over 103 characters has 1,092,727.
LARGEST_TABLE = 2**22


def _codes(seq: Tensor, k: int, vocab: int) -> Tensor:
    """The k-grams of ``seq (..., N)`` as integers ``sum_i seq[j + i] · V^(k - 1 - i)``: ``(..., N - k + 1)``."""
    code = torch.zeros_like(seq[..., k - 1:])
    for i in range(k):
        code = code * vocab + seq[..., i:seq.shape[-1] - k + 1 + i]
    return code


def ngram_loss(train: Tensor, windows: list[tuple[Tensor, Tensor]], order: int, vocab: int,
               alpha: float = 0.1) -> float:
    """Cross-entropy in nats per character of an add-``alpha`` ``order``-gram model counted on ``train`` (1-D ids),
    on ``windows``: ``(inputs, targets)`` batches of ``(B, T)`` ids, the targets the inputs one character later
    (as :meth:`~attention_course.text.CharCorpus.batch` makes them). A target's context is the ``order - 1``
    characters before it in its window; the first targets of a window, with fewer characters before them, use
    the shorter context they have, as a model reading the window does.

    Raises:
        ValueError: if ``order < 1``, ``alpha <= 0``, ``train`` is shorter than ``order``, or the table would have
            more than :data:`LARGEST_TABLE` cells.
    """
    if order < 1 or not alpha > 0 or train.dim() != 1 or len(train) < order:
        raise ValueError(f"order must be >= 1, alpha > 0 and train 1-D of at least order ids; got order={order}, "
                         f"alpha={alpha}, train {tuple(train.shape)}")
    if vocab**order > LARGEST_TABLE:
        raise ValueError(f"an order-{order} table over {vocab} characters has {vocab**order:,} cells, more than "
                         f"{LARGEST_TABLE:,}: use a smaller order")
    tables = []  # tables[k - 1]: how often each k-gram occurs (V^k,), and each context of k - 1 characters
    for k in range(1, order + 1):
        joint = torch.bincount(_codes(train.long().cpu(), k, vocab), minlength=vocab**k).double()
        tables.append((joint, joint.view(-1, vocab).sum(dim=1)))
    total, count = 0.0, 0
    for inputs, targets in windows:
        seq = torch.cat([inputs[:, :1], targets], dim=1).long().cpu()  # (B, T + 1): the window and its last target
        # the target seq[:, j] has j characters before it: order k = min(j + 1, order) for j = 1 .. T
        for k in range(min(2, order), order + 1):
            grams = _codes(seq, k, vocab)  # (B, T + 2 - k): grams[:, i] ends at the target seq[:, i + k - 1]
            grams = grams[:, 1:] if k == 1 else grams  # seq[:, 0] is no target
            grams = grams[:, :1] if k < order else grams  # below the full order, only target j = k - 1
            joint, context = tables[k - 1]
            p = (joint[grams] + alpha) / (context[grams // vocab] + alpha * vocab)  # k = 1: the context is empty
            total -= p.log().sum().item()
            count += grams.numel()
    return total / count


def repeated_ngrams(text: str, n: int) -> float:
    """The share of ``text``'s ``n``-character strings that already occurred earlier in it: 0 for text that never
    repeats itself, near 1 for text stuck in a loop (how Holtzman et al., 2020, measured degenerate text).

    Raises:
        ValueError: if ``n < 1`` or the text is shorter than ``n``.
    """
    if n < 1 or len(text) < n:
        raise ValueError(f"need n >= 1 and a text of at least n characters, got n={n}, {len(text)} characters")
    seen: set[str] = set()
    repeats = 0
    for i in range(len(text) - n + 1):
        gram = text[i:i + n]
        repeats += gram in seen
        seen.add(gram)
    return repeats / (len(text) - n + 1)


def distinct_ngrams(texts: list[str], n: int) -> float:
    """The share of distinct ``n``-character strings among all those of ``texts``: near 1 when the texts say different
    things, ``1 / len(texts)`` or less when they are copies of one another.

    Raises:
        ValueError: if ``n < 1`` or no text has ``n`` characters.
    """
    grams = [t[i:i + n] for t in texts for i in range(len(t) - n + 1)] if n >= 1 else []
    if not grams:
        raise ValueError(f"need n >= 1 and a text of at least n characters, got n={n}")
    return len(set(grams)) / len(grams)
