"""Train an encoder–decoder with teacher forcing, on a GPU when there is one and on the CPU otherwise.

The :class:`Trainer` works with any model that has the interface of the
Chapter 6 ``Transformer``: ``model.config.pad_id``, ``forward(src, tgt_in) ->
logits``, ``encode`` and ``decode`` (your own, or
:class:`attention_course.models.TorchTransformer`). It provides:

- teacher forcing: ``tgt_in`` = ``<start>`` + tokens, ``tgt_out`` = tokens +
  ``<end>``, loss = mean cross-entropy over the non-pad targets (with label
  smoothing if ``label_smoothing`` is set; the validation loss never smooths);
- AdamW, a linear warm-up then cosine or inverse-square-root decay, and
  gradient clipping;
- the device picked for you (CUDA, then Apple's MPS, then the CPU) unless you
  name one; bfloat16 autocast on CUDA (switchable); optional ``torch.compile``;
- seeds, a loss history, checkpoints that resume exactly where they stopped
  (model, optimizer, schedule, step, batch order and random states);
- exact-match evaluation with a decoder you pass in; without one, beam search
  with a beam of 2 (:data:`DEFAULT_BEAM`). Greedy decoding is Chapter 6's
  exercise: pass your ``greedy_decode`` as ``decoder`` to evaluate with it.

Two named runs, :data:`TINY` (the dates task on a laptop CPU in about two
minutes) and :data:`GPU` (a 6-layer, ``d_model = 512`` model), are in
:data:`CONFIGS`. From the command line::

    python -m attention_course.training --config gpu --out runs/gpu
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.models import ModelConfig, TorchTransformer, beam_search, in_eval_mode
from attention_course.tasks import Pair, Seq2SeqTask, copy_task, dates_task, reverse_task

Decoder = Callable[[nn.Module, Tensor, int, int, int], Tensor]  # (model, src, start_id, end_id, max_len) -> ids

TASKS: dict[str, Callable[[], Seq2SeqTask]] = {"dates": dates_task, "copy": copy_task, "reverse": reverse_task}


@dataclass(frozen=True)
class TrainConfig:
    """One training run: the model's size, the optimisation, and where and how it runs."""

    name: str = "custom"  # a label for logs and checkpoints
    # the model (turned into a ModelConfig by model_config)
    d_model: int = 64  # width of every token vector
    n_heads: int = 4  # attention heads per layer
    n_layers: int = 2  # encoder layers, and as many decoder layers
    d_ff: int = 256  # hidden width of the feed-forward blocks
    dropout: float = 0.0  # dropout probability everywhere in the model
    norm_first: bool = True  # pre-norm (True) or the paper's post-norm (False)
    # the data
    task: str = "dates"  # a key of TASKS
    batch_size: int = 64  # sentence pairs per step
    bucket: bool = True  # batch sentences of similar length together (less padding, faster)
    # the optimisation
    steps: int = 2000  # optimiser steps
    lr: float = 2e-3  # peak learning rate, reached at the end of the warm-up
    warmup: int = 100  # steps of linear warm-up from 0
    decay: str = "cosine"  # "cosine" (to min_lr_ratio * lr at the last step) or "inverse_sqrt"
    min_lr_ratio: float = 0.05  # floor of the cosine decay, as a fraction of lr
    weight_decay: float = 0.01  # AdamW's decoupled weight decay, on matrices only
    betas: tuple[float, float] = (0.9, 0.98)  # AdamW's moment coefficients
    grad_clip: float = 1.0  # clip the gradient norm to this (0: no clipping)
    label_smoothing: float = 0.0  # epsilon of the training loss (the paper: 0.1); the validation loss never smooths
    # the machinery
    device: str | None = None  # None: CUDA, then MPS, then CPU; or "cpu", "cuda", "cuda:1", "mps"
    precision: str = "auto"  # "auto": bf16 autocast on CUDA, fp32 elsewhere; or "bf16", "fp32" anywhere
    compile: bool = False  # wrap the model in torch.compile for training steps
    seed: int = 0  # seeds the model's initialisation (see seed_everything), dropout and the batch order
    eval_every: int = 100  # steps between validation losses (0: never)
    log_every: int = 100  # steps between printed lines when there is no progress bar
    max_len: int = 64  # rows of the position tables: longest source or target the model accepts


