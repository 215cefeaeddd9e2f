"""A contributor's view of one chapter's catalogue, in seconds: what the checks say of every entry.

    python tests/catalogue_status.py 01_self_attention [--all]

For each wrong answer: the name it must be given and the cell that owns it, then what the hidden checks say
(judged in place, in this process, as nbgrader's kernel would) and what the visible checks alone say (the
release's test cells). ``ok`` when the owner cell names the mistake, the visible checks name it (or the entry
says why they cannot), and no cell names another mistake. For correct answers, any cell that fails. The class
grader (``tests/test_catalogue.py``) is the real proof; in a notebook an exercise also runs on the learner's
own earlier answers, which this in-process view replaces by the reference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from class_grading import catalogue_module  # noqa: E402
from notebook_grading import exercise_names, exercise_of, grade_in_process  # noqa: E402

from attention_course.testing import mistake_name  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignment")
    parser.add_argument("--all", action="store_true", help="print the entries that are fine too")
    args = parser.parse_args()
    module = catalogue_module(args.assignment)
    exercises = exercise_names(args.assignment)
    problems = named_visibly = 0
    for entry in module.WRONG:
        hidden = {g: r.message for g, r in grade_in_process(args.assignment, {entry.target: entry.impl}).items()
                  if not r.passed}
        visible = {g: r.message for g, r in
                   grade_in_process(args.assignment, {entry.target: entry.impl}, visible_only=True,
                                    exercise=entry.target).items()
                   if not r.passed}
        allowed = {entry.name, *entry.also, None}
        issues = []
        if mistake_name(hidden.get(entry.cell, "")) != entry.name:
            issues.append(f"hidden {entry.cell or '(no cell)'}: {hidden.get(entry.cell, 'passed')}")
        issues += [f"hidden {g} names another mistake: {m}" for g, m in hidden.items()
                   if mistake_name(m) not in allowed]
        issues += [f"visible {g} names another mistake: {m}" for g, m in visible.items()
                   if mistake_name(m) not in allowed]
        own = [m for g, m in visible.items() if exercise_of(g, exercises) == entry.target]
        seen = any(mistake_name(m) == entry.name for m in own)
        named_visibly += seen
        if not visible and not entry.hidden_only:
            issues.append("passes every visible check, and declares no hidden_only note")
        elif not seen:
            issues.append("visible checks do not name it: " + (" | ".join(own) or "no visible cell of it fails"))
        problems += bool(issues)
        if issues or args.all:
            print(f"{'FIX' if issues else 'ok '} {entry.target}: {entry.label!r} -> ({entry.name}) in {entry.cell}")
            for line in issues:
                print(f"      {line}")
    for entry in module.CORRECT:
        for visible_only in (False, True):
            failed = {g: r.message for g, r in grade_in_process(
                args.assignment, {entry.target: entry.impl}, visible_only=visible_only).items() if not r.passed}
            if failed:
                problems += 1
                print(f"FIX correct {entry.target}: {entry.label!r} fails {'visible' if visible_only else 'hidden'}"
                      f" {failed}")
    total = len(module.WRONG)
    print(f"{args.assignment}: {problems} entries to fix; visible checks name {named_visibly}/{total} "
          f"({named_visibly / max(total, 1):.0%}) of the wrong answers")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
