"""Chapter 6 catalogue: plausible wrong answers (each must lose points with a message naming its
mistake) and correct alternatives (each must keep full marks).

Every entry is written the way a learner would write it, using only the names
the exercise notebook gives (``math``, ``torch``, ``F``, ``nn``, ``Tensor``,
``dataclass`` and the helpers of its setup cell — ``Attention``,
``causal_mask``, ``padding_mask``, ``positional_table`` — repeated here) and,
where the exercise builds on an earlier one, that earlier exercise, which the
catalogue tests supply from the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_course.testing import DEVICE_CHANGED, DTYPE_CHANGED, GRAPH_CUT, NO_VALUE_ERROR
from catalogue import Entry
from solutions.transformer import DecoderLayer, EncoderLayer, FeedForward, TransformerConfig


class Attention(nn.MultiheadAttention):
    """The notebook's given helper: nn.MultiheadAttention with this course's masks (True = may attend)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__(d_model, n_heads, dropout=dropout, batch_first=True)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        blocked = None
        if mask is not None:
            mask = mask.expand(query.shape[0], query.shape[1], key.shape[1])  # (B, T_q, T_k)
            empty = ~mask.any(dim=-1, keepdim=True)  # (B, T_q, 1): queries with no key at all
            blocked = (~mask & ~empty).repeat_interleave(self.num_heads, dim=0)
        out, weights = super().forward(query, key, value, attn_mask=blocked, average_attn_weights=False)
        if mask is not None:
            weights = weights.masked_fill(empty.unsqueeze(1), 0.0)
            out = torch.where(empty, self.out_proj.bias, out)
        return out, weights


def causal_mask(t: int, device: torch.device | str | None = None) -> Tensor:
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    return (tokens != pad_id).unsqueeze(1)


def positional_table(max_len: int, d_model: int) -> Tensor:
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


# ================================================================ FeedForward


class _FF(nn.Module):
    """The learner's ``__init__``, shared by the FeedForward entries whose mistake is in ``forward``."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.p = dropout


class FFNoRelu(_FF):
    def forward(self, x):
        return self.linear2(self.dropout(self.linear1(x)))


class FFReluAfter(_FF):
    def forward(self, x):
        return torch.relu(self.linear2(self.dropout(self.linear1(x))))


class FFGelu(_FF):
    def forward(self, x):
        return self.linear2(self.dropout(F.gelu(self.linear1(x))))


class FFResidual(_FF):
    def forward(self, x):
        return x + self.linear2(self.dropout(torch.relu(self.linear1(x))))


class FFDropoutInEval(_FF):
    def forward(self, x):
        return self.linear2(F.dropout(torch.relu(self.linear1(x)), self.p))  # F.dropout's training defaults to True


class FFDropoutAfter(_FF):
    def forward(self, x):
        return self.dropout(self.linear2(torch.relu(self.linear1(x))))


class FFNoBias(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class FFFourTimes(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, 4 * d_model)  # "d_ff is always 4 d_model"
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class FFSequential(nn.Sequential):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))


class FFFunctional(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x: Tensor) -> Tensor:
        hidden = F.dropout(self.up(x), self.p, training=self.training)  # dropping before the ReLU is the same
        return self.down(F.relu(hidden))


# ================================================================ EncoderLayer


class _Enc(nn.Module):
    """The learner's ``__init__``, shared by the EncoderLayer entries whose mistake is in ``forward``."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first, self.p = norm_first, dropout
        self.self_attn = Attention(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def sa(self, x, mask):
        return self.dropout(self.self_attn(x, x, x, mask)[0])

    def fwd(self, x):
        return self.dropout(self.ff(x))


class EncNoResidualAttn(_Enc):
    def forward(self, x, src_mask=None):
        if self.norm_first:
            x = self.sa(self.norm1(x), src_mask)
            return x + self.fwd(self.norm2(x))
        x = self.norm1(self.sa(x, src_mask))
        return self.norm2(x + self.fwd(x))


class EncAlwaysPreNorm(_Enc):
    def forward(self, x, src_mask=None):
        x = x + self.sa(self.norm1(x), src_mask)
        return x + self.fwd(self.norm2(x))


class EncPlacementSwapped(_Enc):
    def forward(self, x, src_mask=None):
        if not self.norm_first:  # "norm first" read as "the norm comes first in the formula"
            x = x + self.sa(self.norm1(x), src_mask)
            return x + self.fwd(self.norm2(x))
        x = self.norm1(x + self.sa(x, src_mask))
        return self.norm2(x + self.fwd(x))


class EncMaskIgnored(_Enc):
    def forward(self, x, src_mask=None):
        if self.norm_first:
            x = x + self.sa(self.norm1(x), None)
            return x + self.fwd(self.norm2(x))
        x = self.norm1(x + self.sa(x, None))
        return self.norm2(x + self.fwd(x))


class EncDropoutInEval(_Enc):
    def forward(self, x, src_mask=None):
        drop = lambda t: F.dropout(t, self.p)  # noqa: E731  training defaults to True
        if self.norm_first:
            h = self.norm1(x)
            x = x + drop(self.self_attn(h, h, h, src_mask)[0])
            return x + drop(self.ff(self.norm2(x)))
        x = self.norm1(x + drop(self.self_attn(x, x, x, src_mask)[0]))
        return self.norm2(x + drop(self.ff(x)))


class EncNormsSwapped(_Enc):
    def forward(self, x, src_mask=None):
        if self.norm_first:
            x = x + self.sa(self.norm2(x), src_mask)
            return x + self.fwd(self.norm1(x))
        x = self.norm2(x + self.sa(x, src_mask))
        return self.norm1(x + self.fwd(x))


class EncOneNorm(_Enc):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.norm1 = self.norm2 = nn.LayerNorm(d_model)  # "a LayerNorm has no state worth two copies"

    def forward(self, x, src_mask=None):
        if self.norm_first:
            x = x + self.sa(self.norm1(x), src_mask)
            return x + self.fwd(self.norm1(x))
        x = self.norm1(x + self.sa(x, src_mask))
        return self.norm1(x + self.fwd(x))


class EncResidualAfterNorm(_Enc):
    def forward(self, x, src_mask=None):
        if self.norm_first:
            x = x + self.sa(self.norm1(x), src_mask)
            return x + self.fwd(self.norm2(x))
        x = x + self.norm1(self.sa(x, src_mask))
        return x + self.norm2(self.fwd(x))


class EncFFNotDropped(_Enc):
    def forward(self, x, src_mask=None):  # "FeedForward has its own dropout already"
        if self.norm_first:
            x = x + self.sa(self.norm1(x), src_mask)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.sa(x, src_mask))
        return self.norm2(x + self.ff(x))


