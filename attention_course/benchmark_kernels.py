"""Chapter 9's measurements: where a computation's time goes (overhead, memory or arithmetic), drawn as a
roofline, and attention kernels timed in TFLOP/s against the device's peak.

A computation is in one of three regimes (Horace He, "Making deep learning go brrrr from first principles",
2022): **overhead-bound** when the time goes into launching it at all (Python, the dispatcher, a kernel launch),
**memory-bound** when it goes into reading and writing its operands, **compute-bound** when it goes into the
arithmetic. The *roofline* (Williams, Waterman and Patterson, 2009) says which of the last two limits a
computation that does ``F`` floating-point operations on ``M`` bytes: at most
``min(peak FLOP/s, (F / M) × bandwidth)``. A computation far below both roofs is overhead-bound.

1. :data:`DEVICE_PEAKS` and :func:`device_peaks`: dense peaks and memory bandwidth of a few GPUs, from their data
   sheets, keyed by the name ``torch.cuda.get_device_name`` reports. An unknown device gets ``None``, and no
   share of a peak is computed for it.
2. :class:`Roof`: a roofline, from a data sheet (:func:`data_sheet_roof`) or measured on the machine
   (:func:`measured_roof`: the best rate of the products measured, the bandwidth of a large copy).
3. :func:`time_per_call`: the fastest time of one call, from batches of calls long enough to time.
4. :func:`square_products` (``n × n`` by ``n × n``, growing ``n``), :func:`batched_products` (``B`` vectors
   times one ``n × n`` matrix, growing ``B``: a decode step's weights) and :func:`copy_bandwidth`.
5. :func:`attention_flops` and :func:`attention_speed`: attention functions ``f(q, k, v)`` timed in TFLOP/s and
   as a share of the device's peak.

Every function runs on the CPU; on a GPU the same functions measure the GPU (the chapter calls them with
CUDA tensors when it has one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

SIXTEEN_BIT = (torch.float16, torch.bfloat16)


# --- 1. data sheets ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DevicePeaks:
    """One GPU's peaks from its data sheet (dense, without sparsity)."""

    tflops_16bit: float  # bfloat16 / float16 matrix products on the tensor cores, TFLOP/s
    tflops_fp32: float  # plain float32 (no TF32), TFLOP/s
    tb_per_s: float  # main-memory (HBM) bandwidth, TB/s (10^12 bytes per second)
    sheet: str  # the data sheet, as its key in book/references.bib

    def flops(self, dtype: torch.dtype) -> float:
        """Peak FLOP/s for matrix products in ``dtype`` (float16, bfloat16 or float32)."""
        if dtype in SIXTEEN_BIT:
            return self.tflops_16bit * 1e12
        if dtype == torch.float32:
            return self.tflops_fp32 * 1e12
        raise ValueError(f"the data sheets give peaks for float16, bfloat16 and float32, not {dtype}")


#: Keyed by ``torch.cuda.get_device_name()``. Sparse figures on the sheets are twice the dense ones given here.
DEVICE_PEAKS: dict[str, DevicePeaks] = {
    "NVIDIA A100-SXM4-40GB": DevicePeaks(312.0, 19.5, 1.555, "nvidia2020a100"),
    "NVIDIA A100-SXM4-80GB": DevicePeaks(312.0, 19.5, 2.039, "nvidia2020a100"),
    "NVIDIA A100-PCIE-40GB": DevicePeaks(312.0, 19.5, 1.555, "nvidia2020a100"),
    "NVIDIA A100 80GB PCIe": DevicePeaks(312.0, 19.5, 1.935, "nvidia2020a100"),
    "NVIDIA H100 80GB HBM3": DevicePeaks(989.0, 67.0, 3.35, "nvidia2022h100"),  # H100 SXM
    "NVIDIA H100 PCIe": DevicePeaks(756.0, 51.0, 2.0, "nvidia2022h100"),
    "NVIDIA H200": DevicePeaks(989.0, 67.0, 4.8, "nvidia2024h200"),  # H200 SXM
}

#: The H100 SXM, whose ridge the chapters quote.
H100_SXM = DEVICE_PEAKS["NVIDIA H100 80GB HBM3"]


