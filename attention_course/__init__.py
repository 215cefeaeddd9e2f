"""Helpers that ship to learners with the exercise notebooks.

- :mod:`attention_course.testing` — the checks the *visible* tests use; each
  failure message says what went wrong and what to look at.
- :mod:`attention_course.checking` — the checks of the book's narrative cells: one
  printed line for the reader, an error that stops the build when a claim is false.
- :mod:`attention_course.plots` — heatmaps of attention weights and masks, one map or a
  grid of heads on one fixed colour scale.
- :mod:`attention_course.data` — the small example sentences and seeded toy
  embeddings the chapters use.
- :mod:`attention_course.tasks` — data made in code for Chapter 6: copy, reverse,
  and dates written in many human formats -> ISO dates, with a tokenizer.
- :mod:`attention_course.models` — a transformer built from PyTorch's own layers,
  so Chapter 6 runs without your solutions (swap in your own ``Transformer``),
  and beam search (of width 2 or more: greedy decoding is an exercise).
- :mod:`attention_course.training` — the trainer: teacher forcing, AdamW with
  warm-up, clipping, automatic device, bf16, checkpoints, named configurations.
- :mod:`attention_course.benchmark_attention` and
  :mod:`attention_course.benchmark_training` — Chapter 6's measurements (attention
  step by step against the fused kernel; training throughput and MFU), each also
  a command line: ``python -m attention_course.benchmark_attention --help``.
- :mod:`attention_course.text` — Chapter 7's corpus: Python's own help pages (a
  fixed, hash-checked snapshot of Python 3.11.7's ``pydoc_data``, shipped here) as
  character ids, split by interleaved chunks, with next-character batches.
- :mod:`attention_course.ngram` — counting baselines for Chapter 7's losses
  (unigram, bigram, trigram tables) and the repetition and diversity of texts.
- :mod:`attention_course.language_model` — a small GPT on PyTorch's own pieces
  (fused attention, learned or rotary positions, a preallocated key/value buffer,
  left-padded batches, beam search, mean-pooling key/value heads), so Chapter 7
  trains and generates without your solutions.
- :mod:`attention_course.induction` — Chapter 8's task (random spans that repeat at
  random places) and a small attention-only transformer whose heads' outputs pass
  through a hook point, its trainer, and the attention weights of Chapter 7's model.
- :mod:`attention_course.benchmark_generation` — Chapter 7's measurements: cached
  against uncached generation, prefill against decode, the peak memory of an
  attention function (yours too), the key/value cache's bytes as the allocator
  sees them, and published configurations.

Nothing here implements an exercise: that is the learner's job.
"""

__version__ = "0.1.0"
