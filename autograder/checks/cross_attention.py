"""Probes of Chapter 3 (``03_cross_attention``), judged in :mod:`autograder.judges.cross_attention`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases
are built here from fixed seeds, with plain torch only: the reference is not
in the grading sandbox. Each probe runs the learner's code on them and
returns plain observations.

Token ids in the cases follow the chapter's small vocabulary where it helps:
``<pad>`` 0, ``<start>`` 1, ``<end>`` 2, ``I`` 3, ``love`` 4, ``easy`` 5,
``courses`` 6; other cases use other ids (``pad_id`` 9, say) so that a
hard-coded id is caught.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from autograder.checks.core import (
    Check,
    Observations,
    attempt,
    declare,
    load_weights,
    observe_contract,
    probe_answers,
    probe_projections,
    projection_weights,
    register,
    seeded,
    seeded_mask,
)


def _tokens(rows: list[list[int]]) -> Tensor:
    return torch.tensor(rows, dtype=torch.long)


def _random_tokens(b: int, t: int, seed: int, low: int = 3, high: int = 30) -> Tensor:
    return torch.randint(low, high, (b, t), generator=torch.Generator().manual_seed(seed))


def _source_mask(lengths: list[int], t_k: int) -> Tensor:
    """``(B, 1, T_k)``: True on each source sentence's real tokens (a padding mask)."""
    return (torch.arange(t_k) < torch.tensor(lengths)[:, None])[:, None, :]


# ================================================================ CrossAttention

def _cross_module(cls: Any, d_model: int, d_k: int, d_v: int, seed: int, dtype: torch.dtype = torch.float32) -> Any:
    weights = {name: w.to(dtype) for name, w in projection_weights(d_model, d_k, d_v, seed).items()}
    return load_weights(cls(d_model, d_k, d_v).to(dtype), weights)


def _call(module: Any, x: Tensor, memory: Tensor, mask: Tensor | None) -> Any:
    return module(x, memory) if mask is None else module(x, memory, mask)


def _run_cross(student: Any, d_model: int, d_k: int, d_v: int, x: Tensor, memory: Tensor, seed: int,
               mask: Tensor | None) -> Any:
    return _call(_cross_module(student, d_model, d_k, d_v, seed), x, memory, mask)


# (d_model, d_k, d_v, x (B, T_q, d_model), memory (B, T_k, d_model), seed, mask): T_q != T_k in the first three
CROSS_FORWARD = declare(Check("CrossAttention_forward", [
    (16, 8, 6, seeded(2, 5, 16, seed=301), seeded(2, 7, 16, seed=302), 303, None),
    (8, 4, 4, seeded(2, 3, 8, seed=304), seeded(2, 9, 8, seed=305), 306, None),
    (8, 4, 8, seeded(1, 6, 8, seed=307), seeded(1, 2, 8, seed=308), 309, None),
    (8, 4, 4, seeded(2, 4, 8, seed=310), seeded(2, 4, 8, seed=311), 312, None),  # T_q == T_k
], call=_run_cross, key="results"))
CROSS_SHAPES = declare(Check("CrossAttention_shapes", CROSS_FORWARD.cases[:3], call=_run_cross, key="results"))
_FULL_MASK = seeded_mask(2, 4, 6, seed=319)
_FULL_MASK[..., 0] = True
CROSS_MASK = declare(Check("CrossAttention_memory_mask", [
    (16, 8, 6, seeded(3, 5, 16, seed=313), seeded(3, 7, 16, seed=314), 315, _source_mask([7, 4, 2], 7)),
    (8, 4, 4, seeded(2, 6, 8, seed=316), seeded(2, 6, 8, seed=317), 318, _source_mask([3, 6], 6)),  # T_q == T_k
    (8, 4, 4, seeded(2, 4, 8, seed=320), seeded(2, 6, 8, seed=321), 322, _FULL_MASK),
    # the second source sentence is all padding: its target positions get all-zero weights and output
    (8, 4, 4, seeded(2, 3, 8, seed=323), seeded(2, 5, 8, seed=324), 325, _source_mask([5, 0], 5)),
], call=_run_cross, key="results"))


_X = seeded(2, 3, 16, seed=326)
CROSS_ERRORS = declare(Check("CrossAttention_errors", [  # (x, memory): memory of another batch size, of another width
    (_X, seeded(5, 4, 16, seed=327)), (_X, seeded(2, 4, 12, seed=328)),
    (seeded(2, 3, 12, seed=329), seeded(2, 4, 16, seed=330))],  # x of another width
    call=lambda student, x, memory: student(16, 8)(x, memory), key="raised"))


