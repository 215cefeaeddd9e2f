"""The concept checks' reference answers, measured on the reference code itself: each answer must be what the
course's own modules do, not only what its author believes (a wrong reference would grade every learner who
answers rightly as wrong, and the catalogue alone cannot see it, since it judges against the reference)."""

from __future__ import annotations

import pytest
import torch

from solutions import (
    cross_attention,
    flash_attention,
    gpt,
    masking,
    multi_head,
    positional,
    self_attention,
    transformer,
)


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("query", "key"), [(0, 1), (3, 7), (6, 2)])
def test_score_position_is_where_the_scores_hold_that_dot_product(query, key) -> None:
    q, k = randn(8, 4, seed=1), randn(8, 4, seed=2)
    scores = self_attention.attention_scores(q, k)
    row, column = self_attention.score_position(query, key)
    assert torch.isclose(scores[row, column], q[query] @ k[key] / 2.0)
    assert not torch.isclose(scores[column, row], q[query] @ k[key] / 2.0)  # K Qᵀ is not the same


@pytest.mark.parametrize("n", [1, 9, 50])
def test_score_count_is_the_number_of_scores(n) -> None:
    _, weights = self_attention.SelfAttention(16, 8)(randn(1, n, 16, seed=3))
    assert self_attention.score_count(n) == weights[0].numel()


@pytest.mark.parametrize(("n", "d"), [(5, 512), (1, 64), (9, 32)])
def test_masked_attention_shapes_are_those_of_causal_attention(n, d) -> None:
    out, weights = masking.CausalSelfAttention(d, d)(randn(1, n, d, seed=4))
    assert masking.masked_attention_shapes(n, d) == (tuple(weights.shape[1:]), tuple(out.shape[1:]))


@pytest.mark.parametrize(("tokens", "pad_id"), [([1, 2, 0, 0, 0], 0), ([5, 3, 9, 7, 0, 0], 0),
                                                 ([4, 4, 1, 1, 1, 1], 1), ([6, 2, 7, 0], 0)])
def test_visible_keys_are_the_combined_masks_row(tokens, pad_id) -> None:
    t = torch.tensor([tokens])
    mask = masking.combine_masks(masking.causal_mask(len(tokens)), masking.padding_mask(t, pad_id))  # (1, T, T)
    for query in range(len(tokens)):
        allowed = tuple(int(j) for j in mask[0, query].nonzero().flatten())
        assert masking.visible_keys(tokens, pad_id, query) == allowed, query


@pytest.mark.parametrize("lengths", [[4], [4, 2], [7, 3, 3, 1], [12, 5, 8]])
def test_loss_positions_are_the_non_pad_targets_of_the_teacher_forcing_pair(lengths) -> None:
    pad, start, end = 0, 1, 2
    tgt = torch.full((len(lengths), max(lengths)), pad)
    for row, length in enumerate(lengths):
        tgt[row, :length] = torch.arange(3, 3 + length)
    _, tgt_out = cross_attention.teacher_forcing_pair(tgt, start, end, pad)
    assert cross_attention.loss_positions(lengths) == int((tgt_out != pad).sum())


@pytest.mark.parametrize(("t_tgt", "t_src"), [(5, 7), (3, 11), (12, 2)])
def test_cross_weights_shape_is_that_of_cross_attention(t_tgt, t_src) -> None:
    _, weights = cross_attention.CrossAttention(8, 4)(randn(1, t_tgt, 8, seed=5), randn(1, t_src, 8, seed=6))
    assert cross_attention.cross_weights_shape(t_tgt, t_src) == tuple(weights.shape[1:])


@pytest.mark.parametrize(("n", "d_model", "n_heads"), [(9, 768, 12), (3, 60, 5), (20, 256, 1)])
def test_head_query_shape_is_one_head_of_split_heads(n, d_model, n_heads) -> None:
    heads = multi_head.split_heads(randn(1, n, d_model, seed=7), n_heads)  # (1, n_heads, T, d_head)
    assert multi_head.head_query_shape(n, d_model, n_heads) == tuple(heads[0, 0].shape)


@pytest.mark.parametrize(("d_model", "n_heads"), [(768, 12), (768, 1), (512, 8), (100, 5)])
def test_attention_parameters_are_the_modules_parameters(d_model, n_heads) -> None:
    module = multi_head.MultiHeadAttention(d_model, n_heads)
    assert multi_head.attention_parameters(d_model, n_heads) == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(("batch", "n", "d"), [(2, 10, 512), (3, 7, 64), (1, 1, 2)])
