"""Training throughput: tokens per second and model FLOPs utilisation (MFU), with and without the fast paths.

Each *variant* trains the same freshly initialised model for ``--steps`` steps
(after ``--warmup`` untimed steps, which also absorb ``torch.compile``'s
compilation) and reports:

- **tokens/s**: source + target positions processed per second (padding
  included: the hardware computes on it);
- **model TFLOP/s**: the FLOPs the model needs, from the formula of the PaLM
  paper (Chowdhery et al., 2022, appendix B), ``6N + 12·L·H·Q·T`` per token,
  applied to each stack: ``6 N_enc`` per source token and ``6 N_dec`` per
  target token (``N`` = parameters without the embedding tables; forward +
  backward = 3 × the forward's 2 FLOPs per parameter), plus ``12·L·d_model·T``
  per token for the attention scores and weighted sums of each of the ``L``
  attention layers that token's queries run through, ``T`` being the length
  of the keys (``H·Q = d_model``). Recomputed work and padding masks are not
  counted;
- **MFU**: model TFLOP/s ÷ the peak you pass with ``--peak-tflops`` (the
  device's dense bf16 peak, e.g. 989 for an H100 SXM; ``--peak-tflops-fp32``
  for float32 variants, e.g. 67 for an H100 SXM without TF32).

The variants are the product of ``--precisions`` × ``--fused`` × ``--compile``.
The model is :class:`~attention_course.models.TorchTransformer` (``--model
torch``); in the course repository ``python benchmarks/training.py`` runs the
same :func:`main` with one more model, the course's reference ``Transformer``
(``--model reference``, its default there).

Chapter 6 calls these functions, so it measures wherever ``attention_course``
is installed (Colab included). Usage::

    python -m attention_course.benchmark_training --config gpu --peak-tflops 989       # on a GPU
    python -m attention_course.benchmark_training --config tiny --steps 20 --threads 1  # on a CPU
    python -m attention_course.benchmark_training --config gpu --data random --src-len 256 --tgt-len 256 \\
        --peak-tflops 989

It prints a table and writes ``training.csv`` and ``training.png`` to ``--out``
(default ``benchmark-results/``).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor, nn

from attention_course.benchmark_attention import write_csv
from attention_course.models import ModelConfig, TorchTransformer
from attention_course.tasks import Seq2SeqTask, pad_sequences
from attention_course.training import (
    CONFIGS,
    TASKS,
    TrainConfig,
    Trainer,
    model_config,
    pick_device,
    seed_everything,
)

#: Builds a model of the given sizes, with fused attention or the step-by-step path.
ModelBuilder = Callable[[ModelConfig, bool], nn.Module]


def torch_transformer(sizes: ModelConfig, fused: bool) -> nn.Module:
    """:class:`~attention_course.models.TorchTransformer`, PyTorch's own layers."""
    return TorchTransformer(sizes, fused=fused)


#: The models ``--model`` can train, the first by default. ``benchmarks/training.py`` (course repository only)
#: puts ``reference``, the course's ``Transformer``, first.
MODELS: dict[str, ModelBuilder] = {"torch": torch_transformer}


def build_model(kind: str, config: TrainConfig, task: Seq2SeqTask, fused: bool, max_len: int,
                models: dict[str, ModelBuilder] | None = None) -> nn.Module:
    """The model ``kind`` (a key of ``models``, default :data:`MODELS`) with the sizes of ``config`` and ``task``."""
    models = models or MODELS
    if kind not in models:
        raise ValueError(f"no model {kind!r} here; choose from {sorted(models)} (the reference Transformer is "
                         "in the course repository only: benchmarks/training.py)")
    return models[kind](replace(model_config(config, task), max_len=max_len), fused)


