"""The chapter 6 reference, `solutions.transformer`, against PyTorch's nn.Transformer* layers and its own contract."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solutions.masking import causal_mask, combine_masks
from solutions.multi_head import MultiHeadAttention
from solutions.positional import sinusoidal_encoding
from solutions.transformer import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    Transformer,
    TransformerConfig,
    beam_search,
    greedy_decode,
    label_smoothed_cross_entropy,
    noam_lr,
)

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def scramble_norms(module: nn.Module, seed: int) -> None:
    """LayerNorms with weights other than 1 and 0, so that a norm in the wrong place shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))


def copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.load_state_dict(ours.w_o.state_dict())


def torch_twin(layer: EncoderLayer | DecoderLayer) -> nn.Module:
    """nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (batch_first, dropout 0) with ``layer``'s weights."""
    d_model, n_heads = layer.self_attn.d_model, layer.self_attn.n_heads
    d_ff = layer.ff.linear1.out_features
    kind = nn.TransformerDecoderLayer if isinstance(layer, DecoderLayer) else nn.TransformerEncoderLayer
    twin = kind(d_model, n_heads, d_ff, dropout=0.0, batch_first=True, norm_first=layer.norm_first)
    copy_attention(layer.self_attn, twin.self_attn)
    twin.linear1.load_state_dict(layer.ff.linear1.state_dict())
    twin.linear2.load_state_dict(layer.ff.linear2.state_dict())
    norms = ("norm1", "norm2")
    if isinstance(layer, DecoderLayer):
        copy_attention(layer.cross_attn, twin.multihead_attn)
        norms += ("norm3",)
    for name in norms:
        getattr(twin, name).load_state_dict(getattr(layer, name).state_dict())
    return twin


def lengths_mask(lengths: list[int], t: int) -> Tensor:
    """``(B, T)``: True on the first ``lengths[b]`` positions of row ``b`` (the real tokens)."""
    return torch.arange(t) < torch.tensor(lengths)[:, None]


def small_config(**changes) -> TransformerConfig:
    sizes = dict(src_vocab=11, tgt_vocab=13, d_model=16, n_heads=4, n_layers=2, d_ff=24, dropout=0.0, max_len=20)
    return TransformerConfig(**{**sizes, **changes})


def tokens(rows: list[list[int]]) -> Tensor:
    return torch.tensor(rows, dtype=torch.long)


SRC = tokens([[5, 6, 7, 8, 9, 10, 3], [4, 4, 9, 0, 0, 0, 0], [3, 7, 0, 0, 0, 0, 0]])
TGT_IN = tokens([[1, 5, 6, 7, 8], [1, 9, 12, 0, 0], [1, 3, 0, 0, 0]])


# ---------------------------------------------------------------- FeedForward


def by_hand(ff: FeedForward, x: Tensor) -> Tensor:
    """linear2(relu(linear1(x))) from the weights, without dropout."""
    return F.linear(torch.relu(F.linear(x, ff.linear1.weight, ff.linear1.bias)), ff.linear2.weight, ff.linear2.bias)


def test_feed_forward_is_linear_relu_dropout_linear() -> None:
    torch.manual_seed(0)
    ff = FeedForward(12, 20)
    assert [tuple(m.weight.shape) for m in ff.modules() if isinstance(m, nn.Linear)] == [(20, 12), (12, 20)]
    x = randn(2, 5, 12, seed=1)
    expected = by_hand(ff, x)
    torch.testing.assert_close(ff(x), expected)
    torch.testing.assert_close(ff(x[0, 0]), expected[0, 0])  # any leading axes: one position at a time


