"""Judges of Chapter 5 (``05_positional_encoding``), against :mod:`solutions.positional`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.positional`. Each ``Suspect`` recomputes,
on the same inputs, what one plausible mistake would return, so that a failing
learner is told which mistake it looks like.

Tables and rotations are compared with ``atol=1e-4``: a learner may compute
the angles in float32 (the reference uses float64), which costs about 1e-6 at
the positions used here, while every named mistake is off by far more.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, NO_VALUE_ERROR, named
from autograder.checks.core import Mistake, Observations, Raised
from autograder.checks.positional import (
    _BUFFER_D,
    _BUFFER_LEN,
    _ENCODED_SHAPE_CASES,
    _LEARNED_CONTRACT,
    _PROPERTY_D,
    _PROPERTY_LEN,
    _RELATIVE_X,
    _SHAPE_CASES,
    _SPE_MAX,
    _WITHOUT_POSITIONS_CASES,
    BASE,
    LEARNED_FORWARD,
    ROPE_ERRORS,
    ROPE_POSITIONS,
    ROPE_VALUES,
    SPE_FORWARD,
    TABLE_ERRORS,
    TABLE_VALUES,
    _learned_weights,
)
from autograder.judges.core import (
    Compare,
    Suspect,
    judge,
    judge_answers,
    judge_contract_basics,
    judge_value_error,
    matching_suspect,
    register,
    value_errors,
)
from solutions import positional as ref

ATOL, RTOL = 1e-4, 1e-4


# ================================================================ shared judges

def _judge_bfloat16(half: Any, what: str, advice: str) -> None:
    """``half`` is ``attempt_facts`` of a call on a bfloat16 input: it must run and keep bfloat16."""
    if isinstance(half, Raised):
        raise Mistake(f"{what} {half.describe()}")
    if isinstance(half, dict) and half["dtype"] != "torch.bfloat16":
        raise Mistake(f"{what} returned {half['dtype']}{advice}", DTYPE_CHANGED)


def _judge_contract(obs: Observations, function: str) -> None:
    """Judge dtype, in-place changes and gradients of a call on float64 inputs.

    The gradients are judged by ``gradcheck`` against the learner's own function, not against the
    reference: a wrong value has a cell of its own and should not cost this one too.
    """
    judge_contract_basics(obs, function, ": `x = x + pe`, not `x += pe`; no slice assignment into x")
    for name, grad in obs["grads"].items():
        if grad is None:
            raise Mistake(f"no gradient reaches `{name}` through {function} — something detaches it: "
                          f"`.detach()`, `.data`, `.item()`, `torch.no_grad()`", GRAPH_CUT)
    if obs["gradcheck"] is not True:
        how = obs["gradcheck"].describe() if isinstance(obs["gradcheck"], Raised) else "failed"
        raise Mistake(f"torch.autograd.gradcheck of {function} in float64 {how}: its gradients disagree with "
                      f"finite differences of its own output — avoid writing into tensors that autograd needs, "
                      f"and custom backward passes", "gradcheck failed")


def _judge_meta(meta: Any, what: str, shape: tuple[int, ...], advice: str, mistake: str) -> None:
    """``meta`` is ``attempt_facts`` of a call on the meta device: it must run and return a ``shape`` tensor
    there. A crash that names the device is ``mistake``, and ``advice`` says what to do."""
    if isinstance(meta, Raised):
        if "device" in meta.message:
            raise Mistake(f"{what} {meta.describe()}{advice}", mistake)
        raise Mistake(f"{what} {meta.describe()}")
    if not isinstance(meta, dict) or meta["device"] != "meta" or meta["shape"] != shape:
        raise Mistake(f"{what} returned {meta!r:.100}, expected a {shape} tensor on the meta device")


def _crashed(raised: Raised, what: str, hint: tuple[str, str | None]) -> Mistake:
    """The Mistake of a call that raised ``raised``; ``hint`` is what that most likely means and its name."""
    return Mistake(f"{what} {raised.describe()}{hint[0]}", hint[1])


def _told(crash_hint: Callable[..., tuple[str, str | None]]) -> Callable[..., Mistake]:
    """``Compare.crashed`` from ``crash_hint(raised, *case)``: a crash told with what it most likely means."""
    return lambda raised, what, *case: _crashed(raised, what, crash_hint(raised, *case))


def _crash_hint(raised: Raised, max_len: int | None = None, t: int | None = None) -> tuple[str, str | None]:
    """What a crash most likely means, and the mistake's name; ('', None) if unknown."""
    text = raised.message
    if raised.type == "ValueError" and t is not None and t == max_len:
        return f" — T = max_len = {t} fits: the table has the rows 0..{t - 1}", "T == max_len refused"
    if raised.type == "IndexError" and "out of range" in text:
        return (" — an index ran past the table: the positions of a sequence of T tokens are 0..T-1; are they "
                "counted from 1?", None)
    # x (B, T, d_model) + a table of max_len rows: the sizes T and max_len clash on dimension 1 (a transposed
    # table clashes on dimension 2 instead)
    if max_len is not None and "must match the size" in text and f"({max_len})" in text and "dimension 1" in text:
        return (f" — the table has max_len = {max_len} rows: add only its first T rows, `pe[:T]`",
                "encoding not sliced to T")
    if "indices" in text and ("Long" in text or "Int" in text):
        return (" — the input x holds vectors, not token ids: look the table up at the *positions* "
                "0..T-1, `torch.arange(T, device=x.device)`", "the input used as indices instead of positions")
    return "", None


