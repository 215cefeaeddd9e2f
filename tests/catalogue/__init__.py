"""Catalogues of wrong and correct answers, one module per chapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One learner answer to the exercise ``target``, written by its implementation ``impl``.

    A wrong answer declares the mistake the checks must name, and where:

    - ``name``: the mistake's short name, exactly as a failing check ends its message, ``"... (name)"``
      (:func:`attention_course.testing.mistake_name` reads it; the feedback and the class report show it).
    - ``cell``: the ``grade_id`` of the test cell that owns the property the answer breaks. Graded, that cell
      must fail with ``name``. The visible checks must fail it too, and give ``name`` in one of the exercise's
      cells (a mistake they cannot catch is a visible check to add, not an exception).
    - ``also``: other names this answer may rightly be given, in other cells (expected secondary effects).
      Any other name, in any cell, graded or visible, is a false accusation and fails the catalogue.

    Correct answers leave all three empty.
    """

    target: str
    label: str
    impl: Any
    name: str = ""
    cell: str = ""
    also: tuple[str, ...] = field(default=())
