"""Probes of Chapter 2 (``02_causal_masking``), judged in :mod:`autograder.judges.masking`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases
are built here from fixed seeds, with plain torch only: the reference is not
in the grading sandbox. Each probe runs the learner's code on them and
returns plain observations.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor

from autograder.checks.core import (
    Check,
    Observations,
    Raised,
    attempt,
    attempt_facts,
    declare,
    load_weights,
    plain,
    probe_answers,
    probe_projections,
    projection_weights,
    register,
    seeded,
    seeded_mask,
)

# ================================================================ causal_mask

def _tril(t_q: int, t_k: int, diagonal: int = 0) -> Tensor:
    """The lower triangle; ``_tril(t, t)`` is the causal mask of ``t`` positions."""
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool), diagonal=diagonal)


# (t_q,) or (t_q, t_k). The first case judged names the mistake: the cases that tell mistakes apart come first.
CAUSAL_SQUARE = declare(Check("causal_mask_square", [(4,), (7,), (5, 5), (1,)]))
CAUSAL_OFFSET = declare(Check("causal_mask_offset", [(3, 6), (2, 7), (4, 9), (1, 5)]))


def _probe_causal_dtype_device(student: Any) -> Observations:
    return {
        "square": attempt_facts(lambda: student(4)),
        "offset": attempt_facts(lambda: student(3, 5)),
        "cpu": attempt_facts(lambda: student(3, 5, device=torch.device("cpu"))),
        "meta": attempt_facts(lambda: student(3, 5, device="meta")),
        "meta_keyword": attempt_facts(lambda: student(2, t_k=6, device=torch.device("meta"))),
    }


CAUSAL_ERRORS = declare(Check("causal_mask_errors", [(5, 3), (2, 1)], key="raised"))  # (t_q, t_k): t_q > t_k

register("causal_mask_dtype_device", _probe_causal_dtype_device)


# ================================================================ padding_mask

def _tokens(*shape: int, seed: int, pad_id: int, p_pad: float = 0.35) -> Tensor:
    """Seeded token ids in 0..9, about ``p_pad`` of them ``pad_id`` (which appears nowhere else)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 10, shape, generator=g)
    ids = torch.where(ids == pad_id, (ids + 1) % 10, ids)
    return torch.where(torch.rand(shape, generator=g) < p_pad, torch.full(shape, pad_id), ids)


PADDING_VALUES = declare(Check("padding_mask_values", [  # (tokens, pad_id)
    (torch.tensor([[1, 2, 0, 0, 0]]), 0),
    (torch.tensor([[4, 7, 1, 0, 0, 0], [0, 0, 3, 5, 9, 2], [8, 0, 6, 0, 2, 0]]), 0),
    (torch.tensor([[5, 0, 7, 3, 3], [3, 3, 1, 0, 2]]), 3),  # 0 is a real token here
    (_tokens(4, 7, seed=111, pad_id=9), 9),
]))


def _probe_padding_shape(student: Any) -> Observations:
    return {
        "small": attempt_facts(lambda: student(torch.tensor([[4, 5, 6, 0], [7, 0, 0, 0]]), 0)),
        "one_token": attempt_facts(lambda: student(torch.tensor([[3], [0], [2]]), 0)),
        "meta": attempt_facts(lambda: student(torch.zeros(2, 5, dtype=torch.long, device="meta"), 0)),
    }


PADDING_ERRORS = declare(Check("padding_mask_errors", [  # 1-D and 3-D tokens
    (torch.tensor([1, 2, 0, 0, 0]), 0), (torch.zeros(2, 3, 4, dtype=torch.long), 0)], key="raised"))

register("padding_mask_shape", _probe_padding_shape)


# ================================================================ combine_masks

_PAD_A = (torch.tensor([[1, 2, 0, 0, 0], [3, 4, 5, 6, 0]]) != 0).unsqueeze(1)  # (2, 1, 5): 0 is the pad
_COMBINE_CASES = [
    [_tril(5, 5), _PAD_A],  # causal (5, 5) and padding (2, 1, 5)
    [seeded_mask(2, 1, 4, 6, seed=121), seeded_mask(4, 6, seed=122), seeded_mask(2, 3, 1, 6, seed=123)],
    [seeded_mask(3, 4, seed=124), seeded_mask(3, 4, seed=125)],
]


