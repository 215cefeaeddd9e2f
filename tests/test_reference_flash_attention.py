"""The chapter 9 reference, `solutions.flash_attention`: attention without the score matrix, forward and backward,
as an autograd function and as a Triton kernel, against PyTorch's own attention, autograd and the course's contract."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap

import nbformat
import pytest
import torch
import torch.nn.functional as F
from notebook_grading import graded_cells, nbgrader_meta, release_notebook, solution_cells, source_notebook
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from attention_course import flash
from autograder.release import REPO_ROOT
from solutions.flash_attention import (
    FlashAttention,
    attention_backward,
    decode_flops_per_byte,
    flash_attention,
    flash_decode,
    merge_states,
    online_softmax_attention,
    saved_for_backward,
    triton_attention,
)
from solutions.gpt import GroupedQueryAttention
from solutions.masking import causal_mask
from solutions.multi_head import merge_heads, split_heads
from solutions.self_attention import scaled_dot_product_attention


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def lined_up(t_q: int, t_k: int) -> Tensor:
    """Chapter 2's causal mask, lined up at the last key, for any lengths: with more queries than keys (which
    Chapter 2's causal_mask refuses) the first ones see no key, as in FlashAttention's kernels."""
    return torch.ones(t_q, t_k, dtype=torch.bool).tril(t_k - t_q)


def projections(attn: GroupedQueryAttention, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``q (B, n_heads, T, d_head)``, ``k`` and ``v (B, n_kv_heads, T, d_head)`` from the module's own weights."""
    return (split_heads(attn.w_q(x), attn.n_heads), split_heads(attn.w_k(x), attn.n_kv_heads),
            split_heads(attn.w_v(x), attn.n_kv_heads))


# ------------------------------------------------------------------------------------------ online softmax


def fully_masked_rows(mask: Tensor) -> Tensor:
    return ~mask.any(dim=-1, keepdim=True)


CASES = [  # (batch shape of q, k, v; T_q; T_k; d_k; d_v; block_size; mask shape or None or "causal")
    ((2, 3), 7, 7, 8, 8, 2, None),
    ((2, 3), 5, 13, 4, 6, 4, "causal"),
    ((1, 2), 9, 32, 8, 8, 8, "causal"),
    ((3,), 6, 10, 5, 3, 3, (3, 6, 10)),
    ((2, 4), 8, 11, 8, 8, 5, (2, 1, 1, 11)),  # padding-like: one row of keys per sequence, over heads and queries
    ((2, 4), 8, 11, 8, 8, 4, (1, 4, 8, 11)),  # one mask per head, the same for every sequence
    ((2, 4), 6, 9, 8, 8, 64, (2, 4, 6, 9)),  # one block larger than T_k
    ((2, 2), 4, 12, 8, 8, 1, (4, 12)),  # one key per block
    ((), 16, 40, 16, 8, 7, (16, 1)),  # a key axis of 1: the mask broadcasts over the keys
]


