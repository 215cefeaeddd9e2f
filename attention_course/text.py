"""Chapter 7's text: Python's own help pages, read one character at a time.

The text of ``help("topics")`` (``help("for")``, ``help("LISTS")``, ...) ships with every Python in
``pydoc_data.topics``, but every Python release regenerates it: Python 3.11's differs from Colab's. So the
course ships one fixed snapshot beside this module, ``python_help.txt.gz`` (Python 3.11.7's topics, sorted by
name, 464,970 characters, 103 distinct, 134 KB compressed), and checks it against its SHA-256 when it is read:
every learner, the book and the grader see the same characters. The text is the Python documentation's, under
the Python Software Foundation License.

A :class:`CharCorpus` numbers the characters and cuts the text into a training part and a held-out part by
interleaved chunks (every tenth chunk of 2,000 characters is held out), so that both parts mix the same
topics; ``batch`` draws ``(inputs, targets)`` windows, the targets being the inputs shifted by one character
(next-token prediction).

>>> corpus = CharCorpus.python_help()
>>> corpus.decode(corpus.encode("attention"))
'attention'
"""

from __future__ import annotations

import gzip
import hashlib
import math
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor

#: The snapshot of the help pages and the SHA-256 of its text (UTF-8): made once, on Python 3.11.7, with
#: ``gzip.compress("".join(topics[n] for n in sorted(topics)).encode(), 9, mtime=0)``.
SNAPSHOT = Path(__file__).with_name("python_help.txt.gz")
SNAPSHOT_SHA256 = "37d06970fc926e60c16dff401e441b84752446a36b6b64516c229fdec77e992c"


def python_help_text() -> str:
    """The text of every topic of Python's ``help()`` (Python 3.11.7's, topics sorted by name), from the snapshot
    shipped with this package, the same on every machine.

    Raises:
        ValueError: if the snapshot's text is not the one the course was written for (its SHA-256 differs).
    """
    data = gzip.decompress(SNAPSHOT.read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    if digest != SNAPSHOT_SHA256:
        raise ValueError(f"{SNAPSHOT.name} has SHA-256 {digest}, not {SNAPSHOT_SHA256}: the snapshot of the help "
                         "pages was changed or damaged; reinstall the course's helper package")
    return data.decode("utf-8")


class CharCorpus:
    """A text as character ids: ``vocab`` is its sorted characters, ``ids`` the text, ``train`` and ``held_out``
    its two parts.

    The text is cut into chunks of ``chunk`` characters; a ``held_out_share`` of them, spread evenly through the
    text (with the default 0.1, every tenth chunk), are joined into ``held_out``, the others into ``train``. An
    interleaved split keeps both parts a mix of the same kinds of text; holding out the end of the text would
    hold out other topics, which can be easier or harder than the rest.

    Args:
        text: at least two characters.
        held_out_share: the share of the chunks kept for measuring, in ``[0, 1)``.
        chunk: characters per chunk, at least 1; the text must have enough chunks for one to be held out.
    """

    def __init__(self, text: str, held_out_share: float = 0.1, chunk: int = 2000) -> None:
        if len(text) < 2:
            raise ValueError(f"a corpus needs at least two characters, got {len(text)}")
        if not 0 <= held_out_share < 1:
            raise ValueError(f"held_out_share must be in [0, 1), got {held_out_share}")
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1 character, got {chunk}")
        self.vocab: list[str] = sorted(set(text))  # id -> character
        self.index: dict[str, int] = {c: i for i, c in enumerate(self.vocab)}  # character -> id
        self.ids = torch.tensor(self.encode(text))  # (N,)
        pieces = self.ids.split(chunk)  # chunks of `chunk` ids, the last one shorter
        # chunk i is held out when (i + 1) · share reaches the next whole number: with 0.1, chunks 9, 19, 29, ...
        reached = [math.floor(i * held_out_share + 1e-9) for i in range(len(pieces) + 1)]  # 1e-9: 30 · 0.1 is 3.0...04
        held = [reached[i + 1] > reached[i] for i in range(len(pieces))]
        if held_out_share > 0 and not any(held):
            raise ValueError(f"a text of {len(text)} characters has {len(pieces)} chunks of {chunk}: too few to hold "
                             f"out a share of {held_out_share}; pass a smaller chunk")
        self.train = torch.cat([p for p, h in zip(pieces, held, strict=True) if not h])
        self.held_out = torch.cat([p for p, h in zip(pieces, held, strict=True) if h]) if any(held) else self.ids[:0]

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
