"""Chapter 7's narrative model, ``attention_course.language_model``, and its measurements,
``attention_course.benchmark_generation``: the cache changes the speed, never the tokens; sharing key/value
heads shrinks the cache by the expected factor; the peak counter sees what is allocated; bad input is named."""

from __future__ import annotations

import pytest
import torch

from attention_course import benchmark_generation as bench
from attention_course.language_model import LMCache, LMSizes, TorchGPT, train_lm
from attention_course.text import CharCorpus


def spread_model(seed: int = 0, **sizes) -> TorchGPT:
    """A small model whose logits and attention are spread out (GPT-2's N(0, 0.02) start makes every attention
    weight nearly uniform, so wrong keys would hardly show), in eval mode."""
    torch.manual_seed(seed)
    model = TorchGPT(LMSizes(**{"vocab": 17, "context": 40, "d_model": 32, "n_heads": 4, "n_layers": 2, **sizes}))
    with torch.no_grad():
        model.wte.weight.normal_(std=0.7)
        model.wpe.weight.normal_(std=0.7)
        for block in model.blocks:
            block.attn.qkv.weight.normal_(std=0.4)
    return model.eval()


def sampler(seed: int):
    g = torch.Generator().manual_seed(seed)
    return lambda logits: torch.multinomial(logits.softmax(dim=-1), 1, generator=g).squeeze(-1)


PROMPT = torch.randint(0, 17, (3, 5), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cached_and_uncached_generation_make_the_same_tokens(n_kv_heads) -> None:
    model = spread_model(n_kv_heads=n_kv_heads)
    greedy = [model.generate(PROMPT, 30, pick=lambda logits: logits.argmax(dim=-1), use_cache=c) for c in (True, False)]
    drawn = [model.generate(PROMPT, 30, pick=sampler(3), use_cache=c) for c in (True, False)]
    assert greedy[0].shape == (3, 35) and torch.equal(greedy[0][:, :5], PROMPT)
    assert torch.equal(greedy[0], greedy[1]), "greedy tokens differ with and without the cache"
    assert torch.equal(drawn[0], drawn[1]), "sampled tokens (same seed) differ with and without the cache"
    assert not torch.equal(drawn[0], greedy[0]), "the pick function was not used"


def test_cached_logits_equal_a_full_pass_also_in_chunks() -> None:
    model = spread_model(n_kv_heads=2)
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


@pytest.mark.parametrize("n_kv_heads, factor", [(8, 1), (2, 4), (1, 8)])
def test_sharing_key_value_heads_shrinks_the_cache_by_the_group_size(n_kv_heads, factor) -> None:
    sizes = dict(vocab=11, context=64, d_model=64, n_heads=8, n_layers=3)
    full = bench.filled_cache_bytes(LMSizes(**sizes), 64)
    shared = bench.filled_cache_bytes(LMSizes(**sizes, n_kv_heads=n_kv_heads), 64)
    assert full == factor * shared
    assert shared == bench.kv_cache_bytes(3, n_kv_heads, 8, 64, 1, 4)
    model = TorchGPT(LMSizes(**sizes, n_kv_heads=n_kv_heads))
    assert model.new_cache(1, 64).keys.shape == (3, 1, n_kv_heads, 64, 8)
    attn = model.blocks[0].attn
    assert attn.qkv.out_features == (8 + 2 * n_kv_heads) * 8, "the fused projection makes n_kv_heads keys and values"


def test_the_cache_formula_equals_the_filled_cache_for_several_sizes() -> None:
    for layers, heads, kv, d_model, t, batch in ((1, 2, 1, 8, 5, 1), (2, 4, 2, 32, 17, 3), (3, 6, 3, 24, 9, 2)):
        sizes = LMSizes(vocab=7, context=t, d_model=d_model, n_heads=heads, n_kv_heads=kv, n_layers=layers)
        assert bench.filled_cache_bytes(sizes, t, batch) == bench.kv_cache_bytes(layers, kv, d_model // heads, t, batch)
    assert bench.kv_cache_bytes(2, 4, 16, 0) == 0
    assert bench.kv_cache_bytes(2, 4, 16, 10, 1, 2) == 2 * bench.kv_cache_bytes(2, 4, 16, 10, 1, 1)


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


def test_the_peak_counter_sees_inside_the_fused_kernel_and_the_full_matrix() -> None:
    rows = bench.attention_memory(bench.ATTENTION_PATHS, [64, 256], heads=2, d_head=16, time_it=False)
    by = {(r.name, r.T): r for r in rows}
    for t in (64, 256):
        full, fused = by[("full", t)], by[("fused (SDPA)", t)]
        assert full.peak_bytes >= 2 * t * t * 4, "full attention holds (2, T, T) float32 scores"
        assert fused.peak_bytes >= 2 * t * 16 * 4, "the fused kernel allocates at least its output"
        assert fused.peak_bytes < full.peak_bytes
        assert full.max_error < 1e-5 and fused.max_error < 1e-5 and full.ms is None


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


def test_training_lowers_the_held_out_loss() -> None:
    corpus = CharCorpus("the cat sat on the mat. " * 200, held_out_share=0.2)
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
    with pytest.raises(ValueError, match="length must be in"):
        bench.filled_cache_bytes(model.sizes, 41)
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
