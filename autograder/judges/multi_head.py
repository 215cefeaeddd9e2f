"""Judges of Chapter 4 (``04_multi_head``), against :mod:`solutions.multi_head`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases
and probe are in :mod:`autograder.checks.multi_head`. Each ``Suspect``
recomputes, on the same inputs, what one plausible mistake would return, so
that a failing learner is told which mistake it looks like.

The judges compare with :func:`_mha`, which computes multi-head attention
from the seeded weights the probes load and can be told to make one mistake
at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, MODIFIED_IN_PLACE, NO_VALUE_ERROR
from autograder.checks.core import Check, Mistake, Observations, Raised, seeded
from autograder.checks.multi_head import (
    _CHANGED_HEAD,
    _CONTRACT,
    _CONTRACT_SEED,
    _DROPOUT_CASE,
    _HEAD_CASE,
    _HEAD_SHAPE_CASES,
    _PARAMETER_CASES,
    MERGE_ERRORS,
    MERGE_ROUNDTRIP,
    MERGE_VALUES,
    MHA_FORWARD,
    MHA_MASK,
    MHA_SHAPES,
    MHA_TORCH,
    NAMES,
    SHAPE_SEED,
    SPLIT_ERRORS,
    SPLIT_SHAPE,
    SPLIT_VALUES,
    TORCH_SEED,
    Params,
    _contract_module,
    _inputs,
    _params,
)
from autograder.judges.core import (
    Compare,
    Suspect,
    judge,
    judge_answers,
    judge_tensor,
    judge_value_error,
    matching_suspect,
    register,
    type_name,
    value_errors,
)
from solutions import multi_head as ref
from solutions.self_attention import scaled_dot_product_attention as attend


def _raised(raised: Raised, what: str, *case: Any) -> Mistake:
    """The Mistake of a call that raised ``raised``: what it raised, and what that most likely means (also the
    ``crashed`` of the declared checks, whose case it ignores)."""
    hint, name = "", None
    if "view size is not compatible" in raised.message:
        hint, name = (" — `.view` needs a contiguous tensor, and a transposed one is not: call `.contiguous()` "
                      "before `.view(...)`, or use `.reshape(...)`", "view of a non-contiguous tensor")
    elif "mat1 and mat2 shapes cannot be multiplied" in raised.message:
        hint = (" — w_o expects d_model features per position: check that merge_heads returns "
                "(B, T, n_heads · d_head), and that the heads come from split_heads")
    return Mistake(f"{what} {raised.describe()}{hint}", name)


def _judge_shape(got: Any, reference: Tensor, what: str, suspects: list[Suspect], hint: str, atol: float = 1e-5,
                 rtol: float = 1e-4) -> None:
    """Only the shape of ``got``, against the reference's (also a ``compare`` of :class:`Compare`). A wrong shape
    is named by the suspect whose values it has, or else by the one suspect of that shape, when only one has it
    (two mistakes of one shape are told apart by their values)."""
    expected = tuple(reference.shape)
    if not isinstance(got, Tensor):
        raise Mistake(f"{what} should return a tensor of shape {expected}, got a {type_name(got)}")
    if tuple(got.shape) == expected:
        return
    wrong = f"{what} has shape {tuple(got.shape)}, expected {expected}"
    suspect = matching_suspect(got, suspects, atol, rtol)
    if suspect is not None:
        raise Mistake(f"{wrong}: {suspect.message}", suspect.name)
    same_shape = []
    for suspect in suspects:
        try:
            candidate = suspect.produce()
        except Exception:  # a mistake that would crash here is not what happened
            continue
        if isinstance(candidate, Tensor) and tuple(candidate.shape) == tuple(got.shape):
            same_shape.append(suspect)
    if len({(s.message, s.name) for s in same_shape}) == 1:
        raise Mistake(f"{wrong}: {same_shape[0].message}", same_shape[0].name)
    raise Mistake(f"{wrong} — {hint}")


# ================================================================ split_heads

def _split_suspects(x: Tensor, n: int) -> list[Suspect]:
    b, t, d_model = x.shape
    d = d_model // n
    return [
        Suspect("the heads are a plain view of x as (B, n_heads, T, d_head), which cuts the memory of the "
                "sequence into n_heads pieces instead of cutting each token's features — view as (B, T, n_heads, "
                "d_head), then transpose(1, 2)", "view without transpose", lambda: x.reshape(b, n, t, d)),
        Suspect("it stops at (B, T, n_heads, d_head): move the head axis in front of T with transpose(1, 2)",
                "missing transpose", lambda: x.reshape(b, t, n, d)),
        Suspect("head h got the features h, h + n_heads, h + 2·n_heads, ... — it must get the block "
                "h·d_head .. (h+1)·d_head - 1: view as (B, T, n_heads, d_head), not (B, T, d_head, n_heads)",
                "features interleaved across heads", lambda: x.reshape(b, t, d, n).permute(0, 3, 1, 2)),
        Suspect("it cuts the positions T into n_heads groups — every head sees every position, with its own "
                "d_head = d_model / n_heads features: split the last axis", "heads split on the wrong axis",
                lambda: x.reshape(b, n, t // n, d_model) if t % n == 0 else None),
    ]


def _split_call(x: Tensor, n: int) -> str:
    return f"split_heads(x {tuple(x.shape)}, n_heads={n})"


judge(Compare(SPLIT_SHAPE, ref.split_heads, _split_call, _split_suspects,
              hint="split_heads returns (B, n_heads, T, d_head), the head axis in front of the positions",
              crashed=_raised, compare=_judge_shape))
judge(Compare(SPLIT_VALUES, ref.split_heads, _split_call, _split_suspects,
              hint="head h holds the features h·d_head .. (h+1)·d_head - 1 of every position"))
register(SPLIT_ERRORS.id, value_errors(SPLIT_ERRORS, [
    ("split_heads(x (2, 3, 10), n_heads=4), where d_model=10 is not a multiple of n_heads=4", ("10", "4"))]))


# ================================================================ merge_heads

def _merge_suspects(h: Tensor) -> list[Suspect]:
    b, n, t, d = h.shape
    return [
        Suspect("it reshapes (B, n_heads, T, d_head) straight to (B, T, n_heads·d_head), which mixes positions "
                "and heads — transpose(1, 2) back to (B, T, n_heads, d_head) first",
                "merged without transposing back", lambda: h.reshape(b, t, n * d)),
        Suspect("the features come out interleaved (feature j of every head, then feature j + 1, ...) — head h "
                "must fill the block h·d_head .. (h+1)·d_head - 1: go through (B, T, n_heads, d_head), not "
                "(B, T, d_head, n_heads)", "features interleaved across heads",
                lambda: h.permute(0, 2, 3, 1).reshape(b, t, n * d)),
        Suspect("the heads are stacked along the positions, giving n_heads·T rows — concatenate them along the "
                "features, the last axis", "heads concatenated along the positions", lambda: h.reshape(b, n * t, d)),
        Suspect("it stops at (B, T, n_heads, d_head): flatten the last two axes into n_heads·d_head features",
                "heads not flattened", lambda: h.transpose(1, 2)),
        Suspect("the heads are added up, leaving d_head features per position — each head's output is "
                "T × d_head and only their concatenation is T × d_model", "heads summed instead of concatenated",
                lambda: h.sum(dim=1)),
        Suspect("the heads are averaged, leaving d_head features per position — each head's output is "
                "T × d_head and only their concatenation is T × d_model",
                "heads averaged instead of concatenated", lambda: h.mean(dim=1)),
    ]


def _merge_call(h: Tensor) -> str:
    return f"merge_heads(x {tuple(h.shape)})"


_MERGE_HINT = "head h fills the features h·d_head .. (h+1)·d_head - 1 of every position"
judge(Compare(MERGE_VALUES, ref.merge_heads, _merge_call, _merge_suspects, hint=_MERGE_HINT, crashed=_raised))
judge(Compare(MERGE_ROUNDTRIP, lambda x, n: x,
              lambda x, n: f"merge_heads(split_heads(x {tuple(x.shape)}, {n})), which should give x back,",
              lambda x, n: _merge_suspects(ref.split_heads(x, n)), hint=_MERGE_HINT, crashed=_raised))


def _judge_merge_errors(obs: Observations) -> None:
    what = "merge_heads(x (2, 7, 9)), which is not (B, n_heads, T, d_head),"
    (raised,) = obs[MERGE_ERRORS.key]
    if isinstance(raised, Raised) and raised.type == "ValueError" and "values to unpack" in raised.message:
        raise Mistake(f"{what} {raised.describe()}, Python's own complaint about unpacking the shape, not a "
                      f"check of yours — check x.dim() first and raise ValueError naming the shape",
                      NO_VALUE_ERROR)
    judge_value_error(raised, what, ("7", "9"))


register("merge_heads_errors", _judge_merge_errors)


# ================================================================ MultiHeadAttention: reference and mistakes

def _with_head_axis(mask: Tensor) -> Tensor:
    return mask.unsqueeze(-3)


def _mha(p: Params, query: Tensor, key: Tensor, value: Tensor, n: int, mask: Tensor | None = None, *,
         place_mask: Callable[[Tensor], Tensor | None] = _with_head_axis, split: Callable = ref.split_heads,
         merge: Callable = ref.merge_heads, q_scale: float = 1.0, values: str = "w_v", value_input: str = "value",
         use_bias: bool = True, use_wo: bool = True, average: bool = False) -> tuple[Tensor, Tensor]:
    """Multi-head attention from ``p``; each keyword makes one mistake."""
    def linear(x: Tensor, name: str) -> Tensor:
        w, b = p[name]
        y = x @ w.to(x.dtype).T
        return y + b.to(x.dtype) if b is not None and use_bias else y

    q = split(linear(query, "w_q"), n) * q_scale
    k = split(linear(key, "w_k"), n)
    v = split(linear(value if value_input == "value" else key, values), n)
    heads, weights = attend(q, k, v, None if mask is None else place_mask(mask))
    merged = merge(heads)
    out = linear(merged, "w_o") if use_wo else merged
    return out, weights.mean(dim=1) if average else weights


def _scrambled_split(x: Tensor, n: int) -> Tensor:
    b, t, d_model = x.shape
    return x.reshape(b, n, t, d_model // n)


def _scrambled_merge(h: Tensor) -> Tensor:
    b, n, t, d = h.shape
    return h.reshape(b, t, n * d)


def _single_head(p: Params, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    out, weights = _mha(p, query, key, value, 1, mask)
    return out, weights[:, 0]


def _mha_mistakes(p: Params, query: Tensor, key: Tensor, value: Tensor, n: int,
                  mask: Tensor | None) -> list[Suspect]:
    """The plausible mistakes: each one's ``produce()`` returns its (out, weights)."""
    d_model = query.shape[-1]
    run = lambda **mistake: _mha(p, query, key, value, n, mask, **mistake)  # noqa: E731
    mistakes = [
        Suspect("the concatenated heads are returned without the output projection — out = w_o(merge_heads(heads))",
                "no output projection w_o", lambda: run(use_wo=False)),
        Suspect(f"the scores are divided by √d_model = √{d_model} — each head compares vectors of d_head = "
                f"{d_model // n} features, so divide by √d_head", "scaled by √d_model instead of √d_head",
                lambda: run(q_scale=math.sqrt(1 / n))),
        Suspect("the values are made with w_k — v = w_v(value)", "w_k used for the values", lambda: run(values="w_k")),
        Suspect("the values are projected from `key` — v = w_v(value)", "values taken from key instead of value",
                lambda: run(value_input="key")),
        Suspect("the projections' biases are left out — call the nn.Linear layers themselves, or pass their bias",
                "projection biases left out", lambda: run(use_bias=False)),
        Suspect("the weights are averaged over the heads — return one attention matrix per head, "
                "(B, n_heads, T_q, T_k)", "weights averaged over heads", lambda: run(average=True)),
        Suspect("q, k and v are viewed as (B, n_heads, T, d_head) without a transpose, which scrambles positions and "
                "heads — split with split_heads", "view without transpose", lambda: run(split=_scrambled_split)),
        Suspect("the heads are merged by a reshape without transposing back, which mixes positions and heads — merge "
                "with merge_heads", "merged without transposing back", lambda: run(merge=_scrambled_merge)),
        Suspect("it attends with a single head of width d_model — split q, k and v into n_heads heads of d_head "
                "features", "heads not split", lambda: _single_head(p, query, key, value, mask)),
    ]
    if mask is not None:
        last = "unsqueeze(-1), the same as unsqueeze(2) for a 2-D mask" if mask.dim() == 2 else "unsqueeze(-1)"
        mistakes += [
            Suspect("the mask is not passed on to the attention: masked keys still get weight", "mask ignored",
                    lambda: run(place_mask=lambda m: None)),
            Suspect("the mask is inverted: True means 'may attend'", "inverted mask",
                    lambda: run(place_mask=lambda m: ~m.unsqueeze(-3))),
            Suspect(f"the mask was given its new axis at the end ({last}), so its axes no longer line up with the "
                    f"scores (B, n_heads, T_q, T_k) — add the head axis in front of T_q: mask.unsqueeze(-3) turns "
                    f"(B, T_q, T_k) into (B, 1, T_q, T_k) and leaves a (T_q, T_k) mask as it is",
                    "mask broadcast onto the wrong axis", lambda: run(place_mask=lambda m: m.unsqueeze(-1))),
            Suspect("the mask was given its new axis at dim 2 (unsqueeze(2)), so the queries' axis lines up with the "
                    "heads — add the head axis in front of T_q: mask.unsqueeze(-3)",
                    "mask broadcast onto the wrong axis", lambda: run(place_mask=lambda m: m.unsqueeze(2))),
        ]
        if mask.dim() == 2:
            mistakes.append(
                Suspect("a (T_q, T_k) mask was given its new axis at dim 1, between T_q and T_k, so its rows line up "
                        "with the heads — a 2-D mask broadcasts as it is; mask.unsqueeze(-3) adds the head axis in "
                        "front of T_q whatever the mask's rank",
                        "mask broadcast onto the wrong axis", lambda: run(place_mask=lambda m: m.unsqueeze(1))))
    return mistakes


