"""Reference solutions of every exercise, one module per chapter.

Instructors and the grader import these; the student release never ships them.
"""
