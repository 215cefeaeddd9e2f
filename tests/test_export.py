"""``python -m autograder export``: the gradebook's grades in Canvas's and Moodle's import formats and a plain CSV,
checked against the headers those systems document and against ``nbgrader export`` on the same gradebook."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from autograder import deadlines, export, reports
from autograder.grading import CellResult, Result
from autograder.release import REPO_ROOT, nbgrader_env

#: Canvas's gradebook CSV, as Canvas exports it and reads it back: the five identity columns, then the
#: assignments, each "Name (Canvas id)"; the second row gives each assignment's points ("Points Possible").
CANVAS_HEADER = "Student,ID,SIS User ID,SIS Login ID,Section"
#: Moodle's own fixture for "Import grades from CSV" (grade/tests/fixtures/grade_import.csv):
#: "First name,Last name,Email address,Manual item 1", the user matched through one column ("Map from: Email
#: address"), each other column mapped to a grade item.
MOODLE_USER_COLUMNS = ("First name", "Last name", "Email address")

#: two assignments of a made-up course: their test cells and points
CELLS = {"a1": {"t1": 2.0, "t2": 3.0}, "a2": {"u1": 4.0}}
#: who earned what: student -> assignment -> points per cell (absent: no submission)
EARNED = {"kim": {"a1": {"t1": 2.0, "t2": 3.0}, "a2": {"u1": 0.0}},
          "lee": {"a1": {"t1": 2.0, "t2": 0.0}},
          "max": {"a2": {"u1": 4.0}}}


def _release(assignment: str) -> dict:
    return {"cells": [{"cell_type": "code", "metadata": {"nbgrader": {"grade": True, "grade_id": gid,
                                                                     "points": points}}}
                      for gid, points in CELLS[assignment].items()]}


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('export') / 'gradebook.db'}"
    for assignment in CELLS:
        results = [Result(student, assignment, "ok", "",
                          {gid: CellResult(gid, points, CELLS[assignment][gid]) for gid, points in
                           earned[assignment].items()})
                   for student, earned in EARNED.items() if assignment in earned]
        reports.write_gradebook(results, "notebook.ipynb", _release(assignment), url)
    # lee handed a1 in an hour late and lost 1 of its 2 points to the late penalty: the LMS gets 1
    due = datetime(2026, 12, 1, 17)
    deadlines.record({"lee": deadlines.Lateness(due + timedelta(hours=1), deadlines.FROM_FILE, due, None, 3600.0,
                                                1.0)}, "a1", "notebook", due, {}, url)
    return url


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_canvas_without_a_roster_uses_the_student_id_as_sis_user_id(gradebook) -> None:
    text, said = export.export(export.read_gradebook(gradebook), "canvas")
    rows = _rows(text)
    assert ",".join(rows[0]) == CANVAS_HEADER + ",a1,a2"
    assert rows[1] == ["    Points Possible", "", "", "", "", "5", "4"]
    assert rows[2:] == [["", "", "kim", "", "", "5", "0"], ["", "", "lee", "", "", "1", ""],
                        ["", "", "max", "", "", "", "4"]]
    assert said == ["no submission of a1 (1, an empty cell): max", "no submission of a2 (1, an empty cell): lee"]


def test_canvas_with_a_roster_names_every_student_it_cannot_place(gradebook, tmp_path) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text("\ufeffstudent_id,Student,ID,SIS Login ID,Section\n"  # as a spreadsheet saves it
                      '"kim","Park, Kim",101,kpark,S1\n'
                      "lee,\"Lee, Ann\",102,alee,S1\n"
                      "zoe,\"Ng, Zoe\",103,zng,S2\n", encoding="utf-8")
    text, said = export.export(export.read_gradebook(gradebook, ["a1"]), "canvas", export.read_roster(roster, "canvas"),
                               {"a1": "Attention 1 (4321)"}, missing="zero")
    rows = _rows(text)
    assert ",".join(rows[0]) == CANVAS_HEADER + ",Attention 1 (4321)"
    assert rows[1][-1] == "5"
    assert rows[2:] == [["Park, Kim", "101", "", "kpark", "S1", "5"], ["Lee, Ann", "102", "", "alee", "S1", "1"],
                        ["Ng, Zoe", "103", "", "zng", "S2", "0"]]
    # max was graded (a2 only, not exported here: no a1 submission) and is on no roster line; zoe never submitted
    assert said == ["no submission of a1 (1, 0): zoe"]
    text, said = export.export(export.read_gradebook(gradebook), "canvas", export.read_roster(roster, "canvas"))
    assert said[0] == "left out, graded but not on the roster (1): max"
    assert "max" not in text and "no submission of a2 (2, an empty cell): lee, zoe" in said


def test_moodle_has_the_user_columns_of_its_own_import_fixture(gradebook, tmp_path) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,First name,Last name,Email address\n"
                      "kim,Kim,Park,kim@example.com\nlee,Ann,Lee,ann@example.com\nmax,Max,Roe,max@example.com\n")
    text, _ = export.export(export.read_gradebook(gradebook), "moodle", export.read_roster(roster, "moodle"),
                            {"a2": "Chapter 2"})
    rows = _rows(text)
    assert tuple(rows[0][:3]) == MOODLE_USER_COLUMNS and rows[0][-2:] == ["a1", "Chapter 2"]
    assert rows[0] == ["First name", "Last name", "Email address", "ID number", "Username", "a1", "Chapter 2"]
    assert rows[1] == ["Kim", "Park", "kim@example.com", "", "", "5", "0"]
    text, _ = export.export(export.read_gradebook(gradebook), "moodle")  # no roster: the id under ID number
    assert _rows(text)[2] == ["", "", "", "lee", "", "1", ""]


def test_plain_gives_what_nbgrader_export_gives(gradebook, tmp_path) -> None:
    """The same scores as ``nbgrader export``'s: the points less the late penalty (its raw_score is before it)."""
    text, _ = export.export(export.read_gradebook(gradebook), "plain", missing="zero")
    ours = {(r["student_id"], r["assignment"]): (float(r["score"]), float(r["max_score"]))
            for r in csv.DictReader(io.StringIO(text))}
    run = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--db={gradebook}", "--to",
                          str(tmp_path / "nbgrader.csv")], cwd=tmp_path, env=nbgrader_env(), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    with (tmp_path / "nbgrader.csv").open() as handle:
        rows = list(csv.DictReader(handle))
        theirs = {(r["student_id"], r["assignment"]): (float(r["score"]), float(r["max_score"])) for r in rows}
    assert ours == theirs and len(ours) == 6
    assert ours["lee", "a1"] == (1.0, 5.0)
    assert [(r["raw_score"], r["late_submission_penalty"]) for r in rows if r["student_id"] == "lee" and
            r["assignment"] == "a1"] == [("2.0", "1.0")]