def device_peaks(device: torch.device | str) -> DevicePeaks | None:
    """The data-sheet peaks of ``device``: a CUDA device is looked up by the name it reports, a name (``str``
    that is not a device type) directly; the CPU and any device not in :data:`DEVICE_PEAKS` give ``None``."""
    if isinstance(device, str) and device.split(":")[0] not in ("cpu", "cuda", "mps", "xpu", "meta"):
        return DEVICE_PEAKS.get(device)
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return DEVICE_PEAKS.get(torch.cuda.get_device_name(device))


# --- 2. the roofline --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Roof:
    """A roofline: the flat roof ``flops`` (FLOP/s) and the slanted one, ``bandwidth`` (bytes/s) times the
    arithmetic intensity. ``source`` says where they come from (a data sheet, or measured here)."""

    flops: float
    bandwidth: float
    source: str

    def __post_init__(self) -> None:
        if not (self.flops > 0 and self.bandwidth > 0):
            raise ValueError(f"a roof needs positive FLOP/s and bandwidth; got {self.flops}, {self.bandwidth}")

    @property
    def ridge(self) -> float:
        """The intensity (FLOP per byte) at which the two roofs meet: below it memory sets the speed."""
        return self.flops / self.bandwidth

    def attainable(self, intensity: float) -> float:
        """The most FLOP/s a computation of ``intensity`` FLOP per byte can reach: min(flops, intensity × bandwidth)."""
        if not intensity >= 0:
            raise ValueError(f"an arithmetic intensity is >= 0 FLOP per byte, got {intensity}")
        return min(self.flops, intensity * self.bandwidth)


def data_sheet_roof(device: torch.device | str, dtype: torch.dtype) -> Roof | None:
    """The roofline of ``device`` for ``dtype`` from its data sheet, or ``None`` where :func:`device_peaks` has none."""
    peaks = device_peaks(device)
    if peaks is None:
        return None
    return Roof(peaks.flops(dtype), peaks.tb_per_s * 1e12, f"data sheet ({peaks.sheet})")


def measured_roof(products: Sequence[Timed], bandwidth: float) -> Roof:
    """A roofline measured on this machine: the best FLOP/s among ``products`` and the copy ``bandwidth``."""
    if not products:
        raise ValueError("a measured roof needs at least one timed product")
    return Roof(max(p.flops_per_s for p in products), bandwidth, "measured here")


# --- 3. timing --------------------------------------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_per_call(run: Callable[[], object], device: torch.device | str = "cpu", *, repeats: int = 3,
                  min_time: float = 0.005) -> float:
    """The fastest time of one call of ``run()``, in seconds.

    After one untimed call (a warm-up: caches, a kernel's compilation), the calls are timed in batches long enough
    for the clock (``number`` calls, doubled until a batch lasts ``min_time``), and the fastest of ``repeats``
    batches, divided by ``number``, is returned: the minimum, as ``timeit`` reports, because other processes only
    ever make a call slower. On CUDA the device is synchronised before and after each batch, not after each call,
    so that a batch measures the calls' throughput as a model's forward pass would run them.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer of at least 1, got {repeats!r}")
    if not min_time > 0:
        raise ValueError(f"min_time must be positive, got {min_time!r}")
    device = torch.device(device)

    def batch(number: int) -> float:
        _sync(device)
        start = time.perf_counter()
        for _ in range(number):
            run()
        _sync(device)
        return time.perf_counter() - start

    batch(1)  # warm-up
    number = 1
    elapsed = batch(number)
    while elapsed < min_time:
        number *= 2
        elapsed = batch(number)
    best = elapsed
    for _ in range(repeats - 1):
        best = min(best, batch(number))
    return best / number


# --- 4. products and copies -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timed:
    """One timed operation: its fastest time per call, the FLOPs it does and the bytes it must move."""

    label: str
    size: int  # n of an n × n product, or B of a batch of B vectors
    seconds: float
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOP per byte."""
        return self.flops / self.bytes

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds


