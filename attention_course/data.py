"""Example sentences and seeded toy tensors used across the chapters."""

from __future__ import annotations

import torch
from torch import Tensor

#: The nine tokens of the running example. A real GPT-2 tokenizer splits
#: differently; one token per piece keeps the pictures readable.
AERODYNAMICS: tuple[str, ...] = (
    "Aerodynamics", "are", "for", "people", "who", "can", "'t", "build", "engines",
)

#: GPT-2 (small): width of a token vector, number of heads, width of each head.
GPT2_D_MODEL, GPT2_N_HEADS, GPT2_D_HEAD = 768, 12, 64

#: The teacher-forcing example: source and target sentences.
SOURCE_ZH: tuple[str, ...] = ("我", "爱", "水", "课")
TARGET_EN: tuple[str, ...] = ("I", "love", "easy", "courses")


def generator(seed: int = 0) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``seed``."""
    return torch.Generator().manual_seed(seed)


def toy_embeddings(n_tokens: int, d_model: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(n_tokens, d_model)`` stand-in token embeddings, N(0, 1), reproducible from ``seed``."""
    if n_tokens < 1 or d_model < 1:
        raise ValueError(f"n_tokens and d_model must be positive, got n_tokens={n_tokens}, d_model={d_model}")
    return torch.randn(n_tokens, d_model, generator=generator(seed), dtype=dtype)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    """A seeded standard-normal tensor of ``shape``."""
    return torch.randn(*shape, generator=generator(seed), dtype=dtype)
