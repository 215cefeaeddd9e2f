"""Catalogues of wrong and correct answers, one module per chapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One learner answer to the exercise ``target``.

    ``expect`` lists phrases of which at least one must appear in the message
    of a failing test cell (wrong answers only); correct answers leave it empty.
    """

    target: str
    label: str
    impl: Any
    expect: tuple[str, ...] = field(default=())
