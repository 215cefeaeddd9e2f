"""Judges of Chapter 1 (``01_self_attention``), against :mod:`solutions.self_attention`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.self_attention`. Every named mistake is
declared once, in :mod:`attention_course.mistakes.self_attention`, which the
visible checks use too: the judges pass the reference as ``right``
(``declared(known.GROUP, reference)``) and raise the value-free ones with
``mistake(known.NAME, what, **fields)``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attention_course.mistakes import self_attention as known
from attention_course.testing import GRAPH_CUT, LIBRARY_CALL, NO_RETURN
from autograder.checks.core import (
    Mistake,
    Observations,
    Raised,
    load_weights,
    projection_weights,
    seeded,
)
from autograder.checks.self_attention import (
    _SCORE_COUNT_CASES,
    _SCORE_POSITION_CASES,
    _SCORES_CONTRACT,
    _SDPA_CONTRACT,
    _SOFTMAX_CONTRACT,
    SCORES_VALUES,
    SDPA_FULLY_MASKED,
    SDPA_MASK,
    SDPA_SHAPES,
    SDPA_VALUES,
    SELF_ATTENTION_FORWARD,
    SOFTMAX_MASKED,
    SOFTMAX_STABLE,
    SOFTMAX_VALUES,
)
from autograder.judges.core import (
    Compare,
    contract_check,
    declared,
    describe,
    judge,
    judge_answers,
    judge_projections,
    judge_tensor,
    judge_value_error,
    mistake,
    register,
    type_name,
)
from solutions import self_attention as ref

LIBRARY_SOFTMAX = ("softmax", "log_softmax", "_softmax", "softmin")


# ================================================================ softmax

def _default_dim(x: Tensor, dim: int | None) -> tuple[Tensor, int]:
    """A case of softmax_sums_to_one with its dim: None stands for the default, -1."""
    return x, -1 if dim is None else dim


judge(Compare(SOFTMAX_VALUES, lambda x, dim: ref.softmax(*_default_dim(x, dim)),
              lambda x, dim: f"softmax(x of shape {tuple(x.shape)}" + ("" if dim is None else f", dim={dim}") + ")",
              declared(known.SOFTMAX, ref.softmax, case=_default_dim)))
judge(Compare(SOFTMAX_STABLE, ref.softmax, lambda x, _: f"softmax of large inputs (up to {x.abs().max().item():.0f})",
              declared(known.SOFTMAX_STABLE, ref.softmax), hint="subtract the maximum along `dim` before exp"))
judge(Compare(SOFTMAX_MASKED, ref.softmax, lambda _, dim: f"softmax(x with -inf entries, dim={dim})",
              declared(known.SOFTMAX_MASKED, ref.softmax),
              hint="entries of -inf get weight 0, and an all -inf slice gives zeros"))


def _judge_softmax_library(obs: Observations) -> None:
    used = [name for name in LIBRARY_SOFTMAX if name in obs["called"]]
    if used:
        raise Mistake(f"softmax calls torch's `{used[0]}` — the exercise asks you to write softmax "
                      f"yourself from exp, max and sum", LIBRARY_CALL)
    result = obs["result"]
    if isinstance(result, Raised):
        raise Mistake(f"softmax(x of shape (3, 5)) {result.describe()}")
    if not (isinstance(result, Tensor) and result.shape == (3, 5)):
        raise Mistake(f"softmax(x of shape (3, 5)) should return a tensor of shape (3, 5), got {describe(result)}",
                      NO_RETURN if result is None else None)


register("softmax_no_library", _judge_softmax_library)
register("softmax_contract", contract_check(lambda x: ref.softmax(x, 1), _SOFTMAX_CONTRACT, 52, "softmax",
                                            {name: "write softmax yourself" for name in LIBRARY_SOFTMAX}))


# ================================================================ attention_scores

judge(Compare(SCORES_VALUES, ref.attention_scores,
              lambda q, k: f"attention_scores(q {tuple(q.shape)}, k {tuple(k.shape)})",
              declared(known.SCORES, ref.attention_scores)))
register(
    "attention_scores_checks_shapes",
    lambda obs: judge_value_error(obs["raised"], "attention_scores(q (2, 3, 4), k (2, 5, 6)) with d_k 4 against 6",
                                   ("4", "6")),
)
register("attention_scores_contract", contract_check(ref.attention_scores, _SCORES_CONTRACT, 69, "attention_scores"))


# ================================================================ scaled_dot_product_attention

def _sdpa_what(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> str:
    return f"scaled_dot_product_attention(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}" + (
        ")" if mask is None else f", mask {tuple(mask.shape)})")


def _out_then_weights(result: Any, what: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> None:
    """The guard of scaled_dot_product_attention's values: a pair, out first."""
    out, weights = ref.scaled_dot_product_attention(q, k, v, mask)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Mistake(f"{what} should return a tuple (out, weights); got {result!r:.80}")
    got_out, got_weights = result
    if (isinstance(got_out, Tensor) and isinstance(got_weights, Tensor) and got_out.shape == weights.shape
            and got_weights.shape == out.shape and out.shape != weights.shape):
        raise mistake(known.SWAPPED, what)


