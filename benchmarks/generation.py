"""Chapter 7's speed-ups, measured: the KV cache, the online softmax, grouped-query attention.

Three tables, from the course's reference ``solutions/gpt.py`` (a course-side script, like ``reference.py``):

1. **Generation with and without the KV cache.** A freshly initialised small GPT (``--d-model`` 128, 4 heads,
   4 layers, ``d_ff`` 512) extends a 16-token prompt by ``N`` tokens with ``generate(use_cache=True)`` and
   ``generate(use_cache=False)``, the same seed for both; the table gives tokens per second (new tokens ÷
   wall time, the fastest of a few runs) and the speed-up, and checks that both made the same tokens.
   Without a cache step ``t`` reruns all ``T0 + t`` positions, so the work grows as ``N²``; with it each
   step runs one position against the cached keys.

2. **Peak memory of the online softmax against full attention.** ``online_softmax_attention`` (blocks of
   ``--block`` keys) and Chapter 1's reference ``scaled_dot_product_attention`` (the full ``(T, T)``
   scores and weights) on ``(1, 8, T, 64)`` float32 inputs with a causal mask, without gradients. The
   peak is the most bytes of tensor storage alive at once during the call, above what existed before it:

   - on CUDA, ``torch.cuda.max_memory_allocated()`` minus the allocation before the call (the caching
     allocator's own count, every kernel's workspace included);
   - on the CPU, a ``TorchDispatchMode`` that sees every ATen operator the call runs: an output whose
     storage is not one of the operator's inputs' is a new allocation (a view or an in-place result
     is not), its bytes are added to the live total, and a ``weakref.finalize`` on the storage takes them
     off when it is freed. The peak of that total counts every tensor the call creates, exactly, but not
     scratch buffers a kernel allocates inside C++ and frees before it returns (none here: the reference
     and the online softmax are both made of plain ATen operators).

   The inputs and the causal mask, ``(T, T)`` booleans, exist before the call and are not counted. The
   table also gives each path's largest difference from ``F.scaled_dot_product_attention`` in float32.

3. **KV-cache size with and without sharing.** ``2 · n_layers · B · n_kv_heads · T · d_head`` elements (keys
   and values) for ``n_kv_heads = n_heads`` (multi-head), ``n_heads / 4`` (grouped-query) and 1
   (multi-query). The first configuration is the benchmark's own GPT, whose cache is filled and measured
   (``KVCache.nbytes()``) and must equal the formula; the others are the formula for well-known sizes.

Usage::

    python benchmarks/generation.py                          # CPU, one thread
    python benchmarks/generation.py --quick                  # small sizes, seconds
    python benchmarks/generation.py --device cuda
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from solutions.gpt import GPT, GPTConfig, KVCache, generate, online_softmax_attention  # noqa: E402
from solutions.masking import causal_mask  # noqa: E402
from solutions.self_attention import scaled_dot_product_attention  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(run: Callable[[], object], device: torch.device, repeats: int, budget_s: float) -> float:
    """Fastest wall time of ``run()`` over up to ``repeats`` calls after a warm-up (fewer once ``budget_s`` is
    spent): the minimum, as ``timeit`` reports, because other processes only ever make a call slower."""
    run()
    _sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (not times or time.perf_counter() - start < budget_s):
        tic = time.perf_counter()
        run()
        _sync(device)
        times.append(time.perf_counter() - tic)
    return min(times)


# --- 1. generation with and without the cache -------------------------------------------------------------------

def small_gpt(args: argparse.Namespace, device: torch.device, max_len: int) -> GPT:
    config = GPTConfig(vocab=args.vocab, d_model=args.d_model, n_heads=args.heads, n_layers=args.layers,
                       d_ff=4 * args.d_model, max_len=max_len, fused_attention=args.fused)
    torch.manual_seed(0)
    return GPT(config).to(device).eval()


def timed_generation(model: GPT, prompt: Tensor, n: int, use_cache: bool, args: argparse.Namespace,
                     device: torch.device) -> tuple[float, Tensor]:
    """(fastest seconds, tokens) of ``generate(model, prompt, n, use_cache)``, the draws seeded alike every run."""
    made = []

    def run() -> None:
        g = torch.Generator(device=device).manual_seed(2)
        made.append(generate(model, prompt, n, use_cache=use_cache, generator=g))

    return best_seconds(run, device, args.repeats, args.budget), made[-1]


def generation_table(args: argparse.Namespace, device: torch.device) -> str:
    prompt_len = 16
    model = small_gpt(args, device, prompt_len + max(args.new_tokens))
    prompt = torch.randint(0, args.vocab, (args.batch, prompt_len), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)
    lines = [f"{'new tokens':>10} {'cached tok/s':>13} {'uncached tok/s':>15} {'speed-up':>9}  same tokens",
             "-" * 62]
    for n in args.new_tokens:
        cached, with_cache = timed_generation(model, prompt, n, True, args, device)
        uncached, without = timed_generation(model, prompt, n, False, args, device)
        same = "yes" if torch.equal(with_cache, without) else "NO"
        rate = args.batch * n  # new tokens per run
        lines.append(f"{n:>10} {rate / cached:>13,.0f} {rate / uncached:>15,.0f} {uncached / cached:>8.1f}×  {same}")
    return "\n".join(lines)


# --- 2. peak memory of the online softmax -----------------------------------------------------------------------

class PeakTensorMemory(TorchDispatchMode):
    """Counts the bytes of tensor storage created inside the ``with`` block that are alive at once; ``peak``
    is the most. An operator's output is new unless its storage is one of the operator's inputs' (views and
    in-place results share it); a ``weakref.finalize`` on each new storage subtracts it when it is freed."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0

    def _free(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)}
        for t in tree_flatten(out)[0]:
            storage = t.untyped_storage() if isinstance(t, Tensor) else None
            if storage is None or storage.nbytes() == 0 or storage.data_ptr() in inputs:
                continue
            inputs.add(storage.data_ptr())  # an operator returning two views of one new storage counts it once
            self.live += storage.nbytes()
            weakref.finalize(storage, self._free, storage.nbytes())
            self.peak = max(self.peak, self.live)
        return out