def _probe_combine(student: Any) -> Observations:
    results = []
    for masks in _COMBINE_CASES:
        copies = [m.clone() for m in masks]
        result = attempt(lambda copies=copies: student(*copies))
        modified = [i for i, (c, m) in enumerate(zip(copies, masks, strict=True)) if not torch.equal(c, m)]
        results.append({"result": result, "modified": modified})
    return {"cases": results}


_M1 = seeded_mask(3, 4, seed=131)
_M2 = seeded_mask(2, 1, 4, seed=132)
COMBINE_NONE = declare(Check("combine_masks_none", [  # (what the call is called in messages, *masks)
    ("combine_masks(None, None)", None, None),
    ("combine_masks(None)", None),
    ("combine_masks()",),
    ("combine_masks(m, None) with m (3, 4)", _M1, None),
    ("combine_masks(None, m) with m (3, 4)", None, _M1),
    ("combine_masks(m1, None, m2) with m1 (3, 4) and m2 (2, 1, 4)", _M1, None, _M2),
], call=lambda student, _what, *masks: student(*masks)))


COMBINE_ERRORS = declare(Check("combine_masks_errors", [  # a float mask, an int64 mask
    (_tril(4, 4), torch.ones(4, 4)), (torch.ones(2, 1, 4, dtype=torch.int64), _tril(4, 4))], key="raised"))

register("combine_masks_and", _probe_combine)


# ================================================================ additive_mask

_WITH_DEAD_ROW = seeded_mask(3, 4, 6, seed=142)
_WITH_DEAD_ROW[1, 2] = False  # a fully masked row
ADDITIVE_VALUES = declare(Check("additive_mask_values", [  # (mask,)
    (torch.ones(4, 4, dtype=torch.bool).tril(),), (seeded_mask(2, 1, 5, seed=141),), (_WITH_DEAD_ROW,)]))


_DTYPES = (torch.float64, torch.float16, torch.bfloat16)


def _probe_additive_dtype_device(student: Any) -> Observations:
    (mask,) = ADDITIVE_VALUES.cases[1]
    return {
        "default": attempt_facts(lambda: student(mask.clone())),
        "dtypes": [attempt(lambda d=d: student(mask.clone(), dtype=d)) for d in _DTYPES],
        "positional": attempt_facts(lambda: student(mask.clone(), torch.float64)),
        "meta": attempt_facts(lambda: student(torch.ones(3, 4, dtype=torch.bool, device="meta"))),
    }


ADDITIVE_ERRORS = declare(Check("additive_mask_errors", [  # (mask, dtype or None): a float mask, an integer dtype
    (torch.ones(3, 3), None), (_tril(3, 3), torch.int64)],
    call=lambda student, mask, dtype: student(mask) if dtype is None else student(mask, dtype=dtype), key="raised"))

register("additive_mask_dtype_device", _probe_additive_dtype_device)


# ================================================================ CausalSelfAttention

_TOKENS_RIGHT_LEFT = torch.tensor([[4, 7, 1, 3, 0, 0], [0, 0, 0, 5, 9, 2], [8, 0, 6, 2, 0, 1]])
_TOKENS_LEFT = torch.tensor([[0, 0, 3, 4, 5], [6, 7, 8, 0, 0]])
_TOKENS_INVARIANCE = torch.tensor([[0, 0, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 0, 0], [0, 7, 8, 0, 9, 1, 0]])

_GRAD_CASE = (8, 4, 4, seeded(2, 5, 8, seed=155, dtype=torch.float64), _TOKENS_LEFT, 156)


def _pad(tokens: Tensor | None) -> Tensor | None:
    """The padding mask (B, 1, T) of ``tokens``, pad id 0: True where the token is not a pad."""
    return None if tokens is None else (tokens != 0).unsqueeze(1)


def _module(student: Any, d_model: int, d_k: int, d_v: int, seed: int) -> Any:
    return load_weights(student(d_model, d_k, d_v), projection_weights(d_model, d_k, d_v, seed))


def _call(module: Any, x: Tensor, tokens: Tensor | None) -> Any:
    pad = _pad(tokens)
    return module(x.clone()) if pad is None else module(x.clone(), pad.clone())


def _run_module(student: Any, d_model: int, d_k: int, d_v: int, x: Tensor, tokens: Tensor | None,
                seed: int) -> Any:
    return _call(_module(student, d_model, d_k, d_v, seed), x, tokens)


