"""The chapter 5 reference, `solutions.positional`, against explicit loops, the learners' rules for a good
positional encoding (a unique code per position, a consistent distance, deterministic, any length) and its
own contract."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from solutions.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    sinusoidal_encoding,
)

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def loop_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The formula, one entry at a time, in float64."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for p in range(max_len):
        for i in range(d_model // 2):
            angle = p / base ** (2 * i / d_model)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


def loop_rope(x: torch.Tensor, positions: list[float], base: float = 10000.0) -> torch.Tensor:
    """RoPE on a (T, d) float64 tensor, one pair at a time, counter-clockwise."""
    out = x.clone()
    t, d = x.shape
    for row in range(t):
        for i in range(d // 2):
            theta = positions[row] * base ** (-2 * i / d)
            a, b = x[row, 2 * i].item(), x[row, 2 * i + 1].item()
            out[row, 2 * i] = a * math.cos(theta) - b * math.sin(theta)
            out[row, 2 * i + 1] = a * math.sin(theta) + b * math.cos(theta)
    return out


def pair_rotation(angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, -s], [s, c]], dtype=torch.float64)


# ---------------------------------------------------------------- sinusoidal_encoding


@pytest.mark.parametrize(("max_len", "d_model", "base"), [(1, 2, 10000.0), (6, 4, 10000.0), (50, 16, 10000.0),
                                                           (20, 6, 10000.0), (12, 8, 100.0)])
def test_sinusoidal_encoding_matches_the_formula_entry_by_entry(max_len, d_model, base) -> None:
    pe = sinusoidal_encoding(max_len, d_model, base)
    assert pe.shape == (max_len, d_model) and pe.dtype == torch.float32
    torch.testing.assert_close(pe.double(), loop_table(max_len, d_model, base), atol=1e-6, rtol=0)


def test_sinusoidal_encoding_interleaves_sin_and_cos() -> None:
    """Even columns are sines, odd columns cosines: row 0 is [0, 1, 0, 1, ...], not [0, 0, ..., 1, 1]."""
    pe = sinusoidal_encoding(10, 8)
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * 4))
    torch.testing.assert_close(pe[:, 0], torch.arange(10.0).sin())  # pair 0 turns at 1 radian per position
    torch.testing.assert_close(pe[:, 1], torch.arange(10.0).cos())
    torch.testing.assert_close(pe[:, 2], (torch.arange(10.0) / 10.0).sin())  # 10000^(2/8) = 10


def test_sinusoidal_values_are_bounded_and_every_pair_lies_on_the_unit_circle() -> None:
    pe = sinusoidal_encoding(200, 32)
    assert pe.min() >= -1 and pe.max() <= 1
    radii = pe.view(200, 16, 2).pow(2).sum(-1)
    torch.testing.assert_close(radii, torch.ones(200, 16))
    torch.testing.assert_close(pe.pow(2).sum(-1), torch.full((200,), 16.0))  # every row has norm sqrt(d/2)


def test_every_position_gets_a_unique_code() -> None:
    pe = sinusoidal_encoding(500, 16)
    distances = torch.cdist(pe.double(), pe.double())
    distances.fill_diagonal_(float("inf"))
    assert distances.min() > 1e-3


def test_the_dot_product_of_two_codes_depends_only_on_their_distance() -> None:
    pe = sinusoidal_encoding(60, 16).double()
    for k in (0, 1, 3, 10, 25):
        dots = (pe[: 60 - k] * pe[k:]).sum(-1)  # PE[p] . PE[p + k] for every p
        torch.testing.assert_close(dots, dots[:1].expand_as(dots), atol=1e-5, rtol=0)
        frequencies = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
        torch.testing.assert_close(dots[0], torch.cos(k * frequencies).sum(), atol=1e-5, rtol=0)


def test_a_shift_by_k_rotates_every_pair_the_same_way_at_every_position() -> None:
    """PE[p + k] = R_k PE[p], pair by pair, with R_k the rotation that does not depend on p."""
    d_model, k = 8, 7
    pe = sinusoidal_encoding(40, d_model).double()
    for i in range(d_model // 2):
        omega = 10000.0 ** (-2 * i / d_model)
        pair = pe[:, 2 * i: 2 * i + 2]  # (40, 2): (sin, cos)
        # (sin, cos) at p + k = rotation by -k·omega of (sin, cos) at p, for the vector (sin, cos)
        rotated = pair[:-k] @ pair_rotation(-k * omega).T
        torch.testing.assert_close(rotated, pair[k:], atol=1e-6, rtol=0)


def test_sinusoidal_encoding_is_deterministic_and_extends_to_longer_sequences() -> None:
    """Computed, not drawn: every call gives the formula's table, and a longer table begins with the shorter."""
    expected = loop_table(300, 12)
    for max_len in (30, 30, 300):
        torch.testing.assert_close(sinusoidal_encoding(max_len, 12).double(), expected[:max_len], atol=1e-6, rtol=0)


@pytest.mark.parametrize(("max_len", "d_model", "named"), [(10, 7, "d_model=7"), (10, 1, "d_model=1"),
                                                             (0, 8, "max_len=0"), (5, 0, "d_model=0"),
                                                             (-3, 8, "max_len=-3")])
