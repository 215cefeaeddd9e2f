"""Judges of Chapter 8 (``08_trained_attention``), against :mod:`solutions.trained_attention`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and probe are in
:mod:`autograder.checks.trained_attention`, and the sentence of the contract each one holds is tabled in
``autograder/checks/trained_attention_contract.md``. Every mistake a judge names is declared once, in
:mod:`attention_course.mistakes.trained_attention`, which the exercise notebook's visible checks read too: the
judges pass the reference as ``right`` (``declared(known.GROUP, reference)``) and raise the value-free ones with
``mistake(known.NAME, what, **fields)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attention_course.mistakes import trained_attention as known
from attention_course.testing import DTYPE_CHANGED, MODIFIED_IN_PLACE, NO_RETURN
from autograder.checks.core import Mistake, Observations, Raised
from autograder.checks.trained_attention import (
    _ABLATE_CONTRACT,
    _ENTROPY_CONTRACT,
    ABLATE_MEAN,
    ABLATE_ZERO,
    ABLATION_READING_CASES,
    CONTRACT_CLEAN,
    COPYING_VALUES,
    ENTROPY_VALUES,
    ENTROPY_ZEROS,
    HEATMAP_FACTS_CASES,
    HOOK_TOKENS,
    INDUCTION_ERRORS,
    INDUCTION_VALUES,
    LARGEST_TERM_CASES,
    MODELS,
    OV_VALUES,
    PATCH_VALUES,
    PREVIOUS_ERRORS,
    PREVIOUS_VALUES,
    REPEAT_ABLATED,
    REPEAT_VALUES,
    tiny_model,
)
from autograder.judges.core import (
    Compare,
    declared,
    judge,
    judge_answers,
    judge_contract,
    judge_tensor,
    judge_value_error,
    mistake,
    register,
    value_errors,
)
from solutions import trained_attention as ref


def _shape(x: Tensor) -> str:
    return f"{tuple(x.shape)}"


def _keeps_dtype(out: Any, what: str, weights: Tensor, *rest: Any) -> None:
    """A guard for the scores: a float64 map gives a float64 score."""
    if isinstance(out, Tensor) and out.dtype != weights.dtype:
        raise Mistake(f"{what} returned {out.dtype} for {weights.dtype} maps — keep the dtype of the weights: no "
                      f"`.float()`, no `torch.tensor(...)` of results", DTYPE_CHANGED)


def _judge_refusals(raised: list, calls: list[tuple[str, tuple[str, ...]]]) -> None:
    for got, (what, words) in zip(raised, calls, strict=True):
        judge_value_error(got, what, words)


# ================================================================ attention_entropy

def _entropy_what(w: Tensor) -> str:
    return f"attention_entropy(weights of shape {_shape(w)})"


judge(Compare(ENTROPY_VALUES, ref.attention_entropy, _entropy_what, declared(known.ENTROPY, ref.attention_entropy)))
judge(Compare(ENTROPY_ZEROS, ref.attention_entropy, _entropy_what,
              declared(known.ENTROPY_ZEROS, ref.attention_entropy)))


def _judge_entropy_contract(obs: Observations) -> None:
    judge_contract(obs["contract"], ref.attention_entropy, _ENTROPY_CONTRACT, 1122, "attention_entropy")
    first, second = obs["errors"]
    judge_value_error(first, "attention_entropy(weights of shape (5,)), one row with no query axis", ("(5,)",))
    judge_value_error(second, "attention_entropy of integer weights", ())


register("attention_entropy_contract", _judge_entropy_contract)


# ================================================================ previous_token_score

def _previous_what(w: Tensor) -> str:
    return f"previous_token_score(weights of shape {_shape(w)}, {str(w.dtype).removeprefix('torch.')})"


judge(Compare(PREVIOUS_VALUES, ref.previous_token_score, _previous_what,
              declared(known.PREVIOUS, ref.previous_token_score), guard=_keeps_dtype))
register("previous_token_score_errors", value_errors(PREVIOUS_ERRORS, known.PREVIOUS_REFUSED))


# ================================================================ induction_score

def _induction_what(w: Tensor, period: int) -> str:
    return f"induction_score(weights of shape {_shape(w)}, {str(w.dtype).removeprefix('torch.')}, period={period})"


judge(Compare(INDUCTION_VALUES, ref.induction_score, _induction_what, declared(known.INDUCTION, ref.induction_score),
              guard=_keeps_dtype))
register("induction_score_errors", value_errors(INDUCTION_ERRORS, known.INDUCTION_REFUSED))


# ================================================================ ablate_head

def _ablate_what(z: Tensor, head: int, mean: Tensor | None = None) -> str:
    extra = "" if mean is None else f", mean of shape {_shape(mean)}"
    return f"ablate_head(z of shape {_shape(z)}, head={head}{extra})"


judge(Compare(ABLATE_ZERO, ref.ablate_head, _ablate_what, declared(known.ABLATE, ref.ablate_head), atol=0.0,
              rtol=0.0))
judge(Compare(ABLATE_MEAN, ref.ablate_head, _ablate_what, declared(known.ABLATE_MEAN, ref.ablate_head), atol=1e-7,
              rtol=0.0))


def _judge_ablate_contract(obs: Observations) -> None:
    judge_contract(obs["zero"], lambda z: ref.ablate_head(z, 1), {"z": _ABLATE_CONTRACT["z"]}, 1424,
                   "ablate_head(z, 1)")
    judge_contract(obs["mean"], lambda z, mean: ref.ablate_head(z, 2, mean), _ABLATE_CONTRACT, 1425,
                   "ablate_head(z, 2, mean)")
    _judge_refusals(obs["errors"], known.ABLATE_REFUSED)


register("ablate_head_contract", _judge_ablate_contract)


# ================================================================ repeat_loss

#: What the reference computes on the tiny models for each fixed case, computed once per process: the grader judges
#: a whole class against the same values, and these forward passes were most of this chapter's judging time.
_ONCE: dict[tuple, Any] = {}


def _once(compute: Callable[[], Any], *inputs: Any) -> Any:
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


def _repeat_case(tokens: Tensor, period: int, layer: int | None = None, head: int | None = None,
                 mean: Tensor | None = None) -> tuple:
    """A check's case in the form the declarations take: the logits, and for an ablation the intact logits and
    (for mean ablation) those with the head zeroed."""
    logits = _eval_logits(tokens, layer, head, mean)
    if layer is None:
        return logits, tokens, period
    zeroed = None if mean is None else _eval_logits(tokens, layer, head)
    return logits, tokens, period, _eval_logits(tokens), zeroed


REPEAT_SUSPECTS = declared(known.REPEAT, ref.repeat_loss, case=_repeat_case)
REPEAT_ABLATED_SUSPECTS = declared(known.REPEAT_ABLATED, ref.repeat_loss, case=_repeat_case)


def _repeat_what(tokens: Tensor, period: int, layer: int | None = None, head: int | None = None,
                 mean: Tensor | None = None) -> str:
    where = "" if layer is None else f", site=model.layers[{layer}].hook_heads, head={head}"
    extra = "" if mean is None else f", mean of shape {_shape(mean)}"
    return f"repeat_loss(the tiny model, tokens of shape {_shape(tokens)}, period={period}{where}{extra})"


def _as_number(value: Any, what: str) -> Tensor:
    """A learner's loss or fraction as a 0-d float64 tensor (a number or a one-element tensor)."""
    if value is None:
        raise Mistake(f"{what} returned None — did you forget to `return` it?", NO_RETURN)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise mistake(known.NOT_A_LOSS, what, got=f"{value!r:.80}")
    return torch.tensor(float(value), dtype=torch.float64)


