"""Judges of Chapter 2 (``02_causal_masking``), against :mod:`solutions.masking`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases
and probe are in :mod:`autograder.checks.masking`. Every named mistake is
declared once, in :mod:`attention_course.mistakes.masking`, which the visible
checks use too: the judges pass the reference as ``right``
(``declared(known.GROUP, reference)``) and raise the value-free ones with
``mistake(known.NAME, what, **fields)``. Masks are compared
exactly; a mask's dtype and device have cells of their own, so a float 0/1
mask with the right pattern loses only the dtype point.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from attention_course.mistakes import masking as known
from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, MODIFIED_IN_PLACE, NO_RETURN, KnownMistake
from autograder.checks.core import (
    Mistake,
    Observations,
    Raised,
    load_weights,
    projection_weights,
    seeded,
    tensor_facts,
)
from autograder.checks.masking import (
    _COMBINE_CASES,
    _DTYPES,
    _GRAD_CASE,
    _INVARIANCE_CASES,
    _LEAK_CASES,
    _MASKED_SHAPES_CASES,
    _VISIBLE_KEYS_CASES,
    ADDITIVE_ERRORS,
    ADDITIVE_VALUES,
    CAUSAL_ERRORS,
    CAUSAL_OFFSET,
    CAUSAL_SQUARE,
    COMBINE_ERRORS,
    COMBINE_NONE,
    FORWARD_VALUES,
    PADDING_ERRORS,
    PADDING_VALUES,
    _pad,
)
from autograder.judges.core import (
    Compare,
    Suspect,
    declared,
    first_index,
    judge,
    judge_answers,
    judge_cases,
    judge_projections,
    judge_tensor,
    matching_suspect,
    mistake,
    register,
    same_values,
    type_name,
    value_errors,
)
from solutions import masking as ref
from solutions.self_attention import scaled_dot_product_attention as attend

NEG_INF = float("-inf")


# ================================================================ shared judges

def _exactly(a: Tensor, e: Tensor) -> bool:
    return a.shape == e.shape and bool(same_values(a.to(torch.float64), e.to(torch.float64)).all())


def judge_mask(actual: Any, expected: Tensor, what: str, suspects: Iterable[Suspect] = (), hint: str = "",
               atol: float = 0.0, rtol: float = 0.0) -> None:
    """Raise :class:`Mistake` unless ``actual`` has exactly the values of ``expected`` (any dtype).

    Booleans compare as 0/1, ``-inf`` equals ``-inf`` and NaN equals NaN, so a
    suspect that produces NaN (0 × -inf) is recognised too. As the ``compare`` of a :class:`Compare` it is
    handed the Compare's tolerances too, and ignores them: a mask is right or wrong, never close.
    """
    tail = f" — {hint}" if hint else ""
    if isinstance(actual, Raised):
        raise Mistake(f"{what} {actual.describe()}")
    if actual is None:
        raise Mistake(f"{what} should be a tensor of shape {tuple(expected.shape)}, got None — did you forget "
                      f"to `return` it?", NO_RETURN)
    if not isinstance(actual, Tensor):
        raise Mistake(f"{what} should be a tensor of shape {tuple(expected.shape)}, got a {type_name(actual)}")
    if _exactly(actual, expected):
        return
    candidates = []
    for suspect in suspects:
        try:
            candidate = suspect.produce()
        except Exception:  # a mistake that would crash on these inputs cannot be what happened
            continue
        if isinstance(candidate, Tensor) and _exactly(actual, candidate):
            candidates.append((suspect, candidate))
    # False and 0.0 compare equal: prefer a suspect that also agrees on being boolean or not
    candidates.sort(key=lambda pair: (pair[1].dtype == torch.bool) != (actual.dtype == torch.bool))
    if candidates:
        raise Mistake(f"{what}: {candidates[0][0].message}", candidates[0][0].name)
    if actual.shape != expected.shape:
        raise Mistake(f"{what} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}{tail}")
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    where = first_index(~same_values(a, e))
    raise Mistake(f"{what}: at index {where} got {actual[where].item()}, expected {expected[where].item()}{tail}")


def _judge_bool(facts: Any, what: str) -> None:
    if isinstance(facts, Raised):
        raise Mistake(f"{what} {facts.describe()}")
    if facts is None:
        raise Mistake(f"{what} should return a boolean tensor, got None — did you forget to `return` it?",
                      NO_RETURN)
    if not isinstance(facts, dict):
        raise Mistake(f"{what} should return a boolean tensor, got a {type_name(facts)}")
    if facts["dtype"] != "torch.bool":
        raise mistake(known.FLOAT_MASK if "float" in facts["dtype"] else known.INTEGER_MASK, what,
                      dtype=facts["dtype"])


def _judge_device(facts: Any, what: str, device: str, ignored: KnownMistake) -> None:
    if isinstance(facts, Raised):
        if "device" in facts.message.lower():
            raise mistake(ignored, what, found=facts.describe())
        raise Mistake(f"{what} {facts.describe()}")
    if isinstance(facts, dict) and facts["device"] != device:
        raise mistake(ignored, what, found=f"it is on {facts['device']}, expected {device}")


# ================================================================ causal_mask

def _causal_what(t_q: int, t_k: int | None = None) -> str:
    return f"causal_mask({t_q})" if t_k is None else f"causal_mask({t_q}, {t_k})"


def _causal_hint(t_q: int, t_k: int | None = None) -> str:
    return f"query i may attend key j iff j <= i + (t_k - t_q) = i + {0 if t_k is None else t_k - t_q}"


_causal_suspects = declared(known.CAUSAL, ref.causal_mask)
# (the mask's dtype and device are the test of causal_mask_dtype_device, not of these cells too)
judge(Compare(CAUSAL_SQUARE, ref.causal_mask, _causal_what, _causal_suspects, _causal_hint, compare=judge_mask,
              same_type=False))
judge(Compare(CAUSAL_OFFSET, ref.causal_mask, _causal_what, _causal_suspects, _causal_hint, compare=judge_mask,
              same_type=False))


def _judge_causal_dtype_device(obs: Observations) -> None:
    _judge_bool(obs["square"], "causal_mask(4)")
    _judge_bool(obs["offset"], "causal_mask(3, 5)")
    _judge_bool(obs["cpu"], "causal_mask(3, 5, device=torch.device('cpu'))")
    for key, call, shape in (("meta", "causal_mask(3, 5, device='meta')", (3, 5)),
                             ("meta_keyword", "causal_mask(2, t_k=6, device=torch.device('meta'))", (2, 6))):
        _judge_device(obs[key], call, "meta", known.CAUSAL_DEVICE)
        _judge_bool(obs[key], call)
        if obs[key]["shape"] != shape:
            raise Mistake(f"causal_mask on the meta device has shape {obs[key]['shape']}, expected {shape}")


register("causal_mask_dtype_device", _judge_causal_dtype_device)
register(CAUSAL_ERRORS.id, value_errors(CAUSAL_ERRORS, [
    ("causal_mask(5, 3), with more queries than keys,", ("5", "3")), ("causal_mask(2, 1)", ("2", "1"))]))


# ================================================================ padding_mask

def _padding_what(tokens: Tensor, pad_id: int) -> str:
    rows = tokens.tolist() if tokens.numel() <= 12 else f"tokens {tuple(tokens.shape)}"
    return f"padding_mask({rows}, pad_id={pad_id})"


judge(Compare(PADDING_VALUES, ref.padding_mask, _padding_what, declared(known.PADDING, ref.padding_mask),
              hint="True where the token is not pad_id, with an axis of size 1 for the queries", compare=judge_mask,
              same_type=False))  # its dtype is the test of padding_mask_shape


def _judge_padding_shape(obs: Observations) -> None:
    for key, (batch, t) in (("small", (2, 4)), ("one_token", (3, 1)), ("meta", (2, 5))):
        what = f"padding_mask of tokens {(batch, t)}"
        facts = obs[key]
        if isinstance(facts, Raised):
            raise Mistake(f"{what} {facts.describe()}")
        if not isinstance(facts, dict):
            _judge_bool(facts, what)  # None or not a tensor: it says which
        if facts["shape"] != (batch, 1, t):
            named = {(batch, t): known.PADDING_NO_QUERY_AXIS, (batch, t, 1): known.PADDING_ON_QUERIES,
                     (batch, t, t): known.PADDING_EXPANDED}.get(facts["shape"])
            if named is None:
                raise Mistake(f"{what} has shape {facts['shape']}, expected (B, 1, T) = {(batch, 1, t)}: the axis "
                              f"of size 1 stands for the queries, so the mask blocks the same keys for every query")
            raise mistake(named, what, shape=facts["shape"], expected=(batch, 1, t))
        _judge_bool(facts, what)
    _judge_device(obs["meta"], "padding_mask of tokens on the meta device", "meta", known.PADDING_DEVICE)


register("padding_mask_shape", _judge_padding_shape)
register(PADDING_ERRORS.id, value_errors(PADDING_ERRORS, [
    ("padding_mask of 1-D tokens [1, 2, 0, 0, 0], of shape (5,),", ("5",)),
    ("padding_mask of 3-D tokens of shape (2, 3, 4)", ("2, 3, 4",))]))


# ================================================================ combine_masks

_combine_suspects = declared(known.COMBINE, ref.combine_masks)
_none_suspects = declared(known.NONE_BLOCKS, ref.combine_masks)


def _combine_call(masks: list[Tensor]) -> str:
    return "combine_masks(" + ", ".join(f"mask {tuple(m.shape)}" for m in masks) + ")"


def _judge_combine(obs: Observations) -> None:
    for masks, case in zip(_COMBINE_CASES, obs["cases"], strict=True):
        if case["modified"]:  # even when the call then raised: `&=` fails only once the shape grows
            raise Mistake(f"{_combine_call(masks)} modified its input mask number {case['modified'][0] + 1} in "
                          f"place (`&=`, `logical_and_`); `out = out & m` makes a new tensor",
                          MODIFIED_IN_PLACE)

    def one(result: Any, masks: list[Tensor]) -> None:
        what = _combine_call(masks)
        shapes_differ = len({m.shape for m in masks}) > 1
        if isinstance(result, Raised) and result.type == "RuntimeError" and shapes_differ:
            raise mistake(known.NOT_BROADCAST, raised=f"{what} {result.describe()}")
        judge_mask(result, ref.combine_masks(*masks), what, _combine_suspects(*masks),
                   hint="a key may be attended only if every mask allows it")
        _judge_bool(tensor_facts(result), what)

    judge_cases((case["result"], lambda result, masks=masks: one(result, masks))
                for masks, case in zip(_COMBINE_CASES, obs["cases"], strict=True))


def _judge_combine_none(obs: Observations) -> None:
    for (what, *args), out in zip(COMBINE_NONE.cases, obs[COMBINE_NONE.key], strict=True):
        given = [a for a in args if a is not None]
        if isinstance(out, Raised) and out.type == "NotImplementedError" and not out.message:
            raise Mistake(f"{what} {out.describe()}")
        if isinstance(out, Raised):
            if given:
                if "none" in out.message.lower():
                    raise mistake(known.NONE_RAISED, raised=f"{what} {out.describe()}")
                raise Mistake(f"{what} {out.describe()}")
            raise mistake(known.ALL_NONE_RAISED, raised=f"{what} {out.describe()}")
        if not given:
            if out is not None:
                raise mistake(known.ALL_NONE_RETURNED, what, returned=f"{out!r:.60}")
            continue
        suspects = _none_suspects(*args) + (_combine_suspects(*given) if len(given) > 1 else [])
        judge_mask(out, ref.combine_masks(*args), what, suspects,
                   hint="None entries are ignored")


register("combine_masks_and", _judge_combine)
register(COMBINE_NONE.id, _judge_combine_none)
register(COMBINE_ERRORS.id, value_errors(COMBINE_ERRORS, [
    ("combine_masks of a causal mask (4, 4) and a float mask (4, 4)", ("bool",)),
    ("combine_masks of an int64 mask (2, 1, 4) and a causal mask (4, 4)", ("bool",))]))


# ================================================================ additive_mask

_additive_suspects = declared(known.ADDITIVE, ref.additive_mask)
judge(Compare(ADDITIVE_VALUES, ref.additive_mask, lambda mask: f"additive_mask(mask {tuple(mask.shape)})",
              _additive_suspects, hint="0.0 where the mask is True, -inf where it is False", compare=judge_mask))


def _judge_additive_dtype_device(obs: Observations) -> None:
    (mask,) = ADDITIVE_VALUES.cases[1]
    facts = obs["default"]
    if isinstance(facts, Raised):
        raise Mistake(f"additive_mask(mask) {facts.describe()}")
    if isinstance(facts, dict) and facts["dtype"] != "torch.float32":
        raise mistake(known.WRONG_DEFAULT_DTYPE, "additive_mask(mask)", dtype=facts["dtype"])
    for dtype, out in zip(_DTYPES, obs["dtypes"], strict=True):
        what = f"additive_mask(mask, dtype={dtype})"
        if isinstance(out, Tensor) and out.dtype != dtype:
            raise mistake(known.DTYPE_IGNORED, what, dtype=out.dtype)
        judge_mask(out, ref.additive_mask(mask, dtype), what, _additive_suspects(mask, dtype),
                   hint=f"-inf exists in every floating dtype, {dtype} included")
    positional = obs["positional"]
    if isinstance(positional, dict) and positional["dtype"] != "torch.float64":
        raise mistake(known.DTYPE_IGNORED, "additive_mask(mask, torch.float64)", dtype=positional["dtype"])
    _judge_device(obs["meta"], "additive_mask of a mask on the meta device", "meta", known.ADDITIVE_DEVICE)


register("additive_mask_dtype_device", _judge_additive_dtype_device)
register(ADDITIVE_ERRORS.id, value_errors(ADDITIVE_ERRORS, [
    ("additive_mask of a float mask", ("bool",)), ("additive_mask(mask, dtype=torch.int64)", ("int64",))]))


# ================================================================ CausalSelfAttention

def _projected(d_model: int, d_k: int, d_v: int, x: Tensor, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v of ``x`` through the seeded projection weights of a case."""
    w = projection_weights(d_model, d_k, d_v, seed)
    return x @ w["w_q"].T, x @ w["w_k"].T, x @ w["w_v"].T


