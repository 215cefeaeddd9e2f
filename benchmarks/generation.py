"""Generation's speed-ups, measured: Chapter 7's KV cache and grouped-query attention, Chapter 9's online softmax.

Three tables from the course's reference ``solutions/gpt.py`` and ``solutions/flash_attention.py`` (a course-side
script, like ``reference.py``), and
a fourth of published configurations:

1. **Generation with and without the KV cache.** A freshly initialised small GPT (``--d-model`` 128, 4 heads,
   4 layers, ``d_ff`` 512) extends a 16-token prompt by ``N`` tokens with ``generate(use_cache=True)`` and
   ``generate(use_cache=False)``, the same seed for both; the table gives tokens per second (new tokens ÷
   wall time, the fastest of a few runs) and the speed-up, and checks that both made the same tokens.
   Without a cache step ``t`` reruns all ``T0 + t`` positions, so the work grows as ``N²``; with it each
   step runs one position against the cached keys.

2. **Peak memory of the online softmax against full attention.** ``online_softmax_attention`` (blocks of
   ``--block`` keys), Chapter 1's reference ``scaled_dot_product_attention`` (the full ``(T, T)`` scores
   and weights) and ``F.scaled_dot_product_attention`` (PyTorch's fused kernel, for comparison) on
   ``(1, 8, T, 64)`` float32 inputs with a causal mask, without gradients. The peak is the most bytes
   allocated at once during the call, above what was allocated before it
   (``attention_course.benchmark_generation.peak_bytes``):

   - on CUDA, ``torch.cuda.max_memory_allocated()`` minus the allocation before the call (the caching
     allocator's own count, every kernel's workspace included);
   - on the CPU, ``torch.profiler`` with ``profile_memory=True``: every allocation and free of PyTorch's
     CPU allocator, in order, those made inside a kernel's C++ code included (the fused kernel's
     scratch buffers; a ``TorchDispatchMode``, which this script used before, sees only the tensors
     operators return and missed them).

   The inputs and the causal mask, ``(T, T)`` booleans, exist before the call and are not counted. The
   table also gives each path's largest difference from a float64 reference computed once per length
   (``reference_attention``), independent of all three.

3. **KV-cache size with and without sharing.** The bytes the allocator still holds after the benchmark's
   GPT has read ``T`` tokens into a fresh ``KVCache`` (``attention_course.benchmark_generation.held_bytes``),
   for ``n_kv_heads = n_heads`` (multi-head), ``n_heads / 4`` (grouped-query) and 1 (multi-query), against
   the formula ``2 · n_layers · B · n_kv_heads · T · d_head`` elements.

4. **Published configurations** (``MODELS``): the cache per token and at the model's full context, the
   weights, and the batch × context at which the cache outweighs the weights, in 16-bit numbers.

Goals, checked at the end (exit status 1 if one is missed): at 512 new tokens the cache makes generation at
least 5× faster, and at ``T = 4096`` the online softmax peaks at no more than a tenth of full attention's
memory and agrees with SDPA within 1e-5. The measuring functions are those of
``attention_course.benchmark_generation`` (which learners run on their own ``GPT`` and
``online_softmax_attention``); this script feeds them the reference.

Usage::

    python benchmarks/generation.py                          # CPU, one thread
    python benchmarks/generation.py --quick                  # small sizes, seconds
    python benchmarks/generation.py --device cuda
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from attention_course.benchmark_generation import (  # noqa: E402
    attention_memory,
    generation_speed,
    held_bytes,
    kv_cache_bytes,
    memory_table,
    models_table,
    sdpa_attention,
    speed_table,
    where_measured,
)
from solutions.flash_attention import online_softmax_attention  # noqa: E402
from solutions.gpt import GPT, GPTConfig, KVCache, generate  # noqa: E402
from solutions.masking import causal_mask  # noqa: E402
from solutions.self_attention import scaled_dot_product_attention  # noqa: E402


def small_gpt(args: argparse.Namespace, device: torch.device, max_len: int, n_kv_heads: int | None = None) -> GPT:
    config = GPTConfig(vocab=args.vocab, d_model=args.d_model, n_heads=args.heads, n_kv_heads=n_kv_heads,
                       n_layers=args.layers, d_ff=4 * args.d_model, max_len=max_len, fused_attention=args.fused)
    torch.manual_seed(0)
    return GPT(config).to(device).eval()


def generation_rows(args: argparse.Namespace, device: torch.device):
    prompt_len = 16
    model = small_gpt(args, device, prompt_len + max(args.new_tokens))
    prompt = torch.randint(0, args.vocab, (args.batch, prompt_len), generator=torch.Generator().manual_seed(1))
    prompt = prompt.to(device)

    def make(n: int, use_cache: bool) -> Tensor:  # the draws seeded alike in every run
        g = torch.Generator(device=device).manual_seed(2)
        return generate(model, prompt, n, use_cache=use_cache, generator=g)

    return generation_speed(make, args.new_tokens, batch=args.batch, device=device, repeats=args.repeats,
                            budget_s=args.budget)


def memory_rows(args: argparse.Namespace, device: torch.device):
    masks = {t: causal_mask(t, device=device) for t in args.lengths}  # (T, T) inputs, made before the measurement
    paths = {"full": lambda q, k, v: scaled_dot_product_attention(q, k, v, masks[q.shape[-2]])[0],
             "online": lambda q, k, v: online_softmax_attention(q, k, v, masks[q.shape[-2]],
                                                                         block_size=args.block),
             "SDPA": sdpa_attention}
    return attention_memory(paths, args.lengths, device=device, repeats=args.repeats, budget_s=args.budget)


def measured_cache(args: argparse.Namespace, device: torch.device, n_kv_heads: int, t: int) -> int:
    """The bytes the allocator still holds after the benchmark's GPT (with ``n_kv_heads``) has read ``t`` tokens
    into a fresh ``KVCache``, one token at a time (so that every step's ``torch.cat`` copy comes and goes)."""
    model = small_gpt(args, device, t, n_kv_heads)
    tokens = torch.zeros(args.batch, t, dtype=torch.long, device=device)

    def fill() -> KVCache:
        cache = KVCache(model.config.n_layers)
        with torch.no_grad():
            for i in range(t):
                model(tokens[:, i:i + 1], cache)
        return cache

    held, _ = held_bytes(fill, device)
    return held


def goals(speed, memory, args: argparse.Namespace) -> list[str]:
    """The goals this script holds the reference to; a line each, ending in 'met' or 'MISSED'."""
    lines = []
    at = {r.new_tokens: r for r in speed}
    if 512 in at:
        r = at[512]
        ok = r.speed_up >= 5 and r.same_tokens
        lines.append(f"cached >= 5x faster at 512 new tokens, same tokens: {r.speed_up:.1f}x, "
                     f"{'same' if r.same_tokens else 'DIFFERENT'}: {'met' if ok else 'MISSED'}")
    by = {(r.name, r.T): r for r in memory}
    if ("online", 4096) in by:
        full, online = by[("full", 4096)], by[("online", 4096)]
        ratio = full.peak_bytes / max(online.peak_bytes, 1)
        ok = ratio >= 10 and online.max_error <= 1e-5
        lines.append(f"online softmax at T=4096 <= 1/10 of full attention's peak, within 1e-5: {ratio:.1f}x less, "
                     f"error {online.max_error:.1e}: {'met' if ok else 'MISSED'}")
    return lines


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
    print(where_measured(device), flush=True)

    print(f"\n1. Generation, GPT d_model={args.d_model}, {args.heads} heads, {args.layers} layers, vocab {args.vocab}, "
          f"B={args.batch}, 16-token prompt, {'fused' if args.fused else 'readable'} attention, fp32", flush=True)
    speed = generation_rows(args, device)
    print(speed_table(speed), flush=True)
    print(f"\n2. Attention over (1, 8, T, 64) fp32, causal mask: full (Chapter 1 reference) vs online softmax "
          f"(block {args.block}) vs SDPA; peak memory above the inputs", flush=True)
    memory = memory_rows(args, device)
    print(memory_table(memory), flush=True)
    t = 128 if args.quick else 512
    print(f"\n3. KV-cache size of {args.batch} sequence(s) of {t} positions, fp32: held by the allocator after the "
          "GPT has read them one at a time, against the formula", flush=True)
    d_head = args.d_model // args.heads
    for n_kv in dict.fromkeys((args.heads, max(args.heads // 4, 2), 1)):
        measured, formula = measured_cache(args, device, n_kv, t), kv_cache_bytes(args.layers, n_kv, d_head, t,
                                                                                    args.batch)
        print(f"  {n_kv} key/value head(s): measured {measured:,} bytes, formula {formula:,}"
              f"{'' if measured == formula else f' (differs by {measured - formula:+,})'}", flush=True)
    print("\n4. Published configurations, 16-bit numbers", flush=True)
    print(models_table())
    met = goals(speed, memory, args)
    if met:
        print("\ngoals:\n" + "\n".join(f"  {line}" for line in met))
    return 1 if any(line.endswith("MISSED") for line in met) else 0


if __name__ == "__main__":
    raise SystemExit(main())