def _same_twice(out: Any, what: str) -> Tensor:
    """The first of two results of one case, which must agree (else the model ran with dropout on)."""
    first, second = (_as_number(value, what) for value in out)
    if not torch.equal(first, second):
        raise mistake(known.TRAINING_MODE, what, first=first.item(), second=second.item())
    return first


def _judge_repeat_one(out: Any, tokens: Tensor, period: int, *ablation: Any) -> None:
    what = _repeat_what(tokens, period, *ablation)
    got = _same_twice(out, what)
    layer, head, mean = (*ablation, None, None, None)[:3]

    def reference() -> Tensor:
        model = tiny_model()
        site = () if layer is None else (model.layers[layer].hook_heads, head, mean)
        return ref.repeat_loss(model, tokens, period, *site).double()

    expected = _once(reference, tokens, period, layer, head, mean)
    suspects = (REPEAT_SUSPECTS if layer is None else REPEAT_ABLATED_SUSPECTS)(tokens, period, *ablation)
    judge_tensor(got, expected, what, suspects, atol=1e-5, rtol=1e-5)


def _judge_each(check: Any, judge_one: Callable[..., None], what: Callable[..., str]) -> Callable[[Observations], None]:
    def judge_all(obs: Observations) -> None:
        for case, out in zip(check.cases, obs[check.key], strict=True):
            if isinstance(out, Raised):
                raise Mistake(f"{what(*case)} {out.describe()}")
            judge_one(out, *case)

    return judge_all


