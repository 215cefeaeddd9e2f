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

from attention_course.mistakes import positional as known
from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, NO_VALUE_ERROR, KnownMistake, named
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
    ALIBI_BIAS_ERRORS,
    ALIBI_BIAS_HEADS,
    ALIBI_BIAS_VALUES,
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
    declared,
    judge,
    judge_answers,
    judge_contract_basics,
    judge_value_error,
    matching_suspect,
    mistake,
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
        raise mistake(known.GRADCHECK_FAILED, f"torch.autograd.gradcheck of {function} in float64 {how}")


def _judge_meta(meta: Any, what: str, shape: tuple[int, ...], device_mistake: KnownMistake) -> None:
    """``meta`` is ``attempt_facts`` of a call on the meta device: it must run and return a ``shape`` tensor
    there. A crash that names the device is ``device_mistake``."""
    if isinstance(meta, Raised):
        if "device" in meta.message:
            found = mistake(device_mistake, "", where="'meta'", found="on the CPU")
            raise Mistake(f"{what} {meta.describe()} — {found.message}", found.name)
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
        return f" — {known.T_EQUALS_MAX_LEN.text(last=t - 1, max_len=t)}", known.T_EQUALS_MAX_LEN.name
    if raised.type == "IndexError" and "out of range" in text:
        return (" — an index ran past the table: the positions of a sequence of T tokens are 0..T-1; are they "
                "counted from 1?", None)
    # x (B, T, d_model) + a table of max_len rows: the sizes T and max_len clash on dimension 1 (a transposed
    # table clashes on dimension 2 instead)
    if max_len is not None and "must match the size" in text and f"({max_len})" in text and "dimension 1" in text:
        return f" — {known.NOT_SLICED_CRASH.text(max_len=max_len)}", known.NOT_SLICED_CRASH.name
    if "indices" in text and ("Long" in text or "Int" in text):
        return f" — {known.AS_INDICES.text()}", known.AS_INDICES.name
    return "", None


def _looks_like(broken: KnownMistake, what: str, suspect: Suspect | None, **fields: Any) -> Mistake:
    """The property ``broken`` fails for ``what``; when a suspect matched, followed by what it looks like: that
    suspect's message, whose name the mistake then carries."""
    found = mistake(broken, what, **fields)
    if suspect is None:
        return found
    return Mistake(f"{named(found.message, found.name)} It looks like this: {suspect.message}", suspect.name)


# ================================================================ sinusoidal_encoding

