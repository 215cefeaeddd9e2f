"""Deadlines as nbgrader keeps them: when each submission came in, when it was due, and the late penalty.

The times and the due date live where nbgrader keeps them, in the gradebook: the assignment's ``duedate``, each
submission's ``timestamp`` and ``extension``, and each submitted notebook's ``late_submission_penalty``. The
formgrader shows them and ``nbgrader export`` writes them. The penalty is the one the course's late-submission
plugin gives, configured in ``autograder/nbgrader_config.py`` as for ``nbgrader autograde``
(``c.AssignLatePenalties.plugin_class``, and ``c.LateSubmissionPlugin.penalty_method`` for nbgrader's own
plugin), and bounded as nbgrader bounds it: never below 0, never above the notebook's score.

Where a submission's time comes from, the first that applies:

1. ``--timestamps CSV``: a ``student_id`` and a ``timestamp`` column;
2. nbgrader's ``timestamp.txt`` beside the notebook (``nbgrader submit`` and ``collect`` write it);
3. the time of the notebook's entry in an LMS zip, which carries no time zone: read in ``--zip-timezone``
   (default UTC).

Times are read as nbgrader reads them (``nbgrader.utils.parse_utc``): ``2026-12-01 17:00:00 UTC``,
``2026-12-01T17:00:00+01:00``; a time without a zone is UTC. They are stored as UTC.
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

#: where a submission's time came from, as reports and notes name it
FROM_CSV, FROM_FILE, FROM_ZIP = "--timestamps", "timestamp.txt", "zip entry"


@dataclass(frozen=True)
class Lateness:
    """One submission against its deadline. ``due`` includes the extension; ``penalty`` is in points."""

    submitted: datetime | None  # UTC
    source: str  # FROM_CSV, FROM_FILE, FROM_ZIP, or "" when the submission has no time
    due: datetime | None  # UTC, the extension included
    extension: timedelta | None
    seconds_late: float
    penalty: float

    def describe(self) -> str:
        """One line for the reason column, the feedback and the report; empty when there is nothing to say."""
        if not self.seconds_late:
            return ""
        extension = f", with an extension of {_span(self.extension.total_seconds())}" if self.extension else ""
        return (f"submitted {self.submitted:%Y-%m-%d %H:%M:%S} UTC ({self.source}), {_span(self.seconds_late)} "
                f"after the due date {self.due:%Y-%m-%d %H:%M:%S} UTC{extension}: late penalty {self.penalty:g} "
                "point(s)")


def _span(seconds: float) -> str:
    """``2 d 3 h 4 min`` (whole minutes; seconds when under a minute)."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return " ".join(f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n) or "0 min"


def parse_time(text: str, what: str) -> datetime:
    """``text`` as nbgrader reads a timestamp, in UTC without a zone; ValueError naming ``what`` otherwise."""
    from nbgrader.utils import parse_utc

    try:
        return parse_utc(text.strip())
    except (ValueError, OverflowError, TypeError) as err:
        raise ValueError(f"{what}: cannot read {text.strip()!r} as a time ({err}); write it as nbgrader does, "
                         "e.g. '2026-12-01 17:00:00 UTC' or '2026-12-01T17:00:00+01:00'") from None


def zip_time(date_time: tuple[int, ...], zone: str) -> datetime:
    """A zip entry's time (a wall-clock time with no zone) read in ``zone``, as UTC."""
    from datetime import timezone
    from zoneinfo import ZoneInfo

    local = datetime(*date_time[:6], tzinfo=ZoneInfo(zone))
    return local.astimezone(timezone.utc).replace(tzinfo=None)


