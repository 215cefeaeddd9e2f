"""Judges of Chapter 9 (``09_flash_attention``), against :mod:`solutions.flash_attention`.

Every check id is the ``grade_id`` of the test cell that runs it; its cases and probe are in
:mod:`autograder.checks.flash_attention`. Every named mistake is declared once, in
:mod:`attention_course.mistakes.flash_attention`, which the notebook's visible checks read too: the judges pass the
reference as ``right`` (``declared(known.GROUP, reference)``) and raise the value-free ones with
``mistake(known.NAME, what, **fields)``.

Float16 and bfloat16 results are held to what float32 accumulation gives: within the dtype's own rounding of the
float64 result, ``eps · (|r| + 0.01 · max |r|)``; computed in the inputs' dtype, the same cases are off by 4 to 400
times more (measured on each case).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attention_course.mistakes import flash_attention as known
from attention_course.testing import DTYPE_CHANGED, GRAPH_CUT, MODIFIED_IN_PLACE, NO_RETURN, Mistakes
from autograder.checks.core import Mistake, Observations, Raised, seeded
from autograder.checks.flash_attention import (
    BACKWARD_BLOCK_CASE,
    BACKWARD_CONTRACT,
    BACKWARD_DEFAULT_CASE,
    BACKWARD_HALF_CASES,
    BACKWARD_MASKED,
    BACKWARD_REFUSED,
    BACKWARD_VALUES,
    BLOCK_CASE,
    DECODE_EMPTY_CASE,
    DECODE_FLOPS_CASES,
    DECODE_SPLIT_CASE,
    DECODE_VALUES,
    DEFAULT_BLOCK_CASE,
    FLASH_FORWARD,
    GRADCHECK,
    HALF_CASES,
    KERNEL_CAUSAL,
    KERNEL_HALF,
    KERNEL_LSE,
    KERNEL_TAIL,
    KERNEL_VALUES,
    LSE,
    MERGE_CONTRACT,
    MERGE_EMPTY,
    MERGE_SHAPE_ERRORS,
    MERGE_VALUES,
    ONLINE_CAUSAL,
    ONLINE_CONTRACT,
    ONLINE_CONTRACT_MASK,
    ONLINE_ERRORS,
    ONLINE_MASKED,
    ONLINE_VALUES,
    POSITIONS_PROCESSED_CASES,
    SAVED_CASE,
    SAVED_FOR_BACKWARD_CASES,
)
from autograder.judges.core import (
    Compare,
    declared,
    describe,
    judge,
    judge_answers,
    judge_cases,
    judge_contract_basics,
    judge_tensor,
    judge_value_error,
    mistake,
    register,
    told,
    unnamed,
)
from solutions import flash_attention as ref

# ================================================================ merge_states


def _merge_what(*states: tuple) -> str:
    shapes = ", ".join(f"(m {tuple(s[0].shape)}, l, o {tuple(s[2].shape)})" for s in states)
    return f"merge_states of the states {shapes}" + (", grouped both ways" if len(states) == 3 else "")


def _merge_expected(*states: tuple) -> Any:
    if len(states) == 2:
        return ref.merge_states(*states)
    a, b, c = states
    return ref.merge_states(ref.merge_states(a, b), c), ref.merge_states(a, ref.merge_states(b, c))


def _close_state(got: Tensor, expected: Tensor) -> bool:
    """Equal up to rounding, -inf matching -inf (the maximum of an empty state) and NaN matching NaN (the reference
    has none: only a suspect's NaN can match)."""
    if got.shape != expected.shape:
        return False
    g, e = got.double(), expected.double()
    same_inf = torch.isinf(g) & torch.isinf(e) & (g.sign() == e.sign())
    return bool(torch.where(same_inf, True, torch.isclose(g, e, atol=1e-5, rtol=1e-4, equal_nan=True)).all())


def _merge_suspects(*states: tuple) -> list[tuple[str, str, tuple]]:
    """(message, name, state) of each declared mistake on these states; the three-state case makes the mistake in
    both merges of the grouping (a ⊕ b) ⊕ c."""
    found = []
    for m in known.MERGE:
        a, b, *more = states
        if not m.applies(a, b):
            continue
        try:
            candidate = m.gives(ref.merge_states, a, b)
            if more:
                candidate = m.gives(ref.merge_states, candidate, more[0])
        except Exception:  # a mistake that cannot run on these states is not what happened
            continue
        found.append((m.text(a, b), m.name, candidate))
    return found


def _judge_merged(got: Any, expected: tuple, what: str, suspects: list[tuple[str, str, tuple]]) -> None:
    """One merge's result against the reference state, part by part, naming the mistake whose state it matches."""
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if got is None:
        raise Mistake(f"{what} returned None — return the merged state, a tuple (m, l, o)", NO_RETURN)
    if not (isinstance(got, tuple) and len(got) == 3 and all(isinstance(t, Tensor) for t in got)):
        raise Mistake(unnamed(f"{what} should return three tensors (m, l, o); got {describe(got)}"))
    if all(_close_state(g, e) for g, e in zip(got, expected, strict=True)):
        return
    for message, name, candidate in suspects:
        if all(_close_state(g, c) for g, c in zip(got, candidate, strict=True)):
            raise Mistake(f"{what}: {message}", name)
    for label, g, e in zip(("m", "l", "o"), got, expected, strict=True):
        judge_tensor(g, e, f"the {label} of {what}",
                     hint="m = max(m_a, m_b); l and o: each side's sums times exp(its m - m), added")


def _judge_merge_check(check: Any) -> Callable[[Observations], None]:
    def one(got: Any, *states: tuple) -> None:
        what, expected = _merge_what(*states), _merge_expected(*states)
        if len(states) == 2:
            _judge_merged(got, expected, what, _merge_suspects(*states))
            return
        if isinstance(got, Raised):
            raise Mistake(told(got, what))
        if not (isinstance(got, tuple) and len(got) == 2):
            raise Mistake(unnamed(f"{what}: each grouping should give a state; got {describe(got)}"))
        _judge_merged(got[0], expected[0], f"{what}: (a + b) + c", _merge_suspects(*states))
        _judge_merged(got[1], expected[1], f"{what}: a + (b + c)", [])

    return lambda obs: judge_cases((got, lambda got, case=case: one(got, *case))
                                   for case, got in zip(check.cases, obs[check.key], strict=True))


register("merge_states_values", _judge_merge_check(MERGE_VALUES))
register("merge_states_empty", _judge_merge_check(MERGE_EMPTY))


def _judge_gradients(got: dict[str, Any], leaves: dict[str, Tensor], expected: tuple, function: str) -> None:
    """The gradients a contract check recorded, against the reference's, one input after another."""
    for name, want in zip(leaves, expected, strict=True):
        found = got[name]
        if found is None:
            raise Mistake(f"no gradient reaches `{name}` through {function} — something detaches it: `.detach()`, "
                          f"`.item()`, `torch.no_grad()`, or building a new tensor from results", GRAPH_CUT)
        judge_tensor(found, want, f"the gradient of {function} with respect to `{name}`", atol=1e-8, rtol=1e-6)


def _judge_merge_contract(obs: Observations) -> None:
    function = "merge_states"
    judge_contract_basics(obs, function, " (`o = o * s`, not `o *= s`; no `out=` into an input)")
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in MERGE_CONTRACT.items()}
    a, b = (tuple(leaves[f"{part}_{side}"] for part in "mlo") for side in "ab")
    merged = torch.cat(ref.merge_states(a, b), dim=-1)
    judge_tensor(obs["out"], merged.detach(), "merge_states's (m, l, o) on float64 states", atol=1e-9, rtol=1e-7)
    expected = torch.autograd.grad((merged * seeded(*merged.shape, seed=899, dtype=merged.dtype)).sum(),
                                   list(leaves.values()))
    _judge_gradients(obs["grads"], leaves, expected, function)
    got = obs["empty_grad"]
    what = "the gradient of merge_states(state, empty state) with respect to the first state's m, l and o"
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    if not (isinstance(got, tuple) and len(got) == 3) or any(
            isinstance(g, Tensor) and bool(torch.isnan(g).any()) for g in got):
        raise mistake(known.MERGE_NAN_GRADIENT, what)
    for (call, _, _), raised in zip(MERGE_SHAPE_ERRORS, obs["errors"], strict=True):
        judge_value_error(raised, f"merge_states of {call}", ())


