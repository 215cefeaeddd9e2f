"""The chapter 2 reference, `solutions.masking`, against PyTorch, the seeds' examples and its own contract."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solutions.masking import CausalSelfAttention, additive_mask, causal_mask, combine_masks, padding_mask

NEG_INF = float("-inf")


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def rand_mask(*shape: int, seed: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.6


# ---------------------------------------------------------------- causal_mask

def test_causal_mask_is_the_lower_triangle_of_the_seed_example() -> None:
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(4), expected)
    assert torch.equal(causal_mask(4, 4), expected)
    assert torch.equal(causal_mask(7), torch.tril(torch.ones(7, 7, dtype=torch.bool)))


@pytest.mark.parametrize(("t_q", "t_k"), [(1, 1), (1, 5), (2, 4), (3, 7), (5, 5), (4, 9)])
def test_causal_mask_follows_the_offset_rule(t_q, t_k) -> None:
    rule = torch.tensor([[j <= i + (t_k - t_q) for j in range(t_k)] for i in range(t_q)], dtype=torch.bool)
    assert torch.equal(causal_mask(t_q, t_k), rule)
    # the queries are the last t_q rows of the full square mask, as when decoding with a cache
    assert torch.equal(causal_mask(t_q, t_k), causal_mask(t_k)[t_k - t_q:])


def test_causal_mask_dtype_and_device() -> None:
    assert causal_mask(3, 5).dtype == torch.bool
    meta = causal_mask(3, 5, device="meta")
    assert meta.device.type == "meta" and meta.shape == (3, 5) and meta.dtype == torch.bool
    assert causal_mask(2, device=torch.device("cpu")).device.type == "cpu"


def test_causal_mask_matches_torch_is_causal() -> None:
    q, k, v = randn(2, 6, 8, seed=1), randn(2, 6, 8, seed=2), randn(2, 6, 3, seed=3)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(6)),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize(("t_q", "t_k"), [(5, 3), (2, 1)])
def test_causal_mask_refuses_more_queries_than_keys(t_q, t_k) -> None:
    with pytest.raises(ValueError, match=rf"t_q={t_q}.*t_k={t_k}"):
        causal_mask(t_q, t_k)


def test_causal_mask_refuses_negative_lengths() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        causal_mask(-1)


# ---------------------------------------------------------------- padding_mask

def test_padding_mask_of_the_seed_example() -> None:
    mask = padding_mask(torch.tensor([[1, 2, 0, 0, 0]]), 0)
    assert mask.shape == (1, 1, 5) and mask.dtype == torch.bool
    assert torch.equal(mask, torch.tensor([[[True, True, False, False, False]]]))


def test_padding_mask_uses_pad_id_and_keeps_the_device() -> None:
    tokens = torch.tensor([[5, 0, 7, 3], [3, 3, 1, 2]])
    assert torch.equal(padding_mask(tokens, 3), torch.tensor([[[1, 1, 1, 0]], [[0, 0, 1, 1]]], dtype=torch.bool))
    meta = padding_mask(torch.zeros(2, 5, dtype=torch.long, device="meta"), 0)
    assert meta.device.type == "meta" and meta.shape == (2, 1, 5)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_padding_mask_refuses_tokens_that_are_not_2d(shape) -> None:
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        padding_mask(torch.zeros(shape, dtype=torch.long), 0)


# ---------------------------------------------------------------- combine_masks

def test_combined_mask_of_the_seed_example() -> None:
    """004's garbled example, done right: look-ahead AND padding for [1, 2, 0, 0, 0]."""
    mask = combine_masks(causal_mask(5), padding_mask(torch.tensor([[1, 2, 0, 0, 0]]), 0))
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0]],
                            dtype=torch.bool)
    assert mask.shape == (1, 5, 5) and torch.equal(mask[0], expected)