def _describe(d_model: int, n: int, query: Tensor, key: Tensor, mask: Tensor | None, bias: bool = True) -> str:
    what = f"MultiHeadAttention({d_model}, {n}{'' if bias else ', bias=False'}) on query {tuple(query.shape)}"
    if key is not query:
        what += f", key and value {tuple(key.shape)}"
    return what + ("" if mask is None else f", mask {tuple(mask.shape)}")


def _pair(result: Any, what: str, *case: Any) -> tuple[Any, Any]:
    """``result`` as a pair (out, weights), or the Mistake that says why it is not one (also the ``guard`` of the
    declared checks, whose case it ignores)."""
    if isinstance(result, Raised):
        raise _raised(result, what)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Mistake(f"{what} should return a tuple (out, weights) from forward; got a {type_name(result)}")
    return result


_WEIGHTS_THEN_OUTPUT = ((1, "weights"), (0, "output"))  # the parts of (out, weights), in the order they are judged


def _judge_without_nan(got: Any, expected: Tensor, what: str, suspects: list[Suspect], hint: str, atol: float,
                       rtol: float) -> None:
    """The ``compare`` of the value checks: :func:`judge_tensor`, after NaN where the reference has none, which
    a fully masked row gives."""
    if isinstance(got, Tensor) and torch.isnan(got).any() and not torch.isnan(expected).any():
        raise Mistake(f"{what} contain NaN: a query whose keys are all masked must get all-zero weights (softmax "
                      f"of a row of -inf is 0/0) — the given `attention` does that", "NaN on fully masked rows")
    judge_tensor(got, expected, what, suspects, hint, atol, rtol)


