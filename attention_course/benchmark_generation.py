"""Chapter 7's measurements: generation with and without a KV cache, attention's peak memory, KV-cache sizes.

Three measurements, each a function the chapter calls and a table this module prints:

1. :func:`generation_speed`: new tokens per second of a generator run with and without its cache, for
   several numbers of new tokens, and whether both runs made the same tokens. It takes any
   ``make(new_tokens, use_cache) -> tokens`` function: the chapter's :class:`~attention_course.language_model.TorchGPT`,
   or your own ``GPT`` and ``generate`` from the exercises.
2. :func:`attention_memory`: the peak memory (and time) of attention functions ``f(q, k, v) -> out`` on
   ``(1, heads, T, d_head)`` inputs with a causal mask, against ``T``, and each one's largest difference from
   ``F.scaled_dot_product_attention``. :func:`peak_bytes` measures any call: on CUDA with the caching
   allocator's counters, on the CPU with ``torch.profiler`` (``profile_memory=True``), which records every
   allocation and free of PyTorch's CPU allocator, those made inside a kernel's C++ code included (a
   ``TorchDispatchMode`` sees only the tensors that operators return, and misses, for instance, the scratch
   buffers of the fused CPU kernel).
3. :func:`kv_cache_bytes` (the formula) and :func:`filled_cache_bytes` (a filled
   :class:`~attention_course.language_model.LMCache`, measured) for ``n_kv_heads = n_heads``, ``n_heads / 4`` and 1.

Usage::

    python -m attention_course.benchmark_generation                  # CPU (or CUDA when present), one thread
    python -m attention_course.benchmark_generation --quick          # small sizes, seconds
    python -m attention_course.benchmark_generation --device cuda

In the course repository, ``python benchmarks/generation.py`` measures the reference ``solutions.gpt`` with
the same functions.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_course.benchmark_attention import best_seconds, fused_attention, manual_attention
from attention_course.language_model import LMSizes, TorchGPT

#: ``f(q, k, v) -> out``, causal self-attention on ``(B, H, T, d_head)`` tensors.
AttentionFn = Callable[[Tensor, Tensor, Tensor], Tensor]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- 1. tokens per second ---------------------------------------------------------------------------------------

@dataclass
class SpeedRow:
    """One number of new tokens: the fastest seconds with and without the cache, and whether they agreed."""

    new_tokens: int
    batch: int
    cached_s: float
    uncached_s: float
    same_tokens: bool

    @property
    def cached_rate(self) -> float:
        return self.batch * self.new_tokens / self.cached_s

    @property
    def uncached_rate(self) -> float:
        return self.batch * self.new_tokens / self.uncached_s

    @property
    def speed_up(self) -> float:
        return self.uncached_s / self.cached_s


def generation_speed(make: Callable[[int, bool], Tensor], new_tokens: Sequence[int], *, batch: int = 1,
                     device: torch.device | str = "cpu", repeats: int = 3, budget_s: float = 20.0) -> list[SpeedRow]:
    """Time ``make(n, use_cache)`` (which generates ``n`` new tokens for ``batch`` sequences and returns them) with
    and without the cache, for each ``n``: the fastest of ``repeats`` runs after a warm-up (fewer once ``budget_s``
    is spent). ``make`` should seed its own draws, so that both runs can make the same tokens.

    Raises:
        ValueError: if a number of new tokens is below 1, or ``batch`` or ``repeats`` is.
    """
    if not new_tokens or min(new_tokens) < 1 or batch < 1 or repeats < 1:
        raise ValueError(f"new_tokens must be numbers >= 1 and batch, repeats >= 1; got {list(new_tokens)}, "
                         f"batch={batch}, repeats={repeats}")
    device = torch.device(device)
    rows = []
    for n in new_tokens:
        made: dict[bool, Tensor] = {}
        seconds = {}
        for use_cache in (True, False):
            def run(use_cache: bool = use_cache, n: int = n, made: dict[bool, Tensor] = made) -> None:
                made[use_cache] = make(n, use_cache)

            seconds[use_cache] = best_seconds(run, device, repeats, budget_s)
        rows.append(SpeedRow(n, batch, seconds[True], seconds[False], torch.equal(made[True], made[False])))
    return rows


def speed_table(rows: list[SpeedRow]) -> str:
    """Per number of new tokens: tokens per second with and without the cache, the speed-up, the same tokens?"""
    lines = [f"{'new tokens':>10} {'cached tok/s':>13} {'uncached tok/s':>15} {'speed-up':>9}  same tokens", "-" * 62]
    lines += [f"{r.new_tokens:>10} {r.cached_rate:>13,.0f} {r.uncached_rate:>15,.0f} {r.speed_up:>8.1f}×  "
              f"{'yes' if r.same_tokens else 'NO'}" for r in rows]
    return "\n".join(lines)


# --- 2. peak memory ---------------------------------------------------------------------------------------------

def peak_bytes(run: Callable[[], object], device: torch.device | str = "cpu") -> tuple[int, object]:
    """``(peak, result)``: the most bytes allocated at once during ``run()`` above what was allocated before it,
    and what ``run`` returned.

    On CUDA: ``torch.cuda.max_memory_allocated()`` minus ``memory_allocated()`` before the call. On the CPU:
    ``torch.profiler`` with ``profile_memory=True`` records each allocation and free of PyTorch's CPU allocator
    with its time; the peak is the largest running total. Both count every buffer a kernel allocates, not only
    the tensors it returns; neither counts memory a library takes outside PyTorch's allocator.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before, out
    from torch.profiler import ProfilerActivity, profile

    with _native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = run()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:  # + for an allocation, - for a free
        live += nbytes
        peak = max(peak, live)
    return peak, out


