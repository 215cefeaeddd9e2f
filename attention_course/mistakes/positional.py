"""The known mistakes of Chapter 5 (``05_positional_encoding``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/positional.py``) name every
mistake from here. Each group says the form of its cases and what ``right`` computes; a visible check passes its
own computation of it, written out by hand, and the judge passes the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from attention_course.testing import KnownMistake, Mistakes

BASE = 10000.0

# ================================================================ sinusoidal_encoding
# Cases: (max_len, d_model, base). right(max_len, d_model, base) is the right (max_len, d_model) table.


def _by_column(max_len: int, d: int, angle: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """The table whose column j holds sin (j even) or cos (j odd) of ``angle(p, j)``, p the positions."""
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    j = torch.arange(d, dtype=torch.float64)[None, :]
    a = angle(p, j)
    return torch.where(j % 2 == 0, a.sin(), a.cos())


def _pairs_swapped(t: Tensor) -> Tensor:
    return torch.stack([t[..., 1::2], t[..., 0::2]], dim=-1).flatten(-2)


TRANSPOSED = KnownMistake(
    "transposed table",
    lambda max_len, d, base=BASE: f"the table is ({d}, {max_len}) = (d_model, max_len): one row per position, so "
                                  f"(max_len, d_model)",
    lambda right, max_len, d, base: right(max_len, d, base).T)

TABLE = Mistakes([
    KnownMistake("sin and cos swapped", "the even columns hold cosines and the odd ones sines — PE[p, 2i] = sin(...), "
                 "PE[p, 2i+1] = cos(...), so row 0 is [0, 1, 0, 1, ...]",
                 lambda right, max_len, d, base: _pairs_swapped(right(max_len, d, base))),
    KnownMistake("sin and cos in halves instead of interleaved", "all the sines come first and all the cosines after "
                 "them — the original transformer interleaves them: column 2i is a sine, column 2i+1 the cosine of "
                 "the same angle",
                 lambda right, max_len, d, base: (lambda t: torch.cat([t[:, 0::2], t[:, 1::2]], 1))(
                     right(max_len, d, base))),
    KnownMistake("sin and cos in halves instead of interleaved", "all the cosines come first and all the sines after "
                 "them — column 2i is a sine, column 2i+1 the cosine of the same angle",
                 lambda right, max_len, d, base: (lambda t: torch.cat([t[:, 1::2], t[:, 0::2]], 1))(
                     right(max_len, d, base))),
    KnownMistake("i instead of 2i in the exponent", "pair i turns at base^(-i/d_model): the exponent must be "
                 "2i/d_model, where 2i is the index of the pair's even column",
                 lambda right, max_len, d, base: right(max_len, d, math.sqrt(base))),  # base^(i/d) = √base^(2i/d)
    KnownMistake("column index j used as i", "column j uses the exponent 2j/d_model: j counts columns, but i counts "
                 "*pairs* — both columns of pair i use 2i/d_model",
                 lambda right, max_len, d, base: _by_column(max_len, d, lambda p, j: p / base ** (2 * j / d))),
    KnownMistake("odd columns use j/d instead of 2i/d", "the cosine column 2i+1 uses the exponent (2i+1)/d_model; a "
                 "sine and its cosine share one angle, p / base^(2i/d_model)",
                 lambda right, max_len, d, base: _by_column(max_len, d, lambda p, j: p / base ** (j / d))),
    KnownMistake("multiplied instead of divided", "the positions are multiplied by base^(2i/d_model) instead of "
                 "divided by it",
                 lambda right, max_len, d, base: right(max_len, d, 1 / base)),  # p / (1/base)^e = p * base^e
    KnownMistake("integer division in the exponent", "every pair turns at 1 radian per position: the exponent "
                 "2i/d_model came out as 0 — integer division (`2 * i // d_model`) floors it; use true division",
                 lambda right, max_len, d, base: right(max_len, d, 1.0)),  # 1^e = 1: the angle is p itself
    KnownMistake("positions counted from 1", "the positions start at 1; row 0 belongs to position 0",
                 lambda right, max_len, d, base: right(max_len + 1, d, base)[1:]),
    KnownMistake("positions divided by max_len",
                 lambda max_len, d, base: f"the positions are divided by max_len = {max_len}: then the code of a "
                                          f"position depends on the table's length and a longer table gives every "
                                          f"position a new code",
                 lambda right, max_len, d, base: _by_column(
                     max_len, d, lambda p, j: p / max_len / base ** (2 * (j // 2) / d))),
    TRANSPOSED,
    KnownMistake("base ignored", lambda max_len, d, base: f"it uses base 10000 although base={base:g} was given",
                 lambda right, max_len, d, base: right(max_len, d, BASE), when=lambda max_len, d, base: base != BASE),
])

#: Of the table's shape, dtype and properties; these give no value to compare (``fields`` in braces).
TABLE_FLOAT64 = KnownMistake("dtype float64 instead of float32", "it returned {dtype} — build the table in the "
                             "default dtype, {default}, or convert it with `.to(torch.get_default_dtype())`; a float64 "
                             "table would turn float32 inputs into float64")
ONE_COLUMN_PER_PAIR = KnownMistake("only one column per pair", "it has one column per pair of (sin, cos): d_model "
                                   "columns hold d_model / 2 pairs")
TWO_PER_COLUMN = KnownMistake("a sine and a cosine for every column", "it has a sine and a cosine for every one of "
                              "d_model angles: d_model columns hold d_model / 2 pairs")
BATCH_AXIS = KnownMistake("an extra batch axis", "it has a batch axis in front: the table is (max_len, d_model), and "
                          "broadcasting adds it to every sequence of a batch")
NOT_DETERMINISTIC = KnownMistake("not deterministic", "two calls gave different tables — the encoding must be "
                                 "deterministic, a fixed function of the position (no random numbers)")
OUTSIDE_UNIT = KnownMistake("values outside [-1, 1]", "it has values up to {largest:.4g}; sines and cosines lie in "
                            "[-1, 1]")
ROW_0 = KnownMistake("row 0 is not [0, 1, 0, 1, ...]", "row 0 is {row}..., expected [0, 1, 0, 1, ...]: sin(0) = 0 in "
                     "the even columns, cos(0) = 1 in the odd ones")
NOT_UNIQUE = KnownMistake("codes not unique", "positions {first} and {second} get the same code; every position "
                          "needs a code of its own")
NOT_CONSISTENT = KnownMistake("distance not consistent", "the dot product PE[p] · PE[p + {k}] changes with p (by up to "
                              "{spread:.3g}): the distance between two positions should look the same wherever they "
                              "are — it does when each pair (2i, 2i+1) is the sine and cosine of one angle "
                              "p · base^(-2i/d_model)")
DEPENDS_ON_MAX_LEN = KnownMistake("code depends on max_len", "the first {n} rows of a table of {longer} rows differ "
                                  "from the table of {n}: a position's code must not depend on the table's length, "
                                  "so that the encoding extends to longer sequences")


# ================================================================ SinusoidalPositionalEncoding
# Cases: (d_model, max_len, base, x). right(max_len, d_model, base) is the right table, as for sinusoidal_encoding.

def _rows(right: Callable[..., Tensor], d: int, max_len: int, base: float, x: Tensor) -> Tensor:
    return right(max_len, d, base)[: x.shape[1]]


_CONCATENATED = ("the encoding is concatenated to x, doubling its width — the original transformer *adds* it: "
                 "x + PE[:T] keeps the width d_model")
_ALONE = "it returns the encoding alone; the output is x + PE[:T]"

SPE = Mistakes([
    KnownMistake("concatenated instead of added", _CONCATENATED, lambda right, d, n, base, x: torch.cat(
        [x, _rows(right, d, n, base, x).expand(*x.shape)], dim=-1)),
    KnownMistake("concatenated instead of added", _CONCATENATED, lambda right, d, n, base, x: torch.cat(
        [_rows(right, d, n, base, x).expand(*x.shape), x], dim=-1)),
    KnownMistake("x not added", _ALONE, lambda right, d, n, base, x: _rows(right, d, n, base, x).expand(*x.shape)),
    KnownMistake("x not added", _ALONE, lambda right, d, n, base, x: _rows(right, d, n, base, x)),
    KnownMistake("multiplied instead of added", "x is multiplied by the encoding; the encoding is added",
                 lambda right, d, n, base, x: x * _rows(right, d, n, base, x)),
    KnownMistake("encoding not sliced to T",
                 lambda d, n, base, x: f"the whole table of max_len = {n} rows was added, broadcast over x's single "
                                       f"position — add only its first T rows, `pe[:T]`",
                 lambda right, d, n, base, x: x + right(n, d, base)),
    KnownMistake("x scaled by √d_model",
                 lambda d, n, base, x: f"x is scaled by √d_model = {math.sqrt(d):.3g} before the encoding is added — "
                                       f"some models scale their token embeddings, but this module adds PE[:T] to x "
                                       f"as it is",
                 lambda right, d, n, base, x: x * math.sqrt(d) + _rows(right, d, n, base, x)),
    KnownMistake("positions along the batch axis", "the rows of the table were picked by the *batch* index, as if x "
                 "were (T, B, d_model) — here x is (B, T, d_model), so slice the table to T = x.shape[1]",
                 lambda right, d, n, base, x: x + right(n, d, base)[: x.shape[0]].unsqueeze(1)),
    KnownMistake("base ignored", lambda d, n, base, x: f"the table uses base 10000 although base={base:g} was given — "
                                                       f"pass base on to sinusoidal_encoding, which must use it",
                 lambda right, d, n, base, x: x + right(n, d, BASE)[: x.shape[1]],
                 when=lambda d, n, base, x: base != BASE),
    *[KnownMistake(m.name, lambda d, n, base, x, m=m: f"the table it adds is wrong — if you built it with your "
                                                      f"sinusoidal_encoding, make its tests pass first: "
                                                      f"{m.text(n, d, base)}",
                   lambda right, d, n, base, x, m=m: x + m.gives(right, n, d, base)[: x.shape[1]],
                   when=lambda d, n, base, x, m=m: m.applies(n, d, base))
      for m in TABLE if m is not TRANSPOSED],  # a (d_model, max_len) table cannot be added to x at all
])

SPE_AS_PARAMETER = KnownMistake("table stored as an nn.Parameter", "it has the parameter `{table}`: parameters() hands "
                                "it to the optimiser, which would train it, and requires_grad=False does not take it "
                                "out of parameters() — the sinusoidal table is fixed: keep it with "
                                "self.register_buffer('pe', table)")
SPE_PLAIN_ATTRIBUTE = KnownMistake("table stored as a plain attribute", "it keeps its table in the plain attribute "
                                   "`self.{table}`: `.to()` and `.cuda()` leave it behind on the CPU and state_dict() "
                                   "does not save it — register it with self.register_buffer('pe', table)")
SPE_NO_BUFFER = KnownMistake("table not stored as a buffer", "it has no ({max_len}, {d}) buffer — build the table once "
                             "in __init__ and keep it with self.register_buffer('pe', table)")
SPE_NOT_PERSISTENT = KnownMistake("buffer not saved in the state_dict", "its state_dict() does not contain the buffer "
                                  "`{table}` — register_buffer(..., persistent=False) leaves it out of saved "
                                  "checkpoints; this exercise asks for the default, persistent buffer")
SPE_NOT_MOVED = KnownMistake("buffer not moved by .to", "after .to({where}) its table is still {found} — a registered "
                             "buffer moves with .to(): use the buffer in forward, rather than a tensor made on the "
                             "CPU")
T_EQUALS_MAX_LEN = KnownMistake("T == max_len refused", "the table has the rows 0..{last}, enough for T = max_len = "
                                "{max_len}: refuse only T > max_len")
SPE_MAX_LEN_DEFAULT = KnownMistake("max_len default", "it {found}: max_len defaults to 5000, so a sequence of "
                                   "5000 tokens fits")
NOT_SLICED_CRASH = KnownMistake("encoding not sliced to T", "the table has max_len = {max_len} rows: add only its "
                                "first T rows, `pe[:T]`")


# ================================================================ LearnedPositionalEmbedding
# Cases: (x, table): x (B, T, d_model) and the module's (max_len, d_model) table. No ``right`` is needed.

_CONCATENATED_LEARNED = "the embedding is concatenated to x; it is added: x + table(positions) keeps the width d_model"
_ALONE_LEARNED = "it returns the position embeddings alone; the output is x + table(positions)"

LEARNED = Mistakes([
    KnownMistake("positions counted from 1", "row 1 went to position 0: positions run 0, 1, ..., T-1, "
                 "`torch.arange(T)`", lambda right, x, table: x + table[1: x.shape[1] + 1]),
    KnownMistake("positions ignored", "every position got row 0 of the table: look up one row per position, "
                 "table(torch.arange(T))", lambda right, x, table: x + table[0]),
    KnownMistake("positions along the batch axis", "the rows were picked by the *batch* index: positions run along "
                 "axis 1 of x (B, T, d_model), so use torch.arange(x.shape[1])",
                 lambda right, x, table: x + table[: x.shape[0]].unsqueeze(1)),
    KnownMistake("x not added", _ALONE_LEARNED, lambda right, x, table: table[: x.shape[1]].expand(*x.shape)),
    KnownMistake("x not added", _ALONE_LEARNED, lambda right, x, table: table[: x.shape[1]]),
    KnownMistake("concatenated instead of added", _CONCATENATED_LEARNED,
                 lambda right, x, table: torch.cat([x, table[: x.shape[1]].expand(*x.shape)], dim=-1)),
    KnownMistake("concatenated instead of added", _CONCATENATED_LEARNED,
                 lambda right, x, table: torch.cat([table[: x.shape[1]].expand(*x.shape), x], dim=-1)),
    KnownMistake("multiplied instead of added", "x is multiplied by the embeddings; they are added",
                 lambda right, x, table: x * table[: x.shape[1]]),
    KnownMistake("encoding not sliced to T",
                 lambda x, table: f"the whole table of max_len = {table.shape[0]} rows was added, broadcast over x's "
                                  f"single position — add only the rows of the T positions",
                 lambda right, x, table: x + table),
])

AS_INDICES = KnownMistake("the input used as indices instead of positions", "x holds vectors, not token ids: look the "
                          "table up at the positions 0..T-1, torch.arange(T)")
TABLE_FROZEN = KnownMistake("table frozen", "the ({max_len}, {d}) table has requires_grad=False: a learned embedding "
                            "is trained with the rest of the model")
SWAPPED_SIZES = KnownMistake("max_len and d_model swapped", "the table `{table}` is ({d}, {max_len}): "
                             "nn.Embedding(num_embeddings, embedding_dim) wants one row per *position*, "
                             "nn.Embedding(max_len, d_model) = ({max_len}, {d})")
LEARNED_POSITIONS_ON_CPU = KnownMistake("positions built on the CPU", "it made a tensor on the {found}, though x is "
                                        "on the meta device: build the positions on the device of x, "
                                        "`torch.arange(T, device=x.device)`, so that the module also runs on a GPU")
NOT_TRAINABLE = KnownMistake("table not a trainable parameter", "it keeps its table `{table}` as a plain tensor or "
                             "buffer, which the optimiser never sees — a learned embedding is trained: use "
                             "nn.Embedding(max_len, d_model)")


# ================================================================ apply_rotary
# Cases: (x, positions, base), positions None for the default 0..T-1. right(x, positions, base) is the right rotation
# (positions None or a tensor).

def _positions(x: Tensor, positions: Tensor | None) -> Tensor:
    return torch.arange(x.shape[-2], dtype=torch.float64) if positions is None else positions.to(torch.float64)


def _cos_sin(right: Callable[..., Tensor], x: Tensor, positions: Tensor | None, base: float) -> tuple[Tensor, Tensor]:
    """cos θ and sin θ of every pair of x, (..., T, d/2): the right rotation turns each pair (1, 0) into
    (cos θ, sin θ)."""
    ones = torch.zeros(x.shape, dtype=torch.float64)
    ones[..., 0::2] = 1.0
    turned = right(ones, positions, base).to(torch.float64)
    return turned[..., 0::2], turned[..., 1::2]


def _interleave(even: Tensor, odd: Tensor) -> Tensor:
    return torch.stack([even, odd], dim=-1).flatten(-2)


def _as_halves(t: Tensor) -> Tensor:
    """Columns (0, 2, 4, ..., 1, 3, 5, ...): every pair's first member, then every pair's second."""
    return torch.cat([t[..., 0::2], t[..., 1::2]], dim=-1)


def _from_halves(t: Tensor) -> Tensor:
    """The pairs (t[..., i], t[..., i + d/2]) moved next to each other: the inverse of :func:`_as_halves`."""
    d = t.shape[-1]
    return _interleave(t[..., : d // 2], t[..., d // 2:])


def _rotate_half_mixed(right: Callable[..., Tensor], x: Tensor, positions: Tensor | None, base: float) -> Tensor:
    cos, sin = _cos_sin(right, x, positions, base)
    d = x.shape[-1]
    x = x.to(torch.float64)
    rotated_half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return x * cos.repeat_interleave(2, -1) + rotated_half * sin.repeat_interleave(2, -1)


def _sin_cos_swapped(right: Callable[..., Tensor], x: Tensor, positions: Tensor | None, base: float) -> Tensor:
    cos, sin = _cos_sin(right, x, positions, base)
    a, b = x[..., 0::2].to(torch.float64), x[..., 1::2].to(torch.float64)
    return _interleave(a * sin - b * cos, a * cos + b * sin)


def _in_float64(wrong: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``wrong`` run on x in float64: some mistakes turn by large angles, where float32 is off by 1e-3."""
    return lambda right, x, positions, base: wrong(right, x.to(torch.float64), positions, base)