# ================================================================ MultiHeadAttention: projections and shapes

def _judge_projections(obs: Observations) -> None:
    for label, bias in (("default", True), ("no_bias", False)):
        call = "MultiHeadAttention(24, 4" + (")" if bias else ", bias=False)")
        if isinstance(obs[label], Raised):
            raise Mistake(f"{call} {obs[label].describe()}")
        if not obs[label]["is_module"]:
            raise Mistake(f"{call} should be an nn.Module — subclass nn.Module and call super().__init__() first")
        for name in NAMES:
            facts = obs[label][name]
            if name == "w_o" and facts["type"] == "NoneType":
                raise Mistake(f"{call} has no `w_o` — the concatenated heads are projected back with "
                              f"w_o = nn.Linear(d_model, d_model)", "no output projection w_o")
            if facts["type"] != "Linear":
                raise Mistake(f"{call}.{name} should be an nn.Linear, got {facts['type']}")
            if facts["weight"] != (24, 24):
                raise Mistake(f"{call}.{name} maps {facts['weight'][1]} -> {facts['weight'][0]} features, expected "
                              f"24 -> 24: every projection is d_model -> d_model, the heads share it in blocks of "
                              f"d_head = 6 rows")
            if facts["bias"] != bias:
                raise Mistake(f"{call}.{name} should {'have' if bias else 'have no'} bias — pass bias=bias to "
                              f"nn.Linear", "bias argument ignored")