#: The dates task on a CPU: 0.25 M parameters, 2,000 steps of 64 pairs, under two minutes on one core, and
#: >= 99 % exact match on the test split (the defaults of TrainConfig are this run).
TINY = TrainConfig(name="tiny")

#: A model of the paper's base size for a GPU: 6 + 6 layers, d_model 512, 8 heads, bf16, torch.compile.
GPU = TrainConfig(name="gpu", d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1, norm_first=True,
                  batch_size=512, steps=4000, lr=7e-4, warmup=400, compile=True, eval_every=250, log_every=250)

CONFIGS: dict[str, TrainConfig] = {"tiny": TINY, "gpu": GPU}


def get_config(name: str, **overrides: object) -> TrainConfig:
    """A named configuration, with some fields replaced: ``get_config("tiny", steps=200)``."""
    if name not in CONFIGS:
        raise ValueError(f"no configuration {name!r}; choose from {sorted(CONFIGS)}")
    return replace(CONFIGS[name], **overrides)


def model_config(config: TrainConfig, task: Seq2SeqTask) -> ModelConfig:
    """The model sizes of ``config`` with the vocabularies of ``task``."""
    return ModelConfig(src_vocab=len(task.src_tokenizer), tgt_vocab=len(task.tgt_tokenizer), d_model=config.d_model,
                       n_heads=config.n_heads, n_layers=config.n_layers, d_ff=config.d_ff, dropout=config.dropout,
                       max_len=config.max_len, pad_id=task.tgt_tokenizer.pad_id, norm_first=config.norm_first)


def seed_everything(seed: int) -> None:
    """Seed Python's and PyTorch's random generators (every device): same seed, same model, same run."""
    random.seed(seed)
    torch.manual_seed(seed)


