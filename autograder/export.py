"""Grades out of nbgrader's gradebook, in the import formats of the common learning-management systems.

    python -m autograder export canvas --out canvas.csv [--roster roster.csv] [--assignment ID ...]
                                       [--column ID=HEADER ...] [--missing blank|zero] [--gradebook URL]

Formats:

``canvas``
    Canvas's gradebook CSV, as Canvas exports it and reads it back: the columns ``Student``, ``ID``,
    ``SIS User ID``, ``SIS Login ID`` and ``Section``, one column per assignment, and a second row
    ``Points Possible`` with each assignment's maximum. Canvas matches a row to a student by ``ID``, ``SIS User ID``
    or ``SIS Login ID``. An assignment's column is ``Name (12345)`` for Canvas's assignment 12345 (``--column``);
    a header without an id makes Canvas create a new assignment.
``moodle``
    Moodle's "Import grades from CSV": the user's columns (``First name``, ``Last name``, ``Email address``,
    ``ID number``, ``Username``, those the roster gives), then one column per grade item. At import the
    instructor maps one user column ("Map from") to the user field it holds ("Map to"), and each grade column
    to its grade item.
``plain``
    ``student_id, assignment, score, max_score``, one row per student and assignment, the student ids of the
    gradebook.

Every score is what the student gets: the gradebook's points less its late-submission penalty (nbgrader's
``late_submission_penalty``, see ``autograder/deadlines.py``), as ``nbgrader export``'s ``score`` column.

The roster (``--roster``, a CSV) maps the gradebook's student ids to the LMS's: a ``student_id`` column, and the
LMS's identity columns named as that LMS names them (the headers above). Without a roster the gradebook's
student id stands in: Canvas's ``SIS User ID``, Moodle's ``ID number``. Nobody is dropped without being named:
students graded but not on the roster, and students on the roster with no submission of an assignment, are
listed on stderr. A student without a submission gets an empty cell (the LMS leaves the grade as it is), or 0
with ``--missing zero``, as ``nbgrader export`` writes.
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path

FORMATS = ("canvas", "moodle", "plain")
#: the LMS's identity columns, as its own files name them, in its order
IDENTITY = {
    "canvas": ("Student", "ID", "SIS User ID", "SIS Login ID", "Section"),
    "moodle": ("First name", "Last name", "Email address", "ID number", "Username"),
}
#: the identity column the gradebook's student id fills when there is no roster
STANDS_IN = {"canvas": "SIS User ID", "moodle": "ID number"}
CANVAS_POINTS_ROW = "    Points Possible"  # Canvas writes it indented, and reads it back either way


class ExportError(ValueError):
    """Bad input to the export: a missing gradebook, an unknown assignment, a roster without student ids."""


@dataclass
class Grades:
    """What the gradebook holds: assignments in order with their maxima, and each student's scores."""

    assignments: list[str]
    max_scores: dict[str, float]
    students: list[str]
    #: (student_id, assignment) -> score; a pair absent here has no submission
    scores: dict[tuple[str, str], float] = field(default_factory=dict)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # student_id -> (first name, last name)


def read_gradebook(db_url: str, assignments: list[str] | None = None) -> Grades:
    """The scores of ``assignments`` (default: every assignment in the gradebook, by name) from nbgrader's database
    at ``db_url``. A SQLite file that does not exist is refused: opening it would create an empty gradebook."""
    if db_url.startswith("sqlite:///"):
        path = Path(db_url[len("sqlite:///"):])
        if not path.is_file():
            raise ExportError(f"no gradebook at {path}: grade a class first (python -m autograder grade), or pass "
                              "--gradebook URL")
    import warnings

    from nbgrader.api import Gradebook, MissingEntry

    with warnings.catch_warnings(), Gradebook(db_url) as gradebook:
        warnings.simplefilter("ignore")
        known = sorted(a.name for a in gradebook.assignments)
        wanted = assignments or known
        unknown = [a for a in wanted if a not in known]
        if unknown:
            raise ExportError(f"the gradebook has no assignment {', '.join(map(repr, unknown))}; it has: "
                              + (", ".join(known) or "none"))
        grades = Grades(wanted, {}, sorted(s.id for s in gradebook.students))
        for student in gradebook.students:
            grades.names[student.id] = (student.first_name or "", student.last_name or "")
        for assignment in wanted:
            grades.max_scores[assignment] = float(gradebook.find_assignment(assignment).max_score)
            for student in grades.students:
                try:
                    submission = gradebook.find_submission(assignment, student)
                except MissingEntry:
                    continue
                # what the student gets: the points less the late penalty, as nbgrader export's score
                grades.scores[student, assignment] = max(0.0, float(submission.score) - float(
                    submission.late_submission_penalty or 0.0))
    return grades


