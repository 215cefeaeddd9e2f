"""Small sequence-to-sequence tasks, made in code from a seed: nothing is downloaded.

- :func:`copy_task` and :func:`reverse_task` — strings of letters copied or
  reversed: sanity checks that a model and a trainer work at all.
- :func:`dates_task` — a translation-like task: a date written the way people
  write it ("3 March 2021", "March 3rd, 2021", "03/03/21", "Wed 3 Mar 2021",
  "the third of March 2021", ...) becomes the ISO date ``2021-03-03``.

Every task has disjoint ``train``, ``valid`` and ``test`` splits of
``(source, target)`` string pairs, and a character-level tokenizer per side
(:class:`CharTokenizer`: ``<pad>`` = 0, ``<start>`` = 1, ``<end>`` = 2).
:func:`make_batch` turns a list of pairs into the padded ``(src, tgt)`` id
tensors an encoder–decoder takes; the targets carry no special tokens (the
trainer adds ``<start>`` and ``<end>`` for teacher forcing).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

PAD, START, END = "<pad>", "<start>", "<end>"
Pair = tuple[str, str]


class CharTokenizer:
    """One id per character, after the three special tokens ``<pad>`` (0), ``<start>`` (1) and ``<end>`` (2).

    >>> tok = CharTokenizer("0123456789-")
    >>> tok.encode("2021-03-03")
    [6, 4, 6, 5, 3, 4, 7, 3, 4, 7]
    >>> tok.decode(tok.encode("2021-03-03", end=True) + [0, 0])
    '2021-03-03'
    """

    pad_id, start_id, end_id = 0, 1, 2

    def __init__(self, chars: Iterable[str]) -> None:
        self.itos: list[str] = [PAD, START, END, *sorted(set(chars))]  # id -> token
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.itos)}  # token -> id

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"CharTokenizer({len(self)} tokens: {''.join(self.itos[3:])!r})"

    def encode(self, text: str, start: bool = False, end: bool = False) -> list[int]:
        """The ids of the characters of ``text``, optionally wrapped in ``<start>`` ... ``<end>``."""
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(f"characters {unknown} of {text!r} are not in the vocabulary of {self!r}")
        ids = [self.stoi[c] for c in text]
        return [self.start_id] * start + ids + [self.end_id] * end

    def decode(self, ids: Iterable[int] | Tensor) -> str:
        """Characters of ``ids`` up to the first ``<end>``; ``<pad>`` and ``<start>`` are skipped."""
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        chars = []
        for i in ids:
            if i == self.end_id:
                break
            if i not in (self.pad_id, self.start_id):
                chars.append(self.itos[i])
        return "".join(chars)


def pad_sequences(rows: Sequence[Sequence[int]], pad_id: int = 0) -> Tensor:
    """Right-pad lists of ids to the longest one: ``[[1, 2], [3]]`` → ``tensor([[1, 2], [3, 0]])``."""
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, T)
    for b, row in enumerate(rows):
        out[b, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def make_batch(pairs: Sequence[Pair], src_tokenizer: CharTokenizer, tgt_tokenizer: CharTokenizer,
               device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """``(src (B, S), tgt (B, T))`` LongTensors, right-padded with ``<pad>`` (id 0).

    ``tgt`` holds the target characters only, with no ``<start>`` or
    ``<end>``: teacher forcing adds them (see :mod:`attention_course.training`).
    """
    src = pad_sequences([src_tokenizer.encode(s) for s, _ in pairs], src_tokenizer.pad_id)
    tgt = pad_sequences([tgt_tokenizer.encode(t) for _, t in pairs], tgt_tokenizer.pad_id)
    return src.to(device), tgt.to(device)


@dataclass
class Seq2SeqTask:
    """A task: three disjoint splits of ``(source, target)`` strings and a tokenizer per side."""

    name: str
    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    src_tokenizer: CharTokenizer
    tgt_tokenizer: CharTokenizer

    def split(self, name: str) -> list[Pair]:
        """``"train"``, ``"valid"`` or ``"test"``."""
        if name not in ("train", "valid", "test"):
            raise ValueError(f"no split {name!r}: choose 'train', 'valid' or 'test'")
        return getattr(self, name)

    def batch(self, pairs: Sequence[Pair], device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
        """:func:`make_batch` with this task's tokenizers."""
        return make_batch(pairs, self.src_tokenizer, self.tgt_tokenizer, device)

    @property
    def max_src_len(self) -> int:
        return max(len(s) for split in (self.train, self.valid, self.test) for s, _ in split)

    @property
    def max_tgt_len(self) -> int:
        return max(len(t) for split in (self.train, self.valid, self.test) for _, t in split)

    def __repr__(self) -> str:
        return (f"Seq2SeqTask({self.name!r}: {len(self.train)} train, {len(self.valid)} valid, "
                f"{len(self.test)} test; vocab {len(self.src_tokenizer)} -> {len(self.tgt_tokenizer)})")


