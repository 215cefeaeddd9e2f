"""The chapter 3 reference, `solutions.cross_attention`, against PyTorch and its own contract."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from solutions.cross_attention import CrossAttention, sequence_cross_entropy, shift_right, teacher_forcing_pair

# The small vocabulary of the teacher-forcing example.
VOCAB = ["<pad>", "<start>", "<end>", "I", "love", "easy", "courses"]
PAD, START, END = 0, 1, 2
ID = {word: i for i, word in enumerate(VOCAB)}

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def ids(*words: str) -> list[int]:
    return [ID[w] for w in words]


def source_mask(lengths: list[int], t_k: int) -> torch.Tensor:
    """``(B, 1, T_k)``: True on each source sentence's real tokens."""
    return (torch.arange(t_k) < torch.tensor(lengths)[:, None])[:, None, :]


# ---------------------------------------------------------------- CrossAttention


@pytest.mark.parametrize("t_k", [1, 4, 9, 30])
def test_output_has_one_row_per_target_position_whatever_the_source_length(t_k) -> None:
    torch.manual_seed(0)
    module = CrossAttention(16, 8, 6)
    out, weights = module(randn(2, 5, 16, seed=1), randn(2, t_k, 16, seed=2))
    assert out.shape == (2, 5, 6)
    assert weights.shape == (2, 5, t_k)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5))


def test_the_five_by_four_example() -> None:
    """Five decoder positions over four source tokens: weights 5×4, output 5×d_v (not 4×..., not 5×5)."""
    torch.manual_seed(0)
    out, weights = CrossAttention(512, 64)(randn(1, 5, 512, seed=3), randn(1, 4, 512, seed=4))
    assert weights.shape == (1, 5, 4) and out.shape == (1, 5, 64)


def test_matches_torch_sdpa_on_its_projections() -> None:
    torch.manual_seed(0)
    module = CrossAttention(16, 8, 6, bias=True)
    x, memory = randn(2, 5, 16, seed=5), randn(2, 7, 16, seed=6)
    mask = source_mask([7, 3], 7)
    out, _ = module(x, memory, mask)
    expected = F.scaled_dot_product_attention(module.w_q(x), module.w_k(memory), module.w_v(memory), attn_mask=mask)
    torch.testing.assert_close(out, expected)
    assert module.w_q.in_features == module.w_k.in_features == module.w_v.in_features == 16
    assert (module.w_q.out_features, module.w_k.out_features, module.w_v.out_features) == (8, 8, 6)
    assert CrossAttention(16, 8).w_v.out_features == 8 and CrossAttention(16, 8).w_q.bias is None


def test_output_rows_mix_the_projected_memory() -> None:
    """Each output row is a weighted sum of w_v(memory): the values come from the encoder."""
    torch.manual_seed(0)
    module = CrossAttention(8, 4, 8)
    x, memory = randn(1, 3, 8, seed=7), randn(1, 5, 8, seed=8)
    _, weights = module(x, memory)
    with torch.no_grad():
        values = module.w_v(memory)  # (1, 5, 8)
        out, _ = module(x, memory)
    torch.testing.assert_close(out, weights.detach() @ values)


def test_masked_source_positions_get_zero_weight() -> None:
    torch.manual_seed(0)
    module = CrossAttention(16, 8)
    mask = source_mask([7, 4, 1], 7)
    x, memory = randn(3, 5, 16, seed=9), randn(3, 7, 16, seed=10)
    out, weights = module(x, memory, mask)
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))
    # what sits in the padded source positions cannot change the output
    noisy = memory.masked_fill(~mask.transpose(1, 2), 1e3)
    torch.testing.assert_close(module(x, noisy, mask)[0], out)
    # a source that is all padding gives zeros, never NaN
    empty = torch.zeros(3, 1, 7, dtype=torch.bool)
    out, weights = module(x, memory, empty)
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(weights, torch.zeros_like(weights))


# ---------------------------------------------------------------- shift_right and teacher forcing


def test_shift_right_prepends_start_and_drops_the_last_token() -> None:
    tgt = torch.tensor([ids("I", "love", "easy", "courses"), [ID["easy"], ID["courses"], PAD, PAD]])
    expected = torch.tensor([ids("<start>", "I", "love", "easy"), [START, ID["easy"], ID["courses"], PAD]])
    assert torch.equal(shift_right(tgt, START), expected)
    assert torch.equal(shift_right(torch.tensor([[7], [8]]), 1), torch.tensor([[1], [1]]))
    assert shift_right(torch.zeros(2, 0, dtype=torch.long), 1).shape == (2, 0)


