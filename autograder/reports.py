"""What grading leaves behind: grades.csv, feedback per student, a class report, and the nbgrader gradebook."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import re
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from autograder.grading import Result  # noqa: E402

COLUMNS = ["student_id", "assignment", "score", "max_score", "status", "reason"]


def grade_ids(results: list[Result]) -> list[str]:
    return list(results[0].cells) if results else []


def write_grades(results: list[Result], path: Path) -> None:
    """``grades.csv`` as the contract fixes it (CONTRIBUTING.md): the fixed columns, then one column per graded cell."""
    ids = grade_ids(results)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS + ids)
        for r in results:
            writer.writerow([r.student_id, r.assignment, f"{r.score:g}", f"{r.max_score:g}", r.status, r.reason]
                            + [f"{r.cells[g].points:g}" if g in r.cells else "0" for g in ids])


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100] or "_"


def write_feedback(result: Result, folder: Path) -> Path:
    """One HTML page per student: every test, its points, and for a failure what it means and what to try;
    beside it the same as JSON (``<assignment>.json``), for scripts and learning platforms. The named mistake
    is the cell's ``mistake`` field, the name the judge gave (never read back from the message's text)."""
    target = folder / _safe(result.student_id) / f"{result.assignment}.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.with_suffix(".json").write_text(json.dumps({
        "student_id": result.student_id, "assignment": result.assignment, "score": result.score,
        "max_score": result.max_score, "status": result.status, "reason": result.reason,
        "late_penalty": result.penalty,
        "cells": [{"grade_id": c.grade_id, "points": c.points, "max_points": c.max_points, "message": c.message,
                   "mistake": c.mistake} for c in result.cells.values()],
    }, indent=1), encoding="utf-8")
    rows = []
    for cell in result.cells.values():
        verdict = "passed" if cell.points == cell.max_points else "failed"
        mistake = cell.mistake
        rows.append(
            f"<tr class='{verdict}'><td><code>{html.escape(cell.grade_id)}</code></td>"
            f"<td>{cell.points:g} / {cell.max_points:g}</td><td>{verdict}</td>"
            f"<td>{html.escape(mistake or '')}</td><td>{html.escape(cell.message)}</td></tr>")
    status = "" if result.status == "ok" else f"<p><b>Status:</b> {html.escape(result.status)}</p>"
    reason = f"<p><b>Note:</b> {html.escape(result.reason)}</p>" if result.reason else ""
    target.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(result.assignment)} — "
        f"{html.escape(result.student_id)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(result.assignment)}: {result.score:g} / {result.max_score:g}</h1>"
        f"<p>Student: {html.escape(result.student_id)}</p>{status}{reason}"
        "<table><tr><th>test</th><th>points</th><th>result</th><th>named mistake</th><th>what the check found</th>"
        f"</tr>{''.join(rows)}</table></body></html>", encoding="utf-8")
    return target


_CSS = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse;width:100%}"
        "td,th{border:1px solid #ccc;padding:.3em .5em;vertical-align:top;text-align:left}"
        "tr.failed td{background:#fff3f3}tr.passed td{background:#f3fff3}")


def _png(fig: plt.Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def write_report(results: list[Result], path: Path, lateness: dict | None = None) -> None:
    """The class at a glance: score histogram, pass rate per check (a picture and a table), the commonest named
    mistakes (each counted once per student, from the cells' ``mistake`` fields), statuses, and the late
    submissions with their penalties (``lateness``: student -> autograder.deadlines.Lateness)."""
    ids = grade_ids(results)
    scores = [r.score for r in results]
    maximum = max((r.max_score for r in results), default=0)
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(scores, bins=min(20, max(5, int(maximum) + 1)), range=(0, max(maximum, 1)), color="#4c72b0")
    ax.set_xlabel(f"score (out of {maximum:g})")
    ax.set_ylabel("students")
    histogram = _png(fig)
    passed = [sum(r.cells[g].points == r.cells[g].max_points for r in results if g in r.cells) for g in ids]
    rates = [n / max(len(results), 1) for n in passed]
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(ids) + 1))
    ax.barh(ids[::-1], rates[::-1], color="#55a868")
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of students passing")
    pass_rates = _png(fig)
    # each student counts once per mistake, however many of their tests name it
    mistakes = Counter(m for r in results for m in {c.mistake for c in r.cells.values()} if m)
    statuses = Counter(r.status for r in results)
    rate_rows = "".join(f"<tr data-check='{html.escape(g)}' data-passed='{n}' data-rate='{rate:.6f}'>"
                        f"<td><code>{html.escape(g)}</code></td><td>{n} / {len(results)}</td><td>{rate:.0%}</td></tr>"
                        for g, n, rate in zip(ids, passed, rates, strict=True))
    commonest = sorted(mistakes.items(), key=lambda item: (-item[1], item[0]))[:15]  # ties in a fixed order
    mistake_rows = "".join(f"<tr><td>{html.escape(m)}</td><td>{n}</td></tr>" for m, n in commonest)
    status_rows = "".join(f"<tr><td>{html.escape(s)}</td><td>{n}</td></tr>" for s, n in statuses.most_common())
    unusual = "".join(
        f"<tr><td>{html.escape(r.student_id)}</td><td>{html.escape(r.status)}</td><td>{html.escape(r.reason)}</td></tr>"
        for r in results if r.status != "ok")
    late = sorted(((r.student_id, lateness[r.student_id]) for r in results
                   if lateness and r.student_id in lateness and lateness[r.student_id].seconds_late),
                  key=lambda item: -item[1].seconds_late)
    late_rows = "".join(
        f"<tr><td>{html.escape(student)}</td><td>{when.submitted:%Y-%m-%d %H:%M} UTC</td>"
        f"<td>{when.due:%Y-%m-%d %H:%M} UTC</td><td>{html.escape(_late_by(when.seconds_late))}</td>"
        f"<td>{when.penalty:g}</td></tr>" for student, when in late)
    untimed = sum(1 for r in results if lateness and r.student_id in lateness and lateness[r.student_id].submitted
                  is None)
    deadline = next((w.due for w in (lateness or {}).values() if w.due is not None and w.extension is None), None)
    due_line = (f"<p>Due {deadline:%Y-%m-%d %H:%M} UTC; {len(late)} late; {untimed} without a submission time "
                "(never counted late).</p>" if lateness and any(w.due for w in lateness.values()) else
                "<p>No due date was given (<code>--due</code>) or found in the gradebook.</p>")
    assignment = results[0].assignment if results else ""
    mean = sum(scores) / len(scores) if scores else 0.0
    path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>Class report: {html.escape(assignment)}</title>"
        f"<style>{_CSS}</style></head><body><h1>Class report: {html.escape(assignment)}</h1>"
        f"<p>{len(results)} submissions, mean score {mean:.1f} / {maximum:g}.</p>"
        f"<h2>Scores</h2><img alt='score histogram' src='{histogram}'>"
        f"<h2>Pass rate per check</h2><img alt='pass rate per check' src='{pass_rates}'>"
        f"<table id='pass-rates'><tr><th>check</th><th>students passing</th><th>pass rate</th></tr>{rate_rows}"
        "</table>"
        f"<h2>Most common named mistakes</h2><table id='mistakes'><tr><th>mistake</th><th>students</th></tr>"
        f"{mistake_rows}</table>"
        f"<h2>Late submissions</h2>{due_line}<table id='late'><tr><th>student</th><th>submitted</th>"
        f"<th>due (with extension)</th><th>late by</th><th>penalty</th></tr>{late_rows}</table>"
        f"<h2>Statuses</h2><table id='statuses'><tr><th>status</th><th>submissions</th></tr>{status_rows}</table>"
        "<h2>Submissions that need a look</h2><table id='unusual'><tr><th>student</th><th>status</th><th>reason</th>"
        "</tr>"
        f"{unusual}</table></body></html>", encoding="utf-8")


def _late_by(seconds: float) -> str:
    from autograder.deadlines import _span

    return _span(seconds)


def write_gradebook(results: list[Result], notebook_name: str, release: dict, db_url: str) -> None:
    """Record every result in the nbgrader gradebook, from this one process, so `nbgrader export` sees them."""
    import warnings

    from nbgrader.api import Gradebook

    from autograder.release import fast_gradebook_creation

    fast_gradebook_creation()
    notebook = Path(notebook_name).stem
    if not results:
        return
    assignment = results[0].assignment
    with warnings.catch_warnings(), Gradebook(db_url) as gradebook:
        warnings.simplefilter("ignore")  # nbgrader's own SQLAlchemy session warnings on add_submission
        gradebook.update_or_create_assignment(assignment)
        gradebook.update_or_create_notebook(notebook, assignment)
        for cell in release["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade"):
                gradebook.update_or_create_grade_cell(meta["grade_id"], notebook, assignment,
                                                      max_score=float(meta["points"]), cell_type="code")
        for result in results:
            gradebook.update_or_create_student(result.student_id)
            gradebook.update_or_create_submission(assignment, result.student_id)
            # the submission's grades in one query, not one per cell (3,300 queries for a class of 150 here)
            grades = {grade.name: grade for grade in
                      gradebook.find_submission_notebook(notebook, assignment, result.student_id).grades}
            for cell in result.cells.values():
                if cell.grade_id not in grades:
                    raise ValueError(f"{result.student_id}: the gradebook has no test cell {cell.grade_id!r} in "
                                     f"{notebook} of {assignment}")
                grade = grades[cell.grade_id]
                grade.auto_score = cell.points
                # as nbgrader's SaveAutoGrades: a manual score given earlier still wants a look, else none is needed
                # (left at its default, the formgrader listed every student as "needs manual grading")
                grade.needs_manual_grade = grade.manual_score is not None
        gradebook.db.commit()