#: the values of the forward pass; its probe, _probe_forward, also records a float64 backward pass
FORWARD_VALUES = Check("CausalSelfAttention_forward", [  # (d_model, d_k, d_v, x, tokens or None, seed)
    (16, 8, 6, seeded(2, 5, 16, seed=151), None, 152),
    (8, 4, 8, seeded(3, 6, 8, seed=153), _TOKENS_RIGHT_LEFT, 154),
], call=_run_module, key="results")


def _pair(student: Any, sizes: tuple[int, int, int], seed: int, x: Tensor, changed: Tensor,
          tokens: Tensor | None) -> tuple[Any, Any]:
    """The outputs of one module on ``x`` and on ``changed``: what differs between them is the input alone (a
    parameter that load_weights does not set, such as a bias, is the same in both runs)."""
    try:
        module = _module(student, *sizes, seed)
    except Exception as err:  # the judge decides what a crash means
        return Raised(type(err).__name__, str(err)), Raised(type(err).__name__, str(err))
    return attempt(partial(_call, module, x, tokens)), attempt(partial(_call, module, changed, tokens))


def _probe_forward(student: Any) -> Observations:
    def grad_run() -> dict[str, Any]:
        d_model, d_k, d_v, x, tokens, seed = _GRAD_CASE
        module = load_weights(student(d_model, d_k, d_v), projection_weights(d_model, d_k, d_v, seed)).double()
        leaf = x.clone().requires_grad_(True)
        out, _ = module(leaf, _pad(tokens))
        (out * seeded(*out.shape, seed=157, dtype=out.dtype)).sum().backward()
        return {"out": plain(out), "dtype": str(out.dtype), "grad": plain(leaf.grad)}

    try:
        grad = grad_run()
    except Exception as err:
        grad = Raised(type(err).__name__, str(err))
    return {**FORWARD_VALUES.probe(student), "grad": grad}


_LEAK_CASES = [  # (d_model, d_k, d_v, x, tokens or None, seed, first changed position)
    (8, 4, 6, seeded(2, 7, 8, seed=161), None, 162, 4),
    (8, 4, 4, seeded(3, 6, 8, seed=163), _TOKENS_RIGHT_LEFT, 164, 2),
    (6, 3, 3, seeded(1, 5, 6, seed=165), None, 166, 1),
]


def _changed_future(x: Tensor, start: int, seed: int) -> Tensor:
    changed = x.clone()
    changed[:, start:] = seeded(x.shape[0], x.shape[1] - start, x.shape[2], seed=seed, scale=3.0)
    return changed


def _probe_leak(student: Any) -> Observations:
    return {"pairs": [_pair(student, (d_model, d_k, d_v), seed, x, _changed_future(x, start, seed + 100), tokens)
                      for d_model, d_k, d_v, x, tokens, seed, start in _LEAK_CASES]}


_INVARIANCE_CASES = [  # (d_model, d_k, d_v, x, tokens, seed)
    (8, 4, 4, seeded(3, 7, 8, seed=171), _TOKENS_INVARIANCE, 172),
    (6, 3, 5, seeded(2, 5, 6, seed=173), _TOKENS_LEFT, 174),
]


def _changed_padding(x: Tensor, tokens: Tensor, seed: int) -> Tensor:
    noise = seeded(*x.shape, seed=seed, scale=3.0)
    return torch.where((tokens == 0).unsqueeze(-1), noise, x)


def _probe_invariance(student: Any) -> Observations:
    return {"pairs": [_pair(student, (d_model, d_k, d_v), seed, x, _changed_padding(x, tokens, seed + 100), tokens)
                      for d_model, d_k, d_v, x, tokens, seed in _INVARIANCE_CASES]}


register("CausalSelfAttention_projections", probe_projections)
register(FORWARD_VALUES.id, _probe_forward)
register("CausalSelfAttention_no_future_leak", _probe_leak)
register("CausalSelfAttention_padding_invariance", _probe_invariance)


# ================================================================ concept checks

_MASKED_SHAPES_CASES = [(9, 768), (1, 64), (128, 16)]
_VISIBLE_KEYS_CASES = [([5, 3, 9, 7, 0, 0], 0, 3), ([4, 4, 1, 1, 1, 1], 1, 5), ([8, 6, 0], 0, 2),
                       ([6, 2, 7, 0], 0, 1)]

register("masked_attention_shapes_answer", probe_answers(_MASKED_SHAPES_CASES))
register("visible_keys_answer", probe_answers(_VISIBLE_KEYS_CASES))