register("repeat_loss_values", _judge_each(REPEAT_VALUES, _judge_repeat_one, _repeat_what))
register("repeat_loss_ablated", _judge_each(REPEAT_ABLATED, _judge_repeat_one, _repeat_what))


def _judge_left_behind(run: dict, what: str, training: bool, clean: Tensor) -> None:
    """What a call left of the model it was given: no hook, the same logits as before, the mode it came in."""
    if run["hooks"]:
        raise mistake(known.HOOK_LEFT, f"after {what}", hooks=run["hooks"])
    logits = run["logits"]
    if isinstance(logits, Raised) or not torch.allclose(logits, clean, atol=1e-6):
        raise mistake(known.HOOK_OUTLIVED, f"after {what}")
    if run["training"] != training:
        raise mistake(known.MODE_NOT_RESTORED, f"after {what}", left="training" if run["training"] else "eval")


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
        _judge_left_behind(run, what, training, clean)
    _judge_refusals(obs["errors"], known.REPEAT_REFUSED)


register("repeat_loss_hooks", _judge_repeat_hooks)


# ================================================================ ov_circuit

def _ov_case(model: str, layer: int, head: int) -> tuple:
    return MODELS[model](), layer, head


def _ov_reference(model: str, layer: int, head: int) -> Tensor:
    return _once(lambda: ref.ov_circuit(*_ov_case(model, layer, head)).detach(), model, layer, head)


def _ov_what(model: str, layer: int, head: int) -> str:
    return f"ov_circuit(the {model} model, layer={layer}, head={head})"


OV_SUSPECTS = declared(known.OV, ref.ov_circuit, case=_ov_case)
judge(Compare(OV_VALUES, _ov_reference, _ov_what, OV_SUSPECTS, atol=1e-5, rtol=1e-5,
              same_type=False))  # its dtype is the test of ov_circuit_contract


def _judge_ov_contract(obs: Observations) -> None:
    what = "ov_circuit(the tiny model in float64, layer=1, head=2)"
    if isinstance(obs["dtype"], Raised):
        raise Mistake(f"{what} {obs['dtype'].describe()}")
    if obs["changed"]:
        raise mistake(known.MODEL_CHANGED, f"{what} changed {', '.join(obs['changed'])}")
    if obs["dtype"] != "torch.float64":
        raise Mistake(f"{what} returned {obs['dtype']}: keep the dtype of the weights, float64 here (no `.float()`)",
                      DTYPE_CHANGED)
    _judge_refusals(obs["errors"], known.OV_REFUSED)


register("ov_circuit_contract", _judge_ov_contract)


# ================================================================ copying_score

def _copying_what(circuit: Tensor) -> str:
    return f"copying_score(circuit of shape {_shape(circuit)})"


def _as_scores(out: Any, what: str, circuit: Tensor) -> None:
    """A guard: the pair (share, positivity), each a number or a one-element tensor."""
    if out is None:
        raise Mistake(f"{what} returned None — did you forget to `return` (share, positivity)?", NO_RETURN)
    if not isinstance(out, tuple) or len(out) != 2:
        raise Mistake(f"{what} should return a pair (share, positivity), got {out!r:.80}")


def _compare_number(actual: Any, expected: Tensor, what: str, suspects: Any, hint: str, atol: float,
                    rtol: float) -> None:
    """judge_tensor on a learner's number, read as a 0-d tensor (a float is as good as a 0-d tensor here); a wrong
    number that no mistake explains is quoted as it came back."""
    expected = expected.detach().double()
    if isinstance(actual, (int, float)) and not isinstance(actual, bool):
        try:
            judge_tensor(torch.tensor(float(actual), dtype=torch.float64), expected, what, suspects, hint, atol, rtol)
        except Mistake as err:
            if err.name:
                raise
            raise Mistake(f"{what} is {actual!r}, expected {expected.item():.6g}") from None
        return
    if isinstance(actual, Tensor) and actual.numel() == 1:
        actual = actual.reshape(())
    judge_tensor(actual, expected, what, suspects, hint, atol, rtol)


judge(Compare(COPYING_VALUES, lambda c: tuple(x.detach() for x in ref.copying_score(c)), _copying_what,
              declared(known.COPYING, ref.copying_score), parts=((0, "share"), (1, "positivity")), guard=_as_scores,
              compare=_compare_number, atol=1e-5, rtol=1e-5))


