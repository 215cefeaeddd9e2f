"""Judges of Chapter 8 (``08_trained_attention``), against :mod:`solutions.trained_attention`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and probe are in
:mod:`autograder.checks.trained_attention`, with the table of which check holds which sentence of the contract.
Each ``Suspect`` recomputes, on the same inputs, what one plausible mistake would return, so that a failing
learner is told which mistake it looks like.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_course.testing import DTYPE_CHANGED, NO_RETURN
from autograder.checks.core import Mistake, Observations, Raised
from autograder.checks.trained_attention import (
    _ABLATE_CONTRACT,
    _ENTROPY_CONTRACT,
    ABLATE_MEAN,
    ABLATE_ZERO,
    ENTROPY_VALUES,
    ENTROPY_ZEROS,
    HEATMAP_FACTS_CASES,
    HOOK_TOKENS,
    INDUCTION_ERRORS,
    INDUCTION_VALUES,
    LARGEST_TERM_CASES,
    PREVIOUS_ERRORS,
    PREVIOUS_VALUES,
    REPEAT_ABLATED,
    REPEAT_VALUES,
    tiny_model,
)
from autograder.judges.core import (
    Compare,
    Suspect,
    judge,
    judge_answers,
    judge_contract,
    judge_tensor,
    judge_value_error,
    register,
    value_errors,
)
from solutions import trained_attention as ref

ZERO_LOG_ZERO = "NaN from 0 ln 0"
TRAINING_MODE = "model run in training mode"
MODE_NOT_RESTORED = "model's mode not given back"
HOOK_LEFT = "hook left registered"


def _shape(x: Tensor) -> str:
    return f"{tuple(x.shape)}"


def _keeps_dtype(out: Any, what: str, weights: Tensor, *rest: Any) -> None:
    """A guard for the scores: a float64 map gives a float64 score."""
    if isinstance(out, Tensor) and out.dtype != weights.dtype:
        raise Mistake(f"{what} returned {out.dtype} for {weights.dtype} maps — keep the dtype of the weights: no "
                      f"`.float()`, no `torch.tensor(...)` of results", DTYPE_CHANGED)


# ================================================================ attention_entropy

def _row_entropy(w: Tensor) -> Tensor:
    return -torch.special.xlogy(w, w).sum(dim=-1)  # (..., T_q)


def _entropy_suspects(w: Tensor) -> list[Suspect]:
    h = ref.attention_entropy(w)
    return [
        Suspect("the entropy is in bits (log base 2); measure it in nats, with the natural logarithm",
                "bits instead of nats", lambda: h / math.log(2)),
        Suspect(f"it is summed over the {w.shape[-2]} queries: average the rows' entropies instead",
                "queries summed, not averaged", lambda: h * w.shape[-2]),
        Suspect("it is negative: the entropy is -Σ w ln w, and ln w <= 0 for a weight", "minus sign missing",
                lambda: -h),
        Suspect("it is the entropy of the columns: a row, one query's weights over the keys (the last axis), "
                "is the distribution", "entropy over the wrong axis",
                lambda: -torch.special.xlogy(w, w).sum(dim=-2).mean(dim=-1)),
        Suspect("-w ln w is averaged over the keys: sum it over the keys, then average over the queries",
                "keys averaged, not summed", lambda: h / w.shape[-1]),
        Suspect(f"it is divided by ln T_k = ln {w.shape[-1]}: the chapter's entropy is in nats, not normalised",
                "normalised entropy", lambda: h / math.log(w.shape[-1])),
        Suspect(f"it gives one entropy per query, {_shape(_row_entropy(w))}: average the rows of each map, to one "
                f"number per map {_shape(h)}", "queries not averaged", lambda: _row_entropy(w)),
    ]


def _entropy_zero_suspects(w: Tensor) -> list[Suspect]:
    rows = _row_entropy(w)
    alive = (w > 0).any(dim=-1)  # (..., T_q): rows with some weight
    return [
        *_entropy_suspects(w),
        Suspect("NaN where a key has weight 0: 0 · ln 0 is NaN in floating point, but the entropy takes it as 0 "
                "(its limit); use torch.special.xlogy(w, w), or put 0 where the weight is 0 before the sum",
                ZERO_LOG_ZERO, lambda: -(w * w.log()).sum(dim=-1).mean(dim=-1)),
        Suspect("a query whose keys were all masked has entropy 0 and still counts in the mean over the queries",
                "zero rows left out", lambda: (rows * alive).sum(dim=-1) / alive.sum(dim=-1)),
    ]


def _entropy_what(w: Tensor) -> str:
    return f"attention_entropy(weights of shape {_shape(w)})"


judge(Compare(ENTROPY_VALUES, ref.attention_entropy, _entropy_what, _entropy_suspects))
judge(Compare(ENTROPY_ZEROS, ref.attention_entropy, _entropy_what, _entropy_zero_suspects))


def _judge_entropy_contract(obs: Observations) -> None:
    judge_contract(obs["contract"], ref.attention_entropy, _ENTROPY_CONTRACT, 1122, "attention_entropy")
    first, second = obs["errors"]
    judge_value_error(first, "attention_entropy(weights of shape (5,)), one row with no query axis", ("(5,)",))
    judge_value_error(second, "attention_entropy of integer weights", ())


register("attention_entropy_contract", _judge_entropy_contract)


# ================================================================ previous_token_score

def _previous_suspects(w: Tensor) -> list[Suspect]:
    t = w.shape[-1]
    below = torch.diagonal(w, offset=-1, dim1=-2, dim2=-1)  # (..., T - 1): w[i, i-1]
    return [
        Suspect(f"query 0 has no previous token: average w[i, i-1] over the {t - 1} queries 1..T-1, not over all {t}",
                "query 0 counted", lambda: below.sum(dim=-1) / t),
        Suspect("it reads the diagonal, each query's weight on itself: the previous token is one key to the left, "
                "w[i, i-1], the diagonal below it", "the token itself instead of the previous one",
                lambda: torch.diagonal(w, dim1=-2, dim2=-1).mean(dim=-1)),
        Suspect("it reads w[i, i+1], the key after the query; rows are queries, columns keys, so the previous "
                "token is the diagonal below the main one (offset -1)", "next token instead of previous",
                lambda: torch.diagonal(w, offset=1, dim1=-2, dim2=-1).mean(dim=-1)),
        Suspect("the weights are summed over the queries: average them, to a score between 0 and 1",
                "sum instead of mean", lambda: below.sum(dim=-1)),
    ]


def _previous_what(w: Tensor) -> str:
    return f"previous_token_score(weights of shape {_shape(w)}, {str(w.dtype).removeprefix('torch.')})"


judge(Compare(PREVIOUS_VALUES, ref.previous_token_score, _previous_what, _previous_suspects, guard=_keeps_dtype))
register("previous_token_score_errors", value_errors(PREVIOUS_ERRORS, [
    ("previous_token_score(weights of shape (2, 4, 6)): 4 queries, 6 keys", ("T",)),
    ("previous_token_score(weights of shape (3, 1, 1)): T = 1", ("T",)),
]))


# ================================================================ induction_score

def _induction_suspects(w: Tensor, period: int) -> list[Suspect]:
    t = w.shape[-1]
    after = torch.diagonal(w, offset=-(period - 1), dim1=-2, dim2=-1)  # (..., T - P + 1): w[i, i-P+1], i >= P-1
    return [
        Suspect(f"it reads w[i, i-{period}], the earlier occurrence of the current token itself (a duplicate-token "
                f"head); an induction head attends the token after it, w[i, i-{period}+1], which comes next",
                "the earlier occurrence itself", lambda: torch.diagonal(w, offset=-period, dim1=-2, dim2=-1)
                .mean(dim=-1)),
        Suspect(f"query {period - 1} is still in the first occurrence: it has seen no repeat; average over the "
                f"queries {period}..{t - 1}", "query P-1 counted", lambda: after.mean(dim=-1)),
        Suspect(f"the sum over the {t - period} repeated queries is divided by all {t}: average over the repeated "
                f"queries only", "averaged over every query", lambda: after[..., 1:].sum(dim=-1) / t),
        Suspect("the weights are summed over the queries: average them, to a score between 0 and 1",
                "sum instead of mean", lambda: after[..., 1:].sum(dim=-1)),
    ]


def _induction_what(w: Tensor, period: int) -> str:
    return f"induction_score(weights of shape {_shape(w)}, {str(w.dtype).removeprefix('torch.')}, period={period})"


judge(Compare(INDUCTION_VALUES, ref.induction_score, _induction_what, _induction_suspects, guard=_keeps_dtype))
register("induction_score_errors", value_errors(INDUCTION_ERRORS, [
    ("induction_score(weights of shape (2, 6, 6), period=0)", ("period",)),
    ("induction_score(weights of shape (2, 6, 6), period=6): no query after the period", ("period",)),
    ("induction_score(weights of shape (5, 8), period=2): 5 queries, 8 keys", ()),
]))


# ================================================================ ablate_head

def _zeroed(z: Tensor, index: tuple) -> Tensor:
    out = z.clone()
    out[index] = 0.0
    return out


def _ablate_suspects(z: Tensor, head: int, mean: Tensor | None = None) -> list[Suspect]:
    others = [h for h in range(z.shape[1]) if h != head]
    suspects = [
        Suspect(f"the slice along axis 2 was replaced: z is (B, n_heads, T, d_head), head {head} is z[:, {head}]",
                "head taken from the wrong axis", lambda: _zeroed(z, (slice(None), slice(None), head))),
        Suspect(f"every head but {head} was replaced: ablating head {head} removes that head alone",
                "every other head ablated", lambda: _zeroed(z, (slice(None), others))),
        Suspect(f"head {(head - 1) % z.shape[1]} was replaced: heads are counted from 0, head {head} is z[:, {head}]",
                "heads counted from 1", lambda: _zeroed(z, (slice(None), head - 1))),
    ]
    if mean is None:
        return suspects
    return [
        Suspect("the head's output became zeros: with `mean` given, the head's slice becomes `mean` (mean "
                "ablation), broadcast over the batch", "mean ignored", lambda: ref.ablate_head(z, head)),
        Suspect("`mean` was added to the head's output: it replaces it", "mean added instead of replacing",
                lambda: z + F.one_hot(torch.tensor(head), z.shape[1]).to(z.dtype)[:, None, None] * mean),
        Suspect("the head's slice became its average over this batch: `mean` is given, computed beforehand over a "
                "reference batch; use it", "mean taken from z", lambda: ref.ablate_head(z, head, z[:, head].mean(0))),
        *suspects,
    ]


def _ablate_what(z: Tensor, head: int, mean: Tensor | None = None) -> str:
    extra = "" if mean is None else f", mean of shape {_shape(mean)}"
    return f"ablate_head(z of shape {_shape(z)}, head={head}{extra})"


judge(Compare(ABLATE_ZERO, ref.ablate_head, _ablate_what, _ablate_suspects, atol=0.0, rtol=0.0))
judge(Compare(ABLATE_MEAN, ref.ablate_head, _ablate_what, _ablate_suspects, atol=1e-7, rtol=0.0))


def _judge_ablate_contract(obs: Observations) -> None:
    judge_contract(obs["zero"], lambda z: ref.ablate_head(z, 1), {"z": _ABLATE_CONTRACT["z"]}, 1424,
                   "ablate_head(z, 1)")
    judge_contract(obs["mean"], lambda z, mean: ref.ablate_head(z, 2, mean), _ABLATE_CONTRACT, 1425,
                   "ablate_head(z, 2, mean)")
    calls = [("ablate_head(z of shape (2, 3, 4, 5), head=3): 3 heads, 0 to 2", ("head",)),
             ("ablate_head(z of shape (2, 3, 4, 5), head=-1)", ("head",)),
             ("ablate_head(z of shape (3, 4, 5), head=0): no batch axis", ("(3, 4, 5)",)),
             ("ablate_head(z of shape (2, 3, 4, 5), head=0, mean of shape (3,)): d_head is 5", ("(3,)",))]
    for raised, (what, words) in zip(obs["errors"], calls, strict=True):
        judge_value_error(raised, what, words)


register("ablate_head_contract", _judge_ablate_contract)


# ================================================================ repeat_loss

#: What the reference computes on the tiny model for each fixed case, computed once per process: the grader judges
#: a whole class against the same values, and these forward passes were most of this chapter's judging time.
_ONCE: dict[tuple, Tensor] = {}


def _once(compute: Callable[[], Tensor], *inputs: Any) -> Tensor:
    """``compute()``, remembered under ``inputs`` (compared by value: tensors by their shape and bytes)."""
    key = (compute.__name__, *((tuple(x.shape), x.numpy().tobytes()) if isinstance(x, Tensor) else x for x in inputs))
    if key not in _ONCE:
        _ONCE[key] = compute()
    return _ONCE[key]


def _eval_logits(tokens: Tensor, layer: int | None = None, head: int | None = None,
                 mean: Tensor | None = None) -> Tensor:
    """The tiny model's logits in eval mode, with the head ablated by the reference when ``layer`` is given."""

    def logits() -> Tensor:
        model = tiny_model(training=False)
        hook = None if layer is None else model.layers[layer].hook_heads.register_forward_hook(
            lambda module, inputs, z: ref.ablate_head(z, head, mean))
        with torch.no_grad():
            out = model(tokens)
        if hook is not None:
            hook.remove()
        return out

    return _once(logits, tokens, layer, head, mean)