def _zeros_on_dead_rows(result: Any, what: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> None:
    """The guard of the fully masked case: a query that may attend no key gets zeros, not NaN; then a pair,
    out first (:func:`_out_then_weights`)."""
    _dead_rows_are_zero(result, what, q, k, v, mask)
    _out_then_weights(result, what, q, k, v, mask)


def _dead_rows_are_zero(result: Any, what: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> None:
    if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(t, Tensor) for t in result)):
        return  # the shape judge explains
    out, weights = result
    dead = ~mask.any(dim=-1)  # (B, T_q): queries that may attend no key
    if weights.shape[:-1] != dead.shape or out.shape[:-1] != dead.shape:
        return
    rows, outs = weights[dead], out[dead]
    if torch.isnan(rows).any() or torch.isnan(outs).any():
        raise mistake(known.DEAD_ROWS_NAN, what)
    expected = ref.scaled_dot_product_attention(q, k, v, mask)[1]
    if weights.shape != expected.shape or not torch.allclose(
            weights[~dead].double(), expected[~dead].double(), atol=1e-5, rtol=1e-4):
        return  # the other queries are wrong too: the mask judge below names that mistake
    if torch.allclose(rows, torch.full_like(rows, 1.0 / k.shape[-2]), atol=1e-4):
        raise mistake(known.DEAD_ROWS_EQUAL, what)
    if not (torch.equal(rows, torch.zeros_like(rows)) and torch.allclose(outs, torch.zeros_like(outs))):
        raise Mistake(f"{what}: a query whose keys are all masked must get all-zero weights and output")


def _judge_sdpa_errors(obs: Observations) -> None:
    for key in ("float_mask", "int_mask"):
        judge_value_error(obs[key], f"scaled_dot_product_attention with a {key.split('_')[0]} mask "
                           "(masks must be boolean, True = may attend)", ("bool",))
    judge_value_error(obs["d_k"], "scaled_dot_product_attention with q (2, 3, 4) and k (2, 5, 7)", ("4", "7"))


def _judge_sdpa_shapes(obs: Observations) -> None:
    for (q, k, v), result in zip(SDPA_SHAPES.cases, obs[SDPA_SHAPES.key], strict=True):
        what = f"scaled_dot_product_attention(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)})"
        out, weights = ref.scaled_dot_product_attention(q, k, v)
        if isinstance(result, Raised):
            raise Mistake(f"{what} {result.describe()}")
        if not (isinstance(result, tuple) and len(result) == 2):
            raise Mistake(f"{what} should return a tuple (out, weights); got {result!r:.80}")
        shapes = tuple(tuple(t.shape) if isinstance(t, Tensor) else None for t in result)
        if shapes == (tuple(weights.shape), tuple(out.shape)) and out.shape != weights.shape:
            raise mistake(known.SWAPPED, what)
        for got, want, name in ((result[0], out, "out"), (result[1], weights, "weights")):
            if not isinstance(got, Tensor) or got.shape != want.shape:
                shape = tuple(got.shape) if isinstance(got, Tensor) else type_name(got)
                raise Mistake(f"{what}: `{name}` has shape {shape}, expected {tuple(want.shape)}; out is "
                              f"(..., T_q, d_v) and weights (..., T_q, T_k), in that order")


register("scaled_dot_product_attention_shapes", _judge_sdpa_shapes)
_sdpa_suspects = declared(known.SDPA, ref.scaled_dot_product_attention)
_WEIGHTS_THEN_OUTPUT = ((1, "weights"), (0, "output"))  # the parts of (out, weights), in the order they are judged
judge(Compare(SDPA_VALUES, ref.scaled_dot_product_attention, _sdpa_what, _sdpa_suspects,
              parts=_WEIGHTS_THEN_OUTPUT, guard=_out_then_weights))
judge(Compare(SDPA_MASK, ref.scaled_dot_product_attention, _sdpa_what, _sdpa_suspects,
              parts=_WEIGHTS_THEN_OUTPUT, guard=_out_then_weights))
judge(Compare(SDPA_FULLY_MASKED, ref.scaled_dot_product_attention, _sdpa_what, _sdpa_suspects,
              parts=_WEIGHTS_THEN_OUTPUT, guard=_zeros_on_dead_rows))
register(
    "scaled_dot_product_attention_gradients",
    contract_check(
        ref.scaled_dot_product_attention, _SDPA_CONTRACT, 99, "scaled_dot_product_attention",
        {"scaled_dot_product_attention": "the exercise asks you to write attention yourself, not to call "
         "F.scaled_dot_product_attention (calling the library function)"}),
)
register("scaled_dot_product_attention_errors", _judge_sdpa_errors)


