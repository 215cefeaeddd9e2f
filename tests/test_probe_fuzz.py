"""A fuzz over return values: whatever a learner's answer returns, every hidden check fails it with a message.

For every registered check of every chapter (read from ``autograder/chapters.py``: a chapter added later is
covered without a change here), the learner's exercise is replaced by a stand-in that returns an odd value
(None, a list, a string, a tensor of the wrong shape, dtype or device, NaN, ...): for a function, a function of
any arguments; for a class, a *bare* one (an ``nn.Module`` where the reference is one) whose constructor takes
anything and whose methods, properties and other attributes give the value, and the reference class *built* as
it builds, with its own methods and properties giving the value, so that the probes load their weights and reach
what it returns. A check that is given what its cell's code made of the exercise (Chapter 7's trained model,
:func:`notebook_grading.checked_objects`) gets the same, made: a bare instance, or a copy of what the cell made of
the reference with its methods and properties giving the value. The check runs as the grader runs it, in-process
(probe, ``encode``, a JSON round trip, ``judge_recorded``), and must

- probe without raising, and record observations that encode;
- fail the answer with a :class:`Mistake` that a judge raised on purpose: never ``RecordMismatch`` (the grader
  flags the submission: a person must look, as for tampering), never another exception, never
  :class:`JudgeCrashed` (the safety net of ``judge_recorded``, which a judge that handles every value never
  reaches). A built class may pass a check of its parts, which its outputs do not concern;
- not blame the answer for an exception of Python or torch ("raised TypeError: ..."): a stand-in raises nothing,
  so such an exception came from the probe's own code on what the answer gave;
- for a function or a built class, say what came back (the value's type, shape, dtype, device or numbers) or
  name a mistake.
"""

from __future__ import annotations

import builtins
import copy
import functools
import importlib
import json
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from notebook_grading import checked_objects, exercise_of
from torch import Tensor, nn

from attention_course.testing import answer_value
from autograder.chapters import CHAPTERS
from autograder.checks import core as checks
from autograder.checks.core import Mistake
from autograder.judges import core as judges
from autograder.judges.core import JudgeCrashed


class Odd(Tensor):
    """A tensor subclass, as a learner's library might return."""


TENSOR = ("tensor(", "Tensor")  # a tensor's repr, or its type's name
#: name -> (a fresh value on every call, words of which a message that says what came back holds one)
VALUES: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "None": (lambda: None, ("None",)),
    "list": (lambda: [1.0, 2.0], ("1.0", "2.0", "tuple", "list", "float")),  # the items of a pair are floats
    "string": (lambda: "attention", ("attention", "str")),
    "float": (lambda: 0.5, ("0.5", "float")),
    "wrong shape": (lambda: torch.zeros(3), ("(3,)", *TENSOR)),
    "float64": (lambda: torch.ones(2, 3, dtype=torch.float64), ("(2, 3)", "float64", *TENSOR)),
    "float16": (lambda: torch.ones(2, 3, dtype=torch.float16), ("(2, 3)", "float16", *TENSOR)),
    "int64": (lambda: torch.arange(6).reshape(2, 3), ("(2, 3)", "int64", *TENSOR)),
    "bool": (lambda: torch.ones(2, 3, dtype=torch.bool), ("(2, 3)", "bool", *TENSOR)),
    "meta": (lambda: torch.zeros(2, 3, device="meta"), ("meta", "(2, 3)")),
    "NaN": (lambda: torch.full((2, 3), float("nan")), ("(2, 3)", "NaN", "nan", *TENSOR)),
    "requires grad": (lambda: torch.ones(2, 3, requires_grad=True), ("(2, 3)", *TENSOR)),
    "0-d": (lambda: torch.tensor(1.5), ("()", "1.5", *TENSOR)),
    "empty": (lambda: torch.zeros(0), ("(0,)", *TENSOR)),
    "complex": (lambda: torch.ones(2, 3, dtype=torch.complex64), ("complex", "(2, 3)")),
    "sparse": (lambda: torch.eye(3).to_sparse(), ("sparse", "(3, 3)")),
    "tuple of wrong shapes": (lambda: (torch.zeros(3), torch.zeros(2, 2)), ("(3,)", "(2, 2)", "tuple", *TENSOR)),
    "tuple of Nones": (lambda: (None, None), ("None", "tuple")),
    "dict": (lambda: {"out": torch.zeros(3)}, ("dict",)),
    "subclass": (lambda: torch.zeros(3).as_subclass(Odd), ("(3,)", "Odd", *TENSOR)),
}


def _returning(make: Callable[[], Any]) -> Callable[..., Any]:
    return lambda *args, **kwargs: make()


