"""The trusted side of the hidden checks: one judge per check, compared with the reference (``solutions``).

Never carried into the grading sandbox; see :mod:`autograder.judges.core`.
"""
