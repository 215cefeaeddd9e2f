"""Probes of Chapter 9 (``09_flash_attention``), judged in :mod:`autograder.judges.flash_attention`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases are built here from fixed seeds, with
plain torch and ``attention_course`` only: the reference is not in the grading sandbox. The backward pass's cases
carry the forward pass's ``out`` and log-sum-exp, computed here from the definitions in float64
(:func:`forward_by_definition`). The Triton kernel runs through the course's launcher,
:func:`attention_course.flash.launch_attention`, in Triton's interpreter (the sandbox has no GPU), on cases of a few
tiles each: the interpreter runs one program after another, in NumPy.

Whatever the learner's code returns, a probe records it and never raises: every call of the learner's code, and
everything done with what it returned, runs inside :func:`~autograder.checks.core.attempt` (or
``attempt_as_is``). ``flash_attention_contract.md`` beside this file lists every sentence of the chapter's contract
with the hidden case that checks it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from attention_course.flash import TRITON_AVAILABLE, TRITON_MISSING, launch_attention
from attention_course.mistakes import flash_attention as known
from autograder.checks.core import (
    Check,
    Observations,
    WrongOutput,
    attempt,
    attempt_as_is,
    declare,
    describe_value,
    fresh_copy,
    observe_contract,
    plain,
    probe_answers,
    register,
    seeded,
    seeded_mask,
)


class ShapeRecorder(TorchFunctionMode):
    """Records the shape of every floating-point tensor that a torch function returns inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: set[tuple[int, ...]] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, Tensor) and t.is_floating_point():
                self.shapes.add(tuple(t.shape))
        return out

    def widest(self, t_q: int) -> int:
        """The most scores per query any tensor held: the longest last axis of a tensor whose next-to-last axis is
        the ``t_q`` queries, or the longest next-to-last axis of one whose last axis is (a transposed block)."""
        rows = [s[-1] for s in self.shapes if len(s) >= 2 and s[-2] == t_q]
        columns = [s[-2] for s in self.shapes if len(s) >= 2 and s[-1] == t_q]
        return max(rows + columns, default=0)


def _dead_rows(*shape: int, seed: int) -> Tensor:
    """A seeded mask (..., T_q, T_k) whose query 1 sees nothing and query 0 sees only its last key."""
    mask = seeded_mask(*shape, seed=seed)
    mask[..., 1, :] = False
    mask[..., 0, :] = False
    mask[..., 0, -1] = True  # its first blocks are all masked: the running maximum is -inf there
    mask[..., 2:, 0] = True
    return mask


def _padding(lengths: list[int], t_k: int) -> Tensor:
    """(B, 1, T_k): the first ``lengths[b]`` keys of sequence b are real."""
    return (torch.arange(t_k)[None, :] < torch.tensor(lengths)[:, None])[:, None, :]


# ================================================================ merge_states