def peak_bytes(run: Callable[[], Tensor], device: torch.device) -> tuple[float, Tensor]:
    """Peak bytes allocated during ``run()`` above what was allocated before it, and what it returned."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = run()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - before), out
    counter = PeakTensorMemory()
    with counter:
        out = run()
    return float(counter.peak), out


def attention_row(t: int, args: argparse.Namespace, device: torch.device) -> str:
    """One line of the memory table: the two paths on ``(1, 8, T, 64)`` inputs with a causal mask."""
    g = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(1, 8, t, 64, generator=g).to(device) for _ in range(3))
    mask = causal_mask(t, device=device)  # (T, T), an input of both paths
    paths = {"full": lambda: scaled_dot_product_attention(q, k, v, mask)[0],
             "online": lambda: online_softmax_attention(q, k, v, mask, block_size=args.block)}
    peak, ms, error = {}, {}, {}
    with torch.no_grad():
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        for name, run in paths.items():
            peak[name], out = peak_bytes(run, device)
            error[name] = (out - expected).abs().max().item()
            del out
            ms[name] = 1e3 * best_seconds(run, device, args.repeats, args.budget)
    return (f"{t:>5} {peak['full'] / 2**20:>9.1f} {peak['online'] / 2**20:>11.1f} "
            f"{peak['full'] / peak['online']:>12.1f}× {ms['full']:>8.1f} {ms['online']:>10.1f} "
            f"{error['online']:>20.1e} {error['full']:>18.1e}")


def memory_table(args: argparse.Namespace, device: torch.device) -> str:
    head = (f"{'T':>5} {'full MiB':>9} {'online MiB':>11} {'full ÷ online':>13} {'full ms':>8} {'online ms':>10} "
            f"{'max |online - SDPA|':>20} {'max |full - SDPA|':>18}")
    return "\n".join([head, "-" * len(head), *(attention_row(t, args, device) for t in args.lengths)])


# --- 3. KV-cache size -------------------------------------------------------------------------------------------

def cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, t: int, batch: int, bytes_per_element: int) -> int:
    """Keys and values of every layer: ``2 · n_layers · B · n_kv_heads · T · d_head`` elements."""
    return 2 * n_layers * batch * n_kv_heads * t * d_head * bytes_per_element


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def measured_cache(args: argparse.Namespace, device: torch.device, n_kv_heads: int, t: int) -> int:
    """``KVCache.nbytes()`` after the benchmark's GPT (with ``n_kv_heads``) has read ``t`` tokens."""
    config = GPTConfig(vocab=args.vocab, d_model=args.d_model, n_heads=args.heads, n_kv_heads=n_kv_heads,
                       n_layers=args.layers, d_ff=4 * args.d_model, max_len=t)
    model = GPT(config).to(device).eval()
    cache = KVCache(config.n_layers)
    with torch.no_grad():
        model(torch.zeros(args.batch, t, dtype=torch.long, device=device), cache)
    return cache.nbytes()


