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
from collections.abc import Callable, Iterator, Mapping, Sequence

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
    misconception gives; a wrong answer equal to one fails with that message.
    """
    if actual is None:
        fail(f"{what} is None — did you forget to `return` the answer?", NO_RETURN)
    got, want = answer_value(actual), answer_value(expected)
    if got == want:
        return
    for message, candidate in (suspects or {}).items():
        if answer_value(candidate) == got:
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