def partial_state(scores: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The state (m, l, o) of one set of keys, from its scores (..., T_q, n) (-inf where masked) and values (..., n,
    d_v): the probes' own, to make the cases."""
    m = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    return m, p.sum(dim=-1, keepdim=True), p @ v


def _state(*batch: int, t_q: int = 3, n: int = 4, d_v: int = 5, seed: int, scale: float = 1.0,
           shift: float = 0.0, masked_rows: tuple[int, ...] = ()) -> tuple[Tensor, Tensor, Tensor]:
    scores = seeded(*batch, t_q, n, seed=seed, scale=scale) + shift
    scores[..., list(masked_rows), :] = float("-inf")  # rows whose keys here are all masked: an empty state
    return partial_state(scores, seeded(*batch, n, d_v, seed=seed + 1))


def empty_state(*batch: int, t_q: int = 3, d_v: int = 5) -> tuple[Tensor, Tensor, Tensor]:
    """The state of no key: (-inf, 0, 0)."""
    return (torch.full((*batch, t_q, 1), float("-inf")), torch.zeros(*batch, t_q, 1), torch.zeros(*batch, t_q, d_v))


def _merge_all(student: Any, *states: tuple[Tensor, Tensor, Tensor]) -> Any:
    """The learner's merge of two states, or of three in both groupings: ((a + b) + c, a + (b + c))."""
    fresh = [tuple(t.clone() for t in state) for state in states]
    if len(fresh) == 2:
        return student(*fresh)
    a, b, c = fresh
    return student(student(a, b), c), student(a, student(b, c))


MERGE_VALUES = declare(Check("merge_states_values", [  # (state a, state b[, state c])
    (_state(2, seed=861), _state(2, seed=863, shift=0.8)),  # either maximum can be the larger
    (_state(2, 2, t_q=2, n=3, d_v=4, seed=865, scale=3.0), _state(2, 2, t_q=2, n=6, d_v=4, seed=867)),
    (_state(1, seed=869, scale=40.0, shift=300.0), _state(1, seed=871, scale=40.0, shift=-200.0)),  # e^300 overflows
    (_state(2, seed=873), _state(2, seed=875, shift=-0.5), _state(2, seed=877, shift=1.0)),  # three, two groupings
], call=_merge_all))
_SOME = _state(2, seed=881)
MERGE_EMPTY = declare(Check("merge_states_empty", [
    (empty_state(2), _SOME),  # an empty state merged with a state: that state
    (_SOME, empty_state(2)),
    (empty_state(2), empty_state(2)),  # two empty states: an empty state, never NaN
    (_state(2, seed=883, masked_rows=(0, 2)), _state(2, seed=885, masked_rows=(2,))),  # empty for some queries only
], call=_merge_all))

#: float64 states (finite) for the contract; the gradient of a merge with an empty state must be finite too
MERGE_CONTRACT = {name: t.double() for name, t in zip(("m_a", "l_a", "o_a", "m_b", "l_b", "o_b"),
                                                       (*_state(2, seed=887), *_state(2, seed=889, shift=0.3)),
                                                       strict=True)}
MERGE_SHAPE_ERRORS = (  # (what, a, b): states that must be refused with a ValueError
    ("states of 3 and 4 queries", _state(2, seed=891), _state(2, t_q=4, seed=893)),
    ("states of d_v 5 and 6", _state(2, seed=895), _state(2, d_v=6, seed=897)),
)


def _merged(student: Any) -> Callable[..., Tensor]:
    """The learner's merge on separate tensors, its (m, l, o) side by side, (..., T_q, 2 + d_v): one output whose
    gradient the contract check can take (the concatenation is the probe's, on what was returned)."""

    def call(m_a: Tensor, l_a: Tensor, o_a: Tensor, m_b: Tensor, l_b: Tensor, o_b: Tensor) -> Tensor:
        out = student((m_a, l_a, o_a), (m_b, l_b, o_b))
        if not (isinstance(out, (tuple, list)) and len(out) == 3 and all(isinstance(t, Tensor) for t in out)):
            raise WrongOutput(f"it returned {describe_value(out)}, not three tensors (m, l, o)")
        return torch.cat(list(out), dim=-1)

    return call


def _probe_merge_contract(student: Any) -> Observations:
    obs = observe_contract(_merged(student), MERGE_CONTRACT, seed=899)
    del obs["called"]  # no torch function is forbidden here

    def empty_grad() -> Any:
        state = [t.double().requires_grad_(True) for t in _state(2, seed=901, masked_rows=(1,))]
        merged = _merged(student)(*state, *(t.double() for t in empty_state(2)))
        finite = torch.where(torch.isfinite(merged), merged, torch.zeros_like(merged))  # m is -inf where both are empty
        grads = torch.autograd.grad((finite * seeded(*merged.shape, seed=902, dtype=merged.dtype)).sum(), state,
                                    allow_unused=True)
        return tuple(grads)

    obs["empty_grad"] = attempt(empty_grad)
    obs["errors"] = [attempt(lambda a=a, b=b: student(a, b)) for _, a, b in MERGE_SHAPE_ERRORS]
    return obs


register("merge_states_contract", _probe_merge_contract)


# ================================================================ online_softmax_attention
# Cases: (q, k, v, mask, block_size, causal); causal is passed only when it is True, so that the values and masks of
# an answer are judged apart from its causal option.

def _online(student: Any, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool,
            **more: Any) -> Any:
    return student(q, k, v, mask, block_size=block, **({"causal": True} if causal else {}), **more)


def _late_peak(seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v whose largest scores (about 300) sit in the last keys, after blocks of small ones: a running
    maximum that is never raised, or sums never rescaled, overflow or go wrong there."""
    q = seeded(2, 3, 8, seed=seed, scale=4.0)
    k = seeded(2, 12, 8, seed=seed + 1, scale=0.2)
    k[:, 9:] = q[:, :1].expand(2, 3, 8) * 3.0  # the last three keys line up with the first query
    return q, k, seeded(2, 12, 5, seed=seed + 2)


ONLINE_VALUES = declare(Check("online_softmax_attention_values", [  # (q, k, v, mask, block_size, causal)
    (seeded(2, 4, 6, seed=851), seeded(2, 10, 6, seed=852), seeded(2, 10, 5, seed=853), None, 4, False),  # 4 + 4 + 2
    (seeded(2, 2, 3, 8, seed=854), seeded(2, 2, 7, 8, seed=855), seeded(2, 2, 7, 8, seed=856), None, 1, False),
    (seeded(1, 5, 4, seed=857), seeded(1, 6, 4, seed=858), seeded(1, 6, 3, seed=859), None, 16, False),  # one block
    (*_late_peak(860), None, 3, False),
    # grouped-query shapes: q (B, n_kv, group, T_q, d), k and v (B, n_kv, 1, T_k, d) broadcast over the group
    (seeded(2, 2, 2, 3, 8, seed=846), seeded(2, 2, 1, 7, 8, seed=847), seeded(2, 2, 1, 7, 4, seed=848), None, 3,
     False),
    (seeded(3, 5, seed=843), seeded(9, 5, seed=844), seeded(9, 2, seed=845), None, 4, False),  # no leading dimension
], call=_online))

ONLINE_MASKED = declare(Check("online_softmax_attention_masked", [
    (seeded(2, 4, 6, seed=861), seeded(2, 9, 6, seed=862), seeded(2, 9, 3, seed=863), _dead_rows(2, 4, 9, seed=864),
     4, False),
    (seeded(3, 5, 4, seed=865), seeded(3, 5, 4, seed=866), seeded(3, 5, 4, seed=867),
     torch.ones(5, 5, dtype=torch.bool).tril(), 2, False),  # a causal mask given as a mask, over the batch
    (seeded(2, 3, 4, seed=868), seeded(2, 7, 4, seed=869), seeded(2, 7, 2, seed=870), _dead_rows(2, 3, 7, seed=871),
     3, False),
    (seeded(2, 4, 6, seed=872), seeded(2, 9, 6, seed=873), seeded(2, 9, 3, seed=874), _padding([6, 2], 9), 4, False),
    # the offset causal mask of a cache, (T_q, T_k), over grouped-query shapes
    (seeded(1, 2, 2, 3, 8, seed=875), seeded(1, 2, 1, 7, 8, seed=876), seeded(1, 2, 1, 7, 4, seed=877),
     torch.ones(3, 7, dtype=torch.bool).tril(4), 2, False),
], call=_online))

ONLINE_CAUSAL = declare(Check("online_softmax_attention_causal", [
    (seeded(2, 6, 8, seed=2001), seeded(2, 6, 8, seed=2002), seeded(2, 6, 5, seed=2003), None, 4, True),  # T_q = T_k
    (seeded(2, 3, 8, seed=2004), seeded(2, 11, 8, seed=2005), seeded(2, 11, 5, seed=2006), None, 4, True),  # a cache
    (seeded(1, 2, 7, 4, seed=2007), seeded(1, 2, 4, 4, seed=2008), seeded(1, 2, 4, 3, seed=2009), None, 3, True),
    (seeded(2, 5, 8, seed=2010), seeded(2, 9, 8, seed=2011), seeded(2, 9, 4, seed=2012), _padding([9, 6], 9), 2,
     True),  # with a padding mask too
], call=_online))

#: T_q = 3 queries over T_k = 40 keys in blocks of 8: no floating tensor ending in (3, 40) may ever exist
BLOCK_CASE = (seeded(2, 3, 6, seed=881), seeded(2, 40, 6, seed=882), seeded(2, 40, 5, seed=883), 8)
#: 2 queries over 300 keys, block_size left at its default of 128: the widest scores are 128 per query
DEFAULT_BLOCK_CASE = (seeded(1, 2, 4, seed=878), seeded(1, 300, 4, seed=879), seeded(1, 300, 3, seed=880))


def recorded(call: Callable[[], Any], t_q: int) -> dict[str, Any]:
    """What ``call()`` returned and the most scores per query it ever held (:class:`ShapeRecorder`)."""
    recorder = ShapeRecorder()
    with recorder:
        out = call()
    return {"out": plain(out), "widest": recorder.widest(t_q)}


def _probe_blocks(student: Any) -> Observations:
    q, k, v, block = BLOCK_CASE
    qd, kd, vd = DEFAULT_BLOCK_CASE
    return {"run": attempt_as_is(lambda: recorded(lambda: student(q.clone(), k.clone(), v.clone(), None,
                                                                  block_size=block), q.shape[-2])),
            "default": attempt_as_is(lambda: recorded(lambda: student(qd.clone(), kd.clone(), vd.clone(), None),
                                                      qd.shape[-2]))}


register("online_softmax_attention_blocks", _probe_blocks)

#: float64 inputs whose second query may attend nothing: its output is 0 and its gradients must be 0, not NaN
ONLINE_CONTRACT = {"q": seeded(2, 3, 4, seed=884, dtype=torch.float64),
                   "k": seeded(2, 5, 4, seed=885, dtype=torch.float64),
                   "v": seeded(2, 5, 3, seed=886, dtype=torch.float64)}
ONLINE_CONTRACT_MASK = torch.tensor([[True, False, True, True, False], [False] * 5, [True] * 5])
ONLINE_ERRORS = (  # (what, q, k, v, block_size): calls that must raise ValueError
    ("block_size=0", seeded(1, 2, 4, seed=887), seeded(1, 5, 4, seed=888), seeded(1, 5, 3, seed=889), 0),
    ("q with d_k=4 and k with d_k=3", seeded(1, 2, 4, seed=890), seeded(1, 5, 3, seed=891), seeded(1, 5, 3, seed=892),
     2),
)


def _probe_online_contract(student: Any) -> Observations:
    obs = observe_contract(lambda q, k, v: student(q, k, v, ONLINE_CONTRACT_MASK.clone(), block_size=2),
                           ONLINE_CONTRACT, seed=893)
    del obs["called"]  # the blocks check watches what is built
    obs["errors"] = [attempt(lambda q=q, k=k, v=v, b=b: student(q.clone(), k.clone(), v.clone(), None, block_size=b))
                     for _, q, k, v, b in ONLINE_ERRORS]
    return obs


register("online_softmax_attention_contract", _probe_online_contract)

#: (q, k, v, mask, block_size, causal) asked for (out, lse) with return_lse=True
LSE_CASES = [
    (seeded(2, 4, 6, seed=2021), seeded(2, 10, 6, seed=2022), seeded(2, 10, 5, seed=2023), None, 4, False),
    (seeded(2, 4, 6, seed=2024), seeded(2, 9, 6, seed=2025), seeded(2, 9, 3, seed=2026), _dead_rows(2, 4, 9, seed=2027),
     3, False),  # query 1 sees nothing: lse = -inf
    (seeded(1, 2, 6, 4, seed=2028), seeded(1, 2, 4, 4, seed=2029), seeded(1, 2, 4, 4, seed=2030), None, 3, True),
]
#: float16 and bfloat16 inputs whose scores are large and keys many: computed in their own dtype, the running sums
#: and the scores lose the accuracy that float32 keeps (measured: 80 times float32's error)
HALF_CASES = [(dtype, (seeded(2, 4, 32, seed=2031, scale=3.0).to(dtype), seeded(2, 256, 32, seed=2032).to(dtype),
                       seeded(2, 256, 32, seed=2033).to(dtype)), 32) for dtype in (torch.float16, torch.bfloat16)]


LSE = Check("online_softmax_attention_lse", LSE_CASES, call=lambda student, *case: _online(student, *case,
                                                                                        return_lse=True), key="lse")


def _probe_lse(student: Any) -> Observations:
    return {**LSE.probe(student),
            "half": [attempt(lambda qkv=qkv, block=block: student(*fresh_copy(qkv), None, block_size=block,
                                                                  return_lse=True))
                     for _, qkv, block in HALF_CASES]}


register("online_softmax_attention_lse", _probe_lse)


# ================================================================ attention_backward
# Cases: (q, k, v, out, lse, d_out, mask, block_size, causal), out and lse those of the forward pass.

def forward_by_definition(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> tuple[Tensor, Tensor]:
    """(out, lse) of attention, from the definitions, in float64: the forward pass a backward case starts from."""
    s = known.scores(q.double(), k.double(), known.allowed(q.shape[-2], k.shape[-2], mask, causal))
    lse = torch.logsumexp(s, dim=-1)  # (..., T_q); -inf for a query that sees no key
    shift = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1)
    return torch.exp(s - shift) @ v.double(), lse


def backward_case(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool, seed: int) -> tuple:
    out, lse = forward_by_definition(q, k, v, mask, causal)
    d_out = seeded(*out.shape, seed=seed, dtype=torch.float64)
    return q, k, v, out.to(q.dtype), lse.to(q.dtype), d_out.to(q.dtype), mask, block, causal


def _backward(student: Any, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor,
              mask: Tensor | None, block: int, causal: bool) -> Any:
    return student(q, k, v, out, lse, d_out, mask, block_size=block, **({"causal": True} if causal else {}))


BACKWARD_VALUES = declare(Check("attention_backward_values", [
    backward_case(seeded(2, 5, 8, seed=2101), seeded(2, 12, 8, seed=2102), seeded(2, 12, 6, seed=2103), None, 4,
                  False, 2104),  # three whole blocks
    backward_case(seeded(2, 2, 7, 8, seed=2105), seeded(2, 1, 10, 8, seed=2106), seeded(2, 1, 10, 8, seed=2107), None,
                  3, False, 2108),  # k and v broadcast over two heads; 10 keys in blocks of 3
    backward_case(seeded(1, 6, 4, seed=2109), seeded(1, 6, 4, seed=2110), seeded(1, 6, 4, seed=2111), None, 16, False,
                  2112),  # one block larger than T_k
    backward_case(seeded(3, 5, seed=2113), seeded(9, 5, seed=2114), seeded(9, 2, seed=2115), None, 2, False, 2116),
], call=_backward))

BACKWARD_MASKED = declare(Check("attention_backward_masked", [
    backward_case(seeded(2, 5, 8, seed=2121), seeded(2, 12, 8, seed=2122), seeded(2, 12, 6, seed=2123),
                  _padding([12, 7], 12), 5, False, 2124),
    backward_case(seeded(2, 8, 4, seed=2125), seeded(2, 8, 4, seed=2126), seeded(2, 8, 4, seed=2127), None, 3, True,
                  2128),  # causal, T_q = T_k
    backward_case(seeded(2, 4, 8, seed=2129), seeded(2, 10, 8, seed=2130), seeded(2, 10, 5, seed=2131),
                  _padding([10, 8], 10), 4, True, 2132),  # causal with the offset of 6 cached keys, and padding
    backward_case(seeded(1, 7, 4, seed=2133), seeded(1, 4, 4, seed=2134), seeded(1, 4, 4, seed=2135), None, 2, True,
                  2136),  # T_q > T_k: the first three queries see no key
    backward_case(seeded(2, 4, 6, seed=2137), seeded(2, 9, 6, seed=2138), seeded(2, 9, 3, seed=2139),
                  _dead_rows(2, 4, 9, seed=2140), 4, False, 2141),
], call=_backward))

BACKWARD_BLOCK_CASE = backward_case(*BLOCK_CASE[:3], None, 8, False, 2151)
BACKWARD_DEFAULT_CASE = backward_case(*DEFAULT_BLOCK_CASE, None, 128, False, 2152)


def _probe_backward_blocks(student: Any) -> Observations:
    q, k, v, out, lse, d_out, _, block, _ = BACKWARD_BLOCK_CASE
    qd, kd, vd, outd, lsed, d_outd, *_ = BACKWARD_DEFAULT_CASE
    return {"run": attempt_as_is(lambda: recorded(lambda: student(*fresh_copy((q, k, v, out, lse, d_out)), None,
                                                                  block_size=block), q.shape[-2])),
            "default": attempt_as_is(lambda: recorded(lambda: student(*fresh_copy((qd, kd, vd, outd, lsed, d_outd))),
                                                      qd.shape[-2]))}


register("attention_backward_blocks", _probe_backward_blocks)

#: float16 and bfloat16 cases with many keys: gradients computed in the inputs' dtype are off by 100 to 400 times
#: more than float32's (measured), beyond the inputs' own rounding
BACKWARD_HALF_CASES = [
    (dtype, backward_case(seeded(2, 4, 16, seed=2161, scale=3.0).to(dtype), seeded(2, 128, 16, seed=2162).to(dtype),
                          seeded(2, 128, 16, seed=2163).to(dtype), None, 8, False, 2164))
    for dtype in (torch.float16, torch.bfloat16)]


def _probe_backward_half(student: Any) -> Observations:
    return {"grads": [attempt(lambda case=case: _backward(student, *fresh_copy(case))) for _, case in
                      BACKWARD_HALF_CASES]}


register("attention_backward_half", _probe_backward_half)

#: float64 inputs, query 1 sees nothing; the calls that must be refused: a trailing axis on lse, d_out of another
#: width, block_size 0
BACKWARD_CONTRACT = backward_case(seeded(2, 3, 4, seed=2171, dtype=torch.float64),
                                  seeded(2, 5, 4, seed=2172, dtype=torch.float64),
                                  seeded(2, 5, 3, seed=2173, dtype=torch.float64), ONLINE_CONTRACT_MASK, 2, False, 2174)


def _refused_backward_calls() -> list[tuple[str, tuple, dict]]:
    q, k, v, out, lse, d_out, mask, block, _ = BACKWARD_CONTRACT
    return [("lse of shape (2, 3, 1)", (q, k, v, out, lse.unsqueeze(-1), d_out, mask), {"block_size": block}),
            ("d_out of shape (2, 3, 2)", (q, k, v, out, lse, d_out[..., :2], mask), {"block_size": block}),
            ("block_size=0", (q, k, v, out, lse, d_out, mask), {"block_size": 0})]


BACKWARD_REFUSED = _refused_backward_calls()


def _probe_backward_contract(student: Any) -> Observations:
    case = fresh_copy(BACKWARD_CONTRACT[:6])
    copies = fresh_copy(case)
    result = attempt(lambda: _backward(student, *copies, *BACKWARD_CONTRACT[6:]))
    modified = [name for name, a, b in zip(("q", "k", "v", "out", "lse", "d_out"), case, copies, strict=True)
                if not torch.equal(a, b)]

    def without_gradients() -> Any:
        with torch.no_grad():
            return _backward(student, *fresh_copy(BACKWARD_CONTRACT))

    return {"result": result, "modified": modified, "no_grad": attempt(without_gradients),
            "errors": [attempt(lambda args=args, kwargs=kwargs: student(*fresh_copy(args), **kwargs))
                       for _, args, kwargs in BACKWARD_REFUSED]}


register("attention_backward_contract", _probe_backward_contract)


# ================================================================ FlashAttention
# Cases: (q, k, v, mask, block_size, causal), run as FlashAttention.apply(q, k, v, mask, block_size, causal).

def _apply(student: Any, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool) -> Any:
    if not callable(getattr(student, "apply", None)):
        raise WrongOutput(f"FlashAttention is {describe_value(student)} without an apply: it subclasses "
                          f"torch.autograd.Function, whose apply runs its forward")
    return student.apply(q, k, v, mask, block, causal)


def _differentiable(out: Any, shape: tuple[int, ...]) -> Tensor:
    """What FlashAttention.apply returned, if it is a real floating tensor of ``shape`` attached to the graph."""
    if not (isinstance(out, Tensor) and out.is_floating_point() and tuple(out.shape) == shape
            and out.layout == torch.strided and not out.is_nested and out.grad_fn is not None):
        raise WrongOutput(f"FlashAttention.apply returned {describe_value(out)}, not out: a floating tensor of shape "
                          f"{shape} with a backward pass attached")
    return out


def _backward_by_hand(student: Any, out: Tensor, d_out: Tensor, inputs: tuple[Tensor, ...]) -> None:
    """Call the learner's backward as autograd will (its ctx is the node of out), and refuse what autograd would
    refuse, saying what came back: one gradient per input of forward, the first three of the inputs' shapes."""
    raw = student.backward(out.grad_fn, d_out)
    if not (isinstance(raw, (tuple, list)) and len(raw) == 6):
        raise WrongOutput(f"FlashAttention.backward returned {describe_value(raw)}: it returns one gradient per input "
                          f"of forward (q, k, v, mask, block_size, causal), (dq, dk, dv, None, None, None)")
    shapes = [tuple(g.shape) if isinstance(g, Tensor) else g for g in raw[:3]]
    if any(not isinstance(g, Tensor) or g.shape != x.shape for g, x in zip(raw[:3], inputs, strict=True)):
        raise WrongOutput(f"FlashAttention.backward returned gradients of shapes {shapes} for q, k and v of shapes "
                          f"{[tuple(x.shape) for x in inputs]}")


FLASH_FORWARD = declare(Check("FlashAttention_forward", [
    (seeded(2, 4, 6, seed=2201), seeded(2, 10, 6, seed=2202), seeded(2, 10, 5, seed=2203), None, 4, False),
    (seeded(2, 4, 6, seed=2204), seeded(2, 9, 6, seed=2205), seeded(2, 9, 3, seed=2206), _padding([9, 5], 9), 3,
     False),
    (seeded(1, 2, 7, 8, seed=2207), seeded(1, 2, 7, 8, seed=2208), seeded(1, 2, 7, 4, seed=2209), None, 3, True),
], call=_apply))

#: q (1, 2, 6, 4) over 20 keys in blocks of 4: the weights would be (1, 2, 6, 20)
SAVED_CASE = (seeded(1, 2, 6, 4, seed=2211), seeded(1, 2, 20, 4, seed=2212), seeded(1, 2, 20, 4, seed=2213), None, 4,
              False)


def _tensors_in(value: Any, where: str, depth: int = 0) -> list[tuple[str, Tensor]]:
    """The tensors held by an attribute of the autograd node, directly or in tuples, lists and dicts (two levels)."""
    if isinstance(value, Tensor):
        return [(where, value)]
    if depth < 2 and isinstance(value, (tuple, list)):
        return [found for i, item in enumerate(value) for found in _tensors_in(item, f"{where}[{i}]", depth + 1)]
    if depth < 2 and isinstance(value, dict):
        return [found for key, item in value.items() for found in _tensors_in(item, f"{where}[{key!r}]", depth + 1)]
    return []


def _saved_facts(student: Any) -> dict[str, Any]:
    """What the forward pass kept for the backward pass (each tensor once, floating ones with their values), and the
    most scores per query the backward pass held."""
    q, k, v, mask, block, causal = (x.clone().requires_grad_(True) if isinstance(x, Tensor) else x
                                    for x in SAVED_CASE)
    out = _differentiable(_apply(student, q, k, v, mask, block, causal), tuple(q.shape))
    d_out = seeded(*out.shape, seed=2214)
    _backward_by_hand(student, out, d_out, (q, k, v))
    node = out.grad_fn
    found = [("ctx.saved_tensors", t) for t in getattr(node, "saved_tensors", ())]
    found += [found_ for name, value in sorted(vars(node).items()) for found_ in _tensors_in(value, f"ctx.{name}")]
    seen, kept = set(), []
    for where, t in found:
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype))
        if key in seen:
            continue
        seen.add(key)
        kept.append((where, plain(t) if t.is_floating_point() else f"<{str(t.dtype).removeprefix('torch.')} tensor "
                     f"of shape {tuple(t.shape)}>"))
    recorder = ShapeRecorder()
    with recorder:
        out.backward(d_out)
    return {"saved": kept, "widest": recorder.widest(q.shape[-2])}


