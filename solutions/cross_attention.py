"""Chapter 3 reference: cross-attention and teacher forcing.

The reading order is the dependency order: ``CrossAttention`` (the decoder
looks at the encoder) → ``shift_right`` → ``teacher_forcing_pair`` (the
decoder's inputs and targets) → ``sequence_cross_entropy`` (the loss over
every target position).

Shapes: ``B`` batch, ``T_q`` target (decoder) positions, ``T_k`` source
(encoder) positions, ``T`` target length without special tokens, ``V``
vocabulary size. Masks are boolean and ``True`` means "may attend", as in
``torch.nn.functional.scaled_dot_product_attention``. Token ids are integer
tensors; sentences are right-padded with ``pad_id``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from solutions.self_attention import scaled_dot_product_attention

__all__ = [
    "CrossAttention", "shift_right", "teacher_forcing_pair", "sequence_cross_entropy",
    "loss_positions", "cross_weights_shape",  # concept checks
]


class CrossAttention(nn.Module):
    r"""Single-head cross-attention: queries from the decoder, keys and values from the encoder.

    .. math:: Q = X W_q,\quad K = M W_k,\quad V = M W_v,\quad
              \mathrm{out} = \mathrm{softmax}(QK^\top / \sqrt{d_k} + \text{mask}) V

    where ``X (B, T_q, d_model)`` are the decoder states and ``M (B, T_k, d_model)``
    the encoder output (``memory``). Every target position asks the whole
    source sentence, so the weights are ``(B, T_q, T_k)`` and the output has
    one row per *target* position, whatever the source length.

    Args:
        d_model: width of the decoder states and of the encoder output.
        d_k: width of queries and keys.
        d_v: width of values and of the output; defaults to ``d_k``.
        bias: whether the three projections have a bias.

    Attributes:
        w_q: ``nn.Linear(d_model, d_k)``, applied to ``x``.
        w_k: ``nn.Linear(d_model, d_k)``, applied to ``memory``.
        w_v: ``nn.Linear(d_model, d_v)``, applied to ``memory``.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False) -> None:
        super().__init__()
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_k if d_v is None else d_v
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, self.d_v, bias=bias)

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``x (B, T_q, d_model)``, ``memory (B, T_k, d_model)`` → ``(out (B, T_q, d_v), weights (B, T_q, T_k))``.

        ``memory_mask`` is an optional boolean tensor broadcastable to
        ``(B, T_q, T_k)``, ``True`` where a target position may attend a source
        position — typically the source padding mask ``(B, 1, T_k)``.

        Raises:
            ValueError: if ``x`` or ``memory`` is not 3-D, does not end in
                ``d_model``, or the two differ in batch size; or for a mask that
                is not boolean or does not broadcast.
        """
        self._check(x, memory)
        q = self.w_q(x)  # (B, T_q, d_model) -> (B, T_q, d_k)
        k = self.w_k(memory)  # (B, T_k, d_model) -> (B, T_k, d_k)
        v = self.w_v(memory)  # (B, T_k, d_model) -> (B, T_k, d_v)
        return scaled_dot_product_attention(q, k, v, memory_mask)  # (B, T_q, d_v), (B, T_q, T_k)

    def _check(self, x: Tensor, memory: Tensor) -> None:
        for name, t in (("x", x), ("memory", memory)):
            if t.dim() != 3 or t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must be (B, T, d_model={self.d_model}); got {name} {tuple(t.shape)}")
        if x.shape[0] != memory.shape[0]:
            raise ValueError(
                f"x and memory must have the same batch size B: x {tuple(x.shape)} has B={x.shape[0]}, "
                f"memory {tuple(memory.shape)} has B={memory.shape[0]}"
            )


def _check_tokens(tgt: Tensor) -> None:
    if tgt.dim() != 2:
        raise ValueError(f"tgt must be a 2-D (B, T) tensor of token ids; got shape {tuple(tgt.shape)}")


def shift_right(tgt: Tensor, start_id: int) -> Tensor:
    """Prepend ``start_id`` to every row and drop the last token: the decoder's view of ``tgt``.

    ``[[t0, t1, ..., t_{T-1}]]`` → ``[[start, t0, ..., t_{T-2}]]``, so position
    ``i`` of the result holds the token *before* position ``i`` of ``tgt``.

    Args:
        tgt: ``(B, T)`` token ids.
        start_id: the id of ``<start>``.

    Returns:
        ``(B, T)``, the dtype and device of ``tgt``.

    Raises:
        ValueError: if ``tgt`` is not 2-D.
    """
    _check_tokens(tgt)
    start = tgt.new_full((tgt.shape[0], 1), start_id)  # (B, 1)
    return torch.cat([start, tgt], dim=1)[:, :-1]  # (B, 1 + T) -> (B, T)


def teacher_forcing_pair(tgt: Tensor, start_id: int, end_id: int, pad_id: int) -> tuple[Tensor, Tensor]:
    """The decoder input and the targets of teacher forcing.

    For the sentence ``I love easy courses``::

        tgt_in  = <start> I    love easy    courses
        tgt_out = I       love easy courses <end>

    position ``i`` of ``tgt_in`` is what the decoder sees, position ``i`` of
    ``tgt_out`` what it must predict there. Rows are right-padded: ``<end>``
    goes right after each row's last real token (at column 0 for a row that
    is all padding), and every other position holds ``pad_id``.

    Args:
        tgt: ``(B, T)`` target sentences without special tokens, right-padded with ``pad_id``.
        start_id, end_id, pad_id: the ids of ``<start>``, ``<end>`` and the padding.

    Returns:
        ``(tgt_in, tgt_out)``, each ``(B, T + 1)`` with the dtype and device of ``tgt``.

    Raises:
        ValueError: if ``tgt`` is not 2-D.
    """
    _check_tokens(tgt)
    padded = torch.cat([tgt, tgt.new_full((tgt.shape[0], 1), pad_id)], dim=1)  # (B, T) -> (B, T + 1)
    tgt_in = shift_right(padded, start_id)  # (B, T + 1): <start> + tokens + pads
    lengths = (tgt != pad_id).sum(dim=1, keepdim=True)  # (B, 1): real tokens per row
    tgt_out = padded.scatter(1, lengths, end_id)  # (B, T + 1): <end> right after the last real token
    return tgt_in, tgt_out


def sequence_cross_entropy(logits: Tensor, targets: Tensor, pad_id: int) -> Tensor:
    r"""Mean cross-entropy over every non-pad target position.

    .. math:: \mathcal{L} = -\frac{1}{N} \sum_{b,t:\ y_{bt} \ne \text{pad}} \log \mathrm{softmax}(z_{bt})_{y_{bt}}

    where ``N`` counts the non-pad targets. Every position is scored, not only
    the last one: with teacher forcing the decoder predicts the whole target
    sentence in one pass. Equals ``F.cross_entropy(logits.reshape(-1, V),
    targets.reshape(-1), ignore_index=pad_id)``; like it, the result is NaN
    when every target is padding (there is nothing to average).

    Args:
        logits: ``(B, T, V)`` unnormalised scores over the vocabulary.
        targets: ``(B, T)`` token ids (``tgt_out``).
        pad_id: the id whose positions are left out.

    Returns:
        A scalar (0-dim) tensor of the dtype of ``logits``.

    Raises:
        ValueError: if ``logits`` is not 3-D or ``targets`` is not ``logits.shape[:2]``.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, T, V) and targets (B, T); got logits {tuple(logits.shape)}, "
            f"targets {tuple(targets.shape)}"
        )
    keep = targets != pad_id  # (B, T): the positions that count
    log_probs = torch.log_softmax(logits[keep], dim=-1)  # (B, T, V) -> (N, V), N non-pad positions
    nll = -log_probs.gather(-1, targets[keep].unsqueeze(-1))  # (N, 1): minus log-probability of each target
    return nll.mean()


# ---------------------------------------------------------------- concept checks


def loss_positions(lengths: list[int]) -> int:
    """The predictions the loss scores in one teacher-forced training step of a batch whose sentences have
    ``lengths`` real tokens: every token and each sentence's ``<end>``, never the padding."""
    return sum(length + 1 for length in lengths)


def cross_weights_shape(t_tgt: int, t_src: int) -> tuple[int, int]:
    """The shape of the cross-attention weights of one sentence pair: a row per target token (the queries come
    from the decoder), a column per source token (the keys come from the encoder)."""
    return t_tgt, t_src
