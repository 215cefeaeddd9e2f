"""The course's reference implementations as benchmark variants, in the course repository only.

``attention.py --impls reference`` times Chapter 1's reference attention (its own softmax) and ``training.py
--model reference`` trains the reference ``Transformer``. Both come from ``solutions/``, so nothing of
``benchmarks/`` goes to the student repository (``make release``, ``autograder/bundle.py``): the measuring code
that Chapter 6 runs is in the helper package, ``attention_course.benchmark_attention`` and
``attention_course.benchmark_training``, whose command lines have every option but these two.
"""

from __future__ import annotations

from dataclasses import asdict

import torch
from torch import Tensor, nn


def reference_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """The course's chapter 1 reference (its own softmax), for comparison."""
    from solutions.self_attention import scaled_dot_product_attention

    mask = None
    if causal:
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()  # True = may attend
    return scaled_dot_product_attention(q, k, v, mask)[0]


def reference_transformer(sizes, fused: bool) -> nn.Module:
    """The course's reference ``Transformer`` of the sizes ``sizes`` (a ``ModelConfig``), fused attention or not."""
    from solutions.transformer import Transformer, TransformerConfig

    return Transformer(TransformerConfig(**asdict(sizes), fused_attention=fused))