def _probe_saved(student: Any) -> Observations:
    return {"facts": attempt_as_is(lambda: _saved_facts(student))}


register("FlashAttention_saved", _probe_saved)

#: float64 cases for gradcheck and the gradients: (q, k, v, mask, block_size, causal, d_out)
#: The first: k and v broadcast over two heads, a padding mask and a query that sees nothing; the second causal,
#: as many queries as keys; the last causal with two keys before the queries.
GRADIENT_CASES = [
    (seeded(2, 2, 4, 3, seed=2221, dtype=torch.float64), seeded(2, 1, 6, 3, seed=2222, dtype=torch.float64),
     seeded(2, 1, 6, 2, seed=2223, dtype=torch.float64), _padding([6, 4], 6)[:, None] & torch.tensor(
         [True, False, True, True])[:, None], 4, False),
    (seeded(1, 7, 3, seed=2224, dtype=torch.float64), seeded(1, 7, 3, seed=2225, dtype=torch.float64),
     seeded(1, 7, 3, seed=2226, dtype=torch.float64), None, 3, True),
    (seeded(2, 5, 3, seed=2227, dtype=torch.float64), seeded(2, 5, 3, seed=2228, dtype=torch.float64),
     seeded(2, 5, 3, seed=2229, dtype=torch.float64), None, 2, False),
    (seeded(1, 5, 3, seed=2235, dtype=torch.float64), seeded(1, 7, 3, seed=2236, dtype=torch.float64),
     seeded(1, 7, 3, seed=2237, dtype=torch.float64), None, 4, True),  # causal, two keys before the queries
]
GRADIENT_CASES = [(*case, seeded(*torch.broadcast_shapes(case[0].shape[:-1], case[1].shape[:-2] + (1,)),
                                 case[2].shape[-1], seed=2230 + i, dtype=torch.float64))
                  for i, case in enumerate(GRADIENT_CASES)]


