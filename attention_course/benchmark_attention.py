"""Textbook attention against PyTorch's fused kernel: time and peak memory, forward and backward.

The *manual* path is the equation of Chapter 1, step by step::

    scores = q @ k.transpose(-2, -1) / sqrt(d_head)     # (B, H, T, T): built in memory
    weights = softmax(scores)                            # (B, H, T, T): built again
    out = weights @ v                                    # (B, H, T, d_head)

The *fused* path is ``F.scaled_dot_product_attention``, which on a GPU (flash
or memory-efficient kernels) and on the CPU (a flash-style kernel) works
through the keys in blocks and never stores the ``T × T`` matrices.

Chapter 6 calls these functions and runs this module as a script, so it
measures wherever ``attention_course`` is installed (Colab included). Usage::

    python -m attention_course.benchmark_attention                # CPU, and CUDA when present
    python -m attention_course.benchmark_attention --device cpu --lengths 128 256 512 1024 2048 --threads 1
    python -m attention_course.benchmark_attention --device cuda --lengths 128 256 512 1024 2048 4096 --dtype bf16

It prints a table and writes ``attention.csv`` and ``attention.png`` to ``--out``
(default ``benchmark-results/``). In the course repository,
``python benchmarks/attention.py`` runs the same :func:`main`, with one more
implementation, ``--impls reference``: the course's reference attention.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

Attention = Callable[[Tensor, Tensor, Tensor, bool], Tensor]


def manual_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """softmax(q kᵀ / sqrt(d) + mask) v, materialising the (B, H, T, T) scores and weights."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, d) @ (B, H, d, T) -> (B, H, T, T)
    if causal:
        t = q.shape[-2]
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)  # (T, T): True above the diagonal
        scores = scores.masked_fill(future, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, H, T, T)
    return weights @ v  # (B, H, T, T) @ (B, H, T, d) -> (B, H, T, d)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """PyTorch's fused kernel: same result, no (T, T) matrix kept."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


#: The implementations ``--impls`` can name. ``benchmarks/attention.py`` (course repository only) adds ``reference``.
IMPLS: dict[str, Attention] = {"manual": manual_attention, "fused": fused_attention}

# Names of the ATen operators F.scaled_dot_product_attention dispatches to, as the profiler reports them.
SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "mem-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


