"""What grading leaves behind: grades.csv, feedback per student, a class report, and the nbgrader gradebook."""

from __future__ import annotations

import csv
import html
import json
import re
from collections import Counter
from pathlib import Path

from autograder.grading import Result

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


# The report's two charts, drawn as inline SVG: no plotting library to import in the grading process (Matplotlib
# and its PNGs took about 2 of its CPU-seconds a run), and text a reader can select and zoom.
_SVG_STYLE = "font:12px sans-serif"


def _svg(width: int, height: int, label: str, body: str) -> str:
    return (f"<svg xmlns='http://www.w3.org/2000/svg' role='img' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}' style='{_SVG_STYLE}'><title>{html.escape(label)}</title>{body}</svg>")


def _histogram(scores: list[float], maximum: float) -> tuple[list[int], float]:
    """Counts of ``scores`` in equal bins over [0, max(maximum, 1)] (the last bin holds its right edge), and the bin
    width: min(20, max(5, maximum + 1)) bins, so that a class of whole scores out of 10 gets a bin per score."""
    bins = min(20, max(5, int(maximum) + 1))
    width = max(maximum, 1) / bins
    counts = [0] * bins
    for score in scores:
        counts[min(bins - 1, max(0, int(score / width)))] += 1
    return counts, width


def histogram_svg(scores: list[float], maximum: float) -> str:
    """The score histogram: one bar per bin, the students in it above the bar."""
    counts, width = _histogram(scores, maximum)
    left, top, plot_w, plot_h = 40, 16, 16 * len(counts) + 4 * (len(counts) - 1), 140
    step, tallest = plot_w / len(counts), max(counts, default=0) or 1
    bars = []
    for k, n in enumerate(counts):
        h = plot_h * n / tallest
        x, y = left + k * step, top + plot_h - h
        count = f"<text x='{x + (step - 4) / 2:.1f}' y='{y - 3:.1f}' text-anchor='middle'>{n}</text>" if n else ""
        bars.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{step - 4:.1f}' height='{h:.1f}' fill='#4c72b0'>"
                    f"<title>{k * width:.3g}–{(k + 1) * width:.3g}: {n}</title></rect>{count}")
    axis = (f"<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' stroke='#333'/>"
            + "".join(f"<text x='{left + plot_w * f:.1f}' y='{top + plot_h + 14}' text-anchor='middle'>"
                      f"{max(maximum, 1) * f:g}</text>" for f in (0, 0.5, 1))
            + f"<text x='{left + plot_w / 2:.1f}' y='{top + plot_h + 30}' text-anchor='middle'>score (out of "
            f"{maximum:g})</text><text x='12' y='{top + plot_h / 2:.1f}' text-anchor='middle' "
            f"transform='rotate(-90 12 {top + plot_h / 2:.1f})'>students</text>")
    label = "score histogram: " + ", ".join(f"{k * width:.3g}–{(k + 1) * width:.3g}: {n}" for k, n in enumerate(counts))
    return _svg(left + plot_w + 10, top + plot_h + 40, label, "".join(bars) + axis)


def pass_rates_svg(ids: list[str], rates: list[float]) -> str:
    """The share of students passing each check: a bar per check, in the notebook's order."""
    left, bar_w, row = 8 + 7 * max((len(g) for g in ids), default=4), 300, 18
    rows = "".join(
        f"<text x='{left - 6}' y='{k * row + 13}' text-anchor='end'>{html.escape(g)}</text>"
        f"<rect x='{left}' y='{k * row + 3}' width='{bar_w * rate:.1f}' height='{row - 6}' fill='#55a868'/>"
        f"<text x='{left + bar_w * rate + 4:.1f}' y='{k * row + 13}'>{rate:.0%}</text>"
        for k, (g, rate) in enumerate(zip(ids, rates, strict=True)))
    frame = f"<line x1='{left}' y1='0' x2='{left}' y2='{len(ids) * row}' stroke='#333'/>"
    return _svg(left + bar_w + 50, len(ids) * row + 4, "pass rate per check (the table below has the numbers)",
                rows + frame)


def write_report(results: list[Result], path: Path, lateness: dict | None = None) -> None:
    """The class at a glance: score histogram, pass rate per check (a picture and a table), the commonest named
    mistakes (each counted once per student, from the cells' ``mistake`` fields), statuses, and the late
    submissions with their penalties (``lateness``: student -> autograder.deadlines.Lateness)."""
    ids = grade_ids(results)
    scores = [r.score for r in results]
    maximum = max((r.max_score for r in results), default=0)
    histogram = histogram_svg(scores, maximum)
    passed = [sum(r.cells[g].points == r.cells[g].max_points for r in results if g in r.cells) for g in ids]
    rates = [n / max(len(results), 1) for n in passed]
    pass_rates = pass_rates_svg(ids, rates)
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
        f"<h2>Scores</h2>{histogram}"
        f"<h2>Pass rate per check</h2>{pass_rates}"
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
