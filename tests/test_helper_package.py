"""The helper package gives no graded answer away, whatever its code looks like.

``attention_course`` ships to learners (the student repository, Colab's set-up cell), so none of its public
functions and classes may pass a graded exercise. The leak scan (``autograder/leaks.py``) only finds copied
lines; this test finds rewritten answers by their behaviour. For every exercise of every chapter (the
``grade_id`` of each solution cell of ``autograder/source/*/*.ipynb``) and every public function or class
defined in a module of ``attention_course`` (its subpackages included) whose signature can take the reference's
arguments, it grades the callable in-process as that exercise, through the exercise's own test cells, hidden
checks included (:func:`notebook_grading.grade_in_process`). Each must fail at least one of them.

The controls: the references themselves pass, and a correct answer planted in the package is caught.

Left out: the command lines' ``main(argv)`` (it parses ``sys.argv`` when called without arguments and runs a
training run or a benchmark, and it returns an exit status, never an exercise's answer).

A function called with another exercise's arguments can ask for a huge tensor (``data.randn(*shape)`` given a
concept check's model sizes asks for 4 billion numbers): while a candidate function runs, a tensor of more than
:data:`LARGEST` elements is refused with a ``MemoryError`` before it is allocated, as the grading sandbox's
memory limit would stop it. A candidate stopped so has not passed.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import pkgutil
from collections.abc import Iterator
from typing import Any

import matplotlib

matplotlib.use("Agg")  # some candidates draw

import pytest  # noqa: E402
import torch  # noqa: E402
from notebook_grading import ASSIGNMENTS, CellResult, exercise_names, grade_in_process, reference_objects  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import attention_course  # noqa: E402
import attention_course.models  # noqa: E402

#: Public names that are command-line entry points, not functions of tensors (see the module's docstring).
ENTRY_POINTS = {"main"}


def public_callables() -> dict[str, Any]:
    """``module.name`` -> every public function and class defined in a module of attention_course, once each, named
    after the module that defines it (or, for one put there from elsewhere, the first module that holds it)."""
    modules = [importlib.import_module(info.name)  # subpackages too: attention_course.mistakes.positional, ...
               for info in sorted(pkgutil.walk_packages(attention_course.__path__, "attention_course."),
                                  key=lambda m: m.name)]
    home = {module.__name__ for module in modules}
    found: dict[int, str] = {}
    objects: dict[int, Any] = {}
    for module in modules:
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or name in ENTRY_POINTS:
                continue
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if not getattr(obj, "__module__", "").startswith("attention_course"):
                continue  # imported from elsewhere (torch.Tensor, dataclasses.replace, ...)
            if id(obj) not in found or module.__name__ == obj.__module__:
                found[id(obj)], objects[id(obj)] = f"{module.__name__}.{name}", obj
    assert all(found[key].rsplit(".", 1)[0] == obj.__module__ for key, obj in objects.items() if obj.__module__ in home)
    return {found[key]: objects[key] for key in sorted(found, key=found.get)}


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def can_take_the_arguments_of(candidate: Any, reference: Any) -> bool:
    """Whether ``candidate`` binds dummy arguments as the reference is called: its positional parameters (as
    many as it requires, up to all of them, two more if it takes ``*args``), or its required parameters by name."""
    wanted, offered = _signature(reference), _signature(candidate)
    if wanted is None or offered is None:
        return True  # cannot tell: grade it
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in wanted.parameters.values() if p.kind in kinds]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    extra = 2 if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in wanted.parameters.values()) else 0
    attempts = [((None,) * n, {}) for n in range(len(required), len(positional) + extra + 1)]
    attempts.append(((), {p.name: None for p in required}))
    for args, kwargs in attempts:
        try:
            offered.bind(*args, **kwargs)
        except TypeError:
            continue
        return True
    return False


#: The most elements a tensor made while a candidate function runs may have (2^27 float32 numbers: 512 MiB).
LARGEST = 2**27


class _RefuseHugeTensors(TorchDispatchMode):
    """Refuse, before allocating it, a tensor of more than :data:`LARGEST` elements made from a size
    (``torch.randn(*size)``, ``torch.zeros``, ``torch.empty``, ``torch.full``...)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        arguments = func._schema.arguments
        if args and arguments and arguments[0].name == "size":
            elements = math.prod(int(n) for n in args[0])
            if elements > LARGEST:
                raise MemoryError(f"{func} of {elements:,} elements refused (more than {LARGEST:,})")
        return func(*args, **(kwargs or {}))


def within_memory(candidate: Any) -> Any:
    """``candidate`` as it is graded: a function runs under :class:`_RefuseHugeTensors`; a class is left as it is."""
    if inspect.isclass(candidate):
        return candidate

    @functools.wraps(candidate)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        with _RefuseHugeTensors():
            return candidate(*args, **kwargs)

    return guarded


