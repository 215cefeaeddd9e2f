"""One declaration per mistake: the named mistakes of a chapter are written once, in ``attention_course/mistakes/``.

A chapter whose module has a file there (``attention_course/mistakes/<module>.py``) is *declared*: its visible
checks and its hidden judges name every mistake from those declarations, and nowhere else. These tests hold the
declared chapters to that:

- every value a declaration gives is wrong on some case of the check that uses it (a declaration that gives the
  right answer everywhere would never name anything, and one that never applies is dead);
- every declaration is used by the chapter's judges, and every mistake the chapter's catalogue expects is
  declared (or is one of the names every exercise shares, such as ``dtype not kept``);
- the judge module and the visible checks of the exercise notebook write no mistake's name or message of their
  own: no ``Suspect(...)``, no ``Mistake(message, "name")`` or ``fail(message, "name")`` with a literal name, no
  ``suspects={...}`` written out in a test cell.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import nbformat
import pytest
import torch
from class_grading import catalogue_module
from notebook_grading import graded_cells, nbgrader_meta, source_notebook

from attention_course import testing
from attention_course.testing import KnownMistake, Mistakes, OneOf
from autograder.chapters import CHAPTERS
from autograder.judges import core as judges

ROOT = Path(__file__).resolve().parents[1]
DECLARED = [c for c in CHAPTERS if (ROOT / "attention_course" / "mistakes" / f"{c.module}.py").exists()]
SHARED = {value for name, value in vars(testing).items() if name.isupper() and isinstance(value, str)}


def test_at_least_one_chapter_is_declared() -> None:
    assert DECLARED, "no chapter has a module in attention_course/mistakes/: the declared design is used nowhere"


#: The chapters converted so far (issue 34 converts them all): none may fall back to writing its mistakes twice.
CONVERTED = {"01_self_attention", "02_causal_masking", "03_cross_attention", "04_multi_head",
             "05_positional_encoding", "06_transformer", "07_gpt", "08_trained_attention", "09_flash_attention"}


def test_the_converted_chapters_stay_declared() -> None:
    missing = sorted(CONVERTED - {c.assignment for c in DECLARED})
    assert not missing, (f"{missing} declared their mistakes in attention_course/mistakes/ and no longer do: "
                         f"restore attention_course/mistakes/<module>.py and name the mistakes from it")


def _declarations(chapter) -> dict[str, KnownMistake | Mistakes]:
    module = importlib.import_module(f"attention_course.mistakes.{chapter.module}")
    return {name: value for name, value in vars(module).items()
            if not name.startswith("_") and isinstance(value, (KnownMistake, Mistakes))}


def _compares(chapter) -> list[judges.Compare]:
    failed = judges.load_judges()
    assert not failed, f"judge modules that do not load: {failed}"
    ids = {nbgrader_meta(c)["grade_id"] for c in graded_cells(nbformat.read(source_notebook(chapter.assignment), 4))}
    return [j for check_id, j in judges._JUDGES.items() if check_id in ids and isinstance(j, judges.Compare)]


def _same(a: object, b: object) -> bool:
    """Equal values: tensors within 1e-6 (NaN matching NaN), tuples item by item (a result in parts), else ``==``."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.allclose(a.detach().double(), b.detach().double(), atol=1e-6,
                                                     equal_nan=True)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return a == b