_CROSS_GRAD_SHAPE = (6, 4, 3, 331)  # d_model, d_k, d_v, seed; no mask: the memory_mask check has its own cell
_CROSS_CONTRACT = {"x": seeded(2, 3, 6, seed=332, dtype=torch.float64),
                   "memory": seeded(2, 5, 6, seed=333, dtype=torch.float64)}


def _cross_contract_call(cls: Any) -> Callable[..., Any]:
    def call(x: Tensor, memory: Tensor) -> Any:
        d_model, d_k, d_v, seed = _CROSS_GRAD_SHAPE
        return _call(_cross_module(cls, d_model, d_k, d_v, seed, torch.float64), x, memory, None)

    return call


def _projection_grads(student: Any) -> tuple[Any, ...]:
    """The gradients of the weights of w_q, w_k and w_v, for a seeded cotangent of the output (None where none
    arrived)."""
    d_model, d_k, d_v, seed = _CROSS_GRAD_SHAPE
    module = _cross_module(student, d_model, d_k, d_v, seed, torch.float64)
    out = _call(module, _CROSS_CONTRACT["x"].clone(), _CROSS_CONTRACT["memory"].clone(), None)[0]
    (out * seeded(*out.shape, seed=335, dtype=out.dtype)).sum().backward()
    weights = (getattr(getattr(module, name, None), "weight", None) for name in ("w_q", "w_k", "w_v"))
    return tuple(w.grad if isinstance(w, Tensor) else None for w in weights)


def _probe_cross_gradients(student: Any) -> Observations:
    obs = observe_contract(_cross_contract_call(student), _CROSS_CONTRACT, seed=334)
    obs["projections"] = attempt(lambda: _projection_grads(student))
    return obs


register("CrossAttention_projections", probe_projections)
register("CrossAttention_gradients", _probe_cross_gradients)


# ================================================================ shift_right

SHIFT_VALUES = declare(Check("shift_right_values", [  # (tgt, start_id)
    (_tokens([[3, 4, 5, 6]]), 1),  # I love easy courses
    (_tokens([[3, 4, 5, 0], [6, 5, 0, 0]]), 1),
    (_random_tokens(3, 6, seed=341), 2),
    (_tokens([[7], [8]]), 1),
]))


def _probe_token_contract(call: Callable[[Tensor], Any], tgt: Tensor) -> Observations:
    copy = tgt.clone()
    result = attempt(lambda: call(copy))
    return {"result": result, "modified": not torch.equal(copy, tgt)}


_SHIFT_CONTRACT = _tokens([[3, 4, 5, 0], [6, 0, 0, 0], [3, 4, 5, 6]]).to(torch.int32)

def _devices_on_meta(call: Callable[..., Any], *inputs: Tensor) -> Any:
    """The device of each tensor ``call`` returns for ``inputs`` on the meta device, which holds no data (or what it
    raised)."""
    def devices() -> list[str]:
        result = call(*(t.to("meta") for t in inputs))
        return [str(t.device) if isinstance(t, Tensor) else type(t).__name__
                for t in (result if isinstance(result, tuple) else (result,))]

    return attempt(devices)


def _probe_shift_contract(student: Any) -> Observations:
    obs = _probe_token_contract(lambda tgt: student(tgt, 1), _SHIFT_CONTRACT)
    obs["meta"] = _devices_on_meta(lambda tgt: student(tgt, 1), _SHIFT_CONTRACT)
    return obs


register("shift_right_contract", _probe_shift_contract)
SHIFT_ERRORS = declare(Check("shift_right_errors", [(torch.arange(7), 1)], key="raised"))  # tgt of shape (7,)


# ================================================================ teacher_forcing_pair

TF_EXAMPLE = declare(Check("teacher_forcing_pair_example", [  # (tgt, start_id, end_id, pad_id)
    (_tokens([[3, 4, 5, 6]]), 1, 2, 0),  # I love easy courses
    (_tokens([[3, 4, 5, 6], [6, 5, 4, 3]]), 1, 2, 0),
    (_tokens([[10, 11, 12]]), 20, 21, 22),
], key="results"))
TF_PADDING = declare(Check("teacher_forcing_pair_padding", [
    (_tokens([[3, 4, 5, 6], [3, 4, 0, 0], [5, 0, 0, 0]]), 1, 2, 0),
    (_tokens([[4, 0, 5, 9, 9], [4, 9, 9, 9, 9], [1, 2, 3, 4, 5]]), 7, 8, 9),  # pad_id 9; 0 is a real token
    (_tokens([[3, 4, 0], [0, 0, 0], [5, 6, 7]]), 1, 2, 0),  # an all-pad row
], key="results"))