# ================================================================ SelfAttention

def _projected(d_model: int, d_k: int, d_v: int, x: Tensor, mask: Tensor | None, seed: int) -> tuple[Tensor, ...]:
    """q, k, v of ``x`` through the seeded projection weights of the case."""
    w = projection_weights(d_model, d_k, d_v, seed)
    return x @ w["w_q"].T, x @ w["w_k"].T, x @ w["w_v"].T


def _a_pair_from_forward(result: Any, what: str, *case: Any) -> None:
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Mistake(f"{what} should return a tuple (out, weights) from forward; got {result!r:.80}")


def _forward_reference(d_model: int, d_k: int, d_v: int, x: Tensor, mask: Tensor | None, seed: int) -> Any:
    return ref.scaled_dot_product_attention(*_projected(d_model, d_k, d_v, x, mask, seed), mask)


def _forward_what(d_model: int, d_k: int, d_v: int, x: Tensor, mask: Tensor | None, seed: int) -> str:
    return f"SelfAttention({d_model}, {d_k}, {d_v}) on x {tuple(x.shape)}" + ("" if mask is None else " with a mask")


_forward_suspects = declared(known.FORWARD, ref.scaled_dot_product_attention,
                             case=lambda d_model, d_k, d_v, x, mask, seed: (
                                 *_projected(d_model, d_k, d_v, x, mask, seed), x, mask))
def _forward_crashed(raised: Raised, what: str, d_model: int, d_k: int, d_v: int, x: Tensor, mask: Tensor | None,
                     seed: int) -> Mistake:
    if mask is None and raised.type == "TypeError" and "mask" in raised.message:
        return mistake(known.MASK_WITHOUT_DEFAULT, f"{what}, called as forward(x)")
    return Mistake(f"{what} {raised.describe()}")


judge(Compare(SELF_ATTENTION_FORWARD, _forward_reference, _forward_what, _forward_suspects,
              parts=_WEIGHTS_THEN_OUTPUT, guard=_a_pair_from_forward, crashed=_forward_crashed))


def _judge_module_gradients(obs: Observations) -> None:
    d_model, d_k, d_v, x, mask, seed = SELF_ATTENTION_FORWARD.cases[1]
    call = f"SelfAttention({d_model}, {d_k}, {d_v})"
    if "raised" in obs:
        raise Mistake(f"{call}: forward and backward {obs['raised'].describe()}")
    if "returned" in obs:  # no output in the graph
        result = obs["returned"]
        if not (isinstance(result, tuple) and len(result) == 2):
            raise Mistake(f"{call} should return a tuple (out, weights) from forward; got {describe(result)}")
        if isinstance(result[0], Tensor):
            raise Mistake(f"the output of {call} is cut off from the graph (requires_grad is False) — avoid "
                          f"`.detach()`, `.data` and `torch.no_grad()` in forward", GRAPH_CUT)
        raise Mistake(f"{call}: `out` should be a tensor, got {describe(result[0])}")
    used = obs["used"]  # {name: whether doubling that projection's weight changes the output}
    module = load_weights(ref.SelfAttention(d_model, d_k, d_v), projection_weights(d_model, d_k, d_v, seed))
    out, _ = module(x, mask)
    (out * seeded(*out.shape, seed=105)).sum().backward()
    for name in ("w_q", "w_k", "w_v"):
        if obs[name] is None:
            if used[name] is True:  # the output depends on it, yet no gradient reached it: the graph was cut
                raise Mistake(f"SelfAttention.{name} received no gradient, though the output depends on it "
                              f"— something on the way detaches it: `torch.no_grad()`, `.detach()`, `.data`",
                              GRAPH_CUT)
            raise Mistake(f"SelfAttention.{name} received no gradient — is it used in forward, and is nothing "
                          f"detached on the way?")
        judge_tensor(obs[name], getattr(module, name).weight.grad, f"the gradient of SelfAttention.{name}.weight")


register("SelfAttention_projections",
         lambda obs: judge_projections(obs, "SelfAttention", known.BIAS_IGNORED, known.W_V_OF_D_K))
register("SelfAttention_gradients", _judge_module_gradients)


# ================================================================ concept checks

register("score_position_answer", lambda obs: judge_answers(
    obs, _SCORE_POSITION_CASES, ref.score_position,
    declared(known.SCORE_POSITION, ref.score_position), lambda q, k: f"score_position({q}, {k})"))
register("score_count_answer", lambda obs: judge_answers(
    obs, _SCORE_COUNT_CASES, ref.score_count, declared(known.SCORE_COUNT, ref.score_count),
    lambda n: f"score_count({n})"))