def test_feed_forward_dropout_sits_between_the_relu_and_the_second_linear() -> None:
    torch.manual_seed(0)
    ff = FeedForward(12, 20, dropout=1.0)
    x = randn(2, 5, 12, seed=2)
    torch.testing.assert_close(ff(x), ff.linear2.bias.expand(2, 5, 12))  # every hidden unit dropped
    ff.eval()
    torch.testing.assert_close(ff(x), by_hand(ff, x))  # in eval mode even p = 1 drops nothing
    half = FeedForward(12, 20, dropout=0.5)
    half.eval()
    out = half(x)
    torch.testing.assert_close(out, by_hand(half, x))  # no randomness in eval mode
    half.train()
    assert not torch.allclose(half(x), out)


# ---------------------------------------------------------------- the layers against PyTorch


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first) -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(16, 4, 24, dropout=0.0, norm_first=norm_first)
    scramble_norms(layer, seed=3)
    twin = torch_twin(layer)
    x = randn(3, 6, 16, seed=4)
    keep = lengths_mask([6, 4, 1], 6)  # (B, T): True at the real tokens
    torch.testing.assert_close(layer(x), twin(x))
    # PyTorch's boolean masks mean the opposite: True = may NOT attend; its key_padding_mask is True at the pads
    torch.testing.assert_close(layer(x, keep[:, None, :]), twin(x, src_key_padding_mask=~keep))
    causal = causal_mask(6)
    torch.testing.assert_close(layer(x, causal), twin(x, src_mask=~causal))
    layer.eval(), twin.eval()
    with torch.no_grad():  # PyTorch's fast path (nested tensors) returns 0 at the pads: compare the real tokens
        torch.testing.assert_close(layer(x, keep[:, None, :])[keep], twin(x, src_key_padding_mask=~keep)[keep])


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first) -> None:
    torch.manual_seed(0)
    layer = DecoderLayer(16, 4, 24, dropout=0.0, norm_first=norm_first)
    scramble_norms(layer, seed=5)
    twin = torch_twin(layer)
    x, memory = randn(3, 5, 16, seed=6), randn(3, 7, 16, seed=7)
    tgt_keep, src_keep = lengths_mask([5, 3, 2], 5), lengths_mask([7, 4, 2], 7)
    torch.testing.assert_close(layer(x, memory), twin(x, memory))
    tgt_mask = combine_masks(causal_mask(5), tgt_keep[:, None, :])  # (B, T_tgt, T_tgt)
    torch.testing.assert_close(
        layer(x, memory, tgt_mask, src_keep[:, None, :]),
        twin(x, memory, tgt_mask=~causal_mask(5), tgt_key_padding_mask=~tgt_keep, memory_key_padding_mask=~src_keep),
    )


@pytest.mark.filterwarnings("ignore:.*nested.tensor:UserWarning")
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_wires_the_layers_as_torch_does(norm_first) -> None:
    """Our stacks against nn.Transformer's (final norms only with pre-norm), on our embeddings, with all masks."""
    torch.manual_seed(0)
    model = Transformer(small_config(norm_first=norm_first)).eval()
    scramble_norms(model, seed=8)
    c = model.config
    twin = nn.Transformer(c.d_model, c.n_heads, c.n_layers, c.n_layers, c.d_ff, dropout=0.0, batch_first=True,
                          norm_first=norm_first).eval()
    for ours, theirs in zip([*model.encoder_layers, *model.decoder_layers], [*twin.encoder.layers,
                                                                            *twin.decoder.layers], strict=True):
        for name, part in torch_twin(ours).named_children():
            setattr(theirs, name, part)
    if norm_first:
        twin.encoder.norm.load_state_dict(model.encoder_norm.state_dict())
        twin.decoder.norm.load_state_dict(model.decoder_norm.state_dict())
    else:  # nn.Transformer always ends each stack in a LayerNorm; the post-norm of the paper does not
        twin.encoder.norm = twin.decoder.norm = None
    pe = sinusoidal_encoding(c.max_len, c.d_model)
    src_x = model.src_embed(SRC) * c.d_model**0.5 + pe[:SRC.shape[1]]
    tgt_x = model.tgt_embed(TGT_IN) * c.d_model**0.5 + pe[:TGT_IN.shape[1]]
    src_pad, tgt_pad = SRC == c.pad_id, TGT_IN == c.pad_id
    with torch.no_grad():
        memory = twin.encoder(src_x, src_key_padding_mask=src_pad)
        expected = model.out(twin.decoder(tgt_x, memory, tgt_mask=~causal_mask(TGT_IN.shape[1]),
                                          tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad))
        real = ~src_pad  # the fast path of nn.TransformerEncoder leaves zeros at the pads
        torch.testing.assert_close(model.encode(SRC)[real], memory[real])
        torch.testing.assert_close(model(SRC, TGT_IN), expected)