def _looks_like(text: str, name: str, suspect: Suspect | None) -> Mistake:
    """``text``, named ``name``; when a suspect matched, followed by what it looks like: that suspect's message,
    whose name the mistake then carries."""
    if suspect is None:
        return Mistake(text, name)
    return Mistake(f"{named(text, name)} It looks like this: {suspect.message}", suspect.name)


# ================================================================ sinusoidal_encoding

def _angles(max_len: int, d: int, base: float, exponent: Tensor | None = None, start: int = 0,
            scale: float = 1.0) -> Tensor:
    """``(max_len, len(exponent))``: ``(p + start) * scale / base**exponent``; by default exponent = 2i/d."""
    p = torch.arange(start, max_len + start, dtype=torch.float64)[:, None] * scale
    exponent = torch.arange(0, d, 2, dtype=torch.float64) / d if exponent is None else exponent
    return p / base ** exponent


def _interleave(even: Tensor, odd: Tensor) -> Tensor:
    return torch.stack([even, odd], dim=-1).flatten(-2)


def _by_column(max_len: int, d: int, base: float, exponent: Tensor) -> Tensor:
    """Column j holds sin (j even) or cos (j odd) of p / base**exponent[j]."""
    angles = _angles(max_len, d, base, exponent)
    return torch.where(torch.arange(d) % 2 == 0, angles.sin(), angles.cos())


