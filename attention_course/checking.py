"""Checks for the book's narrative cells: each prints one short line for the reader and fails loudly.

A chapter says "our attention matches PyTorch's"; the cell below it shows the comparison. Printing
``torch.allclose(...)`` shows ``True`` or ``False`` but stops nothing, so a chapter whose claim had become
false would still build. These helpers print the same fact and raise :class:`AssertionError`, naming the
label and the size of the difference, when it does not hold, which fails the book build and nbval.

- :func:`check_close` — two tensors agree within a tolerance (``torch.allclose``'s rule);
- :func:`check_differ` — two tensors do *not* agree (a change that must show);
- :func:`check_equal` — two tensors are identical, entry for entry;
- :func:`check` — a yes/no fact, expected ``True`` (or ``False`` where the text says so).

Example::

    >>> check_close("ours vs F.scaled_dot_product_attention", out, out_torch, atol=1e-6)
    ours vs F.scaled_dot_product_attention: matches (largest difference 4.8e-07)
"""

from __future__ import annotations

import torch

__all__ = ["check", "check_close", "check_differ", "check_equal"]


def check(label: str, condition: bool | torch.Tensor, expected: bool = True) -> None:
    """Print ``label: True`` (or ``False``) and raise AssertionError unless ``condition`` is ``expected``.

    ``condition`` is a Python bool or a one-element boolean tensor.
    """
    _check_label(label)
    if not isinstance(expected, bool):
        raise TypeError(f"{label}: expected must be True or False, got {expected!r}")
    value = _as_bool(label, condition)
    if value is not expected:
        raise AssertionError(f"{label}: got {value}, but the text relies on {expected}")
    print(f"{label}: {value}")


def check_close(label: str, actual: torch.Tensor, expected: torch.Tensor, *,
                atol: float = 1e-8, rtol: float = 1e-5) -> None:
    """Print ``label: matches (largest difference ...)``; raise AssertionError where the two disagree.

    Same rule as ``torch.allclose``: ``|actual - expected| <= atol + rtol * |expected|`` for every entry,
    with the same defaults, but the shapes must be equal (no broadcasting) and so must the dtypes.
    """
    actual, expected = _pair(label, actual, expected)
    largest = _largest_difference(actual, expected)
    close = torch.isclose(actual, expected, atol=atol, rtol=rtol)
    if not bool(close.all()):
        where = _first_index(~close)
        raise AssertionError(
            f"{label}: does not match; largest difference {largest:.3g}, first entry out of tolerance "
            f"at index {where}: {actual[where].item():.6g} against {expected[where].item():.6g}, "
            f"with atol={atol:g}, rtol={rtol:g}"
        )
    print(f"{label}: matches (largest difference {largest:.2g})")


def check_differ(label: str, actual: torch.Tensor, other: torch.Tensor, *,
                 atol: float = 1e-8, rtol: float = 1e-5) -> None:
    """Print ``label: differs (largest difference ...)``; raise AssertionError where the two agree.

    The opposite of :func:`check_close`, with the same tolerances: at least one entry must lie outside
    ``atol + rtol * |other|``. With ``atol=0, rtol=0`` any difference at all is enough.
    """
    actual, other = _pair(label, actual, other)
    largest = _largest_difference(actual, other)
    if bool(torch.isclose(actual, other, atol=atol, rtol=rtol).all()):
        raise AssertionError(
            f"{label}: expected a difference, but every entry agrees; largest difference {largest:.3g}, "
            f"with atol={atol:g}, rtol={rtol:g}"
        )
    print(f"{label}: differs (largest difference {largest:.2g})")


def check_equal(label: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Print ``label: identical``; raise AssertionError unless every entry is exactly equal (shape and dtype too)."""
    actual, expected = _pair(label, actual, expected)
    if not torch.equal(actual, expected):
        differing = actual != expected
        where = _first_index(differing)
        raise AssertionError(
            f"{label}: not identical; {int(differing.sum())} of {actual.numel()} entries differ, the first at "
            f"index {where}: {actual[where].item()!r} against {expected[where].item()!r}"
        )
    print(f"{label}: identical")


def _check_label(label: object) -> None:
    if not isinstance(label, str) or not label.strip():
        raise TypeError(f"a check needs a label that says what it checks, got {label!r}")


def _as_bool(label: str, condition: object) -> bool:
    if isinstance(condition, bool):
        return condition
    if isinstance(condition, torch.Tensor):
        if condition.dtype != torch.bool or condition.numel() != 1:
            raise TypeError(f"{label}: the condition must be a single boolean, got a {condition.dtype} tensor "
                            f"of shape {tuple(condition.shape)}; reduce it with .all() or .any()")
        return bool(condition.item())
    raise TypeError(f"{label}: the condition must be a bool or a one-element boolean tensor, "
                    f"got {type(condition).__name__}")


def _pair(label: str, a: object, b: object) -> tuple[torch.Tensor, torch.Tensor]:
    _check_label(label)
    for name, value in (("first", a), ("second", b)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{label}: the {name} value must be a tensor, got {type(value).__name__}")
    if a.shape != b.shape:
        raise ValueError(f"{label}: the shapes differ, {tuple(a.shape)} against {tuple(b.shape)}; "
                         f"compare tensors of one shape")
    if a.dtype != b.dtype:
        raise TypeError(f"{label}: the dtypes differ, {a.dtype} against {b.dtype}; convert one of them first")
    return a.detach(), b.detach()


def _largest_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.numel() == 0:
        return 0.0
    wide = torch.complex128 if a.is_complex() else torch.float64
    return (a.to(wide) - b.to(wide)).abs().max().item()


def _first_index(mask: torch.Tensor) -> tuple[int, ...]:
    """The index of the first True entry of ``mask`` (``()`` for a 0-d tensor), in row-major order."""
    return tuple(int(i) for i in mask.nonzero()[0])
