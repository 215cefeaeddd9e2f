"""Probes of Chapter 8 (``08_trained_attention``), judged in :mod:`autograder.judges.trained_attention`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases are built here from fixed seeds, with
plain torch and ``attention_course`` only: the reference is not in the grading sandbox. The scores of heads run
on seeded attention maps, softmax rows with and without a causal mask; ``ablate_head`` on seeded head outputs;
``repeat_loss`` on a tiny fixed model, ``attention_course.induction.AttentionOnly`` with seeded weights and
dropout on its attention weights (so that a loss measured in training mode is seen to change), built afresh for
every call so that one call cannot leave anything for the next.

The contract, sentence by sentence, and the check that holds each sentence:

- ``attention_entropy``: the entropy of every row, in nats, averaged over the queries, ``T_q != T_k``, any leading
  axes, one number per map (``attention_entropy_values``); ``0 ln 0 = 0``, so masked keys add nothing and give no
  NaN, and a row of zeros has entropy 0 and counts in the mean (``attention_entropy_zeros``); a single map gives a
  0-d result, the dtype is kept, the input untouched, gradients flow; ValueError for fewer than 2 axes or integer
  weights (``attention_entropy_contract``).
- ``previous_token_score``: ``w[i, i-1]`` averaged over the queries ``1..T-1`` (query 0 left out), any leading
  axes, the dtype kept (``previous_token_score_values``); ValueError for maps that are not square, or ``T < 2``
  (``previous_token_score_errors``).
- ``induction_score``: ``w[i, i-P+1]`` averaged over the queries ``P..T-1``, any leading axes, ``P = 1`` and
  ``P = T - 1`` too, the dtype kept (``induction_score_values``); ValueError for ``P`` outside ``[1, T)``, or maps
  that are not square (``induction_score_errors``).
- ``ablate_head``: head ``head``'s slice of ``(B, n_heads, T, d_head)`` set to 0, the others unchanged
  (``ablate_head_zero``); ``mean`` replaces the slice, broadcast from ``(T, d_head)``, ``(d_head,)`` or
  ``(1, T, d_head)`` (``ablate_head_mean``); a new tensor (the input untouched), the dtype kept, gradients to the
  other heads; ValueError for ``head`` outside ``[0, n_heads)`` (``-1`` too), a ``z`` that is not 4-D, a ``mean``
  that does not broadcast (``ablate_head_contract``).
- ``repeat_loss``: the mean cross-entropy of the targets ``P+1..T-1`` from the logits at ``P..T-2``, over the
  batch, the model in eval mode (``repeat_loss_values``); with ``site`` and ``head``, the head ablated through a
  forward hook, by zeros or by ``mean`` (``repeat_loss_ablated``); the hook removed before returning, also when the
  model raises, and the model's mode given back; ValueError for only one of ``site`` and ``head``, or
  ``T < P + 2`` (``repeat_loss_hooks``).
- ``heatmap_facts``: the shape of one head's map, the number of maps, the nonzero entries of a causal row;
  ``largest_term``: the key with the largest ``w_j ‖v_j W_O‖``, not the largest weight (``*_answer``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attention_course.induction import AttentionOnly, AttentionOnlySizes, repeated_tokens
from autograder.checks.core import (
    Check,
    Observations,
    attempt,
    declare,
    observe_contract,
    probe_answers,
    register,
    seeded,
)


def seeded_maps(*shape: int, seed: int, causal: bool = True, dtype: torch.dtype = torch.float32) -> Tensor:
    """Seeded attention maps ``shape = (..., T_q, T_k)``: softmax rows of scores spread over a few units, with the
    keys after each query masked (weight exactly 0) when ``causal``."""
    scores = seeded(*shape, seed=seed, dtype=dtype, scale=2.0)
    if causal:  # key j > query i: weight exactly 0
        scores = scores.masked_fill(torch.ones(shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(dim=-1)


def _with_dead_row(maps: Tensor, where: tuple) -> Tensor:
    """``maps`` with the row ``maps[where]`` all zeros: a query whose keys were all masked."""
    maps = maps.clone()
    maps[where] = 0.0
    return maps


def _one_hot_rows(t: int, seed: int) -> Tensor:
    """A ``(2, t, t)`` map whose rows each put all their weight on one earlier key: entropy 0."""
    keys = (torch.rand(2, t, generator=torch.Generator().manual_seed(seed)) * torch.arange(1, t + 1)).long()
    return torch.nn.functional.one_hot(keys, t).float()


# ================================================================ attention_entropy

ENTROPY_VALUES = declare(Check("attention_entropy_values", [  # (weights,): no zero anywhere
    (seeded_maps(2, 3, 5, 7, seed=1101, causal=False),),  # T_q = 5 queries, T_k = 7 keys
    (seeded_maps(6, 6, seed=1102, causal=False),),  # a single map: a 0-d result
    (seeded_maps(4, 3, 8, seed=1103, causal=False),),
]))
ENTROPY_ZEROS = declare(Check("attention_entropy_zeros", [
    (seeded_maps(2, 3, 6, 6, seed=1111),),  # causal: zeros above the diagonal
    (_one_hot_rows(5, seed=1112),),  # every row one-hot: entropy 0
    (_with_dead_row(seeded_maps(2, 4, 5, 5, seed=1113), (1, 2, 3)),),  # query 3 of one map sees nothing
]))

_ENTROPY_CONTRACT = {"weights": seeded_maps(2, 4, 6, seed=1121, causal=False, dtype=torch.float64)}


def _probe_entropy_contract(student: Any) -> Observations:
    return {
        "contract": observe_contract(student, _ENTROPY_CONTRACT, seed=1122),
        "errors": [attempt(lambda: student(torch.full((5,), 0.2))),  # one row, no query axis
                   attempt(lambda: student(torch.ones(3, 3, dtype=torch.long)))],  # not floating point
    }


register("attention_entropy_contract", _probe_entropy_contract)


# ================================================================ previous_token_score

PREVIOUS_VALUES = declare(Check("previous_token_score_values", [  # (weights,)
    (seeded_maps(2, 3, 6, 6, seed=1201),),
    (seeded_maps(5, 5, seed=1202, causal=False),),  # every entry nonzero: the next token is not zero here
    (seeded_maps(4, 2, 2, seed=1203, dtype=torch.float64),),  # T = 2: one query counts
]))
PREVIOUS_ERRORS = declare(Check("previous_token_score_errors", [
    (seeded_maps(2, 4, 6, seed=1211),),  # 4 queries, 6 keys: not a self-attention map
    (torch.ones(3, 1, 1),),  # T = 1: no query has a previous token
]))


# ================================================================ induction_score

INDUCTION_VALUES = declare(Check("induction_score_values", [  # (weights, period)
    (seeded_maps(2, 3, 10, 10, seed=1301), 4),
    (seeded_maps(12, 12, seed=1302, causal=False), 6),  # the repeat of a 6-token span, T = 2P
    (seeded_maps(3, 7, 7, seed=1303, dtype=torch.float64), 1),  # one token repeated: the diagonal from query 1
    (seeded_maps(2, 9, 9, seed=1304), 8),  # a single query after the period
]))
INDUCTION_ERRORS = declare(Check("induction_score_errors", [
    (seeded_maps(2, 6, 6, seed=1311), 0),
    (seeded_maps(2, 6, 6, seed=1312), 6),  # P = T: no query has seen an earlier occurrence
    (seeded_maps(5, 8, seed=1313), 2),  # not square
]))


# ================================================================ ablate_head

def _ablate(student: Any, z: Tensor, head: int, mean: Tensor | None = None) -> Any:
    return student(z, head) if mean is None else student(z, head, mean)


ABLATE_ZERO = declare(Check("ablate_head_zero", [  # (z (B, n_heads, T, d_head), head)
    (seeded(2, 3, 4, 5, seed=1401), 1),
    (seeded(1, 4, 3, 2, seed=1402), 0),
    (seeded(3, 4, 2, 6, seed=1403), 3),  # the last head
], call=_ablate))
ABLATE_MEAN = declare(Check("ablate_head_mean", [  # (z, head, mean)
    (seeded(2, 3, 4, 5, seed=1411), 2, seeded(4, 5, seed=1412)),  # mean (T, d_head)
    (seeded(3, 2, 5, 3, seed=1413), 0, seeded(3, seed=1414)),  # mean (d_head,)
    (seeded(2, 4, 3, 2, seed=1415), 1, seeded(1, 3, 2, seed=1416)),  # mean (1, T, d_head)
], call=_ablate))

_ABLATE_CONTRACT = {"z": seeded(2, 3, 4, 5, seed=1421, dtype=torch.float64),
                    "mean": seeded(4, 5, seed=1422, dtype=torch.float64)}


def _probe_ablate_contract(student: Any) -> Observations:
    z = seeded(2, 3, 4, 5, seed=1423)
    return {
        "zero": observe_contract(lambda z: student(z, 1), {"z": _ABLATE_CONTRACT["z"]}, seed=1424),
        "mean": observe_contract(lambda z, mean: student(z, 2, mean), _ABLATE_CONTRACT, seed=1425),
        "errors": [attempt(lambda: student(z.clone(), 3)),  # 3 heads: 0, 1, 2
                   attempt(lambda: student(z.clone(), -1)),
                   attempt(lambda: student(z[0].clone(), 0)),  # (n_heads, T, d_head): no batch axis
                   attempt(lambda: student(z.clone(), 0, seeded(3, seed=1426)))],  # d_head is 5
    }


register("ablate_head_contract", _probe_ablate_contract)


# ================================================================ repeat_loss

#: The sizes of the tiny model the repeat_loss checks run: 11 tokens, 2 layers of 3 heads of 4, context 16.
TINY = AttentionOnlySizes(vocab=11, context=16, d_model=12, n_heads=3, n_layers=2, dropout=0.3)


def tiny_model(training: bool = True) -> AttentionOnly:
    """The tiny model, with seeded weights (the same every time), in training mode unless ``training=False``."""
    model = AttentionOnly(TINY)
    with torch.no_grad():
        for index, (_, p) in enumerate(sorted(model.named_parameters())):
            p.copy_(seeded(*p.shape, seed=1500 + index, scale=0.8))
    return model.train(training)


def _tokens(batch: int, period: int, length: int, seed: int) -> Tensor:
    """``(batch, length)`` tokens that repeat every ``period`` positions, from ``period`` seeded random ones."""
    first = repeated_tokens(batch, period, TINY.vocab, torch.Generator().manual_seed(seed))[:, :period]
    return first.repeat(1, -(-length // period))[:, :length]


def _loss_twice(student: Any, tokens: Tensor, period: int, layer: int | None = None, head: int | None = None,
                mean: Tensor | None = None) -> Any:
    """The learner's loss of one case, computed twice on fresh copies of the model: the same number twice unless
    dropout was active."""

    def once() -> Any:
        model = tiny_model()
        site = None if layer is None else model.layers[layer].hook_heads
        args = (model, tokens.clone(), period) if site is None else (model, tokens.clone(), period, site, head)
        result = student(*args) if mean is None else student(*args, mean.clone())
        return float(result) if isinstance(result, Tensor) and result.numel() == 1 else result

    return (once(), once())


REPEAT_VALUES = declare(Check("repeat_loss_values", [  # (tokens, period)
    (_tokens(3, 5, 10, seed=1601), 5),  # a span of 5, then again: T = 2P
    (_tokens(2, 4, 13, seed=1602), 4),  # the span three times and a bit
    (_tokens(4, 6, 8, seed=1603), 6),  # T = P + 2: one target per sequence
], call=_loss_twice))
REPEAT_ABLATED = declare(Check("repeat_loss_ablated", [  # (tokens, period, layer, head, mean)
    (_tokens(3, 6, 12, seed=1611), 6, 0, 2, None),  # first: a layer-0 head reaches every scored position
    (_tokens(2, 5, 14, seed=1612), 5, 1, 0, None),
    (_tokens(3, 6, 12, seed=1613), 6, 1, 1, seeded(12, 4, seed=1614)),  # mean ablation, (T, d_head)
], call=_loss_twice))

#: the tokens every run of repeat_loss_hooks reads, and the longer ones that the tiny model refuses
HOOK_TOKENS = _tokens(2, 5, 12, seed=1621)
TOO_LONG = _tokens(1, 5, TINY.context + 4, seed=1622)


def _probe_repeat_hooks(student: Any) -> Observations:
    def after(model: AttentionOnly, call: Any) -> dict[str, Any]:
        """What is left of ``model`` once ``call()`` has returned or raised: its mode, the forward hooks still
        registered anywhere in it, and its logits on HOOK_TOKENS in eval mode."""
        result = attempt(call)
        hooks = sum(len(module._forward_hooks) + len(module._forward_pre_hooks) for module in model.modules())
        training = model.training
        model.eval()
        with torch.no_grad():
            logits = attempt(lambda: model(HOOK_TOKENS.clone()))
        return {"result": float(result) if isinstance(result, Tensor) and result.numel() == 1 else result,
                "hooks": hooks, "training": training, "logits": logits}

    trained, evaluated, failing = tiny_model(), tiny_model(training=False), tiny_model()
    return {
        "ablated": after(trained, lambda: student(trained, HOOK_TOKENS.clone(), 5, trained.layers[1].hook_heads, 0)),
        "eval": after(evaluated, lambda: student(evaluated, HOOK_TOKENS.clone(), 5)),
        "raising": after(failing, lambda: student(failing, TOO_LONG.clone(), 5, failing.layers[0].hook_heads, 1)),
        "errors": [attempt(lambda: student(tiny_model(), HOOK_TOKENS.clone(), 5, tiny_model().layers[0].hook_heads)),
                   attempt(lambda: student(tiny_model(), HOOK_TOKENS.clone(), 5, None, 1)),
                   attempt(lambda: student(tiny_model(), HOOK_TOKENS[:, :6].clone(), 5))],  # T = P + 1
    }


register("repeat_loss_hooks", _probe_repeat_hooks)


# ================================================================ concept checks

HEATMAP_FACTS_CASES = [(9, 768, 12, 12, 4), (5, 512, 6, 8, 0), (40, 64, 2, 4, 39), (7, 96, 3, 6, 2)]
LARGEST_TERM_CASES = [
    ([0.82, 0.03, 0.10, 0.05], [0.05, 3.0, 2.0, 0.9]),  # a sink: the largest weight, a value near zero
    ([0.1, 0.6, 0.3], [1.0, 1.2, 1.5]),  # the largest weight wins here, the longest value does not
    ([0.25, 0.25, 0.25, 0.25], [0.3, 0.2, 0.9, 0.4]),  # even weights: the longest value
    ([0.5, 0.2, 0.2, 0.1], [0.1, 2.0, 1.0, 4.5]),
]

register("heatmap_facts_answer", probe_answers(HEATMAP_FACTS_CASES))
register("largest_term_answer", probe_answers(LARGEST_TERM_CASES))
