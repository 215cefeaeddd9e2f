"""Checks for the visible tests: small, explicit, and with messages that teach.

Every helper raises :class:`CheckFailed` (an ``AssertionError``) whose message
names what was expected, what was found and, where it can, the likely mistake.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode


class CheckFailed(AssertionError):
    """A check failed; the message explains why."""


def fail(message: str) -> None:
    raise CheckFailed(message)


def _shape(x: object) -> str:
    return str(tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__


def assert_tensor(x: object, what: str) -> None:
    """``x`` must be a ``torch.Tensor`` (not a NumPy array, list or ``None``)."""
    if not isinstance(x, Tensor):
        hint = " — did you forget a `return`?" if x is None else ""
        fail(f"{what} should be a torch.Tensor, got {type(x).__name__}{hint}")


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


def assert_close(
    actual: object,
    expected: Tensor,
    what: str,
    hint: str = "",
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """``actual`` must match ``expected`` in shape and value (NaN never matches)."""
    assert_shape(actual, expected.shape, what)
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    if torch.isnan(a).any() and not torch.isnan(e).any():
        fail(f"{what} contains NaN where a number was expected{' — ' + hint if hint else ''}")
    if not torch.allclose(a, e, atol=atol, rtol=rtol, equal_nan=True):
        diff = (a - e).abs().nan_to_num(float("inf"))
        where = tuple(int(i) for i in (diff == diff.max()).nonzero()[0])
        fail(
            f"{what} is wrong: at index {where} got {a[where].item():.6g}, expected {e[where].item():.6g} "
            f"(largest difference {diff.max().item():.3g}){' — ' + hint if hint else ''}"
        )


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
                fail(f"{what} sum to 1 along dim {d} instead of dim {dim} — did you normalise over the wrong axis?")
        low, high = sums.min().item(), sums.max().item()
        fail(f"{what} should sum to 1 along dim {dim}; the sums range from {low:.4g} to {high:.4g}")


def expect_value_error(fn: Callable[[], object], what: str, must_mention: Sequence[str] = ()) -> None:
    """Call ``fn``; it must raise ``ValueError`` whose message mentions each of ``must_mention``.

    Any other exception (``NotImplementedError`` from an unfinished stub, say)
    propagates unchanged, so the test fails with it. Returns nothing, so a test
    cell that ends with it shows no output.
    """
    try:
        fn()
    except ValueError as err:
        missing = [word for word in must_mention if word.lower() not in str(err).lower()]
        if missing:
            fail(f"{what}: the ValueError should mention {missing}; its message was {str(err)!r}")
        return
    fail(f"{what} should raise ValueError with a clear message, but nothing was raised")


class _Refuse(TorchFunctionMode):
    def __init__(self, names: Sequence[str], reason: str) -> None:
        super().__init__()
        self.names, self.reason = set(names), reason

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = getattr(func, "__name__", "")
        if name in self.names:
            fail(f"your code calls torch's `{name}` — {self.reason}")
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
                f"(`x - m`, not `x -= m`; `masked_fill`, not `masked_fill_`)"
            )