def cache_table(args: argparse.Namespace, device: torch.device) -> str:
    t_small = 256 if args.quick else 1024
    # (name, n_layers, n_heads, d_head, T, B, bytes per element)
    sizes = [("this GPT, fp32 (measured)", args.layers, args.heads, args.d_model // args.heads, t_small,
              args.batch, 4),
             ("GPT-2 small sizes, fp16", 12, 12, 64, 1024, 1, 2),
             ("7B-class (32 × 32 heads × 128), fp16", 32, 32, 128, 4096, 1, 2),
             ("70B-class (80 × 64 heads × 128), fp16", 80, 64, 128, 4096, 1, 2)]
    head = f"{'configuration':<40} {'T':>5} {'B':>2} {'n_heads':>7}  {'MHA':>10} {'GQA (n/4)':>19} {'MQA (1)':>17}"
    lines = [head, "-" * len(head)]
    for i, (name, layers, heads, d_head, t, batch, nbytes) in enumerate(sizes):
        cells = []
        for n_kv in (heads, max(heads // 4, 1), 1):
            size = cache_bytes(layers, n_kv, d_head, t, batch, nbytes)
            if i == 0 and measured_cache(args, device, n_kv, t) != size:
                raise AssertionError(f"KVCache.nbytes() disagrees with the formula for n_kv_heads={n_kv}")
            cells.append(f"{_size(size)}" + (f" ({n_kv} heads)" if n_kv not in (heads, 1) else ""))
        lines.append(f"{name:<40} {t:>5} {batch:>2} {heads:>7}  {cells[0]:>10} {cells[1]:>19} {cells[2]:>17}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes: the whole run in seconds")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for the CPU (default 1)")
    parser.add_argument("--new-tokens", type=int, nargs="+", default=None, help="default: 64 128 256 512")
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help="default: 512 1024 2048 4096")
    parser.add_argument("--block", type=int, default=128, help="keys per block of the online softmax")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=96)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--fused", action="store_true", help="the GPT's attention on F.scaled_dot_product_attention")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per point (the fastest is kept)")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per point before repeats are cut short")
    args = parser.parse_args(argv)
    args.new_tokens = args.new_tokens or ([16, 32] if args.quick else [64, 128, 256, 512])
    args.lengths = args.lengths or ([256, 512] if args.quick else [512, 1024, 2048, 4096])
    if args.quick:
        args.repeats, args.budget = 1, 1.0
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else
             f", {torch.get_num_threads()} thread(s) of {os.cpu_count()} cores")
          + (f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""), flush=True)

    print(f"\n1. Generation, GPT d_model={args.d_model}, {args.heads} heads, {args.layers} layers, vocab {args.vocab}, "
          f"B={args.batch}, 16-token prompt, {'fused' if args.fused else 'readable'} attention, fp32", flush=True)
    print(generation_table(args, device), flush=True)
    print(f"\n2. Attention over (1, 8, T, 64) fp32, causal mask: full (Chapter 1 reference) vs online softmax "
          f"(block {args.block}); peak memory above the inputs", flush=True)
    print(memory_table(args, device), flush=True)
    print("\n3. KV-cache size (keys and values of every layer)", flush=True)
    print(cache_table(args, device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