def _loss(logits: Tensor, tokens: Tensor, first: int, shift: int = 1) -> Tensor:
    """The cross-entropy of ``tokens[:, first:]``, scored by the logits ``shift`` positions before them."""
    scored = logits[:, first - shift:logits.shape[1] - shift]
    return F.cross_entropy(scored.flatten(0, 1), tokens[:, first:].flatten())


def _repeat_suspects(tokens: Tensor, period: int, layer: int | None = None, head: int | None = None,
                     mean: Tensor | None = None) -> list[Suspect]:
    logits = _eval_logits(tokens, layer, head, mean)
    suspects = [
        Suspect(f"token {period}, the first of the repeat, is scored: nothing before it says that the span repeats "
                f"there, so only the targets {period + 1}..T-1 can be copied", "first repeated token scored",
                lambda: _loss(logits, tokens, period)),
        Suspect("the logits at position t scored token t: position t predicts token t + 1, so compare "
                "logits[:, t - 1] with tokens[:, t]", "logits not shifted",
                lambda: _loss(logits, tokens, period + 1, 0)),
        Suspect("it is the loss over the whole sequence: only the repeated part, targets P+1..T-1, can be predicted",
                "loss over the whole sequence", lambda: _loss(logits, tokens, 1)),
    ]
    if layer is None:
        return suspects
    return [
        Suspect("it is the loss with no head ablated: register a forward hook on `site` that returns "
                "ablate_head(z, head, mean) (a hook's return value replaces the module's output), before running "
                "the model", "ablation not applied", lambda: _loss(_eval_logits(tokens), tokens, period + 1)),
        *([] if mean is None else [Suspect(
            "the head was zeroed although `mean` was given: pass `mean` on to ablate_head (and let ablate_head use "
            "it)", "mean not passed on",
            lambda: _loss(_eval_logits(tokens, layer, head), tokens, period + 1))]),
        *suspects,
    ]