def bare(reference: type, make: Callable[[], Any]) -> type:
    """A class of the reference's name, an ``nn.Module`` where the reference is one, with nothing in it: its
    constructor takes anything; its methods (those the reference defines), its properties and any other public
    attribute a probe reads (``cache.keys``, ``layer.ff``, ``module.w_q``) give the value."""
    base = nn.Module if issubclass(reference, nn.Module) else object

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        base.__init__(self)

    def __getattr__(self: Any, name: str) -> Any:  # noqa: N807
        if name.startswith("_"):
            raise AttributeError(name)
        return make()

    return type(reference.__name__, (base,), {"__init__": __init__, "__getattr__": __getattr__,
                                              **_overrides(reference, make)})


def built(reference: type, make: Callable[[], Any]) -> type:
    """The reference itself, built as it builds (its parts are there, so that the probes load their weights and
    reach its outputs), with every method and property that the reference defines giving the value."""
    return type(reference.__name__, (reference,), _overrides(reference, make))


def _overrides(reference: type, make: Callable[[], Any]) -> dict[str, Any]:
    """The reference's own public methods and properties, each giving ``make()``."""
    found: dict[str, Any] = {}
    for name, attribute in vars(reference).items():
        if isinstance(attribute, property):
            found[name] = property(lambda self: make())
        elif callable(attribute) and not name.startswith("_"):
            found[name] = _returning(make)
    return found


def stand_ins(reference: Any) -> list[str]:
    """The kinds of stand-in for ``reference``: a function's, or a class's (``built`` only where the class has
    methods or properties of its own to give the value)."""
    if not isinstance(reference, type):
        return ["function"]
    return ["bare", "built"] if _overrides(reference, lambda: None) else ["bare"]


def stand_in(kind: str, reference: Any, make: Callable[[], Any]) -> Any:
    return {"function": lambda _, make: _returning(make), "bare": bare, "built": built}[kind](reference, make)


def made_stand_in(kind: str, made: Any, make: Callable[[], Any]) -> Any:
    """The stand-in for a check that is given what its cell's code made of the exercise (Chapter 7's trained model),
    not the exercise: a bare instance, or a copy of what the cell made of the reference (trained, its parts there)
    whose methods and properties give the value."""
    if kind == "bare":
        return bare(type(made), make)()
    found = copy.copy(made)
    found.__class__ = built(type(made), make)
    return found


REFERENCES = {chapter.module: importlib.import_module(chapter.reference) for chapter in CHAPTERS}
ASSIGNMENT_OF = {chapter.module: chapter.assignment for chapter in CHAPTERS}
#: assignment -> {check id: the object its test cell gives it}, each notebook's read (and its cells run) once
checked = functools.cache(checked_objects)
OWNERS = checks.index()  # check id -> autograder.checks.<module>


def _registered() -> list[tuple[str, str, str]]:
    """(check id, exercise, stand-in kind) for every registered check, chapter by chapter."""
    found = []
    for chapter in CHAPTERS:
        exercises = chapter.exercises()
        for check_id, module in OWNERS.items():
            if module == f"autograder.checks.{chapter.module}":
                exercise = exercise_of(check_id, exercises)
                found += [(check_id, exercise, kind)
                          for kind in stand_ins(getattr(REFERENCES[chapter.module], exercise))]
    return found


CHECKS = _registered()
#: the exceptions of Python and torch (LookupError aside: they raise only its subclasses IndexError and KeyError,
#: and a probe raises it on purpose, with a message of its own)
BUILTIN_ERRORS = {name for name, obj in vars(builtins).items() if isinstance(obj, type)
                  and issubclass(obj, BaseException)} - {"LookupError"}