def _allowed(x: Tensor, tokens: Tensor | None) -> Tensor:
    """The right mask: causal, and the padding mask of ``tokens`` (pad id 0) when there are tokens."""
    return ref.combine_masks(ref.causal_mask(x.shape[1]), _pad(tokens))


def _module_case(d_model: int, d_k: int, d_v: int, x: Tensor, tokens: Tensor | None, seed: int) -> tuple:
    """A case of the module as the declarations take it: (q, k, v, causal, pad)."""
    return (*_projected(d_model, d_k, d_v, x, seed), ref.causal_mask(x.shape[1]), _pad(tokens))


#: The plausible wrong masks: each one's ``produce()`` returns (out, weights) of attention under it.
_module_mistakes = declared(known.MODULE, attend, case=_module_case)


def _nan_only_in_empty_rows(got: Any, allowed: Tensor, batch_t: torch.Size) -> bool:
    """Whether ``got`` (B, T, ...) holds NaN, and only in the rows of queries that may attend no key."""
    if not isinstance(got, Tensor) or got.dim() < 3 or got.shape[:2] != batch_t or not torch.isnan(got).any():
        return False
    empty = ~allowed.expand(*batch_t, allowed.shape[-1]).any(-1)  # (B, T): queries with no key to attend
    return bool((torch.isnan(got).flatten(2).any(-1) <= empty).all())


