"""Deadlines without grading anyone (autograder/deadlines.py): how times, extensions and the late plugin are read,
and what is refused. ``test_assignments.py::test_nbgrader_grades_a_small_class`` grades a class with a due date
through stock ``nbgrader autograde`` and the class grader and finds the same lateness and penalties."""

from __future__ import annotations

import zipfile
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest

from autograder import deadlines, grading
from autograder.__main__ import main
from autograder.grading import CellResult, Result


def test_times_are_read_as_nbgrader_reads_them() -> None:
    from nbgrader.utils import parse_utc

    for text in ("2026-12-01 17:00:00 UTC", "2026-12-01 18:30:00 Europe/Berlin", "2026-12-01T17:00:00+01:00",
                 "2026-12-01 17:00"):
        assert deadlines.parse_time(text, "x") == parse_utc(text)
    assert deadlines.parse_time("2026-12-01 18:30:00 Europe/Berlin", "x") == datetime(2026, 12, 1, 17, 30)
    with pytest.raises(ValueError, match="--due: cannot read 'next friday' as a time"):
        deadlines.parse_time("next friday", "--due")


def test_a_zip_entry_time_is_read_in_the_zone_given() -> None:
    assert deadlines.zip_time((2026, 7, 1, 12, 0, 0), "UTC") == datetime(2026, 7, 1, 12)
    assert deadlines.zip_time((2026, 7, 1, 12, 0, 0), "Europe/Berlin") == datetime(2026, 7, 1, 10)  # summer: +2
    with pytest.raises(ValueError, match="'Mars/Olympus' is not a time zone"):
        deadlines.check_zone("Mars/Olympus")


@pytest.mark.parametrize(("text", "says"), [
    ("id,timestamp\nkim,2026-12-01\n", "needs the columns student_id and timestamp (its header: id, timestamp)"),
    ("student_id,timestamp\nkim,soon\n", "line 2: cannot read 'soon' as a time"),
    ("student_id,timestamp\nkim,2026-12-01\nkim,2026-12-02\n", "names student 'kim' twice (line 3)"),
    ("student_id,timestamp\n,2026-12-01\n", "line 2: no student_id"),
])
def test_a_timestamps_file_that_cannot_be_read_is_refused_saying_why(tmp_path, text, says) -> None:
    path = tmp_path / "times.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=__import__("re").escape(says)):
        deadlines.read_timestamps(path)


def test_extensions_from_the_command_line_win_over_the_file(tmp_path) -> None:
    path = tmp_path / "extensions.csv"
    path.write_text("student_id,hours\nkim,48\nlee,2.5\n")
    assert deadlines.read_extensions(["kim=24"], path) == {"kim": timedelta(hours=24), "lee": timedelta(hours=2.5)}
    for given, says in ((["kim"], "write it as STUDENT=HOURS"), (["kim=two"], "'two' is not a number of hours"),
                        (["kim=-1"], "a positive number of hours"), (["=3"], "write it as STUDENT=HOURS")):
        with pytest.raises(ValueError, match=says):
            deadlines.read_extensions(given, None)


class _Plugin:
    """A late plugin that answers what it is told to, as an instructor's own may."""

    def __init__(self, answer) -> None:
        self.plugin_inst = SimpleNamespace(late_submission_penalty=lambda student, score, late: answer)


@pytest.mark.parametrize(("answer", "score", "late", "penalty"), [
    (3.0, 10.0, 60.0, 3.0), (30.0, 10.0, 60.0, 10.0), (-2.0, 10.0, 60.0, 0.0), (None, 10.0, 60.0, 0.0),
    (3.0, 10.0, 0.0, 0.0)])
def test_the_penalty_is_bounded_as_nbgrader_bounds_it(answer, score, late, penalty) -> None:
    """Never below 0 nor above the notebook's score; none on time, whatever the plugin would say."""
    assert deadlines.penalty_of(_Plugin(answer), "kim", score, late) == penalty