@pytest.mark.parametrize("chapter", DECLARED, ids=lambda c: c.assignment)
def test_every_declared_value_is_wrong_on_a_case_of_its_check(chapter) -> None:
    groups: dict[int, tuple[Mistakes, list[bool], list[str]]] = {}  # one group may serve several checks
    for compare in _compares(chapter):
        mistakes = getattr(compare.suspects, "mistakes", None)
        if mistakes is None:
            continue
        right, turn = compare.suspects.right, compare.suspects.case
        _, wrong_somewhere, checks = groups.setdefault(id(mistakes), (mistakes, [False] * len(mistakes), []))
        checks.append(compare.check.id)
        for case in compare.check.cases:
            expected = compare.pick(compare.reference(*case))
            args = turn(*case) if turn is not None else case
            for i, m in enumerate(mistakes):
                if not m.applies(*args):
                    continue
                try:
                    given = compare.pick(m.gives(right, *args))
                except Exception:  # cannot run on this case: not this case's mistake
                    continue
                wrong_somewhere[i] = wrong_somewhere[i] or not _same(given, expected)
    assert groups, f"{chapter.assignment}: no check of the chapter names its mistakes from attention_course.mistakes"
    for mistakes, wrong_somewhere, checks in groups.values():
        dead = [m.name for m, wrong in zip(mistakes, wrong_somewhere, strict=True) if m.wrong is not None and not wrong]
        assert not dead, (f"{', '.join(checks)}: the declared mistakes {dead} give the right answer (or cannot run) "
                          f"on every case of the checks — give a check a case that tells them apart, or remove them")


@pytest.mark.parametrize("chapter", DECLARED, ids=lambda c: c.assignment)
def test_every_declaration_is_used_by_the_judges_and_every_catalogued_mistake_is_declared(chapter) -> None:
    declared = _declarations(chapter)
    judge_source = (ROOT / "autograder" / "judges" / f"{chapter.module}.py").read_text()
    unused = [name for name in declared if not re.search(rf"\bknown\.{name}\b", judge_source)]
    assert not unused, (f"attention_course/mistakes/{chapter.module}.py declares {unused}, which "
                        f"autograder/judges/{chapter.module}.py never uses (as `known.NAME`): name a mistake in the "
                        f"judge from its declaration, or remove the declaration")
    names = {m.name for value in declared.values() for m in (value if isinstance(value, Mistakes) else [value])}
    expected = {entry.name for entry in catalogue_module(chapter.assignment).WRONG} | {
        also for entry in catalogue_module(chapter.assignment).WRONG for also in entry.also}
    missing = sorted(expected - names - SHARED - {""})
    assert not missing, (f"the catalogue of {chapter.assignment} expects the mistakes {missing}, which "
                         f"attention_course/mistakes/{chapter.module}.py does not declare: declare each once there "
                         f"(KnownMistake(name, message, wrong)) and name it from the declaration in both checks")


def _literal_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


@pytest.mark.parametrize("chapter", DECLARED, ids=lambda c: c.assignment)
def test_the_judges_write_no_mistake_of_their_own(chapter) -> None:
    path = ROOT / "autograder" / "judges" / f"{chapter.module}.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if called == "Suspect" or called == "Mistake" and len(node.args) > 1 and _literal_name(node.args[1]):
            found.append(f"line {node.lineno}: {called}(...)")
    assert not found, (f"{path.relative_to(ROOT)} writes mistakes of its own at {found}: declare each in "
                       f"attention_course/mistakes/{chapter.module}.py and use `declared(known.GROUP, reference)` for "
                       f"suspects, `mistake(known.NAME, what, **fields)` for a property")


@pytest.mark.parametrize("chapter", DECLARED, ids=lambda c: c.assignment)
def test_the_visible_checks_write_no_mistake_of_their_own(chapter) -> None:
    found = []
    for cell in graded_cells(nbformat.read(source_notebook(chapter.assignment), 4)):
        visible = cell.source.split("### END HIDDEN TESTS\n")[-1]
        for node in ast.walk(ast.parse(visible)):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            literal = called == "fail" and len(node.args) > 1 and _literal_name(node.args[1])
            written = any(k.arg == "suspects" and isinstance(k.value, ast.Dict) for k in node.keywords)
            crashes = called == "expect_runs" and any(
                isinstance(arg, ast.Dict) and any(_literal_name(v) for v in arg.values) for arg in node.args)
            if literal or written or crashes:
                found.append(f"{nbgrader_meta(cell)['grade_id']} line {node.lineno}: {called}(...)")
    assert not found, (f"the visible checks of {chapter.assignment} write mistakes of their own at {found}: name them "
                       f"from attention_course.mistakes.{chapter.module} (`known.GROUP.suspects(right, *case)`, "
                       f"`known.NAME.fail(what, **fields)`, `known.NAME.said()` for expect_runs)")