def _judge_copying_contract(obs: Observations) -> None:
    what = "copying_score(a float64 circuit (7, 7))"
    if isinstance(obs["dtypes"], Raised):
        raise Mistake(f"{what} {obs['dtypes'].describe()}")
    if obs["modified"]:
        raise Mistake(f"{what} modified the circuit in place — read it, never write to it", MODIFIED_IN_PLACE)
    if any(dtype != "torch.float64" for dtype in obs["dtypes"]):
        raise Mistake(f"{what} returned {', '.join(obs['dtypes'])}: keep the circuit's dtype, float64 here, for "
                      f"both numbers (a boolean's mean needs `.to(circuit.dtype)`, not `.float()`)", DTYPE_CHANGED)
    _judge_refusals(obs["errors"], known.COPYING_REFUSED)


register("copying_score_contract", _judge_copying_contract)


# ================================================================ patch_head

def _patch_what(model: str, clean: Tensor, corrupted: Tensor, period: int, layer: int, head: int) -> str:
    return (f"patch_head(the {model} model, clean and corrupted tokens of shape {_shape(clean)}, period={period}, "
            f"site=model.layers[{layer}].hook_heads, head={head})")


def _patch_losses(model: str, clean: Tensor, corrupted: Tensor, period: int, layer: int, head: int) -> dict:
    """The losses of every run a patch compares, and of the runs its mistakes would compare, by the reference."""

    def losses() -> dict:
        built = MODELS[model]().eval()
        site = built.layers[layer].hook_heads
        z = {}
        for name, tokens in (("clean", clean), ("corrupted", corrupted)):
            handle = site.register_forward_hook(lambda module, inputs, out, name=name: z.update({name: out}))
            with torch.no_grad():
                built(tokens)
            handle.remove()

        def loss(tokens: Tensor, **ablation: Any) -> float:
            where = (site, ablation["head"], ablation.get("mean")) if ablation else ()
            return float(ref.repeat_loss(built, tokens, period, *where))

        with_layer = site.register_forward_hook(lambda module, inputs, out: z["clean"])
        with torch.no_grad():
            whole_layer = float(ref.repeat_loss(built, corrupted, period))
        with_layer.remove()
        return {"clean": loss(clean), "corrupted": loss(corrupted), "layer": whole_layer,
                "patched": loss(corrupted, head=head, mean=z["clean"][:, head]),
                "zeroed": loss(corrupted, head=head),
                "noised": loss(clean, head=head, mean=z["corrupted"][:, head])}

    return _once(losses, model, clean, corrupted, period, layer, head)


PATCH_SUSPECTS = declared(known.PATCH, ref.patch_head, case=lambda *case: (_patch_losses(*case),))


def _judge_patch_one(out: Any, model: str, clean: Tensor, corrupted: Tensor, period: int, layer: int,
                     head: int) -> None:
    case = (model, clean, corrupted, period, layer, head)
    what = _patch_what(*case)
    got = _same_twice(out, what)

    def reference() -> Tensor:
        built = MODELS[model]()
        return ref.patch_head(built, clean, corrupted, period, built.layers[layer].hook_heads, head).double()

    expected = _once(reference, *case)
    judge_tensor(got, expected, what, PATCH_SUSPECTS(*case), atol=1e-4, rtol=1e-4)


register("patch_head_values", _judge_each(PATCH_VALUES, _judge_patch_one, _patch_what))


def _judge_patch_contract(obs: Observations) -> None:
    clean = _once(lambda: tiny_model(training=False)(CONTRACT_CLEAN).detach(), CONTRACT_CLEAN)
    runs = {"training": ("patch_head(model, clean, corrupted, 5, site=model.layers[1].hook_heads, head=0) on a "
                         "model in training mode", True),
            "eval": ("patch_head(model, clean, corrupted, 5, site=model.layers[0].hook_heads, head=2) on a model in "
                     "eval mode", False)}
    for key, (what, training) in runs.items():
        run = obs[key]
        if isinstance(run["result"], Raised):
            raise Mistake(f"{what} {run['result'].describe()}")
        _judge_left_behind(run, what, training, clean)
    _judge_refusals(obs["errors"], known.PATCH_REFUSED)


register("patch_head_contract", _judge_patch_contract)


# ================================================================ concept checks

register("heatmap_facts_answer", lambda obs: judge_answers(
    obs, HEATMAP_FACTS_CASES, ref.heatmap_facts, declared(known.HEATMAP, ref.heatmap_facts),
    lambda *a: f"heatmap_facts{a}"))
register("largest_term_answer", lambda obs: judge_answers(
    obs, LARGEST_TERM_CASES, ref.largest_term, declared(known.LARGEST_TERM, ref.largest_term),
    lambda *a: f"largest_term{a}"))
register("ablation_reading_answer", lambda obs: judge_answers(
    obs, ABLATION_READING_CASES, ref.ablation_reading, declared(known.ABLATION_READING, ref.ablation_reading),
    lambda *a: f"ablation_reading{a}"))
