"""Judges of Chapter 4 (``04_multi_head``), against :mod:`solutions.multi_head`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases
and probe are in :mod:`autograder.checks.multi_head`. Every named mistake
is declared once, in :mod:`attention_course.mistakes.multi_head`, which the
visible checks use too: the judges pass the reference as ``right``
(``declared(known.GROUP, reference)``) and raise the value-free ones with
``mistake(known.NAME, what, **fields)``.

The judges compare with :func:`_mha`, which computes multi-head attention
from the seeded weights the probes load.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from attention_course.mistakes import multi_head as known
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
    declared,
    judge,
    judge_answers,
    judge_tensor,
    judge_value_error,
    matching_suspect,
    mistake,
    register,
    type_name,
    value_errors,
)
from solutions import multi_head as ref
from solutions.self_attention import scaled_dot_product_attention as attend


def _raised(raised: Raised, what: str, *case: Any) -> Mistake:
    """The Mistake of a call that raised ``raised``: what it raised, and what that most likely means (also the
    ``crashed`` of the declared checks, whose case it ignores)."""
    if "view size is not compatible" in raised.message:
        return mistake(known.VIEW_NOT_CONTIGUOUS, raised=f"{what} {raised.describe()}")
    hint = ""
    if "mat1 and mat2 shapes cannot be multiplied" in raised.message:
        hint = (" — w_o expects d_model features per position: check that merge_heads returns "
                "(B, T, n_heads · d_head), and that the heads come from split_heads")
    return Mistake(f"{what} {raised.describe()}{hint}")


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

_split_suspects = declared(known.SPLIT, ref.split_heads)


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

_merge_suspects = declared(known.MERGE, ref.merge_heads)


def _merge_call(h: Tensor) -> str:
    return f"merge_heads(x {tuple(h.shape)})"


_MERGE_HINT = "head h fills the features h·d_head .. (h+1)·d_head - 1 of every position"
judge(Compare(MERGE_VALUES, ref.merge_heads, _merge_call, _merge_suspects, hint=_MERGE_HINT, crashed=_raised))
judge(Compare(MERGE_ROUNDTRIP, lambda x, n: x,
              lambda x, n: f"merge_heads(split_heads(x {tuple(x.shape)}, {n})), which should give x back,",
              declared(known.MERGE, ref.merge_heads, case=lambda x, n: (ref.split_heads(x, n),)), hint=_MERGE_HINT,
              crashed=_raised))


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

def _mha(p: Params, query: Tensor, key: Tensor, value: Tensor, n: int,
         mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Multi-head attention from ``p``: (out, weights per head)."""
    def linear(x: Tensor, name: str) -> Tensor:
        w, b = p[name]
        y = x @ w.to(x.dtype).T
        return y + b.to(x.dtype) if b is not None else y

    q, k, v = (ref.split_heads(linear(t, name), n) for t, name in ((query, "w_q"), (key, "w_k"), (value, "w_v")))
    heads, weights = attend(q, k, v, None if mask is None else mask.unsqueeze(-3))
    return linear(ref.merge_heads(heads), "w_o"), weights


#: The plausible mistakes of a case (params, query, key, value, n_heads, mask): each one's (out, weights).
_mha_mistakes = declared(known.MULTI_HEAD, attend)


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
        raise mistake(known.NAN_ROWS, f"{what} contain NaN")
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
                raise mistake(known.NO_W_O, call=call)
            if facts["type"] != "Linear":
                raise Mistake(f"{call}.{name} should be an nn.Linear, got {facts['type']}")
            if facts["weight"] != (24, 24):
                raise Mistake(f"{call}.{name} maps {facts['weight'][1]} -> {facts['weight'][0]} features, expected "
                              f"24 -> 24: every projection is d_model -> d_model, the heads share it in blocks of "
                              f"d_head = 6 rows")
            if facts["bias"] != bias:
                raise mistake(known.BIAS_IGNORED, call=call, name=name, have="have" if bias else "have no")


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


def _crashed_values(others_ran: bool, raised: Raised, what: str, *case: Any) -> Mistake:
    """The Mistake of a value case that crashed. ``others_ran``: some case of the check did not crash, and so passed
    (a crash is judged after every case that ran): a crash on a (T_q, T_k) mask alone is then the head axis put
    where a 2-D mask cannot take it."""
    mask = case[6]
    if others_ran and mask is not None and mask.dim() == 2:
        return mistake(known.MASK_CRASHED, raised=f"{what} {raised.describe()}")
    return _raised(raised, what)


@dataclass(frozen=True)
class _Values(Compare):
    """The judge of a value check of MultiHeadAttention: a :class:`Compare` whose ``crashed`` is told whether some
    case of the record ran."""

    def __call__(self, obs: Observations) -> None:
        others_ran = any(not isinstance(r, Raised) for r in obs[self.check.key])
        Compare.__call__(replace(self, crashed=functools.partial(_crashed_values, others_ran)), obs)


def _values(check: Check) -> Compare:
    return _Values(
        check, lambda *case: _mha(*_mha_arguments(*case)),
        lambda d_model, n, bias, query, key, value, mask, seed: _describe(d_model, n, query,
                                                                          _inputs(query, key, value)[1], mask, bias),
        declared(known.MULTI_HEAD, attend, case=_mha_arguments),
        lambda *case: "head h attends with features h·d_head .. (h+1)·d_head - 1 of q, k and v; out is w_o of the "
        "merged heads" + ("" if case[6] is None else "; the same mask for every head, True = may attend"),
        parts=_WEIGHTS_THEN_OUTPUT, guard=_pair, compare=_judge_without_nan)