def pick_device(preference: str | torch.device | None = None) -> torch.device:
    """The device to train on: ``preference`` if given, else CUDA, then MPS, then the CPU.

    Raises:
        RuntimeError: if ``preference`` names a device this machine does not have.
    """
    if preference is not None:
        device = torch.device(preference)
        missing = (device.type == "cuda" and not torch.cuda.is_available()) or (
            device.type == "mps" and not _mps_available())
        if missing:
            raise RuntimeError(f"device {str(device)!r} was asked for, but this machine has none; "
                               f"leave device=None to pick one automatically")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """``torch.bfloat16`` when training should autocast, ``None`` for plain float32."""
    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"precision must be 'auto', 'bf16' or 'fp32', got {precision!r}")
    wants_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    return torch.bfloat16 if wants_bf16 else None


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` on ``device`` with ``dtype``, or a context that does nothing for ``None``."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------------
# Teacher forcing and the loss
# ---------------------------------------------------------------------------------------------------------------

def teacher_forcing(tgt: Tensor, start_id: int, end_id: int, pad_id: int) -> tuple[Tensor, Tensor]:
    """``tgt (B, T)`` right-padded targets → ``tgt_in``, ``tgt_out``, both ``(B, T + 1)``.

    ``tgt_in`` = ``<start>`` + tokens (the decoder's input), ``tgt_out`` =
    tokens + ``<end>`` (what each position must predict); padding elsewhere.
    """
    rows, width = tgt.shape
    n_tokens = (tgt != pad_id).sum(dim=1)  # (B,): real tokens per row
    tgt_in = torch.full((rows, width + 1), pad_id, dtype=tgt.dtype, device=tgt.device)  # (B, T + 1)
    tgt_in[:, 0] = start_id
    tgt_in[:, 1:] = tgt
    tgt_out = torch.full_like(tgt_in, pad_id)  # (B, T + 1)
    tgt_out[:, :width] = tgt
    tgt_out[torch.arange(rows, device=tgt.device), n_tokens] = end_id  # right after the last real token
    return tgt_in, tgt_out


def token_loss(logits: Tensor, tgt_out: Tensor, pad_id: int, *, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of ``logits (B, T, V)`` against ``tgt_out (B, T)``, over the non-pad targets only.

    Computed in float32 whatever the dtype of ``logits`` (bf16 logits from autocast included), with PyTorch's
    ``label_smoothing`` (0: none).
    """
    return F.cross_entropy(logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=pad_id,
                           label_smoothing=label_smoothing)


# ---------------------------------------------------------------------------------------------------------------
# Batches and the learning-rate schedule
# ---------------------------------------------------------------------------------------------------------------

class BatchOrder:
    """Which training pairs go in each step's batch: a fresh seeded order every epoch.

    With ``bucket``, each epoch shuffles the pairs, sorts pools of 50 batches
    by source length, cuts them into batches and shuffles the batches: each
    batch holds sentences of similar length, so it carries little padding.
    The order of epoch ``e`` depends only on ``(seed, e)``, so a checkpoint
    needs only ``(epoch, position)`` to resume it.
    """

    def __init__(self, lengths: list[int], batch_size: int, seed: int, bucket: bool = True) -> None:
        self.lengths, self.batch_size, self.seed, self.bucket = lengths, batch_size, seed, bucket
        self.epoch, self.position = 0, 0
        self._batches = self._epoch_batches(0)

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.lengths), generator=g).tolist()
        pool = self.batch_size * 50 if self.bucket else len(order)
        batches = []
        for start in range(0, len(order), pool):
            chunk = order[start:start + pool]
            if self.bucket:
                chunk.sort(key=self.lengths.__getitem__)
            batches += [chunk[i:i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        return [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]

    def next(self) -> list[int]:
        """Indices of the next batch."""
        if self.position == len(self._batches):
            self.epoch, self.position = self.epoch + 1, 0
            self._batches = self._epoch_batches(self.epoch)
        self.position += 1
        return self._batches[self.position - 1]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._batches = self._epoch_batches(self.epoch)


def lr_factor(step: int, config: TrainConfig) -> float:
    """Multiplier of ``config.lr`` at ``step``: linear warm-up, then cosine or inverse-square-root decay."""
    if step < config.warmup:
        return (step + 1) / config.warmup
    if config.decay == "inverse_sqrt":
        return math.sqrt(config.warmup / (step + 1)) if config.warmup else 1.0 / math.sqrt(step + 1)
    if config.decay != "cosine":
        raise ValueError(f"decay must be 'cosine' or 'inverse_sqrt', got {config.decay!r}")
    progress = min(1.0, (step - config.warmup) / max(1, config.steps - config.warmup))
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices (weights and embedding tables), none on biases and norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    # fused on CUDA; elsewhere foreach (one call per update op for all the tensors): the same numbers, bit for bit,
    # as the default loop over them, and on a CPU the TINY run's whole step takes 13 % less time
    cuda = device.type == "cuda"
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, fused=cuda, foreach=None if cuda else True)


# ---------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class Evaluation:
    """Exact-match accuracy on a list of pairs, with every prediction."""

    accuracy: float  # fraction of pairs whose whole output string is right
    pairs: list[Pair]
    predictions: list[str]
    seconds: float

    @property
    def mistakes(self) -> list[tuple[str, str, str]]:
        """``(source, expected, predicted)`` for every wrong output."""
        return [(s, t, p) for (s, t), p in zip(self.pairs, self.predictions, strict=True) if p != t]

    def __repr__(self) -> str:
        right = round(self.accuracy * len(self.pairs))
        return f"Evaluation(exact match {self.accuracy:.2%}: {right} of {len(self.pairs)} in {self.seconds:.1f} s)"


#: The beam width :func:`exact_match` and :meth:`Trainer.evaluate` decode with when they are given no decoder. Not 1:
#: greedy decoding is the ``greedy_decode`` of Chapter 6's exercises, which you pass as ``decoder`` yourself.
DEFAULT_BEAM = 2


def default_decoder(model: nn.Module, src: Tensor, start_id: int, end_id: int, max_len: int) -> Tensor:
    """The decoder used when none is given: :func:`~attention_course.models.beam_search` with a beam of
    :data:`DEFAULT_BEAM`; ``src (B, S)`` → ``(B, L)`` ids."""
    return beam_search(model, src, start_id, end_id, max_len, beam_size=DEFAULT_BEAM)


@torch.no_grad()
def exact_match(model: nn.Module, task: Seq2SeqTask, pairs: list[Pair], decoder: Decoder | None = None,
                batch_size: int = 500, device: torch.device | None = None) -> Evaluation:
    """Decode every source of ``pairs`` with ``decoder`` and count the outputs that equal the target exactly.

    ``decoder(model, src, start_id, end_id, max_len) -> (B, L) ids`` is any decoder with the contract of Chapter
    6's ``greedy_decode`` (your own, say, or ``functools.partial(beam_search, beam_size=4)``); ``None`` means
    :func:`default_decoder`, beam search with a beam of :data:`DEFAULT_BEAM`.
    """
    decoder = decoder or default_decoder
    device = device or next(model.parameters()).device
    tok, max_len = task.tgt_tokenizer, task.max_tgt_len + 2  # <start> + the longest target + <end>
    tic, predictions = time.perf_counter(), []
    with in_eval_mode(model):
        for start in range(0, len(pairs), batch_size):
            src, _ = task.batch(pairs[start:start + batch_size], device)
            ids = decoder(model, src, tok.start_id, tok.end_id, max_len)  # (B, L)
            predictions += [tok.decode(row) for row in ids.cpu()]
    right = sum(p == t for p, (_, t) in zip(predictions, pairs, strict=True))
    return Evaluation(right / max(1, len(pairs)), pairs, predictions, time.perf_counter() - tic)


# ---------------------------------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class History:
    """Losses recorded during training: one training loss per step, a validation loss every ``eval_every``."""

    train_loss: list[float] = field(default_factory=list)  # index i: the loss of step i + 1
    valid_step: list[int] = field(default_factory=list)
    valid_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    seconds: float = 0.0  # training time, evaluation included


class Trainer:
    """Trains ``model`` on ``task`` as ``config`` says; :meth:`fit` runs, :meth:`save` / :meth:`load` checkpoint.

    The model is moved to the chosen device. With ``config.compile`` the
    training steps go through ``torch.compile(model)``, which shares its
    parameters with ``model``; evaluation and generation use ``model`` itself.
    """

    def __init__(self, model: nn.Module, task: Seq2SeqTask, config: TrainConfig = TINY) -> None:
        self.config, self.task = config, task
        self.device = pick_device(config.device)
        self.amp_dtype = autocast_dtype(config.precision, self.device)
        self.model = model.to(self.device)
        self.pad_id = model.config.pad_id
        self.step_model = torch.compile(self.model) if config.compile else self.model
        self.optimizer = make_optimizer(self.model, config, self.device)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, config))
        self.order = BatchOrder([len(s) for s, _ in task.train], config.batch_size, config.seed, config.bucket)
        self.step, self.history = 0, History()
        torch.manual_seed(config.seed)  # dropout draws from here

    def autocast(self) -> contextlib.AbstractContextManager:
        """The autocast context of this run (bf16 or nothing)."""
        return autocast(self.device, self.amp_dtype)

    def loss_on(self, src: Tensor, tgt: Tensor, model: nn.Module | None = None, label_smoothing: float = 0.0) -> Tensor:
        """Teacher-forced loss of one batch ``(src (B, T_src), tgt (B, T))`` already on the device."""
        tok = self.task.tgt_tokenizer
        tgt_in, tgt_out = teacher_forcing(tgt, tok.start_id, tok.end_id, self.pad_id)  # (B, T + 1) each
        with self.autocast():
            logits = (model or self.step_model)(src, tgt_in)  # (B, T + 1, V): every position in one pass
        return token_loss(logits, tgt_out, self.pad_id, label_smoothing=label_smoothing)

    def train_step(self, batch: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """One optimiser step on ``batch`` (default: the next training batch); returns the loss.

        The loss is a 0-dim tensor on the device, not yet synchronised: ``float(loss)`` waits for the GPU.
        """
        self.model.train()
        if batch is None:
            batch = self.task.batch([self.task.train[i] for i in self.order.next()], self.device)
        src, tgt = batch
        loss = self.loss_on(src, tgt, label_smoothing=self.config.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return loss.detach()

    @torch.no_grad()
    def validation_loss(self, batch_size: int = 500) -> float:
        """Teacher-forced loss over the whole validation split, averaged over its non-pad targets."""
        total, count = 0.0, 0
        with in_eval_mode(self.model):
            for start in range(0, len(self.task.valid), batch_size):
                src, tgt = self.task.batch(self.task.valid[start:start + batch_size], self.device)
                n = int((tgt != self.pad_id).sum()) + len(tgt)  # targets scored: the tokens and one <end> per row
                total += float(self.loss_on(src, tgt, self.model)) * n
                count += n
        return total / count

    def fit(self, steps: int | None = None, progress: bool = True, log: bool = True) -> History:
        """Train until ``steps`` (default ``config.steps``) steps in all have been taken; returns the history.

        ``progress`` shows a tqdm bar when tqdm is installed; otherwise, or
        with ``progress=False``, a line is printed every ``config.log_every``
        steps (``log=False``: nothing is printed).
        """
        steps = self.config.steps if steps is None else steps
        bar = _progress_bar(steps, self.step, progress and log)
        tic, pending = time.perf_counter(), []
        while self.step < steps:
            pending.append(self.train_step())
            self.history.lr.append(self.scheduler.get_last_lr()[0])
            at_eval = self.config.eval_every and self.step % self.config.eval_every == 0
            if at_eval or self.step % self.config.log_every == 0 or self.step == steps:
                self.history.train_loss += torch.stack(pending).tolist()  # one synchronisation per interval
                pending = []
                if at_eval:
                    self.history.valid_step.append(self.step)
                    self.history.valid_loss.append(self.validation_loss())
                self._report(bar, log, tic)
        if bar is not None:
            bar.close()
        self.history.seconds += time.perf_counter() - tic
        return self.history

    def _report(self, bar: object, log: bool, tic: float) -> None:
        h = self.history
        valid = f"  valid {h.valid_loss[-1]:.4f}" if h.valid_step and h.valid_step[-1] == self.step else ""
        if bar is not None:
            bar.update(self.step - bar.n)
            bar.set_postfix_str(f"loss {h.train_loss[-1]:.4f}{valid}")
        elif log and (self.step % self.config.log_every == 0 or self.step == self.config.steps):
            print(f"step {self.step:>5}  loss {h.train_loss[-1]:.4f}{valid}  lr {h.lr[-1]:.2e}  "
                  f"{h.seconds + time.perf_counter() - tic:5.1f} s", flush=True)

    def evaluate(self, split: str = "test", decoder: Decoder | None = None, limit: int | None = None) -> Evaluation:
        """Exact match on the first ``limit`` pairs (default: all) of a split (``"valid"`` or ``"test"``).

        ``decoder`` as in :func:`exact_match`: ``None`` decodes with beam search of width :data:`DEFAULT_BEAM`;
        pass your ``greedy_decode`` from the Chapter 6 exercises to evaluate greedily.
        """
        pairs = self.task.split(split)[:limit]
        return exact_match(self.model, self.task, pairs, decoder, device=self.device)

    # -- checkpoints -------------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write everything needed to resume: model, optimizer, schedule, step, history, batch order, RNGs."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(), "step": self.step, "order": self.order.state_dict(),
                    "history": asdict(self.history), "rng": rng, "config": asdict(self.config)}, path)
        return path

    def load(self, path: str | Path) -> Trainer:
        """Restore a checkpoint written by :meth:`save` into this trainer; training then goes on identically."""
        state = torch.load(path, map_location=self.device, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        self.order.load_state_dict(state["order"])
        self.history = History(**state["history"])
        torch.set_rng_state(state["rng"]["torch"].cpu())
        random.setstate(state["rng"]["python"])
        if "cuda" in state["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng"]["cuda"]])
        return self


def _progress_bar(total: int, done: int, wanted: bool) -> object | None:
    if not wanted:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=done, unit="step", dynamic_ncols=True)


# ---------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    """``python -m attention_course.training --config gpu --out runs/gpu [--resume] [--steps N] ...``"""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="tiny", choices=sorted(CONFIGS))
    parser.add_argument("--steps", type=int, help="override the number of steps")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, mps (default: pick automatically)")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"))
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads on the CPU")
    parser.add_argument("--out", default="runs", help="folder of the checkpoint (OUT/CONFIG.pt)")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/CONFIG.pt")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in (("steps", args.steps), ("device", args.device), ("precision", args.precision),
                                   ("compile", args.compile)) if v is not None}
    config = get_config(args.config, **overrides)
    if args.threads:
        torch.set_num_threads(args.threads)
    task = TASKS[config.task]()
    seed_everything(config.seed)
    trainer = Trainer(TorchTransformer(model_config(config, task)), task, config)
    checkpoint = Path(args.out) / f"{config.name}.pt"
    if args.resume and checkpoint.exists():
        trainer.load(checkpoint)
    n_params = sum(p.numel() for p in trainer.model.parameters())
    print(f"{config.name}: {n_params:,} parameters on {trainer.device}, autocast {trainer.amp_dtype}, "
          f"compile {config.compile}; {task}", flush=True)
    history = trainer.fit(progress=sys.stderr.isatty())
    trainer.save(checkpoint)
    result = trainer.evaluate("test")
    print(f"trained {trainer.step} steps in {history.seconds:.1f} s; test {result}; checkpoint {checkpoint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
