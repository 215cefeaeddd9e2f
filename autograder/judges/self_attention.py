"""Judges of Chapter 1 (``01_self_attention``), against :mod:`solutions.self_attention`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.self_attention`. Each ``Suspect``
recomputes, on the same inputs, what one plausible mistake would return, so
that a failing learner is told which mistake it looks like.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from attention_course.testing import GRAPH_CUT, LIBRARY_CALL, NO_RETURN
from autograder.checks.core import Mistake, Observations, Raised, load_weights, projection_weights, seeded
from autograder.checks.self_attention import (
    _SCORE_COUNT_CASES,
    _SCORE_POSITION_CASES,
    _SCORES_CONTRACT,
    _SDPA_CONTRACT,
    _SOFTMAX_CONTRACT,
    NEG_INF,
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
    Suspect,
    contract_check,
    describe,
    judge,
    judge_answers,
    judge_projections,
    judge_tensor,
    judge_value_error,
    register,
    type_name,
)
from solutions import self_attention as ref

LIBRARY_SOFTMAX = ("softmax", "log_softmax", "_softmax", "softmin")


# ================================================================ softmax

def _exp_over_sum(x: Tensor, dim: int, keepdim: bool = True) -> Tensor:
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=keepdim)


def _softmax_suspects(x: Tensor, dim: int) -> list[Suspect]:
    others = [d for d in range(x.dim()) if d != dim % x.dim()]
    return [
        *(
            Suspect(
                f"it sums to 1 along dim {d}, not along dim={dim} — take the max and the sum along the `dim` "
                f"argument", "softmax over the wrong axis",
                lambda d=d: ref.softmax(x, d),
            )
            for d in others
        ),
        *(
            Suspect(
                "the sum lost its axis, so it broadcasts against the wrong one — use `.sum(dim=dim, keepdim=True)`",
                "forgot keepdim",
                lambda shift=shift: _exp_over_sum(x - shift, dim, keepdim=False),
            )
            for shift in (0.0, x.amax(dim=dim, keepdim=True))
        ),
        Suspect(
            "it divides by the sum over the whole tensor; sum only along `dim`", "normalised over everything",
            lambda: torch.exp(x) / torch.exp(x).sum(),
        ),
        Suspect("it is not normalised: divide exp(x) by its sum along `dim`", "missing the division",
                lambda: torch.exp(x)),
        Suspect("it forgot the exponential: softmax is exp(x) / sum(exp(x)), not x / sum(x)", "missing the exponential",
                lambda: x / x.sum(dim=dim, keepdim=True)),
    ]


def _stable_suspects(x: Tensor, dim: int) -> list[Suspect]:
    return [
        Suspect(
            "exp overflows for large inputs (exp(89) is already inf in float32), giving inf/inf = NaN — "
            "subtract the maximum along `dim` before exponentiating; the result is mathematically unchanged",
            "overflowing softmax",
            lambda: _exp_over_sum(x, dim),
        ),
        Suspect(
            "it subtracts the maximum of the whole tensor, so slices far below it underflow to 0/0 = NaN — "
            "subtract each slice's own maximum, `x.amax(dim=dim, keepdim=True)`", "global instead of per-slice max",
            lambda: _exp_over_sum(x - x.max(), dim),
        ),
        Suspect(
            "it subtracts the maximum of the whole tensor, so slices far below it underflow to all zeros — "
            "subtract each slice's own maximum, `x.amax(dim=dim, keepdim=True)`", "global instead of per-slice max",
            lambda: _exp_over_sum(x - x.max(), dim).nan_to_num(0.0),
        ),
        *_softmax_suspects(x, dim),
    ]


def _masked_suspects(x: Tensor, dim: int) -> list[Suspect]:
    finite_min = x.masked_fill(torch.isinf(x), torch.finfo(x.dtype).min)
    return [
        Suspect(
            "a slice that is entirely -inf (a query whose keys are all masked) gives NaN: its maximum is -inf "
            "and -inf - (-inf) is NaN — use 0 where the maximum is not finite, and divide by 1 where the sum "
            "is 0, so the slice comes out all zeros", "NaN on fully masked rows",
            lambda: _exp_over_sum(x - x.amax(dim=dim, keepdim=True), dim),
        ),
        Suspect(
            "a slice that is entirely -inf gives equal weights instead of zeros — if you replace -inf by a "
            "large negative number, zero those slices afterwards", "large negative number instead of -inf",
            lambda: ref.softmax(finite_min, dim),
        ),
        *_softmax_suspects(x, dim),
    ]


judge(Compare(SOFTMAX_VALUES, ref.softmax, lambda x, dim: f"softmax(x of shape {tuple(x.shape)}, dim={dim})",
              _softmax_suspects))
judge(Compare(SOFTMAX_STABLE, ref.softmax, lambda x, _: f"softmax of large inputs (up to {x.abs().max().item():.0f})",
              _stable_suspects, hint="subtract the maximum along `dim` before exp"))
judge(Compare(SOFTMAX_MASKED, ref.softmax, lambda _, dim: f"softmax(x with -inf entries, dim={dim})",
              _masked_suspects, hint="entries of -inf get weight 0, and an all -inf slice gives zeros"))


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

def _score_suspects(q: Tensor, k: Tensor) -> list[Suspect]:
    d_k = q.shape[-1]
    raw = lambda: q @ k.transpose(-2, -1)  # noqa: E731
    return [
        Suspect(f"it is not scaled — divide q kᵀ by √d_k = {math.sqrt(d_k):g}", "no scaling", raw),
        Suspect(f"it divides by d_k = {d_k} instead of √d_k = {math.sqrt(d_k):g}", "dividing by d_k",
                lambda: raw() / d_k),
        Suspect("it multiplies by √d_k instead of dividing by it",
                "multiplied by √d_k", lambda: raw() * math.sqrt(d_k)),
        Suspect(f"it divides by √T_k = √{k.shape[-2]}, the number of keys, instead of √d_k — d_k is the last axis "
                f"of q and k", "scaled by the number of keys", lambda: raw() / math.sqrt(k.shape[-2])),
        Suspect("`k.T` reverses every axis of a batched tensor — transpose only the last two axes with "
                "`k.transpose(-2, -1)` or `k.mT`", "k.T on batched keys",
                lambda: q @ k.permute(*reversed(range(k.dim()))) / math.sqrt(d_k)),
        Suspect("the scores are transposed: row i must belong to query i — compute q @ kᵀ, not k @ qᵀ",
                "transposed scores", lambda: ref.attention_scores(k, q)),
    ]


judge(Compare(SCORES_VALUES, ref.attention_scores,
              lambda q, k: f"attention_scores(q {tuple(q.shape)}, k {tuple(k.shape)})", _score_suspects))
register(
    "attention_scores_checks_shapes",
    lambda obs: judge_value_error(obs["raised"], "attention_scores(q (2, 3, 4), k (2, 5, 6)) with d_k 4 against 6",
                                   ("4", "6")),
)
register("attention_scores_contract", contract_check(ref.attention_scores, _SCORES_CONTRACT, 69, "attention_scores"))


# ================================================================ scaled_dot_product_attention

def _sdpa_suspects(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> list[Suspect]:
    """Suspects for scaled_dot_product_attention, each producing ``(out, weights)``."""
    d_k = q.shape[-1]
    raw = q @ k.transpose(-2, -1)

    def attend(scores: Tensor, values: Tensor = v, dim: int = -1) -> tuple[Tensor, Tensor]:
        weights = ref.softmax(scores, dim)
        return weights @ values, weights

    def masked(scores: Tensor, fill: float, keep: Tensor | None = mask) -> Tensor:
        return scores if keep is None else scores.masked_fill(~keep, fill)

    scores = raw / math.sqrt(d_k)
    suspects = [
        Suspect("the softmax runs over the query axis (dim=-2); each query's weights must sum to 1 over the "
                "keys, dim=-1", "softmax over the wrong axis", lambda: attend(masked(scores, NEG_INF), dim=-2)),
        Suspect(f"the scores are not scaled — divide q kᵀ by √d_k = {math.sqrt(d_k):g}", "no scaling",
                lambda: attend(masked(raw, NEG_INF))),
        Suspect(f"the scores are divided by d_k = {d_k} instead of √d_k", "dividing by d_k",
                lambda: attend(masked(raw / d_k, NEG_INF))),
        # these two get the weights right: they can only name a wrong output
        Suspect("the output is weights @ k — the keys were used as values; multiply the weights by v",
                "keys used as values", lambda: attend(masked(scores, NEG_INF), values=k)),
        Suspect("the output is weights @ q — the queries were used as values; multiply the weights by v",
                "queries used as values", lambda: attend(masked(scores, NEG_INF), values=q)),
    ]
    if mask is not None:
        suspects += [
            Suspect("the mask is applied after the softmax: masked keys get 0 but the rows no longer sum to 1 — "
                    "fill masked scores with -inf before the softmax", "mask applied after the softmax",
                    lambda: (ref.softmax(scores) * mask @ v, ref.softmax(scores) * mask)),
            Suspect("masked scores are filled with 0, and exp(0) = 1 still gives those keys weight — fill them "
                    "with -inf", "mask filled with 0 instead of -inf", lambda: attend(masked(scores, 0.0))),
            Suspect("the mask is inverted: True means 'may attend' (as in F.scaled_dot_product_attention), so block "
                    "where the mask is False", "inverted mask", lambda: attend(masked(scores, NEG_INF, keep=~mask))),
            Suspect("the boolean mask was added to the scores (True counts as 1) instead of blocking keys — use "
                    "`scores.masked_fill(~mask, float('-inf'))`", "mask added as numbers",
                    lambda: attend(scores + mask)),
            Suspect("the mask is ignored: masked keys still get weight", "mask ignored", lambda: attend(scores)),
        ]
    return suspects


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
        raise Mistake(f"{what} returned weights first — return out, then weights", "out and weights swapped")


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
        raise Mistake(
            f"{what}: a query whose keys are all masked gets NaN, since the softmax of a row of -inf is 0/0 — "
            f"such a row must give all-zero weights and an all-zero output", "NaN on fully masked rows")
    expected = ref.scaled_dot_product_attention(q, k, v, mask)[1]
    if weights.shape != expected.shape or not torch.allclose(
            weights[~dead].double(), expected[~dead].double(), atol=1e-5, rtol=1e-4):
        return  # the other queries are wrong too: the mask judge below names that mistake
    if torch.allclose(rows, torch.full_like(rows, 1.0 / k.shape[-2]), atol=1e-4):
        raise Mistake(
            f"{what}: a query whose keys are all masked gets equal weights 1/T_k — that is what filling with a "
            f"large negative number such as -1e9 does; fill with -inf and make such rows all zeros",
            "large negative number instead of -inf")
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
            raise Mistake(f"{what} returned weights first — return out, then weights", "out and weights swapped")
        for got, want, name in ((result[0], out, "out"), (result[1], weights, "weights")):
            if not isinstance(got, Tensor) or got.shape != want.shape:
                shape = tuple(got.shape) if isinstance(got, Tensor) else type_name(got)
                raise Mistake(f"{what}: `{name}` has shape {shape}, expected {tuple(want.shape)}; out is "
                              f"(..., T_q, d_v) and weights (..., T_q, T_k), in that order")


register("scaled_dot_product_attention_shapes", _judge_sdpa_shapes)
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


def _forward_suspects(d_model: int, d_k: int, d_v: int, x: Tensor, mask: Tensor | None, seed: int) -> list[Suspect]:
    """Suspects for SelfAttention's forward, each producing ``(out, weights)``."""
    q, k, v = _projected(d_model, d_k, d_v, x, mask, seed)
    attend = ref.scaled_dot_product_attention
    return [
        Suspect("the values are the input x itself — project them with w_v", "values not projected",
                lambda: attend(q, k, x, mask)),
        Suspect("the keys are computed with w_q — keys come from w_k",
                "keys computed with w_q", lambda: attend(q, q, v, mask)),
        Suspect("the mask is not passed on to the attention — forward(x, mask) must use it", "mask ignored",
                lambda: attend(q, k, v)),
        Suspect("the scores are scaled by √d_model instead of √d_k, the width of q and k",
                "scaled by √d_model instead of √d_k", lambda: attend(q * math.sqrt(d_k / d_model), k, v, mask)),
    ]