def test_encoded_shape_is_the_encodings_output(batch, n, d) -> None:
    out = positional.SinusoidalPositionalEncoding(d, max_len=64)(randn(batch, n, d, seed=8))
    assert positional.encoded_shape(batch, n, d) == tuple(out.shape)


@pytest.mark.parametrize(("a", "b"), [
    ("dog bites man", "man bites dog"),
    ("to be or not to be", "to be or not not be"),
    ("a b a", "a a b"),
    ("the cat sat", "the cat sat down"),
    ("x y z w", "w z y x"),
])
def test_same_without_positions_is_what_self_attention_does(a, b) -> None:
    words = sorted(set(a.split()) | set(b.split()))
    table = randn(len(words), 16, seed=9)
    attention = self_attention.SelfAttention(16, 16)

    def outputs(sentence: str) -> dict[str, torch.Tensor]:
        x = table[[words.index(w) for w in sentence.split()]].unsqueeze(0)  # no positions: the word alone
        out, _ = attention(x)
        return {w: out[0, i] for i, w in enumerate(sentence.split())}

    with torch.no_grad():
        first, second = outputs(a), outputs(b)
    same = first.keys() == second.keys() and all(torch.allclose(first[w], second[w], atol=1e-6) for w in first)
    assert positional.same_without_positions(a.split(), b.split()) == same


class _Counting(transformer.Transformer):
    calls = 0

    def decode(self, *args, **kwargs):
        type(self).calls += 1
        return super().decode(*args, **kwargs)


@pytest.mark.parametrize("n", [3, 7])
def test_decoder_passes_and_scored_positions_are_what_training_and_greedy_decoding_do(n) -> None:
    torch.manual_seed(0)
    config = transformer.TransformerConfig(src_vocab=11, tgt_vocab=11, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                           dropout=0.0, max_len=32)
    model = _Counting(config).eval()
    src, tgt_in = torch.randint(3, 11, (1, 5)), torch.randint(3, 11, (1, n))
    _Counting.calls = 0
    logits = model(src, tgt_in)  # training: one pass gives a prediction at every position
    training_passes = _Counting.calls
    training_positions = tuple(range(logits.shape[1]))
    # greedy decoding that never meets <end> (end_id outside the vocabulary) produces n tokens after <start>
    _Counting.calls = 0
    with torch.no_grad():
        out = transformer.greedy_decode(model, src, start_id=1, end_id=99, max_len=n + 1)
    assert out.shape[1] == n + 1
    assert transformer.decoder_passes(n) == (training_passes, _Counting.calls)
    # generating: the next token is the argmax of the last position's logits
    with torch.no_grad():
        prefix = out[:, :n]
        last = model(src, prefix)[0, -1].argmax()
    training, generating = transformer.scored_positions(n)
    assert training == training_positions
    assert generating == n - 1 and int(last) == int(out[0, n])


@pytest.mark.parametrize(("n_layers", "batch", "n_heads", "n_kv_heads", "steps"), [(2, 3, 4, 2, (5, 1, 1)),
                                                                                     (1, 1, 6, 1, (3,)),
                                                                                     (3, 2, 4, 4, (2, 2))])
def test_kv_cache_elements_is_what_the_cache_holds(n_layers, batch, n_heads, n_kv_heads, steps) -> None:
    config = gpt.GPTConfig(vocab=11, d_model=8 * n_heads, n_heads=n_heads, n_kv_heads=n_kv_heads, n_layers=n_layers,
                           d_ff=16, max_len=32)
    model = gpt.GPT(config).eval()
    cache = gpt.KVCache(n_layers)
    with torch.no_grad():
        for t in steps:
            model(torch.randint(0, 11, (batch, t)), cache)
    held = sum(tensor.numel() for tensor in (*cache.keys, *cache.values))
    assert gpt.kv_cache_elements(n_layers, batch, n_heads, n_kv_heads, sum(steps), 8) == held


class _CountingGPT(gpt.GPT):
    positions = 0

    def forward(self, tokens, cache=None):
        type(self).positions += tokens.shape[1]
        return super().forward(tokens, cache)


@pytest.mark.parametrize(("prompt_len", "new_tokens"), [(5, 4), (1, 1), (3, 0), (7, 9)])
@pytest.mark.parametrize("use_cache", [True, False])
def test_positions_processed_are_the_positions_generate_feeds(prompt_len, new_tokens, use_cache) -> None:
    model = _CountingGPT(gpt.GPTConfig(vocab=11, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=32))
    _CountingGPT.positions = 0
    out = gpt.generate(model, torch.randint(0, 11, (2, prompt_len)), new_tokens, use_cache=use_cache,
                       generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, prompt_len + new_tokens)
    assert flash_attention.positions_processed(prompt_len, new_tokens, use_cache) == _CountingGPT.positions
