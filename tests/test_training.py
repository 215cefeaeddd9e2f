"""Chapter 6's training side: the tasks, the trainer, TorchTransformer and its decoders.

Everything runs on the CPU in a few seconds per test; the GPU code paths
(device choice, bf16 autocast, torch.compile) are exercised without a GPU.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import attention_course.models
import attention_course.training
from attention_course.models import ModelConfig, TorchTransformer, beam_search
from attention_course.tasks import (
    DATE_FORMATS,
    CharTokenizer,
    copy_task,
    dates_task,
    make_batch,
    ordinal_suffix,
    ordinal_word,
    reverse_task,
)
from attention_course.training import (
    CONFIGS,
    DEFAULT_BEAM,
    TINY,
    BatchOrder,
    Trainer,
    autocast_dtype,
    exact_match,
    get_config,
    lr_factor,
    model_config,
    pick_device,
    seed_everything,
    teacher_forcing,
    token_loss,
)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is faster, and results do not depend on the machine
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def dates():
    return dates_task()


@pytest.fixture(scope="module")
def copying():
    return copy_task(n_train=3000, n_valid=100, n_test=100, max_len=8)


SMALL = replace(TINY, name="small", task="copy", d_model=32, n_heads=2, n_layers=1, d_ff=64, batch_size=32,
                steps=120, lr=3e-3, warmup=20, eval_every=0, log_every=1000)


def small_model(task, config=SMALL, seed=0, **overrides):
    seed_everything(seed)
    return TorchTransformer(replace(model_config(config, task), **overrides))


# --------------------------------------------------------------------------------------------------------------
# tasks
# --------------------------------------------------------------------------------------------------------------

def test_date_splits_are_disjoint_by_date(dates):
    days = {name: {t for _, t in dates.split(name)} for name in ("train", "valid", "test")}
    assert len(days["test"]) == len(dates.test) == 2000 and len(days["valid"]) == 1000
    assert not days["train"] & days["test"], "a test date also appears in training"
    assert not days["train"] & days["valid"] and not days["valid"] & days["test"]
    assert len(dates.train) + 3000 == 36_525 == len(days["train"]) + 3000, "every day of 1950-2049 once"


def test_dates_are_seeded(dates):
    again, other = dates_task(), dates_task(seed=1)
    assert again.test == dates.test and again.train[:50] == dates.train[:50]
    assert other.test != dates.test


def test_each_format_name_is_its_own_example():
    for name, fmt in DATE_FORMATS.items():
        assert fmt(dt.date(2021, 3, 3)) == name, f"format {name!r} writes 2021-03-03 as {fmt(dt.date(2021, 3, 3))!r}"
    assert DATE_FORMATS["the third of March 2021"](dt.date(1987, 12, 31)) == "the thirty-first of December 1987"
    assert DATE_FORMATS["03/03/21"](dt.date(1955, 1, 2)) == "02/01/55", "numbers with slashes are day first"


def test_formats_are_varied_in_every_split(dates):
    for split in ("train", "test"):
        sources = [s for s, _ in dates.split(split)]
        kinds = {("word-ordinal" if s.startswith("the ") else "weekday" if s[:3] in ("Mon", "Tue", "Wed") else
                  "iso-like" if s[:4].isdigit() and "-" in s else "slashes" if "/" in s else "dots" if "." in s else
                  "compact" if s.isdigit() else "other") for s in sources}
        assert len(kinds) == 7, f"{split} lacks some kinds of format: {kinds}"
    lengths = [len(s) for s, _ in dates.test]
    assert min(lengths) == 8 and max(lengths) >= 30


def test_targets_are_iso_dates(dates):
    for source, target in dates.test[:200]:
        assert dt.date.fromisoformat(target).isoformat() == target, (source, target)


def test_ordinals():
    assert [ordinal_suffix(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"]
    assert [ordinal_word(n) for n in (1, 12, 20, 21, 30, 31)] == [
        "first", "twelfth", "twentieth", "twenty-first", "thirtieth", "thirty-first"]
    with pytest.raises(ValueError, match="32"):
        ordinal_word(32)


def test_tokenizer_round_trip(dates):
    tok = dates.src_tokenizer
    assert (tok.pad_id, tok.start_id, tok.end_id) == (0, 1, 2) and tok.itos[:3] == ["<pad>", "<start>", "<end>"]
    for source, _ in dates.train[:500] + dates.test[:500]:
        assert tok.decode(tok.encode(source)) == source
    ids = dates.tgt_tokenizer.encode("2021-03-03", start=True, end=True)
    assert ids[0] == 1 and ids[-1] == 2 and len(ids) == 12
    assert dates.tgt_tokenizer.decode(ids + [0, 0]) == "2021-03-03"
    assert dates.tgt_tokenizer.decode(torch.tensor(ids + [5, 5])) == "2021-03-03", "decode stops at <end>"
    with pytest.raises(ValueError, match="Q"):
        dates.tgt_tokenizer.encode("2021-Q1")


def test_batches_are_right_padded_without_special_tokens():
    tok = CharTokenizer("abc")
    src, tgt = make_batch([("abc", "a"), ("a", "cba")], tok, tok)
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == [[3, 4, 5], [3, 0, 0]]
    assert tgt.tolist() == [[3, 0, 0], [5, 4, 3]]


def test_copy_and_reverse_tasks():
    c, r = copy_task(n_train=500, n_valid=50, n_test=50), reverse_task(n_train=500, n_valid=50, n_test=50)
    assert all(s == t for s, t in c.train) and all(s[::-1] == t for s, t in r.test)
    train, test = {s for s, _ in c.train}, {s for s, _ in c.test}
    assert len(train) == 500 and not train & test


# --------------------------------------------------------------------------------------------------------------
# teacher forcing, loss, schedule, batches
# --------------------------------------------------------------------------------------------------------------

def test_teacher_forcing_pair():
    tgt = torch.tensor([[5, 6, 7], [5, 0, 0], [0, 0, 0]])
    tgt_in, tgt_out = teacher_forcing(tgt, start_id=1, end_id=2, pad_id=0)
    assert tgt_in.tolist() == [[1, 5, 6, 7], [1, 5, 0, 0], [1, 0, 0, 0]]
    assert tgt_out.tolist() == [[5, 6, 7, 2], [5, 2, 0, 0], [2, 0, 0, 0]]
    from solutions.cross_attention import teacher_forcing_pair

    for mine, ref in zip((tgt_in, tgt_out), teacher_forcing_pair(tgt, 1, 2, 0), strict=True):
        assert torch.equal(mine, ref)


def test_token_loss_ignores_padding():
    g = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(2, 4, 6, generator=g), torch.tensor([[3, 4, 2, 0], [5, 2, 0, 0]])
    loss = token_loss(logits, targets, pad_id=0)
    keep = targets != 0
    expected = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0][keep].mean()
    assert torch.allclose(loss, expected)
    changed = logits.clone()
    changed[1, 3] = 100.0  # anything at a pad position
    assert torch.equal(token_loss(changed, targets, 0), loss)
    assert token_loss(logits.bfloat16(), targets, 0).dtype == torch.float32


def test_label_smoothing_smooths_the_training_loss_only():
    """TrainConfig.label_smoothing reaches the training step's loss (PyTorch's label_smoothing); the validation
    loss stays the plain cross-entropy, so that runs with and without smoothing compare."""
    g = torch.Generator().manual_seed(1)
    logits, targets = torch.randn(2, 4, 6, generator=g), torch.tensor([[3, 4, 2, 0], [5, 2, 0, 0]])
    smoothed = token_loss(logits, targets, 0, label_smoothing=0.1)
    keep = targets != 0
    log_p = torch.log_softmax(logits, -1)
    nll = -log_p.gather(-1, targets[..., None])[..., 0]
    assert torch.allclose(smoothed, (0.9 * nll - 0.1 * log_p.mean(-1))[keep].mean())
    task = dates_task()
    valid, step = [], []
    for eps in (0.0, 0.3):
        config = replace(TINY, steps=2, label_smoothing=eps, device="cpu", eval_every=0)
        seed_everything(0)
        trainer = Trainer(TorchTransformer(model_config(config, task)), task, config)
        valid.append(trainer.validation_loss())  # the same untrained model
        step.append(float(trainer.train_step(task.batch(task.train[:8]))))
    assert valid[1] == pytest.approx(valid[0], abs=1e-6)  # the validation loss never smooths
    assert step[1] != pytest.approx(step[0])  # the same first step, its loss smoothed


def test_learning_rate_schedule():
    cfg = replace(TINY, warmup=10, steps=110, min_lr_ratio=0.1)
    assert lr_factor(0, cfg) == pytest.approx(0.1) and lr_factor(9, cfg) == pytest.approx(1.0)
    assert lr_factor(10, cfg) == pytest.approx(1.0)
    assert lr_factor(60, cfg) == pytest.approx(0.55)
    assert lr_factor(110, cfg) == pytest.approx(0.1)
    inv = replace(cfg, decay="inverse_sqrt")
    assert lr_factor(39, inv) == pytest.approx(0.5)
    factors = [lr_factor(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(factors, factors[1:], strict=False)), "the decay must not go back up"


def test_batch_order_covers_each_pair_once_per_epoch_and_buckets():
    lengths = [i % 37 for i in range(1000)]
    order = BatchOrder(lengths, batch_size=50, seed=3)
    epoch = [order.next() for _ in range(20)]
    assert sorted(i for b in epoch for i in b) == list(range(1000))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in epoch) / 20
    plain = BatchOrder(lengths, batch_size=50, seed=3, bucket=False)
    plain_spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in
                       (plain.next() for _ in range(20))) / 20
    assert spread < plain_spread / 3, "bucketing should group sentences of similar length"
    state = order.state_dict()
    ahead = [order.next() for _ in range(25)]  # crosses into the next epoch
    resumed = BatchOrder(lengths, batch_size=50, seed=3)
    resumed.load_state_dict(state)
    assert [resumed.next() for _ in range(25)] == ahead


def test_named_configurations():
    assert set(CONFIGS) >= {"tiny", "gpu"}
    gpu = CONFIGS["gpu"]
    assert (gpu.d_model, gpu.n_heads, gpu.n_layers) == (512, 8, 6) and gpu.batch_size > TINY.batch_size
    assert get_config("tiny", steps=5).steps == 5
    with pytest.raises(ValueError, match="huge"):
        get_config("huge")


# --------------------------------------------------------------------------------------------------------------
# the trainer
# --------------------------------------------------------------------------------------------------------------

def test_loss_decreases_on_the_copy_task(copying):
    trainer = Trainer(small_model(copying), copying, SMALL)
    history = trainer.fit(log=False)
    first, last = sum(history.train_loss[:10]) / 10, sum(history.train_loss[-10:]) / 10
    assert len(history.train_loss) == SMALL.steps == trainer.step
    assert last < 0.6 * first, f"the copy task's loss went from {first:.3f} to only {last:.3f} in {SMALL.steps} steps"


def test_validation_loss_is_recorded(copying):
    cfg = replace(SMALL, steps=20, eval_every=10)
    history = Trainer(small_model(copying), copying, cfg).fit(log=False)
    assert history.valid_step == [10, 20] and all(v > 0 for v in history.valid_loss)


def test_progress_lines_are_printed_without_a_bar(copying, capsys):
    Trainer(small_model(copying), copying, replace(SMALL, steps=4, log_every=2)).fit(progress=False)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["step", "2"], ["step", "4"]]


def test_checkpoint_resume_continues_identically(copying, tmp_path):
    cfg = replace(SMALL, steps=12, dropout=0.2)  # dropout: the random state must be restored too
    straight = Trainer(small_model(copying, cfg), copying, cfg)
    straight.fit(log=False)

    first = Trainer(small_model(copying, cfg), copying, cfg)
    first.fit(steps=5, log=False)
    path = first.save(tmp_path / "ckpt.pt")
    torch.manual_seed(999)  # disturb every random state before resuming
    resumed = Trainer(small_model(copying, cfg, seed=7), copying, cfg).load(path)
    assert resumed.step == 5
    resumed.fit(log=False)
    assert resumed.history.train_loss == straight.history.train_loss, "resuming changed the losses"
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), f"{name} differs after resuming"


def test_device_selection_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert pick_device() == torch.device("cpu")
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(RuntimeError, match="cuda"):
        pick_device("cuda")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert pick_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device() == torch.device("cuda"), "CUDA comes first"


def test_precision_switch():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert autocast_dtype("auto", cuda) == torch.bfloat16 and autocast_dtype("auto", cpu) is None
    assert autocast_dtype("fp32", cuda) is None and autocast_dtype("bf16", cpu) == torch.bfloat16
    with pytest.raises(ValueError, match="fp16"):
        autocast_dtype("fp16", cpu)


def test_bf16_autocast_path_runs_on_the_cpu(copying):
    cfg = replace(SMALL, steps=40, precision="bf16")
    trainer = Trainer(small_model(copying), copying, cfg)
    assert trainer.amp_dtype == torch.bfloat16
    seen = []
    hook = trainer.model.to_vocab.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    history = trainer.fit(log=False)
    hook.remove()
    assert set(seen) == {torch.bfloat16}, "the logits should be computed in bfloat16 under autocast"
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters()), "autocast keeps fp32 weights"
    assert history.train_loss[-1] < history.train_loss[0]


def test_compile_switch(copying, monkeypatch, tmp_path):
    real_compile = torch.compile
    # the inductor backend needs a minute of C++ compilation on a CPU; aot_eager runs the same
    # torch.compile machinery (graph capture, AOT autograd) without generating code
    monkeypatch.setattr(torch, "compile", functools.partial(real_compile, backend="aot_eager"))
    cfg = replace(SMALL, steps=3, batch_size=8)
    compiled = Trainer(small_model(copying), copying, replace(cfg, compile=True))
    assert isinstance(compiled.step_model, torch._dynamo.eval_frame.OptimizedModule)
    assert compiled.step_model is not compiled.model
    assert next(compiled.step_model.parameters()) is next(compiled.model.parameters()), "parameters are shared"
    plain = Trainer(small_model(copying), copying, cfg)
    assert plain.step_model is plain.model
    torch.testing.assert_close(compiled.fit(log=False).train_loss, plain.fit(log=False).train_loss)
    state = torch.load(compiled.save(tmp_path / "c.pt"), weights_only=True)["model"]
    assert not any(k.startswith("_orig_mod") for k in state), "checkpoints hold the plain model's names"


def test_exact_match_with_an_oracle_decoder(copying):
    pairs = copying.test[:10]
    tok = copying.tgt_tokenizer
    wrong = pairs[3][0]

    def oracle(model, src, start_id, end_id, max_len):
        rows = [tok.encode(tok.decode(r), start=True, end=True) for r in src]  # copy task: target == source
        rows = [r if tok.decode(r) != wrong else [start_id, end_id] for r in rows]
        out = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, :len(r)] = torch.tensor(r)
        return out

    result = exact_match(small_model(copying), copying, pairs, oracle, batch_size=4)
    assert result.accuracy == pytest.approx(0.9) and result.mistakes == [(wrong, wrong, "")]


# --------------------------------------------------------------------------------------------------------------
# TorchTransformer and the decoders
# --------------------------------------------------------------------------------------------------------------

def _toy_batch(seed=0, vocab=12):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (3, 7), generator=g)
    src[1, 5:] = 0
    src[2, 3:] = 0
    tgt_in = torch.randint(3, vocab, (3, 5), generator=g)
    tgt_in[:, 0] = 1
    return src, tgt_in


def _toy_model(norm_first=True, fused=True, seed=0):
    seed_everything(seed)
    cfg = ModelConfig(src_vocab=12, tgt_vocab=12, d_model=32, n_heads=4, n_layers=2, d_ff=64, dropout=0.0,
                      max_len=16, norm_first=norm_first)
    return TorchTransformer(cfg, fused=fused).eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_torch_transformer_interface(norm_first):
    model = _toy_model(norm_first)
    src, tgt_in = _toy_batch()
    memory = model.encode(src)
    logits = model(src, tgt_in)
    assert memory.shape == (3, 7, 32) and logits.shape == (3, 5, 12)
    torch.testing.assert_close(model.decode(tgt_in, memory, src), logits)
    padded = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, tgt_in), logits, msg="extra source padding changed the output")
    future = tgt_in.clone()
    future[:, 3:] = 4
    torch.testing.assert_close(model(src, future)[:, :3], logits[:, :3], msg="a position saw the future")
    with pytest.raises(ValueError, match="max_len"):
        model(torch.ones(1, 17, dtype=torch.long), tgt_in[:1])
    with pytest.raises(ValueError, match="n_heads"):
        TorchTransformer(ModelConfig(src_vocab=5, tgt_vocab=5, d_model=30, n_heads=4))


def test_torch_transformer_layers_are_not_copies():
    model = _toy_model()
    first, second = model.encoder.layers[0], model.encoder.layers[1]
    assert not torch.equal(first.linear1.weight, second.linear1.weight)


def test_fused_and_manual_paths_agree_in_torch_transformer(monkeypatch):
    calls = []  # the calls of the fused kernel, F.scaled_dot_product_attention
    kernel = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    src, tgt_in = _toy_batch()
    model = _toy_model().train()  # training mode: no inference fast path, dropout 0
    fused = model(src, tgt_in)
    assert len(calls) == 6, "2 encoder layers and 2 decoder layers (self- and cross-attention) on the fused kernel"
    calls.clear()
    model.fused = False
    assert not model.fused
    manual = model(src, tgt_in)
    assert not calls, "with fused = False, attention still ran on the fused kernel"
    torch.testing.assert_close(manual, fused, atol=1e-5, rtol=1e-4)


def test_cross_attention_weights():
    model = _toy_model()
    src, tgt_in = _toy_batch()
    weights = model.cross_attention(src, tgt_in)
    assert weights.shape == (2, 3, 4, 5, 7)  # (layers, B, heads, T_tgt, T_src)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4, 5))
    assert torch.all(weights[:, 2, :, :, 3:] == 0), "padded source positions must get no weight"
    assert all(m.weights is None and not m.keep_weights for m in model._attention_layers()), "recording left on"


def _check_generated(ids, start_id, end_id, pad_id, max_len):
    assert ids.dtype == torch.long and ids.shape[1] <= max_len and torch.all(ids[:, 0] == start_id)
    for row in ids.tolist():
        if end_id in row:
            assert all(t == pad_id for t in row[row.index(end_id) + 1:]), f"tokens after <end>: {row}"


@pytest.mark.parametrize("beam_size", [1, 0, -2])
def test_beam_search_refuses_a_beam_of_one_which_is_the_greedy_decode_exercise(beam_size):
    """A beam of 1 is greedy decoding, Chapter 6's graded `greedy_decode`: the helper package must not give it."""
    model = _toy_model(seed=3)
    src, _ = _toy_batch(seed=4)
    with pytest.raises(ValueError, match=rf"beam_size={beam_size}\b") as refused:
        beam_search(model, src, 1, 2, max_len=9, beam_size=beam_size)
    message = str(refused.value)
    assert "greedy decoding" in message and "greedy_decode" in message and "Chapter 6" in message, message
    assert not hasattr(attention_course.models, "greedy_search"), "the helper package ships greedy decoding"