class EncNoDropout(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = Attention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, src_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, src_mask)[0]
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, x, x, src_mask)[0])
        return self.norm2(x + self.ff(x))


def _torch_attend(attn: nn.MultiheadAttention, x: Tensor, source: Tensor, mask: Tensor | None) -> Tensor:
    """nn.MultiheadAttention called directly, with the course's mask turned into PyTorch's convention."""
    blocked = None
    if mask is not None:
        full = mask.expand(x.shape[0], x.shape[1], source.shape[1])
        blocked = ~full.repeat_interleave(attn.num_heads, dim=0)  # PyTorch: True = may not attend
    return attn(x, source, source, attn_mask=blocked, need_weights=False)[0]


class EncTorchAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(_torch_attend(self.self_attn, h, h, src_mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(_torch_attend(self.self_attn, x, x, src_mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


class MyMultiHeadAttention(nn.Module):
    """A learner's own Chapter 4 module, pasted in: Linear layers w_q, w_k, w_v, w_o."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads, self.p = n_heads, dropout
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None) -> tuple[Tensor, None]:
        split = lambda t: t.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        mask = None if mask is None else mask.unsqueeze(-3)  # (..., T_q, T_k) -> (..., 1, T_q, T_k): every head
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        return self.w_o(heads.transpose(1, 2).flatten(-2)), None


class EncResidualHelper(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MyMultiHeadAttention(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def block(self, x: Tensor, norm: nn.LayerNorm, sublayer) -> Tensor:  # noqa: ANN001
        if self.norm_first:
            return x + self.drop(sublayer(norm(x)))
        return norm(x + self.drop(sublayer(x)))

    def forward(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        x = self.block(x, self.norm1, lambda h: self.self_attn(h, h, h, src_mask)[0])
        return self.block(x, self.norm2, self.ff)


# ================================================================ DecoderLayer


class _Dec(nn.Module):
    """The learner's ``__init__``, shared by the DecoderLayer entries whose mistake is in ``forward``."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first, self.p = norm_first, dropout
        self.self_attn = Attention(d_model, n_heads, dropout)
        self.cross_attn = Attention(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def sa(self, x, mask):
        return self.dropout(self.self_attn(x, x, x, mask)[0])

    def ca(self, x, memory, mask):
        return self.dropout(self.cross_attn(x, memory, memory, mask)[0])

    def fwd(self, x):
        return self.dropout(self.ff(x))

    def run(self, x, memory, tgt_mask, memory_mask, ca=None):
        ca = ca or self.ca
        if self.norm_first:
            x = x + self.sa(self.norm1(x), tgt_mask)
            x = x + ca(self.norm2(x), memory, memory_mask)
            return x + self.fwd(self.norm3(x))
        x = self.norm1(x + self.sa(x, tgt_mask))
        x = self.norm2(x + ca(x, memory, memory_mask))
        return self.norm3(x + self.fwd(x))


class DecCrossFromDecoder(_Dec):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return self.run(x, memory, tgt_mask, memory_mask,
                        ca=lambda h, m, mask: self.dropout(self.cross_attn(h, h, h, mask)[0]))


class DecMemoryMaskIgnored(_Dec):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return self.run(x, memory, tgt_mask, None)


class DecTgtMaskIgnored(_Dec):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return self.run(x, memory, None, memory_mask)


class DecNoResidualCross(_Dec):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.sa(self.norm1(x), tgt_mask)
            x = self.ca(self.norm2(x), memory, memory_mask)
            return x + self.fwd(self.norm3(x))
        x = self.norm1(x + self.sa(x, tgt_mask))
        x = self.norm2(self.ca(x, memory, memory_mask))
        return self.norm3(x + self.fwd(x))


class DecAlwaysPreNorm(_Dec):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        x = x + self.sa(self.norm1(x), tgt_mask)
        x = x + self.ca(self.norm2(x), memory, memory_mask)
        return x + self.fwd(self.norm3(x))


class DecCrossFirst(_Dec):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.ca(self.norm1(x), memory, memory_mask)
            x = x + self.sa(self.norm2(x), tgt_mask)
            return x + self.fwd(self.norm3(x))
        x = self.norm1(x + self.ca(x, memory, memory_mask))
        x = self.norm2(x + self.sa(x, tgt_mask))
        return self.norm3(x + self.fwd(x))


class DecSharedAttention(_Dec):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.cross_attn = self.self_attn  # "attention is attention"

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return self.run(x, memory, tgt_mask, memory_mask)


class DecDropoutInEval(_Dec):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        drop = lambda t: F.dropout(t, self.p)  # noqa: E731  training defaults to True
        if self.norm_first:
            h = self.norm1(x)
            x = x + drop(self.self_attn(h, h, h, tgt_mask)[0])
            h = self.norm2(x)
            x = x + drop(self.cross_attn(h, memory, memory, memory_mask)[0])
            return x + drop(self.ff(self.norm3(x)))
        x = self.norm1(x + drop(self.self_attn(x, x, x, tgt_mask)[0]))
        x = self.norm2(x + drop(self.cross_attn(x, memory, memory, memory_mask)[0]))
        return self.norm3(x + drop(self.ff(x)))


class DecCrossNotDropped(_Dec):
    def forward(self, x, memory, tgt_mask=None, memory_mask=None):  # dropout on the self-attention and the FFN only
        return self.run(x, memory, tgt_mask, memory_mask, ca=lambda h, m, mask: self.cross_attn(h, m, m, mask)[0])


class DecTorchAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(3))

    def forward(self, x: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None) -> Tensor:
        sublayers = [
            (self.norm1, lambda h: _torch_attend(self.self_attn, h, h, tgt_mask)),
            (self.norm2, lambda h: _torch_attend(self.cross_attn, h, memory, memory_mask)),
            (self.norm3, self.ff),
        ]
        for (norm, sublayer), drop in zip(sublayers, self.drops, strict=True):
            x = x + drop(sublayer(norm(x))) if self.norm_first else norm(x + drop(sublayer(x)))
        return x


class DecOwnAttention(_Dec):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.self_attn = MyMultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MyMultiHeadAttention(d_model, n_heads, dropout)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        return self.run(x, memory, tgt_mask, memory_mask)


# ================================================================ TransformerConfig


def _check(config) -> None:
    if config.d_model % config.n_heads:
        raise ValueError(f"d_model={config.d_model} is not divisible by n_heads={config.n_heads}")
    if config.d_model % 2:
        raise ValueError(f"d_model={config.d_model} must be even")


@dataclass
class CfgDropoutZero:
    src_vocab: int
    tgt_vocab: int
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.0  # "dropout is for later"
    max_len: int = 512
    pad_id: int = 0
    norm_first: bool = False

    def __post_init__(self):
        _check(self)


@dataclass
class CfgPreNormDefault:
    src_vocab: int
    tgt_vocab: int
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 512
    pad_id: int = 0
    norm_first: bool = True  # "everyone uses pre-norm now"

    def __post_init__(self):
        _check(self)


@dataclass
class CfgMaxLen5000:
    src_vocab: int
    tgt_vocab: int
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 5000  # the default of many positional-encoding tutorials
    pad_id: int = 0
    norm_first: bool = False

    def __post_init__(self):
        _check(self)


@dataclass
class CfgNoChecks:
    src_vocab: int
    tgt_vocab: int
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 512
    pad_id: int = 0
    norm_first: bool = False


class CfgPlainClass:
    def __init__(self, src_vocab, tgt_vocab, d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1, max_len=512,
                 pad_id=0, norm_first=False):
        self.src_vocab, self.tgt_vocab, self.d_model, self.n_heads = src_vocab, tgt_vocab, d_model, n_heads
        self.n_layers, self.d_ff, self.dropout, self.max_len = n_layers, d_ff, dropout, max_len
        self.pad_id, self.norm_first = pad_id, norm_first
        _check(self)


@dataclass
class CfgVocabDefaults:
    src_vocab: int = 32000  # "a typical vocabulary"
    tgt_vocab: int = 32000
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 512
    pad_id: int = 0
    norm_first: bool = False

    def __post_init__(self):
        _check(self)


@dataclass(frozen=True)
class CfgFrozen:
    src_vocab: int  # source vocabulary size
    tgt_vocab: int  # target vocabulary size
    d_model: int = 512  # model width
    n_heads: int = 8  # heads
    n_layers: int = 6  # layers per stack
    d_ff: int = 2048  # feed-forward width
    dropout: float = 0.1  # dropout
    max_len: int = 512  # longest sequence
    pad_id: int = 0  # padding id
    norm_first: bool = False  # pre-norm?

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads != 0 or self.d_model % 2 != 0:
            raise ValueError(f"d_model={self.d_model} must be even and divisible by n_heads={self.n_heads}")


@dataclass
class CfgFields:
    src_vocab: int
    tgt_vocab: int
    d_model: int = field(default=512)
    n_heads: int = field(default=8)
    n_layers: int = field(default=6)
    d_ff: int = field(default=2048)
    dropout: float = field(default=0.1)
    max_len: int = field(default=512)
    pad_id: int = field(default=0)
    norm_first: bool = field(default=False)

    def __post_init__(self) -> None:
        problems = []
        if self.d_model % self.n_heads:
            problems.append(f"n_heads={self.n_heads} does not divide d_model={self.d_model}")
        if self.d_model % 2:
            problems.append(f"d_model={self.d_model} is odd; the sinusoids need pairs")
        if problems:
            raise ValueError("; ".join(problems))


# ================================================================ Transformer


class _Model(nn.Module):
    """The learner's ``__init__``, shared by the Transformer entries whose mistake is elsewhere."""

    def __init__(self, config):
        super().__init__()
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab, c.d_model)
        self.tgt_embed = nn.Embedding(c.tgt_vocab, c.d_model)
        nn.init.normal_(self.src_embed.weight, std=c.d_model**-0.5)
        nn.init.normal_(self.tgt_embed.weight, std=c.d_model**-0.5)
        self.register_buffer("pe", positional_table(c.max_len, c.d_model))
        self.dropout = nn.Dropout(c.dropout)
        sizes = (c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first)
        self.encoder_layers = nn.ModuleList([EncoderLayer(*sizes) for _ in range(c.n_layers)])
        self.decoder_layers = nn.ModuleList([DecoderLayer(*sizes) for _ in range(c.n_layers)])
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.out = nn.Linear(c.d_model, c.tgt_vocab)

    def embed(self, tokens, table):
        t = tokens.shape[1]
        if t > self.config.max_len:
            raise ValueError(f"length {t} > max_len={self.config.max_len}")
        return self.dropout(table(tokens) * math.sqrt(self.config.d_model) + self.pe[:t])

    def encode(self, src):
        src_mask = padding_mask(src, self.config.pad_id)
        x = self.embed(src, self.src_embed)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x)

    def masks(self, tgt_in, src):
        pad = self.config.pad_id
        tgt_mask = causal_mask(tgt_in.shape[1], device=tgt_in.device) & padding_mask(tgt_in, pad)
        return tgt_mask, padding_mask(src, pad)

    def decode(self, tgt_in, memory, src):
        tgt_mask, memory_mask = self.masks(tgt_in, src)
        x = self.embed(tgt_in, self.tgt_embed)
        for layer in self.decoder_layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.out(self.decoder_norm(x))

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src), src)