register("merge_states_contract", _judge_merge_contract)


# ================================================================ online_softmax_attention

def _online_ref(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool) -> Tensor:
    return ref.online_softmax_attention(q, k, v, mask, block, causal)


def _online_what(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool = False) -> str:
    return (f"online_softmax_attention(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
            + ("" if mask is None else f", mask {tuple(mask.shape)}") + f", block_size={block}"
            + (", causal=True)" if causal else ")"))


def _online_crash(raised: Raised, what: str, q: Tensor, k: Tensor, *_: Any) -> Mistake:
    """A crash on inputs of other than three dimensions, or whose leading dimensions differ, most likely comes from
    code written for (B, T, d) alone (torch.bmm, an einsum over 'bqd', a reshape to three axes)."""
    if q.dim() != 3 or q.shape[:-2] != k.shape[:-2]:
        return mistake(known.LEADING_DIMS, f"{what} {raised.describe()}")
    return Mistake(told(raised, what))


ONLINE_SUSPECTS = declared(known.ONLINE, _online_ref)
for _check, _hint in ((ONLINE_VALUES, "out must equal softmax(q kᵀ / √d_k) v, whatever the block size"),
                      (ONLINE_MASKED, "masked scores are -inf, and a query that may attend no key gets an all-zero "
                                      "output"),
                      (ONLINE_CAUSAL, "with causal=True query i may attend key j when j <= i + (T_k - T_q); a query "
                                      "that sees no key gets zeros")):
    judge(Compare(_check, _online_ref, _online_what, ONLINE_SUSPECTS, hint=_hint, crashed=_online_crash))