def test_a_plugin_that_cannot_load_is_named(tmp_path, monkeypatch) -> None:
    (tmp_path / "nbgrader_config.py").write_text('c = get_config()\nc.AssignLatePenalties.plugin_class = '
                                                 '"no_such_module.Penalty"\n')
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="no_such_module.Penalty"):
        deadlines.load_plugin(tmp_path)


def test_nbgraders_own_plugin_zero_takes_the_whole_score(tmp_path, monkeypatch) -> None:
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.LateSubmissionPlugin.penalty_method = 'zero'\n")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "nowhere"))
    result = Result("kim", "a1", "ok", "", {"t": CellResult("t", 4.0, 5.0)})
    due = datetime(2026, 12, 1, 17)
    late = deadlines.assess([result], {"kim": (due + timedelta(seconds=90), deadlines.FROM_FILE)}, due, {}, None,
                            tmp_path)["kim"]
    assert (late.seconds_late, late.penalty) == (90.0, 4.0)
    assert late.describe().startswith("submitted 2026-12-01 17:01:30 UTC (timestamp.txt), 1 min after the due date")
    on_time = deadlines.assess([result], {"kim": (due, deadlines.FROM_FILE)}, due, {}, None, tmp_path)["kim"]
    assert (on_time.seconds_late, on_time.penalty, on_time.describe()) == (0.0, 0.0, "")


def test_each_submission_gets_its_time_from_timestamp_txt_or_its_zip_entry(tmp_path) -> None:
    name = "self_attention.ipynb"
    folder = tmp_path / "submitted"
    for student, stamp in (("kim", "2026-12-01 16:00:00 UTC"), ("lee", "not a time"), ("max", None)):
        (folder / student / "01_self_attention").mkdir(parents=True)
        (folder / student / "01_self_attention" / name).write_text("{}")
        if stamp:
            (folder / student / "01_self_attention" / "timestamp.txt").write_text(stamp)
    found = {s.student_id: s for s in grading.collect(folder, "01_self_attention", name, tmp_path / "scratch")}
    assert (found["kim"].submitted_at, found["kim"].time_source) == (datetime(2026, 12, 1, 16), "timestamp.txt")
    assert found["lee"].submitted_at is None and "cannot read 'not a time'" in found["lee"].note
    assert found["max"].submitted_at is None and found["max"].notebook is not None  # graded, just without a time
    archive = tmp_path / "lms.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr(zipfile.ZipInfo(f"kim_123_456_{name}", (2026, 12, 1, 18, 5, 0)), "{}")
    found = grading.collect(archive, "01_self_attention", name, tmp_path / "scratch2", "Europe/Berlin")
    assert [(s.student_id, s.submitted_at, s.time_source) for s in found] == [
        ("kim", datetime(2026, 12, 1, 17, 5), "zip entry")]


@pytest.mark.parametrize(("args", "says"), [
    (["--due", "someday"], "--due: cannot read 'someday' as a time"),
    (["--extension", "kim"], "write it as STUDENT=HOURS"),
    (["--zip-timezone", "Nowhere/Else"], "is not a time zone"),
    (["--timestamps", "absent.csv"], "--timestamps: cannot read absent.csv"),
])
def test_the_grade_command_refuses_bad_deadlines_before_grading(tmp_path, capsys, args, says) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["grade", "01_self_attention", str(tmp_path), "--out", str(tmp_path / "out"), *args])
    assert stopped.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_broken_late_plugin_stops_the_grade_command_before_grading(tmp_path, capsys, monkeypatch) -> None:
    """Even without --due: the due date may be the gradebook's, known only after the class is graded."""
    config = tmp_path / "jupyter"
    config.mkdir()
    (config / "nbgrader_config.py").write_text('c = get_config()\nc.AssignLatePenalties.plugin_class = '
                                               '"no_such_module.Penalty"\n')
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config))
    with pytest.raises(SystemExit) as stopped:
        main(["grade", "01_self_attention", str(tmp_path), "--out", str(tmp_path / "out")])
    assert stopped.value.code == 2 and "no_such_module.Penalty" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