def _judge_shapes(obs: Observations) -> None:
    """Case by case, in order (a crash is reported where it happens), only the shapes of (out, weights)."""
    for (d_model, n, query, key), result in zip(MHA_SHAPES.cases, obs[MHA_SHAPES.key], strict=True):
        key = query if key is None else key
        what = _describe(d_model, n, query, key, None)
        got = _pair(result, what)
        p = _params(d_model, SHAPE_SEED, bias=True)
        expected, mistakes = _mha(p, query, key, key, n), _mha_mistakes(p, query, key, key, n, None)
        for part, name in ((1, "weights"), (0, "out")):
            _judge_shape(got[part], expected[part], f"`{name}` of {what}",
                         [mistake.part(part) for mistake in mistakes],
                         "out must be (B, T_q, d_model) and weights (B, n_heads, T_q, T_k), one matrix per head")


register("MultiHeadAttention_projections", _judge_projections)
register("MultiHeadAttention_shapes", _judge_shapes)


# ================================================================ MultiHeadAttention: values

def _mha_arguments(d_model: int, n: int, bias: bool, query: Tensor, key: Tensor | None, value: Tensor | None,
                   mask: Tensor | None, seed: int) -> tuple:
    """The arguments (params, query, key, value, n_heads, mask) of :func:`_mha` and :func:`_mha_mistakes` for a
    case of MHA_FORWARD or MHA_MASK, whose key and value are None for query."""
    return _params(d_model, seed, bias), *_inputs(query, key, value), n, mask