def read_roster(path: Path, lms: str) -> dict[str, dict[str, str]]:
    """student_id -> {identity column: value} from the roster CSV: a ``student_id`` column and, for ``lms``, its
    identity columns. Refuses a roster without ``student_id``, with none of the LMS's columns, or that names a
    student twice."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark is not part of a header
    except OSError as err:
        raise ExportError(f"cannot read the roster {path}: {err.strerror or err}") from err
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    if "student_id" not in header:
        raise ExportError(f"the roster {path} has no student_id column (its header: {', '.join(header) or 'empty'})")
    columns = [c for c in IDENTITY.get(lms, ()) if c in header]
    if lms in IDENTITY and not columns:
        raise ExportError(f"the roster {path} has none of {lms}'s columns ({', '.join(IDENTITY[lms])}): it cannot "
                          f"say who each student is in {lms}")
    roster: dict[str, dict[str, str]] = {}
    for line, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        student = row["student_id"]
        if not student:
            raise ExportError(f"the roster {path}, line {line}: no student_id")
        if student in roster:
            raise ExportError(f"the roster {path} names student {student!r} twice (line {line})")
        roster[student] = {c: row[c] for c in columns}
    return roster


def _score(grades: Grades, student: str, assignment: str, missing: str) -> str:
    score = grades.scores.get((student, assignment))
    if score is None:
        return "0" if missing == "zero" else ""
    return f"{score:.10g}"


def export(grades: Grades, lms: str, roster: dict[str, dict[str, str]] | None = None,
           columns: dict[str, str] | None = None, missing: str = "blank") -> tuple[str, list[str]]:
    """The CSV text of ``grades`` in ``lms``'s format, and the lines to tell the instructor (who is left out and
    why, who has no submission)."""
    if lms not in FORMATS:
        raise ExportError(f"unknown format {lms!r}: one of {', '.join(FORMATS)}")
    if missing not in ("blank", "zero"):
        raise ExportError(f"--missing is blank or zero, not {missing!r}")
    columns = columns or {}
    stray = sorted(set(columns) - set(grades.assignments))
    if stray:
        raise ExportError(f"--column names an assignment that is not exported: {', '.join(stray)}")
    said = []
    graded = [s for s in grades.students if any((s, a) in grades.scores for a in grades.assignments)]
    if roster is None:
        rows = {s: {} for s in graded}
    else:
        left_out = [s for s in graded if s not in roster]
        if left_out:
            said.append(f"left out, graded but not on the roster ({len(left_out)}): {', '.join(left_out)}")
        rows = roster
    for assignment in grades.assignments:
        absent = [s for s in rows if (s, assignment) not in grades.scores]
        if absent:
            said.append(f"no submission of {assignment} ({len(absent)}, "
                        f"{'0' if missing == 'zero' else 'an empty cell'}): {', '.join(absent)}")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    if lms == "plain":
        writer.writerow(["student_id", "assignment", "score", "max_score"])
        for student in rows:
            for assignment in grades.assignments:
                writer.writerow([student, assignment, _score(grades, student, assignment, missing),
                                 f"{grades.max_scores[assignment]:.10g}"])
        return out.getvalue(), said
    identity = IDENTITY[lms]
    writer.writerow([*identity, *(columns.get(a, a) for a in grades.assignments)])
    if lms == "canvas":
        writer.writerow([CANVAS_POINTS_ROW, *[""] * (len(identity) - 1),
                         *(f"{grades.max_scores[a]:.10g}" for a in grades.assignments)])
    for student, known in rows.items():
        values = dict(known)
        if roster is None:
            values[STANDS_IN[lms]] = student
            first, last = grades.names.get(student, ("", ""))
            if lms == "canvas" and (first or last):
                values["Student"] = f"{last}, {first}".strip(", ")
            elif lms == "moodle":
                values.update({"First name": first, "Last name": last})
        writer.writerow([*(values.get(c, "") for c in identity),
                         *(_score(grades, student, a, missing) for a in grades.assignments)])
    return out.getvalue(), said


def parse_columns(pairs: list[str]) -> dict[str, str]:
    """``ID=HEADER`` pairs (``--column``) as {assignment id: header}."""
    columns = {}
    for pair in pairs:
        assignment, sep, header = pair.partition("=")
        if not sep or not assignment.strip() or not header.strip():
            raise ExportError(f"--column takes ASSIGNMENT=HEADER, e.g. '01_self_attention=Self-attention (12345)', "
                              f"not {pair!r}")
        columns[assignment.strip()] = header.strip()
    return columns


def main(lms: str, out: Path | None, db_url: str, roster: Path | None, assignments: list[str] | None,
         columns: list[str], missing: str) -> int:
    grades = read_gradebook(db_url, assignments)
    text, said = export(grades, lms, read_roster(roster, lms) if roster else None, parse_columns(columns),
                        missing)
    for line in said:
        print(line, file=sys.stderr)
    if out is None:
        sys.stdout.write(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        rows = text.count("\n") - 1 - (lms == "canvas")
        print(f"wrote {out}: {rows} rows, {len(grades.assignments)} assignment(s), {lms} format", file=sys.stderr)
    return 0
