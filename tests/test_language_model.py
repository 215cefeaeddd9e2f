"""Chapter 7's narrative model, ``attention_course.language_model``, and its measurements,
``attention_course.benchmark_generation``: the cache changes the speed, never the tokens, with learned or rotary
positions; a left-padded row writes what its prompt writes alone; beam search is exact when nothing is dropped;
pooling key/value heads groups them as SDPA does; sharing key/value heads shrinks the cache, as the allocator
measures it, by the expected factor; the peak and held counters see what is allocated; every attention path is
compared with an independent float64 reference; bad input is named."""

from __future__ import annotations

import pytest
import torch

from attention_course import benchmark_generation as bench
from attention_course.language_model import LMCache, LMSizes, TorchGPT, pool_kv_heads, train_lm
from attention_course.text import CharCorpus


def spread_model(seed: int = 0, **sizes) -> TorchGPT:
    """A small model whose logits and attention are spread out (GPT-2's N(0, 0.02) start makes every attention
    weight nearly uniform, so wrong keys or positions would hardly show), in eval mode."""
    torch.manual_seed(seed)
    model = TorchGPT(LMSizes(**{"vocab": 17, "context": 40, "d_model": 32, "n_heads": 4, "n_layers": 2, **sizes}))
    with torch.no_grad():
        model.wte.weight.normal_(std=0.7)
        if model.wpe is not None:
            model.wpe.weight.normal_(std=0.7)
        else:  # no position table to spread the logits: keep them from piling on one token
            model.ln_f.weight.fill_(0.3)
        for block in model.blocks:
            block.attn.qkv.weight.normal_(std=0.4)
    return model.eval()


def sampler(seed: int):
    g = torch.Generator().manual_seed(seed)
    return lambda logits: torch.multinomial(logits.softmax(dim=-1), 1, generator=g).squeeze(-1)


PROMPT = torch.randint(0, 17, (3, 5), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("n_kv_heads, positions", [(4, "learned"), (2, "learned"), (1, "learned"), (2, "rope")])
def test_cached_and_uncached_generation_make_the_same_tokens(n_kv_heads, positions) -> None:
    model = spread_model(n_kv_heads=n_kv_heads, positions=positions)
    greedy = [model.generate(PROMPT, 30, pick=lambda logits: logits.argmax(dim=-1), use_cache=c) for c in (True, False)]
    drawn = [model.generate(PROMPT, 30, pick=sampler(3), use_cache=c) for c in (True, False)]
    assert greedy[0].shape == (3, 35) and torch.equal(greedy[0][:, :5], PROMPT)
    assert torch.equal(greedy[0], greedy[1]), "greedy tokens differ with and without the cache"
    assert torch.equal(drawn[0], drawn[1]), "sampled tokens (same seed) differ with and without the cache"
    assert not torch.equal(drawn[0], greedy[0]), "the pick function was not used"


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_cached_logits_equal_a_full_pass_also_in_chunks(positions) -> None:
    model = spread_model(n_kv_heads=2, positions=positions)
    ids = torch.randint(0, 17, (2, 12), generator=torch.Generator().manual_seed(4))
    full = model(ids)
    cache = model.new_cache(2, 12)
    pieces = [model(ids[:, :5], cache), model(ids[:, 5:6], cache), model(ids[:, 6:], cache)]  # prompt, 1, several
    assert cache.length == 12
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
    changed = ids.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 17
    torch.testing.assert_close(model(changed)[:, :8], full[:, :8], msg="a position sees later tokens")


def test_the_output_layer_is_tied_to_the_token_embedding() -> None:
    model = spread_model()
    assert model.lm_head.weight is model.wte.weight
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in set(model.parameters()))