def _split(items: list, n_valid: int, n_test: int, n_train: int | None) -> tuple[list, list, list]:
    """Cut an already shuffled list of distinct items into (train, valid, test)."""
    if n_valid + n_test >= len(items):
        raise ValueError(f"{len(items)} items cannot give {n_valid} validation and {n_test} test items and a train set")
    test, valid, rest = items[:n_test], items[n_test:n_test + n_valid], items[n_test + n_valid:]
    return (rest if n_train is None else rest[:n_train]), valid, test


def _string_task(name: str, transform: Callable[[str], str], n_train: int, n_valid: int, n_test: int,
                 alphabet: str, min_len: int, max_len: int, seed: int) -> Seq2SeqTask:
    rng = random.Random(seed)
    total = n_train + n_valid + n_test
    strings: dict[str, None] = {}  # insertion-ordered set: distinct strings, so the splits are disjoint
    while len(strings) < total:
        length = rng.randint(min_len, max_len)
        strings["".join(rng.choice(alphabet) for _ in range(length))] = None
    train, valid, test = _split(list(strings), n_valid, n_test, n_train)
    tok = CharTokenizer(alphabet)
    pairs = [[(s, transform(s)) for s in split] for split in (train, valid, test)]
    return Seq2SeqTask(name, *pairs, src_tokenizer=tok, tgt_tokenizer=tok)


def copy_task(n_train: int = 20_000, n_valid: int = 500, n_test: int = 1000, alphabet: str = "abcdefghij",
              min_len: int = 3, max_len: int = 10, seed: int = 0) -> Seq2SeqTask:
    """Random strings that must be copied: ``"faced"`` → ``"faced"``. Splits are disjoint by string."""
    return _string_task("copy", lambda s: s, n_train, n_valid, n_test, alphabet, min_len, max_len, seed)


def reverse_task(n_train: int = 20_000, n_valid: int = 500, n_test: int = 1000, alphabet: str = "abcdefghij",
                 min_len: int = 3, max_len: int = 10, seed: int = 0) -> Seq2SeqTask:
    """Random strings that must be reversed: ``"faced"`` → ``"decaf"``. Splits are disjoint by string."""
    return _string_task("reverse", lambda s: s[::-1], n_train, n_valid, n_test, alphabet, min_len, max_len, seed)


# ---------------------------------------------------------------------------------------------------------------
# Dates
# ---------------------------------------------------------------------------------------------------------------

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ONES = ("", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
         "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth",
         "nineteenth")