def make_mask(spec, t_q: int, t_k: int, seed: int) -> Tensor | None:
    if spec is None:
        return None
    if spec == "causal":
        return causal_mask(t_q, t_k)
    mask = torch.rand(spec, generator=torch.Generator().manual_seed(seed)) > 0.4
    if spec[-2] > 1:
        mask[..., 1, :] = False  # a fully masked query row
    return mask


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-Tq{c[1]}-Tk{c[2]}-block{c[5]}-{c[6]}")
def test_online_softmax_equals_full_attention(case) -> None:
    batch, t_q, t_k, d_k, d_v, block, spec = case
    q, k, v = randn(*batch, t_q, d_k, seed=1), randn(*batch, t_k, d_k, seed=2), randn(*batch, t_k, d_v, seed=3)
    mask = make_mask(spec, t_q, t_k, seed=4)
    out = online_softmax_attention(q, k, v, mask, block_size=block)
    reference, _ = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == reference.shape and out.dtype == q.dtype
    assert not out.isnan().any(), "a fully masked row must give zeros, not 0 / 0"
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if mask is not None:
        empty = fully_masked_rows(mask.expand(*reference.shape[:-1], t_k))
        assert (out.masked_select(empty) == 0).all(), "a query whose keys are all masked gets an all-zero output"
        expected = expected.masked_fill(empty, 0.0)  # the course's convention, whatever SDPA does there
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def state_of(scores: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The state (m, l, o) of keys with ``scores (..., T_q, n)`` (-inf where masked) and values ``v (..., n, d_v)``,
    computed from its definition, in float64."""
    scores, v = scores.double(), v.double()
    m = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    return m, p.sum(dim=-1, keepdim=True), p @ v


@pytest.mark.parametrize("cuts", [(4,), (1,), (3, 7), (2, 5, 9)])
def test_merged_states_are_the_state_of_all_the_keys_in_any_grouping(cuts: tuple[int, ...]) -> None:
    scores, v = randn(2, 3, 11, seed=1, dtype=torch.float64) * 4, randn(2, 11, 5, seed=2, dtype=torch.float64)
    bounds = [0, *cuts, 11]
    states = [state_of(scores[..., a:b], v[:, a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    left = states[0]
    for state in states[1:]:  # ((a + b) + c) + ...
        left = merge_states(left, state)
    right = states[-1]
    for state in reversed(states[:-1]):  # a + (b + (c + ...))
        right = merge_states(state, right)
    whole = state_of(scores, v)
    for merged in (left, right):
        for got, want in zip(merged, whole, strict=True):
            torch.testing.assert_close(got, want)
    torch.testing.assert_close(left[2] / left[1], torch.softmax(scores, -1) @ v)
    a, b = states[0], states[1]
    for got, want in zip(merge_states(a, b), merge_states(b, a), strict=True):
        torch.testing.assert_close(got, want, msg="the merge is commutative")


def test_an_empty_state_changes_nothing_and_two_give_no_nan() -> None:
    scores, v = randn(2, 3, 6, seed=3), randn(2, 6, 4, seed=4)
    masked = scores.clone()
    masked[:, 1] = float("-inf")  # query 1 sees no key here
    some, partly = state_of(scores, v), state_of(masked, v)
    empty = (torch.full((2, 3, 1), float("-inf"), dtype=torch.float64), torch.zeros(2, 3, 1, dtype=torch.float64),
             torch.zeros(2, 3, 4, dtype=torch.float64))
    for merged in (merge_states(empty, some), merge_states(some, empty)):
        for got, want in zip(merged, some, strict=True):
            assert torch.equal(got, want)
    both = merge_states(empty, partly)
    assert not any(t.isnan().any() for t in both) and torch.equal(both[0][:, 1], empty[0][:, 1])
    assert not any(t.isnan().any() for t in merge_states(empty, empty))


def test_merging_never_overflows_and_its_gradients_stay_finite() -> None:
    a = state_of(randn(1, 2, 4, seed=5) * 40 + 600, randn(1, 4, 3, seed=6))  # e^600 overflows float64
    b = state_of(randn(1, 2, 4, seed=7) * 40 - 600, randn(1, 4, 3, seed=8))
    m, total, out = merge_states(a, b)
    assert all(t.isfinite().all() for t in (m, total, out))
    torch.testing.assert_close(out / total, a[2] / a[1], msg="b's keys weigh e^-1200 against a's: nothing")
    leaves = [t.clone().requires_grad_(True) for t in (*a, *state_of(torch.full((1, 2, 4), float("-inf")),
                                                                        randn(1, 4, 3, seed=9)))]
    merged = merge_states(tuple(leaves[:3]), tuple(leaves[3:]))
    (merged[1].sum() + merged[2].sum()).backward()
    assert all(leaf.grad is not None and leaf.grad.isfinite().all() for leaf in leaves)


def test_merge_states_refuses_states_of_other_shapes() -> None:
    a, b = state_of(randn(2, 3, 4, seed=1), randn(2, 4, 5, seed=2)), state_of(randn(2, 2, 4, seed=3),
                                                                                randn(2, 4, 5, seed=4))
    with pytest.raises(ValueError, match="same shapes"):
        merge_states(a, b)
    with pytest.raises(ValueError, match=r"\(m, l, o\)"):
        merge_states(a, a[:2])


def test_online_softmax_runs_grouped_query_attention_s_heads() -> None:
    """The readable path of grouped-query attention may compute its heads with the online softmax: the query heads
    grouped (B, n_kv, group, T, d), each key/value head broadcast over its group, a cache's offset mask."""
    torch.manual_seed(3)
    attn = GroupedQueryAttention(32, 8, 2)
    x = randn(2, 7, 32, seed=10)
    q, k, v = projections(attn, x)
    q = q.reshape(2, 2, 4, 7, 4)  # (B, n_kv, group, T, d_head)
    heads = online_softmax_attention(q, k[:, :, None], v[:, :, None], causal_mask(7), block_size=3)
    torch.testing.assert_close(attn.w_o(merge_heads(heads.reshape(2, 8, 7, 4))), attn(x), atol=1e-5, rtol=1e-5)


def test_online_softmax_survives_large_scores_and_keeps_float64() -> None:
    q, k, v = (randn(2, 9, 4, seed=s, dtype=torch.float64) for s in (1, 2, 3))
    q = q * 300  # scores in the thousands: exp() overflows without the running maximum
    out = online_softmax_attention(q, k, v, block_size=2)
    assert out.dtype == torch.float64 and out.isfinite().all()
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v)[0])