def test_combine_masks_broadcasts_an_and() -> None:
    a, b, c = rand_mask(2, 1, 4, 6, seed=4), rand_mask(4, 6, seed=5), rand_mask(2, 3, 1, 6, seed=6)
    combined = combine_masks(a, b, c)
    assert combined.shape == (2, 3, 4, 6) and combined.dtype == torch.bool
    assert torch.equal(combined, a & b & c)


def test_combine_masks_ignores_none() -> None:
    m = rand_mask(3, 4, seed=7)
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    assert torch.equal(combine_masks(None, m, None), m)
    n = rand_mask(2, 1, 4, seed=8)
    assert torch.equal(combine_masks(m, None, n), m & n)


def test_combine_masks_leaves_its_inputs_alone() -> None:
    a, b = rand_mask(3, 4, seed=9), rand_mask(3, 4, seed=10)
    copies = a.clone(), b.clone()
    combine_masks(a, b)
    assert torch.equal(a, copies[0]) and torch.equal(b, copies[1])


@pytest.mark.parametrize("bad", [torch.ones(3, 3), torch.ones(3, 3, dtype=torch.int64)])
def test_combine_masks_refuses_non_boolean_masks(bad) -> None:
    with pytest.raises(ValueError, match="boolean"):
        combine_masks(causal_mask(3), bad)


def test_combine_masks_refuses_shapes_that_do_not_broadcast() -> None:
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)"):
        combine_masks(rand_mask(3, 4, seed=11), rand_mask(5, seed=12))


# ---------------------------------------------------------------- additive_mask

def test_additive_mask_of_the_seed_example() -> None:
    expected = torch.tensor([[0.0, NEG_INF, NEG_INF, NEG_INF], [0.0, 0.0, NEG_INF, NEG_INF],
                             [0.0, 0.0, 0.0, NEG_INF], [0.0, 0.0, 0.0, 0.0]])
    assert torch.equal(additive_mask(causal_mask(4)), expected)


@pytest.mark.parametrize("mask_shape", [(5, 9), (2, 1, 9), (2, 5, 9)])
def test_additive_mask_matches_the_boolean_mask_in_torch_sdpa(mask_shape) -> None:
    q, k, v = randn(2, 5, 8, seed=13), randn(2, 9, 8, seed=14), randn(2, 9, 4, seed=15)
    mask = rand_mask(*mask_shape, seed=16)
    mask[..., 0] = True
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask(mask)),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_additive_mask_dtype_and_device(dtype) -> None:
    mask = rand_mask(3, 4, seed=17)
    out = additive_mask(mask, dtype)
    assert out.dtype == dtype and out.shape == mask.shape
    assert torch.equal(out == 0, mask) and torch.isneginf(out[~mask]).all()
    assert additive_mask(mask).dtype == torch.float32
    assert additive_mask(mask.to("meta"), dtype).device.type == "meta"


def test_additive_mask_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="boolean"):
        additive_mask(torch.ones(3, 3))
    with pytest.raises(ValueError, match="int64"):
        additive_mask(causal_mask(3), torch.int64)


# ---------------------------------------------------------------- CausalSelfAttention

def _module(d_model: int = 8, d_k: int = 4, d_v: int | None = None, seed: int = 0, **kwargs) -> CausalSelfAttention:
    torch.manual_seed(seed)
    return CausalSelfAttention(d_model, d_k, d_v, **kwargs)


def test_causal_self_attention_matches_torch_sdpa() -> None:
    module = _module(16, 8, 6, bias=True)
    x = randn(2, 5, 16, seed=18)
    out, weights = module(x)
    expected = F.scaled_dot_product_attention(module.w_q(x), module.w_k(x), module.w_v(x), is_causal=True)
    torch.testing.assert_close(out, expected)
    assert out.shape == (2, 5, 6) and weights.shape == (2, 5, 5)
    assert torch.equal(weights.triu(1), torch.zeros(2, 5, 5))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5))
    assert module.w_v.out_features == 6 and _module().w_v.out_features == 4 and _module().w_q.bias is None