def _judge_widest(got: dict[str, Any], what: str, t_q: int, t_k: int, block: int) -> None:
    if got["widest"] > block:
        raise mistake(known.ALL_SCORES, what, widest=got["widest"], shape=(t_q, t_k))


def _judge_blocks(obs: Observations) -> None:
    q, k, v, block = BLOCK_CASE
    what = _online_what(q, k, v, None, block)
    got = obs["run"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    _judge_widest(got, what, q.shape[-2], k.shape[-2], block)
    judge_tensor(got["out"], _online_ref(q, k, v, None, block, False), what,
                 ONLINE_SUSPECTS(q, k, v, None, block, False))
    q, k, v = DEFAULT_BLOCK_CASE
    what = f"online_softmax_attention(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}), block_size left out"
    got = obs["default"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    judge_tensor(got["out"], _online_ref(q, k, v, None, 128, False), what)
    if got["widest"] != 128:
        raise mistake(known.BLOCK_DEFAULT, what, widest=got["widest"])


register("online_softmax_attention_blocks", _judge_blocks)


def _judge_online_contract(obs: Observations) -> None:
    function = "online_softmax_attention"
    judge_contract_basics(obs, function, " (`q = q / s`, not `q /= s` or `q.mul_(s)`)")
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in ONLINE_CONTRACT.items()}
    out = ref.online_softmax_attention(*leaves.values(), ONLINE_CONTRACT_MASK, block_size=2)
    what = f"{function} on float64 inputs, a query that may attend nothing included"
    judge_tensor(obs["out"], out.detach(), what, atol=1e-9, rtol=1e-7)
    for name, got in obs["grads"].items():
        if isinstance(got, Tensor) and bool(torch.isnan(got).any()):
            raise mistake(known.NAN_GRADIENT, f"the gradient of {what} with respect to `{name}`")
    expected = torch.autograd.grad((out * seeded(*out.shape, seed=893, dtype=out.dtype)).sum(), list(leaves.values()))
    _judge_gradients(obs["grads"], leaves, expected, function)
    for (call, *_), raised in zip(ONLINE_ERRORS, obs["errors"], strict=True):
        judge_value_error(raised, f"{function} with {call}", ())


register("online_softmax_attention_contract", _judge_online_contract)


def _pair(out: Any, what: str, *case: Any) -> None:
    """The guard of a result that must be a pair of tensors (out, lse)."""
    if isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, Tensor) for t in out):
        return
    raise Mistake(unnamed(f"{what} should return a pair (out, lse) of tensors; got {describe(out)}"))