class LargestNewStorage(TorchFunctionMode):
    """Records the most elements any tensor storage created inside the block holds (views of inputs excluded)."""

    def __init__(self, *inputs: Tensor) -> None:
        super().__init__()
        self.known = {t.untyped_storage().data_ptr() for t in inputs}
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor) and t.untyped_storage().data_ptr() not in self.known:
                self.largest = max(self.largest, t.untyped_storage().nbytes() // t.element_size())
        return out


def test_online_softmax_never_builds_the_full_score_matrix() -> None:
    b, h, t, d, block = 2, 3, 256, 16, 32
    q, k, v = (randn(b, h, t, d, seed=s) for s in (1, 2, 3))
    mask = causal_mask(t)
    with LargestNewStorage(q, k, v, mask) as online:
        online_softmax_attention(q, k, v, mask, block_size=block)
    with LargestNewStorage(q, k, v, mask) as full:
        scaled_dot_product_attention(q, k, v, mask)
    assert full.largest >= b * h * t * t, "the recorder must see the (T_q, T_k) scores of full attention"
    assert online.largest <= b * h * t * block, (
        f"the largest tensor the online softmax made holds {online.largest} elements; one block of scores, "
        f"(B, H, T_q, block), is {b * h * t * block} and the whole (B, H, T_q, T_k) matrix {b * h * t * t}")


def test_online_softmax_gradients_match_full_attention_and_leave_the_inputs_alone() -> None:
    q, k, v = (randn(2, 5, 3, seed=s, dtype=torch.float64).requires_grad_() for s in (1, 2, 3))
    mask = torch.rand(2, 5, 5, generator=torch.Generator().manual_seed(0)) > 0.3
    mask[0, 2] = False  # a fully masked row: zero output, zero gradient
    before = [t.detach().clone() for t in (q, k, v, mask)]
    assert torch.autograd.gradcheck(lambda *x: online_softmax_attention(*x, mask, block_size=2), (q, k, v))
    weights = randn(2, 5, 3, seed=9, dtype=torch.float64)
    grads = torch.autograd.grad((online_softmax_attention(q, k, v, mask, block_size=2) * weights).sum(), (q, k, v))
    expected = torch.autograd.grad((scaled_dot_product_attention(q, k, v, mask)[0] * weights).sum(), (q, k, v))
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)
    for old, new in zip(before, (q, k, v, mask), strict=True):
        assert torch.equal(old, new), "the inputs must not be modified in place"


