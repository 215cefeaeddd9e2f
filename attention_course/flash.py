"""Triton for Chapter 9: whether it is installed here, and the launcher of an attention kernel.

Triton compiles kernels written in Python for GPUs. Without a GPU it runs the same kernel in its *interpreter*
(``TRITON_INTERPRET=1``, which must be set before Triton is first imported: importing this module sets it
where there is no GPU), on CPU tensors, one program after another: slow, but
it computes what the compiled kernel would, so a kernel can be written and checked on a laptop. Triton installs on
Linux only; elsewhere :data:`TRITON_AVAILABLE` is False, and ``triton`` and ``tl`` are stand-ins that let a
notebook define its kernel (the decorator returns it unchanged) and refuse to run it, saying why.

:func:`launch_attention` runs a learner's forward kernel with one program per block of queries of each (batch,
head); the kernel's signature is :data:`KERNEL_SIGNATURE`. It holds no kernel of its own.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy
import torch
from torch import Tensor

TRITON_MISSING = ("Triton is not installed here (it installs on Linux only), so this section's checks are skipped; "
                  "the grader runs them on Linux.")


class TritonMissing(RuntimeError):
    """Raised by anything that would run Triton where it is not installed."""


class _StandIn:
    """``triton`` or ``tl`` where Triton is not installed: a kernel can still be defined (``@triton.jit`` returns
    the function, ``tl.constexpr`` is a name), but nothing runs."""

    def __init__(self, name: str) -> None:
        self._name = name

    def jit(self, fn: Callable | None = None, **_: Any) -> Any:
        return fn if fn is not None else (lambda f: f)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _StandIn(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TritonMissing(f"{self._name}(...): {TRITON_MISSING}")

    def __getitem__(self, item: Any) -> Any:
        return self

    def __repr__(self) -> str:
        return f"<{self._name}: Triton is not installed>"


#: Whether Triton runs kernels in its interpreter. Without a GPU it must, and it must know before it is first
#: imported: its own library functions (tl.zeros, tl.max, ...) are kernels too, defined at that import.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available()
if INTERPRET and "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"

try:
    import triton
    import triton.language as tl
except ImportError:  # macOS, Windows: Triton ships Linux wheels only
    triton, tl = _StandIn("triton"), _StandIn("tl")
    TRITON_AVAILABLE = False
else:
    TRITON_AVAILABLE = True

#: The signature every attention kernel of Chapter 9 has; :func:`launch_attention` calls it so.
KERNEL_SIGNATURE = ("attention_kernel(Q, K, V, Out, Lse, T_q, T_k, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, "
                    "BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr)")

#: The dtypes a kernel is launched on.
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def interpreted(kernel: Any) -> bool:
    """Whether ``kernel`` was defined under ``TRITON_INTERPRET=1``: it then runs on CPU tensors, in Python."""
    return type(kernel).__name__ == "InterpretedFunction"


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def launch_attention(kernel: Any, q: Tensor, k: Tensor, v: Tensor, causal: bool = False, block_m: int = 32,
                     block_n: int = 32) -> tuple[Tensor, Tensor]:
    """Run the forward attention ``kernel`` over ``q (B, H, T_q, D)``, ``k`` and ``v (B, H, T_k, D)``.

    The grid has one program per block of ``block_m`` queries of each of the ``B * H`` heads:
    ``(cdiv(T_q, block_m), B * H)``; program ``(i, bh)`` computes queries ``i * block_m ...`` of head ``bh``. The
    tensors reach the kernel contiguous, head after head, so row ``t`` of head ``bh`` starts at element
    ``(bh * T + t) * D`` (``T`` is ``T_q`` for ``Q`` and ``Out``, ``T_k`` for ``K`` and ``V``). A last tile runs past
    the end of its head, into the next head's rows: the kernel masks the rows past ``T_q`` and the keys past
    ``T_k``. (After the last head lie a tile's worth of zero rows, so that no tile reads or writes outside the
    tensors.) The kernel writes ``Out (B * H, T_q, D)``, in the inputs' dtype, and ``Lse (B * H, T_q)``,
    float32: each query's log-sum-exp of its scaled scores, ``-inf`` for a query that may attend no key. ``scale``
    is ``1 / sqrt(D)``; with ``CAUSAL`` query ``i`` may attend key ``j`` when ``j <= i + (T_k - T_q)`` (Chapter 2's
    causal mask, lined up at the last key). Both outputs start as NaN, so a row the kernel never writes shows.

    A kernel defined under ``TRITON_INTERPRET=1`` runs on the CPU, one program after another; a compiled one on the
    GPU. The results come back on ``q``'s device.

    Returns:
        ``(out (B, H, T_q, D), lse (B, H, T_q))``.

    Raises:
        TritonMissing: where Triton is not installed.
        ValueError: for inputs that are not 4-D of matching sizes and one floating dtype of
            :data:`KERNEL_DTYPES`, a head size ``D`` that is not a power of two from 16 to 256, block sizes that are
            not powers of two of at least 16, bfloat16 inputs in the interpreter (whose ``tl.dot`` gets them
            wrong), or a compiled kernel without a CUDA device.
    """
    if not TRITON_AVAILABLE:
        raise TritonMissing(TRITON_MISSING)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor (B, H, T, D); got {getattr(t, 'shape', type(t).__name__)}")
    (b, h, t_q, d), t_k = q.shape, k.shape[2]
    if k.shape != (b, h, t_k, d) or v.shape != k.shape:
        raise ValueError(f"k and v must be (B, H, T_k, D) with q's B, H and D: q {tuple(q.shape)}, k {tuple(k.shape)},"
                         f" v {tuple(v.shape)}")
    if q.dtype not in KERNEL_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k and v must share one dtype of float16, bfloat16 or float32; got {q.dtype}, "
                         f"{k.dtype}, {v.dtype}")
    if not (_power_of_two(d) and 16 <= d <= 256):
        raise ValueError(f"the head size D = {d} must be a power of two from 16 to 256 (tl.arange and tl.dot need it)")
    if not (_power_of_two(block_m) and _power_of_two(block_n) and min(block_m, block_n) >= 16):
        raise ValueError(f"block_m = {block_m} and block_n = {block_n} must be powers of two of at least 16")
    if t_q < 1 or t_k < 1:
        raise ValueError(f"need at least one query and one key; got T_q = {t_q}, T_k = {t_k}")
    if interpreted(kernel):
        if q.dtype == torch.bfloat16:
            raise ValueError(f"bfloat16 inputs in Triton's interpreter: its tl.dot multiplies bfloat16 tiles wrongly "
                             f"(Triton {triton.__version__} reads their bits as integers), so try float16 or float32 "
                             f"here, and bfloat16 on a GPU")
        if type(tl.zeros).__name__ != "InterpretedFunction":
            raise ValueError("Triton was imported before TRITON_INTERPRET=1 was set, so its library functions cannot "
                             "run in the interpreter: restart the kernel and import attention_course.flash (or set "
                             "TRITON_INTERPRET=1) before anything imports triton")
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        raise ValueError("this kernel was compiled for a GPU, and there is none: define it after "
                         "os.environ['TRITON_INTERPRET'] = '1' to run it in Triton's interpreter")
    # The heads one after another, (B * H * T, D), then a tile's worth of zero rows: a tile that runs past the end
    # of the last head reads zeros and writes into padding, never into another tensor's memory (the kernel must still
    # mask the rows past T_q and the keys past T_k: past the end of one head lies the next).
    extra = max(block_m, block_n)
    qc, kc, vc = (_heads_in_a_row(x, extra, device) for x in (q, k, v))
    out = torch.full_like(qc, math.nan)  # (B * H * T_q + extra, D): a row never written stays NaN
    lse = torch.full((b * h * t_q + extra,), math.nan, dtype=torch.float32, device=device)
    grid = (triton.cdiv(t_q, block_m), b * h)
    # The interpreter computes with NumPy, which warns of log(0) = -inf (the log-sum-exp of a query with no key).
    with numpy.errstate(divide="ignore", invalid="ignore"):
        kernel[grid](qc, kc, vc, out, lse, t_q, t_k, 1.0 / math.sqrt(d), D=d, BLOCK_M=block_m, BLOCK_N=block_n,
                     CAUSAL=bool(causal))
    n = b * h * t_q
    return out[:n].reshape(b, h, t_q, d).to(q.device), lse[:n].reshape(b, h, t_q).to(q.device)


def _heads_in_a_row(x: Tensor, extra: int, device: torch.device) -> Tensor:
    """``x (B, H, T, D)`` as one contiguous ``(B * H * T + extra, D)`` on ``device``: head after head, then ``extra``
    zero rows."""
    rows = x.detach().reshape(-1, x.shape[-1]).to(device)
    return torch.cat([rows, rows.new_zeros(extra, x.shape[-1])])
