"""The declarative check's two halves, on a made-up check: ``Check`` runs the learner's object on its cases,
``Compare`` judges each result against the reference with the comparison it is given, strict about lengths;
``value_errors`` judges a check whose every case must raise."""

from __future__ import annotations

import pytest
import torch

from autograder.checks.core import Check, Mistake
from autograder.judges.core import Compare, Suspect, value_errors
from autograder.judges.masking import judge_mask

CASES = [(torch.tensor([0.0, 1.0, 2.0]),), (torch.tensor([-1.0, 3.0]),)]
DOUBLE = Check("made_up_double", CASES)


def _double(x):
    return 2 * x


def _compare(**fields) -> Compare:
    return Compare(DOUBLE, _double, lambda x: f"double(x of {len(x)})",
                   lambda x: [Suspect("added instead of multiplied", "x + 2", lambda: x + 2)], **fields)


def test_the_probe_runs_every_case_on_its_own_copy() -> None:
    def greedy(x):
        x.mul_(2)  # modifies its input in place
        return x

    first, second = DOUBLE.probe(greedy)["outs"], DOUBLE.probe(greedy)["outs"]
    torch.testing.assert_close(first, second)  # the shared cases were not doubled twice
    torch.testing.assert_close(CASES[0][0], torch.tensor([0.0, 1.0, 2.0]))


def test_compare_passes_the_reference_and_names_a_suspect() -> None:
    _compare()(DOUBLE.probe(_double))
    with pytest.raises(Mistake) as raised:
        _compare()(DOUBLE.probe(lambda x: x + 2))
    assert raised.value.name == "x + 2" and "double(x of 3)" in str(raised.value)


def test_compare_refuses_a_record_of_another_length() -> None:
    with pytest.raises(ValueError, match="zip"):
        _compare()({"outs": DOUBLE.probe(_double)["outs"][:1]})


def test_the_comparison_is_pluggable() -> None:
    """Off by 1e-7: close enough for the default ``judge_tensor``, wrong for an exact comparison."""
    nearly = DOUBLE.probe(lambda x: 2 * x + 1e-7)
    _compare()(nearly)
    with pytest.raises(Mistake, match="at index"):
        _compare(compare=judge_mask)(nearly)
    seen = []
    _compare(compare=lambda actual, expected, *rest: seen.append((actual, expected, rest)))(nearly)
    assert len(seen) == 2 and seen[0][2][0] == "double(x of 3)"  # what, suspects, hint, atol, rtol follow


def test_value_errors_wants_one_expectation_per_case_and_every_case_to_raise() -> None:
    refusal = Check("made_up_refusal", CASES, key="raised")
    with pytest.raises(ValueError, match="1 expectations for 2 cases"):
        value_errors(refusal, [("double(x)", ("shape",))])
    judge = value_errors(refusal, [("double(x of 3)", ("shape",)), ("double(x of 2)", ("shape",))])

    def refuses(x):
        raise ValueError(f"x has the wrong shape {tuple(x.shape)}")

    judge(refusal.probe(refuses))
    with pytest.raises(Mistake, match="double"):
        judge(refusal.probe(_double))  # returns instead of raising
    with pytest.raises(Mistake, match="should mention"):
        judge(refusal.probe(lambda x: (_ for _ in ()).throw(ValueError("no"))))


def test_a_concept_answer_is_small_plain_data_and_a_huge_tensor_is_refused_at_once() -> None:
    """A learner who returns the cache itself instead of its size must not stall the grader for minutes while
    113 million numbers are turned into a tuple: the probe records a ValueError naming the answer's size."""
    from autograder.checks.core import Raised, probe_answers

    probe = probe_answers([(12, 1, 12, 12, 1024, 64), (2, 3)])
    answers = probe(lambda *sizes: torch.zeros(sizes))["answers"]
    assert isinstance(answers[0], Raised) and "Tensor of 113,246,208 numbers" in answers[0].message
    assert answers[1] == ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    shapes = probe(lambda *sizes: torch.Size(sizes))["answers"]
    assert shapes == [(12, 1, 12, 12, 1024, 64), (2, 3)]  # a shape of any size is an answer


INDICES = Check("made_up_positions", [(4,)])


def _positions(n):
    return torch.arange(n)  # int64, as the contract says


@pytest.mark.parametrize(("returned", "says"), [
    (lambda n: torch.arange(n, dtype=torch.int32), "has dtype torch.int32, expected torch.int64"),
    (lambda n: torch.arange(n, dtype=torch.float64), "has dtype torch.float64, expected torch.int64"),
    (lambda n: torch.arange(n, device="meta"), "is on meta, expected cpu"),
])
def test_compare_refuses_the_right_values_in_another_dtype_or_on_another_device(returned, says) -> None:
    """A Compare checks the result's dtype and device against the reference's unless told not to
    (``same_type=False``), so a new exercise's scaffolded check refuses an int32 answer where int64 is the contract."""
    compare = Compare(INDICES, _positions, lambda n: f"positions({n})")
    if returned(4).device.type != "meta":
        assert torch.equal(returned(4).long(), _positions(4))  # the values are right
    with pytest.raises(Mistake, match=says) as caught:
        compare.judge_one(returned(4), 4)
    assert caught.value.name in ("dtype not kept", "device not kept")
    compare.judge_one(_positions(4), 4)  # the right dtype passes
    if returned(4).device.type != "meta":
        Compare(INDICES, _positions, lambda n: f"positions({n})", same_type=False).judge_one(returned(4), 4)