def sdpa_backend(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> str:
    """Which kernel ``F.scaled_dot_product_attention`` picks for these inputs.

    Asks PyTorch's dispatcher (``torch._fused_sdp_choice``, the function SDPA itself consults);
    where that private function is missing, runs SDPA under the profiler and reads the operator's name.
    """
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is not None:
        from torch.nn.attention import SDPBackend

        label = SDPBackend(choose(q, k, v, is_causal=causal)).name.lower().replace("_attention", "")
    else:
        from torch.profiler import profile

        with profile() as prof:
            fused_attention(q, k, v, causal)
            _sync(q.device)
        names = {e.name for e in prof.events()}
        label = next((name for op, name in SDPA_OPS.items() if op in names), "math")
    return f"CPU ({label})" if q.device.type == "cpu" else label


def cuda_backends(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> list[str]:
    """The CUDA SDPA backends that accept these inputs, each tried alone with ``sdpa_kernel``."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    usable = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.MATH):
        try:
            with sdpa_kernel([backend]):
                fused_attention(q, k, v, causal)
            usable.append(backend.name.lower())
        except RuntimeError:
            pass
    return usable


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- peak memory ------------------------------------------------------------------------------------------------

def _cpu_memory_probe() -> bool:
    """On Linux: large blocks go straight to mmap (and back on free), so the process's peak RSS tracks tensors."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD = 64 KiB, fixed
        _reset_peak_rss()
        return _status_bytes("VmHWM") > 0
    except (OSError, AttributeError, TypeError):
        return False


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM, the peak resident set size, to the current size


def peak_memory(run: Callable[[], None], device: torch.device, cpu_probe: bool) -> float | None:
    """Bytes allocated at the peak of ``run()`` above what was allocated before it (``None``: cannot tell)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        run()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - before)
    if device.type == "cpu" and cpu_probe:
        _reset_peak_rss()
        before = _status_bytes("VmRSS")
        run()
        return float(_status_bytes("VmHWM") - before)
    return None


# --- timing -----------------------------------------------------------------------------------------------------

def write_csv(rows: Sequence[Any], path: Path) -> Path:
    """Write ``rows`` (dataclass instances of one kind, at least one) to ``path`` as CSV, one column per field,
    making its folder if needed; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    return path


def best_seconds(run: Callable[[], None], device: torch.device, repeats: int, budget_s: float) -> float:
    """Fastest wall time of ``run()`` over ``repeats`` calls after one warm-up call (fewer past ``budget_s``).

    The minimum, as ``timeit`` reports, because other processes only ever make a call slower.
    """
    run()
    _sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (len(times) < 2 or time.perf_counter() - start < budget_s):
        tic = time.perf_counter()
        run()
        _sync(device)
        times.append(time.perf_counter() - tic)
    return min(times)


@dataclass
class Row:
    device: str
    T: int
    mode: str  # "forward" (no grad) or "fwd+bwd"
    impl: str
    ms: float | None
    peak_mib: float | None
    backend: str
    note: str = ""


def measure(device: torch.device, t: int, impl: str, mode: str, args: argparse.Namespace, cpu_probe: bool,
            impls: dict[str, Attention] | None = None) -> Row:
    """Time and peak memory of one (length, implementation, mode); ``impl`` names one of ``impls`` (:data:`IMPLS`)."""
    dtype = pick_dtype(args.dtype, device)
    g = torch.Generator(device="cpu").manual_seed(t)
    shape = (args.batch, args.heads, t, args.d_head)
    q, k, v = (torch.randn(shape, generator=g).to(device, dtype).requires_grad_(mode == "fwd+bwd") for _ in range(3))
    fn = (impls or IMPLS)[impl]

    def run() -> None:
        if mode == "forward":
            with torch.no_grad():
                fn(q, k, v, args.causal)
        else:
            for x in (q, k, v):
                x.grad = None
            fn(q, k, v, args.causal).sum().backward()

    backend = sdpa_backend(q.detach(), k.detach(), v.detach(), args.causal) if impl == "fused" else "manual"
    try:
        ms = 1e3 * best_seconds(run, device, args.repeats, args.budget)
        peak = peak_memory(run, device, cpu_probe)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return Row(str(device), t, mode, impl, None, None, backend, "out of memory")
    return Row(str(device), t, mode, impl, ms, None if peak is None else peak / 2**20, backend, str(dtype)[6:])


def pick_dtype(name: str | None, device: torch.device) -> torch.dtype:
    """``--dtype``, or by default float32 on the CPU and bfloat16 on CUDA (what flash attention takes)."""
    if name is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


# --- report -----------------------------------------------------------------------------------------------------

def table(rows: list[Row], impls: list[str]) -> str:
    """One line per (device, mode, T): each implementation's time and memory, and fused's speed-up."""
    lines = []
    head = f"{'device':<7} {'mode':<8} {'T':>5} " + " ".join(f"{i + ' ms':>12} {i + ' MiB':>11}" for i in impls)
    head += f" {'speed-up':>9} {'memory ÷':>9}  fused backend"
    lines += [head, "-" * len(head)]
    keyed = {(r.device, r.mode, r.T, r.impl): r for r in rows}
    for device, mode, t in sorted({(r.device, r.mode, r.T) for r in rows}, key=lambda x: (x[0], x[1] != "forward",
                                                                                           x[2])):
        cells, by = [], {i: keyed.get((device, mode, t, i)) for i in impls}
        for i in impls:
            r = by[i]
            ms = f"{r.ms:12.2f}" if r and r.ms is not None else f"{(r.note if r else '-'):>12}"
            mib = f"{r.peak_mib:11.1f}" if r and r.peak_mib is not None else f"{'-':>11}"
            cells.append(f"{ms} {mib}")
        m, f = by.get("manual"), by.get("fused")
        speed = f"{m.ms / f.ms:8.1f}×" if m and f and m.ms and f.ms else f"{'-':>9}"
        mem = f"{m.peak_mib / f.peak_mib:8.1f}×" if m and f and m.peak_mib and f.peak_mib else f"{'-':>9}"
        lines.append(f"{device:<7} {mode:<8} {t:>5} " + " ".join(cells) + f" {speed} {mem}  "
                     + (f.backend if f else ""))
    return "\n".join(lines)


def plot(rows: list[Row], impls: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for (device, mode), style in zip(sorted({(r.device, r.mode) for r in rows}), ("-", "--", ":", "-."), strict=False):
        for impl, marker in zip(impls, "osx^", strict=False):
            pts = sorted((r.T, r.ms, r.peak_mib) for r in rows
                         if (r.device, r.mode, r.impl) == (device, mode, impl) and r.ms is not None)
            if not pts:
                continue
            ts = [p[0] for p in pts]
            axes[0].plot(ts, [p[1] for p in pts], style, marker=marker, label=f"{impl}, {mode}, {device}")
            if all(p[2] is not None for p in pts):
                axes[1].plot(ts, [p[2] for p in pts], style, marker=marker, label=f"{impl}, {mode}, {device}")
    for ax, ylabel in zip(axes, ("time (ms)", "peak memory above the inputs (MiB)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Attention: step-by-step (manual) vs F.scaled_dot_product_attention (fused)")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None, impls: dict[str, Attention] | None = None,
         default_out: str = "benchmark-results") -> int:
    """The command line: parse ``argv`` (default: ``sys.argv``), measure, print the table, write the CSV and plot.

    ``impls``: the implementations ``--impls`` may choose from (default :data:`IMPLS`); ``default_out``: the
    folder ``--out`` defaults to.
    """
    impls = impls or IMPLS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", nargs="+", default=None, help="cpu and/or cuda (default: cpu, plus cuda if any)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="sequence lengths T (default: 128 ... 2048 on the CPU, 128 ... 4096 on CUDA)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default=None,
                        help="default: fp32 on the CPU, bf16 on CUDA")
    parser.add_argument("--causal", action="store_true", help="use a causal mask")
    parser.add_argument("--impls", nargs="+", default=["manual", "fused"], choices=sorted(impls))
    parser.add_argument("--modes", nargs="+", default=["forward", "fwd+bwd"], choices=("forward", "fwd+bwd"))
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per point (the fastest is kept)")
    parser.add_argument("--budget", type=float, default=10.0, help="seconds per point before repeats are cut short")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads for the CPU")
    parser.add_argument("--out", default=default_out, help="folder for attention.csv and attention.png")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    cpu_probe = _cpu_memory_probe()
    rows: list[Row] = []
    print(f"torch {torch.__version__}; B={args.batch}, heads={args.heads}, d_head={args.d_head}, "
          f"causal={args.causal}; CPU threads {torch.get_num_threads()} of {os.cpu_count()} cores"
          + (f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""), flush=True)
    for name in devices:
        device = torch.device(name)
        if device.type == "cuda" and not torch.cuda.is_available():
            print("no CUDA device: skipped")
            continue
        lengths = args.lengths or ([128, 256, 512, 1024, 2048] if device.type == "cpu"
                                   else [128, 256, 512, 1024, 2048, 4096])
        if device.type == "cuda":
            print(f"{torch.cuda.get_device_name(device)}")
            x = torch.randn(1, args.heads, 256, args.d_head, device=device, dtype=pick_dtype(args.dtype, device))
            print("SDPA backends that accept these inputs:", ", ".join(cuda_backends(x, x, x, args.causal)))
        for t in lengths:
            for mode in args.modes:
                for impl in args.impls:
                    row = measure(device, t, impl, mode, args, cpu_probe, impls)
                    rows.append(row)
                    print(f"  {row.device} T={t:<5} {mode:<8} {impl:<9} "
                          f"{'-' if row.ms is None else f'{row.ms:.2f} ms'}", flush=True)
    print()
    print(table(rows, args.impls))
    out = write_csv(rows, Path(args.out) / "attention.csv").parent
    plot(rows, args.impls, out / "attention.png")
    print(f"\nwrote {out / 'attention.csv'} and {out / 'attention.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