ROPE = Mistakes([
    KnownMistake("pairs taken as halves instead of interleaved", "the pairs are (x[..., i], x[..., i + d/2]), the "
                 "first half against the second (the `rotate_half` convention of some libraries) — this course pairs "
                 "neighbouring columns, (x[..., 2i], x[..., 2i+1]), as the RoFormer paper does",
                 _in_float64(lambda right, x, p, base: _as_halves(right(_from_halves(x), p, base)))),
    KnownMistake("interleaved angles combined with rotate_half", "the angles are repeated for neighbouring columns "
                 "(interleaved) but the partner of each column is taken from the other half (`rotate_half`) — pair "
                 "x[..., 2i] with x[..., 2i+1]", _in_float64(_rotate_half_mixed)),
    KnownMistake("rotated clockwise", "each pair is rotated clockwise: (a, b) must go to (a cos θ − b sin θ, "
                 "a sin θ + b cos θ)", _in_float64(lambda right, x, p, base: right(x, -_positions(x, p), base))),
    KnownMistake("rotated pairs written back as halves", "the pairs are rotated correctly but written back as [all new "
                 "x_2i, then all new x_2i+1]; put each result back in its own columns 2i and 2i+1, e.g. "
                 "torch.stack([..., ...], -1).flatten(-2)",
                 _in_float64(lambda right, x, p, base: _as_halves(right(x, p, base)))),
    KnownMistake("positions ignored", "the output equals x: every row was rotated by the angle 0 — the angle is "
                 "p · base^(-2i/d) with p the row's position", _in_float64(lambda right, x, p, base: x)),
    KnownMistake("i instead of 2i in the exponent", "pair i turns at base^(-i/d): the exponent must be 2i/d",
                 _in_float64(lambda right, x, p, base: right(x, p, math.sqrt(base)))),  # base^(i/d) = √base^(2i/d)
    KnownMistake("multiplied instead of divided", "the angle is p · base^(+2i/d): divide the position by "
                 "base^(2i/d), do not multiply", _in_float64(lambda right, x, p, base: right(x, p, 1 / base))),
    KnownMistake("sin and cos swapped", "sin and cos are swapped in the rotation: (a, b) -> (a cos θ − b sin θ, "
                 "a sin θ + b cos θ), so position 0 leaves x unchanged", _in_float64(_sin_cos_swapped)),
    KnownMistake("positions counted from 1", "the positions start at 1; the first row is position 0",
                 _in_float64(lambda right, x, p, base: right(x, _positions(x, p) + 1, base))),
    KnownMistake("positions argument ignored", "the positions given were ignored and 0..T-1 used instead",
                 _in_float64(lambda right, x, p, base: right(x, None, base)), when=lambda x, p, base: p is not None),
    KnownMistake("base ignored", lambda x, p, base: f"it uses base 10000 although base={base:g} was given",
                 _in_float64(lambda right, x, p, base: right(x, p, BASE)), when=lambda x, p, base: base != BASE),
])