judge(_values(MHA_FORWARD))  # no mask: its crashes are what they raised
judge(_values(MHA_MASK))


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
    declared(known.MULTI_HEAD, attend, case=lambda d_model, n, query, key, value, mask, _: (
        _params(d_model, TORCH_SEED, bias=True), *_inputs(query, key, value), n, mask)),
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
        raise mistake(known.W_Q_NOT_USED, what, rows=rows, head=_CHANGED_HEAD)
    said, name = (suspect.message, suspect.name) if suspect else (known.HEADS_MIXED.text(), known.HEADS_MIXED.name)
    raise Mistake(f"{what}: changing only the rows {rows} of w_q (head {_CHANGED_HEAD}'s queries) changed the weights "
                  f"of heads {changed}, expected head {_CHANGED_HEAD} alone — {said}", name)


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
    if ((eval_weights == 0) & (weights != 0)).any():
        raise mistake(known.EVAL_DROPOUT, call=call, found="zeroes some attention weights")
    if not torch.allclose(eval_out, out, atol=1e-5, rtol=1e-4, equal_nan=True):
        raise mistake(known.EVAL_DROPOUT, call=call, found="gives another output than with dropout=0.0")

    what = f"{call} in training mode"
    train_out, train_weights = _tensors(obs["train"], what, (out, weights))
    if tuple(weights.shape) != (x.shape[0], n, x.shape[1], x.shape[1]):  # the shape checks name that mistake
        if torch.allclose(train_out, out, atol=1e-5, rtol=1e-4):
            raise mistake(known.OUTPUT_WITHOUT_DROPOUT, what)
        return
    kept = train_weights != 0
    dropped = (~kept & (weights != 0)).float().mean().item()
    if dropped == 0.0:
        zeroed = ((train_out == 0) & (out != 0)).float().mean().item()
        if zeroed > 0.2:
            raise mistake(known.DROPOUT_ON_OUTPUT, what, zeroed=zeroed)
        if torch.allclose(train_out, out, atol=1e-5, rtol=1e-4):
            raise mistake(known.NOTHING_DROPPED, what)
        raise mistake(known.WEIGHTS_BEFORE_DROPOUT, what)
    if not 0.25 < dropped < 0.75:
        raise mistake(known.DROPOUT_PROBABILITY, what, dropped=dropped, p=p_drop)
    judge_tensor(train_weights[kept], weights[kept] / (1 - p_drop), f"the weights that {what} kept",
                 hint=f"dropout scales the kept weights by 1 / (1 - p) = {1 / (1 - p_drop):g}; nn.Dropout does that")
    params = _params(d_model, seed, bias=True)
    reference = _mha(params, x, x, x, n)
    if weights.shape == reference[1].shape and torch.allclose(weights, reference[1], atol=1e-5, rtol=1e-4) and \
            torch.allclose(out, reference[0], atol=1e-5, rtol=1e-4):
        v = ref.split_heads(x @ params["w_v"][0].T + params["w_v"][1], n)
        expected = ref.merge_heads(train_weights @ v) @ params["w_o"][0].T + params["w_o"][1]
        judge_tensor(train_out, expected, f"the output of {what}, compared with w_o(merge_heads(weights @ v)) for "
                     f"the returned weights", hint=known.OUTPUT_NOT_FROM_DROPPED.text(),
                     mistake=known.OUTPUT_NOT_FROM_DROPPED.name)


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
        raise mistake(known.NAN_GRADIENT, f"the gradient of {what} contains NaN")
    meta = obs["meta"]
    if isinstance(meta, Raised):
        raise mistake(known.DEVICE_RAISED, raised=f"{function}(8, 2) on the `meta` device {meta.describe()}")
    if meta != ("meta", "meta"):
        raise mistake(known.DEVICE_CHANGED, call=f"{function}(8, 2) on the `meta` device", found=f"{meta!r:.80}")


register("MultiHeadAttention_contract", _judge_contract)


# ================================================================ MultiHeadAttention: errors

def _judge_errors(obs: Observations) -> None:
    judge_value_error(obs["divisible"], "MultiHeadAttention(10, 4), where d_model=10 is not a multiple of n_heads=4,",
                      ("10", "4"))
    for key, name in (("d_model", "query"), ("key_width", "key"), ("value_width", "value")):
        judge_value_error(obs[key], f"MultiHeadAttention(16, 4) on {name} (2, 3, 12), whose last axis is not "
                          f"d_model=16,", ("12", "16"))


register("MultiHeadAttention_errors", _judge_errors)


# ================================================================ concept checks

register("head_query_shape_answer", lambda obs: judge_answers(
    obs, _HEAD_SHAPE_CASES, ref.head_query_shape, declared(known.HEAD_QUERY_SHAPE, ref.head_query_shape),
    lambda n, d, h: f"head_query_shape({n}, d_model={d}, n_heads={h})"))
register("attention_parameters_answer", lambda obs: judge_answers(
    obs, _PARAMETER_CASES, ref.attention_parameters,
    declared(known.ATTENTION_PARAMETERS, ref.attention_parameters),
    lambda d, h: f"attention_parameters({d}, n_heads={h})"))
