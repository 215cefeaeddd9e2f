"""The likely mistakes of the exercises, each declared once: its name, its message, and the value it gives.

A chapter's module here declares every named mistake of its exercises as a
:class:`~attention_course.testing.KnownMistake`. The exercise notebook's visible
checks name a learner's mistake from these declarations, passing their own
computation of the right answer; the hidden judges name it from the same
declarations, passing the reference. So a mistake's name and message are
written in one place, and the learner meets the same words while working and
in the graded feedback.

A declaration never holds a working answer: a mistake that is the right answer
turned around, shifted or given other arguments asks for it as ``right``.
"""