POSITIONS_1D = KnownMistake("positions assumed to be 1-D", "positions may have leading axes (here {shape}): add the "
                            "frequency axis at the end, `positions.unsqueeze(-1) * freqs`")
T_FROM_WRONG_AXIS = KnownMistake("T taken from the wrong axis", "x is (..., T, d) with any number of leading axes "
                                 "(here {shape}, so T = {T}): take T from x.shape[-2]")
POSITIONS_ON_CPU = KnownMistake("positions built on the CPU", "build the default positions and the frequencies on "
                                "x.device, `torch.arange(T, device=x.device)`")
NORMS_CHANGED = KnownMistake("norms not preserved", "it changed the length of the vectors: a rotation keeps every "
                             "norm")
POSITION_0_MOVES = KnownMistake("position 0 is not the identity", "at position 0 every angle is 0 and the rotation is "
                                "the identity, but x changed")
NOT_RELATIVE = KnownMistake("score depends on more than the offset", "the score <rope(q, m), rope(k, n)> changes "
                            "when m and n move together (offset m - n fixed){found} — rotating q and k by angles "
                            "proportional to their positions makes it depend on m - n only")
NO_EFFECT = KnownMistake("positions ignored", "the score <rope(q, m), rope(k, n)> is the same for the offsets m - n = "
                         "{offsets}: the positions have no effect")