_table_suspects = declared(known.TABLE, ref.sinusoidal_encoding)


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
            shaped = {(d, max_len): known.TRANSPOSED, (max_len, d // 2): known.ONE_COLUMN_PER_PAIR,
                      (max_len, 2 * d): known.TWO_PER_COLUMN, (1, max_len, d): known.BATCH_AXIS}.get(shape)
            if shaped is not None:
                raise mistake(shaped, f"{what} has shape {shape}", max_len=max_len, d=d)
            raise Mistake(f"{what} has shape {shape}, expected (max_len, d_model) = ({max_len}, {d}) — one row "
                          f"per position, d_model / 2 pairs of sin and cos columns")
        if facts["dtype"] != str(torch.get_default_dtype()):
            if facts["dtype"] == "torch.float64":
                raise mistake(known.TABLE_FLOAT64, what, dtype=facts["dtype"], default=torch.get_default_dtype())
            raise Mistake(f"{what} returned {facts['dtype']} — build the table in the default dtype, "
                          f"{torch.get_default_dtype()}, or convert it with `.to(torch.get_default_dtype())`")


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
            if got == shape[::-1]:
                raise mistake(known.TRANSPOSED, f"{what} has shape {got}", max_len=shape[0], d=d)
            raise Mistake(f"{what} should be a tensor of shape {shape}, got {got}")
    pe = obs["first"].to(torch.float64)
    # Only the name, never the verdict, comes from the suspects here. A table computed in float32 drifts by up to
    # ~1e-2 from a suspect at the large angles of some mistakes (multiplied instead of divided), while the
    # suspects differ from each other by ~1 or more: a match within 2e-2 is still evidence.
    suspect = matching_suspect(pe, _table_suspects(n, d, BASE), 2e-2, 0.0)
    what = f"sinusoidal_encoding({n}, {d})"
    if not torch.equal(obs["first"], obs["again"]):
        raise _looks_like(known.NOT_DETERMINISTIC, what, suspect)
    if pe.abs().max() > 1 + 1e-6:
        raise _looks_like(known.OUTSIDE_UNIT, what, suspect, largest=pe.abs().max().item())
    row0 = torch.tensor([0.0, 1.0] * (d // 2), dtype=torch.float64)
    if not torch.allclose(pe[0], row0, atol=ATOL):
        raise _looks_like(known.ROW_0, what, suspect, row=[round(v, 3) for v in pe[0, :6].tolist()])
    distances = torch.cdist(pe, pe) + torch.eye(n, dtype=torch.float64) * 1e9
    if distances.min() < 1e-3:
        first = tuple(int(i) for i in (distances == distances.min()).nonzero()[0])
        raise _looks_like(known.NOT_UNIQUE, what, suspect, first=first[0], second=first[1])
    for k in (1, 3, 10):
        dots = (pe[: n - k] * pe[k:]).sum(-1)  # PE[p] . PE[p + k]
        if not torch.allclose(dots, dots[:1].expand_as(dots), atol=1e-3):
            spread = (dots.max() - dots.min()).item()
            raise _looks_like(known.NOT_CONSISTENT, what, suspect, k=k, spread=spread)
    longer = obs["longer"].to(torch.float64)
    if not torch.allclose(longer[:n], pe, atol=ATOL, rtol=RTOL):
        raise _looks_like(known.DEPENDS_ON_MAX_LEN, f"sinusoidal_encoding({2 * n}, {d})", suspect, n=n, longer=2 * n)


register("sinusoidal_encoding_shape", _judge_table_shape)
judge(Compare(TABLE_VALUES, ref.sinusoidal_encoding,
              lambda max_len, d, base: f"sinusoidal_encoding({max_len}, {d}" + (
                  ")" if base == BASE else f", base={base:g})"), _table_suspects,
              hint="PE[p, 2i] = sin(p / base^(2i/d_model)), PE[p, 2i+1] = cos(p / base^(2i/d_model))",
              atol=ATOL, rtol=RTOL, same_type=False))  # its dtype is the test of sinusoidal_encoding_shape
register("sinusoidal_encoding_properties", _judge_table_properties)
register(TABLE_ERRORS.id, value_errors(TABLE_ERRORS, [
    ("sinusoidal_encoding(10, 7), an odd d_model,", ("7",)), ("sinusoidal_encoding(6, 5), an odd d_model,", ("5",)),
    ("sinusoidal_encoding(0, 8), with max_len=0,", ()), ("sinusoidal_encoding(5, -2), with d_model=-2,", ("-2",))]))


# ================================================================ SinusoidalPositionalEncoding

def _spe_call(d_model: int, max_len: int, base: float) -> str:
    return f"SinusoidalPositionalEncoding({d_model}, max_len={max_len}" + (
        ")" if base == BASE else f", base={base:g})")


_spe_suspects = declared(known.SPE, ref.sinusoidal_encoding)


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
        if _is_table(shape, n, d):
            raise mistake(known.SPE_AS_PARAMETER, call, table=name)
        raise Mistake(f"{call} has the parameter `{name}`: parameters() hands it to the optimiser, which would "
                      f"train it — this module has nothing to train")
    tables = [f for f in obs["buffers"] if _is_table(f[1], n, d)]
    attrs = [f for f in obs["attrs"] if _is_table(f[1], n, d)]
    if not tables:
        if attrs:
            raise mistake(known.SPE_PLAIN_ATTRIBUTE, call, table=attrs[0][0])
        raise mistake(known.SPE_NO_BUFFER, call, max_len=n, d=d)
    name = tables[0][0]
    if name not in {f[0] for f in obs["state"]}:
        raise mistake(known.SPE_NOT_PERSISTENT, call, table=name)
    moved = dict((f[0], f[2]) for f in obs["double"])
    if moved.get(name) != "torch.float64":
        raise mistake(known.SPE_NOT_MOVED, call, where="torch.float64", found=moved.get(name))
    _judge_meta(obs["meta"], f"{call}.to('meta') on x of shape (2, 5, {d}) on the meta device", (2, 5, d),
                known.SPE_NOT_MOVED)


def _judge_max_len(obs: Observations, call: str, d: int, n: int) -> None:
    fits = obs["fits"]
    if isinstance(fits, Raised):
        what = f"{call} on x (2, {n}, {d}), a sequence exactly max_len = {n} long,"
        if fits.type == "ValueError":
            found = mistake(known.T_EQUALS_MAX_LEN, "", last=n - 1, max_len=n)
            raise Mistake(f"{what} {fits.describe()} — {found.message}", found.name)
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
    default, call = obs["default"], f"SinusoidalPositionalEncoding({d}) on x (1, 5000, {d})"
    if isinstance(default, Raised) and default.type == "ValueError":
        raise mistake(known.SPE_MAX_LEN_DEFAULT, call, found=default.describe())
    if isinstance(default, Raised):
        raise Mistake(f"{call} {default.describe()}")
    if not isinstance(default, dict) or default["shape"] != (1, 5000, d):
        raise Mistake(f"{call} returned {default!r:.100}, expected a tensor of shape (1, 5000, {d})")


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
            raise mistake(known.TABLE_FROZEN, call, max_len=n, d=d)
        return
    if (d, n) in params:
        raise mistake(known.SWAPPED_SIZES, call, table=params[(d, n)][0], max_len=n, d=d)
    fixed = [f for f in facts["buffers"] + facts["attrs"] if f[1] == (n, d)]
    if fixed:
        raise mistake(known.NOT_TRAINABLE, call, table=fixed[0][0])
    raise Mistake(f"{call} has no trainable ({n}, {d}) table — use self.table = nn.Embedding(max_len, d_model)")


_learned_suspects = declared(known.LEARNED, None,  # the learner's module runs with the weights of the seed
                             case=lambda max_len, d, x, seed: (x, _learned_weights(max_len, d, seed)))


judge(Compare(LEARNED_FORWARD, lambda max_len, d, x, seed: x + _learned_weights(max_len, d, seed)[: x.shape[1]],
              lambda max_len, d, x, seed: f"LearnedPositionalEmbedding({max_len}, {d}) on x {tuple(x.shape)}",
              _learned_suspects,
              hint="the output is x + table(torch.arange(T)): row t of the table is added at position t",
              crashed=_told(lambda raised, max_len, d, x, seed: _crash_hint(raised, max_len, x.shape[1]))))


def _judge_learned_gradients(obs: Observations) -> None:
    what = "LearnedPositionalEmbedding(12, 8)"
    _judge_contract(obs, what)
    devices = obs["devices"]
    on_meta = f"{what}.to('meta') on x of shape (2, 5, 8) on the meta device"
    if isinstance(devices, Raised):
        raise Mistake(f"{on_meta} {devices.describe()}")
    others = [device for device in devices if device != "meta"]
    if others:
        raise mistake(known.LEARNED_POSITIONS_ON_CPU, on_meta, found=others[0])
    grad = obs["grads"]["table"]
    t = _LEARNED_CONTRACT["x"].shape[1]
    rows = [int(r) for r in (grad.abs().sum(-1) > 0).nonzero().flatten()]
    if rows == list(range(t)):
        return
    named_by_rows = {tuple(range(1, t + 1)): "positions counted from 1", (0,): "positions ignored",
                     tuple(range(_LEARNED_CONTRACT["x"].shape[0])): "positions along the batch axis",
                     tuple(range(12)): "encoding not sliced to T"}
    found = named_by_rows.get(tuple(rows))
    raise Mistake(f"on x of shape (2, {t}, 8) the gradient reaches the rows {rows} of the table; the {t} "
                  f"positions 0..{t - 1} use exactly the rows 0..{t - 1}, and only those should learn",
                  None if found is None else known.LEARNED.named(found).name)


register("LearnedPositionalEmbedding_table", _judge_learned_table)
register("LearnedPositionalEmbedding_gradients", _judge_learned_gradients)
register("LearnedPositionalEmbedding_max_len",
         lambda obs: _judge_max_len(obs, "LearnedPositionalEmbedding(10, 8)", 8, 10))


# ================================================================ apply_rotary

_rope_suspects = declared(known.ROPE, ref.apply_rotary)


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
        return f" — {known.POSITIONS_1D.text(shape=tuple(positions.shape))}", known.POSITIONS_1D.name
    if positions is None and "must match the size" in raised.message:
        return f" — {known.T_FROM_WRONG_AXIS.text(shape=tuple(x.shape), T=x.shape[-2])}", known.T_FROM_WRONG_AXIS.name
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
        raise _looks_like(known.NORMS_CHANGED, "apply_rotary(x (3, 6, 16))", suspect)
    if not torch.allclose(obs["zero"].to(torch.float64), x.to(torch.float64), atol=ATOL, rtol=RTOL):
        zero_named = matching_suspect(obs["zero"], _rope_suspects(x, torch.zeros(6), BASE), ATOL, RTOL)
        raise _looks_like(known.POSITION_0_MOVES, "apply_rotary(x, positions all 0)", zero_named or suspect)
    scores = torch.tensor(obs["scores"], dtype=torch.float64).view(3, 3)  # rows: offsets 0, 3, 10; columns: n
    if not torch.allclose(scores, scores[:, :1].expand_as(scores), atol=1e-3, rtol=1e-3):
        raise _looks_like(known.NOT_RELATIVE, "apply_rotary on one query and one key", suspect,
                          found=f": {[round(s, 4) for s in scores[1].tolist()]} for offset 3 at n = 0, 5, 20")
    if torch.allclose(scores[:, 0], scores[:1, 0].expand(3), atol=1e-6, rtol=1e-6):
        raise _looks_like(known.NO_EFFECT, "apply_rotary on one query and one key", suspect, offsets="0, 3 and 10")


def _judge_rope_contract(obs: Observations) -> None:
    _judge_contract(obs, "apply_rotary")
    _judge_bfloat16(obs["bfloat16"], "apply_rotary on a bfloat16 x (2, 5, 8)",
                    " — compute the angles in float32 if you like, but return the result in x's dtype, `.to(x.dtype)`")
    _judge_meta(obs["meta"], "apply_rotary(x on the meta device)", (2, 5, 8), known.POSITIONS_ON_CPU)


register("apply_rotary_relative", _judge_rope_relative)
register("apply_rotary_contract", _judge_rope_contract)
register(ROPE_ERRORS.id, value_errors(ROPE_ERRORS, [
    ("apply_rotary(x (2, 5, 7)), an odd width,", ("7",)), ("apply_rotary(x (2, 2, 3, 5)), an odd width,", ("5",))]))


# ================================================================ concept checks

register("encoded_shape_answer", lambda obs: judge_answers(
    obs, _ENCODED_SHAPE_CASES, ref.encoded_shape, declared(known.ENCODED_SHAPE, None),
    lambda b, n, d: f"encoded_shape(batch={b}, n_tokens={n}, d_model={d})"))
register("same_without_positions_answer", lambda obs: judge_answers(
    obs, _WITHOUT_POSITIONS_CASES, ref.same_without_positions, declared(known.WITHOUT_POSITIONS, None),
    lambda a, b: f"same_without_positions({' '.join(a)!r}, {' '.join(b)!r})"))


# ================================================================ alibi_bias

def _alibi_bias_what(n_heads: int, T: int) -> str:
    return f"alibi_bias(n_heads={n_heads!r}, T={T!r})"


_alibi_bias_suspects = declared(known.ALIBI_BIAS, ref.alibi_bias)


def _alibi_bias_float32(out: Any, what: str, n_heads: int, T: int) -> None:
    """The guard of alibi_bias's values: a tensor in float32, the default dtype, as the exercise states."""
    if isinstance(out, Tensor) and out.dtype != torch.float32:
        if out.dtype == torch.float64:
            raise mistake(known.TABLE_FLOAT64, what, dtype=out.dtype, default=torch.float32)
        raise Mistake(f"{what} returned {out.dtype}; the bias is float32, the default dtype")


judge(Compare(ALIBI_BIAS_VALUES, ref.alibi_bias, _alibi_bias_what, _alibi_bias_suspects, guard=_alibi_bias_float32))
judge(Compare(ALIBI_BIAS_HEADS, ref.alibi_bias, _alibi_bias_what, _alibi_bias_suspects, guard=_alibi_bias_float32))
register("alibi_bias_errors", value_errors(ALIBI_BIAS_ERRORS, known.ALIBI_BIAS_REFUSED))