def test_without_a_decoder_the_trainer_decodes_with_a_beam_of_2(copying, monkeypatch):
    widths = []

    def spy(model, src, start_id, end_id, max_len, beam_size=4, length_alpha=0.0):
        widths.append(beam_size)
        return beam_search(model, src, start_id, end_id, max_len, beam_size, length_alpha)

    monkeypatch.setattr(attention_course.training, "beam_search", spy)
    result = exact_match(small_model(copying), copying, copying.test[:6], batch_size=4)
    assert len(result.predictions) == 6 and widths == [DEFAULT_BEAM, DEFAULT_BEAM] and DEFAULT_BEAM == 2, widths
    trainer = Trainer(small_model(copying), copying, replace(SMALL, steps=0))
    assert len(trainer.evaluate("test", limit=3).predictions) == 3 and widths[-1] == 2


def test_decoders_run_without_dropout_and_restore_the_mode():
    seed_everything(0)
    cfg = ModelConfig(src_vocab=12, tgt_vocab=12, d_model=32, n_heads=4, n_layers=1, d_ff=64, dropout=0.5, max_len=16)
    model = TorchTransformer(cfg).train()
    src, tgt_in = _toy_batch()
    for decode in (functools.partial(beam_search, beam_size=2), functools.partial(beam_search, beam_size=3)):
        first, second = decode(model, src, 1, 2, 9), decode(model, src, 1, 2, 9)
        assert torch.equal(first, second), f"{decode} is random: dropout was on while decoding"
        assert model.training, "decoding must leave the model in training mode"
    weights = model.cross_attention(src, tgt_in)
    torch.testing.assert_close(weights, model.cross_attention(src, tgt_in))
    assert model.training


