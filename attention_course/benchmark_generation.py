"""Chapter 7's measurements: generation with and without a KV cache, prefill against decode, attention's peak
memory, and the KV cache's bytes.

Each measurement is a function the chapter calls and a table this module prints:

1. :func:`generation_speed`: new tokens per second of a generator run with and without its cache, for
   several numbers of new tokens, and whether both runs made the same tokens. It takes any
   ``make(new_tokens, use_cache) -> tokens`` function: the chapter's :class:`~attention_course.language_model.TorchGPT`,
   or your own ``GPT`` and ``generate`` from the exercises.
2. :func:`prefill_and_decode`: the same positions read in one pass (prefill) or one token per step (decode),
   timed, for several batch sizes: a decode step does a token's worth of arithmetic per weight it reads.
3. :func:`attention_memory`: the peak memory of attention functions ``f(q, k, v) -> out`` on
   ``(1, heads, T, d_head)`` inputs with a causal mask, against ``T`` (forward only, or forward and backward),
   and each one's largest difference from a float64 reference computed once per length. :func:`peak_bytes`
   measures any call: on CUDA with the caching allocator's counters, on the CPU with ``torch.profiler``
   (``profile_memory=True``), which records every allocation and free of PyTorch's CPU allocator, those made
   inside a kernel's C++ code included (a ``TorchDispatchMode`` sees only the tensors that operators return,
   and misses, for instance, the scratch buffers of the fused CPU kernel).
4. :func:`kv_cache_bytes` (the formula), :func:`measured_cache_bytes` (what the allocator hands a
   :class:`~attention_course.language_model.TorchGPT` for its cache and still holds after the model has read
   the tokens: :func:`held_bytes`), and :data:`MODELS`, published configurations, with the batch × context at
   which their cache outweighs their weights.

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
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attention_course.benchmark_attention import best_seconds, fused_attention, manual_attention
from attention_course.language_model import LMSizes, TorchGPT

#: ``f(q, k, v) -> out``, causal self-attention on ``(B, H, T, d_head)`` tensors.
AttentionFn = Callable[[Tensor, Tensor, Tensor], Tensor]


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
    and without the cache, for each ``n``: the fastest of ``repeats`` runs after a warm-up (at least two runs when
    ``repeats >= 2``; fewer than ``repeats`` once ``budget_s`` is spent). ``make`` should seed its own draws, so
    that both runs can make the same tokens.

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


# --- 2. prefill against decode ----------------------------------------------------------------------------------

@dataclass
class PhaseRow:
    """``batch`` sequences of ``tokens`` positions read into a fresh cache in one pass (prefill) and one position per
    step (decode): the fastest seconds of each, and the largest difference of their last logits."""

    batch: int
    tokens: int
    prefill_s: float
    decode_s: float
    max_difference: float

    @property
    def step_ms(self) -> float:
        """Milliseconds per decode step (one token of each of the ``batch`` sequences)."""
        return 1e3 * self.decode_s / self.tokens

    @property
    def slowdown(self) -> float:
        """How many times longer the same positions take one at a time."""
        return self.decode_s / self.prefill_s


def prefill_and_decode(model: TorchGPT, tokens: int, batches: Sequence[int] = (1,), *, repeats: int = 3,
                       budget_s: float = 10.0, seed: int = 0) -> list[PhaseRow]:
    """For each batch size ``B``: ``B`` sequences of ``tokens`` random ids read into a fresh cache in one forward
    pass, and one id per forward pass; the fastest of ``repeats`` runs each, after a warm-up, without gradients,
    on the model's device. Both read the same positions, with the same arithmetic, into the same cache.

    Raises:
        ValueError: if ``tokens`` does not fit the model's context, or a batch size or ``repeats`` is below 1.
    """
    if not 1 <= tokens <= model.sizes.context or not batches or min(batches) < 1 or repeats < 1:
        raise ValueError(f"tokens must be in [1, context={model.sizes.context}] and batches, repeats >= 1; got "
                         f"tokens={tokens}, batches={list(batches)}, repeats={repeats}")
    device = model.wte.weight.device
    rows = []
    with torch.no_grad():
        for batch in batches:
            draws = torch.Generator().manual_seed(seed)  # the same ids for prefill and decode
            ids = torch.randint(0, model.sizes.vocab, (batch, tokens), generator=draws).to(device)
            last: dict[str, Tensor] = {}

            def prefill(ids: Tensor = ids, last: dict[str, Tensor] = last) -> None:
                last["prefill"] = model(ids, model.new_cache(len(ids), tokens))[:, -1]

            def decode(ids: Tensor = ids, last: dict[str, Tensor] = last) -> None:
                cache = model.new_cache(len(ids), tokens)
                for i in range(tokens):
                    logits = model(ids[:, i:i + 1], cache)  # (B, 1, V)
                last["decode"] = logits[:, -1]

            seconds = [best_seconds(run, device, repeats, budget_s) for run in (prefill, decode)]
            difference = (last["prefill"] - last["decode"]).abs().max().item()
            rows.append(PhaseRow(batch, tokens, *seconds, difference))
    return rows


def phase_table(rows: list[PhaseRow]) -> str:
    """Per batch size: prefill and decode times, the ratio, decode tokens per second."""
    lines = [f"{'batch':>5} {'tokens':>6} {'prefill ms':>11} {'decode ms':>10} {'decode ÷ prefill':>17} "
             f"{'ms per step':>12} {'decode tok/s':>13}", "-" * 80]
    lines += [f"{r.batch:>5} {r.tokens:>6} {1e3 * r.prefill_s:>11.1f} {1e3 * r.decode_s:>10.1f} {r.slowdown:>16.1f}× "
              f"{r.step_ms:>12.2f} {r.batch * r.tokens / r.decode_s:>13,.0f}" for r in rows]
    return "\n".join(lines)


# --- 3. peak memory ---------------------------------------------------------------------------------------------

def _allocations(run: Callable[[], object], device: torch.device) -> tuple[int, int, object]:
    """``(peak, held, result)`` of ``run()``: the most bytes allocated at once above what was allocated before, and
    the bytes allocated during the call and still allocated when it returns (see :func:`peak_bytes`)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = run()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before, torch.cuda.memory_allocated(device) - before, out
    from torch.profiler import ProfilerActivity, profile

    with _native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = run()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:  # + for an allocation, - for a free
        live += nbytes
        peak = max(peak, live)
    return peak, live, out


