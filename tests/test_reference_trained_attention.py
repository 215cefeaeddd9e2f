"""The chapter 8 reference, `solutions.trained_attention`: attention scores of heads, head ablation and the loss
on a repeated sequence, against values worked by hand, independent formulas and the course's contract; and the
helper package's task and attention-only model, which the chapter and the checks use."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from attention_course.induction import (
    AttentionOnly,
    AttentionOnlySizes,
    RepeatTask,
    direct_logit_attribution,
    gpt_attention,
    hand_built_induction,
    head_outputs,
    k_composition,
    repeated_tokens,
    train_induction,
)
from attention_course.language_model import LMSizes, TorchGPT
from solutions.trained_attention import (
    ablate_head,
    ablation_reading,
    attention_entropy,
    copying_score,
    heatmap_facts,
    induction_score,
    largest_term,
    ov_circuit,
    patch_head,
    previous_token_score,
    repeat_loss,
)


def maps(*shape: int, seed: int, causal: bool = True, dtype: torch.dtype = torch.float32) -> Tensor:
    """Random attention maps ``shape`` (..., T, T): softmax rows, causal (zeros above the diagonal) or not."""
    scores = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype) * 2
    if causal:
        t = shape[-1]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
    return scores.softmax(dim=-1)


def tiny_model(seed: int = 0, dropout: float = 0.0) -> AttentionOnly:
    torch.manual_seed(seed)
    model = AttentionOnly(AttentionOnlySizes(vocab=11, context=16, d_model=12, n_heads=3, n_layers=2,
                                             dropout=dropout))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.8)
    return model.eval()


# ------------------------------------------------------------------------------------------------- entropy


def test_entropy_is_ln_n_for_even_rows_and_zero_for_one_hot_rows() -> None:
    even = torch.full((2, 5, 4), 0.25)
    check = attention_entropy(even)
    assert check.shape == (2,) and torch.allclose(check, torch.full((2,), math.log(4)))
    one_hot = F.one_hot(torch.tensor([0, 3, 1]), 5).float()  # (3, 5)
    assert attention_entropy(one_hot).item() == 0.0


def test_entropy_of_a_causal_uniform_map_is_the_mean_of_ln_i() -> None:
    t = 6
    uniform = torch.ones(t, t).tril() / torch.arange(1, t + 1)[:, None]  # row i spread over keys 0..i
    expected = sum(math.log(i) for i in range(1, t + 1)) / t
    assert attention_entropy(uniform).item() == pytest.approx(expected, rel=1e-6)


def test_entropy_matches_a_loop_over_rows_and_keeps_zero_rows_at_zero() -> None:
    w = maps(2, 3, 5, 5, seed=1).double()
    w[0, 1, 2] = 0.0  # a query whose keys were all masked
    expected = torch.zeros(2, 3, dtype=torch.float64)
    for index in torch.cartesian_prod(torch.arange(2), torch.arange(3)).tolist():
        rows = w[tuple(index)]
        expected[tuple(index)] = sum(-sum(p * math.log(p) for p in row.tolist() if p > 0) for row in rows) / 5
    got = attention_entropy(w)
    assert got.dtype == torch.float64 and not got.isnan().any()
    assert torch.allclose(got, expected, atol=1e-12)


def test_entropy_keeps_gradients_and_refuses_a_vector() -> None:
    w = maps(3, 4, seed=2, causal=False).requires_grad_(True)
    attention_entropy(w).backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()
    with pytest.raises(ValueError, match=r"\(4,\)"):
        attention_entropy(torch.ones(4))


# ------------------------------------------------------------------------------------------------- the diagonal scores


def test_previous_token_score_of_a_perfect_head_is_1_and_leaves_query_0_out() -> None:
    t = 7
    perfect = torch.zeros(t, t)
    perfect[0, 0] = 1.0
    perfect[torch.arange(1, t), torch.arange(t - 1)] = 1.0
    assert previous_token_score(perfect).item() == 1.0
    w = maps(2, 4, t, t, seed=3)
    expected = torch.stack([w[..., i, i - 1] for i in range(1, t)], dim=-1).mean(dim=-1)
    assert torch.allclose(previous_token_score(w), expected)


@pytest.mark.parametrize("bad", [torch.ones(3, 4) / 4, torch.ones(2, 1, 1)])
def test_previous_token_score_refuses_maps_that_are_not_square_or_too_short(bad) -> None:
    with pytest.raises(ValueError, match="T"):
        previous_token_score(bad)


def test_induction_score_reads_the_token_after_the_earlier_occurrence() -> None:
    period, t = 4, 11
    perfect = torch.zeros(t, t)
    perfect[:, 0] = 1.0
    for i in range(period, t):
        perfect[i] = 0.0
        perfect[i, i - period + 1] = 1.0
    assert induction_score(perfect, period).item() == 1.0
    w = maps(3, t, t, seed=4)
    expected = torch.stack([w[..., i, i - period + 1] for i in range(period, t)], dim=-1).mean(dim=-1)
    assert torch.allclose(induction_score(w, period), expected)
    assert torch.allclose(induction_score(w, 1), torch.diagonal(w, dim1=-2, dim2=-1)[..., 1:].mean(dim=-1))


@pytest.mark.parametrize("period", [0, 6, -1])
def test_induction_score_refuses_a_period_outside_1_to_t(period) -> None:
    with pytest.raises(ValueError, match="period"):
        induction_score(maps(6, 6, seed=5), period)


# ------------------------------------------------------------------------------------------------- ablation


def test_ablate_head_replaces_one_slice_and_keeps_the_rest_and_the_input() -> None:
    z = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(6))
    before = z.clone()
    zeroed = ablate_head(z, 1)
    assert torch.equal(z, before), "the input was modified"
    assert (zeroed[:, 1] == 0).all() and torch.equal(zeroed[:, [0, 2]], z[:, [0, 2]])
    mean = z[:, 1].mean(dim=0)  # (T, d_head)
    replaced = ablate_head(z, 1, mean)
    assert torch.equal(replaced[:, 1], mean.expand(2, 4, 5)) and torch.equal(replaced[:, [0, 2]], z[:, [0, 2]])
    assert torch.equal(ablate_head(z, 2, torch.arange(5.0))[:, 2], torch.arange(5.0).expand(2, 4, 5))


def test_ablate_head_keeps_gradients_to_the_other_heads_only_and_the_dtype() -> None:
    z = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    out = ablate_head(z, 0)
    assert out.dtype == torch.float64
    out.sum().backward()
    assert (z.grad[:, 0] == 0).all() and (z.grad[:, 1:] == 1).all()


@pytest.mark.parametrize("call", [lambda z: ablate_head(z, 3), lambda z: ablate_head(z, -1),
                                  lambda z: ablate_head(z[0], 0), lambda z: ablate_head(z, 0, torch.zeros(3))])
def test_ablate_head_refuses_bad_arguments_naming_them(call) -> None:
    with pytest.raises(ValueError, match=r"\("):
        call(torch.zeros(2, 3, 4, 5))


# ------------------------------------------------------------------------------------------------- repeat_loss


def test_repeat_loss_scores_the_copyable_targets_only() -> None:
    model = tiny_model()
    tokens = repeated_tokens(3, 5, 11, torch.Generator().manual_seed(7))  # (3, 10)
    with torch.no_grad():
        log_p = model(tokens).log_softmax(dim=-1)
    expected = -torch.stack([log_p[b, t - 1, tokens[b, t]] for b in range(3) for t in range(6, 10)]).mean()
    assert repeat_loss(model, tokens, 5).item() == pytest.approx(expected.item(), rel=1e-6)


def test_repeat_loss_ablates_through_a_hook_that_it_removes() -> None:
    model = tiny_model()
    site = model.layers[1].hook_heads
    tokens = repeated_tokens(2, 6, 11, torch.Generator().manual_seed(8))
    plain = repeat_loss(model, tokens, 6)
    handle = site.register_forward_hook(lambda module, inputs, z: ablate_head(z, 2))
    with torch.no_grad():
        logits = model(tokens)
    handle.remove()
    expected = F.cross_entropy(logits[:, 6:-1].flatten(0, 1), tokens[:, 7:].flatten())
    assert repeat_loss(model, tokens, 6, site, 2).item() == pytest.approx(expected.item(), rel=1e-6)
    assert not site._forward_hooks and repeat_loss(model, tokens, 6).item() == plain.item()
    mean = torch.ones(12 // 3)
    assert repeat_loss(model, tokens, 6, site, 2, mean).item() != pytest.approx(expected.item(), rel=1e-3)


def test_repeat_loss_runs_in_eval_mode_and_gives_the_mode_back() -> None:
    model = tiny_model(dropout=0.5).train()
    tokens = repeated_tokens(2, 5, 11, torch.Generator().manual_seed(9))
    first, second = repeat_loss(model, tokens, 5), repeat_loss(model, tokens, 5)
    assert first.item() == second.item() and model.training


def test_repeat_loss_removes_its_hook_when_the_model_raises_and_refuses_bad_arguments() -> None:
    model = tiny_model()
    site = model.layers[0].hook_heads
    with pytest.raises(ValueError, match="context"):
        repeat_loss(model, torch.zeros(1, 20, dtype=torch.long), 5, site, 0)  # longer than the context of 16
    assert not site._forward_hooks
    with pytest.raises(ValueError, match="period"):
        repeat_loss(model, torch.zeros(1, 6, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="both"):
        repeat_loss(model, torch.zeros(1, 12, dtype=torch.long), 5, site)


# ------------------------------------------------------------------------------------------------- concept checks


def test_heatmap_facts_at_gpt_2s_sizes() -> None:
    assert heatmap_facts(9, 768, 12, 12, 4) == ((9, 9), 144, 5)


def test_largest_term_is_not_the_largest_weight() -> None:
    assert largest_term([0.82, 0.03, 0.10, 0.05], [0.05, 3.0, 2.0, 0.9]) == 2
    assert largest_term([0.5, 0.5], [1.0, 2.0]) == 1


# ------------------------------------------------------------------------------------------------- the helper package


def test_the_repeat_task_copies_one_span_at_a_varying_place() -> None:
    task = RepeatTask(vocab=50, length=40, shortest=4, longest=12)
    ids, copyable = task.batch(300, torch.Generator().manual_seed(10))
    starts = set()
    for row, marks in zip(ids.tolist(), copyable.tolist(), strict=True):
        where = [t for t, m in enumerate(marks) if m]
        assert where == list(range(where[0], where[-1] + 1)) and 3 <= len(where) <= 11
        span = len(where) + 1
        second = where[0]
        copied = row[second:second + span]
        assert any(row[s:s + span] == copied for s in range(0, second - span + 1)), "no first occurrence"
        starts.add(second)
    assert len(starts) > 15, f"the repeat starts at only {sorted(starts)}"


def test_repeated_tokens_repeat_their_first_half() -> None:
    tokens = repeated_tokens(4, 7, 20, torch.Generator().manual_seed(11))
    assert tokens.shape == (4, 14) and torch.equal(tokens[:, 7:], tokens[:, :7])


def test_attention_maps_are_causal_distributions_and_the_hook_sees_the_heads() -> None:
    model = tiny_model()
    tokens = repeated_tokens(2, 6, 11)
    weights = model.attention_maps(tokens)
    assert weights.shape == (2, 2, 3, 12, 12)
    assert torch.allclose(weights.sum(dim=-1), torch.ones(2, 2, 3, 12))
    assert (weights.triu(1) == 0).all()
    seen = []
    handle = model.layers[0].hook_heads.register_forward_hook(lambda m, i, z: seen.append(z.shape))
    model(tokens)
    handle.remove()
    assert seen == [torch.Size([2, 3, 12, 4])]


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_gpt_attention_recomputes_what_the_fused_kernel_attends(positions) -> None:
    torch.manual_seed(0)
    model = TorchGPT(LMSizes(vocab=13, context=16, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2,
                             positions=positions)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.5)
    ids = torch.randint(0, 13, (2, 9))
    weights = gpt_attention(model, ids)
    assert weights.shape == (2, 2, 4, 9, 9) and (weights.triu(1) == 0).all()
    seen = []
    handle = model.blocks[1].attn.register_forward_hook(lambda m, args, out: seen.append((args[0], out)))
    model(ids)
    handle.remove()
    x, out = seen[0]
    _, _, v = model.blocks[1].attn.qkv(x).split([16, 8, 8], dim=-1)
    v = v.view(2, 9, 2, 4).transpose(1, 2).repeat_interleave(2, dim=1)  # (B, H, T, d_head)
    by_hand = model.blocks[1].attn.proj((weights[1] @ v).transpose(1, 2).reshape(2, 9, 16))
    assert torch.allclose(by_hand, out, atol=1e-5), "the weights do not reproduce the block's attention output"


# ------------------------------------------------------------------------------------------------- circuits


def _corrupted(clean: Tensor, period: int, vocab: int, seed: int) -> Tensor:
    shift = torch.randint(1, vocab, clean[:, :period].shape, generator=torch.Generator().manual_seed(seed))
    out = clean.clone()
    out[:, :period] = (clean[:, :period] + shift) % vocab
    return out


def test_ov_circuit_is_what_attending_to_one_token_adds_to_the_logits() -> None:
    model = tiny_model(seed=3)
    layer = model.layers[1]
    for head in range(3):
        circuit = ov_circuit(model, 1, head)
        assert circuit.shape == (11, 11)
        for a in (0, 7):  # a head that puts all its weight on token a adds x_a W_V^h W_O^h to the residual stream
            z = torch.zeros(1, 3, 1, 4)
            z[0, head, 0] = layer.w_v(model.embed.weight[a])[head * 4:(head + 1) * 4]  # head h's value of token a
            added = layer.w_o(z.transpose(1, 2).reshape(1, 1, 12))[0, 0]  # through the output projection
            assert torch.allclose(circuit[a], model.unembed(added), atol=1e-5)


def test_the_hand_built_circuit_copies_and_predicts_the_repeat() -> None:
    model = hand_built_induction()
    assert torch.equal(ov_circuit(model, 1, 0), 10 * torch.eye(8))
    share, positivity = copying_score(ov_circuit(model, 1, 0))
    assert share.item() == 1.0 and positivity.item() == pytest.approx(1.0)
    tokens = torch.stack([torch.randperm(8, generator=torch.Generator().manual_seed(s))[:6] for s in range(4)])
    tokens = torch.cat([tokens, tokens], dim=1)  # no token twice in the first half: the copy is unambiguous
    with torch.no_grad():
        logits = model(tokens)
    later = F.cross_entropy(logits[:, 7:-1].flatten(0, 1), tokens[:, 8:].flatten())
    assert later.item() < 1e-3  # query 6 also matches key 0, whose "previous token" is itself: only it hesitates
    assert repeat_loss(model, tokens, 6).item() < (math.log(2) + 0.05) / 5  # at most about ln 2 at that one query
    maps = model.attention_maps(tokens)
    assert previous_token_score(maps[0, :, 0]).min() > 0.99  # query 6 splits its weight: (5 + 1 / 2) / 6
    assert torch.allclose(induction_score(maps[1, :, 0], 6), torch.tensor(5.5 / 6), atol=1e-3)
    with pytest.raises(ValueError, match="vocab"):
        hand_built_induction(vocab=7)


def test_copying_score_of_copying_suppressing_and_complex_circuits() -> None:
    share, positivity = copying_score(torch.eye(5, dtype=torch.float64) * 3)
    assert (share.item(), positivity.item()) == (1.0, 1.0) and share.dtype == positivity.dtype == torch.float64
    assert copying_score(-torch.eye(5) * 3)[1].item() == pytest.approx(-1.0)
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]])  # eigenvalues ±i: real parts 0, moduli 1
    assert copying_score(rotation)[1].item() == pytest.approx(0.0, abs=1e-6)
    c = torch.randn(9, 9, generator=torch.Generator().manual_seed(4))
    expected = sum(float(c[a].argmax() == a) for a in range(9)) / 9
    assert copying_score(c)[0].item() == pytest.approx(expected)
    for bad in (torch.ones(3, 4), torch.ones(3), torch.ones(3, 3, dtype=torch.long)):
        with pytest.raises(ValueError, match="square"):
            copying_score(bad)


def test_ov_circuit_refuses_a_layer_or_head_out_of_range() -> None:
    model = tiny_model()
    for layer, head, word in ((2, 0, "layer"), (0, 3, "head"), (1, -1, "head")):
        with pytest.raises(ValueError, match=word):
            ov_circuit(model, layer, head)


def test_patch_head_restores_the_gap_through_the_induction_head_only() -> None:
    model = hand_built_induction()
    clean = repeated_tokens(4, 6, 8, torch.Generator().manual_seed(1))
    corrupted = _corrupted(clean, 6, 8, seed=2)
    assert patch_head(model, clean, corrupted, 6, model.layers[1].hook_heads, 0).item() == pytest.approx(1.0, abs=1e-4)
    assert patch_head(model, clean, corrupted, 6, model.layers[1].hook_heads, 1).item() == 0.0  # an empty head
    assert patch_head(model, clean, corrupted, 6, model.layers[0].hook_heads, 0).item() < 0  # right keys, wrong values


def test_patch_head_is_the_formula_of_three_losses_in_eval_mode_and_leaves_nothing_behind() -> None:
    model = tiny_model(seed=2, dropout=0.3).train()
    clean = repeated_tokens(3, 5, 11, torch.Generator().manual_seed(3))
    corrupted = _corrupted(clean, 5, 11, seed=4)
    site = model.layers[1].hook_heads
    z = head_outputs(model, clean)[1]
    good, bad = repeat_loss(model, clean, 5), repeat_loss(model, corrupted, 5)
    patched = repeat_loss(model, corrupted, 5, site, 2, z[:, 2])
    got = patch_head(model, clean, corrupted, 5, site, 2)
    assert got.item() == pytest.approx(((bad - patched) / (bad - good)).item(), rel=1e-5)
    assert patch_head(model, clean, corrupted, 5, site, 2).item() == got.item()  # dropout off: the same twice
    assert model.training and not any(m._forward_hooks for m in model.modules())
    with pytest.raises(ValueError, match="same loss"):
        patch_head(model, clean, clean.clone(), 5, site, 2)
    with pytest.raises(ValueError, match=r"\(3, 10\).*\(3, 8\)"):
        patch_head(model, clean, corrupted[:, :8], 5, site, 2)


@pytest.mark.parametrize(("losses", "reading"), [
    ((0.18, 0.29, 4.3, 4.16), "redundant"), ((0.18, 0.2, 0.35, 4.16), "not needed"),
    ((0.5, 2.9, 3.1, 3.0), "each needed"), ((0.18, 0.3, 3.2, 4.16), "redundant")])
def test_ablation_reading_never_says_backup_for_heads_of_one_layer(losses, reading) -> None:
    assert ablation_reading(*losses) == reading


def test_direct_logit_attribution_adds_up_to_the_logits() -> None:
    for positions in ("relative", "learned"):
        torch.manual_seed(6)
        model = AttentionOnly(AttentionOnlySizes(vocab=13, context=16, d_model=12, n_heads=3, n_layers=2,
                                                 positions=positions))
        ids = repeated_tokens(3, 7, 13, torch.Generator().manual_seed(7))
        parts = direct_logit_attribution(model, ids)
        assert parts.shape == (1 + 2 * 3, 3, 14, 13)
        with torch.no_grad():
            assert torch.allclose(parts.sum(dim=0), model(ids), atol=1e-5)
    model = hand_built_induction()
    ids = repeated_tokens(2, 6, 8, torch.Generator().manual_seed(8))
    parts = direct_logit_attribution(model, ids)  # only head 1.0 writes where the unembedding reads
    assert parts[[0, 1, 2, 4]].abs().max() == 0.0 and parts[3].abs().max() > 0


def test_k_composition_finds_the_hand_built_heads_and_refuses_layers_out_of_order() -> None:
    scores = k_composition(hand_built_induction())  # head 1.0's keys read exactly what head 0.0 writes
    assert scores.shape == (2, 2) and scores[0, 0].item() == pytest.approx(1 / math.sqrt(8), rel=1e-5)
    assert scores[0, 1].isnan() or scores[0, 1] == 0  # an empty head: 0 / 0
    torch.manual_seed(0)
    random = k_composition(AttentionOnly(AttentionOnlySizes(vocab=64, context=48)))
    assert (random - 1 / 8).abs().max() < 0.05  # unrelated random matrices: about 1 / sqrt(d_model)
    with pytest.raises(ValueError, match="writer"):
        k_composition(hand_built_induction(), reader=0, writer=1)


def test_one_tensor_of_position_scores_is_the_bias_and_the_causal_mask() -> None:
    model = tiny_model(seed=5)
    layer = model.layers[0]
    scores = layer.position_scores(5)
    distance = torch.arange(5)[:, None] - torch.arange(5)[None, :]
    assert torch.isneginf(scores[:, distance < 0]).all()
    assert torch.equal(scores[:, distance >= 0], layer.distance_bias[:, distance.clamp(min=0)][:, distance >= 0])


def test_train_induction_also_records_the_steps_asked() -> None:
    torch.manual_seed(0)
    model = AttentionOnly(AttentionOnlySizes(vocab=8, context=12, d_model=8, n_heads=2))
    history = train_induction(model, RepeatTask(vocab=8, length=12, shortest=2, longest=4), steps=12, every=5,
                              also_at=range(6, 9), eval_size=4)
    assert history.eval_step == [0, 5, 6, 7, 8, 10, 12]