def _repeat_what(tokens: Tensor, period: int, layer: int | None = None, head: int | None = None,
                 mean: Tensor | None = None) -> str:
    where = "" if layer is None else f", site=model.layers[{layer}].hook_heads, head={head}"
    extra = "" if mean is None else f", mean of shape {_shape(mean)}"
    return f"repeat_loss(the tiny model, tokens of shape {_shape(tokens)}, period={period}{where}{extra})"


def _as_loss(value: Any, what: str) -> Tensor:
    """The learner's loss as a 0-d float64 tensor (a number or a one-element tensor)."""
    if value is None:
        raise Mistake(f"{what} returned None — did you forget to `return` the loss?", NO_RETURN)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Mistake(f"{what} should return the loss, a number or a 0-d tensor, got {value!r:.80}")
    return torch.tensor(float(value), dtype=torch.float64)


def _judge_repeat_one(out: Any, tokens: Tensor, period: int, *ablation: Any) -> None:
    what = _repeat_what(tokens, period, *ablation)
    first, second = out
    first, second = _as_loss(first, what), _as_loss(second, what)
    if not torch.equal(first, second):
        raise Mistake(f"{what} gave {first.item():.6g}, then {second.item():.6g} on the same model and tokens: the "
                      f"model ran in training mode, where dropout changes every pass; call model.eval() before "
                      f"running it", TRAINING_MODE)
    layer, head, mean = (*ablation, None, None, None)[:3]

    def reference() -> Tensor:
        model = tiny_model()
        site = () if layer is None else (model.layers[layer].hook_heads, head, mean)
        return ref.repeat_loss(model, tokens, period, *site).double()

    expected = _once(reference, tokens, period, layer, head, mean)
    judge_tensor(first, expected, what, _repeat_suspects(tokens, period, *ablation), atol=1e-5, rtol=1e-5)