def product_cost(m: int, k: int, n: int, element_bytes: int) -> tuple[float, float]:
    """``(FLOPs, bytes)`` of an ``(m, k) @ (k, n)`` product: ``2mkn`` (a multiply and an add per term), and each
    operand read once and the ``(m, n)`` result written once, ``(mk + kn + mn) × element_bytes``, the least any
    kernel must move."""
    for name, value in (("m", m), ("k", k), ("n", n), ("element_bytes", element_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")
    return 2.0 * m * k * n, float((m * k + k * n + m * n) * element_bytes)


def _element_bytes(dtype: torch.dtype) -> int:
    if not torch.is_floating_point(torch.empty((), dtype=dtype)):
        raise ValueError(f"products are timed in a floating dtype, not {dtype}")
    return torch.empty((), dtype=dtype).element_size()


def square_products(sizes: Sequence[int], device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                    **timing: float) -> list[Timed]:
    """Time ``(n, n) @ (n, n)`` for each ``n`` of ``sizes`` (into a preallocated result, so that no allocation is
    timed): small ``n`` show the overhead of a call, large ``n`` the arithmetic. ``timing`` goes to
    :func:`time_per_call`."""
    if not sizes or min(sizes) < 1:
        raise ValueError(f"give sizes of at least 1; got {list(sizes)}")
    device, rows = torch.device(device), []
    g = torch.Generator().manual_seed(0)
    for n in sizes:
        a, b = (torch.randn(n, n, generator=g).to(device, dtype) for _ in range(2))
        out = torch.empty(n, n, device=device, dtype=dtype)
        seconds = time_per_call(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), device, **timing)
        rows.append(Timed(f"{n} × {n} product", n, seconds, *product_cost(n, n, n, _element_bytes(dtype))))
    return rows


def batched_products(n: int, batches: Sequence[int], device: torch.device | str = "cpu",
                     dtype: torch.dtype = torch.float32, **timing: float) -> list[Timed]:
    """Time ``x (B, n) @ Wᵀ`` with one ``(n, n)`` matrix ``W`` for each ``B`` of ``batches``: the weights of a
    decode step, read once for ``B`` sequences. Its intensity grows with ``B``: about ``2B / element_bytes``
    FLOP per byte while ``W`` dominates the bytes. ``timing`` goes to :func:`time_per_call`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer of at least 1, got {n!r}")
    if not batches or min(batches) < 1:
        raise ValueError(f"give batch sizes of at least 1; got {list(batches)}")
    device, rows = torch.device(device), []
    g = torch.Generator().manual_seed(0)
    weight_t = torch.randn(n, n, generator=g).to(device, dtype).t()  # (n, n): Wᵀ, a view
    for b in batches:
        x = torch.randn(b, n, generator=g).to(device, dtype)  # (B, n)
        out = torch.empty(b, n, device=device, dtype=dtype)  # (B, n)
        seconds = time_per_call(lambda x=x, out=out: torch.mm(x, weight_t, out=out), device, **timing)
        rows.append(Timed(f"B = {b}", b, seconds, *product_cost(b, n, n, _element_bytes(dtype))))
    return rows


def copy_bandwidth(nbytes: int = 64 * 2**20, device: torch.device | str = "cpu", **timing: float) -> float:
    """Bytes per second moved by ``dst.copy_(src)`` of ``nbytes`` bytes, counting the read and the write
    (``2 × nbytes`` per copy): the memory roof of a machine whose data sheet the table lacks. Both buffers exist
    before the timing, so no allocation is timed. ``timing`` goes to :func:`time_per_call`."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 4:
        raise ValueError(f"nbytes must be an integer of at least 4, got {nbytes!r}")
    device = torch.device(device)
    src = torch.ones(nbytes // 4, device=device)  # float32
    dst = torch.empty_like(src)
    seconds = time_per_call(lambda: dst.copy_(src), device, **timing)
    return 2 * src.numel() * 4 / seconds


def first_turn(rows: Sequence[Timed], factor: float = 2.0) -> int | None:
    """The ``size`` of the first row whose time is more than ``factor`` times the first row's (the sweep has left
    the flat part, where the time does not depend on the size), or ``None`` if no row is."""
    if not rows:
        raise ValueError("give at least one timed row")
    if not factor > 1:
        raise ValueError(f"factor must be above 1, got {factor!r}")
    return next((r.size for r in rows if r.seconds > factor * rows[0].seconds), None)


def products_table(rows: Sequence[Timed], roof: Roof | None = None) -> str:
    """One line per row: time per call, FLOP per byte, achieved GFLOP/s and GB/s, and, with a data-sheet ``roof``,
    the share of its peak FLOP/s and of its bandwidth (a measured roof gives no share of a peak)."""
    shares = roof is not None and roof.source.startswith("data sheet")
    head = (f"{'':<18} {'time per call':>14} {'FLOP/byte':>10} {'GFLOP/s':>10} {'GB/s':>9}"
            + (f" {'% peak FLOP/s':>14} {'% peak GB/s':>12}" if shares else ""))
    lines = [head, "-" * len(head)]
    for r in rows:
        line = (f"{r.label:<18} {_duration(r.seconds):>14} {r.intensity:>10.1f} {r.flops_per_s / 1e9:>10.3g} "
                f"{r.bytes_per_s / 1e9:>9.1f}")
        if shares:
            line += f" {100 * r.flops_per_s / roof.flops:>14.1f} {100 * r.bytes_per_s / roof.bandwidth:>12.1f}"
        lines.append(line)
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


# --- 5. attention in TFLOP/s ------------------------------------------------------------------------------------

def attention_flops(batch: int, heads: int, length: int, d_head: int, causal: bool = False) -> float:
    """FLOPs of self-attention's two products, ``q kᵀ`` and ``weights @ v``: ``2 · T · T · d`` each per head, so
    ``4 · B · H · T² · d``; half that with a causal mask, whose kernels skip the tiles above the diagonal. (The
    softmax's exponentials are not counted, as FlashAttention's papers do not count them.)"""
    for name, value in (("batch", batch), ("heads", heads), ("length", length), ("d_head", d_head)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")
    return 4.0 * batch * heads * length * length * d_head / (2 if causal else 1)


def tflops(flops: float, seconds: float) -> float:
    """TFLOP/s of ``flops`` floating-point operations done in ``seconds``."""
    if not seconds > 0 or not flops >= 0:
        raise ValueError(f"need flops >= 0 and seconds > 0; got {flops}, {seconds}")
    return flops / seconds / 1e12


def share_of_peak(achieved_tflops: float, peak_tflops: float | None) -> float | None:
    """``achieved / peak`` (0.5 is half the peak), or ``None`` when the peak is unknown."""
    if peak_tflops is None:
        return None
    if not peak_tflops > 0:
        raise ValueError(f"a peak is positive, got {peak_tflops}")
    return achieved_tflops / peak_tflops


@dataclass(frozen=True)
class SpeedRow:
    """One attention function at one length: fastest milliseconds per call, TFLOP/s, share of the peak (or None)."""

    name: str
    T: int
    ms: float
    tflops: float
    share: float | None


def attention_speed(paths: dict[str, Callable[[Tensor, Tensor, Tensor], object]], lengths: Sequence[int], *,
                    batch: int = 1, heads: int = 8, d_head: int = 64, causal: bool = False,
                    device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                    peak_tflops: float | None = None, **timing: float) -> list[SpeedRow]:
    """Time each ``paths[name](q, k, v)`` on ``(batch, heads, T, d_head)`` inputs for each ``T`` (without
    gradients) and report it in TFLOP/s of :func:`attention_flops` (``causal`` halves them: tell each path to be
    causal yourself) and, with ``peak_tflops``, as a share of it. ``timing`` goes to :func:`time_per_call`."""
    if not paths or not lengths or min(lengths) < 1:
        raise ValueError(f"give at least one attention function and lengths >= 1; got {list(paths)}, {list(lengths)}")
    device, rows = torch.device(device), []
    for t in lengths:
        g = torch.Generator().manual_seed(t)
        q, k, v = (torch.randn(batch, heads, t, d_head, generator=g).to(device, dtype) for _ in range(3))
        flops = attention_flops(batch, heads, t, d_head, causal)
        for name, attend in paths.items():
            with torch.no_grad():
                seconds = time_per_call(lambda attend=attend, q=q, k=k, v=v: attend(q, k, v), device, **timing)
            rate = tflops(flops, seconds)
            rows.append(SpeedRow(name, t, 1e3 * seconds, rate, share_of_peak(rate, peak_tflops)))
    return rows


def speed_table(rows: Sequence[SpeedRow]) -> str:
    """Per length, each function's milliseconds, TFLOP/s and, where the peak is known, its share in %."""
    head = f"{'':<22} {'T':>6} {'ms':>10} {'TFLOP/s':>9} {'% of peak':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        share = "-" if r.share is None else f"{100 * r.share:.1f}"
        lines.append(f"{r.name:<22} {r.T:>6} {r.ms:>10.3f} {r.tflops:>9.3g} {share:>10}")
    return "\n".join(lines)