def _lse_ref(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool) -> tuple[Tensor, Tensor]:
    return ref.online_softmax_attention(q, k, v, mask, block, causal, return_lse=True)


def excess(got: Tensor, exact: Tensor, factor: float = 1.0) -> tuple[float, float]:
    """(the largest error of a float16 or bfloat16 result beyond float32 accumulation's, and what float32 may be off
    by there): float32 accumulation is within ``factor`` times the result dtype's rounding of the float64 result,
    eps · (|r| + 0.01 · max |r|)."""
    eps = torch.finfo(got.dtype).eps
    allowed = factor * eps * (exact.abs() + 0.01 * exact.abs().max())
    error = (got.double() - exact).abs()
    worst = int(torch.argmax(error - allowed))
    return float(error.flatten()[worst] - allowed.flatten()[worst]), float(allowed.flatten()[worst])


#: A result off by more than this share of its largest entry is not a matter of precision but of another mistake,
#: which the suspects name (or the message says where it is off).
GROSS = 0.02


def judge_half(got: Any, exact: Tensor, what: str, dtype: torch.dtype, factor: float = 1.0,
               suspects: list | tuple = ()) -> None:
    """A float16 or bfloat16 result: in the inputs' dtype, and as accurate as float32 accumulation makes it (within
    ``factor`` times the dtype's rounding). A result that is wrong by more than rounding is judged against the
    ``suspects`` (computed in float64) first."""
    name = str(dtype).removeprefix("torch.")
    if not isinstance(got, Tensor):
        raise Mistake(unnamed(f"{what} should be a tensor; got {describe(got)}"))
    if got.dtype != dtype:
        raise Mistake(f"{what} is {str(got.dtype).removeprefix('torch.')} for {name} inputs — compute in float32 if "
                      f"you like, but return the result in the inputs' dtype, `.to(q.dtype)`", DTYPE_CHANGED)
    loose = GROSS * float(exact.abs().max())
    judge_tensor(got.double(), exact, what, suspects, atol=loose, rtol=GROSS)
    beyond, allowed = excess(got, exact, factor)
    if beyond > 0:
        raise mistake(known.HALF_PRECISION, what, dtype=name, error=beyond + allowed, allowed=allowed)


def _judge_lse_half(obs: Observations) -> None:
    for (dtype, (q, k, v), block), got in zip(HALF_CASES, obs["half"], strict=True):
        what = (f"online_softmax_attention on {str(dtype).removeprefix('torch.')} q {tuple(q.shape)}, k "
                f"{tuple(k.shape)}, block_size={block}, return_lse=True")
        if isinstance(got, Raised):
            raise Mistake(told(got, what))
        _pair(got, what)
        exact_out = ref.online_softmax_attention(q.double(), k.double(), v.double(), None, block)
        judge_half(got[0], exact_out, f"the output of {what}", dtype)
        if got[1].dtype != torch.float32:
            raise mistake(known.LSE_DTYPE, what, dtype=str(dtype).removeprefix("torch."),
                          found=str(got[1].dtype).removeprefix("torch."))