def _values(check: Check, others_ran: bool = False) -> Compare:
    """The judge of a value check of MultiHeadAttention. ``others_ran``: some case of the check did not crash,
    and so passed (a crash is judged after every case that ran): a crash on a (T_q, T_k) mask alone is then
    the head axis put where a 2-D mask cannot take it."""
    def crashed(raised: Raised, what: str, *case: Any) -> Mistake:
        mask = case[6]
        if others_ran and mask is not None and mask.dim() == 2:
            return Mistake(f"{what} {raised.describe()} — a (T_q, T_k) mask must work as it is: add the head axis "
                           f"in front of T_q with mask.unsqueeze(-3), which suits (T_q, T_k), (B, 1, T_k) and "
                           f"(B, T_q, T_k) masks alike", "mask broadcast onto the wrong axis")
        return _raised(raised, what)

    return Compare(
        check, lambda *case: _mha(*_mha_arguments(*case)),
        lambda d_model, n, bias, query, key, value, mask, seed: _describe(d_model, n, query,
                                                                          _inputs(query, key, value)[1], mask, bias),
        lambda *case: _mha_mistakes(*_mha_arguments(*case)),
        lambda *case: "head h attends with features h·d_head .. (h+1)·d_head - 1 of q, k and v; out is w_o of the "
        "merged heads" + ("" if case[6] is None else "; the same mask for every head, True = may attend"),
        parts=_WEIGHTS_THEN_OUTPUT, guard=_pair, crashed=crashed, compare=_judge_without_nan)


judge(_values(MHA_FORWARD))  # no mask: no crash of its is told by the others
register(MHA_MASK.id, lambda obs: _values(MHA_MASK, any(not isinstance(r, Raised) for r in obs[MHA_MASK.key]))(obs))


# ================================================================ MultiHeadAttention: nn.MultiheadAttention

def _torch_twin(d_model: int, n: int, p: Params) -> nn.MultiheadAttention:
    twin = nn.MultiheadAttention(d_model, n, batch_first=True)
    with torch.no_grad():
        twin.in_proj_weight.copy_(torch.cat([p["w_q"][0], p["w_k"][0], p["w_v"][0]]))
        twin.in_proj_bias.copy_(torch.cat([p["w_q"][1], p["w_k"][1], p["w_v"][1]]))
        twin.out_proj.weight.copy_(p["w_o"][0])
        twin.out_proj.bias.copy_(p["w_o"][1])
    return twin.eval()


# A case of MHA_TORCH: (d_model, n_heads, query, key, value, mask, torch_masks), key and value None for query.

def _torch_reference(d_model: int, n: int, query: Tensor, key: Tensor | None, value: Tensor | None,
                     mask: Tensor | None, torch_masks: dict) -> tuple[Tensor, Tensor]:
    """(out, weights per head) of nn.MultiheadAttention with the case's weights and the same mask in its terms."""
    with torch.no_grad():
        return _torch_twin(d_model, n, _params(d_model, TORCH_SEED, bias=True))(
            *_inputs(query, key, value), average_attn_weights=False, **torch_masks)