def test_sinusoidal_encoding_refuses_odd_or_non_positive_sizes(max_len, d_model, named) -> None:
    with pytest.raises(ValueError, match=named):
        sinusoidal_encoding(max_len, d_model)


# ---------------------------------------------------------------- SinusoidalPositionalEncoding


def test_the_module_adds_the_first_t_rows() -> None:
    module = SinusoidalPositionalEncoding(16, max_len=50)
    x = randn(3, 7, 16, seed=1)
    out = module(x)
    assert out.shape == x.shape  # added, not concatenated: the width stays d_model
    torch.testing.assert_close(out, x + loop_table(7, 16).float())
    torch.testing.assert_close(SinusoidalPositionalEncoding(8, 20, base=100.0)(torch.zeros(1, 5, 8))[0],
                               loop_table(5, 8, base=100.0).float())


def test_the_table_is_a_buffer_saved_in_the_state_dict_and_moved_by_to() -> None:
    module = SinusoidalPositionalEncoding(8, max_len=12)
    assert list(module.parameters()) == []  # nothing for an optimiser to train
    assert dict(module.named_buffers())["pe"].shape == (12, 8)
    assert set(module.state_dict()) == {"pe"}
    assert module.to(torch.float64).pe.dtype == torch.float64
    meta = SinusoidalPositionalEncoding(8, max_len=12).to("meta")
    assert meta.pe.device.type == "meta"
    out = meta(torch.zeros(2, 5, 8, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 5, 8)
    saved = SinusoidalPositionalEncoding(8, max_len=12).state_dict()
    restored = SinusoidalPositionalEncoding(8, max_len=12, base=100.0)  # another table until it loads the saved one
    assert not torch.allclose(restored.pe, saved["pe"])
    restored.load_state_dict(saved)
    torch.testing.assert_close(restored.pe.double(), loop_table(12, 8), atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_module_keeps_the_dtype_of_x(dtype) -> None:
    x = randn(2, 5, 8, seed=2).to(dtype)
    out = SinusoidalPositionalEncoding(8, max_len=10)(x)
    assert out.dtype == dtype


def test_the_module_leaves_x_untouched_and_passes_its_gradient_through() -> None:
    x = randn(2, 5, 8, seed=3, dtype=torch.float64).requires_grad_(True)
    before = x.detach().clone()
    module = SinusoidalPositionalEncoding(8, max_len=10)
    out = module(x)
    assert torch.equal(x.detach(), before)
    g = randn(2, 5, 8, seed=4, dtype=torch.float64)
    (out * g).sum().backward()
    torch.testing.assert_close(x.grad, g)
    assert torch.autograd.gradcheck(module, (x,))


def test_the_module_refuses_sequences_longer_than_its_table() -> None:
    module = SinusoidalPositionalEncoding(8, max_len=10)
    assert module(torch.zeros(2, 10, 8)).shape == (2, 10, 8)  # T == max_len still fits
    with pytest.raises(ValueError, match=r"T=12.*max_len=10"):
        module(torch.zeros(2, 12, 8))
    with pytest.raises(ValueError, match="d_model=7"):
        SinusoidalPositionalEncoding(7)
    with pytest.raises(ValueError, match=r"\(2, 5, 6\)"):
        module(torch.zeros(2, 5, 6))


@pytest.mark.parametrize("device", DEVICES)
def test_the_module_runs_on_every_device(device) -> None:
    module = SinusoidalPositionalEncoding(8, max_len=10).to(device)
    out = module(torch.zeros(2, 4, 8, device=device))
    assert out.device.type == device
    torch.testing.assert_close(out[0].cpu(), loop_table(4, 8).float())


# ---------------------------------------------------------------- LearnedPositionalEmbedding


def test_the_learned_table_is_a_trainable_embedding_of_positions() -> None:
    module = LearnedPositionalEmbedding(12, 8)
    assert isinstance(module.table, nn.Embedding) and module.table.weight.shape == (12, 8)
    assert [p.shape for p in module.parameters()] == [torch.Size([12, 8])]
    x = randn(3, 5, 8, seed=5)
    torch.testing.assert_close(module(x), x + module.table.weight[:5])


def test_the_learned_embedding_trains_only_the_rows_it_used() -> None:
    module = LearnedPositionalEmbedding(12, 8).double()
    x = randn(3, 5, 8, seed=6, dtype=torch.float64).requires_grad_(True)
    before = x.detach().clone()
    out = module(x)
    assert out.dtype == torch.float64 and torch.equal(x.detach(), before)
    g = randn(3, 5, 8, seed=7, dtype=torch.float64)
    (out * g).sum().backward()
    torch.testing.assert_close(x.grad, g)
    torch.testing.assert_close(module.table.weight.grad[:5], g.sum(0))  # each position's row, summed over B
    assert torch.equal(module.table.weight.grad[5:], torch.zeros(7, 8, dtype=torch.float64))


def test_the_learned_embedding_refuses_sequences_past_max_len() -> None:
    module = LearnedPositionalEmbedding(10, 8)
    assert module(torch.zeros(1, 10, 8)).shape == (1, 10, 8)
    with pytest.raises(ValueError, match=r"T=11.*max_len=10"):
        module(torch.zeros(1, 11, 8))


@pytest.mark.parametrize("device", DEVICES)
def test_the_learned_embedding_builds_positions_on_the_device_of_x(device) -> None:
    module = LearnedPositionalEmbedding(10, 8).to(device)
    assert module(torch.zeros(2, 4, 8, device=device)).device.type == device


# ---------------------------------------------------------------- apply_rotary


@pytest.mark.parametrize(("t", "d", "base"), [(1, 2, 10000.0), (5, 4, 10000.0), (7, 16, 10000.0), (6, 6, 100.0)])
def test_rope_matches_the_loop(t, d, base) -> None:
    x = randn(t, d, seed=8, dtype=torch.float64)
    torch.testing.assert_close(apply_rotary(x, base=base), loop_rope(x, list(range(t)), base))
    positions = [3.0, 10.0, 0.0, 7.5, 2.0, 40.0, 1.0][:t]
    torch.testing.assert_close(apply_rotary(x, torch.tensor(positions), base), loop_rope(x, positions, base))


def test_rope_turns_the_first_pair_counter_clockwise_by_one_radian_per_position() -> None:
    x = torch.tensor([[1.0, 0.0, 1.0, 0.0]]).expand(3, 4)
    out = apply_rotary(x.double())
    torch.testing.assert_close(out[:, 0], torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64).cos())
    torch.testing.assert_close(out[:, 1], torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64).sin())


