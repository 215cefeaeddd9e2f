"""The chapter 4 reference, `solutions.multi_head`, against PyTorch's nn.MultiheadAttention and its own contract."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from solutions.masking import causal_mask, combine_masks, padding_mask
from solutions.multi_head import MultiHeadAttention, merge_heads, split_heads
from solutions.self_attention import scaled_dot_product_attention

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def rand_mask(*shape: int, seed: int) -> torch.Tensor:
    """True (may attend) with probability 0.6, and every query keeps key 0."""
    mask = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.6
    mask[..., 0] = True
    return mask


def torch_twin(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """nn.MultiheadAttention(batch_first=True) with the weights of ``mha`` copied in."""
    twin = nn.MultiheadAttention(mha.d_model, mha.n_heads, bias=mha.w_q.bias is not None, batch_first=True)
    with torch.no_grad():
        twin.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
        twin.out_proj.weight.copy_(mha.w_o.weight)
        if mha.w_q.bias is not None:
            twin.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
            twin.out_proj.bias.copy_(mha.w_o.bias)
    return twin.eval()


def by_hand(mha: MultiHeadAttention, query, key, value, mask4=None):
    """Each head on its own slice of the projections, with an explicit (.., n_heads or 1, T_q, T_k) mask."""
    d = mha.d_head
    q, k, v = mha.w_q(query), mha.w_k(key), mha.w_v(value)
    heads, weights = [], []
    for h in range(mha.n_heads):
        part = slice(h * d, (h + 1) * d)
        head_mask = None if mask4 is None else mask4[:, min(h, mask4.shape[1] - 1)]
        out, w = scaled_dot_product_attention(q[..., part], k[..., part], v[..., part], head_mask)
        heads.append(out)
        weights.append(w)
    return mha.w_o(torch.cat(heads, dim=-1)), torch.stack(weights, dim=1)


# ---------------------------------------------------------------- split_heads and merge_heads


@pytest.mark.parametrize(("b", "t", "d_model", "n_heads"), [(1, 9, 768, 12), (2, 5, 12, 3), (3, 1, 8, 8), (2, 4, 6, 1)])
def test_merge_heads_inverts_split_heads(b, t, d_model, n_heads) -> None:
    x = randn(b, t, d_model, seed=1)
    heads = split_heads(x, n_heads)
    assert heads.shape == (b, n_heads, t, d_model // n_heads)
    assert torch.equal(merge_heads(heads), x)
    h = randn(b, n_heads, t, d_model // n_heads, seed=2)
    assert torch.equal(split_heads(merge_heads(h), n_heads), h)


def test_split_heads_gives_head_h_the_features_of_block_h() -> None:
    """GPT-2's sizes: 12 heads of 64 features; head h holds features h*64 .. h*64+63 of every token."""
    x = randn(2, 9, 768, seed=3)
    heads = split_heads(x, 12)
    assert heads.shape == (2, 12, 9, 64)
    for h in range(12):
        assert torch.equal(heads[:, h], x[..., h * 64:(h + 1) * 64])
    # the positions are not split: every head sees all 9 tokens
    x = torch.arange(24.0).reshape(1, 3, 8)  # token t holds 8t .. 8t+7
    assert torch.equal(split_heads(x, 2)[0, 1], torch.tensor([[4.0, 5, 6, 7], [12, 13, 14, 15], [20, 21, 22, 23]]))


def test_split_heads_is_a_view_and_merge_heads_a_concatenation() -> None:
    x = randn(2, 5, 12, seed=4)
    assert split_heads(x, 3).data_ptr() == x.data_ptr()
    heads = randn(2, 3, 5, 4, seed=5)
    assert torch.equal(merge_heads(heads), torch.cat(heads.unbind(1), dim=-1))


@pytest.mark.parametrize("device", [*DEVICES, "meta"])
def test_split_and_merge_keep_dtype_and_device(device) -> None:
    x = torch.zeros(2, 3, 8, dtype=torch.float64, device=device)
    heads = split_heads(x, 4)
    assert heads.dtype == torch.float64 and heads.device.type == device and heads.shape == (2, 4, 3, 2)
    merged = merge_heads(heads)
    assert merged.dtype == torch.float64 and merged.device.type == device and merged.shape == (2, 3, 8)


def test_split_and_merge_pass_gradients() -> None:
    x = randn(2, 3, 6, seed=6, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: merge_heads(split_heads(t, 3) * 2.0), (x,))


def test_split_and_merge_errors() -> None:
    with pytest.raises(ValueError, match=r"d_model=10.*n_heads=4"):
        split_heads(torch.zeros(2, 3, 10), 4)
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        split_heads(torch.zeros(2, 3), 1)
    with pytest.raises(ValueError, match=r"\(2, 7, 9\)"):
        merge_heads(torch.zeros(2, 7, 9))