def peak_bytes(run: Callable[[], object], device: torch.device | str = "cpu") -> tuple[int, object]:
    """``(peak, result)``: the most bytes allocated at once during ``run()`` above what was allocated before it,
    and what ``run`` returned.

    On CUDA: ``torch.cuda.max_memory_allocated()`` minus ``memory_allocated()`` before the call. On the CPU:
    ``torch.profiler`` with ``profile_memory=True`` records each allocation and free of PyTorch's CPU allocator
    with its time; the peak is the largest running total. Both count every buffer a kernel allocates, not only
    the tensors it returns; neither counts memory a library takes outside PyTorch's allocator.
    """
    peak, _, out = _allocations(run, torch.device(device))
    return peak, out


def held_bytes(run: Callable[[], object], device: torch.device | str = "cpu") -> tuple[int, object]:
    """``(held, result)``: the bytes allocated during ``run()`` that are still allocated when it returns (what the
    result keeps alive, when ``run`` frees everything else), measured as :func:`peak_bytes` measures."""
    _, held, out = _allocations(run, torch.device(device))
    return held, out


def operators_run(run: Callable[[], object]) -> set[str]:
    """The names of the ATen operators ``run()`` dispatches (``aten::...``), as ``torch.profiler`` records them: which
    kernel a call chose, and whether it copied anything on the way (``aten::repeat_interleave``, ``aten::copy_``)."""
    from torch.profiler import ProfilerActivity, profile

    with _native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    return {event.key for event in prof.key_averages() if event.key.startswith("aten::")}


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


def where_measured(device: torch.device, load: bool = True) -> str:
    """The line a benchmark prints first: torch's version and the device (the GPU's name, or the CPU's threads of
    its cores), and with ``load`` the load average, which says how shared the machine was."""
    line = f"torch {torch.__version__}, {device}" + (
        f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda"
        else f", {torch.get_num_threads()} thread(s) of {os.cpu_count()} cores")
    return line + (f", load average {os.getloadavg()[0]:.1f}" if load and hasattr(os, "getloadavg") else "")


def full_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention written out: the ``(T, T)`` scores and weights of every head exist at once."""
    return manual_attention(q, k, v, True)


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``F.scaled_dot_product_attention(is_causal=True)``: its fused kernels, when one is eligible, run an online
    softmax over blocks of keys."""
    return fused_attention(q, k, v, True)


#: The two paths the chapter compares; add your own ``f(q, k, v)`` to the dictionary you pass.
ATTENTION_PATHS: dict[str, AttentionFn] = {"full": full_attention, "fused (SDPA)": sdpa_attention}