def make_batches(task: Seq2SeqTask, n: int, batch_size: int, data: str, src_len: int, tgt_len: int,
                 device: torch.device) -> list[tuple[Tensor, Tensor]]:
    """``n`` batches of one fixed shape (static shapes: no recompilation, comparable steps).

    ``dates``: training pairs padded to the longest source and target of the task; ``random``: random ids
    of exactly ``src_len`` and ``tgt_len`` tokens.
    """
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(n):
        if data == "dates":
            idx = torch.randint(len(task.train), (batch_size,), generator=g).tolist()
            pairs = [task.train[i] for i in idx]
            src = pad_sequences([task.src_tokenizer.encode(s) for s, _ in pairs])
            tgt = pad_sequences([task.tgt_tokenizer.encode(t) for _, t in pairs])
            src = torch.cat([src, src.new_zeros(batch_size, task.max_src_len - src.shape[1])], dim=1)
            tgt = torch.cat([tgt, tgt.new_zeros(batch_size, task.max_tgt_len - tgt.shape[1])], dim=1)
        else:
            src = torch.randint(3, len(task.src_tokenizer), (batch_size, src_len), generator=g)
            tgt = torch.randint(3, len(task.tgt_tokenizer), (batch_size, tgt_len), generator=g)
        batches.append((src.to(device), tgt.to(device)))
    return batches


def stack_params(model: nn.Module) -> tuple[int, int]:
    """(encoder, decoder) parameters without the embedding tables; the output layer counts with the decoder."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    enc = dec = 0
    for name, p in model.named_parameters():
        if id(p) in tables:
            continue
        if name.startswith("encoder"):
            enc += p.numel()
        else:
            dec += p.numel()
    return enc, dec


def flops_per_step(model: nn.Module, batch: tuple[Tensor, Tensor], d_model: int, n_layers: int) -> float:
    """Training FLOPs of one step on ``batch`` (forward + backward), PaLM's 6N + 12·L·H·Q·T per token."""
    src, tgt = batch
    b, s = src.shape
    t = tgt.shape[1] + 1  # the decoder reads <start> + the target
    n_enc, n_dec = stack_params(model)
    dense = 6 * (n_enc * b * s + n_dec * b * t)
    attention = 12 * d_model * n_layers * b * (s * s + t * t + t * s)  # encoder self, decoder self, cross
    return float(dense + attention)


@dataclass
class Result:
    variant: str
    precision: str
    fused: bool
    compile: bool
    step_ms: float
    tokens_per_s: float
    tflops: float
    mfu: float | None
    loss: float
    note: str = ""


def run_variant(args: argparse.Namespace, config: TrainConfig, task: Seq2SeqTask, precision: str, fused: bool,
                compiled: bool, device: torch.device, models: dict[str, ModelBuilder] | None = None) -> Result:
    """Train a fresh ``args.model`` for ``args.warmup`` untimed and ``args.steps`` timed steps; time, FLOPs, loss."""
    name = f"{precision}, {'fused' if fused else 'manual'}{', compile' if compiled else ''}"
    run_config = replace(config, precision=precision, compile=compiled, device=str(device))
    batches = make_batches(task, args.steps + args.warmup, config.batch_size, args.data, args.src_len, args.tgt_len,
                           device)
    max_len = max(config.max_len, batches[0][0].shape[1], batches[0][1].shape[1] + 1)
    seed_everything(0)
    model = build_model(args.model, run_config, task, fused, max_len, models)
    trainer = Trainer(model, task, run_config)
    try:
        for batch in batches[:args.warmup]:
            trainer.train_step(batch)
        _sync(device)
        tic = time.perf_counter()
        for batch in batches[args.warmup:]:
            loss = trainer.train_step(batch)
        _sync(device)
        seconds = time.perf_counter() - tic
    except (torch.OutOfMemoryError, RuntimeError) as err:  # a backend missing on this machine, or no memory
        return Result(name, precision, fused, compiled, float("nan"), 0.0, 0.0, None, float("nan"),
                      str(err).splitlines()[0][:60])
    tokens = sum(s.numel() + t.numel() + t.shape[0] for s, t in batches[args.warmup:])
    flops = sum(flops_per_step(trainer.model, b, config.d_model, config.n_layers) for b in batches[args.warmup:])
    peak = args.peak_tflops if precision != "fp32" else (args.peak_tflops_fp32 or args.peak_tflops)
    tflops = flops / seconds / 1e12
    return Result(name, precision, fused, compiled, 1e3 * seconds / args.steps, tokens / seconds, tflops,
                  tflops / peak if peak else None, float(loss))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def table(results: list[Result]) -> str:
    head = f"{'variant':<24} {'step ms':>9} {'tokens/s':>11} {'TFLOP/s':>9} {'MFU':>7} {'loss':>7}  note"
    lines = [head, "-" * len(head)]
    for r in results:
        mfu = f"{r.mfu:7.1%}" if r.mfu is not None else f"{'-':>7}"
        lines.append(f"{r.variant:<24} {r.step_ms:9.1f} {r.tokens_per_s:11,.0f} {r.tflops:9.4f} {mfu} "
                     f"{r.loss:7.3f}  {r.note}")
    return "\n".join(lines)