def _gradients(student: Any, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool,
               d_out: Tensor) -> tuple:
    """The gradients of ``<out, d_out>`` with respect to q, k and v, through the learner's function."""
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = _differentiable(_apply(student, *leaves, mask, block, causal), tuple(d_out.shape))
    _backward_by_hand(student, out, d_out, tuple(leaves))
    return torch.autograd.grad((out * d_out).sum(), leaves, allow_unused=True)


GRADCHECK = Check("FlashAttention_gradcheck", GRADIENT_CASES, call=_gradients)


def _probe_gradcheck(student: Any) -> Observations:
    def gradcheck(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, block: int, causal: bool, _: Tensor) -> Any:
        inputs = tuple(x.clone().requires_grad_(True) for x in (q, k, v))
        return torch.autograd.gradcheck(lambda a, b, c: _apply(student, a, b, c, mask, block, causal), inputs,
                                        raise_exception=False, fast_mode=True)

    return {**GRADCHECK.probe(student), "gradcheck": [attempt(lambda case=case: gradcheck(*case))
                                                      for case in GRADIENT_CASES]}


register("FlashAttention_gradcheck", _probe_gradcheck)


# ================================================================ attention_kernel (Triton)
# Cases: (q, k, v, causal, block_m, block_n); q (B, H, T_q, D), k and v (B, H, T_k, D), launched by the course's
# launcher: one program per block of queries of each head.

