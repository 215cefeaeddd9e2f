"""Hidden checks: every hidden test cell calls ``run_check(grade_id, student_object)``.

See :mod:`autograder.checks.core` for the probe/judge split.
"""

from autograder.checks.core import Mistake, ids, run_check

__all__ = ["Mistake", "ids", "run_check"]