@contextlib.contextmanager
def _native_stderr_silenced():
    """Some builds of the profiler's C++ side (kineto) write a line to the process's stderr each time it starts and
    stops; keep those off the page while it runs. Python's own errors still surface as exceptions."""
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (an embedded interpreter): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def full_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention written out: the ``(T, T)`` scores and weights of every head exist at once."""
    return manual_attention(q, k, v, True)


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``F.scaled_dot_product_attention(is_causal=True)``: its fused kernels run an online softmax over key blocks."""
    return fused_attention(q, k, v, True)


#: The two paths the chapter compares; add your own ``f(q, k, v)`` to the dictionary you pass.
ATTENTION_PATHS: dict[str, AttentionFn] = {"full": full_attention, "fused (SDPA)": sdpa_attention}


@dataclass
class MemoryRow:
    """One (attention function, length): peak bytes above the inputs, fastest milliseconds, largest difference."""

    name: str
    T: int
    peak_bytes: int
    ms: float | None
    max_error: float


def attention_memory(paths: dict[str, AttentionFn], lengths: Sequence[int], *, heads: int = 8, d_head: int = 64,
                     device: torch.device | str = "cpu", repeats: int = 1, budget_s: float = 10.0,
                     time_it: bool = True) -> list[MemoryRow]:
    """Peak memory and time of each ``paths[name](q, k, v)`` on causal ``(1, heads, T, d_head)`` float32 inputs
    (made before the measurement, so not counted), without gradients; and the largest difference of its
    output from ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``.

    Raises:
        ValueError: if ``paths`` is empty or a length is below 1.
    """
    if not paths or not lengths or min(lengths) < 1:
        raise ValueError(f"give at least one attention function and lengths >= 1; got {list(paths)}, {list(lengths)}")
    device = torch.device(device)
    rows = []
    for t in lengths:
        g = torch.Generator().manual_seed(t)
        q, k, v = (torch.randn(1, heads, t, d_head, generator=g).to(device) for _ in range(3))
        with torch.no_grad():
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            for name, attend in paths.items():
                call = functools.partial(attend, q, k, v)
                peak, out = peak_bytes(call, device)
                error = (out - expected).abs().max().item()
                del out
                ms = 1e3 * best_seconds(call, device, repeats, budget_s) if time_it else None
                rows.append(MemoryRow(name, t, peak, ms, error))
    return rows