# ---------------------------------------------------------------- the readable and the fused attention paths


@pytest.fixture
def fused_calls(monkeypatch) -> list[tuple]:
    """The shapes of q at every call of F.scaled_dot_product_attention (the fused path) during the test."""
    calls: list[tuple] = []
    real = F.scaled_dot_product_attention

    def counted(q, *args, **kwargs):
        calls.append(tuple(q.shape))
        return real(q, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counted)
    return calls


def test_manual_and_fused_attention_agree_forward_and_backward(fused_calls) -> None:
    torch.manual_seed(0)
    for norm_first in (False, True):
        manual = Transformer(small_config(norm_first=norm_first)).double()
        fused = Transformer(small_config(norm_first=norm_first, fused_attention=True)).double()
        with torch.no_grad():  # initialised with other weights: only the load makes the two the same function
            assert not torch.allclose(fused(SRC, TGT_IN), manual(SRC, TGT_IN))
        scramble_norms(manual, seed=9)
        fused.load_state_dict(manual.state_dict())
        assert all(layer.fused_attention for layer in [*fused.encoder_layers, *fused.decoder_layers])
        results = []
        for model in (manual, fused):
            fused_calls.clear()
            logits = model(SRC, TGT_IN)
            # the fused model really takes the fused path: once per encoder layer, twice per decoder layer
            assert len(fused_calls) == (3 * model.config.n_layers if model is fused else 0), fused_calls
            (logits * randn(*logits.shape, seed=10, dtype=torch.float64)).sum().backward()
            results.append((logits.detach(), {n: p.grad for n, p in model.named_parameters()}))
        (slow, slow_grads), (fast, fast_grads) = results
        torch.testing.assert_close(fast, slow)
        assert slow_grads.keys() == fast_grads.keys()
        for name in slow_grads:
            torch.testing.assert_close(fast_grads[name], slow_grads[name], msg=name)


def test_layers_switch_paths_at_run_time(fused_calls) -> None:
    torch.manual_seed(0)
    layer = DecoderLayer(16, 4, 24, dropout=0.0)
    x, memory = randn(2, 5, 16, seed=11), randn(2, 3, 16, seed=12)
    tgt_mask, memory_mask = causal_mask(5), lengths_mask([3, 2], 3)[:, None, :]
    slow = layer(x, memory, tgt_mask, memory_mask)
    assert fused_calls == [], "the readable path called the fused kernel"
    layer.fused_attention = True
    torch.testing.assert_close(layer(x, memory, tgt_mask, memory_mask), slow)
    assert fused_calls == [(2, 4, 5, 4)] * 2, "after the switch, self- and cross-attention take the fused path"


# ---------------------------------------------------------------- the Transformer's contract


def test_shapes_and_config() -> None:
    config = small_config()
    model = Transformer(config)
    assert model.config is config
    memory = model.encode(SRC)
    assert memory.shape == (3, 7, 16)
    assert model.decode(TGT_IN, memory, SRC).shape == (3, 5, 13)
    assert model(SRC, TGT_IN).shape == (3, 5, 13)
    assert len(model.encoder_layers) == len(model.decoder_layers) == 2
    assert isinstance(model.encoder_norm, nn.Identity)
    assert isinstance(Transformer(small_config(norm_first=True)).encoder_norm, nn.LayerNorm)
    spec_only = SimpleNamespace(src_vocab=11, tgt_vocab=13, d_model=16, n_heads=4, n_layers=1, d_ff=24, dropout=0.0,
                                max_len=20, pad_id=0, norm_first=False)  # a config without fused_attention
    assert Transformer(spec_only)(SRC, TGT_IN).shape == (3, 5, 13)


