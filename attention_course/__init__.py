"""Helpers that ship to learners with the exercise notebooks.

- :mod:`attention_course.testing` — the checks the *visible* tests use; each
  failure message says what went wrong and what to look at.
- :mod:`attention_course.plots` — heatmaps of attention weights and masks.
- :mod:`attention_course.data` — the small example sentences and seeded toy
  embeddings the chapters use.

Nothing here implements an exercise: that is the learner's job.
"""

__version__ = "0.1.0"