def _table_suspects(max_len: int, d: int, base: float) -> list[Suspect]:
    a = _angles(max_len, d, base)
    j = torch.arange(d, dtype=torch.float64)
    half = torch.arange(d // 2, dtype=torch.float64)
    suspects = [
        Suspect("the even columns hold cosines and the odd ones sines — PE[p, 2i] = sin(...), PE[p, 2i+1] = "
                "cos(...), so row 0 is [0, 1, 0, 1, ...]", "sin and cos swapped",
                lambda: _interleave(a.cos(), a.sin())),
        Suspect("all the sines come first and all the cosines after them — the original transformer interleaves "
                "them: column 2i is a sine, column 2i+1 the cosine of the same angle",
                "sin and cos in halves instead of interleaved", lambda: torch.cat([a.sin(), a.cos()], dim=-1)),
        Suspect("all the cosines come first and all the sines after them — column 2i is a sine, column 2i+1 "
                "the cosine of the same angle", "sin and cos in halves instead of interleaved",
                lambda: torch.cat([a.cos(), a.sin()], dim=-1)),
        Suspect("pair i turns at base^(-i/d_model): the exponent must be 2i/d_model, where 2i is the index of the "
                "pair's even column", "i instead of 2i in the exponent",
                lambda: _interleave(*_sin_cos(_angles(max_len, d, base, half / d)))),
        Suspect("column j uses the exponent 2j/d_model: j counts columns, but i counts *pairs* — both columns of "
                "pair i use 2i/d_model", "column index j used as i",
                lambda: _by_column(max_len, d, base, 2 * j / d)),
        Suspect("the cosine column 2i+1 uses the exponent (2i+1)/d_model; a sine and its cosine share one angle, "
                "p / base^(2i/d_model)", "odd columns use j/d instead of 2i/d",
                lambda: _by_column(max_len, d, base, j / d)),
        Suspect("the positions are multiplied by base^(2i/d_model) instead of divided by it",
                "multiplied instead of divided", lambda: _interleave(*_sin_cos(_p_times(max_len, d, base)))),
        Suspect("every pair turns at 1 radian per position: the exponent 2i/d_model came out as 0 — integer "
                "division (`2 * i // d_model`) floors it; use true division", "integer division in the exponent",
                lambda: _interleave(*_sin_cos(_angles(max_len, d, base, torch.zeros(d // 2))))),
        Suspect("the positions start at 1; row 0 belongs to position 0", "positions counted from 1",
                lambda: _interleave(*_sin_cos(_angles(max_len, d, base, start=1)))),
        Suspect(f"the positions are divided by max_len = {max_len}: then the code of a position depends on the "
                f"table's length and a longer table gives every position a new code", "positions divided by max_len",
                lambda: _interleave(*_sin_cos(_angles(max_len, d, base, scale=1 / max_len)))),
        Suspect(f"the table is ({d}, {max_len}) = (d_model, max_len): one row per position, so (max_len, d_model)",
                "transposed table", lambda: ref.sinusoidal_encoding(max_len, d, base).T),
    ]
    if base != BASE:
        suspects.append(Suspect(f"it uses base 10000 although base={base:g} was given", "base ignored",
                                lambda: ref.sinusoidal_encoding(max_len, d)))
    return suspects


def _sin_cos(angles: Tensor) -> tuple[Tensor, Tensor]:
    return angles.sin(), angles.cos()


def _p_times(max_len: int, d: int, base: float) -> Tensor:
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    return p * base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)


def _judge_table_shape(obs: Observations) -> None:
    for (max_len, d), facts in zip(_SHAPE_CASES, obs["facts"], strict=True):
        what = f"sinusoidal_encoding({max_len}, {d})"
        if isinstance(facts, Raised):
            raise Mistake(f"{what} {facts.describe()}")
        if not isinstance(facts, dict):
            extra = " — did you forget to `return` it?" if facts is None else ""
            raise Mistake(f"{what} should return a tensor of shape ({max_len}, {d}), got {facts!r:.80}{extra}")
        shape = facts["shape"]
        if shape != (max_len, d):
            known = {(d, max_len): "transposed table", (max_len, d // 2): "only one column per pair",
                     (max_len, 2 * d): "a sine and a cosine for every column", (1, max_len, d): "an extra batch axis"}
            raise Mistake(f"{what} has shape {shape}, expected (max_len, d_model) = ({max_len}, {d}) — one row "
                          f"per position, d_model / 2 pairs of sin and cos columns", known.get(shape))
        if facts["dtype"] != str(torch.get_default_dtype()):
            f64 = facts["dtype"] == "torch.float64"
            raise Mistake(f"{what} returned {facts['dtype']} — build the table in the default dtype, "
                          f"{torch.get_default_dtype()}, or convert it with `.to(torch.get_default_dtype())`; "
                          f"a float64 table would turn float32 inputs into float64",
                          "dtype float64 instead of float32" if f64 else None)


def _judge_table_properties(obs: Observations) -> None:
    n, d = _PROPERTY_LEN, _PROPERTY_D
    shapes = {"first": (n, d), "again": (n, d), "longer": (2 * n, d)}
    for key, shape in shapes.items():
        out = obs[key]
        what = f"sinusoidal_encoding({shape[0]}, {d})"
        if isinstance(out, Raised):
            raise Mistake(f"{what} {out.describe()}")
        if not isinstance(out, Tensor) or tuple(out.shape) != shape:
            got = tuple(out.shape) if isinstance(out, Tensor) else repr(out)[:60]
            raise Mistake(f"{what} should be a tensor of shape {shape}, got {got}",
                          "transposed table" if got == shape[::-1] else None)
    pe = obs["first"].to(torch.float64)
    # Only the name, never the verdict, comes from the suspects here. A table computed in float32 drifts by up to
    # ~1e-2 from a suspect at the large angles of some mistakes (multiplied instead of divided), while the
    # suspects differ from each other by ~1 or more: a match within 2e-2 is still evidence.
    suspect = matching_suspect(pe, _table_suspects(n, d, BASE), 2e-2, 0.0)
    what = f"sinusoidal_encoding({n}, {d})"
    if not torch.equal(obs["first"], obs["again"]):
        raise _looks_like(f"{what} gave different tables on two calls — the encoding must be deterministic, a fixed "
                          f"function of the position (no random numbers)", "not deterministic", suspect)
    if pe.abs().max() > 1 + 1e-6:
        raise _looks_like(f"{what} has values up to {pe.abs().max().item():.4g}; sines and cosines lie in [-1, 1]",
                          "values outside [-1, 1]", suspect)
    row0 = torch.tensor([0.0, 1.0] * (d // 2), dtype=torch.float64)
    if not torch.allclose(pe[0], row0, atol=ATOL):
        raise _looks_like(f"row 0 of {what} is {[round(v, 3) for v in pe[0, :6].tolist()]}..., expected [0, 1, 0, "
                          f"1, ...]: sin(0) = 0 in the even columns, cos(0) = 1 in the odd ones",
                          "row 0 is not [0, 1, 0, 1, ...]", suspect)
    distances = torch.cdist(pe, pe) + torch.eye(n, dtype=torch.float64) * 1e9
    if distances.min() < 1e-3:
        first = tuple(int(i) for i in (distances == distances.min()).nonzero()[0])
        raise _looks_like(f"positions {first[0]} and {first[1]} of {what} get the same code; every position needs "
                          f"a code of its own", "codes not unique", suspect)
    for k in (1, 3, 10):
        dots = (pe[: n - k] * pe[k:]).sum(-1)  # PE[p] . PE[p + k]
        if not torch.allclose(dots, dots[:1].expand_as(dots), atol=1e-3):
            spread = (dots.max() - dots.min()).item()
            raise _looks_like(f"in {what}, the dot product PE[p] · PE[p + {k}] changes with p (by up to "
                              f"{spread:.3g}): the distance between two positions should look the same wherever they "
                              f"are — it does when each pair (2i, 2i+1) is the sine and cosine of one angle "
                              f"p · base^(-2i/d_model)", "distance not consistent", suspect)
    longer = obs["longer"].to(torch.float64)
    if not torch.allclose(longer[:n], pe, atol=ATOL, rtol=RTOL):
        raise _looks_like(f"the first {n} rows of sinusoidal_encoding({2 * n}, {d}) differ from "
                          f"sinusoidal_encoding({n}, {d}): a position's code must not depend on the table's length, "
                          f"so that the encoding extends to longer sequences", "code depends on max_len", suspect)


register("sinusoidal_encoding_shape", _judge_table_shape)
judge(Compare(TABLE_VALUES, ref.sinusoidal_encoding,
              lambda max_len, d, base: f"sinusoidal_encoding({max_len}, {d}" + (
                  ")" if base == BASE else f", base={base:g})"), _table_suspects,
              hint="PE[p, 2i] = sin(p / base^(2i/d_model)), PE[p, 2i+1] = cos(p / base^(2i/d_model))",
              atol=ATOL, rtol=RTOL))
register("sinusoidal_encoding_properties", _judge_table_properties)
register(TABLE_ERRORS.id, value_errors(TABLE_ERRORS, [
    ("sinusoidal_encoding(10, 7), an odd d_model,", ("7",)), ("sinusoidal_encoding(6, 5), an odd d_model,", ("5",)),
    ("sinusoidal_encoding(0, 8), with max_len=0,", ()), ("sinusoidal_encoding(5, -2), with d_model=-2,", ("-2",))]))


# ================================================================ SinusoidalPositionalEncoding

def _spe_call(d_model: int, max_len: int, base: float) -> str:
    return f"SinusoidalPositionalEncoding({d_model}, max_len={max_len}" + (
        ")" if base == BASE else f", base={base:g})")


def _spe_suspects(d_model: int, max_len: int, base: float, x: Tensor) -> list[Suspect]:
    b, t, _ = x.shape
    pe = ref.sinusoidal_encoding(max_len, d_model, base)
    rows = pe[:t]
    concatenated = "the encoding is concatenated to x, doubling its width — the original transformer *adds* it: " \
                   "x + PE[:T] keeps the width d_model"
    alone = "it returns the encoding alone; the output is x + PE[:T]"
    suspects = [
        Suspect(concatenated, "concatenated instead of added",
                lambda: torch.cat([x, rows.expand(b, t, d_model)], dim=-1)),
        Suspect(concatenated, "concatenated instead of added",
                lambda: torch.cat([rows.expand(b, t, d_model), x], dim=-1)),
        Suspect(alone, "x not added", lambda: rows.expand(b, t, d_model)),
        Suspect(alone, "x not added", lambda: rows),
        Suspect("x is multiplied by the encoding; the encoding is added", "multiplied instead of added",
                lambda: x * rows),
        Suspect(f"the whole table of max_len = {max_len} rows was added, broadcast over x's single position — add "
                f"only its first T rows, `pe[:T]`", "encoding not sliced to T", lambda: x + pe),
        Suspect(f"x is scaled by √d_model = {math.sqrt(d_model):.3g} before the encoding is added — some models "
                f"scale their token embeddings, but this module adds PE[:T] to x as it is", "x scaled by √d_model",
                lambda: x * math.sqrt(d_model) + rows),
        Suspect("the rows of the table were picked by the *batch* index, as if x were (T, B, d_model) — here x is "
                "(B, T, d_model), so slice the table to T = x.shape[1]", "positions along the batch axis",
                lambda: x + pe[:b].unsqueeze(1)),
    ]
    if base != BASE:
        suspects.append(Suspect(f"the table uses base 10000 although base={base:g} was given — pass base on to "
                                f"sinusoidal_encoding, which must use it", "base ignored",
                                lambda: x + ref.sinusoidal_encoding(max_len, d_model)[:t]))
    suspects += [
        Suspect(f"the table it adds is wrong — if you built it with your sinusoidal_encoding, make its tests pass "
                f"first: {s.message}", s.name, lambda s=s: x + s.produce()[:t])
        for s in _table_suspects(max_len, d_model, base)
    ]
    return suspects


judge(Compare(
    SPE_FORWARD, lambda d_model, max_len, base, x: ref.SinusoidalPositionalEncoding(d_model, max_len, base)(x),
    lambda d_model, max_len, base, x: f"{_spe_call(d_model, max_len, base)} on x {tuple(x.shape)}",
    _spe_suspects, hint="the output is x + PE[:T], T = x.shape[1]", atol=ATOL, rtol=RTOL,
    crashed=_told(lambda raised, d_model, max_len, base, x: _crash_hint(raised, max_len, x.shape[1]))))


def _is_table(shape: tuple[int, ...], max_len: int, d: int) -> bool:
    return math.prod(shape) == max_len * d and len(shape) >= 2 and shape[-1] in (d, max_len)


def _judge_spe_buffer(obs: Observations) -> None:
    d, n = _BUFFER_D, _BUFFER_LEN
    call = _spe_call(d, n, BASE)
    if "raised" in obs:
        raise Mistake(f"{call} {obs['raised'].describe()}")
    if not obs["is_module"]:
        raise Mistake(f"{call} should be an nn.Module (subclass nn.Module and call super().__init__())")
    if obs["params"]:
        name, shape = obs["params"][0][:2]
        table = _is_table(shape, n, d)
        raise Mistake(f"{call} has the parameter `{name}`: parameters() hands it to the optimiser, which would "
                      f"train it, and requires_grad=False does not take it out of parameters() — "
                      + ("the sinusoidal table is fixed: keep it with self.register_buffer('pe', table)" if table
                         else "this module has nothing to train"),
                      "table stored as an nn.Parameter" if table else None)
    tables = [f for f in obs["buffers"] if _is_table(f[1], n, d)]
    attrs = [f for f in obs["attrs"] if _is_table(f[1], n, d)]
    if not tables:
        if attrs:
            raise Mistake(f"{call} keeps its table in the plain attribute `self.{attrs[0][0]}`: `.to()` and "
                          f"`.cuda()` leave it behind on the CPU and state_dict() does not save it — register it "
                          f"with self.register_buffer('pe', table)", "table stored as a plain attribute")
        raise Mistake(f"{call} has no ({n}, {d}) buffer — build the table once in __init__ and keep it with "
                      f"self.register_buffer('pe', table)", "table not stored as a buffer")
    name = tables[0][0]
    if name not in {f[0] for f in obs["state"]}:
        raise Mistake(f"{call}.state_dict() does not contain the buffer `{name}` — register_buffer(..., "
                      f"persistent=False) leaves it out of saved checkpoints; this exercise asks for the default, "
                      f"persistent buffer", "buffer not saved in the state_dict")
    moved = dict((f[0], f[2]) for f in obs["double"])
    if moved.get(name) != "torch.float64":
        raise Mistake(f"after {call}.to(torch.float64) the buffer `{name}` is {moved.get(name)} — a registered "
                      f"buffer moves with .to()", "buffer not moved by .to")
    _judge_meta(obs["meta"], f"{call}.to('meta') on x of shape (2, 5, {d}) on the meta device", (2, 5, d),
                " — use the buffer in forward, which .to() has moved with the module, rather than a tensor made on "
                "the CPU", "buffer not moved by .to")


def _judge_max_len(obs: Observations, call: str, d: int, n: int) -> None:
    fits = obs["fits"]
    if isinstance(fits, Raised):
        what = f"{call} on x (2, {n}, {d}), a sequence exactly max_len = {n} long,"
        if fits.type == "ValueError":
            raise Mistake(f"{what} {fits.describe()} — the table has rows 0..{n - 1}, enough for T = {n}: refuse "
                          f"only T > max_len", "T == max_len refused")
        raise _crashed(fits, what, _crash_hint(fits, n))
    if not isinstance(fits, dict) or fits["shape"] != (2, n, d):
        raise Mistake(f"{call} on x (2, {n}, {d}) returned {fits!r:.100}, expected a tensor of shape (2, {n}, {d})")
    past = obs["past"]
    what = f"{call} on x (2, {n + 2}, {d}), longer than max_len,"
    if isinstance(past, Tensor) and past.shape[1] == n:
        raise Mistake(f"{what} returned only the first {n} positions — cutting the input short hides the "
                      f"problem; raise a ValueError that names T and max_len", NO_VALUE_ERROR)
    judge_value_error(past, what, (str(n + 2), str(n)))


def _judge_spe_max_len(obs: Observations) -> None:
    d, n = _SPE_MAX
    _judge_max_len(obs, _spe_call(d, n, BASE), d, n)
    judge_value_error(obs["odd"], f"SinusoidalPositionalEncoding(7, max_len={n}), an odd d_model,", ("7",))


def _judge_spe_contract(obs: Observations) -> None:
    _judge_contract(obs, "SinusoidalPositionalEncoding(8, max_len=10)")
    _judge_bfloat16(obs["bfloat16"], "SinusoidalPositionalEncoding(8, max_len=10) on a bfloat16 x",
                    ": bfloat16 + a float32 table promotes to float32 — convert the rows you add with `.to(x.dtype)`")


register("SinusoidalPositionalEncoding_buffer", _judge_spe_buffer)
register("SinusoidalPositionalEncoding_max_len", _judge_spe_max_len)
register("SinusoidalPositionalEncoding_contract", _judge_spe_contract)


# ================================================================ LearnedPositionalEmbedding

def _judge_learned_table(obs: Observations) -> None:
    n, d = 12, 8
    call = f"LearnedPositionalEmbedding({n}, {d})"
    facts = obs["facts"]
    if isinstance(facts, Raised):
        raise Mistake(f"{call} {facts.describe()}")
    if not facts["is_module"]:
        raise Mistake(f"{call} should be an nn.Module (subclass nn.Module and call super().__init__())")
    params = {f[1]: f for f in facts["params"]}
    if (n, d) in params:
        if not params[(n, d)][3]:
            raise Mistake(f"{call}'s table `{params[(n, d)][0]}` has requires_grad=False: a learned embedding is "
                          f"trained with the rest of the model", "table frozen")
        return
    if (d, n) in params:
        raise Mistake(f"{call}'s table `{params[(d, n)][0]}` is ({d}, {n}): nn.Embedding(num_embeddings, "
                      f"embedding_dim) wants one row per *position*, nn.Embedding(max_len, d_model) = ({n}, {d})",
                      "max_len and d_model swapped")
    fixed = [f for f in facts["buffers"] + facts["attrs"] if f[1] == (n, d)]
    if fixed:
        raise Mistake(f"{call} keeps its table `{fixed[0][0]}` as a plain tensor or buffer, which the optimiser "
                      f"never sees — a learned embedding is trained: use nn.Embedding(max_len, d_model)",
                      "table not a trainable parameter")
    raise Mistake(f"{call} has no trainable ({n}, {d}) table — use self.table = nn.Embedding(max_len, d_model)")


def _learned_suspects(max_len: int, d: int, x: Tensor, seed: int) -> list[Suspect]:
    w = _learned_weights(max_len, d, seed)
    b, t, _ = x.shape
    concatenated = "the embedding is concatenated to x; it is added: x + table(positions) keeps the width d_model"
    alone = "it returns the position embeddings alone; the output is x + table(positions)"
    return [
        Suspect("row 1 went to position 0: positions run 0, 1, ..., T-1, `torch.arange(T)`",
                "positions counted from 1", lambda: x + w[1: t + 1]),
        Suspect("every position got row 0 of the table: look up one row per position, table(torch.arange(T))",
                "positions ignored", lambda: x + w[0]),
        Suspect("the rows were picked by the *batch* index: positions run along axis 1 of x (B, T, d_model), "
                "so use torch.arange(x.shape[1])", "positions along the batch axis", lambda: x + w[:b].unsqueeze(1)),
        Suspect(alone, "x not added", lambda: w[:t].expand(b, t, d)),
        Suspect(alone, "x not added", lambda: w[:t]),
        Suspect(concatenated, "concatenated instead of added", lambda: torch.cat([x, w[:t].expand(b, t, d)], dim=-1)),
        Suspect(concatenated, "concatenated instead of added", lambda: torch.cat([w[:t].expand(b, t, d), x], dim=-1)),
        Suspect("x is multiplied by the embeddings; they are added", "multiplied instead of added",
                lambda: x * w[:t]),
        Suspect(f"the whole table of max_len = {max_len} rows was added, broadcast over x's single position — add "
                f"only the rows of the T positions", "encoding not sliced to T", lambda: x + w),
    ]


judge(Compare(LEARNED_FORWARD, lambda max_len, d, x, seed: x + _learned_weights(max_len, d, seed)[: x.shape[1]],
              lambda max_len, d, x, seed: f"LearnedPositionalEmbedding({max_len}, {d}) on x {tuple(x.shape)}",
              _learned_suspects,
              hint="the output is x + table(torch.arange(T)): row t of the table is added at position t",
              crashed=_told(lambda raised, max_len, d, x, seed: _crash_hint(raised, max_len, x.shape[1]))))


def _judge_learned_gradients(obs: Observations) -> None:
    what = "LearnedPositionalEmbedding(12, 8)"
    _judge_contract(obs, what)
    grad = obs["grads"]["table"]
    t = _LEARNED_CONTRACT["x"].shape[1]
    rows = [int(r) for r in (grad.abs().sum(-1) > 0).nonzero().flatten()]
    if rows == list(range(t)):
        return
    known = {tuple(range(1, t + 1)): "positions counted from 1", (0,): "positions ignored",
             tuple(range(_LEARNED_CONTRACT["x"].shape[0])): "positions along the batch axis",
             tuple(range(12)): "encoding not sliced to T"}
    raise Mistake(f"on x of shape (2, {t}, 8) the gradient reaches the rows {rows} of the table; the {t} "
                  f"positions 0..{t - 1} use exactly the rows 0..{t - 1}, and only those should learn",
                  known.get(tuple(rows)))


register("LearnedPositionalEmbedding_table", _judge_learned_table)
register("LearnedPositionalEmbedding_gradients", _judge_learned_gradients)
register("LearnedPositionalEmbedding_max_len",
         lambda obs: _judge_max_len(obs, "LearnedPositionalEmbedding(10, 8)", 8, 10))


# ================================================================ apply_rotary

def _rope(x: Tensor, positions: Tensor | None = None, base: float = BASE, *, exponent: Tensor | None = None,
          clockwise: bool = False, layout: str = "interleaved", swap: bool = False) -> Tensor:
    """RoPE with knobs for the mistakes: in float64, ``layout`` 'interleaved', 'halves' (rotate_half),
    'written_as_halves' (right pairs, result concatenated) or 'mixed' (interleaved angles, rotate_half)."""
    x = x.to(torch.float64)
    t, d = x.shape[-2], x.shape[-1]
    p = torch.arange(t, dtype=torch.float64) if positions is None else positions.to(torch.float64)
    exponent = torch.arange(0, d, 2, dtype=torch.float64) / d if exponent is None else exponent
    angles = p.unsqueeze(-1) / base ** exponent  # (..., T, d/2)
    if clockwise:
        angles = -angles
    cos, sin = angles.cos(), angles.sin()
    if layout == "halves":
        a, b = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    if layout == "mixed":
        cos2, sin2 = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
        rotated_half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
        return x * cos2 + rotated_half * sin2
    a, b = x[..., 0::2], x[..., 1::2]
    if swap:
        cos, sin = sin, cos
    even, odd = a * cos - b * sin, a * sin + b * cos
    if layout == "written_as_halves":
        return torch.cat([even, odd], dim=-1)
    return torch.stack([even, odd], dim=-1).flatten(-2)


def _rope_suspects(x: Tensor, positions: Tensor | None, base: float) -> list[Suspect]:
    d = x.shape[-1]
    t = x.shape[-2]
    default = torch.arange(t, dtype=torch.float64)
    p = default if positions is None else positions
    suspects = [
        Suspect("the pairs are (x[..., i], x[..., i + d/2]), the first half against the second (the "
                "`rotate_half` convention of some libraries) — this course pairs neighbouring columns, "
                "(x[..., 2i], x[..., 2i+1]), as the RoFormer paper does",
                "pairs taken as halves instead of interleaved", lambda: _rope(x, p, base, layout="halves")),
        Suspect("the angles are repeated for neighbouring columns (interleaved) but the partner of each column is "
                "taken from the other half (`rotate_half`) — pair x[..., 2i] with x[..., 2i+1]",
                "interleaved angles combined with rotate_half", lambda: _rope(x, p, base, layout="mixed")),
        Suspect("each pair is rotated clockwise: (a, b) must go to (a cos θ − b sin θ, a sin θ + b cos θ)",
                "rotated clockwise", lambda: _rope(x, p, base, clockwise=True)),
        Suspect("the pairs are rotated correctly but written back as [all new x_2i, then all new x_2i+1]; put "
                "each result back in its own columns 2i and 2i+1, e.g. torch.stack([..., ...], -1).flatten(-2)",
                "rotated pairs written back as halves",
                lambda: _rope(x, p, base, layout="written_as_halves")),
        Suspect("the output equals x: every row was rotated by the angle 0 — the angle is p · base^(-2i/d) with "
                "p the row's position", "positions ignored", lambda: x),
        Suspect("pair i turns at base^(-i/d): the exponent must be 2i/d", "i instead of 2i in the exponent",
                lambda: _rope(x, p, base, exponent=torch.arange(d // 2, dtype=torch.float64) / d)),
        Suspect("the angle is p · base^(+2i/d): divide the position by base^(2i/d), do not multiply",
                "multiplied instead of divided",
                lambda: _rope(x, p, base, exponent=-torch.arange(0, d, 2, dtype=torch.float64) / d)),
        Suspect("sin and cos are swapped in the rotation: (a, b) -> (a cos θ − b sin θ, a sin θ + b cos θ), so "
                "position 0 leaves x unchanged", "sin and cos swapped", lambda: _rope(x, p, base, swap=True)),
        Suspect("the positions start at 1; the first row is position 0", "positions counted from 1",
                lambda: _rope(x, p + 1, base)),
    ]
    if positions is not None:
        suspects.append(Suspect("the positions given were ignored and 0..T-1 used instead",
                                "positions argument ignored", lambda: _rope(x, default, base)))
    if base != BASE:
        suspects.append(Suspect(f"it uses base 10000 although base={base:g} was given", "base ignored",
                                lambda: _rope(x, p, BASE)))
    return suspects


def _rope_call(x: Tensor, positions: Tensor | None, base: float) -> str:
    text = f"apply_rotary(x {tuple(x.shape)}"
    if positions is not None:
        shown = positions.tolist() if positions.numel() <= 6 else f"of shape {tuple(positions.shape)}"
        text += f", positions {shown}"
    return text + ("" if base == BASE else f", base={base:g}") + ")"


def _rope_crash_hint(raised: Raised, x: Tensor, positions: Tensor | None, base: float) -> tuple[str, str | None]:
    """What a crash of apply_rotary on the case (x, positions, base) most likely means, and the mistake's name;
    ('', None) if unknown."""
    if raised.type != "RuntimeError":
        return "", None
    if positions is not None and positions.dim() > 1:
        return (f" — positions may have leading axes (here {tuple(positions.shape)}): add the frequency axis at the "
                f"end, `positions.unsqueeze(-1) * freqs`", "positions assumed to be 1-D")
    if positions is None and "must match the size" in raised.message:
        return (f" — x is (..., T, d) with any number of leading axes (here {tuple(x.shape)}, so T = "
                f"{x.shape[-2]}): take T from x.shape[-2]", "T taken from the wrong axis")
    return "", None


_ROPE_HINT = ("rotate each pair (x[..., 2i], x[..., 2i+1]) at position p by the angle p · base^(-2i/d), "
              "counter-clockwise")
judge(Compare(ROPE_VALUES, ref.apply_rotary, _rope_call, _rope_suspects, hint=_ROPE_HINT, atol=ATOL, rtol=RTOL,
              crashed=_told(_rope_crash_hint)))
judge(Compare(ROPE_POSITIONS, ref.apply_rotary, _rope_call, _rope_suspects, hint=_ROPE_HINT, atol=ATOL, rtol=RTOL,
              crashed=_told(_rope_crash_hint)))


def _judge_rope_relative(obs: Observations) -> None:
    x = _RELATIVE_X
    for key, what in (("default", "apply_rotary(x (3, 6, 16))"), ("zero", "apply_rotary(x (3, 6, 16), positions 0)"),
                      ("scores", "apply_rotary on one query and one key at single positions")):
        if isinstance(obs[key], Raised):
            raise Mistake(f"{what} {obs[key].describe()}")
        if key != "scores" and (not isinstance(obs[key], Tensor) or obs[key].shape != x.shape):
            got = tuple(obs[key].shape) if isinstance(obs[key], Tensor) else repr(obs[key])[:60]
            raise Mistake(f"{what} should be a tensor of shape {tuple(x.shape)}, got {got}")
    out = obs["default"].to(torch.float64)
    suspect = matching_suspect(out, _rope_suspects(x, None, BASE), ATOL, RTOL)
    if not torch.allclose(out.norm(dim=-1), x.to(torch.float64).norm(dim=-1), atol=ATOL, rtol=RTOL):
        raise _looks_like("apply_rotary(x (3, 6, 16)) changed the length of the vectors: a rotation keeps every norm",
                          "norms not preserved", suspect)
    if not torch.allclose(obs["zero"].to(torch.float64), x.to(torch.float64), atol=ATOL, rtol=RTOL):
        zero_named = matching_suspect(obs["zero"], _rope_suspects(x, torch.zeros(6), BASE), ATOL, RTOL)
        raise _looks_like("apply_rotary(x, positions all 0) changed x: at position 0 every angle is 0 and the "
                          "rotation is the identity", "position 0 is not the identity", zero_named or suspect)
    scores = torch.tensor(obs["scores"], dtype=torch.float64).view(3, 3)  # rows: offsets 0, 3, 10; columns: n
    if not torch.allclose(scores, scores[:, :1].expand_as(scores), atol=1e-3, rtol=1e-3):
        raise _looks_like(f"the score <rope(q, m), rope(k, n)> changes when m and n move together (offset m - n "
                          f"fixed): {[round(s, 4) for s in scores[1].tolist()]} for offset 3 at n = 0, 5, 20 — "
                          f"rotating q and k by angles proportional to their positions makes it depend on m - n only",
                          "score depends on more than the offset", suspect)
    if torch.allclose(scores[:, 0], scores[:1, 0].expand(3), atol=1e-6, rtol=1e-6):
        raise _looks_like("the score <rope(q, m), rope(k, n)> is the same for the offsets m - n = 0, 3 and 10: the "
                          "positions have no effect", "positions ignored", suspect)


def _judge_rope_contract(obs: Observations) -> None:
    _judge_contract(obs, "apply_rotary")
    _judge_bfloat16(obs["bfloat16"], "apply_rotary on a bfloat16 x (2, 5, 8)",
                    " — compute the angles in float32 if you like, but return the result in x's dtype, `.to(x.dtype)`")
    _judge_meta(obs["meta"], "apply_rotary(x on the meta device)", (2, 5, 8),
                " — build the default positions and the frequencies on x.device, `torch.arange(T, device=x.device)`",
                "positions built on the CPU")


register("apply_rotary_relative", _judge_rope_relative)
register("apply_rotary_contract", _judge_rope_contract)
register(ROPE_ERRORS.id, value_errors(ROPE_ERRORS, [
    ("apply_rotary(x (2, 5, 7)), an odd width,", ("7",)), ("apply_rotary(x (2, 2, 3, 5)), an odd width,", ("5",))]))


# ================================================================ concept checks

def _encoded_shape_suspects(batch: int, n: int, d: int) -> list[Suspect]:
    return [
        Suspect("the "
                "original transformer adds the positional encoding to the token vectors, so the width stays d_model",
                "positions concatenated instead of added", lambda: (batch, n, 2 * d)),
    ]


def _without_positions_suspects(a: list[str], b: list[str]) -> list[Suspect]:
    return [
        Suspect("without positions self-attention sees a sentence as a bag of words: reorder the words and each word's "
                "output is the same, only moved", "self-attention taken to see word order", lambda: a == b),
        Suspect("a repeated word is one more key and value: it changes the softmax's weights, so how many times each "
                "word occurs matters, not only which words occur",
                "repeated words counted once", lambda: set(a) == set(b)),
    ]


register("encoded_shape_answer", lambda obs: judge_answers(
    obs, _ENCODED_SHAPE_CASES, ref.encoded_shape, _encoded_shape_suspects,
    lambda b, n, d: f"encoded_shape(batch={b}, n_tokens={n}, d_model={d})"))
register("same_without_positions_answer", lambda obs: judge_answers(
    obs, _WITHOUT_POSITIONS_CASES, ref.same_without_positions, _without_positions_suspects,
    lambda a, b: f"same_without_positions({' '.join(a)!r}, {' '.join(b)!r})"))