judge(Compare(LSE, _lse_ref, lambda *case: _online_what(*case)[:-1] + ", return_lse=True)",
              declared(known.LSE, _lse_ref), hint="lse = m + log ℓ of each query's scores, -inf for a query that "
              "sees no key", pick=lambda pair: pair[1], guard=_pair, also=_judge_lse_half))


# ================================================================ attention_backward

def _backward_what(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor, mask: Tensor | None,
                   block: int, causal: bool) -> str:
    return (f"attention_backward(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, ..."
            + ("" if mask is None else f", mask {tuple(mask.shape)}") + f", block_size={block}"
            + (", causal=True)" if causal else ")"))


def _triple(out: Any, what: str, *case: Any) -> None:
    """The guard of a result that must be three tensors (dq, dk, dv)."""
    if isinstance(out, tuple) and len(out) == 3 and all(isinstance(t, Tensor) for t in out):
        return
    if out is None:
        raise Mistake(f"{what} returned None — return (dq, dk, dv)", NO_RETURN)
    raise Mistake(unnamed(f"{what} should return three tensors (dq, dk, dv); got {describe(out)}"))


BACKWARD_SUSPECTS = declared(known.BACKWARD, ref.attention_backward)
for _check in (BACKWARD_VALUES, BACKWARD_MASKED):
    judge(Compare(_check, ref.attention_backward, _backward_what, BACKWARD_SUSPECTS,
                  hint="dV = Pᵀ dO, dS = P ⊙ (dO Vᵀ − D) with D = rowsum(dO ⊙ O), dQ = dS K / √d_k, dK = dSᵀ Q / √d_k, "
                       "P = exp(S − lse) block by block; each gradient has its input's shape",
                  parts=((0, "dq"), (1, "dk"), (2, "dv")), guard=_triple))


def _judge_backward_blocks(obs: Observations) -> None:
    for key, case, t_k in (("run", BACKWARD_BLOCK_CASE, BLOCK_CASE[1].shape[-2]),
                           ("default", BACKWARD_DEFAULT_CASE, DEFAULT_BLOCK_CASE[1].shape[-2])):
        q, block = case[0], case[7]
        what = _backward_what(*case) + ("" if key == "run" else ", block_size left out")
        got = obs[key]
        if isinstance(got, Raised):
            raise Mistake(told(got, what))
        _judge_widest(got, what, q.shape[-2], t_k, block)
        _triple(got["out"], what)
        expected = ref.attention_backward(*case)
        for index, label in enumerate(("dq", "dk", "dv")):
            judge_tensor(got["out"][index], expected[index], f"the {label} of {what}",
                         [s.part(index) for s in BACKWARD_SUSPECTS(*case)])
        if key == "default" and got["widest"] != block:
            raise mistake(known.BLOCK_DEFAULT, what, widest=got["widest"])


register("attention_backward_blocks", _judge_backward_blocks)


def _judge_backward_half(obs: Observations) -> None:
    for (dtype, case), got in zip(BACKWARD_HALF_CASES, obs["grads"], strict=True):
        what = f"attention_backward on {str(dtype).removeprefix('torch.')} inputs, {case[1].shape[-2]} keys"
        if isinstance(got, Raised):
            raise Mistake(told(got, what))
        _triple(got, what)
        exact_case = (*(t.double() for t in case[:6]), *case[6:])
        exact = ref.attention_backward(*exact_case)
        suspects = BACKWARD_SUSPECTS(*exact_case)
        for index, (label, g, e) in enumerate(zip(("dq", "dk", "dv"), got, exact, strict=True)):
            judge_half(g, e, f"the {label} of {what}", dtype, suspects=[s.part(index) for s in suspects])


register("attention_backward_half", _judge_backward_half)


