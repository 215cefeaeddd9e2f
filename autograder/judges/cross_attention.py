"""Judges of Chapter 3 (``03_cross_attention``), against :mod:`solutions.cross_attention`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.cross_attention`. Every named mistake
is declared once, in :mod:`attention_course.mistakes.cross_attention`, which
the visible checks use too: the judges pass the reference as ``right``
(``declared(known.GROUP, reference)``) and raise the value-free ones with
``mistake(known.NAME, what, **fields)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attention_course.mistakes import cross_attention as known
from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, MODIFIED_IN_PLACE, KnownMistake
from autograder.checks.core import Check, Mistake, Observations, Raised, load_weights, projection_weights, seeded
from autograder.checks.cross_attention import (
    _CE_CONTRACT,
    _CROSS_CONTRACT,
    _CROSS_GRAD_SHAPE,
    _CROSS_SHAPE_CASES,
    _LOSS_POSITIONS_CASES,
    _SHIFT_CONTRACT,
    _TF_CONTRACT,
    CE_ERRORS,
    CE_VALUES,
    CROSS_ERRORS,
    CROSS_FORWARD,
    CROSS_MASK,
    CROSS_SHAPES,
    SHIFT_ERRORS,
    SHIFT_VALUES,
    TF_ERRORS,
    TF_EXAMPLE,
    TF_PADDING,
    _ce_contract_call,
    _cross_contract_call,
)
from autograder.judges.core import (
    Compare,
    Suspect,
    contract_check,
    declared,
    judge,
    judge_answers,
    judge_cases,
    judge_meta_crash,
    judge_pads_ignored,
    judge_projections,
    judge_tensor,
    judge_value_error,
    mistake,
    register,
    type_name,
    value_errors,
)
from solutions import cross_attention as ref
from solutions.self_attention import scaled_dot_product_attention as attend

# ================================================================ CrossAttention

def _describe(d_model: int, d_k: int, d_v: int, x: Tensor, memory: Tensor, seed: int, mask: Tensor | None) -> str:
    what = f"CrossAttention({d_model}, {d_k}, {d_v}) on x {tuple(x.shape)}, memory {tuple(memory.shape)}"
    return what + ("" if mask is None else f", memory_mask {tuple(mask.shape)}")


def _check_pair(result: Any, what: str, *case: Any) -> tuple[Any, Any]:
    """``result`` as a pair (out, weights), or the Mistake that says why it is not one (also the guard of the
    forward values, whose case it ignores)."""
    if isinstance(result, Raised):
        raise Mistake(f"{what} {result.describe()}")
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Mistake(f"{what} should return a tuple (out, weights) from forward; got {result!r:.80}")
    return result


def _judge_cross_shapes(obs: Observations) -> None:
    for case, result in zip(CROSS_SHAPES.cases, obs[CROSS_SHAPES.key], strict=True):
        d_model, d_k, d_v, x, memory, _, _ = case
        what = _describe(*case)
        out, weights = _check_pair(result, what)
        (b, t_q, _), t_k = x.shape, memory.shape[1]
        if not isinstance(out, Tensor) or not isinstance(weights, Tensor):
            raise Mistake(f"{what} should return two tensors (out, weights); got a {type_name(out)} and a "
                          f"{type_name(weights)}")
        if tuple(out.shape) == (b, t_q, d_v) and tuple(weights.shape) == (b, t_q, t_k):
            continue
        shapes = f"out {tuple(out.shape)} and weights {tuple(weights.shape)}, expected ({b}, {t_q}, {d_v}) and " \
                 f"({b}, {t_q}, {t_k})"
        gave = f"{what} gave {shapes}"
        if out.shape[-2:-1] == (t_k,) or weights.shape[-2:-1] == (t_k,):
            raise mistake(known.ROWS_PER_SOURCE_TOKEN, gave)
        if weights.shape[-1:] == (t_q,):
            raise mistake(known.TARGET_ATTENDS_TARGET, gave, t_q=t_q)
        if out.shape[-1:] == (d_model,) and weights.shape == (b, t_q, t_k):
            raise mistake(known.VALUES_OF_D_MODEL, gave)
        if d_k != d_v and out.shape[-1:] == (d_k,) and weights.shape == (b, t_q, t_k):
            raise mistake(known.VALUES_OF_D_K, gave, d_k=d_k)
        raise Mistake(f"{what} gave {shapes}: out is (B, T_q, d_v), weights (B, T_q, T_k)")


def _cross_case(d_model: int, d_k: int, d_v: int, x: Tensor, memory: Tensor, seed: int, mask: Tensor | None) -> tuple:
    """A case as the declarations take it: (w_q, w_k, w_v, x, memory, mask), the projections by the seeded weights."""
    w = projection_weights(d_model, d_k, d_v, seed)
    return (*(lambda t, m=w[name]: t @ m.T for name in ("w_q", "w_k", "w_v")), x, memory, mask)


_cross_mistakes = declared(known.CROSS, attend, case=_cross_case)


def _cross_reference(d_model: int, d_k: int, d_v: int, x: Tensor, memory: Tensor, seed: int,
                     mask: Tensor | None) -> tuple[Tensor, Tensor]:
    w = projection_weights(d_model, d_k, d_v, seed)
    return attend(x @ w["w_q"].T, memory @ w["w_k"].T, memory @ w["w_v"].T, mask)


def _cross_hint(d_model: int, d_k: int, d_v: int, x: Tensor, memory: Tensor, seed: int, mask: Tensor | None) -> str:
    return "queries w_q(x), keys w_k(memory), values w_v(memory): x asks, memory answers" + (
        "; memory_mask True = may attend" if mask is not None else "") + (
        "; a target position whose source is all padding gets all-zero weights and output, never NaN"
        if mask is not None and not mask.any(dim=-1).all() else "")


register("CrossAttention_projections",
         lambda obs: judge_projections(obs, "CrossAttention", known.BIAS_IGNORED, known.W_V_OF_D_K))
register("CrossAttention_shapes", _judge_cross_shapes)
_WEIGHTS_THEN_OUTPUT = ((1, "weights"), (0, "output"))  # the parts of (out, weights), in the order they are judged
judge(Compare(CROSS_FORWARD, _cross_reference, _describe, _cross_mistakes, _cross_hint, parts=_WEIGHTS_THEN_OUTPUT,
              guard=_check_pair))
judge(Compare(CROSS_MASK, _cross_reference, _describe, _cross_mistakes, _cross_hint, parts=_WEIGHTS_THEN_OUTPUT,
              guard=_check_pair))
def _judge_cross_gradients(obs: Observations) -> None:
    """The contract (float64, inputs untouched, gradients of x and memory), then the gradient of every projection."""
    contract_check(_cross_contract_call(ref.CrossAttention), _CROSS_CONTRACT, 334, "CrossAttention")(obs)
    d_model, d_k, d_v, seed = _CROSS_GRAD_SHAPE
    what = f"CrossAttention({d_model}, {d_k}, {d_v}) in float64"
    grads = obs["projections"]
    if isinstance(grads, Raised):
        raise Mistake(f"{what}: forward and backward {grads.describe()}")
    module = load_weights(ref.CrossAttention(d_model, d_k, d_v), projection_weights(d_model, d_k, d_v, seed)).double()
    out = _cross_contract_call(lambda *args: module)(**_CROSS_CONTRACT)[0]
    (out * seeded(*out.shape, seed=335, dtype=out.dtype)).sum().backward()
    for name, got in zip(("w_q", "w_k", "w_v"), grads, strict=True):
        if got is None:  # the output is right (the contract above compared it), yet no gradient arrived
            raise Mistake(f"{what}: {name} received no gradient, though the output depends on it — something "
                          f"detaches its weight on the way: `.detach()`, `.data`, `torch.no_grad()`", GRAPH_CUT)
        judge_tensor(got, getattr(module, name).weight.grad, f"the gradient of {what}.{name}.weight",
                     atol=1e-8, rtol=1e-6)


register("CrossAttention_gradients", _judge_cross_gradients)
register(CROSS_ERRORS.id, value_errors(CROSS_ERRORS, [
    ("CrossAttention(16, 8) on x (2, 3, 16) and memory (5, 4, 16) of different batch sizes", ("2", "5")),
    ("CrossAttention(16, 8) on memory (2, 4, 12), whose last axis is not d_model=16", ("12", "16")),
    ("CrossAttention(16, 8) on x (2, 3, 12), whose last axis is not d_model=16", ("12", "16"))]))


# ================================================================ shift_right

judge(Compare(SHIFT_VALUES, ref.shift_right, lambda tgt, s: f"shift_right(tgt {tgt.tolist()}, start_id={s})",
              declared(known.SHIFT, ref.shift_right),
              hint="start_id goes in front, the last token falls off, the shape stays B × T"))


def _judge_token_contract(obs: Observations, function: str, tgt: Tensor, expected_shapes: tuple) -> None:
    what = f"{function} on an int32 tgt of shape {tuple(tgt.shape)}"
    if obs["modified"]:
        raise Mistake(f"{function} modified its input `tgt` in place — build new tensors: `torch.cat`, "
                      f"`scatter`, or `tgt.clone()` before writing into it", MODIFIED_IN_PLACE)
    result = obs["result"]
    if isinstance(result, Raised):
        raise Mistake(f"{what} {result.describe()}")
    parts = result if isinstance(result, tuple) else (result,)
    if len(parts) != len(expected_shapes):
        raise Mistake(f"{what} should return {len(expected_shapes)} tensor(s); got {result!r:.80}")
    for got, shape in zip(parts, expected_shapes, strict=True):
        if not isinstance(got, Tensor):
            raise Mistake(f"{what} should return tensors, got {type_name(got)}")
        if tuple(got.shape) != shape:
            raise Mistake(f"{what} returned shape {tuple(got.shape)}, expected {shape}")
        if got.dtype != tgt.dtype:
            raise Mistake(f"{what} returned {got.dtype} — keep the dtype of tgt: build new columns with "
                          f"`tgt.new_full(...)` or `torch.full(..., dtype=tgt.dtype, device=tgt.device)`",
                          DTYPE_CHANGED)


def _judge_shift_contract(obs: Observations) -> None:
    _judge_token_contract(obs, "shift_right", _SHIFT_CONTRACT, ((3, 4),))
    what, found = "shift_right of a tgt on the meta device", obs["meta"]
    if isinstance(found, Raised):
        if "device" in found.message.lower():
            raise mistake(known.TOKENS_DEVICE, found=f"{what} {found.describe()}")
        raise Mistake(f"{what} {found.describe()}")
    if not (isinstance(found, (list, tuple)) and list(found) == ["meta"]):
        raise mistake(known.TOKENS_DEVICE, found=f"{what} returned {found!r:.80}")


register("shift_right_contract", _judge_shift_contract)


def _judge_kept_on_meta(found: Any, what: str, count: int, declaration: KnownMistake) -> None:
    """``found``, the devices of the ``count`` tensors an answer returned for inputs on the meta device, must all be
    meta; a crash there is judged by ``judge_meta_crash``."""
    if isinstance(found, Raised):
        judge_meta_crash(found, what, declaration, found=f"{what} {found.describe()}")
        return
    if not (isinstance(found, (list, tuple)) and list(found) == ["meta"] * count):
        raise mistake(declaration, found=f"{what} returned {found!r:.80}")
register(SHIFT_ERRORS.id, value_errors(SHIFT_ERRORS, [("shift_right(tgt of shape (7,)), which is not (B, T)", ("7",))]))


# ================================================================ teacher_forcing_pair

def _tgt_out_properties(tgt: Tensor, s: int, e: int) -> Callable[[Tensor], list[tuple[bool, KnownMistake]]]:
    """(failed, mistake) of each property of tgt_out that a mistake can break."""
    def properties(got: Tensor) -> list[tuple[bool, KnownMistake]]:
        ends = (got == e).sum(dim=-1) if got.dim() == 2 else None
        return [(bool((got == s).any()) and not bool((tgt == s).any()), known.START_IN_TGT_OUT),
                (ends is not None and bool((ends == 0).any()), known.END_MISSING)]

    return properties


def _judge_tokens(actual: Any, expected: Tensor, what: str, suspects: list[Suspect],
                  properties: Callable[[Tensor], list[tuple[bool, KnownMistake]]] | None = None,
                  hint: str = "") -> None:
    """:func:`judge_tensor`, then, when no suspect matched, a named property of the tokens if one fails."""
    try:
        judge_tensor(actual, expected, what, suspects, hint=hint)
    except Mistake as err:
        by_suspect = any(s.text in str(err) for s in suspects)
        if properties is not None and isinstance(actual, Tensor) and not by_suspect:
            for failed, known_mistake in properties(actual):
                if failed:
                    raise mistake(known_mistake, what) from None
        raise


_tgt_in_suspects = declared(known.TF_IN, ref.teacher_forcing_pair)
_tgt_out_suspects = declared(known.TF_OUT, ref.teacher_forcing_pair)


def _judge_tf(check: Check) -> Callable[[Observations], None]:
    return lambda obs: judge_cases((result, lambda result, case=case: _judge_one_tf(result, *case))
                                   for case, result in zip(check.cases, obs[check.key], strict=True))


def _judge_one_tf(result: Any, tgt: Tensor, s: int, e: int, p: int) -> None:
    what = f"teacher_forcing_pair(tgt {tgt.tolist()}, start_id={s}, end_id={e}, pad_id={p})"
    all_pad = bool((tgt == p).all(dim=1).any())
    if all_pad:
        what += " with an all-pad row"
    if isinstance(result, Raised):
        # judge_cases reports a crash only once every case that ran has passed: when the case that crashed is
        # the one with an empty sentence, the empty sentence is what the code does not handle.
        if all_pad:
            raise mistake(known.ALL_PAD_ROW, raised=f"{what} {result.describe()}")
        raise Mistake(f"{what} {result.describe()}")
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Mistake(f"{what} should return a tuple (tgt_in, tgt_out); got {result!r:.80}")
    ref_in, ref_out = ref.teacher_forcing_pair(tgt, s, e, p)
    got_in, got_out = result
    if all(isinstance(t, Tensor) and t.shape == w.shape for t, w in ((got_in, ref_out), (got_out, ref_in))) \
            and torch.equal(got_in, ref_out) and torch.equal(got_out, ref_in):
        raise mistake(known.TF_SWAPPED, call=what)
    _judge_tokens(got_in, ref_in, f"tgt_in of {what}", _tgt_in_suspects(tgt, s, e, p),
                  hint="tgt_in is `<start>`, the T tokens, and pad_id where the row is padded; if you built it with "
                  "your shift_right, make shift_right's tests pass first")
    _judge_tokens(got_out, ref_out, f"tgt_out of {what}", _tgt_out_suspects(tgt, s, e, p),
                  _tgt_out_properties(tgt, s, e),
                  hint="tgt_out is the tokens, `<end>` right after each row's last real token, then pad_id")


register(TF_EXAMPLE.id, _judge_tf(TF_EXAMPLE))
register(TF_PADDING.id, _judge_tf(TF_PADDING))


def _judge_tf_contract(obs: Observations) -> None:
    _judge_token_contract(obs, "teacher_forcing_pair", _TF_CONTRACT, ((3, 5), (3, 5)))
    _judge_kept_on_meta(obs["meta"], "teacher_forcing_pair of a tgt on the meta device", 2, known.TOKENS_DEVICE)


register("teacher_forcing_pair_contract", _judge_tf_contract)
register(TF_ERRORS.id, value_errors(TF_ERRORS, [
    ("teacher_forcing_pair(tgt of shape (7,)), which is not (B, T)", ("7",))]))


# ================================================================ sequence_cross_entropy

_ce_suspects = declared(known.CE, ref.sequence_cross_entropy)


def _ce_what(logits: Tensor, targets: Tensor, p: int) -> str:
    return f"sequence_cross_entropy(logits {tuple(logits.shape)}, targets {targets.tolist()}, pad_id={p})"


def _crashed(raised: Raised, what: str, *case: Any) -> Mistake:
    """The Mistake of a call that raised ``raised``, with what the crash most likely means when it is known (also
    the ``crashed`` of the values check, whose case it ignores)."""
    if "Expected target size" in raised.message or "batch_size" in raised.message:
        return mistake(known.CLASSES_AXIS[0], raised=f"{what} {raised.describe()}")
    return Mistake(f"{what} {raised.describe()}")


judge(Compare(CE_VALUES, ref.sequence_cross_entropy, _ce_what, _ce_suspects,
              hint="the mean of -log softmax(logits)[target] over the positions whose target is not pad_id",
              crashed=_crashed))


def _judge_ce_pads(obs: Observations) -> None:
    for (logits, targets, p), losses in zip(CE_VALUES.cases[1:], obs["results"], strict=True):
        judge_pads_ignored(_ce_what(logits, targets, p), losses, p, functools.partial(_ce_suspects, logits, targets, p),
                           _crashed)


register("sequence_cross_entropy_ignores_pads", _judge_ce_pads)
_judge_ce_contract = contract_check(_ce_contract_call(ref.sequence_cross_entropy), _CE_CONTRACT, 373,
                                    "sequence_cross_entropy")


def _judge_ce_gradients(obs: Observations) -> None:
    _judge_ce_contract(obs)
    _judge_kept_on_meta(obs["meta"], "sequence_cross_entropy of logits and targets on the meta device", 1,
                        known.LOSS_DEVICE)


register("sequence_cross_entropy_gradients", _judge_ce_gradients)


def _judge_ce_errors(obs: Observations) -> None:
    what = "sequence_cross_entropy(logits (2, 5, 7), targets (2, 4)) with targets that do not match logits.shape[:2]"
    (raised,) = obs[CE_ERRORS.key]
    vague = isinstance(raised, Raised) and raised.type == "ValueError" and not ("5" in raised.message
                                                                                and "4" in raised.message)
    if vague:
        raise mistake(known.VAGUE_VALUE_ERROR, what, message=raised.message)
    judge_value_error(raised, what, ("5", "4"))


register("sequence_cross_entropy_errors", _judge_ce_errors)


# ================================================================ concept checks

register("loss_positions_answer", lambda obs: judge_answers(
    obs, _LOSS_POSITIONS_CASES, ref.loss_positions, declared(known.LOSS_POSITIONS, ref.loss_positions),
    lambda lengths: f"loss_positions({lengths})"))
register("cross_weights_shape_answer", lambda obs: judge_answers(
    obs, _CROSS_SHAPE_CASES, ref.cross_weights_shape,
    declared(known.CROSS_WEIGHTS_SHAPE, ref.cross_weights_shape),
    lambda t_tgt, t_src: f"cross_weights_shape(t_tgt={t_tgt}, t_src={t_src})"))