@pytest.mark.parametrize(("call", "says"), [
    (lambda db, tmp: export.read_gradebook(f"sqlite:///{tmp / 'none.db'}"), "no gradebook at"),
    (lambda db, tmp: export.read_gradebook(db, ["a3"]), "no assignment 'a3'; it has: a1, a2"),
    (lambda db, tmp: export.export(export.read_gradebook(db), "blackboard"), "unknown format 'blackboard'"),
    (lambda db, tmp: export.export(export.read_gradebook(db), "plain", missing="nan"), "blank or zero"),
    (lambda db, tmp: export.export(export.read_gradebook(db, ["a1"]), "canvas", columns={"a2": "X"}),
     "not exported: a2"),
    (lambda db, tmp: export.parse_columns(["a1"]), "ASSIGNMENT=HEADER"),
    (lambda db, tmp: export.read_roster(_write(tmp, "id,Student\nkim,Kim\n"), "canvas"), "no student_id column"),
    (lambda db, tmp: export.read_roster(_write(tmp, "student_id,Name\nkim,Kim\n"), "canvas"),
     "none of canvas's columns"),
    (lambda db, tmp: export.read_roster(_write(tmp, "student_id,ID\nkim,1\nkim,2\n"), "canvas"),
     "names student 'kim' twice (line 3)"),
    (lambda db, tmp: export.read_roster(tmp / "absent.csv", "canvas"), "cannot read the roster"),
])
def test_bad_input_is_refused_saying_why(gradebook, tmp_path, call, says) -> None:
    with pytest.raises(export.ExportError, match=rf".*{__import__('re').escape(says)}"):
        call(gradebook, tmp_path)


def _write(folder: Path, text: str) -> Path:
    path = folder / "roster.csv"
    path.write_text(text)
    return path


def test_the_command_writes_the_file_and_refuses_with_exit_status_2(gradebook, tmp_path) -> None:
    out = tmp_path / "canvas.csv"
    command = [sys.executable, "-m", "autograder", "export", "canvas", "--gradebook", gradebook, "--out", str(out),
               "--column", "a2=Chapter 2 (77)"]
    run = subprocess.run(command, cwd=REPO_ROOT, env=nbgrader_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert out.read_text().splitlines()[0] == CANVAS_HEADER + ",a1,Chapter 2 (77)"
    assert f"wrote {out}: 3 rows, 2 assignment(s), canvas format" in run.stderr
    run = subprocess.run([*command[:-2], "--assignment", "a9"], cwd=REPO_ROOT, env=nbgrader_env(),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "no assignment 'a9'" in run.stderr, run.stderr