def check_zone(zone: str) -> str:
    """``zone`` if it names a time zone (``UTC``, ``Europe/Berlin``), else ValueError."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"--zip-timezone: {zone!r} is not a time zone (e.g. UTC, Europe/Berlin)") from None
    return zone


def _csv_rows(path: Path, option: str, columns: tuple[str, str]):
    """(line number, row) of the CSV ``path`` given to ``option``, each value stripped, once its header has the
    ``columns`` (``student_id`` first) and each row a student id; ValueError naming the option, file and line."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark is not part of a header
    except OSError as err:
        raise ValueError(f"{option}: cannot read {path}: {err.strerror or err}") from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    if not all(column in header for column in columns):
        raise ValueError(f"{option}: {path} needs the columns {' and '.join(columns)} (its header: "
                         f"{', '.join(header) or 'empty'})")
    for line, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        if not row[columns[0]]:
            raise ValueError(f"{option}: {path}, line {line}: no {columns[0]}")
        yield line, row


def read_timestamps(path: Path) -> dict[str, datetime]:
    """student_id -> time from a CSV with ``student_id`` and ``timestamp`` columns; refuses what it cannot read."""
    times: dict[str, datetime] = {}
    for line, row in _csv_rows(path, "--timestamps", ("student_id", "timestamp")):
        student = row["student_id"]
        if student in times:
            raise ValueError(f"--timestamps: {path} names student {student!r} twice (line {line})")
        times[student] = parse_time(row["timestamp"], f"--timestamps: {path}, line {line}")
    return times


def read_extensions(given: list[str], path: Path | None) -> dict[str, timedelta]:
    """student_id -> extension, from ``--extension student=hours`` (repeatable) and ``--extensions CSV`` (columns
    ``student_id`` and ``hours``). The command line wins over the file for a student named in both."""
    extensions: dict[str, timedelta] = {}
    for line, row in _csv_rows(path, "--extensions", ("student_id", "hours")) if path is not None else ():
        extensions[row["student_id"]] = _hours(row["hours"], f"--extensions: {path}, line {line}")
    for item in given:
        student, sep, hours = item.partition("=")
        if not sep or not student.strip():
            raise ValueError(f"--extension {item!r}: write it as STUDENT=HOURS, e.g. --extension alice=48")
        extensions[student.strip()] = _hours(hours, f"--extension {item!r}")
    return extensions


def _hours(text: str, what: str) -> timedelta:
    try:
        hours = float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number of hours") from None
    if not hours > 0 or hours == float("inf"):
        raise ValueError(f"{what}: an extension is a positive number of hours, not {text!r}")
    return timedelta(hours=hours)


def load_plugin(course_root: Path):
    """nbgrader's AssignLatePenalties configured as ``nbgrader autograde`` run in ``course_root`` configures it:
    the ``nbgrader_config.py`` files of Jupyter's config path (``JUPYTER_CONFIG_DIR``, ``~/.jupyter``, ...), the
    course's own last, and the course folder importable (where nbgrader's documentation puts an instructor's own
    plugin). ValueError, naming the class, when the configured plugin cannot be loaded."""
    from jupyter_core.paths import jupyter_config_path
    from nbgrader.preprocessors import AssignLatePenalties
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    root = str(course_root)
    if root not in sys.path:
        sys.path.insert(0, root)  # nbgrader puts its working folder, the course root, on the path likewise
    config = Config()
    for folder in [*reversed(jupyter_config_path()), root]:  # the later, the stronger, as nbgrader loads them
        if (Path(folder) / "nbgrader_config.py").is_file():
            config.merge(PyFileConfigLoader("nbgrader_config.py", path=folder).load_config())
    try:
        penalties = AssignLatePenalties(config=config)
        penalties.init_plugin()
    except Exception as err:  # an instructor's module: any error it raises says what is wrong with it
        raise ValueError(f"the late-submission plugin of nbgrader_config.py "
                         f"({config.get('AssignLatePenalties', {}).get('plugin_class', 'LateSubmissionPlugin')}) "
                         f"cannot be loaded: {type(err).__name__}: {err}") from None
    return penalties