class TNoEmbeddingDropout(_Model):
    def embed(self, tokens, table):
        t = tokens.shape[1]
        if t > self.config.max_len:
            raise ValueError(f"length {t} > max_len={self.config.max_len}")
        return table(tokens) * math.sqrt(self.config.d_model) + self.pe[:t]  # no dropout


class TLengthReached(_Model):
    def embed(self, tokens, table):
        t = tokens.shape[1]
        if t >= self.config.max_len:  # refuses the longest sequence the table holds
            raise ValueError(f"length {t} >= max_len={self.config.max_len}")
        return self.dropout(table(tokens) * math.sqrt(self.config.d_model) + self.pe[:t])


class TNoCausalMask(_Model):
    def masks(self, tgt_in, src):
        pad = self.config.pad_id
        return padding_mask(tgt_in, pad), padding_mask(src, pad)


class TMemoryMaskIgnored(_Model):
    def masks(self, tgt_in, src):
        tgt_mask, _ = super().masks(tgt_in, src)
        return tgt_mask, None


class TNotScaled(_Model):
    def embed(self, tokens, table):
        t = tokens.shape[1]
        if t > self.config.max_len:
            raise ValueError(f"length {t} > max_len={self.config.max_len}")
        return self.dropout(table(tokens) + self.pe[:t])