def _heads(b: int, h: int, t_q: int, t_k: int, d: int, seed: int, dtype: torch.dtype = torch.float32,
           scale: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    return (seeded(b, h, t_q, d, seed=seed, scale=scale).to(dtype), seeded(b, h, t_k, d, seed=seed + 1).to(dtype),
            seeded(b, h, t_k, d, seed=seed + 2).to(dtype))


def _launch(student: Any, q: Tensor, k: Tensor, v: Tensor, causal: bool, block_m: int, block_n: int) -> Any:
    if not TRITON_AVAILABLE or not callable(getattr(student, "__getitem__", None)):
        raise NotAKernel(f"attention_kernel is {describe_value(student)}" + (
            "" if TRITON_AVAILABLE else f"; {TRITON_MISSING}"))
    return launch_attention(student, q, k, v, causal, block_m, block_n)


class NotAKernel(TypeError):
    """What the learner gave is not a Triton kernel (one that a grid launches, ``kernel[grid](...)``)."""


KERNEL_VALUES = declare(Check("attention_kernel_values", [
    (*_heads(1, 2, 32, 32, 16, seed=2301), False, 16, 16),  # D = BLOCK_N: untransposed keys give numbers
    (*_heads(1, 1, 16, 64, 32, seed=2304), False, 16, 16),  # D = 32 against tiles of 16 keys
    (*_heads(2, 1, 32, 16, 16, seed=2307, scale=3.0), False, 32, 16),  # BLOCK_M != BLOCK_N
], call=_launch))
KERNEL_CAUSAL = declare(Check("attention_kernel_causal", [
    (*_heads(1, 2, 32, 32, 16, seed=2311), True, 16, 16),
    (*_heads(1, 1, 16, 48, 16, seed=2314), True, 16, 16),  # 32 keys before the queries: the offset
    (*_heads(1, 1, 40, 16, 16, seed=2317), True, 16, 16),  # T_q > T_k: the first 24 queries see no key
], call=_launch))
KERNEL_TAIL = declare(Check("attention_kernel_tail", [
    (*_heads(1, 2, 20, 37, 16, seed=2321), False, 16, 16),  # the last tiles of queries and keys run past the end
    (*_heads(1, 1, 37, 37, 16, seed=2324), True, 16, 16),
    (*_heads(2, 1, 5, 21, 32, seed=2327), False, 16, 16),
], call=_launch))
KERNEL_HALF = declare(Check("attention_kernel_half", [
    (*_heads(1, 1, 16, 256, 32, seed=2331, dtype=torch.float16, scale=3.0), False, 16, 16),
], call=_launch))
KERNEL_LSE = declare(Check("attention_kernel_lse", [
    (*_heads(1, 2, 20, 37, 16, seed=2341), False, 16, 16),
    (*_heads(1, 1, 40, 16, 16, seed=2344), True, 16, 16),  # -inf for the queries that see no key
], call=_launch))


# ================================================================ flash_decode
# Cases: (q, k, v, n_splits, mask).

def _decode(student: Any, q: Tensor, k: Tensor, v: Tensor, n: int, mask: Tensor | None) -> Any:
    return student(q, k, v, n, mask)


DECODE_VALUES = declare(Check("flash_decode_values", [
    (seeded(2, 4, 1, 16, seed=2401), seeded(2, 4, 50, 16, seed=2402), seeded(2, 4, 50, 8, seed=2403), 3, None),
    (seeded(2, 4, 1, 16, seed=2404), seeded(2, 4, 50, 16, seed=2405), seeded(2, 4, 50, 8, seed=2406), 7,
     _padding([50, 31], 50)[:, None]),  # two sequences' caches of 50 and 31 positions
    (seeded(3, 2, 16, seed=2407), seeded(3, 23, 16, seed=2408), seeded(3, 23, 4, seed=2409), 4, None),
    (seeded(1, 1, 8, seed=2410), seeded(1, 30, 8, seed=2411), seeded(1, 30, 8, seed=2412), 1, None),
], call=_decode))

#: (q, k, v, n_splits): 3 queries over 40 keys in 6 parts of 7 (the last of 5); then 12 parts over 5 keys, seven of
#: them empty
DECODE_SPLIT_CASE = (seeded(2, 3, 4, seed=2421), seeded(2, 40, 4, seed=2422), seeded(2, 40, 2, seed=2423), 6)
DECODE_EMPTY_CASE = (seeded(2, 3, 8, seed=2424), seeded(2, 5, 8, seed=2425), seeded(2, 5, 4, seed=2426), 12)


def _probe_splits(student: Any) -> Observations:
    q, k, v, n = DECODE_SPLIT_CASE
    return {"split": attempt_as_is(lambda: recorded(lambda: student(*fresh_copy((q, k, v)), n), q.shape[-2])),
            "empty": attempt(lambda: student(*fresh_copy(DECODE_EMPTY_CASE[:3]), DECODE_EMPTY_CASE[3])),
            "zero": attempt(lambda: student(*fresh_copy((q, k, v)), 0))}


register("flash_decode_splits", _probe_splits)


# ================================================================ concept checks

POSITIONS_PROCESSED_CASES = [(5, 4, True), (5, 4, False), (100, 50, True), (100, 50, False), (3, 1, False)]
SAVED_FOR_BACKWARD_CASES = [(1, 8, 4096, 64), (4, 12, 1024, 64), (2, 3, 10, 5)]
DECODE_FLOPS_CASES = [(8, 1, 4), (32, 32, 2), (32, 8, 2), (12, 4, 1)]  # bytes of 4 first: at 2 bytes per number
#: counting numbers and counting only the keys give the same wrong answer

register("positions_processed_answer", probe_answers(POSITIONS_PROCESSED_CASES))
register("saved_for_backward_answer", probe_answers(SAVED_FOR_BACKWARD_CASES))
register("decode_flops_per_byte_answer", probe_answers(DECODE_FLOPS_CASES))
