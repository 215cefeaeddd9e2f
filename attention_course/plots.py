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


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
) -> Axes:
    """Heatmap of a ``(T_q, T_k)`` weight (or score) matrix: a row per query, a column per key.

    ``annotate`` writes each value in its cell (default: when the matrix is at
    most 10×10). ``-inf`` entries are drawn blank and labelled ``-inf``.
    """
    a = _as_2d(weights, "weights")
    t_q, t_k = a.shape
    for labels, n, name in ((queries, t_q, "queries"), (keys, t_k, "keys")):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{len(labels)} {name} labels for an axis of length {n}")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.55 * t_k, 0.8 + 0.5 * t_q))
    shown = np.ma.masked_invalid(np.where(np.isneginf(a), np.nan, a))
    image = ax.imshow(shown, cmap=cmap, aspect="auto")
    ax.set_xticks(range(t_k), list(keys) if keys is not None else range(t_k), rotation=45, ha="right")
    ax.set_yticks(range(t_q), list(queries) if queries is not None else range(t_q))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate if annotate is not None else max(t_q, t_k) <= 10:
        finite = a[np.isfinite(a)]
        middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for i in range(t_q):
            for j in range(t_k):
                text = "-inf" if np.isneginf(a[i, j]) else f"{a[i, j]:.2f}"
                colour = "white" if not np.isfinite(a[i, j]) or a[i, j] < middle else "black"
                ax.text(j, i, text, ha="center", va="center", fontsize=8, color=colour)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


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