def verdict(check_id: str, exercise: str, kind: str, value: str) -> Mistake | None:
    """The Mistake that the check ``check_id`` gives the stand-in of ``kind`` returning ``value``, as the grader
    judges it (probe, encode, JSON, judge_recorded); None when it passes. Anything else propagates."""
    module = OWNERS[check_id].rsplit(".", 1)[1]
    reference, given = getattr(REFERENCES[module], exercise), checked(ASSIGNMENT_OF[module])[check_id]
    student = (stand_in(kind, reference, VALUES[value][0]) if given is reference
               else made_stand_in(kind, given, VALUES[value][0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        observations = checks.get(check_id)(student)
        encoded = json.loads(json.dumps(checks.encode(observations), allow_nan=False))
    try:
        judges.judge_recorded(check_id, encoded)
    except Mistake as failure:
        return failure
    return None


def problem(failure: Mistake | None, kind: str, value: str) -> str | None:
    """What is wrong with the verdict ``failure`` on a stand-in of ``kind`` returning ``value``; None if nothing.

    The verdict must be a Mistake the judge raised itself (not the safety net of judge_recorded), and must not
    blame the answer for an exception of Python or torch: a stand-in raises nothing, so such an exception was
    raised by the probe's own code on what the answer gave. A function's verdict, or a built class's, says
    what came back or names a mistake; a bare class fails (its parts are missing) before anything comes back.
    A built class may pass a check of its parts, which its outputs do not concern.
    """
    if failure is None:
        return None if kind == "built" else "it passed"
    if isinstance(failure, JudgeCrashed):
        return f"the judge crashed: {failure}"
    blamed = BUILTIN_ERRORS.intersection(re.findall(r"raised (\w+)", failure.message))
    if blamed:
        return f"the probe's own code raised {', '.join(sorted(blamed))} on what came back: {failure}"
    words = _tells(value)
    if kind != "bare" and not failure.name and not any(word in failure.message for word in words) \
            and not _names_an_entry(failure.message, value):
        return f"the message neither names a mistake nor says what came back ({' or '.join(words)}): {failure}"
    return None


def _names_an_entry(message: str, value: str) -> bool:
    """Whether ``message`` compares an entry of what came back with the expected one ("at index (0, 1) got 1,
    expected 1.25452"), as a judge does for a result of the right shape: the entry is one of the value's numbers."""
    compared = re.search(r"at index \([\d, ]*\) got ([-+\w.]+), expected", message)
    if compared is None:
        return False
    try:
        got, numbers = float(compared.group(1)), VALUES[value][0]().detach().double().flatten().tolist()
    except Exception:  # not a number, or a value without numbers
        return False
    return any(abs(got - n) <= 1e-3 * max(1.0, abs(n)) for n in numbers)


def _tells(value: str) -> tuple[str, ...]:
    """The words that say what came back: the value's own, and its numbers as a list and as a concept check's
    answer (plain data)."""
    make, words = VALUES[value]
    found = list(words)
    for render in (lambda x: repr(answer_value(x)), lambda x: repr(x.tolist())):
        try:
            found.append(render(make()))
        except Exception:  # not a tensor, or one without numbers to read
            pass
    return tuple(found)


ASSIGNMENT_OF = {chapter.module: chapter.assignment for chapter in CHAPTERS}


def test_every_chapter_has_checks_to_fuzz() -> None:
    modules = {OWNERS[check_id].rsplit(".", 1)[1] for check_id, _, _ in CHECKS}
    assert modules == {chapter.module for chapter in CHAPTERS}
    assert set(checks.ids()) == {check_id for check_id, _, _ in CHECKS} == set(judges.ids())


@pytest.mark.parametrize(("check_id", "exercise", "kind"), CHECKS,
                         ids=[f"{ASSIGNMENT_OF[OWNERS[check_id].rsplit('.', 1)[1]]}/{check_id}-{kind}"
                              for check_id, _, kind in CHECKS])  # -k 05_positional_encoding picks a chapter
def test_odd_return_values_fail_with_a_message(check_id: str, exercise: str, kind: str) -> None:
    """Every value of VALUES, on one check: the failure lists each value that went wrong, and how."""
    found = {}
    for value in VALUES:
        try:
            problem_found = problem(verdict(check_id, exercise, kind, value), kind, value)
        except Exception as err:  # the probe, encode or the judge raised: the grader would flag or stop
            problem_found = f"{type(err).__name__}: {str(err)[:300]}"
        if problem_found is not None:
            found[value] = problem_found
    assert not found, f"{check_id}, a {kind} stand-in returning:\n" + "\n".join(
        f"  {value}: {text}" for value, text in found.items())


def _honest_record(check: str) -> dict:
    from solutions.self_attention import softmax

    return json.loads(json.dumps(checks.encode(checks.get(check)(softmax))))


FORGERIES: dict[str, Callable[[dict], dict]] = {
    "a key missing": lambda honest: {},
    "a key too many": lambda honest: {**honest, "extra": 1},
    "a case missing": lambda honest: {"outs": honest["outs"][:-1]},
    "a case too many": lambda honest: {"outs": [*honest["outs"], honest["outs"][0]]},
    "an unknown dtype": lambda honest: {"outs": [{"__tensor__": "complex128", "shape": [1], "data": [0.0]}]
                                                 * len(honest["outs"])},
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_record_that_no_probe_writes_is_a_mismatch(forgery: str) -> None:
    """RecordMismatch (the grader flags it) for a record without a key its judge reads, with a key no judge reads,
    with another number of cases than the check has, or that cannot be decoded."""
    honest = _honest_record("softmax_sums_to_one")
    judges.judge_recorded("softmax_sums_to_one", honest)  # the reference's own record passes
    with pytest.raises(judges.RecordMismatch):
        judges.judge_recorded("softmax_sums_to_one", FORGERIES[forgery](honest))


def test_a_judge_that_crashes_fails_the_answer_and_says_so(monkeypatch) -> None:
    """A judge that crashes on a record that fits its cases fails the answer (a Mistake: not flagged), with a
    message that says what it could not compare."""
    monkeypatch.setitem(judges._JUDGES, "made_up_crash", lambda obs: obs["outs"][0].shape)
    with pytest.raises(JudgeCrashed) as crashed:
        judges.judge_recorded("made_up_crash", {"outs": [None]})
    assert isinstance(crashed.value, Mistake) and crashed.value.name is None
    assert str(crashed.value).startswith("the hidden check could not compare what your code returned"), crashed.value
    assert "AttributeError" in str(crashed.value) and "{'outs': [None]}" in str(crashed.value), crashed.value