def reference_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention in float64, one head at a time (so that one ``(T, T)`` float64 matrix exists at once):
    the reference every path is compared with, computed independently of all of them."""
    t, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)  # (T, T): True above the diagonal
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)  # (B, H, T, d)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            scores = (q[b, h].double() @ k[b, h].double().T * scale).masked_fill(future, float("-inf"))  # (T, T)
            out[b, h] = torch.softmax(scores, dim=-1) @ v[b, h].double()
    return out


@dataclass
class MemoryRow:
    """One (attention function, length): peak bytes above the inputs, fastest milliseconds (``None`` when not
    timed), largest difference from the float64 reference."""

    name: str
    T: int
    peak_bytes: int
    ms: float | None
    max_error: float


def attention_memory(paths: dict[str, AttentionFn], lengths: Sequence[int], *, heads: int = 8, d_head: int = 64,
                     device: torch.device | str = "cpu", backward: bool = False, repeats: int = 1,
                     budget_s: float = 10.0, time_it: bool = True) -> list[MemoryRow]:
    """Peak memory (and, with ``time_it``, time) of each ``paths[name](q, k, v)`` on causal ``(1, heads, T, d_head)``
    float32 inputs, made before the measurement and so not counted; and the largest difference of its output
    from :func:`reference_attention`, computed once per length in float64.

    Without ``backward`` the call runs without gradients; with it, the inputs require gradients and the call is
    the forward pass and the backward pass of ``out`` against a fixed gradient (made beforehand): the peak then
    includes what autograd saves for the backward pass and the three input gradients.

    Raises:
        ValueError: if ``paths`` is empty or a length is below 1.
    """
    if not paths or not lengths or min(lengths) < 1:
        raise ValueError(f"give at least one attention function and lengths >= 1; got {list(paths)}, {list(lengths)}")
    device = torch.device(device)
    rows = []
    for t in lengths:
        g = torch.Generator().manual_seed(t)
        q, k, v = (torch.randn(1, heads, t, d_head, generator=g).to(device).requires_grad_(backward) for _ in range(3))
        grad = torch.randn(1, heads, t, d_head, generator=g).to(device)  # d(loss)/d(out), for the backward pass
        expected = reference_attention(q.detach(), k.detach(), v.detach())
        for name, attend in paths.items():
            def call(attend: AttentionFn = attend, q: Tensor = q, k: Tensor = k, v: Tensor = v,
                     grad: Tensor = grad) -> Tensor:
                if not backward:
                    with torch.no_grad():
                        return attend(q, k, v)
                q.grad = k.grad = v.grad = None
                out = attend(q, k, v)
                out.backward(grad)
                return out.detach()

            peak, out = peak_bytes(call, device)
            error = (out.double() - expected).abs().max().item()
            del out
            ms = 1e3 * best_seconds(call, device, repeats, budget_s) if time_it else None
            rows.append(MemoryRow(name, t, peak, ms, error))
    return rows


def memory_table(rows: list[MemoryRow]) -> str:
    """Per length: each function's peak MiB (and ms, where timed), then its largest difference from the float64
    reference."""
    names = list(dict.fromkeys(r.name for r in rows))
    timed = any(r.ms is not None for r in rows)
    head = f"{'T':>5} " + " ".join(f"{n[:14] + ' MiB':>18}" + (f" {n[:14] + ' ms':>17}" if timed else "")
                                   for n in names)
    head += "  " + " ".join(f"{'error ' + n[:14]:>22}" for n in names)
    lines = [head, "-" * len(head)]
    by = {(r.name, r.T): r for r in rows}
    for t in sorted({r.T for r in rows}):
        cells = []
        for n in names:
            r = by[(n, t)]
            cells.append(f"{r.peak_bytes / 2**20:>18.2f}"
                         + (f" {'-' if r.ms is None else f'{r.ms:.1f}':>17}" if timed else ""))
        errors = " ".join(f"{by[(n, t)].max_error:>22.1e}" for n in names)
        lines.append(f"{t:>5} " + " ".join(cells) + "  " + errors)
    return "\n".join(lines)


# --- 4. KV-cache size -------------------------------------------------------------------------------------------

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


def measured_cache_bytes(sizes: LMSizes, length: int, batch: int = 1, capacity: int | None = None,
                         device: torch.device | str = "cpu") -> int:
    """The bytes the allocator hands out, and still holds, while a fresh :class:`~attention_course.language_model.
    TorchGPT` of ``sizes`` makes a cache for ``capacity`` positions (default ``length``) and reads ``length``
    tokens into it (:func:`held_bytes`): the cache's key and value buffers and its bookkeeping (which positions
    are padding, how many tokens each sequence has read), nothing that the formula alone would say.

    Raises:
        ValueError: if ``length`` is not in ``[1, capacity]`` or ``capacity`` exceeds ``sizes.context``.
    """
    capacity = capacity or length
    if not 1 <= length <= capacity <= sizes.context:
        raise ValueError(f"need 1 <= length <= capacity <= context={sizes.context}, got length={length}, "
                         f"capacity={capacity}")
    model = TorchGPT(sizes).to(device).eval()
    ids = torch.zeros(batch, length, dtype=torch.long, device=device)

    def fill() -> object:
        cache = model.new_cache(batch, capacity)
        with torch.no_grad():
            model(ids, cache)
        return cache

    held, cache = held_bytes(fill, device)
    if cache.length != length:
        raise AssertionError(f"the cache holds {cache.length} positions after reading {length}")
    return held


@dataclass(frozen=True)
class ModelShape:
    """A published model's sizes, as its configuration gives them."""

    name: str
    params: float  # parameters, embeddings included
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    context: int  # longest sequence it was trained for

    def cache_bytes_per_token(self, bytes_per_element: int = 2) -> int:
        """Keys and values of every layer for one position of one sequence."""
        return kv_cache_bytes(self.n_layers, self.n_kv_heads, self.d_head, 1, 1, bytes_per_element)

    def weight_bytes(self, bytes_per_element: int = 2) -> float:
        return self.params * bytes_per_element

    def crossover_tokens(self) -> float:
        """Batch × context at which the cache weighs as much as the weights (both in the same precision)."""
        return self.weight_bytes() / self.cache_bytes_per_token()