def test_rope_works_on_any_leading_axes_and_broadcasts_positions() -> None:
    x = randn(2, 3, 5, 8, seed=9, dtype=torch.float64)  # (B, heads, T, d)
    expected = torch.stack([torch.stack([loop_rope(x[b, h], list(range(5))) for h in range(3)]) for b in range(2)])
    torch.testing.assert_close(apply_rotary(x), expected)
    per_batch = torch.tensor([[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]])[:, None, :]  # (B, 1, T)
    out = apply_rotary(x, per_batch)
    torch.testing.assert_close(out[0], expected[0])
    for h in range(3):
        torch.testing.assert_close(out[1, h], loop_rope(x[1, h], list(range(10, 15))))
    torch.testing.assert_close(apply_rotary(x, torch.arange(5)), expected)  # the positions given explicitly
    torch.testing.assert_close(apply_rotary(x, list(range(5))), expected)


def test_rope_preserves_norms_and_is_the_identity_at_position_zero() -> None:
    x = randn(3, 6, 16, seed=10, dtype=torch.float64)
    torch.testing.assert_close(apply_rotary(x).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(apply_rotary(x, torch.zeros(6)), x)
    torch.testing.assert_close(apply_rotary(x)[:, 0], x[:, 0])


def test_rope_scores_depend_only_on_the_offset() -> None:
    """<rope(q, m), rope(k, n)> is a function of m - n alone (and does change with it)."""
    q, k = randn(1, 16, seed=11, dtype=torch.float64), randn(1, 16, seed=12, dtype=torch.float64)

    def score(m: float, n: float) -> torch.Tensor:
        return (apply_rotary(q, torch.tensor([m])) * apply_rotary(k, torch.tensor([n]))).sum()

    for offset in (0, 1, 4, 13):
        scores = torch.stack([score(n + offset, n) for n in (0, 2, 7, 30)])
        torch.testing.assert_close(scores, scores[:1].expand_as(scores))
    assert not torch.isclose(score(3, 0), score(0, 0))


def test_rope_gradcheck_in_float64() -> None:
    x = randn(2, 4, 6, seed=13, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: apply_rotary(t, torch.tensor([0.0, 2.0, 5.0, 9.0])), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_rope_keeps_the_dtype(dtype) -> None:
    x = randn(2, 5, 8, seed=14).to(dtype)
    out = apply_rotary(x)
    assert out.dtype == dtype
    expected = torch.stack([loop_rope(row, list(range(5))) for row in x.double()])  # exact, on the rounded x
    torch.testing.assert_close(out.double(), expected, atol=0.05, rtol=0.02)


def test_rope_leaves_its_inputs_untouched() -> None:
    x = randn(2, 5, 8, seed=15)
    positions = torch.arange(5)
    x_before, positions_before = x.clone(), positions.clone()
    apply_rotary(x, positions)
    assert torch.equal(x, x_before) and torch.equal(positions, positions_before)


def test_rope_keeps_the_device() -> None:
    out = apply_rotary(torch.zeros(2, 5, 8, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 5, 8)


@pytest.mark.parametrize(("shape", "positions", "named"), [((2, 5, 7), None, "d=7"), ((8,), None, r"\(8,\)"),
                                                           ((2, 5, 8), torch.arange(4), r"\(4,\)")])
def test_rope_refuses_odd_widths_and_positions_that_do_not_fit(shape, positions, named) -> None:
    with pytest.raises(ValueError, match=named):
        apply_rotary(torch.zeros(shape), positions)
