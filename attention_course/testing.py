"""Checks for the visible tests: small, explicit, and with messages that teach.

Every helper raises :class:`CheckFailed` (an ``AssertionError``) whose message
names what was expected, what was found and, where it can, the likely mistake.

A message that names its mistake ends with the mistake's short name in
parentheses, e.g. ``"... (softmax over the wrong axis)"``; :func:`mistake_name`
reads it back. The hidden checks name their mistakes the same way, with the
same names, so a learner meets one name for one mistake while working and in
the graded feedback, and the class report counts them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode


class CheckFailed(AssertionError):
    """A check failed; the message explains why.

    ``name`` is the short name of the likely mistake, or None; ``str(failure)`` is the message with `` (name)``
    at its end (:func:`named`), as the learner reads it.
    """

    def __init__(self, message: str, name: str | None = None) -> None:
        AssertionError.__init__(self, named(message, name))
        self.message = message
        self.name = name or None

    def __reduce__(self) -> tuple:
        return self.__class__, (self.message, self.name)


#: The names of mistakes that any exercise can make, shared by the visible and the hidden checks.
MODIFIED_IN_PLACE = "input modified in place"
DTYPE_CHANGED = "dtype not kept"
DEVICE_CHANGED = "device not kept"
GRAPH_CUT = "gradients cut"
LIBRARY_CALL = "library function called"
NO_VALUE_ERROR = "no ValueError for bad arguments"
NO_RETURN = "nothing returned"

_NAME = re.compile(r"\(([A-Za-z][^()]{2,78}[^()\s])\)\s*$")


def mistake_name(message: str) -> str | None:
    """The short name a failing check gives its mistake: the parenthesised words that end the message.

    >>> mistake_name("weights sum to 1 along dim 0 (softmax over the wrong axis)")
    'softmax over the wrong axis'

    A name starts with a letter, so a shape or an index at the end, such as ``(2, 5, 6)``, is not one.
    """
    found = _NAME.search(message or "")
    return found.group(1) if found else None


def named(message: str, name: str | None) -> str:
    """``message`` with the mistake's name added at its end, in the form :func:`mistake_name` reads."""
    return f"{message} ({name})" if name else message


def fail(message: str, name: str | None = None) -> None:
    """Fail the check with ``message``, naming the mistake ``name`` when the check knows it.

    Without ``name``, a name written into the message itself is read back from its text with
    :func:`mistake_name`: the suspects a notebook passes to :func:`assert_close`, :func:`assert_answer` and
    :func:`expect_runs` are messages that end with ``"(name)"``, and their text is the only place that holds it.
    """
    if name is None:
        found = mistake_name(message)
        if found is not None and message.endswith(f" ({found})"):
            message, name = message[: -len(found) - 3], found
    raise CheckFailed(message, name)


@dataclass(frozen=True)
class KnownMistake:
    """One likely mistake, declared once for the visible check and the hidden judge alike.

    ``name`` is its short name, ``message`` what the learner reads: what went wrong and what to do (a text, or a
    function of the case that gives it). ``wrong(right, *case)`` is the value the mistake gives on a case, written
    with PyTorch's own functions; ``right(*args)`` computes the correct answer, for mistakes that are the right
    answer turned around, shifted or given other arguments. The visible check passes its own computation as
    ``right``, the hidden judge the reference, so neither the reference nor the judges ship with the notebook.
    ``when(*case)`` says on which cases the mistake can be told from the right answer (default: all of them).
    A mistake that gives no value to compare (a table kept in the wrong place, say) has no ``wrong``; checks
    raise it with :meth:`fail` (visible) or the judges' ``mistake`` (hidden).
    """

    name: str
    message: str | Callable[..., str]
    wrong: Callable[..., object] | None = None
    when: Callable[..., bool] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or mistake_name(named("x", self.name)) != self.name:
            raise ValueError(f"the known mistake {self.name!r} needs a name of a few words that starts with a letter "
                             f"and holds no parentheses")

    def text(self, *case: object, **fields: object) -> str:
        """The message for ``case`` (a message that is a function), or filled in with ``fields`` (``{name}``)."""
        if callable(self.message):
            return self.message(*case, **fields)
        return self.message.format(**fields) if fields else self.message

    def applies(self, *case: object) -> bool:
        return self.wrong is not None and (self.when is None or bool(self.when(*case)))

    def gives(self, right: Callable[..., object], *case: object) -> object:
        """What this mistake returns on ``case``."""
        if self.wrong is None:
            raise TypeError(f"the mistake {self.name!r} declares no value")
        return self.wrong(right, *case)

    def said(self, *case: object, **fields: object) -> str:
        """The message, then `` (name)``: a text that names the mistake, for :func:`expect_runs`' crashes."""
        return named(self.text(*case, **fields), self.name)

    def fail(self, what: str = "", *, looks_like: Iterable[tuple[object, Mapping[str, object]]] = (),
             atol: float = 1e-4, rtol: float = 1e-4, **fields: object) -> NoReturn:
        """Fail the check with this mistake: ``what`` (the call), then the message filled in with ``fields``.

        A property that fails (codes not unique, say) is often the symptom of a mistake that has a name of its
        own. ``looks_like`` holds pairs (an output of the learner's, :meth:`Mistakes.suspects` on the same
        inputs), tried in order: when an output matches a suspect, the message goes on with what it looks like
        and the check names that mistake, as the hidden judge does.
        """
        text = self.text(**fields)
        message = f"{what}: {text}" if what else text
        for actual, suspects in looks_like:
            for suspect, candidate in suspects.items():
                if isinstance(actual, Tensor) and _matches(actual, candidate, atol, rtol):
                    fail(f"{named(message, self.name)} It looks like this: {suspect}")  # fail reads its name
        fail(message, self.name)