def ordinal_suffix(n: int) -> str:
    """``1`` → ``"1st"``, ``2`` → ``"2nd"``, ``3`` → ``"3rd"``, ``11`` → ``"11th"``, ``23`` → ``"23rd"``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def ordinal_word(n: int) -> str:
    """Days of the month in words: ``3`` → ``"third"``, ``20`` → ``"twentieth"``, ``31`` → ``"thirty-first"``."""
    if not 1 <= n <= 31:
        raise ValueError(f"a day of the month is 1 to 31, got {n}")
    if n < 20:
        return _ONES[n]
    tens = "twent" if n < 30 else "thirt"
    return f"{tens}ieth" if n % 10 == 0 else f"{tens}y-{_ONES[n % 10]}"


#: The ways a date is written, each a function of a ``datetime.date``. Numbers with slashes or dots are always
#: day first (as in most of the world), and a two-digit year ``yy`` means 19yy for 50-99 and 20yy for 00-49,
#: which is why :func:`dates_task` keeps to the years 1950-2049: every source has exactly one right answer.
DATE_FORMATS: dict[str, Callable[[dt.date], str]] = {
    "3 March 2021": lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}",
    "March 3rd, 2021": lambda d: f"{MONTHS[d.month - 1]} {ordinal_suffix(d.day)}, {d.year}",
    "03/03/21": lambda d: f"{d.day:02d}/{d.month:02d}/{d.year % 100:02d}",
    "Wed 3 Mar 2021": lambda d: f"{WEEKDAYS[d.weekday()][:3]} {d.day} {MONTHS[d.month - 1][:3]} {d.year}",
    "2021-3-3": lambda d: f"{d.year}-{d.month}-{d.day}",
    "the third of March 2021": lambda d: f"the {ordinal_word(d.day)} of {MONTHS[d.month - 1]} {d.year}",
    "3/3/2021": lambda d: f"{d.day}/{d.month}/{d.year}",
    "03.03.2021": lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",
    "Mar 3, 2021": lambda d: f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year}",
    "Wednesday, March 3, 2021": lambda d: f"{WEEKDAYS[d.weekday()]}, {MONTHS[d.month - 1]} {d.day}, {d.year}",
    "3rd Mar 2021": lambda d: f"{ordinal_suffix(d.day)} {MONTHS[d.month - 1][:3]} {d.year}",
    "2021/03/03": lambda d: f"{d.year}/{d.month:02d}/{d.day:02d}",
    "MARCH 3 2021": lambda d: f"{MONTHS[d.month - 1].upper()} {d.day} {d.year}",
    "3-Mar-21": lambda d: f"{d.day}-{MONTHS[d.month - 1][:3]}-{d.year % 100:02d}",
    "20210303": lambda d: f"{d.year}{d.month:02d}{d.day:02d}",
    "march 3rd 2021": lambda d: f"{MONTHS[d.month - 1].lower()} {ordinal_suffix(d.day)} {d.year}",
    "03 Mar '21": lambda d: f"{d.day:02d} {MONTHS[d.month - 1][:3]} '{d.year % 100:02d}",
}


def iso_date(d: dt.date) -> str:
    """The target: ``YYYY-MM-DD``."""
    return d.isoformat()


def _date_chars() -> str:
    probe = [dt.date(2000, m, day) for m in range(1, 13) for day in (1, 2, 3, 20, 21, 22, 23, 28)]
    probe += [dt.date(2000, 1, day) for day in range(1, 32)] + [dt.date(1999, 9, 9)]
    return "".join(sorted({c for d in probe for fmt in DATE_FORMATS.values() for c in fmt(d)}))


def dates_task(n_valid: int = 1000, n_test: int = 2000, n_train: int | None = None,
               first: dt.date = dt.date(1950, 1, 1), last: dt.date = dt.date(2049, 12, 31),
               formats: Sequence[str] | None = None, seed: int = 0) -> Seq2SeqTask:
    """Dates in human formats → ISO dates: ``"the third of March 2021"`` → ``"2021-03-03"``.

    Every day from ``first`` to ``last`` (36,525 days by default) is shuffled
    with ``seed`` and dealt to the test, validation and training splits, so no
    date of the test split was ever seen in training, in any format. Each
    date is written once, in a format drawn at random (seeded) from
    ``formats`` (default: all of :data:`DATE_FORMATS`). ``n_train=None``
    keeps every remaining date for training.
    """
    names = list(DATE_FORMATS) if formats is None else list(formats)
    unknown = [n for n in names if n not in DATE_FORMATS]
    if unknown:
        raise ValueError(f"unknown date formats {unknown}; choose from {list(DATE_FORMATS)}")
    rng = random.Random(seed)
    days = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    rng.shuffle(days)
    splits = _split(days, n_valid, n_test, n_train)
    pairs = [[(DATE_FORMATS[rng.choice(names)](d), iso_date(d)) for d in split] for split in splits]
    return Seq2SeqTask("dates", *pairs, src_tokenizer=CharTokenizer(_date_chars()),
                       tgt_tokenizer=CharTokenizer("0123456789-"))