def _judge_repeat(check: Any) -> Any:
    def judge_all(obs: Observations) -> None:
        for case, out in zip(check.cases, obs[check.key], strict=True):
            if isinstance(out, Raised):
                raise Mistake(f"{_repeat_what(*case)} {out.describe()}")
            _judge_repeat_one(out, *case)

    return judge_all


register("repeat_loss_values", _judge_repeat(REPEAT_VALUES))
register("repeat_loss_ablated", _judge_repeat(REPEAT_ABLATED))


def _judge_repeat_hooks(obs: Observations) -> None:
    clean = _eval_logits(HOOK_TOKENS)
    runs = {"ablated": ("repeat_loss(model, tokens, 5, site=model.layers[1].hook_heads, head=0) on a model in "
                        "training mode", True),
            "eval": ("repeat_loss(model, tokens, 5) on a model in eval mode", False),
            "raising": ("repeat_loss(model, tokens longer than its context, 5, site=model.layers[0].hook_heads, "
                        "head=1), which the model refuses", True)}
    for key, (what, training) in runs.items():
        run = obs[key]
        if key == "raising":
            if not isinstance(run["result"], Raised):
                raise Mistake(f"{what} returned {run['result']!r:.60} instead of letting the model's ValueError "
                              f"through")
        elif isinstance(run["result"], Raised):
            raise Mistake(f"{what} {run['result'].describe()}")
        if run["hooks"]:
            raise Mistake(f"after {what}, {run['hooks']} hook(s) were still registered on the model: remove the hook "
                          f"before returning (handle = site.register_forward_hook(...); handle.remove()), in a "
                          f"`finally:` so that it goes even when the model raises", HOOK_LEFT)
        logits = run["logits"]
        if isinstance(logits, Raised) or not torch.allclose(logits, clean, atol=1e-6):
            raise Mistake(f"after {what}, the model no longer computes what it did: the ablation outlived the call; "
                          f"remove the hook before returning, in a `finally:`", HOOK_LEFT)
        if run["training"] != training:
            raise Mistake(f"after {what}, the model was left in {'training' if run['training'] else 'eval'} mode: "
                          f"give it back in the mode it came in (mode = model.training; ...; model.train(mode))",
                          MODE_NOT_RESTORED)
    calls = [("repeat_loss(model, tokens, 5, site) without head", ("head",)),
             ("repeat_loss(model, tokens, 5, None, 1): a head without a site", ("site",)),
             ("repeat_loss(model, tokens of shape (2, 6), 5): T = P + 1 leaves no target to copy", ())]
    for raised, (what, words) in zip(obs["errors"], calls, strict=True):
        judge_value_error(raised, what, words)


