"""The chapter 1 reference, `solutions.self_attention`, against PyTorch and its own contract."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solutions.self_attention import SelfAttention, attention_scores, scaled_dot_product_attention, softmax


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def rand_mask(*shape: int, seed: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.6


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape"),
    [((5, 8), (7, 8), (7, 8)), ((2, 5, 8), (2, 7, 8), (2, 7, 3)), ((2, 4, 5, 16), (2, 4, 9, 16), (2, 4, 9, 6))],
)
def test_matches_torch_sdpa(q_shape, k_shape, v_shape) -> None:
    q, k, v = randn(*q_shape, seed=1), randn(*k_shape, seed=2), randn(*v_shape, seed=3)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    assert weights.shape == (*q_shape[:-1], k_shape[-2])
    torch.testing.assert_close(weights.sum(-1), torch.ones(q_shape[:-1]))


@pytest.mark.parametrize("mask_shape", [(5, 9), (2, 1, 5, 9), (2, 4, 5, 9), (1, 9)])
def test_boolean_masks_match_torch_sdpa(mask_shape) -> None:
    q, k, v = randn(2, 4, 5, 16, seed=4), randn(2, 4, 9, 16, seed=5), randn(2, 4, 9, 6, seed=6)
    mask = rand_mask(*mask_shape, seed=7)
    mask[..., 0] = True
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_fully_masked_rows_give_zeros_like_torch() -> None:
    q, k, v = randn(2, 4, 8, seed=8), randn(2, 6, 8, seed=9), randn(2, 6, 3, seed=10)
    mask = rand_mask(2, 4, 6, seed=11)
    mask[0, 2] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(weights[0, 2], torch.zeros(6)) and torch.equal(out[0, 2], torch.zeros(3))
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_softmax_is_stable_and_handles_minus_infinity() -> None:
    torch.testing.assert_close(softmax(torch.tensor([1000.0, 1000.0])), torch.tensor([0.5, 0.5]))
    x = randn(3, 4, 5, seed=12) * 50
    for dim in (0, 1, 2, -1):
        torch.testing.assert_close(softmax(x, dim), torch.softmax(x, dim))
    inf = float("inf")
    torch.testing.assert_close(softmax(torch.tensor([0.0, -inf])), torch.tensor([1.0, 0.0]))
    assert torch.equal(softmax(torch.full((2, 3), -inf)), torch.zeros(2, 3))


def test_gradcheck_in_float64() -> None:
    q = randn(2, 3, 4, seed=13, dtype=torch.float64).requires_grad_()
    k = randn(2, 5, 4, seed=14, dtype=torch.float64).requires_grad_()
    v = randn(2, 5, 3, seed=15, dtype=torch.float64).requires_grad_()
    mask = rand_mask(2, 3, 5, seed=16)
    mask[..., 0] = True
    mask[1, 1] = False  # a fully masked row
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0], (q, k, v))
    x = randn(3, 4, seed=17, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: softmax(x, 1), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_dtype_and_device_are_kept(dtype) -> None:
    q, k, v = (randn(2, 3, 8, seed=s).to(dtype) for s in (18, 19, 20))
    out, weights = scaled_dot_product_attention(q, k, v, torch.ones(3, 3, dtype=torch.bool))
    assert out.dtype == weights.dtype == dtype
    assert out.device == q.device
    module = SelfAttention(8, 4).to(dtype)
    assert module(q)[0].dtype == dtype


def test_inputs_are_untouched() -> None:
    q, k, v, mask = randn(2, 3, 8, seed=21), randn(2, 4, 8, seed=22), randn(2, 4, 2, seed=23), rand_mask(3, 4, seed=24)
    copies = [t.clone() for t in (q, k, v, mask)]
    scaled_dot_product_attention(q, k, v, mask)
    softmax(q)
    for before, after in zip(copies, (q, k, v, mask), strict=True):
        assert torch.equal(before, after)


def test_mismatched_d_k_raises_value_error_naming_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3, 4\).*\(2, 5, 6\)"):
        attention_scores(randn(2, 3, 4, seed=25), randn(2, 5, 6, seed=26))
    with pytest.raises(ValueError, match="d_k"):
        scaled_dot_product_attention(randn(3, 4, seed=27), randn(5, 6, seed=28), randn(5, 2, seed=29))


@pytest.mark.parametrize("mask", [torch.ones(3, 5), torch.ones(3, 5, dtype=torch.int64), torch.zeros(3, 5)])
def test_non_boolean_mask_is_refused_with_the_convention(mask) -> None:
    with pytest.raises(ValueError, match=r"(?s)boolean.*True means 'may attend'"):
        scaled_dot_product_attention(randn(3, 4, seed=30), randn(5, 4, seed=31), randn(5, 2, seed=32), mask)


def test_mask_that_does_not_broadcast_is_refused() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        scaled_dot_product_attention(randn(3, 4, seed=33), randn(5, 4, seed=34), randn(5, 2, seed=35),
                                     torch.ones(3, 4, dtype=torch.bool))


def test_self_attention_uses_its_projections() -> None:
    torch.manual_seed(0)
    module = SelfAttention(16, 8, 6, bias=True)
    x = randn(2, 5, 16, seed=36)
    out, weights = module(x)
    expected = F.scaled_dot_product_attention(module.w_q(x), module.w_k(x), module.w_v(x))
    torch.testing.assert_close(out, expected)
    assert out.shape == (2, 5, 6) and weights.shape == (2, 5, 5)
    assert SelfAttention(16, 8).w_v.out_features == 8 and SelfAttention(16, 8).w_q.bias is None
    with pytest.raises(ValueError, match="d_model=16"):
        module(randn(2, 5, 12, seed=37))