def test_online_softmax_rejects_bad_arguments_naming_them() -> None:
    q, k, v = randn(2, 4, 8, seed=1), randn(2, 6, 8, seed=2), randn(2, 6, 5, seed=3)
    with pytest.raises(ValueError, match="block_size"):
        online_softmax_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="d_k"):
        online_softmax_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match=r"T_k.*\(2, 6, 8\).*\(2, 5, 5\)"):
        online_softmax_attention(q, k, v[:, :5])
    with pytest.raises(ValueError, match="boolean"):
        online_softmax_attention(q, k, v, torch.ones(4, 6))
    with pytest.raises(ValueError, match=r"\(4, 5\)"):
        online_softmax_attention(q, k, v, torch.ones(4, 5, dtype=torch.bool))


@pytest.mark.parametrize(("t_q", "t_k", "block"), [(6, 6, 4), (3, 11, 4), (7, 4, 3), (16, 40, 7)])
def test_causal_is_chapter_2s_mask_built_block_by_block(t_q: int, t_k: int, block: int) -> None:
    q, k, v = randn(2, t_q, 8, seed=1), randn(2, t_k, 8, seed=2), randn(2, t_k, 5, seed=3)
    padding = torch.rand(2, 1, t_k, generator=torch.Generator().manual_seed(4)) > 0.2
    for mask in (None, padding):
        full = lined_up(t_q, t_k) if mask is None else lined_up(t_q, t_k) & mask
        torch.testing.assert_close(online_softmax_attention(q, k, v, mask, block, causal=True),
                                   scaled_dot_product_attention(q, k, v, full)[0], atol=1e-6, rtol=1e-5)


