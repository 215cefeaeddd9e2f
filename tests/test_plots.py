"""The helper package's attention heatmap: one colour means one weight in every figure of the course."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_course.plots import plot_attention  # noqa: E402


def _norm(ax) -> tuple[float, float]:
    image = ax.get_images()[0]
    return image.norm.vmin, image.norm.vmax


def test_weights_share_one_fixed_scale_whatever_their_range() -> None:
    for weights in (torch.tensor([[0.5, 0.5], [0.4, 0.6]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]])):
        ax = plot_attention(weights)
        assert _norm(ax) == (0.0, 1.0)
        plt.close(ax.figure)


def test_scores_need_a_free_scale_and_get_one() -> None:
    scores = torch.tensor([[3.0, -2.0], [float("-inf"), 5.0]])
    with pytest.raises(ValueError, match="fixed colour scale"):
        plot_attention(scores)
    ax = plot_attention(scores, vmin=None, vmax=None)
    assert _norm(ax) == (-2.0, 5.0)
    plt.close(ax.figure)


def test_labels_read_on_their_cell() -> None:
    ax = plot_attention(torch.tensor([[0.0, 1.0]]), cmap="gray")  # black cell, then white cell
    assert [t.get_color() for t in ax.texts] == ["white", "black"]
    plt.close(ax.figure)


def test_a_grid_of_heads_shares_the_fixed_scale_and_one_colour_bar() -> None:
    from attention_course.plots import plot_head_grid

    maps = torch.rand(2, 3, 5, 5).softmax(dim=-1)
    with pytest.raises(ValueError, match="fixed colour scale"):
        plot_head_grid(maps + 1.0)
    fig = plot_head_grid(maps, tokens=list("abcde"), titles=[["h0", "h1", "h2"]] * 2, row_labels=["L0", "L1"])
    images = [ax.get_images()[0] for ax in fig.axes if ax.get_images()]
    assert len(images) == 6 and {(i.norm.vmin, i.norm.vmax) for i in images} == {(0.0, 1.0)}
    assert len(fig.axes) == 7, "one colour bar for the grid"
    with pytest.raises(ValueError, match="rows, cols"):
        plot_head_grid(maps[0])
    plt.close(fig)