def penalty_of(penalties, student: str, score: float, seconds_late: float) -> float:
    """The points ``penalties`` (from :func:`load_plugin`) takes from a notebook scoring ``score``, as nbgrader's
    AssignLatePenalties gives them: none on time; the plugin's answer, bounded to [0, score], when late."""
    if seconds_late <= 0:
        return 0.0
    penalty = penalties.plugin_inst.late_submission_penalty(student, score, seconds_late)
    if penalty is None:
        return 0.0
    return float(min(max(penalty, 0), score))  # AssignLatePenalties._check_late_penalty's bounds


def assess(results: list, times: dict[str, tuple[datetime, str]], due: datetime | None,
           extensions: dict[str, timedelta], db_url: str | None, course_root: Path) -> dict[str, Lateness]:
    """Each result's lateness: its time (``times``: student -> (time, source)), the due date (``due``, else the
    gradebook's), its extension (``extensions``, else the gradebook's), and the late penalty of the course's
    plugin on its score. Reads the gradebook at ``db_url`` if it exists; writes nothing."""
    stored_due, stored_ext, stored_time = _stored(db_url, results[0].assignment if results else "")
    due = due if due is not None else stored_due
    penalties = load_plugin(course_root) if due is not None else None
    found: dict[str, Lateness] = {}
    for result in results:
        student = result.student_id
        submitted, source = times.get(student, (stored_time.get(student), "gradebook"))
        if submitted is None:
            source = ""
        extension = extensions.get(student, stored_ext.get(student))
        deadline = due + extension if due is not None and extension is not None else due
        late = max(0.0, (submitted - deadline).total_seconds()) if submitted and deadline else 0.0
        gross = sum(c.points for c in result.cells.values())
        penalty = penalty_of(penalties, student, gross, late) if penalties is not None else 0.0
        found[student] = Lateness(submitted, source, deadline, extension, late, penalty)
    return found


def _stored(db_url: str | None, assignment: str):
    """The gradebook's due date of ``assignment``, and each student's extension and submission time."""
    if not db_url or not assignment:
        return None, {}, {}
    if db_url.startswith("sqlite:///") and not Path(db_url[len("sqlite:///"):]).is_file():
        return None, {}, {}
    import warnings

    from nbgrader.api import Gradebook, MissingEntry

    with warnings.catch_warnings(), Gradebook(db_url) as gradebook:
        warnings.simplefilter("ignore")
        try:
            found = gradebook.find_assignment(assignment)
        except MissingEntry:
            return None, {}, {}
        extensions = {s.student.id: s.extension for s in found.submissions if s.extension is not None}
        times = {s.student.id: s.timestamp for s in found.submissions if s.timestamp is not None}
        return found.duedate, extensions, times


def record(lateness: dict[str, Lateness], assignment: str, notebook: str, due_given: datetime | None,
           extensions_given: dict[str, timedelta], db_url: str) -> None:
    """Write what :func:`assess` found into the gradebook as nbgrader autograde and its AssignLatePenalties do:
    the due date given (``--due``), each submission's time and the extensions given, and each notebook's penalty
    (None when on time, as nbgrader resets it)."""
    import warnings

    from nbgrader.api import Gradebook

    with warnings.catch_warnings(), Gradebook(db_url) as gradebook:
        warnings.simplefilter("ignore")
        if due_given is not None:
            gradebook.update_or_create_assignment(assignment, duedate=due_given)
        for student, late in lateness.items():
            fields = {}
            if late.submitted is not None and late.source != "gradebook":
                fields["timestamp"] = late.submitted
            if student in extensions_given:
                fields["extension"] = extensions_given[student]
            if fields:
                gradebook.update_or_create_submission(assignment, student, **fields)
            submitted = gradebook.find_submission_notebook(notebook, assignment, student)
            submitted.late_submission_penalty = late.penalty if late.seconds_late > 0 else None
        gradebook.db.commit()