register("repeat_loss_hooks", _judge_repeat_hooks)


# ================================================================ concept checks

def _heatmap_suspects(n_tokens: int, d_model: int, n_layers: int, n_heads: int, query: int) -> list[Suspect]:
    right = ((n_tokens, n_tokens), n_layers * n_heads, query + 1)
    return [
        Suspect(f"a head's map has a row per query and a column per key: {n_tokens} × {n_tokens}, whatever d_model; "
                f"{n_tokens} × {d_model} is the shape of the layer's output", "map taken to be T × d_model",
                lambda: ((n_tokens, d_model), *right[1:])),
        Suspect(f"{n_tokens} × {d_model // n_heads} is one head's output, weights times values; its map is "
                f"{n_tokens} × {n_tokens}", "a head's output taken for its map",
                lambda: ((n_tokens, d_model // n_heads), *right[1:])),
        Suspect(f"every one of the {n_layers} layers has its {n_heads} heads, each with its own map",
                "one layer's heads only", lambda: (right[0], n_heads, right[2])),
        Suspect(f"each of the {n_heads} heads of a layer has its own map; averaging them hides what each does",
                "one map per layer", lambda: (right[0], n_layers, right[2])),
        Suspect(f"under the causal mask query {query} may attend keys 0..{query} only: the rest of its row is 0",
                "causal mask forgotten", lambda: (*right[:2], n_tokens)),
        Suspect(f"query {query} may attend its own key too: keys 0..{query} are {query + 1}",
                "the query's own key left out", lambda: (*right[:2], query)),
    ]


def _largest_term_suspects(weights: list[float], value_norms: list[float]) -> list[Suspect]:
    return [
        Suspect("that key has the largest weight, not the largest term: the head adds Σ_j w_j v_j W_O, and a "
                "large weight on a value near zero (an attention sink) moves nothing; compare w_j · ‖v_j W_O‖",
                "largest weight taken as the largest term",
                lambda: max(range(len(weights)), key=weights.__getitem__)),
        Suspect("that key has the longest value, not the largest term: its weight scales it; compare w_j · ‖v_j W_O‖",
                "weights ignored", lambda: max(range(len(value_norms)), key=value_norms.__getitem__)),
    ]


register("heatmap_facts_answer", lambda obs: judge_answers(
    obs, HEATMAP_FACTS_CASES, ref.heatmap_facts, _heatmap_suspects, lambda *a: f"heatmap_facts{a}"))
register("largest_term_answer", lambda obs: judge_answers(
    obs, LARGEST_TERM_CASES, ref.largest_term, _largest_term_suspects, lambda *a: f"largest_term{a}"))