def pairs(assignment: str, exercises: tuple[str, ...] | None = None) -> Iterator[tuple[str, str, Any]]:
    """(exercise, candidate's name, candidate) for every exercise of ``assignment`` (or of ``exercises``) and every
    candidate that fits."""
    references = reference_objects(assignment)
    candidates = public_callables()
    for exercise in exercises or exercise_names(assignment):
        for name, candidate in candidates.items():
            if can_take_the_arguments_of(candidate, references[exercise]):
                yield exercise, name, candidate


def grade(assignment: str,
          exercises: tuple[str, ...] | None = None) -> tuple[list[tuple[str, str, dict[str, CellResult]]], int]:
    """(the pairs that pass every test cell of their exercise, how many pairs were graded). A pair's grading stops
    at the first test cell it fails: one is enough to show that it gives no answer away."""
    passed, graded = [], 0
    for exercise, name, candidate in pairs(assignment, exercises):
        results = grade_in_process(assignment, {exercise: within_memory(candidate)}, exercise=exercise,
                                   until_failure=True)
        assert results, f"{assignment}: exercise {exercise} has no test cell"
        graded += 1
        if all(result.passed for result in results.values()):
            passed.append((exercise, name, results))
    return passed, graded


def test_the_candidates_are_the_packages_own_functions_and_classes() -> None:
    names = public_callables()
    for expected in ("attention_course.models.beam_search", "attention_course.models.TorchTransformer",
                     "attention_course.training.teacher_forcing", "attention_course.training.exact_match",
                     "attention_course.benchmark_attention.manual_attention", "attention_course.testing.assert_close"):
        assert expected in names, f"{expected} is not a candidate: {sorted(names)}"
    assert not [n for n in names if n.rsplit(".", 1)[1].startswith("_") or n.endswith(".main")], names
    assert not [n for n in names if n.endswith((".Tensor", ".replace", ".dataclass"))], "imported names counted"
    assert "attention_course.models.greedy_search" not in names, "the helper package ships greedy decoding"


def test_the_signature_filter_keeps_what_could_be_called_as_the_exercise() -> None:
    from attention_course.models import beam_search
    from attention_course.tasks import dates_task
    from attention_course.training import teacher_forcing
    from solutions.cross_attention import teacher_forcing_pair
    from solutions.masking import combine_masks
    from solutions.transformer import greedy_decode

    assert can_take_the_arguments_of(beam_search, greedy_decode)  # beam_size has a default
    assert can_take_the_arguments_of(teacher_forcing, teacher_forcing_pair)
    assert not can_take_the_arguments_of(teacher_forcing, greedy_decode)  # four parameters, not five
    assert can_take_the_arguments_of(dates_task, combine_masks)  # *masks: no argument, or one, or two


@pytest.mark.parametrize("assignment", sorted(ASSIGNMENTS))
def test_no_public_callable_of_the_helper_package_passes_a_graded_exercise(assignment) -> None:
    passed, graded = grade(assignment)
    exercises = exercise_names(assignment)
    print(f"{assignment}: graded {graded} (exercise, callable) pairs over {len(exercises)} exercises")
    assert graded >= len(exercises), f"{assignment}: the signature filter left almost nothing to grade ({graded})"
    assert not passed, (f"{assignment}: the helper package passes graded exercises: "
                        + "; ".join(f"{name} as {exercise} ({len(results)} test cells)"
                                    for exercise, name, results in passed))


def test_the_references_pass_the_same_grading() -> None:
    """The control: a correct answer passes every test cell of its exercise (Chapter 6's decoding, as here)."""
    reference = reference_objects("06_transformer")["greedy_decode"]
    results = grade_in_process("06_transformer", {"greedy_decode": reference}, exercise="greedy_decode")
    assert results and all(r.passed for r in results.values()), results


def test_a_correct_answer_planted_in_the_package_is_caught(monkeypatch) -> None:
    """A greedy decoder in attention_course.models, as the package once had (``greedy_search``), fails the test."""
    from solutions.transformer import greedy_decode

    def greedy_search(model, src, start_id, end_id, max_len):
        return greedy_decode(model, src, start_id, end_id, max_len)

    greedy_search.__module__ = "attention_course.models"
    monkeypatch.setattr(attention_course.models, "greedy_search", greedy_search, raising=False)
    passed, graded = grade("06_transformer", exercises=("greedy_decode",))  # the candidates for its exercise
    assert graded > 1, graded
    assert [(exercise, name) for exercise, name, _ in passed] == [
        ("greedy_decode", "attention_course.models.greedy_search")], passed


def test_a_candidate_asking_for_a_huge_tensor_is_stopped_before_it_is_made() -> None:
    from attention_course.data import randn

    guarded = within_memory(randn)
    assert guarded(2, 3, seed=1).shape == (2, 3) and torch.equal(guarded(2, 3, seed=1), randn(2, 3, seed=1))
    with pytest.raises(MemoryError, match="4,294,967,296 elements refused"):
        guarded(32, 1, 8, 32, 4096, 128)  # kv_cache_elements' arguments: 16 GiB of float32
