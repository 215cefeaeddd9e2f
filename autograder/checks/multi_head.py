"""Probes of Chapter 4 (``04_multi_head``), judged in :mod:`autograder.judges.multi_head`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases
are built here from fixed seeds, with plain torch only: the reference is not
in the grading sandbox. Each probe runs the learner's code on them and
returns plain observations.

The module's cases load seeded weights into the learner's ``w_q``, ``w_k``,
``w_v`` and ``w_o`` (:func:`_build`). Several cases have ``T_q == n_heads``:
there a mask whose head axis is in the wrong place still broadcasts, and the
wrong numbers name the mistake.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from autograder.checks.core import (
    Check,
    Observations,
    attempt,
    declare,
    observe_contract,
    probe_answers,
    probe_layers,
    register,
    seeded,
    seeded_mask,
)

NAMES = ("w_q", "w_k", "w_v", "w_o")


# ================================================================ split_heads

SPLIT_CASES = [  # (x (B, T, d_model), n_heads)
    (seeded(2, 8, 12, seed=401), 4),  # T divisible by n_heads: splitting the positions still runs
    (seeded(1, 9, 48, seed=402), 12),  # GPT-2's 12 heads, each of 4 features here
    (seeded(3, 5, 12, seed=403), 3),
    (seeded(2, 3, 8, seed=404), 1),  # one head holds every feature
]
SPLIT_SHAPE = declare(Check("split_heads_shape", SPLIT_CASES))
SPLIT_VALUES = declare(Check("split_heads_values", SPLIT_CASES))


SPLIT_ERRORS = declare(Check("split_heads_errors", [(seeded(2, 3, 10, seed=405), 4)], key="raised"))  # 10 % 4


# ================================================================ merge_heads

MERGE_VALUES = declare(Check("merge_heads_values", [  # (heads (B, n_heads, T, d_head),)
    (seeded(2, 4, 8, 3, seed=411),),
    (seeded(1, 12, 9, 4, seed=412),),
    (seeded(3, 3, 5, 4, seed=413),),
    (seeded(2, 1, 3, 8, seed=414),),
]))


def _split_heads(x: Tensor, n: int) -> Tensor:
    """``split_heads`` in plain torch: (B, T, d_model) -> (B, n, T, d_model / n), a transposed view of ``x``."""
    b, t, d_model = x.shape
    return x.reshape(b, t, n, d_model // n).transpose(1, 2)


MERGE_ROUNDTRIP = declare(Check("merge_heads_roundtrip", [  # (x, n_heads): merge_heads(split_heads(x, n_heads))
    (seeded(2, 6, 12, seed=415), 4), (seeded(1, 9, 48, seed=416), 12), (seeded(3, 2, 10, seed=417), 5),
], call=lambda student, x, n: student(_split_heads(x, n))))


MERGE_ERRORS = declare(Check("merge_heads_errors", [(seeded(2, 7, 9, seed=418),)], key="raised"))  # 3-D heads


# ================================================================ MultiHeadAttention: building and calling

Params = dict[str, tuple[Tensor, Tensor | None]]


def _params(d_model: int, seed: int, bias: bool) -> Params:
    """Seeded weights (and biases) for w_q, w_k, w_v, w_o."""
    return {
        name: (seeded(d_model, d_model, seed=seed + i, scale=d_model**-0.5),
               seeded(d_model, seed=seed + 10 + i, scale=0.3) if bias else None)
        for i, name in enumerate(NAMES)
    }


def _build(cls: Any, d_model: int, n: int, params: Params, dtype: torch.dtype = torch.float32, **kwargs: Any) -> Any:
    """``cls(d_model, n, bias=..., **kwargs)`` with ``params`` copied into whichever projections it has.

    A bias the case does not use is zeroed, so that the value checks do not
    depend on the ``bias`` argument, which the projections check judges.
    """
    module = cls(d_model, n, bias=params["w_q"][1] is not None, **kwargs).to(dtype)
    with torch.no_grad():
        for name, (w, b) in params.items():
            layer = getattr(module, name, None)
            if not isinstance(layer, nn.Linear) or tuple(layer.weight.shape) != tuple(w.shape):
                continue
            layer.weight.copy_(w)
            if layer.bias is not None:
                layer.bias.copy_(b if b is not None else torch.zeros_like(layer.bias))
    return module


def _call(module: Any, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> Any:
    args = (query.clone(), key.clone(), value.clone())
    return module(*args) if mask is None else module(*args, mask.clone())


def _inputs(query: Tensor, key: Tensor | None, value: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    return query, query if key is None else key, query if value is None else value


def _run(student: Any, d_model: int, n: int, bias: bool, query: Tensor, key: Tensor | None, value: Tensor | None,
         mask: Tensor | None, seed: int) -> Any:
    """The learner's module with the seeded weights of ``seed``, on query, key and value (None: query)."""
    return _call(_build(student, d_model, n, _params(d_model, seed, bias)), *_inputs(query, key, value), mask)