def test_beam_search():
    from solutions.transformer import beam_search as reference_beam

    model = _toy_model(seed=3)
    src, _ = _toy_batch(seed=4)
    for k in (2, 4):
        mine = beam_search(model, src, 1, 2, max_len=9, beam_size=k)
        _check_generated(mine, 1, 2, 0, 9)
        reference = reference_beam(model, src, 1, 2, max_len=9, beam_size=k, length_penalty=0.0)
        width = max(mine.shape[1], reference.shape[1])
        padded = [F.pad(ids, (0, width - ids.shape[1])) for ids in (mine, reference)]
        assert torch.equal(*padded), f"beam of {k}: {padded}"


# --------------------------------------------------------------------------------------------------------------
# the reference Transformer in the trainer
# --------------------------------------------------------------------------------------------------------------

def _reference_pair(task, cfg):
    from solutions.transformer import Transformer, TransformerConfig

    sizes = dict(vars(model_config(cfg, task)))
    seed_everything(0)
    manual = Transformer(TransformerConfig(**sizes, fused_attention=False))
    fused = Transformer(TransformerConfig(**sizes, fused_attention=True))
    fused.load_state_dict(manual.state_dict())
    return manual, fused


def test_fused_and_manual_reference_transformer_train_alike(copying):
    cfg = replace(SMALL, steps=3)
    manual, fused = _reference_pair(copying, cfg)
    runs = [Trainer(m, copying, cfg) for m in (manual, fused)]
    src, tgt = copying.batch(copying.train[:16])
    losses = [t.loss_on(src, tgt) for t in runs]
    torch.testing.assert_close(losses[0], losses[1])
    for loss in losses:
        loss.backward()
    for (name, a), b in zip(manual.named_parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=f"gradient of {name}")
    histories = [t.fit(log=False).train_loss for t in runs]
    torch.testing.assert_close(histories[0], histories[1], atol=1e-4, rtol=1e-4)