judge(Compare(
    MHA_TORCH, _torch_reference,
    lambda d_model, n, query, key, value, mask, _: _describe(d_model, n, query, _inputs(query, key, value)[1], mask)
    + " compared with nn.MultiheadAttention",
    lambda d_model, n, query, key, value, mask, _: _mha_mistakes(_params(d_model, TORCH_SEED, bias=True),
                                                                 *_inputs(query, key, value), n, mask),
    hint="nn.MultiheadAttention splits w_q, w_k, w_v into heads of d_head rows and ends with out_proj = w_o",
    parts=_WEIGHTS_THEN_OUTPUT, guard=_pair, crashed=_raised, compare=_judge_without_nan))


# ================================================================ MultiHeadAttention: head independence

def _judge_heads(obs: Observations) -> None:
    d_model, n, x, seed = _HEAD_CASE
    d = d_model // n
    what = f"MultiHeadAttention({d_model}, {n}) on x {tuple(x.shape)}"
    before, after = (_pair(obs[label], what)[1] for label in ("before", "after"))
    expected = (x.shape[0], n, x.shape[1], x.shape[1])
    mistakes = [m.part(1) for m in _mha_mistakes(_params(d_model, seed, bias=True), x, x, x, n, None)]
    for weights in (before, after):
        if not isinstance(weights, Tensor) or tuple(weights.shape) != expected:
            shape = tuple(weights.shape) if isinstance(weights, Tensor) else type_name(weights)
            suspect = matching_suspect(weights, mistakes, 1e-5, 1e-4) if isinstance(weights, Tensor) else None
            raise Mistake(f"the weights of {what} have shape {shape}, expected {expected}, one matrix per head"
                          + (f": {suspect.message}" if suspect else ""), suspect.name if suspect else None)
    changed = [h for h in range(n) if not torch.allclose(before[:, h], after[:, h], atol=1e-6, rtol=1e-5)]
    if changed == [_CHANGED_HEAD]:
        return
    rows = f"{_CHANGED_HEAD * d}..{(_CHANGED_HEAD + 1) * d - 1}"
    suspect = matching_suspect(before, mistakes, 1e-5, 1e-4)
    if not changed:
        raise Mistake(f"{what}: changing the rows {rows} of w_q (head {_CHANGED_HEAD}'s queries) changed no head's "
                      f"weights — are the queries made with w_q?", "w_q not used")
    raise Mistake(
        f"{what}: changing only the rows {rows} of w_q (head {_CHANGED_HEAD}'s queries) changed the weights of "
        f"heads {changed}, expected head {_CHANGED_HEAD} alone — "
        + (suspect.message if suspect else "head h must use only the features h·d_head .. (h+1)·d_head - 1 of q, "
           "k and v: view as (B, T, n_heads, d_head), then transpose(1, 2)"),
        suspect.name if suspect else "heads mixed")


register("MultiHeadAttention_head_independence", _judge_heads)


# ================================================================ MultiHeadAttention: dropout

def _tensors(result: Any, what: str, like: tuple[Any, Any] | None = None) -> tuple[Tensor, Tensor]:
    out, weights = _pair(result, what)
    for got, name, i in ((out, "out", 0), (weights, "weights", 1)):
        if not isinstance(got, Tensor):
            raise Mistake(f"{what}: `{name}` should be a tensor, got a {type_name(got)}")
        if like is not None and got.shape != like[i].shape:
            raise Mistake(f"{what}: `{name}` has shape {tuple(got.shape)}, but {tuple(like[i].shape)} without "
                          f"dropout — dropout must not change the shapes")
    return out, weights