class TNoPositions(_Model):
    def embed(self, tokens, table):
        t = tokens.shape[1]
        if t > self.config.max_len:
            raise ValueError(f"length {t} > max_len={self.config.max_len}")
        return self.dropout(table(tokens) * math.sqrt(self.config.d_model))


class TSourceMaskIgnored(_Model):
    def encode(self, src):
        x = self.embed(src, self.src_embed)
        for layer in self.encoder_layers:
            x = layer(x)
        return self.encoder_norm(x)


class TFinalNormUnused(_Model):
    def encode(self, src):
        src_mask = padding_mask(src, self.config.pad_id)
        x = self.embed(src, self.src_embed)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return x  # encoder_norm created, never applied


class TLayersNotChained(_Model):
    def encode(self, src):
        src_mask = padding_mask(src, self.config.pad_id)
        x = self.embed(src, self.src_embed)
        for layer in self.encoder_layers:
            out = layer(x, src_mask)
        return self.encoder_norm(out)


class TPadIdZero(_Model):
    def encode(self, src):
        x = self.embed(src, self.src_embed)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask(src, 0))
        return self.encoder_norm(x)

    def masks(self, tgt_in, src):
        tgt_mask = causal_mask(tgt_in.shape[1], device=tgt_in.device) & padding_mask(tgt_in, 0)
        return tgt_mask, padding_mask(src, 0)


class TMaskOnCpu(_Model):
    def masks(self, tgt_in, src):
        pad = self.config.pad_id
        return causal_mask(tgt_in.shape[1]) & padding_mask(tgt_in, pad), padding_mask(src, pad)


class TNoLengthCheck(_Model):
    def embed(self, tokens, table):
        return self.dropout(table(tokens) * math.sqrt(self.config.d_model) + self.pe[: tokens.shape[1]])


class TDefaultInit(_Model):
    def __init__(self, config):
        super().__init__(config)
        self.src_embed = nn.Embedding(config.src_vocab, config.d_model)  # PyTorch's default: N(0, 1)
        self.tgt_embed = nn.Embedding(config.tgt_vocab, config.d_model)


class TDetachedMemory(_Model):
    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src).detach(), src)


class TConfigUnpacked(_Model):
    """The config's fields copied into attributes, the config itself not kept: ``model.config`` is missing."""

    def __init__(self, config):
        super().__init__(config)
        del self.config
        self.d_model, self.max_len, self.pad_id = config.d_model, config.max_len, config.pad_id

    def embed(self, tokens, table):
        t = tokens.shape[1]
        if t > self.max_len:
            raise ValueError(f"length {t} > max_len={self.max_len}")
        return self.dropout(table(tokens) * math.sqrt(self.d_model) + self.pe[:t])

    def encode(self, src):
        x = self.embed(src, self.src_embed)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask(src, self.pad_id))
        return self.encoder_norm(x)

    def masks(self, tgt_in, src):
        tgt_mask = causal_mask(tgt_in.shape[1], device=tgt_in.device) & padding_mask(tgt_in, self.pad_id)
        return tgt_mask, padding_mask(src, self.pad_id)