def left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``prompts`` (1-D ids of different lengths) left-padded with id 0 into ``(ids, real)``, ``(B, T0)`` each."""
    t0 = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), t0, dtype=torch.long)
    real = torch.zeros(len(prompts), t0, dtype=torch.bool)
    for row, p in enumerate(prompts):
        ids[row, t0 - len(p):], real[row, t0 - len(p):] = p, True
    return ids, real


@pytest.mark.parametrize("positions", ["learned", "rope"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_prompts_write_what_each_prompt_writes_alone(positions, use_cache) -> None:
    model = spread_model(positions=positions)
    prompts = [torch.randint(1, 17, (n,), generator=torch.Generator().manual_seed(n)) for n in (3, 8, 5)]
    ids, real = left_padded(prompts)
    greedy = lambda logits: logits.argmax(dim=-1)
    batched = model.generate(ids, 12, pick=greedy, use_cache=use_cache, real=real)
    for row, p in enumerate(prompts):
        alone = model.generate(p[None], 12, pick=greedy, use_cache=use_cache)
        assert torch.equal(batched[row, ids.shape[1]:], alone[0, len(p):]), f"prompt {row} ({len(p)} tokens)"
    drawn = model.generate(ids, 12, pick=sampler(5), real=real)
    assert torch.equal(drawn, model.generate(ids, 12, pick=sampler(5), real=real, use_cache=False))


def test_without_the_padding_mask_the_padded_rows_write_otherwise() -> None:
    model = spread_model()
    prompts = [torch.randint(1, 17, (n,), generator=torch.Generator().manual_seed(n)) for n in (3, 8)]
    ids, real = left_padded(prompts)
    masked, unmasked = model(ids, real=real), model(ids)
    torch.testing.assert_close(masked[1], unmasked[1], msg="the row without padding should not change")
    assert (masked[0, -3:] - unmasked[0, -3:]).abs().max() > 1e-2, "the padded row read its padding"


def test_rotary_positions_make_attention_depend_on_distances_only() -> None:
    """With RoPE and no position table, a text reads the same whatever position it starts at: the same ids after
    left padding (which shifts nothing) and after a cached prefix of padding give the same logits."""
    model = spread_model(positions="rope")
    assert model.wpe is None and model.cos.shape == (40, 8)
    ids = torch.randint(0, 17, (1, 9), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache(1, 20)
    model(torch.zeros(1, 6, dtype=torch.long), cache, torch.zeros(1, 6, dtype=torch.bool))  # six padding positions...
    cache.seen += 6  # ... counted as tokens, so the text's positions start at 6 (and it sees none of them)
    shifted = model(ids, cache)
    torch.testing.assert_close(shifted, model(ids), atol=1e-4, rtol=1e-4,
                               msg="rotary attention changed when the whole text moved by 6 positions")
    learned = spread_model()
    cache = learned.new_cache(1, 20)
    learned(torch.zeros(1, 6, dtype=torch.long), cache, torch.zeros(1, 6, dtype=torch.bool))
    cache.seen += 6
    assert (learned(ids, cache) - learned(ids)).abs().max() > 1e-2, "a learned table should see the shift"


def test_beam_search_is_exact_when_the_beam_holds_every_prefix() -> None:
    torch.manual_seed(3)
    model = TorchGPT(LMSizes(vocab=3, context=8, d_model=16, n_heads=2, n_layers=1))
    with torch.no_grad():
        model.wte.weight.normal_(std=1.0)
    prompt = torch.tensor([[0, 2]])

    def log_prob(seq: torch.Tensor) -> float:
        logp = model(seq[:, :-1]).log_softmax(dim=-1)[0, 1:]  # the scores of positions 2, 3, 4
        return logp.gather(-1, seq[0, 2:, None]).sum().item()

    every = [torch.cat([prompt, torch.tensor([[a, b, c]])], dim=1)
             for a in range(3) for b in range(3) for c in range(3)]
    best = max(every, key=log_prob)
    found = model.beam_search(prompt, 3, beams=9)  # 9 = 3^2 prefixes: nothing is ever dropped
    assert torch.equal(found, best), (found, best)
    narrow = model.beam_search(prompt, 3, beams=2)
    greedy = model.generate(prompt, 3, pick=lambda logits: logits.argmax(dim=-1))
    assert log_prob(narrow) >= log_prob(greedy) - 1e-6 and log_prob(best) >= log_prob(narrow) - 1e-6


def test_pooling_key_value_heads_averages_each_group_as_sdpa_pairs_them() -> None:
    model = spread_model(n_kv_heads=4)
    ids = torch.randint(0, 17, (2, 10), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(pool_kv_heads(model, 4)(ids), model(ids), msg="pooling to as many heads changes nothing")
    with torch.no_grad():  # make heads 2g and 2g + 1 identical in keys and values: pooling pairs loses nothing
        for block in model.blocks:
            qkv = block.attn.qkv
            kv = qkv.weight[32:].view(2, 2, 2, 8, 32)  # (keys/values, group, head in group, d_head, d_model)
            kv[:, :, 1] = kv[:, :, 0]
            qkv.bias[32:].view(2, 2, 2, 8)[:, :, 1] = qkv.bias[32:].view(2, 2, 2, 8)[:, :, 0]
    pooled = pool_kv_heads(model, 2)
    assert pooled.sizes.n_kv_heads == 2 and pooled.blocks[0].attn.qkv.out_features == (4 + 2 * 2) * 8
    torch.testing.assert_close(pooled(ids), model(ids), atol=1e-5, rtol=1e-5,
                               msg="query heads 2g, 2g + 1 must read pooled head g")
    assert not pooled.training and pooled.wte.weight is pooled.lm_head.weight
    assert (pool_kv_heads(model, 1)(ids) - model(ids)).abs().max() > 1e-3, "pooling different heads changes them"


@pytest.mark.parametrize("n_kv_heads, factor", [(8, 1), (2, 4), (1, 8)])
def test_sharing_key_value_heads_shrinks_the_measured_cache_by_the_group_size(n_kv_heads, factor) -> None:
    sizes = dict(vocab=11, context=64, d_model=64, n_heads=8, n_layers=3)
    full = bench.measured_cache_bytes(LMSizes(**sizes), 64)
    shared = bench.measured_cache_bytes(LMSizes(**sizes, n_kv_heads=n_kv_heads), 64)
    formula = bench.kv_cache_bytes(3, n_kv_heads, 8, 64, 1, 4)
    bookkeeping = 64 + 8  # which of the 64 positions are padding (bool), how many tokens the sequence has read
    assert shared == formula + bookkeeping, "the allocator should hold the buffers and the bookkeeping, nothing else"
    assert full - bookkeeping == factor * (shared - bookkeeping)
    model = TorchGPT(LMSizes(**sizes, n_kv_heads=n_kv_heads))
    assert model.new_cache(1, 64).keys.shape == (3, 1, n_kv_heads, 64, 8)
    attn = model.blocks[0].attn
    assert attn.qkv.out_features == (8 + 2 * n_kv_heads) * 8, "the fused projection makes n_kv_heads keys and values"


def test_the_measured_cache_follows_the_formula_for_several_sizes_and_sees_unused_capacity() -> None:
    for layers, heads, kv, d_model, t, batch in ((1, 2, 1, 8, 5, 1), (2, 4, 2, 32, 17, 3), (3, 6, 3, 24, 9, 2)):
        sizes = LMSizes(vocab=7, context=2 * t, d_model=d_model, n_heads=heads, n_kv_heads=kv, n_layers=layers)
        formula = bench.kv_cache_bytes(layers, kv, d_model // heads, t, batch)
        assert bench.measured_cache_bytes(sizes, t, batch) == formula + batch * t + 8 * batch
        preallocated = bench.measured_cache_bytes(sizes, t, batch, capacity=2 * t)
        assert preallocated == 2 * formula + 2 * batch * t + 8 * batch, "a buffer made for 2T positions holds 2T"
    assert bench.kv_cache_bytes(2, 4, 16, 0) == 0
    assert bench.kv_cache_bytes(2, 4, 16, 10, 1, 2) == 2 * bench.kv_cache_bytes(2, 4, 16, 10, 1, 1)


def test_published_configurations_give_the_known_cache_sizes_and_crossovers() -> None:
    models = {m.name: m for m in bench.MODELS}
    assert models["Llama 2 7B"].cache_bytes_per_token() == 512 * 2**10  # 2 · 32 layers · 32 heads · 128 · 2 bytes
    assert models["Llama 3 8B"].cache_bytes_per_token() == 128 * 2**10  # 8 key/value heads: a quarter
    assert round(models["Llama 2 7B"].crossover_tokens(), -3) == 26_000  # 13.5 GB of weights / 0.5 MiB per token
    assert 120_000 < models["Llama 3 8B"].crossover_tokens() < 125_000
    table = bench.models_table()
    assert all(name in table for name in models) and "25,711" in table


def test_the_peak_counter_sees_a_planted_allocation_and_its_release() -> None:
    size = 3 << 20

    def plant():
        x = torch.ones(size, dtype=torch.uint8)  # 3 MiB, freed before the next one
        del x
        y = torch.ones(size // 3, dtype=torch.uint8)  # 1 MiB, returned
        return y

    peak, out = bench.peak_bytes(plant)
    assert out.numel() == size // 3
    assert size <= peak < size + (1 << 20), f"the peak should be the 3 MiB buffer alone, got {peak}"
    twice, _ = bench.peak_bytes(lambda: [torch.ones(size, dtype=torch.uint8) for _ in range(2)])
    assert twice >= 2 * size, "two live buffers must add up"
    none, _ = bench.peak_bytes(lambda: PROMPT.view(-1))
    assert none == 0, "a view allocates nothing"


def test_the_held_counter_sees_what_the_call_keeps_and_not_what_it_freed() -> None:
    size = 3 << 20

    def keep_one():
        scratch = torch.ones(size, dtype=torch.uint8)
        del scratch
        return torch.ones(size // 3, dtype=torch.uint8)

    held, out = bench.held_bytes(keep_one)
    assert held == size // 3 == out.numel()
    peak, _ = bench.peak_bytes(keep_one)
    assert peak >= size > held


def test_the_peak_counter_sees_inside_the_fused_kernel_and_the_full_matrix() -> None:
    rows = bench.attention_memory(bench.ATTENTION_PATHS, [64, 256], heads=2, d_head=16, time_it=False)
    by = {(r.name, r.T): r for r in rows}
    for t in (64, 256):
        full, fused = by[("full", t)], by[("fused (SDPA)", t)]
        assert full.peak_bytes >= 2 * t * t * 4, "full attention holds (2, T, T) float32 scores"
        assert fused.peak_bytes >= 2 * t * 16 * 4, "the fused kernel allocates at least its output"
        assert fused.peak_bytes < full.peak_bytes
        assert 0 < full.max_error < 1e-5 and 0 < fused.max_error < 1e-5 and full.ms is None
    assert " ms" not in bench.memory_table(rows), "columns of times that were not measured"


def test_the_operators_a_call_runs_are_named() -> None:
    q, kv = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
    shared = bench.operators_run(lambda: torch.nn.functional.scaled_dot_product_attention(q, kv, kv, enable_gqa=True))
    assert "aten::scaled_dot_product_attention" in shared
    copied = bench.operators_run(lambda: kv.repeat_interleave(2, dim=1))
    assert "aten::repeat_interleave" in copied and "aten::scaled_dot_product_attention" not in copied


def test_the_float64_reference_catches_a_path_that_is_not_causal() -> None:
    paths = {"not causal": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
             "causal": bench.sdpa_attention}
    rows = {r.name: r for r in bench.attention_memory(paths, [32], heads=2, d_head=8, time_it=False)}
    assert rows["not causal"].max_error > 0.1 and rows["causal"].max_error < 1e-5


def test_autograd_keeps_the_full_matrices_for_the_backward_pass_and_the_fused_kernel_does_not() -> None:
    forward = {(r.name, r.T): r for r in bench.attention_memory(bench.ATTENTION_PATHS, [256], heads=2, d_head=16,
                                                                  time_it=False)}
    both = {(r.name, r.T): r for r in bench.attention_memory(bench.ATTENTION_PATHS, [256], heads=2, d_head=16,
                                                               time_it=False, backward=True)}
    assert both[("full", 256)].peak_bytes > forward[("full", 256)].peak_bytes + 2 * 256 * 256 * 4
    assert both[("fused (SDPA)", 256)].peak_bytes < 2 * 256 * 256 * 4, "the fused backward holds no (T, T) matrix"
    assert both[("full", 256)].max_error < 1e-5


def test_generation_speed_reports_what_it_timed() -> None:
    model = spread_model()
    calls = []

    def make(n, use_cache):
        calls.append((n, use_cache))
        return model.generate(PROMPT[:1], n, pick=sampler(0), use_cache=use_cache)

    rows = bench.generation_speed(make, [4, 8], repeats=1, budget_s=0.1)
    assert [r.new_tokens for r in rows] == [4, 8] and all(r.same_tokens for r in rows)
    assert (4, True) in calls and (8, False) in calls
    assert all(r.cached_rate == r.new_tokens / r.cached_s and r.speed_up > 0 for r in rows)
    assert "same tokens" in bench.speed_table(rows)
    different = bench.generation_speed(lambda n, c: torch.tensor([n, int(c)]), [3], repeats=1, budget_s=0.1)
    assert not different[0].same_tokens and "NO" in bench.speed_table(different)


def test_prefill_and_decode_read_the_same_positions_and_agree() -> None:
    model = spread_model()
    rows = bench.prefill_and_decode(model, 12, (1, 3), repeats=1)
    assert [(r.batch, r.tokens) for r in rows] == [(1, 12), (3, 12)]
    assert all(r.max_difference < 1e-4 and r.prefill_s > 0 and r.decode_s > 0 for r in rows)
    assert rows[0].step_ms == 1e3 * rows[0].decode_s / 12 and "decode ÷ prefill" in bench.phase_table(rows)


def test_training_lowers_the_held_out_loss() -> None:
    corpus = CharCorpus("the cat sat on the mat. " * 200, held_out_share=0.2, chunk=100)
    torch.manual_seed(0)
    model = TorchGPT(LMSizes(vocab=len(corpus), context=16, d_model=32, n_heads=4, n_layers=1))
    history = train_lm(model, corpus, steps=60, batch_size=16, eval_every=30, eval_batches=2)
    assert len(history.train_loss) == 60 and history.held_out_step == [30, 60] and len(history.train_eval_loss) == 2
    assert history.held_out_loss[-1] < 0.5 * history.train_loss[0], history.held_out_loss


def test_bad_input_raises_value_error_naming_it() -> None:
    model = spread_model()
    with pytest.raises(ValueError, match="n_kv_heads=3 is not a divisor of n_heads=4"):
        LMSizes(vocab=5, d_model=8, n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="must divide d_model"):
        LMSizes(vocab=5, d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="context of 40"):
        model.generate(PROMPT, 36, pick=sampler(0))
    with pytest.raises(ValueError, match="run past the context of 40"):
        model(torch.zeros(1, 41, dtype=torch.long))
    cache = model.new_cache(3, 6)
    model(PROMPT, cache)
    with pytest.raises(ValueError, match="run past the cache of 6"):
        model(PROMPT[:, :2], cache)
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="capacity"):
        LMCache(model.sizes, 1, 41)
    with pytest.raises(ValueError, match="LMSizes"):
        TorchGPT({"vocab": 5})
    with pytest.raises(ValueError, match="length <= capacity <= context=40"):
        bench.measured_cache_bytes(model.sizes, 41)
    with pytest.raises(ValueError, match="tokens must be in"):
        bench.prefill_and_decode(model, 41)
    with pytest.raises(ValueError, match="real must be booleans"):
        model(PROMPT, real=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="positions must be one of"):
        LMSizes(vocab=5, d_model=8, n_heads=4, positions="sinusoidal")
    with pytest.raises(ValueError, match="d_head = 3 must be even"):
        LMSizes(vocab=5, d_model=12, n_heads=4, positions="rope")
    with pytest.raises(ValueError, match="beams=1"):
        model.beam_search(PROMPT[:1], 3, beams=1)
    with pytest.raises(ValueError, match="one prompt"):
        model.beam_search(PROMPT, 3)
    with pytest.raises(ValueError, match="must divide the model's 4 key/value heads"):
        pool_kv_heads(model, 3)
    with pytest.raises(ValueError, match="at least 1"):
        bench.kv_cache_bytes(0, 1, 1, 1)
    with pytest.raises(ValueError, match="new_tokens"):
        bench.generation_speed(lambda n, c: PROMPT, [0])
    with pytest.raises(ValueError, match="attention function"):
        bench.attention_memory({}, [8])
    with pytest.raises(ValueError, match="steps"):
        train_lm(model, None, steps=0)


def test_the_cuda_peak_is_the_allocators_peak_above_what_was_there_before(monkeypatch) -> None:
    """No test machine has a GPU: drive the CUDA branch with the allocator's counters stood in for, as far as a CPU
    allows (the order of the calls, and the arithmetic the chapter's figure reads)."""
    calls = []
    counters = {"allocated": 300, "peak": 300}

    def run():
        calls.append("run")
        counters["peak"] = 300 + 4096  # the call allocates 4 KiB at its peak and frees them
        return "out"

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device=None: calls.append("reset") or counters.update(peak=counters["allocated"]))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: counters["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: counters["peak"])
    peak, out = bench.peak_bytes(run, device="cuda")
    assert (peak, out) == (4096, "out")
    assert calls == ["sync", "reset", "run", "sync"], "the peak must be reset before the call and read after a sync"