def memory_table(rows: list[MemoryRow]) -> str:
    """Per length: each function's peak MiB and ms, then its error (largest difference from SDPA)."""
    names = list(dict.fromkeys(r.name for r in rows))
    head = f"{'T':>5} " + " ".join(f"{n[:14] + ' MiB':>18} {n[:14] + ' ms':>17}" for n in names)
    head += "  " + " ".join(f"{'error ' + n[:14]:>22}" for n in names)
    lines = [head, "-" * len(head)]
    by = {(r.name, r.T): r for r in rows}
    for t in sorted({r.T for r in rows}):
        cells = []
        for n in names:
            r = by[(n, t)]
            cells.append(f"{r.peak_bytes / 2**20:>18.2f} {'-' if r.ms is None else f'{r.ms:.1f}':>17}")
        errors = " ".join(f"{by[(n, t)].max_error:>22.1e}" for n in names)
        lines.append(f"{t:>5} " + " ".join(cells) + "  " + errors)
    return "\n".join(lines)


# --- 3. KV-cache size -------------------------------------------------------------------------------------------

def kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, length: int, batch: int = 1,
                   bytes_per_element: int = 4) -> int:
    """Keys and values of every layer: ``2 · n_layers · B · n_kv_heads · T · d_head · bytes per element``.

    Raises:
        ValueError: if a size is below 1 (a length of 0 is an empty cache: 0 bytes).
    """
    sizes = {"n_layers": n_layers, "n_kv_heads": n_kv_heads, "d_head": d_head, "batch": batch,
             "bytes_per_element": bytes_per_element}
    if min(sizes.values()) < 1 or length < 0:
        raise ValueError(f"the sizes must be at least 1 and the length at least 0, got {sizes}, length={length}")
    keys_and_values = 2  # one key and one value per layer, sequence, key/value head and position
    return keys_and_values * n_layers * batch * length * n_kv_heads * d_head * bytes_per_element


def filled_cache_bytes(sizes: LMSizes, length: int, batch: int = 1, device: torch.device | str = "cpu") -> int:
    """Bytes of a :class:`~attention_course.language_model.TorchGPT`'s cache made for ``length`` positions, after
    the model has read ``length`` tokens into it (a fresh model of ``sizes``; the values do not matter here).

    Raises:
        ValueError: if ``length`` is not in ``[1, sizes.context]``.
    """
    if not 1 <= length <= sizes.context:
        raise ValueError(f"length must be in [1, context={sizes.context}], got {length}")
    model = TorchGPT(sizes).to(device).eval()
    cache = model.new_cache(batch, length)
    with torch.no_grad():
        model(torch.zeros(batch, length, dtype=torch.long, device=device), cache)
    if cache.length != length:
        raise AssertionError(f"the cache holds {cache.length} positions after reading {length}")
    return cache.nbytes


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


#: Well-known sizes for the cache table: (name, n_layers, n_heads, d_head, T, bytes per element).
KNOWN_SIZES = [("GPT-2 small sizes, fp16", 12, 12, 64, 1024, 2),
               ("7B-class (32 layers, 32 heads of 128), fp16", 32, 32, 128, 4096, 2),
               ("70B-class (80 layers, 64 heads of 128), fp16", 80, 64, 128, 4096, 2)]