# ---------------------------------------------------------------- MultiHeadAttention


def test_projections() -> None:
    mha = MultiHeadAttention(24, 4)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        layer = getattr(mha, name)
        assert isinstance(layer, nn.Linear) and tuple(layer.weight.shape) == (24, 24) and layer.bias is not None
    assert (mha.n_heads, mha.d_head) == (4, 6)
    assert all(getattr(MultiHeadAttention(24, 4, bias=False), n).bias is None for n in ("w_q", "w_k", "w_v", "w_o"))


def test_gpt2_sizes_each_head_is_9_by_64_and_only_the_concatenation_9_by_768() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(768, 12)
    x = randn(1, 9, 768, seed=7)  # "Aerodynamics are for people who can't build engines"
    out, weights = mha(x, x, x, causal_mask(9))
    assert out.shape == (1, 9, 768) and weights.shape == (1, 12, 9, 9)
    per_head = weights @ split_heads(mha.w_v(x), 12)
    assert per_head.shape == (1, 12, 9, 64)
    assert merge_heads(per_head).shape == (1, 9, 768)
    torch.testing.assert_close(mha.w_o(merge_heads(per_head)), out)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("t_q", "t_k"), [(6, 6), (5, 7), (1, 4)])
def test_matches_nn_multihead_attention(bias, t_q, t_k) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, bias=bias)
    twin = torch_twin(mha)
    query, key, value = randn(2, t_q, 32, seed=8), randn(2, t_k, 32, seed=9), randn(2, t_k, 32, seed=10)
    out, weights = mha(query, key, value)
    expected_out, expected_mean = twin(query, key, value)  # average_attn_weights=True by default
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(weights.mean(dim=1), expected_mean)
    _, expected_per_head = twin(query, key, value, average_attn_weights=False)
    torch.testing.assert_close(weights, expected_per_head)


def test_cross_attention_has_one_row_per_query() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2)
    out, weights = mha(randn(3, 4, 16, seed=11), randn(3, 10, 16, seed=12), randn(3, 10, 16, seed=13))
    assert out.shape == (3, 4, 16) and weights.shape == (3, 2, 4, 10)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 4))


def test_chapter_2_masks_are_used_as_they_are() -> None:
    """(T_q, T_k), (B, 1, T_k) and (B, T_q, T_k) masks need no head axis; each matches nn.MultiheadAttention."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 3)
    twin = torch_twin(mha)
    x = randn(2, 5, 24, seed=14)
    tokens = torch.tensor([[7, 8, 9, 0, 0], [4, 5, 6, 7, 8]])
    causal, pad = causal_mask(5), padding_mask(tokens, 0)
    both = combine_masks(causal, pad)  # (2, 5, 5)
    cases = [
        (causal, {"attn_mask": ~causal}),
        (pad, {"key_padding_mask": ~pad[:, 0]}),
        (both, {"attn_mask": (~both).repeat_interleave(3, dim=0)}),  # (B * n_heads, T_q, T_k)
    ]
    for mask, torch_masks in cases:
        out, weights = mha(x, x, x, mask)
        expected_out, expected_weights = twin(x, x, x, average_attn_weights=False, **torch_masks)
        torch.testing.assert_close(out, expected_out)
        torch.testing.assert_close(weights, expected_weights)
        blocked = ~mask.unsqueeze(-3).expand_as(weights)
        assert (weights[blocked] == 0).all()
        torch.testing.assert_close(by_hand(mha, x, x, x, mask.expand(2, 5, 5).unsqueeze(1)), (out, weights))


def test_a_random_per_query_mask_with_more_queries_than_heads_and_t_q_equal_to_n_heads() -> None:
    """T_q == n_heads is where a head axis in the wrong place would still broadcast; the reference is exact."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4)
    query, key = randn(2, 4, 16, seed=15), randn(2, 6, 16, seed=16)
    for mask in (rand_mask(2, 4, 6, seed=17), rand_mask(4, 6, seed=18)):
        out, weights = mha(query, key, key, mask)
        expected = by_hand(mha, query, key, key, mask.expand(2, 4, 6).unsqueeze(1))
        torch.testing.assert_close((out, weights), expected)


def test_fully_masked_queries_get_zero_weights_and_zero_output_without_bias() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, bias=False)
    x = randn(2, 3, 16, seed=19).requires_grad_(True)
    mask = torch.tensor([[True, True, False], [False, False, False]])[:, None, :]  # row 2 may attend nothing
    out, weights = mha(x, x, x, mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    assert torch.equal(weights[1], torch.zeros(4, 3, 3)) and torch.equal(out[1], torch.zeros(3, 16))
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(4, 3))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    with_bias = MultiHeadAttention(16, 4)
    out, _ = with_bias(x, x, x, mask)
    torch.testing.assert_close(out[1], with_bias.w_o.bias.expand(3, 16))  # w_o of zeros is its bias