# ---------------------------------------------------------------- the declarations' own behaviour

def test_a_name_that_would_not_read_back_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        KnownMistake("(bad)", "message")


def test_suspects_skip_mistakes_that_do_not_apply_and_merge_one_mistakes_ways() -> None:
    group = Mistakes([
        KnownMistake("doubled", "it doubles", lambda right, x: 2 * right(x)),
        KnownMistake("doubled", "it doubles", lambda right, x: right(x) + right(x) + 1),
        KnownMistake("negated", "it negates", lambda right, x: -right(x), when=lambda x: bool(x.any())),
    ])
    suspects = group.suspects(torch.sin, torch.zeros(3))
    assert list(suspects) == ["it doubles (doubled)"]
    ways = suspects["it doubles (doubled)"]()
    assert isinstance(ways, OneOf) and len(ways) == 2
    with pytest.raises(testing.CheckFailed, match=r"\(doubled\)$"):
        testing.assert_close(torch.ones(3), torch.zeros(3), "f(x)", suspects=suspects)


def test_a_failed_property_names_the_mistake_it_looks_like() -> None:
    x = torch.arange(4.0)
    broken = KnownMistake("not symmetric", "it is not symmetric about {where}")
    like = Mistakes([KnownMistake("reversed", "it runs backwards", lambda right, x: right(x).flip(0))])
    with pytest.raises(testing.CheckFailed) as failed:
        broken.fail("f(x)", looks_like=[(x.flip(0), like.suspects(lambda t: t, x))], where=0)
    assert failed.value.name == "reversed"
    assert str(failed.value) == ("f(x): it is not symmetric about 0 (not symmetric) It looks like this: it runs "
                                 "backwards (reversed)")
    with pytest.raises(testing.CheckFailed) as plain:
        broken.fail("f(x)", looks_like=[(x + 1, like.suspects(lambda t: t, x))], where=0)
    assert plain.value.name == "not symmetric"


def test_the_judge_and_the_visible_check_say_the_same_words() -> None:
    group = Mistakes([KnownMistake("shifted", lambda x: f"it is off by one at {x.numel()} places",
                                   lambda right, x: right(x) + 1)])
    x = torch.zeros(5)
    (suspect,) = judges.declared(group, torch.cos)(x)
    (visible,) = group.suspects(torch.cos, x)
    assert visible == suspect.text == "it is off by one at 5 places (shifted)"
    assert torch.equal(suspect.produce(), group.suspects(torch.cos, x)[visible]())
    said = judges.mistake(KnownMistake("late", "it came {when} late"), "f(x)", when="a step")
    assert (said.message, said.name) == ("f(x): it came a step late", "late")


@pytest.fixture(scope="module")
def secrets() -> set[str]:
    from autograder.leaks import all_secrets

    return all_secrets()


@pytest.mark.parametrize("chapter", DECLARED, ids=lambda c: c.assignment)
def test_the_declarations_hold_no_line_of_the_reference_or_the_grader(chapter, secrets) -> None:
    """The declarations ship to learners with the helper package: the student repository's leak scan refuses a line
    of the reference, the hidden checks or the judges in them, so a chapter's proof (``make chapter``) scans its own
    module as the bundle will (a declaration once copied a judge's helper, found only by the book's bundle)."""
    from autograder.leaks import scan

    module = ROOT / "attention_course" / "mistakes" / f"{chapter.module}.py"
    leaks = scan([module], secrets)
    assert not leaks, (f"{module.relative_to(ROOT)} holds lines of the reference or the grader, which the student "
                       "bundle refuses: write them another way\n" + "\n".join(leaks[:20]))
