"""Chapter 5 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names
the exercise notebook provides (``math``, ``torch``, ``nn``, ``Tensor``) and,
where the exercise builds on an earlier one, that earlier exercise
(``sinusoidal_encoding``), which the catalogue tests supply from the reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, MODIFIED_IN_PLACE, NO_VALUE_ERROR
from catalogue import Entry
from solutions.positional import sinusoidal_encoding

# ================================================================ sinusoidal_encoding


def _check_sizes(max_len, d_model):
    if max_len <= 0 or d_model <= 0:
        raise ValueError(f"sizes must be positive: max_len={max_len}, d_model={d_model}")
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")


def _angles(max_len, d_model, base=10000.0):
    """(max_len, d_model / 2): p / base^(2i / d_model), the learner's correct angle."""
    p = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    return p / base ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)


def _fill(angles, even, odd):
    pe = torch.zeros(angles.shape[0], 2 * angles.shape[1])
    pe[:, 0::2] = even(angles)
    pe[:, 1::2] = odd(angles)
    return pe


def se_swapped(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    return _fill(_angles(max_len, d_model, base), torch.cos, torch.sin)


def se_i_not_2i(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    p = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    i = torch.arange(d_model // 2, dtype=torch.float32)
    return _fill(p / base ** (i / d_model), torch.sin, torch.cos)


def se_halves(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    angles = _angles(max_len, d_model, base)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def se_odd_column_exponent(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    pe = torch.zeros(max_len, d_model)
    for p in range(max_len):
        for j in range(d_model):
            angle = p / base ** (j / d_model)
            pe[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def se_column_index(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    pe = torch.zeros(max_len, d_model)
    for p in range(max_len):
        for i in range(d_model):
            angle = p / base ** (2 * i / d_model)
            pe[p, i] = math.sin(angle) if i % 2 == 0 else math.cos(angle)
    return pe


def se_multiplied(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    p = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    return _fill(p * base ** (torch.arange(0, d_model, 2) / d_model), torch.sin, torch.cos)


def se_integer_division(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    p = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2)
    return _fill(p / base ** (two_i // d_model), torch.sin, torch.cos)


def se_base_ignored(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    return _fill(_angles(max_len, d_model, 10000.0), torch.sin, torch.cos)


def se_from_one(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    p = torch.arange(1, max_len + 1, dtype=torch.float32).unsqueeze(1)
    return _fill(p / base ** (torch.arange(0, d_model, 2) / d_model), torch.sin, torch.cos)


def se_scaled_positions(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    p = torch.linspace(0, 1, max_len + 1)[:-1].unsqueeze(1)  # "normalised" positions p / max_len
    return _fill(p / base ** (torch.arange(0, d_model, 2) / d_model), torch.sin, torch.cos)


def se_float64(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    p = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    angles = p / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angles.sin(), angles.cos()
    return pe


def se_transposed(max_len, d_model, base=10000.0):
    _check_sizes(max_len, d_model)
    return _fill(_angles(max_len, d_model, base), torch.sin, torch.cos).T


def se_no_odd_check(max_len, d_model, base=10000.0):
    if max_len <= 0 or d_model <= 0:
        raise ValueError(f"sizes must be positive: max_len={max_len}, d_model={d_model}")
    return _fill(_angles(max_len, d_model, base), torch.sin, torch.cos)


def se_no_size_check(max_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    return _fill(_angles(max_len, d_model, base), torch.sin, torch.cos)


def se_loops(max_len: int, d_model: int, base: float = 10000.0) -> Tensor:
    _check_sizes(max_len, d_model)
    pe = torch.zeros(max_len, d_model)
    for p in range(max_len):
        for i in range(d_model // 2):
            angle = p / base ** (2 * i / d_model)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


def se_outer(max_len: int, d_model: int, base: float = 10000.0) -> Tensor:
    _check_sizes(max_len, d_model)
    inv_freq = 1.0 / base ** (torch.arange(0, d_model, 2).float() / d_model)
    angles = torch.outer(torch.arange(max_len).float(), inv_freq)  # (max_len, d_model / 2)
    pe = torch.empty(max_len, d_model)
    pe[:, 0::2] = angles.sin()
    pe[:, 1::2] = angles.cos()
    return pe


def se_exp_log(max_len: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The Annotated Transformer's div_term, in float32."""
    _check_sizes(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(base) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def se_stack_flatten(max_len: int, d_model: int, base: float = 10000.0) -> Tensor:
    _check_sizes(max_len, d_model)
    angles = _angles(max_len, d_model, base)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(max_len, d_model)


# ================================================================ SinusoidalPositionalEncoding


class _Table(nn.Module):
    """The learner's ``__init__``, shared by the entries whose mistake is in ``forward``."""

    def __init__(self, d_model, max_len=5000, base=10000.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base))

    def length(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"T={x.shape[1]} is longer than max_len={self.max_len}")
        return x.shape[1]


class SPEShortDefault(_Table):
    def __init__(self, d_model, max_len=512, base=10000.0):  # a default of 512, not 5000
        super().__init__(d_model, max_len, base)

    def forward(self, x):
        return x + self.pe[: self.length(x)].to(x.dtype)


class SPEConcatenated(_Table):
    def forward(self, x):
        t = self.length(x)
        return torch.cat([x, self.pe[:t].expand(x.shape[0], t, -1).to(x.dtype)], dim=-1)


class SPEPlainAttribute(nn.Module):
    def __init__(self, d_model, max_len=5000, base=10000.0):
        super().__init__()
        self.max_len = max_len
        self.pe = sinusoidal_encoding(max_len, d_model, base)

    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"T={x.shape[1]} is longer than max_len={self.max_len}")
        return x + self.pe[: x.shape[1]].to(x.dtype)


class SPEParameter(nn.Module):
    def __init__(self, d_model, max_len=5000, base=10000.0):
        super().__init__()
        self.max_len = max_len
        self.pe = nn.Parameter(sinusoidal_encoding(max_len, d_model, base), requires_grad=False)

    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"T={x.shape[1]} is longer than max_len={self.max_len}")
        return x + self.pe[: x.shape[1]].to(x.dtype)


class SPENotPersistent(_Table):
    def __init__(self, d_model, max_len=5000, base=10000.0):
        nn.Module.__init__(self)
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base), persistent=False)

    def forward(self, x):
        return x + self.pe[: self.length(x)].to(x.dtype)


class SPENoMaxLenCheck(_Table):
    def forward(self, x):
        return x + self.pe[: x.shape[1]].to(x.dtype)


class SPETruncates(_Table):
    def forward(self, x):
        x = x[:, : self.max_len]  # "the table cannot cover more"
        return x + self.pe[: x.shape[1]].to(x.dtype)


class SPENotSliced(_Table):
    def forward(self, x):
        self.length(x)
        return x + self.pe.to(x.dtype)


class SPESequenceFirst(_Table):
    """The old PyTorch tutorial's module, written for x of shape (T, B, d_model)."""

    def forward(self, x):
        return x + self.pe[: x.size(0)].unsqueeze(1).to(x.dtype)


class SPEOffByOne(_Table):
    def forward(self, x):
        if x.shape[1] >= self.max_len:
            raise ValueError(f"T={x.shape[1]} does not fit max_len={self.max_len}")
        return x + self.pe[: x.shape[1]].to(x.dtype)


class SPEScaled(_Table):
    def forward(self, x):
        t = self.length(x)
        return x * math.sqrt(x.shape[-1]) + self.pe[:t].to(x.dtype)


class SPENoCast(_Table):
    def forward(self, x):
        return x + self.pe[: self.length(x)]


class SPEEveryForward(nn.Module):
    def __init__(self, d_model, max_len=5000, base=10000.0):
        super().__init__()
        self.d_model, self.max_len, self.base = d_model, max_len, base

    def forward(self, x):
        t = x.shape[1]
        if t > self.max_len:
            raise ValueError(f"T={t} is longer than max_len={self.max_len}")
        return x + sinusoidal_encoding(t, self.d_model, self.base).to(x.device, x.dtype)


class SPEBaseNotPassed(_Table):
    def __init__(self, d_model, max_len=5000, base=10000.0):
        super().__init__(d_model, max_len)

    def forward(self, x):
        return x + self.pe[: self.length(x)].to(x.dtype)


class SPEInPlace(_Table):
    def forward(self, x):
        x += self.pe[: self.length(x)].to(x.dtype)
        return x


class SPEEncodingOnly(_Table):
    def forward(self, x):
        return self.pe[: self.length(x)].to(x.dtype).expand_as(x)


class SPEBatchedBuffer(nn.Module):
    def __init__(self, d_model: int, max_len: int = 5000, base: float = 10000.0) -> None:
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model, base).unsqueeze(0), persistent=True)

    def forward(self, x: Tensor) -> Tensor:
        if x.size(1) > self.max_len:
            raise ValueError(f"input of length {x.size(1)} exceeds the max_len of {self.max_len}")
        return x + self.table[:, : x.size(1)].type_as(x)


class SPENarrow(nn.Module):
    def __init__(self, d_model: int, max_len: int = 5000, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("encoding", sinusoidal_encoding(max_len, d_model, base))

    def forward(self, x: Tensor) -> Tensor:
        t, max_len = x.shape[-2], self.encoding.shape[0]
        if t > max_len:
            raise ValueError(f"cannot encode {t} positions with a table of max_len={max_len}")
        return torch.add(x, self.encoding.narrow(0, 0, t), alpha=1).to(x.dtype)


# ================================================================ LearnedPositionalEmbedding


class _Learned(nn.Module):
    """The learner's ``__init__``, shared by the entries whose mistake is in ``forward``."""

    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)

    def length(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"T={x.shape[1]} is longer than max_len={self.max_len}")
        return x.shape[1]


class LEInputAsIndices(_Learned):
    def forward(self, x):
        self.length(x)
        return x + self.table(x)


class LEPositionsIgnored(_Learned):
    def forward(self, x):
        self.length(x)
        return x + self.table.weight[0]


class LEBatchAxis(_Learned):
    def forward(self, x):
        self.length(x)
        positions = torch.arange(x.shape[0], device=x.device)
        return x + self.table(positions).unsqueeze(1)


class LEFromOne(_Learned):
    def forward(self, x):
        t = self.length(x)
        return x + self.table(torch.arange(1, t + 1, device=x.device))


class LEPositionsOnCpu(_Learned):
    def forward(self, x):
        t = self.length(x)
        return x + self.table(torch.arange(t))  # on the CPU, whatever the device of x


class LENotAdded(_Learned):
    def forward(self, x):
        t = self.length(x)
        return self.table(torch.arange(t, device=x.device)).expand_as(x)


class LEConcatenated(_Learned):
    def forward(self, x):
        t = self.length(x)
        pos = self.table(torch.arange(t, device=x.device)).expand(x.shape[0], -1, -1)
        return torch.cat([x, pos], dim=-1)


class LENoCheck(_Learned):
    def forward(self, x):
        return x + self.table(torch.arange(x.shape[1], device=x.device))


class LESwappedArguments(_Learned):
    def __init__(self, max_len, d_model):
        nn.Module.__init__(self)
        self.max_len = max_len
        self.table = nn.Embedding(d_model, max_len)

    def forward(self, x):
        t = self.length(x)
        return x + self.table.weight.T[:t]


class LEBufferTable(_Learned):
    def __init__(self, max_len, d_model):
        nn.Module.__init__(self)
        self.max_len = max_len
        self.register_buffer("table", torch.randn(max_len, d_model))

    def forward(self, x):
        return x + self.table[: self.length(x)]


class LEFrozen(_Learned):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.table.weight.requires_grad_(False)

    def forward(self, x):
        return x + self.table(torch.arange(self.length(x), device=x.device))


class LEDetached(_Learned):
    def forward(self, x):
        return x + self.table.weight.detach()[: self.length(x)]


class LENotSliced(_Learned):
    def forward(self, x):
        self.length(x)
        return x + self.table.weight


class LEOffByOne(_Learned):
    def forward(self, x):
        t = x.shape[1]
        if t >= self.max_len:
            raise ValueError(f"T={t} must be smaller than max_len={self.max_len}")
        return x + self.table(torch.arange(t, device=x.device))


class LEWeightSlice(_Learned):
    def forward(self, x):
        return x + self.table.weight[: self.length(x)]


class LEParameter(nn.Module):
    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        if t > self.max_len:
            raise ValueError(f"got {t} positions but the table only has max_len={self.max_len}")
        positions = torch.arange(t, device=x.device).expand(b, t)  # (B, T)
        return x + self.pos[positions]


class LEFunctional(_Learned):
    def forward(self, x):
        positions = torch.arange(self.length(x), device=x.device)
        return x + F.embedding(positions, self.table.weight)


# ================================================================ apply_rotary


def _pairs(x, positions, base):
    """The learner's setup: (T, d, angles (..., T, d/2)) after the odd-width check."""
    t, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"d must be even, got d={d}")
    if positions is None:
        positions = torch.arange(t, device=x.device)
    freqs = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    return positions.to(x.device, torch.float32).unsqueeze(-1) * freqs


def _interleave(even, odd):
    return torch.stack([even, odd], dim=-1).flatten(-2)


def rope_halves(x, positions=None, base=10000.0):
    angles = _pairs(x, positions, base)
    d = x.shape[-1]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)  # rotate_half
    return (x * cos + rotated * sin).to(x.dtype)


def rope_mixed(x, positions=None, base=10000.0):
    angles = _pairs(x, positions, base)
    d = x.shape[-1]
    cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


def rope_clockwise(x, positions=None, base=10000.0):
    angles = _pairs(x, positions, base)
    a, b = x[..., 0::2], x[..., 1::2]
    cos, sin = angles.cos(), angles.sin()
    return _interleave(a * cos + b * sin, -a * sin + b * cos).to(x.dtype)


def rope_zero_positions(x, positions=None, base=10000.0):
    if positions is None:
        positions = torch.zeros(x.shape[-2], device=x.device)
    angles = _pairs(x, positions, base)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()).to(x.dtype)


def rope_positions_argument_ignored(x, positions=None, base=10000.0):
    angles = _pairs(x, None, base)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()).to(x.dtype)


def rope_i_not_2i(x, positions=None, base=10000.0):
    _pairs(x, positions, base)
    t, d = x.shape[-2], x.shape[-1]
    p = torch.arange(t, device=x.device) if positions is None else positions
    angles = p.to(torch.float32).unsqueeze(-1) * base ** (-torch.arange(d // 2, device=x.device) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()).to(x.dtype)


def rope_written_as_halves(x, positions=None, base=10000.0):
    angles = _pairs(x, positions, base)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat([a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()], -1).to(x.dtype)


def rope_inverted_frequencies(x, positions=None, base=10000.0):
    _pairs(x, positions, base)
    t, d = x.shape[-2], x.shape[-1]
    p = torch.arange(t, device=x.device) if positions is None else positions
    angles = p.to(torch.float32).unsqueeze(-1) * base ** (torch.arange(0, d, 2, device=x.device) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()).to(x.dtype)


def rope_sin_cos_swapped(x, positions=None, base=10000.0):
    angles = _pairs(x, positions, base)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.sin() - b * angles.cos(), a * angles.cos() + b * angles.sin()).to(x.dtype)


def rope_in_place(x, positions=None, base=10000.0):
    angles = _pairs(x, positions, base).to(x.dtype)
    a, b = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = a * angles.cos() - b * angles.sin()
    x[..., 1::2] = a * angles.sin() + b * angles.cos()
    return x


def rope_float32(x, positions=None, base=10000.0):
    angles = _pairs(x, positions, base)
    x = x.float()
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos())


def rope_no_cast_back(x, positions=None, base=10000.0):
    angles = _pairs(x, positions, base)
    if x.dtype == torch.float64:
        angles = angles.double()
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos())


def rope_cpu_positions(x, positions=None, base=10000.0):
    t, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"d must be even, got d={d}")
    if positions is None:
        positions = torch.arange(t)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = positions.to(work).unsqueeze(-1) * base ** (-torch.arange(0, d, 2, dtype=work) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()).to(x.dtype)


def rope_no_odd_check(x, positions=None, base=10000.0):
    t, d = x.shape[-2], x.shape[-1]
    p = torch.arange(t, device=x.device) if positions is None else positions
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = p.to(work).unsqueeze(-1) * base ** (-torch.arange(0, d, 2, dtype=work, device=x.device) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()).to(x.dtype)


def rope_1d_positions(x, positions=None, base=10000.0):
    t, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"d must be even, got d={d}")
    p = torch.arange(t, device=x.device) if positions is None else positions
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    freqs = base ** (-torch.arange(0, d, 2, dtype=work, device=x.device) / d)
    angles = p.to(work)[:, None] * freqs[None, :]  # (T, d/2)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()).to(x.dtype)


def rope_t_from_axis_1(x, positions=None, base=10000.0):
    t, d = x.shape[1], x.shape[-1]
    if d % 2:
        raise ValueError(f"d must be even, got d={d}")
    p = torch.arange(t, device=x.device) if positions is None else positions
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = p.to(work).unsqueeze(-1) * base ** (-torch.arange(0, d, 2, dtype=work, device=x.device) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    return _interleave(a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()).to(x.dtype)


def rope_complex(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    t, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"the last dimension must be even, got d={d}")
    if positions is None:
        positions = torch.arange(t, device=x.device)
    real = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, device=x.device, dtype=real) / d)
    angles = torch.outer(positions.reshape(-1).to(real), inv_freq).reshape(*positions.shape, d // 2)
    rotation = torch.polar(torch.ones_like(angles), angles)  # e^{i theta}
    pairs = torch.view_as_complex(x.to(real).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


def _rotate_every_two(x):
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)."""
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


def rope_precomputed(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    d = x.shape[-1]
    if d % 2 == 1:
        raise ValueError(f"apply_rotary: odd width d={d}")
    if positions is None:
        positions = torch.arange(x.shape[-2], device=x.device)
    work = torch.promote_types(x.dtype, torch.float32)
    theta = positions.to(x.device, work)[..., None] * base ** (-torch.arange(0, d, 2, device=x.device) / d).to(work)
    cos = theta.cos().repeat_interleave(2, dim=-1)  # (..., T, d): each angle twice, once per member of a pair
    sin = theta.sin().repeat_interleave(2, dim=-1)
    return (x.to(work) * cos + _rotate_every_two(x.to(work)) * sin).to(x.dtype)


def rope_matrices(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    *lead, t, d = x.shape
    if d % 2:
        raise ValueError(f"expected an even d, got d={d}")
    p = torch.arange(t, device=x.device) if positions is None else positions.to(x.device)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = p.to(work).unsqueeze(-1) / base ** (torch.arange(0, d, 2, device=x.device, dtype=work) / d)
    c, s = theta.cos(), theta.sin()
    rotations = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (..., T, d/2, 2, 2)
    pairs = x.to(work).reshape(*lead, t, d // 2, 2)
    return torch.einsum("...ij,...j->...i", rotations, pairs).reshape(*lead, t, d).to(x.dtype)


# ================================================================ concept checks


def encoded_shape_concatenated(batch, n_tokens, d_model):
    return batch, n_tokens, 2 * d_model


def same_in_order(sentence_a, sentence_b):
    return sentence_a == sentence_b


def same_words(sentence_a, sentence_b):
    return set(sentence_a) == set(sentence_b)


def encoded_shape_from_a_tensor(batch, n_tokens, d_model):
    x = torch.zeros(batch, n_tokens, d_model)
    return (x + torch.zeros(n_tokens, d_model)).shape


def same_counts(sentence_a, sentence_b):
    return all(sentence_a.count(w) == sentence_b.count(w) for w in sentence_a + sentence_b)


# ================================================================ alibi_bias

def _alibi_checked(n_heads, T):
    if n_heads < 1 or T < 1:
        raise ValueError(f"alibi_bias needs n_heads >= 1 and T >= 1, got n_heads={n_heads}, T={T}")


def _slopes(n):
    if n & (n - 1) == 0:
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]
    below = 2 ** int(math.log2(n))
    return _slopes(below) + _slopes(2 * below)[0::2][: n - below]


def _with_slopes(m, T):
    distance = torch.arange(T)[None, :] - torch.arange(T)[:, None]
    return torch.tensor(m)[:, None, None] * distance


def alibi_reversed(n_heads, T):
    _alibi_checked(n_heads, T)
    return _with_slopes(_slopes(n_heads)[::-1], T)


def alibi_from_zero(n_heads, T):
    _alibi_checked(n_heads, T)
    return _with_slopes([2 ** (-8 * h / n_heads) for h in range(n_heads)], T)


def alibi_i_minus_j(n_heads, T):
    _alibi_checked(n_heads, T)
    distance = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    return torch.tensor(_slopes(n_heads))[:, None, None] * distance


def alibi_absolute(n_heads, T):
    _alibi_checked(n_heads, T)
    distance = (torch.arange(T)[None, :] - torch.arange(T)[:, None]).abs()
    return -torch.tensor(_slopes(n_heads))[:, None, None] * distance


def alibi_with_mask(n_heads, T):
    bias = _with_slopes(_slopes(n_heads), T) if n_heads >= 1 and T >= 1 else _alibi_checked(n_heads, T)
    return bias.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))


def alibi_no_slopes(n_heads, T):
    _alibi_checked(n_heads, T)
    distance = torch.arange(T)[None, :] - torch.arange(T)[:, None]
    return distance.float().expand(n_heads, T, T)


def alibi_one_slope(n_heads, T):
    _alibi_checked(n_heads, T)
    return _with_slopes([2 ** (-8 / n_heads)] * n_heads, T)


def alibi_plain_formula(n_heads, T):
    _alibi_checked(n_heads, T)
    return _with_slopes([2 ** (-8 * (h + 1) / n_heads) for h in range(n_heads)], T)


def alibi_next_power(n_heads, T):
    _alibi_checked(n_heads, T)
    return _with_slopes(_slopes(2 ** math.ceil(math.log2(n_heads)))[:n_heads], T)


def alibi_odd_fill(n_heads, T):
    _alibi_checked(n_heads, T)
    below = 2 ** int(math.log2(n_heads))
    m = _slopes(below) + _slopes(2 * below)[1::2][: n_heads - below] if n_heads != below else _slopes(n_heads)
    return _with_slopes(m, T)


def alibi_float64(n_heads, T):
    """Slopes and distances computed in float64, and never brought back to the default dtype."""
    _alibi_checked(n_heads, T)
    m = torch.tensor(_slopes(n_heads), dtype=torch.float64)
    positions = torch.arange(T, dtype=torch.float64)
    return m[:, None, None] * (positions[None, :] - positions[:, None])


def alibi_no_check(n_heads, T):
    return _with_slopes(_slopes(max(n_heads, 1)), max(T, 0))


def alibi_loops(n_heads, T):
    _alibi_checked(n_heads, T)
    m = _slopes(n_heads)
    return torch.tensor([[[m[h] * (j - i) for j in range(T)] for i in range(T)] for h in range(n_heads)])


def alibi_geometric(n_heads, T):
    """The slopes as a geometric sequence, start ** (h + 1), as the paper's code writes them."""
    _alibi_checked(n_heads, T)

    def power_of_two(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start ** (h + 1) for h in range(n)]

    below = 2 ** math.floor(math.log2(n_heads))
    m = power_of_two(below) + (power_of_two(2 * below)[0::2][: n_heads - below] if below < n_heads else [])
    positions = torch.arange(T, dtype=torch.float32)
    return torch.tensor(m).view(-1, 1, 1) * (positions.view(1, T) - positions.view(T, 1))


WRONG = [
    Entry("sinusoidal_encoding", "sin and cos swapped", se_swapped, "sin and cos swapped",
          "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "i instead of 2i", se_i_not_2i, "i instead of 2i in the exponent",
          "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "sines and cosines in halves", se_halves,
          "sin and cos in halves instead of interleaved", "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "odd columns with exponent (2i+1)/d", se_odd_column_exponent,
          "odd columns use j/d instead of 2i/d", "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "column index used as i", se_column_index, "column index j used as i",
          "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "multiplied by base^(2i/d)", se_multiplied, "multiplied instead of divided",
          "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "integer division in the exponent", se_integer_division,
          "integer division in the exponent", "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "base ignored", se_base_ignored, "base ignored", "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "positions from 1", se_from_one, "positions counted from 1",
          "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "positions divided by max_len", se_scaled_positions, "positions divided by max_len",
          "sinusoidal_encoding_values"),
    Entry("sinusoidal_encoding", "float64 table", se_float64, "dtype float64 instead of float32",
          "sinusoidal_encoding_shape"),
    Entry("sinusoidal_encoding", "transposed table", se_transposed, "transposed table", "sinusoidal_encoding_shape"),
    Entry("sinusoidal_encoding", "no ValueError for an odd d_model", se_no_odd_check, NO_VALUE_ERROR,
          "sinusoidal_encoding_errors"),
    Entry("sinusoidal_encoding", "no ValueError for max_len=0", se_no_size_check, NO_VALUE_ERROR,
          "sinusoidal_encoding_errors"),
    Entry("SinusoidalPositionalEncoding", "concatenated instead of added", SPEConcatenated,
          "concatenated instead of added", "SinusoidalPositionalEncoding_forward"),
    Entry("SinusoidalPositionalEncoding", "table as a plain attribute", SPEPlainAttribute,
          "table stored as a plain attribute", "SinusoidalPositionalEncoding_buffer"),
    Entry("SinusoidalPositionalEncoding", "table as an nn.Parameter", SPEParameter, "table stored as an nn.Parameter",
          "SinusoidalPositionalEncoding_buffer"),
    Entry("SinusoidalPositionalEncoding", "buffer not persistent", SPENotPersistent,
          "buffer not saved in the state_dict", "SinusoidalPositionalEncoding_buffer"),
    Entry("SinusoidalPositionalEncoding", "no ValueError past max_len", SPENoMaxLenCheck, NO_VALUE_ERROR,
          "SinusoidalPositionalEncoding_max_len"),
    Entry("SinusoidalPositionalEncoding", "silently truncates past max_len", SPETruncates, NO_VALUE_ERROR,
          "SinusoidalPositionalEncoding_max_len"),
    Entry("SinusoidalPositionalEncoding", "encoding not sliced to T", SPENotSliced, "encoding not sliced to T",
          "SinusoidalPositionalEncoding_forward"),
    Entry("SinusoidalPositionalEncoding", "x read as (T, B, d_model)", SPESequenceFirst,
          "positions along the batch axis", "SinusoidalPositionalEncoding_forward", also=(NO_VALUE_ERROR,)),
    Entry("SinusoidalPositionalEncoding", "max_len default 512", SPEShortDefault, "max_len default",
          "SinusoidalPositionalEncoding_max_len"),
    Entry("SinusoidalPositionalEncoding", "T == max_len refused", SPEOffByOne, "T == max_len refused",
          "SinusoidalPositionalEncoding_max_len"),
    Entry("SinusoidalPositionalEncoding", "x scaled by sqrt(d_model)", SPEScaled, "x scaled by √d_model",
          "SinusoidalPositionalEncoding_forward"),
    Entry("SinusoidalPositionalEncoding", "bfloat16 promoted to float32", SPENoCast, DTYPE_CHANGED,
          "SinusoidalPositionalEncoding_contract"),
    Entry("SinusoidalPositionalEncoding", "table rebuilt in every forward", SPEEveryForward,
          "table not stored as a buffer", "SinusoidalPositionalEncoding_buffer", also=(NO_VALUE_ERROR,)),
    Entry("SinusoidalPositionalEncoding", "base not passed on", SPEBaseNotPassed, "base ignored",
          "SinusoidalPositionalEncoding_forward"),
    Entry("SinusoidalPositionalEncoding", "x modified in place", SPEInPlace, MODIFIED_IN_PLACE,
          "SinusoidalPositionalEncoding_contract"),
    Entry("SinusoidalPositionalEncoding", "encoding returned without x", SPEEncodingOnly, "x not added",
          "SinusoidalPositionalEncoding_forward", also=(GRAPH_CUT,)),
    Entry("LearnedPositionalEmbedding", "the input used as indices", LEInputAsIndices,
          "the input used as indices instead of positions", "LearnedPositionalEmbedding_forward"),
    Entry("LearnedPositionalEmbedding", "positions ignored", LEPositionsIgnored, "positions ignored",
          "LearnedPositionalEmbedding_forward"),
    Entry("LearnedPositionalEmbedding", "positions along the batch axis", LEBatchAxis, "positions along the batch axis",
          "LearnedPositionalEmbedding_forward"),
    Entry("LearnedPositionalEmbedding", "positions from 1", LEFromOne, "positions counted from 1",
          "LearnedPositionalEmbedding_forward"),
    Entry("LearnedPositionalEmbedding", "embeddings returned without x", LENotAdded, "x not added",
          "LearnedPositionalEmbedding_forward", also=(GRAPH_CUT,)),
    Entry("LearnedPositionalEmbedding", "concatenated instead of added", LEConcatenated,
          "concatenated instead of added", "LearnedPositionalEmbedding_forward"),
    Entry("LearnedPositionalEmbedding", "no ValueError past max_len", LENoCheck, NO_VALUE_ERROR,
          "LearnedPositionalEmbedding_max_len"),
    Entry("LearnedPositionalEmbedding", "nn.Embedding(d_model, max_len)", LESwappedArguments,
          "max_len and d_model swapped", "LearnedPositionalEmbedding_table"),
    Entry("LearnedPositionalEmbedding", "table as a buffer", LEBufferTable, "table not a trainable parameter",
          "LearnedPositionalEmbedding_table"),
    Entry("LearnedPositionalEmbedding", "table frozen", LEFrozen, "table frozen", "LearnedPositionalEmbedding_table",
          also=(GRAPH_CUT,)),
    Entry("LearnedPositionalEmbedding", "table detached", LEDetached, GRAPH_CUT,
          "LearnedPositionalEmbedding_gradients"),
    Entry("LearnedPositionalEmbedding", "table not sliced to T", LENotSliced, "encoding not sliced to T",
          "LearnedPositionalEmbedding_forward"),
    Entry("LearnedPositionalEmbedding", "T == max_len refused", LEOffByOne, "T == max_len refused",
          "LearnedPositionalEmbedding_max_len"),
    Entry("LearnedPositionalEmbedding", "positions on the CPU", LEPositionsOnCpu, "positions built on the CPU",
          "LearnedPositionalEmbedding_gradients"),
    Entry("apply_rotary", "pairs as halves (rotate_half)", rope_halves, "pairs taken as halves instead of interleaved",
          "apply_rotary_values"),
    Entry("apply_rotary", "interleaved angles with rotate_half", rope_mixed,
          "interleaved angles combined with rotate_half", "apply_rotary_values"),
    Entry("apply_rotary", "rotated clockwise", rope_clockwise, "rotated clockwise", "apply_rotary_values"),
    Entry("apply_rotary", "default positions all zero", rope_zero_positions, "positions ignored",
          "apply_rotary_values"),
    Entry("apply_rotary", "positions argument ignored", rope_positions_argument_ignored, "positions argument ignored",
          "apply_rotary_positions"),
    Entry("apply_rotary", "i instead of 2i", rope_i_not_2i, "i instead of 2i in the exponent", "apply_rotary_values"),
    Entry("apply_rotary", "rotated pairs written back as halves", rope_written_as_halves,
          "rotated pairs written back as halves", "apply_rotary_values"),
    Entry("apply_rotary", "multiplied by base^(2i/d)", rope_inverted_frequencies, "multiplied instead of divided",
          "apply_rotary_values"),
    Entry("apply_rotary", "sin and cos swapped", rope_sin_cos_swapped, "sin and cos swapped", "apply_rotary_values"),
    Entry("apply_rotary", "x modified in place", rope_in_place, MODIFIED_IN_PLACE, "apply_rotary_contract"),
    Entry("apply_rotary", "float32 result for float64 x", rope_float32, DTYPE_CHANGED, "apply_rotary_contract"),
    Entry("apply_rotary", "bfloat16 promoted to float32", rope_no_cast_back, DTYPE_CHANGED, "apply_rotary_contract"),
    Entry("apply_rotary", "default positions on the CPU", rope_cpu_positions, "positions built on the CPU",
          "apply_rotary_contract"),
    Entry("apply_rotary", "no ValueError for an odd d", rope_no_odd_check, NO_VALUE_ERROR, "apply_rotary_errors"),
    Entry("apply_rotary", "positions assumed 1-D", rope_1d_positions, "positions assumed to be 1-D",
          "apply_rotary_positions"),
    Entry("apply_rotary", "T taken from x.shape[1]", rope_t_from_axis_1, "T taken from the wrong axis",
          "apply_rotary_values"),
    Entry("encoded_shape", "positions concatenated", encoded_shape_concatenated,
          "positions concatenated instead of added", "encoded_shape_answer"),
    Entry("same_without_positions", "word order matters", same_in_order, "self-attention taken to see word order",
          "same_without_positions_answer"),
    Entry("same_without_positions", "the same set of words", same_words, "repeated words counted once",
          "same_without_positions_answer"),
    Entry("alibi_bias", "slopes from the shallowest", alibi_reversed, "slopes in reverse order", "alibi_bias_values"),
    Entry("alibi_bias", "exponent -8h/n", alibi_from_zero, "head 0 given the slope 1", "alibi_bias_values"),
    Entry("alibi_bias", "distance i - j", alibi_i_minus_j, "bias grows with the distance", "alibi_bias_values"),
    Entry("alibi_bias", "-m |i - j|", alibi_absolute, "absolute distance", "alibi_bias_values"),
    Entry("alibi_bias", "-inf above the diagonal", alibi_with_mask, "causal mask merged into the bias",
          "alibi_bias_values"),
    Entry("alibi_bias", "no slopes", alibi_no_slopes, "slopes left out", "alibi_bias_values"),
    Entry("alibi_bias", "head 0's slope everywhere", alibi_one_slope, "one slope for every head", "alibi_bias_values"),
    Entry("alibi_bias", "2^(-8(h+1)/n) for 6 heads", alibi_plain_formula,
          "power-of-two formula for every number of heads", "alibi_bias_heads"),
    Entry("alibi_bias", "first n slopes of the next power of two", alibi_next_power, "slopes of the next power of two",
          "alibi_bias_heads"),
    Entry("alibi_bias", "fill-up slopes at odd indices", alibi_odd_fill, "extra slopes at odd indices",
          "alibi_bias_heads"),
    Entry("alibi_bias", "float64 bias", alibi_float64, "dtype float64 instead of float32", "alibi_bias_values"),
    Entry("alibi_bias", "no ValueError for no heads", alibi_no_check, NO_VALUE_ERROR, "alibi_bias_errors"),
]

CORRECT = [
    Entry("alibi_bias", "three loops", alibi_loops),
    Entry("alibi_bias", "the paper's geometric sequence", alibi_geometric),
    Entry("sinusoidal_encoding", "explicit loops with math.sin", se_loops),
    Entry("sinusoidal_encoding", "vectorised outer product", se_outer),
    Entry("sinusoidal_encoding", "exp(-log(base) 2i/d) in float32", se_exp_log),
    Entry("sinusoidal_encoding", "stack sin and cos, then reshape", se_stack_flatten),
    Entry("SinusoidalPositionalEncoding", "a (1, max_len, d_model) buffer of another name", SPEBatchedBuffer),
    Entry("SinusoidalPositionalEncoding", "narrow and torch.add", SPENarrow),
    Entry("LearnedPositionalEmbedding", "slicing the embedding's weight", LEWeightSlice),
    Entry("LearnedPositionalEmbedding", "nn.Parameter indexed by (B, T) positions", LEParameter),
    Entry("LearnedPositionalEmbedding", "F.embedding", LEFunctional),
    Entry("apply_rotary", "complex numbers with view_as_complex", rope_complex),
    Entry("apply_rotary", "precomputed cos/sin and an interleaved rotate", rope_precomputed),
    Entry("apply_rotary", "a 2x2 rotation matrix per pair with einsum", rope_matrices),
    Entry("encoded_shape", "read off a broadcast sum", encoded_shape_from_a_tensor),
    Entry("same_without_positions", "word counts compared", same_counts),
]