# ================================================================ MultiHeadAttention: projections and shapes

SHAPE_SEED = 426
MHA_SHAPES = declare(Check("MultiHeadAttention_shapes", [  # (d_model, n_heads, query, key): value is key
    (16, 4, seeded(2, 5, 16, seed=421), seeded(2, 7, 16, seed=422)),
    (48, 12, seeded(1, 9, 48, seed=423), None),  # self-attention, 12 heads as in GPT-2
    (12, 3, seeded(3, 1, 12, seed=424), seeded(3, 4, 12, seed=425)),
], call=lambda student, d_model, n, query, key: _run(
    student, d_model, n, True, query, key, key, None, SHAPE_SEED), key="results"))

register("MultiHeadAttention_projections",
         probe_layers((("default", (24, 4), {}), ("no_bias", (24, 4), {"bias": False})), NAMES))


# ================================================================ MultiHeadAttention: values

MHA_FORWARD = declare(Check("MultiHeadAttention_forward", [  # (d_model, n_heads, bias, query, key, value, mask, seed)
    (16, 4, True, seeded(2, 5, 16, seed=431), seeded(2, 7, 16, seed=432), seeded(2, 7, 16, seed=433), None, 434),
    (16, 4, False, seeded(2, 6, 16, seed=435), None, None, None, 436),  # self-attention: query = key = value
    (24, 3, True, seeded(1, 3, 24, seed=437), seeded(1, 8, 24, seed=438), seeded(1, 8, 24, seed=439), None, 440),
], call=_run, key="results"))

_PAD = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, :]  # (2, 1, 6): the second row ends in 2 pads
_PER_QUERY = seeded_mask(2, 4, 6, seed=441)
_PER_QUERY[..., 0] = True  # every query keeps a key; the fully masked case is separate
_EMPTY_ROW = torch.tensor([[True, True, False, True, False], [False] * 5])[:, None, :]  # batch row 2: nothing
MHA_MASK = declare(Check("MultiHeadAttention_mask", [  # as MHA_FORWARD's
    (16, 4, True, seeded(2, 6, 16, seed=442), None, None, torch.tril(torch.ones(6, 6, dtype=torch.bool)), 443),
    (16, 4, True, seeded(2, 4, 16, seed=444), None, None, torch.tril(torch.ones(4, 4, dtype=torch.bool)), 445),
    (16, 4, True, seeded(2, 6, 16, seed=446), None, None, _PAD, 447),
    (16, 4, False, seeded(2, 4, 16, seed=448), seeded(2, 6, 16, seed=449), seeded(2, 6, 16, seed=450), _PER_QUERY,
     451),
    (16, 2, True, seeded(2, 3, 16, seed=452), seeded(2, 5, 16, seed=453), seeded(2, 5, 16, seed=454), _EMPTY_ROW,
     455),
], call=_run, key="results"))


# ================================================================ MultiHeadAttention: nn.MultiheadAttention

TORCH_SEED = 468
MHA_TORCH = declare(Check("MultiHeadAttention_matches_torch", [
    # (d_model, n_heads, query, key, value, mask, the same mask in nn.MultiheadAttention's terms)
    (32, 4, seeded(2, 6, 32, seed=461), None, None, _PAD, {"key_padding_mask": ~_PAD[:, 0]}),
    (32, 4, seeded(2, 4, 32, seed=462), seeded(2, 6, 32, seed=463), seeded(2, 6, 32, seed=464), _PER_QUERY,
     {"attn_mask": (~_PER_QUERY).repeat_interleave(4, dim=0)}),  # (B * n_heads, T_q, T_k)
    (24, 6, seeded(1, 5, 24, seed=465), seeded(1, 8, 24, seed=466), seeded(1, 8, 24, seed=467), None, {}),
], call=lambda student, d_model, n, query, key, value, mask, _: _run(
    student, d_model, n, True, query, key, value, mask, TORCH_SEED), key="results"))


# ================================================================ MultiHeadAttention: head independence

_HEAD_CASE = (16, 4, seeded(2, 5, 16, seed=471), 472)  # d_model, n_heads, x, seed
_CHANGED_HEAD = 1


