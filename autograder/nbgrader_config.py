"""nbgrader configuration of the course. ``autograder/`` is the nbgrader course root.

Run nbgrader from this directory with the venv's ``bin`` on ``PATH`` (nbgrader
shells out to ``alembic``); ``make notebooks`` and the tests do that for you.
"""

import os

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

# A new gradebook without a 3 s `alembic heads` subprocess (see autograder/release.py); an environment
# without the course's packages simply keeps nbgrader's own way.
try:
    from autograder.release import fast_gradebook_creation
except ImportError:
    pass
else:
    fast_gradebook_creation()

c.CourseDirectory.course_id = "attention-from-scratch"

# The exchange that release_assignment, fetch_assignment, submit and collect pass notebooks through: a folder of
# the course, so that they work without root on one machine (nbgrader's default, /usr/local/share/nbgrader/exchange,
# needs root to create). On a shared server, point NBGRADER_EXCHANGE at a folder every learner can write to.
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                       "exchange")
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"

# What a learner sees in place of each solution region.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A learner who deletes a test cell must not lose it silently: put it back when grading.
c.OverwriteCells.add_missing_cells = True

# Generous per-cell limit: the hidden checks of a cell take well under a second.
c.ExecutePreprocessor.timeout = 120