def test_causal_self_attention_with_padding_matches_torch_sdpa() -> None:
    module = _module()
    tokens = torch.tensor([[0, 0, 5, 6, 7], [1, 2, 3, 0, 0]])
    x = randn(2, 5, 8, seed=19)
    pad = padding_mask(tokens, 0)
    out, weights = module(x, pad)
    mask = causal_mask(5) & pad
    torch.testing.assert_close(out, F.scaled_dot_product_attention(module.w_q(x), module.w_k(x), module.w_v(x),
                                                                   attn_mask=mask))
    assert torch.equal(weights.masked_select(~mask), torch.zeros(int((~mask).sum())))


def test_no_future_leakage() -> None:
    """Changing the tokens at positions >= t leaves the outputs at positions < t unchanged."""
    module = _module()
    x = randn(2, 7, 8, seed=20)
    for t in range(1, 7):
        changed = x.clone()
        changed[:, t:] = randn(2, 7 - t, 8, seed=21 + t) * 3
        out, changed_out = module(x)[0], module(changed)[0]
        torch.testing.assert_close(changed_out[:, :t], out[:, :t])
        assert not torch.allclose(changed_out[:, t:], out[:, t:])


def test_padding_invariance() -> None:
    """Changing the padded tokens leaves the outputs at real tokens unchanged."""
    module = _module()
    tokens = torch.tensor([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 0, 0], [0, 7, 8, 0, 9, 1]])
    x = randn(3, 6, 8, seed=30)
    changed = torch.where((tokens == 0).unsqueeze(-1), randn(3, 6, 8, seed=31) * 3, x)
    pad = padding_mask(tokens, 0)
    out, changed_out = module(x, pad)[0], module(changed, pad)[0]
    real = tokens != 0
    torch.testing.assert_close(changed_out[real], out[real])
    # without the padding mask, the left-padded rows would see their pads
    assert not torch.allclose(module(changed)[0][real], module(x)[0][real])


def test_fully_masked_rows_give_zeros() -> None:
    module = _module()
    tokens = torch.tensor([[0, 0, 3, 4], [0, 0, 0, 0]])  # the pads at the start attend no key at all
    out, weights = module(randn(2, 4, 8, seed=32), padding_mask(tokens, 0))
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    dead = torch.tensor([[True, True, False, False], [True, True, True, True]])
    assert torch.equal(out[dead], torch.zeros(int(dead.sum()), 4))
    assert torch.equal(weights[dead], torch.zeros(int(dead.sum()), 4))


def test_gradcheck_in_float64() -> None:
    module = _module().double()
    pad = padding_mask(torch.tensor([[0, 2, 3, 4], [5, 6, 0, 0]]), 0)  # with a fully masked row
    x = randn(2, 4, 8, seed=33, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: module(x, pad)[0], (x,))
    out, _ = module(x, pad)
    out.sum().backward()
    assert all(not torch.isnan(p.grad).any() for p in module.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_dtype_and_device_are_kept(dtype) -> None:
    module = _module().to(dtype)
    x = randn(2, 5, 8, seed=34).to(dtype)
    out, weights = module(x, padding_mask(torch.tensor([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]]), 0))
    assert out.dtype == weights.dtype == dtype and out.device == x.device


def test_inputs_are_untouched() -> None:
    module = _module()
    x, tokens = randn(2, 5, 8, seed=35), torch.tensor([[1, 2, 3, 0, 0], [0, 4, 5, 6, 7]])
    pad = padding_mask(tokens, 0)
    copies = x.clone(), tokens.clone(), pad.clone()
    module(x, pad)
    additive_mask(pad)
    combine_masks(causal_mask(5), pad)
    for before, after in zip(copies, (x, tokens, pad), strict=True):
        assert torch.equal(before, after)


def test_causal_self_attention_refuses_bad_shapes() -> None:
    module = _module()
    with pytest.raises(ValueError, match="d_model=8"):
        module(randn(2, 5, 6, seed=36))
    with pytest.raises(ValueError, match=r"\(B, 1, T\)"):
        module(randn(2, 5, 8, seed=37), torch.ones(2, 5, dtype=torch.bool))
