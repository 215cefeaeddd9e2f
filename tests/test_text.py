"""Chapter 7's text and its counting baselines: the help pages are one fixed, hash-checked snapshot whatever Python
runs; the held-out chunks are spread through the text; an n-gram table scores what counting it by hand scores."""

from __future__ import annotations

import gzip
import math
from collections import Counter

import pytest
import torch

from attention_course import text
from attention_course.language_model import fixed_windows
from attention_course.ngram import ngram_loss
from attention_course.text import CharCorpus


def test_the_help_pages_are_the_snapshot_the_course_was_written_for() -> None:
    corpus = CharCorpus.python_help()
    assert repr(corpus) == "CharCorpus(464,970 characters, 103 distinct)"
    assert corpus.decode(corpus.ids[:26]) == text.python_help_text()[:26]
    assert (len(corpus.train), len(corpus.held_out)) == (418_970, 46_000)


def test_a_changed_snapshot_is_refused_naming_the_file(tmp_path, monkeypatch) -> None:
    damaged = tmp_path / "python_help.txt.gz"
    damaged.write_bytes(gzip.compress(text.python_help_text().replace("for", "fro", 1).encode()))
    monkeypatch.setattr(text, "SNAPSHOT", damaged)
    with pytest.raises(ValueError, match="python_help.txt.gz has SHA-256 .* was changed or damaged"):
        text.python_help_text()


def test_the_package_declares_its_data_so_that_an_installed_copy_has_it() -> None:
    """pip installs only the data files pyproject.toml names (the Colab cell installs the course from its archive)."""
    import tomllib

    from autograder.release import REPO_ROOT

    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert text.SNAPSHOT.name in data["attention_course"]


def test_every_tenth_chunk_is_held_out_and_nothing_is_lost() -> None:
    corpus = CharCorpus("".join(chr(97 + i % 26) for i in range(1000)), held_out_share=0.1, chunk=10)
    chunks = corpus.ids.split(10)
    assert torch.equal(corpus.held_out, torch.cat(chunks[9::10]))
    assert torch.equal(corpus.train, torch.cat([c for i, c in enumerate(chunks) if i % 10 != 9]))
    quarter = CharCorpus("abcdefgh" * 100, held_out_share=0.25, chunk=8)
    assert len(quarter.held_out) == 200 and len(quarter.train) == 600


def test_the_held_out_text_is_no_easier_than_the_training_text_by_its_characters() -> None:
    """The old split held out the last topics by name, whose characters were easier to guess (3.13 against 3.25
    nats); interleaved chunks mix the same topics."""
    corpus = CharCorpus.python_help()

    def entropy(ids: torch.Tensor) -> float:
        p = torch.bincount(ids, minlength=len(corpus)).double() / len(ids)
        return -(p[p > 0] * p[p > 0].log()).sum().item()

    assert abs(entropy(corpus.held_out) - entropy(corpus.train)) < 0.03


def test_bad_splits_are_refused() -> None:
    with pytest.raises(ValueError, match="too few to hold out"):
        CharCorpus("the cat sat on the mat. " * 100, held_out_share=0.1)  # 2,400 characters: 2 chunks of 2,000
    with pytest.raises(ValueError, match="chunk must be at least 1"):
        CharCorpus("abc", chunk=0)
    with pytest.raises(ValueError, match="held_out_share"):
        CharCorpus("abc", held_out_share=1.0)


def counted_by_hand(train: list[int], windows, order: int, vocab: int, alpha: float) -> float:
    """The add-alpha n-gram loss with dictionaries, one target at a time."""
    grams = Counter(tuple(train[i:i + k]) for k in range(1, order + 1) for i in range(len(train) - k + 1))
    total, count = 0.0, 0
    for inputs, targets in windows:
        for row in range(len(inputs)):
            seq = [inputs[row, 0].item(), *targets[row].tolist()]
            for j in range(1, len(seq)):
                context = tuple(seq[max(0, j - order + 1):j])
                joint = grams[(*context, seq[j])]
                seen = sum(grams[(*context, c)] for c in range(vocab)) if context else len(train)
                total -= math.log((joint + alpha) / (seen + alpha * vocab))
                count += 1
    return total / count


@pytest.mark.parametrize("order", [1, 2, 3])
def test_the_ngram_loss_is_what_counting_by_hand_gives(order) -> None:
    g = torch.Generator().manual_seed(order)
    train = torch.randint(0, 5, (400,), generator=g)
    corpus = CharCorpus("abcde", held_out_share=0.0)  # for its batch()
    windows = fixed_windows(corpus, torch.randint(0, 5, (200,), generator=g), batch_size=3, length=7, batches=2)
    expected = counted_by_hand(train.tolist(), windows, order, 5, 0.3)
    assert ngram_loss(train, windows, order, 5, alpha=0.3) == pytest.approx(expected, rel=1e-9)


def test_longer_contexts_predict_a_patterned_text_better() -> None:
    pattern = torch.tensor([0, 1, 2, 0, 2, 1] * 200)  # after 0 comes 1 or 2, but two characters back decide which
    windows = [(pattern[None, 100:160], pattern[None, 101:161])]
    uniform, unigram, bigram, trigram = math.log(3), *(ngram_loss(pattern, windows, n, 3, 0.01) for n in (1, 2, 3))
    assert unigram == pytest.approx(uniform, abs=1e-3) and bigram < unigram and trigram < 0.05 < bigram
    with pytest.raises(ValueError, match="cells, more than"):
        ngram_loss(pattern, windows, 4, 103)
    with pytest.raises(ValueError, match="order must be >= 1"):
        ngram_loss(pattern, windows, 0, 3)


def test_repetition_and_diversity_of_texts() -> None:
    from attention_course.ngram import distinct_ngrams, repeated_ngrams

    assert repeated_ngrams("abcdefgh", 3) == 0.0
    assert repeated_ngrams("abcabcabc", 3) == 4 / 7  # abc bca cab, then four repeats
    assert distinct_ngrams(["abcd", "abcd"], 2) == 0.5 and distinct_ngrams(["abcd", "wxyz"], 2) == 1.0
    with pytest.raises(ValueError, match="at least n characters"):
        repeated_ngrams("ab", 3)
    with pytest.raises(ValueError, match="at least n characters"):
        distinct_ngrams(["ab"], 0)
