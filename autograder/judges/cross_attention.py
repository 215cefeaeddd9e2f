"""Judges of Chapter 3 (``03_cross_attention``), against :mod:`solutions.cross_attention`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and
probe are in :mod:`autograder.checks.cross_attention`. Each ``Suspect``
recomputes, on the same inputs, what one plausible mistake would return, so
that a failing learner is told which mistake it looks like.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_course.testing import DTYPE_CHANGED, MODIFIED_IN_PLACE
from autograder.checks.core import Check, Mistake, Observations, Raised, projection_weights
from autograder.checks.cross_attention import (
    _CE_CONTRACT,
    _CROSS_CONTRACT,
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
    judge,
    judge_answers,
    judge_cases,
    judge_pads_ignored,
    judge_projections,
    judge_tensor,
    judge_value_error,
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
        if out.shape[-2:-1] == (t_k,) or weights.shape[-2:-1] == (t_k,):
            raise Mistake(
                f"{what} gave {shapes}: one row per *source* token — the queries must come from the decoder "
                f"states x, so there is one output row per target position, whatever T_k",
                "queries taken from the encoder")
        if weights.shape[-1:] == (t_q,):
            raise Mistake(
                f"{what} gave {shapes}: each target position attends the T_q = {t_q} target positions — in "
                f"cross-attention the keys and values come from `memory`, the encoder output, so the weights "
                f"are T_q × T_k", "self-attention instead of cross-attention")
        if out.shape[-1:] == (d_model,) and weights.shape == (b, t_q, t_k):
            raise Mistake(f"{what} gave {shapes}: the values are `memory` itself — project them with w_v",
                          "values not projected")
        if d_k != d_v and out.shape[-1:] == (d_k,) and weights.shape == (b, t_q, t_k):
            raise Mistake(f"{what} gave {shapes}: the values have width d_k = {d_k} — w_v maps d_model -> d_v, "
                          f"and d_v falls back to d_k only when it is not given", "w_v of width d_k instead of d_v")
        raise Mistake(f"{what} gave {shapes}: out is (B, T_q, d_v), weights (B, T_q, T_k)")


def _cross_mistakes(d_model: int, d_k: int, d_v: int, x: Tensor, memory: Tensor, seed: int,
                    mask: Tensor | None) -> list[Suspect]:
    w = projection_weights(d_model, d_k, d_v, seed)
    q, k, v = x @ w["w_q"].T, memory @ w["w_k"].T, memory @ w["w_v"].T
    mistakes = [
        Suspect("the keys and values are projections of x, so each target position attends the target sentence — in "
                "cross-attention they are projections of `memory`, the encoder output",
                "self-attention instead of cross-attention", lambda: attend(q, x @ w["w_k"].T, x @ w["w_v"].T, mask)),
        Suspect("the queries are projections of `memory` and the keys and values of x — the decoder states x ask "
                "(queries), the encoder output answers (keys, values)", "queries taken from the encoder",
                lambda: attend(memory @ w["w_q"].T, x @ w["w_k"].T, x @ w["w_v"].T)),
        Suspect("the queries come from `memory` too, so this is the encoder attending to itself — the queries must be "
                "projections of the decoder states x", "queries taken from the encoder",
                lambda: attend(memory @ w["w_q"].T, k, v, mask)),
        Suspect("the values are `memory` itself — project them with w_v", "values not projected",
                lambda: attend(q, k, memory, mask)),
        Suspect("the keys come from w_v and the values from w_k",
                "keys and values swapped", lambda: attend(q, v, k, mask)),
    ]
    if mask is not None:
        mistakes += [
            Suspect("the memory mask is not passed on to the attention: padded source positions still get weight",
                    "memory mask ignored", lambda: attend(q, k, v)),
            Suspect("the memory mask is inverted: True means 'may attend', so the real source tokens were blocked and "
                    "the padding kept", "inverted memory mask", lambda: attend(q, k, v, ~mask)),
        ]
    return mistakes


def _cross_reference(d_model: int, d_k: int, d_v: int, x: Tensor, memory: Tensor, seed: int,
                     mask: Tensor | None) -> tuple[Tensor, Tensor]:
    w = projection_weights(d_model, d_k, d_v, seed)
    return attend(x @ w["w_q"].T, memory @ w["w_k"].T, memory @ w["w_v"].T, mask)


def _cross_hint(d_model: int, d_k: int, d_v: int, x: Tensor, memory: Tensor, seed: int, mask: Tensor | None) -> str:
    return "queries w_q(x), keys w_k(memory), values w_v(memory): x asks, memory answers" + (
        "; memory_mask True = may attend" if mask is not None else "") + (
        "; a target position whose source is all padding gets all-zero weights and output, never NaN"
        if mask is not None and not mask.any(dim=-1).all() else "")


register("CrossAttention_projections", lambda obs: judge_projections(obs, "CrossAttention"))
register("CrossAttention_shapes", _judge_cross_shapes)
_WEIGHTS_THEN_OUTPUT = ((1, "weights"), (0, "output"))  # the parts of (out, weights), in the order they are judged
judge(Compare(CROSS_FORWARD, _cross_reference, _describe, _cross_mistakes, _cross_hint, parts=_WEIGHTS_THEN_OUTPUT,
              guard=_check_pair))
judge(Compare(CROSS_MASK, _cross_reference, _describe, _cross_mistakes, _cross_hint, parts=_WEIGHTS_THEN_OUTPUT,
              guard=_check_pair))
register("CrossAttention_gradients",
         contract_check(_cross_contract_call(ref.CrossAttention), _CROSS_CONTRACT, 334, "CrossAttention"))
register(CROSS_ERRORS.id, value_errors(CROSS_ERRORS, [
    ("CrossAttention(16, 8) on x (2, 3, 16) and memory (5, 4, 16) of different batch sizes", ("2", "5")),
    ("CrossAttention(16, 8) on memory (2, 4, 12), whose last axis is not d_model=16", ("12", "16"))]))


# ================================================================ shift_right

def _shift_suspects(tgt: Tensor, start_id: int) -> list[Suspect]:
    b, t = tgt.shape
    start = torch.full((b, 1), start_id, dtype=tgt.dtype)
    first_overwritten = tgt.clone()
    first_overwritten[:, 0] = start_id
    return [
        Suspect("it drops the first token and puts start_id at the end — shifting *right* puts start_id in front "
                "and lets the last token fall off", "shifted left instead of right",
                lambda: torch.cat([tgt[:, 1:], start], dim=1)),
        Suspect("it keeps every token, so the result has T + 1 columns — drop the last token so that the shape "
                "stays (B, T)", "length T+1 instead of T", lambda: torch.cat([start, tgt], dim=1)),
        Suspect("torch.roll moved the last token round to the front — write start_id over column 0 after "
                "rolling", "roll without overwriting the first column", lambda: tgt.roll(1, dims=1)),
        Suspect("column 0 holds 0, not start_id", "start_id not prepended",
                lambda: torch.cat([torch.zeros_like(start), tgt[:, :-1]], dim=1)),
        Suspect("it writes start_id over the first token instead of moving every token one place to the right",
                "start_id written over the first token", lambda: first_overwritten),
        Suspect("it shifts the rows of the batch, not the tokens of each row — concatenate along dim=1",
                "shifted along the batch axis",
                lambda: torch.cat([torch.full((1, t), start_id, dtype=tgt.dtype), tgt[:-1]], dim=0)),
    ]


judge(Compare(SHIFT_VALUES, ref.shift_right, lambda tgt, s: f"shift_right(tgt {tgt.tolist()}, start_id={s})",
              _shift_suspects, hint="start_id goes in front, the last token falls off, the shape stays B × T"))


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


register("shift_right_contract", lambda obs: _judge_token_contract(obs, "shift_right", _SHIFT_CONTRACT, ((3, 4),)))
register(SHIFT_ERRORS.id, value_errors(SHIFT_ERRORS, [("shift_right(tgt of shape (7,)), which is not (B, T)", ("7",))]))


# ================================================================ teacher_forcing_pair

def _with_end(tgt: Tensor, positions: Tensor, end_id: int, fill: int) -> Tensor:
    """``tgt`` with one extra column of ``fill``, then ``end_id`` written at ``positions (B,)``."""
    padded = torch.cat([tgt, torch.full((tgt.shape[0], 1), fill, dtype=tgt.dtype)], dim=1)
    return padded.scatter(1, positions.clamp(0, tgt.shape[1]).unsqueeze(1), end_id)


def _tgt_in_suspects(tgt: Tensor, s: int, e: int, p: int) -> list[Suspect]:
    _, ref_out = ref.teacher_forcing_pair(tgt, s, e, p)
    return [
        Suspect("tgt_in holds `<end>`: it is tgt_out shifted right, but the decoder never reads `<end>` — after "
                "the last real token tgt_in holds pad_id", "end token in tgt_in", lambda: ref.shift_right(ref_out, s)),
        Suspect("tgt_in has only T columns: it is `<start>` followed by all T tokens, (B, T + 1) like tgt_out",
                "tgt_in of length T instead of T + 1", lambda: ref.shift_right(tgt, s)),
        Suspect("tgt_in does not begin with `<start>` — the decoder's first input is `<start>`",
                "start token missing from tgt_in",
                lambda: torch.cat([tgt, torch.full((tgt.shape[0], 1), p, dtype=tgt.dtype)], dim=1)),
    ]


def _tgt_out_suspects(tgt: Tensor, s: int, e: int, p: int) -> list[Suspect]:
    b, t = tgt.shape
    lengths = (tgt != p).sum(dim=1)
    start = torch.full((b, 1), s, dtype=tgt.dtype)
    _, ref_out = ref.teacher_forcing_pair(tgt, s, e, p)
    after_padding = "`<end>` sits in the last column, after the padding — it belongs right after each row's last " \
                    "real token, and the padding follows it"
    start_in_out = "tgt_out begins with `<start>` — tgt_out holds what the decoder must predict: the first word, " \
                   "..., the last word, then `<end>`; `<start>` is only ever an input"
    pad_zero = f"it treats 0 as the padding: here pad_id is {p}, so use `tgt != pad_id` to find the real tokens " \
               "and fill new columns with pad_id"
    return [
        Suspect(after_padding, "end token placed after the padding",
                lambda: torch.cat([tgt, torch.full((b, 1), e, dtype=tgt.dtype)], dim=1)),
        Suspect("tgt_out has no `<end>` — the decoder must learn to stop, so `<end>` goes right after each row's "
                "last real token", "end token missing from tgt_out", lambda: _with_end(tgt, lengths, p, p)),
        Suspect("tgt_out has no `<end>` — the decoder must learn to stop, so `<end>` goes right after each row's "
                "last real token", "end token missing from tgt_out", lambda: _with_end(tgt, lengths, 0, 0)),
        Suspect("`<end>` replaced the last real token — it goes one place *after* it",
                "end token written over the last real token", lambda: _with_end(tgt, lengths - 1, e, p)),
        Suspect(start_in_out, "start token in tgt_out", lambda: torch.cat([start, tgt], dim=1)),
        Suspect(start_in_out, "start token in tgt_out", lambda: ref.shift_right(ref_out, s)),
        Suspect(pad_zero, "pad_id assumed to be 0", lambda: _with_end(tgt, (tgt != 0).sum(dim=1), e, p)),
        Suspect(pad_zero, "pad_id assumed to be 0", lambda: _with_end(tgt, (tgt != 0).sum(dim=1), e, 0)),
        Suspect(pad_zero, "pad_id assumed to be 0", lambda: _with_end(tgt, lengths, e, 0)),
        Suspect("a row without padding got `<end>` at column 0: `argmax` of `tgt == pad_id` is 0 when the row has "
                "no pad at all — such a row's `<end>` goes in the extra last column",
                "row without padding mishandled", lambda: _with_end(tgt, (tgt == p).int().argmax(dim=1), e, p)),
    ]


Properties = Callable[[Tensor], list[tuple[bool, str, str]]]


def _tgt_out_properties(tgt: Tensor, s: int, e: int) -> Properties:
    """(failed, message, name) of each property of tgt_out that a mistake can break."""
    def properties(got: Tensor) -> list[tuple[bool, str, str]]:
        ends = (got == e).sum(dim=-1) if got.dim() == 2 else None
        return [
            (bool((got == s).any()) and not bool((tgt == s).any()),
             "tgt_out contains `<start>` — it holds what the decoder must predict, and `<start>` is only ever an "
             "input", "start token in tgt_out"),
            (ends is not None and bool((ends == 0).any()),
             "a row of tgt_out has no `<end>` — `<end>` goes right after each row's last real token",
             "end token missing from tgt_out"),
        ]

    return properties


def _judge_tokens(actual: Any, expected: Tensor, what: str, suspects: list[Suspect],
                  properties: Properties | None = None, hint: str = "") -> None:
    """:func:`judge_tensor`, then, when no suspect matched, a named property of the tokens if one fails."""
    try:
        judge_tensor(actual, expected, what, suspects, hint=hint)
    except Mistake as err:
        by_suspect = any(s.text in str(err) for s in suspects)
        if properties is not None and isinstance(actual, Tensor) and not by_suspect:
            for failed, message, name in properties(actual):
                if failed:
                    raise Mistake(f"{what}: {message}", name) from None
        raise


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
            raise Mistake(f"{what} {result.describe()} — an all-pad row is an empty sentence: its tgt_in is "
                          f"`<start>` then pad_id, its tgt_out `<end>` then pad_id", "all-pad row not handled")
        raise Mistake(f"{what} {result.describe()}")
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Mistake(f"{what} should return a tuple (tgt_in, tgt_out); got {result!r:.80}")
    ref_in, ref_out = ref.teacher_forcing_pair(tgt, s, e, p)
    got_in, got_out = result
    if all(isinstance(t, Tensor) and t.shape == w.shape for t, w in ((got_in, ref_out), (got_out, ref_in))) \
            and torch.equal(got_in, ref_out) and torch.equal(got_out, ref_in):
        raise Mistake(f"{what} returned (tgt_out, tgt_in) — return them in the order (tgt_in, tgt_out)",
                      "tgt_in and tgt_out swapped")
    _judge_tokens(got_in, ref_in, f"tgt_in of {what}", _tgt_in_suspects(tgt, s, e, p),
                  hint="tgt_in is `<start>`, the T tokens, and pad_id where the row is padded; if you built it with "
                  "your shift_right, make shift_right's tests pass first")
    _judge_tokens(got_out, ref_out, f"tgt_out of {what}", _tgt_out_suspects(tgt, s, e, p),
                  _tgt_out_properties(tgt, s, e),
                  hint="tgt_out is the tokens, `<end>` right after each row's last real token, then pad_id")


register(TF_EXAMPLE.id, _judge_tf(TF_EXAMPLE))
register(TF_PADDING.id, _judge_tf(TF_PADDING))
register(
    "teacher_forcing_pair_contract",
    lambda obs: _judge_token_contract(obs, "teacher_forcing_pair", _TF_CONTRACT, ((3, 5), (3, 5))),
)
register(TF_ERRORS.id, value_errors(TF_ERRORS, [
    ("teacher_forcing_pair(tgt of shape (7,)), which is not (B, T)", ("7",))]))


# ================================================================ sequence_cross_entropy

def _ce_suspects(logits: Tensor, targets: Tensor, p: int) -> list[Suspect]:
    v = logits.shape[-1]
    flat_logits, flat_targets = logits.reshape(-1, v), targets.reshape(-1)
    keep = targets != p
    nll = lambda: F.cross_entropy(logits.transpose(1, 2), targets.masked_fill(~keep, 0), reduction="none") * keep
    over_padding = "the pad positions are scored as if `<pad>` were a word to predict — leave them out " \
                   "(`ignore_index=pad_id`, or average only where targets != pad_id)"
    last_only = "only the last position is scored — with teacher forcing the decoder predicts every target " \
                "position in one pass, and every non-pad position counts; looking at the last position only is " \
                "what generation does, not training"
    return [
        Suspect(over_padding, "loss averaged over the padding too", lambda: F.cross_entropy(flat_logits, flat_targets)),
        Suspect("the pads contribute 0 but still count in the denominator — divide by the number of non-pad "
                "targets, not by B·T", "loss averaged over the padding too", lambda: nll().sum() / targets.numel()),
        Suspect(last_only, "loss taken at the last position only",
                lambda: F.cross_entropy(logits[:, -1], targets[:, -1], ignore_index=p)),
        Suspect(last_only, "loss taken at the last position only",
                lambda: F.cross_entropy(logits[:, -1], targets[:, -1])),
        Suspect("it is the sum of the per-position losses — the loss is their mean over the non-pad positions",
                "summed instead of averaged", lambda: nll().sum()),
        Suspect("each sentence is averaged first and the sentences then averaged, so a short sentence's tokens "
                "weigh more — average over all non-pad positions of the batch at once",
                "mean of per-sentence means", lambda: (nll().sum(1) / keep.sum(1)).mean()),
        Suspect("it sums over the positions of each sentence and averages over the sentences — average over "
                "all non-pad positions", "summed over positions, averaged over sentences",
                lambda: nll().sum(1).mean()),
        Suspect(f"it ignores the target 0 instead of pad_id={p}", "pad_id assumed to be 0",
                lambda: F.cross_entropy(flat_logits, flat_targets, ignore_index=0)),
        Suspect("the logits went into nll_loss without log_softmax; nll_loss expects log-probabilities",
                "log_softmax missing", lambda: F.nll_loss(flat_logits, flat_targets, ignore_index=p)),
        Suspect("it averages minus the *probabilities* of the targets — cross-entropy uses their "
                "log-probabilities, `log_softmax`", "probabilities instead of log-probabilities",
                lambda: -torch.softmax(logits, -1).gather(-1, targets.masked_fill(~keep, 0)[..., None])[..., 0]
                [keep].mean()),
        Suspect("it returns one loss per position — the loss is their mean, a single 0-dim tensor",
                "no reduction to a scalar", lambda: nll()),
    ]


def _ce_what(logits: Tensor, targets: Tensor, p: int) -> str:
    return f"sequence_cross_entropy(logits {tuple(logits.shape)}, targets {targets.tolist()}, pad_id={p})"


def _crashed(raised: Raised, what: str, *case: Any) -> Mistake:
    """The Mistake of a call that raised ``raised``, with what the crash most likely means when it is known (also
    the ``crashed`` of the values check, whose case it ignores)."""
    if "Expected target size" in raised.message or "batch_size" in raised.message:
        return Mistake(f"{what} {raised.describe()} — F.cross_entropy wants the classes on axis 1: pass "
                       f"`logits.reshape(-1, V)` with `targets.reshape(-1)`, or `logits.transpose(1, 2)` with "
                       f"`targets`", "classes on the wrong axis")
    return Mistake(f"{what} {raised.describe()}")


judge(Compare(CE_VALUES, ref.sequence_cross_entropy, _ce_what, _ce_suspects,
              hint="the mean of -log softmax(logits)[target] over the positions whose target is not pad_id",
              crashed=_crashed))


def _judge_ce_pads(obs: Observations) -> None:
    for (logits, targets, p), losses in zip(CE_VALUES.cases[1:], obs["results"], strict=True):
        judge_pads_ignored(_ce_what(logits, targets, p), losses, p, functools.partial(_ce_suspects, logits, targets, p),
                           _crashed)


register("sequence_cross_entropy_ignores_pads", _judge_ce_pads)
register("sequence_cross_entropy_gradients",
         contract_check(_ce_contract_call(ref.sequence_cross_entropy), _CE_CONTRACT, 373, "sequence_cross_entropy"))


def _judge_ce_errors(obs: Observations) -> None:
    what = "sequence_cross_entropy(logits (2, 5, 7), targets (2, 4)) with targets that do not match logits.shape[:2]"
    (raised,) = obs[CE_ERRORS.key]
    vague = isinstance(raised, Raised) and raised.type == "ValueError" and not ("5" in raised.message
                                                                                and "4" in raised.message)
    if vague:
        raise Mistake(f"{what}: the ValueError should name both shapes, so that the learner sees which "
                      f"tensor is wrong; its message was {raised.message!r}", "ValueError without the shapes")
    judge_value_error(raised, what, ("5", "4"))


register("sequence_cross_entropy_errors", _judge_ce_errors)


# ================================================================ concept checks

def _loss_positions_suspects(lengths: list[int]) -> list[Suspect]:
    return [
        Suspect("with teacher forcing the decoder predicts every position at once and the loss scores every one, each "
                "real token and each <end>; only generation looks at the last position alone",
                "loss on the last token only", lambda: len(lengths)),
        Suspect("each sentence's <end> is a prediction too, the one that teaches the model to stop",
                "the end token not scored", lambda: sum(lengths)),
        Suspect("padded positions are not scored: the loss ignores pad_id",
                "padding scored", lambda: len(lengths) * (max(lengths) + 1)),
    ]


def _cross_shape_suspects(t_tgt: int, t_src: int) -> list[Suspect]:
    return [
        Suspect("the queries come from the decoder, so the rows belong to the target's tokens and the columns to the "
                "source's", "queries taken from the encoder", lambda: (t_src, t_tgt)),
        Suspect("the keys come from the encoder's output, one column per source token",
                "keys taken from the decoder", lambda: (t_tgt, t_tgt)),
    ]


register("loss_positions_answer", lambda obs: judge_answers(
    obs, _LOSS_POSITIONS_CASES, ref.loss_positions, _loss_positions_suspects,
    lambda lengths: f"loss_positions({lengths})"))
register("cross_weights_shape_answer", lambda obs: judge_answers(
    obs, _CROSS_SHAPE_CASES, ref.cross_weights_shape, _cross_shape_suspects,
    lambda t_tgt, t_src: f"cross_weights_shape(t_tgt={t_tgt}, t_src={t_src})"))