_TF_CONTRACT = _tokens([[3, 4, 5, 0], [6, 0, 0, 0], [3, 4, 5, 6]]).to(torch.int32)



def _probe_tf_contract(student: Any) -> Observations:
    obs = _probe_token_contract(lambda tgt: student(tgt, 1, 2, 0), _TF_CONTRACT)
    obs["meta"] = _devices_on_meta(lambda tgt: student(tgt, 1, 2, 0), _TF_CONTRACT)
    return obs


register("teacher_forcing_pair_contract", _probe_tf_contract)
TF_ERRORS = declare(Check("teacher_forcing_pair_errors", [(torch.arange(7), 1, 2, 0)], key="raised"))  # tgt (7,)


# ================================================================ sequence_cross_entropy

def _ce_case(b: int, t: int, v: int, lengths: list[int], p: int, seed: int) -> tuple[Tensor, Tensor, int]:
    logits = seeded(b, t, v, seed=seed, scale=2.0)
    targets = torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed + 1))
    targets = targets.masked_fill(targets == p, (p + 1) % v)  # no real target equals pad_id
    padding = torch.arange(t) >= torch.tensor(lengths)[:, None]
    return logits, targets.masked_fill(padding, p), p


CE_VALUES = declare(Check("sequence_cross_entropy_values", [  # (logits, targets, pad_id)
    _ce_case(2, 5, 7, [5, 5], 0, seed=351),  # no padding at all
    _ce_case(3, 6, 11, [6, 4, 2], 0, seed=353),
    _ce_case(2, 5, 9, [5, 2], 3, seed=355),  # pad_id 3; 0 is a real target
]))


def _changed_at_pads(logits: Tensor, targets: Tensor, p: int, seed: int) -> Tensor:
    return torch.where((targets == p)[..., None], seeded(*logits.shape, seed=seed, scale=30.0), logits)


def _changed_at_real(logits: Tensor, targets: Tensor, p: int, seed: int) -> Tensor:
    return torch.where((targets != p)[..., None], seeded(*logits.shape, seed=seed, scale=3.0), logits)


def _probe_ce_pads(student: Any) -> Observations:
    """The loss of each case, with the logits changed at the pads, then at the real positions."""
    results = []
    for i, (z, y, p) in enumerate(CE_VALUES.cases[1:]):
        runs = (z, _changed_at_pads(z, y, p, seed=360 + i), _changed_at_real(z, y, p, seed=365 + i))
        results.append(tuple(attempt(lambda z=z, y=y, p=p: student(z.clone(), y.clone(), p)) for z in runs))
    return {"results": results}


_CE_GRAD_TARGETS = _tokens([[1, 2, 3, 4], [5, 1, 0, 0], [2, 0, 0, 0]])
_CE_CONTRACT = {"logits": seeded(3, 4, 6, seed=371, dtype=torch.float64), "targets": _CE_GRAD_TARGETS}


def _ce_contract_call(function: Any) -> Callable[..., Any]:
    """``function(logits, targets, 0)``, made 1-D so that the contract machinery can seed a cotangent for it."""
    def call(logits: Tensor, targets: Tensor) -> Any:
        loss = function(logits, targets, 0)
        return loss.reshape(1) if isinstance(loss, Tensor) and loss.numel() == 1 else loss

    return call


CE_ERRORS = declare(Check("sequence_cross_entropy_errors", [  # targets (2, 4) for logits (2, 5, 7)
    (seeded(2, 5, 7, seed=372), torch.zeros(2, 4, dtype=torch.long), 0)], key="raised"))

register("sequence_cross_entropy_ignores_pads", _probe_ce_pads)


def _probe_ce_gradients(student: Any) -> Observations:
    obs = observe_contract(_ce_contract_call(student), _CE_CONTRACT, seed=373)
    obs["meta"] = _devices_on_meta(lambda logits, targets: student(logits, targets, 0), _CE_CONTRACT["logits"],
                                   _CE_CONTRACT["targets"])
    return obs


register("sequence_cross_entropy_gradients", _probe_ce_gradients)


# ================================================================ concept checks

_LOSS_POSITIONS_CASES = [([7, 3, 3, 1],), ([1],), ([12, 5, 8],)]
_CROSS_SHAPE_CASES = [(3, 11), (12, 2), (6, 9)]

register("loss_positions_answer", probe_answers(_LOSS_POSITIONS_CASES))
register("cross_weights_shape_answer", probe_answers(_CROSS_SHAPE_CASES))