def plot(results: list[Result], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(results)), layout="constrained")
    names = [r.variant for r in results]
    ax.barh(names, [r.tokens_per_s for r in results], color="tab:blue")
    for i, r in enumerate(results):
        label = f"{r.tokens_per_s:,.0f}" + (f"  (MFU {r.mfu:.1%})" if r.mfu is not None else "")
        ax.text(r.tokens_per_s, i, " " + label, va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tokens per second (source + target, padding included)")
    ax.set_xlim(0, 1.35 * max(r.tokens_per_s for r in results) or 1)
    ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None, models: dict[str, ModelBuilder] | None = None,
         default_out: str = "benchmark-results") -> int:
    """The command line: parse ``argv`` (default: ``sys.argv``), train every variant, print and write the results.

    ``models``: the models ``--model`` may choose from, the first by default (default :data:`MODELS`);
    ``default_out``: the folder ``--out`` defaults to.
    """
    models = models or MODELS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="gpu", choices=sorted(CONFIGS))
    parser.add_argument("--model", default=next(iter(models)), choices=list(models),
                        help="torch: TorchTransformer (PyTorch's layers); reference: the course's Transformer "
                             "(solutions; benchmarks/training.py in the course repository only)")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per variant")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    parser.add_argument("--batch-size", type=int, help="override the configuration's batch size")
    parser.add_argument("--data", choices=("dates", "random"), default="dates")
    parser.add_argument("--src-len", type=int, default=256, help="with --data random")
    parser.add_argument("--tgt-len", type=int, default=256, help="with --data random")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=("fp32", "bf16"))
    parser.add_argument("--fused", nargs="+", type=int, default=[0, 1], choices=(0, 1))
    parser.add_argument("--compile", nargs="+", type=int, default=[0, 1], choices=(0, 1))
    parser.add_argument("--peak-tflops", type=float, help="the device's peak dense bf16 TFLOP/s, for MFU")
    parser.add_argument("--peak-tflops-fp32", type=float, help="peak fp32 TFLOP/s for fp32 variants")
    parser.add_argument("--device", help="default: CUDA, then MPS, then CPU")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads for the CPU")
    parser.add_argument("--out", default=default_out, help="folder for training.csv and training.png")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = CONFIGS[args.config]
    if args.batch_size:
        config = replace(config, batch_size=args.batch_size)
    device = pick_device(args.device)
    task = TASKS[config.task]()
    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"{device} ({torch.get_num_threads()} threads)")
    print(f"torch {torch.__version__} on {where}; config {config.name}: d_model {config.d_model}, "
          f"{config.n_heads} heads, {config.n_layers}+{config.n_layers} layers, batch {config.batch_size}; "
          f"model {args.model}; data {args.data}; {args.steps} timed steps after {args.warmup}", flush=True)
    results = []
    for precision, fused, compiled in itertools.product(args.precisions, args.fused, args.compile):
        result = run_variant(args, config, task, precision, bool(fused), bool(compiled), device, models)
        results.append(result)
        print(f"  {result.variant:<24} {result.tokens_per_s:11,.0f} tokens/s {result.note}", flush=True)
    print()
    print(table(results))
    out = write_csv(results, Path(args.out) / "training.csv").parent
    plot(results, f"Training throughput, config {config.name} ({args.model} model) on {where}", out / "training.png")
    print(f"\nwrote {out / 'training.csv'} and {out / 'training.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