def _a_pair_from_forward(result: Any, what: str, *case: Any) -> None:
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Mistake(f"{what} should return a tuple (out, weights) from forward; got {result!r:.80}")


def _forward_reference(d_model: int, d_k: int, d_v: int, x: Tensor, mask: Tensor | None, seed: int) -> Any:
    return ref.scaled_dot_product_attention(*_projected(d_model, d_k, d_v, x, mask, seed), mask)


def _forward_what(d_model: int, d_k: int, d_v: int, x: Tensor, mask: Tensor | None, seed: int) -> str:
    return f"SelfAttention({d_model}, {d_k}, {d_v}) on x {tuple(x.shape)}" + ("" if mask is None else " with a mask")


judge(Compare(SELF_ATTENTION_FORWARD, _forward_reference, _forward_what, _forward_suspects,
              parts=_WEIGHTS_THEN_OUTPUT, guard=_a_pair_from_forward))


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


register("SelfAttention_projections", lambda obs: judge_projections(obs, "SelfAttention"))
register("SelfAttention_gradients", _judge_module_gradients)


# ================================================================ concept checks

def _score_position_suspects(query: int, key: int) -> list[Suspect]:
    return [
        Suspect("row i of Q Kᵀ holds query i's dot products, so the row is the query's and the column the key's; K Qᵀ "
                "is the transpose, not the same matrix",
                "K·Qᵀ for Q·Kᵀ", lambda: (key, query)),
        Suspect("positions count from 0, as Python's indices do",
                "positions counted from 1", lambda: (query + 1, key + 1)),
    ]


def _score_count_suspects(n: int) -> list[Suspect]:
    return [
        Suspect("every query is compared with every key, so doubling the length quadruples the work and the memory: a "
                "context is not free, let alone infinite", "cost taken as linear in the length", lambda: n),
        Suspect("without a mask every query meets every key; the causal mask of Chapter 2 blocks the upper half, but "
                "even then all n × n scores are computed",
                "only the causal half counted", lambda: n * (n + 1) // 2),
        Suspect("a token's query meets its own key too", "own score left out", lambda: n * (n - 1)),
    ]


register("score_position_answer", lambda obs: judge_answers(
    obs, _SCORE_POSITION_CASES, ref.score_position, _score_position_suspects, lambda q, k: f"score_position({q}, {k})"))
register("score_count_answer", lambda obs: judge_answers(
    obs, _SCORE_COUNT_CASES, ref.score_count, _score_count_suspects, lambda n: f"score_count({n})"))