def test_embeddings_are_initialised_so_that_the_scaled_tokens_have_unit_size() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config(d_model=64, src_vocab=200, tgt_vocab=200))
    for table in (model.src_embed, model.tgt_embed):
        scaled = table.weight * 64**0.5
        assert 0.9 < scaled.std().item() < 1.1


def test_encoder_ignores_extra_padding() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config()).eval()
    longer = torch.cat([SRC, torch.zeros(3, 4, dtype=torch.long)], dim=1)  # 4 more pad columns
    real = SRC != 0
    torch.testing.assert_close(model.encode(longer)[:, :7][real], model.encode(SRC)[real])
    torch.testing.assert_close(model(longer, TGT_IN), model(SRC, TGT_IN))  # cross-attention ignores them too


def test_padding_is_found_by_pad_id() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config(pad_id=5)).eval()
    src = tokens([[0, 3, 4, 5, 5], [7, 0, 5, 5, 5]])  # 0 is a real token here
    longer = torch.cat([src, torch.full((2, 3), 5)], dim=1)
    tgt_in = tokens([[1, 0, 2], [1, 3, 5]])
    torch.testing.assert_close(model(longer, tgt_in), model(src, tgt_in))
    changed = src.clone()
    changed[:, 0] = 9
    assert not torch.allclose(model(changed, tgt_in), model(src, tgt_in))  # real tokens do matter


def test_decoder_is_causal() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config()).eval()
    for start in (1, 3):
        changed = TGT_IN.clone()
        changed[:, start:] = torch.randint(3, 13, changed[:, start:].shape, generator=torch.Generator().manual_seed(1))
        before, after = model(SRC, TGT_IN), model(SRC, changed)
        torch.testing.assert_close(after[:, :start], before[:, :start])
        assert not torch.allclose(after[:, start:], before[:, start:])


def test_decoder_reads_the_source() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config()).eval()
    other = SRC.clone()
    other[0, 0] = 4
    assert not torch.allclose(model(other, TGT_IN)[0], model(SRC, TGT_IN)[0])
    torch.testing.assert_close(model(other, TGT_IN)[1:], model(SRC, TGT_IN)[1:])


def test_dropout_is_active_in_training_mode_only() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config(dropout=0.3))
    model.eval()
    torch.testing.assert_close(model(SRC, TGT_IN), model(SRC, TGT_IN))
    model.train()
    assert not torch.allclose(model(SRC, TGT_IN), model(SRC, TGT_IN))


@pytest.mark.parametrize("device", [*DEVICES, "meta"])
def test_dtype_and_device(device) -> None:
    model = Transformer(small_config()).double().to(device)
    src, tgt_in = SRC.to(device), TGT_IN.to(device)
    logits = model(src, tgt_in)
    assert logits.dtype == torch.float64 and logits.device.type == device and logits.shape == (3, 5, 13)
    if device != "meta":
        assert greedy_decode(model, src, 1, 2, 6).device.type == device


def test_gradients_reach_every_parameter() -> None:
    torch.manual_seed(0)
    model = Transformer(small_config(norm_first=True))
    model(SRC, TGT_IN).sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing


