"""Chapter 7's text: Python's own help pages, read one character at a time.

The standard library ships the text of ``help("topics")`` in ``pydoc_data.topics``: about 0.8 MB of English
prose and code examples, the same on every machine that has Python, so nothing is downloaded. A
:class:`CharCorpus` numbers its characters and cuts it into a training part and a held-out part; ``batch``
draws ``(inputs, targets)`` windows, the targets being the inputs shifted by one character (next-token
prediction).

>>> corpus = CharCorpus.python_help()
>>> corpus.decode(corpus.encode("attention"))
'attention'
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


def python_help_text() -> str:
    """The text of every topic of Python's ``help()``, in a fixed order (the topics sorted by name)."""
    from pydoc_data.topics import topics

    return "".join(topics[name] for name in sorted(topics))


class CharCorpus:
    """A text as character ids: ``vocab`` is its sorted characters, ``ids`` the text, ``train`` and ``held_out``
    the first ``1 - held_out_share`` of it and the rest.

    Args:
        text: at least two characters.
        held_out_share: the share of the text kept for measuring, from its end, in ``[0, 1)``.
    """

    def __init__(self, text: str, held_out_share: float = 0.1) -> None:
        if len(text) < 2:
            raise ValueError(f"a corpus needs at least two characters, got {len(text)}")
        if not 0 <= held_out_share < 1:
            raise ValueError(f"held_out_share must be in [0, 1), got {held_out_share}")
        self.vocab: list[str] = sorted(set(text))  # id -> character
        self.index: dict[str, int] = {c: i for i, c in enumerate(self.vocab)}  # character -> id
        self.ids = torch.tensor(self.encode(text))  # (N,)
        split = int(len(self.ids) * (1 - held_out_share))
        self.train, self.held_out = self.ids[:split], self.ids[split:]

    @classmethod
    def python_help(cls, held_out_share: float = 0.1) -> CharCorpus:
        """The corpus of :func:`python_help_text`."""
        return cls(python_help_text(), held_out_share)

    def __len__(self) -> int:
        """The vocabulary size ``V``."""
        return len(self.vocab)

    def __repr__(self) -> str:
        return f"CharCorpus({len(self.ids):,} characters, {len(self)} distinct)"

    def encode(self, text: str) -> list[int]:
        """The ids of the characters of ``text``."""
        unknown = sorted(set(text) - self.index.keys())
        if unknown:
            raise ValueError(f"characters {unknown} are not in the corpus's vocabulary of {len(self)}")
        return [self.index[c] for c in text]

    def decode(self, ids: Iterable[int] | Tensor) -> str:
        """The characters of ``ids`` (a list, or a 1-D tensor)."""
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        return "".join(self.vocab[i] for i in ids)

    def batch(self, part: Tensor, batch_size: int, length: int,
              generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """``batch_size`` windows of ``length`` characters from ``part`` (``corpus.train`` or ``corpus.held_out``)
        at random starts: ``inputs (B, T)`` and ``targets (B, T)``, the same windows one character later."""
        if not 1 <= length < len(part):
            raise ValueError(f"length must be in [1, {len(part) - 1}] for a part of {len(part)} characters, "
                             f"got {length}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        starts = torch.randint(0, len(part) - length, (batch_size,), generator=generator)  # (B,)
        window = starts[:, None] + torch.arange(length + 1)  # (B, T + 1): the positions of each window
        rows = part[window]  # (B, T + 1)
        return rows[:, :-1], rows[:, 1:]  # inputs and targets, (B, T) each