def test_each_head_uses_only_its_own_slice_of_the_projections() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4)
    x = randn(2, 5, 16, seed=20)
    _, before = mha(x, x, x)
    with torch.no_grad():
        mha.w_q.weight[4:8] += randn(4, 16, seed=21)  # the rows of head 1
    _, after = mha(x, x, x)
    changed = [not torch.allclose(before[:, h], after[:, h]) for h in range(4)]
    assert changed == [False, True, False, False]


def test_heads_are_the_loop_over_slices() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(20, 5)
    query, key, value = randn(2, 3, 20, seed=22), randn(2, 4, 20, seed=23), randn(2, 4, 20, seed=24)
    torch.testing.assert_close(mha(query, key, value), by_hand(mha, query, key, value))


def test_dropout_acts_on_the_weights_in_training_mode_only() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = randn(2, 6, 16, seed=25)
    mha.eval()
    out, weights = mha(x, x, x)
    torch.testing.assert_close((out, weights), torch_twin(mha)(x, x, x, average_attn_weights=False))
    torch.testing.assert_close(mha(x, x, x), (out, weights))  # no randomness in eval mode
    mha.train()
    dropped_out, dropped = mha(x, x, x)
    kept = dropped != 0
    assert 0.2 < 1 - kept.float().mean().item() < 0.8
    torch.testing.assert_close(dropped[kept], (weights * 2)[kept])  # survivors scaled by 1 / (1 - p)
    v = split_heads(mha.w_v(x), 4)
    torch.testing.assert_close(dropped_out, mha.w_o(merge_heads(dropped @ v)))


def test_fast_path_gives_the_same_output() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).eval()
    query, key = randn(2, 5, 32, seed=26), randn(2, 7, 32, seed=27)
    mask = rand_mask(2, 5, 7, seed=28)
    mask[1, 2] = False  # a fully masked query
    for m in (None, mask, causal_mask(5, 7), padding_mask(torch.tensor([[1, 2, 3, 0, 0, 0, 0], [1] * 7]), 0)):
        slow, _ = mha(query, key, key, m)
        fast, weights = mha(query, key, key, m, need_weights=False)
        assert weights is None
        torch.testing.assert_close(fast, slow)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_in_float64(device) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).double().to(device)
    query = randn(2, 3, 8, seed=29, dtype=torch.float64).to(device).requires_grad_(True)
    key = randn(2, 4, 8, seed=30, dtype=torch.float64).to(device).requires_grad_(True)
    mask = rand_mask(2, 3, 4, seed=31).to(device)
    mask[0, 1] = False  # a fully masked query: its gradient is 0, not NaN
    assert torch.autograd.gradcheck(lambda q, k: mha(q, k, k, mask)[0], (query, key))
    assert torch.autograd.gradcheck(lambda q, k: mha(q, k, k, mask, need_weights=False)[0], (query, key))


@pytest.mark.parametrize("device", [*DEVICES, "meta"])
def test_dtype_and_device_are_kept_and_inputs_untouched(device) -> None:
    mha = MultiHeadAttention(8, 2).double().to(device)
    x = torch.ones(2, 3, 8, dtype=torch.float64, device=device)
    mask = torch.ones(2, 1, 3, dtype=torch.bool, device=device)
    out, weights = mha(x, x, x, mask)
    for t in (out, weights):
        assert t.dtype == torch.float64 and t.device.type == device
    if device != "meta":
        assert torch.equal(x, torch.ones_like(x)) and mask.all()


def test_errors_name_the_shapes() -> None:
    with pytest.raises(ValueError, match=r"d_model=10.*n_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 2, dropout=1.5)
    mha = MultiHeadAttention(16, 4)
    x = torch.zeros(2, 3, 16)
    with pytest.raises(ValueError, match=r"query .*\(2, 3, 12\)"):
        mha(torch.zeros(2, 3, 12), x, x)
    with pytest.raises(ValueError, match=r"\(2, 3, 16\).*\(2, 5, 16\)"):
        mha(x, x, torch.zeros(2, 5, 16))
    with pytest.raises(ValueError, match=r"\(5, 3, 16\)"):
        mha(x, torch.zeros(5, 3, 16), torch.zeros(5, 3, 16))
    with pytest.raises(ValueError, match="boolean"):
        mha(x, x, x, torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"\(2, 4, 3, 3\)"):
        mha(x, x, x, torch.ones(2, 4, 3, 3, dtype=torch.bool))  # a per-head mask: the module adds that axis