_WEIGHTS_THEN_OUTPUT = ((1, "weights"), (0, "output"))  # the parts of (out, weights), in the order they are judged


def _forward_what(d_model: int, d_k: int, d_v: int, x: Tensor, tokens: Tensor | None, seed: int) -> str:
    return f"CausalSelfAttention({d_model}, {d_k}, {d_v}) on x {tuple(x.shape)}" + (
        "" if tokens is None else f" with pad_mask of tokens {tokens.tolist()}")


def _forward_reference(d_model: int, d_k: int, d_v: int, x: Tensor, tokens: Tensor | None, seed: int) -> Any:
    return attend(*_projected(d_model, d_k, d_v, x, seed), _allowed(x, tokens))


def _pair_without_nan(result: Any, what: str, d_model: int, d_k: int, d_v: int, x: Tensor, tokens: Tensor | None,
                      seed: int) -> None:
    """The guard of the forward values: a pair (out, weights), neither with NaN in the rows that attend no key."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Mistake(f"{what} should return a tuple (out, weights) from forward; got a {type_name(result)}")
    for part, name in _WEIGHTS_THEN_OUTPUT:
        if _nan_only_in_empty_rows(result[part], _allowed(x, tokens), x.shape[:2]):
            raise mistake(known.MODULE_NAN, f"the {name} of {what} contain NaN")


_FORWARD = Compare(FORWARD_VALUES, _forward_reference, _forward_what, _module_mistakes,
                   hint="position i attends the keys 0..i that are not padding", parts=_WEIGHTS_THEN_OUTPUT,
                   guard=_pair_without_nan)


def _judge_forward(obs: Observations) -> None:
    _FORWARD(obs)
    d_model, d_k, d_v, x, tokens, seed = _GRAD_CASE
    what = f"CausalSelfAttention({d_model}, {d_k}) in float64 with pad_mask of tokens {tokens.tolist()}"
    got = obs["grad"]
    if isinstance(got, Raised):
        raise Mistake(f"{what}: forward and backward {got.describe()}")
    if got["dtype"] != "torch.float64":
        raise Mistake(f"{what} returned {got['dtype']} — keep the dtype of x: no `.float()`, no hard-coded "
                      f"dtype=torch.float32", DTYPE_CHANGED)
    module = load_weights(ref.CausalSelfAttention(d_model, d_k, d_v), projection_weights(d_model, d_k, d_v, seed))
    module = module.double()
    leaf = x.clone().requires_grad_(True)
    out, _ = module(leaf, _pad(tokens))
    (out * seeded(*out.shape, seed=157, dtype=out.dtype)).sum().backward()
    judge_tensor(got["out"], out.detach(), f"the output of {what}", atol=1e-9, rtol=1e-7)
    if got["grad"] is None:
        raise Mistake(f"no gradient reaches x through {what} — something detaches it: `.detach()`, `.data`, "
                      f"or building a new tensor from results", GRAPH_CUT)
    if isinstance(got["grad"], Tensor) and torch.isnan(got["grad"]).any():
        raise mistake(known.MODULE_NAN_GRADIENT,
                      f"the gradient of {what} with respect to x contains NaN, though the output does not")
    judge_tensor(got["grad"], leaf.grad, f"the gradient of {what} with respect to x", atol=1e-8, rtol=1e-6)


def _outputs(pair: tuple[Any, Any], what: str, x: Tensor, d_v: int) -> tuple[Tensor, Tensor]:
    """The outputs ``out`` of the two runs of one module that a probe recorded (on x, then on x changed), each
    checked to come from a pair (out, weights), and the first to be (B, T, d_v)."""
    outs = []
    for result in pair:
        if isinstance(result, Raised):
            raise Mistake(f"{what} {result.describe()}")
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Tensor)):
            raise Mistake(f"{what} should return a tuple (out, weights) from forward; got a {type_name(result)}")
        outs.append(result[0])
    before, after = outs
    if before.shape != after.shape or before.shape[:2] != x.shape[:2]:
        raise Mistake(f"{what} returned out of shape {tuple(before.shape)}, expected {(*x.shape[:2], d_v)}")
    return before, after


def _changed_where_it_should_not(text: str, otherwise: KnownMistake, before: Tensor, *case: Any) -> Mistake:
    """``text``, then the mistake whose output ``before`` has on ``case`` (d_model, d_k, d_v, x, tokens, seed), or
    else the declared mistake ``otherwise``."""
    found = matching_suspect(before, [m.part(0) for m in _module_mistakes(*case)], 1e-5, 1e-4)
    said, name = (found.message, found.name) if found else (otherwise.text(), otherwise.name)
    return Mistake(f"{text} — {said}", name)


def _judge_leak(obs: Observations) -> None:
    for (d_model, d_k, d_v, x, tokens, seed, start), pair in zip(_LEAK_CASES, obs["pairs"], strict=True):
        what = f"CausalSelfAttention({d_model}, {d_k}, {d_v}) on x {tuple(x.shape)}" + (
            "" if tokens is None else " with a pad_mask")
        before, after = _outputs(pair, what, x, d_v)
        if torch.allclose(before[:, :start], after[:, :start], atol=1e-6, rtol=1e-5, equal_nan=True):
            continue  # NaN is not a leak: the forward and padding cells name it
        raise _changed_where_it_should_not(
            f"{what}: changing only the tokens at positions {start}.. changed the outputs at positions "
            f"0..{start - 1}, so the future leaks into the past",
            known.FUTURE_LEAKS, before, d_model, d_k, d_v, x, tokens, seed)


def _judge_invariance(obs: Observations) -> None:
    for (d_model, d_k, d_v, x, tokens, seed), pair in zip(_INVARIANCE_CASES, obs["pairs"], strict=True):
        what = f"CausalSelfAttention({d_model}, {d_k}, {d_v}) with pad_mask of tokens {tokens.tolist()} (pad_id 0)"
        before, after = _outputs(pair, what, x, d_v)
        if _nan_only_in_empty_rows(before, _allowed(x, tokens), x.shape[:2]):
            raise mistake(known.MODULE_NAN, f"{what} gives NaN")
        if torch.isnan(before).any():
            raise Mistake(f"{what} gives NaN at index {first_index(torch.isnan(before))}, where a number was expected")
        real = tokens != 0
        if torch.allclose(before[real], after[real], atol=1e-6, rtol=1e-5):
            continue
        raise _changed_where_it_should_not(
            f"{what}: changing only the padded tokens changed the outputs at real tokens, so padding gets weight",
            known.PADDING_LEAKS, before, d_model, d_k, d_v, x, tokens, seed)


register("CausalSelfAttention_projections", lambda obs: judge_projections(
    obs, "CausalSelfAttention", known.BIAS_IGNORED, known.W_V_OF_D_K))
register(FORWARD_VALUES.id, _judge_forward)
register("CausalSelfAttention_no_future_leak", _judge_leak)
register("CausalSelfAttention_padding_invariance", _judge_invariance)


# ================================================================ concept checks

register("masked_attention_shapes_answer", lambda obs: judge_answers(
    obs, _MASKED_SHAPES_CASES, ref.masked_attention_shapes,
    declared(known.MASKED_SHAPES, ref.masked_attention_shapes),
    lambda n, d: f"masked_attention_shapes({n}, {d})"))
register("visible_keys_answer", lambda obs: judge_answers(
    obs, _VISIBLE_KEYS_CASES, ref.visible_keys, declared(known.VISIBLE_KEYS, ref.visible_keys),
    lambda tokens, pad_id, query: f"visible_keys({tokens}, {pad_id}, query={query})"))