def cache_table(measured: list[tuple[str, int, int, int, int, int, Callable[[int], int] | None]]) -> str:
    """One line per configuration ``(name, n_layers, n_heads, d_head, T, bytes per element, measure)``: the cache of
    one sequence for ``n_kv_heads = n_heads`` (MHA), ``n_heads // 4`` (GQA) and 1 (MQA). Where ``measure`` is
    given, ``measure(n_kv_heads)`` is a filled cache's bytes and must equal the formula (AssertionError if not)."""
    head = f"{'configuration':<46} {'T':>5} {'n_heads':>7}  {'MHA':>10} {'GQA (n/4)':>20} {'MQA (1)':>10}"
    lines = [head, "-" * len(head)]
    for name, layers, heads, d_head, t, nbytes, measure in measured:
        cells = []
        for n_kv in (heads, max(heads // 4, 1), 1):
            size = kv_cache_bytes(layers, n_kv, d_head, t, 1, nbytes)
            if measure is not None and measure(n_kv) != size:
                raise AssertionError(f"{name}: the filled cache disagrees with the formula for n_kv_heads={n_kv}")
            cells.append(_size(size) + (f" ({n_kv} heads)" if n_kv not in (heads, 1) else ""))
        lines.append(f"{name:<46} {t:>5} {heads:>7}  {cells[0]:>10} {cells[1]:>20} {cells[2]:>10}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line: the three tables for :class:`~attention_course.language_model.TorchGPT` (freshly
    initialised) and for full attention against ``F.scaled_dot_product_attention``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--quick", action="store_true", help="small sizes: the whole run in seconds")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for the CPU (default 1)")
    parser.add_argument("--new-tokens", type=int, nargs="+", default=None, help="default: 64 128 256 512")
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help="default: 512 1024 2048 4096")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    new_tokens = args.new_tokens or ([16, 32] if args.quick else [64, 128, 256, 512])
    lengths = args.lengths or ([256, 512] if args.quick else [512, 1024, 2048, 4096])
    repeats = 1 if args.quick else args.repeats
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda"
             else f", {torch.get_num_threads()} thread(s) of {os.cpu_count()} cores"), flush=True)

    prompt_len = 16
    sizes = LMSizes(vocab=96, context=prompt_len + max(new_tokens), d_model=args.d_model, n_heads=args.heads,
                    n_layers=args.layers)
    torch.manual_seed(0)
    model = TorchGPT(sizes).to(device).eval()
    prompt = torch.randint(0, sizes.vocab, (1, prompt_len), generator=torch.Generator().manual_seed(1)).to(device)

    def make(n: int, use_cache: bool) -> Tensor:
        g = torch.Generator(device=device).manual_seed(2)
        pick = lambda logits: torch.multinomial(logits.softmax(dim=-1), 1, generator=g).squeeze(-1)  # noqa: E731
        return model.generate(prompt, n, pick=pick, use_cache=use_cache)

    print(f"\n1. Generation, TorchGPT d_model={args.d_model}, {args.heads} heads, {args.layers} layers, vocab 96, "
          f"B=1, {prompt_len}-token prompt, fp32", flush=True)
    print(speed_table(generation_speed(make, new_tokens, device=device, repeats=repeats,
                                       budget_s=1.0 if args.quick else 20.0)), flush=True)
    print("\n2. Causal attention over (1, 8, T, 64) fp32: full (T × T) against F.scaled_dot_product_attention; "
          "peak memory above the inputs", flush=True)
    print(memory_table(attention_memory(ATTENTION_PATHS, lengths, device=device, repeats=repeats)), flush=True)
    print("\n3. KV-cache size of one sequence (keys and values of every layer)", flush=True)
    t = 256 if args.quick else 1024
    mine = LMSizes(vocab=96, context=t, d_model=args.d_model, n_heads=args.heads, n_layers=args.layers)

    def measure(n_kv: int) -> int:
        return filled_cache_bytes(LMSizes(**{**vars(mine), "n_kv_heads": n_kv}), t, device=device)

    print(cache_table([("this TorchGPT, fp32 (filled cache measured)", mine.n_layers, mine.n_heads, mine.d_head, t, 4,
                        measure), *(row + (None,) for row in KNOWN_SIZES)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