#: Of every exercise's float64 contract.
GRADCHECK_FAILED = KnownMistake("gradcheck failed", "its gradients disagree with finite differences of its own output "
                                "— avoid writing into tensors that autograd needs, and custom backward passes")


# ================================================================ concept checks
# encoded_shape: cases (batch, n_tokens, d_model); same_without_positions: cases (sentence_a, sentence_b).

ENCODED_SHAPE = Mistakes([
    KnownMistake("positions concatenated instead of added", "the original transformer adds the positional encoding "
                 "to the token vectors, so the width stays d_model",
                 lambda right, batch, n, d: (batch, n, 2 * d)),
])
WITHOUT_POSITIONS = Mistakes([
    KnownMistake("self-attention taken to see word order", "without positions self-attention sees a sentence as a bag "
                 "of words: reorder the words and each word's output is the same, only moved",
                 lambda right, a, b: a == b),
    KnownMistake("repeated words counted once", "a repeated word is one more key and value: it changes the softmax's "
                 "weights, so how many times each word occurs matters, not only which words occur",
                 lambda right, a, b: set(a) == set(b)),
])


# ================================================================ alibi_bias
# Cases: (n_heads, T). right(n_heads, T) is the right answer.

def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def _distance(right: Callable[..., Tensor], T: int) -> Tensor:
    """(T, T): j - i, read off the right bias of one head, whose slope is 2^-8."""
    return right(1, T)[0].to(torch.float64) * 2.0 ** 8


