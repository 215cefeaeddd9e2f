"""Probes of Chapter 8 (``08_trained_attention``), judged in :mod:`autograder.judges.trained_attention`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases are built here from fixed seeds, with
plain torch and ``attention_course`` only: the reference is not in the grading sandbox. The scores of heads run
on seeded attention maps, softmax rows with and without a causal mask; ``ablate_head`` on seeded head outputs;
``repeat_loss`` on a tiny fixed model, ``attention_course.induction.AttentionOnly`` with seeded weights and
dropout on its attention weights (so that a loss measured in training mode is seen to change), built afresh for
every call so that one call cannot leave anything for the next.

The contract, sentence by sentence, and the check that holds each sentence, is tabled beside this file, in
``trained_attention_contract.md``. ``ov_circuit`` runs on the tiny model and on a hand-built induction circuit
(``attention_course.induction.hand_built_induction``), whose induction head copies exactly; ``copying_score`` on
seeded matrices chosen so that every declared mistake gives another answer; ``patch_head`` on the hand-built circuit,
whose induction head restores the whole loss and whose previous-token head none of it, and on the tiny model in
training mode, so that a clean run recorded with dropout on is seen to change.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attention_course.induction import AttentionOnly, AttentionOnlySizes, hand_built_induction, repeated_tokens
from autograder.checks.core import (
    Check,
    Observations,
    Raised,
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


def _left_after(model: AttentionOnly, call: Any, tokens: Tensor) -> dict[str, Any]:
    """What is left of ``model`` once ``call()`` has returned or raised: its mode, the forward hooks still registered
    anywhere in it, and its logits on ``tokens`` in eval mode."""
    result = attempt(call)
    hooks = sum(len(module._forward_hooks) + len(module._forward_pre_hooks) for module in model.modules())
    training = model.training
    model.eval()
    with torch.no_grad():
        logits = attempt(lambda: model(tokens.clone()))
    return {"result": float(result) if isinstance(result, Tensor) and result.numel() == 1 else result,
            "hooks": hooks, "training": training, "logits": logits}


def _probe_repeat_hooks(student: Any) -> Observations:
    def after(model: AttentionOnly, call: Any) -> dict[str, Any]:
        return _left_after(model, call, HOOK_TOKENS)

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


# ================================================================ ov_circuit

def tiny_model64() -> AttentionOnly:
    """The tiny model in float64."""
    return tiny_model(training=False).double()


#: The models the checks of ov_circuit and patch_head build, each afresh for every call.
MODELS = {"tiny": tiny_model, "tiny, float64": tiny_model64, "hand-built": hand_built_induction}


def _circuit_of(student: Any, model: str, layer: int, head: int) -> Any:
    return student(MODELS[model](), layer, head)


OV_VALUES = declare(Check("ov_circuit_values", [  # (model, layer, head)
    ("tiny", 0, 2),  # the last head of layer 0
    ("tiny", 1, 0),
    ("hand-built", 1, 0),  # an induction head written by hand: it copies, ten logits for one
    ("tiny, float64", 1, 1),
], call=_circuit_of))


def _probe_ov_contract(student: Any) -> Observations:
    model = tiny_model64()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    result = attempt(lambda: student(model, 1, 2))
    changed = sorted(name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name]))
    return {
        "dtype": result if isinstance(result, Raised) else str(getattr(result, "dtype", type(result).__name__)),
        "changed": changed,
        "errors": [attempt(lambda: student(tiny_model(), 2, 0)),  # 2 layers: 0 and 1
                   attempt(lambda: student(tiny_model(), 0, 3)),  # 3 heads: 0, 1, 2
                   attempt(lambda: student(tiny_model(), 1, -1))],
    }


register("ov_circuit_contract", _probe_ov_contract)


# ================================================================ copying_score

def _rotation_block(v: int, seed: int) -> Tensor:
    """A (v, v) matrix with complex eigenvalues: 2 × 2 rotations scaled by 2, plus noise (|Re λ| < |λ|)."""
    out = seeded(v, v, seed=seed, scale=0.3)
    for i in range(0, v - 1, 2):
        out[i:i + 2, i:i + 2] += torch.tensor([[1.2, -1.6], [1.6, 1.2]])
    return out


COPYING_VALUES = declare(Check("copying_score_values", [  # (circuit (V, V),)
    (seeded(11, 11, seed=1713),),  # a random circuit: a few rows copy, positivity near 0
    (torch.eye(8) * 2 + seeded(8, 8, seed=1707, scale=1.3),),  # copying, noisily: rows and columns disagree
    (-torch.eye(9) * 2 + seeded(9, 9, seed=1703, scale=0.6),),  # suppression: positivity near -1
    (_rotation_block(10, seed=1704),),  # complex eigenvalues
]))

_COPYING_CONTRACT = seeded(7, 7, seed=1711, dtype=torch.float64) + torch.eye(7, dtype=torch.float64)


def _probe_copying_contract(student: Any) -> Observations:
    circuit = _COPYING_CONTRACT.clone()
    result = attempt(lambda: student(circuit))
    return {
        "dtypes": result if isinstance(result, Raised) else [str(getattr(part, "dtype", type(part).__name__))
                                                            for part in (result if isinstance(result, tuple)
                                                                         else (result,))],
        "modified": not torch.equal(circuit, _COPYING_CONTRACT),
        "errors": [attempt(lambda: student(seeded(5, 6, seed=1712))),
                   attempt(lambda: student(seeded(4, seed=1713))),
                   attempt(lambda: student(torch.ones(3, 3, dtype=torch.long)))],
    }


register("copying_score_contract", _probe_copying_contract)


# ================================================================ patch_head

def _corrupted(clean: Tensor, period: int, vocab: int, seed: int) -> Tensor:
    """``clean`` with its first ``period`` tokens drawn again (each one changed), so that the repeat has nothing to
    copy from."""
    shift = torch.randint(1, vocab, clean[:, :period].shape, generator=torch.Generator().manual_seed(seed))
    out = clean.clone()
    out[:, :period] = (clean[:, :period] + shift) % vocab
    return out


def _patch_case(model: str, batch: int, period: int, length: int, layer: int, head: int, seed: int) -> tuple:
    vocab = 8 if model == "hand-built" else TINY.vocab
    first = repeated_tokens(batch, period, vocab, torch.Generator().manual_seed(seed))[:, :period]
    clean = first.repeat(1, -(-length // period))[:, :length]
    return model, clean, _corrupted(clean, period, vocab, seed + 1), period, layer, head


def _patch_twice(student: Any, model: str, clean: Tensor, corrupted: Tensor, period: int, layer: int,
                 head: int) -> Any:
    """The learner's restored fraction of one case, computed twice on fresh copies of the model: the same number
    twice unless dropout was active."""

    def once() -> Any:
        built = MODELS[model]()
        result = student(built, clean.clone(), corrupted.clone(), period, built.layers[layer].hook_heads, head)
        return float(result) if isinstance(result, Tensor) and result.numel() == 1 else result

    return (once(), once())


PATCH_VALUES = declare(Check("patch_head_values", [  # (model, clean, corrupted, period, layer, head)
    _patch_case("hand-built", 4, 6, 12, 0, 0, seed=1803),  # the previous-token head: the keys, not the values
    _patch_case("tiny", 3, 5, 12, 1, 2, seed=1805),  # dropout on: a clean run in training mode changes
    _patch_case("tiny", 2, 6, 14, 0, 1, seed=1807),
    _patch_case("hand-built", 4, 6, 12, 1, 0, seed=1801),  # the induction head: the whole gap back (last: at
], call=_patch_twice))  # r = 1, "the fraction left" and "nothing patched" both give 0)

#: the clean and corrupted tokens every run of patch_head_contract reads
CONTRACT_CLEAN, CONTRACT_CORRUPTED = _patch_case("tiny", 2, 5, 12, 1, 0, seed=1811)[1:3]


def _probe_patch_contract(student: Any) -> Observations:
    def after(model: AttentionOnly, call: Any) -> dict[str, Any]:
        return _left_after(model, call, CONTRACT_CLEAN)

    def refused(corrupted: Tensor) -> Any:
        """The call that must raise: the clean tokens against ``corrupted``, equal to them or of another shape."""
        model = tiny_model()
        return student(model, CONTRACT_CLEAN.clone(), corrupted.clone(), 5, model.layers[1].hook_heads, 0)

    trained, evaluated = tiny_model(), tiny_model(training=False)
    return {
        "training": after(trained, lambda: student(trained, CONTRACT_CLEAN.clone(), CONTRACT_CORRUPTED.clone(), 5,
                                                   trained.layers[1].hook_heads, 0)),
        "eval": after(evaluated, lambda: student(evaluated, CONTRACT_CLEAN.clone(), CONTRACT_CORRUPTED.clone(), 5,
                                                 evaluated.layers[0].hook_heads, 2)),
        "errors": [attempt(lambda: refused(CONTRACT_CLEAN)), attempt(lambda: refused(CONTRACT_CORRUPTED[:, :10]))],
    }


register("patch_head_contract", _probe_patch_contract)


# ================================================================ concept checks

HEATMAP_FACTS_CASES = [(9, 768, 12, 12, 4), (5, 512, 6, 8, 0), (40, 64, 2, 4, 39), (7, 96, 3, 6, 2)]
LARGEST_TERM_CASES = [
    ([0.82, 0.03, 0.10, 0.05], [0.05, 3.0, 2.0, 0.9]),  # a sink: the largest weight, a value near zero
    ([0.1, 0.6, 0.3], [1.0, 1.2, 1.5]),  # the largest weight wins here, the longest value does not
    ([0.25, 0.25, 0.25, 0.25], [0.3, 0.2, 0.9, 0.4]),  # even weights: the longest value
    ([0.5, 0.2, 0.2, 0.1], [0.1, 2.0, 1.0, 4.5]),
]

ABLATION_READING_CASES = [
    (0.18, 0.29, 4.3, 4.16),  # four induction heads of one layer: one removed, then all four
    (0.18, 0.74, 4.42, 4.16),  # two previous-token heads
    (0.18, 0.2, 0.35, 4.16),  # the heads that are neither
    (0.5, 2.9, 3.1, 3.0),  # one head removed already costs the job
    (0.18, 0.3, 3.2, 4.16),  # all of them removed: past the midpoint, short of the uniform guess
]

register("heatmap_facts_answer", probe_answers(HEATMAP_FACTS_CASES))
register("largest_term_answer", probe_answers(LARGEST_TERM_CASES))
register("ablation_reading_answer", probe_answers(ABLATION_READING_CASES))