#: Published configurations (each model's ``config.json`` and paper): multi-head (GPT-2, Llama 2 7B) and
#: grouped-query attention with 8 key/value heads (Llama 2 70B, the Llama 3 family).
MODELS = (ModelShape("GPT-2 small", 124.4e6, 12, 12, 12, 64, 1024),
          ModelShape("Llama 2 7B", 6.74e9, 32, 32, 32, 128, 4096),
          ModelShape("Llama 3.2 1B", 1.24e9, 16, 32, 8, 64, 131072),
          ModelShape("Llama 3 8B", 8.03e9, 32, 32, 8, 128, 8192),
          ModelShape("Llama 2 70B", 69.0e9, 80, 64, 8, 128, 4096),
          ModelShape("Llama 3.1 405B", 405e9, 126, 128, 8, 128, 131072))


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:.0f} B"


def models_table(models: Sequence[ModelShape] = MODELS) -> str:
    """Per model, in 16-bit numbers: heads (query/key-value), the cache per token and for one sequence of its full
    context, the weights, and the batch × context at which the cache outweighs them."""
    head = (f"{'model':<16} {'heads q/kv':>10} {'cache/token':>12} {'context':>8} {'cache at context':>17} "
            f"{'weights':>10} {'crossover B×T':>14}")
    lines = [head, "-" * len(head)]
    for m in models:
        per_token = m.cache_bytes_per_token()
        lines.append(f"{m.name:<16} {f'{m.n_heads}/{m.n_kv_heads}':>10} {_size(per_token):>12} {m.context:>8,} "
                     f"{_size(per_token * m.context):>17} {_size(m.weight_bytes()):>10} {m.crossover_tokens():>14,.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line: the tables for :class:`~attention_course.language_model.TorchGPT` (freshly initialised),
    for full attention against ``F.scaled_dot_product_attention``, and for published configurations."""
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
    print(where_measured(device, load=False), flush=True)

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
    tokens = min(sizes.context, 64 if args.quick else 256)
    print(f"\n2. The same {tokens} positions read at once (prefill) or one per step (decode), the same model",
          flush=True)
    print(phase_table(prefill_and_decode(model, tokens, (1, 8) if args.quick else (1, 4, 16, 64), repeats=repeats)),
          flush=True)
    print("\n3. Causal attention over (1, 8, T, 64) fp32: full (T × T) against F.scaled_dot_product_attention; "
          "peak memory above the inputs; error against float64", flush=True)
    print(memory_table(attention_memory(ATTENTION_PATHS, lengths, device=device, repeats=repeats)), flush=True)
    print("\n4. KV cache: this model's, measured by the allocator, and published configurations (16-bit)", flush=True)
    t = 256 if args.quick else 1024
    for n_kv in (args.heads, max(args.heads // 4, 1), 1):
        shared = LMSizes(vocab=96, context=t, d_model=args.d_model, n_heads=args.heads, n_kv_heads=n_kv,
                         n_layers=args.layers)
        measured = measured_cache_bytes(shared, t, device=device)
        formula = kv_cache_bytes(args.layers, n_kv, shared.d_head, t)
        print(f"  {n_kv} key/value heads, T = {t}: measured {_size(measured)}, formula {_size(formula)}")
    print(models_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