def _judge_dropout(obs: Observations) -> None:
    """Judged against the learner's own output without dropout: the value checks judge that output."""
    d_model, n, x, seed, p_drop = _DROPOUT_CASE
    call = f"MultiHeadAttention({d_model}, {n}, dropout={p_drop}) on x {tuple(x.shape)}"
    out, weights = _tensors(obs["none"], f"MultiHeadAttention({d_model}, {n}, dropout=0.0) on x {tuple(x.shape)}")

    eval_out, eval_weights = _tensors(obs["eval"], f"{call} in eval mode", (out, weights))
    eval_mistake = ("dropout acts only in training mode: use an nn.Dropout module, or "
                    "F.dropout(..., training=self.training)")
    if ((eval_weights == 0) & (weights != 0)).any():
        raise Mistake(f"{call} in eval mode zeroes some attention weights — {eval_mistake}",
                      "dropout applied in eval mode")
    if not torch.allclose(eval_out, out, atol=1e-5, rtol=1e-4, equal_nan=True):
        raise Mistake(f"{call} in eval mode gives another output than with dropout=0.0 — {eval_mistake}",
                      "dropout applied in eval mode")

    what = f"{call} in training mode"
    train_out, train_weights = _tensors(obs["train"], what, (out, weights))
    if tuple(weights.shape) != (x.shape[0], n, x.shape[1], x.shape[1]):  # the shape checks name that mistake
        if torch.allclose(train_out, out, atol=1e-5, rtol=1e-4):
            raise Mistake(f"{what}: the output is the output without dropout — apply nn.Dropout(dropout) to the "
                          f"attention weights in forward", "dropout ignored")
        return
    kept = train_weights != 0
    dropped = (~kept & (weights != 0)).float().mean().item()
    if dropped == 0.0:
        zeroed = ((train_out == 0) & (out != 0)).float().mean().item()
        if zeroed > 0.2:
            raise Mistake(f"{what}: the weights are all kept but {zeroed:.0%} of the output is zero — dropout "
                          f"belongs on the attention weights, before they multiply v",
                          "dropout on the output instead of the weights")
        if torch.allclose(train_out, out, atol=1e-5, rtol=1e-4):
            raise Mistake(f"{what}: no attention weight was dropped — apply nn.Dropout(dropout) to the weights "
                          f"in forward", "dropout ignored")
        raise Mistake(f"{what}: the returned weights show no dropout, but the output is not the output without "
                      f"dropout — return the weights after dropout, the ones that multiplied v, as "
                      f"nn.MultiheadAttention does", "weights returned before dropout")
    if not 0.25 < dropped < 0.75:
        raise Mistake(f"{what}: {dropped:.0%} of the weights were dropped, expected about {p_drop:.0%} — pass "
                      f"`dropout` as the probability of dropping", "dropout probability wrong")
    judge_tensor(train_weights[kept], weights[kept] / (1 - p_drop), f"the weights that {what} kept",
                 hint=f"dropout scales the kept weights by 1 / (1 - p) = {1 / (1 - p_drop):g}; nn.Dropout does that")
    params = _params(d_model, seed, bias=True)
    reference = _mha(params, x, x, x, n)
    if weights.shape == reference[1].shape and torch.allclose(weights, reference[1], atol=1e-5, rtol=1e-4) and \
            torch.allclose(out, reference[0], atol=1e-5, rtol=1e-4):
        v = ref.split_heads(x @ params["w_v"][0].T + params["w_v"][1], n)
        expected = ref.merge_heads(train_weights @ v) @ params["w_o"][0].T + params["w_o"][1]
        judge_tensor(train_out, expected, f"the output of {what}, compared with w_o(merge_heads(weights @ v)) for "
                     f"the returned weights", hint="multiply v by the weights after dropout",
                     mistake="output not computed from the dropped weights")


register("MultiHeadAttention_dropout", _judge_dropout)


# ================================================================ MultiHeadAttention: contract

