"""A named mistake is a field, not prose: every suspect of the judges carries its name, a judge's Mistake carries
it as ``name``, and the grader, the feedback and the class report read that field, never the message's text.

The text a learner reads is unchanged: the message, then the name in parentheses (``named``), so that a reader
that has only the text (stock ``nbgrader autograde``, a learner's own kernel) still finds it with
``mistake_name``.
"""

from __future__ import annotations

import ast
import io
import json
import pickle
import re
import tokenize
import warnings
from pathlib import Path

import pytest
from notebook_grading import ASSIGNMENTS, checked_objects

from attention_course.testing import CheckFailed, fail, mistake_name, named
from autograder import grading, reports
from autograder.checks import core as checks
from autograder.judges import core as judges

JUDGES = sorted((Path(judges.__file__).parent).glob("*.py"))


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name]


def _literal_end(node: ast.AST) -> str | None:
    """The text a string literal (plain or f-string) ends with, when it ends with text; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[-1], ast.Constant):
        return node.values[-1].value
    return None


# ---------------------------------------------------------------- Suspect

def test_a_suspect_has_a_name_that_its_text_reads_back() -> None:
    suspect = judges.Suspect("it is not scaled", "no scaling", lambda: None)
    assert (suspect.message, suspect.name, suspect.text) == ("it is not scaled", "no scaling",
                                                             "it is not scaled (no scaling)")
    assert mistake_name(suspect.text) == suspect.name
    part = judges.Suspect("m", "a name", lambda: (1, 2)).part(1)
    assert (part.message, part.name, part.produce()) == ("m", "a name", 2)


@pytest.mark.parametrize("name", ["", "   ", None, "2 heads", "(no scaling)", "a (b) c", "ab", "ends in space "])
def test_a_suspect_without_a_readable_name_is_refused(name) -> None:
    """Empty, missing, or a name that ``mistake_name`` would not read back from the suspect's text."""
    with pytest.raises(ValueError):
        judges.Suspect("it is not scaled", name, lambda: None)


def _known_names() -> set[str]:
    """Every mistake name the course uses: the literal names the judges pass, and the catalogue's."""
    from class_grading import catalogue_module

    names = {n.args[1].value for path in JUDGES for name in ("Suspect", "Mistake")
             for n in _calls(ast.parse(path.read_text()), name)
             if len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)}
    for assignment in ASSIGNMENTS:
        names |= {entry.name for entry in catalogue_module(assignment).WRONG}
    return names


