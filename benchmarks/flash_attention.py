"""Chapter 9's FlashAttention, measured: memory in training, the Triton kernel's accuracy, and its speed on a GPU.

Three tables from the course's reference ``solutions/flash_attention.py`` (a course-side script, like
``generation.py``: the book measures PyTorch's own kernels, and learners write these pieces in the exercises),
measured with the functions of the helper package:

1. **Peak memory of the forward and backward pass** on causal ``(1, --heads, T, 64)`` float32 inputs, ``T`` =
   1024, 2048, 4096 (and 8192 on CUDA), of four paths:

   - ``full``: attention written out, under autograd (``attention_course.benchmark_generation.full_attention``),
     which keeps the ``(H, T, T)`` weights for the backward pass;
   - ``online loop``: the reference's ``online_softmax_attention(causal=True)``, a loop over blocks of
     ``--block`` keys, under autograd, which keeps every block's weights: the whole matrix again;
   - ``FlashAttention``: the reference's ``flash_attention(causal=True)``, its ``torch.autograd.Function``, which
     saves q, k, v, the output and one log-sum-exp per query, and recomputes each block in its backward pass;
   - ``SDPA``: ``F.scaled_dot_product_attention(is_causal=True)``, PyTorch's fused kernel.

   ``attention_memory(..., backward=True)`` measures the peak above the inputs and the output's gradient, which
   are made beforehand (``torch.cuda.max_memory_allocated`` on CUDA; on the CPU ``torch.profiler``'s record of
   every allocation and free of PyTorch's allocator). ``error`` is each output's largest difference from a float64
   reference computed once per length, independent of all four paths.

2. **The reference Triton kernel** (``triton_attention``: ``attention_kernel`` launched by
   ``attention_course.flash.launch_attention`` in tiles of 32 × 32) against ``F.scaled_dot_product_attention``
   computed in float32, on shapes chosen to hit its masks: causal or not, lengths that are not multiples of the
   tile, fewer queries than keys, float16 (and, on CUDA only, bfloat16: Triton 3.7.1's interpreter multiplies
   bfloat16 tiles as 16-bit integers). Without a GPU the kernel runs in Triton's interpreter, one program after
   another in NumPy: ``kernel s`` is one call, against SDPA's fastest (``benchmark_kernels.time_per_call``); a
   compiled kernel is timed like SDPA, after a warm-up call that compiles it. ``out error`` is the output's largest
   difference from SDPA's, ``lse error`` the log-sum-exp's from ``torch.logsumexp`` of the float64 scores.

3. **On CUDA only, speed**: the compiled kernel (tiles of 64 × 64), ``F.scaled_dot_product_attention`` and the
   reference's PyTorch loop ``online_softmax_attention`` on causal ``(4, 16, T, 64)`` bfloat16 inputs, timed
   without gradients by ``attention_course.benchmark_kernels.attention_speed``: milliseconds, TFLOP/s counting
   ``4·B·H·T²·d`` FLOPs for the two products, halved for the causal mask, and the share of the device's dense
   16-bit peak from its data sheet (``benchmark_kernels.DEVICE_PEAKS``; ``-`` for a GPU not in the table). The
   reference kernel computes every tile, those above the diagonal too, so the halved count understates what it
   does; the launcher's copy of q, k and v into one padded buffer is timed with it.

Goals, checked at the end (exit status 1 if one is missed): every output of table 1 within 1e-5 of the float64
reference (1e-4 on CUDA); at the longest ``T``, the FlashAttention function peaks at less than a quarter of the
same loop under autograd; every kernel output of table 2 within its tolerance.

Usage::

    python benchmarks/flash_attention.py                    # CPU, one thread, the kernel interpreted
    python benchmarks/flash_attention.py --quick            # small sizes, seconds
    python benchmarks/flash_attention.py --device cuda      # T up to 8192, the kernel compiled and timed
    python benchmarks/flash_attention.py --quick --json out.json   # the tables' numbers, also as JSON
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attention_course import flash  # noqa: E402  (before Triton's import: without a GPU it sets TRITON_INTERPRET=1)
from attention_course.benchmark_generation import (  # noqa: E402
    MemoryRow,
    attention_memory,
    full_attention,
    memory_table,
    sdpa_attention,
    where_measured,
)
from attention_course.benchmark_kernels import (  # noqa: E402
    SpeedRow,
    attention_speed,
    device_peaks,
    speed_table,
    time_per_call,
)
from solutions.flash_attention import flash_attention, online_softmax_attention, triton_attention  # noqa: E402

#: Table 2's cases: ``(B, H, T_q, T_k, D)``, causal, dtype. The first three are ``--quick``'s.
KERNEL_CASES: list[tuple[tuple[int, int, int, int, int], bool, torch.dtype]] = [
    ((1, 2, 64, 64, 16), False, torch.float32),
    ((2, 2, 100, 100, 32), True, torch.float32),  # 100 = 3 tiles of 32 and 4 rows past the end
    ((1, 3, 20, 90, 32), True, torch.float16),  # fewer queries than keys: the causal mask lined up at the last key
    ((1, 2, 77, 77, 64), True, torch.float16),
    ((1, 1, 45, 130, 64), False, torch.float32),
    ((1, 2, 256, 256, 64), False, torch.float32),  # 16 programs: the interpreter's speed
]
#: Added on CUDA, where the kernel is compiled and bfloat16 is right.
GPU_CASES: list[tuple[tuple[int, int, int, int, int], bool, torch.dtype]] = [
    ((1, 2, 77, 77, 64), True, torch.bfloat16),
    ((2, 4, 1000, 1000, 64), True, torch.bfloat16),
    ((2, 4, 1000, 1000, 64), True, torch.float16),
]


# --- 1. memory ----------------------------------------------------------------------------------------------------

def memory_rows(lengths: list[int], heads: int, block: int, device: torch.device) -> list[MemoryRow]:
    """Peak memory of the forward and backward pass, and error, of the four paths of table 1."""
    paths = {"full": full_attention,
             "online loop": lambda q, k, v: online_softmax_attention(q, k, v, block_size=block, causal=True),
             "FlashAttention": lambda q, k, v: flash_attention(q, k, v, block_size=block, causal=True),
             "SDPA": sdpa_attention}
    return attention_memory(paths, lengths, heads=heads, device=device, backward=True, time_it=False)


# --- 2. the Triton kernel against SDPA ----------------------------------------------------------------------------

@dataclass
class KernelRow:
    """One case of table 2: the kernel's largest differences, its seconds and SDPA's, and the tolerance."""

    shape: tuple[int, int, int, int, int]  # (B, H, T_q, T_k, D)
    causal: bool
    dtype: torch.dtype
    out_error: float
    lse_error: float
    kernel_s: float
    sdpa_s: float
    tolerance: float

    @property
    def within(self) -> bool:
        return self.out_error <= self.tolerance and self.lse_error <= max(self.tolerance, 1e-4)


def tolerance(dtype: torch.dtype, interpreted: bool) -> float:
    """How far the kernel's output may be from SDPA's in float32: float16 outputs round to about 1e-3 and
    bfloat16 to 1e-2 (compiled, over longer rows, more); compiled, ``tl.dot`` multiplies float32 tiles in TF32 (a
    10-bit mantissa)."""
    if dtype == torch.float16:
        return 5e-3 if interpreted else 1e-2
    if dtype == torch.bfloat16:
        return 2e-2
    return 1e-5 if interpreted else 1e-2


def kernel_rows(cases: list[tuple[tuple[int, int, int, int, int], bool, torch.dtype]],
                device: torch.device) -> list[KernelRow]:
    """Run the reference kernel on each case (interpreted without a GPU) against SDPA in float32."""
    rows = []
    for (b, h, t_q, t_k, d), causal, dtype in cases:
        g = torch.Generator().manual_seed(t_q * t_k + d)
        q = torch.randn(b, h, t_q, d, generator=g).to(device, dtype)
        k, v = (torch.randn(b, h, t_k, d, generator=g).to(device, dtype) for _ in range(2))
        visible = torch.arange(t_k, device=device) <= torch.arange(t_q, device=device)[:, None] + (t_k - t_q)
        mask = visible if causal else None  # (T_q, T_k), lined up at the last key
        if flash.INTERPRET:
            start = time.perf_counter()
            out, lse = triton_attention(q, k, v, causal=causal)  # one call: seconds in the interpreter
            kernel_s = time.perf_counter() - start
        else:
            out, lse = triton_attention(q, k, v, causal=causal)  # compiles it
            kernel_s = time_per_call(lambda q=q, k=k, v=v, causal=causal: triton_attention(q, k, v, causal=causal),
                                     device)
        q32, k32, v32 = q.float(), k.float(), v.float()
        expected = F.scaled_dot_product_attention(q32, k32, v32, attn_mask=mask)  # (B, H, T_q, D)
        sdpa_s = time_per_call(lambda q32=q32, k32=k32, v32=v32, mask=mask: F.scaled_dot_product_attention(
            q32, k32, v32, attn_mask=mask), device)
        scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(d)  # (B, H, T_q, T_k)
        if causal:
            scores = scores.masked_fill(~visible, float("-inf"))
        rows.append(KernelRow((b, h, t_q, t_k, d), causal, dtype,
                              (out.float() - expected).abs().max().item(),
                              (lse.double() - torch.logsumexp(scores, dim=-1)).abs().max().item(),
                              kernel_s, sdpa_s, tolerance(dtype, flash.INTERPRET)))
    return rows


def kernel_table(rows: list[KernelRow]) -> str:
    """One line per case: shape, causal, dtype, the two errors against the tolerance, and the seconds."""
    head = (f"{'(B, H, T_q, T_k, D)':<22} {'causal':>6} {'dtype':>8} {'out error':>10} {'lse error':>10} "
            f"{'tolerance':>10} {'kernel s':>10} {'SDPA ms':>9} {'kernel ÷ SDPA':>14}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{str(r.shape):<22} {'yes' if r.causal else 'no':>6} {str(r.dtype)[6:]:>8} "
                     f"{r.out_error:>10.1e} {r.lse_error:>10.1e} {r.tolerance:>10.0e} {r.kernel_s:>10.3f} "
                     f"{1e3 * r.sdpa_s:>9.3f} {r.kernel_s / r.sdpa_s:>13,.0f}×")
    return "\n".join(lines)


# --- 3. speed, on CUDA ----------------------------------------------------------------------------------------

def speed_rows(lengths: list[int], device: torch.device) -> list[SpeedRow]:
    """The compiled kernel, SDPA and the PyTorch loop on causal (4, 16, T, 64) bfloat16, in TFLOP/s."""
    peaks = device_peaks(device)
    paths = {"Triton kernel": lambda q, k, v: triton_attention(q, k, v, causal=True, block_m=64, block_n=64)[0],
             "fused (SDPA)": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             "PyTorch loop": lambda q, k, v: online_softmax_attention(q, k, v, causal=True)}
    return attention_speed(paths, lengths, batch=4, heads=16, d_head=64, causal=True, device=device,
                           dtype=torch.bfloat16, peak_tflops=None if peaks is None else peaks.tflops_16bit)


# --- goals and the command line -----------------------------------------------------------------------------------

def goals(memory: list[MemoryRow], kernels: list[KernelRow], error_limit: float) -> list[str]:
    """The goals this script holds the reference to; a line each, ending in 'met' or 'MISSED'."""
    lines = []
    worst = max(memory, key=lambda r: r.max_error)
    lines.append(f"every output of table 1 within {error_limit:g} of the float64 reference: largest "
                 f"{worst.max_error:.1e} ({worst.name}, T = {worst.T}): "
                 f"{'met' if worst.max_error <= error_limit else 'MISSED'}")
    by = {(r.name, r.T): r for r in memory}
    longest = max(r.T for r in memory)
    flash_peak, loop_peak = by[("FlashAttention", longest)].peak_bytes, by[("online loop", longest)].peak_bytes
    lines.append(f"FlashAttention at T = {longest} below a quarter of the loop under autograd: "
                 f"{flash_peak / 2**20:,.1f} MiB against {loop_peak / 2**20:,.1f} MiB: "
                 f"{'met' if 4 * flash_peak < loop_peak else 'MISSED'}")
    off = [r for r in kernels if not r.within]
    lines.append(f"every kernel output of table 2 within its tolerance: {len(kernels) - len(off)} of {len(kernels)}"
                 + "".join(f"; {r.shape} {str(r.dtype)[6:]} off by {max(r.out_error, r.lse_error):.1e}" for r in off)
                 + f": {'met' if not off else 'MISSED'}")
    return lines


@dataclass
class Results:
    memory: list[MemoryRow]
    kernels: list[KernelRow]
    speed: list[SpeedRow] | None  # CUDA only
    goals: list[str]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes: the whole run in seconds")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for the CPU (default 1)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None,
                        help="table 1's T (default: 1024 2048 4096, and 8192 on CUDA)")
    parser.add_argument("--heads", type=int, default=None, help="table 1's heads (default 8)")
    parser.add_argument("--block", type=int, default=None, help="keys per block of the reference's loop (default 128)")
    parser.add_argument("--speed-lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192],
                        help="table 3's T, on CUDA")
    parser.add_argument("--json", type=Path, default=None, help="also write the tables' numbers and the goals here")
    args = parser.parse_args(argv)
    gpu = args.device.startswith("cuda")
    args.lengths = args.lengths or ([256, 512] if args.quick else [1024, 2048, 4096] + ([8192] if gpu else []))
    args.heads = args.heads or (2 if args.quick else 8)
    args.block = args.block or (32 if args.quick else 128)
    return args


def run(argv: list[str] | None = None) -> tuple[int, Results | None]:
    """Measure and print the three tables and the goals: (exit status, what was printed, as numbers)."""
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device")
        return 1, None
    if device.type == "cpu" and not flash.INTERPRET:
        print("Triton compiles for the GPU here: run with --device cuda, or set TRITON_INTERPRET=1")
        return 1, None
    torch.set_num_threads(args.threads)
    print(where_measured(device), flush=True)

    print(f"\n1. Forward and backward of causal attention over (1, {args.heads}, T, 64) float32: peak memory above "
          f"the inputs; error: the largest difference from the float64 reference (blocks of {args.block} keys)",
          flush=True)
    memory = memory_rows(args.lengths, args.heads, args.block, device)
    print(memory_table(memory), flush=True)

    kernels_run = "not at all" if not flash.TRITON_AVAILABLE else "interpreted" if flash.INTERPRET else "compiled"
    print(f"\n2. The reference Triton kernel ({kernels_run}, tiles of 32 × 32) against "
          "F.scaled_dot_product_attention in float32", flush=True)
    if flash.TRITON_AVAILABLE:
        cases = KERNEL_CASES[:3] if args.quick else KERNEL_CASES + ([] if flash.INTERPRET else GPU_CASES)
        kernels = kernel_rows(cases, device)
        print(kernel_table(kernels), flush=True)
    else:
        kernels = []
        print(flash.TRITON_MISSING, flush=True)

    speed = None
    if device.type == "cuda" and flash.TRITON_AVAILABLE:
        print(f"\n3. Causal attention over (4, 16, T, 64) bfloat16 on {torch.cuda.get_device_name(device)}, "
              "without gradients; TFLOP/s count 4·B·H·T²·d / 2 FLOPs", flush=True)
        speed = speed_rows(args.speed_lengths, device)
        print(speed_table(speed), flush=True)
    else:
        print("\n3. Speed in TFLOP/s: measured on CUDA only (--device cuda)", flush=True)

    met = goals(memory, kernels, 1e-4 if device.type == "cuda" else 1e-5)
    print("\ngoals:\n" + "\n".join(f"  {line}" for line in met))
    status, results = (1 if any(line.endswith("MISSED") for line in met) else 0), Results(memory, kernels, speed, met)
    if args.json is not None:
        args.json.write_text(json.dumps({"status": status, **dataclasses.asdict(results)}, indent=1, default=str))
    return status, results


def main(argv: list[str] | None = None) -> int:
    return run(argv)[0]


if __name__ == "__main__":
    raise SystemExit(main())