def _odd_fill(right: Callable[..., Tensor], n: int, T: int) -> Tensor:
    below = 2 ** math.floor(math.log2(n))
    return torch.cat([right(below, T), right(2 * below, T)[1::2][: n - below]])


ALIBI_BIAS = Mistakes([
    KnownMistake("slopes in reverse order", "head 0 has the shallowest slope: the slopes run from the steepest, "
                 "m_0 = 2^(-8/n), down to the shallowest, 2^(-8)",
                 lambda right, n, T: right(n, T).flip(0), when=lambda n, T: n > 1 and T > 1),
    KnownMistake("head 0 given the slope 1", "head 0 has the slope 1: the heads count from h = 0, and "
                 "head h's slope is 2^(-8(h+1)/n), so head 0's is 2^(-8/n)",
                 lambda right, n, T: right(n, T).to(torch.float64) * 2.0 ** (8 / n),
                 when=lambda n, T: _power_of_two(n) and T > 1),
    KnownMistake("bias grows with the distance", "the bias rises as the key gets further back: bias[h, i, j] = "
                 "m_h · (j − i) is −m_h for the key just before the query and falls with every step back",
                 lambda right, n, T: -right(n, T), when=lambda n, T: T > 1),
    KnownMistake("absolute distance", "the bias is −m_h · |j − i|, the same for keys before and after the query: "
                 "it is m_h · (j − i) everywhere, positive above the diagonal, where the causal mask removes it",
                 lambda right, n, T: -right(n, T).abs(), when=lambda n, T: T > 1),
    KnownMistake("causal mask merged into the bias", "the entries above the diagonal are −inf: the bias is "
                 "m_h · (j − i) everywhere, and the causal mask stays a boolean mask of its own (True = may attend)",
                 lambda right, n, T: right(n, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf),
                 when=lambda n, T: T > 1),
    KnownMistake("slopes left out", "every head adds the bare distance j − i: head h multiplies it by its own "
                 "slope m_h", lambda right, n, T: _distance(right, T).expand(n, T, T), when=lambda n, T: T > 1),
    KnownMistake("one slope for every head", "every head has the slope of head 0: each head h has its own, "
                 "m_h = 2^(-8(h+1)/n), so that some heads look near and others far",
                 lambda right, n, T: right(n, T)[:1].expand(n, T, T), when=lambda n, T: n > 1 and T > 1),
    KnownMistake("power-of-two formula for every number of heads", "the slopes are 2^(-8(h+1)/n) although n is not "
                 "a power of two: then take the n' slopes of n' heads, n' the largest power of two below n, and "
                 "fill up with the slopes at the even indices 0, 2, 4, ... of 2n' heads",
                 lambda right, n, T: (2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n))[:, None, None]
                 * _distance(right, T), when=lambda n, T: not _power_of_two(n) and T > 1),
    KnownMistake("slopes of the next power of two", "these are the first n slopes of the next power of two: take the "
                 "n' slopes of n' heads, n' the largest power of two *below* n, and fill up with every other slope "
                 "of 2n' heads", lambda right, n, T: right(2 ** math.ceil(math.log2(n)), T)[:n],
                 when=lambda n, T: not _power_of_two(n) and T > 1),
    KnownMistake("extra slopes at odd indices", "the slopes that fill up are those at the odd indices of 2n' heads, "
                 "which repeat the first n' slopes: take those at the even indices 0, 2, 4, ...",
                 lambda right, n, T: _odd_fill(right, n, T), when=lambda n, T: not _power_of_two(n) and T > 1),
])

#: Per case of alibi_bias_errors, in order: (what the call is, (words its ValueError must mention, ...)).
ALIBI_BIAS_REFUSED = [
    ("alibi_bias(n_heads=0, T=4)", ("0",)), ("alibi_bias(n_heads=8, T=0)", ("0",)),
    ("alibi_bias(n_heads=-2, T=3)", ("-2",)),
]