def test_trainer_trains_the_reference_transformer_and_evaluates_with_its_decoder(copying):
    """250 steps (a few seconds) teach the reference Transformer to copy: exact match on 100 test strings of up to
    8 letters goes from none (guessing a whole string is hopeless) to most; 0.93 when this was written."""
    from solutions.transformer import greedy_decode

    cfg = replace(SMALL, steps=250)
    _, model = _reference_pair(copying, cfg)
    trainer = Trainer(model, copying, cfg)
    untrained = trainer.evaluate("test", decoder=greedy_decode, limit=100)
    history = trainer.fit(log=False)
    first, last = sum(history.train_loss[:10]) / 10, sum(history.train_loss[-10:]) / 10
    assert last < 0.1 * first, f"the copy task's loss went from {first:.3f} to only {last:.3f}"
    result = trainer.evaluate("test", decoder=greedy_decode, limit=100)
    assert len(result.predictions) == 100 and result.pairs == copying.test[:100]
    assert untrained.accuracy <= 0.05, f"an untrained model copied {untrained.accuracy:.0%} of the strings"
    assert result.accuracy >= 0.7, (f"after {cfg.steps} steps only {result.accuracy:.0%} of the strings are copied "
                                    f"exactly, e.g. {result.mistakes[:3]}")
    beam = trainer.evaluate("test", limit=100)  # the default decoder, a beam of 2, on the model that learned to copy
    agree = sum(b == g for b, g in zip(beam.predictions, result.predictions, strict=True))
    assert agree >= 90 and beam.accuracy >= result.accuracy - 0.05, (
        f"a beam of 2 and the reference greedy_decode agree on only {agree} of 100 strings ({beam.accuracy:.0%} "
        f"against {result.accuracy:.0%} right)")
