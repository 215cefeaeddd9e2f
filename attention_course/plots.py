"""Pictures of attention: weights, scores and masks as labelled heatmaps."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes


def _as_2d(x: torch.Tensor | np.ndarray, what: str) -> np.ndarray:
    a = x.detach().cpu().to(torch.float64).numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=float)
    if a.ndim != 2:
        raise ValueError(f"{what} must be 2-D (T_q, T_k) to draw; got shape {a.shape} — index one batch/head first")
    return a


def _check_scale(a: np.ndarray, vmin: float | None, vmax: float | None) -> None:
    """Refuse values that a fixed colour scale ``[vmin, vmax]`` would clip."""
    finite = a[np.isfinite(a)]
    if vmin is not None and vmax is not None and not vmin < vmax:
        raise ValueError(f"the colour scale needs vmin < vmax, got vmin={vmin}, vmax={vmax}")
    tolerance = 1e-6  # float32 rounding: a softmax row can hold 1.0000001
    if finite.size and ((vmin is not None and finite.min() < vmin - tolerance)
                        or (vmax is not None and finite.max() > vmax + tolerance)):
        raise ValueError(f"values from {finite.min():.3g} to {finite.max():.3g} do not fit the fixed colour scale "
                         f"[{vmin}, {vmax}]; weights lie in [0, 1], and scores need vmin=None, vmax=None")


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
) -> Axes:
    """Heatmap of a ``(T_q, T_k)`` weight (or score) matrix: a row per query, a column per key.

    Weights are drawn on a fixed colour scale from ``vmin=0`` to ``vmax=1``, so that one colour means one
    weight in every figure of the course. To draw scores, which are not confined to [0, 1], pass
    ``vmin=None, vmax=None`` (the scale then spans the finite values); a value outside a fixed scale is an
    error, not a silently clipped colour. ``annotate`` writes each value in its cell (default: when the
    matrix is at most 10×10). ``-inf`` entries are drawn blank and labelled ``-inf``.
    """
    a = _as_2d(weights, "weights")
    t_q, t_k = a.shape
    for labels, n, name in ((queries, t_q, "queries"), (keys, t_k, "keys")):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{len(labels)} {name} labels for an axis of length {n}")
    _check_scale(a, vmin, vmax)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * t_k, 0.8 + 0.5 * t_q))
    shown = np.ma.masked_invalid(np.where(np.isneginf(a), np.nan, a))
    image = ax.imshow(shown, cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(t_k), list(keys) if keys is not None else range(t_k), rotation=45, ha="right")
    ax.set_yticks(range(t_q), list(queries) if queries is not None else range(t_q))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate if annotate is not None else max(t_q, t_k) <= 10:
        for i in range(t_q):
            for j in range(t_k):
                text = "-inf" if np.isneginf(a[i, j]) else f"{a[i, j]:.2f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=8, color=_ink_on(image, a[i, j]))
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def _ink_on(image, value: float) -> str:
    """Black or white, whichever reads better on the cell colour of ``value``; blank (``-inf``) cells show the
    white background, so their label is black."""
    if not np.isfinite(value):
        return "black"
    red, green, blue, _ = image.cmap(image.norm(value))
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"


def plot_mask(mask: torch.Tensor | np.ndarray, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Draw a boolean mask (``True`` = may attend, light) or an additive 0/``-inf`` mask."""
    a = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    if a.ndim != 2:
        raise ValueError(f"mask must be 2-D (T_q, T_k) to draw; got shape {a.shape}")
    allowed = a.astype(bool) if a.dtype == bool else np.isfinite(a)
    t_q, t_k = a.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.5 * t_k, 0.8 + 0.5 * t_q))
    ax.imshow(allowed, cmap="Greys_r", vmin=-0.3, vmax=1.0, aspect="auto")
    for i in range(t_q):
        for j in range(t_k):
            text = ("T" if a[i, j] else "F") if a.dtype == bool else ("0" if allowed[i, j] else "-inf")
            ax.text(j, i, text, ha="center", va="center", fontsize=9, color="black" if allowed[i, j] else "white")
    ax.set_xticks(range(t_k))
    ax.set_yticks(range(t_q))
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if title:
        ax.set_title(title)
    return ax


def plot_head_grid(
    maps: torch.Tensor | np.ndarray,
    tokens: Sequence[str] | None = None,
    titles: Sequence[Sequence[str]] | None = None,
    row_labels: Sequence[str] | None = None,
    cell: float = 2.4,
    cmap: str = "viridis",
) -> plt.Figure:
    """A grid of self-attention maps ``(rows, cols, T, T)`` (e.g. layers × heads), all on the fixed 0–1 colour
    scale of :func:`plot_attention`, with one colour bar for the whole grid.

    ``tokens`` label the queries (on the first column) and the keys (on the last row); ``titles[r][c]`` names each
    map; ``row_labels`` name the rows. Raises ValueError for maps that are not 4-D or do not fit the 0–1 scale.
    """
    a = maps.detach().cpu().to(torch.float64).numpy() if isinstance(maps, torch.Tensor) else np.asarray(maps, float)
    if a.ndim != 4:
        raise ValueError(f"maps must be (rows, cols, T_q, T_k), got shape {a.shape}")
    _check_scale(a, 0.0, 1.0)
    rows, cols, t_q, t_k = a.shape
    if tokens is not None and len(tokens) != t_k:
        raise ValueError(f"{len(tokens)} token labels for maps of {t_k} keys")
    fig, axes = plt.subplots(rows, cols, figsize=(cell * cols + 0.8, cell * rows), squeeze=False,
                             layout="constrained")
    size = 6 if t_k > 16 else 8
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            image = ax.imshow(a[r, c], cmap=cmap, aspect="auto", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(t_k) if r == rows - 1 and tokens is not None else [])
            ax.set_yticks(range(t_q) if c == 0 and tokens is not None else [])
            if tokens is not None and r == rows - 1:
                ax.set_xticklabels(tokens, fontsize=size, rotation=90)
            if tokens is not None and c == 0:
                ax.set_yticklabels(tokens[:t_q], fontsize=size)
            if titles is not None:
                ax.set_title(titles[r][c], fontsize=9)
            if row_labels is not None and c == 0:
                ax.set_ylabel(row_labels[r])
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label="attention weight")
    return fig
