"""Probes of Chapter 1 (``01_self_attention``), judged in :mod:`autograder.judges.self_attention`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases
are built here from fixed seeds, with plain torch only: the reference is not
in the grading sandbox. Each probe runs the learner's code on them and
returns plain observations.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from autograder.checks.core import (
    Check,
    Observations,
    Raised,
    attempt,
    declare,
    load_weights,
    observe_contract,
    odd_tensor,
    plain,
    probe_answers,
    probe_projections,
    projection_weights,
    recording_torch_calls,
    register,
    seeded,
    seeded_mask,
)

NEG_INF = float("-inf")


def _with_neg_inf(seed: int, slice_: tuple) -> Tensor:
    """A (3, 4, 5) input with -inf entries, and -inf over the whole of ``x[slice_]``."""
    x = seeded(3, 4, 5, seed=seed).masked_fill(~seeded_mask(3, 4, 5, seed=seed + 1), NEG_INF)
    x[slice_] = NEG_INF
    return x


# ================================================================ softmax

def _softmax_call(student: Any, x: Tensor, dim: int | None) -> Any:
    """``softmax(x, dim)``, or ``softmax(x)`` for a case whose ``dim`` is None: the default must be -1."""
    return student(x) if dim is None else student(x, dim)


SOFTMAX_VALUES = declare(Check("softmax_sums_to_one", [
    (seeded(2, 3, 5, seed=11), -1),
    (seeded(2, 3, 5, seed=12), 1),
    (seeded(4, 4, seed=13), 0),
    (seeded(5, 5, seed=15), -1),
    (seeded(3, 4, seed=14, scale=3.0), -1),
    (seeded(4, 6, seed=16), None),  # dim left to its default, -1
], call=_softmax_call))
SOFTMAX_STABLE = declare(Check("softmax_stable", [
    (seeded(3, 6, seed=21, scale=1000.0), -1),
    (seeded(4, 5, seed=22) + torch.tensor([[0.0], [-3000.0], [500.0], [-90.0]]), -1),
]))
SOFTMAX_MASKED = declare(Check("softmax_masked_entries", [  # -inf entries, and slices that are entirely -inf
    (_with_neg_inf(31, (0, 1)), -1),
    (_with_neg_inf(33, (1, slice(None), 2)), 1),
]))


def _probe_softmax_library(student: Any) -> Observations:
    with recording_torch_calls() as called:
        result = attempt(lambda: student(seeded(3, 5, seed=41), -1))
    return {"called": sorted(called), "result": result}


_SOFTMAX_CONTRACT = {"x": seeded(3, 4, 5, seed=51, dtype=torch.float64)}

register("softmax_no_library", _probe_softmax_library)
register("softmax_contract", lambda student: observe_contract(lambda x: student(x, 1), _SOFTMAX_CONTRACT, seed=52))


# ================================================================ attention_scores

SCORES_VALUES = declare(Check("attention_scores_values", [
    (seeded(2, 4, 3, 16, seed=61), seeded(2, 4, 7, 16, seed=62)),
    (seeded(2, 5, 16, seed=63), seeded(2, 5, 16, seed=64)),
    (seeded(3, 3, 3, seed=60), seeded(3, 3, 3, seed=59)),
]))


def _probe_scores_errors(student: Any) -> Observations:
    return {"raised": attempt(lambda: student(seeded(2, 3, 4, seed=65), seeded(2, 5, 6, seed=66)))}


_SCORES_CONTRACT = {"q": seeded(2, 3, 8, seed=67, dtype=torch.float64),
                    "k": seeded(2, 5, 8, seed=68, dtype=torch.float64)}

register("attention_scores_checks_shapes", _probe_scores_errors)
register("attention_scores_contract", lambda student: observe_contract(student, _SCORES_CONTRACT, seed=69))


# ================================================================ scaled_dot_product_attention

def _mask(*shape: int, seed: int, keep: tuple) -> Tensor:
    """A seeded boolean mask, True over ``mask[keep]`` (a key every query keeps)."""
    mask = seeded_mask(*shape, seed=seed)
    mask[keep] = True
    return mask


SDPA_PLAIN_CASES = [  # (q, k, v): no mask
    (seeded(2, 3, 4, 8, seed=71), seeded(2, 3, 6, 8, seed=72), seeded(2, 3, 6, 5, seed=73)),
    (seeded(1, 5, 16, seed=74), seeded(1, 5, 16, seed=75), seeded(1, 5, 16, seed=76)),
]
SDPA_SHAPES = declare(Check("scaled_dot_product_attention_shapes", SDPA_PLAIN_CASES, key="results"))
SDPA_VALUES = declare(Check("scaled_dot_product_attention_matches_torch", SDPA_PLAIN_CASES, key="results"))
SDPA_MASK = declare(Check("scaled_dot_product_attention_mask", [  # (q, k, v, mask); no fully masked row here
    (seeded(2, 2, 5, 8, seed=79), seeded(2, 2, 6, 8, seed=80), seeded(2, 2, 6, 4, seed=81),
     _mask(5, 6, seed=77, keep=(slice(None), 0))),
    (seeded(2, 3, 5, 8, seed=82), seeded(2, 3, 5, 8, seed=83), seeded(2, 3, 5, 8, seed=84),
     _mask(2, 1, 5, 5, seed=78, keep=(..., 0))),
], key="results"))
_DEAD_ROWS = _mask(2, 4, 6, seed=85, keep=(slice(None), slice(None), 0))
_DEAD_ROWS[0, 1] = False  # query 1 of batch 0 may attend nothing
_DEAD_ROWS[1, 3] = False
SDPA_FULLY_MASKED = declare(Check("scaled_dot_product_attention_fully_masked", [
    (seeded(2, 4, 8, seed=86), seeded(2, 6, 8, seed=87), seeded(2, 6, 3, seed=88), _DEAD_ROWS),
], key="results"))


def _probe_sdpa_errors(student: Any) -> Observations:
    q, k, v = seeded(2, 3, 4, seed=91), seeded(2, 5, 4, seed=92), seeded(2, 5, 6, seed=93)
    return {
        "float_mask": attempt(lambda: student(q, k, v, torch.ones(3, 5))),
        "int_mask": attempt(lambda: student(q, k, v, torch.ones(3, 5, dtype=torch.int64))),
        "d_k": attempt(lambda: student(q, seeded(2, 5, 7, seed=94), v)),
    }


_SDPA_CONTRACT = {
    "q": seeded(2, 3, 6, seed=96, dtype=torch.float64),
    "k": seeded(2, 5, 6, seed=97, dtype=torch.float64),
    "v": seeded(2, 5, 4, seed=98, dtype=torch.float64),
    "mask": _mask(2, 3, 5, seed=95, keep=(..., 1)),
}
_SDPA_CONTRACT["mask"][0, 2] = False  # a fully masked row: its gradient must be 0, not NaN

register("scaled_dot_product_attention_gradients",
         lambda student: observe_contract(student, _SDPA_CONTRACT, seed=99))
register("scaled_dot_product_attention_errors", _probe_sdpa_errors)


# ================================================================ SelfAttention

def _run_self_attention(student: Any, d_model: int, d_k: int, d_v: int, x: Tensor, mask: Tensor | None,
                        seed: int) -> Any:
    """``SelfAttention(d_model, d_k, d_v)`` with the seeded projection weights, on ``x`` and ``mask``; without a mask
    it is called as ``forward(x)``: the mask defaults to None."""
    module = load_weights(student(d_model, d_k, d_v), projection_weights(d_model, d_k, d_v, seed))
    return module(x) if mask is None else module(x, mask)


SELF_ATTENTION_FORWARD = declare(Check("SelfAttention_forward", [  # (d_model, d_k, d_v, x, mask, seed)
    (16, 8, 6, seeded(2, 5, 16, seed=101), None, 102),
    (8, 4, 8, seeded(2, 6, 8, seed=103), torch.tril(torch.ones(6, 6, dtype=torch.bool)), 104),
], call=_run_self_attention, key="results"))


def _output_depends_on(module: Any, name: str, x: Tensor, mask: Tensor | None, out: Tensor) -> bool | None:
    """Whether doubling the weight of ``module.<name>`` changes the output (None when that cannot be run):
    a projection the output depends on, yet without a gradient, was cut off from the graph."""
    try:
        with torch.no_grad():
            weight = getattr(module, name).weight
            weight.mul_(2.0)
            changed = not torch.allclose(module(x.clone(), mask)[0], out.detach())
            weight.div_(2.0)
        return bool(changed)
    except Exception:
        return None


def _probe_module_gradients(student: Any) -> Observations:
    d_model, d_k, d_v, x, mask, seed = SELF_ATTENTION_FORWARD.cases[1]

    def run() -> dict[str, Any]:
        module = load_weights(student(d_model, d_k, d_v), projection_weights(d_model, d_k, d_v, seed))
        result = module(x.clone(), mask)
        out = result[0] if isinstance(result, tuple) and len(result) == 2 else None
        if not (isinstance(out, Tensor) and out.requires_grad and odd_tensor(out) is None):
            return {"returned": plain(result)}  # no output in the graph to take the gradient of
        (out * seeded(*out.shape, seed=105)).sum().backward()
        grads = {name: plain(getattr(module, name).weight.grad) for name in ("w_q", "w_k", "w_v")}
        return {**grads, "used": {name: _output_depends_on(module, name, x, mask, out) for name in grads}}

    try:
        return run()
    except Exception as err:
        return {"raised": Raised(type(err).__name__, str(err))}


register("SelfAttention_projections", probe_projections)
register("SelfAttention_gradients", _probe_module_gradients)


# ================================================================ concept checks

_SCORE_POSITION_CASES = [(2, 5), (6, 1), (0, 9)]
_SCORE_COUNT_CASES = [(4096,), (2,), (50,)]

register("score_position_answer", probe_answers(_SCORE_POSITION_CASES))
register("score_count_answer", probe_answers(_SCORE_COUNT_CASES))
