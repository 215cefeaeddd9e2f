"""The leak scanner (autograder/leaks.py), on its own: it finds what a search of every secret in every text finds,
and it reads the secrets again when a file they come from changes."""

from __future__ import annotations

import os
import random

import pytest

from autograder import leaks


def test_the_scan_finds_exactly_what_searching_every_secret_finds(tmp_path) -> None:
    """Three hundred of the course's secrets, each glued to word characters, brackets or nothing on either side,
    among the same secrets with a character cut out of the middle: the scan (which searches a text only for the
    secrets whose inner words it has) reports exactly the secrets a plain search of each one finds."""
    secrets = sorted(leaks.all_secrets())
    assert len(secrets) > 1000, len(secrets)
    chosen = random.Random(0).sample(secrets, 300)
    glue = ["", "x", "_", "9", "(", " ", "é"]
    pick = random.Random(1).choice
    text = "\n".join([pick(glue) + s + pick(glue) for s in chosen[:150]]
                     + [s[:len(s) // 2] + s[len(s) // 2 + 1:] for s in chosen[150:]])
    (tmp_path / "page.txt").write_text(text, encoding="utf-8")
    found = leaks.scan([tmp_path], set(secrets))
    expected = [f"{tmp_path / 'page.txt'}: {s}" for s in [*leaks.MARKERS, *secrets] if s in leaks._normal(text)]
    assert sorted(found) == sorted(expected) and len(found) >= 150, (len(found), len(expected))


@pytest.mark.parametrize(("secret", "words"), [
    ("out = weights @ values.transpose(-2, -1)", {"weights", "values", "transpose", "2", "1"}),
    ("(scores - scores.max(dim=-1))", {"scores", "max", "dim", "1"}),
    ("return torch.cat(parts, dim=-1)", {"torch", "cat", "parts", "dim", "1"}),
])
def test_inner_words_are_the_words_between_two_of_the_secret_s_own_characters(secret, words) -> None:
    assert leaks._inner_words(secret) == words


def test_the_secrets_are_read_again_when_a_source_changes(tmp_path, monkeypatch) -> None:
    """all_secrets keeps what it read while no file it reads changes, and reads a changed one again."""
    course, repo = tmp_path / "autograder", tmp_path
    for folder in (course / "source" / "01_x", course / "checks", course / "judges", repo / "solutions"):
        folder.mkdir(parents=True)
    module = repo / "solutions" / "x.py"
    module.write_text("def f(x):\n    return x.softmax(dim=-1) * first_scale_factor\n")
    monkeypatch.setattr(leaks, "COURSE_ROOT", course)
    monkeypatch.setattr(leaks, "REPO_ROOT", repo)
    assert leaks.all_secrets() == {"return x.softmax(dim=-1) * first_scale_factor"}
    module.write_text("def f(x):\n    return x.softmax(dim=-1) * other_scale_factor\n")
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a new time, even on a coarse clock
    assert leaks.all_secrets() == {"return x.softmax(dim=-1) * other_scale_factor"}