def test_errors_name_the_sizes() -> None:
    with pytest.raises(ValueError, match=r"d_model=30.*n_heads=4"):
        TransformerConfig(10, 10, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match=r"d_model=9"):
        TransformerConfig(10, 10, d_model=9, n_heads=3)
    with pytest.raises(ValueError, match="dropout"):
        TransformerConfig(10, 10, dropout=1.5)
    with pytest.raises(ValueError, match="max_len"):
        TransformerConfig(10, 10, max_len=0)
    model = Transformer(small_config(max_len=6))
    with pytest.raises(ValueError, match=r"T=7.*max_len=6"):
        model.encode(SRC)
    with pytest.raises(ValueError, match=r"T=8.*max_len=6"):
        model(SRC[:, :5], torch.ones(3, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(3, 7\).*\(2, 5\)"):
        model(SRC, TGT_IN[:2])


def test_config_defaults_are_the_base_model_of_the_paper() -> None:
    config = TransformerConfig(src_vocab=37000, tgt_vocab=37000)
    assert (config.d_model, config.n_heads, config.n_layers, config.d_ff) == (512, 8, 6, 2048)
    assert (config.dropout, config.max_len, config.pad_id, config.norm_first) == (0.1, 512, 0, False)
    assert config.fused_attention is False
    with pytest.raises(TypeError):
        TransformerConfig()  # the vocabularies are required


# ---------------------------------------------------------------- decoding


class Scripted(nn.Module):
    """A stand-in model: at decoding position t, row b's logits pick ``script[b][t]``, whatever came before."""

    def __init__(self, scripts: list[list[int]], vocab: int = 12, pad_id: int = 0) -> None:
        super().__init__()
        self.scripts, self.vocab = scripts, vocab
        self.config = SimpleNamespace(pad_id=pad_id)
        self.modes: list[bool] = []

    def encode(self, src: Tensor) -> Tensor:
        self.modes.append(self.training)
        return src.float().unsqueeze(-1)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        self.modes.append(self.training)
        b, t = tgt_in.shape
        picks = torch.tensor([[row[min(i, len(row) - 1)] for i in range(t)] for row in self.scripts[:b]])
        return F.one_hot(picks, self.vocab).float() * 5.0 - 1.0  # (B, T, V)


def test_greedy_decode_contract() -> None:
    model = Scripted([[5, 2, 6, 7, 3, 4, 5], [3, 4, 8, 2, 9, 5, 6], [7, 6, 5, 4, 2, 8, 9]], pad_id=0)
    src = torch.ones(3, 4, dtype=torch.long)
    out = greedy_decode(model, src, start_id=1, end_id=2, max_len=8)
    assert out.dtype == torch.long
    assert out.tolist() == [[1, 5, 2, 0, 0, 0], [1, 3, 4, 8, 2, 0], [1, 7, 6, 5, 4, 2]]  # stops when all rows ended
    assert model.modes and not any(model.modes) and model.training  # decoded in eval mode, mode restored


def test_greedy_decode_pads_with_the_models_pad_id_and_respects_max_len() -> None:
    model = Scripted([[4, 5, 11, 6], [11, 3, 3, 3]], pad_id=9)
    assert greedy_decode(model, torch.ones(2, 3, dtype=torch.long), 10, 11, 7).tolist() == [[10, 4, 5, 11],
                                                                                          [10, 11, 9, 9]]
    never = Scripted([[3, 4, 5, 6, 7, 8, 3, 4, 5]])
    src = torch.ones(1, 2, dtype=torch.long)
    assert greedy_decode(never, src, 1, 2, 5).tolist() == [[1, 3, 4, 5, 6]]  # L == max_len: <start> counts
    assert greedy_decode(never, src, 1, 2, 1).tolist() == [[1]]
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(never, src, 1, 2, 0)


def test_beam_search_with_one_beam_is_greedy() -> None:
    model = Scripted([[5, 2, 6, 7], [3, 4, 8, 2], [7, 6, 5, 4]], pad_id=0)
    src = torch.ones(3, 4, dtype=torch.long)
    assert torch.equal(beam_search(model, src, 1, 2, 8, beam_size=1), greedy_decode(model, src, 1, 2, 8))
    torch.manual_seed(0)
    real = Transformer(small_config(tgt_vocab=11))
    for max_len in (1, 4, 9):
        assert torch.equal(beam_search(real, SRC, 1, 2, max_len, beam_size=1), greedy_decode(real, SRC, 1, 2, max_len))


class Garden(nn.Module):
    """A garden path: the likeliest first token (3, p = 0.5) leads nowhere likely; token 4 (p = 0.4) leads to
    <end> with p = 0.9. Greedy takes 3; a beam of 2 finds 4 <end>, the likelier sentence."""

    config = SimpleNamespace(pad_id=0)

    def encode(self, src: Tensor) -> Tensor:
        return src.float().unsqueeze(-1)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        rows = []
        for seq in tgt_in.tolist():
            probs = torch.full((6,), 1e-6)
            last = seq[-1]
            if last == 1:
                probs[3], probs[4], probs[2] = 0.5, 0.4, 0.1
            elif last == 3:
                probs[3:6] = 0.3  # three words of 0.3, <end> 0.1
                probs[2] = 0.1
            else:
                probs[2] = 0.9
                probs[5] = 0.1
            rows.append([probs.log()] * len(seq))
        return torch.stack([torch.stack(r) for r in rows])


def test_beam_search_finds_a_likelier_sentence_than_greedy() -> None:
    src = torch.ones(1, 2, dtype=torch.long)
    assert greedy_decode(Garden(), src, 1, 2, 3).tolist() == [[1, 3, 3]]
    assert beam_search(Garden(), src, 1, 2, 3, beam_size=2).tolist() == [[1, 4, 2]]


# ---------------------------------------------------------------- it learns


PAD, START, END, VOCAB = 0, 1, 2, 10


def copy_batch(n: int, g: torch.Generator, shortest: int = 2, longest: int = 6) -> tuple[Tensor, Tensor, Tensor]:
    """Random sentences of tokens 3..9; the target is the source itself: (src, tgt_in, tgt_out)."""
    lengths = torch.randint(shortest, longest + 1, (n,), generator=g)
    src = torch.randint(3, VOCAB, (n, longest), generator=g).masked_fill(~lengths_mask(lengths.tolist(), longest), PAD)
    tgt_in = torch.cat([torch.full((n, 1), START), src], dim=1)
    tgt_out = torch.cat([src, torch.full((n, 1), PAD)], dim=1).scatter(1, lengths[:, None], END)
    return src, tgt_in, tgt_out


@pytest.fixture
def one_thread():
    """A model this small trains several times faster on one thread than on several."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_a_tiny_model_learns_to_copy() -> None:
    begin = time.perf_counter()
    torch.manual_seed(0)
    config = TransformerConfig(VOCAB, VOCAB, d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.0, max_len=16)
    model = Transformer(config)
    optimiser = torch.optim.Adam(model.parameters(), lr=5e-3)
    schedule = torch.optim.lr_scheduler.LinearLR(optimiser, start_factor=1.0, end_factor=0.0, total_iters=200)
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        src, tgt_in, tgt_out = copy_batch(64, g)
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
    src, _, tgt_out = copy_batch(200, torch.Generator().manual_seed(2))
    greedy = greedy_decode(model, src, START, END, max_len=tgt_out.shape[1] + 1)
    assert exact_match(greedy, tgt_out) >= 0.95
    assert exact_match(beam_search(model, src[:50], START, END, tgt_out.shape[1] + 1), tgt_out[:50]) >= 0.95
    assert time.perf_counter() - begin < 30


def exact_match(decoded: Tensor, tgt_out: Tensor) -> float:
    """The share of rows whose tokens after <start> are exactly ``tgt_out``, <end> included."""
    out = decoded[:, 1:]
    out = torch.cat([out, torch.full((out.shape[0], tgt_out.shape[1] - out.shape[1]), PAD)], dim=1)
    return (out == tgt_out).all(dim=1).float().mean().item()


# ---------------------------------------------------------------- the training recipe


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("pad_id", [0, 3])
def test_label_smoothed_cross_entropy_is_pytorchs(epsilon: float, pad_id: int) -> None:
    logits = randn(3, 7, 11, seed=41, dtype=torch.float64)
    targets = torch.randint(0, 11, (3, 7), generator=torch.Generator().manual_seed(42))
    targets[1, 4:] = pad_id
    targets[2, 2:] = pad_id
    expected = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=pad_id,
                               label_smoothing=epsilon)
    got = label_smoothed_cross_entropy(logits, targets, pad_id, epsilon)
    assert got.dtype == torch.float64 and got.shape == ()
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)


def test_label_smoothed_cross_entropy_gradients_and_errors() -> None:
    logits = randn(2, 5, 6, seed=43, dtype=torch.float64).requires_grad_(True)
    targets = torch.tensor([[1, 2, 3, 4, 5], [5, 1, 0, 0, 0]])
    assert torch.autograd.gradcheck(lambda z: label_smoothed_cross_entropy(z, targets, 0, 0.1), (logits,))
    with pytest.raises(ValueError, match=r"\(2, 5, 6\).*\(2, 4\)"):
        label_smoothed_cross_entropy(logits, targets[:, :4], 0, 0.1)
    for epsilon in (1.0, -0.1):
        with pytest.raises(ValueError, match="epsilon"):
            label_smoothed_cross_entropy(logits, targets, 0, epsilon)


def test_the_smoothed_loss_is_smallest_at_the_smoothed_target() -> None:
    """At p = q the loss is the entropy of q, and any other p scores more (Gibbs' inequality)."""
    v, eps, y = 7, 0.1, 3
    q = torch.full((v,), eps / v, dtype=torch.float64)
    q[y] += 1 - eps
    at_q = label_smoothed_cross_entropy(q.log().reshape(1, 1, v), torch.tensor([[y]]), 0, eps)
    torch.testing.assert_close(at_q, -(q * q.log()).sum())
    for seed in range(5):
        other = randn(1, 1, v, seed=50 + seed, dtype=torch.float64)
        assert label_smoothed_cross_entropy(other, torch.tensor([[y]]), 0, eps) > at_q


def test_noam_lr_rises_peaks_at_the_warmup_and_decays() -> None:
    d_model, warmup = 512, 4000
    assert noam_lr(warmup, d_model, warmup) == pytest.approx((d_model * warmup) ** -0.5)
    assert noam_lr(1, d_model, warmup) == pytest.approx((d_model * warmup) ** -0.5 / warmup)
    assert noam_lr(2000, d_model, warmup) == pytest.approx(noam_lr(warmup, d_model, warmup) / 2)
    assert noam_lr(4 * warmup, d_model, warmup) == pytest.approx(noam_lr(warmup, d_model, warmup) / 2)
    rates = [noam_lr(s, 64, 10) for s in range(1, 31)]
    assert max(range(30), key=rates.__getitem__) == 9
    for bad in ((0, 512, 4000), (-1, 512, 4000), (5, 0, 4000), (5, 512, 0)):
        with pytest.raises(ValueError):
            noam_lr(*bad)


def test_noam_lr_is_the_trainers_inverse_sqrt_schedule_one_step_later() -> None:
    """The trainer's LambdaLR counts from 0: its factor at step s, times the peak, is noam_lr(s + 1)."""
    from attention_course.training import TrainConfig, lr_factor

    d_model, warmup = 64, 25
    config = TrainConfig(lr=(d_model * warmup) ** -0.5, warmup=warmup, decay="inverse_sqrt")
    for s in (0, 1, 10, 24, 25, 26, 100, 1000):
        assert config.lr * lr_factor(s, config) == pytest.approx(noam_lr(s + 1, d_model, warmup))