def _token_calls(path, name: str) -> int:
    """How many times ``name(`` is written in ``path``'s code, strings and comments left out (Python's tokens)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    return sum(1 for a, b in zip(tokens, tokens[1:], strict=False) if a.type == tokenize.NAME and a.string == name
               and b.string == "(")


def test_every_suspect_in_the_judges_is_given_a_name() -> None:
    """Statically, every ``Suspect(...)`` of every judge module: a message, a name, then what it produces; the
    message does not end with a mistake's name of its own (the name is the field), and a literal name reads
    back. (A message may end with code in parentheses, ``(B, 1, T)``, which ``mistake_name`` alone would take
    for a name.)"""
    known = _known_names()
    problems, count = [], 0
    for path in JUDGES:
        for call in _calls(ast.parse(path.read_text()), "Suspect"):
            count += 1
            where = f"{path.name}:{call.lineno}"
            starred = any(isinstance(a, ast.Starred) for a in call.args)
            if len(call.args) + len(call.keywords) < 3 and not starred:
                problems.append(f"{where}: {ast.unparse(call)[:100]} has no name")
                continue
            end = _literal_end(call.args[0]) if call.args and not starred else None
            if end is not None and mistake_name(end) in known:
                problems.append(f"{where}: the message still ends with a name: ...{end[-60:]!r}")
            name = call.args[1] if len(call.args) > 1 and not starred else None
            if isinstance(name, ast.Constant) and mistake_name(named("x", name.value)) != name.value:
                problems.append(f"{where}: {name.value!r} does not read back as a name")
    # the scan misses none: as many calls as the modules' tokens hold `Suspect` then `(` (most chapters declare their
    # mistakes in attention_course/mistakes/ now, held to the same by test_known_mistakes, so few are left here)
    written = sum(_token_calls(path, "Suspect") for path in JUDGES)
    assert count == written and written > 0, f"the scan found {count} Suspect(...) calls of {written} in the judges"
    assert not problems, "\n".join(problems)


def test_no_judge_writes_a_name_into_its_message() -> None:
    """A Mistake whose message ends with a mistake's name and passes no name of its own would name its mistake
    in prose only: the grader would record none. Nor does a judge build the text with ``named`` itself."""
    known = _known_names()
    assert len(known) > 150, sorted(known)
    problems = []
    for path in JUDGES:
        tree = ast.parse(path.read_text())
        problems += [f"{path.name}:{c.lineno}: named(...) inside Mistake(...): pass the name as Mistake's second "
                     f"argument" for c in _calls(tree, "Mistake") if c.args and isinstance(c.args[0], ast.Call)
                     and getattr(c.args[0].func, "id", "") == "named"]
        for call in _calls(tree, "Mistake"):
            end = _literal_end(call.args[0]) if call.args else None
            if len(call.args) == 1 and not call.keywords and end is not None and mistake_name(end) in known:
                problems.append(f"{path.name}:{call.lineno}: ...{end[-60:]!r} names a mistake in its text only")
    assert not problems, "\n".join(problems)


def _reference_runs() -> list[tuple[str, str, object]]:
    """(assignment, check id, the object it checks) for every hidden check the source notebooks run
    (:func:`notebook_grading.checked_objects`)."""
    return [(assignment, check, obj) for assignment in ASSIGNMENTS
            for check, obj in checked_objects(assignment).items()]


def test_every_judge_builds_named_suspects_on_the_reference(monkeypatch) -> None:
    """Every hidden check judges the reference's own answer, as the grader would (probe, plain JSON, judge):
    it passes, and every suspect the judges build on the way has a name (they are collected as they are
    built)."""
    built: list[judges.Suspect] = []
    post_init = judges.Suspect.__post_init__

    def collect(self: judges.Suspect) -> None:
        post_init(self)
        built.append(self)

    monkeypatch.setattr(judges.Suspect, "__post_init__", collect)
    runs = _reference_runs()
    assert {check for _, check, _ in runs} == set(judges.ids()), "a check that no source notebook runs"
    failed = {}
    for _, check, obj in runs:
        with warnings.catch_warnings():  # as run_check: a library warning of the probed code is no verdict
            warnings.simplefilter("ignore")
            try:
                judges.judge_recorded(check, json.loads(json.dumps(checks.encode(checks.get(check)(obj)))))
            except checks.Mistake as mistake:
                failed[check] = str(mistake)
    assert not failed, failed
    assert len(built) > 1000, f"only {len(built)} suspects were built"
    nameless = {s.message for s in built if not s.name or mistake_name(s.text) != s.name}
    assert not nameless, nameless


# ---------------------------------------------------------------- Mistake and CheckFailed

@pytest.mark.parametrize("kind", [checks.Mistake, CheckFailed])
def test_a_failure_carries_its_name_and_reads_as_before(kind) -> None:
    failure = kind("weights sum to 1 along dim 0", "softmax over the wrong axis")
    assert str(failure) == "weights sum to 1 along dim 0 (softmax over the wrong axis)"
    assert (failure.message, failure.name) == ("weights sum to 1 along dim 0", "softmax over the wrong axis")
    copy = pickle.loads(pickle.dumps(failure))
    assert (str(copy), copy.name) == (str(failure), failure.name)
    plain = kind("out has shape (2, 5), expected (2, 5, 6)")
    assert (str(plain), plain.name) == ("out has shape (2, 5), expected (2, 5, 6)", None)
    assert isinstance(failure, AssertionError)


def test_fail_names_the_mistake_it_is_given_or_the_one_its_text_ends_with() -> None:
    """The visible checks' own names come as a field; a notebook's suspects write theirs into the message."""
    with pytest.raises(CheckFailed) as given:
        fail("x is wrong", "no scaling")
    with pytest.raises(CheckFailed) as in_text:
        fail("x: it is not scaled (no scaling)")
    with pytest.raises(CheckFailed) as none:
        fail("x has shape (2, 5), expected (2, 5, 6)")
    assert [(str(e.value), e.value.name) for e in (given, in_text, none)] == [
        ("x is wrong (no scaling)", "no scaling"), ("x: it is not scaled (no scaling)", "no scaling"),
        ("x has shape (2, 5), expected (2, 5, 6)", None)]


def test_judge_recorded_keeps_the_judges_name() -> None:
    """Judged on the spot (the path nbgrader's kernel takes), a wrong softmax fails with the Mistake's name."""
    import torch

    checks.load_all()
    with pytest.raises(checks.Mistake) as verdict:
        judges.judge_recorded("softmax_sums_to_one", json.loads(json.dumps(
            checks.encode(checks.get("softmax_sums_to_one")(lambda x, dim=-1: torch.exp(x))))))
    assert verdict.value.name == "missing the division" == mistake_name(str(verdict.value))
    assert str(verdict.value) == named(verdict.value.message, verdict.value.name)


# ---------------------------------------------------------------- the grader, the feedback, the report

def test_the_grader_records_the_name_from_the_field(monkeypatch) -> None:
    """A cell's ``mistake`` is the Mistake's ``name``: not the text's last parentheses, which may be a shape or
    a repr of the learner's, and may differ from the field."""
    record = json.dumps({"check": "t", "observations": {}}).encode()
    for raised, expected in ((checks.Mistake("it looks named (a)", "b"), ("it looks named (a) (b)", "b")),
                             (checks.Mistake("got (None, None)"), ("got (None, None)", None))):
        def judge(check_id: str, encoded: object, raised=raised) -> None:
            raise raised

        monkeypatch.setattr(grading, "judge_recorded", judge)
        message, flag, mistake = grading._verdict("t", [record])
        assert (message, flag, mistake) == (*expected[:1], "", expected[1])
    monkeypatch.setattr(grading, "judge_recorded", lambda check_id, encoded: None)
    assert grading._verdict("t", [record]) == ("", "", None)


def _result(student: str, cells: list[tuple[str, str | None]]) -> grading.Result:
    return grading.Result(student, "01_self_attention", "ok", "", {
        f"t{i}": grading.CellResult(f"t{i}", 0.0 if message else 1.0, 1.0, message, mistake)
        for i, (message, mistake) in enumerate(cells)})


def test_the_feedback_and_the_report_read_the_field(tmp_path) -> None:
    """A message that ends in "(a)" while its field says "b" is counted and shown as "b"; a message that ends
    in what reads as a name, with no name in its field, names nothing."""
    results = [_result("ann", [("weights are wrong (a)", "b"), ("", None)]),
               _result("bob", [("", None), ("again (a)", "b")]),
               _result("cy", [("got (None, None)", None), ("", None)])]
    reports.write_report(results, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    table = page[page.index("<table id='mistakes'>"):]
    table = table[:table.index("</table>")]
    assert re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td></tr>", table) == [("b", "2")], table
    target = reports.write_feedback(results[0], tmp_path / "feedback")
    data = json.loads(target.with_suffix(".json").read_text())
    assert [(c["message"], c["mistake"]) for c in data["cells"]] == [("weights are wrong (a)", "b"), ("", None)]
    assert "<td>b</td><td>weights are wrong (a)</td>" in target.read_text()
    cy = json.loads(reports.write_feedback(results[2], tmp_path / "feedback").with_suffix(".json").read_text())
    assert cy["cells"][0]["mistake"] is None


def test_a_stored_result_keeps_its_names(tmp_path) -> None:
    """The progress store (``--resume``) and the Dask workers carry the field with the rest of the result."""
    from autograder.batch import result_from_json, result_to_json

    result = _result("ann", [("weights are wrong (a)", "b"), ("", None)])
    again = result_from_json(json.loads(json.dumps(result_to_json(result))))
    assert again == result and again.cells["t0"].mistake == "b"
    assert pickle.loads(pickle.dumps(result)) == result
    broken = result_to_json(result)
    broken["cells"]["t0"]["mistake"] = 3
    with pytest.raises(ValueError):
        result_from_json(broken)