def test_the_teacher_forcing_table() -> None:
    """`<start> I love easy courses` in, `I love easy courses <end>` out, position by position."""
    tgt = torch.tensor([ids("I", "love", "easy", "courses")])
    tgt_in, tgt_out = teacher_forcing_pair(tgt, START, END, PAD)
    table = [(VOCAB[a], VOCAB[b]) for a, b in zip(tgt_in[0].tolist(), tgt_out[0].tolist(), strict=True)]
    assert table == [("<start>", "I"), ("I", "love"), ("love", "easy"), ("easy", "courses"), ("courses", "<end>")]


def test_teacher_forcing_pair_on_padded_batches() -> None:
    tgt = torch.tensor([
        ids("I", "love", "easy", "courses"),  # a full row: <end> in the extra column
        [ID["I"], ID["love"], PAD, PAD],
        [PAD, PAD, PAD, PAD],  # an empty sentence: predict <end> at once
    ])
    tgt_in, tgt_out = teacher_forcing_pair(tgt, START, END, PAD)
    assert torch.equal(tgt_in, torch.tensor([[1, 3, 4, 5, 6], [1, 3, 4, 0, 0], [1, 0, 0, 0, 0]]))
    assert torch.equal(tgt_out, torch.tensor([[3, 4, 5, 6, 2], [3, 4, 2, 0, 0], [2, 0, 0, 0, 0]]))
    # any ids, pad_id included; a real token may be 0
    tgt = torch.tensor([[0, 5, 9, 9], [4, 4, 4, 4]])
    tgt_in, tgt_out = teacher_forcing_pair(tgt, 7, 8, 9)
    assert torch.equal(tgt_in, torch.tensor([[7, 0, 5, 9, 9], [7, 4, 4, 4, 4]]))
    assert torch.equal(tgt_out, torch.tensor([[0, 5, 8, 9, 9], [4, 4, 4, 4, 8]]))


def test_teacher_forcing_pair_agrees_with_shift_right() -> None:
    """tgt_in is tgt_out shifted right, with the `<end>` that moved into it turned back into padding."""
    tgt = torch.randint(3, 20, (4, 6), generator=torch.Generator().manual_seed(11))
    tgt[1, 3:] = PAD
    tgt[2, 1:] = PAD
    tgt_in, tgt_out = teacher_forcing_pair(tgt, START, END, PAD)
    assert torch.equal(tgt_in, shift_right(tgt_out, START).masked_fill(shift_right(tgt_out, START) == END, PAD))
    assert ((tgt_out == END).sum(dim=1) == 1).all() and (tgt_in != END).all()


# ---------------------------------------------------------------- sequence_cross_entropy


@pytest.mark.parametrize("pad_id", [0, 3, -100])
def test_sequence_cross_entropy_equals_torch_with_ignore_index(pad_id) -> None:
    logits = randn(3, 6, 11, seed=12) * 3
    targets = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(13))
    targets = targets.masked_fill(targets == pad_id, (pad_id + 1) % 11)
    targets[1, 4:] = pad_id
    targets[2, 1:] = pad_id
    loss = sequence_cross_entropy(logits, targets, pad_id)
    assert loss.shape == ()
    torch.testing.assert_close(loss, F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=pad_id))
    torch.testing.assert_close(loss, F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=pad_id))


def test_sequence_cross_entropy_ignores_pads() -> None:
    logits = randn(2, 5, 7, seed=14)
    targets = torch.tensor([[1, 2, 3, 4, 5], [6, 1, 0, 0, 0]])
    loss = sequence_cross_entropy(logits, targets, pad_id=0)
    pads = (targets == 0)[..., None]
    changed = torch.where(pads, randn(2, 5, 7, seed=15) * 1e4, logits)
    torch.testing.assert_close(sequence_cross_entropy(changed, targets, 0), loss)
    # the mean is over the 7 real positions, every one of them, not only the last
    per_position = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    torch.testing.assert_close(loss, per_position[~pads[..., 0]].sum() / 7)
    leaf = logits.clone().requires_grad_()
    sequence_cross_entropy(leaf, targets, 0).backward()
    assert torch.equal(leaf.grad.masked_select(pads), torch.zeros(3 * 7))


def test_sequence_cross_entropy_of_uniform_logits_is_log_v() -> None:
    targets = torch.tensor([[1, 2, 0], [3, 0, 0]])
    loss = sequence_cross_entropy(torch.zeros(2, 3, 10), targets, 0)
    torch.testing.assert_close(loss, torch.tensor(10.0).log())