def _changed_params(p: Params, d_model: int, n: int) -> Params:
    rows = slice(_CHANGED_HEAD * d_model // n, (_CHANGED_HEAD + 1) * d_model // n)
    w, b = p["w_q"]
    w, b = w.clone(), b.clone()
    w[rows] += seeded(d_model // n, d_model, seed=473)
    b[rows] += 1.0
    return {**p, "w_q": (w, b)}


def _probe_heads(student: Any) -> Observations:
    d_model, n, x, seed = _HEAD_CASE
    p = _params(d_model, seed, bias=True)
    runs = {}
    for label, params in (("before", p), ("after", _changed_params(p, d_model, n))):
        runs[label] = attempt(lambda params=params: _call(_build(student, d_model, n, params), x, x, x, None))
    return runs


register("MultiHeadAttention_head_independence", _probe_heads)


# ================================================================ MultiHeadAttention: dropout

_DROPOUT_CASE = (16, 4, seeded(2, 6, 16, seed=481), 482, 0.5)  # d_model, n_heads, x, seed, p


def _probe_dropout(student: Any) -> Observations:
    """The learner's module without dropout, then with dropout=p in eval and in training mode, same weights."""
    d_model, n, x, seed, p_drop = _DROPOUT_CASE

    def run(dropout: float, training: bool) -> Any:
        module = _build(student, d_model, n, _params(d_model, seed, bias=True), dropout=dropout)
        module.train(training)
        with torch.random.fork_rng(devices=[]):  # leave the learner's random state as it was
            torch.manual_seed(0)
            return _call(module, x, x, x, None)

    return {"none": attempt(lambda: run(0.0, True)), "eval": attempt(lambda: run(p_drop, False)),
            "train": attempt(lambda: run(p_drop, True))}


register("MultiHeadAttention_dropout", _probe_dropout)


# ================================================================ MultiHeadAttention: contract

_CONTRACT_SIZES = (8, 2, 491)  # d_model, n_heads, seed
_CONTRACT = {  # cross-attention without a mask: the mask checks have their own cell
    "query": seeded(2, 3, 8, seed=493, dtype=torch.float64),
    "key": seeded(2, 5, 8, seed=494, dtype=torch.float64),
    "value": seeded(2, 5, 8, seed=495, dtype=torch.float64),
}
_CONTRACT_SEED = 496
# Self-attention with a padding mask whose second row may attend nothing: its gradient must be 0, not NaN.
# A (B, 1, T) mask with T_q == T_k broadcasts wherever its head axis goes, so only the NaN is judged here.
_EMPTY_X = seeded(2, 4, 8, seed=497, dtype=torch.float64)
_EMPTY_MASK = torch.tensor([[True, False, True, True], [False] * 4])[:, None, :]


def _contract_module(cls: Any) -> Any:
    d_model, n, seed = _CONTRACT_SIZES
    return _build(cls, d_model, n, _params(d_model, seed, bias=True), torch.float64)


def _probe_contract(student: Any) -> Observations:
    obs = observe_contract(lambda query, key, value: _contract_module(student)(query, key, value), _CONTRACT,
                           seed=_CONTRACT_SEED)
    del obs["called"]  # no torch function is forbidden here

    def empty_rows() -> Any:
        x = _EMPTY_X.clone().requires_grad_(True)
        out = _contract_module(student)(x, x, x, _EMPTY_MASK.clone())[0]
        (out * seeded(*out.shape, seed=498, dtype=out.dtype)).sum().backward()
        return x.grad

    def on_meta() -> Any:
        module = student(8, 2).to("meta")
        x = torch.zeros(2, 3, 8, device="meta")
        out, weights = module(x, x, x, torch.ones(2, 1, 3, dtype=torch.bool, device="meta"))
        return str(out.device), str(weights.device)

    obs["empty_grad"] = attempt(empty_rows)
    obs["meta"] = attempt(on_meta)
    return obs


register("MultiHeadAttention_contract", _probe_contract)


# ================================================================ MultiHeadAttention: errors

def _probe_errors(student: Any) -> Observations:
    return {
        "divisible": attempt(lambda: student(10, 4)),
        "d_model": attempt(lambda: student(16, 4)(seeded(2, 3, 12, seed=497), seeded(2, 3, 16, seed=498),
                                                  seeded(2, 3, 16, seed=499))),
        "key_width": attempt(lambda: student(16, 4)(seeded(2, 3, 16, seed=500), seeded(2, 3, 12, seed=501),
                                                    seeded(2, 3, 16, seed=502))),
        "value_width": attempt(lambda: student(16, 4)(seeded(2, 3, 16, seed=503), seeded(2, 3, 16, seed=504),
                                                      seeded(2, 3, 12, seed=505))),
    }


register("MultiHeadAttention_errors", _probe_errors)


# ================================================================ concept checks

_HEAD_SHAPE_CASES = [(12, 1024, 16), (3, 60, 5), (20, 256, 1)]
_PARAMETER_CASES = [(512, 8), (64, 4), (100, 5)]

register("head_query_shape_answer", probe_answers(_HEAD_SHAPE_CASES))
register("attention_parameters_answer", probe_answers(_PARAMETER_CASES))