def _judge_backward_contract(obs: Observations) -> None:
    what = _backward_what(*BACKWARD_CONTRACT) + " on float64 inputs"
    if obs["modified"]:
        raise Mistake(f"{what} modified its input {', '.join(f'`{n}`' for n in obs['modified'])} in place — use "
                      f"out-of-place operations (`ds = p * (dp - d)`, not `dp -= d`)", MODIFIED_IN_PLACE)
    got = obs["result"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    _triple(got, what)
    for label, g in zip(("dq", "dk", "dv"), got, strict=True):
        if g.dtype != torch.float64:
            raise Mistake(f"the {label} of {what} is {str(g.dtype).removeprefix('torch.')}: keep the inputs' dtype",
                          DTYPE_CHANGED)
    expected = ref.attention_backward(*BACKWARD_CONTRACT)
    for index, label in enumerate(("dq", "dk", "dv")):
        judge_tensor(got[index], expected[index], f"the {label} of {what}", atol=1e-9, rtol=1e-7)
    quiet = obs["no_grad"]
    if isinstance(quiet, Raised):
        raise mistake(known.AUTOGRAD_USED, what, how=quiet.describe())
    for (call, *_), raised, (_, words) in zip(BACKWARD_REFUSED, obs["errors"], known.BACKWARD_REFUSED, strict=True):
        judge_value_error(raised, f"attention_backward with {call}", words)


register("attention_backward_contract", _judge_backward_contract)


# ================================================================ FlashAttention

def _flash_what(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool, *_: Any) -> str:
    return (f"FlashAttention.apply(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
            + ("None" if mask is None else f"mask {tuple(mask.shape)}") + f", {block}, {causal})")


def _flash_crash(raised: Raised, what: str, *case: Any) -> Mistake:
    if raised.type == "WrongOutput" and "one gradient per input" in raised.message:
        return mistake(known.GRADIENT_PER_INPUT, unnamed(f"{what}: {raised.message}"))
    return Mistake(told(raised, what))


judge(Compare(FLASH_FORWARD, ref.flash_attention, _flash_what, ONLINE_SUSPECTS, crashed=_flash_crash,
              hint="forward returns out, the output of online_softmax_attention"))


def _judge_saved(obs: Observations) -> None:
    q, k, v, mask, block, causal = SAVED_CASE
    what = _flash_what(*SAVED_CASE)
    facts = obs["facts"]
    if isinstance(facts, Raised):
        raise _flash_crash(facts, what)
    out, lse = ref.online_softmax_attention(q, k, v, mask, block, causal, return_lse=True)
    floating = [(where, t) for where, t in facts["saved"] if isinstance(t, Tensor)]
    weights = (q.shape[-2], k.shape[-2])
    for where, t in floating:
        if t.dim() >= 2 and (tuple(t.shape[-2:]) == weights or tuple(t.shape[-2:]) == weights[::-1]):
            raise mistake(known.WEIGHTS_SAVED, f"{what}: {where}", shape=tuple(t.shape))
    # One number per query: the log-sum-exp (whatever its values, which online_softmax_attention's cells judge). Two
    # or more of that shape must include it: the state's m and l are not it.
    per_query = [t for _, t in floating if t.shape == lse.shape]
    if not per_query or len(per_query) > 1 and not any(
            torch.allclose(t.double(), lse.double(), atol=1e-5) for t in per_query):
        raise mistake(known.LSE_NOT_SAVED, what)
    allowed = sum(t.numel() for t in (q, k, v, out, lse))
    found = sum(t.numel() for _, t in floating)
    if found > allowed:
        listed = ", ".join(f"{where} {tuple(t.shape)}" for where, t in floating)
        raise mistake(known.SAVED_TOO_MUCH, what, found=found, what=listed, allowed=allowed)
    _judge_widest(facts, f"the backward pass of {what}", q.shape[-2], k.shape[-2], block)


register("FlashAttention_saved", _judge_saved)


def _as_backward_case(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool,
                      d_out: Tensor) -> tuple:
    """A gradient case in the form of attention_backward's: its out and lse from the reference's forward pass."""
    out, lse = ref.online_softmax_attention(q, k, v, mask, block, causal, return_lse=True)
    return q, k, v, out, lse, d_out, mask, block, causal


def _flash_gradients(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool,
                     d_out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return ref.attention_backward(*_as_backward_case(q, k, v, mask, block, causal, d_out))


def _judge_gradcheck(obs: Observations) -> None:
    for case, result in zip(GRADCHECK.cases, obs["gradcheck"], strict=True):
        what = f"torch.autograd.gradcheck of {_flash_what(*case)} in float64"
        if result is not True:
            raise mistake(known.GRADCHECK_FAILED, f"{what} {result.describe() if isinstance(result, Raised) else ''}"
                          .rstrip())


judge(Compare(GRADCHECK, _flash_gradients, lambda *case: f"the gradients of {_flash_what(*case)}",
              declared(Mistakes([*known.FLASH_GRADIENTS, *known.BACKWARD]), ref.attention_backward,
                       case=_as_backward_case),
              parts=((0, "dq"), (1, "dk"), (2, "dv")), guard=_triple, crashed=_flash_crash, atol=1e-8, rtol=1e-6,
              also=_judge_gradcheck))


# ================================================================ attention_kernel

def _kernel_right(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> tuple[Tensor, Tensor]:
    """The kernel's (out, lse), in float64: online_softmax_attention of the reference."""
    return ref.online_softmax_attention(q.double(), k.double(), v.double(), mask, 128, causal, return_lse=True)


def _kernel_ref(q: Tensor, k: Tensor, v: Tensor, causal: bool, *_: int) -> tuple[Tensor, Tensor]:
    """(out, lse) in q's dtype, as the kernel returns them (computed in float64, rounded once)."""
    return tuple(t.to(q.dtype) for t in _kernel_right(q, k, v, None, causal))


def _kernel_what(q: Tensor, k: Tensor, v: Tensor, causal: bool, block_m: int, block_n: int) -> str:
    return (f"attention_kernel on q {tuple(q.shape)}, k and v {tuple(k.shape)}"
            + (f" ({str(q.dtype).removeprefix('torch.')})" if q.dtype != torch.float32 else "")
            + f", BLOCK_M={block_m}, BLOCK_N={block_n}" + (", CAUSAL" if causal else ""))


def _kernel_crash(raised: Raised, what: str, q: Tensor, k: Tensor, v: Tensor, causal: bool, block_m: int,
                  block_n: int) -> Mistake:
    """tl.dot of the (BLOCK_M, D) queries with untransposed (BLOCK_N, D) keys fails wherever D != BLOCK_N."""
    if raised.type == "NotAKernel":
        return mistake(known.NOT_A_KERNEL, what=raised.message)
    words = raised.message.lower()
    if q.shape[-1] != block_n and "dot" in words and ("shape" in words or "dimension" in words):
        return mistake(known.KERNEL.named("tl.dot on untransposed keys"), f"{what} {raised.describe()}")
    return Mistake(told(raised, what))


KERNEL_SUSPECTS = declared(known.KERNEL, _kernel_right)
for _check in (KERNEL_VALUES, KERNEL_CAUSAL, KERNEL_TAIL):
    judge(Compare(_check, _kernel_ref, _kernel_what, KERNEL_SUSPECTS, pick=lambda pair: pair[0],
                  hint="one program's queries against every tile of keys: scores q kᵀ · scale, the online softmax "
                       "in float32, out = acc / ℓ", crashed=_kernel_crash))


#: A kernel multiplies P by V with P in float16, as FlashAttention does on tensor cores: the reference kernel is off
#: by up to 2.2 times the output's own rounding, and one whose accumulator is float16 by 6 to 12 (measured).
KERNEL_ROUNDING = 4.0


def _judge_half_kernel(actual: Any, expected: Tensor, what: str, suspects: list, hint: str, atol: float,
                       rtol: float) -> None:
    judge_half(actual, expected, what, torch.float16, factor=KERNEL_ROUNDING, suspects=suspects)


judge(Compare(KERNEL_HALF, lambda q, k, v, causal, *_: _kernel_right(q, k, v, None, causal), _kernel_what,
              KERNEL_SUSPECTS, pick=lambda pair: pair[0], crashed=_kernel_crash, compare=_judge_half_kernel,
              same_type=False))  # judge_half wants the float64 result, and judges the dtype itself
judge(Compare(KERNEL_LSE, _kernel_ref, lambda *case: f"the log-sum-exp of {_kernel_what(*case)}",
              declared(Mistakes([*known.KERNEL_LSE, known.KERNEL.named("NaN for queries that see no key"),
                                 known.KERNEL.named("no scaling")]), _kernel_right), pick=lambda pair: pair[1],
              hint="Lse = m + log ℓ of each query's scaled scores, -inf for a query that sees no key",
              crashed=_kernel_crash))


# ================================================================ flash_decode

def _decode_what(q: Tensor, k: Tensor, v: Tensor, n: int, mask: Tensor | None = None) -> str:
    return (f"flash_decode(q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, n_splits={n}"
            + ("" if mask is None else f", mask {tuple(mask.shape)}") + ")")


judge(Compare(DECODE_VALUES, ref.flash_decode, _decode_what, declared(known.DECODE, ref.flash_decode),
              hint="each part's state (m, ℓ, o) merged with merge_states, then out = o / ℓ"))


def _judge_splits(obs: Observations) -> None:
    q, k, v, n = DECODE_SPLIT_CASE
    what = _decode_what(q, k, v, n)
    got = obs["split"]
    if isinstance(got, Raised):
        raise Mistake(told(got, what))
    size = math.ceil(k.shape[-2] / n)  # the longest a part need be
    if got["widest"] >= k.shape[-2]:
        raise mistake(known.ALL_SCORES, what, widest=got["widest"], shape=(q.shape[-2], k.shape[-2]))
    if got["widest"] > size:
        raise mistake(known.PARTS_TOO_LONG, what, widest=got["widest"], n=n, t_k=k.shape[-2], size=size)
    judge_tensor(got["out"], ref.flash_decode(q, k, v, n), what, declared(known.DECODE, ref.flash_decode)(q, k, v, n,
                                                                                                          None))
    q, k, v, n = DECODE_EMPTY_CASE
    what = _decode_what(q, k, v, n)
    got = obs["empty"]
    if isinstance(got, Raised):
        raise mistake(known.EMPTY_PARTS, f"{what} {got.describe()}", n=n, t_k=k.shape[-2])
    if isinstance(got, Tensor) and bool(torch.isnan(got).any()):
        raise mistake(known.EMPTY_PARTS, f"{what} gave NaN", n=n, t_k=k.shape[-2])
    judge_tensor(got, ref.flash_decode(q, k, v, n), what)
    judge_value_error(obs["zero"], f"{_decode_what(*DECODE_SPLIT_CASE[:3], 0)}", ("n_splits",))


register("flash_decode_splits", _judge_splits)


# ================================================================ concept checks

for _name, _cases, _group in (("positions_processed", POSITIONS_PROCESSED_CASES, known.POSITIONS_PROCESSED),
                              ("saved_for_backward", SAVED_FOR_BACKWARD_CASES, known.SAVED_FOR_BACKWARD),
                              ("decode_flops_per_byte", DECODE_FLOPS_CASES, known.DECODE_INTENSITY)):
    _reference = getattr(ref, _name)
    register(f"{_name}_answer", lambda obs, cases=_cases, reference=_reference, group=_group, name=_name: judge_answers(
        obs, cases, reference, declared(group, reference), lambda *a, name=name: f"{name}{a}"))