def _judge_contract(obs: Observations) -> None:
    function = "MultiHeadAttention"
    if obs["modified"] or (obs["raised"] is not None and "in-place" in obs["raised"].message):
        names = ", ".join(f"`{n}`" for n in obs["modified"]) or "(a tensor that requires grad)"
        raise Mistake(f"{function} modified its input {names} in place — use out-of-place operations: "
                      f"`masked_fill`, not `masked_fill_`; `x = x * s`, not `x *= s`", MODIFIED_IN_PLACE)
    if obs["raised"] is not None:
        raise Mistake(f"{function} on float64 inputs {obs['raised'].describe()}")
    if obs["out_dtype"] != "torch.float64":
        raise Mistake(f"{function} returned {obs['out_dtype']} for a float64 module and inputs — keep the "
                      f"input's dtype: no `.float()`, no hard-coded `dtype=torch.float32`", DTYPE_CHANGED)
    if not obs["requires_grad"]:
        raise Mistake(f"{function}'s output is cut off from the graph (requires_grad is False) — avoid "
                      f"`.detach()`, `.item()`, `.numpy()`, `torch.tensor(...)` of results and "
                      f"`torch.no_grad()`", GRAPH_CUT)
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in _CONTRACT.items()}
    out = _contract_module(ref.MultiHeadAttention)(**leaves)[0]
    cotangent = seeded(*out.shape, seed=_CONTRACT_SEED, dtype=out.dtype)
    expected = torch.autograd.grad((out * cotangent).sum(), list(leaves.values()))
    same_out = isinstance(obs["out"], Tensor) and obs["out"].shape == out.shape and \
        torch.allclose(obs["out"], out.detach(), atol=1e-9, rtol=1e-7)
    for name, want in zip(leaves, expected, strict=True):
        got = obs["grads"].get(name)
        if got is None and not same_out:  # a wrong output that leaves an input out: the value checks name it
            raise Mistake(f"no gradient reaches `{name}` through {function}: the output does not depend on it — "
                          f"check that q, k and v are made from query, key and value, in that order")
        if got is None:
            raise Mistake(f"no gradient reaches `{name}` through {function} — something detaches it: "
                          f"`.detach()`, `.data`, `.item()`, `.numpy()`, or building a new tensor from results",
                          GRAPH_CUT)
        if same_out:  # a wrong output is named by the value checks; its gradient would only repeat them
            judge_tensor(got, want, f"the gradient of {function} with respect to `{name}`", atol=1e-8, rtol=1e-6)
    what = f"{function}(8, 2) in float64 with a padding mask (2, 1, 4) whose second row may attend nothing"
    grad = obs["empty_grad"]
    if isinstance(grad, Raised):
        raise Mistake(f"{what}: forward and backward {grad.describe()}")
    if not isinstance(grad, Tensor):
        raise Mistake(f"no gradient reaches x through {what} — something detaches it", GRAPH_CUT)
    if torch.isnan(grad).any():
        raise Mistake(f"the gradient of {what} contains NaN: a query whose keys are all masked must give zeros in "
                      f"the backward pass too — fill the blocked scores with masked_fill before the softmax and "
                      f"make the fully masked rows safe, or use the given `attention`",
                      "NaN gradient on fully masked rows")
    meta = obs["meta"]
    if isinstance(meta, Raised):
        raise Mistake(f"{function}(8, 2) on the `meta` device {meta.describe()} — build every tensor on the device "
                      f"of the inputs", "device not kept")
    if meta != ("meta", "meta"):
        raise Mistake(f"{function}(8, 2) on the `meta` device returned (out, weights) on {meta!r:.80} — keep the "
                      f"device of the inputs", "device not kept")


register("MultiHeadAttention_contract", _judge_contract)


# ================================================================ MultiHeadAttention: errors

def _judge_errors(obs: Observations) -> None:
    judge_value_error(obs["divisible"], "MultiHeadAttention(10, 4), where d_model=10 is not a multiple of n_heads=4,",
                      ("10", "4"))
    judge_value_error(obs["d_model"], "MultiHeadAttention(16, 4) on query (2, 3, 12), whose last axis is not "
                      "d_model=16,", ("12", "16"))


register("MultiHeadAttention_errors", _judge_errors)


# ================================================================ concept checks

def _head_shape_suspects(n: int, d_model: int, n_heads: int) -> list[Suspect]:
    return [
        Suspect(f"each head works in d_model / n_heads dimensions; only the concatenation of the {n_heads} heads is "
                f"{d_model} wide", "one head taken to be d_model wide", lambda: (n, d_model)),
        Suspect("that is the shape of all the heads together, after split_heads; one head's queries have no head axis",
                "all the heads taken for one", lambda: (n_heads, n, d_model // n_heads)),
    ]


def _parameter_suspects(d: int, n_heads: int) -> list[Suspect]:
    d_head = d // n_heads
    return [
        Suspect("the heads share out the d_model-wide projections between them: more heads, the same four projections, "
                "the same parameters",
                "parameters multiplied by the heads", lambda: n_heads * 4 * (d * d + d)),
        Suspect("each of the four projections has a bias of d_model numbers too", "biases left out", lambda: 4 * d * d),
        Suspect("there are four projections: w_q, w_k, w_v and the output projection w_o",
                "output projection left out", lambda: 3 * (d * d + d)),
        Suspect("each projection maps d_model to d_model, for all the heads at once, not to one head's width",
                "projections one head wide", lambda: 4 * (d * d_head + d_head)),
    ]


register("head_query_shape_answer", lambda obs: judge_answers(
    obs, _HEAD_SHAPE_CASES, ref.head_query_shape, _head_shape_suspects,
    lambda n, d, h: f"head_query_shape({n}, d_model={d}, n_heads={h})"))
register("attention_parameters_answer", lambda obs: judge_answers(
    obs, _PARAMETER_CASES, ref.attention_parameters, _parameter_suspects,
    lambda d, h: f"attention_parameters({d}, n_heads={h})"))