# ---------------------------------------------------------------- contract


def test_gradcheck_in_float64() -> None:
    torch.manual_seed(0)
    module = CrossAttention(6, 4, 3, bias=True).double()
    x = randn(2, 3, 6, seed=16, dtype=torch.float64).requires_grad_()
    memory = randn(2, 5, 6, seed=17, dtype=torch.float64).requires_grad_()
    mask = source_mask([5, 2], 5)
    assert torch.autograd.gradcheck(lambda x, memory: module(x, memory, mask)[0], (x, memory))
    logits = randn(2, 4, 5, seed=18, dtype=torch.float64).requires_grad_()
    targets = torch.tensor([[1, 2, 3, 4], [2, 0, 0, 0]])
    assert torch.autograd.gradcheck(lambda z: sequence_cross_entropy(z, targets, 0), (logits,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_dtype_and_device_are_kept(dtype, device) -> None:
    module = CrossAttention(8, 4).to(device=device, dtype=dtype)
    x, memory = randn(2, 3, 8, seed=19).to(device, dtype), randn(2, 5, 8, seed=20).to(device, dtype)
    out, weights = module(x, memory, source_mask([5, 2], 5).to(device))
    assert out.dtype == weights.dtype == dtype and out.device == weights.device == x.device
    loss = sequence_cross_entropy(randn(2, 4, 6, seed=21).to(device, dtype), torch.ones(2, 4, dtype=torch.long,
                                                                                        device=device), 0)
    assert loss.dtype == dtype and loss.device == x.device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("int_dtype", [torch.int64, torch.int32])
def test_token_functions_keep_dtype_and_device(int_dtype, device) -> None:
    tgt = torch.tensor([[3, 4, 0], [5, 0, 0]], dtype=int_dtype, device=device)
    shifted = shift_right(tgt, 1)
    tgt_in, tgt_out = teacher_forcing_pair(tgt, 1, 2, 0)
    for result in (shifted, tgt_in, tgt_out):
        assert result.dtype == int_dtype and result.device == tgt.device


def test_inputs_are_untouched() -> None:
    torch.manual_seed(0)
    x, memory, mask = randn(2, 3, 8, seed=22), randn(2, 5, 8, seed=23), source_mask([5, 2], 5)
    tgt = torch.tensor([[3, 4, 0], [5, 0, 0]])
    logits = randn(2, 3, 6, seed=24)
    copies = [t.clone() for t in (x, memory, mask, tgt, logits)]
    CrossAttention(8, 4)(x, memory, mask)
    shift_right(tgt, 1)
    teacher_forcing_pair(tgt, 1, 2, 0)
    sequence_cross_entropy(logits, tgt, 0)
    for before, after in zip(copies, (x, memory, mask, tgt, logits), strict=True):
        assert torch.equal(before, after)


def test_value_errors_name_the_shapes() -> None:
    module = CrossAttention(16, 8)
    with pytest.raises(ValueError, match=r"(?s)batch.*\(2, 3, 16\).*\(5, 4, 16\)"):
        module(randn(2, 3, 16, seed=25), randn(5, 4, 16, seed=26))
    with pytest.raises(ValueError, match=r"d_model=16.*memory \(2, 4, 12\)"):
        module(randn(2, 3, 16, seed=27), randn(2, 4, 12, seed=28))
    with pytest.raises(ValueError, match=r"x \(2, 3, 12\)"):
        module(randn(2, 3, 12, seed=29), randn(2, 4, 16, seed=30))
    with pytest.raises(ValueError, match="bool"):
        module(randn(2, 3, 16, seed=31), randn(2, 4, 16, seed=32), torch.ones(2, 1, 4))
    for call in (lambda t: shift_right(t, 1), lambda t: teacher_forcing_pair(t, 1, 2, 0)):
        with pytest.raises(ValueError, match=r"2-D.*\(7,\)"):
            call(torch.arange(7))
    with pytest.raises(ValueError, match=r"\(2, 5, 7\).*\(2, 4\)"):
        sequence_cross_entropy(randn(2, 5, 7, seed=33), torch.zeros(2, 4, dtype=torch.long), 0)
    with pytest.raises(ValueError, match=r"\(10, 7\)"):
        sequence_cross_entropy(randn(10, 7, seed=34), torch.zeros(10, dtype=torch.long), 0)