def test_the_log_sum_exp_is_torchs_and_minus_infinity_for_a_query_that_sees_nothing() -> None:
    q, k, v = randn(2, 5, 8, seed=1, dtype=torch.float64), randn(2, 9, 8, seed=2, dtype=torch.float64), \
        randn(2, 9, 3, seed=3, dtype=torch.float64)
    mask = torch.rand(2, 5, 9, generator=torch.Generator().manual_seed(4)) > 0.4
    mask[:, 2] = False
    out, lse = online_softmax_attention(q, k, v, mask, block_size=4, return_lse=True)
    scores = (q @ k.mT / math.sqrt(8)).masked_fill(~mask, -math.inf)
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1))
    assert lse.shape == (2, 5) and torch.isneginf(lse[:, 2]).all()
    torch.testing.assert_close(out, online_softmax_attention(q, k, v, mask, block_size=4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_are_computed_in_float32_and_returned_in_their_dtype(dtype: torch.dtype) -> None:
    q, k, v = (randn(2, t, 32, seed=s) * c for s, t, c in ((1, 4, 3.0), (2, 256, 1.0), (3, 256, 1.0)))
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    out, lse = online_softmax_attention(q, k, v, block_size=32, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    exact = scaled_dot_product_attention(q.double(), k.double(), v.double())[0]
    # float32 accumulation: within the dtype's own rounding of the exact result (the checks' rule)
    allowed = torch.finfo(dtype).eps * (exact.abs() + 0.01 * exact.abs().max())
    assert ((out.double() - exact).abs() <= allowed).all()


# ------------------------------------------------------------------------------------------ the backward pass


BACKWARD_CASES = [  # (q shape, k shape, d_v, block_size, mask spec, causal)
    ((2, 5, 8), (2, 12, 8), 6, 4, None, False),
    ((2, 3, 7, 8), (2, 1, 10, 8), 8, 3, None, False),  # k and v broadcast over heads: their gradients summed
    ((6, 4), (6, 4), 4, 16, None, False),  # no leading dimension, one block larger than T_k
    ((2, 4, 8), (2, 10, 8), 5, 4, "padding", True),  # causal with 6 keys before the queries, and padding
    ((1, 7, 4), (1, 4, 4), 4, 2, None, True),  # the first three queries see no key
    ((2, 4, 6), (2, 9, 6), 3, 4, "random", False),
]


def _backward_case(case, dtype=torch.float64):
    q_shape, k_shape, d_v, block, spec, causal = case
    q, k = randn(*q_shape, seed=1, dtype=dtype), randn(*k_shape, seed=2, dtype=dtype)
    v = randn(*k_shape[:-1], d_v, seed=3, dtype=dtype)
    t_q, t_k = q_shape[-2], k_shape[-2]
    mask = None
    if spec == "padding":
        mask = torch.arange(t_k) < torch.tensor([[t_k], [t_k - 3]]).view(2, 1, 1)  # (2, 1, T_k)
    elif spec == "random":
        mask = torch.rand(2, t_q, t_k, generator=torch.Generator().manual_seed(5)) > 0.4
        mask[:, 1] = False
    return q, k, v, mask, block, causal


def _attention_by_autograd(q, k, v, mask, causal):
    allowed = lined_up(q.shape[-2], k.shape[-2]) if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    return scaled_dot_product_attention(q, k, v, allowed)[0]


@pytest.mark.parametrize("case", BACKWARD_CASES, ids=lambda c: f"{c[0]}-{c[1]}-block{c[3]}-{c[4]}-causal{c[5]}")
def test_the_backward_pass_equals_autograd_through_the_whole_matrix(case) -> None:
    q, k, v, mask, block, causal = _backward_case(case)
    out, lse = online_softmax_attention(q, k, v, mask, block, causal, return_lse=True)
    d_out = randn(*out.shape, seed=6, dtype=torch.float64)
    got = attention_backward(q, k, v, out, lse, d_out, mask, block, causal)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    want = torch.autograd.grad((_attention_by_autograd(*leaves, mask, causal) * d_out).sum(), leaves)
    for name, a, b, x in zip("qkv", got, want, (q, k, v), strict=True):
        assert a.shape == x.shape and a.dtype == x.dtype, name
        assert not a.isnan().any(), f"d{name} has NaN"
        torch.testing.assert_close(a, b, msg=f"d{name}")


def test_the_backward_pass_needs_no_autograd_and_holds_one_block_of_scores() -> None:
    q, k, v = randn(2, 3, 6, seed=1), randn(2, 40, 6, seed=2), randn(2, 40, 5, seed=3)
    out, lse = online_softmax_attention(q, k, v, block_size=8, return_lse=True)
    d_out = randn(2, 3, 5, seed=4)
    with torch.no_grad(), LargestNewStorage(q, k, v, out, lse, d_out) as recorded:
        attention_backward(q, k, v, out, lse, d_out, block_size=8)
    assert recorded.largest <= 2 * 40 * 6, "no tensor larger than the inputs themselves: no (T_q, T_k) matrix"
    with LargestNewStorage(q, k, v, out, lse, d_out) as recorded:
        attention_backward(q, k.repeat(1, 25, 1), v.repeat(1, 25, 1), out, lse, d_out, block_size=8)
    assert recorded.largest <= 2 * 1000 * 6, "1000 keys: the largest tensor is the gradient of k, not 3 × 1000 scores"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_backward_pass_of_half_inputs_is_as_accurate_as_float32_makes_it(dtype: torch.dtype) -> None:
    q, k, v = (randn(2, 4, 16, seed=1) * 3).to(dtype), randn(2, 128, 16, seed=2).to(dtype), \
        randn(2, 128, 16, seed=3).to(dtype)
    out, lse = online_softmax_attention(q, k, v, block_size=8, return_lse=True)
    d_out = randn(2, 4, 16, seed=4).to(dtype)
    got = attention_backward(q, k, v, out, lse, d_out, block_size=8)
    exact = attention_backward(q.double(), k.double(), v.double(), out.double(), lse.double(), d_out.double(),
                               block_size=8)
    for a, e in zip(got, exact, strict=True):
        assert a.dtype == dtype
        allowed = torch.finfo(dtype).eps * (e.abs() + 0.01 * e.abs().max())
        assert ((a.double() - e).abs() <= allowed).all()


def test_the_backward_pass_refuses_shapes_the_forward_pass_does_not_give() -> None:
    q, k, v = randn(2, 3, 4, seed=1), randn(2, 5, 4, seed=2), randn(2, 5, 3, seed=3)
    out, lse = online_softmax_attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="lse"):
        attention_backward(q, k, v, out, lse.unsqueeze(-1), out)
    with pytest.raises(ValueError, match="d_out"):
        attention_backward(q, k, v, out, lse, out[..., :2])
    with pytest.raises(ValueError, match="block_size"):
        attention_backward(q, k, v, out, lse, out, block_size=0)


# ------------------------------------------------------------------------------------------ the autograd function


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_passes_gradcheck_and_saves_no_matrix(causal: bool) -> None:
    q, k, v = (randn(2, t, 3, seed=s, dtype=torch.float64).requires_grad_(True) for s, t in ((1, 4), (2, 7), (3, 7)))
    mask = torch.arange(7) < torch.tensor([[7], [5]]).view(2, 1, 1)
    assert torch.autograd.gradcheck(lambda a, b, c: flash_attention(a, b, c, mask, 3, causal), (q, k, v))
    out = FlashAttention.apply(q, k, v, mask, 3, causal)
    saved = [tuple(t.shape) for t in out.grad_fn.saved_tensors]
    assert saved == [(2, 4, 3), (2, 7, 3), (2, 7, 3), (2, 4, 3), (2, 4)], saved


def test_flash_attention_saves_a_fraction_of_what_autograd_through_the_loop_keeps() -> None:
    """The memory table of benchmarks/flash_attention.py, in small: the saved tensors' bytes, read off the graph."""
    q, k, v = (randn(1, 2, 512, 16, seed=s).requires_grad_(True) for s in (1, 2, 3))
    flash_saved = sum(t.numel() for t in FlashAttention.apply(q, k, v, None, 64, True).grad_fn.saved_tensors)
    assert flash_saved == saved_for_backward(1, 2, 512, 16)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: (kept.append(t.numel()), t)[1], lambda t: t):
        kept: list[int] = []
        online_softmax_attention(q, k, v, None, 64, causal=True)
    assert sum(kept) > 2 * 512 * 512, "autograd through the loop keeps every block's weights: more than the matrix"


# ------------------------------------------------------------------------------------------ the Triton kernel


@pytest.mark.parametrize(("shape", "causal", "dtype", "tolerance"), [
    ((1, 2, 32, 32, 16), False, torch.float32, 1e-5),
    ((2, 1, 20, 37, 16), True, torch.float32, 1e-5),  # tails of queries and keys
    ((1, 1, 40, 16, 32), True, torch.float32, 1e-5),  # queries that see no key: zeros and -inf
    ((1, 1, 16, 64, 16), False, torch.float16, 2e-3),
])
def test_the_kernel_in_the_interpreter_matches_pytorch(shape, causal, dtype, tolerance) -> None:
    b, h, t_q, t_k, d = shape
    q, k, v = randn(b, h, t_q, d, seed=1).to(dtype), randn(b, h, t_k, d, seed=2).to(dtype), \
        randn(b, h, t_k, d, seed=3).to(dtype)
    out, lse = triton_attention(q, k, v, causal, 16, 16)
    want, want_lse = online_softmax_attention(q.double(), k.double(), v.double(), causal=causal, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-5)
    if not causal:
        torch.testing.assert_close(out.float(), F.scaled_dot_product_attention(q.float(), k.float(), v.float()),
                                   atol=tolerance, rtol=tolerance)


def test_the_launcher_refuses_what_a_kernel_cannot_take_naming_it() -> None:
    q = randn(1, 1, 8, 16, seed=1)
    for call, words in ((lambda: triton_attention(q[0], q[0], q[0]), "4-D"),
                        (lambda: triton_attention(q, q, q[..., :8]), "(B, H, T_k, D)"),
                        (lambda: triton_attention(q[..., :12], q[..., :12], q[..., :12]), "power of two"),
                        (lambda: triton_attention(q, q, q, block_m=8), "block_m"),
                        (lambda: triton_attention(q.double(), q.double(), q.double()), "float16, bfloat16"),
                        (lambda: triton_attention(q.bfloat16(), q.bfloat16(), q.bfloat16()), "bfloat16 inputs in")):
        with pytest.raises(ValueError, match=re.escape(words)):
            call()


def test_without_triton_a_kernel_can_be_defined_and_running_it_says_why_not() -> None:
    """macOS and Windows: Triton is not installed. The notebook's kernel cell still runs (the decorator and
    tl.constexpr are stand-ins), and the launcher refuses, saying why."""
    code = textwrap.dedent("""
        import json, sys
        sys.modules["triton"] = None  # as where it is not installed
        from attention_course import flash
        @flash.triton.jit
        def kernel(X, N, BLOCK: flash.tl.constexpr):
            pass
        try:
            flash.launch_attention(kernel, *[__import__("torch").zeros(1, 1, 16, 16)] * 3)
        except flash.TritonMissing as err:
            print(json.dumps({"available": flash.TRITON_AVAILABLE, "said": str(err)}))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found == {"available": False, "said": flash.TRITON_MISSING}


def test_without_triton_the_kernels_visible_checks_say_so_and_skip() -> None:
    """The release's setup cell, the instructor's kernel and the kernel's visible checks, run where Triton is
    missing: every cell runs, and each check prints the message instead of failing."""
    release = nbformat.read(release_notebook("09_flash_attention"), 4)
    source = nbformat.read(source_notebook("09_flash_attention"), 4)
    setup = next(c.source for c in release.cells if nbgrader_meta(c).get("grade_id") == "setup")
    kernel = next(c.source for c in solution_cells(source) if nbgrader_meta(c)["grade_id"] == "attention_kernel")
    tests = [c.source for c in graded_cells(release) if nbgrader_meta(c)["grade_id"].startswith("attention_kernel_")]
    code = "import sys\nsys.modules['triton'] = None\n" + "\n\n".join([setup, kernel, *tests])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count(flash.TRITON_MISSING) == len(tests) == 5, run.stdout


# ------------------------------------------------------------------------------------------ Flash-Decoding


@pytest.mark.parametrize("n_splits", [1, 3, 7, 50, 64])
def test_flash_decoding_equals_attention_over_all_the_keys(n_splits: int) -> None:
    q, k, v = randn(2, 4, 1, 16, seed=1), randn(2, 4, 50, 16, seed=2), randn(2, 4, 50, 8, seed=3)
    mask = (torch.arange(50) < torch.tensor([50, 31]).view(2, 1, 1, 1))  # (2, 1, 1, 50)
    for m in (None, mask):
        torch.testing.assert_close(flash_decode(q, k, v, n_splits, m), scaled_dot_product_attention(q, k, v, m)[0],
                                   atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="n_splits"):
        flash_decode(q, k, v, 0)


# ------------------------------------------------------------------------------------------ the concept checks


def test_decode_flops_per_byte_is_what_a_flop_counter_and_the_cache_s_bytes_give() -> None:
    """One decoding step's attention, its matrix products counted by PyTorch's FLOP counter, over the bytes of the
    cache it reads: each key/value head is read once for its whole group of query heads."""
    for n_heads, n_kv, dtype in ((8, 8, torch.bfloat16), (8, 2, torch.bfloat16), (4, 1, torch.float32)):
        t, d = 64, 16
        q = torch.zeros(1, n_heads, 1, d, dtype=dtype)
        k, v = (torch.zeros(1, n_kv, t, d, dtype=dtype) for _ in range(2))
        group = n_heads // n_kv
        with FlopCounterMode(display=False) as counter:
            weights = torch.softmax(q @ k.repeat_interleave(group, 1).mT, dim=-1)  # (1, H, 1, T)
            weights @ v.repeat_interleave(group, 1)  # (1, H, 1, d)
        read = (k.numel() + v.numel()) * k.element_size()
        assert counter.get_total_flops() == 4 * n_heads * t * d
        assert decode_flops_per_byte(n_heads, n_kv, k.element_size()) == counter.get_total_flops() / read