class OneOf(list):
    """What one mistake gives in any of several ways (the token vectors concatenated before or after the codes,
    say): a suspect matches when one of them does."""


def _gives_or_none(mistake: KnownMistake, right: Callable[..., object], case: tuple) -> object:
    try:
        return mistake.gives(right, *case)
    except Exception:  # this way of making the mistake cannot run on these inputs
        return None


class Mistakes(tuple):
    """The known mistakes of one computation, in the order they are tried; every case of theirs has one form,
    which the module that declares them states (e.g. ``(x, positions, base)``)."""

    def __new__(cls, items: Iterable[KnownMistake]) -> Mistakes:
        items = tuple(items)
        if not all(isinstance(item, KnownMistake) for item in items):
            raise TypeError("Mistakes holds KnownMistake declarations only")
        return super().__new__(cls, items)

    def suspects(self, right: Callable[..., object], *case: object) -> dict[str, Callable[[], object]]:
        """For :func:`assert_close` and :func:`assert_answer`: ``"message (name)"`` -> what each mistake that
        applies to ``case`` gives there, computed only when a wrong answer is being named."""
        found: dict[str, list[KnownMistake]] = {}
        for m in self:
            if m.applies(*case):
                found.setdefault(named(m.text(*case), m.name), []).append(m)
        return {text: (lambda ms=ms: OneOf(_gives_or_none(m, right, case) for m in ms) if len(ms) > 1
                       else ms[0].gives(right, *case)) for text, ms in found.items()}

    def named(self, name: str) -> KnownMistake:
        """The declaration called ``name``."""
        for m in self:
            if m.name == name:
                return m
        raise KeyError(f"no known mistake named {name!r}")