class TOnTheFly(nn.Module):
    """Positions computed in embed on the tokens' device, masks with triu and logical_and, norms always built."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.src_embed, self.tgt_embed = nn.Embedding(config.src_vocab, d), nn.Embedding(config.tgt_vocab, d)
        for table in (self.src_embed, self.tgt_embed):
            nn.init.normal_(table.weight, mean=0.0, std=1 / math.sqrt(d))
        layer = (d, config.n_heads, config.d_ff, config.dropout, config.norm_first)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer) for _ in range(config.n_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer) for _ in range(config.n_layers))
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(d), nn.LayerNorm(d)  # used only with norm_first
        self.out = nn.Linear(d, config.tgt_vocab)
        self.drop = nn.Dropout(config.dropout)

    def embed(self, tokens: Tensor, table: nn.Embedding) -> Tensor:
        b, t = tokens.shape
        if t > self.config.max_len:
            raise ValueError(f"got {t} tokens, but max_len is {self.config.max_len}")
        x = table(tokens) * self.config.d_model**0.5
        return self.drop(x + positional_table(t, self.config.d_model).to(x.device, x.dtype))

    def _final(self, norm: nn.LayerNorm, x: Tensor) -> Tensor:
        return norm(x) if self.config.norm_first else x

    def encode(self, src: Tensor) -> Tensor:
        keep = (src != self.config.pad_id)[:, None, :]
        x = self.embed(src, self.src_embed)
        for layer in self.encoder_layers:
            x = layer(x, keep)
        return self._final(self.encoder_norm, x)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        t = tgt_in.shape[1]
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=tgt_in.device), diagonal=1)
        tgt_mask = torch.logical_and(~future, (tgt_in != self.config.pad_id)[:, None, :])
        x = self.embed(tgt_in, self.tgt_embed)
        for layer in self.decoder_layers:
            x = layer(x, memory, tgt_mask, (src != self.config.pad_id)[:, None, :])
        return self.out(self._final(self.decoder_norm, x))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.decode(tgt_in, self.encode(src), src)


class TSharedStack(_Model):
    """One generic stack runner and one embedding helper for both sides."""

    def run(self, layers: nn.ModuleList, x: Tensor, *args: Tensor) -> Tensor:
        for layer in layers:
            x = layer(x, *args)
        return x

    def encode(self, src: Tensor) -> Tensor:
        x = self.run(self.encoder_layers, self.embed(src, self.src_embed), padding_mask(src, self.config.pad_id))
        return self.encoder_norm(x)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        pad = self.config.pad_id
        tgt_mask = padding_mask(tgt_in, pad) * causal_mask(tgt_in.shape[1], tgt_in.device)  # bool * bool is AND
        x = self.run(self.decoder_layers, self.embed(tgt_in, self.tgt_embed), memory, tgt_mask,
                     padding_mask(src, pad))
        return self.out(self.decoder_norm(x))


# ================================================================ greedy_decode


def greedy_first_position(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        while ys.shape[1] < max_len and not done.all():
            token = model.decode(ys, memory, src)[:, 0].argmax(dim=-1)
            token = token.masked_fill(done, model.config.pad_id)
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == end_id
    return ys


def greedy_never_stops(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len - 1):
            token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1)
            token = token.masked_fill(done, model.config.pad_id)
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == end_id
    return ys


def greedy_no_padding(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        while ys.shape[1] < max_len:
            token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1)
            ys = torch.cat([ys, token[:, None]], dim=1)
            if (ys == end_id).any(dim=1).all():
                break
    return ys


def greedy_pad_zero(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        while ys.shape[1] < max_len and not done.all():
            token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1).masked_fill(done, 0)
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == end_id
    return ys


def greedy_max_len_plus_one(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):  # max_len new tokens
            if done.all():
                break
            token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1).masked_fill(done, model.config.pad_id)
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == end_id
    return ys


def greedy_stops_at_first_end(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        while ys.shape[1] < max_len:
            token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1)
            ys = torch.cat([ys, token[:, None]], dim=1)
            if (token == end_id).any():
                break
    return ys


def greedy_training_mode(model, src, start_id, end_id, max_len):
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        while ys.shape[1] < max_len and not done.all():
            token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1).masked_fill(done, model.config.pad_id)
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == end_id
    return ys


def greedy_without_start(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        while ys.shape[1] < max_len and not done.all():
            token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1).masked_fill(done, model.config.pad_id)
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == end_id
    return ys[:, 1:]  # "the caller knows it starts with <start>"


def greedy_float_buffer(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], max_len), float(model.config.pad_id), device=src.device)
        ys[:, 0] = start_id
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        length = 1
        while length < max_len and not done.all():
            token = model.decode(ys[:, :length].long(), memory, src)[:, -1].argmax(dim=-1)
            ys[:, length] = token.masked_fill(done, model.config.pad_id).float()
            done |= token == end_id
            length += 1
    return ys[:, :length]


def greedy_start_on_cpu(model, src, start_id, end_id, max_len):
    model.eval()
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((src.shape[0], 1), start_id, dtype=torch.long)  # the dtype thought of, the device not
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        while ys.shape[1] < max_len and not done.all():
            token = model.decode(ys, memory, src)[:, -1].argmax(dim=-1).masked_fill(done, model.config.pad_id)
            ys = torch.cat([ys, token[:, None]], dim=1)
            done |= token == end_id
    return ys


def greedy_preallocated(model, src, start_id, end_id, max_len):
    model.eval()
    batch = src.shape[0]
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((batch, max_len), model.config.pad_id, dtype=torch.long, device=src.device)
        ys[:, 0] = start_id
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
        length = 1
        while length < max_len and not finished.all():
            logits = model.decode(ys[:, :length], memory, src)
            token = torch.where(finished, ys[:, length], logits[:, -1].argmax(-1))
            ys[:, length] = token
            finished = finished | (token == end_id)
            length += 1
    return ys[:, :length]


def greedy_row_by_row(model, src, start_id, end_id, max_len):
    model.eval()
    rows = []
    with torch.inference_mode():
        for i in range(src.shape[0]):
            one = src[i:i + 1]
            memory = model.encode(one)
            ys = [start_id]
            while len(ys) < max_len and ys[-1] != end_id:
                logits = model.decode(torch.tensor([ys], device=src.device), memory, one)
                ys.append(int(logits[0, -1].argmax()))
            rows.append(ys)
    longest = max(len(r) for r in rows)
    padded = [r + [model.config.pad_id] * (longest - len(r)) for r in rows]
    return torch.tensor(padded, dtype=torch.long, device=src.device)


def greedy_with_forward(model, src, start_id, end_id, max_len):
    was_training = model.training
    model.eval()
    out = src.new_full((src.shape[0], 1), start_id).long()
    alive = torch.ones(src.shape[0], dtype=torch.bool, device=src.device)
    with torch.no_grad():
        for _ in range(max_len - 1):
            if not alive.any():
                break
            nxt = model(src, out)[:, -1, :].argmax(-1)  # teacher-forcing forward on what we have so far
            nxt = torch.where(alive, nxt, torch.full_like(nxt, model.config.pad_id))
            out = torch.cat((out, nxt.unsqueeze(-1)), dim=-1)
            alive = alive & (nxt != end_id)
    model.train(was_training)
    return out


# ================================================================ label_smoothed_cross_entropy


def _check_ls(logits, targets, epsilon):
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} do not fit")
    if not 0 <= epsilon < 1:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon}")


def ls_other_classes(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    keep = targets != pad_id
    log_p = torch.log_softmax(logits[keep], dim=-1)
    q = torch.full_like(log_p, epsilon / (v - 1)).scatter(1, targets[keep][:, None], 1 - epsilon)
    return -(q * log_p).sum(-1).mean()


def ls_target_weight_one(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    keep = targets != pad_id
    log_p = torch.log_softmax(logits[keep], dim=-1)
    nll = -log_p.gather(-1, targets[keep][:, None])[:, 0]
    return (nll - epsilon * log_p.mean(-1)).mean()


def ls_classes_summed(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    keep = targets != pad_id
    log_p = torch.log_softmax(logits[keep], dim=-1)
    nll = -log_p.gather(-1, targets[keep][:, None])[:, 0]
    return ((1 - epsilon) * nll - epsilon * log_p.sum(-1)).mean()


def ls_epsilon_ignored(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), ignore_index=pad_id)


def ls_over_padding(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), label_smoothing=epsilon)


def ls_pad_zero(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), ignore_index=0, label_smoothing=epsilon)


def ls_smoothed_probabilities(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    keep = targets != pad_id
    p = torch.softmax(logits[keep], dim=-1).gather(-1, targets[keep][:, None])[:, 0]
    return -torch.log((1 - epsilon) * p + epsilon / v).mean()


def ls_kl_divergence(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    keep = targets != pad_id
    q = (1 - epsilon) * F.one_hot(targets[keep], v).to(logits.dtype) + epsilon / v
    return F.kl_div(torch.log_softmax(logits[keep], dim=-1), q, reduction="batchmean")


def ls_summed(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), ignore_index=pad_id, label_smoothing=epsilon,
                           reduction="sum")


def ls_default_epsilon(logits, targets, pad_id, epsilon=0.1):
    epsilon = epsilon or 0.1
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), ignore_index=pad_id, label_smoothing=epsilon)


def ls_no_smoothing_by_default(logits, targets, pad_id, epsilon=0.0):  # "smoothing is something one asks for"
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), ignore_index=pad_id, label_smoothing=epsilon)


def ls_float32(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    return F.cross_entropy(logits.float().reshape(-1, v), targets.reshape(-1), ignore_index=pad_id,
                           label_smoothing=epsilon)


def ls_rebuilt_tensor(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), ignore_index=pad_id, label_smoothing=epsilon)
    return torch.tensor(loss.item(), dtype=logits.dtype)


def ls_no_epsilon_check(logits, targets, pad_id, epsilon=0.1):
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} do not fit")
    v = logits.shape[-1]  # F.cross_entropy itself accepts label_smoothing=1.0
    return F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), ignore_index=pad_id, label_smoothing=epsilon)


def ls_torch(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=pad_id, label_smoothing=epsilon)


def ls_soft_targets(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    v = logits.shape[-1]
    keep = targets != pad_id
    q = (1 - epsilon) * F.one_hot(targets[keep], v).to(logits.dtype) + epsilon / v  # (N, V)
    return -(q * torch.log_softmax(logits[keep], dim=-1)).sum(-1).mean()


def ls_masked_sum(logits, targets, pad_id, epsilon=0.1):
    _check_ls(logits, targets, epsilon)
    keep = (targets != pad_id).to(logits.dtype)
    log_p = torch.log_softmax(logits, dim=-1)
    nll = -log_p.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    per_position = (1 - epsilon) * nll - epsilon * log_p.mean(-1)
    return (per_position * keep).sum() / keep.sum()


# ================================================================ noam_lr


def _check_noam(step, d_model, warmup):
    if step < 1 or d_model < 1 or warmup < 1:
        raise ValueError(f"step, d_model and warmup must be at least 1: step={step}, d_model={d_model}, "
                         f"warmup={warmup}")


def noam_warmup_sqrt(step, d_model, warmup):
    _check_noam(step, d_model, warmup)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-0.5)


def noam_no_d_model(step, d_model, warmup):
    _check_noam(step, d_model, warmup)
    return min(step**-0.5, step * warmup**-1.5)


def noam_d_model_times(step, d_model, warmup):
    _check_noam(step, d_model, warmup)
    return math.sqrt(d_model) * min(step**-0.5, step * warmup**-1.5)


def noam_max(step, d_model, warmup):
    _check_noam(step, d_model, warmup)
    return d_model**-0.5 * max(step**-0.5, step * warmup**-1.5)


def noam_from_zero(step, d_model, warmup):
    _check_noam(step, d_model, warmup)
    step = step + 1  # "the scheduler starts at 0"
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_step_zero_unchecked(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_piecewise(step, d_model, warmup):
    if min(step, d_model, warmup) < 1:
        raise ValueError(f"step, d_model and warmup count from 1; got step={step}, d_model={d_model}, warmup={warmup}")
    if step < warmup:
        return step / warmup / math.sqrt(d_model * warmup)
    return 1 / math.sqrt(d_model * step)


def noam_torch(step, d_model, warmup):
    _check_noam(step, d_model, warmup)
    s = torch.tensor(float(step), dtype=torch.float64)
    return torch.rsqrt(torch.tensor(float(d_model), dtype=torch.float64)) * torch.minimum(
        torch.rsqrt(s), s * warmup**-1.5)



# ================================================================ the catalogue

# ================================================================ concept checks


def passes_token_by_token(n_tokens):
    return n_tokens, n_tokens


def passes_generation_in_one(n_tokens):
    return 1, 1


def passes_swapped(n_tokens):
    return n_tokens, 1


def positions_last_only(n_tokens):
    return (n_tokens - 1,), n_tokens - 1


def positions_first_when_generating(n_tokens):
    return tuple(range(n_tokens)), 0


def passes_as_a_list(n_tokens):
    return [1, n_tokens]


def positions_from_a_range(n_tokens):
    positions = torch.arange(n_tokens)
    return positions.tolist(), positions[-1]


WRONG = [
    Entry("FeedForward", "ReLU missing", FFNoRelu, "ReLU missing", "FeedForward_forward"),
    Entry("FeedForward", "ReLU after the second Linear", FFReluAfter, "ReLU after the second Linear",
          "FeedForward_forward"),
    Entry("FeedForward", "GELU instead of ReLU", FFGelu, "GELU instead of ReLU", "FeedForward_forward"),
    Entry("FeedForward", "residual inside", FFResidual, "residual added inside FeedForward", "FeedForward_forward"),
    Entry("FeedForward", "F.dropout without training=", FFDropoutInEval, "dropout applied in eval mode",
          "FeedForward_dropout"),
    Entry("FeedForward", "dropout after the second Linear", FFDropoutAfter, "dropout after the second Linear",
          "FeedForward_dropout"),
    Entry("FeedForward", "Linear layers without bias", FFNoBias, "no bias", "FeedForward_layers"),
    Entry("FeedForward", "d_ff ignored", FFFourTimes, "d_ff ignored", "FeedForward_layers"),
    Entry("EncoderLayer", "no residual around the attention", EncNoResidualAttn,
          "residual missing around the attention", "EncoderLayer_post_norm"),
    Entry("EncoderLayer", "always pre-norm", EncAlwaysPreNorm, "pre-norm when norm_first=False",
          "EncoderLayer_post_norm"),
    Entry("EncoderLayer", "norm placement swapped", EncPlacementSwapped, "pre-norm when norm_first=False",
          "EncoderLayer_post_norm", also=("post-norm when norm_first=True",)),
    Entry("EncoderLayer", "src_mask ignored", EncMaskIgnored, "src_mask ignored", "EncoderLayer_src_mask",
          also=("source padding mask ignored in the encoder",)),  # the Transformer built on it attends the padding
    Entry("EncoderLayer", "F.dropout in eval mode", EncDropoutInEval, "dropout applied in eval mode",
          "EncoderLayer_dropout"),
    Entry("EncoderLayer", "norms swapped", EncNormsSwapped, "norm1 and norm2 swapped", "EncoderLayer_post_norm"),
    Entry("EncoderLayer", "one LayerNorm for both blocks", EncOneNorm, "one LayerNorm for every block",
          "EncoderLayer_parts"),
    Entry("EncoderLayer", "residual added after the norm", EncResidualAfterNorm,
          "residual added after the LayerNorm", "EncoderLayer_post_norm"),
    Entry("EncoderLayer", "dropout ignored", EncNoDropout, "dropout ignored", "EncoderLayer_dropout"),
    Entry("EncoderLayer", "no dropout on the feed-forward's output", EncFFNotDropped,
          "no dropout on the feed-forward output", "EncoderLayer_dropout"),
    Entry("DecoderLayer", "cross-attention keys from the decoder", DecCrossFromDecoder,
          "cross-attention ignores memory", "DecoderLayer_post_norm",
          also=("parameters without gradient",)),  # the Transformer built on it never reads the encoder
    Entry("DecoderLayer", "memory mask ignored", DecMemoryMaskIgnored, "memory mask ignored", "DecoderLayer_masks"),
    Entry("DecoderLayer", "tgt_mask ignored", DecTgtMaskIgnored, "tgt_mask ignored", "DecoderLayer_masks",
          also=("no causal mask in the decoder",)),  # the Transformer built on it sees the future
    Entry("DecoderLayer", "no residual around the cross-attention", DecNoResidualCross,
          "residual missing around the cross-attention", "DecoderLayer_post_norm"),
    Entry("DecoderLayer", "always pre-norm", DecAlwaysPreNorm, "pre-norm when norm_first=False",
          "DecoderLayer_post_norm"),
    Entry("DecoderLayer", "cross-attention first", DecCrossFirst, "cross-attention before self-attention",
          "DecoderLayer_post_norm"),
    Entry("DecoderLayer", "one attention module for both", DecSharedAttention, "one attention module for both",
          "DecoderLayer_parts"),
    Entry("DecoderLayer", "F.dropout in eval mode", DecDropoutInEval, "dropout applied in eval mode",
          "DecoderLayer_dropout"),
    Entry("DecoderLayer", "no dropout on the cross-attention's output", DecCrossNotDropped,
          "no dropout on the cross-attention output", "DecoderLayer_dropout"),
    Entry("TransformerConfig", "dropout default 0", CfgDropoutZero, "dropout default", "TransformerConfig_fields"),
    Entry("TransformerConfig", "pre-norm by default", CfgPreNormDefault, "norm_first default",
          "TransformerConfig_fields"),
    Entry("TransformerConfig", "max_len default 5000", CfgMaxLen5000, "max_len default", "TransformerConfig_fields"),
    Entry("TransformerConfig", "no checks", CfgNoChecks, "no ValueError for bad arguments", "TransformerConfig_errors"),
    Entry("TransformerConfig", "a plain class", CfgPlainClass, "not a dataclass", "TransformerConfig_fields"),
    Entry("TransformerConfig", "vocabularies with defaults", CfgVocabDefaults, "vocabularies given defaults",
          "TransformerConfig_fields"),
    Entry("Transformer", "no causal mask", TNoCausalMask, "no causal mask in the decoder", "Transformer_causal"),
    Entry("Transformer", "memory mask ignored", TMemoryMaskIgnored, "memory mask ignored", "Transformer_padding"),
    Entry("Transformer", "embeddings not scaled", TNotScaled, "embeddings not scaled by √d_model",
          "Transformer_encode"),
    Entry("Transformer", "positions missing", TNoPositions, "positional encoding missing", "Transformer_encode"),
    Entry("Transformer", "source padding ignored", TSourceMaskIgnored, "source padding mask ignored in the encoder",
          "Transformer_padding"),
    Entry("Transformer", "final norm never applied", TFinalNormUnused, "final LayerNorm missing", "Transformer_encode"),
    Entry("Transformer", "layers not chained", TLayersNotChained, "layers not chained", "Transformer_encode",
          also=("parameters without gradient",)),  # the first encoder layer's output is never used
    Entry("Transformer", "pad_id 0", TPadIdZero, "pad_id hard-coded as 0", "Transformer_padding"),
    Entry("Transformer", "causal mask on the CPU", TMaskOnCpu, "mask built on the CPU", "Transformer_dtype_device"),
    Entry("Transformer", "no max_len check", TNoLengthCheck, "no ValueError for bad arguments", "Transformer_errors"),
    Entry("Transformer", "max_len itself refused", TLengthReached, "T == max_len refused", "Transformer_errors"),
    Entry("Transformer", "no dropout on the embeddings", TNoEmbeddingDropout, "embedding dropout missing",
          "Transformer_shapes"),
    Entry("Transformer", "default embedding init", TDefaultInit, "embeddings initialised with std 1",
          "Transformer_parts"),
    Entry("Transformer", "memory detached", TDetachedMemory, "parameters without gradient", "Transformer_gradients"),
    Entry("Transformer", "config unpacked into attributes", TConfigUnpacked, "config not kept", "Transformer_shapes"),
    Entry("greedy_decode", "argmax of position 0", greedy_first_position, "greedy decoding from the first position",
          "greedy_decode_tokens"),
    Entry("greedy_decode", "never stops", greedy_never_stops, "never stopping at <end>", "greedy_decode_stops"),
    Entry("greedy_decode", "no padding after <end>", greedy_no_padding, "not padding after <end>",
          "greedy_decode_stops"),
    Entry("greedy_decode", "pads with 0", greedy_pad_zero, "pad_id hard-coded as 0", "greedy_decode_stops"),
    Entry("greedy_decode", "max_len new tokens", greedy_max_len_plus_one, "start token not counted in max_len",
          "greedy_decode_max_len"),
    Entry("greedy_decode", "stops at the first <end>", greedy_stops_at_first_end, "stopped when the first row ended",
          "greedy_decode_stops"),
    Entry("greedy_decode", "training mode", greedy_training_mode, "model left in training mode",
          "greedy_decode_eval_mode"),
    Entry("greedy_decode", "start token dropped", greedy_without_start, "start_id missing", "greedy_decode_tokens"),
    Entry("greedy_decode", "float token buffer", greedy_float_buffer, "token ids not int64", "greedy_decode_tokens"),
    Entry("greedy_decode", "start column on the CPU", greedy_start_on_cpu, DEVICE_CHANGED, "greedy_decode_tokens"),
    Entry("label_smoothed_cross_entropy", "epsilon over the other V - 1 classes", ls_other_classes,
          "smoothing over the other classes only", "label_smoothed_cross_entropy_values"),
    Entry("label_smoothed_cross_entropy", "target weight 1", ls_target_weight_one, "target weight not lowered",
          "label_smoothed_cross_entropy_values"),
    Entry("label_smoothed_cross_entropy", "smoothing summed over the classes", ls_classes_summed,
          "classes summed instead of averaged", "label_smoothed_cross_entropy_values"),
    Entry("label_smoothed_cross_entropy", "epsilon ignored", ls_epsilon_ignored, "epsilon ignored",
          "label_smoothed_cross_entropy_values"),
    Entry("label_smoothed_cross_entropy", "averaged over the padding", ls_over_padding,
          "loss averaged over the padding too", "label_smoothed_cross_entropy_ignores_pads"),
    Entry("label_smoothed_cross_entropy", "ignore_index=0", ls_pad_zero, "pad_id assumed to be 0",
          "label_smoothed_cross_entropy_ignores_pads"),
    Entry("label_smoothed_cross_entropy", "probabilities smoothed", ls_smoothed_probabilities,
          "probabilities smoothed instead of the targets", "label_smoothed_cross_entropy_values"),
    Entry("label_smoothed_cross_entropy", "KL divergence", ls_kl_divergence, "KL divergence instead of cross-entropy",
          "label_smoothed_cross_entropy_values"),
    Entry("label_smoothed_cross_entropy", "summed", ls_summed, "summed instead of averaged",
          "label_smoothed_cross_entropy_values"),
    Entry("label_smoothed_cross_entropy", "epsilon or 0.1", ls_default_epsilon, "epsilon 0 replaced by the default",
          "label_smoothed_cross_entropy_no_smoothing"),
    Entry("label_smoothed_cross_entropy", "epsilon defaults to 0", ls_no_smoothing_by_default,
          "epsilon default not 0.1", "label_smoothed_cross_entropy_values"),
    Entry("label_smoothed_cross_entropy", "dtype changed to float32", ls_float32, DTYPE_CHANGED,
          "label_smoothed_cross_entropy_gradients"),
    Entry("label_smoothed_cross_entropy", "loss rebuilt with torch.tensor", ls_rebuilt_tensor, GRAPH_CUT,
          "label_smoothed_cross_entropy_gradients"),
    Entry("label_smoothed_cross_entropy", "epsilon not checked", ls_no_epsilon_check, NO_VALUE_ERROR,
          "label_smoothed_cross_entropy_errors"),
    Entry("noam_lr", "warmup^-0.5", noam_warmup_sqrt, "warm-up exponent -0.5", "noam_lr_values"),
    Entry("noam_lr", "no d_model factor", noam_no_d_model, "d_model factor missing", "noam_lr_values"),
    Entry("noam_lr", "times sqrt(d_model)", noam_d_model_times, "d_model exponent sign", "noam_lr_values"),
    Entry("noam_lr", "max instead of min", noam_max, "max instead of min", "noam_lr_warmup"),
    Entry("noam_lr", "step + 1", noam_from_zero, "step off by one", "noam_lr_warmup"),
    Entry("noam_lr", "step 0 not refused", noam_step_zero_unchecked, NO_VALUE_ERROR, "noam_lr_errors"),
    Entry("decoder_passes", "training token by token", passes_token_by_token,
          "teacher forcing taken to run token by token", "decoder_passes_answer"),
    Entry("decoder_passes", "generation in one pass", passes_generation_in_one, "generation taken as one pass",
          "decoder_passes_answer"),
    Entry("decoder_passes", "training and generation swapped", passes_swapped, "training and generation swapped",
          "decoder_passes_answer"),
    Entry("scored_positions", "loss on the last token", positions_last_only, "loss on the last token only",
          "scored_positions_answer"),
    Entry("scored_positions", "first position when generating", positions_first_when_generating,
          "first position read when generating", "scored_positions_answer"),
]

CORRECT = [
    Entry("FeedForward", "nn.Sequential", FFSequential),
    Entry("FeedForward", "F.linear-style with dropout before the ReLU", FFFunctional),
    Entry("EncoderLayer", "nn.MultiheadAttention called directly", EncTorchAttention),
    Entry("EncoderLayer", "own MultiHeadAttention and a block helper", EncResidualHelper),
    Entry("DecoderLayer", "nn.MultiheadAttention and a loop over blocks", DecTorchAttention),
    Entry("DecoderLayer", "own MultiHeadAttention", DecOwnAttention),
    Entry("TransformerConfig", "frozen dataclass", CfgFrozen),
    Entry("TransformerConfig", "field() defaults", CfgFields),
    Entry("Transformer", "positions on the fly, triu mask", TOnTheFly),
    Entry("Transformer", "a shared stack runner", TSharedStack),
    Entry("greedy_decode", "preallocated buffer", greedy_preallocated),
    Entry("greedy_decode", "row by row", greedy_row_by_row),
    Entry("greedy_decode", "forward at every step", greedy_with_forward),
    Entry("label_smoothed_cross_entropy", "F.cross_entropy(label_smoothing=...) on (B, V, T)", ls_torch),
    Entry("label_smoothed_cross_entropy", "soft targets q", ls_soft_targets),
    Entry("label_smoothed_cross_entropy", "masked sum over every position", ls_masked_sum),
    Entry("noam_lr", "two branches", noam_piecewise),
    Entry("noam_lr", "torch.rsqrt on a 0-dim tensor", noam_torch),
    Entry("decoder_passes", "a list", passes_as_a_list),
    Entry("scored_positions", "a list and a tensor", positions_from_a_range),
]