def _shape(x: object) -> str:
    return str(tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__


def assert_tensor(x: object, what: str) -> None:
    """``x`` must be a ``torch.Tensor`` (not a NumPy array, list or ``None``)."""
    if not isinstance(x, Tensor):
        if x is None:
            fail(f"{what} should be a torch.Tensor, got None — did you forget a `return`?", NO_RETURN)
        fail(f"{what} should be a torch.Tensor, got {type(x).__name__}")


def assert_shape(x: object, expected: Sequence[int], what: str) -> None:
    """``x`` must be a tensor of exactly ``expected`` shape."""
    assert_tensor(x, what)
    if tuple(x.shape) != tuple(expected):
        fail(f"{what} has shape {_shape(x)}, expected {tuple(expected)}")


def assert_finite(x: Tensor, what: str, hint: str = "") -> None:
    """No NaN or inf anywhere in ``x``."""
    assert_tensor(x, what)
    bad = ~torch.isfinite(x)
    if bad.any():
        kind = "NaN" if torch.isnan(x).any() else "inf"
        first = tuple(int(i) for i in bad.nonzero()[0])
        fail(f"{what} contains {kind} (first at index {first}){' — ' + hint if hint else ''}")


def _matches(actual: Tensor, candidate: object, atol: float, rtol: float) -> bool:
    if callable(candidate):
        try:
            candidate = candidate()
        except Exception:  # this suspect cannot run on these inputs, so it is not what the learner did
            return False
    if isinstance(candidate, OneOf):
        return any(_matches(actual, one, atol, rtol) for one in candidate)
    if not isinstance(candidate, Tensor) or candidate.shape != actual.shape:
        return False
    return torch.allclose(actual.detach().to(torch.float64), candidate.detach().to(torch.float64),
                          atol=atol, rtol=rtol, equal_nan=True)


def assert_close(
    actual: object,
    expected: Tensor,
    what: str,
    hint: str = "",
    atol: float = 1e-5,
    rtol: float = 1e-4,
    suspects: Mapping[str, object] | None = None,
) -> None:
    """``actual`` must match ``expected`` in shape and value (NaN never matches).

    ``suspects`` maps a message that ends with a mistake's name, ``"... (name)"``, to what that mistake
    would give on the same inputs (a tensor, or a function that computes it). When ``actual`` is wrong and
    matches one, the check fails with that message, so the learner reads the likely mistake, not only a
    number. Suspects are tried in order, before the shape is checked (a wrong shape can be a named mistake).
    """
    assert_tensor(actual, what)
    if not _matches(actual, expected, atol, rtol) or (torch.isnan(actual).any() and not torch.isnan(expected).any()):
        for message, candidate in (suspects or {}).items():
            if _matches(actual, candidate, atol, rtol):
                fail(f"{what}: {message}")
    assert_shape(actual, expected.shape, what)
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    if torch.isnan(a).any() and not torch.isnan(e).any():
        fail(f"{what} contains NaN where a number was expected{' — ' + hint if hint else ''}")
    if not torch.allclose(a, e, atol=atol, rtol=rtol, equal_nan=True):
        diff = (a - e).abs().nan_to_num(float("inf"))
        where = tuple(int(i) for i in (diff == diff.max()).nonzero()[0])
        fail(
            f"{what} is wrong: at index {where} got {a[where].item():.6g}, expected {e[where].item():.6g}, "
            f"the largest difference{' — ' + hint if hint else ''}"
        )


#: The most numbers a tensor or array given as a concept check's answer may hold.
ANSWER_ELEMENTS = 10_000


def answer_value(x: object) -> object:
    """A concept check's answer as plain data, so that equal answers compare equal whatever their type.

    Lists, ranges and shapes become tuples; tensors and NumPy values become numbers or tuples (through
    ``tolist``); sets become sorted tuples. Numbers, strings, booleans and ``None`` stay as they are.

    Raises:
        ValueError: for a tensor or array of more than :data:`ANSWER_ELEMENTS` numbers: an answer is a number,
            a shape or a short list, and turning millions of numbers into plain data would take minutes.
    """
    if x is None or isinstance(x, (str, bool, int, float)):
        return x
    if isinstance(x, (set, frozenset)):
        try:
            return tuple(sorted(answer_value(item) for item in x))
        except TypeError:  # items that do not sort: keep the set's order, as a tuple
            return tuple(answer_value(item) for item in x)
    if isinstance(x, (tuple, list, range)):
        return tuple(answer_value(item) for item in x)
    if hasattr(x, "tolist") and callable(x.tolist):  # torch and NumPy scalars and arrays
        elements = x.numel() if callable(getattr(x, "numel", None)) else getattr(x, "size", None)
        if isinstance(elements, int) and elements > ANSWER_ELEMENTS:
            raise ValueError(f"the answer is a {type(x).__name__} of {elements:,} numbers: a concept check's answer "
                             f"is a number, a shape or a short list")
        return answer_value(x.tolist())
    return x


def assert_answer(actual: object, expected: object, what: str, suspects: Mapping[str, object] | None = None,
                  hint: str = "") -> None:
    """A concept check: ``actual`` must equal ``expected`` (compared as :func:`answer_value`).

    ``suspects`` maps a message that ends with a misconception's name, ``"... (name)"``, to the answer that
    misconception gives (or a function that computes it, as :meth:`Mistakes.suspects` gives); a wrong answer equal
    to one fails with that message.
    """
    if actual is None:
        fail(f"{what} is None — did you forget to `return` the answer?", NO_RETURN)
    got, want = answer_value(actual), answer_value(expected)
    if got == want:
        return
    for message, candidate in (suspects or {}).items():
        if callable(candidate):
            candidate = candidate()
        if any(answer_value(one) == got for one in (candidate if isinstance(candidate, OneOf) else [candidate])):
            fail(f"{what} is {got!r}: {message}")
    fail(f"{what} is {got!r}, expected {want!r}{' — ' + hint if hint else ''}")


def assert_sums_to_one(weights: Tensor, dim: int = -1, what: str = "weights") -> None:
    """Every slice of ``weights`` along ``dim`` sums to 1, and all entries lie in [0, 1]."""
    assert_finite(weights, what, "a softmax should never produce NaN or inf")
    if (weights < 0).any() or (weights > 1 + 1e-6).any():
        fail(f"{what} must lie in [0, 1]; found values from {weights.min().item():.3g} to {weights.max().item():.3g}")
    sums = weights.to(torch.float64).sum(dim=dim)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
        other = [d for d in range(weights.dim()) if d != dim % weights.dim() and weights.shape[d] > 1]
        for d in other:
            s = weights.to(torch.float64).sum(dim=d)
            if torch.allclose(s, torch.ones_like(s), atol=1e-5):
                fail(f"{what} sum to 1 along dim {d} instead of dim {dim} — did you normalise over the wrong axis?",
                     "softmax over the wrong axis")
        low, high = sums.min().item(), sums.max().item()
        fail(f"{what} should sum to 1 along dim {dim}; the sums range from {low:.4g} to {high:.4g}")


def expect_value_error(fn: Callable[[], object], what: str, must_mention: Sequence[str] = ()) -> None:
    """Call ``fn``; it must raise ``ValueError`` whose message mentions each of ``must_mention``.

    ``NotImplementedError`` (an unfinished stub) propagates unchanged, so the test
    fails with it; any other exception (torch's own error from the bad shapes, say)
    means the arguments were not checked first. Returns nothing, so a test cell
    that ends with it shows no output.
    """
    try:
        fn()
    except ValueError as err:
        missing = [word for word in must_mention if word.lower() not in str(err).lower()]
        if missing:
            fail(f"{what}: the ValueError should mention {missing}; its message was {str(err)!r}")
        return
    except NotImplementedError:
        raise
    except Exception as err:
        fail(f"{what} raised {type(err).__name__}, not ValueError: {str(err)[:200]!r} — check the arguments first "
             f"and raise ValueError with a message that names the shapes or dtypes involved", NO_VALUE_ERROR)
    fail(f"{what} should raise ValueError with a clear message, but nothing was raised", NO_VALUE_ERROR)


def expect_runs(fn: Callable[[], object], what: str, crashes: Mapping[str, str] | None = None) -> object:
    """Return ``fn()``; a crash that ``crashes`` knows fails the check with the mistake's name.

    ``crashes`` maps a clue, words of the exception's ``"Type: message"`` (``"ValueError"``, ``"device"``), to
    an explanation that ends with the mistake's name, ``"... (name)"``. The exception's own text is quoted, so
    it is never read as a name. Other exceptions, and ``NotImplementedError`` (an unfinished stub), propagate
    unchanged.
    """
    try:
        return fn()
    except NotImplementedError:
        raise
    except Exception as err:
        text = f"{type(err).__name__}: {err}"
        for clue, explanation in (crashes or {}).items():
            if clue in text:
                fail(f"{what} raised {text[:200]!r} — {explanation}")
        raise


class _Refuse(TorchFunctionMode):
    def __init__(self, names: Sequence[str], reason: str) -> None:
        super().__init__()
        self.names, self.reason = set(names), reason

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = getattr(func, "__name__", "")
        if name in self.names:
            fail(f"your code calls torch's `{name}` — {self.reason}", LIBRARY_CALL)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def forbid(*names: str, reason: str = "the exercise asks you to write it yourself") -> Iterator[None]:
    """Within the block, calling a torch function of one of these names (e.g. ``"softmax"``) fails the check.

    The names are matched at torch's dispatch, so ``torch.softmax``,
    ``F.softmax``, ``x.softmax`` and ``from torch.nn.functional import softmax``
    are all caught.
    """
    with _Refuse(names, reason):
        yield


def assert_untouched(before: Sequence[Tensor], after: Sequence[Tensor], names: Sequence[str]) -> None:
    """Inputs must not be modified in place: compare them with copies taken beforehand."""
    for b, a, name in zip(before, after, names, strict=True):
        if not torch.equal(b, a):
            fail(
                f"your function modified its input `{name}` in place — use out-of-place operations "
                f"(`x - m`, not `x -= m`; `masked_fill`, not `masked_fill_`)", MODIFIED_IN_PLACE
            )
